//! Spindle's impls of the `sched` suite's scheduler benches: one function per bench and
//! scheduling policy (`spindle-fifo`, `spindle-rr`, `spindle-ws`), each taking the worker count.
//!
//! NOT YET WIRED: `spindle-rt` is being written; until it is, every function here returns the
//! error [`NOT_WIRED`], which the harness reports as an `error:` row. To wire one, build the
//! runtime with `workers` worker threads and the function's policy (outside the timed part),
//! then return `super::per_op(ctx, Workload::<X>.ops(), || { ... })` where each run performs the
//! whole workload and returns the time measured inside the root task, exactly as the tokio and
//! may impls in `super::peers` do (same sizes: the constants in `super`; same checks of the
//! result).
//!
//! (The timer wheel's `spindle` rows are in `super::timer`.)

use crate::harness::Ctx;

/// The error every stub returns until `spindle-rt` is wired in.
pub const NOT_WIRED: &str = "not yet wired (spindle-rt)";

/// The body of every stub.
fn not_wired(_ctx: &Ctx, _workers: usize) -> Result<f64, String> {
    Err(NOT_WIRED.to_string())
}

/// `spawn_many_w<workers>`: spawn 10,000 trivial tasks from a root task and join them all
/// (see `super::spawn_many`); ns per spawned task.
///
/// Spindle with the FIFO run queue (`spindle-fifo`) scheduler. NOT YET WIRED.
pub fn spawn_many_fifo(ctx: &Ctx, workers: usize) -> Result<f64, String> {
    // TODO(spindle-rt): wire.
    not_wired(ctx, workers)
}

/// `spawn_many_w<workers>`: spawn 10,000 trivial tasks from a root task and join them all
/// (see `super::spawn_many`); ns per spawned task.
///
/// Spindle with the round-robin (`spindle-rr`) scheduler. NOT YET WIRED.
pub fn spawn_many_rr(ctx: &Ctx, workers: usize) -> Result<f64, String> {
    // TODO(spindle-rt): wire.
    not_wired(ctx, workers)
}

/// `spawn_many_w<workers>`: spawn 10,000 trivial tasks from a root task and join them all
/// (see `super::spawn_many`); ns per spawned task.
///
/// Spindle with the work-stealing (`spindle-ws`) scheduler. NOT YET WIRED.
pub fn spawn_many_ws(ctx: &Ctx, workers: usize) -> Result<f64, String> {
    // TODO(spindle-rt): wire.
    not_wired(ctx, workers)
}

/// `yield_many_w<workers>`: 200 tasks each yielding 1,000 times (see `super::yield_many`);
/// ns per yield.
///
/// Spindle with the FIFO run queue (`spindle-fifo`) scheduler. NOT YET WIRED.
pub fn yield_many_fifo(ctx: &Ctx, workers: usize) -> Result<f64, String> {
    // TODO(spindle-rt): wire.
    not_wired(ctx, workers)
}

/// `yield_many_w<workers>`: 200 tasks each yielding 1,000 times (see `super::yield_many`);
/// ns per yield.
///
/// Spindle with the round-robin (`spindle-rr`) scheduler. NOT YET WIRED.
pub fn yield_many_rr(ctx: &Ctx, workers: usize) -> Result<f64, String> {
    // TODO(spindle-rt): wire.
    not_wired(ctx, workers)
}

/// `yield_many_w<workers>`: 200 tasks each yielding 1,000 times (see `super::yield_many`);
/// ns per yield.
///
/// Spindle with the work-stealing (`spindle-ws`) scheduler. NOT YET WIRED.
pub fn yield_many_ws(ctx: &Ctx, workers: usize) -> Result<f64, String> {
    // TODO(spindle-rt): wire.
    not_wired(ctx, workers)
}

/// `ping_pong_w<workers>`: 1,000 task pairs exchanging a ping and a pong
/// (see `super::ping_pong`); ns per message (2,000 per run).
///
/// Spindle with the FIFO run queue (`spindle-fifo`) scheduler. NOT YET WIRED.
pub fn ping_pong_fifo(ctx: &Ctx, workers: usize) -> Result<f64, String> {
    // TODO(spindle-rt): wire.
    not_wired(ctx, workers)
}

/// `ping_pong_w<workers>`: 1,000 task pairs exchanging a ping and a pong
/// (see `super::ping_pong`); ns per message (2,000 per run).
///
/// Spindle with the round-robin (`spindle-rr`) scheduler. NOT YET WIRED.
pub fn ping_pong_rr(ctx: &Ctx, workers: usize) -> Result<f64, String> {
    // TODO(spindle-rt): wire.
    not_wired(ctx, workers)
}

/// `ping_pong_w<workers>`: 1,000 task pairs exchanging a ping and a pong
/// (see `super::ping_pong`); ns per message (2,000 per run).
///
/// Spindle with the work-stealing (`spindle-ws`) scheduler. NOT YET WIRED.
pub fn ping_pong_ws(ctx: &Ctx, workers: usize) -> Result<f64, String> {
    // TODO(spindle-rt): wire.
    not_wired(ctx, workers)
}

/// `chained_spawn_w<workers>`: a chain of 1,000 tasks, each spawning the next
/// (see `super::chained_spawn`); ns per spawn.
///
/// Spindle with the FIFO run queue (`spindle-fifo`) scheduler. NOT YET WIRED.
pub fn chained_spawn_fifo(ctx: &Ctx, workers: usize) -> Result<f64, String> {
    // TODO(spindle-rt): wire.
    not_wired(ctx, workers)
}

/// `chained_spawn_w<workers>`: a chain of 1,000 tasks, each spawning the next
/// (see `super::chained_spawn`); ns per spawn.
///
/// Spindle with the round-robin (`spindle-rr`) scheduler. NOT YET WIRED.
pub fn chained_spawn_rr(ctx: &Ctx, workers: usize) -> Result<f64, String> {
    // TODO(spindle-rt): wire.
    not_wired(ctx, workers)
}

/// `chained_spawn_w<workers>`: a chain of 1,000 tasks, each spawning the next
/// (see `super::chained_spawn`); ns per spawn.
///
/// Spindle with the work-stealing (`spindle-ws`) scheduler. NOT YET WIRED.
pub fn chained_spawn_ws(ctx: &Ctx, workers: usize) -> Result<f64, String> {
    // TODO(spindle-rt): wire.
    not_wired(ctx, workers)
}

/// `skynet_w<workers>`: the 1,111,111-task skynet tree (see `super::skynet`); ns per task.
///
/// Spindle with the FIFO run queue (`spindle-fifo`) scheduler. NOT YET WIRED.
pub fn skynet_fifo(ctx: &Ctx, workers: usize) -> Result<f64, String> {
    // TODO(spindle-rt): wire.
    not_wired(ctx, workers)
}

/// `skynet_w<workers>`: the 1,111,111-task skynet tree (see `super::skynet`); ns per task.
///
/// Spindle with the round-robin (`spindle-rr`) scheduler. NOT YET WIRED.
pub fn skynet_rr(ctx: &Ctx, workers: usize) -> Result<f64, String> {
    // TODO(spindle-rt): wire.
    not_wired(ctx, workers)
}

/// `skynet_w<workers>`: the 1,111,111-task skynet tree (see `super::skynet`); ns per task.
///
/// Spindle with the work-stealing (`spindle-ws`) scheduler. NOT YET WIRED.
pub fn skynet_ws(ctx: &Ctx, workers: usize) -> Result<f64, String> {
    // TODO(spindle-rt): wire.
    not_wired(ctx, workers)
}
