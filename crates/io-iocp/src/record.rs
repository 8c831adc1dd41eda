//! The heap record of one operation: its `OVERLAPPED`, the waker of the task waiting for it,
//! and the small buffers the kernel fills besides the caller's data buffer.
//!
//! # Ownership
//!
//! A record is an `Arc` with two owners while its operation runs: the submitter, and the
//! completion packet the kernel will queue. The packet's reference is handed to the kernel as
//! the `OVERLAPPED` pointer ([`Record::lend`]; `OVERLAPPED` is the record's first field, so the
//! two pointers are the same) and taken back by whoever dequeues the packet
//! ([`Record::complete`]), or by the submitter if the call failed at once and no packet will
//! come ([`Record::reclaim`]). So the `OVERLAPPED` outlives every use the kernel makes of it,
//! whichever thread dequeues the packet and whenever. A packet that is never dequeued (its port
//! closed first) leaks its record, which is sound.

use std::cell::UnsafeCell;
use std::mem;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::task::Waker;

use windows_sys::Win32::Foundation::STATUS_PENDING;
use windows_sys::Win32::Networking::WinSock::{SOCKADDR_STORAGE, SOCKET, WSABUF};
use windows_sys::Win32::System::IO::OVERLAPPED;

/// The size [`Op::Accept`](spindle_io::Op::Accept)'s `addresses` buffer must have at least:
/// `AcceptEx`'s local and remote address areas, each a `SOCKADDR_STORAGE` plus the 16 bytes
/// `AcceptEx` requires. Parse it with `GetAcceptExSockaddrs` (or ask the accepted socket with
/// `getpeername`/`getsockname`, which work once the accept completed).
pub const ACCEPT_ADDRESSES_LEN: usize = 2 * ACCEPT_ADDRESS_LEN;

/// One address area of `AcceptEx`.
pub(crate) const ACCEPT_ADDRESS_LEN: usize = mem::size_of::<SOCKADDR_STORAGE>() + 16;

/// The operation was issued; nobody waits for its packet yet.
const STARTED: u8 = 0;
/// The submitter waits: the packet's dispatcher must wake it.
const WAITING: u8 = 1;
/// The packet was dequeued: the operation is over and its results are in the record.
const DONE: u8 = 2;
/// The operation completed at once and the submitter has gone: the packet only frees the record.
const DETACHED: u8 = 3;

/// See the module docs.
#[repr(C)]
pub(crate) struct Record {
    /// Must stay the first field: its address is the record's address.
    overlapped: UnsafeCell<OVERLAPPED>,
    state: AtomicU8,
    /// Wakes the submitter; set at creation and never changed.
    waker: Waker,
    /// The socket the operation runs on.
    pub(crate) socket: SOCKET,
    /// The data buffer's descriptor (points into the caller's buffer).
    pub(crate) wsabuf: UnsafeCell<WSABUF>,
    /// `WSARecv`'s in/out flags.
    pub(crate) flags: UnsafeCell<u32>,
    /// An address in (`ConnectEx`, `WSASendTo`) or out (`WSARecvFrom`).
    pub(crate) addr: UnsafeCell<SOCKADDR_STORAGE>,
    /// The length of `addr`.
    pub(crate) addr_len: UnsafeCell<i32>,
    /// `AcceptEx`'s address areas.
    pub(crate) accept: UnsafeCell<[u8; ACCEPT_ADDRESSES_LEN]>,
    /// A heap copy of the data buffer, used instead of the caller's when that may lie on a
    /// copying stack (empty otherwise).
    pub(crate) bounce: UnsafeCell<Box<[u8]>>,
}

// SAFETY: the plain-data fields hold raw pointers only as the C structs require (`WSABUF.buf`,
// `OVERLAPPED.hEvent`); they are written by the submitter before the operation starts, by the
// kernel while it runs, and read by the submitter after it completed (`DONE`, Acquire, after
// the dispatcher's AcqRel swap that follows the dequeue). Another thread — the dispatcher —
// touches only `state` (atomic), `waker` (`Send + Sync`) and drops its `Arc`; dropping a record
// drops the waker and plain data.
unsafe impl Send for Record {}
// SAFETY: as above: shared access from other threads is to `state` and `waker` only.
unsafe impl Sync for Record {}

impl Record {
    /// A record for an operation on `socket`, whose completion wakes `waker`, with a bounce
    /// buffer of `bounce` bytes.
    pub(crate) fn new(socket: SOCKET, waker: Waker, bounce: usize) -> Arc<Record> {
        // SAFETY: these are plain C structs for which all-zero is a valid (empty) value.
        let (overlapped, wsabuf, addr) = unsafe {
            (
                mem::zeroed::<OVERLAPPED>(),
                mem::zeroed::<WSABUF>(),
                mem::zeroed::<SOCKADDR_STORAGE>(),
            )
        };
        Arc::new(Record {
            overlapped: UnsafeCell::new(overlapped),
            state: AtomicU8::new(STARTED),
            waker,
            socket,
            wsabuf: UnsafeCell::new(wsabuf),
            flags: UnsafeCell::new(0),
            addr: UnsafeCell::new(addr),
            addr_len: UnsafeCell::new(0),
            accept: UnsafeCell::new([0; ACCEPT_ADDRESSES_LEN]),
            bounce: UnsafeCell::new(vec![0; bounce].into_boxed_slice()),
        })
    }

    /// The `OVERLAPPED` (for `CancelIoEx` and `WSAGetOverlappedResult`).
    pub(crate) fn overlapped(&self) -> *mut OVERLAPPED {
        self.overlapped.get()
    }

    /// Makes a reference for the completion packet and returns the `OVERLAPPED` pointer that
    /// carries it; the next call must start the operation with it. Marks the operation pending
    /// (`Internal = STATUS_PENDING`) first, as `ReadFile` does, so that [`kernel_done`] can
    /// tell when the kernel finished.
    ///
    /// [`kernel_done`]: Record::kernel_done
    pub(crate) fn lend(self: &Arc<Self>) -> *mut OVERLAPPED {
        // SAFETY: no operation uses this OVERLAPPED yet (one operation per record), so this
        // is the only access.
        unsafe { (*self.overlapped.get()).Internal = STATUS_PENDING as usize };
        let raw = Arc::into_raw(self.clone());
        // `repr(C)` with `overlapped` first: the record's address is the OVERLAPPED's.
        raw.cast_mut().cast::<OVERLAPPED>()
    }

    /// The call that `overlapped` was lent to failed at once: no packet will be queued; takes
    /// the packet's reference back.
    ///
    /// # Safety
    ///
    /// `overlapped` came from [`lend`](Record::lend), and the call it was passed to failed with
    /// an error other than `WSA_IO_PENDING`, so the kernel keeps no reference to it.
    pub(crate) unsafe fn reclaim(overlapped: *mut OVERLAPPED) {
        // SAFETY: per the contract, this is the reference `lend` leaked, and no packet will
        // take it back.
        drop(unsafe { Arc::from_raw(overlapped.cast_const().cast::<Record>()) });
    }

    /// The dispatcher dequeued the packet of `overlapped`: marks the operation done, wakes its
    /// submitter if it waits, and drops the packet's reference. A submitter whose waker is
    /// `dispatcher` is the dispatcher itself (it drives its port inline and sees the state
    /// when this returns): it is not woken.
    ///
    /// # Safety
    ///
    /// `overlapped` is the `lpOverlapped` of a dequeued packet of an operation started with an
    /// OVERLAPPED from [`lend`](Record::lend) (our completion key says so), dequeued once.
    pub(crate) unsafe fn complete(overlapped: *mut OVERLAPPED, dispatcher: &Waker) {
        // SAFETY: per the contract, this is the packet's reference, taken back exactly once.
        let record = unsafe { Arc::from_raw(overlapped.cast_const().cast::<Record>()) };
        if record.state.swap(DONE, Ordering::AcqRel) == WAITING
            && !record.waker.will_wake(dispatcher)
        {
            record.waker.wake_by_ref();
        }
    }

    /// The submitter is about to wait for the packet: from now on its dispatcher wakes the
    /// waker. False if the packet was dispatched already (the operation is over).
    pub(crate) fn begin_wait(&self) -> bool {
        self.state
            .compare_exchange(STARTED, WAITING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The submitter is done with the record (the operation completed at once, or the kernel
    /// finished it): the packet, when dequeued, wakes nobody.
    pub(crate) fn detach(&self) {
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |state| {
                (state != DONE).then_some(DETACHED)
            });
    }

    /// Whether the packet was dispatched.
    pub(crate) fn is_done(&self) -> bool {
        self.state.load(Ordering::Acquire) == DONE
    }

    /// Whether the kernel has finished the operation (its status is no longer
    /// `STATUS_PENDING`), whether or not the packet was dequeued yet.
    pub(crate) fn kernel_done(&self) -> bool {
        // SAFETY: the pointer is valid and aligned (a field of a live record); the kernel
        // writes this word when the operation completes, so it is read atomically.
        let internal = unsafe { AtomicUsize::from_ptr(&raw mut (*self.overlapped.get()).Internal) };
        internal.load(Ordering::Acquire) != STATUS_PENDING as usize
    }
}
