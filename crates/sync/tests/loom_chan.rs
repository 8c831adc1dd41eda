//! Loom models of the channels' hand-offs and of `select`'s registration: send/recv on
//! zero-capacity and bounded channels, disconnection, timeouts and cancellation racing with
//! the other side (no message lost or duplicated, no lost wake-up), and a select completing
//! exactly one arm.
//!
//! `RUSTFLAGS="--cfg loom -C overflow-checks=on" LOOM_MAX_PREEMPTIONS=2 cargo test -p spindle-sync --release --test loom_chan`
#![cfg(loom)]

mod loom_common;

use loom::thread;
use loom_common::{cancelled_at_park, later, model};
use spindle_sync::__loom::recycle_packets;
use spindle_sync::mpmc::{RecvError, RecvTimeoutError, SendError, TryRecvError, bounded};
use spindle_sync::{Select, select};

#[test]
fn rendezvous_send_recv() {
    model("rendezvous_send_recv", || {
        let (s, r) = bounded::<i32>(0);
        let t = thread::spawn(move || {
            s.send(1).unwrap();
            s.send(2).unwrap();
        });
        assert_eq!(r.recv(), Ok(1));
        assert_eq!(r.recv(), Ok(2));
        assert_eq!(r.recv(), Err(RecvError));
        t.join().unwrap();
    });
}

/// A thread sends 1 then 2 on a channel of capacity `cap`; this one receives them in order.
fn two_sends_two_receives(cap: usize) {
    let (s, r) = bounded::<i32>(cap);
    let t = thread::spawn(move || {
        s.send(1).unwrap();
        s.send(2).unwrap(); // with capacity 1: waits while 1 is buffered
    });
    assert_eq!(r.recv(), Ok(1));
    assert_eq!(r.recv(), Ok(2));
    t.join().unwrap();
}

#[test]
fn bounded_full_sender_waits() {
    model("bounded_full_sender_waits", || two_sends_two_receives(1));
}

#[test]
fn two_blocked_senders_keep_their_order() {
    // Both senders may block on the full buffer; each receive moves the first blocked sender's
    // message in. Per sender, FIFO; nothing lost or duplicated.
    model("two_blocked_senders_keep_their_order", || {
        let (s, r) = bounded::<i32>(1);
        let ts: Vec<_> = (0..2)
            .map(|k| {
                let s = s.clone();
                thread::spawn(move || {
                    s.send(k * 10).unwrap();
                    s.send(k * 10 + 1).unwrap();
                })
            })
            .collect();
        drop(s);
        let got: Vec<_> = r.iter().collect();
        ts.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(got.len(), 4, "{got:?}");
        for k in 0..2 {
            let mine: Vec<_> = got.iter().filter(|&&m| m / 10 == k).collect();
            assert_eq!(mine, [&(k * 10), &(k * 10 + 1)], "{got:?}");
        }
    });
}

#[test]
fn oneshot_send_races_receiver_drop() {
    model("oneshot_send_races_receiver_drop", || {
        let (s, r) = spindle_sync::oneshot::channel::<i32>();
        let t = thread::spawn(move || s.send(7));
        let got = r.recv_deadline(later());
        drop(r);
        match (got, t.join().unwrap()) {
            (Ok(7), Ok(())) => {}
            (Err(RecvTimeoutError::Timeout), _) => {} // loom's timed park gave up first
            other => panic!("{other:?}"),
        }
    });
}

#[test]
fn two_receivers_each_get_one() {
    model("two_receivers_each_get_one", || {
        let (s, r) = bounded::<i32>(0);
        let ts: Vec<_> = (0..2)
            .map(|_| {
                let r = r.clone();
                thread::spawn(move || r.recv().unwrap())
            })
            .collect();
        s.send(1).unwrap();
        s.send(2).unwrap();
        let mut got: Vec<_> = ts.into_iter().map(|t| t.join().unwrap()).collect();
        got.sort();
        assert_eq!(got, [1, 2]);
    });
}

// With packet reuse on (as outside loom; see `__loom::recycle_packets`), each side's second
// blocking operation reuses the packet of its first — rewriting its slot, its state and its
// waker — while the peer that completed the first may still be touching it: a completer that
// touched a packet after publishing its completion (say, waking after the publication, the
// order that a reference-counted queue entry allowed) is a data race on the waker that loom
// reports here.

#[test]
fn reused_packets_rendezvous_twice() {
    model("reused_packets_rendezvous_twice", || {
        recycle_packets(true);
        two_sends_two_receives(0);
    });
}

#[test]
fn reused_packet_after_a_timed_out_receive() {
    // The first receive may time out (aborted and unregistered) or be completed; either way
    // the second reuses its packet.
    model("reused_packet_after_a_timed_out_receive", || {
        recycle_packets(true);
        let (s, r) = bounded::<i32>(0);
        let t = thread::spawn(move || s.send(1).unwrap());
        let got = match r.recv_deadline(later()) {
            Ok(v) => v,
            Err(RecvTimeoutError::Timeout) => r.recv().unwrap(),
            Err(RecvTimeoutError::Disconnected) => panic!("disconnected"),
        };
        assert_eq!(got, 1);
        t.join().unwrap();
    });
}

#[test]
fn disconnect_wakes_both_sides() {
    model("disconnect_wakes_both_sides", || {
        let (s, r) = bounded::<i32>(0);
        let (s2, r2) = bounded::<i32>(0);
        let t = thread::spawn(move || {
            drop(s); // wakes the receiver below
            s2.send(5) // waits until the receiver below is dropped
        });
        assert_eq!(r.recv(), Err(RecvError));
        drop(r2);
        assert_eq!(t.join().unwrap(), Err(SendError(5)));
    });
}

#[test]
fn recv_timeout_races_send() {
    model("recv_timeout_races_send", || {
        let (s, r) = bounded::<i32>(1);
        let t = thread::spawn(move || s.send(1).unwrap());
        match r.recv_deadline(later()) {
            Ok(v) => assert_eq!(v, 1),
            Err(RecvTimeoutError::Timeout) => {
                t.join().unwrap();
                assert_eq!(
                    r.try_recv(),
                    Ok(1),
                    "the message is not lost to the timeout"
                );
                return;
            }
            Err(RecvTimeoutError::Disconnected) => panic!("disconnected"),
        }
        t.join().unwrap();
        assert_eq!(r.try_recv(), Err(TryRecvError::Disconnected));
    });
}

#[test]
fn recv_cancel_races_send() {
    // A rendezvous: the sender hands the message over just as the receiver is cancelled; the
    // receiver's guard puts it back. Either way the message is received exactly once.
    model("recv_cancel_races_send", || {
        let (s, r) = bounded::<i32>(0);
        let t = thread::spawn(move || s.send(1));
        let got = match cancelled_at_park(|| r.recv()) {
            Some(v) => v,
            None => r.recv(),
        };
        assert_eq!(got, Ok(1));
        assert_eq!(t.join().unwrap(), Ok(()));
        assert_eq!(r.try_recv(), Err(TryRecvError::Disconnected));
    });
}

#[test]
fn disconnect_waits_for_a_handed_over_message_to_be_taken() {
    // Two receivers; the sender sends one message and goes. The message may be handed to the
    // receiver that is then cancelled (its guard gives it back). The other receiver may see
    // "disconnected" only once no message can come any more: then none is left behind.
    model(
        "disconnect_waits_for_a_handed_over_message_to_be_taken",
        || {
            let (s, r) = spindle_sync::mpmc::unbounded::<i32>();
            let r2 = r.clone();
            let sender = thread::spawn(move || s.send(1).unwrap());
            let other = thread::spawn(move || r2.recv());
            let mine = cancelled_at_park(|| r.recv());
            sender.join().unwrap();
            let theirs = other.join().unwrap();
            let left = r.try_recv();
            let got = [mine.and_then(Result::ok), theirs.ok(), left.ok()];
            assert_eq!(got.iter().flatten().count(), 1, "exactly once: {got:?}");
            if theirs.is_err() {
                assert!(
                    left.is_err(),
                    "told disconnected, yet a message was left: {left:?}"
                );
            }
        },
    );
}

#[test]
fn send_cancel_races_recv() {
    model("send_cancel_races_recv", || {
        let (s, r) = bounded::<i32>(0);
        let t = thread::spawn(move || {
            let sent = cancelled_at_park(|| s.send(1));
            drop(s);
            sent
        });
        let got = r.recv();
        let sent = t.join().unwrap();
        // A completed send was delivered. A cancelled one may have been delivered too (the
        // receiver took the message just before the cancellation unwound the sender's park),
        // but never twice, and a message not delivered is dropped with the send.
        if sent == Some(Ok(())) {
            assert_eq!(got, Ok(1));
        }
        assert!(got == Ok(1) || got == Err(RecvError), "{got:?}");
    });
}

// ---------------------------------------------------------------------------------------------
// select

#[test]
fn select_two_recv_arms_exactly_one() {
    // Two rendezvous senders offer (with an immediate deadline) to a select over both: the
    // select gets exactly one message, and exactly that sender succeeds.
    model("select_two_recv_arms_exactly_one", || {
        let (s1, r1) = bounded::<i32>(0);
        let (s2, r2) = bounded::<i32>(0);
        let t1 = thread::spawn(move || s1.send(1).is_ok());
        // Returns its sender: a disconnected channel would make its arm ready.
        let t2 = thread::spawn(move || (s2.send_deadline(2, later()).is_ok(), s2));
        let got = select! {
            recv(r1) -> v => v.unwrap(),
            recv(r2) -> v => v.unwrap(),
        };
        if got == 2 {
            // t1 still waits: let it finish.
            assert_eq!(r1.recv(), Ok(1));
        }
        let ok1 = t1.join().unwrap();
        let (ok2, _s2) = t2.join().unwrap();
        assert!(ok1);
        assert_eq!(ok2, got == 2);
    });
}

#[test]
fn select_buffered_arms_keep_the_other_message() {
    model("select_buffered_arms_keep_the_other_message", || {
        let (s1, r1) = bounded::<i32>(1);
        let (s2, r2) = bounded::<i32>(1);
        let t1 = thread::spawn(move || s1.send(1).unwrap());
        let t2 = thread::spawn(move || s2.send(2).unwrap());
        let mut a = None;
        let mut b = None;
        let i = {
            let mut sel = Select::new();
            sel.recv(&r1, &mut a);
            sel.recv(&r2, &mut b);
            sel.wait()
        };
        t1.join().unwrap();
        t2.join().unwrap();
        match i {
            Some(0) => {
                assert_eq!((a, b), (Some(Ok(1)), None));
                assert_eq!(r2.try_recv(), Ok(2));
            }
            Some(1) => {
                assert_eq!((a, b), (None, Some(Ok(2))));
                assert_eq!(r1.try_recv(), Ok(1));
            }
            other => panic!("{other:?}"),
        }
    });
}

#[test]
fn select_send_arm_matches_select_recv_arm() {
    // Two selects on one zero-capacity channel, one offering a send and one a receive (each
    // with a deadline arm): they pair up, or both time out — never one side only.
    model("select_send_arm_matches_select_recv_arm", || {
        let (s, r) = bounded::<i32>(0);
        let t = thread::spawn(move || {
            select! {
                send(s, 7) -> v => v.is_ok(),
                deadline(later()) => false,
            }
        });
        let got = select! {
            recv(r) -> v => v.ok(),
            deadline(later()) => None,
        };
        let sent = t.join().unwrap();
        assert_eq!(got.is_some(), sent);
        if let Some(v) = got {
            assert_eq!(v, 7);
        }
    });
}

#[test]
fn select_timeout_races_send() {
    model("select_timeout_races_send", || {
        let (s, r) = bounded::<i32>(1);
        let t = thread::spawn(move || s.send(1).unwrap());
        let got = select! {
            recv(r) -> v => v.ok(),
            deadline(later()) => None,
        };
        t.join().unwrap();
        match got {
            Some(v) => assert_eq!(v, 1),
            None => assert_eq!(r.try_recv(), Ok(1), "not lost to the timeout"),
        }
    });
}

#[test]
fn select_cancel_races_send() {
    model("select_cancel_races_send", || {
        let (s1, r1) = bounded::<i32>(0);
        let (_s2, r2) = bounded::<i32>(0);
        let t = thread::spawn(move || s1.send(1));
        let got = cancelled_at_park(|| {
            select! {
                recv(r1) -> v => v.ok(),
                recv(r2) -> v => v.ok(),
            }
        });
        let got = match got {
            Some(v) => v,
            // Cancelled: unregistered from both; a message handed over meanwhile was put back.
            None => r1.recv().ok(),
        };
        assert_eq!(got, Some(1));
        assert_eq!(t.join().unwrap(), Ok(()));
    });
}

// ---------------------------------------------------------------------------------------------
// oneshot (its own protocol: a waiting list woken all at once by the send or the sender's drop)

#[test]
fn oneshot_send_wakes_a_blocked_receiver() {
    model("oneshot_send_wakes_a_blocked_receiver", || {
        let (s, r) = spindle_sync::oneshot::channel::<i32>();
        let t = thread::spawn(move || s.send(7));
        assert_eq!(r.recv(), Ok(7));
        assert_eq!(t.join().unwrap(), Ok(()));
        assert_eq!(r.recv(), Err(RecvError), "received once");
    });
}

#[test]
fn oneshot_receiver_dropped_with_a_forgotten_registration_races_send() {
    // A receive future polled once and forgotten leaves its registration in the list, so the
    // send takes the list under the lock and leaves only with its unlocking store, while the
    // receiver is dropped: every interleaving must end with one free and no deadlock. (The
    // receiver's drop frees at once only once the sender's share is gone; the channel's
    // `Alive` marker makes a use by the sender after a free a data race that loom reports, so
    // a drop that freed at `TX_CLOSED`, inside the sender's hold of the lock, or a send that
    // gave up its share with the locking compare-and-swap, fails here.)
    model(
        "oneshot_receiver_dropped_with_a_forgotten_registration_races_send",
        || {
            use std::future::Future;
            let (s, r) = spindle_sync::oneshot::channel::<i32>();
            let mut fut = Box::pin(r.recv_async());
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            assert!(fut.as_mut().poll(&mut cx).is_pending());
            std::mem::forget(fut);
            let t = thread::spawn(move || s.send(7));
            // Lets the send begin: loom would otherwise never run it before the drop's first
            // look at the state (the two threads' first operations do not conflict).
            thread::yield_now();
            drop(r);
            // Either the send came first, or it found the receiver gone.
            let _ = t.join().unwrap();
        },
    );
}

#[test]
fn oneshot_sender_drop_wakes_a_blocked_receiver() {
    model("oneshot_sender_drop_wakes_a_blocked_receiver", || {
        let (s, r) = spindle_sync::oneshot::channel::<i32>();
        let t = thread::spawn(move || drop(s));
        assert_eq!(r.recv(), Err(RecvError));
        t.join().unwrap();
    });
}

#[test]
fn oneshot_recv_cancel_races_send() {
    // The receive is cancelled at its park while the send lands: the message stays in the
    // channel for the next receive, and the cancelled receive left no registration behind.
    model("oneshot_recv_cancel_races_send", || {
        let (s, r) = spindle_sync::oneshot::channel::<i32>();
        let t = thread::spawn(move || s.send(1));
        let got = match cancelled_at_park(|| r.recv()) {
            Some(v) => v,
            None => r.recv(),
        };
        assert_eq!(got, Ok(1));
        assert_eq!(t.join().unwrap(), Ok(()));
    });
}

#[test]
fn oneshot_select_races_send() {
    // A select over a oneshot and an idle channel, with a deadline: either it takes the
    // message, or (timed out) the message is still there.
    model("oneshot_select_races_send", || {
        let (s, r) = spindle_sync::oneshot::channel::<i32>();
        let (_idle_tx, idle_rx) = bounded::<i32>(0);
        let t = thread::spawn(move || s.send(5));
        let got = select! {
            recv(r) -> v => v.ok(),
            recv(idle_rx) -> _ => unreachable!("nobody sends there"),
            deadline(later()) => None,
        };
        assert_eq!(t.join().unwrap(), Ok(()));
        match got {
            Some(v) => assert_eq!(v, 5),
            None => assert_eq!(r.try_recv(), Ok(5), "not lost to the timeout"),
        }
    });
}

/// Counts its drops in a loom atomic: a message dropped twice, or never, fails the model.
struct Counted(std::sync::Arc<loom::sync::atomic::AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, loom::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn oneshot_handles_race_to_free() {
    // The two handles own the channel together, with no reference count: the sent message is
    // dropped exactly once, whichever handle leaves last (the receiver drops it unread).
    model("oneshot_handles_race_to_free", || {
        let drops = std::sync::Arc::new(loom::sync::atomic::AtomicUsize::new(0));
        let (s, r) = spindle_sync::oneshot::channel::<Counted>();
        let msg = Counted(drops.clone());
        // Either the send lands and the receiver's drop drops the message unread, or the
        // receiver is gone first and the failed send gives it back (dropped here).
        let t = thread::spawn(move || drop(s.send(msg)));
        drop(r);
        t.join().unwrap();
        assert_eq!(drops.load(loom::sync::atomic::Ordering::SeqCst), 1);
    });
}

#[test]
fn oneshot_sender_drop_races_receiver_drop() {
    model("oneshot_sender_drop_races_receiver_drop", || {
        let (s, r) = spindle_sync::oneshot::channel::<Counted>();
        let t = thread::spawn(move || drop(s));
        drop(r);
        t.join().unwrap();
    });
}

#[test]
fn oneshot_two_receives_race_for_the_message() {
    // Receives through one shared receiver: exactly one gets the message, the other hears
    // that it was received (or, having waited, is woken to hear it).
    model("oneshot_two_receives_race_for_the_message", || {
        let (s, r) = spindle_sync::oneshot::channel::<i32>();
        let r = std::sync::Arc::new(r);
        let r2 = r.clone();
        let t = thread::spawn(move || r2.recv());
        s.send(7).unwrap();
        let mine = r.recv();
        let theirs = t.join().unwrap();
        match (mine, theirs) {
            (Ok(7), Err(RecvError)) | (Err(RecvError), Ok(7)) => {}
            other => panic!("{other:?}"),
        }
    });
}

#[test]
fn oneshot_timed_recv_races_send() {
    // A receive that times out (loom's timed park gives up at once) while the send lands:
    // the message is then still in the channel, and the timed-out receive left no
    // registration behind for the send to wake.
    model("oneshot_timed_recv_races_send", || {
        let (s, r) = spindle_sync::oneshot::channel::<i32>();
        let t = thread::spawn(move || s.send(3));
        match r.recv_deadline(later()) {
            Ok(v) => assert_eq!(v, 3),
            Err(RecvTimeoutError::Timeout) => {
                assert_eq!(t.join().unwrap(), Ok(()));
                assert_eq!(r.try_recv(), Ok(3), "not lost to the timeout");
                return;
            }
            Err(e) => panic!("{e:?}"),
        }
        assert_eq!(t.join().unwrap(), Ok(()));
    });
}
