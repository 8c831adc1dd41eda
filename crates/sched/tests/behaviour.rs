//! One behavioural test run on every policy: real threads, 100,000 tasks, each counted exactly
//! once; tasks pinned by their first run stay on their worker. Plus the same under the idle
//! protocol with real parking (no lost wake-up: the test would hang).
#![cfg(not(loom))]
#![cfg(all(feature = "fifo", feature = "round-robin", feature = "work-stealing"))]

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use spindle_sched::{Fifo, Idle, Notify, Policy, Reason, RoundRobin, Task, WorkStealing};

/// Tasks per run; a few hundred under Miri (its interpreter runs about a million times slower,
/// and the interleavings it explores don't need the volume).
const TASKS: usize = if cfg!(miri) { 400 } else { 100_000 };
/// The pusher pauses after this many tasks so that the workers run dry and sleep.
const PAUSE_EVERY: usize = if cfg!(miri) { 100 } else { 1000 };
const WORKERS: usize = 2;

/// A task: an id, its home (set when a worker first runs it, as the runtime pins), and how
/// many more times it yields before it finishes.
#[derive(Debug)]
struct Job {
    id: usize,
    home: Option<usize>,
    yields: u8,
}

impl Task for Job {
    fn home(&self) -> Option<usize> {
        self.home
    }
}

/// What every worker shares in a test run.
struct Run<P> {
    policy: P,
    finished: Vec<AtomicU8>,
    done: AtomicUsize,
    wrong_home: AtomicBool,
}

impl<P: Policy<Job>> Run<P> {
    fn new(policy: P) -> Self {
        Run {
            policy,
            finished: (0..TASKS).map(|_| AtomicU8::new(0)).collect(),
            done: AtomicUsize::new(0),
            wrong_home: AtomicBool::new(false),
        }
    }

    /// Runs a popped job on worker `w`: pins it, re-pushes it while it yields. Returns the
    /// push's notification when it was re-pushed.
    fn run(&self, w: usize, mut job: Job) -> Option<Notify> {
        if job.home.is_some_and(|h| h != w) {
            self.wrong_home.store(true, Ordering::Relaxed);
        }
        job.home = Some(w);
        if job.yields > 0 {
            job.yields -= 1;
            let reason = if job.yields.is_multiple_of(2) {
                Reason::Yielded
            } else {
                Reason::Woken
            };
            return Some(self.policy.push(Some(w), job, reason));
        }
        self.finished[job.id].fetch_add(1, Ordering::Relaxed);
        self.done.fetch_add(1, Ordering::SeqCst);
        None
    }

    fn all_done(&self) -> bool {
        self.done.load(Ordering::SeqCst) == TASKS
    }

    fn check(&self) {
        assert!(
            !self.wrong_home.load(Ordering::Relaxed),
            "a pinned task ran elsewhere"
        );
        let bad: Vec<usize> = (0..TASKS)
            .filter(|&i| self.finished[i].load(Ordering::Relaxed) != 1)
            .take(5)
            .collect();
        assert!(bad.is_empty(), "tasks not run exactly once: {bad:?}");
        assert!(self.policy.drain().is_empty());
    }
}

fn job(id: usize) -> Job {
    Job {
        id,
        // Every 7th task arrives already pinned (a woken coroutine), the rest are new.
        home: id.is_multiple_of(7).then_some(id % WORKERS),
        yields: (id % 3) as u8,
    }
}

/// Says a run is stuck once what it watches (a count of tasks done, ...) has not changed for a
/// minute: a lost task or wake-up stops all progress. Measured from the last change, not from
/// the start: under Miri, with this file's other tests interpreted alongside, a whole run can
/// take minutes.
struct Watchdog {
    seen: usize,
    since: Instant,
}

impl Watchdog {
    fn new() -> Self {
        Watchdog {
            seen: 0,
            since: Instant::now(),
        }
    }

    fn stalled(&mut self, now: usize) -> bool {
        if now != self.seen {
            self.seen = now;
            self.since = Instant::now();
        }
        self.since.elapsed() >= Duration::from_secs(60)
    }
}

/// 2 threads each popping (busy-polling), 1 pushing.
fn popping_threads<P: Policy<Job>>(policy: P) {
    let run = Arc::new(Run::new(policy));
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let run = run.clone();
            thread::spawn(move || {
                let mut watchdog = Watchdog::new();
                while !run.all_done() {
                    let done = run.done.load(Ordering::SeqCst);
                    assert!(!watchdog.stalled(done), "stuck: {done} done");
                    match run.policy.pop(w) {
                        Some(popped) => {
                            run.run(w, popped.task);
                        }
                        None => thread::yield_now(),
                    }
                }
            })
        })
        .collect();
    for id in 0..TASKS {
        let reason = if id.is_multiple_of(7) {
            Reason::Woken
        } else {
            Reason::Spawned
        };
        run.policy.push(None, job(id), reason);
    }
    for w in workers {
        w.join().unwrap();
    }
    run.check();
}

#[test]
fn fifo_counts_every_task_once() {
    popping_threads(Fifo::new(WORKERS).unwrap());
}

#[test]
fn round_robin_counts_every_task_once() {
    popping_threads(RoundRobin::new(WORKERS).unwrap());
}

#[test]
fn work_stealing_counts_every_task_once() {
    popping_threads(WorkStealing::new(WORKERS).unwrap());
}

/// The same with the idle protocol and real parking: workers sleep when idle; the pusher
/// pauses now and then so that they do. A lost wake-up hangs (caught by a watchdog).
fn parking_workers<P: Policy<Job>>(policy: P) {
    struct Shared<P> {
        run: Run<P>,
        idle: Idle,
        threads: OnceLock<Vec<Thread>>,
        parks: AtomicUsize,
    }
    impl<P: Policy<Job>> Shared<P> {
        fn unpark(&self, w: usize) {
            self.threads.wait()[w].unpark();
        }
        fn notify(&self, notify: Notify) {
            match notify {
                Notify::None => {}
                Notify::Any => {
                    if let Some(w) = self.idle.notify_any() {
                        self.unpark(w);
                    }
                }
                Notify::Worker(w) => {
                    if self.idle.notify_worker(w) {
                        self.unpark(w);
                    }
                }
            }
        }
        fn run_popped(&self, w: usize, job: Job) {
            if let Some(notify) = self.run.run(w, job) {
                self.notify(notify);
            }
            if self.run.all_done() {
                (0..WORKERS).for_each(|v| self.unpark(v));
            }
        }
    }

    let shared = Arc::new(Shared {
        run: Run::new(policy),
        idle: Idle::new(WORKERS).unwrap(),
        threads: OnceLock::new(),
        parks: AtomicUsize::new(0),
    });
    let mut watchdog = Watchdog::new();
    let handles: Vec<_> = (0..WORKERS)
        .map(|w| {
            let s = shared.clone();
            thread::spawn(move || {
                loop {
                    if let Some(popped) = s.run.policy.pop(w) {
                        if let Some(v) = s.idle.end_spin(w, true) {
                            s.unpark(v);
                        }
                        s.run_popped(w, popped.task);
                        continue;
                    }
                    if s.run.all_done() {
                        s.idle.end_spin(w, false); // woken as a spinner for the shutdown
                        return;
                    }
                    if s.idle.begin_spin(w) {
                        let found = (0..4).find_map(|_| s.run.policy.pop(w));
                        if let Some(v) = s.idle.end_spin(w, found.is_some()) {
                            s.unpark(v);
                        }
                        if let Some(popped) = found {
                            s.run_popped(w, popped.task);
                            continue;
                        }
                    }
                    s.idle.prepare_sleep(w);
                    if s.run.policy.has_work(w) || s.run.all_done() {
                        s.idle.cancel_sleep(w);
                        continue;
                    }
                    s.parks.fetch_add(1, Ordering::Relaxed);
                    // No timeout: a lost wake-up hangs here (the main thread's watchdog
                    // reports it).
                    thread::park();
                    s.idle.woke(w);
                }
            })
        })
        .collect();
    shared
        .threads
        .set(handles.iter().map(|h| h.thread().clone()).collect())
        .unwrap();
    for id in 0..TASKS {
        let reason = if id.is_multiple_of(7) {
            Reason::Woken
        } else {
            Reason::Spawned
        };
        let notify = shared.run.policy.push(None, job(id), reason);
        shared.notify(notify);
        if id % PAUSE_EVERY == PAUSE_EVERY - 1 && id + 1 < TASKS {
            // Let the workers run dry and go to sleep, so that the next pushes must wake them
            // (waiting for it, rather than a fixed pause, keeps this true on a loaded machine).
            while shared.run.done.load(Ordering::SeqCst) <= id || shared.idle.sleeping() < WORKERS {
                let progress =
                    shared.run.done.load(Ordering::SeqCst) * (WORKERS + 1) + shared.idle.sleeping();
                assert!(
                    !watchdog.stalled(progress),
                    "lost wake-up or no sleep: {} of {} done, sleeping {}",
                    shared.run.done.load(Ordering::SeqCst),
                    id + 1,
                    shared.idle.sleeping(),
                );
                thread::sleep(Duration::from_micros(100));
            }
        }
    }
    while !shared.run.all_done() {
        assert!(
            !watchdog.stalled(shared.run.done.load(Ordering::SeqCst) * (WORKERS + 1)),
            "lost wake-up: {} of {TASKS} done, sleeping {}, spinning {}",
            shared.run.done.load(Ordering::SeqCst),
            shared.idle.sleeping(),
            shared.idle.spinning(),
        );
        thread::sleep(Duration::from_millis(1));
    }
    for h in handles {
        h.join().unwrap();
    }
    shared.run.check();
    assert!(
        shared.parks.load(Ordering::Relaxed) > 0,
        "the workers never slept"
    );
    assert_eq!(shared.idle.spinning(), 0);
}

#[test]
fn fifo_with_parking_workers() {
    parking_workers(Fifo::new(WORKERS).unwrap());
}

#[test]
fn round_robin_with_parking_workers() {
    parking_workers(RoundRobin::new(WORKERS).unwrap());
}

#[test]
fn work_stealing_with_parking_workers() {
    parking_workers(WorkStealing::new(WORKERS).unwrap());
}
