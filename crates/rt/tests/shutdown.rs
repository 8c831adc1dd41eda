//! Shutdown.
//!
//! * Dropping the runtime on one of its own blocking-pool threads (inside
//!   `spindle_rt::blocking`, the obvious way out of the "dropped by one of its own coroutines"
//!   panic, whose message says to drop it outside the runtime) waits for the coroutine that
//!   waits for that very job: a silent deadlock, where the same misuse from a coroutine panics
//!   with a clear message.
//! * A `Handle` that outlives the runtime keeps every stack the runtime pooled mapped (the
//!   shared state, and its stack pool, live as long as any handle), although nothing can ever
//!   run on them again: the runtime refuses spawns once it is shut down.

use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use spindle_rt::{IoBackend, Runtime};

/// Correct: `Runtime::shutdown` recognises that it runs on one of the runtime's own
/// blocking-pool threads (a thread-local set by the pool's threads, naming their runtime) and
/// panics as it does in one of its own coroutines — the coroutine that waits for this job can
/// never finish, so the shutdown could never end.
#[test]
fn dropping_the_runtime_inside_its_own_blocking_job_does_not_hang() {
    let rt = Runtime::builder()
        .workers(1)
        .io(IoBackend::None)
        .build()
        .unwrap();
    let handle = rt.handle();
    let slot = Arc::new(Mutex::new(Some(rt)));
    let s = slot.clone();
    let (tx, rx) = mpsc::channel::<Result<(), String>>();
    let h = handle.spawn(move || {
        spindle_rt::blocking(move || {
            let rt = s.lock().unwrap().take();
            let r =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(rt))).map_err(|p| {
                    p.downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| p.downcast_ref::<String>().cloned())
                        .unwrap_or_default()
                });
            let _ = tx.send(r);
        });
    });
    drop(h);
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(r) => eprintln!("the drop ended: {r:?}"),
        Err(_) => panic!(
            "dropping the runtime on its own blocking-pool thread deadlocked: shutdown waits \
             for the coroutine that waits for this job"
        ),
    }
}

/// Correct: once the workers are joined no coroutine can run again (spawns are refused), so
/// the shutdown unmaps the pooled stacks (e.g. `shared.stacks.shrink(0, 0)` after joining the
/// workers) instead of leaving them to the last `Handle`'s drop.
#[test]
fn a_handle_that_outlives_the_runtime_keeps_no_stacks_mapped() {
    let rt = Runtime::builder()
        .workers(2)
        .io(IoBackend::None)
        .build()
        .unwrap();
    let handle = rt.handle();
    rt.block_on(|| {
        let hs: Vec<_> = (0..300)
            .map(|_| spindle_rt::spawn(|| spindle_rt::sleep(Duration::from_millis(20))))
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    });
    let before = handle.metrics().stacks;
    drop(rt);
    let after = handle.metrics().stacks;
    let still_mapped = after.mapped - after.unmapped;
    assert!(
        handle.spawn_fallible_is_refused(),
        "the runtime refuses spawns after its shutdown"
    );
    assert_eq!(
        still_mapped, 0,
        "after the runtime was dropped, {still_mapped} of its stacks stay mapped for as long \
         as a Handle lives (before the drop: {} mapped, {} unmapped; after: {after:?})",
        before.mapped, before.unmapped
    );
}

/// `Builder::spawn_on` of a closed runtime fails.
trait Refused {
    fn spawn_fallible_is_refused(&self) -> bool;
}
impl Refused for spindle_rt::Handle {
    fn spawn_fallible_is_refused(&self) -> bool {
        spindle_rt::Builder::new().spawn_on(self, || ()).is_err()
    }
}
