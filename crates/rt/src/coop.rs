//! Cooperation: yielding, and the budget that makes busy coroutines yield.
//!
//! A coroutine runs until it suspends. One that never blocks — because every operation it
//! does happens to complete at once (a channel that always has a message, a socket that always
//! has data) — would keep its worker forever. So such operations call [`consume_budget`]:
//! each costs one unit of the slice's budget (128), and when the budget is spent, or the slice
//! is older than the monitor's slice period (10 ms), the coroutine yields to the back of the
//! queue. A task woken by the running one into the run-next slot inherits the slice and its
//! budget (Go's rule), so two tasks waking each other cannot monopolise a worker.
//!
//! The count is `spindle_park`'s [`Budget`](spindle_park::Budget), one per worker (in its
//! counters), installed on the worker thread: an operation that leaves some of it is a
//! thread-local read, a load and a store, with no call into the runtime. The worker refills it
//! at each fresh slice; the monitor, which marks slice periods, exhausts it when a slice has run
//! through two of them; either way the next operation finds it at its last unit and asks the
//! runtime ([`budget_used_up`]), which yields the coroutine.

use crate::task::{CancelUnwind, Header, Suspend};
use crate::worker;

/// Yields the current coroutine: it goes to the back of its worker's queue and runs again
/// after the coroutines queued before it. On a plain thread, yields the thread
/// ([`std::thread::yield_now`]).
///
/// A cancelled coroutine unwinds here instead.
// Inlined so that the switch sits in the caller's frame: a coroutine that yields in a loop
// then makes no call and no return between being resumed and suspending again, and the CPU's
// return-stack predictor (one stack for all the stacks a thread switches between) stays in
// step: an out-of-line `yield_now` cost two mispredicted returns per yield.
#[inline]
pub fn yield_now() {
    match worker::current_task_header() {
        Some(header) => yield_task(header),
        None => std::thread::yield_now(),
    }
}

/// [`yield_now`] for the running coroutine whose header is `header` (a cancellation point).
#[inline]
fn yield_task(header: &Header) {
    if header.should_unwind() {
        cancel_unwind(header);
    }
    worker::suspend_current(header, Suspend::Yield);
    if header.should_unwind() {
        cancel_unwind(header);
    }
}

/// Starts the unwind of a cancelled coroutine (`header` is its own, and it is running).
///
/// From here on the coroutine holds cancellation off for good: a destructor that parks while
/// it unwinds (a sleep, a contended lock, a guard that joins a child) waits as usual instead of
/// starting a second unwind inside the first, which Rust answers with an abort ("panic in a
/// destructor during cleanup"). The unwind ends where the coroutine's body catches it (a
/// `catch_unwind` of the coroutine's own code on the way resumes it when it drops the payload:
/// see `CancelUnwind`).
#[cold]
#[inline(never)]
pub(crate) fn cancel_unwind(header: &Header) -> ! {
    header.hold_off_cancel_for_good();
    CancelUnwind::raise(header.id)
}

/// Counts one operation against the current coroutine's budget, and yields if the budget or
/// the time slice is used up. A no-op outside a coroutine. Call it *before* the operation:
/// the yield is a cancellation point (a cancelled coroutine unwinds there), and an unwind
/// after the operation would lose what it did (a message received, bytes read).
#[inline]
pub fn consume_budget() {
    spindle_park::consume_budget();
}

/// The worker's hook when the slice's budget is down to its last unit, or was exhausted by the
/// monitor (the slice ran too long): the running coroutine yields (a cancellation point). The
/// next slice's budget is refilled when the worker resumes it (`WorkerCtx::run_task`). Nothing
/// outside a coroutine (the worker's own code).
#[cold]
pub(crate) fn budget_used_up(ctx: &worker::WorkerCtx) {
    if let Some(header) = ctx.running_header() {
        yield_task(header);
    }
}
