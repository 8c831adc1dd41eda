//! Times the `switch` of `cargo xtask bench core` — one resume + suspend round trip of a
//! coroutine on a pooled stack, divided by 2 — with whichever context backend this build has,
//! and prints the median of several samples. Portable (no Linux-only harness), so that the same
//! program can compare platforms and backends side by side: for example a windows-gnu build run
//! under Wine against the Linux build, one after the other.
//!
//! ```text
//! cargo run --release -p spindle-coro --example switch_time [-- SAMPLES]
//! ```

use std::hint::black_box;
use std::time::Duration;

use spindle_coro::{Coroutine, CoroutineResult, Yielder};

#[path = "support/timing.rs"]
mod timing;

use timing::time_ns;

fn main() {
    let samples: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("SAMPLES: a number"))
        .unwrap_or(11);
    // Input `true` ends the coroutine, so that it finishes before it is dropped (no forced
    // unwind of its stack at exit).
    let mut co = Coroutine::new(|y: &Yielder<bool, usize>, mut stop: bool| {
        while !stop {
            stop = y.suspend(black_box(1));
        }
    })
    .expect("a coroutine on a pooled stack");
    assert_eq!(co.resume(false), CoroutineResult::Yield(1));
    let mut op = || match co.resume(false) {
        CoroutineResult::Yield(v) => v,
        CoroutineResult::Return(()) => 0,
    };
    let mut ns: Vec<f64> = (0..samples)
        .map(|_| time_ns(&mut op, Duration::from_millis(200)) / 2.0)
        .collect();
    ns.sort_by(f64::total_cmp);
    println!(
        "switch backend={} fp_env={} median_ns={:.2} min_ns={:.2} max_ns={:.2} samples={}",
        spindle_context::BACKEND,
        spindle_context::SAVES_FP_ENV,
        ns[ns.len() / 2],
        ns[0],
        ns[ns.len() - 1],
        ns.len()
    );
    assert_eq!(co.resume(true), CoroutineResult::Return(()));
}
