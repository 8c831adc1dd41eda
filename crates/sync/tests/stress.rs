//! Stress: a 2-worker runtime's coroutines and 4 OS threads on the same primitives at once.
//! Every test checks an exact outcome (counts, each message exactly once, permits conserved).
#![cfg(not(any(loom, miri)))]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::rt;
use spindle_sync::mpmc::{self, RecvTimeoutError};
use spindle_sync::{Barrier, Condvar, Mutex, Notify, RwLock, Semaphore, select};

const THREADS: usize = 4;
const COROUTINES: usize = 40;

/// Runs `thread_work(i)` on 4 threads and `co_work(i)` in 40 coroutines of a 2-worker
/// runtime, all at once, and waits for all.
fn mixed(
    thread_work: impl Fn(usize) + Send + Sync + 'static,
    co_work: impl Fn(usize) + Send + Sync + 'static,
) {
    let rt = rt();
    let thread_work = Arc::new(thread_work);
    let co_work = Arc::new(co_work);
    let hs: Vec<_> = (0..COROUTINES)
        .map(|i| {
            let w = co_work.clone();
            rt.spawn(move || w(i))
        })
        .collect();
    let ts: Vec<_> = (0..THREADS)
        .map(|i| {
            let w = thread_work.clone();
            std::thread::spawn(move || w(i))
        })
        .collect();
    ts.into_iter().for_each(|t| t.join().expect("thread"));
    hs.into_iter().for_each(|h| h.join().expect("coroutine"));
}

#[test]
fn stress_mutex() {
    let m = Arc::new(Mutex::new(0u64));
    let (m1, m2) = (m.clone(), m.clone());
    mixed(
        move |_| {
            for i in 0..5_000 {
                if i % 100 == 0 {
                    let mut g = loop {
                        if let Some(g) = m1.try_lock_for(Duration::from_micros(10)) {
                            break g;
                        }
                    };
                    *g += 1;
                } else {
                    *m1.lock() += 1;
                }
            }
        },
        move |_| {
            for i in 0..500 {
                let mut g = m2.lock();
                *g += 1;
                if i % 50 == 0 {
                    spindle_rt::yield_now(); // holding it across a suspension
                }
            }
        },
    );
    assert_eq!(*m.lock(), (THREADS * 5_000 + COROUTINES * 500) as u64);
}

#[test]
fn stress_rwlock() {
    let l = Arc::new(RwLock::new((0u64, 0u64)));
    let (l1, l2) = (l.clone(), l.clone());
    let work = move |l: &RwLock<(u64, u64)>, n: usize| {
        for i in 0..n {
            if i % 4 == 0 {
                let mut g = l.write();
                g.0 += 1;
                g.1 += 1;
            } else {
                let g = l.read();
                assert_eq!(g.0, g.1, "a reader saw a half-done write");
            }
        }
    };
    mixed(move |_| work(&l1, 4_000), move |_| work(&l2, 400));
    let g = l.read();
    assert_eq!(g.0, (THREADS * 1_000 + COROUTINES * 100) as u64);
}

#[test]
fn stress_semaphore() {
    let sem = Arc::new(Semaphore::new(3));
    let inside = Arc::new(AtomicUsize::new(0));
    let work = {
        let (sem, inside) = (sem.clone(), inside.clone());
        move |n: usize, k: usize| {
            for i in 0..n {
                let want = 1 + (i + k) % 3;
                let p = if i % 7 == 0 {
                    match sem.acquire_many_timeout(want, Duration::from_micros(50)) {
                        Ok(p) => p,
                        Err(_) => continue,
                    }
                } else {
                    sem.acquire_many(want).unwrap()
                };
                let now = inside.fetch_add(want, Ordering::SeqCst) + want;
                assert!(now <= 3, "{now} permits out of 3 in use");
                inside.fetch_sub(want, Ordering::SeqCst);
                drop(p);
            }
        }
    };
    let w2 = work.clone();
    mixed(move |k| work(2_000, k), move |k| w2(200, k));
    assert_eq!(sem.available_permits(), 3);
}

#[test]
fn stress_condvar_queue() {
    // A queue under a Mutex + Condvar: threads and coroutines produce and consume.
    let q = Arc::new((Mutex::new((Vec::<u64>::new(), 0usize)), Condvar::new()));
    let consumed = Arc::new(AtomicUsize::new(0));
    let total_items = THREADS * 1_000 + COROUTINES * 100;
    let consumers_done = Arc::new(Notify::new());
    // Two thread consumers.
    let consumers: Vec<_> = (0..2)
        .map(|_| {
            let (q, consumed) = (q.clone(), consumed.clone());
            std::thread::spawn(move || {
                loop {
                    let (m, cv) = &*q;
                    let mut g = cv.wait_while(m.lock(), |(v, done)| v.is_empty() && *done < 1);
                    match g.0.pop() {
                        Some(_) => {
                            consumed.fetch_add(1, Ordering::SeqCst);
                        }
                        None => return,
                    }
                }
            })
        })
        .collect();
    let (q1, q2) = (q.clone(), q.clone());
    mixed(
        move |_| {
            for i in 0..1_000 {
                q1.0.lock().0.push(i);
                q1.1.notify_one();
            }
        },
        move |_| {
            for i in 0..100 {
                q2.0.lock().0.push(i);
                q2.1.notify_one();
            }
        },
    );
    q.0.lock().1 = 1;
    q.1.notify_all();
    consumers.into_iter().for_each(|t| t.join().unwrap());
    consumers_done.notify_all();
    assert_eq!(consumed.load(Ordering::SeqCst), total_items);
}

/// Every message exactly once through a channel of capacity `cap`, with thread and coroutine
/// producers and consumers, some with timeouts and selects.
fn channel_exactly_once(cap: Option<usize>) {
    const PER_THREAD: usize = 2_000;
    const PER_CO: usize = 200;
    let total = THREADS * PER_THREAD + COROUTINES * PER_CO;
    let (s, r) = match cap {
        Some(c) => mpmc::bounded::<usize>(c),
        None => mpmc::unbounded(),
    };
    let seen: Arc<Vec<AtomicUsize>> = Arc::new((0..total).map(|_| AtomicUsize::new(0)).collect());
    let received = Arc::new(AtomicUsize::new(0));
    // Consumers: 2 threads and 4 coroutines (started first, they stop at disconnection).
    let rt = rt();
    let consume = {
        let (seen, received) = (seen.clone(), received.clone());
        move |r: mpmc::Receiver<usize>, k: usize| loop {
            let got = if k.is_multiple_of(2) {
                match r.recv_timeout(Duration::from_micros(100)) {
                    Ok(v) => Some(v),
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => None,
                }
            } else {
                select! {
                    recv(r) -> v => v.ok(),
                    timeout(Duration::from_millis(1)) => continue,
                }
            };
            match got {
                Some(v) => {
                    seen[v].fetch_add(1, Ordering::SeqCst);
                    received.fetch_add(1, Ordering::SeqCst);
                }
                None => return,
            }
        }
    };
    let thread_consumers: Vec<_> = (0..2)
        .map(|k| {
            let (r, c) = (r.clone(), consume.clone());
            std::thread::spawn(move || c(r, k))
        })
        .collect();
    let co_consumers: Vec<_> = (0..4)
        .map(|k| {
            let (r, c) = (r.clone(), consume.clone());
            rt.spawn(move || c(r, k))
        })
        .collect();
    drop(r);
    // Producers: 4 threads and 40 coroutines.
    let thread_producers: Vec<_> = (0..THREADS)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..PER_THREAD {
                    s.send(t * PER_THREAD + i).unwrap();
                }
            })
        })
        .collect();
    let co_producers: Vec<_> = (0..COROUTINES)
        .map(|c| {
            let s = s.clone();
            rt.spawn(move || {
                let base = THREADS * PER_THREAD + c * PER_CO;
                for i in 0..PER_CO {
                    if i % 10 == 0 {
                        let mut v = base + i;
                        loop {
                            match s.send_timeout(v, Duration::from_micros(50)) {
                                Ok(()) => break,
                                Err(e) => v = e.into_inner(),
                            }
                        }
                    } else {
                        s.send(base + i).unwrap();
                    }
                }
            })
        })
        .collect();
    drop(s);
    thread_producers.into_iter().for_each(|t| t.join().unwrap());
    co_producers.into_iter().for_each(|h| h.join().unwrap());
    thread_consumers.into_iter().for_each(|t| t.join().unwrap());
    co_consumers.into_iter().for_each(|h| h.join().unwrap());
    assert_eq!(received.load(Ordering::SeqCst), total);
    for (i, n) in seen.iter().enumerate() {
        assert_eq!(n.load(Ordering::SeqCst), 1, "message {i}");
    }
}

#[test]
fn stress_channel_zero_capacity() {
    channel_exactly_once(Some(0));
}

#[test]
fn stress_channel_bounded_1() {
    channel_exactly_once(Some(1));
}

#[test]
fn stress_channel_bounded_16() {
    channel_exactly_once(Some(16));
}

#[test]
fn stress_channel_unbounded() {
    channel_exactly_once(None);
}

#[test]
fn stress_barrier_rounds() {
    let b = Arc::new(Barrier::new(THREADS + COROUTINES));
    let leaders = Arc::new(AtomicUsize::new(0));
    let (b1, b2, l1, l2) = (b.clone(), b.clone(), leaders.clone(), leaders.clone());
    mixed(
        move |_| {
            for _ in 0..20 {
                if b1.wait().is_leader() {
                    l1.fetch_add(1, Ordering::SeqCst);
                }
            }
        },
        move |_| {
            for _ in 0..20 {
                if b2.wait().is_leader() {
                    l2.fetch_add(1, Ordering::SeqCst);
                }
            }
        },
    );
    assert_eq!(leaders.load(Ordering::SeqCst), 20);
}

#[test]
fn stress_shared_stack_coroutines_wait_everywhere() {
    // Coroutines on the workers' shared (copying) stacks wait on a mutex, a condvar, a
    // semaphore, a channel and a select while 4 threads do the same. Their stack bytes are
    // copied out while they are suspended (invariant 3 in ARCHITECTURE.md): a waiter record on a
    // coroutine stack would be read or written while elsewhere, and the counts below (or the
    // process) would show it.
    const ROUNDS: u64 = 50;
    let rt = rt();
    let m = Arc::new(Mutex::new(0u64));
    let cv = Arc::new((Mutex::new(0u64), Condvar::new()));
    let sem = Arc::new(Semaphore::new(2));
    let (tx, rx) = mpmc::bounded::<u64>(1);
    let (tick_tx, tick_rx) = mpmc::bounded::<()>(0);
    let work = {
        let (m, cv, sem, tx, tick_rx) = (m.clone(), cv.clone(), sem.clone(), tx, tick_rx);
        Arc::new(move |i: u64| {
            for r in 0..ROUNDS {
                *m.lock() += 1;
                {
                    let _p = sem.acquire().unwrap();
                    let mut g = cv.0.lock();
                    *g += 1;
                    cv.1.notify_all();
                }
                tx.send(i * ROUNDS + r).unwrap();
                select! {
                    recv(tick_rx) -> _ => {},
                    default(Duration::from_micros(50)) => {},
                }
            }
        })
    };
    let hs: Vec<_> = (0..COROUTINES as u64)
        .map(|i| {
            let w = work.clone();
            // SAFETY: the coroutine lends nothing on its stack to anything that runs while it
            // is suspended (the primitives keep their waiter records on the heap).
            unsafe { spindle_rt::Builder::new().shared_stack() }
                .spawn_on(&rt.handle(), move || w(i))
                .expect("spawn")
        })
        .collect();
    let ts: Vec<_> = (0..THREADS as u64)
        .map(|i| {
            let w = work.clone();
            std::thread::spawn(move || w(COROUTINES as u64 + i))
        })
        .collect();
    drop(work);
    let total = (COROUTINES + THREADS) as u64 * ROUNDS;
    let waiter = {
        let cv = cv.clone();
        std::thread::spawn(move || {
            drop(cv.1.wait_while(cv.0.lock(), |n| *n < total));
        })
    };
    let ticker = std::thread::spawn(move || while tick_tx.send(()).is_ok() {});
    let mut seen = vec![false; total as usize];
    for _ in 0..total {
        let k = rx.recv().unwrap() as usize;
        assert!(!seen[k], "message {k} twice");
        seen[k] = true;
    }
    ts.into_iter().for_each(|t| t.join().expect("thread"));
    hs.into_iter().for_each(|h| h.join().expect("coroutine"));
    waiter.join().unwrap();
    drop(rx);
    assert_eq!(*m.lock(), total);
    assert_eq!(sem.available_permits(), 2);
    // The ticker stops once every receiver of its channel is gone (the coroutines' clones
    // went with `work`).
    ticker.join().unwrap();
}
