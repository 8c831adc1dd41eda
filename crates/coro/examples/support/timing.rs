//! The timing loop of the `switch_time` examples (spindle-coro's, and spindle-bench's
//! `corosensei_switch_time`, which includes this file), so that both measure the same way.

use std::hint::black_box;
use std::time::{Duration, Instant};

/// Runs `op` `n` times.
fn run(op: &mut impl FnMut() -> usize, n: u64) -> Duration {
    let start = Instant::now();
    for _ in 0..n {
        black_box(op());
    }
    start.elapsed()
}

/// Nanoseconds per call of `op`: calibrated to a run of about `target`, as the bench harness
/// does.
pub fn time_ns(op: &mut impl FnMut() -> usize, target: Duration) -> f64 {
    let mut n: u64 = 1;
    loop {
        let t = run(op, n);
        if t >= target / 10 || n >= 1 << 40 {
            let per_op = t.as_secs_f64().max(1e-12) / n as f64;
            let count = (target.as_secs_f64() / per_op).ceil().clamp(1.0, 1e15) as u64;
            return run(op, count).as_nanos() as f64 / count as f64;
        }
        n *= 2;
    }
}
