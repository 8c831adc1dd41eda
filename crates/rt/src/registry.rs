//! Every live task of a runtime, so that shutdown can cancel what is left and metrics can
//! count them.
//!
//! A task enters at spawn and leaves when it finishes: two operations on every coroutine's
//! life, on whichever workers spawn and finish them. So the registry is sharded (one shard per
//! worker, plus one for spawns from other threads), each shard a slab — a vector of slots and
//! a free list — behind its own mutex, and a task remembers its slot: insert and remove are a
//! few stores under an uncontended lock, with no hashing and no shared counter. (A sharded
//! `HashMap` keyed by task id with one global live counter cost about 10 % of a spawn–join
//! and put every spawn on one contended cache line.)
//!
//! Counting and snapshots (shutdown, metrics, the monitor's report naming a task) visit every
//! shard; they are rare.
//!
//! `wait_empty` (shutdown) needs to hear when the last task leaves. A remover that empties its
//! shard signals the condvar if a waiter has announced itself; the waiter announces itself
//! before it counts, and counts under each shard's lock, so either its count sees the remover's
//! removal or the remover (whose shard lock follows the waiter's) sees the announcement.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::task::{TaskRef, lock};
use spindle_park::spin::SpinLock;

/// See the module documentation.
pub(crate) struct TaskRegistry {
    shards: Box<[Padded<SpinLock<Shard>>]>,
    /// A `wait_empty` is (or was) waiting: removers that empty a shard signal `empty`.
    waiting: AtomicBool,
    empty: (Mutex<()>, Condvar),
}

/// Keeps each shard's lock on its own cache line.
#[repr(align(128))]
struct Padded<T>(T);

#[derive(Default)]
struct Shard {
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

    pub(crate) fn to_bits(self) -> u64 {
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
            shards: (0..=workers)
                .map(|_| Padded(SpinLock::new(Shard::default())))
                .collect(),
            waiting: AtomicBool::new(false),
            empty: (Mutex::new(()), Condvar::new()),
        }
    }

    /// Adds `task`, from worker `here` (`None`: another thread); returns its key, for
    /// [`remove`](TaskRegistry::remove).
    pub(crate) fn insert(&self, here: Option<usize>, task: TaskRef) -> Key {
        let shard_index = match here {
            Some(w) if w + 1 < self.shards.len() => w,
            _ => self.shards.len() - 1,
        };
        let mut shard = self.shards[shard_index].0.lock();
        let slot = match shard.free.pop() {
            Some(slot) => {
                shard.slots[slot as usize] = Some(task);
                slot
            }
            None => {
                // More than 2^32 live tasks in one shard cannot happen: each holds a stack or
                // at least a heap allocation of well over a byte.
                let slot = shard.slots.len() as u32;
                shard.slots.push(Some(task));
                slot
            }
        };
        shard.len += 1;
        Key(((shard_index as u64) << 32) | u64::from(slot))
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

    /// How many tasks are live.
    pub(crate) fn live(&self) -> usize {
        self.shards.iter().map(|s| s.0.lock().len).sum()
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
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut guard = lock(&self.empty.0);
        self.waiting.store(true, Ordering::SeqCst);
        while self.live() != 0 {
            guard = match deadline {
                None => self.empty.1.wait(guard).unwrap_or_else(|e| e.into_inner()),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return false;
                    }
                    self.empty
                        .1
                        .wait_timeout(guard, deadline - now)
                        .map(|(g, _)| g)
                        .unwrap_or_else(|e| e.into_inner().0)
                }
            };
        }
        true
    }
}
