//! The interposition itself (Linux, glibc, x86_64 and aarch64): the descriptor table, the
//! system calls that pass through, and the waiting that replaces blocking.

use std::alloc::{self, Layout};
use std::io;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::time::Instant;

use libc::{c_int, c_long};
use spindle_io::hook_support::{FdWait, Snapshot};

use crate::EnableError;

mod files;
mod io_calls;
mod sleep;
mod timeouts;

/// The descriptor table: one word per descriptor number (null until [`enable`]; never freed).
static TABLE: AtomicPtr<AtomicUsize> = AtomicPtr::new(std::ptr::null_mut());
/// Its length; written before `TABLE` is published.
static LEN: AtomicUsize = AtomicUsize::new(0);
/// Set in a child process forked after [`enable`]: there no runtime runs (whatever coroutine
/// the forking thread was in has no worker loop behind it), so nothing suspends, and the
/// parent's driver registrations (shared epoll instances) are left alone.
static FORKED: AtomicBool = AtomicBool::new(false);

/// The most descriptors the table covers (8 MiB of address space, and 24 MiB for the timeout
/// table; pages are touched only as descriptors are used).
const MAX_FDS: usize = 1 << 20;

// A table word: the state in the low three bits, a lock bit, and the descriptor's `Waiter`
// (`Arc::into_raw`, aligned to 16; 0: none) in the rest.
/// Not looked at yet (or closed since).
const UNKNOWN: usize = 0;
/// Left alone for good: not a socket, FIFO or file, or a standard stream that is not a file.
const PASS: usize = 1;
/// A socket or FIFO the application keeps in blocking mode, made non-blocking underneath.
const MANAGED: usize = 2;
/// A socket or FIFO the application (or `spindle_io`) keeps in non-blocking mode.
const USER_NONBLOCKING: usize = 3;
/// A regular file or block device: never "not ready", so a call on it blocks in the kernel
/// for as long as the disk takes. A coroutine's calls run on the blocking pool.
const FILE: usize = 4;
const STATE: usize = 7;
const LOCK: usize = 8;
const PTR: usize = !15;

/// A descriptor's waiting machinery as the table keeps it: aligned so that the pointer leaves
/// the word's low four bits to the state and the lock.
#[repr(align(16))]
#[derive(Debug)]
struct Waiter(FdWait);

/// Serialises [`enable`]s.
static ENABLE: Mutex<()> = Mutex::new(());

pub(crate) fn is_enabled() -> bool {
    !TABLE.load(Ordering::Acquire).is_null()
}

pub(crate) fn enable() -> Result<(), EnableError> {
    let _one = ENABLE.lock().unwrap_or_else(|e| e.into_inner());
    if is_enabled() {
        return Ok(());
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid rlimit to write.
    let len = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        usize::try_from(limit.rlim_max.max(limit.rlim_cur))
            .unwrap_or(MAX_FDS)
            .clamp(1024, MAX_FDS)
    } else {
        MAX_FDS
    };
    let layout = Layout::array::<AtomicUsize>(len).map_err(|_| EnableError::OutOfMemory)?;
    // SAFETY: the layout has a non-zero size; all-zero bytes are a valid `AtomicUsize` (0,
    // `UNKNOWN` with no waiter).
    let table = unsafe { alloc::alloc_zeroed(layout) }.cast::<AtomicUsize>();
    if table.is_null() {
        return Err(EnableError::OutOfMemory);
    }
    if !timeouts::allocate(len) {
        // SAFETY: allocated just above with this layout, never published.
        unsafe { alloc::dealloc(table.cast(), layout) };
        return Err(EnableError::OutOfMemory);
    }
    LEN.store(len, Ordering::Relaxed);
    TABLE.store(table, Ordering::Release);
    // SAFETY: the handlers are async-signal-safe functions (one atomic operation each), as the
    // fork handlers of a multi-threaded process must be.
    let r = unsafe {
        libc::pthread_atfork(
            Some(timeouts::on_fork_prepare),
            Some(timeouts::on_fork_parent),
            Some(on_fork_child),
        )
    };
    if r != 0 {
        // Forked children would believe a runtime runs in them; without the handler the hook
        // must not suspend anything there. Only ENOMEM is possible.
        TABLE.store(std::ptr::null_mut(), Ordering::Release);
        return Err(EnableError::OutOfMemory);
    }
    Ok(())
}

extern "C" fn on_fork_child() {
    FORKED.store(true, Ordering::Relaxed);
}

/// Whether interposition is on (one load: the pass-through test of every hooked call).
#[inline(always)]
fn enabled() -> bool {
    !TABLE.load(Ordering::Relaxed).is_null()
}

/// Whether the caller is a runtime coroutine that may be suspended.
#[inline]
fn in_coroutine() -> bool {
    !FORKED.load(Ordering::Relaxed) && spindle_park::in_task()
}

/// The table entry of `fd`, if interposition is on and `fd` is in the table.
#[inline]
fn slot(fd: c_int) -> Option<Slot> {
    let table = TABLE.load(Ordering::Acquire);
    if table.is_null() {
        return None;
    }
    let i = usize::try_from(fd).ok()?;
    if i >= LEN.load(Ordering::Relaxed) {
        return None;
    }
    // SAFETY: `table` points at `LEN` words, allocated by `enable` (whose stores this Acquire
    // load sees) and never freed; `i` is in range.
    Some(Slot(unsafe { &*table.add(i) }))
}

/// One descriptor's table word.
#[derive(Clone, Copy)]
struct Slot(&'static AtomicUsize);

impl Slot {
    #[inline]
    fn state(self) -> usize {
        self.0.load(Ordering::Acquire) & STATE
    }

    /// Takes the word's lock (held for a few instructions, never across a suspension) and
    /// returns the word without it.
    fn lock(self) -> usize {
        let mut spins = 0u32;
        loop {
            let v = self.0.load(Ordering::Relaxed);
            if v & LOCK == 0
                && self
                    .0
                    .compare_exchange_weak(v, v | LOCK, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return v;
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    fn unlock(self, v: usize) {
        self.0.store(v & !LOCK, Ordering::Release);
    }

    /// Sets the state, keeping the waiter.
    fn set_state(self, state: usize) {
        let v = self.lock();
        self.unlock((v & PTR) | state);
    }

    /// Forgets everything about the descriptor (it was closed or is new), leaving `state`.
    /// Without a waiter this takes no lock and frees nothing.
    fn reset(self, state: usize) {
        let v = self.0.load(Ordering::Relaxed);
        if v == state {
            return;
        }
        let v = self.lock();
        self.unlock(state);
        drop_waiter(v & PTR);
    }

    /// Looks at a descriptor not seen yet and records what it is (called in a coroutine).
    fn probe(self, fd: c_int) -> usize {
        let v = self.lock();
        if v & STATE != UNKNOWN {
            self.unlock(v);
            return v & STATE;
        }
        let state = classify(fd);
        self.unlock((v & PTR) | state);
        state
    }

    /// The descriptor's waiting machinery if it has been made (by an earlier wait).
    fn existing_waiter(self) -> Option<Arc<Waiter>> {
        if self.0.load(Ordering::Relaxed) & PTR == 0 {
            return None;
        }
        let v = self.lock();
        let ptr = v & PTR;
        let waiter = (ptr != 0).then(|| {
            let waiter = ptr as *const Waiter;
            // SAFETY: the word owns one count of `waiter` (from `Arc::into_raw`), which cannot
            // go away while we hold the lock; we take one more for the caller.
            unsafe {
                Arc::increment_strong_count(waiter);
                Arc::from_raw(waiter)
            }
        });
        self.unlock(v);
        waiter
    }

    /// The descriptor's waiting machinery (made on first use), or `None` if it cannot be made.
    fn waiter(self, fd: c_int) -> Option<Arc<Waiter>> {
        let v = self.lock();
        let mut ptr = v & PTR;
        if ptr == 0 {
            // SAFETY: only managed descriptors get one (never a `spindle_io` source: those are
            // non-blocking from birth), and one per descriptor number: it lives in this word.
            let made = Arc::into_raw(Arc::new(Waiter(unsafe { FdWait::new(fd) }))) as usize;
            if made & !PTR != 0 {
                // Not aligned as the word needs (cannot happen: `Waiter` is aligned to 16).
                self.unlock(v);
                // SAFETY: `made` came from `Arc::into_raw` just above and is not shared.
                drop(unsafe { Arc::from_raw(made as *const Waiter) });
                return None;
            }
            ptr = made;
        }
        let waiter = ptr as *const Waiter;
        // SAFETY: the word owns one count of `waiter` (from `Arc::into_raw`), which cannot go
        // away while we hold the lock; we take one more for the caller.
        let waiter = unsafe {
            Arc::increment_strong_count(waiter);
            Arc::from_raw(waiter)
        };
        self.unlock((v & !PTR) | ptr);
        Some(waiter)
    }
}

/// Drops the table's count of a waiter (`ptr` from a table word; 0: none).
fn drop_waiter(ptr: usize) {
    if ptr == 0 {
        return;
    }
    // SAFETY: a non-zero pointer in a table word is a count owned by that word, which the
    // caller removed from it under the lock.
    let waiter = unsafe { Arc::from_raw(ptr as *const Waiter) };
    if FORKED.load(Ordering::Relaxed) {
        // Its registrations are the parent's (an epoll instance is shared across fork):
        // dropping the last count would remove them there.
        std::mem::forget(waiter);
    } else {
        drop(waiter);
    }
}

/// What a descriptor first seen in a coroutine is: `MANAGED` (after making it non-blocking),
/// `USER_NONBLOCKING`, `FILE`, `PASS`, or `UNKNOWN` for one that is not open (nothing
/// recorded).
fn classify(fd: c_int) -> usize {
    // SAFETY: all-zero is a valid `stat`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid stat to write; fstat does not go through this crate.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return UNKNOWN;
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        // No socket options, hence no timeouts, for as long as the number is this descriptor.
        timeouts::not_socket(fd);
    }
    if fd <= 2 {
        // Standard streams are often shared with other processes (a terminal, a shell's
        // pipe): their mode is not ours to change. Nor are they sent to the blocking pool
        // when they are files: panic and abort messages, and fault handlers, write to them.
        return PASS;
    }
    let kind = st.st_mode & libc::S_IFMT;
    if kind == libc::S_IFREG || kind == libc::S_IFBLK {
        return FILE;
    }
    if kind != libc::S_IFSOCK && kind != libc::S_IFIFO {
        return PASS;
    }
    // SAFETY: F_GETFL takes no argument.
    let flags = unsafe { sys::call3(libc::SYS_fcntl, fd as c_long, libc::F_GETFL as c_long, 0) };
    if flags < 0 {
        return UNKNOWN;
    }
    let flags = flags as c_int;
    if flags & libc::O_NONBLOCK != 0 {
        return USER_NONBLOCKING;
    }
    // SAFETY: F_SETFL takes an int.
    let set = unsafe {
        sys::call3(
            libc::SYS_fcntl,
            fd as c_long,
            libc::F_SETFL as c_long,
            (flags | libc::O_NONBLOCK) as c_long,
        )
    };
    if set < 0 { PASS } else { MANAGED }
}

/// The table entry of `fd` if the calling code should treat it as a managed descriptor: it is
/// managed, or it is new and the caller a coroutine, which makes it managed if it can.
#[inline]
fn managed(fd: c_int) -> Option<Slot> {
    let slot = slot(fd)?;
    match slot.state() {
        MANAGED => Some(slot),
        UNKNOWN if in_coroutine() => (slot.probe(fd) == MANAGED).then_some(slot),
        _ => None,
    }
}

/// What a call on a descriptor does.
#[derive(Clone, Copy)]
enum Route {
    /// A managed socket or FIFO: retried on readiness.
    Wait(Slot),
    /// A file, in a coroutine: the call runs on the blocking pool.
    Offload,
    /// Straight through.
    Pass,
}

/// How a call that may read or write a file treats `fd`: [`managed`], and a file in a
/// coroutine goes to the blocking pool.
#[inline]
fn route(fd: c_int) -> Route {
    let Some(slot) = slot(fd) else {
        return Route::Pass;
    };
    match slot.state() {
        MANAGED => Route::Wait(slot),
        FILE if in_coroutine() => Route::Offload,
        UNKNOWN if in_coroutine() => match slot.probe(fd) {
            MANAGED => Route::Wait(slot),
            FILE => Route::Offload,
            _ => Route::Pass,
        },
        _ => Route::Pass,
    }
}

/// Whether `fd` is a file that a coroutine's call should run on the blocking pool.
#[inline]
fn offloads(fd: c_int) -> bool {
    matches!(route(fd), Route::Offload)
}

/// Runs `job` (a system call: its result, `-1` with `errno` on failure) on the runtime's
/// blocking pool while the calling coroutine parks, and returns its result with `errno`
/// carried over from the pool thread. Where the pool refuses the job (shutting down) it runs
/// here, blocking the worker as it would have without the hook.
///
/// `job` may use memory the caller lent (a buffer, a path): this function returns only after
/// `job` has returned on the pool thread. The park in between never unwinds — cancellation is
/// deferred here, so a cancel request waits for the job and is carried out at the coroutine's
/// next cancellation point outside the hook — and a runtime that shuts down while the
/// coroutine waits abandons it with its stack (leaked, never freed). The caller must still
/// make sure that `job` does not touch the stack of a coroutine on a copying stack
/// ([`spindle_park::on_copying_stack`]): that stack's bytes are moved out while it is parked.
fn offload_call(job: impl FnOnce() -> isize + Send + Copy) -> isize {
    if on_signal_stack() {
        // A fault handler (a stack overflow's report, say): no allocation, no suspension.
        return job();
    }
    let job = move || {
        let r = job();
        (r, if r < 0 { sys::errno() } else { 0 })
    };
    let _deferred = spindle_park::defer_cancel();
    let (r, e) = spindle_io::offload(job).unwrap_or_else(|_| job());
    if r < 0 {
        sys::set_errno(e);
    }
    r
}

/// Whether the thread runs on its alternate signal stack: in a signal handler (fault handlers
/// run there), where a call must not allocate or suspend.
fn on_signal_stack() -> bool {
    // SAFETY: all-zero is a valid stack_t.
    let mut ss: libc::stack_t = unsafe { std::mem::zeroed() };
    // SAFETY: no new stack; `ss` is valid to write.
    let r = unsafe { libc::sigaltstack(std::ptr::null(), &mut ss) };
    r == 0 && ss.ss_flags & libc::SS_ONSTACK != 0
}

/// Which readiness a call waits for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Dir {
    Read,
    Write,
}

/// Runs `op` (a non-blocking system call returning `-1` and `errno` on failure) on a managed
/// descriptor after it failed with `EAGAIN`, waiting for readiness in between, until it
/// succeeds, fails otherwise, or `deadline` passes (`EAGAIN`).
///
/// `after`: the readiness the descriptor's waiter recorded before that failed call (see
/// [`coroutine_wait`]); `None` makes `op` run once more before the first wait.
fn retry(
    fd: c_int,
    slot: Slot,
    dir: Dir,
    deadline: Option<Instant>,
    after: Option<Snapshot>,
    op: &mut dyn FnMut() -> isize,
) -> Result<isize, c_int> {
    if in_coroutine()
        && let Some(done) = coroutine_wait(fd, slot, dir, deadline, after, op)
    {
        return done;
    }
    thread_wait(fd, dir, deadline, op)
}

/// [`retry`] in a coroutine: only the coroutine waits, on its worker's driver. `None` if the
/// driver could not take the descriptor (the caller waits with the thread instead).
///
/// With `after` (a snapshot taken before the caller's own call failed with `EAGAIN`) the
/// coroutine waits first: the call would fail again unless an event came since the snapshot,
/// and then the wait ends at once (the driver's edge-triggered readiness clears only what the
/// snapshot saw; a new registration, a poll operation and `poll(2)` look at the descriptor
/// itself). Without it, `op` runs once more first.
fn coroutine_wait(
    fd: c_int,
    slot: Slot,
    dir: Dir,
    deadline: Option<Instant>,
    after: Option<Snapshot>,
    op: &mut dyn FnMut() -> isize,
) -> Option<Result<isize, c_int>> {
    let waiter = slot.waiter(fd)?;
    // A hooked call returns through a C ABI and must not unwind: a cancellation is reported
    // as `ECANCELED` and carried out at the coroutine's next cancellation point.
    let _deferred = spindle_park::defer_cancel();
    let mut op_errno = None;
    let mut attempt = || {
        if spindle_park::cancel_requested() {
            op_errno = Some(libc::ECANCELED);
            return Err(io::Error::from_raw_os_error(libc::ECANCELED));
        }
        let n = op();
        if n >= 0 {
            return Ok(n);
        }
        let e = sys::errno();
        op_errno = Some(e);
        Err(io::Error::from_raw_os_error(e))
    };
    let write = dir == Dir::Write;
    let result = match after {
        None => waiter.0.run(write, deadline, &mut attempt),
        // A cancel request made before the wait: the call that `op` would make first.
        Some(_) if spindle_park::cancel_requested() => return Some(Err(libc::ECANCELED)),
        Some(snapshot) => waiter
            .0
            .run_after_would_block(write, deadline, snapshot, &mut attempt),
    };
    match result {
        Ok(n) => Some(Ok(n)),
        Err(e) => match e.raw_os_error() {
            Some(code) if op_errno == Some(code) => Some(Err(code)),
            // The deadline: a socket timeout expired, as the kernel reports it.
            _ if e.kind() == io::ErrorKind::TimedOut => Some(Err(libc::EAGAIN)),
            // The wait ended for a cancel request.
            _ if spindle_park::cancel_requested() => Some(Err(libc::ECANCELED)),
            // The driver failed (registration refused): let the thread wait.
            _ => None,
        },
    }
}

/// [`retry`] on a plain thread: `poll(2)` blocks it, as the blocking call would have.
fn thread_wait(
    fd: c_int,
    dir: Dir,
    deadline: Option<Instant>,
    op: &mut dyn FnMut() -> isize,
) -> Result<isize, c_int> {
    let events = match dir {
        Dir::Read => libc::POLLIN | libc::POLLPRI,
        Dir::Write => libc::POLLOUT,
    };
    loop {
        let timeout = match deadline {
            None => None,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(libc::EAGAIN);
                }
                Some(left)
            }
        };
        let mut pfd = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { sys::poll(&mut pfd, 1, timeout) } < 0 {
            return Err(sys::errno());
        }
        let n = op();
        if n >= 0 {
            return Ok(n);
        }
        match sys::errno() {
            libc::EAGAIN => {}
            e => return Err(e),
        }
    }
}

/// Sets `errno` from a failed outcome and returns the C result.
#[inline]
fn finish(outcome: Result<isize, c_int>) -> isize {
    match outcome {
        Ok(n) => n,
        Err(e) => {
            sys::set_errno(e);
            -1
        }
    }
}

/// Parks the current coroutine until `deadline` (`None`: for ever) or until it is cancelled.
fn coroutine_sleep_until(deadline: Option<Instant>) {
    let _deferred = spindle_park::defer_cancel();
    loop {
        if spindle_park::cancel_requested() {
            return;
        }
        match deadline {
            Some(d) if Instant::now() >= d => return,
            Some(d) => {
                let _ = spindle_park::park_until(d);
            }
            None => spindle_park::park(),
        }
    }
}

/// The system calls themselves: what a hooked call does when it passes through. Never the C
/// library's symbols of the same names, which are the hooks, nor its `syscall(2)` wrapper (a
/// call more on every pass-through).
mod sys {
    use libc::{c_int, c_long};
    use std::time::Duration;

    /// System call `n` with three arguments: the result, or `-1` with `errno` set.
    ///
    /// # Safety
    ///
    /// The arguments must be valid for system call `n`.
    #[inline(always)]
    pub(super) unsafe fn call3(n: c_long, a: c_long, b: c_long, c: c_long) -> isize {
        // SAFETY: the caller's contract.
        unsafe { call6(n, [a, b, c, 0, 0, 0]) }
    }

    /// System call `n` with up to six arguments: the result, or `-1` with `errno` set. The
    /// instruction itself (no call into the C library: this is every hooked call's
    /// pass-through).
    ///
    /// # Safety
    ///
    /// The arguments must be valid for system call `n`.
    #[inline(always)]
    pub(super) unsafe fn call6(n: c_long, args: [c_long; 6]) -> isize {
        let ret: c_long;
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the Linux x86_64 system call convention: number in rax, arguments in rdi,
        // rsi, rdx, r10, r8, r9, result in rax; the instruction clobbers rcx and r11 and
        // nothing else (the stack is not touched). The arguments are the caller's contract.
        unsafe {
            std::arch::asm!(
                "syscall",
                inlateout("rax") n => ret,
                in("rdi") args[0],
                in("rsi") args[1],
                in("rdx") args[2],
                in("r10") args[3],
                in("r8") args[4],
                in("r9") args[5],
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        #[cfg(target_arch = "aarch64")]
        // SAFETY: the Linux aarch64 system call convention: number in x8, arguments in x0-x5,
        // result in x0; nothing else is clobbered. The arguments are the caller's contract.
        unsafe {
            std::arch::asm!(
                "svc 0",
                in("x8") n,
                inlateout("x0") args[0] => ret,
                in("x1") args[1],
                in("x2") args[2],
                in("x3") args[3],
                in("x4") args[4],
                in("x5") args[5],
                options(nostack),
            );
        }
        // The kernel returns -errno (-4095..-1) on failure.
        if (-4095..0).contains(&ret) {
            set_errno(-ret as c_int);
            -1
        } else {
            ret as isize
        }
    }

    #[inline]
    pub(super) fn errno() -> c_int {
        // SAFETY: glibc's errno location is valid for the calling thread.
        unsafe { *libc::__errno_location() }
    }

    #[inline]
    pub(super) fn set_errno(e: c_int) {
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = e }
    }

    /// `poll(2)` with a timeout (`None`: none), through `ppoll` (aarch64 has no `poll`).
    ///
    /// # Safety
    ///
    /// `fds` must point at `n` valid `pollfd`s.
    pub(super) unsafe fn poll(
        fds: *mut libc::pollfd,
        n: libc::nfds_t,
        timeout: Option<Duration>,
    ) -> isize {
        let ts = timeout.map(|t| libc::timespec {
            tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: t.subsec_nanos() as libc::c_long,
        });
        let tsp = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: the caller's contract for `fds`; `tsp` is null or a valid timespec; no
        // signal mask.
        unsafe {
            call6(
                libc::SYS_ppoll,
                [fds as c_long, n as c_long, tsp as c_long, 0, 0, 0],
            )
        }
    }

    /// `ppoll(2)` as glibc calls it: the timeout is a copy (the kernel writes the time left
    /// into it), the signal mask null or the kernel's 8 bytes.
    ///
    /// # Safety
    ///
    /// `fds` must point at `n` valid `pollfd`s, `sigmask` be null or valid to read.
    pub(super) unsafe fn ppoll(
        fds: *mut libc::pollfd,
        n: libc::nfds_t,
        mut timeout: Option<libc::timespec>,
        sigmask: *const libc::sigset_t,
    ) -> isize {
        let tsp = timeout
            .as_mut()
            .map_or(std::ptr::null_mut(), |t| t as *mut libc::timespec);
        // SAFETY: the caller's contract; `tsp` is null or a valid local timespec.
        unsafe {
            call6(
                libc::SYS_ppoll,
                [
                    fds as c_long,
                    n as c_long,
                    tsp as c_long,
                    sigmask as c_long,
                    SIGSET_BYTES,
                    0,
                ],
            )
        }
    }

    /// The kernel's signal set size (`_NSIG / 8`), which `ppoll` and `pselect6` take.
    const SIGSET_BYTES: c_long = 8;

    /// `select(2)` as the C library's: the time left is written back into `timeout`.
    ///
    /// # Safety
    ///
    /// Each set null or valid for `nfds` bits, `timeout` null or valid to read and write.
    pub(super) unsafe fn select(
        nfds: c_int,
        sets: [*mut libc::fd_set; 3],
        timeout: *mut libc::timeval,
    ) -> isize {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller's contract.
        unsafe {
            call6(
                libc::SYS_select,
                [
                    nfds as c_long,
                    sets[0] as c_long,
                    sets[1] as c_long,
                    sets[2] as c_long,
                    timeout as c_long,
                    0,
                ],
            )
        }
        #[cfg(target_arch = "aarch64")]
        {
            // No `select` system call: `pselect6` with the timeout converted, and the time
            // left converted back, as glibc does.
            // SAFETY: the caller's contract: `timeout` is null or valid to read.
            let ts = match unsafe { timeout.as_ref() } {
                None => None,
                Some(tv) if tv.tv_sec < 0 || tv.tv_usec < 0 => {
                    set_errno(libc::EINVAL);
                    return -1;
                }
                Some(tv) => Some(libc::timespec {
                    tv_sec: tv.tv_sec.saturating_add(tv.tv_usec / 1_000_000),
                    tv_nsec: (tv.tv_usec % 1_000_000) * 1000,
                }),
            };
            let mut ts = ts;
            let tsp = ts
                .as_mut()
                .map_or(std::ptr::null_mut(), |t| t as *mut libc::timespec);
            // SAFETY: the caller's contract; `tsp` is null or a valid local.
            let r = unsafe {
                call6(
                    libc::SYS_pselect6,
                    [
                        nfds as c_long,
                        sets[0] as c_long,
                        sets[1] as c_long,
                        sets[2] as c_long,
                        tsp as c_long,
                        0,
                    ],
                )
            };
            if let Some(left) = ts {
                let e = errno();
                // SAFETY: `timeout` was given: valid to write (the caller's contract).
                unsafe {
                    *timeout = libc::timeval {
                        tv_sec: left.tv_sec,
                        tv_usec: left.tv_nsec / 1000,
                    }
                };
                set_errno(e);
            }
            r
        }
    }

    /// `pselect(2)` as glibc calls it: the timeout is a copy, the signal mask passed with its
    /// size (or none).
    ///
    /// # Safety
    ///
    /// Each set null or valid for `nfds` bits, `sigmask` null or valid to read.
    pub(super) unsafe fn pselect(
        nfds: c_int,
        sets: [*mut libc::fd_set; 3],
        mut timeout: Option<libc::timespec>,
        sigmask: *const libc::sigset_t,
    ) -> isize {
        let tsp = timeout
            .as_mut()
            .map_or(std::ptr::null_mut(), |t| t as *mut libc::timespec);
        // The kernel takes the mask and its size through one more pointer.
        let mask = [sigmask as c_long, SIGSET_BYTES];
        let maskp = if sigmask.is_null() {
            std::ptr::null()
        } else {
            mask.as_ptr()
        };
        // SAFETY: the caller's contract; `tsp` and `maskp` are null or valid locals.
        unsafe {
            call6(
                libc::SYS_pselect6,
                [
                    nfds as c_long,
                    sets[0] as c_long,
                    sets[1] as c_long,
                    sets[2] as c_long,
                    tsp as c_long,
                    maskp as c_long,
                ],
            )
        }
    }

    /// `poll(2)`'s millisecond timeout as [`poll`] takes it (negative: none).
    pub(super) fn ms(timeout: c_int) -> Option<Duration> {
        u64::try_from(timeout).ok().map(Duration::from_millis)
    }
}
