//! Sleeping.

use std::time::{Duration, Instant};

/// Puts the current coroutine to sleep for at least `duration`; its worker runs others
/// meanwhile. On a plain thread, sleeps the thread.
///
/// The timer has a 1 ms resolution: the coroutine wakes at most about a millisecond (plus
/// scheduling delay) after the deadline, never before. Durations too long to represent as a
/// deadline sleep forever (unless cancelled) rather than being shortened.
///
/// A cancelled coroutine unwinds from here.
pub fn sleep(duration: Duration) {
    match Instant::now().checked_add(duration) {
        Some(deadline) => sleep_until(deadline),
        None => loop {
            spindle_park::park();
        },
    }
}

/// Puts the current coroutine to sleep until `deadline` (see [`sleep`]).
pub fn sleep_until(deadline: Instant) {
    if !spindle_park::in_task() {
        let now = Instant::now();
        if deadline > now {
            std::thread::sleep(deadline - now);
        }
        return;
    }
    // Wake-ups that are not the deadline (stale wakers, `unpark`) do not end the sleep.
    while Instant::now() < deadline {
        let _ = spindle_park::park_until(deadline);
    }
}
