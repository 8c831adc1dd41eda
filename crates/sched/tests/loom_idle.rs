//! Loom models of the idle protocol: two workers running the documented worker loop (pop,
//! spin, prepare to sleep, re-check, park) with a token parker (a `Mutex<bool>` and a
//! `Condvar`, as `std::thread::park` behaves; loom's own `thread::park` loses an unpark that
//! arrives while the thread is blocked on a mutex, which `std`'s does not), and a
//! foreign thread (the model's main thread) pushing work and waking whom `Idle` says.
//!
//! A lost wake-up leaves every thread blocked with work queued: loom reports it as a
//! deadlock. The models also check that every task runs exactly once, on its home if pinned,
//! and that no worker is counted as spinning or sleeping at the end.
//!
//! `RUSTFLAGS="--cfg loom -C overflow-checks=on" LOOM_MAX_PREEMPTIONS=2 cargo test -p spindle-sched --release --test loom_idle`
#![cfg(loom)]
#![cfg(all(feature = "fifo", feature = "round-robin", feature = "work-stealing"))]

mod loom_common;

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;
use loom_common::{Job, model};
use spindle_sched::{Fifo, Idle, Notify, Policy, Reason, RoundRobin, WorkStealing};

const WORKERS: usize = 2;

/// A token parker: `unpark` makes the token available, `park` waits for it and takes it.
struct Parker {
    token: Mutex<bool>,
    condvar: Condvar,
}

impl Parker {
    fn new() -> Self {
        Parker {
            token: Mutex::new(false),
            condvar: Condvar::new(),
        }
    }

    fn park(&self) {
        let mut token = self.token.lock().unwrap();
        while !*token {
            token = self.condvar.wait(token).unwrap();
        }
        *token = false;
    }

    fn unpark(&self) {
        *self.token.lock().unwrap() = true;
        self.condvar.notify_one();
    }
}

struct Shared<P> {
    policy: P,
    idle: Idle,
    parkers: Vec<Parker>,
    /// Tasks finished.
    done: AtomicUsize,
    /// How many tasks the model runs in all.
    total: usize,
    /// (worker, id) of every run.
    runs: Mutex<Vec<(usize, usize)>>,
    /// Task ids that, when run, push task `id + 1` from the worker (unpinned, `Spawned`).
    spawns_next: Vec<usize>,
    /// `Some((a, b))`: task `a` blocks its worker until task `b` has run (a task stuck in a
    /// blocking call): `b` needs the other worker, which must not sleep through it.
    waits_for: Option<(usize, usize)>,
    /// Whether task `b` of `waits_for` has run.
    awaited_done: Mutex<bool>,
    awaited_condvar: Condvar,
}

impl<P: Policy<Job>> Shared<P> {
    fn unpark(&self, w: usize) {
        self.parkers[w].unpark();
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

    fn finished(&self) -> bool {
        self.done.load(Ordering::SeqCst) == self.total
    }

    fn run(&self, w: usize, job: Job) {
        if let Some(h) = job.home {
            assert_eq!(h, w, "task {} pinned to {h} ran on {w}", job.id);
        }
        self.runs.lock().unwrap().push((w, job.id));
        if self.spawns_next.contains(&job.id) {
            let notify = self.policy.push(
                Some(w),
                Job {
                    id: job.id + 1,
                    home: None,
                },
                Reason::Spawned,
            );
            self.notify(notify);
        }
        match self.waits_for {
            Some((a, _)) if a == job.id => {
                let mut done = self.awaited_done.lock().unwrap();
                while !*done {
                    done = self.awaited_condvar.wait(done).unwrap();
                }
            }
            Some((_, b)) if b == job.id => {
                *self.awaited_done.lock().unwrap() = true;
                self.awaited_condvar.notify_all();
            }
            _ => {}
        }
        if self.done.fetch_add(1, Ordering::SeqCst) + 1 == self.total {
            // Shut down: wake everyone so they see `finished`.
            (0..WORKERS)
                .filter(|&v| v != w)
                .for_each(|v| self.unpark(v));
        }
    }

    /// The documented worker loop, with a spin of one extra pop.
    fn worker(&self, w: usize) {
        loop {
            if let Some(popped) = self.policy.pop(w) {
                if let Some(v) = self.idle.end_spin(w, true) {
                    self.unpark(v);
                }
                self.run(w, popped.task);
                continue;
            }
            if self.finished() {
                self.idle.end_spin(w, false); // woken as a spinner for the shutdown
                return;
            }
            if self.idle.begin_spin(w) {
                let found = self.policy.pop(w);
                if let Some(v) = self.idle.end_spin(w, found.is_some()) {
                    self.unpark(v);
                }
                if let Some(popped) = found {
                    self.run(w, popped.task);
                    continue;
                }
            }
            self.idle.prepare_sleep(w);
            if self.policy.has_work(w) || self.finished() {
                self.idle.cancel_sleep(w);
                // A real runtime just loops; loom must be told that this thread may be
                // waiting for another (`has_work` says yes while a steal is in transit).
                thread::yield_now();
                continue;
            }
            self.parkers[w].park();
            self.idle.woke(w);
        }
    }
}

/// Starts two workers, then (on the model's main thread, a foreign thread) pushes `jobs`
/// with `reason` and notifies; joins and checks.
fn run_model<P: Policy<Job>>(
    make: fn() -> P,
    jobs: fn() -> Vec<Job>,
    reason: Reason,
    spawns_next: &'static [usize],
    waits_for: Option<(usize, usize)>,
) {
    model(move || {
        let pushed = jobs();
        let total = pushed.len() + spawns_next.len();
        let shared = Arc::new(Shared {
            policy: make(),
            idle: Idle::new(WORKERS).unwrap(),
            parkers: (0..WORKERS).map(|_| Parker::new()).collect(),
            done: AtomicUsize::new(0),
            total,
            runs: Mutex::new(Vec::new()),
            spawns_next: spawns_next.to_vec(),
            waits_for,
            awaited_done: Mutex::new(false),
            awaited_condvar: Condvar::new(),
        });
        let handles: Vec<_> = (0..WORKERS)
            .map(|w| {
                let s = shared.clone();
                thread::spawn(move || s.worker(w))
            })
            .collect();
        for job in pushed {
            let notify = shared.policy.push(None, job, reason);
            shared.notify(notify);
        }
        for h in handles {
            h.join().unwrap();
        }
        let mut ran: Vec<usize> = shared.runs.lock().unwrap().iter().map(|r| r.1).collect();
        ran.sort_unstable();
        assert_eq!(
            ran,
            (0..total).collect::<Vec<_>>(),
            "every task exactly once"
        );
        assert!(shared.policy.drain().is_empty());
        assert_eq!(shared.idle.spinning(), 0);
    });
}

fn one_unpinned() -> Vec<Job> {
    vec![Job { id: 0, home: None }]
}

fn one_pinned_to_1() -> Vec<Job> {
    vec![Job {
        id: 0,
        home: Some(1),
    }]
}

#[test]
fn work_stealing_foreign_unpinned_push() {
    run_model(
        || WorkStealing::new(WORKERS).unwrap(),
        one_unpinned,
        Reason::Spawned,
        &[],
        None,
    );
}

#[test]
fn work_stealing_foreign_pinned_push() {
    run_model(
        || WorkStealing::new(WORKERS).unwrap(),
        one_pinned_to_1,
        Reason::Woken,
        &[],
        None,
    );
}

/// The task pushed from outside spawns a second one on whichever worker runs it: that push
/// goes to the worker's deque (`Notify::Any`), and the other worker may steal it.
#[test]
fn work_stealing_worker_spawns_stealable_task() {
    run_model(
        || WorkStealing::new(WORKERS).unwrap(),
        one_unpinned,
        Reason::Spawned,
        &[0],
        None,
    );
}

#[test]
fn fifo_foreign_unpinned_push() {
    run_model(
        || Fifo::new(WORKERS).unwrap(),
        one_unpinned,
        Reason::Spawned,
        &[],
        None,
    );
}

#[test]
fn fifo_foreign_pinned_push() {
    run_model(
        || Fifo::new(WORKERS).unwrap(),
        one_pinned_to_1,
        Reason::Woken,
        &[],
        None,
    );
}

/// Round-robin deals the task to worker 0 (`Notify::Worker(0)`).
#[test]
fn round_robin_foreign_push() {
    run_model(
        || RoundRobin::new(WORKERS).unwrap(),
        one_unpinned,
        Reason::Spawned,
        &[],
        None,
    );
}

fn two_unpinned() -> Vec<Job> {
    vec![Job { id: 0, home: None }, Job { id: 1, home: None }]
}

/// Two tasks from outside; whichever worker runs task 0 is stuck until task 1 has run, so the
/// other worker must be woken for task 1 even if it was asleep when task 1 was pushed while
/// someone was spinning (the last spinner that finds work wakes a successor).
#[test]
fn work_stealing_blocked_worker_needs_the_other() {
    run_model(
        || WorkStealing::new(WORKERS).unwrap(),
        two_unpinned,
        Reason::Spawned,
        &[],
        Some((0, 1)),
    );
}

#[test]
fn fifo_blocked_worker_needs_the_other() {
    run_model(
        || Fifo::new(WORKERS).unwrap(),
        two_unpinned,
        Reason::Spawned,
        &[],
        Some((0, 1)),
    );
}

/// The same with the second task spawned by the first (into the worker's deque, stolen by the
/// other worker).
#[test]
fn work_stealing_blocked_worker_spawns_what_it_waits_for() {
    run_model(
        || WorkStealing::new(WORKERS).unwrap(),
        one_unpinned,
        Reason::Spawned,
        &[0],
        Some((0, 1)),
    );
}
