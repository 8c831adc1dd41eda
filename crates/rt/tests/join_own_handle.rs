//! Joining one's own handle through its `Future`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use spindle_rt::{IoBackend, JoinHandle, Runtime};

/// `JoinHandle::join` refuses a coroutine's own handle with a panic ("it would wait for itself
/// forever"), and the `Future` impl's docs present `block_on_future(handle)` as what `join`
/// amounts to — but `poll` makes no such check: a coroutine that awaits its own handle (here
/// through `block_on_future`, as async code in it would with `.await`) parks for ever, silently.
///
/// Correct: `poll` refuses it as `join` does (`refuse_own` at the top of `poll`).
#[test]
fn awaiting_ones_own_handle_panics_as_joining_it_does() {
    let rt = Runtime::builder()
        .workers(1)
        .io(IoBackend::None)
        .build()
        .unwrap();
    let slot: Arc<Mutex<Option<JoinHandle<()>>>> = Arc::new(Mutex::new(None));
    let refused = Arc::new(AtomicBool::new(false));
    let (s, r) = (slot.clone(), refused.clone());
    let handle = rt.spawn(move || {
        let own = loop {
            if let Some(h) = s.lock().unwrap().take() {
                break h;
            }
            spindle_rt::sleep(Duration::from_millis(1));
        };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = spindle_rt::block_on_future(own);
        }));
        if outcome.is_err() {
            r.store(true, Ordering::SeqCst);
        }
    });
    *slot.lock().unwrap() = Some(handle);
    let t = Instant::now();
    while !refused.load(Ordering::SeqCst) && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        refused.load(Ordering::SeqCst),
        "a coroutine awaiting its own JoinHandle waits for itself for ever (join panics instead)"
    );
    drop(rt);
}

thread_local! {
    static STASH: std::cell::RefCell<Option<spindle_rt::CancelGuard>> =
        const { std::cell::RefCell::new(None) };
}

/// A `CancelGuard` is `!Send`, but a `thread_local!` hands it from one coroutine to another on
/// the same worker thread in safe code. Its drop then calls `Hook::defer_cancel(false)` on
/// whichever coroutine runs *now* (`worker.rs`: the current header's `no_cancel`), not the one
/// that made it: the maker's deferral is never ended (it can no longer be cancelled, and a
/// runtime's drop waits for it for ever), and the dropper's own deferral depth is lowered (a
/// guard of its own then protects nothing).
///
/// Correct: the guard remembers its coroutine (its id or header) and ends that coroutine's
/// deferral — or refuses (panics) when dropped by another one.
#[test]
fn a_cancel_guard_dropped_by_another_coroutine_ends_its_makers_deferral() {
    let rt = Runtime::builder()
        .workers(1)
        .io(IoBackend::None)
        .build()
        .unwrap();
    let stashed = Arc::new(AtomicBool::new(false));
    let s = stashed.clone();
    let maker = rt.spawn(move || {
        STASH.with(|st| *st.borrow_mut() = Some(spindle_rt::CancelGuard::new()));
        s.store(true, Ordering::SeqCst);
        spindle_rt::sleep(Duration::from_secs(3600));
    });
    while !stashed.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(1));
    }
    // Another coroutine on the same (only) worker drops the maker's guard.
    rt.block_on(|| drop(STASH.with(|st| st.borrow_mut().take())));
    maker.cancel();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(maker.join().map_err(|e| e.is_cancelled()));
    });
    let outcome = rx.recv_timeout(Duration::from_secs(5));
    if outcome.is_err() {
        // The maker cannot be cancelled: dropping the runtime would wait for it for ever.
        std::mem::forget(rt);
        panic!(
            "a coroutine whose CancelGuard was dropped (by another coroutine) still defers its \
             cancellation: its join did not return within 5 s"
        );
    }
    assert_eq!(outcome.unwrap(), Err(true));
}
