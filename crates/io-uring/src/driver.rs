//! The driver: one ring, its completion records, `park`, and `submit`'s wait.

use std::cell::{Cell, RefCell, UnsafeCell};
use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::os::fd::{FromRawFd, IntoRawFd, RawFd};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Waker;
use std::time::{Duration, Instant};

use io_uring::{IoUring, Probe, cqueue, opcode, squeue, types};
use spindle_io::driver::AcceptQueue;
use spindle_io::{Driver, Op, OpKind, Proactor, Unpark};

use crate::config::{SetupError, UringConfig};
use crate::unpark::Unparker;

/// `user_data` of the eventfd poll's completions.
const WAKE: u64 = u64::MAX;
/// `user_data` of completions nobody waits for (those of `ASYNC_CANCEL` requests).
const IGNORE: u64 = u64::MAX - 1;
/// `user_data` of multishot accepts: this bit, the acceptor's generation (bits 24..56) and its
/// index (bits 0..24). The generation keeps a late cancel from hitting a reused index.
const ACCEPT_TAG: u64 = 1 << 62;
/// Bits of an acceptor's index in its `user_data`.
const ACCEPT_INDEX_BITS: u32 = 24;
/// The most bytes one read or write moves (Linux's `MAX_RW_COUNT`); results must fit an `i32`.
const MAX_RW: usize = 0x7fff_f000;
/// How often a push into a full submission queue is retried before it fails.
const PUSH_ATTEMPTS: u32 = 1000;
/// How long dropping the driver waits for operations still in flight.
const DROP_WAIT: Duration = Duration::from_secs(2);
/// A wait longer than this is cut to it (the kernel's timespec is signed; `park` may return
/// early anyway).
const MAX_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

/// The operation kinds this driver can submit, in the order of their bits in `supported`.
const KINDS: [(OpKind, u8); 11] = [
    (OpKind::Read, opcode::Read::CODE),
    (OpKind::Write, opcode::Write::CODE),
    (OpKind::Recv, opcode::Recv::CODE),
    (OpKind::Send, opcode::Send::CODE),
    (OpKind::Accept, opcode::Accept::CODE),
    (OpKind::Connect, opcode::Connect::CODE),
    (OpKind::Shutdown, opcode::Shutdown::CODE),
    (OpKind::Fsync, opcode::Fsync::CODE),
    (OpKind::Poll, opcode::PollAdd::CODE),
    (OpKind::RecvFrom, opcode::RecvMsg::CODE),
    (OpKind::SendTo, opcode::SendMsg::CODE),
];

/// Counters of what a driver did, for benchmarks and tests ([`UringDriver::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct UringStats {
    /// `io_uring_enter` system calls made.
    pub enters: u64,
    /// Submission queue entries pushed (operations, their retries, cancels, the wake-up poll).
    pub submissions: u64,
    /// Completions of operations dispatched to their waiters.
    pub completions: u64,
    /// Times the completion queue was found overflowed (completions kept back by the kernel,
    /// `IORING_SQ_CQ_OVERFLOW`) and flushed by an extra enter.
    pub cq_overflows: u64,
    /// Multishot accepts armed (`IORING_ACCEPT_MULTISHOT`): each serves a listener until it is
    /// cancelled (the listener dropped) or ends (an error, or the kernel stopped it).
    pub multishot_accepts: u64,
}

/// Where a completion record is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    /// On the free list.
    Free,
    /// Owned by a `submit` call; its entry (if pushed) has completed or was never pushed.
    Idle,
    /// Its entry is in the ring: the kernel may use it and the buffers it names.
    InKernel,
    /// The kernel posted its completion; `result` holds it.
    Completed,
}

/// One operation's completion record. Lives on the heap, at a fixed address, from its first use
/// until the driver is dropped (it is reused through the free list), so the kernel never sees a
/// dangling `user_data` or `msghdr`, whatever happens to the task that submitted.
struct Record {
    state: Cell<Slot>,
    /// The completion's `res`.
    result: Cell<i32>,
    /// The submitting task's waker, while it parks (not used when `submit` drives the ring).
    waker: Cell<Option<Waker>>,
    /// Its entry is an accept: a non-negative result is a new descriptor, closed if nobody
    /// claims it (`submit` unwound, or the driver dropped, while it was in the kernel).
    accept: Cell<bool>,
    /// `recvmsg`/`sendmsg` header: read by the kernel, which also writes `msg_namelen`.
    msg: UnsafeCell<libc::msghdr>,
    /// The header's one buffer.
    iov: UnsafeCell<libc::iovec>,
}

impl Record {
    fn new() -> Self {
        Record {
            state: Cell::new(Slot::Free),
            result: Cell::new(0),
            waker: Cell::new(None),
            accept: Cell::new(false),
            // SAFETY: all-zero is a valid `msghdr` (null pointers, zero lengths).
            msg: UnsafeCell::new(unsafe { std::mem::zeroed() }),
            iov: UnsafeCell::new(libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }),
        }
    }
}

/// A multishot accept in the ring: which queue its completions go to.
struct Acceptor {
    generation: u32,
    queue: Option<Arc<AcceptQueue>>,
}

impl Acceptor {
    /// The `user_data` of the request of the acceptor at `index`.
    fn user_data(&self, index: usize) -> u64 {
        ACCEPT_TAG | (u64::from(self.generation) << ACCEPT_INDEX_BITS) | index as u64
    }
}

/// Closes the descriptor an accept completed with, when nobody is there to take it (`result`
/// is the completion's: a descriptor if non-negative).
fn close_unclaimed(result: i32) {
    if result >= 0 {
        // SAFETY: a successful accept's result is a new descriptor the kernel installed for us
        // and that nothing else owns: the caller has no one to hand it to.
        drop(unsafe { std::os::fd::OwnedFd::from_raw_fd(result) });
    }
}

/// Cancels of multishot accepts requested from any thread (a listener dropped), for the
/// driver's thread to submit on its next turn.
struct Mailbox {
    cancels: Mutex<Vec<u64>>,
    unparker: Arc<Unparker>,
}

impl Mailbox {
    fn cancel(&self, user_data: u64) {
        self.cancels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(user_data);
        self.unparker.unpark();
    }

    fn take(&self) -> Vec<u64> {
        let mut cancels = self.cancels.lock().unwrap_or_else(PoisonError::into_inner);
        if cancels.is_empty() {
            Vec::new()
        } else {
            std::mem::take(&mut *cancels)
        }
    }
}

/// How long `Inner::enter` may wait for a completion.
#[derive(Clone, Copy, Debug)]
enum Wait {
    /// Not at all: submit, run pending completion work, return. No syscall if there is nothing
    /// to submit and the kernel flagged no pending work.
    No,
    /// Up to this long.
    For(Duration),
    /// Until a completion.
    Forever,
}

/// The mutable part of the driver. Borrowed only briefly, never across a park or a wake.
struct Inner {
    ring: IoUring,
    /// Every record ever allocated (boxed: fixed addresses); freed in `Drop for UringDriver`.
    records: Vec<NonNull<Record>>,
    /// Indices of free records.
    free: Vec<usize>,
    /// Records whose entry is in the kernel.
    in_flight: usize,
    /// The eventfd's poll is in the ring.
    wake_armed: bool,
    /// Arm it multishot (false after a kernel rejected that: one-shot, re-armed after each).
    wake_multishot: bool,
    eventfd: RawFd,
    sqpoll: bool,
    /// Wakers of completed records, woken once the borrow is released.
    wakes: Vec<Waker>,
    /// Multishot accepts, by index (`user_data`'s low bits), and the free indices.
    acceptors: Vec<Acceptor>,
    free_acceptors: Vec<usize>,
    /// Multishot accept completions, delivered to their queues once the borrow is released
    /// (delivering wakes tasks).
    accepted: Vec<(Arc<AcceptQueue>, i32, bool)>,
    /// False once the kernel refused a multishot accept (older than 5.19).
    multishot_accept: bool,
    stats: UringStats,
    /// Tests: add `MSG_DONTWAIT` to recv/send so that the kernel answers `EAGAIN`, to exercise
    /// the poll-and-retry path that older kernels need.
    #[cfg(test)]
    force_nowait: bool,
}

/// A completion-based IO driver on io_uring: one ring per worker thread.
///
/// See the [crate docs](crate) for how it works, what it costs and what it needs from the
/// kernel. Made with [`UringDriver::new`] or [`UringConfig::build`]; not `Send`: it belongs to
/// the thread that made it.
///
/// A task parked in [`submit`](Proactor::submit) keeps a reference to the driver: the driver
/// must not move or be dropped while any `submit` is in progress (a runtime unwinds its tasks
/// before it drops its drivers, and keeps each driver in place while its worker runs), and a
/// task must not migrate to another worker while it is inside `submit`.
pub struct UringDriver {
    inner: RefCell<Inner>,
    unparker: Arc<Unparker>,
    mailbox: Arc<Mailbox>,
    /// Bit `i`: `KINDS[i]` is supported.
    supported: u16,
    defer_taskrun: bool,
    _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for UringDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("UringDriver");
        if let Ok(inner) = self.inner.try_borrow() {
            s.field("entries", &inner.ring.params().sq_entries())
                .field("in_flight", &inner.in_flight)
                .field("stats", &inner.stats);
        }
        s.field("defer_taskrun", &self.defer_taskrun)
            .finish_non_exhaustive()
    }
}

impl UringDriver {
    /// A driver with the default [`UringConfig`], on this thread.
    ///
    /// # Errors
    ///
    /// The ring could not be set up (see [`UringConfig::build`]); the message says why and that
    /// the runtime falls back to epoll.
    pub fn new() -> io::Result<Self> {
        UringConfig::new().build()
    }

    pub(crate) fn with_config(config: &UringConfig) -> io::Result<Self> {
        let (ring, defer_taskrun) = build_ring(config)?;
        let params = ring.params();
        if !params.is_feature_nodrop() {
            return Err(SetupError::too_old("IORING_FEAT_NODROP (Linux 5.5)"));
        }
        if !params.is_feature_ext_arg() {
            return Err(SetupError::too_old(
                "IORING_FEAT_EXT_ARG, waits with a timeout (Linux 5.11)",
            ));
        }
        let mut probe = Probe::new();
        ring.submitter()
            .register_probe(&mut probe)
            .map_err(|e| SetupError::from_os("IORING_REGISTER_PROBE", &e, config))?;
        for (code, name) in [
            (opcode::PollAdd::CODE, "IORING_OP_POLL_ADD"),
            (opcode::AsyncCancel::CODE, "IORING_OP_ASYNC_CANCEL"),
        ] {
            if !probe.is_supported(code) {
                return Err(SetupError::too_old(name));
            }
        }
        let mut supported = 0u16;
        for (i, (_, code)) in KINDS.iter().enumerate() {
            if probe.is_supported(*code) {
                supported |= 1 << i;
            }
        }
        let unparker = Arc::new(Unparker::new()?);
        let sqpoll = params.is_setup_sqpoll();
        let mut inner = Inner {
            ring,
            records: Vec::new(),
            free: Vec::new(),
            in_flight: 0,
            wake_armed: false,
            wake_multishot: true,
            eventfd: unparker.fd(),
            sqpoll,
            wakes: Vec::new(),
            acceptors: Vec::new(),
            free_acceptors: Vec::new(),
            accepted: Vec::new(),
            multishot_accept: true,
            stats: UringStats::default(),
            #[cfg(test)]
            force_nowait: false,
        };
        inner
            .arm_wake()
            .map_err(|e| SetupError::from_os("arming the wake-up poll", &e, config))?;
        Ok(UringDriver {
            inner: RefCell::new(inner),
            mailbox: Arc::new(Mailbox {
                cancels: Mutex::new(Vec::new()),
                unparker: unparker.clone(),
            }),
            unparker,
            supported,
            defer_taskrun,
            _not_send: PhantomData,
        })
    }

    /// What the driver did so far.
    pub fn stats(&self) -> UringStats {
        self.inner.borrow().stats
    }

    /// Operations whose completion the driver still waits for.
    pub fn in_flight(&self) -> usize {
        self.inner.borrow().in_flight
    }

    /// Whether the ring runs completion work only in `park` (`IORING_SETUP_DEFER_TASKRUN`;
    /// see [`UringConfig::defer_taskrun`]).
    pub fn is_defer_taskrun(&self) -> bool {
        self.defer_taskrun
    }

    /// The number of submission queue entries the kernel gave the ring.
    pub fn entries(&self) -> u32 {
        self.inner.borrow().ring.params().sq_entries()
    }

    #[cfg(test)]
    pub(crate) fn set_force_nowait(&self, on: bool) {
        self.inner.borrow_mut().force_nowait = on;
    }

    #[cfg(test)]
    pub(crate) fn unparker_notified(&self) -> bool {
        self.unparker.notified()
    }

    /// Whether this driver is the one the current task's worker parks in (so that parking the
    /// task lets the worker's `park` dispatch our completion). Otherwise `submit` drives the
    /// ring itself.
    fn is_current(&self) -> bool {
        // SAFETY: only compares the driver's address; nothing is submitted or parked.
        unsafe {
            spindle_io::current(|driver| {
                driver.proactor().is_some_and(|p| {
                    std::ptr::addr_eq(p as *const dyn Proactor, self as *const UringDriver)
                })
            })
        }
        .unwrap_or(false)
    }

    /// The record at `slot`.
    fn record(&self, slot: usize) -> &Record {
        let ptr = self.inner.borrow().records[slot];
        // SAFETY: records are boxed by `alloc`, never moved, and freed only by `Drop for
        // UringDriver`, which takes `&mut self`: no `&self` — so no reference returned here —
        // outlives them. All their fields are `Cell`s/`UnsafeCell`s, so shared references
        // coexist with the dispatcher's and the kernel's accesses.
        unsafe { ptr.as_ref() }
    }

    /// Takes a free record (allocating one if none is free) for a `submit` call.
    fn alloc(&self) -> usize {
        let mut inner = self.inner.borrow_mut();
        let slot = match inner.free.pop() {
            Some(slot) => slot,
            None => {
                let record = NonNull::from(Box::leak(Box::new(Record::new())));
                inner.records.push(record);
                inner.records.len() - 1
            }
        };
        drop(inner);
        self.record(slot).state.set(Slot::Idle);
        slot
    }

    /// Returns a record that is not in the kernel to the free list.
    fn release(&self, slot: usize) {
        let record = self.record(slot);
        debug_assert_ne!(record.state.get(), Slot::InKernel);
        record.state.set(Slot::Free);
        record.accept.set(false);
        drop(record.waker.take());
        self.inner.borrow_mut().free.push(slot);
    }

    /// Pushes `entry` (whose `user_data` is `slot`) and marks the record in the kernel.
    ///
    /// # Safety
    ///
    /// Every pointer in `entry` must stay valid, and the memory it names must not be accessed
    /// by Rust code in a conflicting way, until the record's completion has been reaped (its
    /// state is `Completed`).
    unsafe fn push_op(
        &self,
        slot: usize,
        entry: &squeue::Entry,
        waker: Option<Waker>,
    ) -> io::Result<()> {
        let record = self.record(slot);
        record.waker.set(waker);
        let mut inner = self.inner.borrow_mut();
        // SAFETY: forwarded from this function's contract.
        let pushed = unsafe { inner.push(entry) };
        if pushed.is_ok() {
            record.state.set(Slot::InKernel);
            inner.in_flight += 1;
        }
        // A push reaps completions only when the submission queue was full; usually there is
        // nothing to wake.
        let reaped = !inner.wakes.is_empty() || !inner.accepted.is_empty();
        drop(inner);
        if reaped {
            self.wake_all();
        }
        pushed
    }

    /// Asks the kernel to cancel the operation of `slot`. False if the request could not be
    /// queued (the submission queue stays full); the caller retries later.
    fn push_cancel(&self, slot: usize) -> bool {
        let entry = opcode::AsyncCancel::new(slot as u64)
            .build()
            .user_data(IGNORE);
        let mut inner = self.inner.borrow_mut();
        // SAFETY: a cancel request holds no pointers.
        let pushed = unsafe { inner.push(&entry) }.is_ok();
        drop(inner);
        self.wake_all();
        pushed
    }

    /// Wakes the wakers of the completions reaped so far (outside any borrow: a waker may run
    /// arbitrary code).
    fn wake_all(&self) {
        let accepted = {
            let mut inner = self.inner.borrow_mut();
            if inner.accepted.is_empty() && inner.wakes.is_empty() {
                return;
            }
            (!inner.accepted.is_empty()).then(|| std::mem::take(&mut inner.accepted))
        };
        if let Some(accepted) = accepted {
            for (queue, result, more) in accepted {
                queue.complete(result, more);
            }
        }
        let mut wakes = {
            let mut inner = self.inner.borrow_mut();
            if inner.wakes.is_empty() {
                return;
            }
            std::mem::take(&mut inner.wakes)
        };
        for waker in wakes.drain(..) {
            waker.wake();
        }
        let mut inner = self.inner.borrow_mut();
        if inner.wakes.is_empty() {
            inner.wakes = wakes; // keep the allocation
        }
    }

    /// One turn of driving the ring from `submit` itself (no worker parks in this driver):
    /// submit, wait for a completion until `until` (forever if `None`), dispatch.
    ///
    /// Never fails: the caller has an operation in the kernel and must not leave before its
    /// completion, so an error is retried (after a millisecond); a ring that fails a thousand
    /// times in a row cannot be waited on any more and the process aborts rather than let the
    /// kernel write into freed memory.
    fn drive(&self, until: Option<Instant>) {
        let mut failures = 0u32;
        loop {
            let wait = match until {
                None => Wait::Forever,
                Some(until) => match until.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Wait::For(left),
                    _ => Wait::No,
                },
            };
            let mut inner = self.inner.borrow_mut();
            let result = if wait_is_needed(&mut inner, wait) {
                inner.enter(wait)
            } else {
                inner.enter(Wait::No)
            };
            inner.reap();
            drop(inner);
            self.wake_all();
            match result {
                Ok(()) => return,
                Err(e) => {
                    failures += 1;
                    if failures >= 1000 {
                        eprintln!(
                            "spindle-io-uring: io_uring_enter keeps failing ({e}) while an \
                             operation is in flight; aborting, as returning would let the kernel \
                             write into freed memory"
                        );
                        std::process::abort();
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }

    /// Waits until the record of `slot` completes: parks the task (the worker's `park`
    /// dispatches the completion) or, when `inline`, drives the ring itself. If the deadline
    /// passes or the task is asked to cancel, submits a cancel once and keeps waiting.
    fn wait(
        &self,
        slot: usize,
        deadline: Option<Instant>,
        inline: bool,
        why: &mut Option<Why>,
    ) -> i32 {
        let record = self.record(slot);
        let mut cancel_sent = false;
        loop {
            if record.state.get() == Slot::Completed {
                return record.result.get();
            }
            if !cancel_sent {
                if why.is_none() {
                    if spindle_park::cancel_requested() {
                        *why = Some(Why::Cancelled);
                    } else if deadline.is_some_and(|d| Instant::now() >= d) {
                        *why = Some(Why::TimedOut);
                    }
                }
                if why.is_some() {
                    cancel_sent = self.push_cancel(slot);
                    if cancel_sent {
                        continue;
                    }
                    // Not queued: wait a millisecond below and try again (looping straight
                    // back spun while the submission queue stayed full).
                }
            }
            // After the cancel went out there is no deadline: we wait for the completion.
            // If it could not be queued, retry in a millisecond.
            let until = if cancel_sent {
                None
            } else if why.is_some() {
                Some(Instant::now() + Duration::from_millis(1))
            } else {
                deadline
            };
            if inline {
                self.drive(until);
            } else {
                match until {
                    None => spindle_park::park(),
                    Some(until) => {
                        spindle_park::park_until(until);
                    }
                }
            }
        }
    }

    /// The body of [`Proactor::submit`].
    fn submit_op(&self, mut op: Op<'_>, deadline: Option<Instant>) -> io::Result<usize> {
        let kind = op.kind();
        if !self.supports(kind) {
            return Err(unsupported(kind));
        }
        let inline = !self.is_current();
        // Held while the operation is in the kernel: a cancel request then wakes our park once
        // instead of unwinding it (we cancel and wait for the kernel first).
        let guard = spindle_park::defer_cancel();
        let slot = self.alloc();
        let pending = Pending { driver: self, slot };
        let mut phase = Phase::Op;
        let mut why = None;
        let res = loop {
            #[cfg(test)]
            let nowait = self.inner.borrow().force_nowait;
            #[cfg(not(test))]
            let nowait = false;
            let entry = match phase {
                Phase::Op => prepare(&mut op, self.record(slot), nowait),
                Phase::Poll(mask) => {
                    opcode::PollAdd::new(types::Fd(op_fd(&op)), mask as u32).build()
                }
            }
            .user_data(slot as u64);
            self.record(slot)
                .accept
                .set(phase == Phase::Op && kind == OpKind::Accept);
            let waker = (!inline).then(spindle_park::waker);
            // SAFETY: the entry points into `op`'s buffers (borrowed by this call for its whole
            // duration; we touch them only after the completion) and into the record (alive
            // until the driver is dropped; its msghdr is only read back after the
            // completion). We return from here — normally or by unwinding, see `Pending` —
            // only once the record's completion has been reaped.
            unsafe { self.push_op(slot, &entry, waker)? };
            let res = self.wait(slot, deadline, inline, &mut why);
            self.record(slot).state.set(Slot::Idle);
            match phase {
                Phase::Op if why.is_none() && res == -libc::EAGAIN && retries_on_eagain(&op) => {
                    // Older kernels answer EAGAIN for non-blocking files: wait for readiness
                    // with a poll, then run the operation again.
                    phase = Phase::Poll(wait_mask(&op));
                }
                Phase::Op
                    if why.is_none()
                        && matches!(op, Op::Connect { .. })
                        && (res == -libc::EINPROGRESS || res == -libc::EALREADY) =>
                {
                    phase = Phase::Poll(libc::POLLOUT);
                }
                Phase::Poll(_) if res < 0 => break res,
                Phase::Poll(_) if matches!(op, Op::Connect { .. }) => break so_error(op_fd(&op)),
                // The poll fired but the deadline or a cancel also came: the operation itself
                // never ran.
                Phase::Poll(_) if why.is_some() => break -libc::ECANCELED,
                Phase::Poll(_) => phase = Phase::Op,
                Phase::Op => break res,
            }
        };
        if res >= 0
            && let Op::RecvFrom { len, .. } = &mut op
        {
            // SAFETY: the completion is reaped: the kernel is done with the msghdr, and the
            // record is still ours (`pending` releases it below).
            **len = unsafe { (*self.record(slot).msg.get()).msg_namelen };
        }
        drop(pending);
        // A result that only says the operation did not happen (it was cancelled, or stopped
        // before it could run again).
        let cut_short = matches!(
            -res,
            libc::ECANCELED | libc::EINTR | libc::EAGAIN | libc::EINPROGRESS | libc::EALREADY
        );
        match why {
            Some(Why::TimedOut) if cut_short => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "io_uring operation timed out (cancelled in the kernel)",
            )),
            Some(Why::Cancelled) => {
                // The kernel is done with the buffers: let the cancellation unwind now. If an
                // outer guard still defers it, report what the operation did: its data, or
                // ECANCELED. An accept that completed as the cancel came made a connection:
                // owned across the unwind, so that it is closed, not leaked.
                let accepted = (kind == OpKind::Accept && res >= 0).then(|| {
                    // SAFETY: a successful accept's result is a new descriptor that nothing
                    // else owns yet.
                    unsafe { std::os::fd::OwnedFd::from_raw_fd(res) }
                });
                drop(guard);
                spindle_park::checkpoint();
                match accepted {
                    Some(fd) => to_result(fd.into_raw_fd()),
                    None => to_result(if cut_short { -libc::ECANCELED } else { res }),
                }
            }
            _ => to_result(res),
        }
    }
}

/// Why `submit` cancelled its operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Why {
    TimedOut,
    Cancelled,
}

/// What `submit` has in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// The operation itself.
    Op,
    /// A poll for these events, before running the operation (again).
    Poll(i16),
}

/// A `submit` call's record. Its drop returns the record to the free list — and if that happens
/// while the record is still in the kernel (`submit` unwinding: a runtime that unwound a park
/// despite the `CancelGuard`, a panicking waker), first cancels the operation and drives the
/// ring until its completion, so the kernel is done with the caller's buffers before the
/// caller's frame goes away.
struct Pending<'d> {
    driver: &'d UringDriver,
    slot: usize,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        let record = self.driver.record(self.slot);
        // `submit` marks the record idle as soon as it has its result: in the kernel or
        // completed here means `submit` is unwinding and nobody takes the result.
        let unclaimed = record.state.get() != Slot::Idle;
        let mut cancel_sent = false;
        while record.state.get() == Slot::InKernel {
            if !cancel_sent {
                cancel_sent = self.driver.push_cancel(self.slot);
            }
            self.driver
                .drive((!cancel_sent).then(|| Instant::now() + Duration::from_millis(1)));
        }
        if unclaimed && record.accept.get() {
            // The accept completed before its cancel: a connection nobody will take.
            close_unclaimed(record.result.get());
        }
        self.driver.release(self.slot);
    }
}

impl Inner {
    /// Pushes `entry`; if the submission queue is full, flushes it to the kernel (reaping what
    /// completed meanwhile) and retries.
    ///
    /// # Safety
    ///
    /// Every pointer in `entry` must stay valid until its completion is reaped, and what it
    /// names must not be accessed in a conflicting way meanwhile.
    unsafe fn push(&mut self, entry: &squeue::Entry) -> io::Result<()> {
        let mut attempts = 0;
        loop {
            // SAFETY: forwarded from this function's contract.
            if unsafe { self.ring.submission().push(entry) }.is_ok() {
                self.stats.submissions += 1;
                return Ok(());
            }
            attempts += 1;
            if attempts > PUSH_ATTEMPTS {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "io_uring driver: the submission queue stays full (the kernel accepts no \
                     more entries); retry later, or use a larger ring (UringConfig::entries)",
                ));
            }
            // Full: hand what is queued to the kernel. EBUSY/EAGAIN (completions backed up,
            // or no memory for requests right now) are answered by reaping, then retrying.
            self.stats.enters += 1;
            match self.ring.submit() {
                Ok(_) => {}
                Err(e) if is_transient(&e) => {
                    if attempts > 10 {
                        std::thread::yield_now();
                    }
                }
                Err(e) => return Err(e),
            }
            self.reap();
            if self.sqpoll && self.ring.submission().is_full() {
                self.stats.enters += 1;
                let _ = self.ring.submitter().squeue_wait();
            }
        }
    }

    /// Puts the poll on the wake-up eventfd into the ring, unless it is there.
    fn arm_wake(&mut self) -> io::Result<()> {
        if self.wake_armed {
            return Ok(());
        }
        let entry = opcode::PollAdd::new(types::Fd(self.eventfd), libc::POLLIN as u32)
            .multi(self.wake_multishot)
            .build()
            .user_data(WAKE);
        // SAFETY: a poll holds no pointers into our memory.
        unsafe { self.push(&entry)? };
        self.wake_armed = true;
        Ok(())
    }

    /// One `io_uring_enter`: submits everything queued and waits as `wait` says. A timeout, a
    /// signal or a transient refusal is not an error (the caller's loop goes on).
    fn enter(&mut self, wait: Wait) -> io::Result<()> {
        let result = match wait {
            Wait::No => {
                let sq = self.ring.submission();
                let needed = !sq.is_empty() || sq.taskrun() || sq.cq_overflow();
                drop(sq);
                if !needed {
                    return Ok(());
                }
                self.stats.enters += 1;
                self.ring.submit()
            }
            Wait::Forever => {
                self.stats.enters += 1;
                self.ring.submit_and_wait(1)
            }
            Wait::For(timeout) => {
                self.stats.enters += 1;
                let ts = types::Timespec::from(timeout.min(MAX_WAIT));
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
        };
        match result {
            Ok(_) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ETIME) || is_transient(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Takes every completion from the queue: marks its record completed and queues its
    /// waker in `wakes`. Returns how many operations completed.
    fn reap(&mut self) -> usize {
        let Inner {
            ring,
            records,
            in_flight,
            wake_armed,
            wake_multishot,
            wakes,
            stats,
            eventfd,
            acceptors,
            free_acceptors,
            accepted,
            multishot_accept,
            ..
        } = self;
        let mut completed = 0;
        let mut drain = false;
        for cqe in ring.completion() {
            match cqe.user_data() {
                WAKE => {
                    if !cqueue::more(cqe.flags()) {
                        // The poll ended (one-shot, or the kernel ended the multishot one):
                        // armed again before the next sleep; reset the counter first so that
                        // a one-shot poll does not fire for writes already seen.
                        *wake_armed = false;
                        drain = true;
                        if cqe.result() == -libc::EINVAL {
                            *wake_multishot = false;
                        }
                    }
                }
                IGNORE => {}
                tagged if tagged & ACCEPT_TAG != 0 => {
                    let index = (tagged & ((1 << ACCEPT_INDEX_BITS) - 1)) as usize;
                    let generation = ((tagged & !ACCEPT_TAG) >> ACCEPT_INDEX_BITS) as u32;
                    let Some(acceptor) = acceptors
                        .get_mut(index)
                        .filter(|a| a.generation == generation)
                    else {
                        close_unclaimed(cqe.result());
                        continue;
                    };
                    let more = cqueue::more(cqe.flags());
                    let queue = if more {
                        acceptor.queue.clone()
                    } else {
                        free_acceptors.push(index);
                        acceptor.queue.take()
                    };
                    if !more && cqe.result() == -libc::EINVAL {
                        *multishot_accept = false;
                    }
                    match queue {
                        Some(queue) => accepted.push((queue, cqe.result(), more)),
                        // No listener's queue to take the connection: close it.
                        None => close_unclaimed(cqe.result()),
                    }
                }
                slot => {
                    let Some(record) = usize::try_from(slot).ok().and_then(|s| records.get(s))
                    else {
                        continue;
                    };
                    // SAFETY: see `UringDriver::record`.
                    let record = unsafe { record.as_ref() };
                    if record.state.get() != Slot::InKernel {
                        continue;
                    }
                    record.result.set(cqe.result());
                    record.state.set(Slot::Completed);
                    *in_flight -= 1;
                    completed += 1;
                    if let Some(waker) = record.waker.take() {
                        wakes.push(waker);
                    }
                }
            }
        }
        if drain {
            let mut value = 0u64;
            // SAFETY: reads 8 bytes into `value`; the eventfd is non-blocking and open while
            // the driver (which holds its unparker) lives.
            let _ = unsafe { libc::read(*eventfd, (&raw mut value).cast(), 8) };
        }
        stats.completions += completed as u64;
        completed
    }
}

/// Whether a wait is worth a syscall: not if completions are already in the queue.
fn wait_is_needed(inner: &mut Inner, wait: Wait) -> bool {
    !matches!(wait, Wait::No) && inner.ring.completion().is_empty()
}

/// Errors of `io_uring_enter` that a retry (after reaping) answers.
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINTR | libc::EBUSY | libc::EAGAIN)
    )
}

impl Driver for UringDriver {
    fn name(&self) -> &'static str {
        "io_uring"
    }

    fn park(&self, timeout: Option<Duration>) -> io::Result<usize> {
        let cancels = self.mailbox.take();
        let mut inner = self.inner.borrow_mut();
        for user_data in cancels {
            let entry = opcode::AsyncCancel::new(user_data)
                .build()
                .user_data(IGNORE);
            // SAFETY: a cancel request holds no pointers. If the queue stays full it is lost
            // and the request keeps its listener's socket open until the ring goes: report it.
            if let Err(e) = unsafe { inner.push(&entry) } {
                log::warn!(
                    "could not cancel a multishot accept ({e}): its listener's socket stays open \
                     until the ring is dropped"
                );
            }
        }
        let result = match timeout {
            Some(t) if t.is_zero() => inner.enter(Wait::No),
            _ => self.sleep(&mut inner, timeout),
        };
        let mut dispatched = inner.reap();
        // Completions the kernel kept back (CQ overflow): flush them now rather than next turn.
        let mut rounds = 0;
        while rounds < 8 && inner.ring.submission().cq_overflow() {
            rounds += 1;
            inner.stats.cq_overflows += 1;
            let _ = inner.enter(Wait::No);
            dispatched += inner.reap();
        }
        drop(inner);
        self.wake_all();
        result.map(|()| dispatched)
    }

    fn unparker(&self) -> Arc<dyn Unpark> {
        self.unparker.clone()
    }

    fn proactor(&self) -> Option<&dyn Proactor> {
        Some(self)
    }
}

impl UringDriver {
    /// A blocking `park`: the sleeping-flag protocol of [`crate::unpark`] around one
    /// `io_uring_enter` that submits everything queued and waits.
    fn sleep(&self, inner: &mut Inner, timeout: Option<Duration>) -> io::Result<()> {
        inner.arm_wake()?;
        let wait = match timeout {
            None => Wait::Forever,
            Some(t) => Wait::For(t),
        };
        if !wait_is_needed(inner, wait) {
            return inner.enter(Wait::No);
        }
        if !self.unparker.begin_sleep() {
            // A token was pending: return at once (but still submit what is queued).
            return inner.enter(Wait::No);
        }
        let result = inner.enter(wait);
        self.unparker.end_sleep();
        result
    }
}

impl Proactor for UringDriver {
    fn submit(&self, op: Op<'_>, deadline: Option<Instant>) -> io::Result<usize> {
        self.submit_op(op, deadline)
    }

    fn supports(&self, kind: OpKind) -> bool {
        KINDS
            .iter()
            .position(|(k, _)| *k == kind)
            .is_some_and(|i| self.supported & (1 << i) != 0)
    }

    fn arm_accept_multishot(&self, listener: RawFd, queue: &Arc<AcceptQueue>) -> io::Result<bool> {
        let mut inner = self.inner.borrow_mut();
        if !inner.multishot_accept || !self.supports(OpKind::Accept) {
            return Ok(false);
        }
        let index = match inner.free_acceptors.pop() {
            Some(index) => index,
            None if inner.acceptors.len() < 1 << ACCEPT_INDEX_BITS => {
                inner.acceptors.push(Acceptor {
                    generation: 0,
                    queue: None,
                });
                inner.acceptors.len() - 1
            }
            // 16 million listeners armed at once: accept one at a time instead.
            None => return Ok(false),
        };
        let acceptor = &mut inner.acceptors[index];
        acceptor.generation = acceptor.generation.wrapping_add(1);
        acceptor.queue = Some(queue.clone());
        let user_data = acceptor.user_data(index);
        let mailbox = self.mailbox.clone();
        if !queue.armed(Box::new(move || mailbox.cancel(user_data))) {
            // Armed meanwhile by another task: the caller waits for that one.
            inner.acceptors[index].queue = None;
            inner.free_acceptors.push(index);
            return Ok(true);
        }
        let entry = opcode::AcceptMulti::new(types::Fd(listener))
            .flags(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)
            .build()
            .user_data(user_data);
        // SAFETY: a multishot accept holds no pointers into our memory (no address output).
        let pushed = unsafe { inner.push(&entry) };
        match pushed {
            Ok(()) => inner.stats.multishot_accepts += 1,
            Err(_) => {
                inner.acceptors[index].queue = None;
                inner.free_acceptors.push(index);
            }
        }
        drop(inner);
        self.wake_all();
        match pushed {
            Ok(()) => Ok(true),
            Err(e) => {
                queue.disarmed();
                Err(e)
            }
        }
    }
}

impl Drop for UringDriver {
    fn drop(&mut self) {
        let inner = self.inner.get_mut();
        // Operations still in the kernel belong to tasks that no longer wait (a runtime unwinds
        // its tasks, which waits for their completions, before it drops the driver, so this is
        // defensive). Multishot accepts still armed are cancelled too, and reaped until their
        // last completion: a connection the kernel accepted is a descriptor in this process,
        // and a completion left in the ring when it closes would leak it.
        let left = inner.cancel_in_flight(DROP_WAIT);
        // Wakers of tasks that are gone: dropping them is all that is left to do.
        inner.wakes.clear();
        // What the multishot accepts took goes to their listeners' queues (closed with the
        // listener, or closed at once if it is gone); the listeners arm again elsewhere.
        let accepted = std::mem::take(&mut inner.accepted);
        for (queue, result, more) in accepted {
            queue.complete(result, more);
        }
        for acceptor in &mut inner.acceptors {
            if let Some(queue) = acceptor.queue.take() {
                queue.disarmed();
            }
        }
        if left > 0 {
            // The kernel may still complete these (closing the ring cancels them, but
            // asynchronously): leak their records rather than free memory it may write.
            inner.records.clear();
            return;
        }
        for record in inner.records.drain(..) {
            // SAFETY: allocated by `Box::leak` in `alloc`; no operation is in the kernel and no
            // reference to a record outlives `&self` (we have `&mut self`).
            drop(unsafe { Box::from_raw(record.as_ptr()) });
        }
    }
}

impl Inner {
    /// The state of the record at `slot`.
    fn record_state(&self, slot: usize) -> Slot {
        // SAFETY: see `UringDriver::record`; records live until the driver is dropped, and
        // their state is a `Cell`.
        unsafe { self.records[slot].as_ref() }.state.get()
    }

    /// Cancels every operation and every multishot accept in the kernel and reaps until none
    /// is left or `patience` has passed; returns how many operations are left. Connections
    /// that accepts of operations nobody waits for any more made are closed; those of the
    /// multishot accepts wait in `accepted` for delivery to their queues.
    fn cancel_in_flight(&mut self, patience: Duration) -> usize {
        let in_kernel: Vec<usize> = (0..self.records.len())
            .filter(|&slot| self.record_state(slot) == Slot::InKernel)
            .collect();
        // Completions already posted (and any the kernel kept back on overflow) first: what
        // is reaped now needs no cancel.
        let _ = self.enter(Wait::No);
        self.reap();
        let still: Vec<u64> = in_kernel
            .iter()
            .filter(|&&slot| self.record_state(slot) == Slot::InKernel)
            .map(|&slot| slot as u64)
            .collect();
        let armed: Vec<u64> = self
            .acceptors
            .iter()
            .enumerate()
            .filter(|(_, a)| a.queue.is_some())
            .map(|(index, a)| a.user_data(index))
            .collect();
        for user_data in still.into_iter().chain(armed) {
            let entry = opcode::AsyncCancel::new(user_data)
                .build()
                .user_data(IGNORE);
            // SAFETY: a cancel request holds no pointers. Pushing fails only if the queue stays
            // full; the wait below then just waits.
            let _ = unsafe { self.push(&entry) };
        }
        let until = Instant::now() + patience;
        while self.in_flight > 0 || self.acceptors.iter().any(|a| a.queue.is_some()) {
            let Some(left) = until.checked_duration_since(Instant::now()) else {
                break;
            };
            let _ = self.enter(Wait::For(left.min(Duration::from_millis(10))));
            self.reap();
        }
        // Accepts of operations whose `submit` is gone that completed before their cancel.
        for slot in in_kernel {
            // SAFETY: see `UringDriver::record`; the caller has the driver exclusively.
            let record = unsafe { self.records[slot].as_ref() };
            if record.state.get() == Slot::Completed && record.accept.get() {
                close_unclaimed(record.result.get());
                record.accept.set(false);
            }
        }
        self.in_flight
    }
}

/// Sets up the ring: the modern flags first (submit-all, deferred task running), then, if the
/// kernel refuses them (EINVAL: older than 6.1), the plain ring.
fn build_ring(config: &UringConfig) -> io::Result<(IoUring, bool)> {
    let attempt = |modern: bool| {
        let mut builder = IoUring::builder();
        if let Some(cq) = config.cq_entries {
            builder.setup_cqsize(cq);
        }
        if let Some(idle) = config.sqpoll_idle {
            builder.setup_sqpoll(u32::try_from(idle.as_millis()).unwrap_or(u32::MAX));
        }
        if modern {
            builder.setup_submit_all();
            if config.defer_taskrun {
                builder
                    .setup_defer_taskrun()
                    .setup_single_issuer()
                    .setup_taskrun_flag();
            }
        }
        builder.build(config.entries)
    };
    match attempt(true) {
        Ok(ring) => Ok((ring, config.defer_taskrun)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => match attempt(false) {
            Ok(ring) => Ok((ring, false)),
            Err(e) => Err(SetupError::from_os("io_uring_setup", &e, config)),
        },
        Err(e) => Err(SetupError::from_os("io_uring_setup", &e, config)),
    }
}

/// The error for an operation this kernel lacks.
fn unsupported(kind: OpKind) -> io::Error {
    let what = match kind {
        OpKind::Shutdown => "IORING_OP_SHUTDOWN (Linux 5.11)",
        OpKind::Recv | OpKind::Send | OpKind::Read | OpKind::Write => "it (Linux 5.6)",
        OpKind::Connect | OpKind::Accept => "it (Linux 5.5)",
        _ => "it",
    };
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!(
            "io_uring on this kernel cannot run {kind:?} operations: it lacks {what}; use the \
             blocking fallback (check Proactor::supports first)"
        ),
    )
}

/// An SQE for `op` (without `user_data`). `record` is the operation's record, not in the
/// kernel: its msghdr is filled for `RecvFrom`/`SendTo`.
fn prepare(op: &mut Op<'_>, record: &Record, nowait: bool) -> squeue::Entry {
    let extra = if nowait { libc::MSG_DONTWAIT } else { 0 };
    match op {
        Op::Read { fd, buf, offset } => {
            opcode::Read::new(types::Fd(*fd), buf.as_mut_ptr(), rw_len(buf.len()))
                .offset(offset.unwrap_or(u64::MAX))
                .build()
        }
        Op::Write { fd, buf, offset } => {
            opcode::Write::new(types::Fd(*fd), buf.as_ptr(), rw_len(buf.len()))
                .offset(offset.unwrap_or(u64::MAX))
                .build()
        }
        Op::Recv { fd, buf, flags } => {
            opcode::Recv::new(types::Fd(*fd), buf.as_mut_ptr(), rw_len(buf.len()))
                .flags(*flags | extra)
                .build()
        }
        Op::Send { fd, buf, flags } => {
            opcode::Send::new(types::Fd(*fd), buf.as_ptr(), rw_len(buf.len()))
                .flags(*flags | libc::MSG_NOSIGNAL | extra)
                .build()
        }
        Op::Accept { fd, addr, len } => opcode::Accept::new(
            types::Fd(*fd),
            (&raw mut **addr).cast::<libc::sockaddr>(),
            &raw mut **len,
        )
        .flags(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)
        .build(),
        Op::Connect { fd, addr, len } => opcode::Connect::new(
            types::Fd(*fd),
            (&raw const **addr).cast::<libc::sockaddr>(),
            *len,
        )
        .build(),
        Op::RecvFrom {
            fd,
            buf,
            addr,
            len,
            flags,
        } => {
            let msg = fill_msghdr(
                record,
                buf.as_mut_ptr(),
                buf.len(),
                (&raw mut **addr).cast(),
                **len,
            );
            opcode::RecvMsg::new(types::Fd(*fd), msg)
                .flags((*flags | extra) as u32)
                .build()
        }
        Op::SendTo {
            fd,
            buf,
            addr,
            len,
            flags,
        } => {
            let msg = fill_msghdr(
                record,
                buf.as_ptr().cast_mut(),
                buf.len(),
                (&raw const **addr).cast_mut().cast(),
                *len,
            );
            opcode::SendMsg::new(types::Fd(*fd), msg)
                .flags((*flags | libc::MSG_NOSIGNAL | extra) as u32)
                .build()
        }
        Op::Shutdown { fd, how } => opcode::Shutdown::new(types::Fd(*fd), *how).build(),
        Op::Fsync { fd, data_only } => {
            let flags = if *data_only {
                types::FsyncFlags::DATASYNC
            } else {
                types::FsyncFlags::empty()
            };
            opcode::Fsync::new(types::Fd(*fd)).flags(flags).build()
        }
        Op::PollReadable { fd } => {
            opcode::PollAdd::new(types::Fd(*fd), libc::POLLIN as u32).build()
        }
        Op::PollWritable { fd } => {
            opcode::PollAdd::new(types::Fd(*fd), libc::POLLOUT as u32).build()
        }
        // `Op` is non-exhaustive; `supports` refused kinds we do not know before we got here.
        _ => opcode::Nop::new().build(),
    }
}

/// Fills `record`'s msghdr for one buffer and an address; returns it.
fn fill_msghdr(
    record: &Record,
    buf: *mut u8,
    buf_len: usize,
    name: *mut libc::c_void,
    name_len: libc::socklen_t,
) -> *mut libc::msghdr {
    // SAFETY: the record is not in the kernel (we are about to submit it), and the driver is
    // single-threaded: nothing else reads or writes its msghdr/iovec now.
    unsafe {
        *record.iov.get() = libc::iovec {
            iov_base: buf.cast(),
            iov_len: buf_len.min(MAX_RW),
        };
        let msg = &mut *record.msg.get();
        *msg = std::mem::zeroed();
        msg.msg_name = name;
        msg.msg_namelen = name_len;
        msg.msg_iov = record.iov.get();
        msg.msg_iovlen = 1;
    }
    record.msg.get()
}

/// A buffer length as an SQE's `len`: at most `MAX_RW`, like the syscalls.
fn rw_len(len: usize) -> u32 {
    // MAX_RW < u32::MAX, so the conversion cannot fail.
    u32::try_from(len.min(MAX_RW)).unwrap_or(u32::MAX)
}

/// The operation's file descriptor.
fn op_fd(op: &Op<'_>) -> RawFd {
    match op {
        Op::Read { fd, .. }
        | Op::Write { fd, .. }
        | Op::Recv { fd, .. }
        | Op::Send { fd, .. }
        | Op::Accept { fd, .. }
        | Op::Connect { fd, .. }
        | Op::RecvFrom { fd, .. }
        | Op::SendTo { fd, .. }
        | Op::Shutdown { fd, .. }
        | Op::Fsync { fd, .. }
        | Op::PollReadable { fd }
        | Op::PollWritable { fd } => *fd,
        _ => -1,
    }
}

/// Whether an `EAGAIN` completion means "wait and retry" (the source is non-blocking) rather
/// than the answer the caller asked for (`MSG_DONTWAIT`).
fn retries_on_eagain(op: &Op<'_>) -> bool {
    match op {
        Op::Read { .. } | Op::Write { .. } | Op::Accept { .. } | Op::Connect { .. } => true,
        Op::Recv { flags, .. }
        | Op::Send { flags, .. }
        | Op::RecvFrom { flags, .. }
        | Op::SendTo { flags, .. } => flags & libc::MSG_DONTWAIT == 0,
        _ => false,
    }
}

/// The poll events an operation waits for.
fn wait_mask(op: &Op<'_>) -> i16 {
    match op {
        Op::Read { .. }
        | Op::Recv { .. }
        | Op::RecvFrom { .. }
        | Op::Accept { .. }
        | Op::PollReadable { .. } => libc::POLLIN,
        _ => libc::POLLOUT,
    }
}

/// A socket's pending error (`SO_ERROR`) as a completion result: 0 or `-errno`.
fn so_error(fd: RawFd) -> i32 {
    let mut err: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `getsockopt` writes at most `len` bytes into `err` and the length into `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&raw mut err).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        -io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    } else {
        -err
    }
}

/// A completion result as the syscall's.
fn to_result(res: i32) -> io::Result<usize> {
    if res < 0 {
        Err(io::Error::from_raw_os_error(-res))
    } else {
        Ok(res as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    fn pair() -> (UnixStream, UnixStream) {
        let (a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        (a, b)
    }

    /// Older kernels answer EAGAIN for non-blocking sockets; forced here with MSG_DONTWAIT
    /// (added by the driver, not asked for by the caller): `submit` polls and retries.
    #[test]
    fn eagain_is_answered_by_a_poll_and_a_retry() {
        let driver = UringDriver::new().unwrap();
        driver.set_force_nowait(true);
        let (a, b) = pair();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            let mut b = b;
            b.set_nonblocking(false).unwrap();
            b.write_all(b"retried").unwrap();
            b
        });
        let before = driver.stats();
        let mut buf = [0u8; 16];
        let n = driver
            .submit(
                Op::Recv {
                    fd: a.as_raw_fd(),
                    buf: &mut buf,
                    flags: 0,
                },
                None,
            )
            .unwrap();
        assert_eq!(&buf[..n], b"retried");
        // The receive, its poll, the receive again.
        assert_eq!(driver.stats().submissions - before.submissions, 3);
        let _b = writer.join().unwrap();
        // With a deadline the poll is what gets cancelled: TimedOut.
        let err = driver
            .submit(
                Op::Recv {
                    fd: a.as_raw_fd(),
                    buf: &mut buf,
                    flags: 0,
                },
                Some(Instant::now() + Duration::from_millis(20)),
            )
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        // Asked for by the caller, EAGAIN is the answer.
        let err = driver
            .submit(
                Op::Recv {
                    fd: a.as_raw_fd(),
                    buf: &mut buf,
                    flags: libc::MSG_DONTWAIT,
                },
                None,
            )
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(driver.in_flight(), 0);
    }

    /// Dropping the driver with an operation in the kernel: it is cancelled and reaped first.
    #[test]
    fn operations_in_flight_are_cancelled_and_reaped_on_drop() {
        let driver = UringDriver::new().unwrap();
        let (a, b) = pair();
        let buf: &'static mut [u8] = Box::leak(vec![0u8; 16].into_boxed_slice());
        let slot = driver.alloc();
        let entry = opcode::Recv::new(types::Fd(a.as_raw_fd()), buf.as_mut_ptr(), 16)
            .build()
            .user_data(slot as u64);
        // SAFETY: the buffer is leaked: valid forever.
        unsafe { driver.push_op(slot, &entry, None).unwrap() };
        driver.park(Some(Duration::ZERO)).unwrap();
        assert_eq!(driver.in_flight(), 1);
        let left = driver.inner.borrow_mut().cancel_in_flight(DROP_WAIT);
        assert_eq!(left, 0);
        assert_eq!(driver.record(slot).state.get(), Slot::Completed);
        assert_eq!(driver.record(slot).result.get(), -libc::ECANCELED);
        // The same through drop, with a fresh operation in flight.
        driver.record(slot).state.set(Slot::Idle);
        // SAFETY: as above.
        unsafe { driver.push_op(slot, &entry, None).unwrap() };
        driver.park(Some(Duration::ZERO)).unwrap();
        drop(driver);
        let mut b = b;
        b.set_nonblocking(false).unwrap();
        b.write_all(b"kept").unwrap();
        let mut a = a;
        a.set_nonblocking(false).unwrap();
        let mut got = [0u8; 4];
        a.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"kept");
    }

    /// A listener with one connection waiting in its backlog, and the client's end.
    fn listener_with_a_connection() -> (std::net::TcpListener, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        (listener, client)
    }

    /// Pushes a single accept on `listener` as `submit` would, without waiting for it.
    fn push_accept(driver: &UringDriver, listener: &std::net::TcpListener) -> usize {
        let slot = driver.alloc();
        driver.record(slot).accept.set(true);
        let entry = opcode::Accept::new(
            types::Fd(listener.as_raw_fd()),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
        .flags(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)
        .build()
        .user_data(slot as u64);
        // SAFETY: the entry holds no pointers (no address output).
        unsafe { driver.push_op(slot, &entry, None).unwrap() };
        slot
    }

    /// The server's end of `client`'s connection was closed: the client reads end-of-file
    /// (a leaked descriptor would keep it open: the read times out instead).
    fn assert_peer_closed(mut client: std::net::TcpStream) {
        let mut byte = [0u8; 1];
        let n = client
            .read(&mut byte)
            .expect("the accepted connection was closed");
        assert_eq!(n, 0);
    }

    /// An accept whose `submit` is gone (still in the kernel when the driver drops) and that
    /// completes with a connection: the driver closes it.
    #[test]
    fn an_unclaimed_accept_is_closed_when_the_driver_drops() {
        for defer_taskrun in [true, false] {
            let driver = UringConfig::new()
                .defer_taskrun(defer_taskrun)
                .build()
                .unwrap();
            let (listener, client) = listener_with_a_connection();
            push_accept(&driver, &listener);
            drop(driver);
            assert_peer_closed(client);
        }
    }

    /// `submit` unwinding with its accept in the kernel: the accept completes before the
    /// cancel, and the connection nobody will take is closed.
    #[test]
    fn an_accept_whose_submit_unwinds_is_closed() {
        for defer_taskrun in [true, false] {
            let driver = UringConfig::new()
                .defer_taskrun(defer_taskrun)
                .build()
                .unwrap();
            let (listener, client) = listener_with_a_connection();
            let slot = push_accept(&driver, &listener);
            drop(Pending {
                driver: &driver,
                slot,
            });
            assert_eq!(driver.in_flight(), 0);
            assert_peer_closed(client);
            // The record was released with its flag cleared.
            assert!(!driver.record(slot).accept.get());
        }
    }

    #[test]
    fn unparker_token_and_sleep_protocol() {
        let driver = UringDriver::new().unwrap();
        let unparker = driver.unparker.clone();
        assert!(!driver.unparker_notified());
        // Awake: the token is set, no eventfd write.
        unparker.unpark();
        assert!(driver.unparker_notified());
        // A pending token stops the sleep and is consumed.
        assert!(!unparker.begin_sleep());
        assert!(!driver.unparker_notified());
        // Asleep: unpark sets the token (and writes the eventfd); end_sleep consumes it.
        assert!(unparker.begin_sleep());
        unparker.unpark();
        assert!(driver.unparker_notified());
        unparker.end_sleep();
        assert!(!driver.unparker_notified());
        // That write completes the ring's poll: the next park returns at once.
        let start = Instant::now();
        driver.park(Some(Duration::from_secs(5))).unwrap();
        assert!(start.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn one_shot_wake_poll_fallback_rearms_and_drains() {
        // As on a kernel without multishot poll: one-shot, re-armed after each wake-up.
        let driver = UringDriver::new().unwrap();
        driver.park(Some(Duration::ZERO)).unwrap();
        {
            // End the multishot poll armed at start (as a kernel may, e.g. on CQ overflow).
            let mut inner = driver.inner.borrow_mut();
            inner.wake_multishot = false;
            let cancel = opcode::AsyncCancel::new(WAKE).build().user_data(IGNORE);
            // SAFETY: a cancel request holds no pointers.
            unsafe { inner.push(&cancel).unwrap() };
        }
        driver.park(Some(Duration::from_millis(100))).unwrap();
        assert!(
            !driver.inner.borrow().wake_armed,
            "the multishot poll ended"
        );
        let before = driver.stats().submissions;
        for _ in 0..3 {
            let unparker = driver.unparker();
            let t = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                unparker.unpark();
            });
            let start = Instant::now();
            driver.park(Some(Duration::from_secs(5))).unwrap();
            assert!(start.elapsed() < Duration::from_secs(2));
            t.join().unwrap();
        }
        // Armed again (one-shot) for each of the three sleeps.
        assert_eq!(driver.stats().submissions - before, 3);
        // Drained: no leftover readiness makes a park return early.
        driver.park(Some(Duration::ZERO)).unwrap();
        let start = Instant::now();
        driver.park(Some(Duration::from_millis(40))).unwrap();
        assert!(start.elapsed() >= Duration::from_millis(35));
    }
}
