//! Windows: a vectored exception handler that prints the overflow line for access
//! violations in a registered guard. Compile-checked only in this project.
//!
//! Best effort: Windows dispatches exceptions on the faulting thread's own stack, so when a
//! coroutine has used its stack up to the guard there may be no room to run this handler,
//! and the process dies without the message (as it would without us).

use std::io::Write;
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

use windows_sys::Win32::Foundation::EXCEPTION_ACCESS_VIOLATION;
use windows_sys::Win32::System::Diagnostics::Debug::{
    AddVectoredExceptionHandler, EXCEPTION_CONTINUE_SEARCH, EXCEPTION_POINTERS,
};

use crate::error::StackError;
use crate::registry;
use crate::report;

static INSTALL: Once = Once::new();
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Installs the vectored exception handler, once per process.
pub(crate) fn install_fault_handler() -> Result<(), StackError> {
    INSTALL.call_once(|| {
        // SAFETY: `on_exception` has the required signature and stays valid for the life of
        // the process (it is a function); 1 = call it before other handlers.
        let handle = unsafe { AddVectoredExceptionHandler(1, Some(on_exception)) };
        INSTALLED.store(!handle.is_null(), Ordering::Relaxed);
    });
    if INSTALLED.load(Ordering::Relaxed) {
        Ok(())
    } else {
        Err(StackError::os("AddVectoredExceptionHandler", 0, 0))
    }
}

/// Prepares the calling thread to run coroutines.
///
/// On Unix this installs an alternate signal stack for the overflow handler. Windows has no
/// such thing; this installs the process-wide exception handler if needed and is otherwise
/// a no-op.
///
/// # Errors
///
/// [`StackError::Os`] if the exception handler cannot be installed.
#[inline]
pub fn prepare_thread() -> Result<(), StackError> {
    // Every resume calls this: once the handler is in, it is one load.
    if INSTALLED.load(Ordering::Relaxed) {
        return Ok(());
    }
    install_fault_handler()
}

/// [`prepare_thread`] without trusting a cached answer; on Windows, which has no alternate
/// signal stacks, the same.
///
/// # Errors
///
/// As for [`prepare_thread`].
pub fn prepare_thread_uncached() -> Result<(), StackError> {
    prepare_thread()
}

/// # Safety
///
/// Called by the system with valid exception pointers.
unsafe extern "system" fn on_exception(pointers: *mut EXCEPTION_POINTERS) -> i32 {
    // SAFETY: the system passes valid pointers for the duration of the call.
    let record = unsafe { &*(*pointers).ExceptionRecord };
    if record.ExceptionCode != EXCEPTION_ACCESS_VIOLATION || record.NumberParameters < 2 {
        return EXCEPTION_CONTINUE_SEARCH;
    }
    // For access violations, parameter 1 is the inaccessible address.
    let addr = record.ExceptionInformation[1];
    if let Some((slot, range)) = registry::find(addr)
        && addr < range.guard_end
    {
        let owner = slot.load_owner();
        let line = report::overflow_line(
            owner.as_ref(),
            range.kind,
            range.usable_size(),
            range.guard_size(),
        );
        let _ = std::io::stderr().write_all(line.as_bytes());
        std::process::abort();
    }
    EXCEPTION_CONTINUE_SEARCH
}
