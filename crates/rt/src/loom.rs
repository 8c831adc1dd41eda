//! The synchronisation types of the modules that the loom models check (`state` and
//! `join_cell`): std's and `spindle_park`'s here. `tests/loom_task.rs` compiles those modules'
//! files again, with a module of this name that gives loom's (tokio's `cfg(loom)` swap, made
//! per test crate: the rest of the runtime is not built for loom).

pub(crate) use std::sync::atomic::{AtomicU32, Ordering};

/// The join cell's lock: a spin lock whose unlock is a store (its critical sections move a
/// value or a waker).
pub(crate) type Lock = spindle_park::spin::SpinLock<()>;

/// Locks `lock`; the guard unlocks.
#[inline]
pub(crate) fn lock(lock: &Lock) -> impl Sized + '_ {
    lock.lock()
}

/// A cell whose contents its users' protocol, not the type system, keeps from being reached
/// by two threads at once (loom's `UnsafeCell` checks that protocol in the models).
pub(crate) struct DataCell<T>(std::cell::UnsafeCell<T>);

impl<T> DataCell<T> {
    pub(crate) const fn new(value: T) -> DataCell<T> {
        DataCell(std::cell::UnsafeCell::new(value))
    }

    /// Runs `f` on a pointer to the contents (the caller's protocol makes the access
    /// exclusive).
    #[inline]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}
