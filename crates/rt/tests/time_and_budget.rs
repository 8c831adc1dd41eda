//! Timers at their edges (very long, zero and past deadlines, many at one instant, across the
//! wheel's levels, racing a wake-up, at shutdown), scopes whose children panic while siblings
//! are parked, and the cooperative budget (a channel that always has a message must not let its
//! receiver keep the worker for ever: immediate receives count against the budget).
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use spindle_rt::{Runtime, StackKind};

fn watchdog(name: &'static str) -> Arc<AtomicBool> {
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    std::thread::spawn(move || {
        let t = Instant::now();
        while !d.load(Ordering::SeqCst) {
            if t.elapsed() > Duration::from_secs(60) {
                eprintln!("watchdog: {name} hung");
                std::process::abort();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    done
}

#[test]
fn long_sleeps_and_parks_are_cancellable_and_never_fire() {
    let w = watchdog("long_sleeps");
    let rt = Runtime::builder().workers(2).build().unwrap();
    let fired = Arc::new(AtomicUsize::new(0));
    let durs = [
        Duration::MAX,
        Duration::from_secs(1 << 40),
        Duration::from_secs(1 << 55),
        Duration::from_secs(u64::MAX / 2),
        Duration::from_secs(365 * 24 * 3600 * 30),
    ];
    let mut hs = Vec::new();
    for d in durs {
        let f = fired.clone();
        hs.push(rt.spawn(move || {
            spindle_rt::sleep(d);
            f.fetch_add(1, Ordering::SeqCst);
        }));
        let f = fired.clone();
        hs.push(rt.spawn(move || {
            let r = spindle_rt::park_timeout(d);
            // a spurious Woken is allowed; a TimedOut is not
            if r == spindle_park::Wake::TimedOut {
                f.fetch_add(100, Ordering::SeqCst);
            }
            spindle_rt::park();
        }));
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(fired.load(Ordering::SeqCst), 0);
    for h in hs {
        h.cancel();
        assert!(h.join().unwrap_err().is_cancelled());
    }
    assert_eq!(fired.load(Ordering::SeqCst), 0);
    // A short sleep still works after the long timers sat in the wheel.
    rt.block_on(|| {
        let t = Instant::now();
        spindle_rt::sleep(Duration::from_millis(20));
        assert!(t.elapsed() >= Duration::from_millis(20));
    });
    assert!(rt.shutdown_timeout(Duration::from_secs(20)));
    w.store(true, Ordering::SeqCst);
}

#[test]
fn zero_and_past_deadlines_return_at_once() {
    let w = watchdog("zero_past");
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.block_on(|| {
        let t = Instant::now();
        for _ in 0..1000 {
            spindle_rt::sleep(Duration::ZERO);
            spindle_rt::sleep_until(Instant::now() - Duration::from_millis(5));
            assert_eq!(
                spindle_rt::park_timeout(Duration::ZERO),
                spindle_park::Wake::TimedOut
            );
        }
        assert!(t.elapsed() < Duration::from_secs(20));
    });
    // plain thread
    spindle_rt::sleep(Duration::ZERO);
    spindle_rt::sleep_until(Instant::now() - Duration::from_secs(1));
    w.store(true, Ordering::SeqCst);
}

#[test]
fn many_timers_at_one_instant_all_fire_never_early() {
    let w = watchdog("many_timers");
    {
        let stack = StackKind::default();
        let rt = Runtime::builder().workers(2).stack(stack).build().unwrap();
        let deadline = Instant::now() + Duration::from_millis(100);
        let early = Arc::new(AtomicUsize::new(0));
        let hs: Vec<_> = (0..2000)
            .map(|_| {
                let e = early.clone();
                rt.spawn(move || {
                    spindle_rt::sleep_until(deadline);
                    if Instant::now() < deadline {
                        e.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(early.load(Ordering::SeqCst), 0);
        assert!(rt.shutdown_timeout(Duration::from_secs(20)));
    }
    w.store(true, Ordering::SeqCst);
}

/// Timers at mixed levels (cascade): a later short timer must not be delayed by a long one.
#[test]
fn staggered_timers_across_levels_fire_in_time() {
    let w = watchdog("staggered");
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.block_on(|| {
        let long = spindle_rt::spawn(|| spindle_rt::sleep(Duration::from_secs(3600)));
        let mut hs = Vec::new();
        for ms in [70u64, 5, 300, 64, 65, 4100, 129] {
            hs.push(spindle_rt::spawn(move || {
                let t = Instant::now();
                spindle_rt::sleep(Duration::from_millis(ms));
                let e = t.elapsed();
                assert!(e >= Duration::from_millis(ms));
                assert!(
                    e < Duration::from_millis(ms) + Duration::from_secs(3),
                    "{ms}: {e:?}"
                );
            }));
            spindle_rt::sleep(Duration::from_millis(3));
        }
        for h in hs {
            h.join().unwrap();
        }
        long.cancel();
        let _ = long.join();
    });
    w.store(true, Ordering::SeqCst);
}

/// A timed park racing an unpark: the wake-up must never be lost.
#[test]
fn timed_park_racing_unpark_loses_no_wakeup() {
    let w = watchdog("race_unpark");
    let rt = Runtime::builder().workers(2).build().unwrap();
    let rounds = 3000;
    rt.block_on(move || {
        for i in 0..rounds {
            let flag = Arc::new(AtomicBool::new(false));
            let me = spindle_rt::current();
            let f = flag.clone();
            let waker = std::thread::spawn(move || {
                if i % 3 == 0 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_micros(900 + (i as u64 % 300)));
                }
                f.store(true, Ordering::SeqCst);
                me.unpark();
            });
            let _ = spindle_rt::park_timeout(Duration::from_millis(1));
            while !flag.load(Ordering::SeqCst) {
                spindle_rt::park();
            }
            waker.join().unwrap();
            // drain a possibly left permit
            let _ = spindle_rt::park_timeout(Duration::ZERO);
        }
    });
    assert!(rt.shutdown_timeout(Duration::from_secs(20)));
    w.store(true, Ordering::SeqCst);
}

#[test]
fn shutdown_with_sleepers_ends_promptly() {
    let w = watchdog("shutdown_sleepers");
    let rt = Runtime::builder().workers(2).build().unwrap();
    let hs: Vec<_> = (0..50)
        .map(|i| rt.spawn(move || spindle_rt::sleep(Duration::from_secs(3600 + i))))
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let t = Instant::now();
    assert!(rt.shutdown_timeout(Duration::from_secs(20)));
    assert!(t.elapsed() < Duration::from_secs(15));
    for h in hs {
        assert!(h.join().is_err());
    }
    w.store(true, Ordering::SeqCst);
}

#[test]
fn scope_child_panics_while_siblings_parked() {
    let w = watchdog("scope_panic");
    {
        let stack = StackKind::default();
        let rt = Runtime::builder().workers(2).stack(stack).build().unwrap();
        let r = rt.block_on(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let data = vec![1u8; 16];
                spindle_rt::scope(|s| {
                    for _ in 0..4 {
                        s.spawn(|| {
                            let _ = &data;
                            spindle_rt::sleep(Duration::MAX)
                        });
                        s.spawn(spindle_rt::park);
                    }
                    s.spawn(|| {
                        spindle_rt::sleep(Duration::from_millis(10));
                        panic!("child boom")
                    });
                    // nested scope inside the body
                    spindle_rt::scope(|s2| {
                        s2.spawn(|| spindle_rt::sleep(Duration::from_millis(5)));
                    });
                    7
                })
            }))
        });
        let p = r.unwrap_err();
        assert_eq!(p.downcast_ref::<&str>(), Some(&"child boom"));
        assert!(rt.shutdown_timeout(Duration::from_secs(20)));
    }
    w.store(true, Ordering::SeqCst);
}

#[test]
fn nested_scope_inner_child_panic_and_sibling_join() {
    let w = watchdog("nested_scope");
    let rt = Runtime::builder().workers(2).build().unwrap();
    rt.block_on(|| {
        let mut counter = 0usize;
        let total = AtomicUsize::new(0);
        spindle_rt::scope(|s| {
            let h = s.spawn(|| {
                spindle_rt::sleep(Duration::from_millis(20));
                5usize
            });
            s.spawn(move || h.join().unwrap() + 1);
            s.spawn(|| {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    spindle_rt::scope(|s2| {
                        s2.spawn(|| spindle_rt::sleep(Duration::from_secs(3600)));
                        s2.spawn(|| panic!("inner"));
                    })
                }));
                assert!(r.is_err());
                total.fetch_add(1, Ordering::SeqCst);
            });
            // spawn from a child after the body returned
            s.spawn(|| {
                spindle_rt::sleep(Duration::from_millis(30));
                s.spawn(|| {
                    spindle_rt::sleep(Duration::from_millis(30));
                    total.fetch_add(10, Ordering::SeqCst);
                });
            });
        });
        counter += total.load(Ordering::SeqCst);
        assert_eq!(counter, 11);
    });
    w.store(true, Ordering::SeqCst);
}

#[test]
fn budget_on_plain_threads_and_ready_channel_fairness() {
    let w = watchdog("budget");
    // plain thread: no-ops
    for _ in 0..1000 {
        spindle_rt::consume_budget();
        spindle_rt::yield_now();
    }
    let (tx, rx) = spindle_sync::mpsc::channel::<u32>();
    for i in 0..200_000 {
        tx.send(i).unwrap();
    }
    let rt = Runtime::builder().workers(1).build().unwrap();
    let other_ran = Arc::new(AtomicBool::new(false));
    let o = other_ran.clone();
    let consumed = rt.block_on(move || {
        let other = spindle_rt::spawn(move || o.store(true, Ordering::SeqCst));
        let mut n = 0u32;
        while !other_ran.load(Ordering::SeqCst) {
            rx.recv().unwrap();
            n += 1;
            if n == 199_999 {
                break;
            }
        }
        other.join().unwrap();
        n
    });
    // The budget is 128 operations a slice: the sibling runs after a few hundred at most.
    assert!(consumed < 10_000, "recv never yielded: {consumed}");
    drop(tx);
    w.store(true, Ordering::SeqCst);
}

/// A coroutine receiving from a channel that always has a message is cancellable mid-stream
/// (the budget's yield is a cancellation point), and the cancel loses no message it received:
/// the yield comes before a receive takes a message, never between taking it and returning.
/// (A send, in turn, is a cancellation point before it takes the caller's message, like a
/// blocked send: that message stays the caller's and unwinds with it.)
#[test]
fn an_always_ready_receiver_is_cancellable_and_loses_nothing() {
    let w = watchdog("always-ready receiver");
    const TOTAL: usize = 2_000_000;
    let (tx, rx) = spindle_sync::mpmc::unbounded::<usize>();
    for i in 0..TOTAL {
        tx.send(i).unwrap();
    }
    let received = Arc::new(AtomicUsize::new(0));
    let r = received.clone();
    let rt = Runtime::builder().workers(1).build().unwrap();
    let rx2 = rx.clone();
    let h = rt.spawn(move || {
        loop {
            let _message = rx2.recv().unwrap();
            // No suspension point between the receive and the count.
            r.fetch_add(1, Ordering::Relaxed);
        }
    });
    let t0 = Instant::now();
    while received.load(Ordering::Relaxed) < 1_000 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the receiver never ran"
        );
        std::thread::yield_now();
    }
    h.cancel();
    assert!(matches!(h.join(), Err(e) if e.is_cancelled()));
    let received = received.load(Ordering::Relaxed);
    let left = std::iter::from_fn(|| rx.try_recv().ok()).count();
    assert!(
        left > 0,
        "not cancelled until every message was received: an always-ready loop had no \
         cancellation point"
    );
    assert_eq!(
        received + left,
        TOTAL,
        "messages lost to the cancellation ({received} received, {left} left)"
    );
    drop(tx);
    drop(rt);
    w.store(true, Ordering::SeqCst);
}

/// A coroutine whose budgeted operations are far apart (1 ms of work between them) yields once
/// its slice has run through the monitor's slice period (10 ms), long before its 128
/// operations are spent: a sibling on its worker runs meanwhile. (The slice's end comes from
/// the monitor, which exhausts the worker's budget; the budget alone would let all 120
/// operations run first.)
#[test]
fn a_slow_ready_loop_yields_when_its_slice_is_over() {
    const OPS: u32 = 120;
    let w = watchdog("slice");
    let rt = Runtime::builder()
        .workers(1)
        // The monitor runs (it marks the slices); it must not report the 1 ms steps.
        .stuck_threshold(Some(Duration::from_secs(30)))
        .build()
        .unwrap();
    let sibling_ran_at = rt.block_on(|| {
        let sibling_ran = Arc::new(AtomicBool::new(false));
        let s = sibling_ran.clone();
        let sibling = spindle_rt::spawn(move || s.store(true, Ordering::SeqCst));
        let mut ran_at = None;
        for op in 0..OPS {
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(1) {
                std::hint::spin_loop();
            }
            spindle_rt::consume_budget();
            if ran_at.is_none() && sibling_ran.load(Ordering::SeqCst) {
                ran_at = Some(op);
            }
        }
        sibling.join().unwrap();
        ran_at
    });
    let at = sibling_ran_at.expect("the sibling ran only after all the operations");
    // About 20-30 ms in; a loaded machine delays the monitor, hence the margin.
    assert!(at < 100, "the sibling ran after {at} operations of 1 ms");
    w.store(true, Ordering::SeqCst);
}
