//! Fairness of the work-stealing policy's run-next slot as the runtime drives it.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::{Duration, Instant};

use spindle_rt::{Policy, Runtime};

/// Two coroutines that hand the worker to each other by a plain wake-up and park (no budgeted
/// operation: a park that suspends costs no budget, nor does a wake-up) run from the run-next
/// slot one after the other, each inheriting the slice. The slice must end all the same
/// (`Popped::inherit_slice`: "two tasks that keep waking each other cannot monopolise a
/// worker"): a third coroutine queued on the same (only) worker runs soon, not only after the
/// pair stops.
#[test]
fn a_pair_waking_each_other_does_not_starve_the_worker_s_queue() {
    let rt = Runtime::builder()
        .workers(1)
        .policy(Policy::WorkStealing)
        .build()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    let third_ran = Arc::new(AtomicBool::new(false));
    let t = third_ran.clone();
    let handoffs = rt.block_on(move || {
        let wakers: Arc<Mutex<[Option<Waker>; 2]>> = Arc::new(Mutex::new([None, None]));
        let done = {
            let t = t.clone();
            move || t.load(Ordering::SeqCst) || Instant::now() >= deadline
        };
        // Each side: publish its waker, then wake the other and park, until done.
        let side = move |me: usize, wakers: Arc<Mutex<[Option<Waker>; 2]>>| {
            wakers.lock().unwrap()[me] = Some(spindle_park::waker());
            let mut handoffs = 0u64;
            loop {
                let other = wakers.lock().unwrap()[1 - me].clone();
                if let Some(other) = other {
                    other.wake();
                }
                if done() {
                    return handoffs;
                }
                handoffs += 1;
                spindle_rt::park();
            }
        };
        // The third coroutine: queued on this worker (spawned here, then kicked out of the
        // run-next slot by the partner's spawn).
        let third = spindle_rt::spawn(move || t.store(true, Ordering::SeqCst));
        let w = wakers.clone();
        let side2 = side.clone();
        let partner = spindle_rt::spawn(move || side2(1, w));
        let mine = side(0, wakers);
        let theirs = partner.join().unwrap();
        third.join().unwrap();
        mine + theirs
    });
    assert!(
        third_ran.load(Ordering::SeqCst) && Instant::now() < deadline,
        "the third coroutine waited for the whole run of the pair ({handoffs} hand-offs)"
    );
}
