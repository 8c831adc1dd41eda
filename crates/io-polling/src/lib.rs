//! # spindle-io-polling
//!
//! Spindle's **portable** IO driver: a readiness backend on the [`polling`] crate, which wraps
//! epoll (Linux, Android), kqueue (macOS, the BSDs), IOCP with AFD polling (Windows), event
//! ports (illumos, Solaris) and `poll` elsewhere. It implements [`spindle_io::Driver`] and
//! [`spindle_io::Reactor`].
//!
//! One [`PollingDriver`] per worker thread owns one [`polling::Poller`]. Sources are
//! registered once for their life, edge-triggered where the OS supports it
//! ([`Poller::supports_edge`](polling::Poller::supports_edge): epoll, kqueue) and one-shot
//! elsewhere (IOCP, event ports, `poll`), where [`Reactor::rearm`](spindle_io::Reactor::rearm)
//! arms a source again before a task waits on it. Either way, each event sets the
//! [`Readiness`](spindle_io::Readiness) of the source's
//! [`ScheduledIo`](spindle_io::ScheduledIo) and wakes the tasks waiting in it. Wake-ups from
//! other threads go through [`Poller::notify`](polling::Poller::notify), and only when the
//! driver is (or may be) blocked in its wait.
//!
//! ## When to pick it
//!
//! * On a platform without a dedicated backend, or when one driver for every OS matters more
//!   than the last microsecond.
//! * As the **reference** in differential tests: on Linux it runs on epoll too (through
//!   `polling`), so `spindle-io-epoll` and `spindle-io-uring` are checked against it.
//!
//! Otherwise prefer the native backend: `polling` re-arms its notifier and sets a timer on
//! every wait (a few syscalls per park where `spindle-io-epoll` makes one).
//!
//! ### Readiness compared with `spindle-io-epoll`
//!
//! Waits end in the same situations. The readiness *bits* can differ where `polling` reports
//! less detail: a peer's half-close (`EPOLLRDHUP`) shows as `READABLE` without `READ_CLOSED`
//! (the read then returns 0), and a hang-up or error also sets `READABLE | WRITABLE`. On kqueue
//! `polling` reports neither hang-ups nor errors as such: they show as readable/writable.
//!
//! ## Example
//!
//! Create the driver on the thread that will use it, wake it from another thread, and park it
//! with a timeout:
//!
//! ```
//! use std::time::Duration;
//! use spindle_io::Driver;
//! use spindle_io_polling::PollingDriver;
//!
//! let driver = PollingDriver::new()?;
//! assert_eq!(driver.name(), "polling");
//!
//! // Nothing registered and nobody wakes it: the park waits out its timeout.
//! let dispatched = driver.park(Some(Duration::from_millis(1)))?;
//! assert_eq!(dispatched, 0);
//!
//! // An unpark before the park is a token: the next park returns at once.
//! let unparker = driver.unparker();
//! std::thread::spawn(move || unparker.unpark()).join().unwrap();
//! driver.park(None)?;
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! A runtime installs the driver with [`spindle_io::with_driver`] around its worker loop; the
//! IO types then register their sources through
//! [`Driver::reactor`](spindle_io::Driver::reactor).
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod driver;

pub use driver::{PollingDriver, Trigger};

#[cfg(test)]
mod tests;

/// The examples of the crate's README.md, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
