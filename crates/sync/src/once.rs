//! [`OnceCell`] and [`Lazy`]: a value initialised once, by the first caller, while others
//! wait (suspending if they are coroutines).

use std::cell::Cell;
use std::fmt;
use std::mem::MaybeUninit;
use std::ops::Deref;
use std::sync::Arc;

use crate::loom::{AtomicU8, DataCell, Ordering, StdMutex, const_fn, lock};
use crate::waiter::Waiter;

const EMPTY: u8 = 0;
const RUNNING: u8 = 1;
const DONE: u8 = 2;

/// A cell written once. The first caller of [`get_or_init`](OnceCell::get_or_init) runs the
/// initialiser; concurrent callers wait for it (a coroutine suspends, a thread parks) rather
/// than spin or block a worker thread.
///
/// ```
/// use spindle_sync::OnceCell;
///
/// static CONFIG: OnceCell<String> = OnceCell::new();
/// let value = CONFIG.get_or_init(|| "loaded".to_string());
/// assert_eq!(value, "loaded");
/// assert_eq!(CONFIG.get().map(String::as_str), Some("loaded"));
/// ```
///
/// # Specification
///
/// * [`get_or_init(f)`](OnceCell::get_or_init): *postcondition*: the cell holds a value and a
///   reference to it is returned; `f` ran at most once in this call, and at most one `f` runs
///   at any time. Calling `get_or_init` on the same cell from inside `f` never returns
///   (deadlock), as with `std::sync::OnceLock`.
/// * If `f` panics (or its coroutine is cancelled), the cell stays empty, the panic goes on,
///   and one waiting caller runs its own initialiser next (no poisoning, no waiter left
///   waiting for an initialiser that is gone).
/// * [`get_or_try_init`](OnceCell::get_or_try_init): an `Err` leaves the cell empty likewise.
/// * [`set`](OnceCell::set) fails with the value back if the cell is (or becomes) full.
/// * **Spurious wake-ups**: none.
pub struct OnceCell<T> {
    state: AtomicU8,
    waiters: StdMutex<Vec<Arc<Waiter>>>,
    value: DataCell<MaybeUninit<T>>,
}

// SAFETY: as `std::sync::OnceLock`: the value is written by one thread and read by many
// (`Sync + Send` for sharing), and moves with the cell (`Send`).
unsafe impl<T: Sync + Send> Sync for OnceCell<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for OnceCell<T> {}

impl<T> OnceCell<T> {
    const_fn! {
        /// An empty cell.
        pub fn new() -> OnceCell<T> {
            OnceCell {
                state: AtomicU8::new(EMPTY),
                waiters: StdMutex::new(Vec::new()),
                value: DataCell::new(MaybeUninit::uninit()),
            }
        }
    }

    /// The value, if the cell is initialised.
    #[inline]
    pub fn get(&self) -> Option<&T> {
        if self.state.load(Ordering::Acquire) == DONE {
            // SAFETY: DONE is stored (Release) after the value was written, and never undone
            // while shared.
            Some(unsafe { (*self.value.ptr_shared()).assume_init_ref() })
        } else {
            None
        }
    }

    /// The value mutably, if initialised (exclusive access).
    pub fn get_mut(&mut self) -> Option<&mut T> {
        if self.state.load(Ordering::Relaxed) == DONE {
            // SAFETY: initialised (DONE), and `&mut self` is exclusive.
            Some(unsafe { self.value.get_mut().assume_init_mut() })
        } else {
            None
        }
    }

    /// Stores `value` if the cell is empty (waiting for an initialiser running elsewhere);
    /// gives it back if the cell is full.
    ///
    /// ```
    /// let cell = spindle_sync::OnceCell::new();
    /// assert_eq!(cell.set(1), Ok(()));
    /// assert_eq!(cell.set(2), Err(2));
    /// ```
    pub fn set(&self, value: T) -> Result<(), T> {
        let mut value = Some(value);
        self.get_or_init(|| value.take().expect("taken once"));
        match value {
            None => Ok(()),
            Some(v) => Err(v),
        }
    }

    /// The value, running `f` to initialise the cell if it is empty.
    pub fn get_or_init(&self, f: impl FnOnce() -> T) -> &T {
        match self.get_or_try_init(|| Ok::<T, std::convert::Infallible>(f())) {
            Ok(v) => v,
            Err(never) => match never {},
        }
    }

    /// The value, running `f` to initialise the cell if it is empty; an `Err` from `f` leaves
    /// it empty and is returned.
    ///
    /// ```
    /// let cell = spindle_sync::OnceCell::new();
    /// assert_eq!(cell.get_or_try_init(|| Err("no")), Err("no"));
    /// assert_eq!(cell.get_or_try_init(|| Ok::<_, ()>(3)), Ok(&3));
    /// ```
    pub fn get_or_try_init<E>(&self, f: impl FnOnce() -> Result<T, E>) -> Result<&T, E> {
        if let Some(v) = self.get() {
            return Ok(v);
        }
        self.init_slow(f)
    }

    #[cold]
    fn init_slow<E>(&self, f: impl FnOnce() -> Result<T, E>) -> Result<&T, E> {
        loop {
            let cx = {
                let mut waiters = lock(&self.waiters);
                match self.state.load(Ordering::Acquire) {
                    DONE => break,
                    EMPTY => {
                        self.state.store(RUNNING, Ordering::Relaxed);
                        drop(waiters);
                        return self.run(f);
                    }
                    _ => {
                        let cx = Waiter::new();
                        waiters.push(cx.clone());
                        cx
                    }
                }
            };
            let abandon = Abandon {
                cell: self,
                cx: &cx,
            };
            cx.wait(None);
            std::mem::forget(abandon);
        }
        Ok(self.get().expect("DONE"))
    }

    /// Runs the initialiser (the state is RUNNING, owned by this call).
    fn run<E>(&self, f: impl FnOnce() -> Result<T, E>) -> Result<&T, E> {
        /// Back to EMPTY (waking a waiter to try) unless disarmed.
        struct Reset<'a, T>(&'a OnceCell<T>, Cell<bool>);
        impl<T> Drop for Reset<'_, T> {
            fn drop(&mut self) {
                if self.1.get() {
                    self.0.finish(EMPTY);
                }
            }
        }
        let reset = Reset(self, Cell::new(true));
        let value = f()?; // an Err drops `reset`: EMPTY
        // SAFETY: RUNNING is owned by this call: nobody else reads or writes the value.
        unsafe { (*self.value.ptr()).write(value) };
        reset.1.set(false);
        self.finish(DONE);
        Ok(self.get().expect("just initialised"))
    }

    /// Leaves RUNNING for `state` and wakes the waiters (all: to read the value, or to try
    /// their own initialiser).
    fn finish(&self, state: u8) {
        let waiters = {
            let mut waiters = lock(&self.waiters);
            self.state.store(state, Ordering::Release);
            std::mem::take(&mut *waiters)
        };
        for w in waiters {
            if w.try_select(0) {
                w.wake();
            }
        }
    }

    /// Takes the value out, leaving the cell empty.
    pub fn take(&mut self) -> Option<T> {
        if self.state.load(Ordering::Relaxed) == DONE {
            self.state.store(EMPTY, Ordering::Relaxed);
            // SAFETY: it was initialised, and is now marked empty, so it is read out once.
            Some(unsafe { self.value.get_mut().assume_init_read() })
        } else {
            None
        }
    }

    /// The value, consuming the cell.
    pub fn into_inner(mut self) -> Option<T> {
        self.take()
    }
}

struct Abandon<'a, T> {
    cell: &'a OnceCell<T>,
    cx: &'a Arc<Waiter>,
}

impl<T> Drop for Abandon<'_, T> {
    fn drop(&mut self) {
        if self.cx.try_abort() {
            let mut waiters = lock(&self.cell.waiters);
            if let Some(i) = waiters.iter().position(|w| Arc::ptr_eq(w, self.cx)) {
                waiters.swap_remove(i);
            }
        }
        // Woken already: every waiter was woken, nothing to pass on.
    }
}

impl<T> Drop for OnceCell<T> {
    fn drop(&mut self) {
        drop(self.take());
    }
}

impl<T> Default for OnceCell<T> {
    fn default() -> Self {
        OnceCell::new()
    }
}

impl<T: fmt::Debug> fmt::Debug for OnceCell<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.get() {
            Some(v) => f.debug_tuple("OnceCell").field(v).finish(),
            None => f.write_str("OnceCell(<uninit>)"),
        }
    }
}

impl<T> From<T> for OnceCell<T> {
    fn from(value: T) -> Self {
        let cell = OnceCell::new();
        let _ = cell.set(value);
        cell
    }
}

/// A value computed on first access by its initialiser (`std::sync::LazyLock` on a
/// [`OnceCell`]: concurrent first accesses wait for the one running the initialiser).
///
/// ```
/// use spindle_sync::Lazy;
///
/// static SQUARES: Lazy<Vec<u64>> = Lazy::new(|| (0..10).map(|i| i * i).collect());
/// assert_eq!(SQUARES[3], 9);
/// ```
///
/// If the initialiser panics, the panic goes on and every later access panics too (the
/// initialiser is gone), as with `std::sync::LazyLock`.
pub struct Lazy<T, F = fn() -> T> {
    cell: OnceCell<T>,
    init: DataCell<Option<F>>,
}

// SAFETY: `init` is taken by the one call that owns the cell's RUNNING state, on whichever
// thread: `F: Send`; the value is shared as in `OnceCell`.
unsafe impl<T: Sync + Send, F: Send> Sync for Lazy<T, F> {}

impl<T, F: FnOnce() -> T> Lazy<T, F> {
    const_fn! {
        /// A lazy value computed by `init` on first access.
        pub fn new(init: F) -> Lazy<T, F> {
            Lazy {
                cell: OnceCell::new(),
                init: DataCell::new(Some(init)),
            }
        }
    }

    /// Forces the evaluation and returns the value.
    pub fn force(this: &Lazy<T, F>) -> &T {
        this.cell.get_or_init(|| {
            // SAFETY: we are inside the cell's initialiser, which runs in one call at a time
            // (RUNNING); nobody else touches `init`.
            let init = unsafe { (*this.init.ptr()).take() };
            match init {
                Some(f) => f(),
                None => {
                    panic!("Lazy instance has previously been poisoned (its initialiser panicked)")
                }
            }
        })
    }
}

impl<T, F: FnOnce() -> T> Deref for Lazy<T, F> {
    type Target = T;
    fn deref(&self) -> &T {
        Lazy::force(self)
    }
}

impl<T: fmt::Debug, F> fmt::Debug for Lazy<T, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.cell.get() {
            Some(v) => f.debug_tuple("Lazy").field(v).finish(),
            None => f.write_str("Lazy(<uninit>)"),
        }
    }
}
