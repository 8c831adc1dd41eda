//! Peer impls of the `sync` suite: std, parking_lot, tokio, may, crossbeam-channel, flume.
//! What each bench does and times: see `super`; the sizes are the constants there.

use std::hint::black_box;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::{
    CONTENDERS, INCREMENTS, MESSAGES, MPSC_CAP, MPSC_SUM, PING_PONG_CAP, PRODUCERS, ROUND_TRIPS,
};
use crate::harness::Ctx;
use crate::sched::per_op;

type RunResult = Result<Duration, String>;

// ---------------------------------------------------------------------------------------------
// mutex_uncontended

pub fn std_mutex_uncontended(ctx: &Ctx) -> Result<f64, String> {
    let m = std::sync::Mutex::new(0u64);
    let ns = ctx.time_ns(|| {
        *black_box(&m).lock().unwrap() += 1;
    });
    black_box(m.into_inner().unwrap());
    Ok(ns)
}

pub fn parking_lot_mutex_uncontended(ctx: &Ctx) -> Result<f64, String> {
    let m = parking_lot::Mutex::new(0u64);
    let ns = ctx.time_ns(|| {
        *black_box(&m).lock() += 1;
    });
    black_box(m.into_inner());
    Ok(ns)
}

// ---------------------------------------------------------------------------------------------
// tokio

fn tokio_rt() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))
}

fn tokio_run<F>(rt: &tokio::runtime::Runtime, f: F) -> RunResult
where
    F: Future<Output = RunResult> + Send + 'static,
{
    rt.block_on(rt.spawn(f))
        .map_err(|e| format!("root task: {e}"))?
}

fn join_err(e: tokio::task::JoinError) -> String {
    format!("task failed: {e}")
}

pub fn tokio_mutex_contended(ctx: &Ctx) -> Result<f64, String> {
    let rt = tokio_rt()?;
    per_op(ctx, CONTENDERS * INCREMENTS, || {
        tokio_run(&rt, async {
            let counter = Arc::new(tokio::sync::Mutex::new(0u64));
            let start = Instant::now();
            let handles: Vec<_> = (0..CONTENDERS)
                .map(|_| {
                    let counter = counter.clone();
                    tokio::spawn(async move {
                        for _ in 0..INCREMENTS {
                            *counter.lock().await += 1;
                        }
                    })
                })
                .collect();
            for h in handles {
                h.await.map_err(join_err)?;
            }
            let t = start.elapsed();
            let n = *counter.lock().await;
            if n != CONTENDERS * INCREMENTS {
                return Err(format!("count {n}, expected {}", CONTENDERS * INCREMENTS));
            }
            Ok(t)
        })
    })
}

pub fn tokio_ping_pong(ctx: &Ctx) -> Result<f64, String> {
    let rt = tokio_rt()?;
    per_op(ctx, ROUND_TRIPS, || {
        tokio_run(&rt, async {
            let (ping_tx, mut ping_rx) = tokio::sync::mpsc::channel::<u64>(PING_PONG_CAP);
            let (pong_tx, mut pong_rx) = tokio::sync::mpsc::channel::<u64>(PING_PONG_CAP);
            let partner = tokio::spawn(async move {
                while let Some(x) = ping_rx.recv().await {
                    if pong_tx.send(x).await.is_err() {
                        break;
                    }
                }
            });
            let start = Instant::now();
            for i in 0..ROUND_TRIPS {
                ping_tx.send(i).await.map_err(|_| "ping: partner gone")?;
                let back = pong_rx.recv().await.ok_or("pong: partner gone")?;
                if back != i {
                    return Err(format!("pong {back}, expected {i}"));
                }
            }
            let t = start.elapsed();
            drop(ping_tx);
            partner.await.map_err(join_err)?;
            Ok(t)
        })
    })
}

pub fn tokio_mpsc_4x1(ctx: &Ctx) -> Result<f64, String> {
    let rt = tokio_rt()?;
    per_op(ctx, MESSAGES, || {
        tokio_run(&rt, tokio_mpsc_4x1_task(MESSAGES))
    })
}

/// tokio's side of [`super::spindle::mpsc_4x1_in_runtime`], in a task of a tokio runtime.
pub async fn tokio_mpsc_4x1_task(messages: u64) -> RunResult {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<u64>(MPSC_CAP);
    let per = messages / PRODUCERS;
    let start = Instant::now();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let tx = tx.clone();
            tokio::spawn(async move {
                for i in 0..per {
                    if tx.send(p * per + i).await.is_err() {
                        break;
                    }
                }
            })
        })
        .collect();
    drop(tx);
    let mut sum = 0;
    while let Some(x) = rx.recv().await {
        sum += x;
    }
    let t = start.elapsed();
    for p in producers {
        p.await.map_err(join_err)?;
    }
    super::spindle::check_mpsc_sum(sum, per * PRODUCERS)?;
    Ok(t)
}

// ---------------------------------------------------------------------------------------------
// crossbeam-channel and flume: OS threads

/// Ping-pong between the measuring thread and a partner thread over `make()`'s channels.
fn thread_ping_pong<S, R>(
    ctx: &Ctx,
    make: impl Fn() -> (S, R),
    send: fn(&S, u64) -> bool,
    recv: fn(&R) -> Option<u64>,
) -> Result<f64, String>
where
    S: Send + 'static,
    R: Send + 'static,
{
    let (ping_tx, ping_rx) = make();
    let (pong_tx, pong_rx) = make();
    let partner = std::thread::spawn(move || {
        while let Some(x) = recv(&ping_rx) {
            if !send(&pong_tx, x) {
                break;
            }
        }
    });
    let result = per_op(ctx, ROUND_TRIPS, || {
        let start = Instant::now();
        for i in 0..ROUND_TRIPS {
            if !send(&ping_tx, i) {
                return Err("ping: partner gone".into());
            }
            let back = recv(&pong_rx).ok_or("pong: partner gone")?;
            if back != i {
                return Err(format!("pong {back}, expected {i}"));
            }
        }
        Ok(start.elapsed())
    });
    drop(ping_tx);
    partner
        .join()
        .map_err(|_| "the partner thread panicked".to_string())?;
    result
}

/// 4 producer threads, the measuring thread consumes; threads are started per run (inside the
/// timed part, as the coroutine impls spawn their producers inside it).
fn thread_mpsc_4x1<S, R>(
    ctx: &Ctx,
    make: impl Fn() -> (S, R),
    send: fn(&S, u64) -> bool,
    recv: fn(&R) -> Option<u64>,
) -> Result<f64, String>
where
    S: Clone + Send + 'static,
    R: Send + 'static,
{
    per_op(ctx, MESSAGES, || {
        let (tx, rx) = make();
        let per = MESSAGES / PRODUCERS;
        let start = Instant::now();
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for i in 0..per {
                        if !send(&tx, p * per + i) {
                            break;
                        }
                    }
                })
            })
            .collect();
        drop(tx);
        let mut sum = 0;
        while let Some(x) = recv(&rx) {
            sum += x;
        }
        let t = start.elapsed();
        for p in producers {
            p.join().map_err(|_| "a producer panicked".to_string())?;
        }
        if sum != MPSC_SUM {
            return Err(format!("sum {sum}, expected {MPSC_SUM}"));
        }
        Ok(t)
    })
}

pub fn crossbeam_ping_pong(ctx: &Ctx) -> Result<f64, String> {
    thread_ping_pong(
        ctx,
        || crossbeam_channel::bounded::<u64>(PING_PONG_CAP),
        |s, x| s.send(x).is_ok(),
        |r| r.recv().ok(),
    )
}

pub fn flume_ping_pong(ctx: &Ctx) -> Result<f64, String> {
    thread_ping_pong(
        ctx,
        || flume::bounded::<u64>(PING_PONG_CAP),
        |s, x| s.send(x).is_ok(),
        |r| r.recv().ok(),
    )
}

pub fn crossbeam_mpsc_4x1(ctx: &Ctx) -> Result<f64, String> {
    thread_mpsc_4x1(
        ctx,
        || crossbeam_channel::bounded::<u64>(MPSC_CAP),
        |s, x| s.send(x).is_ok(),
        |r| r.recv().ok(),
    )
}

pub fn flume_mpsc_4x1(ctx: &Ctx) -> Result<f64, String> {
    thread_mpsc_4x1(
        ctx,
        || flume::bounded::<u64>(MPSC_CAP),
        |s, x| s.send(x).is_ok(),
        |r| r.recv().ok(),
    )
}

// ---------------------------------------------------------------------------------------------
// may: coroutines on may's scheduler with 2 workers, in a child process per measurement

fn may_go<F, T>(f: F) -> may::coroutine::JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    // SAFETY: `may::coroutine::spawn` is unsafe because a coroutine may move between worker
    // threads at any blocking point (breaking thread-locals held across it) and because
    // blocking a worker with a thread primitive stalls its queue. These closures hold no
    // thread-local across a may blocking call and block only on may's own primitives.
    unsafe { may::coroutine::spawn(f) }
}

fn may_join<T>(h: may::coroutine::JoinHandle<T>) -> Result<T, String> {
    h.join().map_err(|_| "coroutine panicked".to_string())
}

/// Configures may's global scheduler once (2 workers, a coroutine pool for the 1000
/// contenders) and starts it outside the timing.
fn may_start() -> Result<(), String> {
    static CONFIGURED: OnceLock<()> = OnceLock::new();
    CONFIGURED.get_or_init(|| {
        may::config()
            .set_workers(2)
            .set_pool_capacity(CONTENDERS as usize + 100);
    });
    may_join(may_go(|| ()))
}

pub fn may_mutex_contended(ctx: &Ctx) -> Result<f64, String> {
    may_start()?;
    per_op(ctx, CONTENDERS * INCREMENTS, || {
        may_join(may_go(|| -> RunResult {
            let counter = Arc::new(may::sync::Mutex::new(0u64));
            let start = Instant::now();
            let handles: Vec<_> = (0..CONTENDERS)
                .map(|_| {
                    let counter = counter.clone();
                    may_go(move || {
                        for _ in 0..INCREMENTS {
                            *counter.lock().expect("may mutex") += 1;
                        }
                    })
                })
                .collect();
            for h in handles {
                may_join(h)?;
            }
            let t = start.elapsed();
            let n = *counter.lock().map_err(|_| "poisoned")?;
            if n != CONTENDERS * INCREMENTS {
                return Err(format!("count {n}, expected {}", CONTENDERS * INCREMENTS));
            }
            Ok(t)
        }))?
    })
}

pub fn may_ping_pong(ctx: &Ctx) -> Result<f64, String> {
    may_start()?;
    per_op(ctx, ROUND_TRIPS, || {
        may_join(may_go(|| -> RunResult {
            let (ping_tx, ping_rx) = may::sync::mpsc::channel::<u64>();
            let (pong_tx, pong_rx) = may::sync::mpsc::channel::<u64>();
            let partner = may_go(move || {
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
            may_join(partner)?;
            Ok(t)
        }))?
    })
}

pub fn may_mpsc_4x1(ctx: &Ctx) -> Result<f64, String> {
    may_start()?;
    per_op(ctx, MESSAGES, || {
        may_join(may_go(|| -> RunResult {
            let (tx, rx) = may::sync::mpsc::channel::<u64>();
            let per = MESSAGES / PRODUCERS;
            let start = Instant::now();
            let producers: Vec<_> = (0..PRODUCERS)
                .map(|p| {
                    let tx = tx.clone();
                    may_go(move || {
                        for i in 0..per {
                            if tx.send(p * per + i).is_err() {
                                break;
                            }
                        }
                    })
                })
                .collect();
            drop(tx);
            let mut sum = 0;
            while let Ok(x) = rx.recv() {
                sum += x;
            }
            let t = start.elapsed();
            for p in producers {
                may_join(p)?;
            }
            if sum != MPSC_SUM {
                return Err(format!("sum {sum}, expected {MPSC_SUM}"));
            }
            Ok(t)
        }))?
    })
}
