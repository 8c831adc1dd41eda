//! Behaviours of crossbeam-channel's test suite (`tests/{array,list,zero,select_macro}.rs`),
//! ported — the scenarios and expected outcomes, written anew for `spindle_sync::mpmc` and
//! `select!`.
#![cfg(not(any(loom, miri)))]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::{ms, rt};
use spindle_sync::mpmc::{
    self, RecvError, RecvTimeoutError, SendError, SendTimeoutError, TryRecvError, TrySendError,
    bounded, unbounded,
};
use spindle_sync::{Select, select};

#[test]
fn smoke_all_flavours() {
    for cap in [None, Some(0), Some(1), Some(5)] {
        let (s, r) = match cap {
            None => unbounded(),
            Some(c) => bounded(c),
        };
        if cap == Some(0) {
            assert_eq!(s.try_send(7), Err(TrySendError::Full(7)));
            let t = thread::spawn(move || s.send(7));
            assert_eq!(r.recv(), Ok(7));
            t.join().unwrap().unwrap();
        } else {
            s.try_send(7).unwrap();
            assert_eq!(r.try_recv(), Ok(7));
            s.send(8).unwrap();
            assert_eq!(r.recv(), Ok(8));
            assert_eq!(r.try_recv(), Err(TryRecvError::Empty));
            assert_eq!(r.recv_timeout(ms(1)), Err(RecvTimeoutError::Timeout));
        }
    }
}

#[test]
fn capacity() {
    for i in 0..10 {
        let (s, r) = bounded::<()>(i);
        assert_eq!(s.capacity(), Some(i));
        assert_eq!(r.capacity(), Some(i));
    }
    let (s, _r) = unbounded::<()>();
    assert_eq!(s.capacity(), None);
}

#[test]
fn len_empty_full() {
    let (s, r) = bounded(2);
    assert_eq!((s.len(), s.is_empty(), s.is_full()), (0, true, false));
    s.send(()).unwrap();
    assert_eq!((r.len(), r.is_empty(), r.is_full()), (1, false, false));
    s.send(()).unwrap();
    assert_eq!((s.len(), s.is_empty(), s.is_full()), (2, false, true));
    r.recv().unwrap();
    assert_eq!((r.len(), r.is_empty(), r.is_full()), (1, false, false));
    let (s, _r) = bounded::<()>(0);
    assert!(
        s.is_full() && s.is_empty(),
        "zero capacity is always empty and full"
    );
}

#[test]
fn try_recv_then_disconnect() {
    let (s, r) = bounded(100);
    let t = thread::spawn(move || {
        assert_eq!(r.try_recv(), Err(TryRecvError::Empty));
        thread::sleep(ms(150));
        assert_eq!(r.try_recv(), Ok(7));
        thread::sleep(ms(50));
        assert_eq!(r.try_recv(), Err(TryRecvError::Disconnected));
    });
    thread::sleep(ms(100));
    s.send(7).unwrap();
    drop(s);
    t.join().unwrap();
}

#[test]
fn recv_blocks_until_send() {
    let (s, r) = bounded(100);
    let t = thread::spawn(move || {
        assert_eq!(r.recv(), Ok(7));
        thread::sleep(ms(100));
        assert_eq!(r.recv(), Ok(8));
        thread::sleep(ms(100));
        assert_eq!(r.recv(), Ok(9));
        assert_eq!(r.recv(), Err(RecvError));
    });
    thread::sleep(ms(150));
    s.send(7).unwrap();
    s.send(8).unwrap();
    s.send(9).unwrap();
    drop(s);
    t.join().unwrap();
}

#[test]
fn recv_timeout_states() {
    let (s, r) = bounded::<i32>(100);
    let t = thread::spawn(move || {
        assert_eq!(r.recv_timeout(ms(100)), Err(RecvTimeoutError::Timeout));
        assert_eq!(r.recv_timeout(ms(100)), Ok(7));
        assert_eq!(r.recv_timeout(ms(100)), Err(RecvTimeoutError::Disconnected));
    });
    thread::sleep(ms(150));
    s.send(7).unwrap();
    drop(s);
    t.join().unwrap();
}

#[test]
fn try_send_full_then_disconnect() {
    let (s, r) = bounded(1);
    let t = thread::spawn(move || {
        assert_eq!(s.try_send(1), Ok(()));
        assert_eq!(s.try_send(2), Err(TrySendError::Full(2)));
        thread::sleep(ms(150));
        assert_eq!(s.try_send(3), Ok(()));
        thread::sleep(ms(50));
        assert_eq!(s.try_send(4), Err(TrySendError::Disconnected(4)));
    });
    thread::sleep(ms(100));
    assert_eq!(r.try_recv(), Ok(1));
    assert_eq!(r.try_recv(), Err(TryRecvError::Empty));
    assert_eq!(r.recv(), Ok(3));
    drop(r);
    t.join().unwrap();
}

#[test]
fn send_timeout_states() {
    let (s, r) = bounded(2);
    let t = thread::spawn(move || {
        assert_eq!(s.send_timeout(1, ms(100)), Ok(()));
        assert_eq!(s.send_timeout(2, ms(100)), Ok(()));
        assert_eq!(s.send_timeout(3, ms(10)), Err(SendTimeoutError::Timeout(3)));
        thread::sleep(ms(150));
        assert_eq!(s.send_timeout(4, ms(100)), Ok(()));
        thread::sleep(ms(50));
        assert_eq!(s.send(5), Err(SendError(5)));
    });
    thread::sleep(ms(100));
    assert_eq!(r.recv(), Ok(1));
    thread::sleep(ms(80));
    assert_eq!(r.recv(), Ok(2));
    assert_eq!(r.recv(), Ok(4));
    drop(r);
    t.join().unwrap();
}

#[test]
fn send_after_disconnect_and_recv_after_disconnect() {
    let (s, r) = bounded(100);
    s.send(1).unwrap();
    s.send(2).unwrap();
    drop(r);
    assert_eq!(s.send(4), Err(SendError(4)));
    assert_eq!(s.try_send(5), Err(TrySendError::Disconnected(5)));
    assert_eq!(
        s.send_timeout(6, ms(500)),
        Err(SendTimeoutError::Disconnected(6))
    );

    let (s, r) = bounded(100);
    s.send(1).unwrap();
    s.send(2).unwrap();
    drop(s);
    assert_eq!(r.recv(), Ok(1));
    assert_eq!(r.recv(), Ok(2));
    assert_eq!(r.recv(), Err(RecvError));
}

#[test]
fn disconnect_wakes_sender_and_receiver() {
    let (s, r) = bounded(1);
    s.send(()).unwrap();
    let t = thread::spawn(move || assert_eq!(s.send(()), Err(SendError(()))));
    thread::sleep(ms(50));
    drop(r);
    t.join().unwrap();

    let (s, r) = bounded::<()>(1);
    let t = thread::spawn(move || assert_eq!(r.recv(), Err(RecvError)));
    thread::sleep(ms(50));
    drop(s);
    t.join().unwrap();
}

#[test]
fn spsc_order() {
    for cap in [0, 3] {
        let (s, r) = bounded(cap);
        let t = thread::spawn(move || {
            for i in 0..10_000 {
                assert_eq!(r.recv(), Ok(i));
            }
            assert_eq!(r.recv(), Err(RecvError));
        });
        for i in 0..10_000 {
            s.send(i).unwrap();
        }
        drop(s);
        t.join().unwrap();
    }
}

#[test]
fn mpmc_each_message_once() {
    const COUNT: usize = 5_000;
    const THREADS: usize = 4;
    for cap in [0, 3] {
        let (s, r) = bounded::<usize>(cap);
        let v: Arc<Vec<AtomicUsize>> = Arc::new((0..COUNT).map(|_| AtomicUsize::new(0)).collect());
        let mut ts = Vec::new();
        for _ in 0..THREADS {
            let (r, v) = (r.clone(), v.clone());
            ts.push(thread::spawn(move || {
                for _ in 0..COUNT {
                    let n = r.recv().unwrap();
                    v[n].fetch_add(1, Ordering::SeqCst);
                }
            }));
            let s = s.clone();
            ts.push(thread::spawn(move || {
                for i in 0..COUNT {
                    s.send(i).unwrap();
                }
            }));
        }
        ts.into_iter().for_each(|t| t.join().unwrap());
        for c in v.iter() {
            assert_eq!(c.load(Ordering::SeqCst), THREADS);
        }
    }
}

#[test]
fn stress_oneshot() {
    for _ in 0..1000 {
        let (s, r) = bounded(1);
        let t = thread::spawn(move || r.recv().unwrap());
        s.send(0).unwrap();
        assert_eq!(t.join().unwrap(), 0);
    }
}

#[test]
fn stress_timeout_two_threads() {
    const COUNT: usize = 100;
    let (s, r) = bounded(2);
    let t = thread::spawn(move || {
        for i in 0..COUNT {
            if i % 2 == 0 {
                thread::sleep(ms(1));
            }
            while let Err(SendTimeoutError::Timeout(_)) = s.send_timeout(i, ms(1)) {}
        }
    });
    for i in 0..COUNT {
        if i % 2 == 0 {
            thread::sleep(ms(1));
        }
        loop {
            match r.recv_timeout(ms(1)) {
                Ok(x) => {
                    assert_eq!(x, i);
                    break;
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => panic!(),
            }
        }
    }
    t.join().unwrap();
}

#[test]
fn drops_counted() {
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    #[derive(Debug, PartialEq)]
    struct D;
    impl Drop for D {
        fn drop(&mut self) {
            DROPS.fetch_add(1, Ordering::SeqCst);
        }
    }
    for (steps, additional) in [(0, 7), (13, 0), (50, 20), (100, 50)] {
        DROPS.store(0, Ordering::SeqCst);
        let (s, r) = bounded::<D>(50);
        let t = thread::spawn(move || {
            for _ in 0..steps {
                r.recv().unwrap();
            }
            r
        });
        for _ in 0..steps {
            s.send(D).unwrap();
        }
        let r = t.join().unwrap();
        for _ in 0..additional {
            s.try_send(D).unwrap();
        }
        assert_eq!(DROPS.load(Ordering::SeqCst), steps);
        drop(s);
        drop(r);
        assert_eq!(DROPS.load(Ordering::SeqCst), steps + additional);
    }
}

#[test]
fn linearizable() {
    const COUNT: usize = 5_000;
    let (s, r) = bounded(1);
    let ts: Vec<_> = (0..4)
        .map(|_| {
            let (s, r) = (s.clone(), r.clone());
            thread::spawn(move || {
                for _ in 0..COUNT {
                    s.send(0).unwrap();
                    r.try_recv().unwrap();
                }
            })
        })
        .collect();
    ts.into_iter().for_each(|t| t.join().unwrap());
}

#[test]
fn channel_through_channel() {
    type T = Box<dyn std::any::Any + Send>;
    for cap in [0, 1] {
        let (s, r) = bounded::<T>(cap);
        let t = thread::spawn(move || {
            let mut s = s;
            for _ in 0..100 {
                let (new_s, new_r) = bounded(cap);
                s.send(Box::new(Some(new_r))).unwrap();
                s = new_s;
            }
        });
        let mut r = r;
        for _ in 0..100 {
            r = r
                .recv()
                .unwrap()
                .downcast_mut::<Option<mpmc::Receiver<T>>>()
                .unwrap()
                .take()
                .unwrap();
        }
        t.join().unwrap();
    }
}

#[test]
fn recv_in_send() {
    let (s, _r) = bounded(1);
    s.send(()).unwrap();
    let (s2, r2) = bounded::<()>(1);
    s2.send(()).unwrap();
    // The message expression receives from another channel first.
    select! {
        send(s, assert_eq!(r2.recv(), Ok(()))) -> _ => panic!("full"),
        default => {}
    }
}

// ---------------------------------------------------------------------------------------------
// select!

#[test]
fn select_smoke() {
    let (s1, r1) = unbounded::<i32>();
    let (s2, r2) = unbounded::<i32>();
    s1.send(1).unwrap();
    select! {
        recv(r1) -> v => assert_eq!(v, Ok(1)),
        recv(r2) -> _ => panic!(),
    }
    s2.send(2).unwrap();
    select! {
        recv(r1) -> _ => panic!(),
        recv(r2) -> v => assert_eq!(v, Ok(2)),
    }
}

#[test]
fn select_disconnected_is_ready() {
    let (s1, r1) = unbounded::<i32>();
    let (s2, r2) = unbounded::<i32>();
    drop(s1);
    thread::spawn(move || {
        thread::sleep(ms(50));
        drop(s2);
    });
    select! {
        recv(r1) -> v => assert!(v.is_err()),
        recv(r2) -> _ => panic!(),
        default(ms(1000)) => panic!(),
    }
    select! {
        recv(r2) -> v => assert!(v.is_err()),
        timeout(ms(1000)) => panic!(),
    }
}

#[test]
fn select_default_and_timeout() {
    let (s, r) = unbounded::<i32>();
    select! {
        recv(r) -> _ => panic!(),
        default => {}
    }
    let start = Instant::now();
    select! {
        recv(r) -> _ => panic!(),
        timeout(ms(20)) => {}
    }
    assert!(start.elapsed() >= ms(20));
    select! {
        recv(r) -> _ => panic!(),
        deadline(Instant::now()) => {}
    }
    drop(s);
    select! {
        recv(r) -> v => assert!(v.is_err()),
        default => panic!("a disconnected receive is ready"),
    }
}

#[test]
fn select_unblocks() {
    let (s1, r1) = bounded::<i32>(0);
    let (s2, r2) = bounded::<i32>(0);
    let t = thread::spawn(move || {
        thread::sleep(ms(50));
        s2.send(2).unwrap();
    });
    select! {
        recv(r1) -> _ => panic!(),
        recv(r2) -> v => assert_eq!(v, Ok(2)),
        timeout(ms(1000)) => panic!(),
    }
    t.join().unwrap();
    let t = thread::spawn(move || {
        thread::sleep(ms(50));
        assert_eq!(r1.recv(), Ok(1));
    });
    select! {
        send(s1, 1) -> v => assert_eq!(v, Ok(())),
        timeout(ms(1000)) => panic!(),
    }
    t.join().unwrap();
}

#[test]
fn select_both_ready_picks_one() {
    let (s1, r1) = bounded(0);
    let (s2, r2) = bounded(0);
    let t = thread::spawn(move || {
        thread::sleep(ms(50));
        s1.send(1).unwrap();
        assert_eq!(r2.recv(), Ok(2));
    });
    for _ in 0..2 {
        select! {
            recv(r1) -> v => assert_eq!(v, Ok(1)),
            send(s2, 2) -> v => assert_eq!(v, Ok(())),
        }
    }
    t.join().unwrap();
}

#[test]
fn select_send_recv_same_channel() {
    let (s, r) = bounded::<i32>(0);
    select! {
        send(s, 0) -> _ => panic!(),
        recv(r) -> _ => panic!(),
        default(ms(20)) => {}
    }
    let (s, r) = unbounded::<i32>();
    select! {
        send(s, 0) -> v => assert_eq!(v, Ok(())),
        recv(r) -> _ => panic!(),
        timeout(ms(1000)) => panic!(),
    }
    assert_eq!(r.try_recv(), Ok(0));
}

#[test]
fn select_matching_zero_capacity() {
    // Threads each select over sending and receiving on one zero-capacity channel: they pair
    // up with each other (a select completes another select).
    const THREADS: usize = 44;
    let (s, r) = &bounded::<usize>(0);
    thread::scope(|scope| {
        for i in 0..THREADS {
            scope.spawn(move || {
                select! {
                    recv(r) -> v => assert_ne!(v.unwrap(), i),
                    send(s, i) -> _ => {}
                }
            });
        }
    });
    assert_eq!(r.try_recv(), Err(TryRecvError::Empty));
}

#[test]
fn select_matching_with_leftover() {
    const THREADS: usize = 55;
    let (s, r) = &bounded::<usize>(0);
    thread::scope(|scope| {
        for i in 0..THREADS {
            scope.spawn(move || {
                select! {
                    recv(r) -> v => assert_ne!(v.unwrap(), i),
                    send(s, i) -> _ => {}
                }
            });
        }
        s.send(!0).unwrap();
    });
    assert_eq!(r.try_recv(), Err(TryRecvError::Empty));
}

#[test]
fn select_stress_mixed() {
    const COUNT: usize = 5_000;
    let (s1, r1) = bounded::<usize>(0);
    let (s2, r2) = bounded::<usize>(0);
    let (s3, r3) = bounded::<()>(100);
    let t = thread::spawn(move || {
        for i in 0..COUNT {
            s1.send(i).unwrap();
            r3.recv().unwrap();
            s2.send(i).unwrap();
            r3.recv().unwrap();
        }
    });
    for i in 0..COUNT {
        for _ in 0..2 {
            select! {
                recv(r1) -> v => assert_eq!(v, Ok(i)),
                recv(r2) -> v => assert_eq!(v, Ok(i)),
            }
            s3.send(()).unwrap();
        }
    }
    t.join().unwrap();
}

#[test]
fn select_stress_timeout_two_threads() {
    const COUNT: usize = 50;
    let (s, r) = bounded(2);
    let t = thread::spawn(move || {
        for i in 0..COUNT {
            if i % 2 == 0 {
                thread::sleep(ms(1));
            }
            loop {
                select! {
                    send(s, i) -> _ => break,
                    default(ms(1)) => {}
                }
            }
        }
    });
    for i in 0..COUNT {
        if i % 2 == 0 {
            thread::sleep(ms(1));
        }
        loop {
            select! {
                recv(r) -> v => {
                    assert_eq!(v, Ok(i));
                    break;
                }
                default(ms(1)) => {}
            }
        }
    }
    t.join().unwrap();
}

#[test]
fn select_linearizable_timeout() {
    const COUNT: usize = 5_000;
    let (s, r) = bounded(0);
    let ts: Vec<_> = (0..2)
        .map(|_| {
            let (s, r) = (s.clone(), r.clone());
            thread::spawn(move || {
                for _ in 0..COUNT {
                    s.send(0).unwrap();
                }
                drop(r);
            })
        })
        .collect();
    let mut got = 0;
    while got < 2 * COUNT {
        select! {
            recv(r) -> v => {
                v.unwrap();
                got += 1;
            }
            timeout(Duration::from_secs(10)) => panic!("stuck"),
        }
    }
    ts.into_iter().for_each(|t| t.join().unwrap());
}

#[test]
fn select_fairness() {
    const COUNT: usize = 10_000;
    let (s1, r1) = unbounded::<()>();
    let (s2, r2) = unbounded::<()>();
    for _ in 0..COUNT {
        s1.send(()).unwrap();
        s2.send(()).unwrap();
    }
    let mut hits = [0usize; 2];
    for _ in 0..COUNT {
        select! {
            recv(r1) -> _ => hits[0] += 1,
            recv(r2) -> _ => hits[1] += 1,
        }
    }
    assert!(
        hits.iter().all(|x| *x >= COUNT / hits.len() / 2),
        "{hits:?}"
    );
}

#[test]
fn select_in_coroutines_with_threads() {
    // A coroutine selects over a channel fed by a thread and one fed by a coroutine.
    let rt = rt();
    let (ts, tr) = bounded::<u32>(0);
    let (cs, cr) = unbounded::<u32>();
    let (done_tx, done_rx) = spindle_sync::oneshot::channel::<()>();
    let t = thread::spawn(move || {
        for i in 0..100 {
            ts.send(i).unwrap();
        }
        // Keep `ts` until the coroutine is done: a disconnected receive is always ready.
        let _ = done_rx.recv();
    });
    let total = rt.block_on(move || {
        // Kept until the end: a disconnected receive would be ready at once.
        let _keep = cs.clone();
        let feeder = spindle_rt::spawn(move || {
            for i in 0..100 {
                cs.send(1000 + i).unwrap();
                spindle_rt::yield_now();
            }
        });
        let (mut from_thread, mut from_co) = (0, 0);
        while from_thread + from_co < 200 {
            select! {
                recv(tr) -> v => { v.unwrap(); from_thread += 1; }
                recv(cr) -> v => { assert!(v.unwrap() >= 1000); from_co += 1; }
                timeout(Duration::from_secs(10)) => panic!("stuck"),
            }
        }
        feeder.join().unwrap();
        done_tx.send(()).unwrap();
        (from_thread, from_co)
    });
    t.join().unwrap();
    assert_eq!(total, (100, 100));
}

#[test]
fn select_builder_unregisters_losers() {
    // After a select completes one arm, it is no longer registered in the other channels: a
    // later rendezvous send finds no receiver waiting.
    let (s1, r1) = bounded::<i32>(0);
    let (s2, r2) = bounded::<i32>(0);
    let t = thread::spawn(move || {
        thread::sleep(ms(30));
        s1.send(1).unwrap();
        s1
    });
    let mut a = None;
    let mut b = None;
    let i = {
        let mut sel = Select::new();
        sel.recv(&r1, &mut a);
        sel.recv(&r2, &mut b);
        sel.wait()
    };
    assert_eq!(i, Some(0));
    assert_eq!(a, Some(Ok(1)));
    let _s1 = t.join().unwrap();
    assert_eq!(
        s2.try_send(2),
        Err(TrySendError::Full(2)),
        "no receiver left behind"
    );
    let empty: Option<usize> = Select::new().wait();
    assert_eq!(empty, None, "no arms: returns at once");
}

#[test]
fn select_send_to_disconnected_gives_message_back() {
    let (s, r) = bounded::<String>(0);
    drop(r);
    select! {
        send(s, "x".to_string()) -> v => assert_eq!(v, Err(SendError("x".to_string()))),
        timeout(ms(1000)) => panic!(),
    }
}
