//! Joining coroutines: `JoinHandle::join` after its `Future` impl returned the
//! result, a scope that took a child's panic from under a live handle, and
//! `block_on_future` whose wake-up was eaten by a park inside its future's `poll` (a nested
//! `block_on_future`, a `join`, a `sleep`). Each wait that used to hang runs on a watchdog
//! thread, so a hang is a test failure, not a stuck test binary.

mod common;

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use common::Signal;
use spindle_rt::{CancelGuard, Runtime, block_on_future};

/// Runs `f` on another thread; fails the test if it does not finish in 10 s.
fn within_10s<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(f()).unwrap());
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("hung: {what}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("panicked: {what}"),
    }
}

/// Both futures' outputs; polls each unfinished one on every poll (as `futures::join!`).
struct Join2<A: Future, B: Future> {
    a: Pin<Box<A>>,
    b: Pin<Box<B>>,
    out_a: Option<A::Output>,
    out_b: Option<B::Output>,
}

fn join2<A: Future, B: Future>(a: A, b: B) -> Join2<A, B> {
    Join2 {
        a: Box::pin(a),
        b: Box::pin(b),
        out_a: None,
        out_b: None,
    }
}

impl<A: Future, B: Future> Future for Join2<A, B>
where
    A::Output: Unpin,
    B::Output: Unpin,
{
    type Output = (A::Output, B::Output);
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if this.out_a.is_none()
            && let Poll::Ready(v) = this.a.as_mut().poll(cx)
        {
            this.out_a = Some(v);
        }
        if this.out_b.is_none()
            && let Poll::Ready(v) = this.b.as_mut().poll(cx)
        {
            this.out_b = Some(v);
        }
        if this.out_a.is_some() && this.out_b.is_some() {
            Poll::Ready((this.out_a.take().unwrap(), this.out_b.take().unwrap()))
        } else {
            Poll::Pending
        }
    }
}

/// Fires `signal` with `value` from another thread after `after`.
fn fire_later(signal: &Signal, value: u32, after: Duration) {
    let signal = signal.clone();
    std::thread::spawn(move || {
        std::thread::sleep(after);
        signal.fire(value);
    });
}

#[test]
fn join_after_the_future_returned_ready_panics_instead_of_hanging() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let mut handle = rt.spawn(|| 7);
    // Awaited through `&mut`: the handle survives its `Ready`.
    assert_eq!(block_on_future(&mut handle).unwrap(), 7);
    let panicked = within_10s("join after the future's Ready", move || {
        catch_unwind(AssertUnwindSafe(move || handle.join())).is_err()
    });
    assert!(
        panicked,
        "a second take of the result must panic, as a second poll does"
    );
}

#[test]
fn a_scope_leaves_a_childs_panic_to_a_sibling_that_joins_its_handle() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let sibling_got_it = within_10s(
        "the scope waiting for a sibling joining a handle",
        move || {
            rt.block_on(|| {
                let got = AtomicBool::new(false);
                let scope = catch_unwind(AssertUnwindSafe(|| {
                    spindle_rt::scope(|s| {
                        let a = s.spawn(|| -> u32 {
                            spindle_rt::sleep(Duration::from_millis(10));
                            panic!("a failed")
                        });
                        let got = &got;
                        s.spawn(move || {
                            // Its wait on `a` must not be cut short by the sibling-cancel of
                            // `a`'s panic (a wait that borrows its frame, say).
                            let _guard = CancelGuard::new();
                            while !a.is_finished() {
                                spindle_rt::sleep(Duration::from_millis(1));
                            }
                            // Meanwhile the scope, waiting for `a` first, sees it finished.
                            spindle_rt::sleep(Duration::from_millis(100));
                            let err = a.join().unwrap_err();
                            got.store(err.is_panic(), Ordering::SeqCst);
                        });
                    })
                }));
                // The sibling joined `a`'s handle, which consumes its panic (as with threads).
                assert!(
                    scope.is_ok(),
                    "the panic was joined: the scope does not raise it"
                );
                got.load(Ordering::SeqCst)
            })
        },
    );
    assert!(sibling_got_it, "the joining sibling got the panic");
}

#[test]
fn a_wake_up_eaten_by_a_sleep_inside_poll_is_not_lost() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let signal = Signal::default();
    let (a, b) = within_10s("block_on_future after a sleep inside poll", move || {
        rt.block_on(|| {
            fire_later(&signal, 1, Duration::from_millis(20));
            // `a` fires while `b`'s blocking-style sleep parks the coroutine.
            block_on_future(join2(signal, async {
                spindle_rt::sleep(Duration::from_millis(150));
                2
            }))
        })
    });
    assert_eq!((a, b), (1, 2));
}

#[test]
fn a_wake_up_eaten_by_a_join_inside_poll_is_not_lost() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let signal = Signal::default();
    let (a, b) = within_10s("block_on_future after a join inside poll", move || {
        rt.block_on(|| {
            fire_later(&signal, 1, Duration::from_millis(20));
            let child = spindle_rt::spawn(|| {
                spindle_rt::sleep(Duration::from_millis(150));
                2
            });
            block_on_future(join2(signal, async move { child.join().unwrap() }))
        })
    });
    assert_eq!((a, b), (1, 2));
}

#[test]
fn nested_block_on_future_in_a_coroutine_loses_no_wake_up() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let (outer, inner) = (Signal::default(), Signal::default());
    let (a, b) = within_10s("nested block_on_future in a coroutine", move || {
        rt.block_on(|| {
            fire_later(&outer, 1, Duration::from_millis(20));
            fire_later(&inner, 2, Duration::from_millis(150));
            block_on_future(join2(outer, async { block_on_future(inner) }))
        })
    });
    assert_eq!((a, b), (1, 2));
}

#[test]
fn nested_block_on_future_on_a_plain_thread_loses_no_wake_up() {
    let (outer, inner) = (Signal::default(), Signal::default());
    let (a, b) = within_10s("nested block_on_future on a thread", move || {
        fire_later(&outer, 1, Duration::from_millis(20));
        fire_later(&inner, 2, Duration::from_millis(150));
        block_on_future(join2(outer, async { block_on_future(inner) }))
    });
    assert_eq!((a, b), (1, 2));
}

/// A value that counts its drops, holding a waker (of the task that made it, say).
struct Holds(
    Arc<std::sync::atomic::AtomicUsize>,
    #[allow(dead_code)] Waker,
);
impl Drop for Holds {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_detached_coroutines_output_is_dropped_even_if_it_holds_its_own_waker() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let drops = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // Detached after it finished.
    let d = drops.clone();
    let h = rt.spawn(move || Holds(d, spindle_park::waker()));
    while !h.is_finished() {
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(h);
    // Detached before it finished.
    let d = drops.clone();
    let h = rt.spawn(move || {
        spindle_rt::sleep(Duration::from_millis(20));
        Holds(d, spindle_park::waker())
    });
    drop(h);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        drops.load(Ordering::SeqCst),
        2,
        "a detached output was never dropped"
    );
}

/// A detached coroutine's value is dropped when the coroutine finishes, by the worker, on its
/// own stack: a destructor that parks there (here a 1 ms timed park) must park the worker's
/// thread, not take itself for the finished coroutine and try to suspend it (a switch from the
/// wrong stack).
#[test]
fn a_detached_value_whose_destructor_parks_is_dropped_as_the_workers_own_code() {
    struct ParksOnDrop(Arc<AtomicBool>);
    impl Drop for ParksOnDrop {
        fn drop(&mut self) {
            spindle_park::park_timeout(Duration::from_millis(1));
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let rt = Runtime::builder().workers(1).build().unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    let d = dropped.clone();
    let (go_tx, go_rx) = spindle_sync::mpsc::channel::<()>();
    let h = rt.spawn(move || {
        let _ = go_rx.recv();
        ParksOnDrop(d)
    });
    drop(h); // detached before it finishes
    go_tx.send(()).unwrap();
    let start = std::time::Instant::now();
    while !dropped.load(Ordering::SeqCst) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the value was never dropped"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(rt.spawn(|| 7).join().unwrap(), 7, "the worker runs on");
}

/// As above, with a destructor that panics: the panic hook reports it (as a detached
/// coroutine's own panic), and the worker runs on.
#[test]
fn a_detached_value_whose_destructor_panics_does_not_take_the_worker_down() {
    struct PanicsOnDrop(Arc<AtomicBool>);
    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
            panic!("a detached value's destructor panics (expected by the test)");
        }
    }
    let rt = Runtime::builder().workers(1).build().unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    let d = dropped.clone();
    let (go_tx, go_rx) = spindle_sync::mpsc::channel::<()>();
    let h = rt.spawn(move || {
        let _ = go_rx.recv();
        PanicsOnDrop(d)
    });
    drop(h);
    go_tx.send(()).unwrap();
    let next = within_10s("the worker after a panicking destructor", move || {
        let start = std::time::Instant::now();
        while !dropped.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let next = rt.spawn(|| 7).join().ok();
        std::mem::forget(rt); // a broken runtime's drop would hang: the test reports instead
        next
    });
    assert_eq!(next, Some(7), "the worker runs on");
}

/// `Runtime::block_on` from code a worker runs as its own (here: a detached coroutine's value
/// dropped when the coroutine ends) panics with a clear message. It blocked the worker, and on
/// a runtime of one worker the root coroutine it waited for was queued on that very worker:
/// a deadlock.
#[test]
fn block_on_on_a_worker_thread_outside_coroutines_panics_instead_of_deadlocking() {
    struct BlocksOnDrop(Arc<Runtime>, mpsc::Sender<Result<u32, String>>);
    impl Drop for BlocksOnDrop {
        fn drop(&mut self) {
            let rt = self.0.clone();
            let got = catch_unwind(AssertUnwindSafe(|| rt.block_on(|| 1))).map_err(|p| {
                p.downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_default()
            });
            let _ = self.1.send(got);
        }
    }
    let rt = Arc::new(Runtime::builder().workers(1).build().unwrap());
    let (tx, rx) = mpsc::channel();
    let (go_tx, go_rx) = spindle_sync::mpsc::channel::<()>();
    let value_rt = rt.clone();
    let h = rt.spawn(move || {
        let _ = go_rx.recv();
        BlocksOnDrop(value_rt, tx)
    });
    drop(h); // detached: the worker drops the value when the coroutine ends
    go_tx.send(()).unwrap();
    let got = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("block_on on the worker deadlocked");
    let message = got.expect_err("block_on on a worker thread ran");
    assert!(message.contains("worker thread"), "{message}");
    assert_eq!(rt.spawn(|| 7).join().unwrap(), 7, "the worker runs on");
    std::mem::forget(rt); // the value's clone may be the one left: not dropped on the worker
}
