//! Spindle's IO: one driver interface for readiness and completion backends, and blocking-style
//! sockets, pipes and files that suspend only the calling coroutine.
//!
//! See [`driver`] for how a runtime and a backend meet.
//!
//! # The worker's driver is not for applications
//!
//! A runtime's worker drives one backend, shared by every coroutine on it. Only this crate's IO
//! types, on the sources they own, and the backends reach it; safe code cannot: an operation
//! submitted on an fd number one does not own, or a `park` of the worker's driver from a
//! coroutine, would break the other coroutines' IO.
//!
//! ```compile_fail,E0133
//! // error[E0133]: call to unsafe function `spindle_io::current` is unsafe
//! let _ = spindle_io::current(|driver| driver.name());
//! ```
//!
//! # Platforms
//!
//! * **Unix**: everything here — TCP, UDP and Unix-domain sockets ([`net`]), `Io` for any
//!   descriptor, pipes, files (`fs`).
//! * **Windows**: the driver interface and the internet sockets of [`net`] (`TcpListener`,
//!   `TcpStream`, `UdpSocket`, `ToSocketAddrs`), with the same API as on Unix (conversions
//!   with the std types and `AsRawSocket`/`AsSocket`/`FromRawSocket`/`IntoRawSocket`/
//!   `From<OwnedSocket>` instead of their fd counterparts). Sockets are overlapped and
//!   non-blocking: on the IOCP driver operations are overlapped (`AcceptEx`, `ConnectEx`,
//!   `WSARecv`...); on a readiness driver (polling) they are non-blocking calls retried on
//!   readiness; with no runtime the thread waits in `WSAPoll`. Files, pipes, `Io` and Unix
//!   sockets are Unix-only for now.
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(unix)]
mod accept_queue;
pub mod driver;
#[cfg(unix)]
mod fd;
#[cfg(unix)]
pub mod fs;
#[cfg(unix)]
#[doc(hidden)]
pub mod hook_support;
#[cfg(any(unix, windows))]
pub mod net;
mod offload;
#[cfg(unix)]
mod pipe;
// The table of Spindle's readiness backends (epoll, kqueue, polling), public for them; not
// part of this crate's API.
#[doc(hidden)]
pub mod registrations;
mod scheduled;
mod source;
#[cfg(unix)]
mod sys_unix;
#[cfg(windows)]
mod sys_windows;

/// This platform's system calls (the ones the std types lack in non-blocking form).
#[cfg(unix)]
use sys_unix as sys;
#[cfg(windows)]
use sys_windows as sys;

pub use driver::{Driver, Op, OpKind, Proactor, RawSource, Reactor, Unpark, current, with_driver};
#[cfg(unix)]
pub use fd::Io;
pub use offload::{BlockingPool, offload, with_blocking_pool};
#[cfg(unix)]
pub use pipe::{PipeReader, PipeWriter, pipe};
pub use scheduled::{Interest, Readiness, ReadyEvent, ScheduledIo};

// How the crate is built, for whoever changes it (`cargo doc --document-private-items`).
mod internals;

/// The examples of the crate's README.md, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
