//! Spindle's IO: one driver interface for readiness and completion backends, and blocking-style
//! sockets, pipes and files that suspend only the calling coroutine.
//!
//! See [`driver`] for how a runtime and a backend meet.
#![deny(missing_docs)]

pub mod driver;
mod offload;
mod scheduled;

pub use driver::{Driver, Op, OpKind, Proactor, RawSource, Reactor, Unpark, current, with_driver};
pub use offload::{BlockingPool, offload, with_blocking_pool};
pub use scheduled::{Interest, Readiness, ReadyEvent, ScheduledIo};
