//! Loom models of the async variants' new paths: the waker a poll stores racing with a
//! completion (no lost wake-up when the waker changes between polls), and a pending future
//! dropped while a lock, permits or a message is handed to it (passed on: a lost hand-off
//! leaves the other waiter blocked for ever, which loom reports as a deadlock).
//!
//! `RUSTFLAGS="--cfg loom -C overflow-checks=on" LOOM_MAX_PREEMPTIONS=2 cargo test -p spindle-sync --release --test loom_async`
#![cfg(loom)]

mod loom_common;

use std::task::{Wake, Waker};

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;
use loom_common::{block_on, model, poll_with};
use spindle_sync::{Mutex, Notify, Semaphore, mpmc};

/// A waker that counts its wake-ups.
#[derive(Default)]
struct Counter(AtomicUsize);

impl Wake for Counter {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counting() -> (Waker, std::sync::Arc<Counter>) {
    let c = std::sync::Arc::new(Counter::default());
    (Waker::from(c.clone()), c)
}

#[test]
fn waker_swap_races_notify_one() {
    model("waker_swap_races_notify_one", || {
        let n = Arc::new(Notify::new());
        let notifier = {
            let n = n.clone();
            thread::spawn(move || n.notify_one())
        };
        let (w1, _c1) = counting();
        let (w2, c2) = counting();
        let mut f = n.notified();
        if poll_with(&mut f, &w1).is_ready() {
            notifier.join().unwrap();
            return; // the permit was stored first
        }
        // Re-polled with a new waker while the notification races in.
        let second = poll_with(&mut f, &w2);
        notifier.join().unwrap();
        if second.is_pending() {
            assert_eq!(
                c2.0.load(Ordering::SeqCst),
                1,
                "a completion after the second poll wakes the second waker"
            );
            assert!(poll_with(&mut f, &w2).is_ready());
        }
    });
}

#[test]
fn semaphore_future_dropped_as_permits_arrive() {
    model("semaphore_future_dropped_as_permits_arrive", || {
        let sem = Arc::new(Semaphore::new(0));
        let (w, _c) = counting();
        let mut f = sem.acquire_async();
        assert!(poll_with(&mut f, &w).is_pending());
        let next = {
            let sem = sem.clone();
            thread::spawn(move || block_on(sem.acquire_async()).unwrap().forget())
        };
        let releaser = {
            let sem = sem.clone();
            thread::spawn(move || sem.add_permits(1))
        };
        drop(f); // racing with the grant
        releaser.join().unwrap();
        next.join().unwrap(); // the permit reached it, whoever it was granted to first
        assert_eq!(sem.available_permits(), 0);
    });
}

#[test]
fn mutex_future_dropped_as_the_lock_is_released() {
    model("mutex_future_dropped_as_the_lock_is_released", || {
        let m = Arc::new(Mutex::new(0));
        let g = m.lock();
        let (w, _c) = counting();
        let mut f = m.lock_async();
        assert!(poll_with(&mut f, &w).is_pending());
        let next = {
            let m = m.clone();
            thread::spawn(move || *block_on(m.lock_async()) += 1)
        };
        drop(g);
        drop(f); // racing with the other waiter's queueing and the wake-up of `f`
        next.join().unwrap();
        assert_eq!(*m.lock(), 1);
    });
}

#[test]
fn recv_future_dropped_as_a_message_arrives() {
    model("recv_future_dropped_as_a_message_arrives", || {
        let (tx, rx) = mpmc::bounded::<u32>(1);
        let (w, _c) = counting();
        let mut f = rx.recv_async();
        assert!(poll_with(&mut f, &w).is_pending());
        let next = {
            let rx = rx.clone();
            thread::spawn(move || block_on(rx.recv_async()))
        };
        // (A clone: the sender stays connected. A disconnection racing with the put-back can
        // complete `next` as "disconnected" before the message is back in the buffer; it is
        // not lost, a later receive gets it.)
        let sender = {
            let tx = tx.clone();
            thread::spawn(move || tx.send(7).unwrap())
        };
        drop(f); // racing with the hand-off into its slot
        sender.join().unwrap();
        assert_eq!(next.join().unwrap(), Ok(7), "the message was passed on");
        drop(tx);
    });
}
