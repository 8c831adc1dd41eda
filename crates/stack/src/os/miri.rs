//! The OS layer under Miri: "mappings" are page-aligned heap allocations.
//!
//! Miri cannot run `mmap`/`mprotect`/`madvise`/`munmap` on the memory it tracks, so under
//! `cfg(miri)` this module stands in for `unix.rs`/`windows.rs` (the loom-swap style: same
//! functions, another implementation), and everything above it — the pool's caches, caps,
//! trimming and stats, the registry, `GuardedMapping` — runs unchanged on memory Miri can
//! check. What it cannot model: guard pages (the no-access part is plain read-write heap
//! memory here, so an overflow is not caught by a fault but would be reported by Miri only
//! if it left the allocation) and lazy commit (everything is committed from the start).
//!
//! Semantics kept: a reservation reads as zeros when new (like an anonymous mapping), and
//! discarded pages read as zeros afterwards (like `MADV_DONTNEED` on private anonymous
//! memory), so tests that check trimming by reading the memory back still mean something.

use std::alloc::Layout;
use std::ptr::{self, NonNull};

use crate::error::StackError;

/// A fixed page size: there is no OS to ask (and 4 KiB is what the tests assume natively).
const PAGE_SIZE: usize = 4096;

/// The page size: 4096 under Miri.
pub(crate) fn page_size() -> usize {
    PAGE_SIZE
}

/// The layout of a reservation of `total` bytes (page-aligned, like a mapping).
fn layout(total: usize) -> Option<Layout> {
    Layout::from_size_align(total, PAGE_SIZE)
        .ok()
        .filter(|l| l.size() > 0)
}

/// "Maps" `total` bytes: a zeroed, page-aligned heap allocation. All of it is read-write
/// (there is no protection to set up), whatever `writable` says. Returns the lowest address.
///
/// `requested` is the stack size to name in error messages.
pub(crate) fn map_stack(
    total: usize,
    writable: usize,
    requested: usize,
) -> Result<NonNull<u8>, StackError> {
    debug_assert!(writable <= total);
    let layout = layout(total).ok_or(StackError::InvalidSize {
        what: "stack size",
        requested,
        reason: "zero, or too large for the address space",
    })?;
    // SAFETY: `layout` has a non-zero size (checked in `layout`).
    let raw = unsafe { std::alloc::alloc_zeroed(layout) };
    NonNull::new(raw).ok_or(StackError::OutOfMemory { requested })
}

/// Would make `[addr, addr + len)` read-write or no-access; under Miri the memory stays
/// read-write, so this only checks the arguments the way `mprotect` would.
///
/// # Safety
///
/// The range is page-aligned and lies inside a reservation from [`map_stack`] owned by the
/// caller, and nothing that may still be used lies in it when it is made no-access (the same
/// contract as the real implementations, so callers are checked against it).
pub(crate) unsafe fn protect(
    addr: *mut u8,
    len: usize,
    writable: bool,
    requested: usize,
) -> Result<(), StackError> {
    let _ = (writable, requested);
    debug_assert!(addr.addr().is_multiple_of(PAGE_SIZE) && len.is_multiple_of(PAGE_SIZE));
    Ok(())
}

/// "Gives back" the pages of `[addr, addr + len)`: zeroes them, which is what reading them
/// after `MADV_DONTNEED` shows. Always succeeds.
///
/// # Safety
///
/// The range is page-aligned, lies inside a reservation from [`map_stack`] owned by the
/// caller, and holds nothing anyone still needs.
pub(crate) unsafe fn discard(addr: *mut u8, len: usize) -> bool {
    debug_assert!(addr.addr().is_multiple_of(PAGE_SIZE) && len.is_multiple_of(PAGE_SIZE));
    // SAFETY: the caller guarantees `[addr, addr + len)` lies inside one of our allocations
    // (so it is valid for writes of `len` bytes, and `u8` needs no alignment) and that no one
    // reads or writes it concurrently or needs its contents.
    unsafe { ptr::write_bytes(addr, 0, len) };
    true
}

/// Frees a reservation made by [`map_stack`].
///
/// # Safety
///
/// `[addr, addr + len)` is exactly a reservation returned by [`map_stack`] (`len` is the
/// `total` it was made with), and nothing uses it any more.
pub(crate) unsafe fn unmap(addr: *mut u8, len: usize) {
    let layout = layout(len).expect("unmap: the length of a reservation from map_stack");
    // SAFETY: the caller guarantees `addr` was allocated by `map_stack` with `total == len`,
    // i.e. by the global allocator with exactly this layout, and is not used afterwards.
    unsafe { std::alloc::dealloc(addr, layout) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_are_zeroed_and_discard_zeroes() {
        let total = 4 * PAGE_SIZE;
        let base = map_stack(total, 3 * PAGE_SIZE, total).unwrap();
        assert!(base.as_ptr().addr().is_multiple_of(PAGE_SIZE));
        // SAFETY: `[base, base + total)` is the reservation just made, used only here.
        unsafe {
            let bytes = std::slice::from_raw_parts_mut(base.as_ptr(), total);
            assert!(bytes.iter().all(|&b| b == 0));
            bytes.fill(0x5A);
            protect(base.as_ptr(), PAGE_SIZE, false, total).unwrap();
            assert!(discard(base.as_ptr().add(PAGE_SIZE), 2 * PAGE_SIZE));
            let bytes = std::slice::from_raw_parts(base.as_ptr(), total);
            assert!(bytes[..PAGE_SIZE].iter().all(|&b| b == 0x5A));
            assert!(bytes[PAGE_SIZE..3 * PAGE_SIZE].iter().all(|&b| b == 0));
            assert!(bytes[3 * PAGE_SIZE..].iter().all(|&b| b == 0x5A));
            unmap(base.as_ptr(), total);
        }
    }

    #[test]
    fn zero_sized_reservations_are_refused() {
        assert!(matches!(
            map_stack(0, 0, 0),
            Err(StackError::InvalidSize { .. })
        ));
    }
}
