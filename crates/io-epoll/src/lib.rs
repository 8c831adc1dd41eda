//! # spindle-io-epoll
//!
//! Spindle's **epoll** IO driver: a readiness backend for Linux implementing
//! [`spindle_io::Driver`] and [`spindle_io::Reactor`].
//!
//! One [`EpollDriver`] per worker thread owns one epoll instance. Sources are registered
//! edge-triggered (`EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET`) once for their life; each event
//! sets the [`Readiness`](spindle_io::Readiness) of the source's
//! [`ScheduledIo`](spindle_io::ScheduledIo) and wakes the tasks waiting in it. Wake-ups from
//! other threads ([`Unpark`](spindle_io::Unpark)) go through an eventfd in the same epoll
//! instance, and only cost a syscall when the driver is (or may be) blocked in `epoll_wait`.
//!
//! ## When to pick it
//!
//! On Linux it is the default readiness backend: one `epoll_wait` per park, no allocation per
//! park, no syscall per event. Prefer `spindle-io-uring` where io_uring is available and allowed
//! (it batches the IO itself), and `spindle-io-polling` when you need one backend for every OS
//! (it is also the reference these backends are compared against in differential tests).
//!
//! On targets other than Linux this crate is empty: it compiles, but has no driver.
//!
//! ## Example
//!
//! Create the driver on the thread that will use it, wake it from another thread, and park it
//! with a timeout:
//!
//! ```
//! # #[cfg(target_os = "linux")]
//! # fn main() -> std::io::Result<()> {
//! use std::time::Duration;
//! use spindle_io::Driver;
//! use spindle_io_epoll::EpollDriver;
//!
//! let driver = EpollDriver::new()?;
//! assert_eq!(driver.name(), "epoll");
//!
//! // Nothing registered and nobody wakes it: the park waits out its timeout.
//! let dispatched = driver.park(Some(Duration::from_millis(1)))?;
//! assert_eq!(dispatched, 0);
//!
//! // An unpark before the park is a token: the next park returns at once.
//! let unparker = driver.unparker();
//! std::thread::spawn(move || unparker.unpark()).join().unwrap();
//! driver.park(None)?;
//! # Ok(())
//! # }
//! # #[cfg(not(target_os = "linux"))]
//! # fn main() {}
//! ```
//!
//! A runtime installs the driver with [`spindle_io::with_driver`] around its worker loop; the
//! IO types then register their sources through [`Driver::reactor`](spindle_io::Driver::reactor).
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(target_os = "linux")]
mod epoll;

#[cfg(target_os = "linux")]
pub use epoll::EpollDriver;

#[cfg(all(test, target_os = "linux"))]
mod tests;

/// The examples of the crate's README.md, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
