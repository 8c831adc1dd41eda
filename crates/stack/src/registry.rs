//! The process-wide table of guarded stacks that the fault handler consults.
//!
//! # Why global state
//!
//! A `SIGSEGV` handler receives only a fault address. To tell "this coroutine overflowed"
//! (or "this growable stack needs more pages") from "someone else's bad pointer", it must
//! find the stack that contains the address, without locks or allocation (neither is
//! async-signal-safe). The OS forces that lookup table to be global.
//!
//! # Shape
//!
//! Slots live in chunks that are allocated once and never freed (leaked), linked from
//! [`CHUNKS`]. The handler walks them with atomic loads only. Registering and unregistering
//! happen in normal context and use a `Mutex`-protected free list; the handler never takes
//! that lock.
//!
//! Each slot's address range is published under a sequence lock (`seq` odd while being
//! written) so the handler never acts on a half-written range. The range of the stack that
//! faulted is stable anyway: the stack is alive and in use, so it is not being unregistered.

use std::ptr;
use std::sync::atomic::{
    AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, compiler_fence, fence,
};
use std::sync::{Mutex, PoisonError};

use crate::error::StackError;
use crate::owner::{NAME_CAPACITY, OwnerRecord};

/// Slots per leaked chunk: 64 slots of ~128 bytes, so one chunk is one small allocation.
const SLOTS_PER_CHUNK: usize = 64;
const NAME_WORDS: usize = NAME_CAPACITY / 8;

/// What kind of stack a slot describes; printed in the overflow message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum StackKind {
    Fixed = 1,
    Growable = 2,
    Shared = 3,
    PooledFixed = 4,
    PooledGrowable = 5,
}

impl StackKind {
    fn from_u8(value: u8) -> Option<Self> {
        match value {
            1 => Some(StackKind::Fixed),
            2 => Some(StackKind::Growable),
            3 => Some(StackKind::Shared),
            4 => Some(StackKind::PooledFixed),
            5 => Some(StackKind::PooledGrowable),
            _ => None,
        }
    }

    pub(crate) fn describe(self) -> &'static str {
        match self {
            StackKind::Fixed => "fixed",
            StackKind::Growable => "growable",
            StackKind::Shared => "shared",
            StackKind::PooledFixed => "pooled fixed",
            StackKind::PooledGrowable => "pooled growable",
        }
    }

    #[cfg_attr(not(unix), allow(dead_code))] // growable stacks are Unix-only
    pub(crate) fn is_growable(self) -> bool {
        matches!(self, StackKind::Growable | StackKind::PooledGrowable)
    }
}

/// Where a stack lies: `[start, guard_end)` is the guard, `[guard_end, top)` the usable part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StackRange {
    pub(crate) start: usize,
    pub(crate) guard_end: usize,
    pub(crate) top: usize,
    pub(crate) kind: StackKind,
}

impl StackRange {
    pub(crate) fn contains(&self, addr: usize) -> bool {
        self.start <= addr && addr < self.top
    }

    pub(crate) fn guard_size(&self) -> usize {
        self.guard_end - self.start
    }

    pub(crate) fn usable_size(&self) -> usize {
        self.top - self.guard_end
    }
}

/// `owner_state` values.
const OWNER_NONE: u8 = 0;
const OWNER_WRITING: u8 = 1;
const OWNER_ID: u8 = 2;
const OWNER_NAMED: u8 = 3;

/// One registered stack. All fields are atomics because the fault handler reads them
/// concurrently with normal code.
pub(crate) struct Slot {
    /// Sequence lock over `start`, `guard_end`, `top` and `kind`: odd while they change.
    seq: AtomicU32,
    start: AtomicUsize,
    guard_end: AtomicUsize,
    /// 0 while the slot is free.
    top: AtomicUsize,
    kind: AtomicU8,
    /// Lowest read-write address. For growable stacks the handler lowers it as the stack
    /// grows; for the other kinds it equals `guard_end`.
    committed_low: AtomicUsize,
    owner_state: AtomicU8,
    owner_id: AtomicU64,
    name_len: AtomicU8,
    name: [AtomicU64; NAME_WORDS],
    /// Free-list link; only touched with [`FREE_SLOTS`] locked.
    next_free: AtomicPtr<Slot>,
}

impl Slot {
    const fn new() -> Self {
        Slot {
            seq: AtomicU32::new(0),
            start: AtomicUsize::new(0),
            guard_end: AtomicUsize::new(0),
            top: AtomicUsize::new(0),
            kind: AtomicU8::new(0),
            committed_low: AtomicUsize::new(0),
            owner_state: AtomicU8::new(OWNER_NONE),
            owner_id: AtomicU64::new(0),
            name_len: AtomicU8::new(0),
            name: [const { AtomicU64::new(0) }; NAME_WORDS],
            next_free: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Publishes a range (or, with `top == 0`, retracts it) under the sequence lock.
    fn write_range(&self, range: StackRange, committed_low: usize) {
        // Only one writer at a time: the slot belongs to exactly one `Registration`.
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        // Make the odd value visible before any field changes (classic seqlock writer).
        fence(Ordering::Release);
        self.start.store(range.start, Ordering::Relaxed);
        self.guard_end.store(range.guard_end, Ordering::Relaxed);
        self.top.store(range.top, Ordering::Relaxed);
        self.kind.store(range.kind as u8, Ordering::Relaxed);
        self.committed_low.store(committed_low, Ordering::Relaxed);
        self.owner_state.store(OWNER_NONE, Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(2), Ordering::Release);
    }

    /// The slot's range, if it holds a consistent, registered one.
    fn read_range(&self) -> Option<StackRange> {
        let before = self.seq.load(Ordering::Acquire);
        if before % 2 == 1 {
            return None;
        }
        let range = StackRange {
            start: self.start.load(Ordering::Relaxed),
            guard_end: self.guard_end.load(Ordering::Relaxed),
            top: self.top.load(Ordering::Relaxed),
            kind: StackKind::from_u8(self.kind.load(Ordering::Relaxed))?,
        };
        fence(Ordering::Acquire);
        if self.seq.load(Ordering::Relaxed) != before || range.top == 0 {
            return None;
        }
        Some(range)
    }

    pub(crate) fn committed_low(&self) -> usize {
        self.committed_low.load(Ordering::Relaxed)
    }

    /// Lowers (never raises) the committed bound; used by the fault handler after it grew
    /// the stack. `fetch_min` keeps the lowest bound if two faults race.
    #[cfg_attr(not(unix), allow(dead_code))] // growable stacks are Unix-only
    pub(crate) fn lower_committed_low(&self, new_low: usize) {
        self.committed_low.fetch_min(new_low, Ordering::Relaxed);
    }

    /// Resets the committed bound (pool shrink; the stack is not in use then).
    pub(crate) fn set_committed_low(&self, low: usize) {
        self.committed_low.store(low, Ordering::Relaxed);
    }

    /// Records the owner for overflow messages.
    ///
    /// # Why Relaxed stores and compiler fences are enough
    ///
    /// The reader that matters is the fault handler for an overflow *of this stack*. That
    /// handler runs on the thread that runs the coroutine, and the owner is set by that same
    /// thread before it switches in (or, if the coroutine later moves to another thread, the
    /// hand-off itself synchronizes with the new thread). So the only concurrency is a signal
    /// interrupting this thread between two stores, and for that a compiler fence (a signal
    /// fence) is what orders them: `OWNER_WRITING` is stored before the fields and the final
    /// state after them, so a handler that interrupts sees either the old complete record,
    /// `OWNER_WRITING` (and reports the stack as unowned), or the new complete record. A
    /// handler on an unrelated thread that reads this slot without synchronization can at
    /// worst print a garbled name; it never reads memory that is not a slot.
    pub(crate) fn store_owner(&self, owner: &OwnerRecord) {
        self.owner_state.store(OWNER_WRITING, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        self.owner_id.store(owner.id, Ordering::Relaxed);
        if let Some(len) = owner.name_len {
            self.name_len.store(len, Ordering::Relaxed);
            for (word, bytes) in self.name.iter().zip(owner.name.chunks_exact(8)) {
                let mut chunk = [0u8; 8];
                chunk.copy_from_slice(bytes);
                word.store(u64::from_ne_bytes(chunk), Ordering::Relaxed);
            }
        }
        compiler_fence(Ordering::SeqCst);
        let state = if owner.name_len.is_some() {
            OWNER_NAMED
        } else {
            OWNER_ID
        };
        self.owner_state.store(state, Ordering::Relaxed);
    }

    /// Records `owner`: an unnamed one with [`store_owner_id`](Slot::store_owner_id), a named
    /// one through an [`OwnerRecord`].
    #[inline]
    pub(crate) fn set_owner(&self, owner: crate::Owner<'_>) {
        match owner.name {
            None => self.store_owner_id(owner.id),
            Some(_) => self.store_owner(&OwnerRecord::new(owner)),
        }
    }

    /// Records an unnamed owner: the fast path of [`store_owner`](Slot::store_owner) (three
    /// stores, no name to copy), with the same ordering argument.
    #[inline]
    pub(crate) fn store_owner_id(&self, id: u64) {
        self.owner_state.store(OWNER_WRITING, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        self.owner_id.store(id, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        self.owner_state.store(OWNER_ID, Ordering::Relaxed);
    }

    /// Forgets the owner (a pooled stack went back to the pool). One store.
    #[inline]
    pub(crate) fn clear_owner(&self) {
        self.owner_state.store(OWNER_NONE, Ordering::Relaxed);
    }

    /// The recorded owner; `None` if there is none (or it is being rewritten right now).
    pub(crate) fn load_owner(&self) -> Option<OwnerRecord> {
        let state = self.owner_state.load(Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        let mut record = OwnerRecord {
            id: self.owner_id.load(Ordering::Relaxed),
            name_len: None,
            name: [0; 48],
        };
        match state {
            OWNER_ID => {}
            OWNER_NAMED => {
                let len = self
                    .name_len
                    .load(Ordering::Relaxed)
                    .min(NAME_CAPACITY as u8);
                for (word, bytes) in self.name.iter().zip(record.name.chunks_exact_mut(8)) {
                    bytes.copy_from_slice(&word.load(Ordering::Relaxed).to_ne_bytes());
                }
                record.name_len = Some(len);
            }
            _ => return None,
        }
        Some(record)
    }
}

struct Chunk {
    slots: [Slot; SLOTS_PER_CHUNK],
    /// The chunk that was the head before this one; fixed before publication.
    next: *const Chunk,
}

/// Head of the list of leaked chunks. New chunks are pushed at the head (under
/// [`FREE_SLOTS`]) with a Release store; the handler reads it with Acquire.
static CHUNKS: AtomicPtr<Chunk> = AtomicPtr::new(ptr::null_mut());

/// Free slots, linked through `Slot::next_free`. Used only in normal context.
static FREE_SLOTS: Mutex<FreeList> = Mutex::new(FreeList { head: None });

struct FreeList {
    head: Option<&'static Slot>,
}

impl FreeList {
    fn pop(&mut self) -> Option<&'static Slot> {
        let slot = self.head?;
        let next = slot.next_free.load(Ordering::Relaxed);
        // SAFETY: `next_free` is only ever set (below) from a `&'static Slot` or null, so a
        // non-null value points to a live slot inside a leaked chunk.
        self.head = unsafe { next.as_ref() };
        Some(slot)
    }

    fn push(&mut self, slot: &'static Slot) {
        let next = self
            .head
            .map_or(ptr::null_mut(), |s| ptr::from_ref(s).cast_mut());
        slot.next_free.store(next, Ordering::Relaxed);
        self.head = Some(slot);
    }
}

/// Allocates a chunk that is never freed; `None` if the allocator has no memory.
fn leak_chunk(next: *const Chunk) -> Option<&'static Chunk> {
    let layout = std::alloc::Layout::new::<Chunk>();
    // SAFETY: `Chunk` has a non-zero size.
    let raw = unsafe { std::alloc::alloc(layout) }.cast::<Chunk>();
    if raw.is_null() {
        return None;
    }
    // SAFETY: `raw` is non-null, was allocated with `Chunk`'s layout (so it is aligned and
    // large enough) and is not yet initialized; `write` does not read the old contents.
    unsafe {
        raw.write(Chunk {
            slots: [const { Slot::new() }; SLOTS_PER_CHUNK],
            next,
        })
    };
    // SAFETY: initialized just above and never deallocated, so a `'static` shared reference
    // is valid; all later mutation goes through atomics.
    Some(unsafe { &*raw })
}

/// Ownership of one registry slot; unregisters on drop.
#[derive(Debug)]
pub(crate) struct Registration {
    slot: &'static Slot,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("range", &self.read_range())
            .finish_non_exhaustive()
    }
}

/// Registers a stack so that faults in it are recognized.
pub(crate) fn register(
    range: StackRange,
    committed_low: usize,
) -> Result<Registration, StackError> {
    let mut free = FREE_SLOTS.lock().unwrap_or_else(PoisonError::into_inner);
    let slot = match free.pop() {
        Some(slot) => slot,
        None => {
            let head = CHUNKS.load(Ordering::Relaxed);
            let chunk = leak_chunk(head).ok_or(StackError::OutOfMemory {
                requested: range.top - range.start,
            })?;
            for slot in chunk.slots[1..].iter().rev() {
                free.push(slot);
            }
            // Publish after the chunk is fully built; the handler's Acquire load pairs with it.
            CHUNKS.store(ptr::from_ref(chunk).cast_mut(), Ordering::Release);
            &chunk.slots[0]
        }
    };
    drop(free);
    slot.write_range(range, committed_low);
    Ok(Registration { slot })
}

impl Registration {
    pub(crate) fn slot(&self) -> &'static Slot {
        self.slot
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.slot.write_range(
            StackRange {
                start: 0,
                guard_end: 0,
                top: 0,
                kind: StackKind::Fixed,
            },
            0,
        );
        FREE_SLOTS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(self.slot);
    }
}

/// Finds the registered stack whose reservation (guard included) contains `addr`.
///
/// Async-signal-safe: atomic loads only, no locks, no allocation.
pub(crate) fn find(addr: usize) -> Option<(&'static Slot, StackRange)> {
    let mut chunk_ptr = CHUNKS.load(Ordering::Acquire);
    // SAFETY: every pointer in the chain is null or a leaked, fully initialized chunk
    // (published with Release after initialization; we loaded it with Acquire), and chunks
    // are never freed.
    while let Some(chunk) = unsafe { chunk_ptr.cast_const().as_ref() } {
        for slot in &chunk.slots {
            if let Some(range) = slot.read_range()
                && range.contains(addr)
            {
                return Some((slot, range));
            }
        }
        chunk_ptr = chunk.next.cast_mut();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Owner;

    fn range(start: usize) -> StackRange {
        StackRange {
            start,
            guard_end: start + 0x1000,
            top: start + 0x5000,
            kind: StackKind::Fixed,
        }
    }

    #[test]
    fn registered_ranges_are_found_and_unregistered_ones_are_not() {
        // Addresses in the kernel half: never a real mapping, so no clash with other tests.
        let base = 0xffff_9000_0000_0000;
        let registrations: Vec<_> = (0..200)
            .map(|i| register(range(base + i * 0x10000), base).unwrap())
            .collect();
        let (slot, found) = find(base + 5 * 0x10000 + 0x10).unwrap();
        assert_eq!(found, range(base + 5 * 0x10000));
        assert!(ptr::eq(slot, registrations[5].slot()));
        assert!(find(base + 5 * 0x10000 + 0x5000 + 0x10).is_none());
        drop(registrations);
        assert!(find(base + 5 * 0x10000 + 0x10).is_none());
    }

    #[test]
    fn owner_round_trips_through_a_slot() {
        let base = 0xffff_a000_0000_0000;
        let registration = register(range(base), base).unwrap();
        let slot = registration.slot();
        assert_eq!(slot.load_owner(), None);
        let owner = OwnerRecord::new(Owner::named(42, "worker-3"));
        slot.store_owner(&owner);
        assert_eq!(slot.load_owner(), Some(owner));
        let unnamed = OwnerRecord::new(Owner::new(43));
        slot.store_owner(&unnamed);
        assert_eq!(slot.load_owner(), Some(unnamed));
        slot.clear_owner();
        assert_eq!(slot.load_owner(), None);
    }
}
