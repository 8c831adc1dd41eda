//! The `sched` suite: scheduler throughput (spawn, yield, message ping-pong, chained spawn,
//! skynet) with 1 and 2 worker threads, and the timer wheel's insert + cancel.
//!
//! Peer impls live in [`peers`] (tokio, may, std threads), [`go`] (skynet in Go) and
//! [`timer`] (the `btreemap` baseline); Spindle's in [`spindle`] and [`timer`]. Bench and impl
//! names are the keys of the JSON report and of docs/benchmarks.md: do not rename them.
//!
//! # How the multi-op benches are timed
//!
//! Each measurement builds the runtime once (tokio's `Runtime`, may's scheduler, the pinned
//! driver thread of the std-thread rows), outside the timed part. It then runs the bench's whole
//! workload once as a warm-up, and then again and again until about [`Ctx::target`] has
//! passed, timing each run with [`Instant`]; the value is the timed total divided by
//! `runs * ops` (see [`per_op`]). Unless a bench says otherwise, a run is timed from inside the
//! runtime: the clock starts in a root task/coroutine already running on a worker, before its
//! first spawn, and stops in that same task once it has seen every op of the workload complete,
//! so neither runtime start-up nor the hand-off from the caller's thread into the runtime and
//! back is counted. With `--quick`, skynet (a tree takes about a second) skips the warm-up.
//!
//! `_w1` / `_w2`: 1 / 2 worker threads (`worker_threads(n)`, `may::config().set_workers(n)`,
//! and for std threads the driver and every thread it starts are pinned to the first `n` CPUs
//! this process may run on). `tokio-ct` (the current-thread runtime) is a `_w1` row only.
//!
//! `may` rows run in a child process per measurement: may's scheduler is global and reads its
//! worker count once, when it starts.

mod go;
mod peers;
mod spindle;
mod timer;

use std::time::{Duration, Instant};

use crate::harness::{Bench, Ctx, Impl, Suite, Unit};

/// `spawn_many`: tasks spawned per run (tokio's `spawn_many_local`).
pub const SPAWN_MANY: u64 = 10_000;
/// `yield_many`: tasks per run and yields per task (tokio's `yield_many`).
pub const YIELD_TASKS: u64 = 200;
pub const YIELDS_PER_TASK: u64 = 1_000;
/// `ping_pong`: pairs per run, each exchanging one ping and one pong (tokio's `ping_pong`);
/// for the std-thread row, round trips per run between its two threads.
pub const PING_PONGS: u64 = 1_000;
/// `chained_spawn`: chain depth (tokio's `chained_spawn`).
pub const CHAIN_DEPTH: u64 = 1_000;
/// `skynet`: leaves (the tree has `SKYNET_LEAVES * 10 / 9` nodes, every one a task).
pub const SKYNET_LEAVES: u64 = 1_000_000;
/// `skynet`: tasks spawned per run, the root included: 1 + 10 + ... + 10^6.
pub const SKYNET_TASKS: u64 = 1_111_111;
/// `skynet`: the sum of the leaves' ids 0..10^6.
pub const SKYNET_SUM: u64 = SKYNET_LEAVES * (SKYNET_LEAVES - 1) / 2;

/// See [`per_op`].
const QUICK_NO_WARMUP_OPS: u64 = 1_000_000;

/// The scheduler workloads, shared by every impl.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    SpawnMany,
    YieldMany,
    PingPong,
    ChainedSpawn,
    Skynet,
}

impl Workload {
    /// The operations one run counts: the divisor of the timed total.
    pub fn ops(self) -> u64 {
        match self {
            Workload::SpawnMany => SPAWN_MANY,
            Workload::YieldMany => YIELD_TASKS * YIELDS_PER_TASK,
            Workload::PingPong => 2 * PING_PONGS,
            Workload::ChainedSpawn => CHAIN_DEPTH,
            Workload::Skynet => SKYNET_TASKS,
        }
    }

    /// The bench's name with `workers` worker threads.
    fn bench_name(self, workers: usize) -> &'static str {
        match (self, workers) {
            (Workload::SpawnMany, 1) => "spawn_many_w1",
            (Workload::SpawnMany, 2) => "spawn_many_w2",
            (Workload::YieldMany, 1) => "yield_many_w1",
            (Workload::YieldMany, 2) => "yield_many_w2",
            (Workload::PingPong, 1) => "ping_pong_w1",
            (Workload::PingPong, 2) => "ping_pong_w2",
            (Workload::ChainedSpawn, 1) => "chained_spawn_w1",
            (Workload::ChainedSpawn, 2) => "chained_spawn_w2",
            (Workload::Skynet, 2) => "skynet_w2",
            (w, n) => panic!("no {w:?} bench with {n} workers"),
        }
    }
}

/// Nanoseconds per op of a multi-op workload: runs `run` once as a warm-up, then until about
/// `ctx.target` of wall time has passed (at least once); returns the sum of the durations the
/// runs report divided by `runs * ops`. `run` performs one whole workload and returns the time
/// it measured itself (so that it decides what is timed: see the module docs).
///
/// With `--quick`, workloads of [`QUICK_NO_WARMUP_OPS`] ops or more (skynet: a run takes
/// seconds) skip the warm-up run; impls start their runtime before calling this anyway.
pub fn per_op(
    ctx: &Ctx,
    ops: u64,
    mut run: impl FnMut() -> Result<Duration, String>,
) -> Result<f64, String> {
    if !(ctx.quick && ops >= QUICK_NO_WARMUP_OPS) {
        run()?;
    }
    let wall = Instant::now();
    let mut timed = Duration::ZERO;
    let mut runs: u64 = 0;
    while runs == 0 || wall.elapsed() < ctx.target {
        timed += run()?;
        runs += 1;
    }
    Ok(timed.as_nanos() as f64 / (runs * ops) as f64)
}

pub fn suite() -> Suite {
    Suite {
        name: "sched",
        about: "scheduler spawn/yield/ping-pong/chained spawn/skynet with 1 and 2 workers; timer \
                wheel insert+cancel",
        benches: vec![
            spawn_many::<1>(),
            spawn_many::<2>(),
            yield_many::<1>(),
            yield_many::<2>(),
            ping_pong::<1>(),
            ping_pong::<2>(),
            chained_spawn::<1>(),
            chained_spawn::<2>(),
            skynet::<2>(),
            timer_insert_cancel(
                "timer_insert_cancel_1k",
                |c| timer::spindle_insert_cancel(c, 1_000),
                |c| timer::btreemap_insert_cancel(c, 1_000),
            ),
            timer_insert_cancel(
                "timer_insert_cancel_1m",
                |c| timer::spindle_insert_cancel(c, 1_000_000),
                |c| timer::btreemap_insert_cancel(c, 1_000_000),
            ),
        ],
    }
}

/// A scheduler bench: `tokio-mt` is the reference; `tokio-ct` is added to `_w1` benches.
fn task_bench(workload: Workload, workers: usize, mut impls: Vec<Impl>, ct: Impl) -> Bench {
    if workers == 1 {
        let at = impls
            .iter()
            .position(|i| i.name == "tokio-mt")
            .map_or(impls.len(), |p| p + 1);
        impls.insert(at, ct);
    }
    Bench {
        name: workload.bench_name(workers),
        unit: Unit::Ns,
        reference: Some("tokio-mt"),
        published: &[],
        full_only: false,
        impls,
    }
}

/// `spawn_many_w{W}`: ns per spawned task. From inside the runtime (a root task/coroutine on a
/// worker) spawn [`SPAWN_MANY`] tasks that each return `black_box(i) * 2`, then join/await all
/// of them in spawn order and check the sum. Timed: from before the first spawn to after the
/// last join, inside the root task. The shape of tokio's `benches/rt_multi_threaded.rs`
/// `spawn_many_local`, with the spawning done by a task rather than `block_on`'s thread.
///
/// `std-thread`: `std::thread::spawn` of as many threads from a driver thread pinned to W CPUs,
/// then `join` of all (its threads inherit the pinning), timed on the driver thread.
fn spawn_many<const W: usize>() -> Bench {
    task_bench(
        Workload::SpawnMany,
        W,
        vec![
            Impl::in_process("spindle-fifo", |c| spindle::spawn_many_fifo(c, W)),
            Impl::in_process("spindle-rr", |c| spindle::spawn_many_rr(c, W)),
            Impl::in_process("spindle-ws", |c| spindle::spawn_many_ws(c, W)),
            Impl::in_process("tokio-mt", |c| peers::tokio_mt(c, Workload::SpawnMany, W)),
            Impl::child("may", |c| peers::may(c, Workload::SpawnMany, W)),
            Impl::in_process("std-thread", |c| {
                peers::std_thread(c, Workload::SpawnMany, W)
            }),
        ],
        Impl::in_process("tokio-ct", |c| peers::tokio_ct(c, Workload::SpawnMany)),
    )
}

/// `yield_many_w{W}`: ns per yield. From a root task, spawn [`YIELD_TASKS`] tasks that each
/// yield [`YIELDS_PER_TASK`] times (`tokio::task::yield_now`, `may::coroutine::yield_now`), and
/// join them all; the total time divided by the 200,000 yields. Timed: from before the first
/// spawn to after the last join, inside the root task (the 200 spawns and joins are included,
/// about 0.5 % of the ops). tokio's `yield_many` shape.
///
/// No `std-thread` row: `std::thread::yield_now` is a `sched_yield` syscall whose cost depends
/// on what else the kernel has runnable, not a hand-off between tasks of one scheduler.
fn yield_many<const W: usize>() -> Bench {
    task_bench(
        Workload::YieldMany,
        W,
        vec![
            Impl::in_process("spindle-fifo", |c| spindle::yield_many_fifo(c, W)),
            Impl::in_process("spindle-rr", |c| spindle::yield_many_rr(c, W)),
            Impl::in_process("spindle-ws", |c| spindle::yield_many_ws(c, W)),
            Impl::in_process("tokio-mt", |c| peers::tokio_mt(c, Workload::YieldMany, W)),
            Impl::child("may", |c| peers::may(c, Workload::YieldMany, W)),
        ],
        Impl::in_process("tokio-ct", |c| peers::tokio_ct(c, Workload::YieldMany)),
    )
}

/// `ping_pong_w{W}`: ns per message. tokio's `ping_pong` shape: a root task spawns
/// [`PING_PONGS`] tasks; each creates two one-shot channels, spawns its partner, sends it a
/// ping and awaits the pong, which the partner sends once it has the ping. The root joins the
/// 1,000 tasks; 2,000 messages per run, and the 2,000 spawns are part of what is timed (as in
/// tokio's bench). spindle: `spindle_sync::oneshot`; tokio: `tokio::sync::oneshot`; may:
/// `may::sync::mpsc` (may has no one-shot channel). Timed: from before the first spawn to after the last join, inside the root task.
///
/// `std-thread`: two threads (started once per measurement, outside the timed part, pinned to
/// W CPUs) exchanging [`PING_PONGS`] ping/pong round trips over `std::sync::mpsc`; timed on
/// the pinging thread, 2,000 messages per run. No spawns are timed in that row.
fn ping_pong<const W: usize>() -> Bench {
    task_bench(
        Workload::PingPong,
        W,
        vec![
            Impl::in_process("spindle-fifo", |c| spindle::ping_pong_fifo(c, W)),
            Impl::in_process("spindle-rr", |c| spindle::ping_pong_rr(c, W)),
            Impl::in_process("spindle-ws", |c| spindle::ping_pong_ws(c, W)),
            Impl::in_process("tokio-mt", |c| peers::tokio_mt(c, Workload::PingPong, W)),
            Impl::child("may", |c| peers::may(c, Workload::PingPong, W)),
            Impl::in_process("std-thread", |c| {
                peers::std_thread(c, Workload::PingPong, W)
            }),
        ],
        Impl::in_process("tokio-ct", |c| peers::tokio_ct(c, Workload::PingPong)),
    )
}

/// `chained_spawn_w{W}`: ns per spawn. tokio's `chained_spawn` shape: the root task spawns a
/// task that spawns the next, and so on, [`CHAIN_DEPTH`] deep; the last one signals the root
/// over a one-shot channel (spindle and tokio `oneshot`, may `mpsc`). Timed: from before the first spawn to
/// the root receiving the signal, inside the root task.
///
/// `std-thread`: each thread spawns the next (detached) and exits; the driver thread, pinned to
/// W CPUs, starts the chain and waits for the last thread's `std::sync::mpsc` message.
fn chained_spawn<const W: usize>() -> Bench {
    task_bench(
        Workload::ChainedSpawn,
        W,
        vec![
            Impl::in_process("spindle-fifo", |c| spindle::chained_spawn_fifo(c, W)),
            Impl::in_process("spindle-rr", |c| spindle::chained_spawn_rr(c, W)),
            Impl::in_process("spindle-ws", |c| spindle::chained_spawn_ws(c, W)),
            Impl::in_process("tokio-mt", |c| {
                peers::tokio_mt(c, Workload::ChainedSpawn, W)
            }),
            Impl::child("may", |c| peers::may(c, Workload::ChainedSpawn, W)),
            Impl::in_process("std-thread", |c| {
                peers::std_thread(c, Workload::ChainedSpawn, W)
            }),
        ],
        Impl::in_process("tokio-ct", |c| peers::tokio_ct(c, Workload::ChainedSpawn)),
    )
}

/// `skynet_w{W}`: ns per task, for the skynet benchmark (github.com/atemerev/skynet): a 10-ary
/// tree of tasks, 6 levels below the root, 1,000,000 leaves each returning its id, every inner
/// node spawning its 10 children, joining them and returning their sum; the value is the time
/// of one whole tree divided by the [`SKYNET_TASKS`] (1,111,111) tasks, root included. The sum
/// is checked. Timed: inside the root task, from its start to its sum.
///
/// `go`: crates/bench/go/skynet.go (goroutines and unbuffered channels, the original's Go
/// version), built with `go build` at bench time and run with `GOMAXPROCS=W`; it times itself
/// the same way (runtime start-up excluded). Errors if `go` is not installed. No `std-thread`
/// row (1.1 M OS threads) and no `tokio-ct` (W = 2 only).
///
/// `may` errors out on a Linux machine with default limits: its FIFO run queues walk the tree
/// breadth-first, so hundreds of thousands of coroutines are alive at once, and their stacks
/// (2 memory maps each) exceed `vm.max_map_count` (65,530 by default; it failed at 1,048,576
/// too, after 40 s and 4.8 GB). The run stops at the first failed spawn and reports it.
fn skynet<const W: usize>() -> Bench {
    Bench {
        name: Workload::Skynet.bench_name(W),
        unit: Unit::Ns,
        reference: Some("tokio-mt"),
        published: &[],
        full_only: false,
        impls: vec![
            Impl::in_process("spindle-fifo", |c| spindle::skynet_fifo(c, W)),
            Impl::in_process("spindle-rr", |c| spindle::skynet_rr(c, W)),
            Impl::in_process("spindle-ws", |c| spindle::skynet_ws(c, W)),
            Impl::in_process("tokio-mt", |c| peers::tokio_mt(c, Workload::Skynet, W)),
            Impl::child("may", |c| peers::may(c, Workload::Skynet, W)),
            Impl::in_process("go", |c| go::skynet(c, W)),
        ],
    }
}

/// `timer_insert_cancel_1k` / `_1m`: ns per insert + cancel pair. With 1,000 / 1,000,000 other
/// timers pending (deadlines spread uniformly over the next 10 minutes, inserted before the
/// timing starts), insert one timer and cancel it again; the new timer's deadline cycles
/// through 4,096 precomputed ones from the same spread, so the inserts land in every level of
/// a wheel. Timed with [`Ctx::time_ns`]: only the insert and the cancel. `spindle`:
/// `spindle_timer::TimerWheel<u64>` (`insert` returns a `TimerKey`, `cancel(key)`);
/// `btreemap` (the reference): a `BTreeMap<(Instant, u64), u64>`, the `u64` a sequence number
/// that keeps keys unique, cancelled with `remove`.
fn timer_insert_cancel(
    name: &'static str,
    spindle: crate::harness::MeasureFn,
    btreemap: crate::harness::MeasureFn,
) -> Bench {
    Bench {
        name,
        unit: Unit::Ns,
        reference: Some("btreemap"),
        published: &[],
        full_only: false,
        impls: vec![
            Impl::in_process("spindle", spindle),
            Impl::in_process("btreemap", btreemap),
        ],
    }
}
