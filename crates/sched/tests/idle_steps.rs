//! The idle protocol and the policies, step by step on one thread (each step is what
//! one of the threads named in the comments does, in an order real threads can take).
#![cfg(not(loom))]
#![cfg(all(feature = "fifo", feature = "round-robin", feature = "work-stealing"))]

mod common;

use common::Job;
use spindle_sched::{Idle, Notify, Policy, Reason, WorkStealing};

/// A spinner that a pusher relied on gives up, announces its sleep, and is claimed by a push
/// of work pinned to it before its re-check. The re-check finds work (both tasks), it cancels
/// its sleep and takes the pinned task first. It still owes the wake-up the first pusher
/// skipped: when it finds work it must wake the sleeper for the unpinned task, or that task
/// waits behind the pinned one (for as long as that one runs) while the other worker sleeps.
#[test]
fn a_spinner_claimed_by_a_pinned_push_still_wakes_a_successor() {
    let ws = WorkStealing::<Job>::new(2).unwrap();
    let idle = Idle::new(2).unwrap();

    // Worker 1 found nothing and sleeps.
    assert!(ws.pop(1).is_none());
    idle.prepare_sleep(1);
    assert!(!ws.has_work(1));
    // (parked)

    // Worker 0 found nothing and spins.
    assert!(ws.pop(0).is_none());
    assert!(idle.begin_spin(0));
    assert!(ws.pop(0).is_none());

    // A foreign thread pushes an unpinned task: worker 0 spins, so nobody is woken.
    let n = ws.push(None, Job { id: 1, home: None }, Reason::Spawned);
    assert_eq!(n, Notify::Any);
    assert_eq!(idle.notify_any(), None, "a spinner will find it");

    // Worker 0's spin ends dry (its last pop came before the push); it announces its sleep.
    assert_eq!(idle.end_spin(0, false), None);
    idle.prepare_sleep(0);

    // Another foreign thread wakes a task pinned to worker 0: it claims worker 0.
    let n = ws.push(
        None,
        Job {
            id: 0,
            home: Some(0),
        },
        Reason::Woken,
    );
    assert_eq!(n, Notify::Worker(0));
    assert!(idle.notify_worker(0), "worker 0 is unparked");

    // Worker 0's re-check finds work: it cancels its sleep and pops the pinned task.
    assert!(ws.has_work(0));
    idle.cancel_sleep(0);
    let popped = ws.pop(0).expect("the pinned task");
    assert_eq!(popped.task.id, 0);
    // Found work: it was the spinner the first push relied on, and worker 1 sleeps.
    let wake = idle.end_spin(0, true);
    assert_eq!(
        wake,
        Some(1),
        "worker 1 must be woken for the unpinned task, which otherwise waits while worker 0 \
         runs the pinned one"
    );
    // Worker 1, woken as a spinner, takes the unpinned task.
    idle.woke(1);
    assert_eq!(ws.pop(1).map(|p| p.task.id), Some(1));
    assert_eq!(idle.end_spin(1, true), None);
    assert_eq!((idle.spinning(), idle.sleeping()), (0, 0));
}

/// A worker that had spun, parked after a re-check that found nothing, and was then claimed by
/// a pinned push owes nobody a wake-up: its first pop after the park wakes nobody.
#[test]
fn a_parked_former_spinner_claimed_by_a_pinned_push_wakes_nobody() {
    let idle = Idle::new(2).unwrap();
    idle.prepare_sleep(1);
    assert!(idle.begin_spin(0));
    assert_eq!(idle.end_spin(0, false), None);
    idle.prepare_sleep(0);
    // (re-check: nothing; parked)
    assert!(idle.notify_worker(0));
    idle.woke(0);
    assert_eq!(idle.end_spin(0, true), None);
    assert_eq!((idle.spinning(), idle.sleeping()), (0, 1));
}
