//! A `CancelGuard` moved from one coroutine to another on the same worker.
//!
//! `CancelGuard` is `!Send`, but a thread-local carries it between two coroutines of one
//! worker (safe code). Its `Drop` decrements the depth of whichever coroutine runs when it is
//! dropped (`Hook::defer_cancel(false)` on the *current* task), not of the one that made it:
//!
//! * the dropper's own guard no longer protects it — its depth reaches 0 while it still holds
//!   a guard, so its next park unwinds although "while a guard is held, park never unwinds"
//!   (code that lent its frame to another thread or the kernel relies on exactly that);
//! * the maker's depth stays raised for good although no guard of it is alive any more, so a
//!   cancel of it is never carried out ("once the last one is dropped, the next park ...
//!   unwinds").
//!
//! Correct behaviour: a guard undoes its own task's deferral (or, at the least, never touches
//! another task's depth).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use spindle_rt::{CancelGuard, JoinError, Runtime};

thread_local! {
    static STASH: std::cell::RefCell<Option<CancelGuard>> = const { std::cell::RefCell::new(None) };
}

/// One worker; A makes a guard and leaves it in the thread-local, then waits for ever (parks);
/// B makes its own guard, takes A's and drops it, then waits in parks while still holding its
/// own. Returns the runtime and both handles, once B has dropped A's guard.
fn setup(
    b_survived: Arc<AtomicBool>,
) -> (
    Runtime,
    spindle_rt::JoinHandle<()>,
    spindle_rt::JoinHandle<()>,
) {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let (a_ready, a_ready_rx) = mpsc::channel();
    let a = rt.spawn(move || {
        STASH.with(|s| *s.borrow_mut() = Some(spindle_park::defer_cancel()));
        a_ready.send(()).unwrap();
        loop {
            spindle_rt::park();
        }
    });
    a_ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let (b_ready, b_ready_rx) = mpsc::channel();
    let b = rt.spawn(move || {
        let mine = CancelGuard::new();
        drop(STASH.with(|s| s.borrow_mut().take()).expect("A's guard"));
        b_ready.send(()).unwrap();
        // B holds `mine` throughout: none of these parks may unwind.
        for _ in 0..20 {
            spindle_rt::sleep(Duration::from_millis(5));
        }
        b_survived.store(true, Ordering::SeqCst);
        drop(mine);
        loop {
            spindle_rt::park(); // now the cancel may take effect
        }
    });
    b_ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    (rt, a, b)
}

#[test]
fn a_coroutine_that_drops_another_ones_guard_keeps_its_own_protection() {
    let survived = Arc::new(AtomicBool::new(false));
    let (rt, a, b) = setup(survived.clone());
    b.cancel();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(b.join());
    });
    let joined = rx.recv_timeout(Duration::from_secs(10));
    // Leaked before any assertion: A may never end (see the other test), and dropping the
    // runtime waits for it.
    std::mem::forget(a);
    std::mem::forget(rt);
    assert!(
        matches!(joined, Ok(Err(JoinError::Cancelled))),
        "{joined:?}"
    );
    assert!(
        survived.load(Ordering::SeqCst),
        "B unwound from a park while it held a CancelGuard (its depth was taken by A's guard)"
    );
}

#[test]
fn a_coroutine_whose_guard_was_dropped_elsewhere_can_be_cancelled() {
    let (rt, a, b) = setup(Arc::new(AtomicBool::new(false)));
    a.cancel();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(a.join());
    });
    let joined = rx.recv_timeout(Duration::from_secs(10));
    b.cancel();
    std::mem::forget(b);
    std::mem::forget(rt); // leaked before the assertion: dropping it would wait for A
    assert!(
        matches!(joined, Ok(Err(JoinError::Cancelled))),
        "A's guard is gone, but a cancel of A was never carried out (10 s): {joined:?}"
    );
}
