//! `SO_RCVTIMEO`/`SO_SNDTIMEO` as the hook knows them: a second table, three words per
//! descriptor, so that a wait does not ask the kernel for the timeout each time.
//!
//! A timeout belongs to the socket — the open file description — not to the descriptor: every
//! descriptor of the socket, in this process or another, sees a change made through any of
//! them. So a value is kept only for a *private* descriptor: one made after
//! [`enable`](crate::enable) by an interposed call that creates sockets (`socket`, `socketpair`,
//! `accept`, `accept4`) with close-on-exec, that has not been duplicated since (`dup*`,
//! `fcntl(F_DUPFD*)`), nor made inheritable (`fcntl(F_SETFD)` without `FD_CLOEXEC`,
//! `ioctl(FIONCLEX)`), nor sent to another process (`SCM_RIGHTS`), and that existed at no
//! `fork` (the fork handlers move an epoch that every private descriptor records). Such a
//! descriptor's first wait reads the value from the kernel (an accepted socket inherits its
//! listener's timeouts; one set through a call the hook does not see is found there); after
//! that every change goes through the interposed `setsockopt` on its own number, which
//! refreshes the value from the kernel under the descriptor's lock. Every other descriptor — made before `enable`, by a
//! call the hook does not see, shared — is asked each time (`getsockopt`), as before: the
//! table never answers for a socket that someone else may have changed.
//!
//! Pipes and FIFOs (made by `pipe`/`pipe2`, or found by the first look at a descriptor) are
//! recorded as having no socket options at all: their waits never ask.

use std::alloc::{self, Layout};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use libc::{c_int, c_long, c_void, socklen_t};

use super::{Dir, LEN, slot, sys};

/// One descriptor's entry.
#[repr(C)]
struct Entry {
    /// [`UNTRUSTED`], [`NOT_SOCKET`], or a private descriptor's epoch ([`private`]).
    trust: AtomicU64,
    /// The receive and send timeouts: [`UNKNOWN`], [`NONE`], or [`NONE`] + 1 + nanoseconds.
    rcv: AtomicU64,
    snd: AtomicU64,
}

/// Ask the kernel at every wait.
const UNTRUSTED: u64 = 0;
/// Not a socket: no timeouts, ever (until the number is closed or reused).
const NOT_SOCKET: u64 = 1;
/// A private descriptor's timeout not read yet.
const UNKNOWN: u64 = 0;
/// No timeout.
const NONE: u64 = 1;

/// The table: `LEN` entries, allocated by `enable`, never freed (null before).
static TABLE: AtomicPtr<Entry> = AtomicPtr::new(std::ptr::null_mut());

/// Moved by the fork handlers: odd while a `fork` is under way, even otherwise. A private
/// descriptor records the epoch read before it was made and is private only while the epoch
/// is still that one: a descriptor that a child process may share is never trusted again.
static FORK_EPOCH: AtomicU64 = AtomicU64::new(0);

/// The `trust` word of a descriptor made at `epoch` (never [`UNTRUSTED`] or [`NOT_SOCKET`]).
fn private(epoch: u64) -> u64 {
    epoch | (1 << 63)
}

/// Allocates the table (called by `enable` before it publishes the descriptor table).
pub(super) fn allocate(len: usize) -> bool {
    let Ok(layout) = Layout::array::<Entry>(len) else {
        return false;
    };
    // SAFETY: the layout has a non-zero size (`len >= 1024`); all-zero bytes are valid
    // entries (`UNTRUSTED`, `UNKNOWN`).
    let table = unsafe { alloc::alloc_zeroed(layout) }.cast::<Entry>();
    if table.is_null() {
        return false;
    }
    TABLE.store(table, Ordering::Release);
    true
}

fn entry(fd: c_int) -> Option<&'static Entry> {
    let table = TABLE.load(Ordering::Acquire);
    if table.is_null() {
        return None;
    }
    let i = usize::try_from(fd).ok()?;
    if i >= LEN.load(Ordering::Relaxed) {
        return None;
    }
    // SAFETY: `table` points at `LEN` entries, allocated by `allocate` before `LEN` and the
    // descriptor table were published, never freed; `i` is in range.
    Some(unsafe { &*table.add(i) })
}

/// The fork handlers (async-signal-safe: one atomic add each).
pub(super) extern "C" fn on_fork_prepare() {
    FORK_EPOCH.fetch_add(1, Ordering::SeqCst);
}

pub(super) extern "C" fn on_fork_parent() {
    FORK_EPOCH.fetch_add(1, Ordering::SeqCst);
}

/// The epoch to record for a descriptor about to be made: read before the call that makes it.
#[inline]
pub(super) fn epoch() -> u64 {
    FORK_EPOCH.load(Ordering::SeqCst)
}

/// `fd` was closed, or is new and made by a call that says nothing of its sharing: ask the
/// kernel from now on.
pub(super) fn forget(fd: c_int) {
    if let Some(e) = entry(fd)
        && e.trust.load(Ordering::Relaxed) != UNTRUSTED
    {
        e.trust.store(UNTRUSTED, Ordering::SeqCst);
    }
}

/// `fd` may now be shared with another descriptor or process (duplicated, inheritable, sent):
/// a socket's timeouts are asked from the kernel from now on; a pipe stays without any.
pub(super) fn share(fd: c_int) {
    if let Some(e) = entry(fd) {
        let t = e.trust.load(Ordering::Relaxed);
        if t != UNTRUSTED && t != NOT_SOCKET {
            e.trust.store(UNTRUSTED, Ordering::SeqCst);
        }
    }
}

/// `new` is a duplicate of `old`: both are shared (a pipe's duplicate is a pipe).
pub(super) fn duplicated(old: c_int, new: c_int) {
    let pipe = entry(old).is_some_and(|e| e.trust.load(Ordering::Relaxed) == NOT_SOCKET);
    share(old);
    if pipe {
        not_socket(new);
    } else {
        forget(new);
    }
}

/// `fd` is a pipe or FIFO (or another descriptor that is no socket).
pub(super) fn not_socket(fd: c_int) {
    if let Some(e) = entry(fd) {
        e.trust.store(NOT_SOCKET, Ordering::SeqCst);
    }
}

/// `fd` is a socket just made, at `epoch`, by an interposed call: private if it is
/// close-on-exec (`cloexec`). Its timeouts are read from the kernel at its first wait (an
/// accepted socket inherits its listener's; one set before by a call the hook does not see
/// is found there too).
pub(super) fn new_socket(fd: c_int, epoch: u64, cloexec: bool) {
    let Some(e) = entry(fd) else { return };
    if !cloexec || epoch & 1 != 0 {
        e.trust.store(UNTRUSTED, Ordering::SeqCst);
        return;
    }
    e.rcv.store(UNKNOWN, Ordering::Relaxed);
    e.snd.store(UNKNOWN, Ordering::Relaxed);
    e.trust.store(private(epoch), Ordering::SeqCst);
}

/// Whether an entry's `trust` word says its values may be used now.
#[inline]
fn is_private(trust: u64) -> bool {
    let now = FORK_EPOCH.load(Ordering::SeqCst);
    now & 1 == 0 && trust == private(now)
}

impl Entry {
    fn word(&self, dir: Dir) -> &AtomicU64 {
        match dir {
            Dir::Read => &self.rcv,
            Dir::Write => &self.snd,
        }
    }
}

fn encode(timeout: Option<Duration>) -> u64 {
    match timeout {
        None => NONE,
        // A timeout too long to fit (centuries) is not cached.
        Some(d) => u64::try_from(d.as_nanos())
            .ok()
            .and_then(|n| n.checked_add(NONE + 1))
            .unwrap_or(UNKNOWN),
    }
}

fn decode(v: u64) -> Option<Duration> {
    (v > NONE).then(|| Duration::from_nanos(v - NONE - 1))
}

/// The option that holds `dir`'s timeout.
fn option(dir: Dir) -> c_int {
    match dir {
        Dir::Read => libc::SO_RCVTIMEO,
        Dir::Write => libc::SO_SNDTIMEO,
    }
}

/// The timeout of `fd` in `dir` as the kernel has it (`None`: none), or `Err` if it cannot be
/// read (not a socket). `errno` is left as it was.
fn from_kernel(fd: c_int, dir: Dir) -> Result<Option<Duration>, ()> {
    let mut tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    let mut len = std::mem::size_of::<libc::timeval>() as socklen_t;
    let saved = sys::errno();
    // SAFETY: `tv` and `len` are valid to write, `len` is `tv`'s size.
    let r = unsafe {
        sys::call6(
            libc::SYS_getsockopt,
            [
                fd as c_long,
                libc::SOL_SOCKET as c_long,
                option(dir) as c_long,
                (&raw mut tv) as c_long,
                (&raw mut len) as c_long,
                0,
            ],
        )
    };
    sys::set_errno(saved);
    if r != 0 {
        return Err(());
    }
    if tv.tv_sec <= 0 && tv.tv_usec <= 0 {
        return Ok(None);
    }
    Ok(Some(
        Duration::from_secs(tv.tv_sec as u64) + Duration::from_micros(tv.tv_usec as u64),
    ))
}

/// The timeout `SO_RCVTIMEO`/`SO_SNDTIMEO` sets for a call on `fd` in `dir` (none for a
/// descriptor that is not a socket, or without a timeout): from the table where it may answer,
/// else from the kernel.
pub(super) fn timeout(fd: c_int, dir: Dir) -> Option<Duration> {
    let Some(e) = entry(fd) else {
        return from_kernel(fd, dir).ok().flatten();
    };
    let trust = e.trust.load(Ordering::SeqCst);
    if trust == NOT_SOCKET {
        return None;
    }
    if !is_private(trust) {
        return from_kernel(fd, dir).ok().flatten();
    }
    match e.word(dir).load(Ordering::Acquire) {
        UNKNOWN => fill(fd, e, trust, dir),
        v => decode(v),
    }
}

/// Reads a private descriptor's timeout from the kernel and records it, under the descriptor's
/// lock (which `setsockopt` holds around its change and refresh: a value read before a change
/// is never stored after it).
fn fill(fd: c_int, e: &Entry, trust: u64, dir: Dir) -> Option<Duration> {
    let Some(slot) = slot(fd) else {
        return from_kernel(fd, dir).ok().flatten();
    };
    let v = slot.lock();
    let read = from_kernel(fd, dir);
    if let Ok(t) = read
        && e.trust.load(Ordering::SeqCst) == trust
    {
        let word = e.word(dir);
        if word.load(Ordering::Relaxed) == UNKNOWN {
            word.store(encode(t), Ordering::Release);
        }
    }
    slot.unlock(v);
    read.ok().flatten()
}

/// The deadline of a call on `fd` in `dir` that starts now.
pub(super) fn deadline(fd: c_int, dir: Dir) -> Option<Instant> {
    timeout(fd, dir).and_then(|d| Instant::now().checked_add(d))
}

/// `SO_RCVTIMEO_NEW`/`SO_SNDTIMEO_NEW` (`<asm-generic/socket.h>`): the same options with a
/// 64-bit `timeval` (the same layout as `timeval` on these targets).
const SO_RCVTIMEO_NEW: c_int = 66;
const SO_SNDTIMEO_NEW: c_int = 67;

/// # Safety
///
/// As `setsockopt(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    value: *const c_void,
    len: socklen_t,
) -> c_int {
    let real = || {
        // SAFETY: the caller's contract.
        unsafe {
            sys::call6(
                libc::SYS_setsockopt,
                [
                    fd as c_long,
                    level as c_long,
                    name as c_long,
                    value as c_long,
                    len as c_long,
                    0,
                ],
            ) as c_int
        }
    };
    let dir = match (level, name) {
        (libc::SOL_SOCKET, libc::SO_RCVTIMEO | SO_RCVTIMEO_NEW) => Dir::Read,
        (libc::SOL_SOCKET, libc::SO_SNDTIMEO | SO_SNDTIMEO_NEW) => Dir::Write,
        _ => return real(),
    };
    let (Some(e), Some(slot)) = (entry(fd), slot(fd)) else {
        return real();
    };
    let v = slot.lock();
    let r = real();
    let err = sys::errno();
    let trust = e.trust.load(Ordering::SeqCst);
    if r == 0 && is_private(trust) {
        // The kernel's value, as a wait on a shared descriptor would read it (rounded to its
        // clock ticks; a negative time reads as none).
        let t = from_kernel(fd, dir).map_or(UNKNOWN, encode);
        e.word(dir).store(t, Ordering::Release);
    }
    slot.unlock(v);
    if r < 0 {
        sys::set_errno(err);
    }
    r
}

/// The descriptors a `sendmsg` passes (`SCM_RIGHTS`), which another process may then use: each
/// is shared from now on (before the call, so that no wait trusts it after the receiver may).
///
/// # Safety
///
/// `msg` must be as `sendmsg(2)` takes it (its control buffer valid for its length).
pub(super) unsafe fn passing_descriptors(msg: *const libc::msghdr) {
    // SAFETY: the caller's contract.
    let Some(m) = (unsafe { msg.as_ref() }) else {
        return;
    };
    if m.msg_control.is_null() || m.msg_controllen == 0 {
        return;
    }
    // SAFETY: the caller's contract: the control buffer is valid for `msg_controllen` bytes;
    // the CMSG macros stay within it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let bytes =
                    ((*c).cmsg_len as usize).saturating_sub(data.offset_from(c.cast()) as usize);
                for i in 0..bytes / std::mem::size_of::<c_int>() {
                    let fd = data.cast::<c_int>().add(i).read_unaligned();
                    share(fd);
                }
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
}
