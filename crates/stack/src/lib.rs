//! Stack memory for stackful coroutines.
//!
//! A stackful coroutine needs a call stack of its own. This crate provides four kinds,
//! all implementing the [`Stack`] trait that the coroutine crate (`spindle-coro`)
//! switches onto:
//!
//! | kind | type | memory | overflow |
//! |---|---|---|---|
//! | fixed | [`FixedStack`] | one `mmap` per stack, committed lazily by the OS | guard page → message + abort |
//! | pooled | [`StackPool`] / [`PooledStack`] | fixed or growable stacks recycled through a per-thread cache and a shared pool | guard page → message + abort |
//! | growable | [`GrowableStack`] | reserves `max`, commits `initial`, grows in the fault handler (Unix) | hard guard below the reservation → message + abort |
//! | shared (copying) | [`SharedStack`] / [`SharedSlot`] | one region for many coroutines; the running one's bytes are copied in, the evicted one's copied out | guard page → message + abort |
//!
//! # Cargo features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `growable` | yes | [`GrowableStack`] and [`PoolKind::Growable`] pools (without it, `StackPool::new` refuses a growable pool with [`StackError::Disabled`]) |
//! | `shared` | yes | [`SharedStack`] / [`SharedSlot`] (copying stacks) |
//!
//! Fixed and pooled stacks are always there. The `spindle` facade selects these through its
//! `stack-growable` and `stack-shared` features.
//!
//! # Overflow is a message, then an abort
//!
//! Every guarded stack is registered in a process-wide table that a `SIGSEGV`/`SIGBUS`
//! handler consults. A fault in a guard writes one line to stderr naming the coroutine (see
//! [`Stack::set_owner`]) and aborts; that line is the only thing this crate ever writes:
//!
//! ```text
//! spindle: coroutine 'worker-3' (#42) overflowed its 256 KiB fixed stack (guard 4 KiB); aborting
//! ```
//!
//! Faults that are not ours (Rust's own thread guard pages, plain bad pointers) are passed
//! to the handler that was installed before ours, so they die the way they always did.
//! The handler runs on an alternate signal stack, because the overflowing stack has no room
//! left; [`prepare_thread`] makes sure the calling thread has one. The coroutine crate calls
//! it on every thread that resumes coroutines; the constructors here call it too, for the
//! common case of creating and running stacks on one thread. Code that may run at thread
//! exit, after std has removed the thread's alternate stack, calls
//! [`prepare_thread_uncached`] instead (the coroutine crate does, before it unwinds a
//! coroutine being dropped).
//!
//! # Exhaustion is an error
//!
//! Creating a stack never panics or aborts. When the OS refuses, the [`StackError`] says
//! why and what to do: the `vm.max_map_count` limit (each guarded stack needs 2 mappings,
//! so a default Linux allows about 32,750 of them), an `RLIMIT_AS` limit, or plain lack
//! of memory.
//!
//! # Example
//!
//! ```
//! use spindle_stack::{FixedStack, Owner, Stack, StackPool};
//!
//! # fn main() -> Result<(), spindle_stack::StackError> {
//! let stack = FixedStack::new(64 * 1024)?;
//! assert_eq!(stack.usable_size(), 64 * 1024);
//! assert_eq!(stack.top().as_ptr() as usize % 16, 0);
//! stack.set_owner(Owner { id: 7, name: Some("parser") });
//!
//! // Steady-state coroutine creation should come from a pool.
//! let pooled = StackPool::global().get()?;
//! assert!(pooled.usable_size() >= 256 * 1024);
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]
// Builds that leave a feature out leave some shared helpers unused.
#![cfg_attr(
    not(all(feature = "growable", feature = "shared")),
    allow(dead_code, unused_imports)
)]
// Under Miri the fault handler is compiled out (see `signal/miri.rs`), leaving the registry
// lookups and the report lines only it uses without a caller.
#![cfg_attr(miri, allow(dead_code))]

mod error;
mod fixed;
// The helpers pool.rs needs are always there; `GrowableStack` itself is behind the feature.
mod growable;
mod mapping;
mod os;
mod owner;
mod pool;
mod registry;
mod report;
#[cfg(feature = "shared")]
mod shared;
mod signal;
mod valgrind;

use std::ptr::NonNull;

pub use error::{OsError, StackError};
pub use fixed::FixedStack;
#[cfg(feature = "growable")]
pub use growable::GrowableStack;
pub use owner::Owner;
pub use pool::{PoolConfig, PoolKind, PoolStats, PooledStack, StackPool};
pub use report::describe_owner;
#[cfg(feature = "shared")]
pub use shared::{SharedSlot, SharedStack, SharedStackStats};
pub use signal::{prepare_thread, prepare_thread_uncached};

/// The size of a memory page on this machine, in bytes.
///
/// Every stack size is rounded up to a multiple of it.
///
/// ```
/// let page = spindle_stack::page_size();
/// assert!(page.is_power_of_two());
/// ```
pub fn page_size() -> usize {
    os::page_size()
}

/// Whether the process runs under Valgrind.
///
/// Valgrind cannot restart an instruction that faulted halfway (a `call` or `push` whose
/// store hit an uncommitted page has already moved the stack pointer), so growth in a fault
/// handler does not work under it. Under Valgrind, growable stacks are therefore committed
/// in full when they are created, and `GrowableStack::committed` equals the maximum size.
/// Every stack is registered with Valgrind (`VALGRIND_STACK_REGISTER`) either way.
///
/// ```
/// // Natively (as when running doctests), this is false.
/// let _ = spindle_stack::running_on_valgrind();
/// ```
pub fn running_on_valgrind() -> bool {
    valgrind::running_on_valgrind()
}

/// Memory a coroutine runs on.
///
/// The stack grows down from [`top`](Stack::top) towards [`limit`](Stack::limit). Below
/// `limit` there are [`guard_size`](Stack::guard_size) bytes of no-access memory, so that
/// running off the end faults instead of corrupting a neighbour. The safe constructors of
/// this crate refuse a guard of 0; only their `unsafe` `*_unchecked` twins make unguarded
/// stacks.
///
/// The four hooks at the end exist for *copying* stacks ([`SharedSlot`]), whose memory is
/// shared by several coroutines; for every other kind they do nothing and cost nothing.
///
/// # Safety
///
/// Implementors promise that:
/// - `[limit(), top())` is readable and writable memory that nothing else uses while
///   `self` lives (for copying stacks: while the owning coroutine runs);
/// - `top()` is 16-byte aligned;
/// - `top()`, `limit()` and `guard_size()` do not change while `self` lives;
/// - an overflow cannot reach other memory: the `guard_size()` bytes below `limit()` (at
///   least one page) fault on any access — or, if `guard_size()` is 0, whoever made the
///   stack promised that nothing running on it ever uses more than `[limit(), top())` (as
///   the callers of the `unsafe` constructors such as
///   [`FixedStack::with_guard_unchecked`] do).
///
/// The coroutine crate relies on these to build frames at `top()` and run any safe code
/// there: Rust code touches its stack at most a page beyond what it used before (frames
/// larger than a page are probed), so a guard page is what turns an overflow into a fault.
pub unsafe trait Stack {
    /// One past the highest usable byte, 16-byte aligned. The stack grows down from here.
    fn top(&self) -> NonNull<u8>;

    /// The lowest address the stack may ever use.
    ///
    /// For a growable stack this is the bottom of the reservation (above the hard guard),
    /// not the bottom of what is committed now.
    fn limit(&self) -> NonNull<u8>;

    /// `top() - limit()`: the most stack the coroutine can use.
    fn usable_size(&self) -> usize {
        self.top().as_ptr().addr() - self.limit().as_ptr().addr()
    }

    /// Bytes of no-access guard below [`limit`](Stack::limit) (0 only for an unguarded stack
    /// made through an `unsafe` constructor; see the trait's safety contract).
    fn guard_size(&self) -> usize;

    /// Records which coroutine runs on this stack, so that an overflow message can name it.
    ///
    /// Cheap: a few stores. The name is copied (truncated to 48 bytes on a character
    /// boundary); the stack keeps no borrow.
    fn set_owner(&self, owner: Owner<'_>);

    /// True for stacks whose memory is shared by several coroutines and copied in and out
    /// ([`SharedSlot`]). The coroutine crate calls the hooks below only when this is true.
    const COPYING: bool = false;

    /// A lower bound of [`usable_size`](Stack::usable_size) that holds for every stack of
    /// the type (0: none known), part of the trait's safety contract. The coroutine crate
    /// checks at run time that a stack has room for a coroutine's first frame; a type whose
    /// bound covers that frame saves it the check.
    const MIN_USABLE_SIZE: usize = 0;

    /// Copying stacks only: how many bytes at the very top of the stack are *not* kept
    /// across a change of occupant. A suspended coroutine's kept bytes are
    /// `[sp, top() - UNSAVED_TOP)`; the top `UNSAVED_TOP` bytes hold whatever the last
    /// occupant left there when it comes back.
    ///
    /// spindle-coro accepts at most `spindle_context::STACK_RESERVED` here: those words are
    /// the context's link, which every `resume` writes before the coroutine runs again, and
    /// its entry word, which only the first switch reads. [`SharedSlot`] leaves them out
    /// (16 bytes less to copy and to keep per suspended coroutine).
    const UNSAVED_TOP: usize = 0;

    /// Copying stacks only: makes this coroutine the region's occupant before switching
    /// into it.
    ///
    /// `sp` is the coroutine's saved stack pointer (its live bytes are `[sp, top())`, of
    /// which `[sp, top() - UNSAVED_TOP)` are kept), or `None` if it has not started yet (then
    /// there is nothing to restore; the caller builds its first frame at `top()`). The
    /// previous occupant's kept bytes are saved to its heap buffer first.
    ///
    /// # Errors
    ///
    /// - [`StackError::SharedStackBusy`]: the region's occupant is *running* (a coroutine
    ///   on the region tried to resume another one on the same region).
    /// - [`StackError::OutOfMemory`]: the save buffer could not be allocated. Nothing was
    ///   changed; the call can be retried.
    ///
    /// # Safety
    ///
    /// Must be called on the thread that owns the region, and not from code running on the
    /// region.
    unsafe fn before_resume(&self, sp: Option<NonNull<u8>>) -> Result<(), StackError> {
        let _ = sp;
        Ok(())
    }

    /// Copying stacks only: the coroutine suspended with saved stack pointer `sp`. Its bytes
    /// stay in the region until another occupant evicts them.
    ///
    /// # Safety
    ///
    /// `sp` lies in `[limit(), top()]` of this stack, and the coroutine is suspended (no
    /// code runs on the region).
    unsafe fn after_suspend(&self, sp: NonNull<u8>) {
        let _ = sp;
    }

    /// Copying stacks only: the coroutine finished; the region no longer holds anything
    /// of it.
    ///
    /// # Safety
    ///
    /// The coroutine has finished: no code runs on the region on its behalf, and nothing
    /// will resume it again.
    unsafe fn after_finish(&self) {}
}

// How the crate is built, for whoever changes it (`cargo doc --document-private-items`).
mod internals;

/// The examples of the crate's README.md, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
