//! The sleep family under the hook: inside a coroutine only the coroutine sleeps, with the
//! real call's results; elsewhere the real call.
#![cfg(all(
    target_os = "linux",
    target_env = "gnu",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]

mod common;

use std::time::{Duration, Instant};

use common::{Ticker, backends, enable, runtime, watchdog};
use spindle_rt::{IoBackend, JoinError};

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn set_errno(e: i32) {
    // SAFETY: glibc's errno location is valid for this thread.
    unsafe { *libc::__errno_location() = e };
}

fn ts(d: Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    }
}

/// Each way of sleeping for about `d`, as C code or std calls it; returns its result.
/// One way of sleeping: sleeps for about the duration, returns the call's result.
type SleepCall = Box<dyn Fn(Duration) -> i64 + Send + Sync>;

fn sleeps() -> Vec<(&'static str, SleepCall)> {
    vec![
        (
            "std::thread::sleep",
            Box::new(|d| {
                std::thread::sleep(d);
                0
            }),
        ),
        (
            "nanosleep",
            // SAFETY: a valid timespec, no remainder.
            Box::new(|d| unsafe { libc::nanosleep(&ts(d), std::ptr::null_mut()) }.into()),
        ),
        (
            "usleep",
            // SAFETY: plain call.
            Box::new(|d| unsafe { libc::usleep(d.as_micros() as u32) }.into()),
        ),
        (
            "clock_nanosleep(MONOTONIC)",
            Box::new(|d| {
                // SAFETY: a valid timespec, no remainder.
                unsafe {
                    libc::clock_nanosleep(libc::CLOCK_MONOTONIC, 0, &ts(d), std::ptr::null_mut())
                }
                .into()
            }),
        ),
        (
            "clock_nanosleep(MONOTONIC, TIMER_ABSTIME)",
            Box::new(|d| abs_sleep(libc::CLOCK_MONOTONIC, d)),
        ),
        (
            "clock_nanosleep(REALTIME, TIMER_ABSTIME)",
            Box::new(|d| abs_sleep(libc::CLOCK_REALTIME, d)),
        ),
    ]
}

fn abs_sleep(clock: libc::clockid_t, d: Duration) -> i64 {
    let mut now = ts(Duration::ZERO);
    // SAFETY: a valid timespec to write.
    assert_eq!(unsafe { libc::clock_gettime(clock, &mut now) }, 0);
    let now = Duration::new(now.tv_sec as u64, now.tv_nsec as u32);
    // SAFETY: a valid timespec, no remainder.
    unsafe {
        libc::clock_nanosleep(
            clock,
            libc::TIMER_ABSTIME,
            &ts(now + d),
            std::ptr::null_mut(),
        )
    }
    .into()
}

/// In a one-worker runtime, a coroutine's sleep leaves the worker to the others (a ticker keeps
/// ticking), lasts at least as long as asked, and returns what the real call returns.
#[test]
fn each_sleep_call_suspends_only_the_coroutine() {
    for io in backends() {
        let name = format!("{io:?}");
        let rt = runtime(1, io);
        let io = name;
        watchdog(Duration::from_secs(30), move || {
            rt.block_on(|| {
                let ticker = Ticker::start();
                for (name, sleep) in sleeps() {
                    let before = ticker.count();
                    let start = Instant::now();
                    let r = sleep(Duration::from_millis(60));
                    let took = start.elapsed();
                    let ticked = ticker.count() - before;
                    assert_eq!(r, 0, "{name} on {io:?}");
                    assert!(took >= Duration::from_millis(60), "{name}: {took:?}");
                    assert!(
                        ticked >= 10,
                        "{name} on {io:?}: the worker ran the ticker {ticked} times in {took:?}"
                    );
                }
            })
        });
    }
}

/// `sleep(3)` counts whole seconds.
#[test]
fn sleep_seconds_suspends_only_the_coroutine() {
    let rt = runtime(1, IoBackend::Epoll);
    watchdog(Duration::from_secs(30), move || {
        rt.block_on(|| {
            let ticker = Ticker::start();
            let start = Instant::now();
            // SAFETY: plain call.
            assert_eq!(unsafe { libc::sleep(1) }, 0);
            assert!(start.elapsed() >= Duration::from_secs(1));
            assert!(ticker.count() >= 100, "ticks: {}", ticker.count());
        })
    });
}

/// Invalid arguments fail in a coroutine as they fail on a thread: `nanosleep` with -1 and
/// `EINVAL`, `clock_nanosleep` by returning `EINVAL` with `errno` untouched.
#[test]
fn invalid_sleeps_fail_as_the_real_calls_do() {
    enable();
    let bad = libc::timespec {
        tv_sec: 0,
        tv_nsec: 1_000_000_000,
    };
    let negative = libc::timespec {
        tv_sec: -1,
        tv_nsec: 0,
    };
    let run = || {
        let mut out = Vec::new();
        for t in [&bad, &negative] {
            // SAFETY: valid pointers (the values are what is invalid).
            let r = unsafe { libc::nanosleep(t, std::ptr::null_mut()) };
            out.push((r, errno()));
            set_errno(1234);
            // SAFETY: as above.
            let r =
                unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, 0, t, std::ptr::null_mut()) };
            out.push((r, errno()));
        }
        out
    };
    let on_thread = run();
    assert_eq!(
        on_thread,
        vec![
            (-1, libc::EINVAL),
            (libc::EINVAL, 1234),
            (-1, libc::EINVAL),
            (libc::EINVAL, 1234)
        ]
    );
    let rt = runtime(1, IoBackend::Epoll);
    assert_eq!(rt.block_on(run), on_thread);
}

/// A clock the hook does not take (a CPU-time clock) goes to the kernel, in a coroutine too.
#[test]
fn other_clocks_pass_through() {
    let rt = runtime(1, IoBackend::Epoll);
    let call = || {
        let t = ts(Duration::from_millis(1));
        // SAFETY: a valid timespec.
        unsafe { libc::clock_nanosleep(libc::CLOCK_THREAD_CPUTIME_ID, 0, &t, std::ptr::null_mut()) }
    };
    let on_thread = call();
    assert_ne!(
        on_thread, 0,
        "the kernel refuses to sleep on a thread's CPU clock"
    );
    assert_eq!(rt.block_on(call), on_thread);
}

/// A plain thread's sleep is the thread's, while a runtime runs.
#[test]
fn a_threads_sleep_passes_through() {
    let _rt = runtime(1, IoBackend::Epoll);
    let start = Instant::now();
    std::thread::sleep(Duration::from_millis(30));
    // SAFETY: plain call.
    assert_eq!(unsafe { libc::usleep(20_000) }, 0);
    assert!(start.elapsed() >= Duration::from_millis(50));
}

/// A coroutine cancelled in a hooked sleep: the sleep returns at once (a hooked call cannot
/// unwind) and the cancellation takes effect at the coroutine's next cancellation point.
#[test]
fn a_cancelled_sleep_ends_at_the_next_cancellation_point() {
    let rt = runtime(1, IoBackend::Epoll);
    watchdog(Duration::from_secs(20), move || {
        let h = rt.spawn(|| {
            std::thread::sleep(Duration::from_secs(10));
            spindle_rt::yield_now();
            "not cancelled"
        });
        std::thread::sleep(Duration::from_millis(50));
        let start = Instant::now();
        h.cancel();
        assert!(matches!(h.join(), Err(JoinError::Cancelled)));
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
    });
}
