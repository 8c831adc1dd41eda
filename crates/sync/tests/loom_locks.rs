//! Loom models of the wait queues and hand-offs of the locks and the other primitives: mutual
//! exclusion, hand-off, timeouts and cancellation racing with releases, no lost wake-up (a
//! lost wake-up leaves every thread blocked: loom reports a deadlock).
//!
//! The parker is loom-modelled (see `src/loom.rs`): a timed park times out at once unless a
//! wake-up is pending, and `cancelled_at_park` makes a thread's next park unwind as a cancelled
//! coroutine's does.
//!
//! `RUSTFLAGS="--cfg loom -C overflow-checks=on" LOOM_MAX_PREEMPTIONS=2 cargo test -p spindle-sync --release --test loom_locks`
#![cfg(loom)]

mod loom_common;

use loom::sync::Arc;
use loom::thread;
use loom_common::{cancelled_at_park, later, model, model_with_preemptions};
use spindle_sync::{
    AcquireError, Barrier, Condvar, Mutex, Notify, OnceCell, RwLock, Semaphore, WaitGroup,
};

// ---------------------------------------------------------------------------------------------
// Mutex

#[test]
fn mutex_exclusion_three_threads() {
    model("mutex_exclusion_three_threads", || {
        let m = Arc::new(Mutex::new(0));
        let ts: Vec<_> = (0..2)
            .map(|_| {
                let m = m.clone();
                thread::spawn(move || *m.lock() += 1)
            })
            .collect();
        *m.lock() += 1;
        ts.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(*m.lock(), 3);
        assert!(!m.is_locked());
    });
}

#[test]
fn mutex_retry_and_handoff() {
    // A locks twice; B once. B may be woken to retry, lose to A's second lock, re-queue at the
    // front and then be handed the lock (loom's hand-off bound: re-queued once).
    model("mutex_retry_and_handoff", || {
        let m = Arc::new(Mutex::new(0));
        let b = {
            let m = m.clone();
            thread::spawn(move || *m.lock() += 10)
        };
        for _ in 0..2 {
            let mut g = m.lock();
            // Holding the lock, let B run: B's spin yields to this thread, so without this
            // loom never runs B's re-queue before the unlock, and the hand-off is never
            // explored (checked by making that branch panic: no model reached it without this).
            thread::yield_now();
            *g += 1;
        }
        b.join().unwrap();
        assert_eq!(*m.lock(), 12);
    });
}

#[test]
fn mutex_timeout_races_unlock() {
    model("mutex_timeout_races_unlock", || {
        let m = Arc::new(Mutex::new(0));
        let g = m.lock();
        let t = {
            let m = m.clone();
            thread::spawn(move || {
                if let Some(mut g) = m.try_lock_until(later()) {
                    *g += 1;
                }
            })
        };
        drop(g);
        t.join().unwrap();
        // Whether it timed out or got the lock, the lock is free and usable.
        *m.try_lock().expect("free") += 1;
    });
}

#[test]
fn mutex_cancel_races_unlock() {
    model("mutex_cancel_races_unlock", || {
        let m = Arc::new(Mutex::new(0));
        let g = m.lock();
        let t = {
            let m = m.clone();
            thread::spawn(move || cancelled_at_park(|| *m.lock() += 1).is_some())
        };
        drop(g);
        let got_it = t.join().unwrap();
        let mut g = m.try_lock().expect("no lock leaked to a cancelled waiter");
        assert_eq!(*g, i32::from(got_it));
        *g += 1;
    });
}

#[test]
fn mutex_cancel_passes_retry_on() {
    // Two waiters; one is cancelled: the other must still get the lock (a wake-up sent to the
    // cancelled one is passed on).
    model("mutex_cancel_passes_retry_on", || {
        let m = Arc::new(Mutex::new(0));
        let g = m.lock();
        let c = {
            let m = m.clone();
            thread::spawn(move || {
                let _ = cancelled_at_park(|| *m.lock() += 1);
            })
        };
        let w = {
            let m = m.clone();
            thread::spawn(move || *m.lock() += 1)
        };
        drop(g);
        c.join().unwrap();
        w.join().unwrap();
        assert!(!m.is_locked());
    });
}

#[test]
fn mutex_retry_seen_by_a_timing_out_waiter_strands_nobody() {
    // T1 (timed) and T2 queue behind main. Main's unlock wakes T1 to retry just as T1 times
    // out: T1 sees the wake-up at once, without being woken. It must not see it before the
    // lock's state marks a waiter woken, or its clearing of that mark comes first, the mark
    // stays with nobody on the way, and every later unlock skips the queue: T2 would wait for
    // ever (loom: deadlock).
    model_with_preemptions(
        "mutex_retry_seen_by_a_timing_out_waiter_strands_nobody",
        3,
        || {
            let m = Arc::new(Mutex::new(0));
            let g = m.lock();
            let t1 = {
                let m = m.clone();
                thread::spawn(move || {
                    if let Some(mut g) = m.try_lock_until(later()) {
                        *g += 1;
                    }
                })
            };
            let t2 = {
                let m = m.clone();
                thread::spawn(move || *m.lock() += 1)
            };
            drop(g);
            t1.join().unwrap();
            t2.join().unwrap();
            assert!(!m.is_locked());
        },
    );
}

// ---------------------------------------------------------------------------------------------
// RwLock

#[test]
fn rwlock_writer_and_readers() {
    model("rwlock_writer_and_readers", || {
        let l = Arc::new(RwLock::new((0, 0)));
        let w = {
            let l = l.clone();
            thread::spawn(move || {
                let mut g = l.write();
                g.0 += 1;
                g.1 += 1;
            })
        };
        let r = {
            let l = l.clone();
            thread::spawn(move || {
                let g = l.read();
                assert_eq!(g.0, g.1);
            })
        };
        {
            let g = l.read();
            assert_eq!(g.0, g.1);
        }
        w.join().unwrap();
        r.join().unwrap();
        assert_eq!(*l.read(), (1, 1));
    });
}

#[test]
fn rwlock_writer_timeout_lets_queued_reader_in() {
    // A reader holds; a writer queues and times out; a reader queued behind the writer must
    // be admitted when the writer leaves.
    model("rwlock_writer_timeout_lets_queued_reader_in", || {
        let l = Arc::new(RwLock::new(0));
        let held = l.read();
        let w = {
            let l = l.clone();
            thread::spawn(move || l.try_write_until(later()).is_some())
        };
        let r = {
            let l = l.clone();
            thread::spawn(move || *l.read())
        };
        let wrote = w.join().unwrap();
        assert_eq!(r.join().unwrap(), 0);
        drop(held);
        assert!(l.try_write().is_some(), "nothing leaked (wrote: {wrote})");
    });
}

#[test]
fn rwlock_cancelled_writer() {
    model("rwlock_cancelled_writer", || {
        let l = Arc::new(RwLock::new(0));
        let held = l.read();
        let w = {
            let l = l.clone();
            thread::spawn(move || {
                let _ = cancelled_at_park(|| *l.write() += 1);
            })
        };
        drop(held);
        w.join().unwrap();
        assert!(l.try_write().is_some());
    });
}

#[test]
fn rwlock_writer_timing_out_as_it_is_granted_releases_the_lock() {
    // The last reader's unlock grants a queued writer the lock just as the writer times out:
    // the writer sees the grant at once and unlocks. Had it seen the grant before the state
    // said a writer holds the lock, its unlock would come first and the grant's state write
    // after: the lock would stay write-locked for ever.
    model_with_preemptions(
        "rwlock_writer_timing_out_as_it_is_granted_releases_the_lock",
        3,
        || {
            let l = Arc::new(RwLock::new(0));
            let held = l.read();
            let w = {
                let l = l.clone();
                thread::spawn(move || {
                    if let Some(mut g) = l.try_write_until(later()) {
                        *g += 1;
                    }
                })
            };
            drop(held);
            w.join().unwrap();
            assert!(l.try_write().is_some(), "the lock is free");
        },
    );
}

#[test]
fn rwlock_reader_timing_out_as_it_is_granted_releases_the_lock() {
    // As above for a reader granted by the writer's unlock: its unlock must find itself
    // counted (else the reader count wraps: an overflow, which this leg checks for).
    model_with_preemptions(
        "rwlock_reader_timing_out_as_it_is_granted_releases_the_lock",
        3,
        || {
            let l = Arc::new(RwLock::new(0));
            let held = l.write();
            let r = {
                let l = l.clone();
                thread::spawn(move || l.try_read_until(later()).map(|g| *g))
            };
            drop(held);
            r.join().unwrap();
            assert!(l.try_write().is_some(), "the lock is free");
        },
    );
}

// ---------------------------------------------------------------------------------------------
// Semaphore

#[test]
fn semaphore_handoff_in_order() {
    // 1 permit held by main; T1 wants 2, T2 wants 1 (FIFO: whoever queued first goes first).
    model("semaphore_handoff_in_order", || {
        let sem = Arc::new(Semaphore::new(1));
        let held = sem.acquire().unwrap();
        let ts: Vec<_> = [2, 1]
            .into_iter()
            .map(|n| {
                let sem = sem.clone();
                thread::spawn(move || drop(sem.acquire_many(n).unwrap()))
            })
            .collect();
        drop(held);
        sem.add_permits(1);
        ts.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(sem.available_permits(), 2);
    });
}

#[test]
fn semaphore_timeout_and_cancel_race_release() {
    model("semaphore_timeout_and_cancel_race_release", || {
        let sem = Arc::new(Semaphore::new(0));
        let timed = {
            let sem = sem.clone();
            thread::spawn(move || {
                let _ = sem.acquire_many_deadline(1, later());
            })
        };
        let cancelled = {
            let sem = sem.clone();
            thread::spawn(move || {
                let _ = cancelled_at_park(|| drop(sem.acquire()));
            })
        };
        sem.add_permits(1);
        timed.join().unwrap();
        cancelled.join().unwrap();
        assert_eq!(sem.available_permits(), 1, "no permit lost");
    });
}

#[test]
fn semaphore_close_wakes_waiter() {
    model("semaphore_close_wakes_waiter", || {
        let sem = Arc::new(Semaphore::new(0));
        let t = {
            let sem = sem.clone();
            thread::spawn(move || sem.acquire().map(|p| p.forget()))
        };
        sem.close();
        assert_eq!(t.join().unwrap(), Err(AcquireError::Closed));
    });
}

// ---------------------------------------------------------------------------------------------
// Condvar, Notify

#[test]
fn condvar_no_lost_wakeup() {
    model("condvar_no_lost_wakeup", || {
        let pair = Arc::new((Mutex::new(false), Condvar::new()));
        let t = {
            let pair = pair.clone();
            thread::spawn(move || {
                *pair.0.lock() = true;
                pair.1.notify_one();
            })
        };
        let g = pair.1.wait_while(pair.0.lock(), |ready| !*ready);
        assert!(*g);
        drop(g);
        t.join().unwrap();
    });
}

#[test]
fn condvar_cancelled_waiter_passes_notify_on() {
    model("condvar_cancelled_waiter_passes_notify_on", || {
        let pair = Arc::new((Mutex::new(false), Condvar::new()));
        let c = {
            let pair = pair.clone();
            thread::spawn(move || {
                let woken = cancelled_at_park(|| drop(pair.1.wait(pair.0.lock())));
                if woken.is_some() {
                    // Not cancelled after all (notified before its park): it took the one
                    // notification, which main needs too.
                    pair.1.notify_one();
                }
            })
        };
        let n = {
            let pair = pair.clone();
            thread::spawn(move || {
                *pair.0.lock() = true;
                pair.1.notify_one();
            })
        };
        // The notify_one must reach this waiter even if it chose the cancelled one.
        drop(pair.1.wait_while(pair.0.lock(), |ready| !*ready));
        c.join().unwrap();
        n.join().unwrap();
    });
}

#[test]
fn condvar_timeout_races_notify() {
    // `a` waits with a timeout (loom's timed park gives up at once unless woken) while `b`
    // waits for the flag. The one `notify_one` after the flag is set either completes `a`
    // (which then says so, and we notify again for `b`) or, if `a` timed out, reaches `b`: a
    // notification lost to `a`'s timeout leaves `b` blocked, which loom reports.
    model("condvar_timeout_races_notify", || {
        let pair = Arc::new((Mutex::new(false), Condvar::new()));
        let a = {
            let pair = pair.clone();
            thread::spawn(move || {
                let g = pair.0.lock();
                let (_g, r) = pair.1.wait_until(g, later());
                !r.timed_out()
            })
        };
        let b = {
            let pair = pair.clone();
            thread::spawn(move || drop(pair.1.wait_while(pair.0.lock(), |ready| !*ready)))
        };
        *pair.0.lock() = true;
        pair.1.notify_one();
        if a.join().unwrap() {
            pair.1.notify_one();
        }
        b.join().unwrap();
    });
}

#[test]
fn notify_permit_not_lost_and_passed_on() {
    model("notify_permit_not_lost_and_passed_on", || {
        let n = Arc::new(Notify::new());
        let c = {
            let n = n.clone();
            thread::spawn(move || cancelled_at_park(|| n.wait()).is_some())
        };
        let t = {
            let n = n.clone();
            thread::spawn(move || n.notify_one())
        };
        let consumed = c.join().unwrap();
        t.join().unwrap();
        // Either the waiter consumed the notification (it returned) or, cancelled, it left it
        // stored for the next wait: exactly one of the two.
        let stored = n.wait_timeout(std::time::Duration::ZERO);
        assert_ne!(consumed, stored, "consumed: {consumed}, stored: {stored}");
    });
}

#[test]
fn notify_wait_and_notify_one() {
    model("notify_wait_and_notify_one", || {
        let n = Arc::new(Notify::new());
        let t = {
            let n = n.clone();
            thread::spawn(move || n.notify_one())
        };
        n.wait(); // never lost: before the wait it is a permit, after it a wake-up
        t.join().unwrap();
    });
}

// ---------------------------------------------------------------------------------------------
// Barrier, WaitGroup, OnceCell

#[test]
fn barrier_cancelled_waiter_withdraws() {
    // A cancelled waiter withdraws its arrival (racing with a release would be
    // indistinguishable here: a waiter released and then cancelled also unwinds); then two
    // live callers, racing each other, complete a round.
    model("barrier_cancelled_waiter_withdraws", || {
        let b = Arc::new(Barrier::new(2));
        let c = {
            let b = b.clone();
            thread::spawn(move || cancelled_at_park(|| b.wait().is_leader()))
        };
        assert_eq!(c.join().unwrap(), None);
        assert!(format!("{b:?}").contains("arrived: 0"), "{b:?}");
        let w = {
            let b = b.clone();
            thread::spawn(move || b.wait().is_leader())
        };
        let mine = b.wait().is_leader();
        assert_ne!(w.join().unwrap(), mine, "one leader");
    });
}

#[test]
fn barrier_two_rounds_one_leader_each() {
    model("barrier_two_rounds_one_leader_each", || {
        let b = Arc::new(Barrier::new(2));
        let t = {
            let b = b.clone();
            thread::spawn(move || [b.wait().is_leader(), b.wait().is_leader()])
        };
        let mine = [b.wait().is_leader(), b.wait().is_leader()];
        let theirs = t.join().unwrap();
        assert_ne!(mine[0], theirs[0], "one leader in round 1");
        assert_ne!(mine[1], theirs[1], "one leader in round 2");
    });
}

#[test]
fn waitgroup_done_wakes_waiter() {
    model("waitgroup_done_wakes_waiter", || {
        let wg = Arc::new(WaitGroup::new());
        wg.add(2);
        let ts: Vec<_> = (0..2)
            .map(|_| {
                let wg = wg.clone();
                thread::spawn(move || assert!(wg.done()))
            })
            .collect();
        wg.wait();
        assert_eq!(wg.count(), 0);
        ts.into_iter().for_each(|t| t.join().unwrap());
    });
}

#[test]
fn oncecell_one_initialiser() {
    model("oncecell_one_initialiser", || {
        let cell = Arc::new(OnceCell::new());
        let t = {
            let cell = cell.clone();
            thread::spawn(move || *cell.get_or_init(|| 1))
        };
        let mine = *cell.get_or_init(|| 2);
        assert_eq!(t.join().unwrap(), mine);
    });
}

#[test]
fn oncecell_cancelled_initialiser_lets_waiter_run() {
    model("oncecell_cancelled_initialiser_lets_waiter_run", || {
        let cell = Arc::new(OnceCell::new());
        let gate = Arc::new(Notify::new());
        let t = {
            let (cell, gate) = (cell.clone(), gate.clone());
            // The initialiser parks (on `gate`) and is cancelled there.
            thread::spawn(move || {
                let _ = cancelled_at_park(|| {
                    *cell.get_or_init(|| {
                        gate.wait();
                        1
                    })
                });
            })
        };
        let v = *cell.get_or_init(|| 2);
        gate.notify_one();
        t.join().unwrap();
        assert!(v == 1 || v == 2);
    });
}
