//! Shared (copying) stacks: many coroutines take turns on one region, as libaco does it.

use std::cell::Cell;
use std::fmt;
use std::mem::ManuallyDrop;
use std::ptr::{self, NonNull};
use std::rc::Rc;

use crate::error::StackError;
use crate::mapping::{GuardedMapping, round_guard, round_to_pages};
use crate::owner::{Owner, OwnerRecord};
use crate::registry::StackKind;
use crate::{Stack, os};

/// A stack region shared by many coroutines, each of which runs on it in turn.
///
/// Only one coroutine — the *occupant* — has its bytes in the region at a time. Resuming a
/// different coroutine on the region first copies the occupant's live bytes
/// (`[its sp, top - 16)`) out to the occupant's heap buffer, then copies the resumed one's
/// bytes back in. The top 16 bytes ([`UNSAVED_TOP`](Stack::UNSAVED_TOP)) are not kept: they
/// are spindle-context's link and entry words, which a suspended context does not need. A
/// suspended coroutine therefore costs only the stack it actually uses, which is how libaco
/// runs 10 million coroutines in under 3 GB. The price is a copy whenever the region changes
/// hands, so coroutines that are resumed in turn should be spread over several regions, and a
/// coroutine resumed repeatedly while it stays the occupant pays nothing.
///
/// Every coroutine gets a [`SharedSlot`] (its claim on the region plus its save buffer),
/// which is what implements [`Stack`]. All slots of a region have the same
/// [`top`](Stack::top): the point is that the bytes go back to the same addresses.
///
/// # The shared-stack contract
///
/// While a coroutine on a shared stack is suspended, its stack bytes may live elsewhere
/// (in its save buffer), and another coroutine's bytes occupy those addresses. Therefore:
///
/// - **no pointer into the region may be held by anyone** while its coroutine is
///   suspended: not by wait-queue nodes, not by other coroutines, not by the kernel;
/// - waiter records live in heap-allocated task state, never on the coroutine's stack;
/// - IO buffers that lie on a shared stack are bounced through a heap buffer before they
///   are lent to the kernel (io_uring, IOCP);
/// - a coroutine on a shared stack never migrates to another thread (the region and its
///   slots are `!Send`).
///
/// A coroutine running on a region cannot resume another coroutine on the *same* region:
/// that would overwrite its own live stack. [`Stack::before_resume`] refuses with
/// [`StackError::SharedStackBusy`].
///
/// # Example
///
/// The coroutine crate drives the hooks; here is what it does, by hand:
///
/// ```
/// use spindle_stack::{SharedSlot, SharedStack, Stack};
///
/// let region = SharedStack::new(64 * 1024)?;
/// let (a, b) = (region.slot(), region.slot());
/// assert_eq!(a.top(), b.top());
///
/// // Coroutine A starts, uses 100 bytes of stack, suspends.
/// unsafe { a.before_resume(None)? };
/// let a_sp = unsafe { a.top().sub(100) };
/// unsafe { a_sp.write_bytes(0xAA, 100) };
/// unsafe { a.after_suspend(a_sp) };
///
/// // Coroutine B takes the region: A's bytes below the top 16 are saved to A's buffer.
/// unsafe { b.before_resume(None)? };
/// assert_eq!(a.saved_len(), 100 - SharedSlot::UNSAVED_TOP);
/// let b_sp = unsafe { b.top().sub(50) };
/// unsafe { b.after_suspend(b_sp) };
///
/// // A again: B's bytes are saved, A's restored.
/// unsafe { a.before_resume(Some(a_sp))? };
/// assert_eq!(unsafe { a_sp.read() }, 0xAA);
/// assert_eq!((a.saved_len(), b.saved_len()), (0, 50 - SharedSlot::UNSAVED_TOP));
/// # unsafe { a.after_suspend(a_sp) };
/// # Ok::<(), spindle_stack::StackError>(())
/// ```
#[derive(Clone)]
pub struct SharedStack {
    region: Rc<Region>,
}

/// Counters of a [`SharedStack`]'s copying.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SharedStackStats {
    /// Bytes copied out of the region into save buffers.
    pub bytes_saved: u64,
    /// Bytes copied from save buffers back into the region.
    pub bytes_restored: u64,
    /// Times an occupant was evicted (its bytes saved) to make room for another coroutine.
    pub evictions: u64,
    /// Times the region changed hands (`before_resume` of a slot that was not the occupant).
    pub switches: u64,
}

struct Region {
    mapping: GuardedMapping,
    /// The occupant's state (null: none). Invariant: non-null only while that slot is
    /// alive; a slot clears it in `after_finish` and in `Drop`, and both the region and its
    /// slots are `!Send`, so this is never observed from another thread.
    occupant: Cell<*const SlotState>,
    /// The occupant's stack pointer when it last suspended (clamped into the region): its kept
    /// bytes are `[occupant_sp, top - UNSAVED_TOP)`. `None` while there is no occupant or it
    /// has not suspended yet. Kept here rather than in every slot: only the occupant's is needed.
    occupant_sp: Cell<Option<NonNull<u8>>>,
    /// The occupant is running (between `before_resume` and `after_suspend`).
    running: Cell<bool>,
    stats: Cell<SharedStackStats>,
    /// Slot states of dropped slots, for the next `slot()` (at most [`SPARE_STATES`]): a
    /// region serves many short-lived coroutines, and an allocation and a free per coroutine
    /// were ~6 % of a skynet node. Their save buffers are freed, not kept.
    /// (Boxes on purpose, against clippy's `vec_box`: a slot state's address must not change
    /// while a slot holds it, and a slot takes the box itself.)
    #[allow(clippy::vec_box)]
    spare: Cell<Vec<Box<SlotState>>>,
}

/// Bytes at the region's top that an eviction does not save (see [`Stack::UNSAVED_TOP`]):
/// the context's link and entry words, which take a 16-byte allocation step off every
/// suspended coroutine's save buffer. The same as `spindle_context::STACK_RESERVED`, which
/// spindle-coro checks; this crate does not depend on the context crate.
const UNSAVED_TOP: usize = 16;

/// How many slot states a region keeps for reuse (three words each).
const SPARE_STATES: usize = 1024;

impl SharedStack {
    /// A region of `size` bytes (rounded up to whole pages) with a one-page guard.
    ///
    /// Size it for the deepest coroutine that will run on it; only what each coroutine
    /// actually uses is copied.
    ///
    /// # Errors
    ///
    /// As for [`FixedStack::new`](crate::FixedStack::new).
    pub fn new(size: usize) -> Result<Self, StackError> {
        Self::with_guard(size, os::page_size())
    }

    /// A region of `size` bytes with a guard of `guard` bytes (both rounded up to whole
    /// pages).
    ///
    /// # Errors
    ///
    /// As for [`FixedStack::new`](crate::FixedStack::new); also [`StackError::InvalidSize`]
    /// for a `guard` of 0 (an unguarded region needs
    /// [`with_guard_unchecked`](SharedStack::with_guard_unchecked)).
    pub fn with_guard(size: usize, guard: usize) -> Result<Self, StackError> {
        Self::make(size, guard, false)
    }

    /// Like [`with_guard`](SharedStack::with_guard), but a `guard` of 0 makes a region
    /// without a guard: nothing stops an overflow, which silently overwrites whatever lies
    /// below.
    ///
    /// # Errors
    ///
    /// As for [`FixedStack::new`](crate::FixedStack::new).
    ///
    /// # Safety
    ///
    /// If `guard` is 0, nothing that runs on the region may ever use more than its usable
    /// size (`size` rounded up to whole pages) — for a coroutine, its closure and everything
    /// it calls, unwinding included. (With a `guard` above 0 this is `with_guard`, and safe.)
    pub unsafe fn with_guard_unchecked(size: usize, guard: usize) -> Result<Self, StackError> {
        Self::make(size, guard, true)
    }

    fn make(size: usize, guard: usize, allow_unguarded: bool) -> Result<Self, StackError> {
        let usable = round_to_pages(size, "stack size", false)?;
        let guard = round_guard(guard, allow_unguarded)?;
        let mapping = GuardedMapping::new(usable, guard, usable, StackKind::Shared)?;
        Ok(SharedStack {
            region: Rc::new(Region {
                mapping,
                occupant: Cell::new(ptr::null()),
                occupant_sp: Cell::new(None),
                running: Cell::new(false),
                spare: Cell::new(Vec::new()),
                stats: Cell::new(SharedStackStats::default()),
            }),
        })
    }

    /// A new claim on this region for one coroutine. Cheap: one small allocation, or none
    /// when a dropped slot's state can be reused; the save buffer is allocated when the
    /// coroutine is first evicted.
    pub fn slot(&self) -> SharedSlot {
        let mut spare = self.region.spare.take();
        let state = spare.pop();
        self.region.spare.set(spare);
        let state = match state {
            // Reset by `release` when its slot was dropped.
            Some(state) => state,
            None => Box::new(SlotState {
                saved: Cell::new(None),
                owner: SlotOwner::none(),
            }),
        };
        SharedSlot {
            region: Rc::clone(&self.region),
            state: ManuallyDrop::new(state),
        }
    }

    /// The region's copying counters.
    pub fn stats(&self) -> SharedStackStats {
        self.region.stats.get()
    }

    /// Usable bytes of the region.
    pub fn usable_size(&self) -> usize {
        self.region.mapping.usable()
    }
}

impl fmt::Debug for SharedStack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedStack")
            .field("top", &self.region.mapping.top())
            .field("usable_size", &self.region.mapping.usable())
            .field("stats", &self.stats())
            .finish()
    }
}

impl Region {
    fn update_stats(&self, change: impl FnOnce(&mut SharedStackStats)) {
        let mut stats = self.stats.get();
        change(&mut stats);
        self.stats.set(stats);
    }
}

/// One coroutine's claim on a [`SharedStack`] region, and its save buffer.
///
/// Implements [`Stack`] with [`COPYING`](Stack::COPYING) = true; see [`SharedStack`] for
/// how the hooks move bytes, and for the contract coroutines on a shared stack must keep.
/// `!Send`: a coroutine on a shared stack stays on its thread.
pub struct SharedSlot {
    region: Rc<Region>,
    /// Boxed so that its address, which the region records as the occupant, is stable.
    /// Given back to the region's spares by `Drop` (hence `ManuallyDrop`).
    state: ManuallyDrop<Box<SlotState>>,
}

/// A slot's state: three words, since every suspended coroutine on a shared stack has one
/// (the stack pointer of a suspended coroutine is not among them: the region keeps its
/// occupant's, and an evicted coroutine's is `top - UNSAVED_TOP - saved.len()`).
struct SlotState {
    /// The save buffer, sized exactly: while the slot is not the occupant it holds
    /// `[sp, top - UNSAVED_TOP)` of the suspended coroutine (`None`: it has no bytes, not
    /// started or finished); while it is the occupant it holds nothing live and is only kept
    /// for the next eviction, which reuses it if the depth is the same. A `Cell` (taken and
    /// put back) so that no borrow flag can fail.
    saved: Cell<Option<Box<[u8]>>>,
    owner: SlotOwner,
}

/// Who a slot's coroutine is, for overflow messages, in one word (it is in every suspended
/// coroutine's state): null for nobody; an unnamed owner whose id fits in all but one bit of
/// a word is that id shifted left with the low bit set (an address without provenance, never
/// dereferenced); any other owner (a name is rare on a shared stack) is the address of a
/// boxed [`OwnerRecord`], whose low bit is clear (it is 8-aligned).
struct SlotOwner(Cell<*mut OwnerRecord>);

impl SlotOwner {
    const fn none() -> Self {
        SlotOwner(Cell::new(ptr::null_mut()))
    }

    /// Replaces the owner.
    fn set(&self, owner: Owner<'_>) {
        let word = match usize::try_from(owner.id) {
            Ok(id) if owner.name.is_none() && id <= usize::MAX >> 1 => {
                ptr::without_provenance_mut((id << 1) | 1)
            }
            _ => Box::into_raw(Box::new(OwnerRecord::new(owner))),
        };
        self.clear();
        self.0.set(word);
    }

    /// Forgets the owner (freeing its record, if it has one).
    fn clear(&self) {
        let word = self.0.replace(ptr::null_mut());
        if !word.is_null() && word.addr() & 1 == 0 {
            // SAFETY: a non-null word with the low bit clear came from `Box::into_raw` in
            // `set`, and was just taken out of the cell, so it is freed exactly once.
            drop(unsafe { Box::from_raw(word) });
        }
    }

    /// Records this owner in the region's registry slot (overflow messages read it), or
    /// clears the registry's owner if there is none.
    fn store(&self, slot: &crate::registry::Slot) {
        let word = self.0.get();
        if word.is_null() {
            slot.clear_owner();
        } else if word.addr() & 1 == 1 {
            slot.store_owner_id((word.addr() >> 1) as u64);
        } else {
            // SAFETY: a non-null word with the low bit clear is the record boxed by `set`,
            // alive until `clear` takes it out of the cell, which cannot happen while this
            // borrow lasts (the slot is `!Sync` and nothing here calls back into it).
            slot.store_owner(unsafe { &*word });
        }
    }
}

impl Drop for SlotOwner {
    fn drop(&mut self) {
        self.clear();
    }
}

impl SharedSlot {
    /// Bytes of this coroutine's stack currently held in its save buffer (0 while it is the
    /// region's occupant, or has not started, or has finished).
    pub fn saved_len(&self) -> usize {
        if self.is_occupant_ptr() {
            0
        } else {
            self.capacity()
        }
    }

    /// The save buffer's size in bytes: exactly what the last eviction saved (the buffer is
    /// kept while the slot is the occupant, for the next eviction; 0 if there is none).
    pub fn capacity(&self) -> usize {
        let saved = self.state.saved.take();
        let len = saved.as_ref().map_or(0, |saved| saved.len());
        self.state.saved.set(saved);
        len
    }

    /// Whether this coroutine's bytes are the ones in the region now.
    pub fn is_occupant(&self) -> bool {
        self.is_occupant_ptr()
    }

    /// The region this slot belongs to.
    pub fn region(&self) -> SharedStack {
        SharedStack {
            region: Rc::clone(&self.region),
        }
    }

    fn is_occupant_ptr(&self) -> bool {
        ptr::eq(self.region.occupant.get(), &**self.state)
    }

    /// The region changes hands: evict the occupant (saving its bytes), restore ours.
    #[cold]
    #[inline(never)]
    fn take_over(&self, sp: Option<NonNull<u8>>) -> Result<(), StackError> {
        let region = &*self.region;
        if region.running.get() {
            return Err(StackError::SharedStackBusy);
        }
        let top = region.mapping.top();
        // Where the kept bytes end: the region's top less the words nobody needs kept (see
        // `UNSAVED_TOP`). Regions are whole pages; the lengths below are clamped even so.
        let kept_top = top.as_ptr().wrapping_sub(UNSAVED_TOP);
        let occupant = region.occupant.get();
        // SAFETY: a non-null occupant points to the state of a live slot of this region (see
        // `Region::occupant`); we only use it on this thread.
        if let Some(occupant) = unsafe { occupant.as_ref() } {
            let mut saved_bytes = 0;
            if let Some(occupant_sp) = region.occupant_sp.get() {
                // `after_suspend` records a stack pointer inside the region; clamped again here,
                // as the copy below must never leave the region (outside it: all of it).
                let limit = region.mapping.limit();
                let in_region = limit.as_ptr().addr() <= occupant_sp.as_ptr().addr()
                    && occupant_sp.as_ptr().addr() <= top.as_ptr().addr();
                let occupant_sp = if in_region { occupant_sp } else { limit };
                // A stack pointer within the unsaved top words leaves nothing to keep.
                let len = kept_top.addr().saturating_sub(occupant_sp.as_ptr().addr());
                let mut buffer = occupant.saved.take();
                let result = save(&mut buffer, occupant_sp, len);
                occupant.saved.set(buffer);
                // On failure nothing changed: the occupant's bytes are still in the region.
                result?;
                saved_bytes = len as u64;
            } else {
                // It never suspended, so nothing of it is live: no bytes to keep.
                occupant.saved.set(None);
            }
            region.update_stats(|stats| {
                stats.evictions += 1;
                stats.bytes_saved += saved_bytes;
            });
            region.occupant.set(ptr::null());
            region.occupant_sp.set(None);
        }

        let buffer = self.state.saved.take();
        if let (Some(_), Some(buffer)) = (sp, &buffer) {
            // Saved from inside the region (clamped when it was saved), so it fits; never
            // written past the region's limit even so.
            let len = buffer
                .len()
                .min(region.mapping.usable().saturating_sub(UNSAVED_TOP));
            crate::valgrind::make_mem_undefined(kept_top.addr() - len, len);
            // SAFETY: the buffer holds `[recorded sp, kept_top)` of this coroutine, so
            // `kept_top - len` is that sp, inside the region (`len` is clamped to the room
            // below `kept_top` even so); the region is not in use (no occupant now), and a
            // heap buffer cannot overlap the mapping.
            unsafe { ptr::copy_nonoverlapping(buffer.as_ptr(), kept_top.sub(len), len) };
            region.update_stats(|stats| stats.bytes_restored += len as u64);
            region
                .occupant_sp
                .set(NonNull::new(kept_top.wrapping_sub(len)));
        }
        // The bytes are in the region now (or there were none); the buffer stays for the next
        // eviction, which reuses it when the coroutine suspends at the same depth.
        self.state.saved.set(buffer);

        region.occupant.set(&**self.state);
        region.running.set(true);
        region.update_stats(|stats| stats.switches += 1);
        // Overflow messages name whoever runs on the region.
        self.state.owner.store(region.mapping.slot());
        Ok(())
    }

    /// Forgets this coroutine's bytes and, if it is the occupant, gives up the region.
    fn release(&self) {
        self.state.saved.set(None);
        if self.is_occupant_ptr() {
            self.region.occupant.set(ptr::null());
            self.region.occupant_sp.set(None);
            self.region.running.set(false);
            self.region.mapping.slot().clear_owner();
        }
    }
}

#[cfg(spindle_asan)]
unsafe extern "C" {
    /// ASan's runtime (linked in by `-Zsanitizer=address`, the only build that sets
    /// `spindle_asan`): marks `[addr, addr + size)` addressable in its shadow.
    #[link_name = "__asan_unpoison_memory_region"]
    fn asan_unpoison_memory_region(addr: *const std::ffi::c_void, size: usize);
}

/// Copies `[sp, sp + len)` into `buffer`, which is then exactly `len` bytes: the buffer is
/// reused if it has that size, else replaced (a new one is allocated first, so on failure the
/// old one is left as it was).
fn save(buffer: &mut Option<Box<[u8]>>, sp: NonNull<u8>, len: usize) -> Result<(), StackError> {
    let reuse = matches!(buffer, Some(old) if old.len() == len);
    let mut fresh = Vec::new();
    if !reuse {
        fresh
            .try_reserve_exact(len)
            .map_err(|_| StackError::OutOfMemory { requested: len })?;
    }
    // Under ASan the occupant's frames carry poisoned redzones, which the copy would read (a
    // stack-buffer-overflow report for bytes that are saved and restored, never interpreted).
    // Unpoisoned first: the frames come back without their redzones (those are not checked
    // again), frames entered after that have theirs, and the region holds no stale poison
    // for the next occupant's frames.
    #[cfg(spindle_asan)]
    // SAFETY: `[sp, sp + len)` is part of the region's mapping; nothing runs on it. Only
    // ASan's shadow of it changes.
    unsafe {
        asan_unpoison_memory_region(sp.as_ptr().cast(), len)
    };
    let target = match buffer {
        Some(old) if reuse => old.as_mut_ptr(),
        _ => fresh.as_mut_ptr(),
    };
    // SAFETY: `[sp, sp + len)` is the suspended occupant's live stack inside the region
    // (mapped, read-write, nothing runs on it); `target` has room for `len` bytes (the old
    // buffer, exactly that long, or `fresh`, reserved for exactly that) and, being heap
    // memory, does not overlap the region.
    unsafe { ptr::copy_nonoverlapping(sp.as_ptr(), target, len) };
    if !reuse {
        // SAFETY: not reused, so the copy above initialised the first `len` bytes of
        // `fresh`, which has room for them.
        unsafe { fresh.set_len(len) };
        // Its capacity is exactly `len`, so this does not reallocate.
        *buffer = Some(fresh.into_boxed_slice());
    }
    Ok(())
}

// SAFETY: `[limit, top)` is the read-write part of the region's mapping, which lives as
// long as any slot (each holds an `Rc`). While a coroutine runs, no one else uses the
// region: `before_resume` refuses (SharedStackBusy) while another slot's coroutine is
// running, and evicts the previous occupant's bytes to its buffer first. `top` is
// page-aligned and the same for every slot; the addresses never change. Below `limit` lies a
// no-access guard of at least a page, unless the region was made by
// `with_guard_unchecked(_, 0)`, whose caller promised that nothing overflows it.
unsafe impl Stack for SharedSlot {
    const COPYING: bool = true;
    const UNSAVED_TOP: usize = UNSAVED_TOP;

    fn top(&self) -> NonNull<u8> {
        self.region.mapping.top()
    }

    fn limit(&self) -> NonNull<u8> {
        self.region.mapping.limit()
    }

    fn usable_size(&self) -> usize {
        self.region.mapping.usable()
    }

    fn guard_size(&self) -> usize {
        self.region.mapping.guard()
    }

    fn set_owner(&self, owner: Owner<'_>) {
        self.state.owner.set(owner);
        if self.is_occupant_ptr() {
            self.state.owner.store(self.region.mapping.slot());
        }
    }

    /// Fast path (this slot is already the occupant): two loads and a store.
    unsafe fn before_resume(&self, sp: Option<NonNull<u8>>) -> Result<(), StackError> {
        let region = &*self.region;
        if ptr::eq(region.occupant.get(), &**self.state) {
            if region.running.get() {
                return Err(StackError::SharedStackBusy);
            }
            region.running.set(true);
            return Ok(());
        }
        self.take_over(sp)
    }

    unsafe fn after_suspend(&self, sp: NonNull<u8>) {
        // A coroutine may suspend from a nested coroutine's stack (a task on a shared stack
        // that parks while a generator it resumed runs): `sp` is then outside the region, and
        // the coroutine's own frames lie somewhere in it, below the point where it switched to
        // the nested stack, which is not known here. The whole region is its then.
        let region = &self.region.mapping;
        let in_region = region.limit().as_ptr().addr() <= sp.as_ptr().addr()
            && sp.as_ptr().addr() <= region.top().as_ptr().addr();
        let sp = if in_region { sp } else { region.limit() };
        // Only the occupant runs, so only it suspends (anything else has nothing in the
        // region to record).
        if self.is_occupant_ptr() {
            self.region.occupant_sp.set(Some(sp));
            self.region.running.set(false);
        }
    }

    unsafe fn after_finish(&self) {
        self.release();
    }
}

impl Drop for SharedSlot {
    fn drop(&mut self) {
        self.release();
        self.state.owner.clear();
        // SAFETY: `drop` runs once, and `self.state` is not used after this.
        let state = unsafe { ManuallyDrop::take(&mut self.state) };
        let mut spare = self.region.spare.take();
        if spare.len() < SPARE_STATES {
            spare.push(state);
        }
        self.region.spare.set(spare);
    }
}

impl fmt::Debug for SharedSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedSlot")
            .field("top", &self.top())
            .field("occupant", &self.is_occupant())
            .field("saved_len", &self.saved_len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_state_is_three_words() {
        assert_eq!(size_of::<SlotState>(), 3 * size_of::<usize>());
    }

    #[test]
    fn the_occupant_names_its_owner_by_id_large_id_or_name() {
        let region = SharedStack::new(16 * 1024).unwrap();
        let slot = region.slot();
        // SAFETY: nothing runs on the region; no stack pointer is restored.
        unsafe { slot.before_resume(None).unwrap() };
        let registry = region.region.mapping.slot();
        for (owner, name) in [
            (Owner::new(7), None),
            (Owner::new(u64::MAX), None),
            (Owner::named(u64::MAX >> 1, "parser"), Some(&b"parser"[..])),
            (Owner::new(0), None),
        ] {
            slot.set_owner(owner);
            let record = registry.load_owner().unwrap();
            assert_eq!((record.id, record.name_bytes()), (owner.id, name));
        }
    }
}
