//! The epoll driver.
//!
//! # Waking a parked driver without losing a wake-up
//!
//! [`Shared::state`] is a three-state machine, only ever changed with `SeqCst` read-modify-write
//! operations (`swap`/`compare_exchange`), so all changes to it lie in one modification order
//! and each one reads the value the previous one wrote:
//!
//! * `EMPTY`: no token, the driver is not blocked;
//! * `PARKED`: the driver is in (or about to enter, or just left) a blocking `epoll_wait`;
//! * `NOTIFIED`: an unpark happened that no park has consumed yet (the token).
//!
//! Only the driver's thread moves the state to `PARKED` and back to `EMPTY`; unparkers only
//! ever `swap` in `NOTIFIED`, and write the eventfd **only when the swap returned `PARKED`**.
//!
//! A blocking park does `compare_exchange(EMPTY → PARKED)`, waits, then `swap(EMPTY)`. Take an
//! unpark `U` (its `swap`) and a park `P`:
//!
//! 1. `U` before `P`'s `compare_exchange`: the state is `NOTIFIED`, the exchange fails, `P`
//!    consumes the token (`swap(EMPTY)`) and only polls (`epoll_wait` with timeout 0).
//! 2. `U` between the exchange and `P`'s final `swap`: `U` reads `PARKED` and writes the
//!    eventfd. The eventfd is registered level-triggered, so it stays readable until the driver
//!    reads it: whether `epoll_wait` has not started yet, is blocked, or has already returned,
//!    it (or the next one) returns. `P`'s final `swap` reads `NOTIFIED`: consumed.
//! 3. `U` after `P`'s final `swap`: it reads `EMPTY`, leaves `NOTIFIED` without a syscall, and
//!    the next park is case 1.
//!
//! So every unpark makes the current or the next park return; a park that starts with
//! `NOTIFIED` or is interrupted by the eventfd consumes it (like `std::thread::park`). A second
//! unparker that reads `NOTIFIED` does nothing: the first one has written the eventfd if that
//! was needed (case 2), or the token is still pending (cases 1 and 3). The cost is a spurious
//! return at worst (the eventfd written in case 2 after `epoll_wait` returned wakes the next
//! park early), never a lost wake-up. Because unparkers and parks all read-modify-write the same
//! location, the park's final `swap` (or its failed exchange) acquires what the unparker did
//! before its `swap` — work it published is visible after `park` returns.
//!
//! A non-blocking park (`Some(ZERO)`) never enters `PARKED`; it consumes a pending token so that
//! the next blocking park does not return spuriously for an unpark it has already answered.
//!
//! # Registrations: a slab with generations, not pointers
//!
//! `epoll_data` carries a *token* — a slot index and that slot's generation — never a pointer.
//! The table ([`Table`], spindle-io's [`Registrations`]) owns an `Arc<ScheduledIo>` per live
//! registration and bumps a slot's generation whenever its registration is removed, so an event
//! the driver fetched for a registration that another thread deregistered meanwhile (it may
//! already sit in the event buffer, or in the kernel's ready list) no longer matches its slot
//! and is dropped: the driver looks tokens up under the table's lock and clones the `Arc` before
//! it leaves the lock, so a `ScheduledIo` can never be freed while the driver touches it, and a
//! reused slot never receives its predecessor's events. Generations are 32 bits: a stale event
//! could only be misdelivered after exactly 2³² reuses of one slot while it was in flight.
//!
//! # Deregistering before close: the dup'd-fd pitfall
//!
//! epoll registers *open file descriptions*, keyed by (file, fd number). Closing an fd removes
//! its registration only when it was the last fd referring to that file: if the fd was
//! `dup`ed (or inherited by a child), the registration survives the close and keeps reporting
//! events under the old token, and `EPOLL_CTL_DEL` on the closed number is then impossible.
//! Hence [`Reactor::deregister`] runs `EPOLL_CTL_DEL` and the caller closes only afterwards.
//! If a caller breaks that rule anyway, nothing unsound happens: the orphaned registration's
//! token is dead (its slot is freed when the fd number is registered again), so its events are
//! dropped, and a new registration under the same fd number gets a fresh token.

use std::cell::RefCell;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, Instant};

use spindle_io::registrations::Registrations;
use spindle_io::{Driver, RawSource, Reactor, Readiness, ScheduledIo, Unpark};

/// Events fetched per `epoll_wait` by [`EpollDriver::new`].
const DEFAULT_EVENT_CAPACITY: usize = 1024;
/// The largest event buffer [`EpollDriver::with_event_capacity`] accepts.
const MAX_EVENT_CAPACITY: usize = 1 << 16;
/// How many times one park fetches again after a full buffer before it returns (so a flood of
/// events cannot keep a worker from its tasks forever).
const MAX_ROUNDS: usize = 16;

/// The token of the eventfd (no slot token can be this: slot indices stay below `u32::MAX`).
const WAKE_TOKEN: u64 = u64::MAX;

/// What every source is registered for, once for its life. `EPOLLPRI` (TCP urgent data) wakes
/// nobody: it keeps a short stream read from being taken for a drained queue
/// ([`Readiness::PRIORITY`]).
const INTEREST: u32 =
    (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLPRI | libc::EPOLLET) as u32;

/// See the module docs.
const EMPTY: u8 = 0;
const PARKED: u8 = 1;
const NOTIFIED: u8 = 2;

/// An IO driver on one epoll instance (Linux).
///
/// Make one per worker thread, on that thread, with [`EpollDriver::new`]; park it there. Its
/// [`reactor`](Driver::reactor) and [`unparker`](Driver::unparker) handles may be used from any
/// thread. Dropping it shuts down every source still registered (their waits end with an
/// error), makes [`Reactor::is_alive`] false, and closes the epoll fd and the eventfd.
///
/// ```
/// use std::os::fd::AsRawFd;
/// use std::time::Duration;
/// use spindle_io::{Driver, Readiness};
/// use spindle_io_epoll::EpollDriver;
///
/// let driver = EpollDriver::new()?;
/// let reactor = driver.reactor().expect("epoll is a readiness driver");
/// let (a, b) = std::os::unix::net::UnixStream::pair()?;
/// a.set_nonblocking(true)?;
/// let io = reactor.register(a.as_raw_fd())?;
///
/// // A fresh socket is writable: the registration reports it.
/// driver.park(Some(Duration::from_secs(5)))?;
/// assert!(io.readiness().readiness.contains(Readiness::WRITABLE));
///
/// reactor.deregister(a.as_raw_fd(), &io)?; // before `a` is closed
/// # drop(b);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct EpollDriver {
    shared: Arc<Shared>,
    /// Copies of the fds that `shared.fds` owns, for the driver's own thread: they are closed
    /// only by `Drop`, which runs on this thread after the last `park` returned.
    epoll: RawFd,
    eventfd: RawFd,
    /// The event buffer, reused by every park (its length is its capacity).
    events: RefCell<Vec<libc::epoll_event>>,
    /// The sources an event batch makes ready, collected under the table's lock and woken after
    /// it is released (a waker may run arbitrary code). Reused by every park.
    ready: RefCell<Vec<(Arc<ScheduledIo>, Readiness)>>,
}

/// What the driver shares with its reactor and unparker handles.
struct Shared {
    /// The epoll fd and the eventfd; `None` once the driver is dropped. Registration,
    /// deregistration and the unparker's eventfd write hold the read lock while they use the
    /// fds, so the driver's `Drop` (write lock) never closes them under a concurrent call —
    /// which could otherwise hit a reused fd number.
    fds: RwLock<Option<Fds>>,
    /// The wake-up state machine (module docs).
    state: AtomicU8,
    /// False once the driver is dropped.
    alive: AtomicBool,
    /// Live registrations.
    table: Mutex<Table>,
    /// `table`'s length as of its last unlock ([`TableGuard`]): lets a non-blocking park skip
    /// the `epoll_wait` when nothing is registered (the worker of a runtime doing no IO polls
    /// its driver every 61 tasks; each poll was a system call for nothing).
    live: AtomicUsize,
}

/// The table, locked; records its length in [`Shared::live`] when released.
struct TableGuard<'a> {
    table: MutexGuard<'a, Table>,
    live: &'a AtomicUsize,
}

impl std::ops::Deref for TableGuard<'_> {
    type Target = Table;
    fn deref(&self) -> &Table {
        &self.table
    }
}

impl std::ops::DerefMut for TableGuard<'_> {
    fn deref_mut(&mut self) -> &mut Table {
        &mut self.table
    }
}

impl Drop for TableGuard<'_> {
    fn drop(&mut self) {
        self.live.store(self.table.len(), Relaxed);
    }
}

struct Fds {
    epoll: OwnedFd,
    event: OwnedFd,
}

impl EpollDriver {
    /// Creates a driver with a new epoll instance and eventfd, fetching up to 1024 events per
    /// `epoll_wait`.
    ///
    /// # Errors
    ///
    /// The kernel refused to create the epoll instance or the eventfd (usually `EMFILE`: the
    /// process's fd limit); the message says which call failed and what to do.
    pub fn new() -> io::Result<Self> {
        Self::with_event_capacity(DEFAULT_EVENT_CAPACITY)
    }

    /// Creates a driver whose event buffer holds `capacity` events (clamped to 1..=65536).
    ///
    /// A park whose buffer fills fetches again at once, so a small buffer costs syscalls, not
    /// events.
    ///
    /// # Errors
    ///
    /// As [`new`](EpollDriver::new), or `OutOfMemory` if the buffer cannot be allocated.
    pub fn with_event_capacity(capacity: usize) -> io::Result<Self> {
        let capacity = capacity.clamp(1, MAX_EVENT_CAPACITY);

        // SAFETY: epoll_create1 takes no pointers; the result is checked below.
        let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epoll < 0 {
            return Err(creation_error("epoll_create1", io::Error::last_os_error()));
        }
        // SAFETY: epoll_create1 just returned this fd and nothing else owns it.
        let epoll = unsafe { OwnedFd::from_raw_fd(epoll) };

        // SAFETY: eventfd takes no pointers; the result is checked below.
        let event = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if event < 0 {
            return Err(creation_error("eventfd", io::Error::last_os_error()));
        }
        // SAFETY: eventfd just returned this fd and nothing else owns it.
        let event = unsafe { OwnedFd::from_raw_fd(event) };

        // Level-triggered on purpose: the eventfd stays readable until the driver reads it, so
        // a write that lands after `epoll_wait` returned wakes the next one (module docs).
        let mut wake = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: WAKE_TOKEN,
        };
        // SAFETY: both fds are open (owned above); `wake` is a valid epoll_event that the
        // kernel only reads during the call.
        let rc = unsafe {
            libc::epoll_ctl(
                epoll.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                event.as_raw_fd(),
                &mut wake,
            )
        };
        if rc < 0 {
            return Err(creation_error(
                "epoll_ctl(EPOLL_CTL_ADD) of the eventfd",
                io::Error::last_os_error(),
            ));
        }

        let mut events = Vec::new();
        let mut ready = Vec::new();
        if events.try_reserve_exact(capacity).is_err() || ready.try_reserve_exact(capacity).is_err()
        {
            return Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!(
                    "could not allocate an epoll event buffer of {capacity} events: \
                     use a smaller EpollDriver::with_event_capacity"
                ),
            ));
        }
        events.resize(capacity, libc::epoll_event { events: 0, u64: 0 });

        Ok(EpollDriver {
            epoll: epoll.as_raw_fd(),
            eventfd: event.as_raw_fd(),
            shared: Arc::new(Shared {
                fds: RwLock::new(Some(Fds { epoll, event })),
                state: AtomicU8::new(EMPTY),
                alive: AtomicBool::new(true),
                table: Mutex::new(new_table()),
                live: AtomicUsize::new(0),
            }),
            events: RefCell::new(events),
            ready: RefCell::new(ready),
        })
    }

    /// Fetches events with `epoll_wait`, retrying on `EINTR` with what is left of `timeout_ms`
    /// (a signal must neither end the wait early nor restart it from scratch).
    fn wait(
        &self,
        events: &mut [libc::epoll_event],
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        let mut ms = timeout.map_or(-1, timeout_ms);
        let start = (ms > 0).then(Instant::now);
        // The buffer's length is at most MAX_EVENT_CAPACITY, which fits a c_int.
        let max = libc::c_int::try_from(events.len()).unwrap_or(libc::c_int::MAX);
        loop {
            // The system call itself (`epoll_pwait` without a signal mask, as `epoll_wait` on
            // every architecture), not libc's `epoll_wait`: that is a thread-cancellation
            // point, which glibc brackets with bookkeeping on every call once the process has
            // a second thread, and Rust code never cancels threads.
            // SAFETY: `events` is a live, writable buffer of at least `max` epoll_events, which
            // the kernel fills during the call; a null signal mask is none. `self.epoll` stays
            // open until `Drop`, which cannot run during `park` (it takes `&mut self`).
            let n = unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait,
                    libc::c_long::from(self.epoll),
                    events.as_mut_ptr(),
                    libc::c_long::from(max),
                    libc::c_long::from(ms),
                    std::ptr::null::<libc::sigset_t>(),
                    // The mask's size: not looked at when the mask is null.
                    8 as libc::c_long,
                )
            };
            if let Ok(n) = usize::try_from(n) {
                return Ok(n);
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(io::Error::new(
                    err.kind(),
                    format!("epoll_wait failed: {err}"),
                ));
            }
            if let (Some(start), Some(timeout)) = (start, timeout) {
                ms = timeout_ms(timeout.saturating_sub(start.elapsed()));
            }
        }
    }

    /// Sets the readiness of every source in `events`; returns how many events were for
    /// sources (stale ones and the eventfd's do not count).
    fn dispatch(
        &self,
        events: &[libc::epoll_event],
        ready: &mut Vec<(Arc<ScheduledIo>, Readiness)>,
    ) -> usize {
        let mut woken = false;
        {
            let table = self.shared.table();
            for event in events {
                // Copies out of the (packed) struct.
                let (token, flags) = (event.u64, event.events);
                if token == WAKE_TOKEN {
                    woken = true;
                } else if let Some((_, io)) = table.get(token) {
                    ready.push((io.clone(), readiness(flags)));
                }
            }
        }
        if woken {
            self.drain_eventfd();
        }
        let count = ready.len();
        for (io, readiness) in ready.drain(..) {
            io.set_readiness(readiness);
        }
        count
    }

    /// Resets the eventfd's counter, so that it stops being readable (level-triggered).
    fn drain_eventfd(&self) {
        let mut counter = 0u64;
        // SAFETY: reads at most 8 bytes into `counter`, a live u64; `self.eventfd` stays open
        // until `Drop`. EAGAIN (already drained) is fine, and nothing else can fail here.
        let _ = unsafe {
            libc::read(
                self.eventfd,
                (&raw mut counter).cast::<libc::c_void>(),
                std::mem::size_of::<u64>(),
            )
        };
    }
}

impl Driver for EpollDriver {
    fn name(&self) -> &'static str {
        "epoll"
    }

    /// Waits for events (up to `timeout`, rounded *up* to whole milliseconds: a 0.3 ms timer
    /// waits 1 ms, it never becomes a busy 0 ms poll), dispatches them all, and returns how
    /// many were dispatched. A full event buffer is fetched again at once, up to 16 times per
    /// park. Timeouts longer than `i32::MAX` ms (24.8 days) return after that long.
    fn park(&self, timeout: Option<Duration>) -> io::Result<usize> {
        let (Ok(mut events), Ok(mut ready)) =
            (self.events.try_borrow_mut(), self.ready.try_borrow_mut())
        else {
            return Err(io::Error::other(
                "EpollDriver::park was called again while it dispatched events (from a waker): \
                 park the driver only from the worker's own loop",
            ));
        };
        let state = &self.shared.state;

        let mut timeout = timeout;
        let mut parked = false;
        if timeout == Some(Duration::ZERO) {
            if state.load(SeqCst) == NOTIFIED {
                state.swap(EMPTY, SeqCst);
            }
            if self.shared.live.load(Relaxed) == 0 {
                // Nothing registered: no event to fetch but the eventfd's, which only a
                // blocking park needs (an unpark now is the token just consumed). A source
                // registered meanwhile that this load misses keeps its events in the epoll
                // instance for the next park.
                return Ok(0);
            }
        } else if state
            .compare_exchange(EMPTY, PARKED, SeqCst, SeqCst)
            .is_ok()
        {
            parked = true;
        } else {
            // A token (the state cannot be PARKED: only this thread sets it, and resets it
            // before park returns). Consume it and only poll.
            state.swap(EMPTY, SeqCst);
            timeout = Some(Duration::ZERO);
        }

        let fetched = self.wait(&mut events, timeout);
        if parked {
            // Consumes an unpark that arrived while parked (module docs, case 2).
            state.swap(EMPTY, SeqCst);
        }
        let mut fetched = fetched?;

        let mut dispatched = 0;
        for round in 1.. {
            dispatched += self.dispatch(&events[..fetched], &mut ready);
            if fetched < events.len() || round == MAX_ROUNDS {
                break;
            }
            fetched = self.wait(&mut events, Some(Duration::ZERO))?;
        }
        Ok(dispatched)
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

impl Drop for EpollDriver {
    fn drop(&mut self) {
        self.shared.alive.store(false, SeqCst);
        // Taken under the write lock: a registration either completed before (its source is in
        // the table, shut down below) or sees `None` after and fails.
        let fds = self.shared.fds_write().take();
        let registered = self.shared.table().drain();
        drop(fds); // closes the epoll fd and the eventfd
        for (_, io) in registered {
            io.shutdown();
        }
    }
}

impl fmt::Debug for EpollDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EpollDriver")
            .field("epoll", &self.epoll)
            .field("eventfd", &self.eventfd)
            .field("registered", &self.shared.table().len())
            .field(
                "event_capacity",
                &self.events.try_borrow().map(|e| e.len()).ok(),
            )
            .finish()
    }
}

impl Shared {
    fn table(&self) -> TableGuard<'_> {
        // The table is consistent between any two statements that change it (no user code runs
        // under the lock), so a poisoned lock is used as is.
        TableGuard {
            table: self.table.lock().unwrap_or_else(PoisonError::into_inner),
            live: &self.live,
        }
    }

    fn fds_read(&self) -> std::sync::RwLockReadGuard<'_, Option<Fds>> {
        self.fds.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn fds_write(&self) -> std::sync::RwLockWriteGuard<'_, Option<Fds>> {
        self.fds.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Unpark for Shared {
    fn unpark(&self) {
        if self.state.swap(NOTIFIED, SeqCst) != PARKED {
            // Not blocked: the token is enough (module docs, cases 1 and 3).
            return;
        }
        let guard = self.fds_read();
        let Some(fds) = guard.as_ref() else {
            return; // the driver is gone: nobody to wake
        };
        let one = 1u64;
        // SAFETY: writes 8 bytes from `one`, a live u64, to the eventfd, which the read guard
        // keeps open. The only possible failure, EAGAIN (the counter is at its maximum), means
        // the eventfd is readable already, which is all a wake-up needs.
        let _ = unsafe {
            libc::write(
                fds.event.as_raw_fd(),
                (&raw const one).cast::<libc::c_void>(),
                std::mem::size_of::<u64>(),
            )
        };
    }
}

impl Reactor for Shared {
    fn register(&self, source: RawSource) -> io::Result<Arc<ScheduledIo>> {
        // Held until the registration is complete: `Drop` then either sees it in the table or
        // happens before it (and we fail below).
        let guard = self.fds_read();
        let Some(fds) = guard.as_ref() else {
            return Err(shut_down());
        };
        let io = Arc::new(ScheduledIo::new());
        // The slot exists before the kernel can report an event for its token, so the first
        // event (the source's current readiness) is never dropped as stale.
        let (key, previous) = self.table().insert(source, io.clone())?;
        let mut event = libc::epoll_event {
            events: INTEREST,
            u64: key.token(),
        };
        // SAFETY: the epoll fd is open (read guard); `event` is a valid epoll_event the kernel
        // only reads during the call. `source` is just a number to the kernel: a bad one fails
        // with EBADF/EPERM, reported below.
        let rc = unsafe {
            libc::epoll_ctl(
                fds.epoll.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                source,
                &mut event,
            )
        };
        if rc < 0 {
            // Keep the raw OS error: callers tell EPERM (a regular file) from the rest.
            let err = io::Error::last_os_error();
            self.table().abort(source, key, previous);
            return Err(err);
        }
        // The add succeeded, so an entry the table still had for this fd number belonged to a
        // file that was closed without being deregistered (an add of the same open file under
        // the same number fails with EEXIST). Its owner is gone: end its waits.
        let stale = previous.and_then(|p| self.table().remove(p));
        drop(guard);
        if let Some(stale) = stale {
            stale.shutdown();
        }
        Ok(io)
    }

    fn deregister(&self, source: RawSource, io: &ScheduledIo) -> io::Result<()> {
        let guard = self.fds_read();
        let Some(fds) = guard.as_ref() else {
            // The driver is gone: it shut the source down and closed the epoll instance, which
            // took the registration with it.
            return Ok(());
        };
        // Looked up first: an fd number bound to another registration now belongs to another
        // source (this one's was closed without a deregister and reused), whose registration
        // `EPOLL_CTL_DEL` would remove. Dropped from the table either way, as the trait
        // promises.
        let Some(removed) = self.table().unbind(source, io) else {
            return Ok(());
        };
        let mut unused = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: the epoll fd is open (read guard); `unused` is a valid epoll_event (kernels
        // before 2.6.9 require a non-null pointer even for EPOLL_CTL_DEL).
        let rc = unsafe {
            libc::epoll_ctl(
                fds.epoll.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                source,
                &mut unused,
            )
        };
        let result = if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        };
        drop(guard);
        drop(removed);
        result
    }

    fn is_alive(&self) -> bool {
        self.alive.load(SeqCst)
    }

    fn reports_read_closed(&self) -> bool {
        true // EPOLLRDHUP is asked for with every registration
    }

    fn reports_urgent_data(&self) -> bool {
        true // and EPOLLPRI
    }
}

/// The live registrations (module docs): tokens are a `u64`, 32 bits of slot index and 32 of
/// generation; indices stay below `u32::MAX`, so that no token equals [`WAKE_TOKEN`].
type Table = Registrations<RawFd, Arc<ScheduledIo>>;

fn new_table() -> Table {
    Registrations::new("epoll", u64::BITS, u64::from(u32::MAX))
}

/// The readiness an epoll event reports.
fn readiness(flags: u32) -> Readiness {
    const MAP: [(libc::c_int, Readiness); 5] = [
        (libc::EPOLLIN, Readiness::READABLE),
        (libc::EPOLLOUT, Readiness::WRITABLE),
        (libc::EPOLLRDHUP, Readiness::READ_CLOSED),
        (libc::EPOLLERR, Readiness::ERROR),
        (libc::EPOLLPRI, Readiness::PRIORITY),
    ];
    let mut readiness = Readiness::EMPTY;
    for (flag, bit) in MAP {
        if flags & flag as u32 != 0 {
            readiness = readiness.add(bit);
        }
    }
    if flags & libc::EPOLLHUP as u32 != 0 {
        readiness = readiness
            .add(Readiness::READ_CLOSED)
            .add(Readiness::WRITE_CLOSED);
    }
    readiness
}

/// `timeout` in whole milliseconds for `epoll_wait`, rounded up (a sub-millisecond timeout
/// must not become 0, a busy poll), and capped at `c_int::MAX`.
fn timeout_ms(timeout: Duration) -> libc::c_int {
    let ms = timeout.as_nanos().div_ceil(1_000_000);
    libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX)
}

fn shut_down() -> io::Error {
    io::Error::other(
        "the epoll driver this reactor belongs to has shut down: register the source with the \
         current driver",
    )
}

/// An error from creating the driver, saying which call failed and what to do about it.
fn creation_error(call: &str, err: io::Error) -> io::Error {
    let hint = match err.raw_os_error() {
        Some(libc::EMFILE) => {
            ": the process has too many open files; raise its limit (ulimit -n, RLIMIT_NOFILE) \
             or close some"
        }
        Some(libc::ENFILE) => {
            ": the system has too many open files; close some or raise fs.file-max"
        }
        Some(libc::ENOMEM) => ": the kernel is out of memory",
        Some(libc::ENOSYS | libc::EPERM) => {
            ": epoll is not available here (a seccomp filter?); use spindle-io-polling's poll \
             fallback"
        }
        _ => "",
    };
    io::Error::new(err.kind(), format!("{call} failed: {err}{hint}"))
}

#[cfg(test)]
impl EpollDriver {
    /// How many sources are registered.
    pub(crate) fn registered(&self) -> usize {
        self.shared.table().len()
    }

    /// A probe that tells, even after the driver is dropped, whether it still owns its fds.
    pub(crate) fn fds_probe(&self) -> impl Fn() -> bool + use<> {
        let shared = self.shared.clone();
        move || shared.fds_read().is_some()
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn timeouts_round_up_to_whole_milliseconds() {
        assert_eq!(timeout_ms(Duration::ZERO), 0);
        assert_eq!(timeout_ms(Duration::from_nanos(1)), 1);
        assert_eq!(timeout_ms(Duration::from_micros(300)), 1);
        assert_eq!(timeout_ms(Duration::from_millis(1)), 1);
        assert_eq!(timeout_ms(Duration::from_micros(1001)), 2);
        assert_eq!(timeout_ms(Duration::from_secs(u64::MAX)), libc::c_int::MAX);
    }

    #[test]
    fn events_map_to_readiness() {
        let r = |f: libc::c_int| readiness(f as u32);
        assert_eq!(r(libc::EPOLLIN), Readiness::READABLE);
        assert_eq!(r(libc::EPOLLOUT), Readiness::WRITABLE);
        assert_eq!(
            r(libc::EPOLLIN | libc::EPOLLRDHUP),
            Readiness::READABLE.add(Readiness::READ_CLOSED)
        );
        assert_eq!(
            r(libc::EPOLLHUP),
            Readiness::READ_CLOSED.add(Readiness::WRITE_CLOSED)
        );
        assert_eq!(r(libc::EPOLLERR), Readiness::ERROR);
        assert_eq!(
            r(libc::EPOLLIN | libc::EPOLLPRI),
            Readiness::READABLE.add(Readiness::PRIORITY)
        );
        assert_eq!(r(0), Readiness::EMPTY);
    }
}
