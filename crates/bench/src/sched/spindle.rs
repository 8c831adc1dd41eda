//! Spindle's impls of the `sched` suite's scheduler benches: one function per bench and
//! scheduling policy (`spindle-fifo`, `spindle-rr`, `spindle-ws`), each taking the worker count.
//!
//! Each builds a `spindle_rt::Runtime` with `workers` worker threads and the function's policy
//! (outside the timed part), then runs the workload's root coroutine through `block_on` and lets
//! it time itself from before its first spawn until it has seen every operation complete — as
//! the tokio and may impls in `super::peers` do, with the same sizes and the same checks.
//!
//! `ping_pong` and `chained_spawn` use `spindle_sync::oneshot`, as tokio's use its `oneshot`.
//!
//! (The timer wheel's `spindle` rows are in `super::timer`.)

use std::hint::black_box;
use std::time::{Duration, Instant};

use spindle_rt::{Policy, Runtime};

use super::{
    CHAIN_DEPTH, PING_PONGS, SKYNET_LEAVES, SKYNET_SUM, SPAWN_MANY, Workload, YIELD_TASKS,
    YIELDS_PER_TASK, per_op,
};
use crate::harness::Ctx;

type RunResult = Result<Duration, String>;

fn runtime(policy: Policy, workers: usize) -> Result<Runtime, String> {
    Runtime::builder()
        .workers(workers)
        .policy(policy)
        // The bench's CPU loops are the point; do not report them.
        .stuck_threshold(None)
        .build()
        .map_err(|e| e.to_string())
}

fn measure(ctx: &Ctx, policy: Policy, workers: usize, workload: Workload) -> Result<f64, String> {
    let rt = runtime(policy, workers)?;
    per_op(ctx, workload.ops(), || {
        rt.block_on(|| match workload {
            Workload::SpawnMany => spawn_many(),
            Workload::YieldMany => yield_many(),
            Workload::PingPong => ping_pong(),
            Workload::ChainedSpawn => chained_spawn(),
            Workload::Skynet => skynet_root(),
        })
    })
}

fn check_sum(what: &str, got: u64, want: u64) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: sum {got}, expected {want}"))
    }
}

fn join<T: Send + 'static>(h: spindle_rt::JoinHandle<T>) -> Result<T, String> {
    h.join().map_err(|e| format!("coroutine failed: {e}"))
}

fn spawn_many() -> RunResult {
    let start = Instant::now();
    let handles: Vec<_> = (0..SPAWN_MANY)
        .map(|i| spindle_rt::spawn(move || black_box(i) * 2))
        .collect();
    let mut sum = 0;
    for h in handles {
        sum += join(h)?;
    }
    let t = start.elapsed();
    check_sum("spawn_many", sum, SPAWN_MANY * (SPAWN_MANY - 1))?;
    Ok(t)
}

fn yield_many() -> RunResult {
    let start = Instant::now();
    let handles: Vec<_> = (0..YIELD_TASKS)
        .map(|_| {
            spindle_rt::spawn(|| {
                for _ in 0..YIELDS_PER_TASK {
                    spindle_rt::yield_now();
                }
            })
        })
        .collect();
    for h in handles {
        join(h)?;
    }
    Ok(start.elapsed())
}

fn ping_pong() -> RunResult {
    let start = Instant::now();
    let handles: Vec<_> = (0..PING_PONGS)
        .map(|_| {
            spindle_rt::spawn(|| {
                let (ping_tx, ping_rx) = spindle_sync::oneshot::channel::<()>();
                let (pong_tx, pong_rx) = spindle_sync::oneshot::channel::<()>();
                spindle_rt::spawn(move || {
                    ping_rx.recv().unwrap();
                    pong_tx.send(()).unwrap();
                });
                ping_tx.send(()).unwrap();
                pong_rx.recv().unwrap();
            })
        })
        .collect();
    for h in handles {
        join(h)?;
    }
    Ok(start.elapsed())
}

fn chained_spawn() -> RunResult {
    fn link(done: spindle_sync::oneshot::Sender<()>, n: u64) {
        if n == 0 {
            let _ = done.send(());
        } else {
            spindle_rt::spawn(move || link(done, n - 1));
        }
    }
    let start = Instant::now();
    let (done_tx, done_rx) = spindle_sync::oneshot::channel();
    link(done_tx, CHAIN_DEPTH);
    done_rx
        .recv()
        .map_err(|_| "the chain ended without a message".to_string())?;
    Ok(start.elapsed())
}

/// A skynet node: `size` leaves below it, the first numbered `num`. Nodes run on shared
/// (copying) stacks: up to hundreds of thousands are alive at once, more than the kernel's
/// `vm.max_map_count` allows guarded stacks.
fn skynet(num: u64, size: u64) -> u64 {
    if size == 1 {
        return num;
    }
    let step = size / 10;
    let children: Vec<_> = (0..10u64)
        .map(|i| {
            // SAFETY: a skynet node lends nothing on its stack: it only spawns, joins and adds.
            unsafe { spindle_rt::Builder::new().shared_stack() }
                .spawn(move || skynet(num + i * step, step))
                .expect("spawn a skynet node")
        })
        .collect();
    children
        .into_iter()
        .map(|c| c.join().expect("skynet node"))
        .sum()
}

fn skynet_root() -> RunResult {
    let start = Instant::now();
    let sum = skynet(0, SKYNET_LEAVES);
    let t = start.elapsed();
    check_sum("skynet", sum, SKYNET_SUM)?;
    Ok(t)
}

macro_rules! per_policy {
    ($($bench:ident: $workload:expr => $fifo:ident, $rr:ident, $ws:ident;)*) => {$(
        #[doc = concat!("`", stringify!($bench), "` with the FIFO policy (`spindle-fifo`).")]
        pub fn $fifo(ctx: &Ctx, workers: usize) -> Result<f64, String> {
            measure(ctx, Policy::Fifo, workers, $workload)
        }
        #[doc = concat!("`", stringify!($bench), "` with the round-robin policy (`spindle-rr`).")]
        pub fn $rr(ctx: &Ctx, workers: usize) -> Result<f64, String> {
            measure(ctx, Policy::RoundRobin, workers, $workload)
        }
        #[doc = concat!("`", stringify!($bench), "` with the work-stealing policy (`spindle-ws`).")]
        pub fn $ws(ctx: &Ctx, workers: usize) -> Result<f64, String> {
            measure(ctx, Policy::WorkStealing, workers, $workload)
        }
    )*};
}

per_policy! {
    spawn_many: Workload::SpawnMany => spawn_many_fifo, spawn_many_rr, spawn_many_ws;
    yield_many: Workload::YieldMany => yield_many_fifo, yield_many_rr, yield_many_ws;
    ping_pong: Workload::PingPong => ping_pong_fifo, ping_pong_rr, ping_pong_ws;
    chained_spawn: Workload::ChainedSpawn => chained_spawn_fifo, chained_spawn_rr, chained_spawn_ws;
    skynet: Workload::Skynet => skynet_fifo, skynet_rr, skynet_ws;
}
