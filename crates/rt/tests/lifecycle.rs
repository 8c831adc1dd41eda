//! The runtime's lifecycle paths: cancellation racing with the rest, destructors that park
//! while a cancelled coroutine unwinds, coroutine-locals at exit, park/unpark, the blocking
//! pool, shutdown racing with spawns, misuse that must panic instead of hanging.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use spindle_rt::{IoBackend, Runtime};

/// Aborts the process with a message if the returned guard is not dropped within `secs`.
struct Watchdog(Arc<AtomicBool>);
impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}
fn watchdog(secs: u64, what: &'static str) -> Watchdog {
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < deadline {
            if d.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("WATCHDOG: {what} did not finish within {secs} s: aborting");
        std::process::abort();
    });
    Watchdog(done)
}

/// Counts its drops (a coroutine's frame, or a closure dropped unrun).
struct D(Arc<AtomicUsize>);

impl Drop for D {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn rt(workers: usize) -> Runtime {
    Runtime::builder()
        .workers(workers)
        .io(IoBackend::None)
        .build()
        .unwrap()
}

/// Runs the `#[ignore]`d test `name` of this binary in a child process; returns its status
/// and its stderr.
fn run_child(name: &str) -> (std::process::ExitStatus, String) {
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            name,
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SPINDLE_LIFECYCLE_CHILD", "1")
        .output()
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// ---------------------------------------------------------------------------------------------
// blocking()
// ---------------------------------------------------------------------------------------------

/// Two `blocking` jobs submitted back to back while the pool has exactly one idle thread: the
/// second must get a thread of its own (the pool is far below its bound), so a job that waits
/// for the other one completes. (The pool used to count a notified-but-not-yet-awake thread
/// as idle for the second submission too, so both queued behind the single thread.)
#[test]
fn blocking_jobs_submitted_together_to_one_idle_thread_run_concurrently() {
    let _w = watchdog(60, "blocking_jobs_submitted_together");
    let mut failures = 0;
    let rounds = 10;
    for _ in 0..rounds {
        let rt = rt(1);
        let ok = rt.block_on(|| {
            // Make exactly one pool thread and let it go idle.
            spindle_rt::blocking(|| ());
            spindle_rt::sleep(Duration::from_millis(5));
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let rx = Mutex::new(rx);
            // A: waits (up to 2 s) for B's job. B: sends. Both submitted from the same worker
            // right after one another.
            let a = spindle_rt::spawn(move || {
                spindle_rt::blocking(move || {
                    rx.lock()
                        .unwrap()
                        .recv_timeout(Duration::from_secs(2))
                        .is_ok()
                })
            });
            // Let A submit its job (and park) first.
            spindle_rt::yield_now();
            let b = spindle_rt::spawn(move || {
                spindle_rt::blocking(move || {
                    let _ = tx.send(());
                })
            });
            let ok = a.join().unwrap();
            b.join().unwrap();
            ok
        });
        if !ok {
            failures += 1;
        }
    }
    assert_eq!(
        failures, 0,
        "{failures}/{rounds} rounds: a blocking job waited for a thread while another job it \
         depends on held the only one (the pool was not at its bound)"
    );
}

#[test]
fn blocking_panic_continues_in_the_caller_and_cancel_waits_for_the_job() {
    let _w = watchdog(60, "blocking_panic");
    let rt = rt(1);
    rt.block_on(|| {
        let r = spindle_rt::spawn(|| spindle_rt::blocking(|| panic!("boom in blocking"))).join();
        assert!(r.unwrap_err().is_panic());
        // A cancelled caller waits for its job to finish before it unwinds.
        let job_done = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicBool::new(false));
        let (jd, st) = (job_done.clone(), started.clone());
        let h = spindle_rt::spawn(move || {
            let local = [1u8; 16];
            spindle_rt::blocking(|| {
                st.store(true, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(50));
                let _ = local.len();
                jd.store(true, Ordering::SeqCst);
            });
            spindle_rt::sleep(Duration::from_secs(10));
        });
        while !started.load(Ordering::SeqCst) {
            spindle_rt::sleep(Duration::from_millis(1));
        }
        h.cancel();
        assert!(h.join().unwrap_err().is_cancelled());
        assert!(job_done.load(Ordering::SeqCst));
    });
}

// ---------------------------------------------------------------------------------------------
// coroutine_local!
// ---------------------------------------------------------------------------------------------

static FRESH_DROPPED: AtomicUsize = AtomicUsize::new(0);
static FRESH_DROPPED_IN_COROUTINE: AtomicUsize = AtomicUsize::new(0);
static FRESH_DROP_THREAD: Mutex<Option<String>> = Mutex::new(None);

struct Fresh;
impl Drop for Fresh {
    fn drop(&mut self) {
        FRESH_DROPPED.fetch_add(1, Ordering::SeqCst);
        *FRESH_DROP_THREAD.lock().unwrap() = std::thread::current().name().map(str::to_owned);
        if spindle_rt::try_current().is_some() {
            FRESH_DROPPED_IN_COROUTINE.fetch_add(1, Ordering::SeqCst);
        }
    }
}

struct PanicsOnDrop;
impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        // Makes another local (allowed: "fresh ones, which are dropped too"), then panics.
        FRESH_LOCAL.with(|_| ());
        panic!("a coroutine-local destructor panics");
    }
}

spindle_rt::coroutine_local! {
    static FRESH_LOCAL: Fresh = Fresh;
    static PANICKY_LOCAL: PanicsOnDrop = PanicsOnDrop;
}

/// A coroutine-local destructor that panics must not stop the others: every value is dropped
/// at the coroutine's exit, on its stack. (A panic used to end the clearing: the values left
/// were dropped later, wherever the last reference to the task went — here the thread dropping
/// the JoinHandle — outside any coroutine: `!Send` values dropped on another thread.)
#[test]
fn locals_left_after_a_panicking_local_destructor_are_still_dropped_in_the_coroutine() {
    let _w = watchdog(60, "locals_left_after_panic");
    let rt = rt(1);
    let h = rt.spawn(|| {
        PANICKY_LOCAL.with(|_| ());
    });
    let r = h.join();
    assert!(r.unwrap_err().is_panic());
    // join returned: the coroutine has exited; its locals should all be gone.
    let dropped = FRESH_DROPPED.load(Ordering::SeqCst);
    let in_co = FRESH_DROPPED_IN_COROUTINE.load(Ordering::SeqCst);
    drop(rt);
    let after = FRESH_DROPPED.load(Ordering::SeqCst);
    assert!(
        dropped == 1 && in_co == 1,
        "after join: dropped {dropped} time(s), {in_co} in the coroutine (total after \
         everything: {after}), on thread {:?}; the local made by the panicking destructor \
         outlived the coroutine and was dropped later, outside it",
        FRESH_DROP_THREAD.lock().unwrap()
    );
}

static SELF_DROPS: AtomicUsize = AtomicUsize::new(0);
struct SelfTouching;
impl Drop for SelfTouching {
    fn drop(&mut self) {
        // A destructor that uses its own key (a logger that logs through itself, say). std's
        // thread_local! refuses this (AccessError / panic); here it must not loop for ever.
        let n = SELF_DROPS.fetch_add(1, Ordering::SeqCst);
        if n < 1000 {
            SELF_LOCAL.with(|_| ());
        }
    }
}
spindle_rt::coroutine_local! {
    static SELF_LOCAL: SelfTouching = SelfTouching;
}

#[test]
fn a_local_destructor_that_uses_its_own_key_does_not_loop() {
    let _w = watchdog(60, "self-touching local");
    let rt = rt(1);
    let r = rt.spawn(|| SELF_LOCAL.with(|_| ())).join();
    let n = SELF_DROPS.load(Ordering::SeqCst);
    // The value, then the one its destructor made afresh; that one's destructor panics (used
    // a third time), which `join` reports.
    assert_eq!(
        n, 2,
        "the destructor ran {n} times (capped by the test at 1000; without a bound it never \
         ends: each use of the key inside its own destructor re-creates the value); join: {r:?}"
    );
    assert!(
        r.is_err_and(|e| e.is_panic()),
        "join reports the refused use"
    );
}

static PARKING_DROP_STARTED: AtomicBool = AtomicBool::new(false);
struct SleepsOnDrop;
impl Drop for SleepsOnDrop {
    fn drop(&mut self) {
        PARKING_DROP_STARTED.store(true, Ordering::SeqCst);
        spindle_rt::sleep(Duration::from_millis(200));
    }
}
spindle_rt::coroutine_local! {
    static SLEEPY_LOCAL: SleepsOnDrop = SleepsOnDrop;
}

/// The coroutine's body returned normally; while its locals are dropped (one destructor
/// sleeps) it is cancelled. `join` should say `Ok` or `Cancelled`, not `Panicked` with the
/// runtime's private cancellation payload.
#[test]
fn a_cancel_during_local_destruction_is_not_reported_as_a_panic() {
    let _w = watchdog(60, "cancel during local destruction");
    let rt = rt(1);
    let h = rt.spawn(|| {
        SLEEPY_LOCAL.with(|_| ());
        7
    });
    let t0 = Instant::now();
    while !PARKING_DROP_STARTED.load(Ordering::SeqCst) {
        assert!(t0.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(10));
    h.cancel();
    match h.join() {
        Ok(v) => assert_eq!(v, 7),
        Err(e) => assert!(
            e.is_cancelled(),
            "a cancelled coroutine reported {e:?} (is_panic = {})",
            e.is_panic()
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// Cancellation and destructors that park
// ---------------------------------------------------------------------------------------------

struct SleepOnDropStack(Arc<AtomicBool>);
impl Drop for SleepOnDropStack {
    fn drop(&mut self) {
        spindle_rt::sleep(Duration::from_millis(1));
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
#[ignore = "child process of a_destructor_that_parks_during_a_cancel_unwind_does_not_abort"]
fn child_destructor_parks_during_cancel_unwind() {
    if std::env::var_os("SPINDLE_LIFECYCLE_CHILD").is_none() {
        return;
    }
    let _w = watchdog(20, "child_destructor_parks");
    let rt = rt(1);
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let h = rt.spawn(move || {
        let _g = SleepOnDropStack(d);
        spindle_rt::sleep(Duration::from_secs(30));
    });
    std::thread::sleep(Duration::from_millis(20));
    h.cancel();
    let r = h.join();
    eprintln!(
        "CHILD: join = {r:?}, destructor finished = {}",
        done.load(Ordering::SeqCst)
    );
    drop(rt);
    eprintln!("CHILD-OK");
}

struct JoinOnDrop(Option<spindle_rt::JoinHandle<()>>, Arc<AtomicBool>);
impl Drop for JoinOnDrop {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            let _ = h.join();
        }
        self.1.store(true, Ordering::SeqCst);
    }
}

#[test]
#[ignore = "child process of a_join_on_drop_guard_in_a_cancelled_coroutine_does_not_abort"]
fn child_join_on_drop_in_cancelled_coroutine() {
    if std::env::var_os("SPINDLE_LIFECYCLE_CHILD").is_none() {
        return;
    }
    let _w = watchdog(20, "child_join_on_drop");
    let rt = rt(1);
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let h = rt.spawn(move || {
        // A structured-concurrency guard: joins its worker child when it goes out of scope.
        let child = spindle_rt::spawn(|| spindle_rt::sleep(Duration::from_millis(20)));
        let _g = JoinOnDrop(Some(child), d);
        spindle_rt::sleep(Duration::from_secs(30));
    });
    std::thread::sleep(Duration::from_millis(5));
    h.cancel();
    let r = h.join();
    eprintln!(
        "CHILD: join = {r:?}, guard finished = {}",
        done.load(Ordering::SeqCst)
    );
    drop(rt);
    eprintln!("CHILD-OK");
}

#[test]
fn a_join_on_drop_guard_in_a_cancelled_coroutine_does_not_abort() {
    let (status, stderr) = run_child("child_join_on_drop_in_cancelled_coroutine");
    assert!(
        status.success() && stderr.contains("CHILD-OK"),
        "the child died: {status}\n--- its stderr ---\n{stderr}"
    );
}

/// A destructor that sleeps (or locks a contended mutex, or joins a child) while a cancelled
/// coroutine unwinds waits as usual. (Its park used to see the cancel and start a second
/// unwind inside the first, which aborted the process: "panic in a destructor during
/// cleanup".)
#[test]
fn a_destructor_that_parks_during_a_cancel_unwind_does_not_abort() {
    let (status, stderr) = run_child("child_destructor_parks_during_cancel_unwind");
    assert!(
        status.success() && stderr.contains("CHILD-OK"),
        "the child died: {status}\n--- its stderr ---\n{stderr}"
    );
}

// ---------------------------------------------------------------------------------------------
// Cancel races
// ---------------------------------------------------------------------------------------------

#[test]
fn cancel_races_with_first_run_finish_and_wake() {
    let _w = watchdog(60, "cancel races");
    let rt = Runtime::builder()
        .workers(2)
        .io(IoBackend::None)
        .build()
        .unwrap();
    for i in 0..3000u32 {
        let h = rt.spawn(move || {
            if i % 3 == 0 {
                spindle_rt::yield_now();
            }
            i
        });
        if i % 2 == 0 {
            std::hint::spin_loop();
        }
        h.cancel();
        match h.join() {
            Ok(v) => assert_eq!(v, i),
            Err(e) => assert!(e.is_cancelled(), "{e:?}"),
        }
    }
    // Cancel racing with a wake (unpark) of a parked coroutine.
    for _ in 0..2000 {
        let (tx, rx) = std::sync::mpsc::channel();
        let h = rt.spawn(move || {
            tx.send(spindle_rt::current()).unwrap();
            spindle_rt::park();
            spindle_rt::park();
        });
        let cur = rx.recv().unwrap();
        let c2 = cur.clone();
        let t = std::thread::spawn(move || c2.unpark());
        h.cancel();
        cur.unpark();
        t.join().unwrap();
        let r = h.join();
        assert!(r.is_ok() || r.as_ref().unwrap_err().is_cancelled());
    }
    // Cancel racing with the handle being dropped (detached).
    let count = Arc::new(AtomicUsize::new(0));
    for _ in 0..1000 {
        // Made outside: a coroutine cancelled before its first run drops its closure unrun.
        let d = D(count.clone());
        let h = rt.spawn(move || {
            let _d = d;
            spindle_rt::sleep(Duration::from_secs(30));
        });
        let h2 = std::thread::spawn(move || {
            h.cancel();
            drop(h);
        });
        h2.join().unwrap();
    }
    let t0 = Instant::now();
    while count.load(Ordering::SeqCst) < 1000 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{}",
            count.load(Ordering::SeqCst)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn cancel_with_a_guard_wakes_once_then_the_guard_release_unwinds_in_park_timeout() {
    let _w = watchdog(60, "guard + park_timeout");
    let rt = rt(1);
    let wakes = Arc::new(AtomicUsize::new(0));
    let w2 = wakes.clone();
    let h = rt.spawn(move || {
        {
            let _g = spindle_rt::CancelGuard::new();
            let end = Instant::now() + Duration::from_millis(100);
            while Instant::now() < end {
                if spindle_rt::park_timeout(Duration::from_millis(30)) == spindle_park::Wake::Woken
                {
                    w2.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
        // Cancellation now takes effect here.
        spindle_rt::park_timeout(Duration::from_secs(20));
        unreachable!("the cancel was lost");
    });
    std::thread::sleep(Duration::from_millis(20));
    h.cancel();
    let t0 = Instant::now();
    assert!(h.join().unwrap_err().is_cancelled());
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!(
        wakes.load(Ordering::SeqCst),
        1,
        "the deferred cancel woke the park once"
    );
}

#[test]
fn cancel_of_sleeping_joining_and_parked_coroutines() {
    let _w = watchdog(60, "cancel parked");
    let rt = rt(2);
    rt.block_on(|| {
        let sleeper = spindle_rt::spawn(|| spindle_rt::sleep(Duration::from_secs(30)));
        let forever = spindle_rt::spawn(|| {
            loop {
                spindle_rt::park();
            }
        });
        let victim = spindle_rt::spawn(|| spindle_rt::sleep(Duration::from_secs(30)));
        let joiner = spindle_rt::spawn(move || victim.join().is_ok());
        let timed = spindle_rt::spawn(|| {
            loop {
                spindle_rt::park_timeout(Duration::from_secs(30));
            }
        });
        spindle_rt::sleep(Duration::from_millis(10));
        let t0 = Instant::now();
        sleeper.cancel();
        forever.cancel();
        joiner.cancel();
        timed.cancel();
        assert!(sleeper.join().unwrap_err().is_cancelled());
        assert!(forever.join().unwrap_err().is_cancelled());
        assert!(joiner.join().unwrap_err().is_cancelled());
        assert!(timed.join().unwrap_err().is_cancelled());
        assert!(t0.elapsed() < Duration::from_secs(5));
    });
}

// ---------------------------------------------------------------------------------------------
// current / park / unpark
// ---------------------------------------------------------------------------------------------

#[test]
fn an_unpark_before_park_is_not_lost_and_unparks_coalesce() {
    let _w = watchdog(60, "unpark before park");
    let rt = rt(2);
    for _ in 0..500 {
        let (tx, rx) = std::sync::mpsc::channel();
        let go = Arc::new(AtomicBool::new(false));
        let g2 = go.clone();
        let h = rt.spawn(move || {
            tx.send(spindle_rt::current()).unwrap();
            while !g2.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
            // The unpark came before this park: it returns at once.
            spindle_rt::park();
            // Two unparks gave one permit: this one times out.
            spindle_rt::park_timeout(Duration::from_millis(2))
        });
        let me = rx.recv().unwrap();
        me.unpark();
        me.unpark();
        go.store(true, Ordering::SeqCst);
        assert_eq!(h.join().unwrap(), spindle_park::Wake::TimedOut);
    }
}

#[test]
fn current_outside_a_coroutine_and_after_finish() {
    assert!(spindle_rt::try_current().is_none());
    let rt = rt(1);
    let cur = rt.spawn(spindle_rt::current).join().unwrap();
    cur.unpark(); // finished: nothing
    drop(rt);
    cur.unpark(); // runtime gone: nothing
}

// ---------------------------------------------------------------------------------------------
// Shutdown
// ---------------------------------------------------------------------------------------------

/// A thread spawning through a `Handle` while the runtime is dropped: every spawn that
/// returned `Ok` must finish (run or be cancelled); none may stay queued for ever.
#[test]
fn spawns_racing_with_runtime_drop_all_finish() {
    let _w = watchdog(90, "spawns racing with drop");
    let mut stuck_total = 0;
    let rounds = 300;
    for round in 0..rounds {
        let rt = Runtime::builder()
            .workers(1)
            .io(IoBackend::None)
            .stuck_threshold(None)
            .build()
            .unwrap();
        let handle = rt.handle();
        let go = Arc::new(AtomicBool::new(false));
        let g2 = go.clone();
        let spawner = std::thread::spawn(move || {
            let mut handles = Vec::new();
            g2.store(true, Ordering::SeqCst);
            // One at a time, so that the queue is empty when the runtime closes.
            // A reserved growable stack is mapped inside `spawn_on`, between its first look
            // at `closing` and counting the spawn: that widens the window this test is about.
            while let Ok(h) = spindle_rt::Builder::new()
                .stack(spindle_rt::StackKind::Growable {
                    initial: 16 << 10,
                    max: 256 << 10,
                })
                .reserve_stack()
                .spawn_on(&handle, || ())
            {
                let t0 = Instant::now();
                while !h.is_finished() && t0.elapsed() < Duration::from_millis(50) {
                    std::hint::spin_loop();
                }
                handles.push(h);
            }
            handles
        });
        while !go.load(Ordering::SeqCst) {
            std::hint::spin_loop();
        }
        std::thread::sleep(Duration::from_micros(
            300 + (stuck_total as u64 * 7 + round * 37) % 700,
        ));
        drop(rt);
        let handles = spawner.join().unwrap();
        let t0 = Instant::now();
        let stuck = loop {
            let stuck = handles.iter().filter(|h| !h.is_finished()).count();
            if stuck == 0 || t0.elapsed() > Duration::from_millis(200) {
                break stuck;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        stuck_total += stuck;
        if stuck_total > 0 {
            eprintln!("spawns_racing: {stuck} stuck coroutine(s) in round {round}");
            break;
        }
    }
    assert_eq!(
        stuck_total, 0,
        "coroutines spawned successfully while the runtime was dropped never ran nor were \
         cancelled: their join would hang"
    );
}

#[test]
fn shutdown_while_parked_sleeping_and_in_blocking() {
    let _w = watchdog(60, "shutdown with parked coroutines");
    let rt = rt(2);
    let drops = Arc::new(AtomicUsize::new(0));
    let job_done = Arc::new(AtomicBool::new(false));
    let d = drops.clone();
    rt.spawn(move || {
        let _d = D(d);
        spindle_rt::park();
    });
    let d = drops.clone();
    rt.spawn(move || {
        let _d = D(d);
        spindle_rt::sleep(Duration::from_secs(60));
    });
    let (d, jd) = (drops.clone(), job_done.clone());
    rt.spawn(move || {
        let _d = D(d);
        let buf = [0u8; 64];
        spindle_rt::blocking(|| {
            std::thread::sleep(Duration::from_millis(100));
            let _ = buf.len();
            jd.store(true, Ordering::SeqCst);
        });
        spindle_rt::sleep(Duration::from_secs(60));
    });
    std::thread::sleep(Duration::from_millis(20));
    drop(rt);
    assert_eq!(drops.load(Ordering::SeqCst), 3);
    assert!(job_done.load(Ordering::SeqCst));
}

/// A coroutine gets a registry slot (what shutdown cancels) only when it first suspends; one
/// that runs from before the runtime is dropped until after shutdown took its snapshot, and
/// only then parks or yields, must still be cancelled there — else shutdown waits for it for
/// ever (the sleeper) or for as long as it loops (the yielder).
#[test]
fn a_coroutine_that_first_suspends_after_shutdown_began_is_cancelled() {
    let _w = watchdog(60, "shutdown with a coroutine that suspends late");
    let rt = rt(2);
    let drops = Arc::new(AtomicUsize::new(0));
    let dropping = Arc::new(AtomicBool::new(false));
    let running = Arc::new(AtomicUsize::new(0));
    let busy_until_dropped = {
        let (dropping, running) = (dropping.clone(), running.clone());
        move || {
            running.fetch_add(1, Ordering::SeqCst);
            while !dropping.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
            // Long enough for shutdown to set `closing` and take its snapshot meanwhile.
            let past = Instant::now() + Duration::from_millis(50);
            while Instant::now() < past {
                std::hint::spin_loop();
            }
        }
    };
    let (d, busy) = (D(drops.clone()), busy_until_dropped.clone());
    rt.spawn(move || {
        let _d = d;
        busy();
        spindle_rt::sleep(Duration::from_secs(3600));
    });
    let (d, busy) = (D(drops.clone()), busy_until_dropped);
    rt.spawn(move || {
        let _d = d;
        busy();
        loop {
            spindle_rt::yield_now();
        }
    });
    // Both running (on one worker each) before the drop begins.
    let start = Instant::now();
    while running.load(Ordering::SeqCst) < 2 && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(running.load(Ordering::SeqCst), 2, "both coroutines started");
    dropping.store(true, Ordering::SeqCst);
    drop(rt);
    assert_eq!(drops.load(Ordering::SeqCst), 2, "both coroutines unwound");
}

#[test]
#[ignore = "child process of dropping_the_runtime_in_its_own_coroutine_panics_clearly"]
fn child_drop_runtime_in_its_own_coroutine() {
    if std::env::var_os("SPINDLE_LIFECYCLE_CHILD").is_none() {
        return;
    }
    let _w = watchdog(5, "child_drop_runtime_in_its_own_coroutine (hang)");
    let rt = rt(1);
    let handle = rt.handle();
    let h = handle.spawn(move || drop(rt));
    let r = h.join();
    eprintln!("CHILD: join = {r:?}");
    eprintln!("CHILD-OK");
}

/// Dropping a runtime inside one of its own coroutines would wait for itself: a clear panic
/// (as tokio's "Cannot drop a runtime in a context where blocking is not allowed"), not the
/// hang it used to be.
#[test]
fn dropping_the_runtime_in_its_own_coroutine_panics_clearly() {
    let (status, stderr) = run_child("child_drop_runtime_in_its_own_coroutine");
    assert!(
        status.success()
            && stderr.contains("CHILD-OK")
            && stderr.contains("CHILD: join = Err(Panicked")
            && stderr.contains("dropped (or shut down) by one of its own coroutines"),
        "the child did not finish with the panic: {status}\n--- its stderr ---\n{stderr}"
    );
}

// ---------------------------------------------------------------------------------------------
// block_on / join / spawn from plain threads
// ---------------------------------------------------------------------------------------------

#[test]
fn nested_block_on_and_own_join_panic_clearly_and_spawn_from_a_plain_thread_panics() {
    let _w = watchdog(60, "misuse panics");
    let rt = Arc::new(rt(1));
    let rt2 = rt.clone();
    let msg = rt.block_on(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rt2.block_on(|| 1)))
            .unwrap_err()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
    });
    assert!(msg.unwrap().contains("inside a coroutine"));
    let (tx, rx) = std::sync::mpsc::channel::<spindle_rt::JoinHandle<()>>();
    let (rtx, rrx) = std::sync::mpsc::channel::<Option<String>>();
    let h = rt.spawn(move || {
        let me = rx.recv().unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| me.join()));
        rtx.send(
            r.err()
                .and_then(|p| p.downcast_ref::<&str>().map(|s| s.to_string())),
        )
        .unwrap();
    });
    tx.send(h).unwrap();
    let msg = rrx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(msg.unwrap().contains("its own JoinHandle"));
    let plain = std::thread::spawn(|| spindle_rt::spawn(|| ()).join().is_ok()).join();
    assert!(plain.is_err(), "spawn from a plain thread must panic");
    let _ = Cell::new(0);
}
