//! What every IO type shares: how to wait for its source, whichever driver (or none) the
//! calling code runs under.
//!
//! Each operation picks one of three paths, decided afresh per call (a source may be used from
//! several runtimes and plain threads over its life):
//!
//! * **completion**: the current driver is a [`Proactor`] that supports the operation: submit it
//!   with the caller's buffer and park until it completes (the task is pinned to its thread
//!   meanwhile: the operation lives in this worker's ring or port);
//! * **readiness**: the current driver has a [`Reactor`]: try the non-blocking call; on
//!   `EWOULDBLOCK` register (once per reactor), wait in the source's [`ScheduledIo`], retry;
//! * **thread**: no runtime task here: try the non-blocking call; on `EWOULDBLOCK` block the
//!   thread in `poll(2)` (`WSAPoll` on Windows) until ready or the deadline, retry. The std
//!   types' behaviour, timeouts included.
//!
//! Sources are always in non-blocking mode, so all three paths can share one.

use std::io;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::driver::{Driver, Op, OpKind, Proactor, RawSource, Reactor};
use crate::scheduled::{Interest, Readiness, ScheduledIo};

/// One registration of a source with a reactor.
struct Registration {
    reactor: Arc<dyn Reactor>,
    io: Arc<ScheduledIo>,
}

impl Registration {
    /// Whether waits can go here: its driver lives, and has not shut this registration down
    /// (it does that to all at its end, and to one whose fd number was reused behind its back).
    fn is_live(&self) -> bool {
        self.reactor.is_alive() && !self.io.is_shutdown()
    }
}

/// The waiting machinery of one source.
///
/// Registrations are kept until the source is dropped (a source registers again only when it
/// moves to another runtime, or its registration was shut down). That lets `current` and
/// `latest` point at the latest one without a lock: what they point to (boxed) lives as long
/// as `self`. (`deregister` empties the list, but only with no operation in progress: at the
/// drop, or when the source is handed out by value.) One whose driver is gone keeps little:
/// the driver freed its registration table when it shut down, leaving the box, the
/// `ScheduledIo` and the reactor handle's own struct (about 300 bytes with epoll) per runtime
/// the source met. Freeing those while the source lives would need each call to announce
/// itself (two atomic read-modify-writes on every read and write), as a call may still be
/// reading one that was the latest when it started.
pub(crate) struct Evented {
    fd: RawSource,
    /// The latest registration's `ScheduledIo` (null: none yet), owned by `regs`.
    current: AtomicPtr<ScheduledIo>,
    /// The latest registration (null: none yet), owned by `regs`: a wait reaches it without
    /// the lock and without cloning its `Arc`s (the lock and the clones were eight atomic
    /// read-modify-writes per wait).
    latest: AtomicPtr<Registration>,
    /// Boxed on purpose (against clippy's `vec_box`): `latest` points into the boxes, which
    /// must not move when the vector grows.
    #[allow(clippy::vec_box)]
    regs: Mutex<Vec<Box<Registration>>>,
    /// Read and write timeouts in nanoseconds (`NO_TIMEOUT`: none).
    read_timeout: AtomicU64,
    write_timeout: AtomicU64,
    /// The driver whose proactor knows this source (its address; 0: none).
    proactor: AtomicUsize,
    /// The registration (its `ScheduledIo`, owned by `regs`; null: none) whose reactor
    /// reports half-closes apart ([`Reactor::reports_read_closed`]) — and urgent data, for a
    /// source that can carry it — so that a short stream read may clear its read readiness.
    /// Compared by address only.
    drains_io: AtomicPtr<ScheduledIo>,
    /// A TCP stream: its reads stop short at the urgent mark (see [`Readiness::PRIORITY`]).
    carries_urgent_data: bool,
    /// A wait (on a reactor, or in slices on the blocking pool) ends when the task is asked to
    /// cancel while it defers cancellation (for callers that cannot unwind: `hook_support`).
    stop_on_cancel: bool,
}

const NO_TIMEOUT: u64 = u64::MAX;

/// A source's readiness as its latest registration recorded it before a call (none: no
/// registration yet). Compared by address only, never dereferenced: a snapshot of another
/// source, or of a registration since replaced, clears nothing.
#[cfg(unix)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadinessSnapshot(Option<(*const ScheduledIo, crate::ReadyEvent)>);

#[cfg(unix)]
impl ReadinessSnapshot {
    /// No snapshot: the wait clears nothing.
    pub(crate) const NONE: ReadinessSnapshot = ReadinessSnapshot(None);
}

/// The largest buffer of a byte stream bounced through the heap for a task on a copying stack
/// (a stream's read or write may transfer less than asked, so larger buffers are served in
/// parts). A datagram's buffer is bounced whole: a part would cut the message.
const BOUNCE_MAX: usize = 64 * 1024;

/// In a runtime without an IO driver, a wait occupies a blocking-pool thread for at most this
/// long at a time (then the task checks for cancellation and waits again).
const OFFLOADED_WAIT_SLICE: Duration = Duration::from_millis(50);

/// What a source's reads and writes carry, which decides how much of a buffer on a copying
/// stack is bounced through the heap at a time.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Framing {
    /// A byte stream: a short count is a partial transfer the caller continues, so at most
    /// [`BOUNCE_MAX`] bytes are bounced per call.
    Stream,
    /// Messages: each call transfers one whole message, so the whole buffer is bounced (a
    /// smaller bounce would truncate the datagram).
    Datagram,
}

impl Framing {
    /// How many bytes of a `len`-byte buffer one bounced call covers.
    fn bounce_len(self, len: usize) -> usize {
        match self {
            Framing::Stream => len.min(BOUNCE_MAX),
            Framing::Datagram => len,
        }
    }
}

/// Which way an operation waits.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Direction {
    Read,
    Write,
}

impl Direction {
    fn interest(self) -> Interest {
        match self {
            Direction::Read => Interest::READABLE,
            Direction::Write => Interest::WRITABLE,
        }
    }
}

impl Evented {
    pub(crate) fn new(fd: RawSource) -> Evented {
        Evented::with_urgent_data(fd, false)
    }

    /// A TCP stream's: its reads stop short at the urgent mark.
    pub(crate) fn for_tcp_stream(fd: RawSource) -> Evented {
        Evented::with_urgent_data(fd, true)
    }

    fn with_urgent_data(fd: RawSource, carries_urgent_data: bool) -> Evented {
        Evented {
            fd,
            current: AtomicPtr::new(ptr::null_mut()),
            latest: AtomicPtr::new(ptr::null_mut()),
            regs: Mutex::new(Vec::new()),
            read_timeout: AtomicU64::new(NO_TIMEOUT),
            write_timeout: AtomicU64::new(NO_TIMEOUT),
            proactor: AtomicUsize::new(0),
            drains_io: AtomicPtr::new(ptr::null_mut()),
            carries_urgent_data,
            stop_on_cancel: false,
        }
    }

    /// A source whose reactor waits end on a deferred cancel request (see `stop_on_cancel`).
    #[cfg(unix)]
    pub(crate) fn stopping_on_cancel(fd: RawSource) -> Evented {
        let mut ev = Evented::with_urgent_data(fd, false);
        ev.stop_on_cancel = true;
        ev
    }

    #[allow(clippy::vec_box)] // see `regs`
    fn regs(&self) -> MutexGuard<'_, Vec<Box<Registration>>> {
        // Nothing is left half-done under this lock by a panic (a push or a read).
        self.regs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the timeout of one direction (`None`: wait for ever).
    ///
    /// # Errors
    ///
    /// A zero duration (`InvalidInput`, as std's `set_read_timeout`).
    pub(crate) fn set_timeout(&self, dir: Direction, timeout: Option<Duration>) -> io::Result<()> {
        let nanos = match timeout {
            Some(d) if d.is_zero() => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "cannot set a 0 duration timeout",
                ));
            }
            Some(d) => u64::try_from(d.as_nanos()).unwrap_or(NO_TIMEOUT - 1),
            None => NO_TIMEOUT,
        };
        self.slot(dir).store(nanos, Ordering::Relaxed);
        Ok(())
    }

    /// Takes over the timeouts a socket carries itself (`SO_RCVTIMEO`, `SO_SNDTIMEO`: where
    /// std's handles keep theirs), as std reads them; one that could not be read stays none.
    pub(crate) fn adopt_timeouts(
        &self,
        read: io::Result<Option<Duration>>,
        write: io::Result<Option<Duration>>,
    ) {
        for (dir, timeout) in [(Direction::Read, read), (Direction::Write, write)] {
            if let Ok(timeout @ Some(_)) = timeout {
                // std never reports a zero timeout, the one value `set_timeout` refuses.
                let _ = self.set_timeout(dir, timeout);
            }
        }
    }

    /// Gives `self` the timeouts of `other` (another handle on the same socket).
    pub(crate) fn copy_timeouts(&self, other: &Evented) {
        for dir in [Direction::Read, Direction::Write] {
            self.slot(dir)
                .store(other.slot(dir).load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    pub(crate) fn timeout(&self, dir: Direction) -> Option<Duration> {
        match self.slot(dir).load(Ordering::Relaxed) {
            NO_TIMEOUT => None,
            nanos => Some(Duration::from_nanos(nanos)),
        }
    }

    fn slot(&self, dir: Direction) -> &AtomicU64 {
        match dir {
            Direction::Read => &self.read_timeout,
            Direction::Write => &self.write_timeout,
        }
    }

    /// The deadline of an operation in `dir` that starts now.
    pub(crate) fn deadline(&self, dir: Direction) -> Option<Instant> {
        self.timeout(dir)
            .and_then(|t| Instant::now().checked_add(t))
    }

    /// The `ScheduledIo` of the latest registration, if any.
    fn current_io(&self) -> Option<&ScheduledIo> {
        let io = self.current.load(Ordering::Acquire);
        // SAFETY: `current` only ever points at the `ScheduledIo` of an entry of `regs`, whose
        // `Arc` is kept until `self` is dropped; the reference cannot outlive `&self`.
        (!io.is_null()).then(|| unsafe { &*io })
    }

    /// Runs a non-blocking call `op` until it does not fail with `EWOULDBLOCK`, waiting for
    /// `dir`'s readiness in between (readiness or thread path), until `deadline`.
    pub(crate) fn readiness_op<R>(
        &self,
        dir: Direction,
        deadline: Option<Instant>,
        op: impl FnMut() -> io::Result<R>,
    ) -> io::Result<R> {
        // Counted before the call (the yield this may make is a cancellation point, which after
        // the call would lose its result), so that a task whose source is always ready cannot
        // keep its worker for ever.
        spindle_park::consume_budget();
        self.readiness_loop(dir, deadline, op)
    }

    /// The readiness of the latest registration now, for
    /// [`readiness_op_after_would_block`](Evented::readiness_op_after_would_block): taken
    /// before a call that may fail with `EWOULDBLOCK`.
    #[cfg(unix)]
    pub(crate) fn readiness_snapshot(&self) -> ReadinessSnapshot {
        ReadinessSnapshot(
            self.current_io()
                .map(|io| (io as *const ScheduledIo, io.readiness())),
        )
    }

    /// [`readiness_op`](Evented::readiness_op) for a caller whose own call of `op` has just
    /// failed with `EWOULDBLOCK`, `snapshot` taken before that call: it waits first, instead
    /// of making the call once more. The wait clears the readiness the snapshot saw (if no
    /// event came since, as the loop of `readiness_op` does with its own snapshot), so an
    /// edge-triggered registration waits for the next event; every other wait path (a new
    /// registration, a poll operation, `poll(2)`) looks at the source itself.
    #[cfg(unix)]
    pub(crate) fn readiness_op_after_would_block<R>(
        &self,
        dir: Direction,
        deadline: Option<Instant>,
        snapshot: ReadinessSnapshot,
        op: impl FnMut() -> io::Result<R>,
    ) -> io::Result<R> {
        // Counted first, as in `readiness_op`.
        spindle_park::consume_budget();
        past_deadline(deadline)?;
        self.wait_ready(dir.interest(), deadline, snapshot.0)?;
        self.readiness_loop(dir, deadline, op)
    }

    /// The loop of [`readiness_op`](Evented::readiness_op), its budget counted.
    fn readiness_loop<R>(
        &self,
        dir: Direction,
        deadline: Option<Instant>,
        mut op: impl FnMut() -> io::Result<R>,
    ) -> io::Result<R> {
        loop {
            // The snapshot is taken before the call: an event that arrives after the call
            // failed moves the tick, and the clear below then erases nothing.
            let snapshot = self
                .current_io()
                .map(|io| (io as *const ScheduledIo, io.readiness()));
            match op() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                done => return done,
            }
            past_deadline(deadline)?;
            self.wait_ready(dir.interest(), deadline, snapshot)?;
        }
    }

    /// Waits until the source may be ready for `interest`, with no call made before (so no
    /// readiness to clear): a spurious return is possible, as documented where this is used.
    #[cfg(unix)]
    pub(crate) fn wait_ready_now(
        &self,
        interest: Interest,
        deadline: Option<Instant>,
    ) -> io::Result<()> {
        // Without a call to report "not ready", a readiness left set by an old event would end
        // this wait at once; so a zero-timeout poll decides first whether it is ready *now*.
        // The snapshot comes first: an event the reactor records after the poll then moves
        // the tick past it, and the clear in `wait_ready` leaves it alone (taken after the
        // poll, the snapshot would include that event, and the clear would erase it: with
        // edge-triggered readiness no second edge comes, and the wait would hang).
        let snapshot = self
            .current_io()
            .map(|io| (io as *const ScheduledIo, io.readiness()));
        if poll_thread(self.fd, interest, Some(Instant::now())).is_ok() {
            return Ok(());
        }
        self.wait_ready(interest, deadline, snapshot)
    }

    /// Waits until the source may be ready for `interest` (after a call failed with
    /// `EWOULDBLOCK`), or `deadline` (`TimedOut`).
    fn wait_ready(
        &self,
        interest: Interest,
        deadline: Option<Instant>,
        snapshot: Option<(*const ScheduledIo, crate::ReadyEvent)>,
    ) -> io::Result<()> {
        match crate::driver::current_driver(|d| d.has_reactor()) {
            Some(true) => {
                // Re-armed with the reactor that holds the registration, which is not the
                // current worker's when the source was registered on another one.
                let reg = self.registration()?;
                if let Some((at, event)) = snapshot
                    && ptr::eq(at, Arc::as_ptr(&reg.io))
                {
                    reg.io.clear_readiness(event, interest);
                }
                let waited = reg
                    .reactor
                    .rearm(self.fd, &reg.io, interest)
                    .and_then(|()| {
                        reg.io
                            .wait_inner(interest, deadline, self.stop_on_cancel)
                            .map(drop)
                    });
                match waited {
                    // That reactor's driver shut down meanwhile (its runtime ended): the
                    // caller's next try registers with the current one (`registration` passes
                    // over this one now), as `ScheduledIo::shutdown` intends.
                    Err(_) if !reg.is_live() => Ok(()),
                    waited => waited,
                }
            }
            // A completion driver (its operations were not used for this call), or no task:
            // wait for the source itself. In a task on a completion driver, the proactor's
            // poll operation suspends only the task; elsewhere the thread blocks.
            Some(false) => self.poll_via_proactor(interest, deadline),
            // A task of a runtime without an IO driver: the wait goes to the blocking pool, so
            // only this task waits (with no pool installed, `offload` runs it right here).
            None if spindle_park::in_task() => self.wait_offloaded(interest, deadline),
            None => poll_thread(self.fd, interest, deadline),
        }
    }

    /// Waits for readiness on a blocking-pool thread (`poll_thread` there) while only the
    /// calling task waits.
    fn wait_offloaded(&self, interest: Interest, deadline: Option<Instant>) -> io::Result<()> {
        // In slices, so that a cancellation (carried out when each slice returns) is not held
        // off until the source becomes ready.
        let fd = self.fd;
        loop {
            let slice_end = Instant::now() + OFFLOADED_WAIT_SLICE;
            let until = deadline.map_or(slice_end, |d| d.min(slice_end));
            match crate::offload(move || poll_thread(fd, interest, Some(until)))? {
                Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(e);
                    }
                    if self.stop_on_cancel && spindle_park::cancel_requested() {
                        return Err(io::Error::from(io::ErrorKind::Interrupted));
                    }
                }
                done => return done,
            }
        }
    }

    /// The registration to wait in: the latest one while it is live (its driver lives,
    /// whichever worker that is: its events wake us wherever we run), else a new one with the
    /// current worker's reactor. Called in a task whose driver has a reactor.
    fn registration(&self) -> io::Result<&Registration> {
        let latest = self.latest.load(Ordering::Acquire);
        if !latest.is_null() {
            // SAFETY: `latest` points at a boxed entry of `regs`, kept until `self` is dropped
            // or handed out (see the type's docs); the reference cannot outlive `&self`.
            let reg = unsafe { &*latest };
            if reg.is_live() {
                return Ok(reg);
            }
        }
        let current = crate::driver::current_driver(|d| d.reactor())
            .flatten()
            .ok_or_else(|| io::Error::other("no IO reactor on this thread"))?;
        let mut regs = self.regs();
        if let Some(latest) = regs.last()
            && latest.is_live()
        {
            // Another thread registered meanwhile.
            let reg: *const Registration = &**latest;
            // SAFETY: as above (a boxed entry of `regs`).
            return Ok(unsafe { &*reg });
        }
        let io = current.register(self.fd)?;
        if current.reports_read_closed()
            && (!self.carries_urgent_data || current.reports_urgent_data())
        {
            self.drains_io
                .store(Arc::as_ptr(&io).cast_mut(), Ordering::Relaxed);
        }
        self.current
            .store(Arc::as_ptr(&io).cast_mut(), Ordering::Release);
        let reg = Box::new(Registration {
            reactor: current,
            io,
        });
        let at: *const Registration = &*reg;
        regs.push(reg);
        self.latest.store(at.cast_mut(), Ordering::Release);
        // SAFETY: as above: the box now belongs to `regs`.
        Ok(unsafe { &*at })
    }

    fn poll_via_proactor(&self, interest: Interest, deadline: Option<Instant>) -> io::Result<()> {
        #[cfg(unix)]
        {
            let _pin = spindle_park::pin_to_thread();
            let result = crate::driver::current_driver(|d| match d.proactor() {
                Some(p) if p.supports(OpKind::Poll) => {
                    let op = if interest.is_readable() {
                        Op::PollReadable { fd: self.fd }
                    } else {
                        Op::PollWritable { fd: self.fd }
                    };
                    Some(p.submit(op, deadline).map(drop))
                }
                _ => None,
            });
            if let Some(Some(done)) = result {
                return done;
            }
        }
        // No poll operation (IOCP has none): the wait goes to the blocking pool in a task, so
        // that it does not block the worker's thread and the other tasks on it.
        if spindle_park::in_task() {
            self.wait_offloaded(interest, deadline)
        } else {
            poll_thread(self.fd, interest, deadline)
        }
    }

    /// Runs `submit` with the current proactor if there is one that supports `kind`; `None`
    /// means "no completion path here: use the readiness path".
    pub(crate) fn completion<R>(
        &self,
        kind: OpKind,
        submit: impl FnOnce(&dyn Proactor, RawSource) -> io::Result<R>,
    ) -> Option<io::Result<R>> {
        // A readiness driver answers here, with one thread-local load: this runs on every read
        // and write. (`current` is `None` outside a task.)
        if !crate::driver::current_may_complete() {
            return None;
        }
        crate::driver::current_driver(|d: &dyn Driver| {
            let p = d.proactor()?;
            if !p.supports(kind) {
                return None;
            }
            // The operation lives in this worker's ring or port: cancelling it must happen
            // there.
            let _pin = spindle_park::pin_to_thread();
            if let Err(e) = self.proactor_registration(d) {
                return Some(Err(e));
            }
            Some(submit(p, self.fd))
        })
        .flatten()
    }

    /// Whether operations here would go through a proactor.
    pub(crate) fn has_proactor(&self) -> bool {
        crate::driver::current_may_complete()
            && spindle_park::in_task()
            && crate::driver::current_driver(|d| d.proactor().is_some()).unwrap_or(false)
    }

    /// Tells the current proactor about this source once (IOCP associates the socket).
    fn proactor_registration(&self, driver: &dyn Driver) -> io::Result<()> {
        let id = driver as *const dyn Driver as *const () as usize;
        if self.proactor.load(Ordering::Acquire) == id {
            return Ok(());
        }
        let p = driver
            .proactor()
            .ok_or_else(|| io::Error::other("no proactor"))?;
        p.register(self.fd)?;
        self.proactor.store(id, Ordering::Release);
        Ok(())
    }

    /// A read-like operation: through the proactor (`make` builds the op on a buffer; buffers
    /// on a copying stack are bounced through the heap, as `framing` says), else the
    /// non-blocking call `nb` with readiness waits.
    pub(crate) fn read_op(
        &self,
        kind: OpKind,
        framing: Framing,
        buf: &mut [u8],
        deadline: Option<Instant>,
        make: impl for<'b> FnOnce(RawSource, &'b mut [u8]) -> Op<'b>,
        mut nb: impl FnMut(&mut [u8]) -> io::Result<usize>,
    ) -> io::Result<usize> {
        self.read_op_with(
            kind,
            framing,
            buf,
            deadline,
            make,
            |b| Ok((nb(b)?, true)),
            false,
        )
    }

    /// A read of a byte stream (TCP, a Unix stream socket, a pipe): as
    /// [`read_op`](Evented::read_op), but on the readiness path a read that returns less than
    /// it asked for has drained the kernel's queue, so it clears the read readiness (if no
    /// event came since it was read), and the next read waits for an event instead of making
    /// a call that would fail with `EWOULDBLOCK` — one system call less per message (tokio
    /// does the same on epoll and kqueue). Not for peeks or datagrams: there a short read
    /// leaves data queued.
    ///
    /// `nb` returns the count and whether a short count may mean the end of the queue: a Unix
    /// socket's read also stops at a message that carried descriptors or credentials, and at
    /// each record of a `SOCK_SEQPACKET` socket; a pipe's at each write of a packet-mode pipe,
    /// a terminal's at each line (then `false`). A TCP read also stops at the urgent mark: a stream that can carry urgent data
    /// ([`Evented::for_tcp_stream`]) clears only where its reactor reports it
    /// ([`Readiness::PRIORITY`]), and not once any came.
    pub(crate) fn read_stream_op(
        &self,
        kind: OpKind,
        framing: Framing,
        buf: &mut [u8],
        deadline: Option<Instant>,
        make: impl for<'b> FnOnce(RawSource, &'b mut [u8]) -> Op<'b>,
        nb: impl FnMut(&mut [u8]) -> io::Result<(usize, bool)>,
    ) -> io::Result<usize> {
        self.read_op_with(kind, framing, buf, deadline, make, nb, true)
    }

    /// `drains`: a short count may clear the read readiness (see `read_stream_op`).
    #[allow(clippy::too_many_arguments)] // the private common part of the two above
    fn read_op_with(
        &self,
        kind: OpKind,
        framing: Framing,
        buf: &mut [u8],
        deadline: Option<Instant>,
        make: impl for<'b> FnOnce(RawSource, &'b mut [u8]) -> Op<'b>,
        mut nb: impl FnMut(&mut [u8]) -> io::Result<(usize, bool)>,
        drains: bool,
    ) -> io::Result<usize> {
        if let Some(r) = self.completion(kind, |p, fd| {
            if spindle_park::on_copying_stack() {
                // Invariant 3: the kernel must not hold a pointer into a stack whose bytes move
                // while the task is suspended.
                let mut bounce = vec![0u8; framing.bounce_len(buf.len())];
                let n = p.submit(make(fd, &mut bounce), deadline)?;
                let n = n.min(bounce.len());
                buf[..n].copy_from_slice(&bounce[..n]);
                Ok(n)
            } else {
                p.submit(make(fd, buf), deadline)
            }
        }) {
            return r;
        }
        if drains {
            let len = buf.len();
            self.readiness_stream_read(deadline, len, || nb(buf))
        } else {
            self.readiness_op(Direction::Read, deadline, || nb(buf).map(|(n, _)| n))
        }
    }

    /// The readiness path of [`read_stream_op`](Evented::read_stream_op): `op` reads at most
    /// `len` bytes and says whether a short count may mean the end of the queue.
    fn readiness_stream_read(
        &self,
        deadline: Option<Instant>,
        len: usize,
        mut op: impl FnMut() -> io::Result<(usize, bool)>,
    ) -> io::Result<usize> {
        // Counted first, as in `readiness_op`.
        spindle_park::consume_budget();
        let mut waited = false;
        loop {
            let snapshot = self
                .current_io()
                .map(|io| (io as *const ScheduledIo, io.readiness()));
            if !waited
                && let Some((_, event)) = snapshot
                && !event.readiness.satisfies(Interest::READABLE)
            {
                // Drained by an earlier read, and no event since: the call would fail with
                // EWOULDBLOCK. Wait for an event first (every wait path checks the source
                // itself: an edge-triggered registration reports data that arrives after the
                // drain, a new registration or poll(2) reports data already there). Once only:
                // after any wait the call is made, as the paths that do not go through this
                // registration (poll(2), the blocking pool) leave its readiness as it was.
                waited = true;
                self.wait_ready(Interest::READABLE, deadline, None)?;
                continue;
            }
            match op() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                done => {
                    if let Ok((n, short_means_end)) = done
                        && n > 0
                        && n < len
                        && short_means_end
                        && let Some((at, event)) = snapshot
                        && !event.readiness.contains(Readiness::PRIORITY)
                        && ptr::eq(at, self.drains_io.load(Ordering::Relaxed))
                        && let Some(io) = self.current_io()
                        && ptr::eq(at, io)
                    {
                        // A short read: the queue is empty now. Cleared only if no event came
                        // since the snapshot (the tick), so an arrival is never erased. (Urgent
                        // data that came since moved the tick too.)
                        io.clear_drained(event);
                    }
                    return done.map(|(n, _)| n);
                }
            }
            waited = true;
            past_deadline(deadline)?;
            self.wait_ready(Interest::READABLE, deadline, snapshot)?;
        }
    }

    /// A write-like operation; see [`read_op`](Evented::read_op).
    pub(crate) fn write_op(
        &self,
        kind: OpKind,
        framing: Framing,
        buf: &[u8],
        deadline: Option<Instant>,
        make: impl for<'b> FnOnce(RawSource, &'b [u8]) -> Op<'b>,
        mut nb: impl FnMut(&[u8]) -> io::Result<usize>,
    ) -> io::Result<usize> {
        if let Some(r) = self.completion(kind, |p, fd| {
            // A socket send almost always finds room in the socket buffer: the plain
            // non-blocking call then does it at once, where a submission would cost a ring
            // entry, a completion and, often, one more system call to reap it. Only when the
            // buffer is full does the send go to the ring. (io_uring only: an IOCP socket's
            // sends stay overlapped.)
            #[cfg(unix)]
            if kind == OpKind::Send {
                // Counted before the call, as in `readiness_op`.
                spindle_park::consume_budget();
                match nb(buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    done => return done,
                }
            }
            if spindle_park::on_copying_stack() {
                let bounce = buf[..framing.bounce_len(buf.len())].to_vec();
                p.submit(make(fd, &bounce), deadline)
            } else {
                p.submit(make(fd, buf), deadline)
            }
        }) {
            return r;
        }
        self.readiness_op(Direction::Write, deadline, || nb(buf))
    }

    /// Removes every live registration (before the source is closed or handed out).
    pub(crate) fn deregister(&self) {
        let regs = std::mem::take(&mut *self.regs());
        self.current.store(ptr::null_mut(), Ordering::Release);
        self.latest.store(ptr::null_mut(), Ordering::Release);
        self.drains_io.store(ptr::null_mut(), Ordering::Relaxed);
        for reg in regs {
            if reg.reactor.is_alive() {
                // An error means the fd is already gone from the reactor; nothing to undo.
                let _ = reg.reactor.deregister(self.fd, &reg.io);
            }
        }
    }
}

impl Drop for Evented {
    fn drop(&mut self) {
        self.deregister();
    }
}

impl std::fmt::Debug for Evented {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Evented")
            .field("fd", &self.fd)
            .field("registrations", &self.regs().len())
            .finish()
    }
}

/// `TimedOut` once `deadline` has passed. Checked after each call that would block, before the
/// wait: a wait that ends at once (a source the OS keeps reporting ready while its call
/// answers `EWOULDBLOCK` — a datagram socket shut down for reading, under `poll(2)` or a
/// one-shot reactor) never reaches the deadline check inside the wait.
fn past_deadline(deadline: Option<Instant>) -> io::Result<()> {
    match deadline {
        Some(d) if Instant::now() >= d => Err(io::Error::from(io::ErrorKind::TimedOut)),
        _ => Ok(()),
    }
}

/// `poll(2)`'s timeout for `deadline`: -1 for none, 0 when it has passed, else the time left
/// rounded *up* to whole milliseconds (a deadline 0.3 ms away must not become a busy 0 ms
/// poll).
fn poll_timeout_ms(deadline: Option<Instant>) -> i32 {
    match deadline {
        None => -1,
        Some(deadline) => {
            let left = deadline.saturating_duration_since(Instant::now());
            i32::try_from(left.as_nanos().div_ceil(1_000_000)).unwrap_or(i32::MAX)
        }
    }
}

/// Blocks the thread until `fd` is ready for `interest` or `deadline` passes (a deadline that
/// has passed still polls once).
#[cfg(unix)]
pub(crate) fn poll_thread(
    fd: RawSource,
    interest: Interest,
    deadline: Option<Instant>,
) -> io::Result<()> {
    let mut events = 0;
    if interest.is_readable() {
        events |= libc::POLLIN | libc::POLLPRI;
    }
    if interest.is_writable() {
        events |= libc::POLLOUT;
    }
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    loop {
        let timeout_ms = poll_timeout_ms(deadline);
        // SAFETY: `pfd` is a valid pollfd for the duration of the call; nfds = 1.
        let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        match n {
            -1 => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            0 if timeout_ms >= 0 && deadline.is_none_or(|d| Instant::now() >= d) => {
                return Err(io::Error::from(io::ErrorKind::TimedOut));
            }
            0 => {}
            _ => return Ok(()), // ready, or an error/hang-up the next call reports
        }
    }
}

/// Blocks the thread until `socket` is ready for `interest` or `deadline` passes.
#[cfg(windows)]
pub(crate) fn poll_thread(
    socket: RawSource,
    interest: Interest,
    deadline: Option<Instant>,
) -> io::Result<()> {
    use windows_sys::Win32::Networking::WinSock::{
        POLLRDNORM, POLLWRNORM, SOCKET_ERROR, WSAPOLLFD, WSAPoll,
    };
    let mut events = 0;
    if interest.is_readable() {
        events |= POLLRDNORM;
    }
    if interest.is_writable() {
        events |= POLLWRNORM;
    }
    let mut pfd = WSAPOLLFD {
        fd: socket as _,
        events,
        revents: 0,
    };
    loop {
        let timeout_ms = poll_timeout_ms(deadline);
        // SAFETY: `pfd` is a valid WSAPOLLFD for the duration of the call; count = 1.
        let n = unsafe { WSAPoll(&mut pfd, 1, timeout_ms) };
        match n {
            SOCKET_ERROR => return Err(io::Error::last_os_error()),
            0 if timeout_ms >= 0 && deadline.is_none_or(|d| Instant::now() >= d) => {
                return Err(io::Error::from(io::ErrorKind::TimedOut));
            }
            0 => {}
            _ => return Ok(()),
        }
    }
}
