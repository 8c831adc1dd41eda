//! [`OwnerCell`]: a worker's private state behind a try-lock.
//!
//! The owner end of a Chase–Lev deque (`crossbeam_deque::Worker`) is `!Sync`: only one thread
//! may use it. [`Policy::push`](crate::Policy::push) with `here = Some(w)` and
//! [`Policy::pop(w)`](crate::Policy::pop) are *meant* to run on `w`'s thread only, but they are
//! safe functions, so nothing stops a runtime bug from calling them on two threads at once. The
//! cell makes that merely slow instead of undefined: whoever takes the try-lock gets the state,
//! a second taker gets `None` and falls back. Uncontended, it costs one compare-exchange and
//! one store on a cache line that only the owner touches.

use crate::loom::{AtomicBool, Ordering, UnsafeCell, spin_wait};

/// A value that one thread at a time may use; see the module documentation.
#[derive(Debug)]
pub(crate) struct OwnerCell<T> {
    busy: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through an `OwnerGuard`, and at most one guard exists at a
// time (`busy` is the lock: taken with an Acquire compare-exchange, released with a Release
// store), so sharing the cell never gives two threads the value at once; moving the value
// between threads that way needs `T: Send`.
unsafe impl<T: Send> Sync for OwnerCell<T> {}

impl<T> OwnerCell<T> {
    pub(crate) fn new(value: T) -> Self {
        OwnerCell {
            busy: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// The value, unless another thread holds it.
    pub(crate) fn try_borrow(&self) -> Option<OwnerGuard<'_, T>> {
        self.busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| OwnerGuard { cell: self })
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
        self.cell.busy.store(false, Ordering::Release);
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
}
