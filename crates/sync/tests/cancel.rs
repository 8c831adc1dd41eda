//! Cancellation of waiting coroutines: the primitive stays consistent — no waiter left behind,
//! no lost permit, message or wake-up. `JoinHandle::cancel` makes the coroutine's park unwind.
#![cfg(not(any(loom, miri)))]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{eventually, ms, rt};
use spindle_rt::JoinError;
use spindle_sync::mpmc::{TrySendError, bounded};
use spindle_sync::{Barrier, Condvar, Mutex, Notify, RwLock, Semaphore, select};

fn cancelled<T: std::fmt::Debug>(r: Result<T, JoinError>) {
    match r {
        Err(e) => assert!(e.is_cancelled(), "{e:?}"),
        Ok(v) => panic!("expected a cancelled coroutine, it returned {v:?}"),
    }
}

#[test]
fn mutex_cancelled_waiter_leaves_the_queue() {
    let rt = rt();
    let m = Arc::new(Mutex::new(0));
    let g = m.lock();
    let waiting = Arc::new(AtomicUsize::new(0));
    let spawn_waiter = |m: Arc<Mutex<i32>>, waiting: Arc<AtomicUsize>| {
        rt.spawn(move || {
            waiting.fetch_add(1, Ordering::SeqCst);
            *m.lock() += 1;
        })
    };
    let a = spawn_waiter(m.clone(), waiting.clone());
    eventually("a waits", || waiting.load(Ordering::SeqCst) == 1);
    std::thread::sleep(ms(10));
    let b = spawn_waiter(m.clone(), waiting.clone());
    eventually("b waits", || waiting.load(Ordering::SeqCst) == 2);
    std::thread::sleep(ms(10));
    a.cancel();
    cancelled(a.join());
    drop(g);
    b.join().unwrap();
    assert_eq!(*m.lock(), 1);
    assert!(!m.is_locked());
}

#[test]
fn rwlock_cancelled_writer_lets_readers_in() {
    let rt = rt();
    let l = Arc::new(RwLock::new(0));
    let r1 = l.read();
    let w = {
        let l = l.clone();
        rt.spawn(move || *l.write() = 1)
    };
    eventually("writer queued", || format!("{l:?}").contains("waiters: 1"));
    // A reader queues behind the writer (it does not join r1).
    let r = {
        let l = l.clone();
        rt.spawn(move || *l.read())
    };
    eventually("reader queued", || format!("{l:?}").contains("waiters: 2"));
    assert!(!r.is_finished(), "readers queue behind a waiting writer");
    w.cancel();
    cancelled(w.join());
    assert_eq!(
        r.join().unwrap(),
        0,
        "the writer's leaving admits the reader"
    );
    drop(r1);
    assert!(l.try_write().is_some());
}

#[test]
fn semaphore_cancelled_large_waiter_unblocks_smaller() {
    let rt = rt();
    let sem = Arc::new(Semaphore::new(0));
    let big = {
        let sem = sem.clone();
        rt.spawn(move || sem.acquire_many(5).map(|p| p.forget()))
    };
    eventually("big queued", || format!("{sem:?}").contains("waiters: 1"));
    let small = {
        let sem = sem.clone();
        rt.spawn(move || sem.acquire().map(|p| p.forget()))
    };
    eventually("small queued", || format!("{sem:?}").contains("waiters: 2"));
    sem.add_permits(1);
    std::thread::sleep(ms(20));
    assert!(
        !small.is_finished(),
        "FIFO: the small request waits behind the big one"
    );
    big.cancel();
    cancelled(big.join());
    small.join().unwrap().unwrap();
    assert_eq!(sem.available_permits(), 0);
}

#[test]
fn condvar_cancelled_waiter_does_not_swallow_notify() {
    let rt = rt();
    let pair = Arc::new((Mutex::new(false), Condvar::new()));
    let first = {
        let p = pair.clone();
        rt.spawn(move || drop(p.1.wait(p.0.lock())))
    };
    std::thread::sleep(ms(20));
    let second = {
        let p = pair.clone();
        rt.spawn(move || drop(p.1.wait_while(p.0.lock(), |ready| !*ready)))
    };
    std::thread::sleep(ms(20));
    first.cancel();
    cancelled(first.join());
    *pair.0.lock() = true;
    pair.1.notify_one(); // must reach `second`, not the cancelled `first`
    second.join().unwrap();
}

#[test]
fn condvar_waiter_cancelled_while_relocking_passes_notify_on() {
    // `first` is notified while the notifier holds the mutex, so it blocks re-locking; it is
    // cancelled there. The `notify_one` it took must reach `second`.
    let rt = rt();
    let pair = Arc::new((Mutex::new(0u32), Condvar::new()));
    let first = {
        let p = pair.clone();
        rt.spawn(move || drop(p.1.wait(p.0.lock())))
    };
    eventually("first waits", || {
        format!("{:?}", pair.1).contains("waiters: 1")
    });
    let second = {
        let p = pair.clone();
        rt.spawn(move || p.1.wait_timeout(p.0.lock(), ms(10_000)).1.timed_out())
    };
    eventually("second waits", || {
        format!("{:?}", pair.1).contains("waiters: 2")
    });
    let g = pair.0.lock();
    pair.1.notify_one(); // chooses `first`, which then queues on the mutex
    eventually("first leaves the condvar", || {
        format!("{:?}", pair.1).contains("waiters: 1")
    });
    std::thread::sleep(ms(20));
    first.cancel();
    cancelled(first.join());
    drop(g);
    assert!(
        !second.join().unwrap(),
        "the notify_one was lost with `first`"
    );
}

#[test]
fn notify_cancelled_waiter_then_permit_is_stored() {
    let rt = rt();
    let n = Arc::new(Notify::new());
    let w = {
        let n = n.clone();
        rt.spawn(move || n.wait())
    };
    eventually("waiting", || format!("{n:?}").contains("waiters: 1"));
    w.cancel();
    cancelled(w.join());
    assert!(format!("{n:?}").contains("waiters: 0"), "{n:?}");
    n.notify_one();
    assert!(n.wait_timeout(ms(1)), "stored as a permit");
}

#[test]
fn barrier_cancelled_waiter_withdraws_its_arrival() {
    let rt = rt();
    let b = Arc::new(Barrier::new(2));
    let w = {
        let b = b.clone();
        rt.spawn(move || b.wait().is_leader())
    };
    std::thread::sleep(ms(20));
    w.cancel();
    cancelled(w.join());
    // Still two live callers needed.
    let b2 = b.clone();
    let t = std::thread::spawn(move || b2.wait().is_leader());
    std::thread::sleep(ms(20));
    assert!(!t.is_finished(), "released one short");
    let leader_here = b.wait().is_leader();
    assert!(t.join().unwrap() != leader_here);
}

#[test]
fn recv_cancelled_leaves_no_receiver_behind() {
    let rt = rt();
    let (s, r) = bounded::<i32>(0);
    let w = {
        let r = r.clone();
        rt.spawn(move || r.recv())
    };
    std::thread::sleep(ms(20));
    w.cancel();
    cancelled(w.join());
    assert_eq!(
        s.try_send(1),
        Err(TrySendError::Full(1)),
        "no receiver waits any more"
    );
}

#[test]
fn select_cancelled_unregisters_everywhere() {
    let rt = rt();
    let (s1, r1) = bounded::<i32>(0);
    let (s2, r2) = bounded::<i32>(0);
    let (_keep1, _keep2) = (r1.clone(), r2.clone());
    let w = rt.spawn(move || {
        select! {
            recv(r1) -> v => v.ok(),
            recv(r2) -> v => v.ok(),
        }
    });
    std::thread::sleep(ms(20));
    w.cancel();
    cancelled(w.join());
    // Registered nowhere any more: a rendezvous send finds no receiver.
    assert_eq!(s1.try_send(1), Err(TrySendError::Full(1)));
    assert_eq!(s2.try_send(2), Err(TrySendError::Full(2)));
}

#[test]
fn send_cancelled_leaves_no_sender_behind() {
    let rt = rt();
    let (s, r) = bounded::<i32>(0);
    let w = rt.spawn(move || s.send(5));
    std::thread::sleep(ms(20));
    w.cancel();
    cancelled(w.join());
    assert!(
        r.try_recv().is_err(),
        "the cancelled send's message is not delivered"
    );
}

#[test]
fn recv_cancel_racing_with_send_loses_no_message() {
    // A sender hands a message to a waiting receiver just as the receiver is cancelled: the
    // message is either returned by the receiver (it completed first) or is still in the
    // channel (put back by its drop guard). Never lost.
    let rt = rt();
    let mut received = 0;
    let mut put_back = 0;
    for i in 0..300 {
        let (s, r) = bounded::<i32>(1);
        let r2 = r.clone();
        let h = rt.spawn(move || r2.recv().ok());
        // Let it park (most rounds), then race send and cancel.
        if i % 3 != 0 {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
        s.send(i).unwrap();
        h.cancel();
        match h.join() {
            Ok(v) => {
                assert_eq!(v, Some(i));
                received += 1;
            }
            Err(e) => {
                assert!(e.is_cancelled());
                assert_eq!(r.try_recv(), Ok(i), "round {i}: the message was lost");
                put_back += 1;
            }
        }
    }
    eprintln!("received {received}, cancelled with the message kept {put_back}");
}

#[test]
fn semaphore_cancel_racing_with_release_loses_no_permit() {
    let rt = rt();
    let sem = Arc::new(Semaphore::new(0));
    for _ in 0..300 {
        let s2 = sem.clone();
        let h = rt.spawn(move || drop(s2.acquire()));
        std::thread::sleep(std::time::Duration::from_micros(30));
        sem.add_permits(1);
        h.cancel();
        let _ = h.join();
        assert_eq!(
            sem.available_permits(),
            1,
            "the permit is back whatever happened"
        );
        sem.acquire().unwrap().forget();
    }
}

#[test]
fn mutex_cancel_racing_with_unlock_keeps_the_lock_usable() {
    let rt = rt();
    let m = Arc::new(Mutex::new(0u32));
    for _ in 0..300 {
        let g = m.lock();
        let m2 = m.clone();
        let h = rt.spawn(move || *m2.lock() += 1);
        std::thread::sleep(std::time::Duration::from_micros(30));
        drop(g);
        h.cancel();
        let _ = h.join();
        // Whatever happened, the lock is free now.
        assert!(m.try_lock_for(ms(1000)).is_some());
    }
}

#[test]
fn recv_cancel_while_spinning_loses_no_message() {
    // One channel fed by a plain thread (so its blocked receives are completed remotely and
    // spin before parking); receiver coroutines are cancelled at arbitrary points. Every
    // message ends up received exactly once, in order: by a coroutine, or drained at the end.
    let rt = rt();
    let (s, r) = bounded::<u32>(1);
    let got = Arc::new(Mutex::new(Vec::new()));
    let mut next = 0;
    for round in 0..100 {
        let (r2, got2) = (r.clone(), got.clone());
        let h = rt.spawn(move || {
            while let Ok(v) = r2.recv() {
                got2.lock().push(v);
            }
        });
        for _ in 0..(round % 7 + 1) {
            s.send(next).unwrap();
            next += 1;
            if round % 2 == 0 {
                std::thread::sleep(std::time::Duration::from_micros(5));
            }
        }
        h.cancel();
        let _ = h.join();
    }
    while let Ok(v) = r.try_recv() {
        got.lock().push(v);
    }
    assert_eq!(*got.lock(), (0..next).collect::<Vec<_>>());
}
