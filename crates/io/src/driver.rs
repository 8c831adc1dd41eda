//! The driver interface: what a backend (epoll, io_uring, kqueue, IOCP, polling) provides, and
//! how a runtime uses it.
//!
//! A runtime owns **one driver per worker thread**, made on that thread. When the worker has
//! nothing to run it calls [`Driver::park`] instead of parking its thread, and every so many
//! scheduling ticks it calls it with a zero timeout, so IO events are dispatched promptly while
//! it is busy. Wake-ups from other threads reach a parked worker through its driver's
//! [`Unpark`] handle (an eventfd, a ring message, `EVFILT_USER`,
//! `PostQueuedCompletionStatus`), so IO and cross-thread wake-ups share one mechanism.
//!
//! The worker installs its driver for the code it runs with [`with_driver`]; the IO types of
//! this crate find it with [`current`]. Two models, neither faking the other:
//!
//! * **Readiness** ([`Reactor`]: epoll, kqueue, polling): an IO type tries the non-blocking
//!   call; on `EWOULDBLOCK` it registers its source with the current reactor (once, for the
//!   source's life), records the current task's waker in the source's [`ScheduledIo`], and
//!   parks; the reactor's event sets the readiness and wakes it; it retries.
//! * **Completion** ([`Proactor`]: io_uring, IOCP): an IO type submits the operation with the
//!   caller's own buffer and parks until the kernel completes it. A suspended coroutine keeps
//!   its stack, so the buffer stays valid: no owned-buffer API. If the wait ends early (a
//!   deadline, a cancellation), the proactor submits a cancel and *still waits* for the
//!   kernel's completion before it returns, because until then the kernel may write into the
//!   buffer. A buffer that lies on a copying (shared) stack is bounced
//!   through the heap by the caller (see `spindle_park::on_copying_stack`).

use std::cell::Cell;
use std::fmt;
use std::io;
use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[cfg(unix)]
pub use crate::accept_queue::{ACCEPT_READ_AHEAD, AcceptQueue, CancelFn, Take};
use crate::scheduled::ScheduledIo;

/// The OS handle of an IO source: a file descriptor on Unix, a `SOCKET` on Windows.
#[cfg(unix)]
pub type RawSource = std::os::fd::RawFd;
/// The OS handle of an IO source: a file descriptor on Unix, a `SOCKET` on Windows.
#[cfg(windows)]
pub type RawSource = std::os::windows::io::RawSocket;

/// An IO driver: one per worker thread, made on it and used only there (it need not be `Send`).
pub trait Driver: 'static {
    /// The backend's name: `"epoll"`, `"io_uring"`, `"kqueue"`, `"iocp"` or `"polling"`.
    fn name(&self) -> &'static str;

    /// Waits for IO events and dispatches them (wakes the tasks waiting on them), then returns.
    ///
    /// `timeout`: `None` waits until an event or an [`Unpark::unpark`]; `Some(ZERO)` does not
    /// block. An `unpark` that happens before `park` makes the next `park` return at once (a
    /// token, as with `std::thread::park`). Returns how many events were dispatched.
    ///
    /// # Errors
    ///
    /// Only an OS failure of the wait itself (not of any operation); the runtime reports it.
    fn park(&self, timeout: Option<Duration>) -> io::Result<usize>;

    /// A handle with which any thread interrupts this driver's `park`.
    fn unparker(&self) -> Arc<dyn Unpark>;

    /// The readiness interface, for readiness-based drivers.
    fn reactor(&self) -> Option<Arc<dyn Reactor>> {
        None
    }

    /// Whether [`reactor`](Driver::reactor) is `Some`, without cloning it (asked on every
    /// wait; readiness backends override it with `true`).
    fn has_reactor(&self) -> bool {
        self.reactor().is_some()
    }

    /// The completion interface, for completion-based drivers. The answer must not change
    /// over the driver's life (`Some` or `None` throughout): [`with_driver`] asks once when it
    /// installs the driver, and a driver that had none then is not asked again.
    fn proactor(&self) -> Option<&dyn Proactor> {
        None
    }
}

/// Wakes a driver's `park` from any thread.
pub trait Unpark: Send + Sync + 'static {
    /// Makes the driver's current or next `park` return.
    fn unpark(&self);
}

/// Readiness: edge-triggered interest in a source's readability and writability.
///
/// Shared (`Send + Sync`): a source registered by one worker may be used, and deregistered, from
/// any thread; its events are dispatched by the worker that owns this reactor.
pub trait Reactor: Send + Sync + 'static {
    /// Registers `source` for read and write readiness, edge-triggered. The reactor's events
    /// set the readiness of the returned [`ScheduledIo`] and wake the tasks waiting in it.
    ///
    /// # Errors
    ///
    /// The OS refused (a closed fd, a type of file the backend cannot watch — regular files with
    /// epoll: the caller then falls back to blocking work).
    fn register(&self, source: RawSource) -> io::Result<Arc<ScheduledIo>>;

    /// Removes `source`'s registration. Called before the source is closed: an fd that was
    /// `dup`ed would otherwise keep delivering events for the closed one. Only `io`'s: if the
    /// number is registered for another source now (this one was closed without a deregister
    /// and the number reused), that registration is left alone.
    ///
    /// # Errors
    ///
    /// The OS refused (the fd is already closed); the registration is dropped anyway.
    fn deregister(&self, source: RawSource, io: &ScheduledIo) -> io::Result<()>;

    /// False once the driver that dispatches this reactor's events is gone (its runtime shut
    /// down): a source registered here must register again with the current reactor.
    fn is_alive(&self) -> bool;

    /// Called before a task waits for `interest` on `source` (after its call failed with
    /// `EWOULDBLOCK`). Edge-triggered backends (epoll, kqueue) keep the default, which does
    /// nothing; a backend whose registrations are one-shot (polling) arms the source again here
    /// for `interest` plus whatever other tasks wait for ([`ScheduledIo::waiting_interest`]).
    ///
    /// # Errors
    ///
    /// The OS refused.
    fn rearm(
        &self,
        source: RawSource,
        io: &ScheduledIo,
        interest: crate::scheduled::Interest,
    ) -> io::Result<()> {
        let _ = (source, io, interest);
        Ok(())
    }

    /// Whether this reactor reports a peer's half-close as its own readiness
    /// ([`Readiness::READ_CLOSED`](crate::Readiness::READ_CLOSED): `EPOLLRDHUP`, `EV_EOF`).
    /// If it does, a read of a byte stream that returns less than it asked for is taken to
    /// have drained the socket: its read readiness is cleared and the next read waits for an
    /// event instead of making a call that would fail with `EWOULDBLOCK` — an end of stream
    /// that came with the data still shows as `READ_CLOSED`. The default, `false`, keeps the
    /// extra call (a backend that folds the half-close into `READABLE` would otherwise miss
    /// an end of stream that arrived together with the last data).
    fn reports_read_closed(&self) -> bool {
        false
    }

    /// Whether this reactor reports TCP urgent data as
    /// [`Readiness::PRIORITY`](crate::Readiness::PRIORITY). A TCP read stops short at the
    /// urgent mark with data behind it, so a TCP stream takes a short read for a drained queue
    /// (see [`reports_read_closed`](Reactor::reports_read_closed)) only where this says
    /// `true` and the bit is clear. The default, `false`, keeps the extra call for TCP.
    fn reports_urgent_data(&self) -> bool {
        false
    }
}

/// Completion: the kernel runs an operation on the caller's buffers and reports when it is done.
pub trait Proactor {
    /// Submits `op`, parks the current task until the kernel completes it, and returns its
    /// result: the non-negative return value of the equivalent syscall, or its error.
    ///
    /// If `deadline` passes first, the operation is cancelled and `TimedOut` returned; if the
    /// task is cancelled meanwhile, the operation is cancelled and the cancellation continues
    /// (the call unwinds) — in both cases only **after** the kernel reported the operation
    /// finished, so the buffers `op` borrows are never used by the kernel after this returns.
    ///
    /// # Errors
    ///
    /// The operation's own error (`ECONNRESET`...), `TimedOut`, or `Unsupported` for an
    /// operation this kernel lacks (check [`supports`](Proactor::supports)).
    fn submit(&self, op: Op<'_>, deadline: Option<Instant>) -> io::Result<usize>;

    /// Whether the kernel supports operations of this kind (probed when the driver starts).
    fn supports(&self, kind: OpKind) -> bool;

    /// Called once per source before its first operation through this proactor (IOCP
    /// associates the socket with its port here); the default does nothing.
    ///
    /// # Errors
    ///
    /// The OS refused; the IO type reports the error from the operation.
    fn register(&self, source: RawSource) -> io::Result<()> {
        let _ = source;
        Ok(())
    }

    /// Arms a multishot accept on `listener` (io_uring's `IORING_ACCEPT_MULTISHOT`): one
    /// request that accepts connection after connection, each completion going to `queue`
    /// ([`AcceptQueue::complete`]). The driver hands `queue` the function that cancels the
    /// request ([`AcceptQueue::armed`]), callable from any thread. Returns `Ok(false)` when
    /// this proactor has no multishot accept (the default): the caller accepts one at a time.
    ///
    /// # Errors
    ///
    /// The request could not be queued (the submission queue stays full).
    #[cfg(unix)]
    fn arm_accept_multishot(
        &self,
        listener: RawSource,
        queue: &Arc<AcceptQueue>,
    ) -> io::Result<bool> {
        let _ = (listener, queue);
        Ok(false)
    }
}

/// The kind of an [`Op`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OpKind {
    /// `Op::Read` (Unix).
    Read,
    /// `Op::Write` (Unix).
    Write,
    /// [`Op::Recv`].
    Recv,
    /// [`Op::Send`].
    Send,
    /// [`Op::Accept`].
    Accept,
    /// [`Op::Connect`].
    Connect,
    /// `Op::Shutdown` (Unix).
    Shutdown,
    /// `Op::Fsync` (Unix).
    Fsync,
    /// `Op::PollReadable` / `Op::PollWritable` (Unix; IOCP has no poll operation).
    Poll,
    /// [`Op::RecvFrom`].
    RecvFrom,
    /// [`Op::SendTo`].
    SendTo,
}

/// An operation for a [`Proactor`], borrowing the caller's buffers for its duration.
///
/// The IO types keep their sources in non-blocking mode (so that readiness backends and the
/// thread-blocking path outside a runtime work on the same fd); a proactor must therefore wait
/// for a non-blocking source itself rather than report `EWOULDBLOCK` (io_uring arms a poll
/// internally for sockets; a backend may need `PollReadable` first for other files).
#[cfg(unix)]
#[derive(Debug)]
#[non_exhaustive]
pub enum Op<'a> {
    /// `read(2)`/`pread(2)` into `buf` (at `offset`, or the file position when `None`).
    Read {
        /// The file.
        fd: RawSource,
        /// Filled from the start.
        buf: &'a mut [u8],
        /// `pread` offset.
        offset: Option<u64>,
    },
    /// `write(2)`/`pwrite(2)` from `buf`.
    Write {
        /// The file.
        fd: RawSource,
        /// Written from the start.
        buf: &'a [u8],
        /// `pwrite` offset.
        offset: Option<u64>,
    },
    /// `recv(2)` into `buf` with `flags` (`MSG_PEEK`...).
    Recv {
        /// The socket.
        fd: RawSource,
        /// Filled from the start.
        buf: &'a mut [u8],
        /// `recv` flags.
        flags: i32,
    },
    /// `send(2)` from `buf` with `flags` (`MSG_NOSIGNAL` is always added).
    Send {
        /// The socket.
        fd: RawSource,
        /// Sent from the start.
        buf: &'a [u8],
        /// `send` flags.
        flags: i32,
    },
    /// `accept4(2)`; the result is the new fd (made non-blocking and close-on-exec).
    Accept {
        /// The listening socket.
        fd: RawSource,
        /// Receives the peer address.
        addr: &'a mut libc::sockaddr_storage,
        /// In: the size of `addr`; out: the address's length.
        len: &'a mut libc::socklen_t,
    },
    /// `connect(2)`.
    Connect {
        /// The socket.
        fd: RawSource,
        /// The address.
        addr: &'a libc::sockaddr_storage,
        /// Its length.
        len: libc::socklen_t,
    },
    /// `recvfrom(2)`.
    RecvFrom {
        /// The socket.
        fd: RawSource,
        /// Filled from the start.
        buf: &'a mut [u8],
        /// Receives the sender's address.
        addr: &'a mut libc::sockaddr_storage,
        /// In: the size of `addr`; out: the address's length.
        len: &'a mut libc::socklen_t,
        /// `recvfrom` flags.
        flags: i32,
    },
    /// `sendto(2)`.
    SendTo {
        /// The socket.
        fd: RawSource,
        /// Sent from the start.
        buf: &'a [u8],
        /// The destination.
        addr: &'a libc::sockaddr_storage,
        /// Its length.
        len: libc::socklen_t,
        /// `sendto` flags (`MSG_NOSIGNAL` is always added).
        flags: i32,
    },
    /// `shutdown(2)`.
    Shutdown {
        /// The socket.
        fd: RawSource,
        /// `SHUT_RD`, `SHUT_WR` or `SHUT_RDWR`.
        how: i32,
    },
    /// `fsync(2)` (or `fdatasync` when `data_only`).
    Fsync {
        /// The file.
        fd: RawSource,
        /// `fdatasync` instead.
        data_only: bool,
    },
    /// Waits until `fd` is readable (for operations the kernel cannot run itself).
    PollReadable {
        /// The source.
        fd: RawSource,
    },
    /// Waits until `fd` is writable.
    PollWritable {
        /// The source.
        fd: RawSource,
    },
}

/// An operation for a [`Proactor`] (IOCP): defined by the Windows backend's needs.
///
/// The sockets must be made with `WSA_FLAG_OVERLAPPED` (std's are); their blocking mode does
/// not matter: overlapped operations are queued whether or not `FIONBIO` is set (only
/// non-overlapped calls fail with `WSAEWOULDBLOCK`). Each operation's result is the byte count
/// (0 for `Accept` and `Connect`).
#[cfg(windows)]
#[derive(Debug)]
#[non_exhaustive]
pub enum Op<'a> {
    /// `WSARecv` into `buf`.
    Recv {
        /// The socket.
        socket: RawSource,
        /// Filled from the start.
        buf: &'a mut [u8],
        /// `MSG_PEEK`...
        flags: u32,
    },
    /// `WSASend` from `buf`.
    Send {
        /// The socket.
        socket: RawSource,
        /// Sent from the start.
        buf: &'a [u8],
    },
    /// `AcceptEx`: `accepted` is a fresh socket of the listener's family; `addresses` receives
    /// the local and remote addresses as `AcceptEx` lays them out.
    Accept {
        /// The listening socket.
        socket: RawSource,
        /// The socket that becomes the connection.
        accepted: RawSource,
        /// `AcceptEx`'s output buffer (at least 2 × (sizeof(SOCKADDR_STORAGE) + 16)).
        addresses: &'a mut [u8],
    },
    /// `ConnectEx` (the socket must be bound first).
    Connect {
        /// The socket.
        socket: RawSource,
        /// The address, as a `SOCKADDR_STORAGE`'s bytes.
        addr: &'a [u8],
    },
    /// `WSARecvFrom`.
    RecvFrom {
        /// The socket.
        socket: RawSource,
        /// Filled from the start.
        buf: &'a mut [u8],
        /// Receives the sender (`SOCKADDR_STORAGE` bytes).
        addr: &'a mut [u8],
        /// Receives the address length.
        len: &'a mut i32,
        /// `MSG_PEEK`...
        flags: u32,
    },
    /// `WSASendTo`.
    SendTo {
        /// The socket.
        socket: RawSource,
        /// Sent from the start.
        buf: &'a [u8],
        /// The destination (`SOCKADDR_STORAGE` bytes).
        addr: &'a [u8],
    },
}

impl Op<'_> {
    /// The operation's kind.
    pub fn kind(&self) -> OpKind {
        #[cfg(unix)]
        match self {
            Op::Read { .. } => OpKind::Read,
            Op::Write { .. } => OpKind::Write,
            Op::Recv { .. } => OpKind::Recv,
            Op::Send { .. } => OpKind::Send,
            Op::Accept { .. } => OpKind::Accept,
            Op::Connect { .. } => OpKind::Connect,
            Op::RecvFrom { .. } => OpKind::RecvFrom,
            Op::SendTo { .. } => OpKind::SendTo,
            Op::Shutdown { .. } => OpKind::Shutdown,
            Op::Fsync { .. } => OpKind::Fsync,
            Op::PollReadable { .. } | Op::PollWritable { .. } => OpKind::Poll,
        }
        #[cfg(windows)]
        match self {
            Op::Recv { .. } => OpKind::Recv,
            Op::Send { .. } => OpKind::Send,
            Op::Accept { .. } => OpKind::Accept,
            Op::Connect { .. } => OpKind::Connect,
            Op::RecvFrom { .. } => OpKind::RecvFrom,
            Op::SendTo { .. } => OpKind::SendTo,
        }
    }
}

thread_local! {
    /// The driver of the worker running on this thread (null: none). Set by `with_driver` for
    /// the duration of its closure.
    static CURRENT: Cell<*const dyn Driver> = const { Cell::new(ptr::null::<NoDriver>() as *const dyn Driver) };
    /// Whether [`CURRENT`] has a proactor: read by [`current_may_complete`] without the
    /// in-task check and the virtual call that [`current_driver`] makes.
    static CURRENT_PROACTOR: Cell<bool> = const { Cell::new(false) };
}

/// A type to make a null `*const dyn Driver` from (never instantiated).
struct NoDriver;

impl Driver for NoDriver {
    fn name(&self) -> &'static str {
        "none"
    }
    fn park(&self, _: Option<Duration>) -> io::Result<usize> {
        Ok(0)
    }
    fn unparker(&self) -> Arc<dyn Unpark> {
        struct Nothing;
        impl Unpark for Nothing {
            fn unpark(&self) {}
        }
        Arc::new(Nothing)
    }
}

/// Runs `f` with `driver` as this thread's current driver, then restores the previous one
/// (also if `f` unwinds). A runtime calls it around each worker's loop.
///
/// # Safety
///
/// The installation belongs to the thread, not to the stack `f` runs on: `f` must not suspend
/// a coroutine that this call runs in. A suspension would leave `driver` installed for whatever
/// the thread runs next, borrowed from a frame that is then switched away from — on a copying
/// stack, its bytes are copied out and the address reused by another coroutine. A runtime calls
/// this on its worker thread's own stack, around its scheduler loop (which switches into
/// coroutines and always back).
pub unsafe fn with_driver<R>(driver: &dyn Driver, f: impl FnOnce() -> R) -> R {
    struct Restore(*const dyn Driver, bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0;
            let _ = CURRENT.try_with(|c| c.set(previous));
            let _ = CURRENT_PROACTOR.try_with(|c| c.set(self.1));
        }
    }
    let proactor = driver.proactor().is_some();
    let erased: *const dyn Driver = driver;
    // SAFETY: only the trait object's lifetime bound changes. The pointer is dereferenced only
    // while installed, i.e. while `f` runs, which `driver` outlives; `Restore` uninstalls it
    // when `with_driver` returns or unwinds.
    let erased: *const (dyn Driver + 'static) =
        unsafe { std::mem::transmute::<*const dyn Driver, *const (dyn Driver + 'static)>(erased) };
    let previous = CURRENT.with(|c| c.replace(erased));
    let previous_proactor = CURRENT_PROACTOR.with(|c| c.replace(proactor));
    let _restore = Restore(previous, previous_proactor);
    f()
}

/// Whether this thread's current driver (if any) has a proactor: `false` means that
/// [`current_driver`] would find no proactor, in a task or not. One thread-local load; it
/// spares a readiness backend's reads and writes the in-task check and the driver's virtual
/// `proactor` call before they take the readiness path.
///
/// Not inlined, as [`current_driver`]: a migratable coroutine reads it afresh on every call.
#[inline(never)]
pub(crate) fn current_may_complete() -> bool {
    CURRENT_PROACTOR.try_with(Cell::get).unwrap_or(false)
}

/// The driver of the worker this code runs on, if it runs in a runtime's coroutine: for
/// backends (an IO-completion backend checks that an operation reached its own driver) and
/// their tests, not for applications, which use the IO types.
///
/// # Safety
///
/// The driver is the worker's, shared by every coroutine of that worker, and nothing in its
/// interface stops misuse: the caller must only [`submit`](Proactor::submit) operations on
/// sources it owns and whose buffers outlive the call, and must not call
/// [`park`](Driver::park) (it would block the worker inside its driver) or register sources it
/// does not own. (Safe code could otherwise submit an operation on any fd number.)
#[doc(hidden)]
#[inline]
pub unsafe fn current<R>(f: impl FnOnce(&dyn Driver) -> R) -> Option<R> {
    current_driver(f)
}

/// The driver of the worker this code runs on, if it runs in a runtime's coroutine: what this
/// crate's IO types use (each on sources it owns).
///
/// Outside a coroutine (a plain thread, or a worker's own scheduling code) there is none: IO
/// types then block the thread, like the std types. Not inlined, and never to be cached across a
/// suspension: a migratable coroutine may resume on another worker.
#[inline(never)]
pub(crate) fn current_driver<R>(f: impl FnOnce(&dyn Driver) -> R) -> Option<R> {
    if !spindle_park::in_task() {
        return None;
    }
    let driver = CURRENT.try_with(Cell::get).ok()?;
    if driver.is_null() {
        return None;
    }
    // SAFETY: installed by `with_driver` while the driver is alive, on this thread; used only
    // during this call.
    Some(f(unsafe { &*driver }))
}

impl fmt::Debug for dyn Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Driver")
            .field("name", &self.name())
            .finish()
    }
}
