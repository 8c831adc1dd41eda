//! Waiting again on the same `Select` overwrites (and drops) what a receive arm got
//! in an earlier wait. The caller cannot read an arm's `out` between two waits (the `Select`
//! borrows it mutably until it is dropped), so the message received by the first wait is lost:
//! taken out of the channel, then dropped by the second wait's store into the same `out`.
//! The docs say "Waiting again on the same `Select` retries its arms" (and `chan_edge_cases.rs`
//! waits twice on one `Select`); like a spent send arm, a receive arm whose `out` already holds
//! a result must not complete again.
#![cfg(not(any(loom, miri)))]

mod common;

use common::ms;
use spindle_sync::{Select, TryRecvError, mpsc, oneshot};

/// Two messages leave the channel, one reaches the caller.
#[test]
fn a_second_wait_does_not_drop_the_first_waits_message() {
    let (tx, rx) = mpsc::unbounded::<u32>();
    tx.send(1).unwrap();
    tx.send(2).unwrap();
    let mut got = None;
    let (first, second) = {
        let mut sel = Select::new();
        sel.recv(&rx, &mut got);
        let first = sel.wait_timeout(ms(1_000));
        let second = sel.wait_timeout(ms(50));
        (first, second)
    };
    let left: Vec<u32> = rx.try_iter().collect();
    eprintln!(
        "first wait {first:?}, second wait {second:?}, out {got:?}, left in channel {left:?}"
    );
    assert_eq!(first, Some(0));
    // Every message is somewhere: in `got` or still in the channel.
    let mut all: Vec<u32> = left;
    if let Some(Ok(m)) = got {
        all.push(m);
    }
    all.sort();
    assert_eq!(all, [1, 2], "a message received by the select was lost");
}

/// A oneshot arm that received its message in the first wait "completes" again in the second
/// one with `Err(RecvError)`, overwriting the message: the caller sees an error although the
/// message was sent, and the second wait returns at once instead of timing out.
#[test]
fn a_second_wait_does_not_turn_a_oneshot_message_into_an_error() {
    let (otx, orx) = oneshot::channel::<u32>();
    let (_tx, rx) = mpsc::unbounded::<u32>(); // never ready
    otx.send(42).unwrap();
    let mut one = None;
    let mut other = None;
    let (first, second) = {
        let mut sel = Select::new();
        sel.recv(&orx, &mut one);
        sel.recv(&rx, &mut other);
        let first = sel.wait_timeout(ms(1_000));
        let second = sel.wait_timeout(ms(50));
        (first, second)
    };
    eprintln!("first wait {first:?}, second wait {second:?}, oneshot arm's out {one:?}");
    assert_eq!(first, Some(0));
    assert_eq!(one, Some(Ok(42)), "the oneshot's message was overwritten");
    assert_eq!(
        second, None,
        "nothing new was ready: the second wait must time out"
    );
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
}

/// Once every arm is spent, nothing can complete a wait: `wait` returns `None` at once, as with
/// no arms, instead of parking for ever.
#[test]
fn a_wait_with_every_arm_spent_returns_none() {
    let (done_tx, done_rx) = mpsc::unbounded();
    std::thread::spawn(move || {
        let (tx, rx) = mpsc::unbounded::<u32>();
        tx.send(1).unwrap();
        tx.send(2).unwrap();
        let mut got = None;
        let waits = {
            let mut sel = Select::new();
            sel.recv(&rx, &mut got);
            (sel.wait(), sel.wait(), sel.try_wait())
        };
        let _ = done_tx.send((waits, got, rx.try_recv()));
    });
    let (waits, got, left) = done_rx
        .recv_timeout(ms(5_000))
        .expect("a wait with every arm spent blocked");
    assert_eq!(waits, (Some(0), None, None));
    assert_eq!(got, Some(Ok(1)));
    assert_eq!(left, Ok(2));
}
