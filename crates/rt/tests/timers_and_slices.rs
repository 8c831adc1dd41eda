//! Timers of migrated coroutines, time slices.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use spindle_rt::{Builder, IoBackend, Runtime};

/// Sets its flag when dropped.
struct Tracker(Arc<AtomicBool>);
impl Drop for Tracker {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A migratable coroutine's timed park arms a timer on the worker it parks on; when it is
/// woken and resumed on *another* worker, `park_current` cancels the timer only if it runs on
/// the timer's worker (`ctx.index == worker`), so the entry — and the `TaskRef` it holds —
/// stays in the old worker's wheel until its deadline. Each migration leaves one: a loop of
/// timed parks (a read with a 1 h idle timeout, a heartbeat wait) grows the wheels without
/// bound, and the finished task's block, with whatever its join cell still holds (here a
/// detached coroutine's panic payload), is kept alive until the deadline (or the runtime's
/// drop).
///
/// Correct: the timer is cancelled when the park returns, wherever the coroutine resumed
/// (e.g. a cancellation request sent to the owning worker, or a timer entry that does not own
/// a task reference), so the finished task is freed at once.
#[test]
fn a_migrated_coroutines_old_timers_do_not_keep_it_alive() {
    let rt = Runtime::builder()
        .workers(2)
        .io(IoBackend::None)
        .stuck_threshold(None)
        .build()
        .unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    let migrations = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let (cur_tx, cur_rx) = mpsc::channel();
    let (d, m, fin) = (dropped.clone(), migrations.clone(), done.clone());
    // SAFETY: the closure holds nothing thread-bound across its suspensions (thread ids are
    // read afresh after each park).
    let handle = unsafe { Builder::new().migratable() }
        .spawn_on(&rt.handle(), move || {
            cur_tx.send(spindle_rt::current()).unwrap();
            let tracker = Tracker(d);
            for _ in 0..5000 {
                let before = std::thread::current().id();
                let _ = spindle_rt::park_timeout(Duration::from_secs(3600));
                if std::thread::current().id() != before {
                    m.fetch_add(1, Ordering::SeqCst);
                }
                if m.load(Ordering::SeqCst) >= 3 {
                    break;
                }
            }
            fin.store(true, Ordering::SeqCst);
            // Fails with the tracker as its payload: a detached coroutine's failure stays in
            // its join cell until the task block is freed.
            std::panic::panic_any(tracker);
        })
        .unwrap();
    let current = cur_rx.recv().unwrap();
    // Detached: nobody takes the failure, which lives as long as the task block.
    drop(handle);
    // Wake it from outside the runtime, again and again: it runs wherever a worker picks it.
    // Busy coroutines on both workers make the pick vary.
    let stop_hogs = Arc::new(AtomicBool::new(false));
    let hogs: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop_hogs.clone();
            rt.spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let t = Instant::now();
                    while t.elapsed() < Duration::from_micros(200) {
                        std::hint::spin_loop();
                    }
                    spindle_rt::yield_now();
                }
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done.load(Ordering::SeqCst) && Instant::now() < deadline {
        current.unpark();
        std::thread::sleep(Duration::from_micros(300));
    }
    stop_hogs.store(true, Ordering::SeqCst);
    for h in hogs {
        h.join().unwrap();
    }
    let moved = migrations.load(Ordering::SeqCst);
    assert!(done.load(Ordering::SeqCst), "the coroutine did not finish");
    assert!(moved > 0, "no migration happened: inconclusive");
    drop(current);
    // Give the finish and the worker's drop of its reference a moment.
    let t = Instant::now();
    while !dropped.load(Ordering::SeqCst) && t.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        dropped.load(Ordering::SeqCst),
        "after {moved} migrations, the finished coroutine's block (and its failure) is still \
         alive: held by the 1 h timers its earlier parks left on the other worker"
    );
    drop(rt);
    assert!(dropped.load(Ordering::SeqCst));
}

/// `RuntimeBuilder::stuck_threshold(None)` is documented as turning the stuck-coroutine
/// *report* off, but the monitor is also what ends time slices (`end_slice_if_over`): without
/// it a coroutine whose budgeted operations are slow keeps its worker for all 128 of them, not
/// for the 10 ms slice the crate docs (`coop`, "Fairness") promise. Same scenario as
/// `time_and_budget.rs::a_slow_ready_loop_yields_when_its_slice_is_over`, with the report off.
///
/// Correct: slices are ended whether or not stuck coroutines are reported (keep the monitor
/// thread for slices when the threshold is `None`), or the docs say that `None` also turns
/// time slicing off.
#[test]
fn turning_the_stuck_report_off_keeps_the_time_slices() {
    const OPS: u32 = 120;
    let rt = Runtime::builder()
        .workers(1)
        .io(IoBackend::None)
        .stuck_threshold(None)
        .build()
        .unwrap();
    let sibling_ran_at = rt.block_on(|| {
        let sibling_ran = Arc::new(AtomicBool::new(false));
        let s = sibling_ran.clone();
        let sibling = spindle_rt::spawn(move || s.store(true, Ordering::SeqCst));
        let mut ran_at = None;
        for op in 0..OPS {
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(1) {
                std::hint::spin_loop();
            }
            spindle_rt::consume_budget();
            if ran_at.is_none() && sibling_ran.load(Ordering::SeqCst) {
                ran_at = Some(op);
            }
        }
        sibling.join().unwrap();
        ran_at
    });
    assert!(
        sibling_ran_at.is_some_and(|at| at < 100),
        "with stuck_threshold(None) the sibling ran only after {sibling_ran_at:?} operations of \
         1 ms (None: after all {OPS}): no 10 ms slice"
    );
}
