//! `scope` on a worker thread outside a coroutine.
//!
//! `scope`'s docs say it works "in a coroutine ... or on a worker thread of a runtime". On a
//! worker thread outside a coroutine (code the worker runs as its own: a detached coroutine's
//! value dropped when the coroutine finishes, `task::finish_flagged`) the children are pushed to
//! that worker's queues and the scope parks the *thread* waiting for them: on a runtime of one
//! worker nobody else can run them, a deadlock (the same one
//! `Runtime::block_on` avoids by panicking there). With round-robin the children dealt to the
//! blocked worker hang on any number of workers.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::time::Duration;

use spindle_rt::{IoBackend, Runtime};

/// Runs a scope with one child in its destructor and reports what came of it.
struct ScopeOnDrop(mpsc::Sender<Result<u32, String>>);
impl Drop for ScopeOnDrop {
    fn drop(&mut self) {
        let got = catch_unwind(AssertUnwindSafe(|| {
            spindle_rt::scope(|s| s.spawn(|| 41).join().unwrap() + 1)
        }))
        .map_err(|p| {
            p.downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default()
        });
        let _ = self.0.send(got);
    }
}

/// Correct: the scope either works (its children run) or panics with a clear message, as
/// `Runtime::block_on` does there; it must not deadlock the worker.
#[test]
fn a_scope_on_a_worker_thread_outside_coroutines_does_not_deadlock_the_worker() {
    let rt = Runtime::builder()
        .workers(1)
        .io(IoBackend::None)
        .build()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let (go_tx, go_rx) = spindle_sync::mpsc::channel::<()>();
    let h = rt.spawn(move || {
        let _ = go_rx.recv();
        ScopeOnDrop(tx)
    });
    drop(h); // detached: the worker drops the value, as its own code, when the coroutine ends
    go_tx.send(()).unwrap();
    let got = rx.recv_timeout(Duration::from_secs(10));
    // A deadlocked worker would hang the runtime's drop: the test reports instead.
    std::mem::forget(rt);
    let got = got.expect(
        "a scope run by the worker as its own code (a detached value's destructor) \
         deadlocked the worker: its child was queued on the very worker the scope blocked",
    );
    match got {
        Ok(v) => assert_eq!(v, 42),
        Err(message) => assert!(!message.is_empty(), "a clear panic is fine"),
    }
}

/// (See `scope_memory.rs`.) The pruning that keeps a scope's list of children short
/// must keep what the scope still needs: a finished child's panic that no handle took,
/// propagated from `scope` however many children finished after it (past 64 children, spawns
/// prune the list now and then).
#[test]
fn pruning_keeps_a_finished_childs_unjoined_panic() {
    let rt = Runtime::builder()
        .workers(2)
        .io(IoBackend::None)
        .build()
        .unwrap();
    let got = rt.block_on(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            spindle_rt::scope(|s| {
                let failing = s.spawn(|| panic!("the first child failed"));
                while !failing.is_finished() {
                    spindle_rt::sleep(std::time::Duration::from_millis(1));
                }
                drop(failing); // detached: its panic is the scope's to propagate
                for _ in 0..1000 {
                    let _ = s.spawn(|| ()).join();
                }
            })
        }))
    });
    let payload = got.expect_err("the scope propagates its child's panic");
    assert_eq!(
        payload.downcast_ref::<&str>(),
        Some(&"the first child failed")
    );
}
