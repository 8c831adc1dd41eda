//! Spindle's IO: one driver interface for readiness and completion backends, and blocking-style
//! sockets, pipes and files that suspend only the calling coroutine.
//!
//! See [`driver`] for how a runtime and a backend meet.
#![deny(missing_docs)]

pub mod driver;
#[cfg(unix)]
mod fd;
#[cfg(unix)]
pub mod fs;
#[cfg(unix)]
pub mod net;
mod offload;
#[cfg(unix)]
mod pipe;
mod scheduled;
mod source;
#[cfg(unix)]
mod sys_unix;

pub use driver::{Driver, Op, OpKind, Proactor, RawSource, Reactor, Unpark, current, with_driver};
#[cfg(unix)]
pub use fd::Io;
pub use offload::{BlockingPool, offload, with_blocking_pool};
#[cfg(unix)]
pub use pipe::{PipeReader, PipeWriter, pipe};
pub use scheduled::{Interest, Readiness, ReadyEvent, ScheduledIo};
