//! Channel edge cases: `chan/`, `select.rs` and `oneshot.rs`.
#![cfg(not(any(loom, miri)))]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use common::{ms, rt1};
use spindle_sync::{Select, mpsc, select};

/// A coroutine looping on a blocking `select!` whose arm always has a message must still yield
/// its worker now and then (the cooperative budget), as a plain `recv` does: a sibling on the
/// same worker — say, the one that would tell it to stop — must get to run.
#[test]
fn an_always_ready_select_yields_its_worker() {
    const TOTAL: u32 = 200_000;
    let (tx, rx) = mpsc::unbounded::<u32>();
    for i in 0..TOTAL {
        tx.send(i).unwrap();
    }
    let (_quit_tx, quit_rx) = mpsc::bounded::<()>(0);
    let rt = rt1();
    let other_ran = Arc::new(AtomicBool::new(false));
    let o = other_ran.clone();
    let consumed = rt.block_on(move || {
        let other = spindle_rt::spawn(move || o.store(true, Ordering::SeqCst));
        let mut n = 0u32;
        while !other_ran.load(Ordering::SeqCst) && n < TOTAL - 1 {
            select! {
                recv(rx) -> m => { m.unwrap(); }
                recv(quit_rx) -> _ => unreachable!(),
            }
            n += 1;
        }
        other.join().unwrap();
        n
    });
    // The budget is 128 operations a slice: the sibling runs after a few hundred at most.
    assert!(
        consumed < 10_000,
        "a blocking select never yielded its worker: {consumed} selects in a row"
    );
}

/// A `Select` whose send arm has completed holds no message any more: waiting on the same
/// `Select` again must not "complete" that arm again. It used to register the spent arm with an
/// empty slot, which a receiver on a zero-capacity channel then claimed as a rendezvous: the
/// select reported the arm sent while the receiver got nothing (and on a channel with room,
/// `wait` spun for ever: the spent arm always looked ready, and never completed).
#[test]
fn a_spent_send_arm_does_not_complete_again() {
    let (tx, rx) = mpsc::bounded::<u32>(0);
    let receiver = thread::spawn(move || {
        let first = rx.recv();
        // Let the select register its arms for the second wait first.
        thread::sleep(ms(50));
        let second = rx.recv_timeout(ms(200));
        (first, second)
    });
    let mut sent = None;
    let (first_wait, second_wait) = {
        let mut sel = Select::new();
        sel.send(&tx, 7, &mut sent);
        let first = sel.wait_timeout(ms(5_000));
        let second = sel.wait_timeout(ms(500));
        (first, second)
    };
    let (first, second) = receiver.join().unwrap();
    assert_eq!(first_wait, Some(0));
    assert_eq!(first, Ok(7));
    assert_eq!(sent, Some(Ok(())));
    assert!(
        second.is_err(),
        "the receiver got a second message: {second:?}"
    );
    assert_eq!(
        second_wait, None,
        "the spent send arm completed again (the receiver got nothing)"
    );
}
