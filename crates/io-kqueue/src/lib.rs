//! Spindle's kqueue IO driver, for FreeBSD and macOS: a readiness backend ([`Reactor`]).
//!
//! One kqueue per driver, made on the worker thread that uses it. A source is registered once
//! for its life with `EVFILT_READ` and `EVFILT_WRITE`, both `EV_CLEAR` (edge-triggered): an
//! event means "something changed", and the IO types retry their call until `EWOULDBLOCK`, as
//! the protocol of [`ScheduledIo`] describes. Cross-thread wake-ups use an `EVFILT_USER` event
//! on the same kqueue, so one `kevent` call waits for both.
//!
//! | kqueue event | readiness |
//! |---|---|
//! | `EVFILT_READ` | `READABLE` |
//! | `EVFILT_READ` + `EV_EOF` | `READABLE`, `READ_CLOSED` (+ `ERROR` if `fflags` holds a socket error) |
//! | `EVFILT_WRITE` | `WRITABLE` |
//! | `EVFILT_WRITE` + `EV_EOF` | `WRITABLE`, `WRITE_CLOSED` (+ `ERROR` as above) |
//! | `EV_ERROR` | `ERROR` |
//!
//! On other targets this crate is empty.
//!
//! [`Reactor`]: spindle_io::Reactor
//! [`ScheduledIo`]: spindle_io::ScheduledIo
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(any(target_os = "freebsd", target_os = "macos"))]
mod kqueue;

#[cfg(any(target_os = "freebsd", target_os = "macos"))]
pub use kqueue::KqueueDriver;

/// The examples of the crate's README.md, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
