//! Cancellation paths.
//!
//! * A coroutine whose closure is dropped unrun because no stack could be had
//!   (`JoinError::NoStack`) has that closure dropped by the worker while the task is still the
//!   worker's *current* coroutine: a captured value whose destructor parks then "suspends" a
//!   coroutine that does not exist (null yielder).
//! * A cancellation unwind swallowed by user code (`catch_unwind` around a request handler, a
//!   common server pattern) leaves the coroutine uncancellable for good: dropping the runtime
//!   then waits for it for ever.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use spindle_rt::{Builder, IoBackend, JoinError, Runtime};

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

/// Sleeps (a park) in its destructor: legal in a coroutine (it suspends) and on a plain thread
/// (it blocks the thread).
struct SleepsOnDrop(Arc<AtomicBool>);
impl Drop for SleepsOnDrop {
    fn drop(&mut self) {
        spindle_rt::sleep(Duration::from_millis(1));
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A coroutine that cannot get a stack (a size the stack pool refuses) is dropped unrun by
/// the worker, in `TaskCell::run_other`, *while `run_task` still has it as the current
/// coroutine* (`current_header` set). The closure's captured value parks in its destructor:
/// the park hook takes the worker's own code for that coroutine and calls `suspend_current`
/// with the task's yielder, which is null (the coroutine was never made) — a debug assertion
/// that kills the worker thread here, a null dereference in release builds.
///
/// Correct: the closure is dropped in a cleanup coroutine of its own (a park there parks that
/// coroutine, not the worker), `join` returns `JoinError::NoStack`, and the worker runs on.
#[test]
fn a_closure_dropped_unrun_for_want_of_a_stack_may_park_in_its_destructor() {
    let rt = Runtime::builder()
        .workers(1)
        .io(IoBackend::None)
        .build()
        .unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    let d = SleepsOnDrop(dropped.clone());
    let h = Builder::new()
        // No pool can be made for this size: the first run gets no stack.
        .stack_size(usize::MAX / 4)
        .spawn_on(&rt.handle(), move || {
            let _d = d;
        })
        .expect("the stack is taken at the first run, not at the spawn");
    let outcome = within(10, move || {
        let r = h.join();
        let next = rt.spawn(|| 7).join().ok();
        // A runtime whose worker died would hang in its drop: the test reports instead.
        std::mem::forget(rt);
        (r.map_err(|e| e.to_string()), next)
    });
    let Some((r, next)) = outcome else {
        panic!(
            "join of a coroutine that got no stack never returned: dropping its closure \
             (whose destructor parks) killed the worker (destructor finished: {})",
            dropped.load(Ordering::SeqCst)
        );
    };
    assert!(
        r.as_ref().is_err_and(|e| e.contains("could not start")),
        "{r:?}"
    );
    // Dropped by the cleanup coroutine, which may run after the join has returned.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !dropped.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(dropped.load(Ordering::SeqCst), "the closure was dropped");
    assert_eq!(next, Some(7), "the worker runs on");
}

spindle_rt::coroutine_local! {
    static LOCAL_IN_DROP: Counted = Counted;
}
static LOCAL_DROPS: AtomicUsize = AtomicUsize::new(0);
/// What `try_current()` said in the unrun closure's destructor (kept: it holds the task).
static CURRENT_IN_DROP: std::sync::Mutex<Option<spindle_rt::Current>> = std::sync::Mutex::new(None);
struct Counted;
impl Drop for Counted {
    fn drop(&mut self) {
        LOCAL_DROPS.fetch_add(1, Ordering::SeqCst);
    }
}
struct UsesALocalOnDrop;
impl Drop for UsesALocalOnDrop {
    fn drop(&mut self) {
        LOCAL_IN_DROP.with(|_| ());
        *CURRENT_IN_DROP.lock().unwrap() = spindle_rt::try_current();
    }
}

/// The same path, with a destructor that uses a `coroutine_local!` (and asks
/// `try_current()`): the worker's code is taken for the coroutine, so `try_current()` returns
/// the dead task, and the local's value goes into the dead task's locals, which nothing clears
/// (only the coroutine's own exit does). It lives as long as the task's block — here as long as
/// the `Current` the destructor kept — and is dropped by whichever thread frees the task.
///
/// Correct: the closure is dropped in a cleanup coroutine, whose own locals take the value and
/// drop it when it ends (by `drop(rt)` at the latest); `try_current()` there is that cleanup
/// coroutine, never the task whose closure never ran.
#[test]
fn a_closure_dropped_unrun_for_want_of_a_stack_does_not_fill_the_dead_tasks_locals() {
    let rt = Runtime::builder()
        .workers(1)
        .io(IoBackend::None)
        .build()
        .unwrap();
    let u = UsesALocalOnDrop;
    let h = Builder::new()
        .stack_size(usize::MAX / 4)
        .spawn_on(&rt.handle(), move || {
            let _u = u;
        })
        .unwrap();
    let dead = h.id();
    let r = h.join();
    assert!(matches!(r, Err(JoinError::NoStack(_))), "{r:?}");
    drop(rt); // every coroutine, the cleanup one included, has ended
    let current = CURRENT_IN_DROP.lock().unwrap().take();
    let dropped = LOCAL_DROPS.load(Ordering::SeqCst);
    assert!(
        dropped == 1 && current.as_ref().is_none_or(|c| c.id() != dead),
        "after the runtime was dropped, the local made by the unrun closure's destructor was \
         dropped {dropped} time(s) (it sits in the dead task's locals, alive while the task \
         block is); try_current() in that destructor returned {current:?} (a task whose \
         closure never ran)"
    );
    drop(current);
    eprintln!(
        "after the last reference to the task went (on the test thread): dropped {} time(s)",
        LOCAL_DROPS.load(Ordering::SeqCst)
    );
}

/// A server loop that survives a panicking handler with `catch_unwind` (a common pattern).
/// Cancelling it while a handler sleeps unwinds the handler; the loop's `catch_unwind` takes
/// the private cancellation payload for a panic and goes on. From then on the coroutine holds
/// cancellation off for good (`coop::cancel_unwind` → `hold_off_cancel_for_good`), so neither
/// a second `cancel` nor the runtime's shutdown can stop it: dropping the runtime waits for it
/// for ever, while the docs say the drop "cancels every coroutine still alive, waits for them
/// to unwind".
///
/// Correct: once the cancellation's unwind has been caught and dropped (the payload's
/// destructor runs), the coroutine is cancellable again, so its next suspension point
/// unwinds again (and shutdown ends). E.g. give `CancelUnwind` a `Drop` that undoes the
/// "for good" hold-off, or re-arm it in the body only while unwinding.
#[test]
fn a_cancel_swallowed_by_catch_unwind_does_not_make_the_runtime_drop_hang() {
    let rt = Runtime::builder()
        .workers(1)
        .io(IoBackend::None)
        .build()
        .unwrap();
    let handled = Arc::new(AtomicUsize::new(0));
    let n = handled.clone();
    let h = rt.spawn(move || {
        loop {
            // One request: a handler that may panic; the server survives it.
            let _ = std::panic::catch_unwind(|| spindle_rt::sleep(Duration::from_millis(5)));
            n.fetch_add(1, Ordering::SeqCst);
        }
    });
    std::thread::sleep(Duration::from_millis(30));
    h.cancel();
    std::thread::sleep(Duration::from_millis(30));
    // A second cancel: also ignored today.
    h.cancel();
    drop(h);
    let dropped = within(10, move || drop(rt));
    assert!(
        dropped.is_some(),
        "dropping the runtime hung: the coroutine that swallowed its cancellation's unwind \
         can no longer be cancelled ({} requests handled so far)",
        handled.load(Ordering::SeqCst)
    );
}

/// The other side of the sticky cancellation above (a guard of its fix): what the cancelled
/// coroutine caught is inert anywhere else. Here the coroutine catches its cancellation,
/// keeps the payload without dropping it and returns it as its value: the join gets it, and
/// dropping it on this (plain) thread resumes nothing. Also: the coroutine's own destructors
/// that park while the resumed unwind runs still wait as usual.
#[test]
fn a_caught_cancellation_returned_as_a_value_is_inert_elsewhere() {
    let rt = Runtime::builder()
        .workers(1)
        .io(IoBackend::None)
        .build()
        .unwrap();
    let parked_in_drop = Arc::new(AtomicBool::new(false));
    let flag = parked_in_drop.clone();
    let (tx, rx) = mpsc::channel();
    let h = rt.spawn(move || {
        let caught = std::panic::catch_unwind(|| {
            let _sleeps = SleepsOnDrop(flag);
            tx.send(()).unwrap();
            spindle_rt::sleep(Duration::from_secs(30));
        });
        caught.err()
    });
    rx.recv().unwrap();
    h.cancel();
    let payload = rt
        .block_on(move || h.join())
        .expect("the coroutine returned what it caught")
        .expect("it caught its cancellation");
    assert!(parked_in_drop.load(Ordering::SeqCst));
    drop(payload); // on a plain thread: nothing resumes
    drop(rt);
}

/// Nested catches: each drop of the caught payload resumes the unwind, up to the body, and
/// `join` reports the cancellation.
#[test]
fn a_cancellation_caught_twice_still_ends_the_coroutine_as_cancelled() {
    let rt = Runtime::builder()
        .workers(1)
        .io(IoBackend::None)
        .build()
        .unwrap();
    let after_inner = Arc::new(AtomicUsize::new(0));
    let n = after_inner.clone();
    let (tx, rx) = mpsc::channel();
    let h = rt.spawn(move || {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = std::panic::catch_unwind(|| {
                tx.send(()).unwrap();
                spindle_rt::sleep(Duration::from_secs(30));
            });
            n.fetch_add(1, Ordering::SeqCst); // not reached: the drop above resumed the unwind
        }));
        n.fetch_add(10, Ordering::SeqCst); // not reached either
    });
    rx.recv().unwrap();
    h.cancel();
    let joined = rt.block_on(move || h.join());
    assert!(matches!(joined, Err(JoinError::Cancelled)), "{joined:?}");
    assert_eq!(after_inner.load(Ordering::SeqCst), 0);
}
