//! The hand-off of a stuck worker's movable work: a coroutine that blocks its worker without
//! suspending (a `futex` in `std::sync::Mutex::lock`, a raw system call, a CPU loop) keeps
//! the coroutines pinned to that worker, but not those that have not started yet, nor the
//! due timers of migratable ones. Every wait here has a watchdog: a hang is a failure.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use spindle_rt::{Builder, IoBackend, Policy, Runtime};

/// How long the blocking call keeps its worker.
const BLOCKED_FOR: Duration = Duration::from_millis(1000);

/// What must happen well before the blocked worker comes back. The stuck threshold is 10 ms
/// (a CPU loop is confirmed at 1.5×) and the monitor ticks every 2.5 ms: the rest is slack
/// for a loaded 2-core machine.
const BOUND: Duration = Duration::from_millis(300);

/// Unstarted coroutines queued on the worker just before it blocks.
const QUEUED: usize = 100;

fn two_workers(policy: Policy, threshold: Duration) -> Runtime {
    Runtime::builder()
        .workers(2)
        .policy(policy)
        .io(IoBackend::None)
        .stuck_threshold(Some(threshold))
        .build()
        .unwrap()
}

/// What one run of [`blocked_worker`] measured, from the moment the coroutine blocked.
#[derive(Debug)]
struct Measured {
    /// The last of the queued coroutines ran.
    queued_done: Duration,
    /// A migratable coroutine's 20 ms sleep, armed on the blocked worker, ended.
    sleeper_woke: Duration,
    /// The longest gap between two ticks of a 1 ms ticker on the other worker while the
    /// worker was blocked.
    ticker_gap: Duration,
}

/// A coroutine (the hog) starts a ticker on the other worker (it does not suspend until the
/// ticker has started, so the ticker can only start there; the ticker spins until the hog is
/// ready, so that it steals nothing meanwhile), parks a migratable sleeper (20 ms) on its own
/// worker and queues [`QUEUED`] coroutines there, then calls `block`, which keeps the thread
/// for [`BLOCKED_FOR`] without suspending. Retries if the sleeper was stolen before it ran
/// anyway; `None` if it always was.
fn blocked_worker(block: fn()) -> Option<Measured> {
    let rt = two_workers(Policy::WorkStealing, Duration::from_millis(10));
    for attempt in 0..10 {
        let stop = Arc::new(AtomicBool::new(false));
        let ticks: Arc<Mutex<Vec<Instant>>> = Arc::new(Mutex::new(Vec::new()));
        let ran = Arc::new(AtomicUsize::new(0));
        let last_ran = Arc::new(Mutex::new(None::<Instant>));
        let (tx, rx) = mpsc::channel();
        let hog = {
            let (ran, last_ran) = (ran.clone(), last_ran.clone());
            let (stop, ticks) = (stop.clone(), ticks.clone());
            rt.spawn(move || {
                let here = std::thread::current().id();
                let ticker_at = Arc::new(Mutex::new(None::<ThreadId>));
                let go = Arc::new(AtomicBool::new(false));
                let ticker = {
                    let (at, go) = (ticker_at.clone(), go.clone());
                    spindle_rt::spawn(move || {
                        *at.lock().unwrap() = Some(std::thread::current().id());
                        // Keep the other worker from stealing the sleeper below.
                        while !go.load(Ordering::SeqCst) {
                            std::hint::spin_loop();
                        }
                        while !stop.load(Ordering::SeqCst) {
                            spindle_rt::sleep(Duration::from_millis(1));
                            ticks.lock().unwrap().push(Instant::now());
                        }
                    })
                };
                while ticker_at.lock().unwrap().is_none() {
                    std::hint::spin_loop();
                }
                assert_ne!(*ticker_at.lock().unwrap(), Some(here));
                // A fresh time slice: a task popped from run-next inherits the slice, and one
                // that is over would send the sleeper below to the queues, where it is stolen.
                spindle_rt::yield_now();
                let sleeper_at = Arc::new(Mutex::new(None));
                let at = sleeper_at.clone();
                // SAFETY: the closure keeps nothing thread-bound across its sleep.
                let sleeper = unsafe { Builder::new().migratable() }
                    .spawn(move || {
                        *at.lock().unwrap() = Some(std::thread::current().id());
                        spindle_rt::sleep(Duration::from_millis(20));
                        Instant::now()
                    })
                    .unwrap();
                // The sleeper runs next here (run-next) and arms its timer on this worker.
                while sleeper_at.lock().unwrap().is_none() {
                    spindle_rt::yield_now();
                }
                spindle_rt::yield_now();
                go.store(true, Ordering::SeqCst);
                if *sleeper_at.lock().unwrap() != Some(here) {
                    tx.send(None).unwrap();
                    return (ticker, sleeper, Vec::new());
                }
                let queued: Vec<_> = (0..QUEUED)
                    .map(|_| {
                        let (ran, last_ran) = (ran.clone(), last_ran.clone());
                        spindle_rt::spawn(move || {
                            ran.fetch_add(1, Ordering::SeqCst);
                            *last_ran.lock().unwrap() = Some(Instant::now());
                        })
                    })
                    .collect();
                tx.send(Some(Instant::now())).unwrap();
                block();
                (ticker, sleeper, queued)
            })
        };
        let blocked_at = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the hog never said where its sleeper ran");
        // The watchdog: everything below must be over long before this.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !hog.is_finished() {
            assert!(
                Instant::now() < deadline,
                "the blocked coroutine never ended"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Ordering::SeqCst);
        let (ticker, sleeper, queued) = hog.join().unwrap();
        ticker.join().unwrap();
        let woke = sleeper.join().unwrap();
        for q in queued {
            q.join().unwrap();
        }
        let Some(blocked_at) = blocked_at else {
            eprintln!("attempt {attempt}: the sleeper started on the other worker; again");
            continue;
        };
        assert_eq!(ran.load(Ordering::SeqCst), QUEUED);
        let ticks = ticks.lock().unwrap();
        let end = blocked_at + BLOCKED_FOR;
        let mut gap = Duration::ZERO;
        let mut prev = blocked_at;
        for &t in ticks.iter().filter(|&&t| t > blocked_at) {
            gap = gap.max(t.min(end).saturating_duration_since(prev));
            prev = t;
            if t >= end {
                break;
            }
        }
        let measured = Measured {
            queued_done: last_ran
                .lock()
                .unwrap()
                .unwrap()
                .saturating_duration_since(blocked_at),
            sleeper_woke: woke.saturating_duration_since(blocked_at),
            ticker_gap: gap,
        };
        eprintln!("measured: {measured:?}");
        return Some(measured);
    }
    None
}

fn check(case: &str, measured: Option<Measured>) {
    let m = measured.unwrap_or_else(|| panic!("{case}: inconclusive, never placed as needed"));
    assert!(
        m.queued_done < BOUND,
        "{case}: the {QUEUED} coroutines queued on the blocked worker ran only after \
         {:?} (the worker was blocked for {BLOCKED_FOR:?})",
        m.queued_done
    );
    assert!(
        m.sleeper_woke < BOUND,
        "{case}: a migratable coroutine's 20 ms sleep armed on the blocked worker ended after \
         {:?}",
        m.sleeper_woke
    );
    assert!(
        m.ticker_gap < BOUND,
        "{case}: a ticker on the other worker paused for {:?}",
        m.ticker_gap
    );
}

#[test]
fn queued_coroutines_and_due_timers_leave_a_worker_blocked_in_a_mutex_lock() {
    check(
        "futex",
        blocked_worker(|| {
            // A futex wait: the lock is held by a plain thread for `BLOCKED_FOR`.
            let lock = Arc::new(Mutex::new(()));
            let held = Arc::new(AtomicBool::new(false));
            let holder = {
                let (lock, held) = (lock.clone(), held.clone());
                std::thread::spawn(move || {
                    let _guard = lock.lock().unwrap();
                    held.store(true, Ordering::SeqCst);
                    std::thread::sleep(BLOCKED_FOR);
                })
            };
            while !held.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
            drop(lock.lock().unwrap());
            holder.join().unwrap();
        }),
    );
}

#[test]
fn queued_coroutines_and_due_timers_leave_a_worker_in_a_cpu_loop() {
    check(
        "CPU loop",
        blocked_worker(|| {
            let t = Instant::now();
            while t.elapsed() < BLOCKED_FOR {
                std::hint::spin_loop();
            }
        }),
    );
}

#[cfg(target_os = "linux")]
#[test]
fn queued_coroutines_and_due_timers_leave_a_worker_in_a_raw_nanosleep() {
    check(
        "raw nanosleep",
        blocked_worker(|| {
            let t = Instant::now();
            while let Some(left) = BLOCKED_FOR.checked_sub(t.elapsed()) {
                let ts = libc::timespec {
                    tv_sec: left.as_secs() as libc::time_t,
                    tv_nsec: left.subsec_nanos() as libc::c_long,
                };
                // SAFETY: `ts` is a valid timespec; no remainder is asked for.
                unsafe {
                    libc::syscall(
                        libc::SYS_nanosleep,
                        &ts as *const libc::timespec,
                        std::ptr::null_mut::<libc::timespec>(),
                    )
                };
            }
        }),
    );
}

/// A migratable coroutine sleeps 30 ms on the worker that then runs a 1.5 s CPU loop: its
/// timer is fired by the monitor while the worker is stuck, and it wakes on the idle worker.
#[test]
fn a_migratable_sleeper_on_a_stuck_worker_wakes_elsewhere() {
    let rt = two_workers(Policy::WorkStealing, Duration::from_millis(10));
    for attempt in 0..10 {
        let (tx, rx) = mpsc::channel();
        let hog = rt.spawn(move || {
            let here = std::thread::current().id();
            let sleeper_at = Arc::new(Mutex::new(None));
            let parked = Arc::new(AtomicBool::new(false));
            let (at, p) = (sleeper_at.clone(), parked.clone());
            // SAFETY: the closure keeps nothing thread-bound across its sleep.
            let sleeper = unsafe { Builder::new().migratable() }
                .spawn(move || {
                    *at.lock().unwrap() = Some(std::thread::current().id());
                    p.store(true, Ordering::SeqCst);
                    let t = Instant::now();
                    spindle_rt::sleep(Duration::from_millis(30));
                    (t.elapsed(), std::thread::current().id())
                })
                .unwrap();
            // Let the sleeper run (run-next, on this worker) and arm its timer here.
            while !parked.load(Ordering::SeqCst) {
                spindle_rt::yield_now();
            }
            spindle_rt::yield_now();
            if *sleeper_at.lock().unwrap() != Some(here) {
                // It started on the other worker: not the case under test.
                return (sleeper, here);
            }
            tx.send(()).unwrap();
            // Keep this worker for 1.5 s without suspending.
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(1500) {
                std::hint::spin_loop();
            }
            (sleeper, here)
        });
        let same_worker = rx.recv_timeout(Duration::from_secs(10)).is_ok();
        let (sleeper, hog_at) = hog.join().unwrap();
        let (slept, woke_at) = sleeper.join().unwrap();
        if !same_worker {
            eprintln!("attempt {attempt}: the sleeper started on the other worker; again");
            continue;
        }
        eprintln!("a 30 ms sleep on a stuck worker lasted {slept:?}");
        assert!(
            slept < Duration::from_millis(500),
            "a migratable coroutine's 30 ms sleep lasted {slept:?}: its timer waited for the \
             worker stuck in a 1.5 s loop, while the other worker was idle"
        );
        assert_ne!(woke_at, hog_at, "it woke on the stuck worker");
        return;
    }
    panic!("inconclusive: the sleeper never started on the hog's worker");
}

/// Occupies the other worker (of two) with a coroutine that spins until the returned flag is
/// set, so that it steals nothing meanwhile; returns once that coroutine runs, with a fresh
/// time slice for the caller (a task the caller then hands the worker to through run-next
/// inherits the caller's slice, and one that is over would send it to the queues).
fn occupy_the_other_worker() -> (Arc<AtomicBool>, spindle_rt::JoinHandle<()>) {
    let started = Arc::new(AtomicBool::new(false));
    let release = Arc::new(AtomicBool::new(false));
    let spinner = {
        let (started, release) = (started.clone(), release.clone());
        spindle_rt::spawn(move || {
            started.store(true, Ordering::SeqCst);
            while !release.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
        })
    };
    // No suspension until it runs: it can only run on the other worker.
    while !started.load(Ordering::SeqCst) {
        std::hint::spin_loop();
    }
    spindle_rt::yield_now();
    (release, spinner)
}

/// A started coroutine that may not move — an ordinary one, or a migratable one holding a
/// `PinGuard` — and sleeps on a stuck worker stays there: its sleep ends only once the worker
/// is back, on that worker (the migratable one's timer is fired by the monitor, which queues
/// it to its home).
#[test]
fn a_started_pinned_sleeper_on_a_stuck_worker_waits_for_it() {
    let rt = two_workers(Policy::WorkStealing, Duration::from_millis(10));
    for migratable in [false, true] {
        let r = rt.spawn(move || {
            let here = std::thread::current().id();
            let (release, spinner) = occupy_the_other_worker();
            let parked = Arc::new(AtomicBool::new(false));
            let p = parked.clone();
            let body = move || {
                let _pin = migratable.then(spindle_park::pin_to_thread);
                let started_at = std::thread::current().id();
                p.store(true, Ordering::SeqCst);
                spindle_rt::sleep(Duration::from_millis(20));
                (started_at, std::thread::current().id(), Instant::now())
            };
            let sleeper = if migratable {
                // SAFETY: the closure holds nothing thread-bound outside its pinned section.
                unsafe { Builder::new().migratable() }.spawn(body).unwrap()
            } else {
                spindle_rt::spawn(body)
            };
            // It runs next here (run-next) and parks.
            while !parked.load(Ordering::SeqCst) {
                spindle_rt::yield_now();
            }
            spindle_rt::yield_now();
            release.store(true, Ordering::SeqCst);
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(300) {
                std::hint::spin_loop();
            }
            let back = Instant::now();
            spinner.join().unwrap();
            (here, back, sleeper)
        });
        let (hog_at, back, sleeper) = r.join().unwrap();
        let (started_at, woke_at, woke) = sleeper.join().unwrap();
        assert_eq!(
            started_at, hog_at,
            "migratable {migratable}: not placed as needed"
        );
        assert_eq!(
            started_at, woke_at,
            "migratable {migratable}: a pinned coroutine moved"
        );
        assert!(
            woke >= back,
            "migratable {migratable}: it woke while its worker was still stuck"
        );
    }
}

/// Repeated cycles: a coroutine queues unstarted coroutines and migratable sleepers on its
/// worker, blocks it for 15–30 ms (a CPU loop, then a sleep of the thread, in turn), and
/// comes back while the others take its work. Every coroutine runs exactly once, with every
/// policy (round-robin steals nothing; its counts must still be exact).
#[test]
fn no_coroutine_is_lost_or_run_twice_across_stuck_and_unstuck_cycles() {
    const CYCLES: usize = 20;
    const PER_CYCLE: usize = 200;
    const SLEEPERS: usize = 10;
    for policy in [Policy::WorkStealing, Policy::Fifo, Policy::RoundRobin] {
        let rt = two_workers(policy, Duration::from_millis(2));
        let runs: Arc<Vec<AtomicU32>> =
            Arc::new((0..CYCLES * PER_CYCLE).map(|_| AtomicU32::new(0)).collect());
        let wakes: Arc<Vec<AtomicU32>> =
            Arc::new((0..CYCLES * SLEEPERS).map(|_| AtomicU32::new(0)).collect());
        let (done_tx, done_rx) = mpsc::channel();
        {
            let (runs, wakes) = (runs.clone(), wakes.clone());
            let _driver = rt.spawn(move || {
                for cycle in 0..CYCLES {
                    let (runs, wakes) = (runs.clone(), wakes.clone());
                    let hog = spindle_rt::spawn(move || {
                        let mut handles = Vec::new();
                        let mut sleepers = Vec::new();
                        for s in 0..SLEEPERS {
                            let wakes = wakes.clone();
                            // SAFETY: nothing thread-bound is kept across a suspension.
                            let h = unsafe { Builder::new().migratable() }
                                .spawn(move || {
                                    spindle_rt::yield_now();
                                    spindle_rt::sleep(Duration::from_millis(1 + s as u64 % 5));
                                    wakes[cycle * SLEEPERS + s].fetch_add(1, Ordering::SeqCst);
                                    spindle_rt::yield_now();
                                })
                                .unwrap();
                            sleepers.push(h);
                            spindle_rt::yield_now();
                        }
                        for i in 0..PER_CYCLE {
                            let runs = runs.clone();
                            handles.push(spindle_rt::spawn(move || {
                                runs[cycle * PER_CYCLE + i].fetch_add(1, Ordering::SeqCst);
                            }));
                        }
                        let hold = Duration::from_millis(15 + (cycle as u64 * 7) % 16);
                        if cycle % 2 == 0 {
                            let t = Instant::now();
                            while t.elapsed() < hold {
                                std::hint::spin_loop();
                            }
                        } else {
                            std::thread::sleep(hold);
                        }
                        (handles, sleepers)
                    });
                    let (handles, sleepers) = hog.join().unwrap();
                    for h in handles {
                        h.join().unwrap();
                    }
                    for h in sleepers {
                        h.join().unwrap();
                    }
                }
                let _ = done_tx.send(());
            });
        }
        if done_rx.recv_timeout(Duration::from_secs(60)).is_err() {
            std::mem::forget(rt);
            panic!("{policy:?}: the cycles did not end within 60 s");
        }
        drop(rt);
        for (i, r) in runs.iter().enumerate() {
            assert_eq!(
                r.load(Ordering::SeqCst),
                1,
                "{policy:?}: coroutine {i} ran wrong"
            );
        }
        for (i, w) in wakes.iter().enumerate() {
            assert_eq!(
                w.load(Ordering::SeqCst),
                1,
                "{policy:?}: sleeper {i} woke wrong"
            );
        }
    }
}
