//! The monitor thread (Go's `sysmon`, reduced): marks time slices and reports coroutines that
//! keep a worker for too long.
//!
//! Every tick (a quarter of the threshold, at least 1 ms) it reads each worker's resume counter.
//! A worker that is running a coroutine and whose counter has not moved for the threshold is
//! stuck in that one coroutine — a CPU loop, or a blocking call that should have gone to
//! [`blocking`](crate::blocking): it is reported once per run, on stderr, naming the
//! coroutine. A sleeping worker is then woken so that it can steal the stuck worker's stealable
//! coroutines (with work-stealing, every coroutine that has not started yet, and migratable
//! ones); coroutines pinned to the stuck worker wait for it.
//!
//! It also advances each worker's slice epoch every 10 ms: a coroutine that has run through
//! two epochs has used its slice and yields at its next scheduling point (see `coop`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::runtime::Shared;

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

pub(crate) fn start(shared: &Arc<Shared>, threshold: Duration) -> Monitor {
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let weak = Arc::downgrade(shared);
    let tick = (threshold / 4).max(Duration::from_millis(1)).min(SLICE);
    let thread = std::thread::Builder::new()
        .name("spindle-monitor".into())
        .spawn(move || watch(weak, stop2, threshold, tick))
        .expect("spawn the monitor thread");
    Monitor { stop, thread }
}

/// What the monitor remembers of one worker.
#[derive(Clone, Copy)]
struct Seen {
    resumes: u64,
    since: Instant,
    reported: bool,
}

fn watch(shared: Weak<Shared>, stop: Arc<AtomicBool>, threshold: Duration, tick: Duration) {
    let mut seen: Vec<Seen> = Vec::new();
    let mut last_epoch = Instant::now();
    while !stop.load(Ordering::Acquire) {
        std::thread::park_timeout(tick);
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let now = Instant::now();
        if now.duration_since(last_epoch) >= SLICE {
            last_epoch = now;
            for c in &shared.counters {
                c.epoch.fetch_add(1, Ordering::Relaxed);
            }
        }
        if seen.len() != shared.counters.len() {
            seen = vec![
                Seen {
                    resumes: u64::MAX,
                    since: now,
                    reported: false
                };
                shared.counters.len()
            ];
        }
        for (w, c) in shared.counters.iter().enumerate() {
            let resumes = c.resumes.load(Ordering::Relaxed);
            let running = c.running.load(Ordering::Relaxed);
            let s = &mut seen[w];
            if resumes != s.resumes || !running {
                *s = Seen {
                    resumes,
                    since: now,
                    reported: false,
                };
                continue;
            }
            if !s.reported && now.duration_since(s.since) >= threshold {
                s.reported = true;
                report(
                    &shared,
                    w,
                    c.running_task.load(Ordering::Relaxed),
                    now.duration_since(s.since),
                );
                // Let a sleeping worker take over what can be stolen.
                if let Some(v) = shared.idle.notify_any() {
                    shared.unpark(v);
                }
            }
        }
    }
}

fn report(shared: &Shared, worker: usize, task: u64, for_how_long: Duration) {
    let name = shared.task_name(task);
    let who = match name {
        Some(name) => format!("coroutine '{name}' (#{task})"),
        None => format!("coroutine #{task}"),
    };
    eprintln!(
        "spindle: {who} has kept worker {worker} for {} ms without suspending; long CPU work \
         should yield (spindle_rt::yield_now) and blocking calls belong in spindle_rt::blocking",
        for_how_long.as_millis()
    );
}
