//! `timer_insert_cancel_1k` / `_1m`: insert one timer and cancel it with `pending` others
//! pending (see `super::timer_insert_cancel` for what is timed). `spindle`:
//! `spindle_timer::TimerWheel`; `btreemap`: the `BTreeMap<(Instant, u64), T>` baseline.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use spindle_timer::TimerWheel;

use crate::harness::Ctx;

/// Deadlines are spread uniformly over `[origin + 1 ms, origin + SPREAD)`.
const SPREAD: Duration = Duration::from_secs(600);
/// The inserted-and-cancelled timer's deadline cycles through this many (a power of two).
const PROBES: usize = 4096;

/// `count` pseudo-random deadlines (xorshift64*, fixed seed: every impl gets the same ones).
fn deadlines(origin: Instant, count: usize, seed: u64) -> Vec<Instant> {
    let mut x = seed | 1;
    let span_ns = (SPREAD - Duration::from_millis(1)).as_nanos() as u64;
    (0..count)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
            origin + Duration::from_millis(1) + Duration::from_nanos(r % span_ns)
        })
        .collect()
}

/// `spindle`: a `TimerWheel<u64>` holding `pending` timers; times `insert` + `cancel` of one
/// more.
pub fn spindle_insert_cancel(ctx: &Ctx, pending: usize) -> Result<f64, String> {
    let origin = Instant::now();
    let mut wheel = TimerWheel::<u64>::new(origin);
    for (i, d) in deadlines(origin, pending, 0x5eed).into_iter().enumerate() {
        wheel.insert(d, i as u64);
    }
    let probes = deadlines(origin, PROBES, 0xcafe);
    let key = wheel.insert(probes[0], 7);
    if wheel.cancel(key) != Some(7) {
        return Err("cancel did not return the inserted value".into());
    }
    let mut k = 0;
    Ok(ctx.time_ns(|| {
        k = (k + 1) & (PROBES - 1);
        let key = wheel.insert(probes[k], k as u64);
        wheel.cancel(key)
    }))
}

/// `btreemap`: a `BTreeMap<(Instant, u64), u64>` holding `pending` timers (the `u64` of the key
/// a sequence number, so that equal deadlines stay distinct); times `insert` + `remove` of one
/// more.
pub fn btreemap_insert_cancel(ctx: &Ctx, pending: usize) -> Result<f64, String> {
    let origin = Instant::now();
    let mut map = BTreeMap::<(Instant, u64), u64>::new();
    let mut seq = 0u64;
    for (i, d) in deadlines(origin, pending, 0x5eed).into_iter().enumerate() {
        map.insert((d, seq), i as u64);
        seq += 1;
    }
    let probes = deadlines(origin, PROBES, 0xcafe);
    let mut k = 0;
    Ok(ctx.time_ns(|| {
        k = (k + 1) & (PROBES - 1);
        let key = (probes[k], seq);
        seq += 1;
        map.insert(key, k as u64);
        map.remove(&key)
    }))
}
