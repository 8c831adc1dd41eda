//! The pause a listener takes between accepts while the process is out of descriptors.

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::sys;

/// The longest pause between accepts while the process is out of file descriptors.
const MAX_ACCEPT_BACKOFF_MS: u32 = 100;

/// One listener's pause before its next accept: 0 normally; after an accept that failed for
/// want of descriptors (`EMFILE`/`ENFILE`; on Windows `WSAEMFILE`/`WSAENOBUFS`) 1 ms, doubling
/// up to 100 ms while it lasts, back to 0 after any other outcome. So a loop that logs the
/// error and accepts again does not spin while the listener stays readable (the connections
/// wait in the backlog), and recovers by itself once descriptors are free.
#[derive(Debug, Default)]
pub(crate) struct AcceptBackoff {
    ms: AtomicU32,
}

impl AcceptBackoff {
    /// Pauses the calling task (or thread) as the last outcome asks, then runs `accept` and
    /// records its outcome.
    pub(crate) fn accept<T>(&self, accept: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        let backoff = self.ms.load(Ordering::Relaxed);
        if backoff > 0 {
            sleep(Duration::from_millis(u64::from(backoff)));
        }
        let result = accept();
        match &result {
            Err(e) if sys::is_out_of_descriptors(e) => {
                let next = (backoff * 2).clamp(1, MAX_ACCEPT_BACKOFF_MS);
                self.ms.store(next, Ordering::Relaxed);
            }
            _ if backoff > 0 => self.ms.store(0, Ordering::Relaxed),
            _ => {}
        }
        result
    }
}

/// Sleeps the current task (or thread).
fn sleep(d: Duration) {
    let deadline = Instant::now() + d;
    while spindle_park::park_until(deadline) == spindle_park::Wake::Woken {}
}
