//! The wait primitives with 3 preemptions: small models (2-3 threads)
//! of a timeout or a cancellation racing a grant, for every primitive that grants something
//! (permits, a lock, a notification), with conservation checked at the end (permits, the lock
//! free, the queue empty; a stranded waiter is a loom deadlock).
//!
//! `RUSTFLAGS="--cfg loom -C overflow-checks=on" LOOM_MAX_PREEMPTIONS=2 cargo test -p spindle-sync --release --test loom_timeouts`
#![cfg(loom)]

mod loom_common;

use std::task::{Wake, Waker};
use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use loom_common::{block_on, cancelled_at_park, later, model_with_preemptions, poll_with};
use spindle_sync::{
    AcquireError, Condvar, Mutex, MutexLockFuture, Notify, RwLock, Semaphore, WaitGroup,
};

/// A waker that does nothing (the models poll by hand).
struct Noop;

impl Wake for Noop {
    fn wake(self: std::sync::Arc<Self>) {}
}

fn noop() -> Waker {
    Waker::from(std::sync::Arc::new(Noop))
}

fn no_waiters(debug: String) {
    assert!(debug.contains("waiters: 0"), "{debug}");
}

// ---------------------------------------------------------------------------------------------
// Semaphore

#[test]
fn semaphore_many_timing_out_as_granted_conserves_permits() {
    // A waiter for 2 times out as `add_permits` grants it: it sees the grant at once and
    // releases it (through the queue: the dispatch's state write must not undo the release).
    model_with_preemptions(
        "semaphore_many_timing_out_as_granted_conserves_permits",
        3,
        || {
            let sem = Arc::new(Semaphore::new(0));
            let t = {
                let sem = sem.clone();
                thread::spawn(move || sem.acquire_many_deadline(2, later()).map(drop))
            };
            sem.add_permits(2);
            let r = t.join().unwrap();
            assert!(matches!(r, Ok(()) | Err(AcquireError::TimedOut)), "{r:?}");
            assert_eq!(sem.available_permits(), 2, "no permit lost or made");
            no_waiters(format!("{sem:?}"));
        },
    );
}

#[test]
fn semaphore_timed_front_leaving_lets_the_next_in() {
    // One permit; T1 asks for 2 (with a timeout), T2 for 1. Whichever queued first, T2 gets
    // its permit: when T1 (at the front, holding T2 back) times out, its leaving must admit T2.
    model_with_preemptions("semaphore_timed_front_leaving_lets_the_next_in", 3, || {
        let sem = Arc::new(Semaphore::new(1));
        let t1 = {
            let sem = sem.clone();
            thread::spawn(move || {
                let r = sem.acquire_many_timeout(2, Duration::from_secs(3600));
                assert_eq!(r.map(drop), Err(AcquireError::TimedOut));
            })
        };
        sem.acquire().unwrap().forget();
        t1.join().unwrap();
        assert_eq!(sem.available_permits(), 0);
        no_waiters(format!("{sem:?}"));
    });
}

#[test]
fn semaphore_cancelled_many_as_granted_passes_permits_on() {
    // A waiter for 2 is cancelled as it is granted; another waits for 1: the cancelled one's
    // grant is released and reaches it.
    model_with_preemptions(
        "semaphore_cancelled_many_as_granted_passes_permits_on",
        3,
        || {
            let sem = Arc::new(Semaphore::new(0));
            let c = {
                let sem = sem.clone();
                thread::spawn(move || {
                    let _ = cancelled_at_park(|| drop(sem.acquire_many(2)));
                })
            };
            sem.add_permits(2);
            sem.acquire().unwrap().forget();
            c.join().unwrap();
            assert_eq!(sem.available_permits(), 1);
            no_waiters(format!("{sem:?}"));
        },
    );
}

#[test]
fn semaphore_close_races_a_grant_to_a_timed_waiter() {
    model_with_preemptions("semaphore_close_races_a_grant_to_a_timed_waiter", 3, || {
        let sem = Arc::new(Semaphore::new(0));
        let t = {
            let sem = sem.clone();
            thread::spawn(move || sem.acquire_deadline(later()).map(drop))
        };
        sem.add_permits(1);
        sem.close();
        let r = t.join().unwrap();
        assert!(
            matches!(
                r,
                Ok(()) | Err(AcquireError::Closed | AcquireError::TimedOut)
            ),
            "{r:?}"
        );
        assert_eq!(sem.available_permits(), 1, "no permit lost ({r:?})");
        no_waiters(format!("{sem:?}"));
    });
}

#[test]
fn semaphore_many_future_dropped_as_granted() {
    // A pending future for 2 is dropped as two releases grant it; a blocking waiter for 1
    // queued behind it must get a permit.
    model_with_preemptions("semaphore_many_future_dropped_as_granted", 3, || {
        let sem = Arc::new(Semaphore::new(0));
        let mut f = sem.acquire_many_async(2);
        assert!(poll_with(&mut f, &noop()).is_pending());
        let releaser = {
            let sem = sem.clone();
            thread::spawn(move || sem.add_permits(2))
        };
        drop(f);
        sem.acquire().unwrap().forget();
        releaser.join().unwrap();
        assert_eq!(sem.available_permits(), 1);
        no_waiters(format!("{sem:?}"));
    });
}

// ---------------------------------------------------------------------------------------------
// Condvar, Notify, WaitGroup

#[test]
fn condvar_notify_all_races_a_timeout_and_a_cancel() {
    model_with_preemptions("condvar_notify_all_races_a_timeout_and_a_cancel", 3, || {
        let pair = Arc::new((Mutex::new(0), Condvar::new()));
        let timed = {
            let pair = pair.clone();
            thread::spawn(move || {
                let (mut g, _) = pair.1.wait_timeout(pair.0.lock(), Duration::from_secs(1));
                *g += 1;
            })
        };
        let cancelled = {
            let pair = pair.clone();
            thread::spawn(move || {
                let _ = cancelled_at_park(|| *pair.1.wait(pair.0.lock()) += 1);
            })
        };
        pair.1.notify_all();
        timed.join().unwrap();
        cancelled.join().unwrap();
        assert!(!pair.0.is_locked());
        assert!(*pair.0.lock() >= 1);
        no_waiters(format!("{:?}", pair.1));
    });
}

#[test]
fn condvar_cancelled_while_relocking_passes_notify_on() {
    // The notifier holds the mutex while it notifies, so a waiter it chooses re-locks by
    // parking, and is cancelled there: the notification goes to the other waiter.
    model_with_preemptions(
        "condvar_cancelled_while_relocking_passes_notify_on",
        3,
        || {
            let pair = Arc::new((Mutex::new(false), Condvar::new()));
            let c = {
                let pair = pair.clone();
                thread::spawn(move || {
                    cancelled_at_park(|| drop(pair.1.wait(pair.0.lock()))).is_some()
                })
            };
            let w = {
                let pair = pair.clone();
                thread::spawn(move || drop(pair.1.wait_while(pair.0.lock(), |ready| !*ready)))
            };
            {
                let mut g = pair.0.lock();
                *g = true;
                pair.1.notify_one();
                // Held until `c` is gone: if it was chosen, its re-lock parks (and unwinds).
                assert!(
                    !c.join().unwrap(),
                    "it cannot return while the mutex is held"
                );
            }
            w.join().unwrap();
            assert!(!pair.0.is_locked());
        },
    );
}

#[test]
fn notify_timed_wait_races_notify_one() {
    // A timed wait racing `notify_one`: the notification is consumed by it (true) or stored
    // (it timed out first): exactly one of the two.
    model_with_preemptions("notify_timed_wait_races_notify_one", 3, || {
        let n = Arc::new(Notify::new());
        let t = {
            let n = n.clone();
            thread::spawn(move || n.wait_deadline(later()))
        };
        n.notify_one();
        let consumed = t.join().unwrap();
        let stored = format!("{n:?}").contains("permit: true");
        assert_ne!(consumed, stored, "consumed: {consumed}, stored: {stored}");
        no_waiters(format!("{n:?}"));
    });
}

#[test]
fn waitgroup_timed_wait_races_done_and_a_new_round() {
    model_with_preemptions("waitgroup_timed_wait_races_done_and_a_new_round", 3, || {
        let wg = Arc::new(WaitGroup::new());
        wg.add(1);
        let t = {
            let wg = wg.clone();
            thread::spawn(move || wg.wait_deadline(later()))
        };
        assert!(wg.done());
        wg.add(1);
        let _ = t.join().unwrap();
        no_waiters(format!("{wg:?}"));
        assert!(wg.done());
        wg.wait();
    });
}

// ---------------------------------------------------------------------------------------------
// Mutex

/// Main holds the lock while T runs `wait` (a lock that gives up: it times out, or is
/// cancelled at its park); main unlocks (T woken to retry), barges back in and holds the lock
/// while T loses and re-queues (overdue under loom: the next unlock hands it the lock) and
/// gives up. Main yields while it holds the lock: without that, loom never runs T's re-queue
/// before main's unlock (its spin yields to main), and the hand-off is never explored. The
/// lock must end free (`kept`: the failure message).
fn mutex_handoff_to_a_waiter_giving_up(name: &str, wait: fn(&Mutex<i32>), kept: &'static str) {
    model_with_preemptions(name, 3, move || {
        let m = Arc::new(Mutex::new(0));
        let g = m.lock();
        let t = {
            let m = m.clone();
            thread::spawn(move || wait(&m))
        };
        thread::yield_now();
        drop(g);
        let g = m.lock();
        thread::yield_now();
        thread::yield_now();
        drop(g);
        t.join().unwrap();
        assert!(!m.is_locked(), "{kept}");
    });
}

#[test]
fn mutex_handoff_to_an_overdue_timed_waiter() {
    mutex_handoff_to_a_waiter_giving_up(
        "mutex_handoff_to_an_overdue_timed_waiter",
        |m| {
            if let Some(mut g) = m.try_lock_for(Duration::from_secs(1)) {
                *g += 1;
            }
        },
        "a lock handed over as the deadline passed is kept",
    );
}

#[test]
fn mutex_handoff_to_an_overdue_cancelled_waiter() {
    // As above with a waiter cancelled at its park: a lock handed to it is passed on.
    mutex_handoff_to_a_waiter_giving_up(
        "mutex_handoff_to_an_overdue_cancelled_waiter",
        |m| {
            let _ = cancelled_at_park(|| *m.lock() += 1);
        },
        "a lock handed to a cancelled waiter is passed on",
    );
}

#[test]
fn mutex_future_handed_the_lock_as_it_is_dropped() {
    // A future woken to retry loses to main's barging lock and re-queues (overdue under
    // loom); main's unlock hands it the lock as another thread drops it: passed on, free.
    model_with_preemptions("mutex_future_handed_the_lock_as_it_is_dropped", 3, || {
        let m = Arc::new(Mutex::new(0));
        let g = m.lock();
        let mut f = m.lock_async();
        let waker = noop();
        assert!(poll_with(&mut f, &waker).is_pending());
        drop(g); // wakes `f` to retry
        let g = m.lock(); // barges in
        assert!(
            poll_with(&mut f, &waker).is_pending(),
            "lost: re-queued, overdue"
        );
        // SAFETY: only the lifetime changes. `f` borrows the mutex inside `m`; the thread
        // holds its own clone of `m` (`keep`, declared first, so dropped last even when
        // unwinding) until after `f` is gone, so the mutex outlives every use of the borrow.
        let f: MutexLockFuture<'static, i32> = unsafe { std::mem::transmute(f) };
        let keep = m.clone();
        let t = thread::spawn(move || {
            let keep = keep;
            drop(f);
            drop(keep);
        });
        drop(g); // hands the lock to `f`, unless it left first
        t.join().unwrap();
        assert!(!m.is_locked());
        *m.try_lock().expect("free") += 1;
    });
}

// ---------------------------------------------------------------------------------------------
// RwLock

#[test]
fn rwlock_read_batch_with_a_cancelled_reader() {
    model_with_preemptions("rwlock_read_batch_with_a_cancelled_reader", 3, || {
        let l = Arc::new(RwLock::new(0));
        let held = l.write();
        let c = {
            let l = l.clone();
            thread::spawn(move || {
                let _ = cancelled_at_park(|| *l.read());
            })
        };
        let r = {
            let l = l.clone();
            thread::spawn(move || *l.read())
        };
        drop(held);
        c.join().unwrap();
        assert_eq!(r.join().unwrap(), 0);
        assert!(l.try_write().is_some(), "the lock is free");
    });
}

#[test]
fn rwlock_read_batch_of_timed_readers() {
    model_with_preemptions("rwlock_read_batch_of_timed_readers", 3, || {
        let l = Arc::new(RwLock::new(0));
        let held = l.write();
        let rs: Vec<_> = (0..2)
            .map(|_| {
                let l = l.clone();
                thread::spawn(move || l.try_read_for(Duration::from_secs(1)).map(|g| *g))
            })
            .collect();
        drop(held);
        rs.into_iter().for_each(|r| {
            let _ = r.join().unwrap();
        });
        assert!(l.try_write().is_some(), "the lock is free");
    });
}

#[test]
fn rwlock_timed_writer_leaving_as_the_reader_unlocks() {
    // A reader holds; a writer waits with a timeout, a reader queues behind it; main's unlock
    // races the writer's timeout: whoever wins, the reader gets in and the lock ends free.
    model_with_preemptions(
        "rwlock_timed_writer_leaving_as_the_reader_unlocks",
        3,
        || {
            let l = Arc::new(RwLock::new(0));
            let held = l.read();
            let w = {
                let l = l.clone();
                thread::spawn(move || l.try_write_for(Duration::from_secs(1)).map(|mut g| *g += 1))
            };
            let r = {
                let l = l.clone();
                thread::spawn(move || *l.read())
            };
            drop(held);
            let _ = w.join().unwrap();
            let _ = r.join().unwrap();
            assert!(l.try_write().is_some(), "the lock is free");
        },
    );
}

#[test]
fn rwlock_write_future_dropped_as_granted() {
    // A pending write future is dropped as the reader's unlock grants it; a reader queued
    // behind it must get in.
    model_with_preemptions("rwlock_write_future_dropped_as_granted", 3, || {
        let l = Arc::new(RwLock::new(0));
        let held = l.read();
        let mut f = l.write_async();
        assert!(poll_with(&mut f, &noop()).is_pending());
        let r = {
            let l = l.clone();
            thread::spawn(move || *block_on(l.read_async()))
        };
        drop(held);
        drop(f);
        assert_eq!(r.join().unwrap(), 0);
        assert!(l.try_write().is_some(), "the lock is free");
    });
}

#[test]
fn rwlock_read_future_dropped_as_granted() {
    model_with_preemptions("rwlock_read_future_dropped_as_granted", 3, || {
        let l = Arc::new(RwLock::new(0));
        let held = l.write();
        let mut f = l.read_async();
        assert!(poll_with(&mut f, &noop()).is_pending());
        let w = {
            let l = l.clone();
            thread::spawn(move || *block_on(l.write_async()) += 1)
        };
        drop(held);
        drop(f);
        w.join().unwrap();
        assert!(l.try_write().is_some(), "the lock is free");
    });
}

// ---------------------------------------------------------------------------------------------
// More (second round)

#[test]
fn semaphore_timed_front_times_out_as_permits_arrive() {
    // T1 (for 2, timed) and T2 (for 1) queue; main adds the permits one at a time: T1 may be
    // granted as it times out, or leave; either way T2 is served and both permits come back.
    model_with_preemptions(
        "semaphore_timed_front_times_out_as_permits_arrive",
        3,
        || {
            let sem = Arc::new(Semaphore::new(0));
            let t1 = {
                let sem = sem.clone();
                thread::spawn(move || drop(sem.acquire_many_deadline(2, later())))
            };
            let t2 = {
                let sem = sem.clone();
                thread::spawn(move || drop(sem.acquire().unwrap()))
            };
            sem.add_permits(1);
            sem.add_permits(1);
            t1.join().unwrap();
            t2.join().unwrap();
            assert_eq!(sem.available_permits(), 2);
            no_waiters(format!("{sem:?}"));
        },
    );
}

#[test]
fn rwlock_cancelled_writer_with_a_reader_behind() {
    model_with_preemptions("rwlock_cancelled_writer_with_a_reader_behind", 3, || {
        let l = Arc::new(RwLock::new(0));
        let held = l.read();
        let w = {
            let l = l.clone();
            thread::spawn(move || {
                let _ = cancelled_at_park(|| *l.write() += 1);
            })
        };
        let r = {
            let l = l.clone();
            thread::spawn(move || *l.read())
        };
        drop(held);
        w.join().unwrap();
        let _ = r.join().unwrap();
        assert!(l.try_write().is_some(), "the lock is free");
    });
}

#[test]
fn condvar_notify_one_races_two_timeouts() {
    // One notification, two timed waiters: at most one of them reports it, none is left
    // queued.
    model_with_preemptions("condvar_notify_one_races_two_timeouts", 3, || {
        let pair = Arc::new((Mutex::new(()), Condvar::new()));
        let ts: Vec<_> = (0..2)
            .map(|_| {
                let pair = pair.clone();
                thread::spawn(move || {
                    let (_g, r) = pair.1.wait_until(pair.0.lock(), later());
                    !r.timed_out()
                })
            })
            .collect();
        pair.1.notify_one();
        let notified = ts
            .into_iter()
            .map(|t| t.join().unwrap())
            .filter(|&n| n)
            .count();
        assert!(notified <= 1, "one notification");
        assert!(!pair.0.is_locked());
        no_waiters(format!("{:?}", pair.1));
    });
}

#[test]
fn oncecell_failing_initialiser_and_a_cancelled_waiter() {
    // T1's initialiser fails; T2 waits and is cancelled; main initialises: the cell ends
    // full, nobody is left waiting.
    model_with_preemptions(
        "oncecell_failing_initialiser_and_a_cancelled_waiter",
        3,
        || {
            let cell = Arc::new(spindle_sync::OnceCell::new());
            let t1 = {
                let cell = cell.clone();
                thread::spawn(move || cell.get_or_try_init(|| Err::<u32, ()>(())).ok().copied())
            };
            let t2 = {
                let cell = cell.clone();
                thread::spawn(move || cancelled_at_park(|| *cell.get_or_init(|| 1)))
            };
            let mine = *cell.get_or_init(|| 2);
            let a = t1.join().unwrap();
            let b = t2.join().unwrap();
            assert!(a.is_none() || a == Some(mine));
            assert!(b.is_none() || b == Some(mine));
            assert_eq!(cell.get(), Some(&mine));
        },
    );
}

#[test]
fn waitgroup_cancelled_waiter_races_done() {
    model_with_preemptions("waitgroup_cancelled_waiter_races_done", 3, || {
        let wg = Arc::new(WaitGroup::new());
        wg.add(1);
        let c = {
            let wg = wg.clone();
            thread::spawn(move || cancelled_at_park(|| wg.wait()).is_some())
        };
        let w = {
            let wg = wg.clone();
            thread::spawn(move || wg.wait())
        };
        assert!(wg.done());
        let _ = c.join().unwrap();
        w.join().unwrap();
        no_waiters(format!("{wg:?}"));
    });
}
