//! A channel keeps the record of a finished blocking send or receive for the next one (its
//! spare packet): every way a blocking operation can end must leave that record fit for the
//! next wait — waiting again, on the right task, for the right message.
#![cfg(not(any(loom, miri)))]

mod common;

use std::thread;

use common::{ms, rt1};
use spindle_sync::mpmc::{self, RecvTimeoutError, SendTimeoutError};

#[test]
fn every_way_a_blocking_operation_ends_leaves_the_channel_working() {
    let (tx, rx) = mpmc::bounded::<u64>(1);
    for round in 0..20 {
        // A receive that times out: the next receive must wait again, not see a stale result.
        assert_eq!(rx.recv_timeout(ms(1)), Err(RecvTimeoutError::Timeout));
        // A receive that blocks until another thread sends.
        let sender = thread::spawn({
            let tx = tx.clone();
            move || {
                thread::sleep(ms(2));
                tx.send(round).unwrap();
            }
        });
        assert_eq!(rx.recv(), Ok(round));
        sender.join().unwrap();
        // A send that times out on a full channel keeps its message.
        tx.send(1_000 + round).unwrap();
        assert_eq!(tx.send_timeout(7, ms(1)), Err(SendTimeoutError::Timeout(7)));
        // A send that blocks until another thread makes room.
        let receiver = thread::spawn({
            let rx = rx.clone();
            move || {
                thread::sleep(ms(2));
                rx.recv().unwrap()
            }
        });
        tx.send(2_000 + round).unwrap();
        assert_eq!(receiver.join().unwrap(), 1_000 + round);
        assert_eq!(rx.recv(), Ok(2_000 + round));
    }
}

#[test]
fn a_reused_record_wakes_the_task_that_waits_now() {
    // Two coroutines take turns blocking on the same channel: each blocked receive reuses the
    // record the other's receive left. Were the previous waiter's waker kept, the sender would
    // wake the wrong coroutine and the current one would never return.
    let rt = rt1();
    rt.block_on(|| {
        let (tx, rx) = mpmc::bounded::<u64>(0);
        let (turn_tx, turn_rx) = mpmc::bounded::<()>(0);
        let mut waiters = Vec::new();
        for who in 0..2u64 {
            let rx = rx.clone();
            let turn_rx = turn_rx.clone();
            waiters.push(spindle_rt::spawn(move || {
                let mut got = Vec::new();
                while turn_rx.recv().is_ok() {
                    got.push(rx.recv().unwrap());
                }
                (who, got)
            }));
        }
        for i in 0..40 {
            turn_tx.send(()).unwrap(); // one of them goes to wait on `rx`
            spindle_rt::yield_now(); // ... and parks there
            tx.send(i).unwrap();
        }
        drop(turn_tx);
        let mut all: Vec<u64> = waiters
            .into_iter()
            .flat_map(|h| h.join().unwrap().1)
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..40).collect::<Vec<_>>());
    });
}
