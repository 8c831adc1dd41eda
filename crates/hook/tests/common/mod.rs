//! What the hook's tests share: runtimes on each IO backend, a ticker that shows whether a
//! worker keeps running other coroutines, a watchdog.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use spindle_rt::{IoBackend, JoinHandle, Runtime};

/// Turns the hook on (idempotent).
pub fn enable() {
    spindle_hook::enable().expect("interposition is compiled in on this platform");
}

/// The backends a coroutine may wait on here: epoll, io_uring where the kernel allows it, and
/// no driver at all (waits go to the blocking pool).
pub fn backends() -> Vec<IoBackend> {
    let mut v = vec![IoBackend::Epoll];
    match Runtime::builder().workers(1).io(IoBackend::IoUring).build() {
        Ok(_) => v.push(IoBackend::IoUring),
        Err(e) => eprintln!("io_uring not available here ({e}): its cases are skipped"),
    }
    v.push(IoBackend::None);
    v
}

/// A runtime with the hook on.
pub fn runtime(workers: usize, io: IoBackend) -> Runtime {
    enable();
    Runtime::builder()
        .workers(workers)
        .io(io)
        .build()
        .expect("a runtime")
}

/// A coroutine that counts 1 ms sleeps until stopped: it advances only while its worker runs
/// coroutines.
pub struct Ticker {
    pub ticks: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Ticker {
    /// Starts one on the current coroutine's worker (a coroutine that has started stays on
    /// its worker; one worker runtimes make "its worker" the only one).
    pub fn start() -> Ticker {
        let ticks = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (t, s) = (ticks.clone(), stop.clone());
        let handle = spindle_rt::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                spindle_rt::sleep(Duration::from_millis(1));
                t.fetch_add(1, Ordering::Relaxed);
            }
        });
        // Let it start.
        spindle_rt::sleep(Duration::from_millis(5));
        Ticker {
            ticks,
            stop,
            handle: Some(handle),
        }
    }

    pub fn count(&self) -> usize {
        self.ticks.load(Ordering::Relaxed)
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Runs `f` on a thread and fails if it takes longer than `limit` (a hang would otherwise stall
/// the test binary for ever).
pub fn watchdog<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => {
            let _ = t.join();
            v
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match t.join() {
            Err(p) => std::panic::resume_unwind(p),
            Ok(()) => unreachable!("the thread sent nothing and did not panic"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("hung: still running after {limit:?}"),
    }
}
