//! [`WorkStealing`]: Go's scheduler shape — per-worker deques, run-next, a global injector,
//! stealing half of a random victim's deque.

use std::fmt;
use std::sync::atomic::{AtomicU64 as StatCounter, AtomicUsize as StatLen};

use crate::cell::OwnerCell;
use crate::deque::{Injector, Steal, Stealer, Worker};
use crate::loom::{AtomicU8, AtomicUsize, Ordering, UnsafeCell, spin_wait};
use crate::queue::Mpsc;
use crate::ring::Ring;
use crate::{
    Notify, Policy, Popped, Reason, SchedError, Task, WorkerStats, check_workers, home_of,
    notify_worker, push_then_pop, valid_here,
};
use crossbeam_utils::CachePadded;

/// Every this many pops a worker looks at the global injector first (Go's `schedtick % 61`),
/// so that two tasks that keep waking each other cannot starve the global queue.
const GLOBAL_CHECK_INTERVAL: u32 = 61;

/// The most tasks a worker takes from the injector at once.
const MAX_GLOBAL_BATCH: usize = 32;

/// How long a thief waits before it takes another worker's run-next (see [`WorkStealing`]).
pub const RUN_NEXT_GRACE: std::time::Duration = std::time::Duration::from_micros(3);

/// Work stealing, in the shape of Go's scheduler.
///
/// Per worker `w`:
///
/// * a **deque** (`crossbeam_deque::Worker::new_fifo()`): tasks that may run anywhere
///   (`home() == None`) pushed by `w` itself; `w` pops its front, thieves steal from its front;
/// * a **pinned queue** (FIFO, private to `w`) for tasks pinned to `w` that `w` pushes itself,
///   and an **inbox** (a mutex-guarded queue) for tasks pinned to `w` pushed by any other thread;
///   `w` moves its inbox to the back of its pinned queue whenever it pops or pushes a pinned
///   task, so pinned tasks run in push order;
/// * a one-slot **run-next**: a task woken or spawned on `w` (`Reason::Woken` or
///   `Reason::Spawned`, `here == Some(w)`; not `Reason::WokenByWorker`, a batch of wake-ups
///   that keeps its order in the queues) that may run on `w` goes there, and the previous
///   occupant is kicked to the back of the queues. Popping it returns `inherit_slice: true`:
///   the runtime keeps the current time slice running, so two tasks waking each other cannot
///   monopolise the worker, and a chain of cheap hand-offs gets a slice of time as a chain of
///   costly ones does (see [crate docs](crate#fairness-in-turns-or-in-time)). Spawns go there too (Go's `newproc`): a task that spawns a partner
///   and then waits for it — a request handed to a handler, one end of a channel — runs the
///   partner next on the same worker, warm in cache, instead of handing it to a thief.
///
/// and one global **injector** (`crossbeam_deque::Injector`) for unpinned tasks pushed from
/// outside the workers (`here == None`).
///
/// `pop(w)` looks, in order:
///
/// 1. every 61st call, the injector (one task);
/// 2. run-next;
/// 3. `w`'s pinned queue and deque, alternating between the two while both have tasks (so
///    neither starves the other);
/// 4. the injector, taking a fair share (`len / workers + 1`, at most 32) into the deque;
/// 5. the other workers' deques, starting at a random victim (xorshift per worker) and trying
///    each once, stealing half of the victim's deque (`steal_batch_and_pop`);
/// 6. the other workers' run-next slots, if they hold an unpinned task (Go steals run-next
///    too, so a task woken by a long-running one is not stuck behind it) — but only after
///    waiting [`RUN_NEXT_GRACE`] (Go waits 3 µs): the owner usually runs its run-next within a
///    microsecond or two (it put it there because it is about to block), and a pair of tasks
///    that talk to each other should stay on one worker rather than be split by an idle
///    thief (with invariant 2 a split pair stays split).
///
/// Pinned tasks are never stolen: they are never in a deque, and a pinned task in run-next is
/// marked so.
///
/// With a **single worker** there is nobody to steal from or for: every task is treated as
/// pinned to it (pushes from other threads go to its inbox rather than the injector, kicked and
/// yielded tasks to its pinned queue), which keeps the thieves' atomics off that path.
///
/// [`Notify`]: a pinned task pushed by its own worker needs nobody ([`Notify::None`]); one for
/// another worker goes to that worker's inbox ([`Notify::Worker`]); an unpinned task is
/// stealable, so [`Notify::Any`] (Go's `ready` → `wakep`; the [`Idle`](crate::Idle) protocol
/// keeps that from waking more than one spinning worker at a time).
///
/// # Examples
///
/// ```
/// use spindle_sched::{Notify, Policy, Reason, Task, WorkStealing};
///
/// struct Job { id: u32, home: Option<usize> }
/// impl Task for Job {
///     fn home(&self) -> Option<usize> { self.home }
/// }
///
/// let ws = WorkStealing::new(2)?;
/// // Worker 0 spawns two tasks: each goes to its run-next, kicking the one before to its deque.
/// assert_eq!(ws.push(Some(0), Job { id: 1, home: None }, Reason::Spawned), Notify::Any);
/// assert_eq!(ws.push(Some(0), Job { id: 2, home: None }, Reason::Spawned), Notify::Any);
/// // Then it wakes a task pinned to it, which takes the run-next (task 2 goes to the deque).
/// assert_eq!(ws.push(Some(0), Job { id: 3, home: Some(0) }, Reason::Woken), Notify::Any);
///
/// // The woken task runs next, inheriting the time slice.
/// let next = ws.pop(0).unwrap();
/// assert_eq!((next.task.id, next.inherit_slice), (3, true));
/// // Worker 1 has nothing of its own: it steals the front of worker 0's deque.
/// assert_eq!(ws.pop(1).map(|p| p.task.id), Some(1));
/// assert_eq!(ws.stats(1).stole, 1);
/// # Ok::<(), spindle_sched::SchedError>(())
/// ```
pub struct WorkStealing<T> {
    workers: Box<[PerWorker<T>]>,
    injector: CachePadded<Injector<T>>,
    /// Batch steals in progress. A batch steal takes tasks off the victim (or the injector)
    /// before it publishes them in the thief's deque; in between no queue shows them, so
    /// `has_work` reports work while this is non-zero (see there).
    in_transit: CachePadded<AtomicUsize>,
}

/// One worker's queues, each part on its own cache lines by who writes it and who reads it:
/// a thief looking for work must not pull in the lines the owner writes on every push and pop
/// (one shared line made the owner's run-next and private state miss whenever a spinning thief
/// had looked at its deque: ~6 % of `ping_pong` on two workers).
struct PerWorker<T> {
    /// State only the worker's own thread uses (see `OwnerCell`).
    local: CachePadded<OwnerCell<Local<T>>>,
    /// Counters only the owner writes (for `stats`).
    own_stats: CachePadded<OwnStats>,
    /// Thieves' end of `local.deque`: read-only here (the deque's indices live in its own
    /// allocation).
    stealer: CachePadded<Stealer<T>>,
    /// Written by the owner on every spawn and wake-up; looked at by thieves that found the
    /// deques empty.
    run_next: CachePadded<RunNext<T>>,
    /// Tasks pinned to this worker, pushed by other threads.
    inbox: CachePadded<Mpsc<T>>,
    /// Tasks thieves took from here (written by thieves).
    stolen_from: CachePadded<StatCounter>,
}

/// The counters of [`PerWorker`] that only its owner writes.
struct OwnStats {
    /// `local.pinned.len()`.
    pinned_len: StatLen,
    stole: StatCounter,
    global_pops: StatCounter,
}

/// The worker-private part.
struct Local<T> {
    deque: Worker<T>,
    pinned: Ring<T>,
    /// Pops so far (wrapping), for the every-61st rule.
    tick: u32,
    /// xorshift64 state, for picking victims.
    rng: u64,
    /// Which of `pinned` and `deque` the next pop tries first.
    prefer_pinned: bool,
}

/// What a run-next slot holds: nothing.
const EMPTY: u8 = 0;
/// A task pinned to the slot's worker: never stolen.
const PINNED: u8 = 1;
/// A task that may run anywhere: thieves may take it as a last resort.
const STEALABLE: u8 = 2;
/// A thief is taking the task.
const BUSY: u8 = 3;

/// The run-next slot: one task, and its kind in an atomic that is also the slot's lock.
///
/// Protocol. Only the *owner* (whoever holds the worker's `OwnerCell`: its own thread, or a
/// drain) writes a task into the slot, and only the owner ever stores `PINNED` or
/// `STEALABLE`. A thief may only take a `STEALABLE` task, by a compare-exchange
/// `STEALABLE` → `BUSY`, after which it alone uses the slot until it stores `EMPTY`. So:
///
/// * while the kind is `EMPTY` or `PINNED`, no thief can enter: the owner reads and writes the
///   slot with plain loads and stores (the common case — a woken coroutine is pinned — costs
///   no read-modify-write);
/// * a `STEALABLE` task is taken by the owner with a compare-exchange `STEALABLE` → `EMPTY`
///   (after which, again, no thief can enter), and by a thief as above; one of them wins;
/// * the owner that wants to write while a thief holds `BUSY` waits for the thief's `EMPTY`
///   (a few instructions).
///
/// Acquire/release on the kind orders the slot's accesses between owner and thief.
struct RunNext<T> {
    kind: AtomicU8,
    slot: UnsafeCell<Option<T>>,
}

// SAFETY: the slot is used only by the owner (one thread at a time: the holder of the
// worker's `OwnerCell`) or by the one thief that moved the kind from `STEALABLE` to `BUSY`,
// never by both (see the protocol above); tasks move between threads, hence `T: Send`.
unsafe impl<T: Send> Sync for RunNext<T> {}

impl<T> RunNext<T> {
    fn new() -> Self {
        RunNext {
            kind: AtomicU8::new(EMPTY),
            slot: UnsafeCell::new(None),
        }
    }

    /// Owner only: puts `task` (of `kind`) in the slot; returns the previous occupant and
    /// its kind.
    #[inline]
    fn put(&self, task: T, kind: u8) -> Option<(T, u8)> {
        let old_kind = self.kind.load(Ordering::Acquire);
        if old_kind == EMPTY || old_kind == PINNED {
            // No thief can enter: plain loads and stores (the common case, inlined alone).
            let old = self.slot.with_mut(|slot| {
                // SAFETY: we are the owner and the kind is `EMPTY` or `PINNED`, so no thief
                // uses the slot.
                unsafe { (*slot).replace(task) }
            });
            self.kind.store(kind, Ordering::Release);
            return old.map(|task| (task, old_kind));
        }
        self.put_contended(task, kind, old_kind)
    }

    /// [`put`](Self::put) when the occupant may be stolen (a thief may hold or take it).
    #[inline]
    fn put_contended(&self, task: T, kind: u8, mut old_kind: u8) -> Option<(T, u8)> {
        let mut round = 0;
        loop {
            match old_kind {
                STEALABLE => match self.kind.compare_exchange(
                    STEALABLE,
                    EMPTY,
                    Ordering::Acquire,
                    Ordering::Acquire,
                ) {
                    Ok(_) => break,
                    Err(now) => old_kind = now, // a thief took it
                },
                BUSY => {
                    spin_wait(&mut round);
                    old_kind = self.kind.load(Ordering::Acquire);
                }
                _ => break, // EMPTY or PINNED: no thief can enter
            }
        }
        let old = self.slot.with_mut(|slot| {
            // SAFETY: we are the owner and the kind is not `STEALABLE` or `BUSY` (we read
            // `EMPTY`/`PINNED`, or moved it to `EMPTY` ourselves), so no thief uses the slot.
            unsafe { (*slot).replace(task) }
        });
        self.kind.store(kind, Ordering::Release);
        old.map(|task| (task, old_kind))
    }

    /// Owner only: takes the occupant, whatever it is.
    #[inline]
    fn take(&self) -> Option<T> {
        match self.kind.load(Ordering::Acquire) {
            PINNED => {}
            STEALABLE => {
                self.kind
                    .compare_exchange(STEALABLE, EMPTY, Ordering::Acquire, Ordering::Relaxed)
                    .ok()?; // else a thief has it
            }
            _ => return None, // EMPTY, or BUSY: a thief has it
        }
        let task = self.slot.with_mut(|slot| {
            // SAFETY: owner, and the kind was `PINNED` (no thief enters) or we moved it from
            // `STEALABLE` to `EMPTY` (no thief enters until the owner writes `STEALABLE`).
            unsafe { (*slot).take() }
        });
        self.kind.store(EMPTY, Ordering::Release);
        task
    }

    /// Anyone: takes the occupant if it may run anywhere.
    fn steal(&self) -> Option<T> {
        if !self.is_stealable() {
            return None;
        }
        self.kind
            .compare_exchange(STEALABLE, BUSY, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        let task = self.slot.with_mut(|slot| {
            // SAFETY: we moved the kind from `STEALABLE` to `BUSY`: until we store `EMPTY`,
            // neither the owner nor another thief uses the slot.
            unsafe { (*slot).take() }
        });
        self.kind.store(EMPTY, Ordering::Release);
        task
    }

    /// Whether it holds a task (one that a thief is taking does not count).
    fn is_occupied(&self) -> bool {
        matches!(self.kind.load(Ordering::Acquire), PINNED | STEALABLE)
    }

    fn is_stealable(&self) -> bool {
        self.kind.load(Ordering::Acquire) == STEALABLE
    }
}

/// One step of xorshift64.
fn xorshift(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    x
}

fn plain<T>(task: T) -> Popped<T> {
    Popped {
        task,
        inherit_slice: false,
    }
}

impl<T: Task> WorkStealing<T> {
    /// A work-stealing policy for `workers` workers.
    ///
    /// # Errors
    ///
    /// [`SchedError::ZeroWorkers`] for 0 workers, [`SchedError::TooManyWorkers`] above
    /// [`MAX_WORKERS`](crate::MAX_WORKERS).
    pub fn new(workers: usize) -> Result<Self, SchedError> {
        check_workers(workers)?;
        let per_worker = (0..workers)
            .map(|w| {
                let deque = Worker::new_fifo();
                let stealer = deque.stealer();
                PerWorker {
                    local: CachePadded::new(OwnerCell::new(Local {
                        deque,
                        pinned: Ring::new(),
                        tick: 0,
                        // Any non-zero seed; distinct per worker.
                        rng: (w as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
                        prefer_pinned: true,
                    })),
                    own_stats: CachePadded::new(OwnStats {
                        pinned_len: StatLen::new(0),
                        stole: StatCounter::new(0),
                        global_pops: StatCounter::new(0),
                    }),
                    stealer: CachePadded::new(stealer),
                    inbox: CachePadded::new(Mpsc::new()),
                    run_next: CachePadded::new(RunNext::new()),
                    stolen_from: CachePadded::new(StatCounter::new(0)),
                }
            })
            .collect();
        Ok(WorkStealing {
            workers: per_worker,
            injector: CachePadded::new(Injector::new()),
            in_transit: CachePadded::new(AtomicUsize::new(0)),
        })
    }

    /// Runs a batch steal, counted in `in_transit` while it runs.
    ///
    /// Orderings: the increment is sequenced before the steal's removal from its source, a
    /// release RMW; a `has_work` that sees the tasks gone (an acquire load of the source's
    /// index or lock) therefore sees the increment or the decrement after it, and the
    /// decrement (release) comes after the tasks are published in the thief's deque.
    fn batch_steal(&self, steal: impl FnOnce() -> Steal<T>) -> Steal<T> {
        self.in_transit.fetch_add(1, Ordering::SeqCst);
        let result = steal();
        self.in_transit.fetch_sub(1, Ordering::SeqCst);
        result
    }

    /// Push on worker `w`'s thread, holding its private state.
    #[inline]
    fn push_local(
        &self,
        w: usize,
        local: &mut Local<T>,
        task: T,
        home: Option<usize>,
        reason: Reason,
    ) -> Notify {
        let me = &self.workers[w];
        match home {
            Some(h) if h != w => {
                self.workers[h].inbox.push(task);
                Notify::Worker(h)
            }
            _ if matches!(reason, Reason::Spawned | Reason::Woken) => {
                let kind = if home.is_some() { PINNED } else { STEALABLE };
                let mut notify = if kind == STEALABLE {
                    Notify::Any
                } else {
                    Notify::None
                };
                match me.run_next.put(task, kind) {
                    None => {}
                    Some((kicked, STEALABLE)) => {
                        local.deque.push(kicked);
                        notify = Notify::Any;
                    }
                    Some((kicked, _)) => push_pinned(me, local, kicked),
                }
                notify
            }
            Some(_) => {
                push_pinned(me, local, task);
                if reason == Reason::Yielded {
                    // A task that yields goes behind what waits in the other queue too.
                    local.prefer_pinned = false;
                }
                Notify::None
            }
            None => {
                local.deque.push(task);
                if reason == Reason::Yielded {
                    local.prefer_pinned = true;
                }
                Notify::Any
            }
        }
    }

    #[inline]
    fn pop_local(&self, w: usize, local: &mut Local<T>) -> Option<Popped<T>> {
        let me = &self.workers[w];
        local.tick = local.tick.wrapping_add(1);
        if local.tick.is_multiple_of(GLOBAL_CHECK_INTERVAL) && !self.injector.is_empty() {
            loop {
                match self.injector.steal() {
                    Steal::Success(task) => {
                        me.own_stats.global_pops.fetch_add(1, Ordering::Relaxed);
                        return Some(plain(task));
                    }
                    Steal::Empty => break,
                    Steal::Retry => std::hint::spin_loop(),
                }
            }
        }
        if let Some(task) = me.run_next.take() {
            return Some(Popped {
                task,
                inherit_slice: true,
            });
        }
        if let Some(task) = pop_own(me, local) {
            return Some(plain(task));
        }
        if let Some(task) = self.pop_global_batch(me, local) {
            return Some(plain(task));
        }
        // A lone worker has nobody to steal from: checked here, before the call, so that it
        // pays none each time it runs dry.
        if self.workers.len() < 2 {
            return None;
        }
        self.steal(w, local).map(plain)
    }

    /// Takes a fair share of the injector into `local.deque` and returns one task of it.
    fn pop_global_batch(&self, me: &PerWorker<T>, local: &mut Local<T>) -> Option<T> {
        if self.injector.is_empty() {
            return None;
        }
        let limit = (self.injector.len() / self.workers.len() + 1).min(MAX_GLOBAL_BATCH);
        let before = local.deque.len();
        loop {
            match self.batch_steal(|| {
                self.injector
                    .steal_batch_with_limit_and_pop(&local.deque, limit)
            }) {
                Steal::Success(task) => {
                    let moved = local.deque.len().saturating_sub(before) + 1;
                    me.own_stats
                        .global_pops
                        .fetch_add(moved as u64, Ordering::Relaxed);
                    return Some(task);
                }
                Steal::Empty => return None,
                Steal::Retry => std::hint::spin_loop(),
            }
        }
    }

    /// Steals from the other workers: half a deque, else a stealable run-next. There must be
    /// two workers or more (its caller checks).
    fn steal(&self, w: usize, local: &mut Local<T>) -> Option<T> {
        let n = self.workers.len();
        debug_assert!(n >= 2, "steal with {n} workers");
        let me = &self.workers[w];
        let start = (xorshift(&mut local.rng) % (n as u64 - 1)) as usize;
        let victims = || (0..n - 1).map(move |k| (w + 1 + (start + k) % (n - 1)) % n);
        loop {
            let mut contended = false;
            for v in victims() {
                let victim = &self.workers[v];
                if victim.stealer.is_empty() {
                    continue;
                }
                let before = local.deque.len();
                match self.batch_steal(|| victim.stealer.steal_batch_and_pop(&local.deque)) {
                    Steal::Success(task) => {
                        let moved = (local.deque.len().saturating_sub(before) + 1) as u64;
                        me.own_stats.stole.fetch_add(moved, Ordering::Relaxed);
                        victim.stolen_from.fetch_add(moved, Ordering::Relaxed);
                        return Some(task);
                    }
                    Steal::Empty => {}
                    Steal::Retry => contended = true,
                }
            }
            if !contended {
                break;
            }
            std::hint::spin_loop();
        }
        if !victims().any(|v| self.workers[v].run_next.is_stealable()) {
            return None;
        }
        grace_period();
        for v in victims() {
            let victim = &self.workers[v];
            if let Some(task) = victim.run_next.steal() {
                me.own_stats.stole.fetch_add(1, Ordering::Relaxed);
                victim.stolen_from.fetch_add(1, Ordering::Relaxed);
                return Some(task);
            }
        }
        None
    }
}

/// Waits [`RUN_NEXT_GRACE`] before a run-next steal (not under loom, which has no clock: there
/// the steal is immediate, which only widens the interleavings the models explore).
fn grace_period() {
    #[cfg(not(loom))]
    {
        let start = std::time::Instant::now();
        while start.elapsed() < RUN_NEXT_GRACE {
            std::hint::spin_loop();
        }
    }
}

/// Where a task must run under work stealing: its home, and with a single worker always that
/// worker. One worker has no thieves, so every task is as good as pinned to it, and treating it
/// so keeps the queues' atomics out of the single-worker path: the run-next slot is written
/// with plain stores instead of compare-and-swaps, kicked and yielded tasks go to the private
/// pinned queue instead of the Chase–Lev deque (whose pop is a read-modify-write, for thieves'
/// sake), and other threads' pushes to the inbox. (3 atomic read-modify-writes fewer per
/// `ping_pong` round trip on one worker.)
#[inline]
fn ws_home<T: Task>(task: &T, workers: usize) -> Option<usize> {
    if workers == 1 {
        Some(0)
    } else {
        home_of(task, workers)
    }
}

/// Appends a task pinned to `me`'s worker to its pinned queue, after whatever its inbox holds
/// (so pinned tasks keep push order).
#[inline]
fn push_pinned<T>(me: &PerWorker<T>, local: &mut Local<T>, task: T) {
    me.inbox.take_all_into(&mut local.pinned);
    local.pinned.push_back(task);
    me.own_stats
        .pinned_len
        .store(local.pinned.len(), Ordering::Relaxed);
}

/// The worker's own queues: inbox (moved to the pinned queue), pinned queue and deque,
/// alternating between the last two.
#[inline]
fn pop_own<T>(me: &PerWorker<T>, local: &mut Local<T>) -> Option<T> {
    me.inbox.take_all_into(&mut local.pinned);
    let task = if local.prefer_pinned {
        local.pinned.pop_front().or_else(|| local.deque.pop())
    } else {
        local.deque.pop().or_else(|| local.pinned.pop_front())
    };
    if task.is_some() {
        local.prefer_pinned = !local.prefer_pinned;
    }
    me.own_stats
        .pinned_len
        .store(local.pinned.len(), Ordering::Relaxed);
    task
}

impl<T> fmt::Debug for WorkStealing<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkStealing")
            .field("workers", &self.workers.len())
            .finish_non_exhaustive()
    }
}

impl<T: Task> Policy<T> for WorkStealing<T> {
    fn name(&self) -> &'static str {
        "work-stealing"
    }

    fn workers(&self) -> usize {
        self.workers.len()
    }

    #[inline]
    fn push(&self, here: Option<usize>, task: T, reason: Reason) -> Notify {
        let n = self.workers.len();
        let home = ws_home(&task, n);
        let here = valid_here(here, n);
        // Another thread may hold w's private state (a runtime bug, or a concurrent drain):
        // then push as a foreign thread would.
        if let Some(w) = here
            && let Some(mut local) = self.workers[w].local.try_borrow()
        {
            return local.with(|local| self.push_local(w, local, task, home, reason));
        }
        match home {
            Some(h) => {
                self.workers[h].inbox.push(task);
                notify_worker(here, h)
            }
            None => {
                self.injector.push(task);
                Notify::Any
            }
        }
    }

    /// Both halves under one borrow of `w`'s private state.
    #[inline]
    fn yield_and_pop(&self, w: usize, task: T) -> (Notify, Option<Popped<T>>) {
        let home = ws_home(&task, self.workers.len());
        match self.workers.get(w).and_then(|me| me.local.try_borrow()) {
            Some(mut local) => local.with(|local| {
                let notify = self.push_local(w, local, task, home, Reason::Yielded);
                (notify, self.pop_local(w, local))
            }),
            None => push_then_pop(self, w, task),
        }
    }

    /// `None` also when another thread holds `w`'s private state (only a runtime bug or a
    /// concurrent [`drain`](Policy::drain) does); [`has_work`](Policy::has_work) then says
    /// `true`, so the worker comes back.
    #[inline]
    fn pop(&self, w: usize) -> Option<Popped<T>> {
        let mut local = self.workers.get(w)?.local.try_borrow()?;
        local.with(|local| self.pop_local(w, local))
    }

    /// Also `true` while another worker is in the middle of a batch steal (the tasks it
    /// moves are in no queue for that moment): the caller looks again shortly.
    fn has_work(&self, w: usize) -> bool {
        let Some(me) = self.workers.get(w) else {
            return false;
        };
        if me.run_next.is_occupied()
            || !me.inbox.is_empty()
            || !me.stealer.is_empty()
            || !self.injector.is_empty()
        {
            return true;
        }
        match me.local.try_borrow() {
            Some(mut local) => {
                if local.with(|local| !local.pinned.is_empty()) {
                    return true;
                }
            }
            None => return true, // someone is in w's pop or push: look again
        }
        if self.workers.len() == 1 {
            return false; // no victims, and nobody to steal in a batch
        }
        let stealable = || {
            self.workers.iter().enumerate().any(|(v, victim)| {
                v != w && (!victim.stealer.is_empty() || victim.run_next.is_stealable())
            })
        };
        // Sources first, then batches in transit, then the destinations again (see
        // `batch_steal`): a task moved by a batch steal is seen in one of the three.
        stealable()
            || self.in_transit.load(Ordering::SeqCst) != 0
            || !me.stealer.is_empty()
            || stealable()
    }

    fn bind_worker(&self, w: usize) -> bool {
        self.workers.get(w).is_some_and(|me| me.local.bind())
    }

    fn unbind_worker(&self, w: usize) {
        if let Some(me) = self.workers.get(w) {
            me.local.unbind();
        }
    }

    /// Tasks pushed while `drain` runs may be left queued.
    fn drain(&self) -> Vec<T> {
        let mut all = Vec::new();
        loop {
            match self.injector.steal() {
                Steal::Success(task) => all.push(task),
                Steal::Empty => break,
                Steal::Retry => std::hint::spin_loop(),
            }
        }
        for me in self.workers.iter() {
            let mut local = me.local.borrow_waiting();
            all.extend(me.run_next.take()); // as the owner: we hold its private state
            local.with(|local| {
                me.inbox.take_all_into(&mut local.pinned);
                all.extend(local.pinned.drain());
                me.own_stats.pinned_len.store(0, Ordering::Relaxed);
                while let Some(task) = local.deque.pop() {
                    all.push(task);
                }
            });
        }
        all
    }

    fn stats(&self, w: usize) -> WorkerStats {
        let Some(me) = self.workers.get(w) else {
            return WorkerStats::default();
        };
        WorkerStats {
            depth: usize::from(me.run_next.is_occupied())
                + me.own_stats.pinned_len.load(Ordering::Relaxed)
                + me.inbox.len()
                + me.stealer.len(),
            stole: me.own_stats.stole.load(Ordering::Relaxed),
            stolen_from: me.stolen_from.load(Ordering::Relaxed),
            global_pops: me.own_stats.global_pops.load(Ordering::Relaxed),
        }
    }
}
