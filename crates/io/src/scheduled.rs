//! The readiness state of one registered source, shared between the reactor that sets it and
//! the tasks that wait on it.
//!
//! # Protocol (edge-triggered, never a lost wake-up)
//!
//! An IO type always tries its non-blocking call first. Only when that fails with
//! `EWOULDBLOCK` does it look here:
//!
//! ```text
//! let event = io.readiness();          // snapshot: readiness bits + tick
//! match op() { WouldBlock => {}, done => return done }
//! io.clear_readiness(event);           // "not ready" — unless an event came since the snapshot
//! io.wait(interest, deadline)?;        // parks until the reactor sets a bit of `interest`
//! ```
//!
//! The *tick* counts the reactor's events. Clearing with a stale snapshot does nothing, so an
//! event that lands between the failed call and the clear is never erased; and `wait`
//! registers its waker before it re-reads the readiness, so an event between that read and the
//! park is never missed either (the waker's permit makes `park` return at once).

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Waker;
use std::time::Instant;

/// Which readiness a task waits for.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Interest(u8);

impl Interest {
    /// Readable (or read side closed, or an error).
    pub const READABLE: Interest = Interest(Readiness::READABLE.0);
    /// Writable (or write side closed, or an error).
    pub const WRITABLE: Interest = Interest(Readiness::WRITABLE.0);
    /// Both.
    pub const BOTH: Interest = Interest(Readiness::READABLE.0 | Readiness::WRITABLE.0);

    /// Whether readability is of interest.
    pub fn is_readable(self) -> bool {
        self.0 & Readiness::READABLE.0 != 0
    }

    /// Whether writability is of interest.
    pub fn is_writable(self) -> bool {
        self.0 & Readiness::WRITABLE.0 != 0
    }

    /// The union of two interests.
    #[must_use]
    #[allow(clippy::should_implement_trait)] // a set union, not arithmetic
    pub fn add(self, other: Interest) -> Interest {
        Interest(self.0 | other.0)
    }

    /// The readiness bits that end a wait for this interest: the direct ones, the matching
    /// closed bit, and errors.
    fn wakes_on(self) -> u8 {
        let mut bits = Readiness::ERROR.0;
        if self.is_readable() {
            bits |= Readiness::READABLE.0 | Readiness::READ_CLOSED.0;
        }
        if self.is_writable() {
            bits |= Readiness::WRITABLE.0 | Readiness::WRITE_CLOSED.0;
        }
        bits
    }
}

impl fmt::Debug for Interest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.is_readable(), self.is_writable()) {
            (true, true) => f.write_str("READABLE | WRITABLE"),
            (true, false) => f.write_str("READABLE"),
            (false, true) => f.write_str("WRITABLE"),
            (false, false) => f.write_str("(none)"),
        }
    }
}

/// Readiness bits reported by a reactor.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Readiness(u8);

impl Readiness {
    /// Nothing.
    pub const EMPTY: Readiness = Readiness(0);
    /// Data (or a connection) to read.
    pub const READABLE: Readiness = Readiness(1);
    /// Room to write.
    pub const WRITABLE: Readiness = Readiness(2);
    /// The peer closed its writing side (`EPOLLRDHUP`, `EV_EOF` on a read filter).
    pub const READ_CLOSED: Readiness = Readiness(4);
    /// The connection can no longer be written (`EPOLLHUP`, `EV_EOF` on a write filter).
    pub const WRITE_CLOSED: Readiness = Readiness(8);
    /// An error is pending on the source (`EPOLLERR`): the next call reports it.
    pub const ERROR: Readiness = Readiness(16);
    /// Urgent (out-of-band) TCP data came (`EPOLLPRI`; `EV_OOBAND` on Apple's kqueue). No wait
    /// ends on it: it tells a stream read that returned less than it asked for that it may
    /// have stopped at the urgent mark with data behind it, not at the end of the queue. Set
    /// for the rest of the registration's life once reported.
    pub const PRIORITY: Readiness = Readiness(32);

    /// The union.
    #[must_use]
    #[allow(clippy::should_implement_trait)] // a set union, not arithmetic
    pub fn add(self, other: Readiness) -> Readiness {
        Readiness(self.0 | other.0)
    }

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: Readiness) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether no bit is set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether a wait for `interest` would end.
    pub fn satisfies(self, interest: Interest) -> bool {
        self.0 & interest.wakes_on() != 0
    }
}

impl fmt::Debug for Readiness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 6] = [
            "READABLE",
            "WRITABLE",
            "READ_CLOSED",
            "WRITE_CLOSED",
            "ERROR",
            "PRIORITY",
        ];
        let mut list = f.debug_set();
        for (i, name) in NAMES.iter().enumerate() {
            if self.0 & (1 << i) != 0 {
                list.entry(&format_args!("{name}"));
            }
        }
        list.finish()
    }
}

/// A snapshot of a source's readiness, to clear it with [`ScheduledIo::clear_readiness`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadyEvent {
    /// The readiness bits at the snapshot.
    pub readiness: Readiness,
    tick: usize,
}

/// Bits 0..8: readiness; bit 8: shut down; bits 9..: the tick.
const READINESS_MASK: usize = 0xff;
const SHUTDOWN: usize = 1 << 8;
const TICK_SHIFT: u32 = 9;

/// The readiness of one registered source and the tasks waiting for it.
///
/// Made by a [`Reactor`](crate::Reactor) when a source registers; its events call
/// [`set_readiness`](ScheduledIo::set_readiness), and the IO types wait with
/// [`wait`](ScheduledIo::wait). See the module docs for the protocol.
pub struct ScheduledIo {
    state: AtomicUsize,
    waiters: spindle_park::spin::SpinLock<Waiters>,
}

/// Tasks waiting for readiness. One reader and one writer is the common case; more go to
/// `others`.
#[derive(Default)]
struct Waiters {
    reader: Option<Waker>,
    writer: Option<Waker>,
    others: Vec<(Interest, Waker)>,
}

impl Default for ScheduledIo {
    fn default() -> Self {
        ScheduledIo::new()
    }
}

impl ScheduledIo {
    /// Not ready, no waiters.
    pub fn new() -> Self {
        ScheduledIo {
            state: AtomicUsize::new(0),
            waiters: spindle_park::spin::SpinLock::new(Waiters::default()),
        }
    }

    /// The waiter lists, locked. A spin lock whose unlock is a store (`spindle_park::spin`):
    /// its critical sections only move wakers in and out (dropped wakers are dropped after the
    /// unlock), and std's `Mutex` paid a read-modify-write to unlock as well, twice per wait.
    fn waiters(&self) -> spindle_park::spin::SpinGuard<'_, Waiters> {
        self.waiters.lock()
    }

    /// The current readiness and tick.
    pub fn readiness(&self) -> ReadyEvent {
        let state = self.state.load(Ordering::Acquire);
        ReadyEvent {
            readiness: Readiness((state & READINESS_MASK) as u8),
            tick: state >> TICK_SHIFT,
        }
    }

    /// Reactor: an event reported `ready`. Adds it to the readiness, counts a tick, and wakes
    /// the tasks whose interest it satisfies.
    pub fn set_readiness(&self, ready: Readiness) {
        let mut current = self.state.load(Ordering::Relaxed);
        loop {
            let tick = (current >> TICK_SHIFT).wrapping_add(1);
            let next = (tick << TICK_SHIFT)
                | (current & SHUTDOWN)
                | ((current & READINESS_MASK) | usize::from(ready.0));
            match self.state.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(actual) => current = actual,
            }
        }
        self.wake(ready);
    }

    /// IO type: the call made after `event` was read failed with `EWOULDBLOCK`, so the
    /// readiness of `interest` is gone — unless an event came since (the tick moved), in
    /// which case nothing is cleared.
    ///
    /// The call's answer outranks every bit the reactor set before it: the error bit goes (a
    /// call that would block found no error pending — it would have returned it, which
    /// consumes a socket's error, a UDP socket's ICMP error say), and so does the closed bit
    /// of `interest`'s directions (a stream whose read side is closed answers a read with end
    /// of stream, never `EWOULDBLOCK`; a datagram socket shut down for reading is reported
    /// read-closed for good yet answers `EWOULDBLOCK`). Left set, either bit would end every
    /// later wait at once: the operation would spin on `EWOULDBLOCK`, past its deadline.
    pub fn clear_readiness(&self, event: ReadyEvent, interest: Interest) {
        self.clear(event, interest, true);
    }

    /// IO type: a read of a byte stream returned less than it asked for, so the queue is
    /// drained: the read readiness is gone unless an event came since (as
    /// [`clear_readiness`](ScheduledIo::clear_readiness)). The closed and error bits stay: an
    /// end of stream or an error that came with the data is what the next read returns.
    pub(crate) fn clear_drained(&self, event: ReadyEvent) {
        self.clear(event, Interest::READABLE, false);
    }

    /// Clears `interest`'s direct bits; with `would_block`, its closed bits and the error bit
    /// too.
    fn clear(&self, event: ReadyEvent, interest: Interest, would_block: bool) {
        let mut clear = 0usize;
        if would_block {
            clear |= usize::from(Readiness::ERROR.0);
        }
        if interest.is_readable() {
            clear |= usize::from(Readiness::READABLE.0);
            if would_block {
                clear |= usize::from(Readiness::READ_CLOSED.0);
            }
        }
        if interest.is_writable() {
            clear |= usize::from(Readiness::WRITABLE.0);
            if would_block {
                clear |= usize::from(Readiness::WRITE_CLOSED.0);
            }
        }
        let mut current = self.state.load(Ordering::Relaxed);
        loop {
            if current >> TICK_SHIFT != event.tick {
                return;
            }
            let next = current & !clear;
            if next == current {
                return;
            }
            match self.state.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(actual) => current = actual,
            }
        }
    }

    /// Reactor: its driver is going away. Every wait, now and later, ends with an error, so
    /// that the IO type registers the source with the current driver instead.
    pub fn shutdown(&self) {
        self.state.fetch_or(SHUTDOWN, Ordering::AcqRel);
        self.wake(Readiness(0xff));
    }

    /// Whether [`shutdown`](ScheduledIo::shutdown) was called.
    pub fn is_shutdown(&self) -> bool {
        self.state.load(Ordering::Acquire) & SHUTDOWN != 0
    }

    /// The union of the interests tasks wait for now (for reactors that must re-arm a
    /// one-shot registration).
    pub fn waiting_interest(&self) -> Option<Interest> {
        let waiters = self.waiters();
        let mut bits = 0;
        if waiters.reader.is_some() {
            bits |= Interest::READABLE.0;
        }
        if waiters.writer.is_some() {
            bits |= Interest::WRITABLE.0;
        }
        for (interest, _) in &waiters.others {
            bits |= interest.0;
        }
        (bits != 0).then_some(Interest(bits))
    }

    /// Parks the current task until the readiness satisfies `interest`, or `deadline` passes
    /// (`TimedOut`), or the reactor shuts down (an error of kind `Other` whose message says so).
    /// Returns at once if it is ready already.
    ///
    /// Cancellation: the park unwinds; the waker this call registered stays behind and is
    /// dropped at the next event (it wakes nothing that waits).
    ///
    /// # Errors
    ///
    /// `TimedOut`, or the reactor's shutdown.
    pub fn wait(&self, interest: Interest, deadline: Option<Instant>) -> io::Result<ReadyEvent> {
        self.wait_inner(interest, deadline, false)
    }

    /// As [`wait`](ScheduledIo::wait); with `stop_on_cancel`, a cancel request that wakes a
    /// park held off by a `spindle_park::CancelGuard` ends the wait with `Interrupted` (the
    /// caller, which cannot unwind, reports the cancellation its own way), where `wait` keeps
    /// waiting.
    pub(crate) fn wait_inner(
        &self,
        interest: Interest,
        deadline: Option<Instant>,
        stop_on_cancel: bool,
    ) -> io::Result<ReadyEvent> {
        loop {
            if let Some(event) = self.ready_for(interest)? {
                return Ok(event);
            }
            self.add_waiter(interest, spindle_park::waker());
            // Registered first, read second: an event since the read above either shows here
            // or finds the waker (whose permit makes the park return at once).
            if let Some(event) = self.ready_for(interest)? {
                return Ok(event);
            }
            let woke = match deadline {
                None => {
                    spindle_park::park();
                    spindle_park::Wake::Woken
                }
                Some(deadline) => spindle_park::park_until(deadline),
            };
            if woke == spindle_park::Wake::TimedOut {
                self.remove_waiter(interest);
                return match self.ready_for(interest)? {
                    Some(event) => Ok(event),
                    None => Err(io::Error::from(io::ErrorKind::TimedOut)),
                };
            }
            if stop_on_cancel && spindle_park::cancel_requested() {
                self.remove_waiter(interest);
                return Err(io::Error::from(io::ErrorKind::Interrupted));
            }
        }
    }

    fn ready_for(&self, interest: Interest) -> io::Result<Option<ReadyEvent>> {
        let state = self.state.load(Ordering::Acquire);
        if state & SHUTDOWN != 0 {
            return Err(io::Error::other(
                "the IO driver this source was registered with has shut down",
            ));
        }
        let event = ReadyEvent {
            readiness: Readiness((state & READINESS_MASK) as u8),
            tick: state >> TICK_SHIFT,
        };
        Ok(event.readiness.satisfies(interest).then_some(event))
    }

    fn add_waiter(&self, interest: Interest, waker: Waker) {
        let mut waiters = self.waiters();
        let slot = if interest == Interest::READABLE {
            &mut waiters.reader
        } else if interest == Interest::WRITABLE {
            &mut waiters.writer
        } else {
            waiters.others.push((interest, waker));
            return;
        };
        match slot {
            Some(existing) if existing.will_wake(&waker) => {}
            Some(_) => {
                // A second task waits for the same direction: both are woken by the event.
                waiters.others.push((interest, waker));
            }
            None => *slot = Some(waker),
        }
    }

    /// Drops the current task's waker for `interest` (after a timeout).
    fn remove_waiter(&self, interest: Interest) {
        let mine = spindle_park::waker();
        let mut waiters = self.waiters();
        if interest == Interest::READABLE
            && waiters.reader.as_ref().is_some_and(|w| w.will_wake(&mine))
        {
            waiters.reader = None;
        }
        if interest == Interest::WRITABLE
            && waiters.writer.as_ref().is_some_and(|w| w.will_wake(&mine))
        {
            waiters.writer = None;
        }
        waiters
            .others
            .retain(|(i, w)| !(*i == interest && w.will_wake(&mine)));
    }

    fn wake(&self, ready: Readiness) {
        let mut reader = None;
        let mut writer = None;
        let mut others = Vec::new();
        {
            let mut waiters = self.waiters();
            if ready.satisfies(Interest::READABLE) {
                reader = waiters.reader.take();
            }
            if ready.satisfies(Interest::WRITABLE) {
                writer = waiters.writer.take();
            }
            if !waiters.others.is_empty() {
                let mut i = 0;
                while i < waiters.others.len() {
                    if ready.satisfies(waiters.others[i].0) {
                        others.push(waiters.others.swap_remove(i).1);
                    } else {
                        i += 1;
                    }
                }
            }
        }
        // Woken outside the lock: a waker may run arbitrary code (schedule a task).
        if let Some(w) = reader {
            w.wake();
        }
        if let Some(w) = writer {
            w.wake();
        }
        for w in others {
            w.wake();
        }
    }
}

impl fmt::Debug for ScheduledIo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let event = self.readiness();
        f.debug_struct("ScheduledIo")
            .field("readiness", &event.readiness)
            .field("tick", &event.tick)
            .field("shutdown", &self.is_shutdown())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn stale_clear_keeps_a_newer_event() {
        let io = ScheduledIo::new();
        let before = io.readiness();
        io.set_readiness(Readiness::READABLE);
        io.clear_readiness(before, Interest::READABLE);
        assert!(io.readiness().readiness.contains(Readiness::READABLE));
        let now = io.readiness();
        io.clear_readiness(now, Interest::READABLE);
        assert!(io.readiness().readiness.is_empty());
    }

    #[test]
    fn closed_bits_survive_a_drained_read() {
        let io = ScheduledIo::new();
        io.set_readiness(Readiness::READABLE.add(Readiness::READ_CLOSED));
        io.clear_drained(io.readiness());
        assert_eq!(io.readiness().readiness, Readiness::READ_CLOSED);
        assert!(io.readiness().readiness.satisfies(Interest::READABLE));
        assert!(!io.readiness().readiness.satisfies(Interest::WRITABLE));
    }

    #[test]
    fn a_would_block_clears_its_directions_closed_bit_and_the_error_bit() {
        let io = ScheduledIo::new();
        let all = Readiness::READABLE
            .add(Readiness::READ_CLOSED)
            .add(Readiness::WRITABLE)
            .add(Readiness::WRITE_CLOSED)
            .add(Readiness::ERROR);
        io.set_readiness(all);
        io.clear_drained(io.readiness());
        assert_eq!(
            io.readiness().readiness,
            Readiness::READ_CLOSED
                .add(Readiness::WRITABLE)
                .add(Readiness::WRITE_CLOSED)
                .add(Readiness::ERROR)
        );
        io.clear_readiness(io.readiness(), Interest::READABLE);
        assert_eq!(
            io.readiness().readiness,
            Readiness::WRITABLE.add(Readiness::WRITE_CLOSED)
        );
        assert!(!io.readiness().readiness.satisfies(Interest::READABLE));
        io.clear_readiness(io.readiness(), Interest::WRITABLE);
        assert!(io.readiness().readiness.is_empty());
    }

    #[test]
    fn wait_times_out_and_leaves_no_waiter() {
        let io = ScheduledIo::new();
        let err = io
            .wait(
                Interest::READABLE,
                Some(Instant::now() + Duration::from_millis(10)),
            )
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(io.waiting_interest().is_none());
    }

    #[test]
    fn event_from_another_thread_wakes_each_waiter_of_its_direction() {
        let io = Arc::new(ScheduledIo::new());
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let io = io.clone();
                std::thread::spawn(move || io.wait(Interest::READABLE, None).unwrap().readiness)
            })
            .collect();
        let writer = {
            let io = io.clone();
            std::thread::spawn(move || {
                io.wait(
                    Interest::WRITABLE,
                    Some(Instant::now() + Duration::from_millis(200)),
                )
            })
        };
        while io.waiting_interest() != Some(Interest::BOTH) {
            std::thread::yield_now();
        }
        io.set_readiness(Readiness::READABLE);
        for r in readers {
            assert!(r.join().unwrap().contains(Readiness::READABLE));
        }
        // A read event does not end a write wait.
        assert_eq!(
            writer.join().unwrap().unwrap_err().kind(),
            io::ErrorKind::TimedOut
        );
    }

    #[test]
    fn shutdown_ends_waits_with_an_error() {
        let io = Arc::new(ScheduledIo::new());
        let waiter = {
            let io = io.clone();
            std::thread::spawn(move || io.wait(Interest::READABLE, None))
        };
        while io.waiting_interest().is_none() {
            std::thread::yield_now();
        }
        io.shutdown();
        let err = waiter.join().unwrap().unwrap_err();
        assert!(err.to_string().contains("shut down"), "{err}");
    }
}
