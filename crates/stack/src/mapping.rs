//! A guarded stack mapping: the memory every stack kind is made of.
//!
//! Owns the OS mapping, its slot in the fault handler's registry and its Valgrind
//! registration, and releases all three, in the right order, on drop.
//!
//! Layout, low to high addresses:
//!
//! ```text
//! start         guard_end = limit                 committed_low                top
//!   | guard (no access) | reserved, no access (growable only) | read-write         |
//! ```

use std::mem::ManuallyDrop;
use std::ptr::NonNull;

use crate::error::StackError;
use crate::os;
use crate::registry::{self, Registration, Slot, StackKind, StackRange};
use crate::valgrind;

/// Rounds a requested size up to whole pages; zero (unless `allow_zero`) and sizes that
/// overflow when rounded are errors naming `what`.
pub(crate) fn round_to_pages(
    requested: usize,
    what: &'static str,
    allow_zero: bool,
) -> Result<usize, StackError> {
    if requested == 0 && !allow_zero {
        return Err(StackError::InvalidSize {
            what,
            requested,
            reason: "it must be greater than zero",
        });
    }
    let page = os::page_size();
    let rounded = requested
        .checked_next_multiple_of(page)
        .filter(|&r| r <= isize::MAX as usize);
    rounded.ok_or(StackError::InvalidSize {
        what,
        requested,
        reason: "it is too large for the address space",
    })
}

/// Rounds a guard size up to whole pages. Zero is refused unless `allow_unguarded`: only the
/// `unsafe` constructors, whose callers promise that nothing overflows the stack, may make
/// one without a guard (code on a stack without one overflows into whatever lies below).
pub(crate) fn round_guard(guard: usize, allow_unguarded: bool) -> Result<usize, StackError> {
    if guard == 0 && !allow_unguarded {
        return Err(StackError::InvalidSize {
            what: "guard size",
            requested: 0,
            reason: "without a guard an overflow silently overwrites whatever lies below the \
                     stack (an unguarded stack needs the `unsafe` `with_guard_unchecked`)",
        });
    }
    round_to_pages(guard, "guard size", true)
}

/// One stack's mapping, registered with the fault handler and with Valgrind.
#[derive(Debug)]
pub(crate) struct GuardedMapping {
    /// Lowest address: the start of the guard.
    start: NonNull<u8>,
    /// Guard plus usable size.
    total: usize,
    guard: usize,
    /// Dropped by hand before unmapping, so the handler never sees a stale range.
    registration: ManuallyDrop<Registration>,
    valgrind_id: valgrind::StackId,
}

// SAFETY: the mapping is plain memory owned by this value; the raw pointer is only an
// address. Moving it to another thread moves that ownership (munmap works from any thread).
unsafe impl Send for GuardedMapping {}
// SAFETY: `&GuardedMapping` exposes addresses and operations on the registry slot, which is
// made of atomics; nothing reads or writes the stack memory through a shared reference.
unsafe impl Sync for GuardedMapping {}

impl GuardedMapping {
    /// Maps `guard + usable` bytes and makes the top `committed` bytes read-write.
    ///
    /// All three sizes are page multiples (see [`round_to_pages`]); `committed <= usable`.
    pub(crate) fn new(
        usable: usize,
        guard: usize,
        committed: usize,
        kind: StackKind,
    ) -> Result<Self, StackError> {
        // The handler must be in place before the first guarded stack exists; the thread
        // creating stacks usually runs them, so give it an alternate signal stack too.
        crate::signal::install_fault_handler()?;
        crate::signal::prepare_thread()?;

        let total = usable
            .checked_add(guard)
            .filter(|&t| t <= isize::MAX as usize)
            .ok_or(StackError::InvalidSize {
                what: "stack size plus guard",
                requested: usable,
                reason: "it is too large for the address space",
            })?;
        let start = os::map_stack(total, committed, usable)?;
        let start_addr = start.as_ptr().addr();
        let range = StackRange {
            start: start_addr,
            guard_end: start_addr + guard,
            top: start_addr + total,
            kind,
        };
        let registration = match registry::register(range, range.top - committed) {
            Ok(registration) => registration,
            Err(err) => {
                // SAFETY: the mapping was made above and nothing refers to it yet.
                unsafe { os::unmap(start.as_ptr(), total) };
                return Err(err);
            }
        };
        let valgrind_id = valgrind::register_stack(range.guard_end, range.top);
        Ok(GuardedMapping {
            start,
            total,
            guard,
            registration: ManuallyDrop::new(registration),
            valgrind_id,
        })
    }

    /// One past the highest usable byte (page-aligned, so 16-byte aligned).
    #[inline]
    pub(crate) fn top(&self) -> NonNull<u8> {
        // SAFETY: `start + total` is one past the end of our mapping, which is in bounds for
        // pointer arithmetic and not null.
        unsafe { self.start.add(self.total) }
    }

    /// The lowest usable byte, just above the guard.
    #[inline]
    pub(crate) fn limit(&self) -> NonNull<u8> {
        // SAFETY: `guard < total`, so this stays inside our mapping.
        unsafe { self.start.add(self.guard) }
    }

    #[inline]
    pub(crate) fn usable(&self) -> usize {
        self.total - self.guard
    }

    #[inline]
    pub(crate) fn guard(&self) -> usize {
        self.guard
    }

    #[inline]
    pub(crate) fn slot(&self) -> &'static Slot {
        self.registration.slot()
    }

    /// Bytes currently read-write below the top (all of them, except for growable stacks).
    pub(crate) fn committed(&self) -> usize {
        self.top().as_ptr().addr() - self.slot().committed_low()
    }

    /// Gives back the pages of the committed part that lie more than `keep_resident` bytes
    /// below the top. Returns true if it asked the OS to.
    ///
    /// Only for a stack nothing runs on: the discarded bytes read as zeros afterwards.
    pub(crate) fn discard_below(&self, keep_resident: usize) -> bool {
        let low = self
            .slot()
            .committed_low()
            .max(self.limit().as_ptr().addr());
        let high = self.top().as_ptr().addr().saturating_sub(keep_resident);
        if high <= low {
            return false;
        }
        let offset = low - self.start.as_ptr().addr();
        // SAFETY: `[low, high)` is page-aligned (all bounds are page multiples), inside the
        // committed part of our mapping, and the caller guarantees no code uses the stack.
        unsafe { os::discard(self.start.as_ptr().add(offset), high - low) }
    }

    /// Growable stacks: gives back and re-protects everything committed below
    /// `top - initial`. Returns `Ok(true)` if the stack had grown.
    ///
    /// Only for a stack nothing runs on.
    pub(crate) fn shrink_to(&self, initial: usize) -> Result<bool, StackError> {
        let committed_low = self.slot().committed_low();
        let target_low = self.top().as_ptr().addr() - initial;
        if committed_low >= target_low {
            return Ok(false);
        }
        let offset = committed_low - self.start.as_ptr().addr();
        // SAFETY: `offset` is inside our mapping (committed_low >= limit > start).
        let low = unsafe { self.start.as_ptr().add(offset) };
        let len = target_low - committed_low;
        // SAFETY: `[low, low + len)` is page-aligned, inside our mapping, and holds nothing
        // anyone needs (the caller guarantees the stack is idle).
        unsafe { os::discard(low, len) };
        // SAFETY: as above; making it no-access is exactly the growable stack's initial state.
        unsafe { os::protect(low, len, false, self.usable())? };
        self.slot().set_committed_low(target_low);
        Ok(true)
    }
}

impl Drop for GuardedMapping {
    fn drop(&mut self) {
        valgrind::deregister_stack(self.valgrind_id);
        // SAFETY: dropped exactly once, here, and never used again.
        unsafe { ManuallyDrop::drop(&mut self.registration) };
        // SAFETY: the mapping is ours, it is exactly what `map_stack` returned, and the stack
        // types only drop it when no code runs on it.
        unsafe { os::unmap(self.start.as_ptr(), self.total) };
    }
}
