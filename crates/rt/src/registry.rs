//! Every live task of a runtime, so that shutdown can cancel what is left and metrics can
//! count them.
//!
//! Two things, kept apart because they cost differently:
//!
//! * **Counts** say how many tasks are live: each worker counts the tasks it spawned and the
//!   tasks that ended on it (one writer per counter, so a load and a store, no
//!   read-modify-write; foreign threads share one atomic pair). Live = spawned − ended. That is
//!   all a task costs the registry unless it suspends.
//! * **Slots** hold the tasks that shutdown may have to cancel: those that have suspended (a
//!   yield or a park) at least once, and named ones (the monitor's report looks a task's name
//!   up by id). A task that runs from its start to its end without suspending — most spawned
//!   tasks of a burst, the leaves of a tree of coroutines, the partner that answers a ping —
//!   never enters one: shutdown has nothing to cancel in it (it sits in a queue, which
//!   `first_run`'s look at `closing` covers, or runs, and then ends or suspends). Inserting
//!   and removing every task took two lock acquisitions and a reference count's increment and
//!   decrement per coroutine: ~10 % of `ping_pong` (one spawn and one park per message).
//!
//! Slots are sharded (one shard per worker), each shard a slab — a vector of slots and a free
//! list — behind its own lock, and a task remembers its slot: insert and remove are a few
//! stores under a lock, with no hashing. A task is inserted into the shard of the worker it
//! suspends on first — the worker it then stays on unless it may migrate — which also removes
//! it. A slot holds a plain pointer, not a counted reference: **a task in a slot is alive**,
//! because it has not finished (it leaves its slot in `TaskPrefix::finish`, before the worker
//! that runs it drops its reference), and an unfinished task is referenced by whoever will run
//! it next — a queue, the worker running it, or its idle state (`TaskRef::into_idle`). Readers
//! take a counted reference under the shard's lock.
//!
//! **Emptiness** (shutdown's wait, `is_empty`) reads every ended count (acquire), then every
//! spawned count. A task whose end it saw was spawned before that end — by a worker whose count
//! store happened before the push that handed the task over, or by a foreign thread whose
//! sequentially consistent increment precedes its own second look at `closing` — so its spawn
//! is counted too: spawned ≥ ended in every reading. Equality then means every task whose spawn
//! the reading saw has ended, and by induction from the foreign spawns (which shutdown sees, or
//! which see `closing` and back out) every task of the runtime. A remover wakes a waiting
//! `wait_empty`; a wake that misses it (no fence orders the two) costs at most the waiter's
//! 1 ms recheck.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use crate::task::{Header, TaskRef, lock};
use spindle_park::spin::SpinLock;

/// See the module documentation.
pub(crate) struct TaskRegistry {
    shards: Box<[CachePadded<SpinLock<Shard>>]>,
    /// Per worker, then one for foreign threads: tasks spawned and ended there.
    counts: Box<[CachePadded<Counts>]>,
    /// A `wait_empty` is (or was) waiting: enders signal `empty`.
    waiting: AtomicBool,
    empty: (Mutex<()>, Condvar),
}

#[derive(Default)]
struct Counts {
    spawned: AtomicU64,
    ended: AtomicU64,
}

impl Counts {
    /// Adds one to `counter`, which only this thread writes: a load and a store, released so
    /// that a reader that sees the new value sees what came before it.
    #[inline]
    fn bump_own(counter: &AtomicU64) {
        counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Release);
    }
}

/// A registered task: its header, not a counted reference (see the module documentation).
#[derive(Clone, Copy)]
struct Slot(NonNull<Header>);

// SAFETY: a plain address of a task header, which is `Sync`; it is dereferenced only under the
// shard's lock, while the task is alive (module documentation).
unsafe impl Send for Slot {}

#[derive(Default)]
struct Shard {
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
}

/// Where a task sits in the registry: (shard, slot), packed for the task's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Key(u64);

impl Key {
    /// The key of a task that has not run yet.
    pub(crate) const NONE: Key = Key(u64::MAX);
    /// The key of a task that runs (or ran) but has no slot: it has not suspended yet.
    pub(crate) const UNREGISTERED: Key = Key(u64::MAX - 1);

    pub(crate) const fn to_bits(self) -> u64 {
        self.0
    }

    pub(crate) fn from_bits(bits: u64) -> Key {
        Key(bits)
    }

    fn shard(self) -> usize {
        (self.0 >> 32) as usize
    }

    fn slot(self) -> usize {
        (self.0 & u64::from(u32::MAX)) as usize
    }
}

impl TaskRegistry {
    /// A registry for a runtime with `workers` workers.
    pub(crate) fn new(workers: usize) -> Self {
        TaskRegistry {
            shards: (0..workers)
                .map(|_| CachePadded::new(SpinLock::new(Shard::default())))
                .collect(),
            counts: (0..=workers)
                .map(|_| CachePadded::new(Counts::default()))
                .collect(),
            waiting: AtomicBool::new(false),
            empty: (Mutex::new(()), Condvar::new()),
        }
    }

    /// The counts of worker `here` (`None`: another thread), and whether they are shared.
    #[inline]
    fn counts_of(&self, here: Option<usize>) -> (&Counts, bool) {
        let foreign = self.counts.len() - 1;
        match here {
            Some(w) if w < foreign => (&*self.counts[w], false),
            _ => (&*self.counts[foreign], true),
        }
    }

    /// Counts a task spawned on worker `here` (`None`: another thread), before it is pushed
    /// to a queue. `Some(w)` only on worker `w`'s own thread.
    #[inline]
    pub(crate) fn spawned(&self, here: Option<usize>) {
        match self.counts_of(here) {
            (counts, false) => Counts::bump_own(&counts.spawned),
            // SeqCst: ordered before the spawner's second look at `closing` (`spawn_on`).
            (counts, true) => {
                counts.spawned.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// Takes back a spawn from another thread (`spawned(None)`) whose task was never pushed:
    /// the runtime closed meanwhile.
    pub(crate) fn unspawned_foreign(&self) {
        self.counts_of(None)
            .0
            .spawned
            .fetch_sub(1, Ordering::Relaxed);
    }

    /// Gives `task`, which runs on worker `w` (on `w`'s own thread) and has no slot, a slot;
    /// returns its key, for [`ended`](TaskRegistry::ended).
    pub(crate) fn insert(&self, w: usize, task: &TaskRef) -> Key {
        let shard_index = w.min(self.shards.len() - 1);
        let entry = Slot(NonNull::from(task.header()));
        let mut shard = self.shards[shard_index].lock();
        let slot = match shard.free.pop() {
            Some(slot) => {
                shard.slots[slot as usize] = Some(entry);
                slot
            }
            None => {
                // More than 2^32 live tasks in one shard cannot happen: each holds a stack
                // or at least a heap allocation of well over a byte.
                let slot = shard.slots.len() as u32;
                shard.slots.push(Some(entry));
                slot
            }
        };
        Key(((shard_index as u64) << 32) | u64::from(slot))
    }

    /// A task with key `key` ended on worker `here` (`None`: another thread): it leaves its
    /// slot, if it has one, and is counted as ended.
    ///
    /// Inlined for its common case, a task that ran without suspending (no slot) ending on a
    /// worker: one count's load and store and a look at `waiting`. The rest is out of line,
    /// so that the callers do not save registers for it on every end.
    #[inline]
    pub(crate) fn ended(&self, key: Key, here: Option<usize>) {
        match (key.shard() < self.shards.len(), self.counts_of(here)) {
            (false, (counts, false)) => Counts::bump_own(&counts.ended),
            _ => return self.ended_slow(key, here),
        }
        if self.waiting.load(Ordering::Relaxed) {
            self.signal_ended();
        }
    }

    /// [`ended`](Self::ended) for a task with a slot, or one ending on another thread.
    #[inline(never)]
    fn ended_slow(&self, key: Key, here: Option<usize>) {
        if let Some(padded) = self.shards.get(key.shard()) {
            let mut shard = padded.lock();
            if shard
                .slots
                .get_mut(key.slot())
                .and_then(Option::take)
                .is_some()
            {
                shard.free.push(key.slot() as u32);
            }
        }
        match self.counts_of(here) {
            (counts, false) => Counts::bump_own(&counts.ended),
            (counts, true) => {
                counts.ended.fetch_add(1, Ordering::Release);
            }
        }
        if self.waiting.load(Ordering::Relaxed) {
            self.signal_ended();
        }
    }

    /// Wakes a waiting [`wait_empty`](Self::wait_empty).
    #[cold]
    #[inline(never)]
    fn signal_ended(&self) {
        let _guard = lock(&self.empty.0);
        self.empty.1.notify_all();
    }

    /// (spawned, ended) over every worker, ended first (see the module documentation).
    fn totals(&self) -> (u64, u64) {
        let ended = self.counts.iter().fold(0u64, |sum, c| {
            sum.wrapping_add(c.ended.load(Ordering::Acquire))
        });
        let spawned = self.counts.iter().fold(0u64, |sum, c| {
            sum.wrapping_add(c.spawned.load(Ordering::Relaxed))
        });
        (spawned, ended)
    }

    /// Whether no task is live (see the module documentation).
    fn is_empty(&self) -> bool {
        let (spawned, ended) = self.totals();
        spawned == ended
    }

    /// How many tasks are live (a snapshot: spawned and not yet ended).
    pub(crate) fn live(&self) -> usize {
        let (spawned, ended) = self.totals();
        usize::try_from(spawned.saturating_sub(ended)).unwrap_or(usize::MAX)
    }

    /// Every task that has a slot (see the module documentation: those that shutdown may have
    /// to cancel).
    pub(crate) fn snapshot(&self) -> Vec<TaskRef> {
        self.shards
            .iter()
            .flat_map(|s| {
                let shard = s.lock();
                shard
                    .slots
                    .iter()
                    .flatten()
                    // SAFETY: a task in a slot is alive (module documentation), and stays so
                    // while we hold its shard's lock: it can only leave under that lock.
                    .map(|slot| unsafe { TaskRef::clone_from_header(slot.0) })
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The task with id `id`, if it has a slot — every named task has one from its first run
    /// (a linear search: for rare reports only).
    pub(crate) fn find(&self, id: u64) -> Option<TaskRef> {
        self.shards.iter().find_map(|s| {
            let shard = s.lock();
            shard
                .slots
                .iter()
                .flatten()
                // SAFETY: as in `snapshot`.
                .find(|slot| unsafe { slot.0.as_ref() }.id == id)
                // SAFETY: as in `snapshot`.
                .map(|slot| unsafe { TaskRef::clone_from_header(slot.0) })
        })
    }

    /// Waits until no task is live, or `timeout` passes (never, if None); returns whether
    /// none is.
    pub(crate) fn wait_empty(&self, timeout: Option<Duration>) -> bool {
        // An ender's signal may miss the waiter (module documentation): look again at least
        // this often.
        const RECHECK: Duration = Duration::from_millis(1);
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut guard = lock(&self.empty.0);
        self.waiting.store(true, Ordering::SeqCst);
        while !self.is_empty() {
            let wait = match deadline {
                None => RECHECK,
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return false;
                    }
                    (deadline - now).min(RECHECK)
                }
            };
            guard = self
                .empty
                .1
                .wait_timeout(guard, wait)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
        true
    }
}
