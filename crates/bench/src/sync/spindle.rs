//! Spindle's impls of the `sync` suite: `spindle-sync` primitives, in coroutines of a
//! `spindle_rt` runtime with 2 workers (work-stealing), except `mutex_uncontended` (one plain
//! thread: the fast path is the same). What each bench does and times: see `super`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use spindle_rt::Runtime;
use spindle_sync::{Mutex, mpsc};

use super::{CONTENDERS, INCREMENTS, MESSAGES, MPSC_CAP, PING_PONG_CAP, PRODUCERS, ROUND_TRIPS};
use crate::harness::Ctx;
use crate::sched::per_op;

type RunResult = Result<Duration, String>;

fn runtime() -> Result<Runtime, String> {
    Runtime::builder()
        .workers(2)
        // The benches' CPU loops are the point; do not report them.
        .stuck_threshold(None)
        .build()
        .map_err(|e| e.to_string())
}

fn join<T: Send + 'static>(h: spindle_rt::JoinHandle<T>) -> Result<T, String> {
    h.join().map_err(|e| format!("coroutine failed: {e}"))
}

pub fn mutex_uncontended(ctx: &Ctx) -> Result<f64, String> {
    let m = Mutex::new(0u64);
    let ns = ctx.time_ns(|| {
        *black_box(&m).lock() += 1;
    });
    black_box(m.into_inner());
    Ok(ns)
}

pub fn mutex_contended(ctx: &Ctx) -> Result<f64, String> {
    let rt = runtime()?;
    per_op(ctx, CONTENDERS * INCREMENTS, || {
        rt.block_on(|| -> RunResult {
            let counter = Arc::new(Mutex::new(0u64));
            let start = Instant::now();
            let handles: Vec<_> = (0..CONTENDERS)
                .map(|_| {
                    let counter = counter.clone();
                    spindle_rt::spawn(move || {
                        for _ in 0..INCREMENTS {
                            *counter.lock() += 1;
                        }
                    })
                })
                .collect();
            for h in handles {
                join(h)?;
            }
            let t = start.elapsed();
            let n = *counter.lock();
            if n != CONTENDERS * INCREMENTS {
                return Err(format!("count {n}, expected {}", CONTENDERS * INCREMENTS));
            }
            Ok(t)
        })
    })
}

pub fn chan_ping_pong(ctx: &Ctx) -> Result<f64, String> {
    let rt = runtime()?;
    per_op(ctx, ROUND_TRIPS, || {
        rt.block_on(|| -> RunResult {
            let (ping_tx, ping_rx) = mpsc::bounded::<u64>(PING_PONG_CAP);
            let (pong_tx, pong_rx) = mpsc::bounded::<u64>(PING_PONG_CAP);
            let partner = spindle_rt::spawn(move || {
                while let Ok(x) = ping_rx.recv() {
                    if pong_tx.send(x).is_err() {
                        break;
                    }
                }
            });
            let start = Instant::now();
            for i in 0..ROUND_TRIPS {
                ping_tx.send(i).map_err(|_| "ping: partner gone")?;
                let back = pong_rx.recv().map_err(|_| "pong: partner gone")?;
                if back != i {
                    return Err(format!("pong {back}, expected {i}"));
                }
            }
            let t = start.elapsed();
            drop(ping_tx);
            join(partner)?;
            Ok(t)
        })
    })
}

pub fn chan_mpsc_4x1(ctx: &Ctx) -> Result<f64, String> {
    let rt = runtime()?;
    per_op(ctx, MESSAGES, || {
        rt.block_on(|| mpsc_4x1_in_runtime(MESSAGES))
    })
}

/// `chan_mpsc_4x1`'s workload, in a runtime's coroutine: [`PRODUCERS`] coroutines send
/// `messages` (a multiple of [`PRODUCERS`]) into one bounded channel of capacity
/// [`MPSC_CAP`], and the caller receives and sums them. Returns the time from the first spawn
/// to the last message received (the `instr` suite runs it too, on one worker).
pub fn mpsc_4x1_in_runtime(messages: u64) -> RunResult {
    let (tx, rx) = mpsc::bounded::<u64>(MPSC_CAP);
    let per = messages / PRODUCERS;
    let start = Instant::now();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let tx = tx.clone();
            spindle_rt::spawn(move || {
                for i in 0..per {
                    if tx.send(p * per + i).is_err() {
                        break;
                    }
                }
            })
        })
        .collect();
    drop(tx);
    let sum: u64 = rx.iter().sum();
    let t = start.elapsed();
    for p in producers {
        join(p)?;
    }
    check_mpsc_sum(sum, per * PRODUCERS)?;
    Ok(t)
}

/// Checks that the channel delivered `0..sent` exactly once each, by their sum.
pub fn check_mpsc_sum(sum: u64, sent: u64) -> Result<(), String> {
    let expected = sent * sent.saturating_sub(1) / 2;
    if sum == expected {
        Ok(())
    } else {
        Err(format!(
            "sum {sum}, expected {expected}: the channel lost or duplicated messages"
        ))
    }
}
