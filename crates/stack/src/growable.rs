//! A stack that reserves its maximum size up front and commits pages as it grows.

use std::ptr::NonNull;

use crate::error::StackError;
use crate::mapping::{GuardedMapping, round_guard, round_to_pages};
use crate::owner::Owner;
use crate::registry::StackKind;
use crate::{Stack, os};

/// A stack that reserves `max` bytes of address space but makes only the top `initial`
/// bytes usable; running below them grows it, in place.
///
/// The whole reservation (plus a hard guard below it) is mapped no-access. When the
/// coroutine touches the reserved part, the fault handler makes more of it read-write (at
/// least down to the faulting page plus one page, and at least doubling what is committed)
/// and returns; the faulting instruction then runs again. The stack never moves, so
/// pointers into it stay valid. Running into the hard guard below the reservation is an
/// overflow: message, then abort.
///
/// Compared with a [`FixedStack`](crate::FixedStack) of size `max`, the difference is
/// control: the kernel commits a fixed stack's pages on first touch anyway, but a growable
/// stack's committed size is known ([`committed`](GrowableStack::committed)) and a
/// [`StackPool`](crate::StackPool) can shrink it back to `initial` when it is recycled.
///
/// Under Valgrind the whole reservation is committed up front (see
/// [`running_on_valgrind`](crate::running_on_valgrind)).
///
/// Unix only: growth needs the `SIGSEGV` handler. The thread running on the stack needs an
/// alternate signal stack, see [`prepare_thread`](crate::prepare_thread). On other
/// platforms [`GrowableStack::new`] returns [`StackError::Unsupported`].
///
/// # Example
///
/// ```
/// # #[cfg(unix)] {
/// use spindle_stack::{GrowableStack, Stack};
///
/// let stack = GrowableStack::new(16 * 1024, 8 * 1024 * 1024)?;
/// assert_eq!(stack.usable_size(), 8 * 1024 * 1024);
/// assert_eq!(stack.committed(), 16 * 1024);
///
/// // Touch memory 100 KiB below the top: the handler grows the stack.
/// let deep = unsafe { stack.top().as_ptr().sub(100 * 1024) };
/// unsafe { deep.write_volatile(1) };
/// assert!(stack.committed() >= 100 * 1024);
/// # }
/// # Ok::<(), spindle_stack::StackError>(())
/// ```
#[cfg(feature = "growable")]
#[derive(Debug)]
pub struct GrowableStack {
    mapping: GuardedMapping,
    initial: usize,
}

#[cfg(feature = "growable")]
impl GrowableStack {
    /// A stack that starts with `initial` usable bytes and can grow to `max` (both rounded
    /// up to whole pages), with a one-page hard guard below.
    ///
    /// # Errors
    ///
    /// [`StackError::InvalidSize`] if a size is 0, too large, or `initial > max`;
    /// [`StackError::Unsupported`] on non-Unix platforms; the usual mapping errors
    /// ([`StackError::MapCountLimit`], ...) when the OS refuses.
    pub fn new(initial: usize, max: usize) -> Result<Self, StackError> {
        Self::with_guard(initial, max, os::page_size())
    }

    /// Like [`GrowableStack::new`], with a hard guard of `guard` bytes (rounded up to
    /// whole pages).
    ///
    /// # Errors
    ///
    /// As for [`GrowableStack::new`]; also [`StackError::InvalidSize`] for a `guard` of 0
    /// (an unguarded stack needs
    /// [`with_guard_unchecked`](GrowableStack::with_guard_unchecked)).
    pub fn with_guard(initial: usize, max: usize, guard: usize) -> Result<Self, StackError> {
        Self::make(initial, max, guard, false)
    }

    /// Like [`with_guard`](GrowableStack::with_guard), but a `guard` of 0 makes a stack
    /// without a hard guard: running past `max` silently overwrites whatever lies below.
    ///
    /// # Errors
    ///
    /// As for [`GrowableStack::new`].
    ///
    /// # Safety
    ///
    /// If `guard` is 0, nothing that runs on the stack may ever use more than `max` bytes
    /// (rounded up to whole pages) of it — for a coroutine, its closure and everything it
    /// calls, unwinding included. (With a `guard` above 0 this is `with_guard`, and safe.)
    pub unsafe fn with_guard_unchecked(
        initial: usize,
        max: usize,
        guard: usize,
    ) -> Result<Self, StackError> {
        Self::make(initial, max, guard, true)
    }

    fn make(
        initial: usize,
        max: usize,
        guard: usize,
        allow_unguarded: bool,
    ) -> Result<Self, StackError> {
        let (initial, max) = validate_growable_sizes(initial, max)?;
        let guard = round_guard(guard, allow_unguarded)?;
        let initial = initial_commit(initial, max);
        let mapping = GuardedMapping::new(max, guard, initial, StackKind::Growable)?;
        Ok(GrowableStack { mapping, initial })
    }

    /// Bytes currently committed (read-write) below the top.
    pub fn committed(&self) -> usize {
        self.mapping.committed()
    }

    /// The committed size the stack started with (`initial`, rounded up to whole pages;
    /// the maximum under Valgrind).
    pub fn initial_size(&self) -> usize {
        self.initial
    }
}

/// What a growable stack commits when created (or shrunk): `initial`, except under
/// Valgrind, which cannot restart a faulting `call`/`push`, so there it is everything.
pub(crate) fn initial_commit(initial: usize, max: usize) -> usize {
    if crate::valgrind::running_on_valgrind() {
        max
    } else {
        initial
    }
}

/// Rounds and checks `(initial, max)`; Unix only.
pub(crate) fn validate_growable_sizes(
    initial: usize,
    max: usize,
) -> Result<(usize, usize), StackError> {
    if cfg!(not(unix)) {
        return Err(StackError::Unsupported {
            what: "a growable stack (it grows from a SIGSEGV handler)",
        });
    }
    let rounded_initial = round_to_pages(initial, "initial stack size", false)?;
    let rounded_max = round_to_pages(max, "maximum stack size", false)?;
    if rounded_initial > rounded_max {
        return Err(StackError::InvalidSize {
            what: "initial stack size",
            requested: initial,
            reason: "it is larger than the maximum size",
        });
    }
    Ok((rounded_initial, rounded_max))
}

// SAFETY: `[limit, top)` is the reservation this value owns exclusively until drop; the
// part not yet committed becomes readable and writable on first touch (the fault handler
// commits it), which is what the trait requires of it. `top` is page-aligned and the
// addresses never change (the stack grows in place). Below `limit` lies a no-access hard
// guard of at least a page, unless the stack was made by `with_guard_unchecked(_, _, 0)`,
// whose caller promised that nothing overflows it.
#[cfg(feature = "growable")]
unsafe impl Stack for GrowableStack {
    /// The maximum size is rounded up to whole pages and never 0 (`validate_growable_sizes`),
    /// and a page is at least 4 KiB on every supported target.
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
