//! Spindle's impls of the `core` suite.
//!
//! TO BE WIRED by the lead once the spindle-coro API has landed: every function below returns
//! the [`NOT_WIRED`] error until then, which the harness reports as an `error:` row (and a
//! non-zero exit). Each function says what it must measure; keep it comparable with the peer
//! impl of the same bench in `peers.rs`.
//!
//! The `spindle-boost` row of `switch` needs no code here: `cargo xtask bench` builds a second
//! copy of this binary with `--features boost` (= `spindle-context/boost`) and the main binary
//! runs `<that copy> measure switch spindle`, i.e. [`switch`] below on the `context` backend.

use crate::harness::Ctx;

/// The error of a function that is not wired yet.
pub const NOT_WIRED: &str =
    "not yet wired: fill in crates/bench/src/core/spindle.rs once the spindle-coro API lands";

/// The backend this binary's Spindle was built with; `spindle-bench backend` prints it and the
/// main binary checks it before trusting a `spindle-boost` measurement.
// TODO(lead): prefer spindle-context's own report of its backend if it grows one.
pub fn backend_name() -> &'static str {
    if cfg!(feature = "boost") {
        "boost"
    } else {
        "native"
    }
}

/// `switch`: one resume + suspend round trip of a spindle-coro coroutine, divided by 2, ns.
/// Create the coroutine (a loop that suspends) outside the timed closure, check it suspends,
/// then `Ok(ctx.time_ns(|| co.resume(black_box(..))) / 2.0)`. Compare `peers::corosensei_switch`.
pub fn switch(_ctx: &Ctx) -> Result<f64, String> {
    Err(NOT_WIRED.into())
}

/// `create_run_drop`: create a coroutine on a pooled / preallocated stack of
/// [`super::STACK_SIZE`] bytes (the stack taken from and returned to a pool outside the timed
/// part, or reused), run it to completion, drop it; ns per coroutine.
/// Compare `peers::corosensei_create_run_drop`.
pub fn create_run_drop(_ctx: &Ctx) -> Result<f64, String> {
    Err(NOT_WIRED.into())
}

/// `shared_resume_<live_bytes>`: resuming a coroutine on a shared (copying) stack whose live
/// stack at its suspension point is `live_bytes` bytes, with at least two coroutines alternating
/// on the same shared stack so that the save/restore copy really happens; ns per resume, counted
/// the way libaco's `aco_resume` benchmark counts an op (its published figures are printed as
/// notes under the table; check its definition when wiring this).
pub fn shared_resume(_ctx: &Ctx, _live_bytes: usize) -> Result<f64, String> {
    Err(NOT_WIRED.into())
}

/// `mem_shared_1m`: bytes per suspended coroutine with `count` coroutines on shared stacks, all
/// suspended at once. Runs in a child process (`spindle-bench measure mem_shared_1m spindle`):
/// use `crate::harness::resident_bytes()` before and after, return the difference / count.
/// `ctx.quick` may shrink `count` if it takes too long.
pub fn mem_shared(_ctx: &Ctx, _count: usize) -> Result<f64, String> {
    Err(NOT_WIRED.into())
}

/// `mem_pooled_30k`: bytes per suspended coroutine with `count` coroutines on pooled stacks, all
/// suspended at once; measured like [`mem_shared`], in a child process.
pub fn mem_pooled(_ctx: &Ctx, _count: usize) -> Result<f64, String> {
    Err(NOT_WIRED.into())
}
