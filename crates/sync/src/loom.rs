//! What the wait-queue protocols are built on, swapped for loom's under `--cfg loom` (tokio's
//! module swap, as in `spindle-sched`): atomics, the internal locks, the cells that hold user
//! data, and the parker.
//!
//! The parker is `spindle_park` normally. Under loom it is a token parker per loom thread (a
//! `Mutex<bool>` and a `Condvar`, which is how `std::thread::park` behaves; loom's own
//! `thread::park` loses an unpark that arrives while the thread is blocked on a mutex, see
//! `spindle-sched`'s `tests/loom_idle.rs`), whose timed park returns at once when no wake-up
//! is pending (a deadline that has already passed: loom explores a timeout against every
//! interleaving of the other side), and which can be told to unwind at the next park, as a
//! cancelled coroutine's park does.

#[cfg(loom)]
pub(crate) use self::loom_lock::{Mutex as StdMutex, MutexGuard as StdMutexGuard};
#[cfg(loom)]
pub(crate) use ::loom::sync::atomic::{AtomicPtr, AtomicU8, AtomicUsize, Ordering};

/// The internal lock: a spin lock whose unlock is a store (`spindle_park::spin`). The name
/// stays: it is what the loom build swaps.
#[cfg(not(loom))]
pub(crate) use spindle_park::spin::{SpinGuard as StdMutexGuard, SpinLock as StdMutex};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicUsize, Ordering};

/// Locks an internal lock. No internal critical section calls user code or blocks, so none
/// can leave its data half-updated by a panic, and none makes a waiter wait long.
#[cfg(not(loom))]
#[inline]
pub(crate) fn lock<T>(mutex: &StdMutex<T>) -> StdMutexGuard<'_, T> {
    mutex.lock()
}

/// Locks an internal lock (loom build).
#[cfg(loom)]
pub(crate) fn lock<T>(mutex: &StdMutex<T>) -> StdMutexGuard<'_, T> {
    mutex.lock()
}

/// The internal lock of the loom build: an atomic flag, and `loom::thread::park` while it is
/// taken (the waiting threads' handles in a plain `std` vector: loom runs one thread at a time
/// and never switches inside that vector's short critical sections).
///
/// Not loom's `Mutex`: loom runs all its threads on one OS thread, so while one of them unwinds
/// (a cancelled park) `std::thread::panicking()` is true for all, and a guard of loom's `Mutex`
/// (a `std::sync::Mutex` inside) dropped by another thread then poisons it; loom's `lock`
/// unwraps the poison and panics. Not a spin lock either: loom explores spinning threads
/// yielding to each other until it gives up (its branch limit).
#[cfg(loom)]
pub(crate) mod loom_lock {
    use std::ops::{Deref, DerefMut};

    use ::loom::cell::{MutPtr, UnsafeCell};
    use ::loom::sync::atomic::{AtomicBool, Ordering};
    use ::loom::thread::{self, Thread};

    #[derive(Debug)]
    pub(crate) struct Mutex<T> {
        locked: AtomicBool,
        waiters: std::sync::Mutex<Vec<Thread>>,
        data: UnsafeCell<T>,
    }

    // SAFETY: the lock gives one thread at a time access to `T`.
    unsafe impl<T: Send> Sync for Mutex<T> {}
    // SAFETY: as above.
    unsafe impl<T: Send> Send for Mutex<T> {}

    pub(crate) struct MutexGuard<'a, T> {
        lock: &'a Mutex<T>,
        ptr: Option<MutPtr<T>>,
    }

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Mutex {
                locked: AtomicBool::new(false),
                waiters: std::sync::Mutex::new(Vec::new()),
                data: UnsafeCell::new(value),
            }
        }

        fn try_take(&self) -> bool {
            self.locked
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        }

        fn waiters(&self) -> std::sync::MutexGuard<'_, Vec<Thread>> {
            self.waiters.lock().unwrap_or_else(|e| e.into_inner())
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            while !self.try_take() {
                let me = thread::current();
                let id = me.id();
                self.waiters().push(me);
                let taken = self.try_take();
                if !taken {
                    thread::park();
                }
                self.waiters().retain(|t| t.id() != id);
                if taken {
                    break;
                }
            }
            MutexGuard {
                lock: self,
                ptr: Some(self.data.get_mut()),
            }
        }
    }

    impl<T> Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            // SAFETY: the lock is held.
            unsafe { self.ptr.as_ref().expect("held").deref() }
        }
    }

    impl<T> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            // SAFETY: the lock is held, and `&mut self` is exclusive.
            unsafe { self.ptr.as_ref().expect("held").deref() }
        }
    }

    impl<T> Drop for MutexGuard<'_, T> {
        fn drop(&mut self) {
            self.ptr = None; // end loom's record of the access before releasing
            self.lock.locked.store(false, Ordering::Release);
            let waiters: Vec<Thread> = self.lock.waiters().clone();
            for t in waiters {
                t.unpark();
            }
        }
    }
}

/// One round of waiting for another thread that is in the middle of a few instructions (a
/// hand-off it has claimed but not yet published): spins, then yields the thread. Under loom
/// it always yields, so that loom schedules the other thread.
pub(crate) fn spin_wait(round: &mut u32) {
    #[cfg(loom)]
    {
        let _ = round;
        ::loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    {
        if *round < 10 {
            for _ in 0..(1u32 << *round) {
                std::hint::spin_loop();
            }
            *round += 1;
        } else {
            std::thread::yield_now();
        }
    }
}

/// A cell holding user data (a mutex's value, a once-cell's value). Under loom every access
/// is recorded, so that loom reports two threads inside a critical section at once.
#[derive(Debug)]
pub(crate) struct DataCell<T: ?Sized>(
    #[cfg(loom)] ::loom::cell::UnsafeCell<T>,
    #[cfg(not(loom))] std::cell::UnsafeCell<T>,
);

impl<T> DataCell<T> {
    #[cfg(not(loom))]
    pub(crate) const fn new(value: T) -> Self {
        DataCell(std::cell::UnsafeCell::new(value))
    }

    #[cfg(loom)]
    pub(crate) fn new(value: T) -> Self {
        DataCell(::loom::cell::UnsafeCell::new(value))
    }

    pub(crate) fn into_inner(self) -> T {
        self.0.into_inner()
    }
}

impl<T: ?Sized> DataCell<T> {
    /// A pointer to the value. The caller's protocol decides who may use it, and how.
    #[cfg(not(loom))]
    #[inline]
    pub(crate) fn ptr(&self) -> *mut T {
        self.0.get()
    }

    /// A pointer to the value; loom records a write access now.
    #[cfg(loom)]
    #[inline]
    pub(crate) fn ptr(&self) -> *mut T {
        self.0.with_mut(|p| p)
    }

    /// A pointer for shared (read-only) access.
    #[cfg(not(loom))]
    #[inline]
    pub(crate) fn ptr_shared(&self) -> *const T {
        self.0.get()
    }

    /// A pointer for shared (read-only) access; loom records a read access now.
    #[cfg(loom)]
    #[inline]
    pub(crate) fn ptr_shared(&self) -> *const T {
        self.0.with(|p| p)
    }

    #[cfg(not(loom))]
    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.0.get_mut()
    }

    #[cfg(loom)]
    pub(crate) fn get_mut(&mut self) -> &mut T {
        // SAFETY: `&mut self` is exclusive.
        self.0.with_mut(|p| unsafe { &mut *p })
    }
}

/// The liveness of a shared allocation that its users free themselves (the last one to let go,
/// as a oneshot's two handles do), for loom to check the freeing against every use.
///
/// Loom sees data races on its cells, not a use of freed memory. So under loom this is a cell
/// that every use of the allocation reads ([`touch`](Alive::touch)) and the free writes
/// ([`retire`](Alive::retire)): a use that does not happen before the free — the protocol
/// freed too early — is a read racing that write, which loom reports. Otherwise it is empty
/// and both calls compile to nothing.
///
/// A touch begins with a load of an atomic that only the free writes: loom tries other orders
/// of two threads only where they access the same atomic, one of them writing, so without it
/// a use made between two operations on the state word (the sender's hold of the lock) would
/// never be scheduled after a free that the protocol let happen too early.
#[derive(Debug, Default)]
pub(crate) struct Alive {
    #[cfg(loom)]
    cell: ::loom::cell::UnsafeCell<()>,
    #[cfg(loom)]
    gate: AtomicUsize,
}

// SAFETY: the cell holds no data (`()`): it is only a record of accesses, each made through
// loom's checked `with`/`with_mut`, whose point is to be reached from several threads and
// report the ones that race. (Outside loom `Alive` is empty, and `Sync` by itself.)
#[cfg(loom)]
unsafe impl Sync for Alive {}

impl Alive {
    /// A use of the allocation, now.
    #[inline(always)]
    pub(crate) fn touch(&self) {
        #[cfg(loom)]
        {
            self.gate.load(Ordering::Relaxed);
            self.cell.with(|_| ());
        }
    }

    /// The allocation is freed, now: every use must have happened before.
    #[inline(always)]
    pub(crate) fn retire(&self) {
        #[cfg(loom)]
        {
            self.gate.store(1, Ordering::Relaxed);
            self.cell.with_mut(|_| ());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The parker.

#[cfg(not(loom))]
pub(crate) use spindle_park::{Wake, consume_budget, is_current_waker, park, park_until, waker};

/// Loom's parker keeps no wakers to compare: always take a new one.
#[cfg(loom)]
pub(crate) fn is_current_waker(_: &std::task::Waker) -> bool {
    false
}

/// Loom has no runtime budget to consume.
#[cfg(loom)]
pub(crate) fn consume_budget() {}

#[cfg(loom)]
pub(crate) use self::loom_park::{park, park_until, waker};
#[cfg(loom)]
pub(crate) use spindle_park::Wake;

#[cfg(loom)]
pub(crate) mod loom_park {
    use std::cell::Cell;
    use std::sync::Arc;
    use std::task::{Wake as WakeTrait, Waker};
    use std::time::Instant;

    use ::loom::sync::{Condvar, Mutex};

    use super::Wake;

    /// A token parker: a wake makes the token available, `park` waits for it and takes it.
    struct Parker {
        token: Mutex<bool>,
        condvar: Condvar,
    }

    impl WakeTrait for Parker {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }

        fn wake_by_ref(self: &Arc<Self>) {
            *self.token.lock().unwrap() = true;
            self.condvar.notify_one();
        }
    }

    ::loom::thread_local! {
        static PARKER: Arc<Parker> = Arc::new(Parker {
            token: Mutex::new(false),
            condvar: Condvar::new(),
        });
        static CANCEL: Cell<bool> = Cell::new(false);
        static RECYCLE: Cell<bool> = Cell::new(false);
    }

    /// The payload a "cancelled" park unwinds with (see [`cancel_next_park`]).
    #[derive(Debug)]
    pub struct Cancelled;

    /// Makes the current loom thread's next park unwind with [`Cancelled`], as a cancelled
    /// coroutine's park does.
    pub fn cancel_next_park() {
        CANCEL.with(|c| c.set(true));
    }

    /// Makes the channels created next on this loom thread keep and reuse the packets of
    /// finished blocking operations, as they always do outside loom. Off by default under
    /// loom: the reuse multiplies the interleavings of every channel model (tenfold and
    /// more), so only the models written for it turn it on.
    pub fn recycle_packets(on: bool) {
        RECYCLE.with(|c| c.set(on));
    }

    /// Whether a channel created now reuses packets (see [`recycle_packets`]).
    pub(crate) fn recycling() -> bool {
        RECYCLE.with(Cell::get)
    }

    /// Withdraws a [`cancel_next_park`] that no park consumed.
    pub fn clear_cancel() {
        CANCEL.with(|c| c.set(false));
    }

    fn check_cancel() {
        if CANCEL.with(|c| c.replace(false)) {
            std::panic::resume_unwind(Box::new(Cancelled));
        }
    }

    pub(crate) fn waker() -> Waker {
        Waker::from(PARKER.with(Arc::clone))
    }

    pub(crate) fn park() {
        check_cancel();
        let parker = PARKER.with(Arc::clone);
        let mut token = parker.token.lock().unwrap();
        while !*token {
            token = parker.condvar.wait(token).unwrap();
        }
        *token = false;
    }

    /// Never waits: the deadline is taken to have passed unless a wake-up is pending.
    pub(crate) fn park_until(_deadline: Instant) -> Wake {
        check_cancel();
        let parker = PARKER.with(Arc::clone);
        let mut token = parker.token.lock().unwrap();
        if std::mem::replace(&mut *token, false) {
            Wake::Woken
        } else {
            Wake::TimedOut
        }
    }
}

/// Defines a `const fn`, or a plain `fn` under loom (whose types have no const constructors).
macro_rules! const_fn {
    ($(#[$meta:meta])* $vis:vis fn $name:ident $($rest:tt)*) => {
        #[cfg(not(loom))]
        $(#[$meta])*
        $vis const fn $name $($rest)*

        #[cfg(loom)]
        $(#[$meta])*
        $vis fn $name $($rest)*
    };
}
pub(crate) use const_fn;
