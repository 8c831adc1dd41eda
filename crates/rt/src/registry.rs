//! Every live task of a runtime, so that shutdown can cancel what is left and metrics can
//! count them.
//!
//! A task enters when a worker first runs it and leaves when it finishes: two operations on
//! every coroutine's life. So the registry is sharded (one shard per worker: only workers
//! run tasks), each shard a slab — a vector of slots and a
//! free list — behind its own lock, and a task remembers its slot: insert and remove are a few
//! stores under a lock, with no hashing and no shared counter. (A sharded `HashMap` keyed by
//! task id with one global live counter cost about 10 % of a spawn–join and put every spawn
//! on one contended cache line.)
//!
//! **Registered at the first run, not at spawn**: a task is inserted into the shard of the
//! worker that first runs it — the worker it then stays on, which also removes it. Registered
//! at spawn, a task stolen before its first run (most tasks of a tree of coroutines on two
//! workers) was inserted by one worker and removed by the other, and the two workers fought
//! over the spawner's shard lock and its slots' cache lines: 15 % of skynet on 2 workers.
//!
//! Tasks between spawn and first run sit in a scheduling queue and are counted instead: each
//! worker counts the tasks it spawned (one writer, so a load and a store, no read-modify-write;
//! foreign threads' spawns share one atomic counter), and each shard the tasks it started
//! (under its lock, with the insert).
//! Live = registered + spawned − started. At shutdown, a task that starts after the runtime
//! began closing is cancelled before it runs (`worker::run_task`), so shutdown's snapshot
//! need not see it.
//!
//! Counting and snapshots (shutdown, metrics, the monitor's report naming a task) visit every
//! shard; they are rare.
//!
//! `wait_empty` (shutdown) needs to hear when the last task leaves. A remover that empties its
//! shard signals the condvar if a waiter has announced itself; the waiter announces itself
//! before it counts, and counts under each shard's lock, so either its count sees the remover's
//! removal or the remover (whose shard lock follows the waiter's) sees the announcement. It
//! also re-checks every millisecond, for the queued tasks (see [`TaskRegistry::is_empty`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::task::{TaskRef, lock};
use spindle_park::spin::SpinLock;

/// See the module documentation.
pub(crate) struct TaskRegistry {
    shards: Box<[Padded<SpinLock<Shard>>]>,
    /// Per worker, then one for foreign threads: tasks spawned there.
    spawns: Box<[Padded<AtomicU64>]>,
    /// A `wait_empty` is (or was) waiting: removers that empty a shard signal `empty`.
    waiting: AtomicBool,
    empty: (Mutex<()>, Condvar),
}

/// Keeps each shard's lock on its own cache line.
#[repr(align(128))]
struct Padded<T>(T);

#[derive(Default)]
struct Shard {
    /// Tasks inserted here ever (started by this shard's worker).
    started: u64,
    slots: Vec<Option<TaskRef>>,
    free: Vec<u32>,
    len: usize,
}

/// Where a task sits in the registry: (shard, slot), packed for the task's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Key(u64);

impl Key {
    /// A key no task has (a task's key before it is inserted).
    pub(crate) const NONE: Key = Key(u64::MAX);

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
                .map(|_| Padded(SpinLock::new(Shard::default())))
                .collect(),
            spawns: (0..=workers).map(|_| Padded(AtomicU64::new(0))).collect(),
            waiting: AtomicBool::new(false),
            empty: (Mutex::new(()), Condvar::new()),
        }
    }

    /// Counts a task spawned on worker `here` (`None`: another thread), before it is pushed
    /// to a queue. `Some(w)` only on worker `w`'s own thread.
    #[inline]
    pub(crate) fn spawned(&self, here: Option<usize>) {
        let foreign = self.spawns.len() - 1;
        match here {
            Some(w) if w < foreign => {
                let spawned = &self.spawns[w].0;
                // One writer (this worker): a load and a store.
                spawned.store(spawned.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            }
            _ => {
                // SeqCst: ordered before the spawner's second look at `closing` (`spawn_on`).
                self.spawns[foreign].0.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// Takes back a spawn from another thread (`spawned(None)`) whose task was never pushed:
    /// the runtime closed meanwhile.
    pub(crate) fn unspawned_foreign(&self) {
        let foreign = self.spawns.len() - 1;
        self.spawns[foreign].0.fetch_sub(1, Ordering::Relaxed);
    }

    /// Adds `task`, which worker `w` is about to run for the first time (on `w`'s own
    /// thread); returns its key, for [`remove`](TaskRegistry::remove).
    pub(crate) fn insert_started(&self, w: usize, task: TaskRef) -> Key {
        let shard_index = w.min(self.shards.len() - 1);
        let mut shard = self.shards[shard_index].0.lock();
        shard.started += 1;
        let slot = match shard.free.pop() {
            Some(slot) => {
                shard.slots[slot as usize] = Some(task);
                slot
            }
            None => {
                // More than 2^32 live tasks in one shard cannot happen: each holds a stack
                // or at least a heap allocation of well over a byte.
                let slot = shard.slots.len() as u32;
                shard.slots.push(Some(task));
                slot
            }
        };
        shard.len += 1;
        Key(((shard_index as u64) << 32) | u64::from(slot))
    }

    /// (registered, started, spawned) over every shard and worker, read in that order (see
    /// [`is_empty`](Self::is_empty)).
    fn counts(&self) -> (usize, u64, u64) {
        let (registered, started) = self.shards.iter().fold((0, 0u64), |(len, st), s| {
            let shard = s.0.lock();
            (len + shard.len, st.wrapping_add(shard.started))
        });
        let spawned = self
            .spawns
            .iter()
            .fold(0u64, |sp, c| sp.wrapping_add(c.0.load(Ordering::Relaxed)));
        (registered, started, spawned)
    }

    /// Whether no task is live: none registered, none waiting for its first run.
    ///
    /// Each shard's count of registered and started tasks is read under its lock, then the
    /// spawn counts. A task started before its shard was read was spawned before that (spawn,
    /// push, pop, insert: each step synchronizes with the next), so its spawn is counted too;
    /// a task spawned by one that has finished since was spawned before its spawner's removal,
    /// whose shard lock the read took after it. So spawned ≥ started, and the difference is
    /// the tasks still queued (or more, never fewer, if a spawn races with the read).
    fn is_empty(&self) -> bool {
        let (registered, started, spawned) = self.counts();
        registered == 0 && spawned == started
    }

    /// Removes the task at `key` (a no-op for [`Key::NONE`] or a vacant slot), and drops the
    /// registry's reference to it after the shard's lock is released.
    pub(crate) fn remove(&self, key: Key) {
        let Some(padded) = self.shards.get(key.shard()) else {
            return;
        };
        let (removed, now_empty) = {
            let mut shard = padded.0.lock();
            let removed = shard.slots.get_mut(key.slot()).and_then(Option::take);
            if removed.is_some() {
                shard.free.push(key.slot() as u32);
                shard.len -= 1;
            }
            (removed, shard.len == 0)
        };
        if removed.is_some() && now_empty && self.waiting.load(Ordering::SeqCst) {
            let _guard = lock(&self.empty.0);
            self.empty.1.notify_all();
        }
        drop(removed);
    }

    /// How many tasks are live (a snapshot: registered, plus spawned and not yet started).
    pub(crate) fn live(&self) -> usize {
        let (registered, started, spawned) = self.counts();
        let queued = usize::try_from(spawned.saturating_sub(started)).unwrap_or(usize::MAX);
        registered.saturating_add(queued)
    }

    /// Every live task.
    pub(crate) fn snapshot(&self) -> Vec<TaskRef> {
        self.shards
            .iter()
            .flat_map(|s| {
                s.0.lock()
                    .slots
                    .iter()
                    .flatten()
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The live task with id `id`, if any (a linear search: for rare reports only).
    pub(crate) fn find(&self, id: u64) -> Option<TaskRef> {
        self.shards.iter().find_map(|s| {
            s.0.lock()
                .slots
                .iter()
                .flatten()
                .find(|t| t.header().id == id)
                .cloned()
        })
    }

    /// Waits until no task is live, or `timeout` passes (never, if None); returns whether
    /// none is.
    pub(crate) fn wait_empty(&self, timeout: Option<Duration>) -> bool {
        // The start counts signal nothing: look again at least this often.
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
