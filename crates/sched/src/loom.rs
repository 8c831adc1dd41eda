//! The synchronisation primitives of the concurrent parts, swapped for loom's under `--cfg loom`
//! (tokio's module swap). Everything that takes part in the scheduling protocol uses these;
//! plain `std` atomics are used only for statistics counters, which no decision reads.

#[cfg(loom)]
pub(crate) use ::loom::sync::atomic::{
    AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering, fence,
};
#[cfg(loom)]
pub(crate) use ::loom::sync::{Mutex, MutexGuard};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering, fence};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// One round of waiting for another thread that holds something for a few instructions:
/// spins (`round` counts the rounds), then yields the thread. Under loom it always yields, so
/// that loom schedules the other thread.
pub(crate) fn spin_wait(round: &mut u32) {
    #[cfg(loom)]
    {
        let _ = round;
        ::loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    {
        if *round < 64 {
            *round += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Locks `mutex`, ignoring poisoning: no critical section of this crate leaves its data
/// inconsistent when it unwinds (none calls user code).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// `UnsafeCell` with loom's closure interface, so that loom checks every access.
#[cfg(loom)]
pub(crate) use ::loom::cell::UnsafeCell;

/// `UnsafeCell` with loom's closure interface, so that loom checks every access.
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    /// Runs `f` with a raw pointer to the value; see `std::cell::UnsafeCell::get`.
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}
