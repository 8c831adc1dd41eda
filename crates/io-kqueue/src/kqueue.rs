//! The driver. See the crate docs.

use std::cell::RefCell;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use spindle_io::registrations::{Key, Registrations};
use spindle_io::{Driver, RawSource, Reactor, Readiness, ScheduledIo, Unpark};

/// How many events one `kevent` call returns at most; more wait for the next `park`.
const EVENTS: usize = 256;

/// The `ident` of the `EVFILT_USER` event that [`Unpark`] triggers (idents of user events are
/// their own namespace, apart from file descriptors).
const WAKE_IDENT: usize = 0;

/// The longest wait one `kevent` call is asked for; a longer `park` returns after it (a
/// spurious return, which the runtime's loop absorbs). Keeps the timespec far from any
/// overflow in the kernel's conversion to its clock.
const MAX_WAIT_SECS: u64 = 1 << 30;

/// A readiness driver on one kqueue. Made on the worker thread that parks in it; not `Send`.
///
/// ```no_run
/// use spindle_io::Driver;
/// use spindle_io_kqueue::KqueueDriver;
///
/// let driver = KqueueDriver::new()?;
/// let reactor = driver.reactor().expect("kqueue is a readiness backend");
/// let unparker = driver.unparker();
/// std::thread::spawn(move || unparker.unpark());
/// driver.park(None)?; // returns once the other thread has unparked it
/// # drop(reactor);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct KqueueDriver {
    shared: Arc<Shared>,
    /// `kevent`'s output buffer, reused by every `park`.
    events: RefCell<Vec<libc::kevent>>,
    /// The sources of one batch of events, dispatched outside the table's lock.
    ready: RefCell<Vec<(Arc<ScheduledIo>, Readiness)>>,
}

/// What the driver shares with its [`Reactor`] and [`Unpark`] handles, which any thread may
/// hold and which may outlive the driver.
struct Shared {
    /// Closed when the last handle goes, not when the driver does: a handle that outlives the
    /// driver must never use a descriptor number that was closed and reused meanwhile.
    kq: OwnedFd,
    table: Mutex<Table>,
    /// The driver may be blocked in (or about to block in) `kevent`; see [`Shared::unpark`].
    sleeping: AtomicBool,
    /// An unpark happened that no `park` has consumed yet (the token).
    notified: AtomicBool,
}

/// The registered sources. A registration's kqueue `udata` is a token (slot index and
/// generation, each half of a `usize`), never a pointer: an event for a source deregistered
/// meanwhile finds a newer generation (or an empty slot) and is dropped, and no kernel-held
/// pointer can dangle.
struct Table {
    /// False once the driver is gone; checked under this lock by `register`.
    alive: bool,
    sources: Registrations<RawFd, Arc<ScheduledIo>>,
}

/// A zeroed `kevent` with the given fields (the struct's other fields differ between the BSDs).
fn kevent(ident: usize, filter: i16, flags: u16, fflags: u32, udata: usize) -> libc::kevent {
    // SAFETY: `kevent` is a plain C struct of integers and a pointer; all-zero is a valid value.
    let mut ev: libc::kevent = unsafe { std::mem::zeroed() };
    ev.ident = ident;
    ev.filter = filter;
    ev.flags = flags;
    ev.fflags = fflags;
    ev.udata = udata as *mut libc::c_void;
    ev
}

impl Shared {
    fn table(&self) -> MutexGuard<'_, Table> {
        // Nothing panics while holding the lock in a way that leaves the table half-updated
        // (each update is a few infallible steps), so a poisoned lock is used as is.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies `changes` with `EV_RECEIPT`, so that each reports its own result; returns the
    /// `errno` of each change (0: applied).
    fn apply(&self, changes: &mut [libc::kevent]) -> io::Result<Vec<i32>> {
        for change in changes.iter_mut() {
            change.flags |= libc::EV_RECEIPT;
        }
        let mut receipts: Vec<libc::kevent> = changes.to_vec();
        let n = changes.len() as libc::c_int;
        // SAFETY: `changes` and `receipts` are valid arrays of `n` kevents each (the latter
        // writable); a null timeout is allowed (with EV_RECEIPT the call does not wait).
        let r = unsafe {
            libc::kevent(
                self.kq.as_raw_fd(),
                changes.as_ptr(),
                n,
                receipts.as_mut_ptr(),
                n,
                ptr::null(),
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let received = usize::try_from(r).unwrap_or(0).min(receipts.len());
        let mut errors = vec![0; changes.len()];
        for receipt in &receipts[..received] {
            // Each receipt is one change (EV_ERROR set, `data` the errno or 0), in order; match
            // by filter all the same.
            if let Some(i) = changes
                .iter()
                .position(|c| c.filter == receipt.filter && c.ident == receipt.ident)
                && receipt.flags & libc::EV_ERROR != 0
            {
                errors[i] = receipt.data as i32;
            }
        }
        Ok(errors)
    }

    /// Triggers the `EVFILT_USER` event, which ends a `kevent` wait.
    fn trigger(&self) {
        let change = kevent(WAKE_IDENT, libc::EVFILT_USER, 0, libc::NOTE_TRIGGER, 0);
        // SAFETY: one valid change, no event list, no timeout.
        let r = unsafe {
            libc::kevent(
                self.kq.as_raw_fd(),
                &change,
                1,
                ptr::null_mut(),
                0,
                ptr::null(),
            )
        };
        // A failure here cannot be reported (unpark returns nothing) and is not expected on a
        // kqueue we own with its user event registered: the wait then ends at its timeout.
        let _ = r;
    }
}

/// # No lost wake-ups
///
/// `unpark` sets `notified` and then reads `sleeping`; `park` sets `sleeping` and then takes
/// `notified` before it waits. All four are `SeqCst`, so they are totally ordered: either
/// `unpark`'s read sees `sleeping` (it triggers the user event, which ends or prevents the
/// wait — a triggered `EV_CLEAR` user event stays pending until a `kevent` returns it), or
/// `park`'s take sees the token (it does not block). An `unpark` that finds a token already
/// set returns at once: the one that set it did the above. After its wait, `park` clears
/// `sleeping` and takes the token, so a wake-up that came meanwhile is consumed by this
/// return, whose caller then looks at its queues (the take synchronises with the `unpark`).
/// A trigger that lands after the wait ended makes the next `park` return early once:
/// spurious, never lost.
impl Unpark for Shared {
    fn unpark(&self) {
        if self.notified.swap(true, Ordering::SeqCst) {
            return;
        }
        if self.sleeping.load(Ordering::SeqCst) {
            self.trigger();
        }
    }
}

impl Reactor for Shared {
    fn register(&self, source: RawSource) -> io::Result<Arc<ScheduledIo>> {
        let io = Arc::new(ScheduledIo::new());
        let (inserted, replaced) = {
            let mut table = self.table();
            if !table.alive {
                return Err(dead());
            }
            let inserted = table.sources.insert(source, io.clone());
            // The same number registered again: the old descriptor was closed without a
            // deregister (closing removed its kqueue filters). Its registration is stale.
            let replaced = match inserted {
                Ok((_, Some(previous))) => table.sources.remove(previous),
                _ => None,
            };
            (inserted, replaced)
        };
        if let Some(old) = replaced {
            old.shutdown();
        }
        let (key, _) = inserted?;
        // The table's tokens are `usize::BITS` wide.
        let token = key.token() as usize;
        let ident = source as usize;
        let flags = libc::EV_ADD | libc::EV_CLEAR;
        let mut changes = [
            kevent(ident, libc::EVFILT_READ, flags, 0, token),
            kevent(ident, libc::EVFILT_WRITE, flags, 0, token),
        ];
        let errors = match self.apply(&mut changes) {
            Ok(errors) => errors,
            Err(e) => {
                self.forget(source, key);
                return Err(with_context(e, "kevent(EV_ADD) for a new source"));
            }
        };
        let mut closed = Readiness::EMPTY;
        for (i, &errno) in errors.iter().enumerate() {
            match errno {
                0 => {}
                // A pipe whose other end is gone refuses the filter (seen on macOS): the
                // direction is closed, which the readiness says, so its waits end at once.
                libc::EPIPE => {
                    closed = closed.add(if i == 0 {
                        Readiness::READ_CLOSED
                    } else {
                        Readiness::WRITE_CLOSED
                    });
                }
                errno => {
                    // Undo whatever was added, then report.
                    let mut undo = [
                        kevent(ident, libc::EVFILT_READ, libc::EV_DELETE, 0, 0),
                        kevent(ident, libc::EVFILT_WRITE, libc::EV_DELETE, 0, 0),
                    ];
                    let _ = self.apply(&mut undo);
                    self.forget(source, key);
                    return Err(with_context(
                        io::Error::from_raw_os_error(errno),
                        "kevent(EV_ADD) refused the source",
                    ));
                }
            }
        }
        if !closed.is_empty() {
            io.set_readiness(closed);
        }
        Ok(io)
    }

    fn deregister(&self, source: RawSource, io: &ScheduledIo) -> io::Result<()> {
        // `None`: not registered here (or the driver is gone and dropped its table), or the
        // number was registered again since (this registration was replaced and shut down) and
        // the filters now belong to the newer one.
        let Some(removed) = self.table().sources.unbind(source, io) else {
            return Ok(());
        };
        drop(removed);
        let ident = source as usize;
        let mut changes = [
            kevent(ident, libc::EVFILT_READ, libc::EV_DELETE, 0, 0),
            kevent(ident, libc::EVFILT_WRITE, libc::EV_DELETE, 0, 0),
        ];
        let errors = self
            .apply(&mut changes)
            .map_err(|e| with_context(e, "kevent(EV_DELETE)"))?;
        // ENOENT: that filter was never added (EPIPE at registration) or is gone already.
        match errors.into_iter().find(|&e| e != 0 && e != libc::ENOENT) {
            None => Ok(()),
            Some(errno) => Err(with_context(
                io::Error::from_raw_os_error(errno),
                "kevent(EV_DELETE) (the registration is dropped anyway)",
            )),
        }
    }

    fn is_alive(&self) -> bool {
        self.table().alive
    }

    fn reports_read_closed(&self) -> bool {
        true // EV_EOF on the read filter
    }

    fn reports_urgent_data(&self) -> bool {
        // Apple's read filter flags a socket's out-of-band data with `EV_OOBAND`; elsewhere
        // we know of no such flag, so TCP streams keep the extra call there.
        cfg!(target_vendor = "apple")
    }
}

impl Shared {
    /// Drops the registration of `source` under `key`, if it is still there (a failed
    /// `register`; the registration it replaced is already gone).
    fn forget(&self, source: RawFd, key: Key) {
        self.table().sources.abort(source, key, None);
    }
}

fn dead() -> io::Error {
    io::Error::other(
        "the kqueue driver this reactor belongs to has shut down: register the source with the \
         current driver",
    )
}

fn with_context(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// The readiness a kqueue event reports.
fn readiness_of(ev: &libc::kevent) -> Readiness {
    let mut r = Readiness::EMPTY;
    if ev.flags & libc::EV_ERROR != 0 {
        return Readiness::ERROR;
    }
    let eof = ev.flags & libc::EV_EOF != 0;
    if ev.filter == libc::EVFILT_READ {
        r = r.add(Readiness::READABLE);
        if eof {
            r = r.add(Readiness::READ_CLOSED);
        }
        #[cfg(target_vendor = "apple")]
        if ev.flags & libc::EV_OOBAND != 0 {
            r = r.add(Readiness::PRIORITY);
        }
    } else if ev.filter == libc::EVFILT_WRITE {
        r = r.add(Readiness::WRITABLE);
        if eof {
            r = r.add(Readiness::WRITE_CLOSED);
        }
    }
    // With EV_EOF, a socket's pending error (if any) is in `fflags`.
    if eof && ev.fflags != 0 {
        r = r.add(Readiness::ERROR);
    }
    r
}

fn timespec(timeout: Duration) -> libc::timespec {
    let secs = timeout.as_secs().min(MAX_WAIT_SECS);
    libc::timespec {
        tv_sec: libc::time_t::try_from(secs).unwrap_or(libc::time_t::MAX),
        // Below 10^9: fits any `c_long`.
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    }
}

impl KqueueDriver {
    /// A driver with a new kqueue (close-on-exec) and its wake-up event registered.
    ///
    /// # Errors
    ///
    /// `kqueue()` failed (`EMFILE`/`ENFILE`: out of file descriptors, `ENOMEM`), or the
    /// `EVFILT_USER` event could not be added; the message says which.
    pub fn new() -> io::Result<Self> {
        // SAFETY: no arguments; returns a new descriptor or -1.
        let fd = unsafe { libc::kqueue() };
        if fd < 0 {
            let e = io::Error::last_os_error();
            let hint = match e.raw_os_error() {
                Some(libc::EMFILE) | Some(libc::ENFILE) => {
                    " (out of file descriptors: close some or raise the limit, `ulimit -n`)"
                }
                _ => "",
            };
            return Err(io::Error::new(e.kind(), format!("kqueue(): {e}{hint}")));
        }
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        let kq = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: fcntl on a descriptor we own; F_SETFD takes an int flag.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
            return Err(with_context(
                io::Error::last_os_error(),
                "fcntl(FD_CLOEXEC) on the kqueue",
            ));
        }
        let shared = Arc::new(Shared {
            kq,
            table: Mutex::new(Table {
                alive: true,
                sources: Registrations::new("kqueue", usize::BITS, 1 << (usize::BITS / 2)),
            }),
            sleeping: AtomicBool::new(false),
            notified: AtomicBool::new(false),
        });
        let mut wake = [kevent(
            WAKE_IDENT,
            libc::EVFILT_USER,
            libc::EV_ADD | libc::EV_CLEAR,
            libc::NOTE_FFNOP,
            0,
        )];
        let errors = shared
            .apply(&mut wake)
            .map_err(|e| with_context(e, "kevent(EVFILT_USER)"))?;
        if let Some(&errno) = errors.iter().find(|&&e| e != 0) {
            return Err(with_context(
                io::Error::from_raw_os_error(errno),
                "kevent(EVFILT_USER) refused",
            ));
        }
        Ok(KqueueDriver {
            shared,
            events: RefCell::new(Vec::with_capacity(EVENTS)),
            ready: RefCell::new(Vec::new()),
        })
    }

    /// The kqueue's descriptor (for diagnostics; the driver owns it).
    pub fn as_raw_fd(&self) -> RawFd {
        self.shared.kq.as_raw_fd()
    }

    /// One `kevent` wait and the dispatch of what it returned.
    fn wait(&self, timeout: Option<Duration>) -> io::Result<usize> {
        let (Ok(mut events), Ok(mut ready)) =
            (self.events.try_borrow_mut(), self.ready.try_borrow_mut())
        else {
            return Err(io::Error::other(
                "KqueueDriver::park called re-entrantly (from a waker it was dispatching)",
            ));
        };
        events.clear();
        let blocking = timeout != Some(Duration::ZERO);
        let mut timeout = timeout;
        if blocking {
            // See `impl Unpark for Shared` for why this order never loses a wake-up.
            self.shared.sleeping.store(true, Ordering::SeqCst);
            if self.shared.notified.swap(false, Ordering::SeqCst) {
                timeout = Some(Duration::ZERO);
            }
        }
        let ts = timeout.map(timespec);
        let ts_ptr = ts
            .as_ref()
            .map_or(ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: `events` has room for `EVENTS` kevents (its capacity); the kernel writes at
        // most that many, and we set the length to what it reports below. `ts_ptr` is null or
        // points to `ts`, alive for the call.
        let n = unsafe {
            libc::kevent(
                self.shared.kq.as_raw_fd(),
                ptr::null(),
                0,
                events.as_mut_ptr(),
                EVENTS as libc::c_int,
                ts_ptr,
            )
        };
        let os_error = (n < 0).then(io::Error::last_os_error);
        if blocking {
            self.shared.sleeping.store(false, Ordering::SeqCst);
            // A token set while we slept is consumed by this return.
            self.shared.notified.swap(false, Ordering::SeqCst);
        }
        if let Some(e) = os_error {
            // Interrupted by a signal: a spurious return, which the caller's loop absorbs.
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(0);
            }
            return Err(with_context(e, "kevent() wait"));
        }
        let n = usize::try_from(n).unwrap_or(0).min(EVENTS);
        // SAFETY: the kernel initialised the first `n` entries, within the capacity.
        unsafe { events.set_len(n) };

        ready.clear();
        {
            let table = self.shared.table();
            for ev in events.iter() {
                if ev.filter == libc::EVFILT_USER {
                    continue;
                }
                if let Some((_, io)) = table.sources.get(ev.udata as usize as u64) {
                    ready.push((io.clone(), readiness_of(ev)));
                }
            }
        }
        let dispatched = ready.len();
        // Outside the lock: wakers may run arbitrary code (schedule a task, register a source).
        for (io, readiness) in ready.drain(..) {
            io.set_readiness(readiness);
        }
        Ok(dispatched)
    }
}

impl Driver for KqueueDriver {
    fn name(&self) -> &'static str {
        "kqueue"
    }

    /// Waits in `kevent` (at most `timeout`; none: until an event or an unpark) and sets the
    /// readiness of the sources it reported. Returns how many source events it dispatched. A
    /// signal (`EINTR`) or a stale wake-up makes it return `Ok(0)` early; callers loop.
    fn park(&self, timeout: Option<Duration>) -> io::Result<usize> {
        self.wait(timeout)
    }

    fn unparker(&self) -> Arc<dyn Unpark> {
        self.shared.clone()
    }

    fn reactor(&self) -> Option<Arc<dyn Reactor>> {
        Some(self.shared.clone())
    }

    fn has_reactor(&self) -> bool {
        true
    }
}

impl Drop for KqueueDriver {
    /// Every registered source is shut down (its waits end with an error that tells the IO type
    /// to register with the current driver) and the reactor reports itself dead. The kqueue
    /// itself closes when the last [`Reactor`]/[`Unpark`] handle goes.
    fn drop(&mut self) {
        let registered = {
            let mut table = self.shared.table();
            table.alive = false;
            table.sources.drain()
        };
        for (_, io) in registered {
            io.shutdown();
        }
    }
}

impl fmt::Debug for KqueueDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KqueueDriver")
            .field("kq", &self.shared.kq.as_raw_fd())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KqueueReactor")
            .field("kq", &self.kq.as_raw_fd())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eof_maps_to_the_closed_bit_of_its_direction() {
        let read = kevent(5, libc::EVFILT_READ, libc::EV_EOF, 0, 0);
        assert_eq!(
            readiness_of(&read),
            Readiness::READABLE.add(Readiness::READ_CLOSED)
        );
        let write = kevent(
            5,
            libc::EVFILT_WRITE,
            libc::EV_EOF,
            libc::ECONNRESET as u32,
            0,
        );
        assert_eq!(
            readiness_of(&write),
            Readiness::WRITABLE
                .add(Readiness::WRITE_CLOSED)
                .add(Readiness::ERROR)
        );
        let error = kevent(5, libc::EVFILT_READ, libc::EV_ERROR, 0, 0);
        assert_eq!(readiness_of(&error), Readiness::ERROR);
    }

    #[test]
    fn timespec_saturates() {
        let t = timespec(Duration::MAX);
        assert_eq!(t.tv_sec as u64, MAX_WAIT_SECS);
        let t = timespec(Duration::from_millis(1500));
        assert_eq!((t.tv_sec, t.tv_nsec), (1, 500_000_000));
    }
}
