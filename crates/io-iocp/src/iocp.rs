//! The driver: the completion port, `park`, `Unpark`, and `Proactor::submit`. See the crate
//! docs.

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::ffi::c_void;
use std::fmt;
use std::io;
use std::mem;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Wake, Waker};
use std::time::{Duration, Instant};

use spindle_io::{Driver, Op, OpKind, Proactor, RawSource, Unpark};
use windows_sys::Wdk::Storage::FileSystem::{
    FILE_COMPLETION_INFORMATION, FileReplaceCompletionInformation, NtSetInformationFile,
};
use windows_sys::Win32::Foundation::{
    CloseHandle, ERROR_INVALID_PARAMETER, FALSE, GetLastError, HANDLE, INVALID_HANDLE_VALUE,
    STATUS_INVALID_INFO_CLASS, STATUS_NOT_IMPLEMENTED, STATUS_NOT_SUPPORTED, WAIT_TIMEOUT,
};
use windows_sys::Win32::Networking::WinSock::{
    SOCKET, WSA_OPERATION_ABORTED, WSACleanup, WSADATA, WSAStartup,
};
use windows_sys::Win32::System::IO::{
    CancelIoEx, CreateIoCompletionPort, GetQueuedCompletionStatusEx, IO_STATUS_BLOCK,
    OVERLAPPED_ENTRY, PostQueuedCompletionStatus,
};

use crate::ops::{self, Extensions, Started};
use crate::record::Record;

/// How many completions one `GetQueuedCompletionStatusEx` call dequeues at most.
const ENTRIES: usize = 256;

/// The completion key of every socket a driver associates with its port.
const KEY_SOCKET: usize = 0x5350_494e; // "SPIN"
/// The completion key of an [`Unpark`] packet (no OVERLAPPED).
const KEY_UNPARK: usize = 0x5741_4b45; // "WAKE"

/// `GetQueuedCompletionStatusEx`'s "no timeout".
const INFINITE: u32 = u32::MAX;

/// How often, at most, a wait on a socket of another port looks at its operation's status.
const FOREIGN_POLL_MAX: Duration = Duration::from_millis(50);

/// A completion driver on one I/O completion port. Made on the worker thread that parks in it;
/// not `Send`.
///
/// ```no_run
/// use spindle_io::{Driver, Op};
/// use spindle_io_iocp::IocpDriver;
/// use std::io::Write;
/// use std::os::windows::io::AsRawSocket;
///
/// let driver = IocpDriver::new()?;
/// let proactor = driver.proactor().expect("IOCP is a completion backend");
/// let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// let mut client = std::net::TcpStream::connect(listener.local_addr()?)?;
/// let (server, _) = listener.accept()?;
/// client.write_all(b"hello")?;
///
/// // Outside a runtime, `submit` drives the port itself until the operation completes.
/// proactor.register(server.as_raw_socket())?;
/// let mut buf = [0u8; 16];
/// let op = Op::Recv { socket: server.as_raw_socket(), buf: &mut buf, flags: 0 };
/// let n = proactor.submit(op, None)?;
/// assert_eq!(&buf[..n], b"hello");
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct IocpDriver {
    shared: Arc<Shared>,
    /// `GetQueuedCompletionStatusEx`'s output buffer, reused by every `park`.
    entries: RefCell<Vec<OVERLAPPED_ENTRY>>,
    ext: Extensions,
    /// Whether `FileReplaceCompletionInformation` may work here (cleared when the system says
    /// it does not know it: before Windows 8.1, or Wine).
    can_move: Cell<bool>,
    /// Sockets registered here that stayed associated with another port (it could not be
    /// moved). Their completions may never reach a live driver (that port's driver may be
    /// gone), so waits for them also watch the operation's own status. A socket number leaves
    /// the set when a socket with that number is associated here.
    foreign: RefCell<HashSet<SOCKET>>,
    /// The waker that makes this driver's own `park` return (for operations submitted outside
    /// a runtime, whose completions another driver may dispatch).
    inline_waker: Waker,
    /// Balances the `WSAStartup` of `new`.
    _winsock: Winsock,
}

/// What the driver shares with its [`Unpark`] handles, which any thread may hold and which may
/// outlive the driver.
struct Shared {
    /// Closed when the last handle goes, so that an unpark racing with the driver's drop never
    /// posts to a handle number that was closed and reused.
    port: HANDLE,
    /// The driver may be blocked in (or about to block in) its wait; see `impl Unpark`.
    sleeping: AtomicBool,
    /// An unpark happened that no `park` has consumed yet (the token).
    notified: AtomicBool,
}

// SAFETY: a completion port handle may be used from any thread (the kernel object is
// thread-safe); the flags are atomics.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: we own the handle; nothing uses it after the last reference.
        unsafe { CloseHandle(self.port) };
    }
}

/// # No lost wake-ups
///
/// `unpark` sets `notified` and then reads `sleeping`; `park` sets `sleeping` and then takes
/// `notified` before it waits. All four are `SeqCst`, hence totally ordered: either `unpark`
/// sees `sleeping` and posts a packet (which ends the wait, or is dequeued by the next one),
/// or `park` sees the token and does not block. An `unpark` that finds a token already set
/// returns at once: the one that set it did the above. After its wait, `park` clears
/// `sleeping` and takes the token, so a wake-up that came meanwhile is consumed by this return
/// (whose caller then looks at its queues: the take synchronises with the `unpark`). A packet
/// posted after the wait ended makes the next wait return early once: spurious, never lost.
/// While the driver is not parked, an `unpark` costs two atomic operations and no system call.
impl Unpark for Shared {
    fn unpark(&self) {
        if self.notified.swap(true, Ordering::SeqCst) {
            return;
        }
        if self.sleeping.load(Ordering::SeqCst) {
            // SAFETY: posts a packet with no OVERLAPPED to our port. A failure (out of
            // non-paged pool) cannot be reported here; the wait then ends at its timeout.
            let _ = unsafe { PostQueuedCompletionStatus(self.port, 0, KEY_UNPARK, ptr::null()) };
        }
    }
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IocpUnparker")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

/// A waker that unparks a driver (see `IocpDriver::inline_waker`).
struct UnparkWaker(Arc<Shared>);

impl Wake for UnparkWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// `WSAStartup` for the driver's life (Winsock counts them; std makes its own).
struct Winsock;

impl Winsock {
    fn start() -> io::Result<Winsock> {
        // SAFETY: WSADATA is plain data that WSAStartup fills.
        let mut data: WSADATA = unsafe { mem::zeroed() };
        // SAFETY: asks for Winsock 2.2 with a valid out pointer.
        let r = unsafe { WSAStartup(0x0202, &mut data) };
        if r != 0 {
            return Err(ops::context(
                io::Error::from_raw_os_error(r),
                "WSAStartup(2.2)",
            ));
        }
        Ok(Winsock)
    }
}

impl Drop for Winsock {
    fn drop(&mut self) {
        // SAFETY: balances the successful WSAStartup of `start`.
        unsafe { WSACleanup() };
    }
}

/// Disarmed once the operation is seen complete; if it is dropped armed (the submitter
/// unwinds with the operation in flight), it cancels the operation and blocks the thread until
/// the kernel has finished with the caller's buffers. Only an unexpected unwind gets here:
/// `submit` holds off cancellation while it waits.
struct InFlight<'a> {
    record: &'a Record,
    armed: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        cancel(self.record);
        while !self.record.is_done() && !self.record.kernel_done() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Asks the kernel to abort `record`'s operation; its completion comes all the same (aborted,
/// or with its real result if it won the race).
fn cancel(record: &Record) {
    // SAFETY: the OVERLAPPED is a field of the live record; CancelIoEx only looks the request
    // up (ERROR_NOT_FOUND if it completed already, which is fine).
    unsafe { CancelIoEx(record.socket as HANDLE, record.overlapped()) };
}

/// How waiting for an operation ended.
#[derive(Clone, Copy, Default)]
struct Waited {
    timed_out: bool,
    cancelled: bool,
}

fn wait_ms(timeout: Option<Duration>) -> u32 {
    match timeout {
        None => INFINITE,
        Some(d) => {
            // Rounded up, so that a wait never ends before its deadline (and then spins).
            let ms = d.as_nanos().div_ceil(1_000_000);
            u32::try_from(ms).unwrap_or(INFINITE - 1).min(INFINITE - 1)
        }
    }
}

impl IocpDriver {
    /// A driver with a new completion port.
    ///
    /// # Errors
    ///
    /// `WSAStartup` or `CreateIoCompletionPort` failed (out of memory or handles); the message
    /// says which.
    pub fn new() -> io::Result<Self> {
        let winsock = Winsock::start()?;
        // SAFETY: creates a new port (no file handle, no existing port).
        let port = unsafe { CreateIoCompletionPort(INVALID_HANDLE_VALUE, ptr::null_mut(), 0, 1) };
        if port.is_null() {
            return Err(ops::context(
                io::Error::last_os_error(),
                "CreateIoCompletionPort (a new port)",
            ));
        }
        let shared = Arc::new(Shared {
            port,
            sleeping: AtomicBool::new(false),
            notified: AtomicBool::new(false),
        });
        Ok(IocpDriver {
            inline_waker: Waker::from(Arc::new(UnparkWaker(shared.clone()))),
            shared,
            entries: RefCell::new(Vec::with_capacity(ENTRIES)),
            ext: Extensions::default(),
            can_move: Cell::new(true),
            foreign: RefCell::new(HashSet::new()),
            _winsock: winsock,
        })
    }

    /// The completion port's handle (for diagnostics; the driver owns it).
    pub fn port(&self) -> std::os::windows::io::RawHandle {
        self.shared.port
    }

    /// One wait on the port and the dispatch of what it dequeued. Returns the number of
    /// packets dequeued and of operations among them.
    fn poll(&self, timeout: Option<Duration>) -> io::Result<(usize, usize)> {
        let Ok(mut entries) = self.entries.try_borrow_mut() else {
            return Err(io::Error::other(
                "IocpDriver::park called re-entrantly (from a waker it was dispatching)",
            ));
        };
        entries.clear();
        let blocking = timeout != Some(Duration::ZERO);
        let mut ms = wait_ms(timeout);
        if blocking {
            // See `impl Unpark for Shared` for why this order never loses a wake-up.
            self.shared.sleeping.store(true, Ordering::SeqCst);
            if self.shared.notified.swap(false, Ordering::SeqCst) {
                ms = 0;
            }
        }
        let mut removed = 0u32;
        // SAFETY: `entries` has room for ENTRIES entries (its capacity), which is the count we
        // pass; the kernel fills `removed` of them. Not alertable.
        let ok = unsafe {
            GetQueuedCompletionStatusEx(
                self.shared.port,
                entries.as_mut_ptr(),
                ENTRIES as u32,
                &mut removed,
                ms,
                FALSE,
            )
        };
        // SAFETY: reads the calling thread's last error, right after the call.
        let error = (ok == FALSE).then(|| unsafe { GetLastError() });
        if blocking {
            self.shared.sleeping.store(false, Ordering::SeqCst);
            // A token set while we waited is consumed by this return.
            self.shared.notified.swap(false, Ordering::SeqCst);
        }
        match error {
            None => {}
            Some(WAIT_TIMEOUT) => return Ok((0, 0)),
            Some(code) => {
                return Err(ops::context(
                    io::Error::from_raw_os_error(code as i32),
                    "GetQueuedCompletionStatusEx",
                ));
            }
        }
        let removed = (removed as usize).min(ENTRIES);
        // SAFETY: the kernel initialised the first `removed` entries, within the capacity.
        unsafe { entries.set_len(removed) };
        let mut operations = 0;
        for entry in entries.iter() {
            if entry.lpCompletionKey != KEY_SOCKET || entry.lpOverlapped.is_null() {
                // An unpark packet (its job is done: the wait ended), or something that is not
                // ours (nothing else should post here).
                continue;
            }
            // SAFETY: a packet of a socket associated by an IocpDriver (our key) carries the
            // OVERLAPPED of a record lent to one operation; each packet is dequeued once.
            unsafe { Record::complete(entry.lpOverlapped, &self.inline_waker) };
            operations += 1;
        }
        Ok((removed, operations))
    }

    /// Whether this driver is the current worker's, seen from a runtime's task: then its loop
    /// dispatches this port while the task is parked.
    fn is_current(&self) -> bool {
        // SAFETY: only compares the driver's address; nothing is submitted or parked.
        unsafe {
            spindle_io::current(|d| ptr::addr_eq(d as *const dyn Driver, self as *const Self))
        }
        .unwrap_or(false)
    }

    /// Whether `socket` is associated with another driver's port (see `foreign`).
    fn is_foreign(&self, socket: SOCKET) -> bool {
        self.foreign
            .try_borrow()
            .map_or(true, |set| set.contains(&socket))
    }

    /// Waits in a runtime's task: parks it until the dispatcher wakes it. Returns once the
    /// packet was dispatched or, for a socket of another port (`watch`), the kernel finished.
    fn wait_in_task(&self, record: &Record, deadline: Option<Instant>, watch: bool) -> Waited {
        let mut waited = Waited::default();
        if !record.begin_wait() {
            return waited;
        }
        let mut cancel_sent = false;
        let mut interval = Duration::from_millis(1);
        while !(record.is_done() || (watch && record.kernel_done())) {
            if !cancel_sent {
                if spindle_park::cancel_requested() {
                    waited.cancelled = true;
                } else if deadline.is_some_and(|d| Instant::now() >= d) {
                    waited.timed_out = true;
                }
                if waited.cancelled || waited.timed_out {
                    cancel(record);
                    cancel_sent = true;
                    continue;
                }
            }
            let mut until = if cancel_sent { None } else { deadline };
            if watch {
                let next = Instant::now() + interval;
                until = Some(until.map_or(next, |d| d.min(next)));
                interval = (interval * 2).min(FOREIGN_POLL_MAX);
            }
            match until {
                Some(d) => {
                    spindle_park::park_until(d);
                }
                // Cancelled: the completion follows promptly.
                None => spindle_park::park(),
            }
        }
        waited
    }

    /// Waits by driving this driver's port (outside a runtime). Returns once the packet was
    /// dispatched or, for a socket of another port (`watch`), the kernel finished; or with an
    /// error of the wait itself once the kernel has finished the operation.
    fn wait_inline(
        &self,
        record: &Record,
        deadline: Option<Instant>,
        watch: bool,
    ) -> io::Result<Waited> {
        let mut waited = Waited::default();
        // From here the dispatcher — this driver, or the one whose port the socket is
        // associated with — wakes `inline_waker`, which ends our wait.
        if !record.begin_wait() {
            return Ok(waited);
        }
        let mut cancel_sent = false;
        let mut interval = Duration::from_millis(1);
        while !(record.is_done() || (watch && record.kernel_done())) {
            if !cancel_sent && deadline.is_some_and(|d| Instant::now() >= d) {
                waited.timed_out = true;
                cancel(record);
                cancel_sent = true;
            }
            let mut timeout = match deadline {
                Some(d) if !cancel_sent => Some(d.saturating_duration_since(Instant::now())),
                _ => None,
            };
            if watch {
                timeout = Some(timeout.map_or(interval, |t| t.min(interval)));
                interval = (interval * 2).min(FOREIGN_POLL_MAX);
            }
            if let Err(e) = self.poll(timeout) {
                // The port cannot be waited on: stop the operation, wait for the kernel to be
                // done with the buffers, and report. The packet, if it ever comes, frees the
                // record.
                cancel(record);
                while !record.is_done() && !record.kernel_done() {
                    std::thread::sleep(Duration::from_millis(1));
                }
                return Err(e);
            }
        }
        Ok(waited)
    }
}

impl Driver for IocpDriver {
    fn name(&self) -> &'static str {
        "iocp"
    }

    /// Waits on the port (at most `timeout`; none: until a completion or an unpark) and
    /// dispatches what it dequeues: each completed operation's task is woken. Returns how many
    /// operations completed. May return `Ok(0)` early (a stale wake-up); callers loop.
    fn park(&self, timeout: Option<Duration>) -> io::Result<usize> {
        self.poll(timeout).map(|(_, operations)| operations)
    }

    fn unparker(&self) -> Arc<dyn Unpark> {
        self.shared.clone()
    }

    fn proactor(&self) -> Option<&dyn Proactor> {
        Some(self)
    }
}

impl Proactor for IocpDriver {
    /// Runs `op` (see the crate docs for the protocol). `Op::Accept` and `Op::Connect` return
    /// 0; the others the number of bytes.
    fn submit(&self, op: Op<'_>, deadline: Option<Instant>) -> io::Result<usize> {
        let mut op = op;
        let socket = ops::socket_of(&op);
        let in_task = self.is_current();
        let foreign = self.is_foreign(socket);
        let waker = if in_task {
            spindle_park::waker()
        } else {
            self.inline_waker.clone()
        };
        // A buffer on a copying stack moves while the task is suspended: the kernel gets a heap
        // copy instead, whatever the caller did.
        let bounce = if in_task && spindle_park::on_copying_stack() {
            ops::data_len(&op).min(ops::BOUNCE_MAX)
        } else {
            0
        };
        let record = Record::new(socket, waker, bounce);
        let defer = spindle_park::defer_cancel();
        // SAFETY: we do not return (nor unwind: `InFlight`) before the operation's packet was
        // dispatched or the kernel finished it, and `op`'s buffers are not touched meanwhile.
        let started = unsafe { ops::start(&mut op, &record, &self.ext) }?;
        let (result, waited) = match started {
            Started::Immediate(bytes) => {
                record.detach();
                (Ok(bytes), Waited::default())
            }
            Started::Pending => {
                let mut guard = InFlight {
                    record: &record,
                    armed: true,
                };
                let waited = if in_task {
                    self.wait_in_task(&record, deadline, foreign)
                } else {
                    match self.wait_inline(&record, deadline, foreign) {
                        Ok(waited) => waited,
                        Err(e) => {
                            guard.armed = false;
                            return Err(e);
                        }
                    }
                };
                guard.armed = false;
                // Over (the kernel finished, even if the packet was not dispatched yet: then
                // its dispatcher only frees the record).
                record.detach();
                (ops::overlapped_result(&record), waited)
            }
        };
        let aborted = matches!(&result, Err(e) if e.raw_os_error() == Some(WSA_OPERATION_ABORTED));
        let result = ops::finish(&mut op, &record, result);
        drop(defer);
        if aborted && waited.cancelled {
            // The cancellation continues now that the buffers are free.
            spindle_park::checkpoint();
            return Err(io::Error::new(
                io::ErrorKind::Interrupted,
                "the operation was cancelled",
            ));
        }
        if aborted && waited.timed_out {
            return Err(io::Error::from(io::ErrorKind::TimedOut));
        }
        result
    }

    fn supports(&self, kind: OpKind) -> bool {
        matches!(
            kind,
            OpKind::Recv
                | OpKind::Send
                | OpKind::Accept
                | OpKind::Connect
                | OpKind::RecvFrom
                | OpKind::SendTo
        )
    }

    /// Associates `source` (a socket made with `WSA_FLAG_OVERLAPPED`) with this driver's port;
    /// if it is associated with another port already, moves it here where the system allows it
    /// (see the crate docs).
    fn register(&self, source: RawSource) -> io::Result<()> {
        let handle = source as usize as HANDLE;
        // SAFETY: associates the caller's socket with our port; the key marks our packets.
        let r = unsafe { CreateIoCompletionPort(handle, self.shared.port, KEY_SOCKET, 0) };
        let socket = source as SOCKET;
        if !r.is_null() {
            self.set_foreign(socket, false);
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(ERROR_INVALID_PARAMETER as i32) {
            return Err(ops::context(
                e,
                "CreateIoCompletionPort (associating the socket with the driver's port)",
            ));
        }
        // Associated already (with another driver's port, or this one's).
        let moved = self.can_move.get() && self.move_here(handle);
        // Not moved (the system cannot, or an operation is in flight on the socket): it stays
        // with its port, whose driver dispatches its completions while it lives.
        self.set_foreign(socket, !moved);
        Ok(())
    }
}

impl IocpDriver {
    fn set_foreign(&self, socket: SOCKET, foreign: bool) {
        if let Ok(mut set) = self.foreign.try_borrow_mut() {
            if foreign {
                set.insert(socket);
            } else {
                set.remove(&socket);
            }
        }
    }

    /// Moves the socket `handle` to this driver's port (`FileReplaceCompletionInformation`).
    fn move_here(&self, handle: HANDLE) -> bool {
        let info = FILE_COMPLETION_INFORMATION {
            Port: self.shared.port,
            Key: KEY_SOCKET as *mut c_void,
        };
        // SAFETY: IO_STATUS_BLOCK is plain data the call fills.
        let mut status_block: IO_STATUS_BLOCK = unsafe { mem::zeroed() };
        // SAFETY: a valid FILE_COMPLETION_INFORMATION of the size given, for the caller's
        // socket handle; synchronous.
        let status = unsafe {
            NtSetInformationFile(
                handle,
                &mut status_block,
                ptr::from_ref(&info).cast::<c_void>(),
                mem::size_of::<FILE_COMPLETION_INFORMATION>() as u32,
                FileReplaceCompletionInformation,
            )
        };
        if matches!(
            status,
            STATUS_INVALID_INFO_CLASS | STATUS_NOT_IMPLEMENTED | STATUS_NOT_SUPPORTED
        ) {
            self.can_move.set(false);
        }
        status >= 0
    }
}

impl Drop for IocpDriver {
    /// Dispatches the completions already queued (their tasks are woken, their records
    /// freed). Operations still in flight complete into the port after it is gone; their
    /// records leak, and their tasks are not woken: a runtime drops its drivers after its
    /// tasks have finished.
    fn drop(&mut self) {
        for _ in 0..1024 {
            match self.poll(Some(Duration::ZERO)) {
                Ok((removed, _)) if removed > 0 => {}
                _ => break,
            }
        }
    }
}

impl fmt::Debug for IocpDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IocpDriver")
            .field("port", &self.shared.port)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_times_round_up_and_saturate() {
        assert_eq!(wait_ms(None), INFINITE);
        assert_eq!(wait_ms(Some(Duration::ZERO)), 0);
        assert_eq!(wait_ms(Some(Duration::from_micros(1))), 1);
        assert_eq!(wait_ms(Some(Duration::from_millis(1500))), 1500);
        assert_eq!(wait_ms(Some(Duration::MAX)), INFINITE - 1);
    }
}
