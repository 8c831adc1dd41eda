//! Sockets and pipes: the calls that wait for a descriptor, and the bookkeeping calls that
//! follow descriptors' lives and the application's non-blocking wish.

use std::time::{Duration, Instant};

use libc::{
    c_int, c_long, c_ulong, c_void, fd_set, iovec, msghdr, nfds_t, pollfd, sigset_t, size_t,
    sockaddr, socklen_t, ssize_t, timespec,
};

use super::files::{offload_transfer, offload_vectored};
use super::timeouts;
use super::{
    Dir, FILE, MANAGED, PASS, Route, Slot, Snapshot, UNKNOWN, USER_NONBLOCKING,
    coroutine_sleep_until, coroutine_wait, enabled, finish, in_coroutine, managed, retry, route,
    slot, sys,
};

/// `fcntl(F_GETOWN_EX)` and its owner type for process groups (as `<fcntl.h>` has them).
const F_GETOWN_EX: c_int = 16;
const F_OWNER_PGRP: c_int = 2;

#[repr(C)]
struct FOwnerEx {
    kind: c_int,
    pid: libc::pid_t,
}

/// Runs `op(offset)` on a managed descriptor until it transfers something (`complete`: until
/// `len` bytes are transferred in all, the end of stream, an error or the deadline, as a
/// blocking stream call does), waiting for readiness on `EAGAIN`. The C result.
fn transfer(
    fd: c_int,
    slot: Slot,
    dir: Dir,
    len: usize,
    complete: bool,
    op: &mut dyn FnMut(usize) -> isize,
) -> isize {
    let mut done = 0usize;
    // The socket timeout bounds the whole call, from its first wait.
    let mut deadline: Option<Option<Instant>> = None;
    // In a coroutine, the descriptor's waiting machinery (if an earlier wait made it): its
    // readiness before each call lets a call that fails with `EAGAIN` wait at once instead of
    // being made again (see `coroutine_wait`).
    let co = in_coroutine();
    let mut waiter = if co { slot.existing_waiter() } else { None };
    loop {
        let snapshot = waiter
            .as_ref()
            .map_or_else(Snapshot::default, |w| w.0.snapshot());
        let mut at = || op(done);
        let n = at();
        let outcome = if n >= 0 {
            Ok(n)
        } else {
            match sys::errno() {
                libc::EAGAIN => {
                    let d = *deadline.get_or_insert_with(|| timeouts::deadline(fd, dir));
                    let r = retry(fd, slot, dir, d, Some(snapshot), &mut at);
                    if co && waiter.is_none() {
                        waiter = slot.existing_waiter();
                    }
                    r
                }
                e => Err(e),
            }
        };
        match outcome {
            Ok(n) if !complete => return n,
            Ok(n) => {
                done += n as usize;
                if n == 0 || done >= len {
                    return done as isize;
                }
            }
            // What was transferred before an error or the timeout is the call's result.
            Err(_) if done > 0 => return done as isize,
            Err(e) => return finish(Err(e)),
        }
    }
}

/// Whether `flags` ask this call not to wait.
#[inline]
fn dont_wait(flags: c_int) -> bool {
    flags & libc::MSG_DONTWAIT != 0
}

/// Whether a read with `flags` on a stream must fill its buffer.
#[inline]
fn wait_all(flags: c_int) -> bool {
    flags & libc::MSG_WAITALL != 0 && flags & libc::MSG_PEEK == 0
}

/// # Safety
///
/// As `read(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    // SAFETY: the caller's contract.
    let mut op = move |_| unsafe {
        sys::call3(libc::SYS_read, fd as c_long, buf as c_long, count as c_long)
    };
    match route(fd) {
        Route::Wait(slot) => transfer(fd, slot, Dir::Read, count, false, &mut op),
        // SAFETY: the caller's contract.
        Route::Offload => unsafe { offload_transfer(libc::SYS_read, fd, buf, count, 0, true) },
        Route::Pass => op(0),
    }
}

/// # Safety
///
/// As `readv(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    // SAFETY: the caller's contract.
    let mut op =
        move |_| unsafe { sys::call3(libc::SYS_readv, fd as c_long, iov as c_long, n as c_long) };
    match route(fd) {
        Route::Wait(slot) => transfer(fd, slot, Dir::Read, 0, false, &mut op),
        // SAFETY: the caller's contract.
        Route::Offload => unsafe { offload_vectored(fd, iov, n, true) },
        Route::Pass => op(0),
    }
}

/// # Safety
///
/// As `recv(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
    // SAFETY: the caller's contract.
    unsafe {
        recvfrom(
            fd,
            buf,
            len,
            flags,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    }
}

/// # Safety
///
/// As `recvfrom(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    addr_len: *mut socklen_t,
) -> ssize_t {
    let mut op = move |off: usize| {
        // SAFETY: the caller's contract; `off` never exceeds `len` (see `transfer`).
        unsafe {
            sys::call6(
                libc::SYS_recvfrom,
                [
                    fd as c_long,
                    buf.cast::<u8>().add(off) as c_long,
                    (len - off) as c_long,
                    flags as c_long,
                    addr as c_long,
                    addr_len as c_long,
                ],
            )
        }
    };
    match managed(fd) {
        Some(slot) if !dont_wait(flags) => {
            transfer(fd, slot, Dir::Read, len, wait_all(flags), &mut op)
        }
        _ => op(0),
    }
}

/// # Safety
///
/// As `recvmsg(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    // SAFETY: the caller's contract.
    let mut op = move |_| unsafe {
        sys::call3(
            libc::SYS_recvmsg,
            fd as c_long,
            msg as c_long,
            flags as c_long,
        )
    };
    match managed(fd) {
        Some(slot) if !dont_wait(flags) => transfer(fd, slot, Dir::Read, 0, false, &mut op),
        _ => op(0),
    }
}

/// # Safety
///
/// As `write(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    let mut op = move |off: usize| {
        // SAFETY: the caller's contract; `off` never exceeds `count` (see `transfer`).
        unsafe {
            sys::call3(
                libc::SYS_write,
                fd as c_long,
                buf.cast::<u8>().add(off) as c_long,
                (count - off) as c_long,
            )
        }
    };
    match route(fd) {
        Route::Wait(slot) => transfer(fd, slot, Dir::Write, count, true, &mut op),
        // SAFETY: the caller's contract.
        Route::Offload => unsafe {
            offload_transfer(libc::SYS_write, fd, buf.cast_mut(), count, 0, false)
        },
        Route::Pass => op(0),
    }
}

/// # Safety
///
/// As `writev(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    // SAFETY: the caller's contract.
    let mut op =
        move |_| unsafe { sys::call3(libc::SYS_writev, fd as c_long, iov as c_long, n as c_long) };
    match route(fd) {
        Route::Wait(slot) => transfer(fd, slot, Dir::Write, 0, false, &mut op),
        // SAFETY: the caller's contract.
        Route::Offload => unsafe { offload_vectored(fd, iov, n, false) },
        Route::Pass => op(0),
    }
}

/// # Safety
///
/// As `send(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t {
    // SAFETY: the caller's contract.
    unsafe { sendto(fd, buf, len, flags, std::ptr::null(), 0) }
}

/// # Safety
///
/// As `sendto(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    addr: *const sockaddr,
    addr_len: socklen_t,
) -> ssize_t {
    let mut op = move |off: usize| {
        // SAFETY: the caller's contract; `off` never exceeds `len` (see `transfer`).
        unsafe {
            sys::call6(
                libc::SYS_sendto,
                [
                    fd as c_long,
                    buf.cast::<u8>().add(off) as c_long,
                    (len - off) as c_long,
                    flags as c_long,
                    addr as c_long,
                    addr_len as c_long,
                ],
            )
        }
    };
    match managed(fd) {
        Some(slot) if !dont_wait(flags) => transfer(fd, slot, Dir::Write, len, true, &mut op),
        _ => op(0),
    }
}

/// # Safety
///
/// As `sendmsg(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    if enabled() {
        // SAFETY: the caller's contract.
        unsafe { timeouts::passing_descriptors(msg) };
    }
    // SAFETY: the caller's contract.
    let mut op = move |_| unsafe {
        sys::call3(
            libc::SYS_sendmsg,
            fd as c_long,
            msg as c_long,
            flags as c_long,
        )
    };
    match managed(fd) {
        Some(slot) if !dont_wait(flags) => transfer(fd, slot, Dir::Write, 0, false, &mut op),
        _ => op(0),
    }
}

/// # Safety
///
/// As `accept(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { accept4(fd, addr, len, 0) }
}

/// # Safety
///
/// As `accept4(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    let mut op = move |_| {
        // SAFETY: the caller's contract.
        unsafe {
            sys::call6(
                libc::SYS_accept4,
                [
                    fd as c_long,
                    addr as c_long,
                    len as c_long,
                    flags as c_long,
                    0,
                    0,
                ],
            )
        }
    };
    let epoch = timeouts::epoch();
    let r = match managed(fd) {
        Some(slot) => transfer(fd, slot, Dir::Read, 0, false, &mut op),
        None => op(0),
    } as c_int;
    forget_new(r);
    // An accepted socket starts with its listener's timeouts.
    timeouts::new_socket(r, epoch, flags & libc::SOCK_CLOEXEC != 0);
    r
}

/// # Safety
///
/// As `connect(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: the caller's contract.
    let mut op = move || unsafe {
        sys::call3(
            libc::SYS_connect,
            fd as c_long,
            addr as c_long,
            len as c_long,
        )
    };
    let Some(slot) = managed(fd) else {
        return op() as c_int;
    };
    if op() >= 0 {
        return 0;
    }
    match sys::errno() {
        libc::EINPROGRESS => {
            let mut writable = || {
                let mut pfd = pollfd {
                    fd,
                    events: libc::POLLOUT,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                match unsafe { sys::poll(&mut pfd, 1, Some(Duration::ZERO)) } {
                    0 => {
                        sys::set_errno(libc::EAGAIN);
                        -1
                    }
                    n => n,
                }
            };
            let deadline = timeouts::deadline(fd, Dir::Write);
            match retry(fd, slot, Dir::Write, deadline, None, &mut writable) {
                Ok(_) => {
                    let mut err: c_int = 0;
                    let mut err_len = std::mem::size_of::<c_int>() as socklen_t;
                    // SAFETY: `err` and `err_len` are valid to write, `err_len` is its size.
                    let r = unsafe {
                        libc::getsockopt(
                            fd,
                            libc::SOL_SOCKET,
                            libc::SO_ERROR,
                            (&raw mut err).cast(),
                            &mut err_len,
                        )
                    };
                    if r != 0 {
                        return -1;
                    }
                    if err != 0 {
                        sys::set_errno(err);
                        return -1;
                    }
                    0
                }
                // A blocking connect that times out reports that it is still in progress.
                Err(libc::EAGAIN) => finish(Err(libc::EINPROGRESS)) as c_int,
                Err(e) => finish(Err(e)) as c_int,
            }
        }
        // A Unix socket whose listener's backlog is full.
        libc::EAGAIN => {
            let deadline = timeouts::deadline(fd, Dir::Write);
            finish(retry(fd, slot, Dir::Write, deadline, None, &mut op)) as c_int
        }
        _ => -1,
    }
}

/// Which way a `poll` of one descriptor waits, if it waits one way only.
fn poll_dir(events: i16) -> Option<Dir> {
    let read = events & (libc::POLLIN | libc::POLLPRI | libc::POLLRDNORM | libc::POLLRDBAND) != 0;
    let write = events & (libc::POLLOUT | libc::POLLWRNORM | libc::POLLWRBAND) != 0;
    match (read, write) {
        (true, false) => Some(Dir::Read),
        (false, true) => Some(Dir::Write),
        _ => None,
    }
}

/// How often a coroutine's `poll` of several descriptors looks again.
const POLL_SLICE: Duration = Duration::from_millis(1);

/// In a coroutine: runs `attempt` — a readiness check that does not wait, returning a count >
/// 0 when something is ready, 0 when nothing is, `-1` with `errno` on an error — until it
/// reports something or `deadline` passes (then 0: the last attempt found nothing). In
/// between, only the coroutine waits: on the driver when `single` (asked after the first
/// attempt, which has checked the arguments) names one managed descriptor waited on in one
/// direction, otherwise in slices of [`POLL_SLICE`]. The C result.
fn wait_ready(
    single: &dyn Fn() -> Option<(c_int, Dir)>,
    deadline: Option<Instant>,
    attempt: &mut dyn FnMut() -> isize,
) -> isize {
    let now = attempt();
    if now != 0 {
        return now;
    }
    if let Some((fd, dir)) = single()
        && let Some(slot) = managed(fd)
    {
        let mut ready = || match attempt() {
            0 => {
                sys::set_errno(libc::EAGAIN);
                -1
            }
            n => n,
        };
        if let Some(done) = coroutine_wait(fd, slot, dir, deadline, None, &mut ready) {
            return match done {
                Ok(n) => n,
                // The timeout.
                Err(libc::EAGAIN) => 0,
                Err(e) => finish(Err(e)),
            };
        }
    }
    // Several descriptors, or one the driver cannot wait for: look again every slice.
    let _deferred = spindle_park::defer_cancel();
    loop {
        if spindle_park::cancel_requested() {
            return finish(Err(libc::ECANCELED));
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return 0;
        }
        let slice = now + POLL_SLICE;
        let _ = spindle_park::park_until(deadline.map_or(slice, |d| d.min(slice)));
        let n = attempt();
        if n != 0 {
            return n;
        }
    }
}

/// `poll` and `ppoll` in a coroutine with a non-zero timeout (`deadline`; `None`: none).
///
/// # Safety
///
/// As `poll(2)`.
unsafe fn coroutine_poll(fds: *mut pollfd, nfds: nfds_t, deadline: Option<Instant>) -> c_int {
    if nfds == 0 {
        // A sleep.
        coroutine_sleep_until(deadline);
        return 0;
    }
    let single = || {
        if nfds != 1 {
            return None;
        }
        // SAFETY: one pollfd, which the kernel has just read without a fault.
        let (fd, events) = unsafe { ((*fds).fd, (*fds).events) };
        poll_dir(events).map(|dir| (fd, dir))
    };
    // SAFETY: the caller's contract.
    let mut attempt = || unsafe { sys::poll(fds, nfds, Some(Duration::ZERO)) };
    wait_ready(&single, deadline, &mut attempt) as c_int
}

/// # Safety
///
/// As `poll(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn poll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
    if timeout == 0 || !enabled() || !in_coroutine() {
        // SAFETY: the caller's contract.
        return unsafe { sys::poll(fds, nfds, sys::ms(timeout)) } as c_int;
    }
    let deadline = sys::ms(timeout).and_then(|t| Instant::now().checked_add(t));
    // SAFETY: the caller's contract.
    unsafe { coroutine_poll(fds, nfds, deadline) }
}

/// A `timespec` timeout as `ppoll` and `pselect` take it: `Ok(None)` for none (null),
/// `Err(())` for one the kernel refuses with `EINVAL`.
fn timespec_timeout(ts: Option<timespec>) -> Result<Option<Duration>, ()> {
    match ts {
        None => Ok(None),
        Some(ts) if ts.tv_sec < 0 || !(0..1_000_000_000).contains(&ts.tv_nsec) => Err(()),
        Some(ts) => Ok(Some(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))),
    }
}

/// `ppoll(2)`. In a coroutine, with no signal mask, it is `poll` with a finer timeout. A
/// signal mask cannot be applied to a coroutine alone (the mask is the thread's, and the
/// kernel swaps it atomically with the wait), so a call with one passes through and blocks
/// the worker thread, with exactly the kernel's semantics. The timeout is not written back
/// (glibc hands the kernel a copy).
///
/// # Safety
///
/// As `ppoll(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ppoll(
    fds: *mut pollfd,
    nfds: nfds_t,
    timeout: *const timespec,
    sigmask: *const sigset_t,
) -> c_int {
    // SAFETY: the caller's contract: `timeout` is null or valid to read (glibc copies it too).
    let ts = unsafe { timeout.as_ref() }.copied();
    let pass = || {
        // SAFETY: the caller's contract; the timeout is a local copy.
        unsafe { sys::ppoll(fds, nfds, ts, sigmask) as c_int }
    };
    if !sigmask.is_null() || !enabled() || !in_coroutine() {
        return pass();
    }
    match timespec_timeout(ts) {
        Ok(Some(d)) if d.is_zero() => pass(),
        // An invalid timeout: the kernel's EINVAL.
        Err(()) => pass(),
        Ok(limit) => {
            let deadline = limit.and_then(|d| Instant::now().checked_add(d));
            // SAFETY: the caller's contract.
            unsafe { coroutine_poll(fds, nfds, deadline) }
        }
    }
}

/// Bytes of an `fd_set` that the kernel reads and rewrites for `nfds` descriptors (whole
/// `long`s).
fn set_bytes(nfds: c_int) -> usize {
    let bits = c_long::BITS as usize;
    (nfds.max(0) as usize).div_ceil(bits) * (bits / 8)
}

/// Whether descriptor `fd` is in `set`, the bytes of an `fd_set` (empty: a null set).
fn in_set(set: &[u8], fd: c_int) -> bool {
    let bits = c_long::BITS as usize;
    let (word, bit) = (fd as usize / bits, fd as usize % bits);
    let bytes = bits / 8;
    set.get(word * bytes..(word + 1) * bytes)
        .is_some_and(|w| c_ulong::from_ne_bytes(w.try_into().unwrap_or_default()) & (1 << bit) != 0)
}

/// `select` and `pselect` in a coroutine with a non-zero timeout (`limit`; `None`: none):
/// the result, and the time left (for `select`'s timeout, which Linux rewrites). Each attempt
/// is the system call with a zero timeout on the caller's sets, restored first from a copy,
/// so that the sets are rewritten as the kernel rewrites them: the ready descriptors on
/// success, all clear on a timeout, untouched on an error.
///
/// # Safety
///
/// As `select(2)`; `nfds >= 0`.
unsafe fn coroutine_select(
    nfds: c_int,
    sets: [*mut fd_set; 3],
    limit: Option<Duration>,
) -> (c_int, Option<Instant>) {
    let deadline = limit.and_then(|d| Instant::now().checked_add(d));
    if nfds == 0 || sets.iter().all(|s| s.is_null()) {
        // No descriptors: a sleep (old C code's sub-second sleep).
        coroutine_sleep_until(deadline);
        return (0, deadline);
    }
    let bytes = set_bytes(nfds);
    let mut saved = [const { Vec::<u8>::new() }; 3];
    for (copy, &set) in saved.iter_mut().zip(&sets) {
        if set.is_null() {
            continue;
        }
        if copy.try_reserve_exact(bytes).is_err() {
            return (finish(Err(libc::ENOMEM)) as c_int, deadline);
        }
        // SAFETY: the caller's contract: each set is valid for `nfds` bits.
        copy.extend_from_slice(unsafe { std::slice::from_raw_parts(set.cast::<u8>(), bytes) });
    }
    // One descriptor in one direction waits on the driver.
    let single = || {
        let mut single = None;
        let mut count = 0;
        for fd in 0..nfds {
            // The copies: the attempts rewrite the sets themselves.
            for (i, set) in saved.iter().enumerate() {
                if in_set(set, fd) {
                    count += 1;
                    single = match i {
                        0 => Some((fd, Dir::Read)),
                        1 => Some((fd, Dir::Write)),
                        // Exceptional conditions (out-of-band data): looked at in slices.
                        _ => None,
                    };
                }
            }
            if count > 1 {
                return None;
            }
        }
        single
    };
    let mut first = true;
    let mut attempt = || {
        if !first {
            for (copy, &set) in saved.iter().zip(&sets) {
                if !set.is_null() {
                    // SAFETY: `copy` holds `bytes` bytes of this very set.
                    unsafe {
                        std::ptr::copy_nonoverlapping(copy.as_ptr(), set.cast::<u8>(), bytes)
                    };
                }
            }
        }
        first = false;
        let mut zero = libc::timeval {
            tv_sec: 0,
            tv_usec: 0,
        };
        // SAFETY: the caller's contract for the sets; a valid zero timeout.
        unsafe { sys::select(nfds, sets, &mut zero) }
    };
    let n = wait_ready(&single, deadline, &mut attempt);
    (n as c_int, deadline)
}

/// # Safety
///
/// As `select(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn select(
    nfds: c_int,
    readfds: *mut fd_set,
    writefds: *mut fd_set,
    exceptfds: *mut fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    let sets = [readfds, writefds, exceptfds];
    // SAFETY: the caller's contract.
    let pass = || unsafe { sys::select(nfds, sets, timeout) as c_int };
    if !enabled() || !in_coroutine() || nfds < 0 {
        return pass();
    }
    // SAFETY: the caller's contract: `timeout` is null or valid to read and write.
    let limit = match unsafe { timeout.as_ref() } {
        None => None,
        // The kernel's EINVAL.
        Some(tv) if tv.tv_sec < 0 || tv.tv_usec < 0 => return pass(),
        Some(tv) => {
            let d = Duration::from_secs(tv.tv_sec as u64)
                .saturating_add(Duration::from_micros(tv.tv_usec as u64));
            if d.is_zero() {
                return pass();
            }
            Some(d)
        }
    };
    // SAFETY: the caller's contract; `nfds >= 0`.
    let (n, deadline) = unsafe { coroutine_select(nfds, sets, limit) };
    if let Some(deadline) = deadline {
        // Linux writes the time left back (also on an error).
        let left = deadline.saturating_duration_since(Instant::now());
        // SAFETY: `timeout` is valid to write (the caller's contract; a deadline means it was
        // given).
        unsafe {
            *timeout = libc::timeval {
                tv_sec: left.as_secs() as libc::time_t,
                tv_usec: left.subsec_micros().into(),
            }
        };
    }
    n
}

/// `pselect(2)`: `select` with a `timespec` that is not written back and a signal mask. As
/// for `ppoll`, a call with a signal mask passes through (blocks the worker).
///
/// # Safety
///
/// As `pselect(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pselect(
    nfds: c_int,
    readfds: *mut fd_set,
    writefds: *mut fd_set,
    exceptfds: *mut fd_set,
    timeout: *const timespec,
    sigmask: *const sigset_t,
) -> c_int {
    let sets = [readfds, writefds, exceptfds];
    // SAFETY: the caller's contract: `timeout` is null or valid to read (glibc copies it too).
    let ts = unsafe { timeout.as_ref() }.copied();
    // SAFETY: the caller's contract; the timeout is a local copy.
    let pass = || unsafe { sys::pselect(nfds, sets, ts, sigmask) as c_int };
    if !sigmask.is_null() || !enabled() || !in_coroutine() || nfds < 0 {
        return pass();
    }
    match timespec_timeout(ts) {
        Ok(Some(d)) if d.is_zero() => pass(),
        Err(()) => pass(),
        // SAFETY: the caller's contract; `nfds >= 0`.
        Ok(limit) => unsafe { coroutine_select(nfds, sets, limit) }.0,
    }
}

// ---------------------------------------------------------------------------------------
// Bookkeeping.

/// A descriptor number just made (by a call the hook sees): whatever the table held for it
/// belonged to a predecessor closed behind the hook's back.
#[inline]
pub(super) fn forget_new(fd: c_int) {
    if fd >= 0
        && let Some(slot) = slot(fd)
    {
        slot.reset(UNKNOWN);
        timeouts::forget(fd);
    }
}

/// `new` is a duplicate of `old` (the same open file description): it shares its mode.
fn copy_state(old: c_int, new: c_int) {
    let Some(new_slot) = slot(new) else { return };
    let state = match slot(old).map(Slot::state) {
        Some(s @ (MANAGED | USER_NONBLOCKING | PASS | FILE)) => s,
        _ => UNKNOWN,
    };
    new_slot.reset(state);
    timeouts::duplicated(old, new);
}

/// # Safety
///
/// As `close(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    // Before the descriptor goes: its registrations are removed while the number is still
    // this descriptor's.
    forget_new(fd);
    // SAFETY: the caller's contract.
    unsafe { sys::call3(libc::SYS_close, fd as c_long, 0, 0) as c_int }
}

/// # Safety
///
/// As `dup(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: the caller's contract.
    let r = unsafe { sys::call3(libc::SYS_dup, fd as c_long, 0, 0) } as c_int;
    if r >= 0 {
        copy_state(fd, r);
    }
    r
}

/// # Safety
///
/// As `dup2(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if old == new {
        // dup3 refuses this; dup2 checks `old` and returns it.
        // SAFETY: F_GETFL takes no argument.
        if unsafe { sys::call3(libc::SYS_fcntl, old as c_long, libc::F_GETFL as c_long, 0) } < 0 {
            return -1;
        }
        return new;
    }
    // SAFETY: the caller's contract.
    unsafe { dup3(old, new, 0) }
}

/// # Safety
///
/// As `dup3(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if old != new {
        // `new` is closed by the call, if open.
        forget_new(new);
    }
    // SAFETY: the caller's contract.
    let r = unsafe {
        sys::call3(
            libc::SYS_dup3,
            old as c_long,
            new as c_long,
            flags as c_long,
        )
    } as c_int;
    if r >= 0 {
        copy_state(old, r);
    }
    r
}

/// # Safety
///
/// As `socket(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    let epoch = timeouts::epoch();
    // SAFETY: plain system call.
    let r = unsafe {
        sys::call3(
            libc::SYS_socket,
            domain as c_long,
            ty as c_long,
            protocol as c_long,
        )
    } as c_int;
    forget_new(r);
    timeouts::new_socket(r, epoch, ty & libc::SOCK_CLOEXEC != 0);
    r
}

/// # Safety
///
/// As `socketpair(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn socketpair(
    domain: c_int,
    ty: c_int,
    protocol: c_int,
    sv: *mut c_int,
) -> c_int {
    let epoch = timeouts::epoch();
    // SAFETY: the caller's contract: `sv` is valid for two ints.
    let r = unsafe {
        sys::call6(
            libc::SYS_socketpair,
            [
                domain as c_long,
                ty as c_long,
                protocol as c_long,
                sv as c_long,
                0,
                0,
            ],
        )
    } as c_int;
    if r == 0 {
        // SAFETY: the call filled both.
        let fds = unsafe { [*sv, *sv.add(1)] };
        for fd in fds {
            forget_new(fd);
            timeouts::new_socket(fd, epoch, ty & libc::SOCK_CLOEXEC != 0);
        }
    }
    r
}

/// # Safety
///
/// As `pipe(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pipe(fds: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { pipe2(fds, 0) }
}

/// # Safety
///
/// As `pipe2(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pipe2(fds: *mut c_int, flags: c_int) -> c_int {
    // SAFETY: the caller's contract: `fds` is valid for two ints.
    let r = unsafe { sys::call3(libc::SYS_pipe2, fds as c_long, flags as c_long, 0) } as c_int;
    if r == 0 {
        // SAFETY: the call filled both.
        let fds = unsafe { [*fds, *fds.add(1)] };
        for fd in fds {
            forget_new(fd);
            timeouts::not_socket(fd);
        }
    }
    r
}

/// The C library's `fcntl`, variadic: its one optional argument arrives in the register a
/// third named argument would (the x86_64 and aarch64 Linux calling conventions pass variadic
/// integer and pointer arguments as named ones), whatever its type.
///
/// # Safety
///
/// As `fcntl(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { fcntl_impl(fd, cmd, arg) }
}

/// The same as [`fcntl`] (glibc's name for it with 64-bit offsets).
///
/// # Safety
///
/// As `fcntl(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { fcntl_impl(fd, cmd, arg) }
}

/// # Safety
///
/// As `fcntl(2)`.
unsafe fn fcntl_impl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    let real = |arg: c_ulong| {
        // SAFETY: the caller's contract for `cmd` and `arg` (or, from the cases below, an
        // argument of the kind `cmd` takes).
        let r = unsafe { sys::call3(libc::SYS_fcntl, fd as c_long, cmd as c_long, arg as c_long) };
        r as c_int
    };
    match cmd {
        libc::F_GETFL => {
            let r = real(arg);
            if r >= 0 && slot(fd).is_some_and(|s| s.state() == MANAGED) {
                // The application asked for blocking mode: it sees blocking mode.
                r & !libc::O_NONBLOCK
            } else {
                r
            }
        }
        libc::F_SETFL => {
            let Some(slot) = slot(fd) else {
                return real(arg);
            };
            let wants_nonblocking = arg as c_int & libc::O_NONBLOCK != 0;
            match slot.state() {
                MANAGED if !wants_nonblocking => real(arg | libc::O_NONBLOCK as c_ulong),
                MANAGED if wants_nonblocking => {
                    let r = real(arg);
                    if r >= 0 {
                        slot.set_state(USER_NONBLOCKING);
                    }
                    r
                }
                USER_NONBLOCKING if !wants_nonblocking => {
                    let r = real(arg);
                    if r >= 0 {
                        // Looked at again by the next coroutine that uses it.
                        slot.set_state(UNKNOWN);
                    }
                    r
                }
                _ => real(arg),
            }
        }
        libc::F_SETFD => {
            if arg as c_int & libc::FD_CLOEXEC == 0 {
                // Inheritable: a child process may share the socket from now on.
                timeouts::share(fd);
            }
            real(arg)
        }
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            let r = real(arg);
            if r >= 0 {
                copy_state(fd, r);
            }
            r
        }
        libc::F_GETOWN => {
            // glibc answers F_GETOWN through F_GETOWN_EX, so that a process group whose
            // number looks like an error is reported (negated) all the same.
            let mut owner = FOwnerEx { kind: 0, pid: 0 };
            // SAFETY: `owner` is a valid f_owner_ex to write.
            let r = unsafe {
                sys::call3(
                    libc::SYS_fcntl,
                    fd as c_long,
                    F_GETOWN_EX as c_long,
                    (&raw mut owner) as c_long,
                )
            };
            if r < 0 {
                return -1;
            }
            if owner.kind == F_OWNER_PGRP {
                -owner.pid
            } else {
                owner.pid
            }
        }
        _ => real(arg),
    }
}

/// The C library's `ioctl`, variadic as [`fcntl`] is. `FIONBIO` is the application saying
/// whether it wants non-blocking mode (std's `set_nonblocking` uses it).
///
/// # Safety
///
/// As `ioctl(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: c_ulong) -> c_int {
    let real = |arg: c_ulong| {
        // SAFETY: the caller's contract for `request` and `arg` (or, from the cases below, a
        // pointer to an int for FIONBIO).
        let r = unsafe {
            sys::call3(
                libc::SYS_ioctl,
                fd as c_long,
                request as c_long,
                arg as c_long,
            )
        };
        r as c_int
    };
    if request == libc::FIONCLEX as c_ulong {
        // Inheritable: a child process may share the socket from now on.
        timeouts::share(fd);
    }
    if request != libc::FIONBIO as c_ulong || arg == 0 {
        return real(arg);
    }
    let Some(slot) = slot(fd) else {
        return real(arg);
    };
    // SAFETY: the caller's contract: FIONBIO's argument points at an int.
    let wants_nonblocking = unsafe { *(arg as *const c_int) } != 0;
    match slot.state() {
        MANAGED if !wants_nonblocking => {
            // Stays non-blocking underneath; the call still checks the descriptor.
            let one: c_int = 1;
            real((&raw const one) as c_ulong)
        }
        MANAGED if wants_nonblocking => {
            let r = real(arg);
            if r >= 0 {
                slot.set_state(USER_NONBLOCKING);
            }
            r
        }
        USER_NONBLOCKING if !wants_nonblocking => {
            let r = real(arg);
            if r >= 0 {
                slot.set_state(UNKNOWN);
            }
            r
        }
        _ => real(arg),
    }
}
