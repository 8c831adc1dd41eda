//! Shared by the integration tests.
#![allow(dead_code)] // each test file uses a part

use std::time::{Duration, Instant};

use spindle_rt::{Policy, Runtime};

/// The runtime of the tests: 2 workers (work-stealing).
pub fn rt() -> Runtime {
    Runtime::builder()
        .workers(2)
        .build()
        .expect("a 2-worker runtime")
}

/// A 1-worker FIFO runtime: coroutines interleave deterministically.
pub fn rt1() -> Runtime {
    Runtime::builder()
        .workers(1)
        .policy(Policy::Fifo)
        .build()
        .expect("a 1-worker runtime")
}

/// Waits (polling, with sleeps) until `cond` holds; panics after 10 s.
pub fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `eventually` from inside a coroutine (sleeps the coroutine).
pub fn eventually_co(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        spindle_rt::sleep(Duration::from_millis(1));
    }
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
