//! Cross-thread wake-ups: an eventfd that the ring polls (multishot), written only when the
//! driver sleeps.
//!
//! # The protocol (no lost wake-up, no needless syscall)
//!
//! One atomic word holds two bits: `SLEEPING` (the driver is in, or about to enter, a blocking
//! `io_uring_enter`) and `NOTIFIED` (an unpark is pending: the token).
//!
//! * `unpark`: `fetch_or(NOTIFIED)`. If the previous value had `SLEEPING` and not `NOTIFIED`,
//!   it writes the eventfd; otherwise it is done (the token is already pending, or the driver
//!   is awake and will see the token before it sleeps).
//! * blocking `park`: `fetch_or(SLEEPING)`. If the previous value had `NOTIFIED`, it does not
//!   wait (the token makes it return at once). Otherwise it enters the kernel to wait; when the
//!   wait ends it `swap(0)`s the word, clearing `SLEEPING` and consuming any token.
//!
//! Both are read-modify-writes of the same word, so they are totally ordered (its modification
//! order): either the unpark comes first — then the park sees `NOTIFIED` and does not wait — or
//! the park's `fetch_or` comes first — then the unpark sees `SLEEPING` and writes the eventfd.
//! The ring has a poll armed on the eventfd from before the park's `fetch_or` (armed when the
//! driver was made, re-armed in the same `io_uring_enter` that waits, before it waits, if it
//! ever terminated; arming checks the eventfd's current state), so that write completes the
//! poll and ends the wait. A write that lands after the wait already ended only makes a later
//! park return early once: spurious, never lost.
//!
//! Memory ordering: `unpark` is `Release` (what its caller published before it — a task pushed
//! to a queue — is visible to the driver's thread once that thread reads the word with
//! `Acquire`), the park side's reads are `Acquire`. An unpark whose `fetch_or` changes nothing
//! (the token was already set) still continues the release sequence, so the driver's `Acquire`
//! swap synchronises with it as well.
//!
//! A zero-timeout park neither sets `SLEEPING` nor consumes the token: a pending token then
//! makes the next blocking park return at once (one spurious turn), which is harmless, whereas
//! consuming it while busy could lose a wake-up the runtime relies on.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU8, Ordering};

use spindle_io::Unpark;

/// The driver is blocked (or about to block) in the kernel.
const SLEEPING: u8 = 1;
/// An unpark is pending.
const NOTIFIED: u8 = 2;

/// The shared half of a driver's wake-up mechanism; what [`UringDriver::unparker`] hands out.
///
/// [`UringDriver::unparker`]: spindle_io::Driver::unparker
#[derive(Debug)]
pub(crate) struct Unparker {
    state: AtomicU8,
    /// Owned here (not by the driver), so that an unparker outliving its driver writes to its
    /// own, still open eventfd, never to a reused descriptor.
    eventfd: OwnedFd,
}

impl Unparker {
    /// A non-blocking, close-on-exec eventfd.
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: plain syscall; no pointers.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "io_uring driver: could not create its wake-up eventfd ({e}); the runtime falls \
                     back to epoll"
                ),
            ));
        }
        Ok(Unparker {
            state: AtomicU8::new(0),
            // SAFETY: `fd` is a fresh descriptor that nothing else owns.
            eventfd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// The eventfd the ring polls.
    pub(crate) fn fd(&self) -> RawFd {
        self.eventfd.as_raw_fd()
    }

    /// Announces that the driver is about to wait in the kernel. Returns false (and consumes
    /// the token) if an unpark is pending: then it must not wait.
    pub(crate) fn begin_sleep(&self) -> bool {
        let previous = self.state.fetch_or(SLEEPING, Ordering::AcqRel);
        if previous & NOTIFIED != 0 {
            self.state.swap(0, Ordering::Acquire);
            return false;
        }
        true
    }

    /// The wait is over: clears `SLEEPING` and consumes a token that arrived meanwhile.
    pub(crate) fn end_sleep(&self) {
        self.state.swap(0, Ordering::Acquire);
    }

    /// Whether a token is pending (for tests).
    #[cfg(test)]
    pub(crate) fn notified(&self) -> bool {
        self.state.load(Ordering::Acquire) & NOTIFIED != 0
    }
}

impl Unpark for Unparker {
    fn unpark(&self) {
        let previous = self.state.fetch_or(NOTIFIED, Ordering::AcqRel);
        if previous & (SLEEPING | NOTIFIED) == SLEEPING {
            let one = 1u64;
            // SAFETY: writes 8 bytes from `one`; the eventfd is open while `self` lives. An
            // error (EAGAIN: the counter is at its maximum) means it is readable already.
            let _ = unsafe { libc::write(self.fd(), (&raw const one).cast(), 8) };
        }
    }
}
