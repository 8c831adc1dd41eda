//! The worker loop, `finish`'s wake-ups, `shutdown_timeout`.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use spindle_rt::{IoBackend, Runtime};

/// Runs `f` on another thread; `None` if it did not finish within `secs` (it is left running).
fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(v) => Some(v),
        Err(mpsc::RecvTimeoutError::Timeout) => None,
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the checked closure panicked"),
    }
}

/// A waker of some other executor whose `wake` blocks briefly (a park: on a plain thread it
/// blocks the thread, as a contended `spindle_sync::Mutex` or a full bounded channel in an
/// executor's wake-up path would). It records whether it saw itself inside a coroutine.
struct BlockingWaker {
    woken: AtomicUsize,
    /// The id of the coroutine the wake-up ran in, if any (0: none).
    ran_in: AtomicU64,
}

impl Wake for BlockingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(current) = spindle_rt::try_current() {
            self.ran_in.store(current.id(), Ordering::SeqCst);
        }
        let _ = spindle_rt::park_timeout(Duration::from_millis(1));
        self.woken.fetch_add(1, Ordering::SeqCst);
    }
}

/// A `JoinHandle` polled as a future by another executor stores that executor's waker; the
/// coroutine's `finish` wakes it on the worker's stack, where the finished task is still the
/// worker's current coroutine (`finish_flagged` wraps only the detached value's drop in
/// `outside_coroutine`, not the wake-ups). A `wake` that parks (any blocking-style call) then
/// "suspends" the finished coroutine: `suspend_current` with a null yielder — a debug
/// assertion that kills the worker thread, or a null dereference in a release build.
///
/// Correct: a foreign waker's wake-up in `finish` runs in a cleanup coroutine of its own, as
/// the drop of a detached value may: `try_current()` there is never the finished coroutine, a
/// park parks the cleanup coroutine, and the runtime keeps working.
#[test]
fn a_foreign_waker_woken_by_finish_never_runs_as_the_finished_coroutine() {
    let rt = Runtime::builder()
        .workers(1)
        .io(IoBackend::None)
        .build()
        .unwrap();
    let mut handle = rt.spawn(move || {
        spindle_rt::sleep(Duration::from_millis(200));
        7u32
    });
    let finished = handle.id();
    let waker_state = Arc::new(BlockingWaker {
        woken: AtomicUsize::new(0),
        ran_in: AtomicU64::new(0),
    });
    let waker = Waker::from(waker_state.clone());
    let mut cx = Context::from_waker(&waker);
    // Pending: the coroutine sleeps. The handle keeps our waker.
    assert!(std::pin::Pin::new(&mut handle).poll(&mut cx).is_pending());
    let deadline = Instant::now() + Duration::from_secs(10);
    while waker_state.woken.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    // The runtime must still run coroutines.
    let alive = within(10, move || {
        let v = rt.block_on(|| 1 + 1);
        (v, rt)
    });
    assert!(
        alive.is_some(),
        "the worker died (or hangs) after finish woke a foreign waker that parked"
    );
    assert_ne!(
        waker_state.ran_in.load(Ordering::SeqCst),
        finished,
        "a waker woken by finish saw the finished coroutine as the current one"
    );
    assert_eq!(waker_state.woken.load(Ordering::SeqCst), 1);
    let (v, rt) = alive.unwrap();
    assert_eq!(v, 2);
    match std::pin::Pin::new(&mut handle).poll(&mut cx) {
        Poll::Ready(r) => assert_eq!(r.unwrap(), 7),
        Poll::Pending => panic!("finished but pending"),
    }
    drop(rt);
}

/// `shutdown_timeout` gives up waiting for coroutines after its timeout and abandons them —
/// but then joins every worker thread unconditionally. A coroutine that blocks its worker
/// thread (a CPU loop, a blocking call that should have gone to `blocking`, a deadlock on a
/// `std::sync::Mutex`) is exactly what the timeout is for, and it keeps `shutdown_timeout`
/// from returning at all (here: until the test releases the loop after 10 s).
///
/// Correct: return `false` about `timeout` after the call; join only the worker threads that
/// exit by the deadline and detach (leak with the shared state) the others, leaving their
/// queues undrained (a bound worker's private queues must not be drained from another thread).
#[test]
fn shutdown_timeout_returns_even_if_a_coroutine_blocks_its_worker() {
    let rt = Runtime::builder()
        .workers(2)
        .io(IoBackend::None)
        .stuck_threshold(None)
        .build()
        .unwrap();
    let release = Arc::new(AtomicBool::new(false));
    let (started_tx, started_rx) = mpsc::channel();
    let r = release.clone();
    let _stuck = rt.spawn(move || {
        started_tx.send(()).unwrap();
        // A coroutine that never suspends until released (a stand-in for a blocking call).
        while !r.load(Ordering::SeqCst) {
            std::hint::spin_loop();
        }
    });
    started_rx.recv().unwrap();
    let returned = within(5, move || {
        let t = Instant::now();
        let all_done = rt.shutdown_timeout(Duration::from_millis(100));
        (all_done, t.elapsed())
    });
    // Let the stuck coroutine go, so that a shutdown stuck in `join` ends and the test exits.
    release.store(true, Ordering::SeqCst);
    let (all_done, took) = returned.expect(
        "shutdown_timeout(100 ms) had not returned after 5 s: it joins a worker thread that a \
         coroutine blocks",
    );
    assert!(!all_done);
    assert!(took < Duration::from_secs(2), "took {took:?}");
}
