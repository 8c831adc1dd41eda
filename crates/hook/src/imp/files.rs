//! What cannot be polled: calls on regular files and block devices, `open`, and `getaddrinfo`.
//! In a coroutine each runs on the runtime's blocking pool while only the coroutine waits;
//! elsewhere (a plain thread, the blocking pool's own threads) it passes straight through.
//!
//! # Buffers lent to the pool
//!
//! An offloaded call hands the pool thread the caller's pointers (a buffer, an `iovec` array, a
//! path) or copies of what they point at, and [`offload_call`] returns only once the pool
//! thread is done with them (see there: the coroutine does not return, unwind or get freed
//! meanwhile). One case needs more: a coroutine on a copying stack has its stack bytes moved
//! out while it is parked, and another coroutine's moved in at the same addresses. Its
//! buffers — which may be on that stack — are therefore bounced through the heap: a read lands
//! in a heap buffer and is copied out after the call, a write is copied in before it, at most
//! [`BOUNCE_MAX`] bytes per call (a shorter count, which a file read or write may return and
//! which `read_exact`/`write_all` and C's stdio carry on from). Paths and `getaddrinfo`'s
//! arguments are always copied: they are short and the copy makes the argument simple.

use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{addrinfo, c_char, c_int, c_long, c_ulong, c_void, iovec, off_t, size_t, ssize_t};

use super::io_calls::forget_new;
use super::{enabled, in_coroutine, offload_call, offloads, sys};

/// The largest buffer bounced through the heap per call for a coroutine on a copying stack.
const BOUNCE_MAX: usize = 1 << 20;

/// The most `iovec`s one call takes (Linux's `UIO_MAXIOV`).
const IOV_MAX: c_int = 1024;

/// A heap buffer of `len` bytes (not initialised), or `None` where memory is short.
fn bounce(len: usize) -> Option<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).ok()?;
    Some(v)
}

/// Runs the system call `nr(fd, buf, count, offset)` (`read`, `write`, `pread64`, `pwrite64`:
/// a transfer between `buf` and a file; `reads`: into `buf`) on the blocking pool.
///
/// # Safety
///
/// As the system call: `buf` valid for `count` bytes (to write if `reads`, to read if not).
pub(super) unsafe fn offload_transfer(
    nr: c_long,
    fd: c_int,
    buf: *mut c_void,
    count: size_t,
    offset: c_long,
    reads: bool,
) -> isize {
    let call = move |at: c_long, len: c_long| {
        // SAFETY: `at` is the caller's buffer or a bounce buffer, valid for `len` bytes in the
        // direction of the call; `offload_call` returns only after this has.
        unsafe { sys::call6(nr, [fd as c_long, at, len, offset, 0, 0]) }
    };
    if !spindle_park::on_copying_stack() {
        // The caller's buffer stays where it is while the coroutine is parked (its own
        // stack or the heap), and the coroutine does not touch it before the call returns.
        let (at, len) = (buf as c_long, count as c_long);
        return offload_call(move || call(at, len));
    }
    let len = count.min(BOUNCE_MAX);
    let Some(mut heap) = bounce(len) else {
        sys::set_errno(libc::ENOMEM);
        return -1;
    };
    if !reads {
        // SAFETY: the caller's contract: `buf` is valid to read for `count >= len` bytes.
        heap.extend_from_slice(unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) });
    }
    let at = heap.as_mut_ptr() as c_long;
    let n = offload_call(move || call(at, len as c_long));
    if reads && n > 0 {
        // SAFETY: the kernel wrote `n <= len` bytes into `heap`; `buf` is valid for `count >=
        // len` bytes, and the two do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(heap.as_ptr(), buf.cast::<u8>(), n as usize) };
    }
    n
}

/// `readv`/`writev` on a file, on the blocking pool. On a copying stack the vector is gathered
/// into one heap buffer (at most [`BOUNCE_MAX`] bytes) and moved by one `read`/`write`.
///
/// # Safety
///
/// As `readv(2)`/`writev(2)`.
pub(super) unsafe fn offload_vectored(
    fd: c_int,
    iov: *const iovec,
    n: c_int,
    reads: bool,
) -> isize {
    let nr = if reads {
        libc::SYS_readv
    } else {
        libc::SYS_writev
    };
    if !spindle_park::on_copying_stack() || !(0..=IOV_MAX).contains(&n) || iov.is_null() {
        let (at, count) = (iov as c_long, n as c_long);
        // SAFETY: the caller's contract (the vector and its buffers stay where they are while
        // the coroutine is parked); invalid counts fail in the kernel at once.
        return offload_call(move || unsafe { sys::call3(nr, fd as c_long, at, count) });
    }
    // SAFETY: the caller's contract: `iov` points at `n` iovecs.
    let iov = unsafe { std::slice::from_raw_parts(iov, n as usize) };
    let len = iov
        .iter()
        .fold(0usize, |sum, v| sum.saturating_add(v.iov_len))
        .min(BOUNCE_MAX);
    let Some(mut heap) = bounce(len) else {
        sys::set_errno(libc::ENOMEM);
        return -1;
    };
    if !reads {
        for v in iov {
            let take = v.iov_len.min(len - heap.len());
            // SAFETY: the caller's contract: each buffer is valid to read for its length.
            heap.extend_from_slice(unsafe {
                std::slice::from_raw_parts(v.iov_base.cast::<u8>(), take)
            });
        }
    }
    let single = if reads {
        libc::SYS_read
    } else {
        libc::SYS_write
    };
    let at = heap.as_mut_ptr() as c_long;
    // SAFETY: `heap` is valid for `len` bytes both ways and outlives the call.
    let got = offload_call(move || unsafe { sys::call3(single, fd as c_long, at, len as c_long) });
    if reads && got > 0 {
        let mut from = 0usize;
        for v in iov {
            let take = v.iov_len.min(got as usize - from);
            // SAFETY: `heap` holds `got` bytes written by the kernel; each buffer is valid to
            // write for its length (the caller's contract) and does not overlap `heap`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    heap.as_ptr().add(from),
                    v.iov_base.cast::<u8>(),
                    take,
                );
            }
            from += take;
            if from == got as usize {
                break;
            }
        }
    }
    got
}

/// # Safety
///
/// As `pread(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pread(
    fd: c_int,
    buf: *mut c_void,
    count: size_t,
    offset: off_t,
) -> ssize_t {
    // SAFETY: the caller's contract.
    unsafe { pread64(fd, buf, count, offset) }
}

/// # Safety
///
/// As `pread(2)` (glibc's name for it with a 64-bit offset; the same on 64-bit targets).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pread64(
    fd: c_int,
    buf: *mut c_void,
    count: size_t,
    offset: off_t,
) -> ssize_t {
    if offloads(fd) {
        // SAFETY: the caller's contract.
        return unsafe { offload_transfer(libc::SYS_pread64, fd, buf, count, offset, true) };
    }
    // SAFETY: the caller's contract.
    unsafe {
        sys::call6(
            libc::SYS_pread64,
            [fd as c_long, buf as c_long, count as c_long, offset, 0, 0],
        )
    }
}

/// # Safety
///
/// As `pwrite(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwrite(
    fd: c_int,
    buf: *const c_void,
    count: size_t,
    offset: off_t,
) -> ssize_t {
    // SAFETY: the caller's contract.
    unsafe { pwrite64(fd, buf, count, offset) }
}

/// # Safety
///
/// As `pwrite(2)` (glibc's name for it with a 64-bit offset; the same on 64-bit targets).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwrite64(
    fd: c_int,
    buf: *const c_void,
    count: size_t,
    offset: off_t,
) -> ssize_t {
    if offloads(fd) {
        // SAFETY: the caller's contract.
        return unsafe {
            offload_transfer(libc::SYS_pwrite64, fd, buf.cast_mut(), count, offset, false)
        };
    }
    // SAFETY: the caller's contract.
    unsafe {
        sys::call6(
            libc::SYS_pwrite64,
            [fd as c_long, buf as c_long, count as c_long, offset, 0, 0],
        )
    }
}

/// `fsync` or `fdatasync`: on the pool for a file in a coroutine.
fn sync(nr: c_long, fd: c_int) -> c_int {
    // SAFETY: takes no pointer.
    let call = move || unsafe { sys::call3(nr, fd as c_long, 0, 0) };
    if offloads(fd) {
        offload_call(call) as c_int
    } else {
        call() as c_int
    }
}

/// # Safety
///
/// None beyond the C function's (it takes no pointers).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    sync(libc::SYS_fsync, fd)
}

/// # Safety
///
/// None beyond the C function's (it takes no pointers).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    sync(libc::SYS_fdatasync, fd)
}

/// The C library's `open`, variadic: its optional mode arrives in the register a third named
/// argument would (see `fcntl`), and is used only with `O_CREAT` or `O_TMPFILE`, as glibc does.
///
/// # Safety
///
/// As `open(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: c_ulong) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { open_at(libc::AT_FDCWD, path, flags, mode) }
}

/// The same as [`open`] (glibc's name for it with 64-bit offsets, which std calls).
///
/// # Safety
///
/// As `open(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: c_ulong) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { open_at(libc::AT_FDCWD, path, flags, mode) }
}

/// # Safety
///
/// As `openat(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openat(
    dir: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_ulong,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { open_at(dir, path, flags, mode) }
}

/// # Safety
///
/// As `openat(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openat64(
    dir: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_ulong,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { open_at(dir, path, flags, mode) }
}

/// `openat(2)` (every `open` is one), on the blocking pool in a coroutine: opening can wait for
/// a disk, a network file system, or a FIFO's other end. The path is copied for the pool.
///
/// # Safety
///
/// As `openat(2)`.
unsafe fn open_at(dir: c_int, path: *const c_char, flags: c_int, mode: c_ulong) -> c_int {
    let needs_mode = flags & libc::O_CREAT != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE;
    let mode = if needs_mode { mode as c_long } else { 0 };
    let call = move |path: c_long| {
        // SAFETY: `path` is the caller's path or a copy of it, alive until this returns.
        unsafe {
            sys::call6(
                libc::SYS_openat,
                [dir as c_long, path, flags as c_long, mode, 0, 0],
            )
        }
    };
    let r = if enabled() && in_coroutine() && !path.is_null() {
        // SAFETY: the caller's contract: a valid C string.
        let bytes = unsafe { CStr::from_ptr(path) }.to_bytes_with_nul();
        match bounce(bytes.len()) {
            Some(mut copy) => {
                copy.extend_from_slice(bytes);
                let at = copy.as_ptr() as c_long;
                offload_call(move || call(at))
            }
            None => {
                sys::set_errno(libc::ENOMEM);
                -1
            }
        }
    } else {
        call(path as c_long)
    } as c_int;
    forget_new(r);
    r
}

// ---------------------------------------------------------------------------------------
// Name resolution.

type GetAddrInfo = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const addrinfo,
    *mut *mut addrinfo,
) -> c_int;

/// The C library's `getaddrinfo` (0: not looked up yet).
static REAL_GETADDRINFO: AtomicUsize = AtomicUsize::new(0);

/// The C library's own `getaddrinfo`: the next definition after this executable's, which is
/// this crate's.
fn real_getaddrinfo() -> Option<GetAddrInfo> {
    let mut f = REAL_GETADDRINFO.load(Ordering::Acquire);
    if f == 0 {
        // SAFETY: a valid C string; `RTLD_NEXT` asks for the definition after the caller's
        // object. Racing look-ups find the same address.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"getaddrinfo".as_ptr()) } as usize;
        if f == 0 {
            return None;
        }
        REAL_GETADDRINFO.store(f, Ordering::Release);
    }
    // SAFETY: `f` is the address of glibc's `getaddrinfo`, which has this signature.
    Some(unsafe { std::mem::transmute::<usize, GetAddrInfo>(f) })
}

/// A copy of a C string for the pool thread (`None` for null), or `Err` where memory is short.
///
/// # Safety
///
/// `s` is null or a valid C string.
unsafe fn copy_c_string(s: *const c_char) -> Result<Option<Vec<u8>>, ()> {
    if s.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract.
    let bytes = unsafe { CStr::from_ptr(s) }.to_bytes_with_nul();
    let mut copy = bounce(bytes.len()).ok_or(())?;
    copy.extend_from_slice(bytes);
    Ok(Some(copy))
}

/// `getaddrinfo(3)` — std's `ToSocketAddrs` for host names, and every resolver built on the C
/// library. In a coroutine it runs on the blocking pool (it may wait seconds for a DNS server)
/// with copies of its arguments; the list it returns is the C library's, freed with
/// `freeaddrinfo` as usual.
///
/// # Safety
///
/// As `getaddrinfo(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const addrinfo,
    res: *mut *mut addrinfo,
) -> c_int {
    let Some(real) = real_getaddrinfo() else {
        sys::set_errno(libc::ENOSYS);
        return libc::EAI_SYSTEM;
    };
    if !enabled() || !in_coroutine() {
        // SAFETY: the caller's contract.
        return unsafe { real(node, service, hints, res) };
    }
    // SAFETY: the caller's contract: null or valid C strings.
    let (Ok(node), Ok(service)) = (unsafe { copy_c_string(node) }, unsafe {
        copy_c_string(service)
    }) else {
        return libc::EAI_MEMORY;
    };
    // Only these four fields of the hints are read (POSIX has the others zero).
    // SAFETY: the caller's contract: `hints` is null or valid to read.
    let hints =
        unsafe { hints.as_ref() }.map(|h| (h.ai_flags, h.ai_family, h.ai_socktype, h.ai_protocol));
    let job = move || {
        // SAFETY: all-zero is a valid addrinfo (null pointers, zero lengths).
        let mut h: addrinfo = unsafe { std::mem::zeroed() };
        if let Some((flags, family, socktype, protocol)) = hints {
            h.ai_flags = flags;
            h.ai_family = family;
            h.ai_socktype = socktype;
            h.ai_protocol = protocol;
        }
        let mut out: *mut addrinfo = std::ptr::null_mut();
        let c_str =
            |s: &Option<Vec<u8>>| s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr().cast());
        // SAFETY: the strings are NUL-terminated copies, `h` and `out` valid locals.
        let rc = unsafe {
            real(
                c_str(&node),
                c_str(&service),
                if hints.is_some() {
                    &h
                } else {
                    std::ptr::null()
                },
                &mut out,
            )
        };
        (rc, sys::errno(), out as usize)
    };
    let (rc, errno, out) = {
        let _deferred = spindle_park::defer_cancel();
        // The job holds copies only: nothing on the coroutine's stack.
        spindle_io::offload(job.clone()).unwrap_or_else(|_| job())
    };
    if rc == 0 {
        // SAFETY: the caller's contract: `res` is valid to write.
        unsafe { *res = out as *mut addrinfo };
    } else if rc == libc::EAI_SYSTEM {
        sys::set_errno(errno);
    }
    rc
}
