//! Shared by the loom models (`tests/loom_*.rs`).
#![allow(dead_code)] // each model uses a part

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll, Wake, Waker};

use loom::sync::{Condvar as LoomCondvar, Mutex as LoomMutex};

/// Runs `f` under loom, bounding preemptions to 2 unless `LOOM_MAX_PREEMPTIONS` says
/// otherwise (unbounded exploration would take hours), and prints how many interleavings it
/// explored in how long.
pub fn model<F>(name: &str, f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound.get_or_insert(2);
    check(name, builder, f);
}

/// As [`model`], with at least `min_bound` preemptions: for a small model whose race needs
/// more than two (the spawned thread runs first, the main thread interrupts it, and it
/// interrupts the main thread back).
pub fn model_with_preemptions<F>(name: &str, min_bound: usize, f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(builder.preemption_bound.unwrap_or(0).max(min_bound));
    check(name, builder, f);
}

fn check<F>(name: &str, builder: loom::model::Builder, f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    use std::sync::atomic::{AtomicUsize, Ordering};

    let iterations = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = iterations.clone();
    let start = std::time::Instant::now();
    builder.check(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        f();
    });
    eprintln!(
        "loom {name}: {} interleavings in {:.2?} (preemption bound {:?})",
        iterations.load(Ordering::Relaxed),
        start.elapsed(),
        builder.preemption_bound
    );
}

/// Runs `f` with the current loom thread's next park unwinding (a cancelled coroutine's
/// park); `None` if it did unwind.
pub fn cancelled_at_park<R>(f: impl FnOnce() -> R) -> Option<R> {
    spindle_sync::__loom::cancel_next_park();
    let r = catch_unwind(AssertUnwindSafe(f));
    // If `f` never parked, the request must not leak into the next park of this thread.
    clear_cancel();
    match r {
        Ok(v) => Some(v),
        Err(payload) => {
            assert!(
                payload.is::<spindle_sync::__loom::Cancelled>(),
                "unwound with something other than the cancellation"
            );
            None
        }
    }
}

fn clear_cancel() {
    spindle_sync::__loom::clear_cancel();
}

/// A deadline for the loom models' timed operations. Loom's parker times a timed park out at
/// once (unless a wake-up is pending) whatever its deadline; a deadline in the future only
/// keeps the operation from giving up before it has registered and parked, which is the race
/// the models explore.
pub fn later() -> std::time::Instant {
    std::time::Instant::now() + std::time::Duration::from_secs(3600)
}

/// Polls `fut` once with `waker`.
pub fn poll_with<F: Future + Unpin>(fut: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(fut).poll(&mut Context::from_waker(waker))
}

/// A token parker (as the crate's loom parker): the waker of [`block_on`].
struct Parker {
    token: LoomMutex<bool>,
    condvar: LoomCondvar,
}

impl Wake for Parker {
    fn wake(self: std::sync::Arc<Self>) {
        *self.token.lock().unwrap() = true;
        self.condvar.notify_one();
    }
}

/// A minimal executor: poll, park until woken, repeat. A lost wake-up: loom reports a deadlock.
pub fn block_on<F: Future + Unpin>(mut fut: F) -> F::Output {
    let parker = std::sync::Arc::new(Parker {
        token: LoomMutex::new(false),
        condvar: LoomCondvar::new(),
    });
    let waker = Waker::from(parker.clone());
    loop {
        if let Poll::Ready(v) = poll_with(&mut fut, &waker) {
            return v;
        }
        let mut token = parker.token.lock().unwrap();
        while !*token {
            token = parker.condvar.wait(token).unwrap();
        }
        *token = false;
    }
}
