//! `spindle_park::block_on` (`spindle_rt::block_on_future`) with a future that wakes
//! itself synchronously.
//!
//! A future that yields the async way — wakes its own waker and returns `Pending`
//! (`futures_lite::future::yield_now`, `tokio::task::yield_now`, a `select` loop that re-polls)
//! — never makes `drive` park: the wake sets the `DriveWaker` flag, so the loop polls again at
//! once, and neither `park` (which would count against the budget and yield) nor
//! `consume_budget` is ever called. An async loop that yields until another coroutine on the
//! same worker does something then holds the worker for ever: the other coroutine never runs,
//! the monitor's budget exhaustion is never looked at, and the waiting coroutine cannot even
//! be cancelled (no cancellation point).
//!
//! Correct behaviour: each re-poll after a wake-up is an operation that counts against the
//! slice (a `park` that finds the permit set, or a `consume_budget`), so a self-waking future
//! yields the worker when the slice is spent, as a blocking-style yield loop does.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::task::{Context, Poll};
use std::time::Duration;

use spindle_rt::{Runtime, block_on_future};

/// Pending once (waking itself), then ready: the async world's `yield_now`.
struct YieldNow(bool);

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[test]
fn an_async_yield_loop_lets_the_other_coroutines_of_its_worker_run() {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // One worker: the coroutine that sets the flag can only run when the looping one
        // gives the worker up.
        let rt = Runtime::builder().workers(1).build().unwrap();
        let done = rt.block_on(|| {
            let flag = Arc::new(AtomicBool::new(false));
            let setter = {
                let flag = flag.clone();
                spindle_rt::spawn(move || flag.store(true, Ordering::SeqCst))
            };
            block_on_future(async {
                while !flag.load(Ordering::SeqCst) {
                    YieldNow(false).await;
                }
            });
            setter.join().is_ok()
        });
        let _ = tx.send(done);
        drop(rt);
    });
    let finished = rx.recv_timeout(Duration::from_secs(10));
    assert_eq!(
        finished,
        Ok(true),
        "a block_on_future loop over a self-waking future never gave its worker up (10 s)"
    );
}

#[test]
fn a_coroutine_in_an_async_yield_loop_can_be_cancelled() {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = Runtime::builder().workers(2).build().unwrap();
        let looping = rt.spawn(|| {
            block_on_future(async {
                loop {
                    YieldNow(false).await;
                }
            })
        });
        std::thread::sleep(Duration::from_millis(50));
        looping.cancel();
        let r = looping.join();
        let _ = tx.send(matches!(r, Err(spindle_rt::JoinError::Cancelled)));
        drop(rt);
    });
    let finished = rx.recv_timeout(Duration::from_secs(10));
    assert_eq!(
        finished,
        Ok(true),
        "a cancelled coroutine in an async yield loop never unwound (10 s)"
    );
}
