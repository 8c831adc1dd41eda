//! Run unmodified blocking code in Spindle coroutines: opt-in interposition of the blocking
//! libc calls (Linux with glibc).
//!
//! Code written against `spindle_io`'s types suspends only the calling coroutine. Code that
//! calls the C library directly — `std::net`, `std::thread::sleep`, any third-party crate built
//! on them — blocks the worker thread, and with it every coroutine pinned to that worker. With
//! this crate's `interpose` feature and one call of [`enable`], those calls suspend only the
//! coroutine that made them:
//!
//! ```no_run
//! use std::io::Read;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! spindle_hook::enable()?; // once, early in `main`
//! let rt = spindle_rt::Runtime::new()?;
//! rt.block_on(|| {
//!     // Both suspend only this coroutine; the worker runs the others meanwhile.
//!     std::thread::sleep(std::time::Duration::from_millis(10));
//!     let mut s = std::net::TcpStream::connect("127.0.0.1:8080")?;
//!     let mut buf = [0; 64];
//!     s.read(&mut buf)
//! })?;
//! # Ok(())
//! # }
//! ```
//!
//! # How it works
//!
//! With the `interpose` feature, this crate defines C functions named as the libc calls
//! (`read`, `write`, `recv`, `nanosleep`, ...). An executable that links the crate resolves
//! those names to these definitions before the C library's (symbol interposition at static
//! link time): std, the `libc` crate and every Rust or C object linked into the executable call
//! them. Each one:
//!
//! * **passes straight through** — one relaxed atomic load, then the system call instruction
//!   itself (never the C library's symbol, which would be this one) — before
//!   [`enable`], and afterwards wherever it cannot suspend a coroutine: on a plain thread, on a
//!   runtime's worker outside its coroutines (the runtime's own drivers, the blocking pool), in
//!   a forked child, on a descriptor the hook does not manage;
//! * **suspends the calling coroutine** inside a runtime coroutine (`spindle_park::in_task`):
//!   sleeps park until the deadline; a call on a socket or pipe that would block waits for the
//!   descriptor's readiness on the worker's IO driver (an epoll registration, an io_uring poll
//!   operation, or the blocking pool in a runtime without a driver), then runs again; a call
//!   that cannot be polled (a regular file, `open`, `getaddrinfo`) runs on the runtime's
//!   blocking pool while the coroutine waits.
//!
//! The first time a coroutine makes a call on a descriptor, the hook looks at it (`fstat`,
//! `fcntl(F_GETFL)`): a socket or FIFO in blocking mode is *managed* from then on — put in
//! non-blocking mode underneath, with the application's wish (blocking) kept in a table of one
//! word per descriptor; everything else is left alone and passes through for good (regular
//! files, terminals, descriptors 0–2, a socket already in non-blocking mode — which includes
//! every `spindle_io` source, so the runtime's own IO never comes back through the hook). A
//! managed descriptor keeps behaving as a blocking one for everybody: a call that finds it not
//! ready waits in the coroutine, or, on a plain thread, in `poll(2)`, and `fcntl(F_GETFL)`
//! does not show the `O_NONBLOCK` the hook added. Regular files and block devices (above
//! descriptor 2) are recorded as *files*: a coroutine's calls on them go to the blocking pool.
//! The table follows the descriptor's life through the interposed `close`, `dup`, `dup2`,
//! `dup3`, `fcntl(F_DUPFD*)`, `socket`, `socketpair`, `pipe`, `pipe2`, `accept`, `accept4`,
//! `open` and `openat`.
//!
//! # What is covered
//!
//! * Sleeps: `sleep`, `usleep`, `nanosleep`, `clock_nanosleep` (relative, and `TIMER_ABSTIME`
//!   on `CLOCK_MONOTONIC`, `CLOCK_BOOTTIME` and `CLOCK_REALTIME`; an absolute real-time
//!   deadline is turned into a duration when the call starts, so a clock change during the
//!   sleep does not move it). Invalid arguments fail as the real call fails.
//! * Sockets and pipes: `read`, `readv`, `recv`, `recvfrom`, `recvmsg`, `write`, `writev`,
//!   `send`, `sendto`, `sendmsg`, `accept`, `accept4`, `connect`, `poll`. Return values and
//!   `errno` are the blocking call's: a write of a contiguous buffer on a stream (`write`,
//!   `send`, `sendto`) completes or fails as a blocking one does (a partial count only on a
//!   timeout or an error after some bytes), `recv`/`recvfrom` with `MSG_WAITALL` fill the
//!   buffer, `connect` waits and reports `SO_ERROR`. `SO_RCVTIMEO`/`SO_SNDTIMEO` end a wait
//!   with `EAGAIN` as Linux does (`EINPROGRESS` for `connect`); see *Socket timeouts* below
//!   for where the hook reads them. A call that
//!   asks not to wait (`MSG_DONTWAIT`), and every call on a descriptor the application made
//!   non-blocking (`fcntl(F_SETFL, O_NONBLOCK)`, `ioctl(FIONBIO)`, `SOCK_NONBLOCK`), passes
//!   through and returns `EAGAIN`.
//! * Socket timeouts: the interposed `setsockopt` sets `SO_RCVTIMEO`/`SO_SNDTIMEO` (and their
//!   `_NEW` forms) in the kernel as always, and keeps the kernel's value in a second table,
//!   three words per descriptor, so that a wait need not ask the kernel (`getsockopt`) each
//!   time. A timeout belongs to the socket, not the descriptor, so the table answers only for
//!   a *private* descriptor: made after [`enable`] by the interposed `socket`, `socketpair`,
//!   `accept` or `accept4` with close-on-exec, and since then neither duplicated (`dup*`,
//!   `fcntl(F_DUPFD*)`), nor made inheritable (`fcntl(F_SETFD)` without `FD_CLOEXEC`,
//!   `ioctl(FIONCLEX)`), nor passed in an `SCM_RIGHTS` message, nor open across a `fork`. Its
//!   first wait reads the timeouts from the kernel (an accepted socket inherits its
//!   listener's; one set before through a call the hook does not see is found there), and
//!   the interposed `setsockopt` on it refreshes them. Every other socket's waits read them
//!   from the kernel, each time. Descriptors that are no sockets (pipes, FIFOs) have none.
//! * `poll`, `ppoll`, `select` and `pselect` in a coroutine: one descriptor waiting in one
//!   direction waits on the driver; other sets are polled again every millisecond while the
//!   coroutine sleeps in between; an empty `poll` set with a timeout is a sleep. Each look is
//!   the system call with a zero timeout, so results, `errno` (`EBADF` for a closed descriptor
//!   in a `select` set, `EINVAL` for a bad timeout or a negative `nfds`) and the rewritten
//!   `revents` and `fd_set`s (the ready descriptors; all clear on a timeout; untouched on an
//!   error) are the kernel's. `select` writes the time left into its timeout, as Linux does;
//!   `ppoll` and `pselect` leave theirs alone, as glibc does. **A signal mask** (`ppoll`'s and
//!   `pselect`'s last argument) belongs to the thread and is swapped atomically with the wait
//!   by the kernel; a coroutine cannot have it alone, so a call with a mask passes through and
//!   blocks the worker thread, with exactly the kernel's semantics.
//! * Files, on the blocking pool: `read`, `readv`, `write`, `writev`, `pread`, `pwrite`,
//!   `fsync` and `fdatasync` on a regular file or block device; `open` and `openat` of
//!   anything (a FIFO's open waits for its other end, a network file system's for the
//!   server); `getaddrinfo` (std's `ToSocketAddrs`, every resolver on the C library), which the
//!   hook reaches as the C library's own through `dlsym(RTLD_NEXT)`. The call returns the
//!   pool thread's result and `errno`. The coroutine waits until the call is done, also when
//!   cancelled meanwhile (the cancellation is carried out after it: see below). On
//!   a copying stack the buffers go through the heap, at most 1 MiB per call: a larger read
//!   or write returns a shorter count, as a file call may (`read_exact`, `write_all` and C's
//!   stdio carry on). The pool's own threads are not coroutines: their calls pass through, so
//!   an offloaded call never comes back to the pool.
//! * Cancellation: a hooked call never unwinds (it returns through a C ABI). A cancelled
//!   coroutine's sleep ends at once as if its time had passed, a socket call (and a `poll` or
//!   `select`) fails with `ECANCELED`, and an offloaded call returns when the pool thread has
//!   finished it; the cancellation itself is carried out at the next cancellation point of
//!   the coroutine outside the hook.
//!
//! # What is not covered
//!
//! * **Other platforms.** macOS, FreeBSD, Windows, musl, 32-bit and other architectures (whose
//!   system call tables and variadic calling conventions differ): no interposition. The crate compiles
//!   there, [`is_supported`] is `false` and [`enable`] returns an error that says so. A
//!   statically linked musl executable could not be served the same way in any case: its C
//!   library calls itself internally, and nothing else goes through the symbols.
//! * **Calls that do not go through the executable's symbols**: calls a shared library makes
//!   into the C library (its references bind through its own PLT to whatever the dynamic
//!   linker finds first, which is the executable's symbol only if it is exported — Rust
//!   executables do not export them), the C library's internal calls (`fread`, `getaddrinfo`,
//!   ...), raw `syscall(2)`, io_uring, and `vDSO` calls.
//! * **What still blocks the worker.** The standard streams (descriptors 0–2) even when they
//!   are files, directories and terminals; `preadv`/`pwritev`, `sendfile`, `copy_file_range`,
//!   `stat` and the other path calls but `open`; `waitpid` (std's `Child::wait`); futexes
//!   (std's `Mutex`, `Condvar`, channels: use `spindle_sync`), `epoll_wait`, and CPU loops.
//!   Anonymous-inode descriptors (`eventfd`, `timerfd`, `signalfd`) are left alone. On io_uring
//!   the offloaded file calls go to the blocking pool too, not to the ring.
//! * **Shared file descriptions.** `O_NONBLOCK` belongs to the open file description, not the
//!   descriptor: a managed socket passed to another process (inherited without
//!   `FD_CLOEXEC`, sent over a Unix socket) is non-blocking there too. std opens everything
//!   close-on-exec; descriptors 0–2 are never managed.
//! * **Descriptors closed behind the hook's back** (the raw system call, io_uring's close,
//!   `close_range`) keep their entry until the number is reused by one of the interposed
//!   calls that make descriptors; a number reused by another call (`eventfd`, `epoll_create`,
//!   ...) may briefly be taken for its predecessor. A coroutine parked on a descriptor that is
//!   closed under it stays parked until its timeout, as a thread blocked in `read` on Linux
//!   does.
//! * **Signal handlers.** The pass-through path takes no lock and allocates nothing, so a
//!   handler may call `write` and friends. A handler that interrupts a coroutine and calls a
//!   sleep, or a blocking call on a managed descriptor, would park the coroutine inside the
//!   handler: keep handlers to non-blocking calls, as POSIX advises. The same holds for a
//!   file: a handler on the coroutine's stack that writes to a regular file (above descriptor
//!   2) would send the write to the blocking pool; one on the alternate signal stack (fault
//!   handlers) writes directly. `close` of a managed descriptor that a coroutine has waited on
//!   releases that wait's registration (a lock and possibly a free): not for a handler.
//! * **Socket timeouts changed behind the hook's back.** On a private descriptor (see *Socket
//!   timeouts*) that has waited once, a timeout changed without the interposed `setsockopt`
//!   — the raw system call, a shared library's own call into the C library, a descriptor
//!   taken with `pidfd_getfd`, a process spawned with the socket as one of its standard
//!   streams (`posix_spawn` file actions, std's `Stdio::from`) — is not seen: waits keep the
//!   timeout the hook knows.
//! * **Sanitizers and other interposers.** ASan, TSan and `LD_PRELOAD` libraries that intercept
//!   the same calls are bypassed (the pass-through is the system call).
//! * **Vectored writes.** `writev` and `sendmsg` on a stream may return a partial count
//!   where the blocking call would have waited to send everything (std's
//!   `write_all_vectored` carries on; C code that counts on whole vectored writes to a
//!   blocking socket would not).
//! * **`EINTR`.** A signal handled while a coroutine waits does not end the coroutine's call,
//!   `poll` and `select` included: the coroutine was not in the kernel, and the signal
//!   interrupts whatever the worker thread was doing instead (to the coroutine it is as if the
//!   signal had gone to another thread, which a process-directed signal may). Outside
//!   coroutines the system call's `EINTR` is returned as is. Hooked calls are not
//!   `pthread_cancel` cancellation points.
//!
//! # Soundness
//!
//! The interposed functions are `unsafe extern "C"` and trust their callers as the C library
//! does (pointers valid for the lengths given). They never unwind (a panic would abort at the
//! C boundary, so the code on the path does not panic), and keep the caller's `errno` contract:
//! it is set last, right before `-1` is returned. A socket or pipe call never lends the
//! caller's buffers across a suspension: each attempt is a plain non-blocking system call
//! while the coroutine runs. An offloaded call does lend them, to a pool thread, and is sound
//! because the coroutine cannot leave the call before that thread is done: the hooked
//! function returns only after the job has stored its result; the park in between never
//! unwinds (cancellation is deferred); and a runtime shut down meanwhile abandons such a
//! coroutine with its stack, leaked, never freed. On a copying stack, whose bytes move while
//! the coroutine is parked, nothing on the stack is lent: buffers are bounced through the
//! heap and paths and `getaddrinfo`'s arguments copied. Global state is two pointers, to the
//! descriptor table and the timeout table, allocated by [`enable`] and never freed, two flags
//! and a fork counter; every entry of the descriptor table is one atomic word (state bits, a
//! lock bit, and the descriptor's shared waiting machinery as a reference-counted pointer),
//! every entry of the timeout table three (whether it may answer, and the two timeouts),
//! changed by `setsockopt` under the descriptor's lock bit.
#![deny(missing_docs)]

use std::fmt;

#[cfg(all(
    feature = "interpose",
    target_os = "linux",
    target_env = "gnu",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod imp;

/// Whether interposition works in this build: the `interpose` feature is on and the target is
/// Linux with glibc on x86_64 or aarch64. When `false`, this crate defines no symbols and [`enable`] fails.
pub const fn is_supported() -> bool {
    cfg!(all(
        feature = "interpose",
        target_os = "linux",
        target_env = "gnu",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))
}

/// Whether [`enable`] has run successfully in this process.
pub fn is_enabled() -> bool {
    #[cfg(all(
        feature = "interpose",
        target_os = "linux",
        target_env = "gnu",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    {
        imp::is_enabled()
    }
    #[cfg(not(all(
        feature = "interpose",
        target_os = "linux",
        target_env = "gnu",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )))]
    {
        false
    }
}

/// Turns interposition on for the whole process: from now on, the hooked calls made inside a
/// runtime coroutine suspend only that coroutine (see the [crate docs](crate)). Before this
/// call every hooked call passes straight through. Idempotent; there is no way back (sockets
/// the hook manages must stay managed). Call it early in `main`, before the runtime starts.
///
/// It allocates the descriptor table and the timeout table: four words per descriptor number
/// below the process's hard `RLIMIT_NOFILE` (at most 2^20 of them; pages are touched only as
/// descriptors are used).
/// Descriptors above it always pass through.
///
/// # Errors
///
/// [`EnableError::NotCompiled`] without the `interpose` feature, [`EnableError::Unsupported`]
/// on a platform other than Linux with glibc, [`EnableError::OutOfMemory`] if the table cannot
/// be allocated. Interposition stays off in each case; blocking calls keep blocking the worker.
pub fn enable() -> Result<(), EnableError> {
    #[cfg(all(
        feature = "interpose",
        target_os = "linux",
        target_env = "gnu",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    {
        imp::enable()
    }
    #[cfg(all(
        not(feature = "interpose"),
        target_os = "linux",
        target_env = "gnu",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    {
        Err(EnableError::NotCompiled)
    }
    #[cfg(not(all(
        target_os = "linux",
        target_env = "gnu",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )))]
    {
        Err(EnableError::Unsupported)
    }
}

/// Why [`enable`] could not turn interposition on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EnableError {
    /// The crate was built without its `interpose` feature, so no call is interposed.
    NotCompiled,
    /// The platform is not Linux with glibc on x86_64 or aarch64.
    Unsupported,
    /// The descriptor table could not be allocated.
    OutOfMemory,
}

impl fmt::Display for EnableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EnableError::NotCompiled => f.write_str(
                "spindle-hook was built without its `interpose` feature: no libc call is \
                 interposed (enable the feature on the spindle-hook dependency)",
            ),
            EnableError::Unsupported => f.write_str(
                "spindle-hook interposes libc calls only on Linux with glibc: blocking calls \
                 keep blocking the worker thread here (use spindle_io's types instead)",
            ),
            EnableError::OutOfMemory => f.write_str(
                "spindle-hook could not allocate its descriptor tables (four words per possible \
                 descriptor): lower RLIMIT_NOFILE's hard limit or free memory",
            ),
        }
    }
}

impl std::error::Error for EnableError {}

#[cfg(all(test, not(feature = "interpose")))]
mod tests {
    /// Without the feature nothing is interposed, and `enable` says why.
    #[test]
    fn without_the_feature_enable_says_it_is_not_compiled_in() {
        assert!(!super::is_supported());
        let e = super::enable().unwrap_err();
        assert!(matches!(
            e,
            super::EnableError::NotCompiled | super::EnableError::Unsupported
        ));
        assert!(e.to_string().contains("spindle-hook"));
        assert!(!super::is_enabled());
    }
}

/// The examples of the crate's README.md, run as doctests (compiled, not run: they need a
/// server).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
