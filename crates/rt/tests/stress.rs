//! Stress and fairness: the suspend-then-publish rule under cross-thread wake-ups, the
//! ping-pong hog, the stuck-coroutine report.
#![cfg(all(
    feature = "sched-fifo",
    feature = "sched-rr",
    feature = "sched-ws",
    feature = "stack-growable",
    feature = "stack-shared"
))]

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::{Duration, Instant};

use spindle_rt::{Policy, Runtime};

mod common;

/// Invariant 1 (suspend, then publish), tested hard: coroutines park and re-park in a loop
/// while 4 OS threads and the other coroutines wake them at random. If a worker ever resumed a
/// coroutine that was still running (published before its context was saved), the
/// per-coroutine "inside" flag would catch two runs at once, or the process would crash.
#[test]
fn parking_coroutines_hammered_by_wakers_from_threads_and_coroutines() {
    for policy in [Policy::WorkStealing, Policy::Fifo, Policy::RoundRobin] {
        let rt = Runtime::builder()
            .workers(2)
            .policy(policy)
            .build()
            .unwrap();
        const COROUTINES: usize = 32;
        // Under valgrind (one thread at a time, ~50× slower) the four busy waker threads and
        // the workers' look phases share one CPU: 2,000 rounds ran for 25 minutes there
        // without finishing (100 took 218 s).
        let rounds: u64 = if std::env::var_os("SPINDLE_UNDER_VALGRIND").is_some() {
            20
        } else {
            2_000
        };
        let wakers: Arc<Mutex<Vec<Option<Waker>>>> = Arc::new(Mutex::new(vec![None; COROUTINES]));
        let progress: Arc<Vec<AtomicU64>> =
            Arc::new((0..COROUTINES).map(|_| AtomicU64::new(0)).collect());
        let stop = Arc::new(AtomicBool::new(false));
        let handles: Vec<_> = (0..COROUTINES)
            .map(|k| {
                let (wakers, progress) = (wakers.clone(), progress.clone());
                rt.spawn(move || {
                    let inside = AtomicBool::new(false);
                    for _ in 0..rounds {
                        assert!(
                            !inside.swap(true, Ordering::SeqCst),
                            "resumed while running"
                        );
                        wakers.lock().unwrap()[k] = Some(spindle_park::waker());
                        inside.store(false, Ordering::SeqCst);
                        // Wake a random other coroutine, then park (a timeout keeps it going if
                        // nobody wakes us).
                        let other = (k * 7 + 3) % COROUTINES;
                        if let Some(w) = wakers.lock().unwrap()[other].clone() {
                            w.wake();
                        }
                        spindle_park::park_timeout(Duration::from_millis(1));
                        progress[k].fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (wakers, stop) = (wakers.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut i = t;
                    while !stop.load(Ordering::Relaxed) {
                        i = (i * 31 + 17) % COROUTINES;
                        if let Some(w) = wakers.lock().unwrap()[i].clone() {
                            w.wake();
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
        let total: u64 = progress.iter().map(|p| p.load(Ordering::Relaxed)).sum();
        assert_eq!(total, COROUTINES as u64 * rounds);
    }
}

/// After Go's TestPingPongHog: a pair of coroutines that ping-pong by plain wake-ups and parks
/// and do a lot of work per hop (the hogs), and a pair that do a hundredth of it (the light
/// ones), share one worker. Each hop also makes one budgeted operation. Neither pair may
/// monopolise the worker's time: the work both pairs do (loop iterations, a measure of the
/// time each had) must be within 5x, as in Go's test. Each pair runs as a chain of run-next
/// hand-offs sharing one time slice; when its budget runs out inside the hop's operation the
/// coroutine pauses and goes on in the same slice. (`tests/fairness.rs` has the shape with
/// channels, on two workers too.)
#[test]
fn ping_pong_hogs_do_not_starve_light_coroutines() {
    // Iterations per hop: hogs, light ones.
    const WORK: [u64; 2] = [100_000, 1_000];
    let rt = Runtime::builder().workers(1).build().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let counts: Arc<[AtomicUsize; 2]> = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let mut handles = Vec::new();
    for (pair, work) in [(0usize, WORK[0]), (1, WORK[1])] {
        // Two coroutines hand a token back and forth through a shared slot.
        let token = Arc::new(Mutex::new((0usize, [None::<Waker>, None::<Waker>])));
        for side in 0..2usize {
            let (token, stop, counts) = (token.clone(), stop.clone(), counts.clone());
            handles.push(rt.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let mine = {
                        let mut t = token.lock().unwrap();
                        if t.0 == side {
                            true
                        } else {
                            t.1[side] = Some(spindle_park::waker());
                            false
                        }
                    };
                    if !mine {
                        spindle_park::park_timeout(Duration::from_millis(50));
                        continue;
                    }
                    // Our turn: work, pass the token, wake the other side (into run-next).
                    let mut x = 0u64;
                    for i in 0..work {
                        x = x.wrapping_mul(31).wrapping_add(std::hint::black_box(i));
                    }
                    std::hint::black_box(x);
                    counts[pair].fetch_add(1, Ordering::Relaxed);
                    let other = {
                        let mut t = token.lock().unwrap();
                        t.0 = 1 - side;
                        t.1[1 - side].take()
                    };
                    if let Some(w) = other {
                        w.wake();
                    }
                    // Each hop counts against the budget, as an uncontended channel would.
                    spindle_rt::consume_budget();
                }
            }));
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    // Both pairs must get comparable shares of the worker's time (within 5x, as in Go's
    // test): the woken buddy inherits the waker's slice, so a pair cannot keep the worker by
    // handing the token back and forth; the slice ends when its time is over, and the other
    // pair runs for a slice as long. (Ending it after a number of operations would give the
    // light pair as many hops as the hogs, and a hundredth of their time.)
    let (hogs, light) = (
        counts[0].load(Ordering::Relaxed),
        counts[1].load(Ordering::Relaxed),
    );
    // Under valgrind (the `valgrind-rt` leg, for memory errors) everything runs tens of times
    // slower and shares of time mean nothing: only progress is checked there.
    let under_valgrind = std::env::var_os("SPINDLE_UNDER_VALGRIND").is_some();
    // Not vacuous: both pairs made several hops (the hogs' take about a millisecond).
    let least = if under_valgrind { 1 } else { 4 };
    assert!(
        hogs >= least && light >= least,
        "both pairs ran: hogs {hogs} hops, light {light}"
    );
    if under_valgrind {
        return;
    }
    let (hog_work, light_work) = (hogs as u64 * WORK[0], light as u64 * WORK[1]);
    let ratio = (hog_work as f64 / light_work as f64).max(light_work as f64 / hog_work as f64);
    assert!(
        ratio < 5.0,
        "unfair: hogs {hogs} hops ({hog_work} iterations), light {light} hops ({light_work} \
         iterations): the shares of time differ {ratio:.1}x"
    );
}

fn is_child(name: &str) -> bool {
    std::env::var("SPINDLE_CHILD").as_deref() == Ok(name)
}

/// A logger for child processes: each record becomes one stderr line,
/// `LOG <level> <target>: <message>`, for the parent to read.
struct StderrLogger;

impl log::Log for StderrLogger {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        eprintln!(
            "LOG {} {}: {}",
            record.level(),
            record.target(),
            record.args()
        );
    }

    fn flush(&self) {}
}

fn log_to_stderr() {
    log::set_logger(&StderrLogger).unwrap();
    log::set_max_level(log::LevelFilter::Trace);
}

/// A coroutine that keeps its worker for 100 ms is reported once, by name — also when it
/// starts after a quiet period, during which the monitor sleeps until a worker wakes it.
#[test]
fn a_stuck_coroutine_is_reported_once_by_name() {
    const NAME: &str = "a_stuck_coroutine_is_reported_once_by_name";
    if is_child(NAME) {
        log_to_stderr();
        let rt = Runtime::builder().workers(2).build().unwrap();
        // Every worker falls asleep, and so does the monitor.
        std::thread::sleep(Duration::from_millis(300));
        let h = spindle_rt::Builder::new()
            .name("cpu-hog")
            .spawn_on(&rt.handle(), || {
                let start = Instant::now();
                while start.elapsed() < Duration::from_millis(100) {
                    std::hint::spin_loop();
                }
            })
            .unwrap();
        h.join().unwrap();
        // Another, short one is not reported.
        rt.block_on(|| spindle_rt::sleep(Duration::from_millis(30)));
        return;
    }
    assert_reported_once(NAME, "'cpu-hog'");
}

/// Runs test `name` in a child process (which logs to stderr through [`StderrLogger`]) and
/// checks that the monitor reported exactly one coroutine, the one named `who`, through the
/// `log` facade at `warn`.
fn assert_reported_once(name: &str, who: &str) {
    let out = run_child(name);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let reports: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("without suspending"))
        .collect();
    assert_eq!(reports.len(), 1, "{stderr}");
    assert!(reports[0].contains(who), "{stderr}");
    assert!(
        reports[0].starts_with("LOG WARN spindle_rt::monitor: "),
        "not logged at warn by the monitor: {stderr}"
    );
}

fn run_child(name: &str) -> std::process::Output {
    Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env("SPINDLE_CHILD", name)
        .output()
        .unwrap()
}

/// Keeps a worker of `rt` for 100 ms in a coroutine named `name`; returns its id.
fn hog(rt: &Runtime, name: &str) -> u64 {
    let h = spindle_rt::Builder::new()
        .name(name)
        .spawn_on(&rt.handle(), || {
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(100) {
                std::hint::spin_loop();
            }
        })
        .unwrap();
    let id = h.id();
    h.join().unwrap();
    id
}

/// A program that sets `on_stuck` gets the report itself, with the coroutine's id, name,
/// worker and how long it ran; a program that sets no hook and installs no logger gets
/// nothing. Either way the runtime writes nothing to stderr (or stdout, beyond the test
/// harness's own lines).
#[test]
fn a_stuck_report_goes_to_the_on_stuck_hook_and_nothing_to_stderr() {
    const NAME: &str = "a_stuck_report_goes_to_the_on_stuck_hook_and_nothing_to_stderr";
    if is_child(NAME) {
        let reports = Arc::new(Mutex::new(Vec::<spindle_rt::StuckReport>::new()));
        let sink = reports.clone();
        let rt = Runtime::builder()
            .workers(2)
            .on_stuck(move |r| sink.lock().unwrap().push(r.clone()))
            .build()
            .unwrap();
        let id = hog(&rt, "hooked-hog");
        drop(rt);
        let reports = reports.lock().unwrap();
        assert_eq!(reports.len(), 1, "{reports:?}");
        let r = &reports[0];
        assert_eq!(r.task_id, id);
        assert_eq!(r.name.as_deref(), Some("hooked-hog"));
        assert!(r.worker < 2, "{r:?}");
        assert!(r.running_for >= Duration::from_millis(10), "{r:?}");
        let line = r.to_string();
        assert!(
            line.contains("'hooked-hog'") && line.contains("without suspending"),
            "{line}"
        );
        // No hook, no logger: the report is dropped.
        let rt = Runtime::builder().workers(2).build().unwrap();
        hog(&rt, "unlogged-hog");
        drop(rt);
        println!("CHILD-OK");
        return;
    }
    let out = run_child(NAME);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("CHILD-OK"),
        "{}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(stderr.is_empty(), "the runtime wrote to stderr:\n{stderr}");
    assert!(
        !stdout.contains("hog"),
        "the runtime wrote to stdout:\n{stdout}"
    );
}

/// A worker whose thread waits for a CPU (a loaded machine) is not reported as stuck: its
/// coroutines switch every 0.2 ms of running, but the thread shares one CPU with six busy
/// threads and is off it for tens of milliseconds at a time. A coroutine blocked in a
/// syscall (asleep in the kernel, not waiting for a CPU) still is reported.
#[cfg(target_os = "linux")]
#[test]
fn a_worker_waiting_for_a_cpu_is_not_reported_but_a_blocking_call_is() {
    const NAME: &str = "a_worker_waiting_for_a_cpu_is_not_reported_but_a_blocking_call_is";
    if is_child(NAME) {
        log_to_stderr();
        // Every thread made from here on runs on one CPU: the first this process may use.
        // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it and
        // sched_setaffinity reads it (both for this thread; new threads inherit the mask);
        // CPU_ISSET/CPU_SET index within the set (`cpu` < CPU_SETSIZE).
        unsafe {
            let size = std::mem::size_of::<libc::cpu_set_t>();
            let mut allowed: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(libc::sched_getaffinity(0, size, &mut allowed), 0);
            let cpu = (0..libc::CPU_SETSIZE as usize)
                .find(|&c| libc::CPU_ISSET(c, &allowed))
                .expect("some CPU is allowed");
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut one);
            assert_eq!(libc::sched_setaffinity(0, size, &one), 0);
        }
        let rt = Runtime::builder().workers(1).build().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let busy: Vec<_> = (0..6)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        let h = spindle_rt::Builder::new()
            .name("polite")
            .spawn_on(&rt.handle(), || {
                let start = Instant::now();
                while start.elapsed() < Duration::from_millis(400) {
                    let burst = thread_cpu_time();
                    while thread_cpu_time() - burst < Duration::from_micros(200) {
                        std::hint::spin_loop();
                    }
                    spindle_rt::yield_now();
                }
            })
            .unwrap();
        h.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        busy.into_iter().for_each(|t| t.join().unwrap());
        let h = spindle_rt::Builder::new()
            .name("sleeper")
            .spawn_on(&rt.handle(), || {
                std::thread::sleep(Duration::from_millis(60))
            })
            .unwrap();
        h.join().unwrap();
        return;
    }
    // Under qemu-user a guest thread that only waits for a CPU can also sleep in the kernel on
    // the emulator's own locks (held by a thread that is off the one CPU), and the monitor
    // then rightly reads a blocking call.
    if common::skipped_under_emulation(
        NAME,
        "threads that sleep in the kernel only when the program blocks",
    ) {
        return;
    }
    assert_reported_once(NAME, "'sleeper'");
}

/// CPU time of the calling thread.
#[cfg(target_os = "linux")]
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a pointer to a timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A value with drop glue that counts its drops.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Spins about `n` steps: lets a child's finish land before, during or after its joiner's
/// registration.
fn spin(n: u64) {
    for i in 0..n {
        std::hint::black_box(i);
    }
}

/// `finish` takes no lock unless the state it replaces carries `JOIN_WAITER` or `DETACHED`,
/// which a waiter (or a dropped handle) sets after storing its waker; a waiter that finds the
/// task finished when it sets the flag takes the result itself. Raced here from every side,
/// on two workers: joins from coroutines (parking), joins as futures, handles dropped
/// (detached: the value is dropped by whichever side comes second), joins from a plain thread,
/// and scopes waiting for children — with finishes landing before, during and after each
/// registration. A lost wake-up hangs (caught by the time limit); a value dropped twice or
/// never shows in the counts.
#[test]
fn joins_and_detaches_racing_finishes_lose_no_wake_up_and_no_value() {
    const ROUNDS: u64 = 20_000;
    let rt = Runtime::builder().workers(2).build().unwrap();
    let made = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(AtomicUsize::new(0));
    let (m, d) = (made.clone(), dropped.clone());
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let root = rt.spawn(move || {
        for i in 0..ROUNDS {
            let (m, d) = (m.clone(), d.clone());
            let child = spindle_rt::spawn(move || {
                spin(i % 97);
                m.fetch_add(1, Ordering::SeqCst);
                Counted(d)
            });
            spin((i * 7) % 89);
            match i % 4 {
                0 => drop(child.join().expect("child")),
                1 => drop(spindle_rt::block_on_future(child).expect("child as a future")),
                2 => drop(child),
                _ => {
                    let sum = spindle_rt::scope(|s| {
                        let a = s.spawn(|| {
                            spin(i % 13);
                            1
                        });
                        s.spawn(|| spin(i % 11));
                        a.join().expect("scoped child")
                    });
                    assert_eq!(sum, 1);
                    drop(child);
                }
            }
        }
        done_tx.send(()).unwrap();
    });
    // Joins from this thread, racing the same way.
    for i in 0..ROUNDS / 4 {
        let d = dropped.clone();
        let m = made.clone();
        let child = rt.spawn(move || {
            spin(i % 97);
            m.fetch_add(1, Ordering::SeqCst);
            Counted(d)
        });
        spin((i * 7) % 89);
        drop(child.join().expect("child joined from a thread"));
    }
    done_rx
        .recv_timeout(Duration::from_secs(120))
        .expect("every join returned (no lost wake-up)");
    root.join().expect("root");
    drop(rt); // waits for the detached children
    let (made, dropped) = (made.load(Ordering::SeqCst), dropped.load(Ordering::SeqCst));
    assert_eq!(made as u64, ROUNDS + ROUNDS / 4);
    assert_eq!(dropped, made, "every value dropped exactly once");
}
