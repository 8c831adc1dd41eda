//! corosensei's side of `cargo xtask bench wine-switch`: the same measurement as spindle-coro's
//! `switch_time` example — one resume + suspend round trip of a coroutine, divided by 2, the
//! median of several samples of 200 ms — with corosensei's coroutine on its default stack.
//! Portable, so that the windows-gnu build run under Wine can stand beside the Linux build and
//! beside Spindle's two Windows backends in one run: corosensei's own Windows backend also
//! switches the TEB's stack fields, so its Wine/Linux ratio shows what Wine charges a switch
//! that does.
//!
//! ```text
//! cargo run --release -p spindle-bench --example corosensei_switch_time [-- SAMPLES]
//! ```

use std::hint::black_box;
use std::time::Duration;

use corosensei::{Coroutine, CoroutineResult, Yielder};

#[path = "../../coro/examples/support/timing.rs"]
mod timing;

use timing::time_ns;

fn main() {
    let samples: usize = match std::env::args().nth(1).map(|a| a.parse()) {
        None => 11,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("usage: corosensei_switch_time [SAMPLES (a positive number)]");
            std::process::exit(2);
        }
    };
    // Input `true` ends the coroutine, so that it finishes before it is dropped.
    let mut co = Coroutine::new(|y: &Yielder<bool, usize>, mut stop: bool| {
        while !stop {
            stop = y.suspend(black_box(1));
        }
    });
    let mut op = || match co.resume(false) {
        CoroutineResult::Yield(v) => v,
        CoroutineResult::Return(()) => 0,
    };
    if op() != 1 {
        eprintln!("the coroutine did not yield");
        std::process::exit(1);
    }
    let mut ns: Vec<f64> = (0..samples)
        .map(|_| time_ns(&mut op, Duration::from_millis(200)) / 2.0)
        .collect();
    ns.sort_by(f64::total_cmp);
    println!(
        "switch backend=corosensei fp_env=false median_ns={:.2} min_ns={:.2} max_ns={:.2} \
         samples={}",
        ns[ns.len() / 2],
        ns[0],
        ns[ns.len() - 1],
        ns.len()
    );
    if !matches!(co.resume(true), CoroutineResult::Return(())) {
        eprintln!("the coroutine did not return");
        std::process::exit(1);
    }
}
