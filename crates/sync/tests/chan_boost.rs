//! Behaviours of Boost.Fiber's channel tests (`libs/fiber/test/test_{buffered,unbuffered}_
//! channel*.cpp`), ported: the status matrix (success / empty / full / closed / timeout for
//! push, try_push, push_wait_for/until, pop, try_pop, value_pop, pop_wait_for/until) and the
//! exact-interleaving tests `test_wm_1` / `test_wm_2`, run in coroutines.
//!
//! Boost's statuses map onto the result types: `success` → `Ok`, `empty` →
//! `TryRecvError::Empty`, `full` → `TrySendError::Full`, `closed` → `…::Disconnected` (Boost's
//! `close()` is dropping every sender or every receiver here), `timeout` → `…::Timeout`.
//! Boost's `buffered_channel(n)` holds `n - 1` values: `bounded(n - 1)` here.
#![cfg(not(any(loom, miri)))]

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{ms, rt, rt1};
use spindle_sync::mpmc::{
    RecvError, RecvTimeoutError, SendError, SendTimeoutError, TryRecvError, TrySendError, bounded,
    unbounded,
};

/// Each flavour Boost tests: buffered (capacity 1 and 15), unbuffered (zero), unbounded.
fn flavours() -> Vec<Option<usize>> {
    vec![Some(1), Some(15), Some(0), None]
}

fn chan<T>(
    cap: Option<usize>,
) -> (
    spindle_sync::mpmc::Sender<T>,
    spindle_sync::mpmc::Receiver<T>,
) {
    match cap {
        Some(c) => bounded(c),
        None => unbounded(),
    }
}

#[test]
fn matrix_push_success_and_closed() {
    let rt = rt();
    for cap in flavours() {
        let (s, r) = chan::<i32>(cap);
        // push: success (a receiver takes it for the unbuffered flavour).
        let h = {
            let r = r.clone();
            rt.spawn(move || r.recv())
        };
        assert_eq!(s.send(1), Ok(()), "{cap:?}");
        assert_eq!(h.join().unwrap(), Ok(1));
        // push: closed.
        drop(r);
        assert_eq!(s.send(2), Err(SendError(2)), "{cap:?}");
        assert_eq!(s.try_send(3), Err(TrySendError::Disconnected(3)));
        assert_eq!(
            s.send_timeout(4, ms(10)),
            Err(SendTimeoutError::Disconnected(4))
        );
        assert_eq!(
            s.send_deadline(5, Instant::now() + ms(10)),
            Err(SendTimeoutError::Disconnected(5))
        );
    }
}

#[test]
fn matrix_try_push_full() {
    for cap in [Some(0), Some(1), Some(2)] {
        let (s, _r) = chan::<i32>(cap);
        for i in 0..cap.unwrap() {
            assert_eq!(s.try_send(i as i32), Ok(()));
        }
        assert_eq!(s.try_send(9), Err(TrySendError::Full(9)), "{cap:?}");
    }
}

#[test]
fn matrix_push_wait_for_and_until_timeout() {
    for cap in [0, 1, 2] {
        let (s, _r) = bounded::<i32>(cap);
        for i in 0..cap {
            s.send(i as i32).unwrap();
        }
        let start = Instant::now();
        assert_eq!(s.send_timeout(9, ms(20)), Err(SendTimeoutError::Timeout(9)));
        assert!(start.elapsed() >= ms(20));
        assert_eq!(
            s.send_deadline(9, Instant::now() + ms(5)),
            Err(SendTimeoutError::Timeout(9))
        );
    }
}

#[test]
fn matrix_push_wait_for_success_in_coroutines() {
    let rt = rt();
    for cap in flavours() {
        let (s, r) = chan::<i32>(cap);
        let h = rt.spawn(move || r.recv_timeout(Duration::from_secs(5)));
        assert_eq!(s.send_timeout(7, Duration::from_secs(5)), Ok(()), "{cap:?}");
        assert_eq!(h.join().unwrap(), Ok(7));
    }
}

#[test]
fn matrix_pop_success_empty_closed_timeout() {
    let rt = rt();
    for cap in flavours() {
        let (s, r) = chan::<i32>(cap);
        // try_pop: empty.
        assert_eq!(r.try_recv(), Err(TryRecvError::Empty), "{cap:?}");
        // pop_wait_for / pop_wait_until: timeout.
        let start = Instant::now();
        assert_eq!(r.recv_timeout(ms(20)), Err(RecvTimeoutError::Timeout));
        assert!(start.elapsed() >= ms(20));
        assert_eq!(
            r.recv_deadline(Instant::now() + ms(5)),
            Err(RecvTimeoutError::Timeout)
        );
        // pop: success (value_pop too), from a coroutine sender.
        let s2 = s.clone();
        let h = rt.spawn(move || s2.send(42));
        assert_eq!(r.recv(), Ok(42));
        h.join().unwrap().unwrap();
        // try_pop success needs a buffered value or a waiting sender.
        let s2 = s.clone();
        let h = rt.spawn(move || s2.send(43));
        let got = loop {
            match r.try_recv() {
                Ok(v) => break v,
                Err(TryRecvError::Empty) => std::thread::sleep(ms(1)),
                Err(e) => panic!("{e:?}"),
            }
        };
        assert_eq!(got, 43);
        h.join().unwrap().unwrap();
        // pop: closed.
        drop(s);
        assert_eq!(r.recv(), Err(RecvError), "{cap:?}");
        assert_eq!(r.try_recv(), Err(TryRecvError::Disconnected));
        assert_eq!(r.recv_timeout(ms(10)), Err(RecvTimeoutError::Disconnected));
    }
}

#[test]
fn closed_with_values_still_pops_them() {
    // Boost: values pushed before close() are still popped; then `closed`.
    let (s, r) = bounded::<i32>(15);
    s.send(1).unwrap();
    s.send(2).unwrap();
    drop(s);
    assert_eq!(r.recv(), Ok(1));
    assert_eq!(r.try_recv(), Ok(2));
    assert_eq!(r.recv(), Err(RecvError));
}

#[test]
fn moveable_values_move() {
    let (s, r) = bounded::<Vec<u8>>(15);
    let v = vec![3; 10];
    let p = v.as_ptr();
    s.send(v).unwrap();
    let got = r.recv().unwrap();
    assert_eq!(got.as_ptr(), p, "moved, not copied");
}

#[test]
fn rangefor() {
    // `for value : chan` until close.
    let rt = rt();
    let (s, r) = bounded::<i32>(1);
    let producer = rt.spawn(move || {
        for v in [1, 1, 2, 3, 5, 8, 12] {
            s.send(v).unwrap();
        }
    });
    let got = rt.block_on(move || r.iter().collect::<Vec<_>>());
    producer.join().unwrap();
    assert_eq!(got, [1, 1, 2, 3, 5, 8, 12]);
}

/// Runs Boost's `test_wm_*` scenario: f1 pushes 1..=5, f2 pops them (yielding after the
/// first `yields` pops); both record who ran at each step. One worker, FIFO: f1 runs first.
fn wm(cap: usize, yields: usize) -> Vec<u8> {
    let rt = rt1();
    rt.block_on(move || {
        let (s, r) = bounded::<i32>(cap);
        let ids = Arc::new(Mutex::new(Vec::new()));
        let f1 = {
            let ids = ids.clone();
            spindle_rt::spawn(move || {
                for v in 1..=5 {
                    ids.lock().unwrap().push(1);
                    s.send(v).unwrap();
                }
                ids.lock().unwrap().push(1);
            })
        };
        let f2 = {
            let ids = ids.clone();
            spindle_rt::spawn(move || {
                for v in 1..=5 {
                    ids.lock().unwrap().push(2);
                    assert_eq!(r.recv(), Ok(v));
                    if (v as usize) <= yields {
                        spindle_rt::yield_now(); // let the other coroutine run
                    }
                }
                ids.lock().unwrap().push(2);
            })
        };
        f1.join().unwrap();
        f2.join().unwrap();
        ids.lock().unwrap().clone()
    })
}

#[test]
fn exact_interleaving_wm_1() {
    // Boost's buffered_channel(4) holds 3. f1: push 1, 2, 3; push 4 blocks (full) → f2: pop 1,
    // yield → f1 runs.
    //
    // Boost: a blocked push is woken and retries when it runs; here a pop *hands over*: popping
    // 1 moves f1's pending 4 into the buffer and completes f1's push. So after its yield f2
    // finds 2, 3, 4 and then 5 already buffered (f1's push of 5 was completed by the pop of
    // 2, as 4's was by the pop of 1) and never blocks: it finishes before f1 runs again. Boost
    // has f2 block on the empty channel before 5 (ids[10] = f1). Same values, same order, one
    // switch fewer.
    let ids = wm(3, 1);
    assert_eq!(ids, [1, 1, 1, 1, 2, 1, 2, 2, 2, 2, 2, 1]);
}

#[test]
fn exact_interleaving_wm_2() {
    // buffered_channel(8) holds 7: f1 never blocks and finishes first; f2 then pops all
    // (its yields find nobody else to run). Identical to Boost.
    let ids = wm(7, 2);
    assert_eq!(ids, [1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2]);
}

#[test]
fn exact_interleaving_unbuffered() {
    // Zero capacity: every push waits for its pop. f1 pushes 1 and blocks; f2 pops 1 (f1's
    // push completes, f1 is woken) and yields; f1 pushes 2 and blocks; f2 pops 2 ...
    let ids = wm(0, 5);
    assert_eq!(ids, [1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2]);
}
