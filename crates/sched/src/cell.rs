//! [`OwnerCell`]: a worker's private state behind a try-lock.
//!
//! The owner end of a Chase–Lev deque (`crossbeam_deque::Worker`) is `!Sync`: only one thread
//! may use it. [`Policy::push`](crate::Policy::push) with `here = Some(w)` and
//! [`Policy::pop(w)`](crate::Policy::pop) are *meant* to run on `w`'s thread only, but they are
//! safe functions, so nothing stops a runtime bug from calling them on two threads at once. The
//! cell makes that merely slow instead of undefined: whoever takes the try-lock gets the state,
//! a second taker gets `None` and falls back. Uncontended, it costs one compare-exchange and
//! one store on a cache line that only the owner touches.
//!
//! A worker thread that uses the cell for its whole life *binds* it ([`OwnerCell::bind`]): it
//! takes the try-lock once and records a token of its thread; from then on its borrows compare
//! the token (two plain loads) instead of taking the lock — the scheduling hot path then has
//! no read-modify-write at all — and every other thread still finds the lock taken.

use crate::loom::{AtomicBool, AtomicUsize, Ordering, UnsafeCell, spin_wait};

#[cfg(not(loom))]
std::thread_local! {
    /// Its address identifies the thread (among the threads alive).
    static THREAD_TOKEN: u8 = const { 0 };
}

#[cfg(loom)]
::loom::thread_local! {
    static THREAD_TOKEN: u8 = 0;
}

/// A non-zero number that no other live thread has: the address of this thread's copy of a
/// thread-local.
#[inline]
fn thread_token() -> usize {
    THREAD_TOKEN.with(|t| std::ptr::from_ref(t).addr())
}

/// A value that one thread at a time may use; see the module documentation.
#[derive(Debug)]
pub(crate) struct OwnerCell<T> {
    busy: AtomicBool,
    /// The token of the thread the cell is bound to (0: none). Only a thread holding `busy`
    /// stores its own token here, and only that thread clears it, so a thread that reads its
    /// own token is the one that holds `busy`.
    bound: AtomicUsize,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through an `OwnerGuard`, and at most one guard exists at a
// time: `busy` is the lock (taken with an Acquire compare-exchange, released with a Release
// store); a bound thread holds it for as long as it is bound and makes its guards without
// taking it, one at a time (each guard lives within one crate-internal call that never calls
// back into the policy). So sharing the cell never gives two threads the value at once;
// moving the value between threads that way needs `T: Send`.
unsafe impl<T: Send> Sync for OwnerCell<T> {}

impl<T> OwnerCell<T> {
    pub(crate) fn new(value: T) -> Self {
        OwnerCell {
            busy: AtomicBool::new(false),
            bound: AtomicUsize::new(0),
            value: UnsafeCell::new(value),
        }
    }

    /// Whether the calling thread is the one bound to the cell.
    #[inline]
    fn bound_here(&self) -> bool {
        // Relaxed: only this thread ever stores its own token (see `bound`), so reading it
        // means this thread stored it last and still holds `busy`.
        self.bound.load(Ordering::Relaxed) == thread_token()
    }

    /// The value, unless another thread holds it.
    #[inline]
    pub(crate) fn try_borrow(&self) -> Option<OwnerGuard<'_, T>> {
        if self.bound_here() {
            return Some(OwnerGuard {
                cell: self,
                release: false,
            });
        }
        self.busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| OwnerGuard {
                cell: self,
                release: true,
            })
    }

    /// Binds the cell to the calling thread until [`unbind`](OwnerCell::unbind): takes the
    /// lock and keeps it. False if another thread holds it (true if this one is bound already).
    pub(crate) fn bind(&self) -> bool {
        if self.bound_here() {
            return true;
        }
        if self
            .busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        self.bound.store(thread_token(), Ordering::Relaxed);
        true
    }

    /// Ends the calling thread's binding (releases the lock); false if it was not bound.
    pub(crate) fn unbind(&self) -> bool {
        if !self.bound_here() {
            return false;
        }
        self.bound.store(0, Ordering::Relaxed);
        self.busy.store(false, Ordering::Release);
        true
    }

    /// The value, waiting (yielding the thread) while another thread holds it. Only for cold
    /// paths (drain): holders keep it for the length of one push or pop.
    pub(crate) fn borrow_waiting(&self) -> OwnerGuard<'_, T> {
        let mut round = 0;
        loop {
            if let Some(guard) = self.try_borrow() {
                return guard;
            }
            spin_wait(&mut round);
        }
    }
}

/// Exclusive access to an [`OwnerCell`]'s value; releases it when dropped.
#[derive(Debug)]
pub(crate) struct OwnerGuard<'a, T> {
    cell: &'a OwnerCell<T>,
    /// It took the lock (not a bound thread's guard): it releases it.
    release: bool,
}

impl<T> OwnerGuard<'_, T> {
    /// Runs `f` on the value.
    pub(crate) fn with<R>(&mut self, f: impl FnOnce(&mut T) -> R) -> R {
        self.cell.value.with_mut(|value| {
            // SAFETY: this guard is the only one (see `OwnerCell`'s `Sync`), and `&mut self`
            // keeps this reference the only one made through it; it does not outlive `f`.
            f(unsafe { &mut *value })
        })
    }
}

impl<T> Drop for OwnerGuard<'_, T> {
    fn drop(&mut self) {
        if self.release {
            self.cell.busy.store(false, Ordering::Release);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn one_borrower_at_a_time() {
        let cell = OwnerCell::new(1);
        let mut first = cell.try_borrow().expect("free");
        assert!(cell.try_borrow().is_none());
        first.with(|v| *v += 1);
        drop(first);
        let mut again = cell.borrow_waiting();
        assert_eq!(again.with(|v| *v), 2);
    }

    #[test]
    fn a_bound_thread_borrows_and_others_cannot() {
        let cell = OwnerCell::new(0);
        assert!(!cell.unbind(), "not bound yet");
        assert!(cell.bind());
        assert!(cell.bind(), "binding twice is fine");
        cell.try_borrow().expect("bound here").with(|v| *v += 1);
        cell.try_borrow().expect("still bound").with(|v| *v += 1);
        std::thread::scope(|s| {
            s.spawn(|| {
                assert!(cell.try_borrow().is_none(), "bound to another thread");
                assert!(!cell.bind());
                assert!(!cell.unbind());
            });
        });
        assert!(cell.unbind());
        std::thread::scope(|s| {
            s.spawn(|| {
                assert!(cell.bind(), "free again");
                assert_eq!(cell.try_borrow().expect("bound").with(|v| *v), 2);
                assert!(cell.unbind());
            });
        });
        assert!(cell.try_borrow().is_some());
    }
}
