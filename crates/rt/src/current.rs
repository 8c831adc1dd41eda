//! The current coroutine, like `std::thread::current`.

use std::fmt;

use crate::task::TaskRef;
use crate::worker;

/// A handle to a coroutine of a runtime: its id, its name, and `unpark`.
#[derive(Clone)]
pub struct Current {
    task: TaskRef,
}

impl Current {
    /// The coroutine's id (unique in the process).
    pub fn id(&self) -> u64 {
        self.task.header().id
    }

    /// The coroutine's name, if it was given one.
    pub fn name(&self) -> Option<&str> {
        self.task.header().name.as_deref()
    }

    /// Wakes the coroutine if it is parked in [`park`](crate::park), or makes its next `park`
    /// return at once (the permit of `std::thread::unpark`).
    pub fn unpark(&self) {
        self.task.wake_by_ref();
    }
}

impl fmt::Debug for Current {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Current")
            .field("id", &self.id())
            .field("name", &self.name())
            .finish()
    }
}

/// The coroutine that calls it, or `None` on a plain thread.
pub fn try_current() -> Option<Current> {
    worker::current_task().map(|task| Current { task })
}

/// The coroutine that calls it.
///
/// # Panics
///
/// Outside a coroutine of a runtime (use [`try_current`], or `std::thread::current` there).
pub fn current() -> Current {
    try_current().expect("spindle_rt::current called outside a coroutine (see try_current)")
}

/// Parks the current coroutine until [`Current::unpark`] (or any waker of it) wakes it; a
/// thread outside a runtime parks the thread. As with `std::thread::park`, callers re-check
/// their condition after it returns. A cancelled coroutine unwinds from here.
pub fn park() {
    spindle_park::park();
}

/// [`park`] with a timeout.
pub fn park_timeout(timeout: std::time::Duration) -> spindle_park::Wake {
    spindle_park::park_timeout(timeout)
}
