//! The fault handler: overflow messages, growable-stack growth, and chaining to whoever
//! handled `SIGSEGV`/`SIGBUS` before us; plus [`prepare_thread`], which gives a thread the
//! alternate signal stack the handler runs on. Windows: a vectored exception handler.

//!
//! Under Miri (no signals, no `sigaction`/`sigaltstack`, and stacks without guard pages, see
//! `os/miri.rs`) both are no-ops from `miri.rs`.

#[cfg(all(unix, not(miri)))]
mod altstack;
#[cfg(all(unix, not(miri)))]
mod unix;

#[cfg(all(unix, not(miri)))]
pub use altstack::{prepare_thread, prepare_thread_uncached};
#[cfg(all(unix, not(miri)))]
pub(crate) use unix::install_fault_handler;

#[cfg(all(windows, not(miri)))]
mod windows;
#[cfg(all(windows, not(miri)))]
pub(crate) use windows::install_fault_handler;
#[cfg(all(windows, not(miri)))]
pub use windows::{prepare_thread, prepare_thread_uncached};

#[cfg(miri)]
mod miri;
#[cfg(miri)]
pub(crate) use miri::install_fault_handler;
#[cfg(miri)]
pub use miri::{prepare_thread, prepare_thread_uncached};
