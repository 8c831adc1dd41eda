//! Stack pools: recycling without system calls, caps, thread caches, trimming, shrinking.

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Barrier, Mutex};

use proptest::prelude::*;
use spindle_stack::{PoolConfig, PooledStack, Stack, StackPool};

const KIB: usize = 1024;

/// Loop counts of the longer tests: Miri is ~1000× slower, so it gets fewer rounds.
const ROUNDS: usize = if cfg!(miri) { 100 } else { 10_000 };
const RANDOM_STEPS: usize = if cfg!(miri) { 150 } else { 3_000 };

fn pool(config: PoolConfig) -> StackPool {
    StackPool::new(config).unwrap()
}

/// Two pools of different stack sizes (16 and 32 KiB) that keep `cache_a` and `cache_b`
/// stacks per thread, for the tests of stacks from several pools on one thread.
fn two_sized_pools(cache_a: usize, cache_b: usize) -> (StackPool, StackPool) {
    let sized = |stack_size, thread_cache| {
        pool(PoolConfig {
            stack_size,
            thread_cache,
            max_pooled: 8,
            ..PoolConfig::default()
        })
    };
    (sized(16 * KIB, cache_a), sized(32 * KIB, cache_b))
}

fn small_config() -> PoolConfig {
    PoolConfig {
        stack_size: 64 * KIB,
        ..PoolConfig::default()
    }
}

fn top_of(stack: &PooledStack) -> usize {
    stack.top().as_ptr() as usize
}

#[test]
fn pool_handles_are_clone_send_sync() {
    fn assert_traits<T: Clone + Send + Sync>() {}
    fn assert_send_sync<T: Send + Sync>() {}
    assert_traits::<StackPool>();
    assert_send_sync::<PooledStack>();
}

#[test]
fn steady_state_get_and_drop_map_nothing() {
    let pool = pool(small_config());
    // Warm-up: a few stacks alive at once, like a scheduler with a few coroutines.
    let warm: Vec<_> = (0..4).map(|_| pool.get().unwrap()).collect();
    drop(warm);
    let before = pool.stats();
    assert_eq!(before.mapped, 4);
    for _ in 0..ROUNDS {
        let a = pool.get().unwrap();
        let b = pool.get().unwrap();
        drop(a);
        drop(b);
    }
    let after = pool.stats();
    assert_eq!(
        after.mapped, before.mapped,
        "no new mappings in steady state"
    );
    assert_eq!(after.unmapped, 0);
    assert_eq!(
        after.from_thread_cache - before.from_thread_cache,
        2 * ROUNDS as u64
    );
    assert_eq!(after.returned - before.returned, 2 * ROUNDS as u64);
    assert_eq!(after.thread_cached, 4);
    pool.flush_thread_cache();
}

#[test]
fn a_thread_cache_flushes_to_the_shared_pool_when_the_thread_exits() {
    let pool = pool(small_config());
    let worker_pool = pool.clone();
    let tops: HashSet<usize> = std::thread::spawn(move || {
        let stacks: Vec<_> = (0..3).map(|_| worker_pool.get().unwrap()).collect();
        let tops = stacks.iter().map(top_of).collect();
        drop(stacks);
        assert_eq!(worker_pool.stats().thread_cached, 3);
        tops
    })
    .join()
    .unwrap();
    let stats = pool.stats();
    assert_eq!(stats.thread_cached, 0);
    assert_eq!(stats.shared_pooled, 3);
    assert_eq!(stats.mapped, 3);
    assert_eq!(stats.returned, 3, "the exited thread's counters are kept");
    // This thread has an empty cache: it is served from the shared pool.
    let stack = pool.get().unwrap();
    assert!(tops.contains(&top_of(&stack)));
    assert_eq!(pool.stats().from_shared_pool, 1);
}

#[test]
fn live_stacks_are_never_handed_out_twice() {
    let pool = pool(PoolConfig {
        thread_cache: 4,
        max_pooled: 8,
        ..small_config()
    });
    let live = Arc::new(Mutex::new(HashSet::new()));
    let barrier = Arc::new(Barrier::new(4));
    let threads: Vec<_> = (0..4)
        .map(|seed| {
            let (pool, live, barrier) = (pool.clone(), Arc::clone(&live), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                let mut held: Vec<PooledStack> = Vec::new();
                let mut state: u64 = seed * 7919 + 1;
                for _ in 0..RANDOM_STEPS {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1);
                    if held.len() < 6 && !(state >> 33).is_multiple_of(3) {
                        let stack = pool.get().unwrap();
                        assert!(
                            live.lock().unwrap().insert(top_of(&stack)),
                            "handed out twice"
                        );
                        held.push(stack);
                    } else if !held.is_empty() {
                        let stack = held.swap_remove((state >> 40) as usize % held.len());
                        live.lock().unwrap().remove(&top_of(&stack));
                        drop(stack);
                    }
                }
                for stack in held {
                    live.lock().unwrap().remove(&top_of(&stack));
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let stats = pool.stats();
    assert_eq!(stats.outstanding(), 0, "{stats:?}");
    assert!(stats.shared_pooled <= 8);
}

#[test]
fn caps_are_respected_and_the_excess_is_unmapped() {
    let pool = pool(PoolConfig {
        thread_cache: 2,
        max_pooled: 3,
        ..small_config()
    });
    let stacks: Vec<_> = (0..10).map(|_| pool.get().unwrap()).collect();
    drop(stacks);
    let stats = pool.stats();
    assert_eq!(stats.mapped, 10);
    assert_eq!(stats.thread_cached, 2);
    assert_eq!(stats.shared_pooled, 3);
    assert_eq!(stats.unmapped, 5);
    assert_eq!(stats.outstanding(), 0);
    pool.flush_thread_cache();
    let stats = pool.stats();
    assert_eq!(
        (stats.thread_cached, stats.shared_pooled, stats.unmapped),
        (0, 3, 7)
    );
}

#[test]
fn shrinking_unmaps_what_a_spike_left_and_keeps_the_rest_usable() {
    let pool = pool(PoolConfig {
        thread_cache: 6,
        max_pooled: 6,
        ..small_config()
    });
    // A spike: 12 stacks at once, then all back (6 to this thread's cache, 6 shared).
    let stacks: Vec<_> = (0..12).map(|_| pool.get().unwrap()).collect();
    drop(stacks);
    assert_eq!(pool.thread_cached(), 6);
    assert_eq!(pool.shrink(2, 1), 4 + 5);
    let stats = pool.stats();
    assert_eq!(
        (stats.thread_cached, stats.shared_pooled, stats.unmapped),
        (2, 1, 9)
    );
    // Shrinking to more than is held does nothing.
    assert_eq!(pool.shrink(10, 10), 0);
    // What is kept is handed out again before anything new is mapped.
    let again: Vec<_> = (0..3).map(|_| pool.get().unwrap()).collect();
    assert_eq!(pool.stats().mapped, 12);
    assert_eq!(pool.stats().outstanding(), 3);
    drop(again);
    // Another thread's cache is its own: shrinking here leaves it alone.
    std::thread::scope(|s| {
        s.spawn(|| {
            drop(pool.get().unwrap());
            assert_eq!(pool.thread_cached(), 1);
            std::thread::scope(|s2| {
                s2.spawn(|| assert_eq!(pool.shrink(0, usize::MAX), 0));
            });
            assert_eq!(pool.thread_cached(), 1);
        });
    });
}

#[test]
fn several_pools_keep_their_stacks_apart() {
    let small = pool(PoolConfig {
        stack_size: 16 * KIB,
        ..PoolConfig::default()
    });
    let large = pool(PoolConfig {
        stack_size: 128 * KIB,
        ..PoolConfig::default()
    });
    for _ in 0..ROUNDS.min(100) {
        let (a, b) = (small.get().unwrap(), large.get().unwrap());
        assert_eq!(a.usable_size(), 16 * KIB);
        assert_eq!(b.usable_size(), 128 * KIB);
    }
    assert_eq!(small.stats().mapped, 1);
    assert_eq!(large.stats().mapped, 1);
    small.flush_thread_cache();
    large.flush_thread_cache();
}

/// The stack returned last is kept in a per-thread slot in front of the per-pool caches:
/// pools that take turns with it still get only their own stacks, the counts and caps stay
/// exact, and a pool that is dropped while another pool's stack sits in the slot is freed.
#[test]
fn pools_taking_turns_with_the_hot_slot_keep_counts_and_caps() {
    let (a, b) = two_sized_pools(2, 1);
    for _ in 0..ROUNDS.min(200) {
        drop(a.get().unwrap());
        let from_b = b.get().unwrap();
        assert_eq!(from_b.usable_size(), 32 * KIB);
        drop(from_b);
        let from_a = a.get().unwrap();
        assert_eq!(from_a.usable_size(), 16 * KIB);
        drop(from_a);
    }
    assert_eq!((a.stats().mapped, b.stats().mapped), (1, 1));
    assert_eq!((a.thread_cached(), b.thread_cached()), (1, 1));
    // Three of `a` back: two fit its cache of two, the third goes to the shared pool.
    let three: Vec<_> = (0..3).map(|_| a.get().unwrap()).collect();
    drop(three);
    let stats = a.stats();
    assert_eq!(
        (
            stats.thread_cached,
            stats.shared_pooled,
            stats.outstanding()
        ),
        (2, 1, 0),
        "{stats:?}"
    );
    assert_eq!(a.thread_cached(), 2);
    // Two of `b` back: one fits its cache of one.
    let two: Vec<_> = (0..2).map(|_| b.get().unwrap()).collect();
    drop(two);
    let stats = b.stats();
    assert_eq!(
        (
            stats.thread_cached,
            stats.shared_pooled,
            stats.outstanding()
        ),
        (1, 1, 0),
        "{stats:?}"
    );
    assert_eq!(a.shrink(0, 0), 3);
    assert_eq!(a.thread_cached(), 0);
    a.flush_thread_cache();
    b.flush_thread_cache();
    assert_eq!(b.thread_cached(), 0);
    assert_eq!(b.stats().shared_pooled, 2);
    // A thread that exits with a stack in its slot gives it to the shared pool.
    let worker_pool = b.clone();
    std::thread::spawn(move || drop(worker_pool.get().unwrap()))
        .join()
        .unwrap();
    let stats = b.stats();
    assert_eq!(
        (
            stats.thread_cached,
            stats.shared_pooled,
            stats.outstanding()
        ),
        (0, 2, 0),
        "{stats:?}"
    );
}

/// A stack returned while the hot slot is free but its pool's cache already holds its cap
/// goes to the shared pool: the slot does not add one more to the thread's cache.
#[test]
fn the_hot_slot_does_not_exceed_the_thread_cache_cap() {
    let (a, b) = two_sized_pools(1, 1);
    // The slot holds one of `b`'s stacks, so `a`'s first return fills `a`'s cache of one.
    drop(b.get().unwrap());
    let (first, second) = (a.get().unwrap(), a.get().unwrap());
    drop(first);
    assert_eq!(a.thread_cached(), 1);
    // The slot is free again; `a`'s cache is full, so the next return is not cached.
    let from_b = b.get().unwrap();
    drop(second);
    let stats = a.stats();
    assert_eq!(
        (stats.thread_cached, stats.shared_pooled, a.thread_cached()),
        (1, 1, 1),
        "{stats:?}"
    );
    drop(from_b);
    assert_eq!(b.thread_cached(), 1);
}

/// Touches every page of a stack, recycles it `trim_every` times and checks that the
/// deep pages are given back while the top `keep_resident` bytes stay.
#[cfg(unix)]
#[test]
fn periodic_trimming_gives_deep_pages_back() {
    let page = spindle_stack::page_size();
    let trim_every = 4;
    let pool = pool(PoolConfig {
        stack_size: 256 * KIB,
        keep_resident: 16 * KIB,
        trim_every,
        thread_cache: 4,
        ..PoolConfig::default()
    });
    let stack = pool.get().unwrap();
    let (top, limit, size) = (
        stack.top().as_ptr(),
        stack.limit().as_ptr(),
        stack.usable_size(),
    );
    // SAFETY: the stack's own memory, unused by anything else.
    unsafe { common::touch_below(top, size) };
    assert!(common::resident_pages(limit, size).iter().all(|&r| r));
    drop(stack);
    for recycle in 2..=trim_every {
        let stack = pool.get().unwrap();
        assert_eq!(stack.top().as_ptr(), top, "LIFO: the same stack comes back");
        let resident = common::resident_pages(limit, size);
        assert!(
            resident.iter().all(|&r| r),
            "deep pages stay until the trim"
        );
        drop(stack);
        assert_eq!(pool.stats().trims, u64::from(recycle == trim_every));
    }
    let resident = common::resident_pages(limit, size);
    let kept_pages = 16 * KIB / page;
    let (deep, near_top) = resident.split_at(resident.len() - kept_pages);
    assert!(deep.iter().all(|&r| !r), "deep pages were given back");
    assert!(
        near_top.iter().all(|&r| r),
        "the top keep_resident bytes stay resident"
    );
    pool.flush_thread_cache();
}

#[cfg(unix)]
#[test]
fn moving_to_the_shared_pool_trims() {
    let pool = pool(PoolConfig {
        stack_size: 128 * KIB,
        keep_resident: 8 * KIB,
        thread_cache: 0,
        ..PoolConfig::default()
    });
    let stack = pool.get().unwrap();
    let (top, limit, size) = (
        stack.top().as_ptr(),
        stack.limit().as_ptr(),
        stack.usable_size(),
    );
    // SAFETY: the stack's own memory.
    unsafe { common::touch_below(top, size) };
    drop(stack);
    assert_eq!(pool.stats().shared_pooled, 1);
    assert_eq!(pool.stats().trims, 1);
    let resident = common::resident_pages(limit, size);
    let kept = 8 * KIB / spindle_stack::page_size();
    assert!(resident[..resident.len() - kept].iter().all(|&r| !r));
}

#[cfg(all(unix, feature = "growable"))]
#[cfg_attr(
    miri,
    ignore = "growth happens in the SIGSEGV handler, which Miri cannot run (its stacks are \
              heap memory, committed in full)"
)]
#[test]
fn growable_pools_shrink_grown_stacks_on_recycle() {
    if common::skipped_under_emulation(
        "growable_pools_shrink_grown_stacks_on_recycle",
        "`mincore` on stack mappings (it answers ENOMEM)",
    ) {
        return;
    }
    let pool = pool(PoolConfig {
        stack_size: 1024 * KIB,
        kind: spindle_stack::PoolKind::Growable { initial: 16 * KIB },
        ..PoolConfig::default()
    });
    if spindle_stack::running_on_valgrind() {
        // Committed in full up front: nothing grows, so nothing is shrunk.
        let stack = pool.get().unwrap();
        assert_eq!(stack.committed(), 1024 * KIB);
        // SAFETY: the stack's own memory.
        unsafe { common::touch_below(stack.top().as_ptr(), 512 * KIB) };
        drop(stack);
        assert_eq!(pool.stats().shrinks, 0);
        pool.flush_thread_cache();
        return;
    }
    let stack = pool.get().unwrap();
    let top = stack.top().as_ptr();
    assert_eq!(stack.committed(), 16 * KIB);
    // SAFETY: inside the reservation; the handler grows it.
    unsafe { common::touch_below(top, 512 * KIB) };
    assert!(stack.committed() >= 512 * KIB);
    drop(stack);
    assert_eq!(pool.stats().shrinks, 1);

    let stack = pool.get().unwrap();
    assert_eq!(stack.top().as_ptr(), top);
    assert_eq!(stack.committed(), 16 * KIB, "shrunk back to initial");
    let resident = common::resident_pages(stack.limit().as_ptr(), stack.usable_size() - 16 * KIB);
    assert!(
        resident.iter().all(|&r| !r),
        "the grown part was given back"
    );
    // It can grow again.
    // SAFETY: as above.
    unsafe { common::touch_below(top, 256 * KIB) };
    assert!(stack.committed() >= 256 * KIB);
    drop(stack);
    // A stack that did not grow is not shrunk.
    let stack = pool.get().unwrap();
    drop(stack);
    assert_eq!(pool.stats().shrinks, 2);
    pool.flush_thread_cache();
}

#[cfg(unix)]
#[cfg_attr(
    miri,
    ignore = "a guard-page fault in a child process: Miri cannot spawn processes or run \
              signal handlers"
)]
#[test]
fn owners_are_forgotten_when_a_stack_is_returned() {
    let output = common::crash_test("owners_are_forgotten_when_a_stack_is_returned", || {
        let pool = StackPool::new(PoolConfig {
            stack_size: 32 * KIB,
            ..PoolConfig::default()
        })
        .unwrap();
        let stack = pool.get().unwrap();
        stack.set_owner(spindle_stack::Owner::named(1, "previous"));
        drop(stack);
        let stack = pool.get().unwrap();
        // SAFETY: deliberately not: the guard page.
        unsafe { stack.limit().as_ptr().sub(1).write_volatile(1) };
    });
    output.assert_overflow_abort(&["an unowned stack overflowed its 32 KiB pooled fixed stack"]);
}

#[cfg(unix)]
#[cfg_attr(
    miri,
    ignore = "a guard-page fault in a child process: Miri cannot spawn processes or run \
              signal handlers"
)]
#[test]
fn pooled_stack_overflow_names_the_owner() {
    let output = common::crash_test("pooled_stack_overflow_names_the_owner", || {
        let stack = StackPool::global().get().unwrap();
        stack.set_owner(spindle_stack::Owner::named(5, "pooled-worker"));
        // SAFETY: deliberately not: the guard page.
        unsafe { stack.limit().as_ptr().sub(1).write_volatile(1) };
    });
    output.assert_overflow_abort(&[
        "coroutine 'pooled-worker' (#5) overflowed its 256 KiB pooled fixed stack (guard 4 KiB)",
    ]);
}

#[derive(Clone, Debug)]
enum Op {
    Get,
    Drop(usize),
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![4 => Just(Op::Get), 4 => any::<usize>().prop_map(Op::Drop), 1 => Just(Op::Flush)]
}

/// What the pool should be doing, counted by hand.
#[derive(Debug, Default, PartialEq, Eq)]
struct Model {
    mapped: u64,
    unmapped: u64,
    from_thread_cache: u64,
    from_shared_pool: u64,
    returned: u64,
    thread_cached: u64,
    shared_pooled: u64,
}

proptest! {
    // Under Miri each case costs seconds: a handful of cases (the full run is native).
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 4 } else { 64 }))]

    #[test]
    fn random_get_drop_sequences_match_a_sequential_model(
        thread_cache in 0usize..4,
        max_pooled in 0usize..4,
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        let pool = pool(PoolConfig {
            stack_size: 16 * KIB,
            thread_cache,
            max_pooled,
            ..PoolConfig::default()
        });
        let mut live: Vec<PooledStack> = Vec::new();
        let mut model = Model::default();
        for op in ops {
            match op {
                Op::Get => {
                    live.push(pool.get().unwrap());
                    if model.thread_cached > 0 {
                        model.thread_cached -= 1;
                        model.from_thread_cache += 1;
                    } else if model.shared_pooled > 0 {
                        model.shared_pooled -= 1;
                        model.from_shared_pool += 1;
                    } else {
                        model.mapped += 1;
                    }
                }
                Op::Drop(index) => {
                    if live.is_empty() {
                        continue;
                    }
                    drop(live.swap_remove(index % live.len()));
                    model.returned += 1;
                    if model.thread_cached < thread_cache as u64 {
                        model.thread_cached += 1;
                    } else if model.shared_pooled < max_pooled as u64 {
                        model.shared_pooled += 1;
                    } else {
                        model.unmapped += 1;
                    }
                }
                Op::Flush => {
                    pool.flush_thread_cache();
                    while model.thread_cached > 0 {
                        model.thread_cached -= 1;
                        if model.shared_pooled < max_pooled as u64 {
                            model.shared_pooled += 1;
                        } else {
                            model.unmapped += 1;
                        }
                    }
                }
            }
            let stats = pool.stats();
            let actual = Model {
                mapped: stats.mapped,
                unmapped: stats.unmapped,
                from_thread_cache: stats.from_thread_cache,
                from_shared_pool: stats.from_shared_pool,
                returned: stats.returned,
                thread_cached: stats.thread_cached,
                shared_pooled: stats.shared_pooled,
            };
            prop_assert_eq!(&actual, &model);
            prop_assert_eq!(
                stats.mapped - stats.unmapped,
                live.len() as u64 + stats.thread_cached + stats.shared_pooled
            );
            let tops: HashSet<usize> = live.iter().map(top_of).collect();
            prop_assert_eq!(tops.len(), live.len(), "a live stack was handed out twice");
        }
        drop(live);
        pool.flush_thread_cache();
    }
}
