//! Behaviour of the locks and the other primitives: on plain threads, in coroutines, and
//! across the two; timeouts; fairness; poisoning (none).
#![cfg(not(any(loom, miri)))]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{eventually, ms, rt};
use spindle_sync::{
    AcquireError, Barrier, Condvar, Lazy, Mutex, Notify, OnceCell, RwLock, Semaphore, WaitGroup,
};

// ---------------------------------------------------------------------------------------------
// Mutex

#[test]
fn mutex_threads_count() {
    let m = Arc::new(Mutex::new(0u64));
    let ts: Vec<_> = (0..4)
        .map(|_| {
            let m = m.clone();
            std::thread::spawn(move || {
                for _ in 0..10_000 {
                    *m.lock() += 1;
                }
            })
        })
        .collect();
    ts.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(*m.lock(), 40_000);
}

#[test]
fn mutex_coroutines_count_with_suspension_inside() {
    let rt = rt();
    let total = rt.block_on(|| {
        let m = Arc::new(Mutex::new(0u64));
        let hs: Vec<_> = (0..100)
            .map(|i| {
                let m = m.clone();
                spindle_rt::spawn(move || {
                    for j in 0..100 {
                        let mut g = m.lock();
                        let v = *g;
                        if (i + j) % 37 == 0 {
                            // Hold the lock across a suspension: waiters suspend meanwhile.
                            spindle_rt::yield_now();
                        }
                        *g = v + 1;
                    }
                })
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
        *m.lock()
    });
    assert_eq!(total, 10_000);
}

#[test]
fn mutex_thread_waits_for_coroutine_and_back() {
    let rt = rt();
    let m = Arc::new(Mutex::new(Vec::new()));
    let held = Arc::new(AtomicBool::new(false));
    // A coroutine holds the lock; a thread waits for it.
    let h = {
        let (m, held) = (m.clone(), held.clone());
        rt.spawn(move || {
            let mut g = m.lock();
            held.store(true, Ordering::SeqCst);
            spindle_rt::sleep(ms(30));
            g.push("coroutine");
        })
    };
    eventually("the coroutine holds the lock", || {
        held.load(Ordering::SeqCst)
    });
    m.lock().push("thread");
    h.join().unwrap();
    assert_eq!(*m.lock(), ["coroutine", "thread"]);

    // A thread holds the lock; a coroutine waits for it (suspended, its worker runs others).
    let g = m.lock();
    let waiter = {
        let m = m.clone();
        rt.spawn(move || m.lock().push("coroutine 2"))
    };
    // The other worker still runs coroutines while one waits.
    assert_eq!(rt.block_on(|| 7), 7);
    drop(g);
    waiter.join().unwrap();
    assert_eq!(m.lock().last(), Some(&"coroutine 2"));
}

#[test]
fn mutex_try_lock_for_times_out_and_succeeds() {
    let m = Arc::new(Mutex::new(()));
    let g = m.lock();
    let start = Instant::now();
    assert!(m.try_lock_for(ms(20)).is_none());
    assert!(start.elapsed() >= ms(20));
    assert!(m.try_lock_until(Instant::now()).is_none());
    let m2 = m.clone();
    let t = std::thread::spawn(move || m2.try_lock_for(Duration::from_secs(5)).is_some());
    std::thread::sleep(ms(10));
    drop(g);
    assert!(t.join().unwrap());
    // A huge timeout means "no timeout", not an overflow.
    assert!(m.try_lock_for(Duration::MAX).is_some());
}

#[test]
fn mutex_no_poisoning() {
    let m = Arc::new(Mutex::new(1));
    let m2 = m.clone();
    let r = std::thread::spawn(move || {
        let mut g = m2.lock();
        *g = 2;
        panic!("while holding the lock");
    })
    .join();
    assert!(r.is_err());
    assert!(!m.is_locked(), "a panic releases the lock");
    assert_eq!(*m.lock(), 2, "the data is as the panicking holder left it");
}

#[test]
fn mutex_waiter_does_not_starve() {
    // One thread re-takes the lock in a tight loop; a waiter must still get it (hand-off after
    // about 1 ms of waiting) well within a second.
    let m = Arc::new(Mutex::new(0u64));
    let stop = Arc::new(AtomicBool::new(false));
    let hog = {
        let (m, stop) = (m.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let mut g = m.lock();
                *g += 1;
                for _ in 0..50 {
                    std::hint::spin_loop();
                }
            }
        })
    };
    std::thread::sleep(ms(5));
    for _ in 0..20 {
        let start = Instant::now();
        drop(m.lock());
        assert!(
            start.elapsed() < Duration::from_millis(500),
            "{:?}",
            start.elapsed()
        );
    }
    stop.store(true, Ordering::Relaxed);
    hog.join().unwrap();
}

#[test]
fn mutex_guard_debug_and_into_inner() {
    let m = Mutex::new(5);
    let g = m.lock();
    assert!(m.try_lock().is_none());
    assert_eq!(format!("{g:?}"), "5");
    drop(g);
    assert_eq!(format!("{m:?}"), "Mutex { data: 5 }");
    let mut m = m;
    *m.get_mut() = 6;
    assert_eq!(m.into_inner(), 6);
}

// ---------------------------------------------------------------------------------------------
// RwLock

#[test]
fn rwlock_many_readers_one_writer() {
    let l = RwLock::new(0);
    let r1 = l.read();
    let r2 = l.read();
    assert!(l.try_write().is_none());
    assert!(l.try_write_for(ms(5)).is_none());
    drop((r1, r2));
    let w = l.write();
    assert!(l.try_read().is_none());
    assert!(l.try_read_for(ms(5)).is_none());
    drop(w);
    assert!(l.try_read().is_some());
}

#[test]
fn rwlock_writer_not_starved_by_readers() {
    // Readers overlap continuously; a writer must still get in.
    let l = Arc::new(RwLock::new(0u64));
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (l, stop) = (l.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let g = l.read();
                    std::hint::black_box(*g);
                    std::thread::sleep(Duration::from_micros(200));
                }
            })
        })
        .collect();
    std::thread::sleep(ms(5));
    for i in 0..10 {
        let start = Instant::now();
        *l.write() = i;
        assert!(start.elapsed() < Duration::from_secs(1));
    }
    stop.store(true, Ordering::Relaxed);
    readers.into_iter().for_each(|t| t.join().unwrap());
}

#[test]
fn rwlock_readers_admitted_after_writer_even_with_writers_queued() {
    // While W1 holds the lock: R queues, then W2 queues. W1's unlock hands the lock to R, the
    // first in line: R reads before W2 writes.
    let l = Arc::new(RwLock::new(Vec::new()));
    let w1 = l.write();
    let r = {
        let l = l.clone();
        std::thread::spawn(move || l.read().len())
    };
    eventually("r queued", || format!("{l:?}").contains("waiters: 1"));
    let w2 = {
        let l = l.clone();
        std::thread::spawn(move || l.write().push("w2"))
    };
    eventually("w2 queued", || format!("{l:?}").contains("waiters: 2"));
    drop(w1);
    assert_eq!(
        r.join().unwrap(),
        0,
        "the reader queued before w2 read before w2 wrote"
    );
    w2.join().unwrap();
    assert_eq!(*l.read(), ["w2"]);
}

#[test]
fn rwlock_across_threads_and_coroutines() {
    let rt = rt();
    let l = Arc::new(RwLock::new(0u64));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let l = l.clone();
            std::thread::spawn(move || {
                for _ in 0..500 {
                    *l.write() += 1;
                    std::hint::black_box(*l.read());
                }
            })
        })
        .collect();
    let l2 = l.clone();
    rt.block_on(move || {
        let hs: Vec<_> = (0..8)
            .map(|_| {
                let l = l2.clone();
                spindle_rt::spawn(move || {
                    for i in 0..250 {
                        if i % 2 == 0 {
                            *l.write() += 2;
                        } else {
                            let g = l.read();
                            spindle_rt::yield_now();
                            std::hint::black_box(*g);
                        }
                    }
                })
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
    });
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(*l.read(), 1000 + 8 * 125 * 2);
}

#[test]
fn rwlock_no_poisoning() {
    let l = Arc::new(RwLock::new(1));
    let l2 = l.clone();
    assert!(
        std::thread::spawn(move || {
            let _g = l2.write();
            panic!("boom");
        })
        .join()
        .is_err()
    );
    assert_eq!(*l.read(), 1);
    assert!(l.try_write().is_some());
}

// ---------------------------------------------------------------------------------------------
// Condvar

#[test]
fn condvar_wait_while_between_thread_and_coroutine() {
    let rt = rt();
    let pair = Arc::new((Mutex::new(0u32), Condvar::new()));
    // Coroutine waits, thread notifies.
    let p = pair.clone();
    let h = rt.spawn(move || {
        let (m, cv) = &*p;
        *cv.wait_while(m.lock(), |v| *v < 3)
    });
    for _ in 0..3 {
        std::thread::sleep(ms(2));
        *pair.0.lock() += 1;
        pair.1.notify_all();
    }
    assert_eq!(h.join().unwrap(), 3);
    // Thread waits, coroutine notifies.
    let p = pair.clone();
    let t = std::thread::spawn(move || {
        let (m, cv) = &*p;
        *cv.wait_while(m.lock(), |v| *v < 5)
    });
    let p = pair.clone();
    rt.block_on(move || {
        for _ in 0..2 {
            spindle_rt::sleep(ms(2));
            *p.0.lock() += 1;
            p.1.notify_one();
        }
    });
    assert_eq!(t.join().unwrap(), 5);
}

#[test]
fn condvar_no_spurious_wakeups() {
    // Stray wake-ups of the waiting thread (std::thread::unpark) and of its spindle_park waker
    // do not end a wait: only a notification or the timeout does.
    let cv = Arc::new(Condvar::new());
    let m = Arc::new(Mutex::new(()));
    let (cv2, m2) = (cv.clone(), m.clone());
    let t = std::thread::spawn(move || {
        let start = Instant::now();
        let (_g, r) = cv2.wait_timeout(m2.lock(), ms(100));
        (r.timed_out(), start.elapsed())
    });
    for _ in 0..20 {
        t.thread().unpark();
        std::thread::sleep(ms(2));
    }
    let (timed_out, elapsed) = t.join().unwrap();
    assert!(timed_out);
    assert!(elapsed >= ms(100));
}

#[test]
fn condvar_notify_one_wakes_exactly_one_in_fifo_order() {
    let pair = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
    let ts: Vec<_> = (0..3)
        .map(|i| {
            let p = pair.clone();
            let t = std::thread::spawn(move || {
                let (m, cv) = &*p;
                let g = m.lock();
                let mut g = cv.wait(g);
                g.push(i);
            });
            // Let each waiter queue before the next.
            eventually("queued", || {
                format!("{:?}", pair.1).contains(&format!("waiters: {}", i + 1))
            });
            t
        })
        .collect();
    pair.1.notify_one();
    eventually("one woke", || pair.0.lock().len() == 1);
    std::thread::sleep(ms(20));
    assert_eq!(*pair.0.lock(), [0], "exactly one, the first");
    pair.1.notify_all();
    ts.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(pair.0.lock().len(), 3);
}

#[test]
fn condvar_wait_timeout_while_reports_condition() {
    let m = Mutex::new(false);
    let cv = Condvar::new();
    let (g, r) = cv.wait_timeout_while(m.lock(), ms(10), |done| !*done);
    assert!(r.timed_out());
    assert!(!*g);
    drop(g);
    *m.lock() = true;
    let (_g, r) = cv.wait_until_while(m.lock(), Instant::now() + ms(10), |done| !*done);
    assert!(!r.timed_out());
}

// ---------------------------------------------------------------------------------------------
// Semaphore

#[test]
fn semaphore_bounds_concurrency_in_coroutines() {
    let rt = rt();
    let max_seen = rt.block_on(|| {
        let sem = Arc::new(Semaphore::new(3));
        let inside = Arc::new(AtomicUsize::new(0));
        let max = Arc::new(AtomicUsize::new(0));
        let hs: Vec<_> = (0..50)
            .map(|_| {
                let (sem, inside, max) = (sem.clone(), inside.clone(), max.clone());
                spindle_rt::spawn(move || {
                    let _p = sem.acquire().unwrap();
                    let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max.fetch_max(n, Ordering::SeqCst);
                    spindle_rt::yield_now();
                    inside.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(sem.available_permits(), 3);
        max.load(Ordering::SeqCst)
    });
    assert!((1..=3).contains(&max_seen), "{max_seen}");
}

#[test]
fn semaphore_errors_and_fifo_for_large_requests() {
    let sem = Arc::new(Semaphore::new(2));
    assert_eq!(
        sem.acquire_many(usize::MAX).unwrap_err(),
        AcquireError::TooMany
    );
    assert_eq!(
        sem.try_acquire_many(Semaphore::MAX_PERMITS + 1)
            .unwrap_err(),
        AcquireError::TooMany
    );
    let p = sem.acquire_many(2).unwrap();
    assert_eq!(sem.try_acquire().unwrap_err(), AcquireError::NoPermits);
    assert_eq!(
        sem.acquire_many_timeout(1, ms(10)).unwrap_err(),
        AcquireError::TimedOut
    );
    // A waiter for 2 queues first; a later waiter for 1 must not overtake it.
    let big = {
        let sem = sem.clone();
        std::thread::spawn(move || sem.acquire_many(2).map(|p| p.forget()).is_ok())
    };
    eventually("big queued", || format!("{sem:?}").contains("waiters: 1"));
    let small_started = Instant::now();
    let small = {
        let sem = sem.clone();
        std::thread::spawn(move || {
            let p = sem.acquire().unwrap();
            p.num_permits()
        })
    };
    eventually("small queued", || format!("{sem:?}").contains("waiters: 2"));
    std::thread::sleep(ms(10));
    drop(p); // 2 permits: all to the big waiter
    assert!(big.join().unwrap());
    assert_eq!(sem.available_permits(), 0);
    sem.add_permits(1);
    assert_eq!(small.join().unwrap(), 1);
    assert!(small_started.elapsed() >= ms(10));
    sem.add_permits(usize::MAX); // saturates, no overflow
    assert_eq!(sem.available_permits(), Semaphore::MAX_PERMITS);
}

#[test]
fn semaphore_close_wakes_waiters() {
    let sem = Arc::new(Semaphore::new(0));
    let ts: Vec<_> = (0..3)
        .map(|_| {
            let sem = sem.clone();
            std::thread::spawn(move || sem.acquire().map(|_| ()))
        })
        .collect();
    std::thread::sleep(ms(20));
    sem.close();
    for t in ts {
        assert_eq!(t.join().unwrap(), Err(AcquireError::Closed));
    }
    assert!(sem.is_closed());
    assert_eq!(sem.try_acquire().unwrap_err(), AcquireError::Closed);
}

// ---------------------------------------------------------------------------------------------
// Barrier, WaitGroup

#[test]
fn barrier_mixed_threads_and_coroutines_rounds() {
    let rt = rt();
    let b = Arc::new(Barrier::new(4));
    let leaders = Arc::new(AtomicUsize::new(0));
    let ts: Vec<_> = (0..2)
        .map(|_| {
            let (b, leaders) = (b.clone(), leaders.clone());
            std::thread::spawn(move || {
                for _ in 0..5 {
                    if b.wait().is_leader() {
                        leaders.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    let hs: Vec<_> = (0..2)
        .map(|_| {
            let (b, leaders) = (b.clone(), leaders.clone());
            rt.spawn(move || {
                for _ in 0..5 {
                    if b.wait().is_leader() {
                        leaders.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    ts.into_iter().for_each(|t| t.join().unwrap());
    hs.into_iter().for_each(|h| h.join().unwrap());
    assert_eq!(leaders.load(Ordering::SeqCst), 5, "one leader per round");
    assert!(Barrier::new(0).wait().is_leader(), "n = 0 acts as 1");
}

#[test]
fn waitgroup_waits_for_coroutines() {
    let rt = rt();
    let wg = Arc::new(WaitGroup::new());
    let done = Arc::new(AtomicUsize::new(0));
    for _ in 0..10 {
        wg.add(1);
        let (wg, done) = (wg.clone(), done.clone());
        rt.spawn(move || {
            spindle_rt::sleep(ms(5));
            done.fetch_add(1, Ordering::SeqCst);
            wg.done();
        });
    }
    assert!(!wg.wait_timeout(Duration::ZERO) || done.load(Ordering::SeqCst) == 10);
    wg.wait();
    assert_eq!(done.load(Ordering::SeqCst), 10);
    assert_eq!(wg.count(), 0);
    assert!(!wg.done(), "done below zero is refused, not a panic");
    assert!(wg.wait_deadline(Instant::now()));
}

// ---------------------------------------------------------------------------------------------
// OnceCell, Lazy, Notify

#[test]
fn oncecell_one_initialiser_others_wait() {
    let rt = rt();
    let cell = Arc::new(OnceCell::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let hs: Vec<_> = (0..20)
        .map(|i| {
            let (cell, runs) = (cell.clone(), runs.clone());
            rt.spawn(move || {
                *cell.get_or_init(|| {
                    runs.fetch_add(1, Ordering::SeqCst);
                    spindle_rt::sleep(ms(10)); // others suspend meanwhile
                    i
                })
            })
        })
        .collect();
    let t = {
        let cell = cell.clone();
        std::thread::spawn(move || *cell.get_or_init(|| 1000))
    };
    let values: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    let tv = t.join().unwrap();
    assert_eq!(runs.load(Ordering::SeqCst) + usize::from(tv == 1000), 1);
    assert!(values.iter().all(|v| *v == tv));
}

#[test]
fn oncecell_panicking_initialiser_lets_the_next_try() {
    let cell = Arc::new(OnceCell::<u32>::new());
    // The waiter starts only once the panicking initialiser runs, so that it waits on it
    // (however slowly the threads start, as under emulation) rather than initialising first.
    let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
    let c2 = cell.clone();
    let waiter = std::thread::spawn(move || {
        started_rx.recv().unwrap();
        *c2.get_or_init(|| 2)
    });
    let c3 = cell.clone();
    let r = std::thread::spawn(move || {
        c3.get_or_init(|| {
            started_tx.send(()).unwrap();
            std::thread::sleep(ms(20));
            panic!("init failed")
        });
    })
    .join();
    assert!(r.is_err());
    assert_eq!(waiter.join().unwrap(), 2);
    assert_eq!(cell.get(), Some(&2));
    assert_eq!(cell.set(3), Err(3));
    let mut cell = Arc::try_unwrap(cell).unwrap();
    assert_eq!(cell.take(), Some(2));
    assert_eq!(cell.get(), None);
}

#[test]
fn lazy_runs_once() {
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    static L: Lazy<u64> = Lazy::new(|| {
        CALLS.fetch_add(1, Ordering::SeqCst);
        42
    });
    let ts: Vec<_> = (0..4).map(|_| std::thread::spawn(|| *L)).collect();
    assert!(ts.into_iter().all(|t| t.join().unwrap() == 42));
    assert_eq!(CALLS.load(Ordering::SeqCst), 1);
}

#[test]
fn notify_permit_and_all() {
    let n = Arc::new(Notify::new());
    n.notify_one();
    n.notify_one(); // still one permit
    n.wait();
    assert!(!n.wait_timeout(ms(5)));
    let rt = rt();
    let woken = Arc::new(AtomicUsize::new(0));
    let hs: Vec<_> = (0..5)
        .map(|_| {
            let (n, woken) = (n.clone(), woken.clone());
            rt.spawn(move || {
                n.wait();
                woken.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    eventually("5 waiting", || format!("{n:?}").contains("waiters: 5"));
    n.notify_all();
    hs.into_iter().for_each(|h| h.join().unwrap());
    assert_eq!(woken.load(Ordering::SeqCst), 5);
    assert!(
        !n.wait_deadline(Instant::now()),
        "notify_all stores no permit"
    );
}
