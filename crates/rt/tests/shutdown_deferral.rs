//! A shutdown always ends, even when coroutines hold their cancellation off for good.
//!
//! A `CancelGuard` forgotten with `mem::forget` defers its coroutine's cancellation for ever;
//! a shutdown without a timeout used to wait for that coroutine with no end. Expected: once the
//! coroutines left are all parked holding their cancellation off, the shutdown waits
//! `CANCEL_DEFERRAL_GRACE` more, names them in a `log` warning, and returns. And the
//! closure-scoped deferral, which cannot be forgotten, holds cancellation off through its call
//! only.

mod common;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::run_child_with_watchdog;
use spindle_rt::{CANCEL_DEFERRAL_GRACE, JoinError, Runtime};

/// Keeps every warning logged.
struct Warnings(Mutex<Vec<String>>);

impl log::Log for Warnings {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Warn
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            self.0.lock().unwrap().push(r.args().to_string());
        }
    }
    fn flush(&self) {}
}

static WARNINGS: Warnings = Warnings(Mutex::new(Vec::new()));

#[test]
#[ignore = "child process of a_forgotten_cancel_guard_does_not_hang_the_shutdown"]
fn child_forgotten_guard() {
    log::set_logger(&WARNINGS).unwrap();
    log::set_max_level(log::LevelFilter::Warn);
    let rt = Runtime::builder().workers(1).build().unwrap();
    let started = std::sync::Arc::new(AtomicBool::new(false));
    let seen = started.clone();
    let _stuck = spindle_rt::Builder::new()
        .name("keeps-its-guard")
        .spawn_on(&rt.handle(), move || {
            std::mem::forget(spindle_rt::CancelGuard::new());
            seen.store(true, Ordering::SeqCst);
            spindle_rt::sleep(Duration::from_secs(3600));
        })
        .unwrap();
    while !started.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let t0 = Instant::now();
    drop(rt);
    let took = t0.elapsed();
    assert!(took >= CANCEL_DEFERRAL_GRACE, "gave up after {took:?}");
    let warnings = WARNINGS.0.lock().unwrap();
    assert!(
        warnings.iter().any(|w| w.contains("'keeps-its-guard'")),
        "the warning names the coroutine: {warnings:?}"
    );
    println!("CHILD OK");
}

#[test]
fn a_forgotten_cancel_guard_does_not_hang_the_shutdown() {
    let run = run_child_with_watchdog("child_forgotten_guard", Duration::from_secs(30));
    assert!(run.ok(), "{run}");
}

#[test]
fn a_deferral_held_for_a_call_ends_with_the_call() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let outcome = rt.block_on(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        let h = spindle_rt::spawn(move || {
            spindle_rt::with_cancel_deferred(|| {
                spindle_rt::sleep(Duration::from_millis(30));
                tx.send("deferred call finished").unwrap();
            });
            // Cancellable again: the pending cancel unwinds here.
            spindle_rt::sleep(Duration::from_secs(3600));
            tx.send("not cancelled").unwrap();
        });
        spindle_rt::sleep(Duration::from_millis(5));
        h.cancel();
        let joined = h.join();
        (joined, rx.try_iter().collect::<Vec<_>>())
    });
    assert!(matches!(outcome.0, Err(JoinError::Cancelled)));
    assert_eq!(outcome.1, ["deferred call finished"]);
}
