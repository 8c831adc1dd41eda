//! The OS's virtual-memory calls, one module per platform family.
//!
//! Everything above this module speaks in terms of "a reservation whose top part is
//! read-write and whose bottom part is no-access"; this module maps that onto `mmap` /
//! `mprotect` / `madvise` or `VirtualAlloc` / `VirtualProtect`, and turns failures into
//! [`StackError`](crate::StackError)s that say why.

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub(crate) use unix::*;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub(crate) use windows::*;

#[cfg(not(any(unix, windows)))]
compile_error!("spindle-stack supports Unix and Windows targets only");
