//! Under Miri: no fault handler and no alternate signal stack.
//!
//! Miri runs no signal handlers and does not implement `sigaction`/`sigaltstack`, and its
//! stacks (heap memory from `os/miri.rs`) have no no-access guard that could fault, so there
//! is nothing to install. The registry of stack ranges stays: it is plain Rust, and keeping it
//! lets Miri check its registration, owner records and slot reuse along with the pool.

use crate::error::StackError;

/// Nothing to install under Miri (see the module documentation).
pub(crate) fn install_fault_handler() -> Result<(), StackError> {
    Ok(())
}

/// Prepares the calling thread to run coroutines on guarded stacks; under Miri there is
/// nothing to prepare (no signal handler, no alternate signal stack).
///
/// # Errors
///
/// None under Miri.
pub fn prepare_thread() -> Result<(), StackError> {
    Ok(())
}

/// [`prepare_thread`] without trusting a cached answer; under Miri, nothing to prepare.
///
/// # Errors
///
/// None under Miri.
pub fn prepare_thread_uncached() -> Result<(), StackError> {
    Ok(())
}
