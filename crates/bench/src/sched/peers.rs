//! Peer impls of the `sched` suite's scheduler benches: tokio (multi-thread and current-thread
//! runtimes), may, std threads. What each bench does and times is in the doc comments of the
//! bench functions in `super`; the sizes are the constants there.

use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{
    CHAIN_DEPTH, PING_PONGS, SKYNET_LEAVES, SKYNET_SUM, SPAWN_MANY, Workload, YIELD_TASKS,
    YIELDS_PER_TASK, per_op,
};
use crate::harness::Ctx;

/// What one run of a workload returns: the time it measured, or what went wrong.
type RunResult = Result<Duration, String>;

/// The sum `spawn_many` expects: every task returns `2 * i`.
const SPAWN_MANY_SUM: u64 = SPAWN_MANY * (SPAWN_MANY - 1);

fn check_sum(what: &str, got: u64, want: u64) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: sum {got}, expected {want}"))
    }
}

// ---------------------------------------------------------------------------------------------
// tokio
// ---------------------------------------------------------------------------------------------

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// `tokio-mt`: the multi-thread runtime with `workers` worker threads.
///
/// Built once per measurement (not timed) with `enable_all`, as tokio's own benches do (with
/// this crate's tokio features that is the timer driver only). Each run spawns the workload's
/// root task onto the runtime and `block_on`s its `JoinHandle`; the root task times itself.
pub fn tokio_mt(ctx: &Ctx, workload: Workload, workers: usize) -> Result<f64, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    tokio_measure(ctx, &rt, workload)
}

/// `tokio-ct`: the current-thread runtime (one thread: the caller's, inside `block_on`).
pub fn tokio_ct(ctx: &Ctx, workload: Workload) -> Result<f64, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    tokio_measure(ctx, &rt, workload)
}

fn tokio_measure(
    ctx: &Ctx,
    rt: &tokio::runtime::Runtime,
    workload: Workload,
) -> Result<f64, String> {
    per_op(ctx, workload.ops(), || {
        let root = rt.spawn(tokio_workload(workload));
        rt.block_on(root).map_err(|e| format!("root task: {e}"))?
    })
}

/// The root task of one run.
fn tokio_workload(workload: Workload) -> BoxFuture<RunResult> {
    match workload {
        Workload::SpawnMany => Box::pin(tokio_spawn_many()),
        Workload::YieldMany => Box::pin(tokio_yield_many()),
        Workload::PingPong => Box::pin(tokio_ping_pong()),
        Workload::ChainedSpawn => Box::pin(tokio_chained_spawn()),
        Workload::Skynet => Box::pin(tokio_skynet_root()),
    }
}

fn join_err(e: tokio::task::JoinError) -> String {
    format!("task failed: {e}")
}

async fn tokio_spawn_many() -> RunResult {
    let start = Instant::now();
    let mut handles = Vec::with_capacity(SPAWN_MANY as usize);
    for i in 0..SPAWN_MANY {
        handles.push(tokio::spawn(async move { black_box(i) * 2 }));
    }
    let mut sum = 0;
    for h in handles {
        sum += h.await.map_err(join_err)?;
    }
    let t = start.elapsed();
    check_sum("spawn_many", sum, SPAWN_MANY_SUM)?;
    Ok(t)
}

async fn tokio_yield_many() -> RunResult {
    let start = Instant::now();
    let mut handles = Vec::with_capacity(YIELD_TASKS as usize);
    for _ in 0..YIELD_TASKS {
        handles.push(tokio::spawn(async {
            for _ in 0..YIELDS_PER_TASK {
                tokio::task::yield_now().await;
            }
        }));
    }
    for h in handles {
        h.await.map_err(join_err)?;
    }
    Ok(start.elapsed())
}

async fn tokio_ping_pong() -> RunResult {
    use tokio::sync::oneshot;
    let start = Instant::now();
    let mut handles = Vec::with_capacity(PING_PONGS as usize);
    for _ in 0..PING_PONGS {
        handles.push(tokio::spawn(async {
            let (ping_tx, ping_rx) = oneshot::channel::<()>();
            let (pong_tx, pong_rx) = oneshot::channel::<()>();
            tokio::spawn(async move {
                if ping_rx.await.is_ok() {
                    let _ = pong_tx.send(());
                }
            });
            ping_tx.send(()).map_err(|()| "ping: partner gone")?;
            pong_rx.await.map_err(|_| "pong: partner gone")
        }));
    }
    for h in handles {
        h.await.map_err(join_err)??;
    }
    Ok(start.elapsed())
}

async fn tokio_chained_spawn() -> RunResult {
    fn link(done: tokio::sync::oneshot::Sender<()>, n: u64) {
        if n == 0 {
            let _ = done.send(());
        } else {
            tokio::spawn(async move { link(done, n - 1) });
        }
    }
    let start = Instant::now();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    link(done_tx, CHAIN_DEPTH);
    done_rx.await.map_err(|_| "chain broken")?;
    Ok(start.elapsed())
}

/// A skynet node: `size` leaves below it, the first numbered `num`.
fn tokio_skynet(num: u64, size: u64) -> BoxFuture<u64> {
    Box::pin(async move {
        if size == 1 {
            return num;
        }
        let step = size / 10;
        let children: [_; 10] =
            std::array::from_fn(|i| tokio::spawn(tokio_skynet(num + i as u64 * step, step)));
        let mut sum = 0;
        for c in children {
            sum += c.await.expect("skynet child task panicked");
        }
        sum
    })
}

async fn tokio_skynet_root() -> RunResult {
    let start = Instant::now();
    let sum = tokio_skynet(0, SKYNET_LEAVES).await;
    let t = start.elapsed();
    check_sum("skynet", sum, SKYNET_SUM)?;
    Ok(t)
}

// ---------------------------------------------------------------------------------------------
// may
// ---------------------------------------------------------------------------------------------

/// Spawns a may coroutine.
fn may_go<F, T>(f: F) -> may::coroutine::JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    // SAFETY: `may::coroutine::spawn` is unsafe because a coroutine may move between worker
    // threads at any blocking point, which breaks thread-local storage held across it, and
    // because blocking a worker with a thread primitive stalls its queue. The closures of this
    // module hold no thread-local across a yield or a may blocking call (they only use
    // `Instant`, `black_box`, may's own channels, join handles and `yield_now`) and never
    // block on a std primitive.
    unsafe { may::coroutine::spawn(f) }
}

fn may_join<T>(h: may::coroutine::JoinHandle<T>) -> Result<T, String> {
    h.join().map_err(|_| "coroutine panicked".to_string())
}

/// `may`: coroutines on may's scheduler with `may::config().set_workers(workers)` and may's
/// other defaults (workers pinned to cores, 32 KiB stacks on 64-bit), except the coroutine
/// pool: [`may_pool_capacity`]. Runs in a child process: may's scheduler is global and starts,
/// with the configuration it reads then, at the first spawn, which happens here before
/// [`per_op`]. Each run spawns the root coroutine and joins it from this (non-may) thread; the
/// root times itself.
pub fn may(ctx: &Ctx, workload: Workload, workers: usize) -> Result<f64, String> {
    static CONFIGURED: OnceLock<(usize, Workload)> = OnceLock::new();
    let configured = *CONFIGURED.get_or_init(|| {
        may::config()
            .set_workers(workers)
            .set_pool_capacity(may_pool_capacity(workload));
        (workers, workload)
    });
    if configured != (workers, workload) {
        return Err(format!(
            "may's scheduler in this process is already configured for {configured:?}; \
             measure may rows in a child process (`Impl::child`)"
        ));
    }
    // Start the scheduler (and fill its pool) outside any timing.
    may_join(may_go(|| ()))?;
    per_op(ctx, workload.ops(), || {
        let root = match workload {
            Workload::SpawnMany => may_go(may_spawn_many),
            Workload::YieldMany => may_go(may_yield_many),
            Workload::PingPong => may_go(may_ping_pong),
            Workload::ChainedSpawn => may_go(may_chained_spawn),
            Workload::Skynet => may_go(may_skynet_root),
        };
        may_join(root)?
    })
}

/// may keeps finished coroutines (with their stacks) in a pool of `set_pool_capacity` entries,
/// 1,000 by default, and allocates (mmap + guard page) and frees the stack of every coroutine
/// beyond that. The pool is raised to the workload's peak of live coroutines, so that may
/// reuses stacks from run to run as tokio reuses task memory through malloc (with the default,
/// `spawn_many` costs about 4x more, nearly all in mmap/munmap). Not for skynet, whose peak
/// (up to a million) would not fit: there may's default stands.
fn may_pool_capacity(workload: Workload) -> usize {
    match workload {
        Workload::SpawnMany => SPAWN_MANY as usize + 100,
        Workload::PingPong => 2 * PING_PONGS as usize + 100,
        Workload::YieldMany | Workload::ChainedSpawn | Workload::Skynet => 0, // the default
    }
}

fn may_spawn_many() -> RunResult {
    let start = Instant::now();
    let mut handles = Vec::with_capacity(SPAWN_MANY as usize);
    for i in 0..SPAWN_MANY {
        handles.push(may_go(move || black_box(i) * 2));
    }
    let mut sum = 0;
    for h in handles {
        sum += may_join(h)?;
    }
    let t = start.elapsed();
    check_sum("spawn_many", sum, SPAWN_MANY_SUM)?;
    Ok(t)
}

fn may_yield_many() -> RunResult {
    let start = Instant::now();
    let mut handles = Vec::with_capacity(YIELD_TASKS as usize);
    for _ in 0..YIELD_TASKS {
        handles.push(may_go(|| {
            for _ in 0..YIELDS_PER_TASK {
                may::coroutine::yield_now();
            }
        }));
    }
    for h in handles {
        may_join(h)?;
    }
    Ok(start.elapsed())
}

fn may_ping_pong() -> RunResult {
    use may::sync::mpsc;
    let start = Instant::now();
    let mut handles = Vec::with_capacity(PING_PONGS as usize);
    for _ in 0..PING_PONGS {
        handles.push(may_go(|| {
            let (ping_tx, ping_rx) = mpsc::channel::<()>();
            let (pong_tx, pong_rx) = mpsc::channel::<()>();
            // Detached, like tokio's partner task: dropping a may JoinHandle detaches.
            drop(may_go(move || {
                if ping_rx.recv().is_ok() {
                    let _ = pong_tx.send(());
                }
            }));
            ping_tx.send(()).map_err(|_| "ping: partner gone")?;
            pong_rx.recv().map_err(|_| "pong: partner gone")
        }));
    }
    for h in handles {
        may_join(h)??;
    }
    Ok(start.elapsed())
}

fn may_chained_spawn() -> RunResult {
    fn link(done: may::sync::mpsc::Sender<()>, n: u64) {
        if n == 0 {
            let _ = done.send(());
        } else {
            drop(may_go(move || link(done, n - 1)));
        }
    }
    let start = Instant::now();
    let (done_tx, done_rx) = may::sync::mpsc::channel();
    link(done_tx, CHAIN_DEPTH);
    done_rx.recv().map_err(|_| "chain broken")?;
    Ok(start.elapsed())
}

/// The first failure of a may skynet run; once set, no node spawns any more children, so that
/// a run that cannot complete fails fast.
static MAY_SKYNET_FAILURE: OnceLock<String> = OnceLock::new();

/// A skynet node (see [`tokio_skynet`]); errors if a child could not be spawned (may panics
/// when it cannot allocate a stack) or failed.
fn may_skynet(num: u64, size: u64) -> Result<u64, String> {
    if size == 1 {
        return Ok(num);
    }
    if MAY_SKYNET_FAILURE.get().is_some() {
        return Err("stopped after a failure elsewhere in the tree".into());
    }
    let step = size / 10;
    let mut children: [Option<may::coroutine::JoinHandle<Result<u64, String>>>; 10] =
        Default::default();
    let mut failed = None;
    for (i, child) in (0u64..).zip(children.iter_mut()) {
        let first = num + i * step;
        match std::panic::catch_unwind(move || may_go(move || may_skynet(first, step))) {
            Ok(h) => *child = Some(h),
            Err(payload) => {
                let msg = panic_message(payload.as_ref());
                let _ = MAY_SKYNET_FAILURE.set(msg.clone());
                failed = Some(msg);
                break;
            }
        }
    }
    let mut sum = 0;
    for c in children.into_iter().flatten() {
        match c.join() {
            Ok(Ok(v)) => sum += v,
            Ok(Err(e)) => failed = failed.or(Some(e)),
            Err(payload) => failed = failed.or(Some(panic_message(payload.as_ref()))),
        }
    }
    failed.map_or(Ok(sum), Err)
}

fn may_skynet_root() -> RunResult {
    let start = Instant::now();
    let sum = may_skynet(0, SKYNET_LEAVES).map_err(|e| {
        let e = MAY_SKYNET_FAILURE.get().cloned().unwrap_or(e);
        if e.contains("alloc sys stack") {
            format!(
                "{e}: may's run queues are FIFO, so the tree is walked breadth-first and a large \
                 part of its 1.1 M coroutines is alive at once (over 500,000 on the machine \
                 this was written on), each stack taking 2 memory maps (stack + guard page): \
                 more than vm.max_map_count ({}) allows",
                std::fs::read_to_string("/proc/sys/vm/max_map_count")
                    .map_or_else(|_| "?".to_string(), |s| s.trim().to_string())
            )
        } else {
            e
        }
    })?;
    let t = start.elapsed();
    check_sum("skynet", sum, SKYNET_SUM)?;
    Ok(t)
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let msg = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_string());
    format!("a coroutine panicked: {msg}")
}

// ---------------------------------------------------------------------------------------------
// std threads
// ---------------------------------------------------------------------------------------------

/// `std-thread`: the workload with OS threads, run on a driver thread pinned to the first
/// `workers` CPUs this process may use (threads it spawns inherit the pinning), so that `_w1`
/// means one CPU. Only for [`Workload::SpawnMany`], [`Workload::PingPong`] and
/// [`Workload::ChainedSpawn`]. The driver times each run.
pub fn std_thread(ctx: &Ctx, workload: Workload, workers: usize) -> Result<f64, String> {
    let ctx = ctx.clone();
    std::thread::scope(|s| {
        s.spawn(move || {
            pin_current_thread(workers)?;
            match workload {
                Workload::SpawnMany => per_op(&ctx, workload.ops(), std_spawn_many),
                Workload::ChainedSpawn => per_op(&ctx, workload.ops(), std_chained_spawn),
                Workload::PingPong => std_ping_pong(&ctx),
                Workload::YieldMany | Workload::Skynet => {
                    Err(format!("no std-thread impl of {workload:?}"))
                }
            }
        })
        .join()
        .map_err(|_| "the driver thread panicked".to_string())?
    })
}

fn std_spawn_many() -> RunResult {
    let start = Instant::now();
    let mut handles = Vec::with_capacity(SPAWN_MANY as usize);
    for i in 0..SPAWN_MANY {
        handles.push(std::thread::spawn(move || black_box(i) * 2));
    }
    let mut sum = 0;
    for h in handles {
        sum += h.join().map_err(|_| "a thread panicked")?;
    }
    let t = start.elapsed();
    check_sum("spawn_many", sum, SPAWN_MANY_SUM)?;
    Ok(t)
}

fn std_chained_spawn() -> RunResult {
    fn link(done: std::sync::mpsc::Sender<()>, n: u64) {
        if n == 0 {
            let _ = done.send(());
        } else {
            std::thread::spawn(move || link(done, n - 1));
        }
    }
    let start = Instant::now();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    link(done_tx, CHAIN_DEPTH);
    done_rx.recv().map_err(|_| "chain broken")?;
    Ok(start.elapsed())
}

/// Two threads, started once (not timed); each run is [`PING_PONGS`] round trips.
fn std_ping_pong(ctx: &Ctx) -> Result<f64, String> {
    use std::sync::mpsc;
    let (ping_tx, ping_rx) = mpsc::channel::<u64>();
    let (pong_tx, pong_rx) = mpsc::channel::<u64>();
    let partner = std::thread::spawn(move || {
        while let Ok(x) = ping_rx.recv() {
            if pong_tx.send(x).is_err() {
                break;
            }
        }
    });
    let result = per_op(ctx, 2 * PING_PONGS, || {
        let start = Instant::now();
        for i in 0..PING_PONGS {
            ping_tx.send(i).map_err(|_| "ping: partner gone")?;
            let back = pong_rx.recv().map_err(|_| "pong: partner gone")?;
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

/// Pins the calling thread to the first `cpus` CPUs of its current affinity mask.
#[cfg(target_os = "linux")]
fn pin_current_thread(cpus: usize) -> Result<(), String> {
    use std::mem::{size_of, zeroed};
    // SAFETY: `cpu_set_t` is a plain bit mask; all zeroes is the empty set.
    let mut allowed: libc::cpu_set_t = unsafe { zeroed() };
    // SAFETY: pid 0 = this thread; the pointer and size describe `allowed`.
    if unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut allowed) } != 0 {
        return Err(format!(
            "sched_getaffinity: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: as above.
    let mut pinned: libc::cpu_set_t = unsafe { zeroed() };
    let mut n = 0;
    for cpu in 0..libc::CPU_SETSIZE as usize {
        if n == cpus {
            break;
        }
        // SAFETY: `cpu < CPU_SETSIZE`, the number of CPUs a `cpu_set_t` holds.
        if unsafe { libc::CPU_ISSET(cpu, &allowed) } {
            // SAFETY: as above.
            unsafe { libc::CPU_SET(cpu, &mut pinned) };
            n += 1;
        }
    }
    if n < cpus {
        return Err(format!(
            "needs {cpus} CPUs, this process may only run on {n}"
        ));
    }
    // SAFETY: pid 0 = this thread; the pointer and size describe `pinned`.
    if unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &pinned) } != 0 {
        return Err(format!(
            "sched_setaffinity: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn pin_current_thread(_cpus: usize) -> Result<(), String> {
    Err("the std-thread rows pin threads to CPUs, which is implemented for Linux only".into())
}
