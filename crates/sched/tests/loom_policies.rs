//! Loom models of the policies: a foreign thread pushes while two workers pop (and steal).
//! No task is lost or popped twice; a pinned task is only popped by its home.
//!
//! Under loom crossbeam's deque is replaced by a `Mutex<VecDeque>` stand-in (see
//! `src/deque.rs`): these models check the policies' own protocol.
//!
//! `RUSTFLAGS="--cfg loom -C overflow-checks=on" LOOM_MAX_PREEMPTIONS=2 cargo test -p spindle-sched --release --test loom_policies`
#![cfg(loom)]
#![cfg(all(feature = "fifo", feature = "round-robin", feature = "work-stealing"))]

mod loom_common;

use loom::sync::Arc;
use loom::thread;
use loom_common::{Job, check_exactly_once, model};
use spindle_sched::{Fifo, Policy, Reason, RoundRobin, WorkStealing};

/// Before the threads start, worker 0 holds task 0 (pushed by itself, unpinned: stealable).
/// Then, concurrently: a foreign thread pushes task 1 (unpinned) and task 2 (pinned to
/// worker 1); workers 0 and 1 pop twice each — bound to their threads if `bind` (as a runtime
/// runs them), else through the try-lock. What is left is drained.
fn foreign_push_two_poppers<P: Policy<Job>>(make: fn() -> P, bind: bool) {
    model(move || {
        let policy = Arc::new(make());
        policy.push(Some(0), Job { id: 0, home: None }, Reason::Spawned);

        let pusher = {
            let policy = policy.clone();
            thread::spawn(move || {
                policy.push(None, Job { id: 1, home: None }, Reason::Spawned);
                policy.push(
                    None,
                    Job {
                        id: 2,
                        home: Some(1),
                    },
                    Reason::Woken,
                );
            })
        };
        let poppers: Vec<_> = (0..2)
            .map(|w| {
                let policy = policy.clone();
                thread::spawn(move || {
                    if bind {
                        assert!(policy.bind_worker(w), "a free worker binds");
                    }
                    let mut got = Vec::new();
                    for _ in 0..2 {
                        if let Some(p) = policy.pop(w) {
                            got.push((w, p.task));
                        }
                    }
                    policy.unbind_worker(w);
                    got
                })
            })
            .collect();
        pusher.join().unwrap();
        let mut popped = Vec::new();
        for p in poppers {
            popped.extend(p.join().unwrap());
        }
        check_exactly_once(3, &popped, &policy.drain());
    });
}

#[test]
fn fifo_foreign_push_two_poppers() {
    foreign_push_two_poppers(|| Fifo::new(2).unwrap(), false);
}

#[test]
fn round_robin_foreign_push_two_poppers() {
    foreign_push_two_poppers(|| RoundRobin::new(2).unwrap(), false);
}

#[test]
fn round_robin_foreign_push_two_bound_poppers() {
    foreign_push_two_poppers(|| RoundRobin::new(2).unwrap(), true);
}

#[test]
fn work_stealing_foreign_push_two_poppers() {
    foreign_push_two_poppers(|| WorkStealing::new(2).unwrap(), false);
}

#[test]
fn work_stealing_foreign_push_two_bound_poppers() {
    foreign_push_two_poppers(|| WorkStealing::new(2).unwrap(), true);
}

/// Work stealing's local paths under a concurrent thief: worker 0 pushes a stealable task
/// into its deque, wakes a task pinned to it into its run-next, then wakes a stealable one
/// (which kicks the pinned one to its pinned queue), then pops; meanwhile worker 1 steals
/// (deque, then run-next) and must never take the pinned task. The owner is bound to its
/// thread, as in a runtime.
#[test]
fn work_stealing_owner_and_thief() {
    model(|| {
        let policy = Arc::new(WorkStealing::new(2).unwrap());
        let owner = {
            let policy = policy.clone();
            thread::spawn(move || {
                assert!(policy.bind_worker(0));
                let pinned = Job {
                    id: 1,
                    home: Some(0),
                };
                policy.push(Some(0), Job { id: 0, home: None }, Reason::Spawned);
                policy.push(Some(0), pinned, Reason::Woken);
                policy.push(Some(0), Job { id: 2, home: None }, Reason::Woken);
                let mut got = Vec::new();
                if let Some(p) = policy.pop(0) {
                    got.push((0, p.task));
                }
                policy.unbind_worker(0);
                got
            })
        };
        let thief = {
            let policy = policy.clone();
            thread::spawn(move || {
                let mut got = Vec::new();
                for _ in 0..2 {
                    if let Some(p) = policy.pop(1) {
                        got.push((1, p.task));
                    }
                }
                got
            })
        };
        let mut popped = owner.join().unwrap();
        popped.extend(thief.join().unwrap());
        check_exactly_once(3, &popped, &policy.drain());
    });
}

/// The run-next slot under contention: worker 0 wakes two stealable tasks in a row (the second
/// kicks the first to the deque) and pops, while worker 1 steals from the slot and the deque.
#[test]
fn work_stealing_run_next_put_take_against_thief() {
    model(|| {
        let policy = Arc::new(WorkStealing::new(2).unwrap());
        let owner = {
            let policy = policy.clone();
            thread::spawn(move || {
                assert!(policy.bind_worker(0));
                policy.push(Some(0), Job { id: 0, home: None }, Reason::Woken);
                policy.push(Some(0), Job { id: 1, home: None }, Reason::Woken);
                let mut got = Vec::new();
                if let Some(p) = policy.pop(0) {
                    got.push((0, p.task));
                }
                policy.unbind_worker(0);
                got
            })
        };
        let thief = {
            let policy = policy.clone();
            thread::spawn(move || {
                let mut got = Vec::new();
                for _ in 0..2 {
                    if let Some(p) = policy.pop(1) {
                        assert!(!p.inherit_slice, "a stolen task inherits no slice");
                        got.push((1, p.task));
                    }
                }
                got
            })
        };
        let mut popped = owner.join().unwrap();
        popped.extend(thief.join().unwrap());
        check_exactly_once(2, &popped, &policy.drain());
    });
}

/// `has_work(w)` asked from another thread while worker `w` moves its inbox behind its private
/// queue (here: on a push of its own) never reads `false`: a task pushed before the call and
/// not popped since must count, even halfway between the two halves (`Policy::has_work`).
fn has_work_from_another_thread_during_an_inbox_move<P: Policy<Job>>(make: fn() -> P) {
    model(move || {
        let policy = Arc::new(make());
        // A foreign push: into worker 0's inbox (or, for a policy without inboxes, its queue).
        policy.push(
            None,
            Job {
                id: 0,
                home: Some(0),
            },
            Reason::Woken,
        );
        let owner = {
            let policy = policy.clone();
            thread::spawn(move || {
                // (Policies without private queues do not bind.)
                let bound = policy.bind_worker(0);
                policy.push(Some(0), Job { id: 1, home: None }, Reason::Yielded);
                if bound {
                    policy.unbind_worker(0);
                }
            })
        };
        assert!(
            policy.has_work(0),
            "two tasks queued, none popped, and no work seen"
        );
        owner.join().unwrap();
        check_exactly_once(2, &[], &policy.drain());
    });
}

#[test]
fn round_robin_has_work_from_another_thread_during_an_inbox_move() {
    has_work_from_another_thread_during_an_inbox_move(|| RoundRobin::new(1).unwrap());
}

#[test]
fn work_stealing_has_work_from_another_thread_during_an_inbox_move() {
    has_work_from_another_thread_during_an_inbox_move(|| WorkStealing::new(1).unwrap());
}

#[test]
fn fifo_has_work_from_another_thread_during_an_inbox_move() {
    has_work_from_another_thread_during_an_inbox_move(|| Fifo::new(1).unwrap());
}
