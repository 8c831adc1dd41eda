//! Waiting on a raw descriptor for `spindle-hook` (not a public API: hidden from the docs and
//! exempt from semver).
//!
//! `spindle-hook` interposes blocking libc calls; when one of them would block inside a
//! coroutine it needs what the IO types of this crate have: wait on the worker's driver for the
//! descriptor's readiness, whatever that driver is (a reactor's registration, an io_uring poll
//! operation, the blocking pool, `poll(2)` outside a task), with a deadline.

use std::io;
use std::os::fd::RawFd;
use std::time::Instant;

use crate::source::{Direction, Evented, ReadinessSnapshot};

/// The waiting machinery of one descriptor that belongs to someone else (the application's
/// code, which `spindle-hook` runs cooperatively). It registers lazily, like the IO types, and
/// deregisters when dropped.
#[doc(hidden)]
#[derive(Debug)]
pub struct FdWait {
    ev: Evented,
}

impl FdWait {
    /// Waiting machinery for `fd`.
    ///
    /// # Safety
    ///
    /// `fd` must be in non-blocking mode, must not be the source of one of this crate's IO
    /// types (the two registrations would replace each other in the worker's driver), and
    /// every `FdWait` of one descriptor must be the same one (the hook keeps one per
    /// descriptor number). Dropping it after `fd` was closed is allowed: the reactors remove
    /// only their own registration of a number.
    pub unsafe fn new(fd: RawFd) -> FdWait {
        FdWait {
            ev: Evented::stopping_on_cancel(fd),
        }
    }

    /// Runs the non-blocking call `op` until it does not fail with `WouldBlock`, waiting for
    /// readability (`write == false`) or writability in between, until `deadline` (then
    /// `TimedOut`, an error without an OS code). `Interrupted` is retried. In a task only the
    /// task waits; elsewhere the thread blocks in `poll(2)`. A task that defers cancellation
    /// and is asked to cancel runs `op` again at once (on a reactor; the other paths end their
    /// wait as they do for the IO types), so that `op` can see the request and stop.
    ///
    /// # Errors
    ///
    /// `op`'s error, `TimedOut`, or the driver's failure to register the descriptor.
    pub fn run<R>(
        &self,
        write: bool,
        deadline: Option<Instant>,
        op: impl FnMut() -> io::Result<R>,
    ) -> io::Result<R> {
        let dir = if write {
            Direction::Write
        } else {
            Direction::Read
        };
        self.ev.readiness_op(dir, deadline, op)
    }

    /// The descriptor's readiness as recorded now, for [`FdWait::run_after_would_block`]:
    /// taken before the call that may fail with `WouldBlock`.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot(self.ev.readiness_snapshot())
    }

    /// [`FdWait::run`] for a caller whose own call of `op` has just failed with `WouldBlock`,
    /// `snapshot` taken (from this `FdWait`) before that call: it waits for readiness first
    /// instead of making the call again — the call would fail the same way unless an event
    /// came since the snapshot, and then the wait ends at once. A snapshot of another
    /// `FdWait`, or of none (`Snapshot::default()`), makes the wait clear nothing: it may end
    /// at once, and the loop then carries on as `run` does.
    ///
    /// # Errors
    ///
    /// As [`FdWait::run`].
    pub fn run_after_would_block<R>(
        &self,
        write: bool,
        deadline: Option<Instant>,
        snapshot: Snapshot,
        op: impl FnMut() -> io::Result<R>,
    ) -> io::Result<R> {
        let dir = if write {
            Direction::Write
        } else {
            Direction::Read
        };
        self.ev
            .readiness_op_after_would_block(dir, deadline, snapshot.0, op)
    }
}

/// A descriptor's readiness before a call, as [`FdWait::snapshot`] took it.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct Snapshot(ReadinessSnapshot);

impl Default for Snapshot {
    /// No snapshot: the wait clears nothing.
    fn default() -> Snapshot {
        Snapshot(ReadinessSnapshot::NONE)
    }
}
