//! A `select` receive arm must not take a message out of order.
//!
//! `Chan::register_recv` queues the select's entry even when the buffer is not empty (a message
//! arrived between the select's `try_now` and its registration), and only reports "ready": the
//! select then aborts its record. Between that registration and the abort, a sender's
//! `try_send_locked` finds the select's entry first in the receivers' queue, claims it (its
//! record is still `WAITING`) and hands it the *newer* message directly, while the older one
//! stays in the buffer. The one consumer of an mpsc channel then receives m(k+1) before m(k),
//! against "Order: FIFO per channel" (crate docs) and the channel invariant "receivers wait
//! only while the buffer is empty" (chan/mod.rs).
//!
//! A race (it failed in 5 of 6 runs of 15 s when found, within 0.8–5 s): this stress form runs
//! 3 s; the deterministic form is `chan::tests::a_ready_select_receive_is_not_queued`.
#![cfg(not(any(loom, miri)))]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use spindle_sync::{mpsc, select};

#[test]
fn select_recv_keeps_fifo_order() {
    let (tx, rx) = mpsc::unbounded::<u64>();
    let (_never_tx, never_rx) = mpsc::unbounded::<u64>();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let producer = std::thread::spawn(move || {
        let mut i = 0u64;
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        while !s.load(Ordering::Relaxed) {
            // Bursts of two: the second send often lands while the consumer is registering.
            if tx.send(i).is_err() || tx.send(i + 1).is_err() {
                break;
            }
            i += 2;
            // A pause of a varying length, so that bursts start at every point of the
            // consumer's loop.
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            for _ in 0..(rng % 4096) {
                std::hint::spin_loop();
            }
        }
    });
    let start = Instant::now();
    let mut expected = 0u64;
    let mut out_of_order = None;
    while start.elapsed() < Duration::from_secs(3) {
        let got = select! {
            recv(rx) -> m => m.unwrap(),
            recv(never_rx) -> _ => unreachable!(),
        };
        if got != expected {
            out_of_order = Some((expected, got));
            break;
        }
        expected += 1;
    }
    stop.store(true, Ordering::Relaxed);
    drop(rx);
    let _ = producer.join();
    assert_eq!(
        out_of_order, None,
        "received (expected, got) out of order after {expected} messages in order"
    );
}
