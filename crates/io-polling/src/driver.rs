//! The `polling` driver.
//!
//! # Waking a parked driver without losing a wake-up
//!
//! The same three-state machine as `spindle-io-epoll` (see its module docs for the full
//! argument), with [`Poller::notify`] in place of the eventfd write:
//!
//! * `EMPTY` — no token, not blocked; `PARKED` — in (or entering, or leaving) a blocking wait;
//!   `NOTIFIED` — an unpark not yet consumed.
//! * Every change is a `SeqCst` read-modify-write on one atomic. The driver's thread alone moves
//!   `EMPTY → PARKED` (a `compare_exchange` before it waits) and back (`swap(EMPTY)` after);
//!   unparkers `swap` in `NOTIFIED` and call `notify` only if they replaced `PARKED`.
//! * An unpark before the exchange leaves a token the exchange sees (the park only polls); one
//!   while `PARKED` notifies the poller, whose notification is itself sticky (`polling`'s
//!   `notify` makes "the current or the following" wait return), so it cannot fall between the
//!   exchange and the wait; one after the final swap leaves a token for the next park.
//!
//! # Registrations
//!
//! Keys handed to the poller are a slot index and that slot's generation, never a pointer; the
//! table (spindle-io's [`Registrations`]) owns an `Arc<ScheduledIo>` per live registration and
//! the driver clones it under the table's lock, so a source deregistered by another thread is
//! never freed under the driver, and an event fetched for a removed registration (its slot's
//! generation has moved on) is dropped rather than delivered to the slot's next owner.
//!
//! Every call that changes a registration in the poller (`add`, `modify`, `delete`) runs under
//! the table's lock, together with the matching table change. So when the driver re-arms a
//! one-shot source for an event it dispatches, that source is still in the table, hence not yet
//! deregistered, hence (by the [`Reactor`] contract: deregister before close) still open — the
//! driver never `modify`s a closed fd number that another file may already reuse.
//!
//! # One-shot mode: re-arming without dropping anyone's interest
//!
//! Without edge-triggering, an event disarms the whole registration, and every `modify` replaces
//! the armed interest. Each slot therefore records `armed`: the directions armed in the poller
//! and not yet reported. Under the table's lock:
//!
//! * [`Reactor::rearm`] arms `armed ∪ interest ∪ io.waiting_interest()` (no syscall if that adds
//!   nothing), so two tasks re-arming concurrently for different directions accumulate, never
//!   overwrite each other.
//! * The driver, for an event reporting directions `D`, re-arms `(armed ∪ waiting) \ D` **before**
//!   it sets the readiness (outside the lock). A task whose `rearm` came before that is either
//!   still armed (its direction is not in `D`) or will find its readiness set (it is in `D`, and
//!   the task cleared its readiness before it re-armed); a task whose `rearm` comes after arms
//!   its direction itself.
//!
//! Between the kernel's disarming and the driver's dispatch, `armed` overstates what is armed;
//! a `rearm` that skips its syscall then is covered by the dispatch of that very event.

use std::cell::RefCell;
use std::fmt;
use std::io;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard};
use std::time::Duration;

use polling::{Event, Events, PollMode, Poller};
use spindle_io::registrations::{Key, Registrations};
use spindle_io::{Driver, Interest, RawSource, Reactor, Readiness, ScheduledIo, Unpark};

/// Events fetched per wait by [`PollingDriver::new`].
const DEFAULT_EVENT_CAPACITY: usize = 1024;
/// The largest event buffer [`PollingDriver::with_event_capacity`] accepts.
const MAX_EVENT_CAPACITY: usize = 1 << 16;
/// How many times one park fetches again after a full buffer before it returns.
const MAX_ROUNDS: usize = 16;

/// See the module docs.
const EMPTY: u8 = 0;
const PARKED: u8 = 1;
const NOTIFIED: u8 = 2;

/// Direction bits of a slot's `armed` interest.
const READ: u8 = 1;
const WRITE: u8 = 2;

/// How sources are registered with the poller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Trigger {
    /// Edge-triggered, for the source's whole life (epoll, kqueue).
    Edge,
    /// One-shot: every event disarms the source, and the driver (for the tasks still waiting)
    /// or [`Reactor::rearm`] (for a task about to wait) arms it again. The only mode of IOCP,
    /// event ports and `poll`; available everywhere, so that it can be tested on Linux too.
    Oneshot,
}

impl Trigger {
    fn mode(self) -> PollMode {
        match self {
            Trigger::Edge => PollMode::Edge,
            Trigger::Oneshot => PollMode::Oneshot,
        }
    }
}

/// An IO driver on one [`polling::Poller`] (any OS `polling` supports).
///
/// Make one per worker thread, on that thread, with [`PollingDriver::new`]; park it there. Its
/// [`reactor`](Driver::reactor) and [`unparker`](Driver::unparker) handles may be used from any
/// thread. Dropping it shuts down every source still registered (their waits end with an
/// error), makes [`Reactor::is_alive`] false, and closes the poller.
///
/// ```
/// use std::net::{TcpListener, TcpStream};
/// # #[cfg(unix)]
/// # use std::os::fd::AsRawFd as AsRaw;
/// # #[cfg(windows)]
/// # use std::os::windows::io::AsRawSocket as AsRaw;
/// use std::time::{Duration, Instant};
/// use spindle_io::{Driver, Interest, Readiness};
/// use spindle_io_polling::PollingDriver;
///
/// let driver = PollingDriver::new()?;
/// let reactor = driver.reactor().expect("polling is a readiness driver");
/// let listener = TcpListener::bind("127.0.0.1:0")?;
/// let stream = TcpStream::connect(listener.local_addr()?)?;
/// stream.set_nonblocking(true)?;
/// # #[cfg(unix)]
/// # let raw = stream.as_raw_fd();
/// # #[cfg(windows)]
/// # let raw = stream.as_raw_socket();
/// let io = reactor.register(raw)?;
///
/// // A connected socket is writable: the registration reports it.
/// reactor.rearm(raw, &io, Interest::WRITABLE)?; // needed in one-shot mode only
/// let deadline = Instant::now() + Duration::from_secs(5);
/// while !io.readiness().readiness.contains(Readiness::WRITABLE) && Instant::now() < deadline {
///     driver.park(Some(Duration::from_millis(10)))?;
/// }
/// assert!(io.readiness().readiness.contains(Readiness::WRITABLE));
///
/// reactor.deregister(raw, &io)?; // before `stream` is closed
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct PollingDriver {
    shared: Arc<Shared>,
    /// The event buffer, reused by every park.
    events: RefCell<Events>,
    /// The sources an event batch makes ready, collected under the table's lock and woken after
    /// it is released (a waker may run arbitrary code). Reused by every park.
    ready: RefCell<Vec<(Arc<ScheduledIo>, Readiness)>>,
}

/// What the driver shares with its reactor and unparker handles.
struct Shared {
    /// `None` once the driver is dropped. Every use from a handle holds the read lock, so the
    /// driver's `Drop` (write lock) never closes the poller under a concurrent call. The driver
    /// holds the read lock while it waits; only its own `Drop` takes the write lock, so no
    /// writer ever queues behind a parked driver and blocks the unparkers' readers.
    poller: RwLock<Option<Poller>>,
    trigger: Trigger,
    /// The wake-up state machine (module docs).
    state: AtomicU8,
    /// False once the driver is dropped.
    alive: AtomicBool,
    /// Live registrations.
    table: Mutex<Table>,
}

impl PollingDriver {
    /// Creates a driver with a new poller: edge-triggered where the OS supports it, one-shot
    /// elsewhere; fetching up to 1024 events per wait.
    ///
    /// # Errors
    ///
    /// The OS refused to create the poller (usually the process's fd or handle limit); the
    /// message says what failed and what to do.
    pub fn new() -> io::Result<Self> {
        let poller = new_poller()?;
        let trigger = if poller.supports_edge() {
            Trigger::Edge
        } else {
            Trigger::Oneshot
        };
        Ok(Self::from_poller(poller, trigger))
    }

    /// Creates a driver that registers sources with `trigger`.
    ///
    /// # Errors
    ///
    /// As [`new`](PollingDriver::new), or `Unsupported` if `trigger` is [`Trigger::Edge`] and
    /// this OS's poller has no edge-triggered mode.
    pub fn with_trigger(trigger: Trigger) -> io::Result<Self> {
        let poller = new_poller()?;
        if trigger == Trigger::Edge && !poller.supports_edge() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "this OS's poller has no edge-triggered mode: use Trigger::Oneshot \
                 (PollingDriver::new picks it by itself)",
            ));
        }
        Ok(Self::from_poller(poller, trigger))
    }

    /// Sets the size of the event buffer (clamped to 1..=65536; 1024 by default).
    ///
    /// A park whose buffer fills fetches again at once, so a small buffer costs syscalls, not
    /// events.
    #[must_use]
    pub fn with_event_capacity(mut self, capacity: usize) -> Self {
        let capacity = capacity.clamp(1, MAX_EVENT_CAPACITY);
        *self.events.get_mut() = Events::with_capacity(nonzero(capacity));
        *self.ready.get_mut() = Vec::with_capacity(capacity);
        self
    }

    /// How this driver registers sources.
    pub fn trigger(&self) -> Trigger {
        self.shared.trigger
    }

    fn from_poller(poller: Poller, trigger: Trigger) -> Self {
        PollingDriver {
            shared: Arc::new(Shared {
                poller: RwLock::new(Some(poller)),
                trigger,
                state: AtomicU8::new(EMPTY),
                alive: AtomicBool::new(true),
                table: Mutex::new(new_table()),
            }),
            events: RefCell::new(Events::with_capacity(nonzero(DEFAULT_EVENT_CAPACITY))),
            ready: RefCell::new(Vec::with_capacity(DEFAULT_EVENT_CAPACITY)),
        }
    }

    /// Sets the readiness of every source in `events` (re-arming one-shot sources for the tasks
    /// that still wait); returns how many events were for live sources.
    fn dispatch(
        &self,
        poller: &Poller,
        events: &Events,
        ready: &mut Vec<(Arc<ScheduledIo>, Readiness)>,
    ) -> usize {
        {
            let mut table = self.shared.table();
            for event in events.iter() {
                let Some((source, slot)) = table.get_mut(event.key as u64) else {
                    continue; // removed since it was fetched
                };
                let readiness = readiness(&event);
                if self.shared.trigger == Trigger::Oneshot {
                    // Module docs: re-arm what is still wanted, before the readiness is set.
                    let reported = directions(readiness);
                    let want = (slot.armed | interest_bits(slot.io.waiting_interest())) & !reported;
                    slot.armed = 0;
                    if want != 0 {
                        // SAFETY: the slot is live, so its source was not deregistered, and the
                        // Reactor contract has callers deregister before they close: it is open.
                        let source = unsafe { borrow(source) };
                        // On failure nothing is armed; the next `rearm` tries again and reports
                        // the error to its task.
                        if poller
                            .modify_with_mode(source, event_for(event.key, want), PollMode::Oneshot)
                            .is_ok()
                        {
                            slot.armed = want;
                        }
                    }
                }
                ready.push((slot.io.clone(), readiness));
            }
        }
        let count = ready.len();
        for (io, readiness) in ready.drain(..) {
            io.set_readiness(readiness);
        }
        count
    }
}

impl Driver for PollingDriver {
    fn name(&self) -> &'static str {
        "polling"
    }

    /// Waits for events (up to `timeout`; `polling` keeps sub-millisecond timeouts where the OS
    /// can, and retries on `EINTR` until the deadline), dispatches them all, and returns how
    /// many were dispatched. A full event buffer is fetched again at once, up to 16 times per
    /// park.
    fn park(&self, timeout: Option<Duration>) -> io::Result<usize> {
        let (Ok(mut events), Ok(mut ready)) =
            (self.events.try_borrow_mut(), self.ready.try_borrow_mut())
        else {
            return Err(io::Error::other(
                "PollingDriver::park was called again while it dispatched events (from a \
                 waker): park the driver only from the worker's own loop",
            ));
        };
        let guard = self.shared.poller();
        let Some(poller) = guard.as_ref() else {
            // Only `Drop` takes the poller, and it needs `&mut self`.
            return Err(shut_down());
        };
        let state = &self.shared.state;

        let mut timeout = timeout;
        let mut parked = false;
        if timeout == Some(Duration::ZERO) {
            if state.load(SeqCst) == NOTIFIED {
                state.swap(EMPTY, SeqCst);
            }
        } else if state
            .compare_exchange(EMPTY, PARKED, SeqCst, SeqCst)
            .is_ok()
        {
            parked = true;
        } else {
            // A token (the state cannot be PARKED outside a park). Consume it and only poll.
            state.swap(EMPTY, SeqCst);
            timeout = Some(Duration::ZERO);
        }

        events.clear();
        let fetched = poller.wait(&mut events, timeout);
        if parked {
            state.swap(EMPTY, SeqCst);
        }
        fetched.map_err(|e| io::Error::new(e.kind(), format!("polling's wait failed: {e}")))?;

        let mut dispatched = 0;
        for round in 1.. {
            dispatched += self.dispatch(poller, &events, &mut ready);
            if events.len() < events.capacity().get() || round == MAX_ROUNDS {
                break;
            }
            events.clear();
            poller
                .wait(&mut events, Some(Duration::ZERO))
                .map_err(|e| io::Error::new(e.kind(), format!("polling's wait failed: {e}")))?;
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

impl Drop for PollingDriver {
    fn drop(&mut self) {
        self.shared.alive.store(false, SeqCst);
        let poller = self
            .shared
            .poller
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let registered = self.shared.table().drain();
        if let Some(poller) = &poller {
            for (source, _) in &registered {
                // SAFETY: the source was still registered, so (Reactor contract) still open.
                // `polling` asks that sources be deleted before they are closed; their owners
                // will close them after this driver is gone, so delete them now.
                let _ = poller.delete(unsafe { borrow(*source) });
            }
        }
        drop(poller);
        for (_, live) in registered {
            live.io.shutdown();
        }
    }
}

impl fmt::Debug for PollingDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PollingDriver")
            .field("trigger", &self.shared.trigger)
            .field("registered", &self.shared.table().len())
            .field(
                "event_capacity",
                &self.events.try_borrow().map(|e| e.capacity()).ok(),
            )
            .finish()
    }
}

impl Shared {
    fn table(&self) -> MutexGuard<'_, Table> {
        // The table is consistent between any two statements that change it (no user code runs
        // under the lock), so a poisoned lock is used as is.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn poller(&self) -> RwLockReadGuard<'_, Option<Poller>> {
        self.poller.read().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Unpark for Shared {
    fn unpark(&self) {
        if self.state.swap(NOTIFIED, SeqCst) != PARKED {
            return; // not blocked: the token is enough
        }
        if let Some(poller) = self.poller().as_ref() {
            // Fails only if the OS refuses to write to the poller's own notifier, which it
            // does not for a live poller; there is nobody to report it to.
            let _ = poller.notify();
        }
    }
}

impl Reactor for Shared {
    fn register(&self, source: RawSource) -> io::Result<Arc<ScheduledIo>> {
        let guard = self.poller();
        let Some(poller) = guard.as_ref() else {
            return Err(shut_down());
        };
        let io = Arc::new(ScheduledIo::new());
        let mut table = self.table();
        let live = Live {
            io: io.clone(),
            armed: READ | WRITE, // a new registration is armed for both directions
        };
        let (key, previous) = table.insert(source, live)?;
        // SAFETY: `polling` requires the source to be deleted from the poller before it is
        // closed. The Reactor contract has every caller deregister (which deletes it) before it
        // closes the source, and the driver's `Drop` deletes every source still registered. A
        // caller that breaks the contract cannot cause memory unsafety here: the backends
        // cope with a closed source (epoll and kqueue drop it, IOCP reports LOCAL_CLOSE), and
        // its stale events are filtered by generation.
        let added = unsafe {
            poller.add_with_mode(
                source,
                event_for(poller_key(key), READ | WRITE),
                self.trigger.mode(),
            )
        };
        if let Err(err) = added {
            table.abort(source, key, previous);
            return Err(err);
        }
        // An entry still bound to this source number belonged to a source closed without being
        // deregistered (adding an open, registered source again fails). End its waits.
        let stale = previous.and_then(|p| table.remove(p));
        drop(table);
        drop(guard);
        if let Some(stale) = stale {
            stale.io.shutdown();
        }
        Ok(io)
    }

    fn deregister(&self, source: RawSource, io: &ScheduledIo) -> io::Result<()> {
        let guard = self.poller();
        let Some(poller) = guard.as_ref() else {
            // The driver is gone: it deleted the source and shut it down.
            return Ok(());
        };
        let mut table = self.table();
        // Looked up first: a source number bound to another registration now belongs to
        // another source (this one's was closed without a deregister and reused), whose
        // registration the delete would remove.
        let Some(removed) = table.unbind(source, io) else {
            return Ok(());
        };
        // SAFETY: the caller deregisters before it closes the source (Reactor contract), so it
        // is open during this call.
        let result = poller.delete(unsafe { borrow(source) });
        drop(table);
        drop(guard);
        drop(removed);
        result
    }

    fn is_alive(&self) -> bool {
        self.alive.load(SeqCst)
    }

    fn rearm(&self, source: RawSource, io: &ScheduledIo, interest: Interest) -> io::Result<()> {
        if self.trigger == Trigger::Edge {
            return Ok(());
        }
        let guard = self.poller();
        let Some(poller) = guard.as_ref() else {
            return Err(shut_down());
        };
        let mut table = self.table();
        let Some((key, slot)) = table.find_mut(source, io) else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "rearm of a source that is not registered with this reactor: register it first",
            ));
        };
        let want =
            slot.armed | interest_bits(Some(interest)) | interest_bits(io.waiting_interest());
        if want == slot.armed {
            return Ok(()); // armed already (module docs)
        }
        // SAFETY: the caller owns the open source while it re-arms it (Reactor contract).
        let borrowed = unsafe { borrow(source) };
        poller.modify_with_mode(
            borrowed,
            event_for(poller_key(key), want),
            PollMode::Oneshot,
        )?;
        slot.armed = want;
        Ok(())
    }
}

/// What the table keeps per registration (its source is kept by the table).
struct Live {
    io: Arc<ScheduledIo>,
    /// One-shot mode: the directions armed and not yet reported (module docs).
    armed: u8,
}

impl AsRef<ScheduledIo> for Live {
    fn as_ref(&self) -> &ScheduledIo {
        &self.io
    }
}

/// The live registrations (module docs): keys are a `usize`, the slot index in the low half and
/// the generation in the high half; indices stay below `2^(usize::BITS / 2) - 1`, so that no key
/// equals `usize::MAX` (reserved by `polling`).
type Table = Registrations<RawSource, Live>;

fn new_table() -> Table {
    Registrations::new("polling", usize::BITS, (1 << (usize::BITS / 2)) - 1)
}

/// The poller key of a registration (it fits: the table's tokens are `usize::BITS` wide).
fn poller_key(key: Key) -> usize {
    key.token() as usize
}

/// The readiness a `polling` event reports.
fn readiness(event: &Event) -> Readiness {
    let mut readiness = Readiness::EMPTY;
    if event.readable {
        readiness = readiness.add(Readiness::READABLE);
    }
    if event.writable {
        readiness = readiness.add(Readiness::WRITABLE);
    }
    if event.is_interrupt() {
        readiness = readiness
            .add(Readiness::READ_CLOSED)
            .add(Readiness::WRITE_CLOSED);
    }
    if event.is_err() == Some(true) {
        readiness = readiness.add(Readiness::ERROR);
    }
    readiness
}

/// The directions whose waits `readiness` ends.
fn directions(readiness: Readiness) -> u8 {
    let mut bits = 0;
    if readiness.satisfies(Interest::READABLE) {
        bits |= READ;
    }
    if readiness.satisfies(Interest::WRITABLE) {
        bits |= WRITE;
    }
    bits
}

fn interest_bits(interest: Option<Interest>) -> u8 {
    interest.map_or(0, |i| {
        (if i.is_readable() { READ } else { 0 }) | (if i.is_writable() { WRITE } else { 0 })
    })
}

/// The poller's interest for direction bits, with hang-ups reported where the OS can.
fn event_for(key: usize, bits: u8) -> Event {
    Event::new(key, bits & READ != 0, bits & WRITE != 0).with_interrupt()
}

fn nonzero(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN)
}

fn new_poller() -> io::Result<Poller> {
    Poller::new().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "could not create a poller: {e}; if the process is out of file descriptors or \
                 handles, raise its limit (ulimit -n) or close some"
            ),
        )
    })
}

fn shut_down() -> io::Error {
    io::Error::other(
        "the polling driver this reactor belongs to has shut down: register the source with the \
         current driver",
    )
}

/// Borrows a raw source for a `polling` call.
///
/// # Safety
///
/// `source` must be open for as long as the returned borrow is used.
#[cfg(unix)]
unsafe fn borrow<'a>(source: RawSource) -> std::os::fd::BorrowedFd<'a> {
    // SAFETY: the caller keeps `source` open while the borrow is used.
    unsafe { std::os::fd::BorrowedFd::borrow_raw(source) }
}

/// Borrows a raw source for a `polling` call.
///
/// # Safety
///
/// `source` must be open for as long as the returned borrow is used.
#[cfg(windows)]
unsafe fn borrow<'a>(source: RawSource) -> std::os::windows::io::BorrowedSocket<'a> {
    // SAFETY: the caller keeps `source` open while the borrow is used.
    unsafe { std::os::windows::io::BorrowedSocket::borrow_raw(source) }
}

#[cfg(test)]
impl PollingDriver {
    /// How many sources are registered.
    pub(crate) fn registered(&self) -> usize {
        self.shared.table().len()
    }

    /// A probe that tells, even after the driver is dropped, whether it still owns its poller.
    pub(crate) fn poller_probe(&self) -> impl Fn() -> bool + use<> {
        let shared = self.shared.clone();
        move || shared.poller().is_some()
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn directions_follow_what_a_readiness_satisfies() {
        assert_eq!(directions(Readiness::READABLE), READ);
        assert_eq!(directions(Readiness::WRITE_CLOSED), WRITE);
        assert_eq!(directions(Readiness::ERROR), READ | WRITE);
        assert_eq!(directions(Readiness::EMPTY), 0);
        assert_eq!(interest_bits(Some(Interest::BOTH)), READ | WRITE);
        assert_eq!(interest_bits(None), 0);
    }
}
