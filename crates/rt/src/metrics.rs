//! Per-worker counters and the [`Metrics`] snapshot.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::runtime::Shared;

/// Counters one worker updates (relaxed atomics: only the worker writes most of them; the
/// monitor and `metrics()` read them).
///
/// Aligned to 128 bytes (x86 prefetches lines in pairs): the worker writes them on every
/// resume, and two workers' counters on one line made every switch on one worker miss the
/// cache on the other (`yield_many` on 2 workers ran no faster than on 1).
#[derive(Default)]
#[repr(align(128))]
pub(crate) struct WorkerCounters {
    /// Coroutine resumes (each run of a task until it switches back).
    pub(crate) resumes: AtomicU64,
    /// Times the worker thread parked for lack of work.
    pub(crate) parks: AtomicU64,
    /// A coroutine is running now.
    pub(crate) running: AtomicBool,
    /// The id of the task running (or that ran last).
    pub(crate) running_task: AtomicU64,
    /// Bumped by the monitor every slice: a task whose slice began in an older epoch has used
    /// its slice.
    pub(crate) epoch: AtomicU32,
    /// The epoch in which the running slice began (written by the worker at each fresh slice;
    /// the monitor reads it to decide whether the slice has run too long).
    pub(crate) slice_start: AtomicU32,
    /// The running slice's operation budget, installed on the worker thread
    /// (`spindle_park::with_budget`): the worker counts it down, refills it at each fresh
    /// slice, and the monitor exhausts it when the slice has run too long (see `coop`).
    pub(crate) budget: spindle_park::Budget,
    /// The worker thread's kernel thread id (0: unknown), for the monitor.
    pub(crate) tid: AtomicU64,
    /// Idle carriers the worker keeps (see `carrier`), each holding a stack.
    pub(crate) idle_carriers: AtomicUsize,
}

impl WorkerCounters {
    pub(crate) fn begin_run(&self, task: u64) {
        self.running_task.store(task, Ordering::Relaxed);
        self.running.store(true, Ordering::Relaxed);
    }

    pub(crate) fn end_run(&self) {
        self.running.store(false, Ordering::Relaxed);
        // Single writer: a load and a store are enough (no read-modify-write).
        let n = self.resumes.load(Ordering::Relaxed);
        self.resumes.store(n + 1, Ordering::Relaxed);
    }

    /// A fresh slice begins: `ops` operations of budget, the epoch noted.
    #[inline]
    pub(crate) fn start_slice(&self, ops: u32) {
        self.budget.refill(ops);
        let epoch = self.epoch.load(Ordering::Relaxed);
        self.slice_start.store(epoch, Ordering::Relaxed);
    }

    /// Whether the running slice has had its time: it began two epochs ago or more, so it has
    /// run for a whole slice period at least (10 to 20 ms, as the monitor counts epochs).
    #[inline]
    pub(crate) fn slice_over(&self) -> bool {
        let epoch = self.epoch.load(Ordering::Relaxed);
        epoch.wrapping_sub(self.slice_start.load(Ordering::Relaxed)) >= 2
    }

    /// Called by the monitor: if the running slice is [over](Self::slice_over), exhausts its
    /// budget so that its task yields at its next operation. Called at every tick: a count-down
    /// (or a refill of a run-next chain's budget) racing with the exhaustion may undo it (see
    /// `spindle_park::Budget`), and the next tick then exhausts it again.
    pub(crate) fn end_slice_if_over(&self) {
        if self.slice_over() {
            self.budget.exhaust();
        }
    }
}

/// A snapshot of a runtime's counters, from [`Runtime::metrics`](crate::Runtime::metrics).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Metrics {
    /// The policy's name.
    pub policy: &'static str,
    /// The IO backend the workers use, as picked when the runtime was built (from the
    /// builder, `SPINDLE_IO`, or the automatic choice with its fallback): `"io_uring"`,
    /// `"epoll"`, `"kqueue"`, `"iocp"`, `"polling"`, `"custom"` or `"none"`. The same as
    /// [`Runtime::io_backend`](crate::Runtime::io_backend).
    pub io_backend: &'static str,
    /// Coroutines alive (spawned, not finished).
    pub live_coroutines: usize,
    /// Threads of the blocking pool alive now.
    pub blocking_threads: usize,
    /// The runtime's stack pool: stacks mapped, unmapped, recycled, in use.
    pub stacks: spindle_stack::PoolStats,
    /// One entry per worker.
    pub workers: Vec<WorkerMetrics>,
}

/// One worker's counters.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerMetrics {
    /// Coroutine resumes: each is one switch into a coroutine and one back.
    pub resumes: u64,
    /// Context switches (two per resume).
    pub switches: u64,
    /// Tasks this worker stole from others.
    pub steals: u64,
    /// Times the worker thread slept for lack of work.
    pub parks: u64,
    /// Tasks waiting in this worker's queues now.
    pub queue_depth: usize,
    /// Idle coroutines this worker keeps to start its next tasks on, each with a stack of the
    /// runtime's pool (in use, as the pool counts): a task that ends leaves its coroutine
    /// here instead of tearing it down. While busy at most as many as the pool's thread cache
    /// keeps stacks ([`PoolConfig::thread_cache`](spindle_stack::PoolConfig)); 64 once the
    /// worker has been idle a second (with the pool's own excess); none once it stops.
    pub idle_carriers: usize,
}

pub(crate) fn snapshot(shared: &Shared) -> Metrics {
    let workers = (0..shared.workers())
        .map(|w| {
            let c = &shared.counters[w];
            let stats = shared.policy.stats(w);
            let resumes = c.resumes.load(Ordering::Relaxed);
            WorkerMetrics {
                resumes,
                switches: resumes * 2,
                steals: stats.stole,
                parks: c.parks.load(Ordering::Relaxed),
                queue_depth: stats.depth,
                idle_carriers: c.idle_carriers.load(Ordering::Relaxed),
            }
        })
        .collect();
    Metrics {
        policy: shared.policy.name(),
        io_backend: shared.io_name,
        live_coroutines: shared.tasks.live(),
        blocking_threads: shared.blocking.threads(),
        stacks: shared.stacks.stats(),
        workers,
    }
}
