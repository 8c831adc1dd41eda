//! `Policy::yield_and_pop(w, task)` against its definition: `push(Some(w), task,
//! Reason::Yielded)` followed by `pop(w)`.
//!
//! Each policy runs twice side by side on the same random operations (pushes of every kind,
//! pops, drains, yields; worker indices out of range now and then; worker 0 bound to the
//! test thread or not). One twin does each yield with `yield_and_pop`, the other with the push
//! and the pop; every answer (the `Notify`, the task popped and whether it inherits the slice,
//! `has_work` and `stats` of every worker, what a drain returns) must be the same.
#![cfg(not(loom))]
#![cfg(all(feature = "fifo", feature = "round-robin", feature = "work-stealing"))]

use proptest::prelude::*;
mod common;

use common::{Job, here, home, reason};
use spindle_sched::{Fifo, Policy, Reason, RoundRobin, WorkStealing};

#[derive(Clone, Debug)]
enum Op {
    Push {
        here: Option<usize>,
        home: Option<usize>,
        reason: Reason,
    },
    Pop(usize),
    Yield {
        w: usize,
        home: Option<usize>,
    },
    Drain,
}

fn ops(n: usize) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        8 => (here(n), home(n), reason()).prop_map(|(here, home, reason)| Op::Push { here, home, reason }),
        6 => (0..n + 1).prop_map(Op::Pop),
        10 => (0..n + 1, home(n)).prop_map(|(w, home)| Op::Yield { w, home }),
        1 => Just(Op::Drain),
    ];
    proptest::collection::vec(op, 0..400)
}

fn case() -> impl Strategy<Value = (usize, bool, Vec<Op>)> {
    (1..=3usize).prop_flat_map(|n| (Just(n), any::<bool>(), ops(n)))
}

fn ids(mut jobs: Vec<Job>) -> Vec<usize> {
    jobs.sort_by_key(|j| j.id);
    jobs.into_iter().map(|j| j.id).collect()
}

/// Runs `ops` on two instances made by `make`; see the module docs.
fn twins<P: Policy<Job>>(
    make: impl Fn() -> P,
    n: usize,
    bind: bool,
    ops: Vec<Op>,
) -> Result<(), TestCaseError> {
    let fused = make();
    let split = make();
    if bind {
        // The bound fast path for worker 0, the try-lock path for the others.
        prop_assert_eq!(fused.bind_worker(0), split.bind_worker(0));
    }
    for (id, op) in ops.into_iter().enumerate() {
        match op {
            Op::Push { here, home, reason } => {
                let a = fused.push(here, Job { id, home }, reason);
                let b = split.push(here, Job { id, home }, reason);
                prop_assert_eq!(a, b, "push #{}", id);
            }
            Op::Pop(w) => {
                prop_assert_eq!(fused.pop(w), split.pop(w), "pop({}) #{}", w, id);
            }
            Op::Yield { w, home } => {
                let (notify, next) = fused.yield_and_pop(w, Job { id, home });
                let pushed = split.push(Some(w), Job { id, home }, Reason::Yielded);
                prop_assert_eq!(notify, pushed, "yield_and_pop({}) #{}: notify", w, id);
                prop_assert_eq!(next, split.pop(w), "yield_and_pop({}) #{}: next", w, id);
            }
            Op::Drain => {
                // A drain waits for bound workers: unbind around it, as a runtime's shutdown
                // does (its workers have exited).
                fused.unbind_worker(0);
                split.unbind_worker(0);
                prop_assert_eq!(ids(fused.drain()), ids(split.drain()));
                if bind {
                    prop_assert_eq!(fused.bind_worker(0), split.bind_worker(0));
                }
            }
        }
        for w in 0..n {
            prop_assert_eq!(fused.has_work(w), split.has_work(w), "has_work({})", w);
            prop_assert_eq!(fused.stats(w), split.stats(w), "stats({})", w);
        }
    }
    fused.unbind_worker(0);
    split.unbind_worker(0);
    prop_assert_eq!(ids(fused.drain()), ids(split.drain()));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]

    #[test]
    fn fifo_yield_and_pop_is_push_then_pop((n, bind, ops) in case()) {
        twins(|| Fifo::new(n).unwrap(), n, bind, ops)?;
    }

    #[test]
    fn round_robin_yield_and_pop_is_push_then_pop((n, bind, ops) in case()) {
        twins(|| RoundRobin::new(n).unwrap(), n, bind, ops)?;
    }

    #[test]
    fn work_stealing_yield_and_pop_is_push_then_pop((n, bind, ops) in case()) {
        twins(|| WorkStealing::new(n).unwrap(), n, bind, ops)?;
    }
}

/// The cases the fused round-robin path must get right, spelled out: the inbox (pushes from
/// other threads) goes behind the private queue and before the yielding task; a task alone
/// comes straight back; a full ring does not grow.
#[test]
fn round_robin_yield_keeps_the_order_of_arrival() {
    let rr = RoundRobin::new(1).unwrap();
    assert!(rr.bind_worker(0));
    let job = |id| Job { id, home: None };
    // Alone: the yielding task runs again.
    let (_, next) = rr.yield_and_pop(0, job(1));
    assert_eq!(next.map(|p| p.task.id), Some(1));
    // Private queue [2, 3], then 4 from another thread (the inbox).
    rr.push(Some(0), job(2), Reason::Woken);
    rr.push(Some(0), job(3), Reason::Woken);
    std::thread::scope(|s| {
        s.spawn(|| rr.push(None, job(4), Reason::Woken));
    });
    let mut order = Vec::new();
    let mut running = 1;
    for _ in 0..8 {
        let (_, next) = rr.yield_and_pop(0, job(running));
        running = next.unwrap().task.id;
        order.push(running);
    }
    assert_eq!(order, [2, 3, 4, 1, 2, 3, 4, 1]);
    // Sixteen queued (a full ring of the first size): yields rotate them, nothing is lost.
    rr.unbind_worker(0);
    let rest = ids(rr.drain());
    assert_eq!(rest, [2, 3, 4]); // the running task (1) is the caller's
    for id in 0..16 {
        rr.push(Some(0), job(id), Reason::Woken);
    }
    let mut running = 16;
    for round in 0..40 {
        let (_, next) = rr.yield_and_pop(0, job(running));
        running = next.unwrap().task.id;
        assert_eq!(running, (round % 17), "round {round}");
    }
    assert_eq!(rr.stats(0).depth, 16);
}
