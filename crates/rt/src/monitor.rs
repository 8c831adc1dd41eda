//! The monitor thread (Go's `sysmon`, reduced): marks time slices and reports coroutines that
//! keep a worker for too long.
//!
//! Every tick (a quarter of the threshold, at least 1 ms) it reads each worker's resume counter.
//! A worker that is running a coroutine and whose counter has not moved for the threshold is
//! stuck in that one coroutine — a CPU loop, or a blocking call that should have gone to
//! [`blocking`](crate::blocking) — unless its thread spent that time waiting for a CPU (a
//! loaded machine; on Linux the thread's state and CPU time tell, see `confirm_stuck`): it is
//! reported once per run, naming the coroutine: to the program's hook
//! ([`RuntimeBuilder::on_stuck`](crate::RuntimeBuilder::on_stuck)) if it set one, else through
//! the [`log`] facade at `warn` (target `spindle_rt::monitor`). A sleeping worker is then woken so
//! that it can steal the stuck worker's *queued* stealable coroutines (with work-stealing,
//! every coroutine that has not started yet, and migratable ones); coroutines pinned to the
//! stuck worker wait for it. From the report until the worker's coroutine switches again,
//! every tick also fires the stuck worker's due timers of migratable coroutines (its movable
//! wheel), which queues those coroutines where an idle worker takes them: Go's stealing Ps
//! run other Ps' timers the same way. What may move and why it is sound: see `handoff`.
//!
//! IO that a coroutine waits for, migratable or not, waits for the stuck worker: only it
//! polls its driver. So do the timers of pinned coroutines (firing one would only queue the
//! coroutine to the stuck worker).
//!
//! It also advances each worker's slice epoch every 10 ms, and at every tick exhausts the
//! operation budget of a slice that began two epochs ago or more: its coroutine has used its
//! slice and yields at its next budgeted operation (see `coop`). It does this whatever the
//! threshold: `RuntimeBuilder::stuck_threshold(None)` turns off the report (and the wake-up
//! that follows it), not the slices; the tick is then 2.5 ms.
//!
//! While every worker sleeps there is nothing to watch, so the monitor sleeps too, without a
//! timeout (Go's sysmon does the same), and an idle runtime wakes no thread at all. A worker
//! that leaves its sleep wakes it. The hand-shake is Dekker's, with `SeqCst` fences on both
//! sides: the monitor sets `asleep`, fences, and re-reads the sleeping count; a worker updates
//! the sleeping count (`Idle::woke`/`cancel_sleep`, or a waker that claimed it did), fences,
//! and reads `asleep`. Either the monitor sees a worker awake and keeps ticking, or that
//! worker sees the monitor asleep and unparks it. Workers pay this only when they come out of
//! a sleep, never per coroutine.

use std::sync::atomic::{AtomicBool, Ordering, fence};
use std::sync::{Arc, OnceLock, Weak};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use crate::runtime::Shared;

/// A program's handler of stuck-coroutine reports (see [`crate::RuntimeBuilder::on_stuck`]).
pub(crate) type StuckHook = Arc<dyn Fn(&StuckReport) + Send + Sync>;

/// A coroutine that kept its worker past the stuck threshold without suspending, as the
/// monitor reports it (once per run of that coroutine). Its `Display` is the line the runtime
/// logs when the program has set no [`on_stuck`](crate::RuntimeBuilder::on_stuck) hook.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct StuckReport {
    /// The worker it keeps (0-based, as in [`crate::Metrics::workers`]).
    pub worker: usize,
    /// The coroutine's id ([`crate::JoinHandle::id`], [`crate::Current::id`]); `u64::MAX`
    /// when the worker was running code of its own that may block (the drop of a value or a
    /// waker's wake-up for which no cleanup coroutine could be had).
    pub task_id: u64,
    /// The coroutine's name, if it was given one ([`crate::Builder::name`]).
    pub name: Option<Arc<str>>,
    /// How long it had run without suspending when it was reported.
    pub running_for: Duration,
}

impl std::fmt::Display for StuckReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.name {
            _ if self.task_id == WORKER_ITSELF => f.write_str(
                "the worker's own code (a value's destructor or a waker run where no cleanup \
                 coroutine could be had)",
            )?,
            Some(name) => write!(f, "coroutine '{name}' (#{})", self.task_id)?,
            None => write!(f, "coroutine #{}", self.task_id)?,
        }
        write!(
            f,
            " has kept worker {} for {} ms without suspending; long CPU work should yield \
             (spindle_rt::yield_now) and blocking calls belong in spindle_rt::blocking",
            self.worker,
            self.running_for.as_millis()
        )
    }
}

/// The "running task" a worker shows while it runs code of its own that may block: the last
/// resort of a cleanup (see `worker::in_cleanup_coroutine`). No task has this id.
pub(crate) const WORKER_ITSELF: u64 = u64::MAX;

/// The slice period.
const SLICE: Duration = Duration::from_millis(10);

pub(crate) struct Monitor {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Monitor {
    pub(crate) fn stop(self) {
        self.stop.store(true, Ordering::Release);
        self.thread.thread().unpark();
        let _ = self.thread.join();
    }
}

/// How workers reach the monitor: kept in `Shared`.
#[derive(Default)]
pub(crate) struct MonitorHandle {
    thread: OnceLock<Thread>,
    /// The monitor sleeps until a worker wakes it.
    asleep: AtomicBool,
}

impl MonitorHandle {
    /// Called by a worker that has just left its sleep (woken, or it cancelled the sleep),
    /// after the idle protocol counted it awake.
    #[inline]
    pub(crate) fn worker_awake(&self) {
        fence(Ordering::SeqCst);
        if self.asleep.load(Ordering::Relaxed)
            && self.asleep.swap(false, Ordering::AcqRel)
            && let Some(t) = self.thread.get()
        {
            t.unpark();
        }
    }
}

/// Starts the monitor thread; an error if it cannot be spawned. `threshold`: the stuck report's
/// (`None`: no report; the monitor still ends time slices); `hook`: who gets the reports
/// (`None`: the `log` facade).
pub(crate) fn start(
    shared: &Arc<Shared>,
    threshold: Option<Duration>,
    hook: Option<StuckHook>,
) -> std::io::Result<Monitor> {
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let weak = Arc::downgrade(shared);
    let tick = threshold
        .map_or(SLICE / 4, |t| t / 4)
        .max(Duration::from_millis(1))
        .min(SLICE);
    let thread = std::thread::Builder::new()
        .name("spindle-monitor".into())
        .spawn(move || watch(weak, stop2, threshold, tick, hook))?;
    let _ = shared.monitor.thread.set(thread.thread().clone());
    Ok(Monitor { stop, thread })
}

/// What the monitor remembers of one worker.
#[derive(Clone, Copy)]
struct Seen {
    resumes: u64,
    since: Instant,
    reported: bool,
    /// The worker's thread's CPU time when it first looked stuck (see `confirm_stuck`).
    suspect: Option<Duration>,
}

impl Seen {
    fn fresh(resumes: u64, now: Instant) -> Seen {
        Seen {
            resumes,
            since: now,
            reported: false,
            suspect: None,
        }
    }
}

/// Whether a worker whose coroutine has not switched for the threshold is really stuck in it,
/// rather than its thread waiting for a CPU (a loaded machine: the thread was runnable but
/// not running, and its coroutine would have switched long ago had it run). Reports only what
/// the coroutine did itself: a CPU loop, or a blocking call.
///
/// On Linux, from the thread's state and CPU time (`/proc/self/task/<tid>/stat` and
/// `schedstat`): asleep in the kernel (`S`, `D`) is a blocking call — confirmed; otherwise the
/// first call marks the worker suspect and it is confirmed once the thread has run on a CPU for
/// half the threshold since (so a CPU loop is reported at 1.5× the threshold at the earliest).
/// (The kernel's run-queue wait would be the direct measure, but it is only added up when the
/// thread gets a CPU back, so it says nothing while the thread still waits.) Where the
/// thread cannot be read, confirmed at once.
fn confirm_stuck(seen: &mut Seen, tid: u64, threshold: Duration) -> bool {
    let Some(thread) = thread_status(tid) else {
        return true;
    };
    if thread.asleep {
        return true;
    }
    let Some(cpu0) = seen.suspect else {
        seen.suspect = Some(thread.cpu);
        return false;
    };
    thread.cpu.saturating_sub(cpu0) >= threshold / 2
}

/// What the monitor reads of a worker thread.
struct ThreadStatus {
    /// Asleep in the kernel (a blocking call), not running or waiting for a CPU.
    asleep: bool,
    /// CPU time so far.
    cpu: Duration,
}

/// Thread `tid` of this process, from `/proc`.
#[cfg(target_os = "linux")]
fn thread_status(tid: u64) -> Option<ThreadStatus> {
    if tid == 0 {
        return None;
    }
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // "<tid> (<comm>) <state> ...": the comm may hold spaces and parentheses.
    let state = stat[stat.rfind(')')? + 1..].split_whitespace().next()?;
    let schedstat = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    let cpu_ns: u64 = schedstat.split_whitespace().next()?.parse().ok()?;
    Some(ThreadStatus {
        asleep: matches!(state, "S" | "D"),
        cpu: Duration::from_nanos(cpu_ns),
    })
}

#[cfg(not(target_os = "linux"))]
fn thread_status(_tid: u64) -> Option<ThreadStatus> {
    None
}

/// This thread's id as the kernel knows it (0 where unknown), for `thread_status`.
pub(crate) fn current_tid() -> u64 {
    #[cfg(target_os = "linux")]
    {
        // "/proc/thread-self" links to "<pid>/task/<tid>".
        std::fs::read_link("/proc/thread-self")
            .ok()
            .and_then(|l| l.file_name()?.to_str()?.parse().ok())
            .unwrap_or(0)
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
    }
}

fn watch(
    shared: Weak<Shared>,
    stop: Arc<AtomicBool>,
    threshold: Option<Duration>,
    tick: Duration,
    hook: Option<StuckHook>,
) {
    let mut seen: Vec<Seen> = Vec::new();
    let mut last_epoch = Instant::now();
    while !stop.load(Ordering::Acquire) {
        std::thread::park_timeout(tick);
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if shared.idle.sleeping() == shared.workers() && sleep_while_workers_sleep(&shared, &stop) {
            // Slept through a quiet period: start the watch afresh.
            seen.clear();
            last_epoch = Instant::now();
            continue;
        }
        let now = Instant::now();
        if now.duration_since(last_epoch) >= SLICE {
            last_epoch = now;
            for c in &shared.counters {
                c.epoch.fetch_add(1, Ordering::Relaxed);
            }
        }
        for c in &shared.counters {
            c.end_slice_if_over();
        }
        let Some(threshold) = threshold else {
            continue;
        };
        if seen.len() != shared.counters.len() {
            seen = vec![Seen::fresh(u64::MAX, now); shared.counters.len()];
        }
        for (w, c) in shared.counters.iter().enumerate() {
            let resumes = c.resumes.load(Ordering::Relaxed);
            let running = c.running.load(Ordering::Relaxed);
            let s = &mut seen[w];
            if resumes != s.resumes || !running {
                *s = Seen::fresh(resumes, now);
                continue;
            }
            if s.reported {
                // Still stuck: its migratable coroutines' due timers fire here (see `handoff`).
                let due = shared.movable_timers[w].take_due(now);
                if !due.is_empty() {
                    crate::handoff::fire(&shared, None, due);
                }
                continue;
            }
            if now.duration_since(s.since) >= threshold
                && confirm_stuck(s, c.tid.load(Ordering::Relaxed), threshold)
            {
                s.reported = true;
                let task_id = c.running_task.load(Ordering::Relaxed);
                let report = StuckReport {
                    worker: w,
                    task_id,
                    name: shared.task_name(task_id),
                    running_for: now.duration_since(s.since),
                };
                match &hook {
                    Some(hook) => {
                        // A panicking hook must not end the monitor (and the time slices).
                        let call = std::panic::AssertUnwindSafe(|| hook(&report));
                        if std::panic::catch_unwind(call).is_err() {
                            log::error!("the on_stuck hook panicked; reporting: {report}");
                        }
                    }
                    None => log::warn!("{report}"),
                }
                // Let a sleeping worker take over what can be stolen, and what timers of the
                // stuck worker are due already.
                if let Some(v) = shared.idle.notify_any() {
                    shared.unpark(v);
                }
                let due = shared.movable_timers[w].take_due(now);
                if !due.is_empty() {
                    crate::handoff::fire(&shared, None, due);
                }
            }
        }
    }
}

/// Every worker looked asleep: sleep until one wakes (see the module's hand-shake). Returns
/// whether it slept.
fn sleep_while_workers_sleep(shared: &Shared, stop: &AtomicBool) -> bool {
    let handle = &shared.monitor;
    handle.asleep.store(true, Ordering::Relaxed);
    fence(Ordering::SeqCst);
    if shared.idle.sleeping() != shared.workers() {
        handle.asleep.store(false, Ordering::Relaxed);
        return false;
    }
    // `park` may return spuriously; a worker's `worker_awake` clears `asleep` before it
    // unparks, and `Monitor::stop` sets `stop` before it unparks.
    while handle.asleep.load(Ordering::Acquire) && !stop.load(Ordering::Acquire) {
        std::thread::park();
    }
    handle.asleep.store(false, Ordering::Relaxed);
    true
}
