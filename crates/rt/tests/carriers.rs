//! Carriers: a task on the runtime's default stack starts on an idle coroutine of its worker
//! (which ran an earlier task) instead of a new one. What a user can observe: tasks do not take
//! a stack each from the pool, nothing of one task reaches the next on the same carrier
//! (coroutine-locals, a panic, a cancellation), the worker keeps a bounded number of them, and
//! the pool's books add up.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use spindle_rt::{JoinError, Runtime};

/// Stacks the pool handed out so far (every `get`, whichever way it was served).
fn stacks_taken(rt: &Runtime) -> u64 {
    let s = rt.metrics().stacks;
    s.from_thread_cache + s.from_shared_pool + s.mapped
}

fn idle_carriers(rt: &Runtime) -> usize {
    rt.metrics().workers.iter().map(|w| w.idle_carriers).sum()
}

#[test]
fn tasks_run_one_after_another_take_no_stack_each() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    // Warm: the root coroutine and the first child each take a carrier.
    rt.block_on(|| spindle_rt::spawn(|| 1).join().unwrap());
    let before = stacks_taken(&rt);
    let sum = rt.block_on(|| {
        (0..200u64)
            .map(|i| spindle_rt::spawn(move || i).join().unwrap())
            .sum::<u64>()
    });
    assert_eq!(sum, 199 * 200 / 2);
    // 201 coroutines (the root and 200 children), two alive at a time: the two carriers of the
    // warm-up ran them all.
    assert_eq!(stacks_taken(&rt), before, "{:?}", rt.metrics().stacks);
    assert_eq!(idle_carriers(&rt), 2);
}

/// Spawns `n` tasks that are all alive at once (each parks until all have started), so each
/// needs a carrier of its own, and joins them.
fn burst(n: usize) {
    let started = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let started = started.clone();
            spindle_rt::spawn(move || {
                started.fetch_add(1, Ordering::SeqCst);
                while started.load(Ordering::SeqCst) < n {
                    spindle_rt::sleep(Duration::from_millis(1));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn the_pools_books_count_idle_carriers_as_stacks_in_use() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    rt.block_on(|| burst(300));
    let m = rt.metrics();
    // Every task of the burst ended with its carrier kept (the cap is the pool's thread cache).
    assert!(idle_carriers(&rt) >= 300, "{m:?}");
    // Nothing runs now: every stack handed out and not returned is an idle carrier's.
    assert_eq!(m.stacks.outstanding(), idle_carriers(&rt) as u64, "{m:?}");
}

#[test]
fn the_next_burst_reuses_the_idle_carriers() {
    // One worker: carriers are per worker, so on two the next burst takes as many new stacks
    // as one worker runs more of its tasks than of the last burst's — anything from none to
    // most of them, as the stealing falls (a bound of half failed 2 runs in 100).
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.block_on(|| burst(300));
    let before = stacks_taken(&rt);
    rt.block_on(|| burst(300));
    let taken = stacks_taken(&rt) - before;
    assert_eq!(taken, 0, "{:?}", rt.metrics().stacks);
}

/// A runtime of one worker whose stack pool is `pool`.
fn one_worker_with(pool: spindle_stack::PoolConfig) -> Runtime {
    Runtime::builder()
        .workers(1)
        .stack_pool(pool)
        .build()
        .unwrap()
}

#[test]
fn a_worker_keeps_no_more_carriers_than_its_pool_caches_stacks() {
    let rt = one_worker_with(spindle_stack::PoolConfig {
        thread_cache: 8,
        ..Default::default()
    });
    rt.block_on(|| burst(100));
    let m = rt.metrics();
    assert_eq!(idle_carriers(&rt), 8, "{m:?}");
    assert_eq!(m.stacks.outstanding(), 8, "{m:?}");
}

#[test]
fn a_carrier_gives_its_stack_back_to_the_pool_every_trim_every_tasks() {
    // The pool trims a stack's deep pages when it recycles it; a carrier keeps its stack across
    // tasks, so it retires after `trim_every` of them and its stack is recycled.
    let rt = one_worker_with(spindle_stack::PoolConfig {
        trim_every: 4,
        ..Default::default()
    });
    rt.block_on(|| spindle_rt::spawn(|| ()).join().unwrap());
    let before = rt.metrics().stacks.returned;
    rt.block_on(|| {
        for _ in 0..100 {
            spindle_rt::spawn(|| ()).join().unwrap();
        }
    });
    // 100 children on one carrier at a time (a new one every 4 tasks) and the root: about
    // 26 returns; without the retirement none, with a coroutine per task 101.
    let returned = rt.metrics().stacks.returned - before;
    assert!((20..=30).contains(&returned), "{returned} stacks returned");
}

spindle_rt::coroutine_local! {
    static VISITS: Cell<u32> = Cell::new(0);
}

#[test]
fn a_coroutine_local_does_not_reach_the_next_task_on_the_carrier() {
    struct CountsDrops(Arc<AtomicUsize>);
    impl Drop for CountsDrops {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    spindle_rt::coroutine_local! {
        static GUARD: Cell<Option<CountsDrops>> = Cell::new(None);
    }
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = Runtime::builder().workers(1).build().unwrap();
    let seen = rt.block_on(|| {
        (0..20)
            .map(|_| {
                let drops = drops.clone();
                spindle_rt::spawn(move || {
                    let seen = VISITS.with(|v| {
                        let seen = v.get();
                        v.set(seen + 1);
                        seen
                    });
                    GUARD.with(|g| g.set(Some(CountsDrops(drops))));
                    seen
                })
                .join()
                .unwrap()
            })
            .collect::<Vec<_>>()
    });
    assert_eq!(seen, vec![0; 20], "each task starts with a fresh value");
    assert_eq!(
        drops.load(Ordering::SeqCst),
        20,
        "each task's value dropped at its end"
    );
}

#[test]
fn a_panic_or_a_cancel_leaves_the_carrier_to_the_next_task() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.block_on(|| spindle_rt::spawn(|| ()).join().unwrap());
    let before = stacks_taken(&rt);
    let outcomes = rt.block_on(|| {
        let mut outcomes = Vec::new();
        for round in 0..10 {
            let panicked = spindle_rt::spawn(move || {
                if round >= 0 {
                    std::panic::resume_unwind(Box::new("expected"));
                }
            })
            .join();
            outcomes.push(matches!(panicked, Err(JoinError::Panicked(_))));
            let parked = spindle_rt::spawn(|| {
                loop {
                    spindle_rt::park();
                }
            });
            spindle_rt::yield_now(); // let it start and park
            parked.cancel();
            outcomes.push(matches!(parked.join(), Err(JoinError::Cancelled)));
            outcomes.push(spindle_rt::spawn(move || round).join().unwrap() == round);
        }
        outcomes
    });
    assert!(outcomes.iter().all(|&ok| ok), "{outcomes:?}");
    // The root's carrier and one for the children (the cancelled one's included), reused.
    assert_eq!(stacks_taken(&rt), before, "{:?}", rt.metrics().stacks);
}

#[test]
fn a_migratable_task_takes_its_carrier_along() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let total = rt.block_on(|| {
        let handles: Vec<_> = (0..64)
            .map(|i| {
                // SAFETY: the closure holds nothing thread-bound across its yields.
                unsafe { spindle_rt::Builder::new().migratable() }
                    .spawn(move || {
                        for _ in 0..50 {
                            spindle_rt::yield_now();
                        }
                        i
                    })
                    .unwrap()
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
    });
    assert_eq!(total, 63 * 64 / 2);
    let m = rt.metrics();
    assert_eq!(m.stacks.outstanding(), idle_carriers(&rt) as u64, "{m:?}");
}
