//! The oneshot channel, which has a protocol of its own (not the channels' `Chan`): blocking,
//! timed, cancelled and async receives, select arms, and several receives through one
//! `&Receiver` — each leaves the channel usable and loses no wake-up.
#![cfg(not(any(loom, miri)))]

mod common;

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use common::{eventually, ms, rt};
use spindle_sync::oneshot::{self, RecvError, RecvTimeoutError, TryRecvError};
use spindle_sync::{mpsc, select};

#[test]
fn send_then_receive_then_nothing_more() {
    let (tx, rx) = oneshot::channel();
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    assert!(!tx.is_closed());
    tx.send(String::from("hi")).unwrap();
    assert_eq!(rx.recv().as_deref(), Ok("hi"));
    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    assert_eq!(rx.recv(), Err(RecvError));
}

#[test]
fn a_dropped_receiver_gives_the_message_back_and_closes_the_sender() {
    let (tx, rx) = oneshot::channel::<Box<u32>>();
    drop(rx);
    assert!(tx.is_closed());
    assert_eq!(*tx.send(Box::new(3)).unwrap_err().0, 3);
}

#[test]
fn a_message_left_in_the_channel_is_dropped_with_the_receiver() {
    let token = Arc::new(());
    let (tx, rx) = oneshot::channel();
    tx.send(token.clone()).unwrap();
    assert_eq!(Arc::strong_count(&token), 2);
    drop(rx);
    assert_eq!(Arc::strong_count(&token), 1);
}

#[test]
fn a_thread_blocked_in_recv_is_woken_by_send_and_by_the_senders_drop() {
    let (tx, rx) = oneshot::channel();
    let t = std::thread::spawn(move || rx.recv());
    std::thread::sleep(ms(20)); // (most likely) blocked by now
    tx.send(9).unwrap();
    assert_eq!(t.join().unwrap(), Ok(9));

    let (tx, rx) = oneshot::channel::<u8>();
    let t = std::thread::spawn(move || rx.recv());
    std::thread::sleep(ms(20));
    drop(tx);
    assert_eq!(t.join().unwrap(), Err(RecvError));
}

#[test]
fn a_timed_out_receive_leaves_the_channel_usable() {
    let (tx, rx) = oneshot::channel();
    let start = Instant::now();
    assert_eq!(rx.recv_timeout(ms(30)), Err(RecvTimeoutError::Timeout));
    assert!(start.elapsed() >= ms(30));
    assert_eq!(
        rx.recv_deadline(Instant::now()),
        Err(RecvTimeoutError::Timeout)
    );
    let t = std::thread::spawn(move || {
        std::thread::sleep(ms(20));
        tx.send(4).unwrap();
    });
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(4));
    t.join().unwrap();
}

#[test]
fn a_cancelled_coroutine_receive_leaves_the_channel_usable() {
    let rt = rt();
    let (tx, rx) = oneshot::channel();
    let rx = Arc::new(rx);
    let waiting = Arc::new(AtomicUsize::new(0));
    let (rx2, waiting2) = (rx.clone(), waiting.clone());
    let h = rt.spawn(move || {
        waiting2.fetch_add(1, Ordering::SeqCst);
        rx2.recv()
    });
    eventually("the coroutine waits", || {
        waiting.load(Ordering::SeqCst) == 1
    });
    std::thread::sleep(ms(10));
    h.cancel();
    assert!(matches!(h.join(), Err(spindle_rt::JoinError::Cancelled)));
    tx.send(1).unwrap();
    assert_eq!(rx.recv(), Ok(1));
}

#[test]
fn two_receives_through_one_receiver_one_gets_the_message() {
    let (tx, rx) = oneshot::channel();
    let rx = Arc::new(rx);
    let ts: Vec<_> = (0..2)
        .map(|_| {
            let rx = rx.clone();
            std::thread::spawn(move || rx.recv())
        })
        .collect();
    std::thread::sleep(ms(20));
    tx.send(5).unwrap();
    let got: Vec<_> = ts.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(
        got == [Ok(5), Err(RecvError)] || got == [Err(RecvError), Ok(5)],
        "{got:?}"
    );
}

#[test]
fn select_takes_a_oneshot_that_is_ready_or_becomes_ready() {
    let (tx, rx) = oneshot::channel();
    let (_idle_tx, idle_rx) = mpsc::bounded::<u8>(0);
    tx.send(1).unwrap();
    let got = select! {
        recv(rx) -> v => v,
        recv(idle_rx) -> _ => unreachable!(),
    };
    assert_eq!(got, Ok(1));

    let (tx, rx) = oneshot::channel();
    let t = std::thread::spawn(move || {
        std::thread::sleep(ms(20));
        tx.send(2).unwrap();
    });
    let got = select! {
        recv(rx) -> v => v,
        recv(idle_rx) -> _ => unreachable!(),
        timeout(Duration::from_secs(10)) => panic!("not woken"),
    };
    assert_eq!(got, Ok(2));
    t.join().unwrap();

    // A sender dropped without sending makes the arm ready with an error.
    let (tx, rx) = oneshot::channel::<u8>();
    let t = std::thread::spawn(move || {
        std::thread::sleep(ms(20));
        drop(tx);
    });
    let got = select! {
        recv(rx) -> v => v,
        timeout(Duration::from_secs(10)) => panic!("not woken"),
    };
    assert_eq!(got, Err(RecvError));
    t.join().unwrap();
}

#[test]
fn a_timed_out_select_leaves_the_message_for_later() {
    let (tx, rx) = oneshot::channel();
    let got = select! {
        recv(rx) -> v => Some(v),
        timeout(ms(20)) => None,
    };
    assert_eq!(got, None);
    tx.send(3).unwrap();
    assert_eq!(rx.recv(), Ok(3));
}

/// Counts its wake-ups.
struct Counter(AtomicUsize);
impl Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn poll_with<F: Future + Unpin>(f: &mut F, w: &Arc<Counter>) -> Poll<F::Output> {
    let waker = Waker::from(w.clone());
    Pin::new(f).poll(&mut Context::from_waker(&waker))
}

#[test]
fn a_receive_future_is_woken_through_its_latest_waker() {
    let (tx, rx) = oneshot::channel();
    let (a, b) = (
        Arc::new(Counter(AtomicUsize::new(0))),
        Arc::new(Counter(AtomicUsize::new(0))),
    );
    let mut fut = rx.recv_async();
    assert!(poll_with(&mut fut, &a).is_pending());
    assert!(poll_with(&mut fut, &b).is_pending());
    tx.send(8).unwrap();
    assert_eq!(a.0.load(Ordering::SeqCst), 0);
    assert_eq!(b.0.load(Ordering::SeqCst), 1);
    assert_eq!(poll_with(&mut fut, &b), Poll::Ready(Ok(8)));
}

#[test]
fn a_dropped_receive_future_leaves_the_message_in_the_channel() {
    let (tx, rx) = oneshot::channel();
    let w = Arc::new(Counter(AtomicUsize::new(0)));
    let mut fut = rx.recv_async();
    assert!(poll_with(&mut fut, &w).is_pending());
    tx.send(6).unwrap(); // wakes the future...
    drop(fut); // ...which is dropped instead of polled
    assert_eq!(w.0.load(Ordering::SeqCst), 1);
    assert_eq!(rx.try_recv(), Ok(6));
}

#[test]
fn an_awaited_receiver_between_coroutines() {
    let rt = rt();
    let (tx, rx) = oneshot::channel();
    let h = rt.spawn(move || spindle_park::block_on(rx.into_future()));
    rt.spawn(move || tx.send(11).unwrap()).join().unwrap();
    assert_eq!(h.join().unwrap(), Ok(11));
}
