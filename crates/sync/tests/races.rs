//! How waits end — timeouts, cancellation, dropped futures — racing with grants, in every
//! primitive: no permit, lock, message or wake-up lost or duplicated (among them:
//! `acquire_many(0)` must not wait behind queued waiters, and a receiver must not be told
//! "disconnected" while a handed-over message is still to come back).
#![cfg(not(any(loom, miri)))]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use spindle_rt::Runtime;
use spindle_sync::{Condvar, Mutex, Notify, RwLock, Semaphore, mpmc, select};

fn rt() -> Runtime {
    Runtime::builder().workers(2).build().expect("runtime")
}

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    let w = Waker::noop();
    let mut cx = Context::from_waker(w);
    Pin::new(f).poll(&mut cx)
}

/// Cheap xorshift.
struct Rng(u32);
impl Rng {
    fn next(&mut self) -> u32 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.0 = x;
        x
    }
}

// ---------------------------------------------------------------------------------------------
// Semaphore

#[test]
fn semaphore_acquire_zero_succeeds_at_once_with_waiters_queued() {
    // Spec: "`n == 0` succeeds at once."
    let sem = Arc::new(Semaphore::new(0));
    let s2 = sem.clone();
    let t = std::thread::spawn(move || s2.acquire_many(1).map(|p| p.forget()));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !format!("{sem:?}").contains("waiters: 1") {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    }
    let r = sem.acquire_many_timeout(0, Duration::from_millis(200));
    let ok = r.is_ok();
    sem.add_permits(1);
    t.join().unwrap().unwrap();
    assert!(ok, "acquire_many(0) waited behind a queued waiter: {r:?}");
}

#[test]
fn semaphore_permits_conserved_under_timeouts_and_cancels() {
    let rt = rt();
    let sem = Arc::new(Semaphore::new(2));
    let stop = Arc::new(AtomicBool::new(false));
    let mut rng = Rng(12345);
    for round in 0..300 {
        let mut hs = Vec::new();
        for k in 0..4 {
            let s = sem.clone();
            let tmo = (rng.next() % 50) as u64;
            hs.push(rt.spawn(move || {
                for _ in 0..5 {
                    let r = if k % 2 == 0 {
                        s.acquire_many_timeout(1 + k % 2, us(tmo))
                    } else {
                        s.acquire_many(1 + k % 2)
                    };
                    if let Ok(p) = r {
                        spindle_rt::yield_now();
                        drop(p);
                    }
                }
            }));
        }
        // Also a thread hammering.
        let s = sem.clone();
        let th = std::thread::spawn(move || {
            for _ in 0..5 {
                if let Ok(p) = s.acquire_timeout(us(30)) {
                    drop(p);
                }
            }
        });
        std::thread::sleep(us((round % 7) as u64 * 20));
        for (i, h) in hs.iter().enumerate() {
            if (rng.next() + i as u32).is_multiple_of(2) {
                h.cancel();
            }
        }
        for h in hs {
            let _ = h.join();
        }
        th.join().unwrap();
        assert_eq!(
            sem.available_permits(),
            2,
            "round {round}: permits leaked or lost: {sem:?}"
        );
    }
    stop.store(true, Ordering::Relaxed);
}

#[test]
fn semaphore_future_dropped_after_grant_passes_permits_on() {
    let sem = Arc::new(Semaphore::new(0));
    for i in 0..3000 {
        let mut fut = Box::pin(sem.acquire_many_async(1));
        assert!(poll_once(&mut fut).is_pending());
        let s2 = sem.clone();
        let t = std::thread::spawn(move || s2.add_permits(1));
        if i % 2 == 0 {
            std::thread::yield_now();
        }
        drop(fut);
        t.join().unwrap();
        assert_eq!(sem.available_permits(), 1, "iteration {i}");
        sem.try_acquire().unwrap().forget();
    }
}

// ---------------------------------------------------------------------------------------------
// Mutex

#[test]
fn mutex_no_lost_wakeup_under_cancels_and_timeouts() {
    let rt = rt();
    let m = Arc::new(Mutex::new(0u64));
    let mut rng = Rng(777);
    for round in 0..200 {
        let mut keep = Vec::new();
        let mut victims = Vec::new();
        for k in 0..6 {
            let m = m.clone();
            let tmo = (rng.next() % 40) as u64;
            let h = rt.spawn(move || {
                for _ in 0..20 {
                    if k % 3 == 0 {
                        if let Some(mut g) = m.try_lock_for(us(tmo)) {
                            *g += 1;
                        }
                    } else {
                        let mut g = m.lock();
                        *g += 1;
                        if k % 2 == 0 {
                            spindle_rt::yield_now();
                        }
                    }
                }
            });
            if k % 2 == 1 {
                victims.push(h);
            } else {
                keep.push(h);
            }
        }
        // Thread holding the lock for short periods.
        let m2 = m.clone();
        let th = std::thread::spawn(move || {
            for _ in 0..20 {
                let g = m2.lock();
                std::thread::sleep(us(5));
                drop(g);
            }
        });
        std::thread::sleep(us((round % 5) as u64 * 30));
        for v in &victims {
            v.cancel();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for h in keep {
            while !h.is_finished() {
                assert!(
                    Instant::now() < deadline,
                    "round {round}: a waiter never got the lock: {m:?}"
                );
                std::thread::sleep(us(200));
            }
            h.join().unwrap();
        }
        for v in victims {
            let _ = v.join();
        }
        th.join().unwrap();
        assert!(!m.is_locked(), "round {round}: left locked");
        assert!(m.try_lock().is_some());
    }
}

#[test]
fn mutex_future_dropped_after_wake_passes_lock_on() {
    // A future queued; the lock is unlocked by another thread (RETRY or HANDOFF) as the future
    // is dropped. A second waiter (thread) must get the lock.
    let m = Arc::new(Mutex::new(()));
    for i in 0..2000 {
        let (locked_tx, locked_rx) = std::sync::mpsc::channel::<()>();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let m1 = m.clone();
        let holder = std::thread::spawn(move || {
            let g = m1.lock();
            locked_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            drop(g);
        });
        locked_rx.recv().unwrap();
        let mut fut = Box::pin(m.lock_async());
        assert!(poll_once(&mut fut).is_pending());
        let m2 = m.clone();
        let waiter = std::thread::spawn(move || m2.try_lock_for(Duration::from_secs(5)).is_some());
        std::thread::sleep(us(if i % 3 == 0 { 0 } else { 50 }));
        if i % 50 == 0 {
            // Let the future become overdue for the hand-off.
            std::thread::sleep(Duration::from_millis(2));
        }
        go_tx.send(()).unwrap();
        if i % 2 == 0 {
            std::thread::yield_now();
        }
        drop(fut);
        holder.join().unwrap();
        assert!(
            waiter.join().unwrap(),
            "iteration {i}: the thread never got the lock"
        );
        assert!(
            m.try_lock_for(Duration::from_secs(5)).is_some(),
            "iteration {i}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// RwLock

#[test]
fn rwlock_no_lost_grant_under_cancels_and_timeouts() {
    let rt = rt();
    let l = Arc::new(RwLock::new(0u64));
    let mut rng = Rng(4242);
    for round in 0..200 {
        let mut keep = Vec::new();
        let mut victims = Vec::new();
        for k in 0..6 {
            let l = l.clone();
            let tmo = (rng.next() % 40) as u64;
            let h = rt.spawn(move || {
                for j in 0..20 {
                    match (k + j) % 4 {
                        0 => {
                            if let Some(mut g) = l.try_write_for(us(tmo)) {
                                *g += 1;
                            }
                        }
                        1 => {
                            let _g = l.try_read_for(us(tmo));
                        }
                        2 => {
                            *l.write() += 1;
                        }
                        _ => {
                            let _g = l.read();
                            spindle_rt::yield_now();
                        }
                    }
                }
            });
            if k % 2 == 1 {
                victims.push(h);
            } else {
                keep.push(h);
            }
        }
        std::thread::sleep(us((round % 5) as u64 * 30));
        for v in &victims {
            v.cancel();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for h in keep {
            while !h.is_finished() {
                assert!(Instant::now() < deadline, "round {round}: stuck: {l:?}");
                std::thread::sleep(us(200));
            }
            h.join().unwrap();
        }
        for v in victims {
            let _ = v.join();
        }
        assert!(l.try_write().is_some(), "round {round}: {l:?}");
    }
}

#[test]
fn rwlock_write_future_dropped_after_grant_passes_lock_on() {
    let l = Arc::new(RwLock::new(()));
    for i in 0..2000 {
        let (locked_tx, locked_rx) = std::sync::mpsc::channel::<()>();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let l1 = l.clone();
        let holder = std::thread::spawn(move || {
            let g = l1.read();
            locked_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            drop(g);
        });
        locked_rx.recv().unwrap();
        let mut fut = Box::pin(l.write_async());
        assert!(poll_once(&mut fut).is_pending());
        go_tx.send(()).unwrap();
        if i % 2 == 0 {
            std::thread::yield_now();
        }
        drop(fut);
        holder.join().unwrap();
        assert!(l.try_write().is_some(), "iteration {i}: {l:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Notify / Condvar

#[test]
fn notify_cancel_racing_with_notify_one_keeps_the_notification() {
    let rt = rt();
    let n = Arc::new(Notify::new());
    for i in 0..1000 {
        let n2 = n.clone();
        let h = rt.spawn(move || n2.wait());
        if i % 2 == 0 {
            std::thread::sleep(us(30));
        }
        n.notify_one();
        h.cancel();
        match h.join() {
            Ok(()) => {
                // consumed it
                assert!(!n.wait_timeout(us(1)), "iteration {i}: an extra permit");
            }
            Err(_) => {
                assert!(
                    n.wait_timeout(Duration::from_millis(100)),
                    "iteration {i}: notify_one lost with the cancelled waiter"
                );
            }
        }
    }
}

#[test]
fn notify_future_dropped_after_notify_passes_it_on() {
    let n = Arc::new(Notify::new());
    for i in 0..3000 {
        let mut fut = Box::pin(n.notified());
        assert!(poll_once(&mut fut).is_pending());
        let n2 = n.clone();
        let t = std::thread::spawn(move || n2.notify_one());
        if i % 2 == 0 {
            std::thread::yield_now();
        }
        drop(fut);
        t.join().unwrap();
        assert!(n.wait_timeout(Duration::from_millis(100)), "iteration {i}");
    }
}

#[test]
fn condvar_timeout_racing_notify_one_not_lost() {
    // Two waiters with short timeouts; notify_one as they time out: the notification is
    // either seen by one (timed_out false) or nobody was waiting (both timed out before).
    let m = Arc::new(Mutex::new(0u32));
    let cv = Arc::new(Condvar::new());
    for i in 0..1000 {
        let (m2, cv2) = (m.clone(), cv.clone());
        let t = std::thread::spawn(move || {
            let g = m2.lock();
            let (_g, r) = cv2.wait_timeout(g, us(50));
            !r.timed_out()
        });
        std::thread::sleep(us(40 + (i % 20)));
        cv.notify_one();
        let _ = t.join().unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// Channels

#[test]
fn bounded_channel_conserves_messages_under_cancels_and_timeouts() {
    let rt = rt();
    for cap in [0usize, 1, 3] {
        let (tx, rx) = mpmc::bounded::<u64>(cap);
        let got = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sent = Arc::new(AtomicUsize::new(0));
        let total = 3000u64;
        // Producer thread.
        let tx2 = tx.clone();
        let sent2 = sent.clone();
        let prod = std::thread::spawn(move || {
            for i in 0..total {
                let mut msg = i;
                loop {
                    match tx2.send_timeout(msg, us(20)) {
                        Ok(()) => break,
                        Err(e) => msg = e.into_inner(),
                    }
                }
                sent2.fetch_add(1, Ordering::Relaxed);
            }
        });
        let mut rng = Rng(99 + cap as u32);
        while !prod.is_finished() {
            let mut hs = Vec::new();
            for k in 0..3 {
                let (rx, got) = (rx.clone(), got.clone());
                hs.push(rt.spawn(move || {
                    loop {
                        let r = if k == 0 {
                            rx.recv_timeout(us(15)).ok()
                        } else {
                            rx.recv().ok()
                        };
                        if let Some(v) = r {
                            got.lock().unwrap().push(v);
                        }
                    }
                }));
            }
            std::thread::sleep(us((rng.next() % 200) as u64));
            for h in &hs {
                h.cancel();
            }
            for h in hs {
                let _ = h.join();
            }
            if let Some(cap) = tx.capacity() {
                assert!(
                    tx.len() <= cap.max(1) + 3,
                    "buffer grew: {} (cap {cap})",
                    tx.len()
                );
            }
        }
        prod.join().unwrap();
        drop(tx);
        let mut got = std::mem::take(&mut *got.lock().unwrap());
        got.extend(rx.try_iter());
        got.sort_unstable();
        let want: Vec<u64> = (0..total).collect();
        if got != want {
            let dup = got.windows(2).filter(|w| w[0] == w[1]).count();
            panic!(
                "cap {cap}: {} messages received, {dup} duplicates, want {total}",
                got.len()
            );
        }
    }
}

#[test]
fn recv_future_dropped_after_handoff_keeps_message() {
    for cap in [0usize, 1] {
        let (tx, rx) = mpmc::bounded::<u32>(cap);
        for i in 0..3000u32 {
            let mut fut = Box::pin(rx.recv_async());
            assert!(poll_once(&mut fut).is_pending());
            let tx2 = tx.clone();
            let t = std::thread::spawn(move || tx2.send(i).unwrap());
            if i % 2 == 0 {
                std::thread::yield_now();
            }
            drop(fut);
            // The send completes only once a receiver took it (rendezvous) or buffered.
            let v = rx.recv_timeout(Duration::from_secs(5));
            t.join().unwrap();
            assert_eq!(v, Ok(i), "cap {cap} iteration {i}");
            assert!(rx.try_recv().is_err());
        }
    }
}

/// Messages handed to waiting receivers that all give them back (their futures dropped right
/// after the hand-over, in any order) come back in the order they were sent, ahead of what was
/// sent after them: one sender's messages stay in its order. (Each used to go back to the
/// front of the buffer, so two given back in the order they were handed over came out
/// reversed.)
#[test]
fn messages_given_back_by_several_receivers_keep_their_order() {
    // Every order of giving back for three receivers, on every kind of channel.
    let orders = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    for cap in [None, Some(0), Some(1), Some(4)] {
        for order in orders {
            let (tx, rx) = match cap {
                None => mpmc::unbounded::<u32>(),
                Some(cap) => mpmc::bounded::<u32>(cap),
            };
            let mut futs: Vec<_> = (0..3).map(|_| Box::pin(rx.recv_async())).collect();
            for f in &mut futs {
                assert!(poll_once(f).is_pending());
            }
            // Handed over, one to each waiting receiver, in the order they waited.
            for m in 0..3 {
                tx.try_send(m).unwrap();
            }
            // Sent after: buffered behind (an unbounded or roomy channel), else it waits.
            let late = cap.is_none_or(|c| c > 0).then(|| tx.try_send(3).unwrap());
            let mut futs: Vec<_> = futs.into_iter().map(Some).collect();
            for i in order {
                drop(futs[i].take());
            }
            let mut got = Vec::new();
            while let Ok(m) = rx.try_recv() {
                got.push(m);
            }
            let want: Vec<u32> = if late.is_some() {
                vec![0, 1, 2, 3]
            } else {
                vec![0, 1, 2]
            };
            assert_eq!(
                got, want,
                "capacity {cap:?}, given back in the order {order:?}"
            );
        }
    }
}

#[test]
fn send_future_dropped_racing_receive_no_dup_no_block() {
    for cap in [0usize, 1] {
        let (tx, rx) = mpmc::bounded::<u32>(cap);
        for i in 0..1000u32 {
            if cap == 1 {
                tx.send(u32::MAX).unwrap();
            }
            let mut fut = Box::pin(tx.send_async(i));
            assert!(poll_once(&mut fut).is_pending());
            let rx2 = rx.clone();
            let t = std::thread::spawn(move || rx2.recv_timeout(Duration::from_millis(3)));
            if i % 2 == 0 {
                std::thread::yield_now();
            }
            drop(fut);
            let first = t.join().unwrap();
            let mut all: Vec<u32> = first.into_iter().collect();
            all.extend(rx.try_iter());
            all.retain(|&v| v != u32::MAX);
            assert!(all.len() <= 1, "cap {cap} iteration {i}: {all:?}");
            assert!(
                tx.try_send(7).is_ok() || cap == 0,
                "cap {cap} iteration {i}: full"
            );
            let _ = rx.try_iter().count();
        }
    }
}

#[test]
fn select_cancel_racing_with_send_loses_nothing() {
    let rt = rt();
    let (tx1, rx1) = mpmc::bounded::<u32>(0);
    let (tx2, rx2) = mpmc::bounded::<u32>(1);
    let mut kept = 0;
    for i in 0..1000u32 {
        let (a, b) = (rx1.clone(), rx2.clone());
        let h = rt.spawn(move || {
            select! {
                recv(a) -> v => v.ok(),
                recv(b) -> v => v.ok(),
            }
        });
        if i % 2 == 0 {
            std::thread::sleep(us(30));
        }
        let on1 = i % 3 == 0;
        let tx1b = tx1.clone();
        let t = if on1 {
            Some(std::thread::spawn(move || {
                tx1b.send_timeout(i, Duration::from_millis(200))
            }))
        } else {
            tx2.send(i).unwrap();
            None
        };
        h.cancel();
        let res = h.join();
        let sent_ok = match t {
            Some(t) => {
                // The rendezvous send must complete: either the select took it, or a
                // requeue, or it times out if no receiver came: take it now.
                let r = rx1.recv_timeout(Duration::from_millis(300)).ok();
                let s = t.join().unwrap();
                match (&res, r) {
                    (Ok(Some(v)), None) => assert_eq!(*v, i),
                    (Err(_), Some(v)) => {
                        assert_eq!(v, i);
                        kept += 1
                    }
                    (Ok(x), Some(y)) => panic!("iteration {i}: duplicate {x:?} {y}"),
                    (Ok(None), None) => panic!("iteration {i}: select got error"),
                    (Err(_), None) => assert!(s.is_err(), "iteration {i}: lost the message"),
                }
                continue;
            }
            None => true,
        };
        assert!(sent_ok);
        match res {
            Ok(v) => {
                assert_eq!(v, Some(i));
                assert!(rx2.try_recv().is_err());
            }
            Err(_) => {
                assert_eq!(rx2.try_recv(), Ok(i), "iteration {i}: lost");
                kept += 1;
            }
        }
    }
    eprintln!("kept {kept}");
}

#[test]
fn disconnect_is_not_reported_while_a_message_is_still_to_be_delivered() {
    // Two receivers wait: a future (first in line) and a thread. The last message is handed to
    // the future, then the last sender goes. Then the future is dropped (woken, never polled
    // again): the message goes back to the channel — and so to the waiting thread. The thread
    // must not have been told "disconnected" meanwhile (it used to be: its `recv` said the
    // channel was empty and every sender gone, then the message came back into the buffer,
    // where a consumer that had stopped at the disconnect never looked again).
    let (tx, rx) = mpmc::unbounded::<u32>();
    let rx2 = rx.clone();
    let mut fut = Box::pin(rx.recv_async());
    assert!(poll_once(&mut fut).is_pending());
    let t = std::thread::spawn(move || {
        let got: Vec<u32> = rx2.iter().collect(); // ends at the disconnect
        (got, rx2)
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while !format!("{rx:?}").contains("waiting_receivers: 2") {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    }
    tx.send(1).unwrap(); // handed to the future (first in line)
    drop(tx);
    std::thread::sleep(Duration::from_millis(50));
    let early = t.is_finished();
    drop(fut); // woken but not polled: the message goes back, to the waiting thread
    let (got, rx2) = t.join().unwrap();
    let late = rx2.try_recv();
    assert!(
        !early && got == [1] && late.is_err(),
        "the consumer saw the disconnect (finished before the message came back: {early}, \
         got {got:?}) while message 1 was still to come: later try_recv = {late:?}"
    );
}

#[test]
fn mutex_handoff_racing_timeouts_and_cancels_keeps_exclusion() {
    // Holders keep the lock ~1.2 ms so queued waiters become overdue (hand-off path), and
    // the waiters' deadlines land around the hand-off; some waiters are cancelled.
    let rt = rt();
    let m = Arc::new(Mutex::new(()));
    let inside = Arc::new(AtomicBool::new(false));
    let got = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut hs = Vec::new();
    for k in 0..6u64 {
        let (m, inside, got) = (m.clone(), inside.clone(), got.clone());
        hs.push(rt.spawn(move || {
            for j in 0..60u64 {
                let g = if (k + j) % 3 == 0 {
                    Some(m.lock())
                } else {
                    m.try_lock_for(us(900 + (k * 137 + j * 61) % 1500))
                };
                if let Some(g) = g {
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders");
                    got.fetch_add(1, Ordering::Relaxed);
                    let t = Instant::now();
                    while t.elapsed() < us(300) {
                        std::hint::spin_loop();
                    }
                    inside.store(false, Ordering::SeqCst);
                    drop(g);
                }
            }
        }));
    }
    let ths: Vec<_> = (0..2)
        .map(|_| {
            let (m, inside) = (m.clone(), inside.clone());
            std::thread::spawn(move || {
                for j in 0..40u64 {
                    if let Some(g) = m.try_lock_for(us(1000 + j * 53 % 900)) {
                        assert!(!inside.swap(true, Ordering::SeqCst), "two holders");
                        std::thread::sleep(us(1200));
                        inside.store(false, Ordering::SeqCst);
                        drop(g);
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(30));
    for (i, h) in hs.iter().enumerate() {
        if i % 3 == 1 {
            h.cancel();
        }
    }
    for h in hs {
        if let Err(e) = h.join() {
            assert!(e.is_cancelled(), "{e:?}");
        }
    }
    for t in ths {
        t.join().unwrap();
    }
    assert!(
        m.try_lock_for(Duration::from_secs(2)).is_some(),
        "lock left held: {m:?}"
    );
    eprintln!(
        "{} acquisitions in {:?}",
        got.load(Ordering::Relaxed),
        start.elapsed()
    );
}

/// Counts a holder of the lock (`writers` or `readers`) until dropped — also when its
/// coroutine unwinds from a cancel inside the critical section (`yield_now` is a cancellation
/// point). Declared after the guard, so it is dropped first, while the lock is still held.
struct Holding<'a>(&'a AtomicUsize);

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[test]
fn rwlock_exclusion_under_timeouts_cancels_and_dropped_futures() {
    let rt = rt();
    let l = Arc::new(RwLock::new(()));
    let writers = Arc::new(AtomicUsize::new(0));
    let readers = Arc::new(AtomicUsize::new(0));
    fn writing<'a>(w: &'a AtomicUsize, r: &AtomicUsize) -> Holding<'a> {
        assert_eq!(w.fetch_add(1, Ordering::SeqCst), 0, "two writers");
        let holding = Holding(w);
        assert_eq!(r.load(Ordering::SeqCst), 0, "writer with readers");
        holding
    }
    fn reading<'a>(w: &AtomicUsize, r: &'a AtomicUsize) -> Holding<'a> {
        r.fetch_add(1, Ordering::SeqCst);
        let holding = Holding(r);
        assert_eq!(w.load(Ordering::SeqCst), 0, "reader with a writer");
        holding
    }
    let mut hs = Vec::new();
    for k in 0..6u64 {
        let (l, w, r) = (l.clone(), writers.clone(), readers.clone());
        hs.push(rt.spawn(move || {
            for j in 0..200u64 {
                let tmo = us((k * 31 + j * 17) % 60);
                match (k + j) % 5 {
                    0 | 1 => {
                        if let Some(_g) = l.try_write_for(tmo) {
                            let _holding = writing(&w, &r);
                            spindle_rt::yield_now();
                        }
                    }
                    2 => {
                        // A future polled once and dropped (maybe after a grant).
                        let mut f = Box::pin(l.write_async());
                        if let Poll::Ready(_g) = poll_once(&mut f) {
                            let _holding = writing(&w, &r);
                        }
                        spindle_rt::yield_now();
                        drop(f);
                    }
                    _ => {
                        if let Some(_g) = l.try_read_for(tmo) {
                            let _holding = reading(&w, &r);
                            spindle_rt::yield_now();
                        }
                    }
                }
            }
        }));
    }
    std::thread::sleep(Duration::from_millis(5));
    for (i, h) in hs.iter().enumerate() {
        if i % 3 == 2 {
            h.cancel();
        }
    }
    for h in hs {
        if let Err(e) = h.join() {
            assert!(e.is_cancelled(), "{e:?}");
        }
    }
    assert!(l.try_write().is_some(), "{l:?}");
}
