//! The runtime's behaviour, run once per policy (the same suite for FIFO, round-robin and
//! work-stealing).
#![cfg(all(
    feature = "sched-fifo",
    feature = "sched-rr",
    feature = "sched-ws",
    feature = "stack-growable",
    feature = "stack-shared"
))]

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use spindle_rt::{JoinError, Policy, Runtime};

/// Counts drops, to see that cancelled or shut-down coroutines ran their destructors.
struct DropCounter(Arc<AtomicUsize>);
impl Drop for DropCounter {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

macro_rules! policy_suite {
    ($module:ident, $policy:expr) => {
        mod $module {
            use super::*;

            fn rt(workers: usize) -> Runtime {
                Runtime::builder().workers(workers).policy($policy).build().unwrap()
            }

            #[test]
            fn block_on_returns_the_value_and_may_borrow() {
                let rt = rt(2);
                let words = vec!["a", "bc", "def"];
                let total = rt.block_on(|| words.iter().map(|w| w.len()).sum::<usize>());
                assert_eq!(total, 6);
                assert_eq!(words.len(), 3);
            }

            #[test]
            fn spawned_coroutines_run_and_join_from_coroutines_and_threads() {
                let rt = rt(2);
                let from_thread: Vec<_> = (0..100u64).map(|i| rt.spawn(move || i * 2)).collect();
                let sum: u64 = from_thread.into_iter().map(|h| h.join().unwrap()).sum();
                assert_eq!(sum, 9900);
                let inside = rt.block_on(|| {
                    let hs: Vec<_> = (0..1000u64).map(|i| spindle_rt::spawn(move || i)).collect();
                    hs.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
                });
                assert_eq!(inside, 499_500);
            }

            #[test]
            fn a_panic_surfaces_at_join_and_the_worker_survives() {
                let rt = rt(1);
                let h = rt.spawn(|| -> u32 { panic!("expected test panic") });
                match h.join() {
                    Err(JoinError::Panicked(p)) => {
                        assert_eq!(p.downcast_ref::<&str>(), Some(&"expected test panic"))
                    }
                    other => panic!("{other:?}"),
                }
                assert_eq!(rt.block_on(|| 5), 5, "the single worker still works");
            }

            #[test]
            fn sleep_waits_at_least_its_duration_and_others_run_meanwhile() {
                let rt = rt(1);
                let ran = Arc::new(AtomicBool::new(false));
                let ran2 = ran.clone();
                let elapsed = rt.block_on(move || {
                    let other = spindle_rt::spawn(move || ran2.store(true, Ordering::SeqCst));
                    let start = Instant::now();
                    spindle_rt::sleep(Duration::from_millis(30));
                    other.join().unwrap();
                    start.elapsed()
                });
                assert!(elapsed >= Duration::from_millis(30), "{elapsed:?}");
                assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
                assert!(ran.load(Ordering::SeqCst), "the other coroutine ran during the sleep");
            }

            #[test]
            fn many_sleepers_wake_in_deadline_order() {
                let rt = rt(1);
                let order = Arc::new(Mutex::new(Vec::new()));
                rt.block_on(|| {
                    let hs: Vec<_> = [50u64, 10, 30, 20, 40]
                        .into_iter()
                        .map(|ms| {
                            let order = order.clone();
                            spindle_rt::spawn(move || {
                                spindle_rt::sleep(Duration::from_millis(ms));
                                order.lock().unwrap().push(ms);
                            })
                        })
                        .collect();
                    for h in hs {
                        h.join().unwrap();
                    }
                });
                assert_eq!(*order.lock().unwrap(), [10, 20, 30, 40, 50]);
            }

            /// Timers that fall due while the worker is held up fire in one batch: the tasks
            /// still run in the order of their deadlines (the batch does not go through the
            /// run-next slot, which would run its last task first).
            #[test]
            fn sleepers_due_together_wake_in_deadline_order() {
                let rt = rt(1);
                let order = Arc::new(Mutex::new(Vec::new()));
                let started = Arc::new(AtomicUsize::new(0));
                rt.block_on(|| {
                    let hs: Vec<_> = [30u64, 10, 20, 40]
                        .into_iter()
                        .map(|ms| {
                            let order = order.clone();
                            let started = started.clone();
                            spindle_rt::spawn(move || {
                                started.fetch_add(1, Ordering::SeqCst);
                                spindle_rt::sleep(Duration::from_millis(ms));
                                order.lock().unwrap().push(ms);
                            })
                        })
                        .collect();
                    // Let all four start their sleeps, then hold the only worker past every
                    // deadline.
                    while started.load(Ordering::SeqCst) < 4 {
                        spindle_rt::yield_now();
                    }
                    std::thread::sleep(Duration::from_millis(60));
                    for h in hs {
                        h.join().unwrap();
                    }
                });
                assert_eq!(*order.lock().unwrap(), [10, 20, 30, 40]);
            }

            #[test]
            fn yield_now_lets_the_others_run() {
                let rt = rt(1);
                let log = Arc::new(Mutex::new(Vec::new()));
                rt.block_on(|| {
                    let hs: Vec<_> = (0..3)
                        .map(|k| {
                            let log = log.clone();
                            spindle_rt::spawn(move || {
                                for round in 0..3 {
                                    log.lock().unwrap().push((round, k));
                                    spindle_rt::yield_now();
                                }
                            })
                        })
                        .collect();
                    for h in hs {
                        h.join().unwrap();
                    }
                });
                let log = log.lock().unwrap();
                // Every coroutine finished round r before any finished round r + 1.
                for w in log.windows(2) {
                    assert!(w[0].0 <= w[1].0, "{log:?}");
                }
            }

            #[test]
            fn park_and_unpark_like_std_thread() {
                let rt = rt(2);
                let flag = Arc::new(AtomicBool::new(false));
                let flag2 = flag.clone();
                rt.block_on(move || {
                    let me = spindle_rt::current();
                    let t = std::thread::spawn(move || {
                        std::thread::sleep(Duration::from_millis(10));
                        flag2.store(true, Ordering::SeqCst);
                        me.unpark();
                    });
                    while !flag.load(Ordering::SeqCst) {
                        spindle_rt::park();
                    }
                    t.join().unwrap();
                });
            }

            #[test]
            fn cancel_unwinds_a_sleeping_coroutine_and_runs_its_destructors() {
                let rt = rt(2);
                let drops = Arc::new(AtomicUsize::new(0));
                let d = drops.clone();
                let h = rt.spawn(move || {
                    let _guard = DropCounter(d);
                    spindle_rt::sleep(Duration::from_secs(3600));
                    unreachable!("the sleep was cancelled");
                });
                std::thread::sleep(Duration::from_millis(20));
                h.cancel();
                assert!(matches!(h.join(), Err(JoinError::Cancelled)));
                assert_eq!(drops.load(Ordering::SeqCst), 1);
            }

            #[test]
            fn cancel_before_the_first_run_never_runs_the_closure() {
                let rt = rt(1);
                let ran = Arc::new(AtomicBool::new(false));
                rt.block_on(|| {
                    let ran2 = ran.clone();
                    let h = spindle_rt::spawn(move || ran2.store(true, Ordering::SeqCst));
                    h.cancel();
                    assert!(h.join().unwrap_err().is_cancelled());
                });
                assert!(!ran.load(Ordering::SeqCst));
            }

            #[test]
            fn a_cancel_guard_defers_cancellation() {
                let rt = rt(1);
                let (entered, reached) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
                let (e, r) = (entered.clone(), reached.clone());
                let h = rt.spawn(move || {
                    {
                        let _g = spindle_rt::CancelGuard::new();
                        e.store(true, Ordering::SeqCst);
                        spindle_rt::sleep(Duration::from_millis(40)); // not interrupted
                        r.store(true, Ordering::SeqCst);
                    }
                    spindle_rt::sleep(Duration::from_secs(3600)); // cancelled here
                });
                // Cancel once the guard is held (a slow start, as under an emulator, must not
                // let the cancel arrive before it).
                while !entered.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                h.cancel();
                assert!(h.join().unwrap_err().is_cancelled());
                assert!(reached.load(Ordering::SeqCst), "the guarded section completed");
            }

            #[test]
            fn a_coroutine_blocked_in_join_is_cancelled() {
                let rt = rt(2);
                let h = rt.spawn(|| {
                    let forever = spindle_rt::spawn(|| spindle_rt::sleep(Duration::from_secs(3600)));
                    let _ = forever.join();
                });
                std::thread::sleep(Duration::from_millis(20));
                h.cancel();
                assert!(h.join().unwrap_err().is_cancelled());
            }

            #[test]
            fn scope_children_borrow_and_are_all_joined() {
                let rt = rt(2);
                let mut data = vec![1u64; 1000];
                let sum = rt.block_on(|| {
                    spindle_rt::scope(|s| {
                        let (a, b) = data.split_at_mut(500);
                        let h1 = s.spawn(move || {
                            a.iter_mut().for_each(|x| *x += 1);
                            a.iter().sum::<u64>()
                        });
                        let h2 = s.spawn(move || b.iter().sum::<u64>());
                        // A detached child that is still joined by the scope.
                        s.spawn(|| spindle_rt::sleep(Duration::from_millis(5)));
                        h1.join().unwrap() + h2.join().unwrap()
                    })
                });
                assert_eq!(sum, 1500);
                assert_eq!(data[0], 2);
            }

            #[test]
            fn a_sibling_joining_a_handle_and_the_scope_both_wake() {
                // The scope waits for a child while a sibling joins that child's handle: the
                // two waits must both be woken (one shared waiter slot woke only the later
                // one, and the scope never returned). A watchdog turns a hang into a failure.
                let (done_tx, done_rx) = std::sync::mpsc::channel();
                std::thread::spawn(move || {
                    let rt = rt(2);
                    let got = rt.block_on(|| {
                        spindle_rt::scope(|s| {
                            let a = s.spawn(|| {
                                spindle_rt::sleep(Duration::from_millis(20));
                                7
                            });
                            // Not joined in the body: the scope's wait on `a` and the
                            // sibling's join of `a` overlap.
                            drop(s.spawn(move || assert_eq!(a.join().unwrap(), 7)));
                        });
                        true
                    });
                    let _ = done_tx.send(got);
                });
                assert_eq!(
                    done_rx.recv_timeout(Duration::from_secs(30)),
                    Ok(true),
                    "the scope or the sibling was never woken"
                );
            }

            #[test]
            fn a_cancelled_scope_cancels_and_waits_for_its_children_first() {
                // Cancelling the coroutine that runs a scope must not unwind it out of the
                // scope while a child still runs: the child borrows from its frame. The scope
                // cancels its children, waits for them, and the cancellation then takes
                // effect. (It used to unwind at once, and the child read freed memory.)
                struct Flag(Arc<AtomicBool>);
                impl Drop for Flag {
                    fn drop(&mut self) {
                        self.0.store(false, Ordering::SeqCst);
                    }
                }
                struct Frame(Arc<AtomicBool>, Arc<AtomicBool>);
                impl Drop for Frame {
                    fn drop(&mut self) {
                        if self.0.load(Ordering::SeqCst) {
                            self.1.store(true, Ordering::SeqCst);
                        }
                    }
                }
                let rt = rt(2);
                let child_running = Arc::new(AtomicBool::new(false));
                let left_early = Arc::new(AtomicBool::new(false));
                let (running, early) = (child_running.clone(), left_early.clone());
                let start = Instant::now();
                let joined = rt.block_on(move || {
                    let h = spindle_rt::spawn(move || {
                        let _frame = Frame(running.clone(), early);
                        let data = vec![1u64; 100];
                        spindle_rt::scope(|s| {
                            s.spawn(|| {
                                running.store(true, Ordering::SeqCst);
                                let _running = Flag(running.clone());
                                // Long enough to tell a cancelled child from one that ran out.
                                spindle_rt::sleep(Duration::from_secs(90));
                                data.iter().sum::<u64>()
                            });
                        });
                        // The cancellation, held off through the scope, takes effect here.
                        spindle_rt::yield_now();
                        unreachable!("cancelled before this");
                    });
                    while !child_running.load(Ordering::SeqCst) {
                        spindle_rt::sleep(Duration::from_millis(1));
                    }
                    h.cancel();
                    h.join()
                });
                assert!(joined.unwrap_err().is_cancelled());
                assert!(
                    !left_early.load(Ordering::SeqCst),
                    "the scope's coroutine left its frame while a child still borrowed from it"
                );
                assert!(
                    start.elapsed() < Duration::from_secs(60),
                    "the scope did not cancel its sleeping child"
                );
            }

            #[test]
            fn children_spawned_by_children_after_the_body_are_waited_for_too() {
                // A child spawns a grandchild through the shared scope after the body has
                // returned; the scope must wait for it too (it borrows from the caller). It
                // used to wait only for the children there were when the body returned.
                let rt = rt(2);
                let (left_early, sum) = rt.block_on(|| {
                    let data = vec![2u64; 50];
                    let sum = AtomicUsize::new(0);
                    let running = AtomicBool::new(false);
                    spindle_rt::scope(|s| {
                        s.spawn(|| {
                            spindle_rt::sleep(Duration::from_millis(20));
                            running.store(true, Ordering::SeqCst);
                            s.spawn(|| {
                                spindle_rt::sleep(Duration::from_millis(50));
                                let total: u64 = data.iter().sum();
                                sum.store(total as usize, Ordering::SeqCst);
                                running.store(false, Ordering::SeqCst);
                            });
                        });
                    });
                    (running.load(Ordering::SeqCst), sum.load(Ordering::SeqCst))
                });
                assert!(!left_early, "the scope returned while a grandchild still ran");
                assert_eq!(sum, 100);
            }

            #[test]
            fn a_child_panic_cancels_the_siblings_and_propagates() {
                let rt = rt(2);
                let drops = Arc::new(AtomicUsize::new(0));
                let d = drops.clone();
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    rt.block_on(|| {
                        spindle_rt::scope(|s| {
                            s.spawn(move || {
                                let _c = DropCounter(d);
                                spindle_rt::sleep(Duration::from_secs(3600));
                            });
                            s.spawn(|| {
                                spindle_rt::sleep(Duration::from_millis(10));
                                panic!("child failed");
                            });
                        })
                    })
                }));
                let payload = result.unwrap_err();
                assert_eq!(payload.downcast_ref::<&str>(), Some(&"child failed"));
                assert_eq!(drops.load(Ordering::SeqCst), 1, "the sleeping sibling was cancelled");
            }

            #[test]
            fn coroutine_locals_are_per_coroutine_and_dropped_at_exit() {
                struct Tracked(Arc<AtomicUsize>, Cell<u32>);
                impl Drop for Tracked {
                    fn drop(&mut self) {
                        self.0.fetch_add(1, Ordering::SeqCst);
                    }
                }
                static DROPS: std::sync::OnceLock<Arc<AtomicUsize>> = std::sync::OnceLock::new();
                spindle_rt::coroutine_local! {
                    static VALUE: Tracked = Tracked(DROPS.get_or_init(Default::default).clone(), Cell::new(0));
                }
                let drops = DROPS.get_or_init(Default::default).clone();
                let before = drops.load(Ordering::SeqCst);
                let rt = rt(2);
                let seen = rt.block_on(|| {
                    let hs: Vec<_> = (1..=10u32)
                        .map(|k| {
                            spindle_rt::spawn(move || {
                                VALUE.with(|v| v.1.set(k));
                                spindle_rt::yield_now();
                                VALUE.with(|v| v.1.get())
                            })
                        })
                        .collect();
                    hs.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
                });
                assert_eq!(seen, (1..=10).collect::<Vec<_>>());
                assert_eq!(drops.load(Ordering::SeqCst) - before, 10, "one value per coroutine, dropped");
            }

            #[test]
            fn coroutine_local_initialisers_and_destructors_may_use_other_locals() {
                static LOG: Mutex<Vec<&str>> = Mutex::new(Vec::new());
                struct LogsOnDrop;
                impl Drop for LogsOnDrop {
                    fn drop(&mut self) {
                        // A destructor that uses another coroutine-local (made fresh if it
                        // was dropped already: that one is dropped too).
                        BASE.with(|b| assert_eq!(*b, 41));
                        LOG.lock().unwrap().push("dropped");
                    }
                }
                spindle_rt::coroutine_local! {
                    static BASE: u32 = 41;
                    // An initialiser that uses another coroutine-local.
                    static DERIVED: u32 = BASE.with(|b| b + 1);
                    static GUARD: LogsOnDrop = LogsOnDrop;
                }
                let rt = rt(1);
                let got = rt.block_on(|| {
                    spindle_rt::spawn(|| {
                        GUARD.with(|_| ());
                        DERIVED.with(|d| *d)
                    })
                    .join()
                    .unwrap()
                });
                assert_eq!(got, 42);
                assert!(LOG.lock().unwrap().contains(&"dropped"));
            }

            #[test]
            fn blocking_work_runs_on_the_pool_while_the_worker_runs_others() {
                let rt = rt(1);
                let progressed = Arc::new(AtomicUsize::new(0));
                let p = progressed.clone();
                let (during, value) = rt.block_on(move || {
                    let ticker = spindle_rt::spawn(move || {
                        for _ in 0..10 {
                            p.fetch_add(1, Ordering::SeqCst);
                            spindle_rt::sleep(Duration::from_millis(2));
                        }
                    });
                    let p2 = progressed.clone();
                    let value = spindle_rt::blocking(move || {
                        std::thread::sleep(Duration::from_millis(60));
                        p2.load(Ordering::SeqCst)
                    });
                    ticker.join().unwrap();
                    (value, 7)
                });
                assert!(during >= 5, "the worker kept running coroutines: {during}");
                assert_eq!(value, 7);
            }

            #[test]
            fn a_foreign_thread_waking_a_parked_coroutine_is_never_lost() {
                // Boost.Fiber #327: all workers asleep, a plain thread wakes a coroutine.
                let rt = rt(2);
                for _ in 0..200 {
                    let (tx, rx) = std::sync::mpsc::channel();
                    let done = Arc::new(AtomicBool::new(false));
                    let d = done.clone();
                    let h = rt.spawn(move || {
                        tx.send(spindle_rt::current()).unwrap();
                        while !d.load(Ordering::SeqCst) {
                            spindle_rt::park();
                        }
                    });
                    let me = rx.recv().unwrap();
                    std::thread::sleep(Duration::from_micros(200)); // let the workers fall asleep
                    done.store(true, Ordering::SeqCst);
                    me.unpark();
                    h.join().unwrap();
                }
            }

            #[test]
            fn dropping_the_runtime_cancels_what_is_left_and_joins_its_threads() {
                let name = format!("drop-{}", stringify!($module));
                let drops = Arc::new(AtomicUsize::new(0));
                let handle = {
                    let rt = Runtime::builder().workers(2).policy($policy).thread_name(&name).build().unwrap();
                    let start = Instant::now();
                    while threads_named(&name) < 2 && start.elapsed() < Duration::from_secs(5) {
                        std::thread::sleep(Duration::from_millis(1)); // the threads name themselves
                    }
                    assert_eq!(threads_named(&name), 2);
                    for _ in 0..20 {
                        let d = drops.clone();
                        rt.spawn(move || {
                            let _c = DropCounter(d);
                            spindle_rt::sleep(Duration::from_secs(3600));
                        });
                    }
                    std::thread::sleep(Duration::from_millis(20));
                    assert_eq!(rt.metrics().live_coroutines, 20);
                    assert_eq!(rt.metrics().stacks.outstanding(), 20);
                    rt.handle()
                }; // the runtime is dropped here
                assert_eq!(drops.load(Ordering::SeqCst), 20, "every coroutine unwound");
                let m = handle.metrics();
                assert_eq!(m.stacks.outstanding(), 0, "every stack went back to the pool: {m:?}");
                // A joined thread can still be listed for a moment: `pthread_join` returns once the
                // kernel clears the thread's id, a little before its `/proc/self/task` entry
                // goes (seen: 1 run in ~30 under load). A thread left running stays listed.
                let joined = Instant::now();
                while threads_named(&name) > 0 && joined.elapsed() < Duration::from_secs(2) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                assert_eq!(threads_named(&name), 0, "every worker thread joined");
            }

            #[test]
            fn metrics_count_resumes() {
                let rt = rt(2);
                rt.block_on(|| {
                    for _ in 0..10 {
                        spindle_rt::yield_now();
                    }
                });
                // The last resume is counted by the worker just after the coroutine finished,
                // which may be after `block_on` returned: wait for it (briefly).
                let give_up = std::time::Instant::now() + std::time::Duration::from_secs(5);
                let mut m = rt.metrics();
                while m.workers.iter().map(|w| w.resumes).sum::<u64>() < 11
                    && std::time::Instant::now() < give_up
                {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    m = rt.metrics();
                }
                assert_eq!(m.workers.len(), 2);
                let resumes: u64 = m.workers.iter().map(|w| w.resumes).sum();
                assert!(resumes >= 11, "{m:?}");
                assert_eq!(m.live_coroutines, 0);
            }
        }
    };
}

policy_suite!(fifo, Policy::Fifo);
policy_suite!(round_robin, Policy::RoundRobin);
policy_suite!(work_stealing, Policy::WorkStealing);

/// Threads of this process whose name starts with `prefix` (names are cut at 15 bytes).
fn threads_named(prefix: &str) -> usize {
    let prefix = &prefix[..prefix.len().min(15)];
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim_end().starts_with(prefix))
        .count()
}

#[test]
fn zero_workers_is_refused() {
    let err = Runtime::builder().workers(0).build().unwrap_err();
    assert!(err.to_string().contains("at least one worker"), "{err}");
}

#[test]
fn block_on_inside_a_coroutine_panics_with_a_clear_message() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let rt2 = Arc::new(Runtime::builder().workers(1).build().unwrap());
    let h = rt.spawn(move || rt2.block_on(|| 1));
    let err = h.join().unwrap_err().into_panic();
    let msg = err
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| err.downcast_ref::<String>().map(String::as_str))
        .unwrap();
    assert!(msg.contains("inside a coroutine"), "{msg}");
}

#[test]
fn joining_ones_own_handle_panics() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let slot: Arc<Mutex<Option<spindle_rt::JoinHandle<()>>>> = Arc::default();
    let message: Arc<Mutex<Option<String>>> = Arc::default();
    let (s2, m2) = (slot.clone(), message.clone());
    let h = rt.spawn(move || {
        let me = loop {
            if let Some(h) = s2.lock().unwrap().take() {
                break h;
            }
            spindle_rt::sleep(Duration::from_millis(1));
        };
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| me.join())).unwrap_err();
        let text = err
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| err.downcast_ref::<String>().cloned());
        *m2.lock().unwrap() = text;
    });
    *slot.lock().unwrap() = Some(h); // the coroutine gets its own handle
    let start = Instant::now();
    while message.lock().unwrap().is_none() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let text = message
        .lock()
        .unwrap()
        .clone()
        .expect("the coroutine reported");
    assert!(text.contains("own JoinHandle"), "{text}");
}

#[test]
fn a_started_coroutine_stays_on_its_worker() {
    let rt = Runtime::builder()
        .workers(2)
        .policy(Policy::WorkStealing)
        .build()
        .unwrap();
    let hs: Vec<_> = (0..50)
        .map(|_| {
            rt.spawn(|| {
                let first = std::thread::current().id();
                for _ in 0..50 {
                    spindle_rt::yield_now();
                    assert_eq!(
                        std::thread::current().id(),
                        first,
                        "moved after its first run"
                    );
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}

#[test]
fn a_timed_park_says_whether_it_was_woken_or_timed_out() {
    use spindle_park::Wake;
    let rt = Runtime::builder().workers(2).build().unwrap();
    rt.block_on(|| {
        // Nobody wakes it: the deadline passes.
        let start = Instant::now();
        assert_eq!(
            spindle_park::park_timeout(Duration::from_millis(20)),
            Wake::TimedOut
        );
        assert!(start.elapsed() >= Duration::from_millis(20));
        // Woken from another thread long before its deadline, while parked.
        for _ in 0..20 {
            let waker = spindle_park::waker();
            let waking = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(2));
                waker.wake();
            });
            let start = Instant::now();
            assert_eq!(
                spindle_park::park_timeout(Duration::from_secs(10)),
                Wake::Woken
            );
            assert!(start.elapsed() < Duration::from_secs(5));
            waking.join().unwrap();
        }
        // Woken before it parks: the permit makes the park return at once.
        spindle_park::waker().wake();
        assert_eq!(
            spindle_park::park_timeout(Duration::from_secs(10)),
            Wake::Woken
        );
        // A time-out leaves nothing behind: the next timed park times out too.
        assert_eq!(
            spindle_park::park_timeout(Duration::from_millis(5)),
            Wake::TimedOut
        );
        assert_eq!(
            spindle_park::park_timeout(Duration::from_millis(5)),
            Wake::TimedOut
        );
    });
}

#[test]
fn a_coroutine_recognises_its_own_waker_and_no_other() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.block_on(|| {
        let mine = spindle_park::waker();
        assert!(spindle_park::is_current_waker(&mine));
        let theirs = spindle_rt::spawn(spindle_park::waker).join().unwrap();
        assert!(!spindle_park::is_current_waker(&theirs));
        assert!(!spindle_park::is_current_waker(std::task::Waker::noop()));
        spindle_rt::yield_now();
        assert!(
            spindle_park::is_current_waker(&mine),
            "still mine after a switch"
        );
    });
    // Outside a runtime: unsure, so no.
    assert!(!spindle_park::is_current_waker(&spindle_park::waker()));
}

#[test]
fn coroutines_still_queued_at_shutdown_are_cancelled_before_they_run() {
    // One worker, held by a coroutine that does not suspend, so that the coroutines spawned
    // meanwhile are still queued when the runtime is dropped: shutdown cancels them, and
    // their closures are dropped without being called.
    let rt = Runtime::builder().workers(1).build().unwrap();
    let (holding, release) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let (h, r) = (holding.clone(), release.clone());
    rt.spawn(move || {
        h.store(true, Ordering::SeqCst);
        while !r.load(Ordering::SeqCst) {
            std::hint::spin_loop();
        }
    });
    while !holding.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    let (drops, ran) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    for _ in 0..100 {
        let (counter, ran) = (DropCounter(drops.clone()), ran.clone());
        rt.spawn(move || {
            let _counter = counter;
            ran.fetch_add(1, Ordering::SeqCst);
        });
    }
    assert_eq!(
        rt.metrics().live_coroutines,
        101,
        "queued coroutines count as live"
    );
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50)); // the drop below has begun by then
        release.store(true, Ordering::SeqCst);
    });
    drop(rt);
    releaser.join().unwrap();
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "a queued coroutine ran during shutdown"
    );
    assert_eq!(
        drops.load(Ordering::SeqCst),
        100,
        "every queued closure was dropped"
    );
}

#[test]
fn shared_stack_coroutines_spread_over_the_workers_and_stay_where_they_started() {
    // Spawned from one coroutine, shared-stack coroutines may start on any worker (a tree of
    // them used to stay on its root's worker); once started, each keeps its worker (its stack
    // lives in that worker's region) across suspensions, even when marked migratable.
    for policy in [Policy::WorkStealing, Policy::Fifo, Policy::RoundRobin] {
        let rt = Runtime::builder()
            .workers(2)
            .policy(policy)
            .build()
            .unwrap();
        let threads = rt.block_on(|| {
            let hs: Vec<_> = (0..64)
                .map(|_| {
                    // SAFETY: the coroutine lends nothing on its stack.
                    unsafe { spindle_rt::Builder::new().shared_stack().migratable() }
                        .spawn(|| {
                            let first = std::thread::current().id();
                            for _ in 0..20 {
                                // Busy for a while, so that the other worker wakes to help.
                                let until = Instant::now() + Duration::from_micros(100);
                                while Instant::now() < until {
                                    std::hint::spin_loop();
                                }
                                spindle_rt::yield_now();
                                assert_eq!(std::thread::current().id(), first, "it moved");
                            }
                            first
                        })
                        .unwrap()
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap())
                .collect::<std::collections::HashSet<_>>()
        });
        assert_eq!(threads.len(), 2, "{policy:?}: ran on {threads:?}");
    }
}

#[test]
fn many_coroutines_on_shared_stacks_wait_and_finish() {
    // 100k coroutines suspended at once on the workers' shared stacks: more than
    // vm.max_map_count allows guarded stacks.
    let rt = Runtime::builder().workers(2).build().unwrap();
    let n = if std::env::var_os("SPINDLE_UNDER_VALGRIND").is_some() {
        2_000
    } else {
        100_000
    };
    let gate = Arc::new(AtomicBool::new(false));
    let total = rt.block_on(|| {
        let hs: Vec<_> = (0..n as u64)
            .map(|i| {
                let gate = gate.clone();
                // SAFETY: the coroutine lends nothing on its stack.
                unsafe { spindle_rt::Builder::new().shared_stack() }
                    .spawn(move || {
                        let mine = [i; 4];
                        while !gate.load(Ordering::Acquire) {
                            spindle_rt::sleep(Duration::from_millis(5));
                        }
                        mine.iter().sum::<u64>() / 4
                    })
                    .unwrap()
            })
            .collect();
        spindle_rt::sleep(Duration::from_millis(50));
        assert!(
            spindle_rt::Handle::try_current()
                .unwrap()
                .metrics()
                .live_coroutines
                > n / 2
        );
        gate.store(true, Ordering::Release);
        hs.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
    });
    assert_eq!(total, (0..n as u64).sum::<u64>());
}

#[test]
fn a_migratable_coroutine_runs_correctly_wherever_it_resumes() {
    let rt = Runtime::builder()
        .workers(2)
        .policy(Policy::WorkStealing)
        .build()
        .unwrap();
    let hs: Vec<_> = (0..20u64)
        .map(|k| {
            // SAFETY: the closure holds nothing thread-bound across its yields (plain integers).
            unsafe { spindle_rt::Builder::new().migratable() }
                .spawn_on(&rt.handle(), move || {
                    let mut acc = k;
                    for i in 0..200u64 {
                        acc = acc.wrapping_mul(31).wrapping_add(i);
                        spindle_rt::yield_now();
                    }
                    acc
                })
                .unwrap()
        })
        .collect();
    for (k, h) in hs.into_iter().enumerate() {
        let mut acc = k as u64;
        for i in 0..200u64 {
            acc = acc.wrapping_mul(31).wrapping_add(i);
        }
        assert_eq!(h.join().unwrap(), acc);
    }
}

#[test]
fn spawning_after_shutdown_is_an_error() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let handle = rt.handle();
    drop(rt);
    let err = spindle_rt::Builder::new()
        .spawn_on(&handle, || 1)
        .unwrap_err();
    assert!(err.to_string().contains("shutting down"), "{err}");
}

#[test]
fn both_workers_pick_up_work_round_after_round() {
    // Two coroutines that each spin (without suspending) until the other is running too: they
    // only finish if two workers run them at the same time. Repeated, because a worker left
    // marked as spinning by the idle protocol would stop others from being woken in later
    // rounds.
    for policy in [Policy::WorkStealing, Policy::Fifo, Policy::RoundRobin] {
        let rt = Runtime::builder()
            .workers(2)
            .policy(policy)
            .stuck_threshold(None)
            .build()
            .unwrap();
        for round in 0..20 {
            let met = rt.block_on(|| {
                let flags = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
                let hs: Vec<_> = (0..2)
                    .map(|k| {
                        let flags = flags.clone();
                        spindle_rt::spawn(move || {
                            flags[k].store(true, Ordering::SeqCst);
                            let start = Instant::now();
                            while !flags[1 - k].load(Ordering::SeqCst) {
                                if start.elapsed() > Duration::from_secs(5) {
                                    return false;
                                }
                                std::hint::spin_loop();
                            }
                            true
                        })
                    })
                    .collect();
                hs.into_iter().all(|h| h.join().unwrap())
            });
            assert!(
                met,
                "{policy:?}, round {round}: the two coroutines never ran at the same time"
            );
        }
    }
}

/// A cancel that arrives while a `CancelGuard` is held wakes the guarded park once (so the
/// holder can see `cancel_requested` and wind down), does not make later parks spin, and is
/// carried out by the first checkpoint after the guard is gone.
#[test]
fn a_deferred_cancel_wakes_once_then_waits_quietly() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<std::task::Waker>();
    let seen = Arc::new(AtomicUsize::new(0));
    let after_guard = Arc::new(AtomicBool::new(false));
    let (s, a) = (seen.clone(), after_guard.clone());
    let h = rt.spawn(move || {
        let guard = spindle_park::defer_cancel();
        tx.send(spindle_park::waker()).unwrap();
        // Wait for the cancel request (it wakes this park once).
        while !spindle_park::cancel_requested() {
            spindle_park::park();
        }
        s.fetch_add(1, Ordering::SeqCst);
        // Now wait for "the kernel" (the test thread's waker): the park must really sleep,
        // not be re-queued by the pending cancel on every round.
        let start = std::time::Instant::now();
        spindle_park::park();
        assert!(
            start.elapsed() >= Duration::from_millis(40),
            "the guarded park returned early (spinning on the pending cancel)"
        );
        drop(guard);
        a.store(true, Ordering::SeqCst);
        spindle_park::checkpoint();
        unreachable!("the checkpoint carries out the cancellation");
    });
    let waker = rx.recv().unwrap();
    std::thread::sleep(Duration::from_millis(10));
    h.cancel();
    while seen.load(Ordering::SeqCst) == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let resumes_before = rt.metrics().workers[0].resumes;
    std::thread::sleep(Duration::from_millis(60));
    // The task slept meanwhile: a pending cancel re-queueing it on every park would show
    // thousands of resumes here.
    let resumes_during = rt.metrics().workers[0].resumes - resumes_before;
    waker.wake();
    assert!(h.join().unwrap_err().is_cancelled());
    assert!(after_guard.load(Ordering::SeqCst));
    assert!(
        resumes_during <= 2,
        "{resumes_during} resumes while waiting"
    );
}

/// A `PinGuard` keeps a migratable coroutine on its worker across parks.
#[test]
fn a_pin_guard_keeps_a_migratable_coroutine_on_its_thread() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    // Keep both workers busy with wake-ups so that a free-to-move task would move.
    let h = {
        let b = unsafe {
            // SAFETY: the coroutine holds nothing thread-bound across its suspensions except
            // inside the pinned section, which is what is being tested.
            spindle_rt::Builder::new().migratable()
        };
        b.spawn_on(&rt.handle(), || {
            let pin = spindle_park::pin_to_thread();
            let home = std::thread::current().id();
            for _ in 0..200 {
                spindle_rt::yield_now();
                let _ = spindle_park::park_timeout(Duration::from_micros(50));
                assert_eq!(std::thread::current().id(), home, "moved while pinned");
            }
            drop(pin);
        })
        .unwrap()
    };
    let noise: Vec<_> = (0..8)
        .map(|_| {
            rt.spawn(|| {
                for _ in 0..2000 {
                    spindle_rt::yield_now();
                }
            })
        })
        .collect();
    h.join().unwrap();
    for n in noise {
        n.join().unwrap();
    }
}

/// Reads that always succeed count against the budget: a coroutine whose socket always has
/// data still lets the others on its worker run.
#[test]
fn consume_budget_lets_others_run() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let other_ran = Arc::new(AtomicBool::new(false));
    let o = other_ran.clone();
    rt.block_on(move || {
        let other = spindle_rt::spawn(move || o.store(true, Ordering::SeqCst));
        let mut spins = 0u64;
        while !other_ran.load(Ordering::SeqCst) {
            spindle_park::consume_budget();
            spins += 1;
            assert!(spins < 1_000_000, "the other coroutine never ran");
        }
        other.join().unwrap();
    });
}

/// After a spike, an idle runtime gives its idle stacks back: a worker that has slept about a
/// second with nothing to do unmaps the pooled stacks beyond 256 in its own cache and 256 in
/// the shared pool (what stays is reused first).
#[test]
fn an_idle_runtime_unmaps_the_stacks_a_spike_left() {
    const SPIKE: usize = 1500;
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.block_on(|| {
        // All alive at once: none finishes before every one has started (and so holds a
        // stack), however slowly they run (valgrind).
        let started = Arc::new(AtomicUsize::new(0));
        let go = Arc::new(AtomicBool::new(false));
        let handles: Vec<_> = (0..SPIKE)
            .map(|_| {
                let (started, go) = (started.clone(), go.clone());
                spindle_rt::spawn(move || {
                    started.fetch_add(1, Ordering::SeqCst);
                    while !go.load(Ordering::SeqCst) {
                        spindle_rt::sleep(Duration::from_millis(1));
                    }
                })
            })
            .collect();
        while started.load(Ordering::SeqCst) < SPIKE {
            spindle_rt::sleep(Duration::from_millis(1));
        }
        go.store(true, Ordering::SeqCst);
        for h in handles {
            h.join().unwrap();
        }
    });
    let metrics = rt.metrics();
    let after_spike = metrics.stacks;
    // The few the worker keeps with its idle carriers (coroutines to start the next tasks on)
    // are in use as the pool counts them.
    let carried = metrics.workers[0].idle_carriers as u64;
    assert!(carried > 0, "{metrics:?}");
    assert!(
        after_spike.thread_cached + after_spike.shared_pooled + carried >= SPIKE as u64,
        "the spike's stacks are pooled: {after_spike:?}"
    );
    let start = Instant::now();
    loop {
        let stacks = rt.metrics().stacks;
        let carried = rt.metrics().workers[0].idle_carriers;
        // Once the release is over (the two readings are not one snapshot): the idle carriers
        // beyond 64 gave their stacks back first, and hold every stack still out.
        if stacks.thread_cached + stacks.shared_pooled <= 512
            && carried <= 64
            && stacks.outstanding() == carried as u64
        {
            assert!(
                stacks.unmapped >= after_spike.unmapped + (SPIKE - 512 - 64) as u64,
                "{stacks:?}"
            );
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "an idle worker kept its stacks: {stacks:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Still a working runtime, reusing what it kept.
    let mapped = rt.metrics().stacks.mapped;
    assert_eq!(rt.block_on(|| spindle_rt::spawn(|| 7).join().unwrap()), 7);
    assert_eq!(rt.metrics().stacks.mapped, mapped);
}

/// A coroutine takes its stack when it first runs: a burst of spawns that have not run yet
/// holds no stacks, and coroutines that run one after another reuse the same pooled ones.
/// With `Builder::reserve_stack` each takes its stack at the spawn.
#[test]
fn stacks_are_taken_at_the_first_run_unless_reserved() {
    const BURST: usize = 2000;
    let rt = Runtime::builder().workers(1).build().unwrap();
    let mapped_before = rt.metrics().stacks.mapped;
    rt.block_on(|| {
        let handles: Vec<_> = (0..BURST).map(|i| spindle_rt::spawn(move || i)).collect();
        // None has run yet: the root has not suspended on this one worker.
        for (i, h) in handles.into_iter().enumerate() {
            assert_eq!(h.join().unwrap(), i);
        }
    });
    let lazy = rt.metrics().stacks.mapped - mapped_before;
    assert!(
        lazy < 16,
        "{lazy} stacks mapped for {BURST} coroutines run one after another"
    );

    let mapped_before = rt.metrics().stacks.mapped;
    rt.block_on(|| {
        let handles: Vec<_> = (0..BURST)
            .map(|i| {
                spindle_rt::Builder::new()
                    .reserve_stack()
                    .spawn(move || i)
                    .unwrap()
            })
            .collect();
        for (i, h) in handles.into_iter().enumerate() {
            assert_eq!(h.join().unwrap(), i);
        }
    });
    let reserved = rt.metrics().stacks.mapped - mapped_before;
    // The pool had a few stacks cached from the first burst; the rest were mapped.
    assert!(
        reserved as usize >= BURST - 16,
        "{reserved} stacks mapped for {BURST} reserved at once"
    );
}

#[test]
fn handles_and_wakers_outlive_the_runtime() {
    // Tasks reach their runtime through a plain pointer that is valid while they are
    // registered; a handle, a waker or a cancel used after the runtime is gone must not
    // dereference it (run under the address sanitizer, a mistake here is a use-after-free).
    let rt = Runtime::builder().workers(2).build().unwrap();
    let finished = rt.spawn(|| 7);
    let (waker_tx, waker_rx) = std::sync::mpsc::channel();
    let parked = rt.spawn(move || {
        waker_tx.send(spindle_park::waker()).unwrap();
        loop {
            spindle_park::park();
        }
    });
    let waker = waker_rx.recv().unwrap();
    while !finished.is_finished() {
        std::thread::yield_now();
    }
    drop(rt); // cancels `parked`, waits for it, frees the runtime
    waker.wake_by_ref();
    parked.cancel();
    finished.cancel();
    assert!(parked.is_finished());
    assert!(matches!(parked.join(), Err(JoinError::Cancelled)));
    assert_eq!(finished.join().unwrap(), 7);
    waker.wake();
}

#[test]
fn a_shutdown_that_times_out_leaves_the_stragglers_usable() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let straggler = rt.spawn(move || {
        let _hold = spindle_rt::CancelGuard::new();
        started_tx.send(()).unwrap();
        spindle_rt::sleep(Duration::from_secs(3600));
    });
    started_rx.recv().unwrap();
    assert!(!rt.shutdown_timeout(Duration::from_millis(20)));
    // The straggler is leaked with the runtime's shared state: its handle still works.
    assert!(!straggler.is_finished());
    straggler.cancel();
    assert!(!straggler.is_finished());
}
