//! The OS's virtual-memory calls, one module per platform family.
//!
//! Everything above this module speaks in terms of "a reservation whose top part is
//! read-write and whose bottom part is no-access"; this module maps that onto `mmap` /
//! `mprotect` / `madvise` or `VirtualAlloc` / `VirtualProtect`, and turns failures into
//! [`StackError`](crate::StackError)s that say why.
//!
//! Under Miri, which cannot run those calls, the module resolves to `miri.rs` instead:
//! page-aligned heap allocations with the same functions (see there for what that models).

#[cfg(all(unix, not(miri)))]
mod unix;
#[cfg(all(unix, not(miri)))]
pub(crate) use unix::*;

#[cfg(all(windows, not(miri)))]
mod windows;
#[cfg(all(windows, not(miri)))]
pub(crate) use windows::*;

#[cfg(miri)]
mod miri;
#[cfg(miri)]
pub(crate) use miri::*;

#[cfg(not(any(unix, windows)))]
compile_error!("spindle-stack supports Unix and Windows targets only");
