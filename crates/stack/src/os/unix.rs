//! `mmap`, `mprotect`, `madvise`, `munmap`, and finding out why `ENOMEM` happened.

use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::StackError;

static PAGE_SIZE: AtomicUsize = AtomicUsize::new(0);

/// The page size, queried once and cached (the fault handler reads the cache).
pub(crate) fn page_size() -> usize {
    let cached = PAGE_SIZE.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    // SAFETY: sysconf has no preconditions.
    let queried = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let size = usize::try_from(queried)
        .ok()
        .filter(|s| s.is_power_of_two())
        .unwrap_or(4096);
    PAGE_SIZE.store(size, Ordering::Relaxed);
    size
}

/// Linux: don't reserve swap for stacks that are mostly untouched; MAP_STACK keeps
/// transparent huge pages off stacks (6.7+) and documents intent.
#[cfg(any(target_os = "linux", target_os = "android"))]
const EXTRA_MAP_FLAGS: libc::c_int = libc::MAP_NORESERVE | libc::MAP_STACK;
/// OpenBSD requires MAP_STACK for any memory the stack pointer points into.
#[cfg(target_os = "openbsd")]
const EXTRA_MAP_FLAGS: libc::c_int = libc::MAP_STACK;
/// FreeBSD's MAP_STACK means an auto-growing region with its own guard (not what we want);
/// macOS has no such flag.
#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "openbsd")))]
const EXTRA_MAP_FLAGS: libc::c_int = 0;

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Maps `total` bytes whose top `writable` bytes are read-write and whose rest is
/// no-access. Returns the lowest address.
///
/// `requested` is the stack size to name in error messages.
pub(crate) fn map_stack(
    total: usize,
    writable: usize,
    requested: usize,
) -> Result<NonNull<u8>, StackError> {
    let no_access = total - writable;
    // Map with the protection of the larger part, then change the smaller part: one
    // `mprotect` of a page for fixed stacks, of `initial` bytes for growable ones.
    let map_writable = writable >= no_access;
    let prot = if map_writable {
        libc::PROT_READ | libc::PROT_WRITE
    } else {
        libc::PROT_NONE
    };
    // SAFETY: an anonymous private mapping at an address of the kernel's choosing touches
    // no existing memory.
    let raw = unsafe {
        libc::mmap(
            ptr::null_mut(),
            total,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANON | EXTRA_MAP_FLAGS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return Err(classify("mmap", last_errno(), requested));
    }
    let base = raw.cast::<u8>();
    let changed = if map_writable {
        // SAFETY: `[base, base + no_access)` is the bottom of the mapping we just made.
        (no_access > 0).then(|| unsafe { protect(base, no_access, false, requested) })
    } else {
        // SAFETY: `[base + no_access, base + total)` is the top of the mapping we just made.
        (writable > 0).then(|| unsafe { protect(base.add(no_access), writable, true, requested) })
    };
    if let Some(Err(err)) = changed {
        // SAFETY: the whole mapping is ours and nothing refers to it yet.
        unsafe { unmap(base, total) };
        return Err(err);
    }
    NonNull::new(base).ok_or_else(|| StackError::os("mmap", 0, requested))
}

/// Makes `[addr, addr + len)` read-write (`writable`) or no-access.
///
/// # Safety
///
/// The range is page-aligned and lies inside a mapping owned by the caller, and nothing
/// that may still be used lies in it when it is made no-access.
pub(crate) unsafe fn protect(
    addr: *mut u8,
    len: usize,
    writable: bool,
    requested: usize,
) -> Result<(), StackError> {
    let prot = if writable {
        libc::PROT_READ | libc::PROT_WRITE
    } else {
        libc::PROT_NONE
    };
    // SAFETY: the caller guarantees the range is ours and may change protection.
    if unsafe { libc::mprotect(addr.cast(), len, prot) } == 0 {
        Ok(())
    } else {
        Err(classify("mprotect", last_errno(), requested))
    }
}

/// Gives the pages of `[addr, addr + len)` back to the OS; they read as zeros afterwards.
/// Returns false if the OS refused (nothing is lost then: the pages simply stay resident).
///
/// # Safety
///
/// The range is page-aligned, lies inside a private anonymous mapping owned by the caller,
/// and holds nothing anyone still needs.
pub(crate) unsafe fn discard(addr: *mut u8, len: usize) -> bool {
    // SAFETY: the caller guarantees the range is ours and its contents are dead.
    unsafe { libc::madvise(addr.cast(), len, libc::MADV_DONTNEED) == 0 }
}

/// Unmaps a mapping made by [`map_stack`].
///
/// # Safety
///
/// `[addr, addr + len)` is exactly a mapping returned by [`map_stack`], and nothing uses
/// it any more.
pub(crate) unsafe fn unmap(addr: *mut u8, len: usize) {
    // SAFETY: the caller guarantees the mapping is ours and unused. munmap of a valid
    // mapping cannot fail in a way we could act on (at worst it leaks address space).
    unsafe { libc::munmap(addr.cast(), len) };
}

/// Turns a failed call's errno into an error that says why.
pub(crate) fn classify(operation: &'static str, errno: i32, requested: usize) -> StackError {
    match errno {
        libc::ENOMEM => diagnose_out_of_memory(requested),
        libc::EINVAL => StackError::InvalidSize {
            what: "stack size",
            requested,
            reason: "the OS rejected it (EINVAL: too large for the address space?)",
        },
        code => StackError::os(operation, code, requested),
    }
}

/// `ENOMEM` from `mmap`/`mprotect` has three usual causes; find out which one this is.
pub(crate) fn diagnose_out_of_memory(requested: usize) -> StackError {
    if let Some((mappings, max)) = map_count_and_limit() {
        // The kernel refuses a new mapping (or a split) when the count reaches the limit;
        // allow for /proc's [vsyscall] line and the mapping we may have just undone.
        if mappings.saturating_add(3) >= max {
            return StackError::MapCountLimit { mappings, max };
        }
    }
    if let Some(limit) = address_space_limit() {
        let in_use = address_space_in_use();
        let would_need = in_use.unwrap_or(0).saturating_add(requested);
        if in_use.is_none() || u64::try_from(would_need).unwrap_or(u64::MAX) > limit {
            return StackError::AddressSpaceLimit {
                limit,
                in_use: in_use.unwrap_or(0),
                requested,
            };
        }
    }
    StackError::OutOfMemory { requested }
}

/// The finite `RLIMIT_AS` soft limit, if any.
fn address_space_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } != 0 {
        return None;
    }
    // rlim_t is u64 on Linux and macOS but i64 on FreeBSD (where limits are non-negative).
    #[allow(clippy::unnecessary_cast)]
    let soft = limit.rlim_cur as u64;
    (limit.rlim_cur != libc::RLIM_INFINITY).then_some(soft)
}

/// Reads a small /proc file in fixed-size pieces, without allocating (this runs when memory
/// is short). Calls `each` with every piece.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn read_proc_file(path: &str, mut each: impl FnMut(&[u8])) -> Option<()> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).ok()?;
    let mut buffer = [0u8; 4096];
    loop {
        match file.read(&mut buffer) {
            Ok(0) => return Some(()),
            Ok(n) => each(&buffer[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn parse_leading_number(text: &[u8]) -> Option<usize> {
    let digits = text
        .iter()
        .skip_while(|b| b.is_ascii_whitespace())
        .take_while(|b| b.is_ascii_digit());
    let mut value: usize = 0;
    let mut any = false;
    for digit in digits {
        value = value
            .checked_mul(10)?
            .checked_add(usize::from(digit - b'0'))?;
        any = true;
    }
    any.then_some(value)
}

/// Lines of /proc/self/maps and /proc/sys/vm/max_map_count.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn map_count_and_limit() -> Option<(usize, usize)> {
    let mut mappings = 0;
    read_proc_file("/proc/self/maps", |piece| {
        mappings += piece.iter().filter(|&&b| b == b'\n').count();
    })?;
    let mut head = [0u8; 32];
    let mut filled = 0;
    read_proc_file("/proc/sys/vm/max_map_count", |piece| {
        let n = piece.len().min(head.len() - filled);
        head[filled..filled + n].copy_from_slice(&piece[..n]);
        filled += n;
    })?;
    Some((mappings, parse_leading_number(&head[..filled])?))
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn map_count_and_limit() -> Option<(usize, usize)> {
    None
}

/// The process's virtual size (first field of /proc/self/statm, in pages).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn address_space_in_use() -> Option<usize> {
    let mut head = [0u8; 32];
    let mut filled = 0;
    read_proc_file("/proc/self/statm", |piece| {
        let n = piece.len().min(head.len() - filled);
        head[filled..filled + n].copy_from_slice(&piece[..n]);
        filled += n;
    })?;
    parse_leading_number(&head[..filled])?.checked_mul(page_size())
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn address_space_in_use() -> Option<usize> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_size_is_a_power_of_two() {
        assert!(page_size().is_power_of_two());
        assert!(page_size() >= 4096);
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn map_count_is_read_from_proc() {
        let (mappings, max) = map_count_and_limit().unwrap();
        assert!(mappings > 5, "{mappings}");
        assert!(max >= mappings, "{max} < {mappings}");
        assert!(address_space_in_use().unwrap() > 1024 * 1024);
    }

    #[test]
    fn enomem_without_limits_in_sight_is_out_of_memory() {
        // This test process is far from both limits (unless run with `ulimit -v`).
        if address_space_limit().is_none() {
            assert_eq!(
                diagnose_out_of_memory(4096),
                StackError::OutOfMemory { requested: 4096 }
            );
        }
    }

    #[test]
    fn other_errnos_are_reported_with_the_operation() {
        let err = classify("mprotect", libc::EACCES, 8192);
        assert!(matches!(
            err,
            StackError::Os {
                operation: "mprotect",
                ..
            }
        ));
        assert!(
            err.to_string()
                .starts_with("mprotect failed for a 8 KiB stack (8192 bytes)")
        );
    }
}
