//! The async variants: futures that wait in the primitives' own queues, next to blocked
//! coroutines and threads (one FIFO order across kinds), woken through the `Waker` of their
//! latest poll (no lost wake-up), and cancel-safe: dropping a pending future to which a lock,
//! permits, a `notify_one` or a message was handed in that instant passes it on.
//!
//! Futures are driven by hand here (`poll_with` and a counting waker), so the interleavings
//! are deterministic: hand something off, then drop the future before polling it again.
#![cfg(not(any(loom, miri)))]

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use common::{eventually, ms, rt, rt1};
use spindle_park::block_on;
use spindle_sync::{Mutex, Notify, RwLock, Semaphore, WaitGroup, mpmc, mpsc, oneshot};

/// A waker that counts its wake-ups.
#[derive(Default)]
struct Counter(AtomicUsize);

impl Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A counting waker and its count.
fn counting() -> (Waker, Arc<Counter>) {
    let c = Arc::new(Counter::default());
    (Waker::from(c.clone()), c)
}

fn count(c: &Counter) -> usize {
    c.0.load(Ordering::SeqCst)
}

/// Polls `fut` once with `waker`.
fn poll_with<F: Future + Unpin>(fut: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(fut).poll(&mut Context::from_waker(waker))
}

fn pending<F: Future + Unpin>(fut: &mut F, waker: &Waker) {
    assert!(poll_with(fut, waker).is_pending(), "expected Pending");
}

fn ready<F: Future + Unpin>(fut: &mut F, waker: &Waker) -> F::Output {
    match poll_with(fut, waker) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("expected Ready"),
    }
}

fn waiters(dbg: &impl std::fmt::Debug) -> String {
    format!("{dbg:?}")
}

// ---------------------------------------------------------------------------------------------
// Wake-ups: the latest poll's waker is woken, exactly once; a ready future is not woken.

#[test]
fn the_latest_pollers_waker_is_woken() {
    let n = Notify::new();
    let (w1, c1) = counting();
    let (w2, c2) = counting();
    let mut f = n.notified();
    pending(&mut f, &w1);
    pending(&mut f, &w2); // e.g. the future moved to another task
    n.notify_one();
    assert_eq!(
        (count(&c1), count(&c2)),
        (0, 1),
        "the new waker is woken, not the old"
    );
    ready(&mut f, &w2);
    assert_eq!(count(&c2), 1);
}

#[test]
fn a_future_is_woken_once_per_completion_across_many_repolls() {
    let (tx, rx) = mpsc::bounded::<u32>(1);
    let (w, c) = counting();
    let mut f = rx.recv_async();
    for _ in 0..5 {
        pending(&mut f, &w); // re-polls with the same waker: no duplicate registration
    }
    assert_eq!(waiters(&tx).matches("waiting_receivers: 1").count(), 1);
    tx.send(9).unwrap();
    assert_eq!(count(&c), 1);
    assert_eq!(ready(&mut f, &w), Ok(9));
}

/// A tiny executor: polls, and parks the thread until the waker fires. A lost wake-up hangs it:
/// it gives up after 10 s.
fn run_parking<F: Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread, AtomicUsize);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.1.fetch_add(1, Ordering::SeqCst);
            self.0.unpark();
        }
    }
    let unpark = Arc::new(Unpark(std::thread::current(), AtomicUsize::new(0)));
    let waker = Waker::from(unpark.clone());
    let mut fut = std::pin::pin!(fut);
    let mut seen = 0;
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut Context::from_waker(&waker)) {
            return v;
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while unpark.1.load(Ordering::SeqCst) == seen {
            assert!(std::time::Instant::now() < deadline, "lost wake-up");
            std::thread::park_timeout(Duration::from_millis(100));
        }
        seen = unpark.1.load(Ordering::SeqCst);
    }
}

#[test]
fn no_lost_wake_up_channel_ping_pong_with_a_thread() {
    let (to_thread, from_main) = mpsc::bounded::<u32>(0);
    let (to_main, from_thread) = mpsc::bounded::<u32>(0);
    let t = std::thread::spawn(move || {
        for x in from_main {
            to_main.send(x + 1).unwrap();
        }
    });
    run_parking(async {
        for i in 0..20_000 {
            to_thread.send_async(i).await.unwrap();
            assert_eq!(from_thread.recv_async().await, Ok(i + 1));
        }
    });
    drop(to_thread);
    t.join().unwrap();
}

#[test]
fn no_lost_wake_up_mutex_and_semaphore_under_contention() {
    let m = Arc::new(Mutex::new(0u64));
    let sem = Arc::new(Semaphore::new(1));
    let threads: Vec<_> = (0..3)
        .map(|i| {
            let (m, sem) = (m.clone(), sem.clone());
            std::thread::spawn(move || {
                for _ in 0..5_000 {
                    if i == 0 {
                        *m.lock() += 1;
                        drop(sem.acquire().unwrap());
                    } else {
                        run_parking(async {
                            *m.lock_async().await += 1;
                            drop(sem.acquire_async().await.unwrap());
                        });
                    }
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(*m.lock(), 15_000);
    assert_eq!(sem.available_permits(), 1);
}

// ---------------------------------------------------------------------------------------------
// Mixed with coroutines and threads: one queue, one FIFO order.

#[test]
fn coroutines_threads_and_futures_share_a_mutex() {
    let rt = rt();
    let m = Arc::new(Mutex::new(0u64));
    let cos: Vec<_> = (0..4)
        .map(|i| {
            let m = m.clone();
            rt.spawn(move || {
                for _ in 0..2_000 {
                    if i % 2 == 0 {
                        // Inside a coroutine, block_on suspends the coroutine while pending.
                        *block_on(m.lock_async()) += 1;
                    } else {
                        *m.lock() += 1;
                    }
                }
            })
        })
        .collect();
    let t = {
        let m = m.clone();
        std::thread::spawn(move || {
            for _ in 0..2_000 {
                *block_on(m.lock_async()) += 1;
            }
        })
    };
    for _ in 0..2_000 {
        *m.lock() += 1;
    }
    cos.into_iter().for_each(|c| c.join().unwrap());
    t.join().unwrap();
    assert_eq!(*m.lock(), 12_000);
}

#[test]
fn channels_between_async_code_coroutines_and_threads() {
    let rt = rt();
    let (tx, rx) = mpmc::bounded::<u64>(2);
    let producers: Vec<_> = (0..2)
        .map(|p| {
            let tx = tx.clone();
            rt.spawn(move || {
                for i in 0..1_000 {
                    let x = p * 1_000 + i;
                    if p == 0 {
                        block_on(tx.send_async(x)).unwrap();
                    } else {
                        tx.send(x).unwrap();
                    }
                }
            })
        })
        .collect();
    let thread_producer = {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for i in 0..1_000 {
                block_on(tx.send_async(2_000 + i)).unwrap();
            }
        })
    };
    drop(tx);
    let co_consumer = {
        let rx = rx.clone();
        rt.spawn(move || {
            let mut sum = 0;
            while let Ok(x) = block_on(rx.recv_async()) {
                sum += x;
            }
            sum
        })
    };
    let mut sum = 0;
    while let Ok(x) = block_on(rx.recv_async()) {
        sum += x;
    }
    producers.into_iter().for_each(|p| p.join().unwrap());
    thread_producer.join().unwrap();
    sum += co_consumer.join().unwrap();
    assert_eq!(sum, (0..3_000).sum::<u64>());
}

#[test]
fn semaphore_fifo_across_a_coroutine_a_future_and_a_thread() {
    let rt = rt1();
    let sem = Arc::new(Semaphore::new(0));
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    // 1st in line: a coroutine asking for 2 (it holds back those behind it).
    let co = {
        let (sem, order) = (sem.clone(), order.clone());
        rt.spawn(move || {
            let p = sem.acquire_many(2).unwrap();
            order.lock().unwrap().push("coroutine");
            p.forget();
        })
    };
    eventually("coroutine queued", || waiters(&sem).contains("waiters: 1"));
    // 2nd: a future.
    let (w, c) = counting();
    let mut fut = sem.acquire_async();
    pending(&mut fut, &w);
    assert!(waiters(&sem).contains("waiters: 2"));
    // 3rd: a thread.
    let t = {
        let (sem, order) = (sem.clone(), order.clone());
        std::thread::spawn(move || {
            let p = sem.acquire().unwrap();
            order.lock().unwrap().push("thread");
            p.forget();
        })
    };
    eventually("thread queued", || waiters(&sem).contains("waiters: 3"));

    sem.add_permits(1); // not enough for the first: nobody behind it passes
    std::thread::sleep(ms(20));
    assert_eq!(count(&c), 0);
    assert!(order.lock().unwrap().is_empty());
    sem.add_permits(1);
    co.join().unwrap();
    assert_eq!(
        count(&c),
        0,
        "the future is not served before the coroutine"
    );
    sem.add_permits(1);
    assert_eq!(count(&c), 1, "then the future");
    ready(&mut fut, &w).unwrap().forget();
    order.lock().unwrap().push("future");
    assert!(!t.is_finished());
    sem.add_permits(1);
    t.join().unwrap();
    assert_eq!(*order.lock().unwrap(), ["coroutine", "future", "thread"]);
}

#[test]
fn rwlock_fifo_a_future_writer_between_thread_readers() {
    let l = Arc::new(RwLock::new(0));
    let r = l.read();
    let (w, c) = counting();
    let mut writer = l.write_async();
    pending(&mut writer, &w);
    // A reader arriving now queues behind the (async) writer.
    let reader = {
        let l = l.clone();
        std::thread::spawn(move || *l.read())
    };
    eventually("reader queued", || waiters(&*l).contains("waiters: 2"));
    drop(r);
    assert_eq!(count(&c), 1);
    let mut g = ready(&mut writer, &w);
    *g = 5;
    assert!(!reader.is_finished());
    drop(g);
    assert_eq!(
        reader.join().unwrap(),
        5,
        "the reader got in after the writer"
    );
}

#[test]
fn mutex_an_async_waiter_is_served_in_turn() {
    let m = Arc::new(Mutex::new(Vec::new()));
    let g = m.lock();
    let a = {
        let m = m.clone();
        std::thread::spawn(move || m.lock().push("thread"))
    };
    std::thread::sleep(ms(30)); // the thread spins, then queues
    let (w, c) = counting();
    let mut fut = m.lock_async();
    pending(&mut fut, &w);
    drop(g);
    a.join().unwrap();
    eventually("the future is woken", || count(&c) == 1);
    ready(&mut fut, &w).push("future");
    assert_eq!(*m.lock(), ["thread", "future"]);
}

#[test]
fn notify_one_serves_futures_and_threads_in_order() {
    let n = Arc::new(Notify::new());
    let (w, c) = counting();
    let mut first = n.notified();
    pending(&mut first, &w);
    let t = {
        let n = n.clone();
        std::thread::spawn(move || n.wait())
    };
    eventually("thread waits", || waiters(&*n).contains("waiters: 2"));
    n.notify_one();
    assert_eq!(count(&c), 1, "the first in line was the future");
    ready(&mut first, &w);
    assert!(!t.is_finished());
    n.notify_one();
    t.join().unwrap();
}

#[test]
fn notify_all_reaches_polled_futures_only() {
    let n = Notify::new();
    let (w, c) = counting();
    let mut polled = n.notified();
    let mut unpolled = n.notified();
    pending(&mut polled, &w);
    n.notify_all();
    assert_eq!(count(&c), 1);
    ready(&mut polled, &w);
    // Not queued when notify_all came, and notify_all stores no permit.
    pending(&mut unpolled, &w);
    n.notify_one();
    ready(&mut unpolled, &w);
}

#[test]
fn waitgroup_async_and_thread_waiters() {
    let wg = Arc::new(WaitGroup::new());
    wg.add(2);
    let t = {
        let wg = wg.clone();
        std::thread::spawn(move || wg.wait())
    };
    let (w, c) = counting();
    let mut fut = wg.wait_async();
    pending(&mut fut, &w);
    wg.done();
    assert_eq!(count(&c), 0);
    wg.done();
    assert_eq!(count(&c), 1);
    ready(&mut fut, &w);
    t.join().unwrap();
    ready(&mut wg.wait_async(), &w); // count zero: ready at once
}

#[test]
fn oneshot_receiver_can_be_awaited() {
    let rt = rt();
    let (tx, rx) = oneshot::channel();
    let co = rt.spawn(move || block_on(async { rx.await }));
    std::thread::sleep(ms(10));
    tx.send(3).unwrap();
    assert_eq!(co.join().unwrap(), Ok(3));

    let (tx, rx) = oneshot::channel::<u8>();
    drop(tx);
    assert!(block_on(rx.recv_async()).is_err());
}

#[test]
fn send_async_gets_its_message_back_when_receivers_go() {
    let (tx, rx) = mpsc::bounded(0);
    let (w, c) = counting();
    let mut fut = tx.send_async(String::from("m"));
    pending(&mut fut, &w);
    drop(rx);
    assert_eq!(count(&c), 1);
    assert_eq!(ready(&mut fut, &w).unwrap_err().into_inner(), "m");
}

// ---------------------------------------------------------------------------------------------
// Dropping a pending future: what was handed to it in that instant is passed on.

#[test]
fn mutex_drop_after_handoff_passes_the_lock_on() {
    let m = Mutex::new(0);
    let g = m.lock();
    let (wf, cf) = counting();
    let (wg, cg) = counting();
    let mut f = m.lock_async();
    let mut next = m.lock_async();
    pending(&mut f, &wf);
    pending(&mut next, &wg);
    std::thread::sleep(ms(5)); // overdue: the unlock hands the lock to `f`
    drop(g);
    assert_eq!(count(&cf), 1);
    assert!(m.is_locked(), "handed off: it stays locked for `f`");
    drop(f); // without polling it again
    assert_eq!(count(&cg), 1, "the lock was passed on");
    *ready(&mut next, &wg) += 1;
    assert!(!m.is_locked());
}

#[test]
fn mutex_drop_after_retry_wake_wakes_the_next() {
    let m = Mutex::new(0);
    let g = m.lock();
    let (wf, cf) = counting();
    let (wg, cg) = counting();
    let mut f = m.lock_async();
    let mut next = m.lock_async();
    pending(&mut f, &wf);
    pending(&mut next, &wg);
    drop(g); // not overdue: `f` is woken to retry, the lock is free
    assert_eq!(count(&cf), 1);
    assert!(!m.is_locked());
    drop(f);
    assert_eq!(count(&cg), 1, "the wake-up was passed on");
    drop(ready(&mut next, &wg));
}

#[test]
fn mutex_drop_pending_leaves_the_queue() {
    let m = Mutex::new(0);
    let g = m.lock();
    let (w, c) = counting();
    let mut f = m.lock_async();
    pending(&mut f, &w);
    drop(f);
    drop(g);
    assert_eq!(count(&c), 0, "a dropped waiter is not woken");
    assert!(m.try_lock().is_some());
}

#[test]
fn rwlock_drop_after_grant_passes_the_lock_on() {
    let l = RwLock::new(0);
    let wr = l.write();
    let (wf, cf) = counting();
    let (wg, cg) = counting();
    let mut reader = l.read_async();
    let mut writer = l.write_async();
    pending(&mut reader, &wf);
    pending(&mut writer, &wg);
    drop(wr); // the reader (first in line) is granted a read lock
    assert_eq!((count(&cf), count(&cg)), (1, 0));
    drop(reader);
    assert_eq!(
        count(&cg),
        1,
        "its read lock was released: the writer is in"
    );
    *ready(&mut writer, &wg) = 1;
    assert_eq!(*l.read(), 1);

    // And a dropped writer lets the readers it held back in.
    let r = l.read();
    let mut writer = l.write_async();
    let mut reader = l.read_async();
    pending(&mut writer, &wf);
    pending(&mut reader, &wg);
    drop(writer);
    assert_eq!(*ready(&mut reader, &wg), 1);
    drop(r);
    assert!(l.try_write().is_some());
}

#[test]
fn semaphore_drop_after_grant_passes_the_permits_on() {
    let sem = Semaphore::new(0);
    let (wf, cf) = counting();
    let (wg, cg) = counting();
    let mut f = sem.acquire_many_async(2);
    let mut next = sem.acquire_async();
    pending(&mut f, &wf);
    pending(&mut next, &wg);
    sem.add_permits(2);
    assert_eq!((count(&cf), count(&cg)), (1, 0));
    drop(f);
    assert_eq!(count(&cg), 1, "the permits were passed on");
    let p = ready(&mut next, &wg).unwrap();
    assert_eq!(sem.available_permits(), 1);
    drop(p);
    assert_eq!(sem.available_permits(), 2, "no permit lost");
}

#[test]
fn semaphore_drop_pending_lets_smaller_requests_through() {
    let sem = Semaphore::new(1);
    let (w, c) = counting();
    let mut big = sem.acquire_many_async(5);
    let mut small = sem.acquire_async();
    pending(&mut big, &w);
    pending(&mut small, &w);
    drop(big);
    assert_eq!(count(&c), 1);
    drop(ready(&mut small, &w).unwrap());
    assert_eq!(sem.available_permits(), 1);
}

#[test]
fn semaphore_close_fails_pending_futures() {
    let sem = Semaphore::new(0);
    let (w, c) = counting();
    let mut f = sem.acquire_async();
    pending(&mut f, &w);
    sem.close();
    assert_eq!(count(&c), 1);
    assert_eq!(
        ready(&mut f, &w).unwrap_err(),
        spindle_sync::AcquireError::Closed
    );
}

#[test]
fn notify_drop_after_notify_one_passes_it_on() {
    let n = Notify::new();
    let (wf, cf) = counting();
    let (wg, cg) = counting();
    let mut f = n.notified();
    let mut next = n.notified();
    pending(&mut f, &wf);
    pending(&mut next, &wg);
    n.notify_one();
    assert_eq!((count(&cf), count(&cg)), (1, 0));
    drop(f);
    assert_eq!(count(&cg), 1, "passed to the next waiter");
    ready(&mut next, &wg);

    // With nobody else waiting it becomes the stored permit.
    let mut f = n.notified();
    pending(&mut f, &wf);
    n.notify_one();
    drop(f);
    ready(&mut n.notified(), &wg);
}

#[test]
fn waitgroup_drop_pending_leaves_the_list() {
    let wg = WaitGroup::new();
    wg.add(1);
    let (w, c) = counting();
    let mut f = wg.wait_async();
    pending(&mut f, &w);
    assert!(waiters(&wg).contains("waiters: 1"));
    drop(f);
    assert!(waiters(&wg).contains("waiters: 0"), "no record left behind");
    assert!(wg.done());
    assert_eq!(count(&c), 0);
}

#[test]
fn recv_drop_after_handoff_passes_the_message_on() {
    let (tx, rx) = mpmc::unbounded();
    let (wf, cf) = counting();
    let (wg, cg) = counting();
    let mut f = rx.recv_async();
    let mut next = rx.recv_async();
    pending(&mut f, &wf);
    pending(&mut next, &wg);
    tx.send(1).unwrap(); // handed to `f`'s slot
    assert_eq!((count(&cf), count(&cg)), (1, 0));
    drop(f);
    assert_eq!(count(&cg), 1, "passed to the next receiver");
    assert_eq!(ready(&mut next, &wg), Ok(1));

    // With nobody else waiting it goes back to the front of the channel.
    let mut f = rx.recv_async();
    pending(&mut f, &wf);
    tx.send(2).unwrap();
    tx.send(3).unwrap();
    drop(f);
    assert_eq!(rx.try_recv(), Ok(2));
    assert_eq!(rx.try_recv(), Ok(3));
}

#[test]
fn recv_drop_pending_on_a_rendezvous_channel() {
    let (tx, rx) = mpsc::bounded::<u8>(0);
    let (w, c) = counting();
    let mut f = rx.recv_async();
    pending(&mut f, &w);
    drop(f);
    assert!(
        waiters(&tx).contains("waiting_receivers: 0"),
        "no record left behind"
    );
    assert!(tx.try_send(1).is_err(), "no receiver waits any more");
    assert_eq!(count(&c), 0);
}

#[test]
fn send_drop_pending_withdraws_the_message() {
    let (tx, rx) = mpsc::bounded(0);
    let (w, c) = counting();
    let mut f = tx.send_async(1);
    pending(&mut f, &w);
    assert!(waiters(&rx).contains("waiting_senders: 1"));
    drop(f);
    assert!(
        waiters(&rx).contains("waiting_senders: 0"),
        "no record left behind"
    );
    assert_eq!(rx.try_recv(), Err(mpsc::TryRecvError::Empty));
    assert_eq!(count(&c), 0);

    // Taken in that instant: it was sent (once).
    let mut f = tx.send_async(2);
    pending(&mut f, &w);
    assert_eq!(rx.try_recv(), Ok(2));
    assert_eq!(count(&c), 1);
    drop(f);
    assert_eq!(rx.try_recv(), Err(mpsc::TryRecvError::Empty));

    // A full bounded channel: the blocked message is moved into the buffer by a receive.
    let (tx, rx) = mpsc::bounded(1);
    tx.send(10).unwrap();
    let mut f = tx.send_async(11);
    pending(&mut f, &w);
    assert_eq!(rx.try_recv(), Ok(10));
    drop(f);
    assert_eq!(rx.try_recv(), Ok(11));
}

#[test]
fn oneshot_drop_after_send_keeps_the_message() {
    let (tx, rx) = oneshot::channel();
    let (w, c) = counting();
    let mut f = rx.recv_async();
    pending(&mut f, &w);
    tx.send(7).unwrap();
    assert_eq!(count(&c), 1);
    drop(f);
    assert_eq!(rx.try_recv(), Ok(7));
}

#[test]
fn dropped_futures_in_coroutines_leave_primitives_consistent() {
    // A coroutine that is cancelled while blocked in `block_on(fut)` drops the future as it
    // unwinds: the same path as dropping it by hand.
    let rt = rt();
    let m = Arc::new(Mutex::new(0));
    let g = m.lock();
    let co = {
        let m = m.clone();
        rt.spawn(move || *block_on(m.lock_async()) += 1)
    };
    std::thread::sleep(ms(20));
    co.cancel();
    assert!(co.join().unwrap_err().is_cancelled());
    drop(g);
    assert!(m.try_lock().is_some());
}
