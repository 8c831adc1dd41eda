//! Each policy, single-threaded, against a sequential model: random sequences of pushes
//! (reasons, homes, `here`, out-of-range values included), pops and drains. Every pushed task
//! comes out exactly once (popped or drained), homes are respected, the order is the one the
//! policy promises, `has_work` agrees with `pop`, and the push's `Notify` is the expected one.
#![cfg(not(loom))]
#![cfg(all(feature = "fifo", feature = "round-robin", feature = "work-stealing"))]

use std::collections::{BTreeMap, VecDeque};

use proptest::prelude::*;
mod common;

use common::{Job, here, home, reason};
use spindle_sched::{Fifo, Notify, Policy, Reason, RoundRobin, WorkStealing};

#[derive(Clone, Debug)]
enum Op {
    Push {
        here: Option<usize>,
        home: Option<usize>,
        reason: Reason,
    },
    Pop(usize),
    Drain,
}

/// Ops for `n` workers; indices up to `n + 1` (out of range) now and then.
fn ops(n: usize) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        12 => (here(n), home(n), reason()).prop_map(|(here, home, reason)| Op::Push { here, home, reason }),
        10 => (0..n + 1).prop_map(Op::Pop),
        1 => Just(Op::Drain),
    ];
    proptest::collection::vec(op, 0..400)
}

fn workers_and_ops() -> impl Strategy<Value = (usize, Vec<Op>)> {
    (1..=3usize).prop_flat_map(|n| (Just(n), ops(n)))
}

fn valid(here: Option<usize>, n: usize) -> Option<usize> {
    here.filter(|&w| w < n)
}

fn reduce(home: Option<usize>, n: usize) -> Option<usize> {
    home.map(|h| h % n)
}

fn worker_notify(here: Option<usize>, target: usize) -> Notify {
    if here == Some(target) {
        Notify::None
    } else {
        Notify::Worker(target)
    }
}

/// Checks a drain against the ids the model holds, in any order.
fn check_drain(mut drained: Vec<Job>, mut expected: Vec<usize>) -> Result<(), TestCaseError> {
    drained.sort_by_key(|j| j.id);
    expected.sort_unstable();
    let ids: Vec<usize> = drained.iter().map(|j| j.id).collect();
    prop_assert_eq!(ids, expected);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// FIFO: each worker sees the global push order restricted to what it may run.
    #[test]
    fn fifo_matches_model((n, ops) in workers_and_ops()) {
        let fifo = Fifo::new(n).unwrap();
        // (ticket, id)
        let mut global: VecDeque<(usize, usize)> = VecDeque::new();
        let mut pinned: Vec<VecDeque<(usize, usize)>> = vec![VecDeque::new(); n];
        let mut next_id = 0;
        for op in ops {
            match op {
                Op::Push { here, home, reason } => {
                    let id = next_id;
                    next_id += 1;
                    let notify = fifo.push(here, Job { id, home }, reason);
                    match reduce(home, n) {
                        Some(h) => {
                            pinned[h].push_back((id, id));
                            prop_assert_eq!(notify, worker_notify(valid(here, n), h));
                        }
                        None => {
                            global.push_back((id, id));
                            prop_assert_eq!(notify, Notify::Any);
                        }
                    }
                }
                Op::Pop(w) => {
                    let expected = if w >= n {
                        None
                    } else {
                        match (global.front(), pinned[w].front()) {
                            (None, None) => None,
                            (Some(_), None) => global.pop_front(),
                            (None, Some(_)) => pinned[w].pop_front(),
                            (Some(g), Some(p)) => if g.0 < p.0 { global.pop_front() } else { pinned[w].pop_front() },
                        }
                    };
                    prop_assert_eq!(fifo.has_work(w), expected.is_some());
                    let got = fifo.pop(w);
                    prop_assert_eq!(got.as_ref().map(|p| p.task.id), expected.map(|e| e.1));
                    prop_assert!(got.is_none_or(|p| !p.inherit_slice));
                }
                Op::Drain => {
                    let mut all: Vec<(usize, usize)> = global.drain(..).collect();
                    for q in &mut pinned {
                        all.extend(q.drain(..));
                    }
                    all.sort_unstable();
                    let ids: Vec<usize> = fifo.drain().into_iter().map(|j| j.id).collect();
                    // FIFO drains in push order.
                    prop_assert_eq!(ids, all.into_iter().map(|e| e.1).collect::<Vec<_>>());
                }
            }
            for (w, q) in pinned.iter().enumerate() {
                prop_assert_eq!(fifo.stats(w).depth, q.len());
            }
        }
        let mut rest: Vec<usize> = global.iter().map(|e| e.1).collect();
        rest.extend(pinned.iter().flatten().map(|e| e.1));
        check_drain(fifo.drain(), rest)?;
    }

    /// Round-robin: dealing in turn, per-worker FIFO, no stealing.
    #[test]
    fn round_robin_matches_model((n, ops) in workers_and_ops()) {
        let rr = RoundRobin::new(n).unwrap();
        let mut queues: Vec<VecDeque<usize>> = vec![VecDeque::new(); n];
        let mut deal = 0;
        let mut next_id = 0;
        for op in ops {
            match op {
                Op::Push { here, home, reason } => {
                    let id = next_id;
                    next_id += 1;
                    let here = valid(here, n);
                    let target = match (reduce(home, n), reason, here) {
                        (Some(h), _, _) => h,
                        (None, Reason::Woken | Reason::WokenByWorker | Reason::Yielded, Some(w)) => w,
                        (None, _, _) => {
                            deal += 1;
                            (deal - 1) % n
                        }
                    };
                    let notify = rr.push(here, Job { id, home }, reason);
                    queues[target].push_back(id);
                    prop_assert_eq!(notify, worker_notify(here, target));
                }
                Op::Pop(w) => {
                    let expected = queues.get_mut(w).and_then(VecDeque::pop_front);
                    prop_assert_eq!(rr.has_work(w), expected.is_some());
                    let got = rr.pop(w);
                    prop_assert_eq!(got.as_ref().map(|p| p.task.id), expected);
                    prop_assert!(got.is_none_or(|p| !p.inherit_slice));
                }
                Op::Drain => {
                    let expected: Vec<usize> = queues.iter_mut().flat_map(|q| q.drain(..)).collect();
                    check_drain(rr.drain(), expected)?;
                }
            }
            for (w, q) in queues.iter().enumerate() {
                prop_assert_eq!(rr.stats(w).depth, q.len());
            }
        }
        check_drain(rr.drain(), queues.into_iter().flatten().collect())?;
    }

    /// Work stealing: exactly once, homes, the run-next rule (and the every-61st-pop global
    /// check), pinned FIFO, own-deque FIFO, stealing only unpinned tasks, `has_work` = `pop`.
    #[test]
    fn work_stealing_matches_model((n, ops) in workers_and_ops()) {
        WsModel::new(n).run(ops)?;
    }
}

/// Where a queued task entered the policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    /// The global injector (unpinned, pushed from outside the workers).
    Injector,
    /// Worker `w`'s deque (unpinned, pushed by `w`, or kicked out of `w`'s run-next).
    Deque(usize),
    /// Worker `w`'s pinned queue (pushed anywhere, or kicked out of run-next).
    Pinned(usize),
    /// Worker `w`'s run-next slot.
    RunNext(usize),
}

#[derive(Clone, Copy, Debug)]
struct Queued {
    home: Option<usize>,
    origin: Origin,
    /// Position in the order of pushes and kicks.
    order: usize,
}

struct WsModel {
    n: usize,
    ws: WorkStealing<Job>,
    queued: BTreeMap<usize, Queued>,
    run_next: Vec<Option<usize>>,
    /// Each worker's pinned tasks, in the order they must come out (run-next aside).
    pinned: Vec<VecDeque<usize>>,
    /// The order of the last task each worker popped from its own deque.
    last_own_deque: Vec<Option<usize>>,
    ticks: Vec<u32>,
    /// Each queued task's own home (`Queued::home` is where the policy keeps it: with one
    /// worker, that worker for every task).
    job_homes: BTreeMap<usize, Option<usize>>,
    next_id: usize,
    next_order: usize,
}

impl WsModel {
    fn new(n: usize) -> Self {
        WsModel {
            n,
            ws: WorkStealing::new(n).unwrap(),
            queued: BTreeMap::new(),
            run_next: vec![None; n],
            pinned: vec![VecDeque::new(); n],
            last_own_deque: vec![None; n],
            ticks: vec![0; n],
            job_homes: BTreeMap::new(),
            next_id: 0,
            next_order: 0,
        }
    }

    fn enqueue(&mut self, id: usize, home: Option<usize>, origin: Origin) {
        if let Origin::Pinned(w) = origin {
            self.pinned[w].push_back(id);
        }
        let order = self.next_order;
        self.next_order += 1;
        self.queued.insert(
            id,
            Queued {
                home,
                origin,
                order,
            },
        );
    }

    fn push(
        &mut self,
        here: Option<usize>,
        home: Option<usize>,
        reason: Reason,
    ) -> Result<(), TestCaseError> {
        let n = self.n;
        let id = self.next_id;
        self.next_id += 1;
        let here = valid(here, n);
        let job_home = reduce(home, n);
        self.job_homes.insert(id, job_home);
        let notify = self.ws.push(here, Job { id, home: job_home }, reason);
        // A single worker treats every task as pinned to it (no thieves).
        let home = if n == 1 { Some(0) } else { job_home };
        let expected = match (home, here) {
            (Some(h), Some(w)) if h == w && to_run_next(reason) => {
                self.put_in_run_next(w, id, home)
            }
            (None, Some(w)) if to_run_next(reason) => self.put_in_run_next(w, id, home),
            (Some(h), Some(w)) if h == w => {
                self.enqueue(id, home, Origin::Pinned(h));
                Notify::None
            }
            (Some(h), _) => {
                self.enqueue(id, home, Origin::Pinned(h));
                worker_notify(here, h)
            }
            (None, Some(w)) => {
                self.enqueue(id, home, Origin::Deque(w));
                Notify::Any
            }
            (None, None) => {
                self.enqueue(id, home, Origin::Injector);
                Notify::Any
            }
        };
        prop_assert_eq!(notify, expected);
        Ok(())
    }

    /// A woken or spawned task into `w`'s run-next; the occupant goes to the back of the queues.
    fn put_in_run_next(&mut self, w: usize, id: usize, home: Option<usize>) -> Notify {
        let mut notify = if home.is_none() {
            Notify::Any
        } else {
            Notify::None
        };
        if let Some(kicked) = self.run_next[w].replace(id) {
            let kicked_home = self.queued[&kicked].home;
            if kicked_home.is_none() {
                notify = Notify::Any;
                self.enqueue(kicked, None, Origin::Deque(w));
            } else {
                self.enqueue(kicked, kicked_home, Origin::Pinned(w));
            }
        }
        self.enqueue(id, home, Origin::RunNext(w));
        notify
    }

    fn pop(&mut self, w: usize) -> Result<(), TestCaseError> {
        let has_work = self.ws.has_work(w);
        let stole_before = (w < self.n).then(|| self.ws.stats(w).stole);
        let got = self.ws.pop(w);
        if stole_before.is_some_and(|before| self.ws.stats(w).stole != before) {
            // A steal moved a batch of another deque's tasks into `w`'s, possibly tasks that
            // `w` had pushed and lost to a thief earlier: from here `w`'s deque holds tasks
            // of more than one push order, so the FIFO check restarts.
            self.last_own_deque[w] = None;
        }
        prop_assert_eq!(
            has_work,
            got.is_some(),
            "has_work({}) disagrees with pop",
            w
        );
        if w >= self.n {
            prop_assert!(got.is_none());
            return Ok(());
        }
        self.ticks[w] = self.ticks[w].wrapping_add(1);
        let global_turn = self.ticks[w].is_multiple_of(61);
        let Some(popped) = got else {
            prop_assert!(
                self.queued.is_empty()
                    || self.queued.values().all(|q| q.home.is_some_and(|h| h != w)),
                "pop({}) found nothing although {:?} is queued",
                w,
                self.queued
            );
            return Ok(());
        };
        let stole_now = stole_before.is_some_and(|before| self.ws.stats(w).stole != before);
        let id = popped.task.id;
        let Some(info) = self.queued.remove(&id) else {
            return Err(TestCaseError::fail(format!(
                "task {id} popped twice or never pushed"
            )));
        };
        prop_assert_eq!(Some(popped.task.home), self.job_homes.remove(&id));
        if let Some(h) = info.home {
            prop_assert_eq!(h, w, "task {} pinned to {} popped by {}", id, h, w);
        }
        // The run-next rule.
        if let Some(next) = self.run_next[w] {
            if !global_turn {
                prop_assert_eq!(id, next, "run-next of {} must come first", w);
            } else if id != next {
                prop_assert_eq!(info.origin, Origin::Injector, "61st pop: the injector");
            }
        }
        prop_assert_eq!(popped.inherit_slice, info.origin == Origin::RunNext(w));
        match info.origin {
            Origin::RunNext(v) => {
                prop_assert!(v == w || info.home.is_none(), "stole a pinned run-next");
                self.run_next[v] = None;
            }
            Origin::Pinned(v) => {
                prop_assert_eq!(v, w);
                prop_assert_eq!(
                    self.pinned[w].pop_front(),
                    Some(id),
                    "pinned tasks in push order"
                );
            }
            Origin::Deque(v) if v == w && !stole_now => {
                if let Some(last) = self.last_own_deque[w] {
                    prop_assert!(info.order > last, "own deque out of order");
                }
                self.last_own_deque[w] = Some(info.order);
            }
            Origin::Deque(_) | Origin::Injector => {}
        }
        Ok(())
    }

    fn drain(&mut self) -> Result<(), TestCaseError> {
        let expected: Vec<usize> = self.queued.keys().copied().collect();
        check_drain(self.ws.drain(), expected)?;
        self.queued.clear();
        self.job_homes.clear();
        self.run_next.iter_mut().for_each(|r| *r = None);
        self.pinned.iter_mut().for_each(VecDeque::clear);
        Ok(())
    }

    fn run(mut self, ops: Vec<Op>) -> Result<(), TestCaseError> {
        for op in ops {
            match op {
                Op::Push { here, home, reason } => self.push(here, home, reason)?,
                Op::Pop(w) => self.pop(w)?,
                Op::Drain => self.drain()?,
            }
            let stole: u64 = (0..self.n).map(|w| self.ws.stats(w).stole).sum();
            let stolen: u64 = (0..self.n).map(|w| self.ws.stats(w).stolen_from).sum();
            prop_assert_eq!(stole, stolen);
        }
        self.drain()
    }
}

/// A few fixed cases the properties should reach, spelled out.
#[test]
fn work_stealing_every_61st_pop_takes_from_the_injector() {
    // Two workers: with one, nothing goes to the injector (see the next test).
    let ws = WorkStealing::new(2).unwrap();
    ws.push(
        None,
        Job {
            id: 1000,
            home: None,
        },
        Reason::Spawned,
    );
    // 60 pops served by a run-next ping-pong.
    ws.push(
        Some(0),
        Job {
            id: 0,
            home: Some(0),
        },
        Reason::Woken,
    );
    for i in 0..60 {
        let p = ws.pop(0).unwrap();
        assert_eq!((p.task.id, p.inherit_slice), (i, true));
        ws.push(
            Some(0),
            Job {
                id: i + 1,
                home: Some(0),
            },
            Reason::Woken,
        );
    }
    let p = ws.pop(0).unwrap();
    assert_eq!((p.task.id, p.inherit_slice), (1000, false), "61st pop");
    assert_eq!(ws.pop(0).unwrap().task.id, 60);
    assert_eq!(ws.stats(0).global_pops, 1);
}

/// One worker has no thieves: unpinned tasks are kept as pinned ones (foreign pushes in the
/// inbox, not the injector; kicked and yielded ones in the private queue), in push order.
#[test]
fn work_stealing_with_one_worker_keeps_every_task_as_pinned() {
    let ws = WorkStealing::new(1).unwrap();
    let job = |id| Job { id, home: None };
    // From another thread: the worker's inbox, and the worker is the one to wake.
    assert_eq!(ws.push(None, job(0), Reason::Spawned), Notify::Worker(0));
    // Spawned by the worker: run-next, which kicks the one before it behind task 0.
    assert_eq!(ws.push(Some(0), job(1), Reason::Spawned), Notify::None);
    assert_eq!(ws.push(Some(0), job(2), Reason::Spawned), Notify::None);
    assert_eq!(ws.push(Some(0), job(3), Reason::Yielded), Notify::None);
    let order: Vec<_> = std::iter::from_fn(|| ws.pop(0))
        .map(|p| (p.task.id, p.inherit_slice))
        .collect();
    assert_eq!(order, [(2, true), (0, false), (1, false), (3, false)]);
    let stats = ws.stats(0);
    assert_eq!((stats.global_pops, stats.stole), (0, 0));
}

#[test]
fn work_stealing_never_steals_pinned_tasks() {
    let ws = WorkStealing::new(2).unwrap();
    ws.push(
        Some(0),
        Job {
            id: 1,
            home: Some(0),
        },
        Reason::Yielded,
    );
    ws.push(
        Some(0),
        Job {
            id: 2,
            home: Some(0),
        },
        Reason::Woken,
    );
    assert!(!ws.has_work(1));
    assert!(ws.pop(1).is_none());
    ws.push(Some(0), Job { id: 3, home: None }, Reason::Woken); // kicks 2 to the pinned queue
    assert!(ws.has_work(1));
    let stolen = ws.pop(1).unwrap();
    assert_eq!(
        (stolen.task.id, stolen.inherit_slice),
        (3, false),
        "stealable run-next"
    );
    assert_eq!(ws.pop(0).unwrap().task.id, 1);
    assert_eq!(ws.pop(0).unwrap().task.id, 2);
}

#[test]
fn zero_workers_is_an_error() {
    use spindle_sched::SchedError;
    assert_eq!(Fifo::<Job>::new(0).unwrap_err(), SchedError::ZeroWorkers);
    assert_eq!(
        RoundRobin::<Job>::new(0).unwrap_err(),
        SchedError::ZeroWorkers
    );
    assert_eq!(
        WorkStealing::<Job>::new(0).unwrap_err(),
        SchedError::ZeroWorkers
    );
}

/// The reasons that put a task pushed by its own worker into the run-next slot.
fn to_run_next(reason: Reason) -> bool {
    matches!(reason, Reason::Spawned | Reason::Woken)
}
