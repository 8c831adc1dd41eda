//! Cooperation: yielding, and the budget and time slice that make busy coroutines yield.
//!
//! A coroutine runs until it suspends. One that never blocks — because every operation it
//! does happens to complete at once (a channel that always has a message, a socket that always
//! has data) — would keep its worker forever. So such operations call [`consume_budget`]:
//! each costs one unit of the slice's budget (128). A worker's time is shared in slices:
//!
//! * A task popped from a queue starts a fresh slice. It yields to the back of the queue when
//!   its budget is spent, or when the slice is older than the monitor's slice period (10 ms),
//!   whichever comes first: a task that only makes operations that complete at once gives its
//!   worker up after 128 of them.
//! * A task woken or spawned by the running one into the run-next slot runs next in the same
//!   slice (Go's rule), and each such hand-off costs one unit. From the first hand-off on, the
//!   slice belongs to a chain of tasks handing the worker to each other, and it ends in time
//!   only: when the chain's budget runs out the worker looks at the slice's age, and a slice
//!   that still has time gets a fresh budget (a hand-off just takes the refill; a coroutine
//!   inside an operation switches to its worker and is resumed at once, see
//!   [`budget_used_up`]). So a chain gets one slice period of the worker's time, whatever its
//!   links cost: two coroutines ping-ponging short messages get as much time as two that do
//!   milliseconds of work per message, as in Go (its `TestPingPongHog`). Counting a chain's
//!   operations would give the cheap chain well under a millisecond per slice against the
//!   costly one's 10 ms. When the time is over, the task running goes behind the worker's queues, and
//!   so does a task taken from run-next.
//!
//! The count is `spindle_park`'s [`Budget`](spindle_park::Budget), one per worker (in its
//! counters), installed on the worker thread: an operation that leaves some of it is a
//! thread-local read, a load and a store, with no call into the runtime. The worker refills it
//! at each fresh slice; the monitor, which marks slice periods, exhausts it when a slice has run
//! through two of them; either way the next operation finds it at its last unit and asks the
//! runtime ([`budget_used_up`]), which yields the coroutine or, in a chain whose slice has time
//! left, pauses it. The slice's age is read from the monitor's epochs, never from the clock:
//! no hand-off and no operation reads the time.
//!
//! The policies without a run-next slot (FIFO, round-robin) never hand a slice on: every task
//! starts a fresh one, and their fairness is in turns (see their docs).

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
    suspend_task(header, Suspend::Yield);
}

/// Switches the running coroutine whose header is `header` to its worker with `why` (a yield
/// or a pause), as a cancellation point on both sides of the switch.
#[inline(always)]
fn suspend_task(header: &Header, why: Suspend) {
    if header.should_unwind() {
        cancel_unwind(header);
    }
    worker::suspend_current(header, why);
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
/// monitor (the slice ran too long): the running coroutine yields (a cancellation point). In a
/// slice handed on through run-next whose time is not over it pauses instead: it switches to
/// its worker, which resumes it at once in the same slice with a fresh budget (also a
/// cancellation point). The budget is refilled when the worker resumes it
/// (`WorkerCtx::run_task`). Nothing outside a coroutine (the worker's own code).
#[cold]
pub(crate) fn budget_used_up(ctx: &worker::WorkerCtx) {
    if let Some(header) = ctx.running_header() {
        if ctx.slice_goes_on() {
            suspend_task(header, Suspend::Pause);
        } else {
            yield_task(header);
        }
    }
}
