//! `VirtualAlloc`, `VirtualProtect`, `VirtualFree`. Compile-checked only in this project.

use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicUsize, Ordering};

use windows_sys::Win32::Foundation::GetLastError;
use windows_sys::Win32::System::Memory::{
    MEM_COMMIT, MEM_RELEASE, MEM_RESERVE, MEM_RESET, PAGE_NOACCESS, PAGE_PROTECTION_FLAGS,
    PAGE_READWRITE, VirtualAlloc, VirtualFree, VirtualProtect,
};
use windows_sys::Win32::System::SystemInformation::{GetSystemInfo, SYSTEM_INFO};

use crate::error::StackError;

static PAGE_SIZE: AtomicUsize = AtomicUsize::new(0);

const ERROR_NOT_ENOUGH_MEMORY: i32 = 8;
const ERROR_OUTOFMEMORY: i32 = 14;
const ERROR_INVALID_PARAMETER: i32 = 87;
const ERROR_COMMITMENT_LIMIT: i32 = 1455;

/// The allocation granularity for protection changes (the page size), cached.
pub(crate) fn page_size() -> usize {
    let cached = PAGE_SIZE.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    // SAFETY: SYSTEM_INFO is plain data; all-zero is a valid value to be overwritten.
    let mut info: SYSTEM_INFO = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a valid, writable SYSTEM_INFO.
    unsafe { GetSystemInfo(&mut info) };
    let size = usize::try_from(info.dwPageSize)
        .ok()
        .filter(|s| s.is_power_of_two())
        .unwrap_or(4096);
    PAGE_SIZE.store(size, Ordering::Relaxed);
    size
}

fn last_error() -> i32 {
    // SAFETY: GetLastError has no preconditions.
    unsafe { GetLastError() as i32 }
}

/// Reserves and commits `total` bytes whose top `writable` bytes are read-write and whose
/// rest is no-access. Returns the lowest address.
pub(crate) fn map_stack(
    total: usize,
    writable: usize,
    requested: usize,
) -> Result<NonNull<u8>, StackError> {
    // SAFETY: a fresh reservation at an address of the system's choosing touches no
    // existing memory.
    let raw = unsafe { VirtualAlloc(ptr::null(), total, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE) };
    let Some(base) = NonNull::new(raw.cast::<u8>()) else {
        return Err(classify("VirtualAlloc", last_error(), requested));
    };
    let no_access = total - writable;
    if no_access > 0 {
        // SAFETY: the bottom of the allocation we just made.
        if let Err(err) = unsafe { protect(base.as_ptr(), no_access, false, requested) } {
            // SAFETY: the allocation is ours and unused.
            unsafe { unmap(base.as_ptr(), total) };
            return Err(err);
        }
    }
    Ok(base)
}

/// Makes `[addr, addr + len)` read-write (`writable`) or no-access.
///
/// # Safety
///
/// The range is page-aligned and lies inside an allocation owned by the caller, and nothing
/// that may still be used lies in it when it is made no-access.
pub(crate) unsafe fn protect(
    addr: *mut u8,
    len: usize,
    writable: bool,
    requested: usize,
) -> Result<(), StackError> {
    let protection = if writable {
        PAGE_READWRITE
    } else {
        PAGE_NOACCESS
    };
    let mut old: PAGE_PROTECTION_FLAGS = 0;
    // SAFETY: the caller guarantees the range is ours; `old` is writable.
    if unsafe { VirtualProtect(addr.cast(), len, protection, &mut old) } != 0 {
        Ok(())
    } else {
        Err(classify("VirtualProtect", last_error(), requested))
    }
}

/// Tells the system the contents of `[addr, addr + len)` are no longer needed (MEM_RESET).
///
/// # Safety
///
/// The range is page-aligned, inside a committed allocation owned by the caller, and holds
/// nothing anyone still needs.
pub(crate) unsafe fn discard(addr: *mut u8, len: usize) -> bool {
    // SAFETY: the caller guarantees the range is ours and its contents are dead.
    !unsafe { VirtualAlloc(addr.cast_const().cast(), len, MEM_RESET, PAGE_READWRITE) }.is_null()
}

/// Releases an allocation made by [`map_stack`].
///
/// # Safety
///
/// `addr` is the base returned by [`map_stack`], and nothing uses the allocation any more.
pub(crate) unsafe fn unmap(addr: *mut u8, _len: usize) {
    // SAFETY: the caller guarantees the allocation is ours and unused; MEM_RELEASE frees the
    // whole reservation (size must be 0).
    unsafe { VirtualFree(addr.cast(), 0, MEM_RELEASE) };
}

/// Turns a failed call's error code into an error that says why.
pub(crate) fn classify(operation: &'static str, code: i32, requested: usize) -> StackError {
    match code {
        ERROR_NOT_ENOUGH_MEMORY | ERROR_OUTOFMEMORY | ERROR_COMMITMENT_LIMIT => {
            StackError::OutOfMemory { requested }
        }
        ERROR_INVALID_PARAMETER => StackError::InvalidSize {
            what: "stack size",
            requested,
            reason: "the OS rejected it (too large for the address space?)",
        },
        code => StackError::os(operation, code, requested),
    }
}
