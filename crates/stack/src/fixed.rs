//! A fixed-size stack with a guard page: one mapping per stack.

use std::ptr::NonNull;

use crate::error::StackError;
use crate::mapping::{GuardedMapping, round_guard, round_to_pages};
use crate::owner::Owner;
use crate::registry::StackKind;
use crate::{Stack, os};

/// A fixed-size stack with a no-access guard below it.
///
/// The memory is mapped with `mmap` (private, anonymous, `MAP_NORESERVE`, plus `MAP_STACK`
/// where it exists) and committed lazily by the OS: a 256 KiB stack on which a coroutine
/// uses 8 KiB costs about 8 KiB of RAM. Running into the guard prints a message naming the
/// coroutine and aborts (see the [crate docs](crate)). Unmapped on drop.
///
/// Each guarded stack is 2 kernel mappings. On Linux the default `vm.max_map_count`
/// (65530) therefore allows about 32,750 of them; beyond that creation fails with
/// [`StackError::MapCountLimit`]. For many more coroutines use [`SharedStack`](crate::SharedStack).
///
/// For coroutines created and finished at a high rate, use a [`StackPool`](crate::StackPool),
/// which recycles stacks instead of mapping and unmapping each one.
///
/// # Example
///
/// ```
/// use spindle_stack::{FixedStack, Stack};
///
/// let stack = FixedStack::new(100_000)?; // rounded up to whole pages
/// assert!(stack.usable_size() >= 100_000);
/// assert_eq!(stack.usable_size() % spindle_stack::page_size(), 0);
/// assert_eq!(stack.guard_size(), spindle_stack::page_size());
/// assert_eq!(stack.top().as_ptr() as usize - stack.limit().as_ptr() as usize, stack.usable_size());
/// # Ok::<(), spindle_stack::StackError>(())
/// ```
#[derive(Debug)]
pub struct FixedStack {
    mapping: GuardedMapping,
}

impl FixedStack {
    /// A stack of `size` bytes (rounded up to whole pages) with a one-page guard.
    ///
    /// # Errors
    ///
    /// [`StackError::InvalidSize`] for 0 or a size too large for the address space;
    /// [`StackError::MapCountLimit`], [`StackError::AddressSpaceLimit`] or
    /// [`StackError::OutOfMemory`] when the OS refuses the mapping.
    pub fn new(size: usize) -> Result<Self, StackError> {
        Self::with_guard(size, os::page_size())
    }

    /// A stack of `size` bytes with a guard of `guard` bytes (both rounded up to whole
    /// pages).
    ///
    /// A larger guard catches functions whose frames are larger than a page and that do not
    /// probe the stack (Rust code probes; some C code does not).
    ///
    /// # Errors
    ///
    /// As for [`FixedStack::new`]; also [`StackError::InvalidSize`] for a `guard` of 0 (an
    /// unguarded stack needs [`with_guard_unchecked`](FixedStack::with_guard_unchecked)).
    pub fn with_guard(size: usize, guard: usize) -> Result<Self, StackError> {
        Self::make(size, guard, false)
    }

    /// Like [`with_guard`](FixedStack::with_guard), but a `guard` of 0 makes an unguarded
    /// stack: one kernel mapping instead of two, but nothing stops an overflow, which
    /// silently overwrites whatever lies below.
    ///
    /// # Errors
    ///
    /// As for [`FixedStack::new`].
    ///
    /// # Safety
    ///
    /// If `guard` is 0, nothing that runs on the stack may ever use more than its usable size
    /// (`size` rounded up to whole pages) — for a coroutine, its closure and everything it
    /// calls, unwinding included. (With a `guard` above 0 this is `with_guard`, and safe.)
    pub unsafe fn with_guard_unchecked(size: usize, guard: usize) -> Result<Self, StackError> {
        Self::make(size, guard, true)
    }

    fn make(size: usize, guard: usize, allow_unguarded: bool) -> Result<Self, StackError> {
        let usable = round_to_pages(size, "stack size", false)?;
        let guard = round_guard(guard, allow_unguarded)?;
        let mapping = GuardedMapping::new(usable, guard, usable, StackKind::Fixed)?;
        Ok(FixedStack { mapping })
    }
}

// SAFETY: `[limit, top)` is the read-write part of a mapping this value owns exclusively
// until drop; top is page-aligned (so 16-byte aligned); the addresses never change. Below
// `limit` lies a no-access guard of at least a page, unless the stack was made by
// `with_guard_unchecked(_, 0)`, whose caller promised that nothing overflows it.
unsafe impl Stack for FixedStack {
    /// Every constructor rounds the size up to whole pages and refuses 0, and a page is at
    /// least 4 KiB on every supported target.
    const MIN_USABLE_SIZE: usize = 4096;

    fn top(&self) -> NonNull<u8> {
        self.mapping.top()
    }

    fn limit(&self) -> NonNull<u8> {
        self.mapping.limit()
    }

    fn usable_size(&self) -> usize {
        self.mapping.usable()
    }

    fn guard_size(&self) -> usize {
        self.mapping.guard()
    }

    fn set_owner(&self, owner: Owner<'_>) {
        self.mapping.slot().set_owner(owner);
    }
}
