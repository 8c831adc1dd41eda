//! The Spindle runtime: worker threads that run stackful coroutines.
//!
//! ```
//! use spindle_rt::Runtime;
//! use std::time::Duration;
//!
//! let rt = Runtime::builder().workers(2).build()?;
//! let answer = rt.block_on(|| {
//!     // A coroutine: blocking-style code that suspends only itself.
//!     let handles: Vec<_> = (0..10)
//!         .map(|i| spindle_rt::spawn(move || {
//!             spindle_rt::sleep(Duration::from_millis(1));
//!             i * i
//!         }))
//!         .collect();
//!     handles.into_iter().map(|h| h.join().unwrap()).sum::<i32>()
//! });
//! assert_eq!(answer, 285);
//! # Ok::<(), spindle_rt::BuildError>(())
//! ```
//!
//! # What a coroutine can do
//!
//! [`spawn`] coroutines (from coroutines, or from any thread through a [`Handle`] or the
//! [`Runtime`]), [`JoinHandle::join`] them (in a coroutine that suspends only the caller, on a
//! thread it blocks it), [`JoinHandle::cancel`] them (they unwind from their next suspension
//! point, destructors run), [`sleep`], [`yield_now`], [`park`] / [`Current::unpark`] like
//! `std::thread`, run [`blocking`] work on a thread pool, spawn borrowing children in a
//! [`scope`], keep [`coroutine_local!`] values, wait for any runtime-agnostic future with
//! [`block_on_future`] (a [`JoinHandle`] is one too, so async code can await coroutines).
//! Every blocking operation of Spindle goes through `spindle_park`, so the same code blocks a
//! plain thread when it runs outside a runtime.
//!
//! # IO
//!
//! Each worker owns an IO driver ([`IoBackend`]: io_uring, epoll, kqueue, IOCP or the portable
//! `polling` one; by default the platform's best, `SPINDLE_IO` to choose) and sleeps in it when
//! it has nothing to run. The blocking-style types of `spindle-io` (`TcpStream`, `UdpSocket`,
//! `File`...) suspend only the calling coroutine:
//!
//! ```
//! use std::io::{Read, Write};
//! use spindle_io::net::{TcpListener, TcpStream};
//!
//! let rt = spindle_rt::Runtime::builder().workers(1).build()?;
//! let reply = rt.block_on(|| -> std::io::Result<String> {
//!     let listener = TcpListener::bind("127.0.0.1:0")?;
//!     let addr = listener.local_addr()?;
//!     let server = spindle_rt::spawn(move || -> std::io::Result<()> {
//!         let (mut conn, _) = listener.accept()?; // suspends this coroutine only
//!         let mut buf = [0; 5];
//!         conn.read_exact(&mut buf)?;
//!         conn.write_all(&buf)
//!     });
//!     let mut client = TcpStream::connect(&addr)?;
//!     client.write_all(b"hello")?;
//!     let mut back = String::new();
//!     client.read_to_string(&mut back)?;
//!     server.join().unwrap()?;
//!     Ok(back)
//! })?;
//! assert_eq!(reply, "hello");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Policies: which one when
//!
//! | [`Policy`] | queues | use it for |
//! |---|---|---|
//! | `WorkStealing` (default) | per-worker deques, a run-next slot, a global injector, stealing | throughput: servers, fan-out/fan-in, uneven work |
//! | `RoundRobin` | one queue per worker; new coroutines dealt in turn; no migration | predictable placement, per-worker state, measuring |
//! | `Fifo` | one global first-in-first-out queue | fairness of order as a reference (fair in turns, not in time: see [Fairness](#fairness)); latency-sensitive work with few cores |
//!
//! # Memory
//!
//! A coroutine is one heap block (its header, its join cell, its closure) and a stack. Each
//! worker keeps the blocks of finished coroutines for its next spawns, as Go keeps dead
//! goroutines per P (up to 4 MiB per worker), and their stacks in the runtime's stack pool (up
//! to 16,384 per worker and 16,384 shared: [`RuntimeBuilder::stack_pool`]). A worker that has
//! slept a second with nothing to do gives back what a spike left: task blocks beyond 256 KiB
//! to the allocator, idle stacks beyond 256 in its cache and 256 shared to the OS. Stacks of
//! other sizes ([`Builder::stack_size`]) come from pools the runtime keeps per size (32 per
//! thread, 1,024 shared), under the same release. Shutting the runtime down unmaps the idle
//! stacks of all its pools.
//! `SPINDLE_TASK_CACHE=0` turns the block cache off (it is off under valgrind and the
//! sanitizers, where a reused block would hide a use-after-free).
//!
//! # Cargo features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `sched-ws`, `sched-rr`, `sched-fifo` | all | the [`Policy`] of that name; at least one is required (a `compile_error!` otherwise); one left out is refused by [`RuntimeBuilder::build`] with [`BuildError::NotCompiled`] |
//! | `stack-growable` | yes | [`StackKind::Growable`] (without it: `BuildError::NotCompiled`, or a spawn error naming the feature) |
//! | `stack-shared` | yes | [`Builder::shared_stack`] coroutines (without it: the spawn fails with an error naming the feature) |
//! | `io-uring`, `io-epoll`, `io-kqueue`, `io-iocp` | all | that [`IoBackend`]; each compiles to nothing where the OS lacks it |
//! | `io-polling` | no | the portable backend on the `polling` crate |
//!
//! The `spindle` facade has the same feature names and forwards them.
//!
//! # Migration and thread-locals
//!
//! A coroutine's stack may hold references into thread-locals, `Rc`s, or addresses the compiler
//! computed from a thread-local before a switch. So a coroutine spawned with the safe API may
//! move to another worker only *before it first runs* (work-stealing moves those freely); once
//! it has run, it stays on that worker. [`Builder::migratable`] (`unsafe`) lets it move at any
//! suspension point, under a written contract.
//!
//! # Cancellation and shutdown
//!
//! [`JoinHandle::cancel`] makes the coroutine unwind from the suspension point where it waits
//! (a sleep, a join, a park) or the next one it reaches; its destructors run and `join` reports
//! [`JoinError::Cancelled`]. A [`CancelGuard`] holds cancellation off through a critical
//! section ([`with_cancel_deferred`] holds it off through one call and cannot be forgotten);
//! dropping a guard ends the deferral of the coroutine that made it, even where other code
//! of its thread drops it (a thread-local can carry it there) — except for a
//! [migratable](Builder::migratable) coroutine, whose deferral such a drop leaves in place.
//! Dropping the [`Runtime`] cancels every coroutine still alive, waits for them to unwind, and
//! joins the worker threads and the [`blocking`] pool's threads (a blocking job that never
//! returns keeps the drop waiting: [`Runtime::shutdown_timeout`] bounds it). Coroutines that
//! hold their cancellation off while parked (a forgotten `CancelGuard`) cannot be made to end:
//! once they are all that is left, the shutdown waits [`CANCEL_DEFERRAL_GRACE`] more, logs
//! their names (a `log` warning) and abandons them, leaking their stacks.
//!
//! # Signals, `fork()` and other process-level faults
//!
//! * **Graceful shutdown on SIGINT/SIGTERM**: the `graceful` example (self-pipe: the handler
//!   only `write(2)`s a byte; a coroutine reading the pipe cancels the acceptor, which closes
//!   the listener, waits for the requests in flight up to a deadline, and cancels the rest).
//!   Signals interrupting Spindle's own waits (`EINTR` in `epoll_wait`, `io_uring_enter`,
//!   `poll(2)`, thread parks) are retried inside, so a handler installed without `SA_RESTART`
//!   makes no Spindle call fail with `Interrupted`.
//! * **`fork()` with a runtime running**: only the forking thread exists in the child; the
//!   runtime's workers, its monitor and its blocking-pool threads do not. In the child the
//!   parent's [`Runtime`] and its [`Handle`]s are inert: coroutines spawned on them never run,
//!   [`Runtime::block_on`] on it never returns, and **dropping it hangs** (it waits for its
//!   coroutines to unwind and joins its workers, none of which exist). Leave it alone: end the
//!   child with `exec` or `_exit`, or `std::mem::forget` it. The child can build and use a
//!   fresh runtime (tested: coroutines, timers, TCP); IO objects made in the parent stay
//!   registered with the parent's drivers, so move them over as raw descriptors (`into_std` /
//!   `from_std`) rather than using them directly. As with any multi-threaded program, a lock
//!   another thread held at the fork (the stack registry's free list, a stack pool's cache)
//!   stays held in the child: fork early, or `fork` + `exec` (`std::process::Command` does).
//! * **Out of memory or mappings**: [`Builder::spawn`] returns the error (which limit, what to
//!   do) and the runtime keeps running the coroutines it has; [`spawn`] panics with it.
//! * **Stack overflow** in a coroutine: one `spindle:` line naming it, then abort.
//! * **A coroutine's reference count overflowing** (more than `isize::MAX` wakers and handles
//!   of one coroutine alive, which only leaking them in a loop can reach) aborts, as `Arc`'s
//!   does: wrapping around would free a coroutine still in use.
//!
//! # Fairness
//!
//! A coroutine runs until it suspends. Operations that complete without suspending count
//! against a per-slice budget ([`consume_budget`]): a coroutine that only makes such
//! operations yields after 128 of them. A task woken into the run-next slot inherits the
//! slice (Go's rule), and from then on the slice ends in time only: a chain of coroutines
//! waking each other gets one slice of the worker's time (10 to 20 ms), however cheap or
//! costly its hand-offs, so two coroutines ping-ponging short messages get as much of the
//! worker as two that work milliseconds per message (the shape of Go's `TestPingPongHog`). That
//! is the `WorkStealing` policy; `Fifo` and `RoundRobin` have no run-next slot and queue every
//! wake-up at the back: they are fair in turns (each ready coroutine runs once per round of
//! the queue), not in time (one that works longer per turn takes more of the worker). A
//! monitor thread ends slices older than 10 ms (the coroutine yields at its next budgeted
//! operation), and reports a coroutine that keeps its
//! worker for more than 10 ms (configurable, or off: [`RuntimeBuilder::stuck_threshold`])
//! without suspending; it then wakes a sleeping worker to steal the queued coroutines that may
//! move (with `WorkStealing`, every coroutine that has not started yet, and migratable ones),
//! and until that worker comes back it fires the due timers of the [migratable] coroutines
//! that parked there, so that their sleeps end on another worker. Coroutines pinned to that
//! worker (every started one that is not migratable) wait for it, and so does IO registered
//! with its driver, migratable coroutines' too: only a worker polls its own driver.
//! `RoundRobin` has no stealing: what was dealt to the stuck worker waits for it.
//!
//! [migratable]: Builder::migratable
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]
// Builds that leave a feature out leave some shared helpers unused.
#![cfg_attr(
    not(all(
        feature = "sched-fifo",
        feature = "sched-rr",
        feature = "sched-ws",
        feature = "stack-growable",
        feature = "stack-shared"
    )),
    allow(dead_code, unused_imports)
)]

#[cfg(not(any(feature = "sched-fifo", feature = "sched-rr", feature = "sched-ws")))]
compile_error!(
    "spindle-rt needs at least one scheduling policy: enable the `sched-ws` (work-stealing, the \
     default), `sched-rr` or `sched-fifo` feature (of spindle-rt, or of the spindles facade)"
);

mod blocking;
mod carrier;
mod coop;
mod current;
mod future;
mod handoff;
mod io;
mod join;
mod join_cell;
mod local;
mod loom;
mod metrics;
mod monitor;
mod registry;
mod runtime;
mod scope;
mod spawn;
mod state;
mod task;
mod task_alloc;
mod time;
mod worker;

pub use blocking::blocking;
pub use coop::{consume_budget, yield_now};
pub use current::{Current, current, park, park_timeout, try_current};
pub use future::{block_on_future, block_on_owned_future};
pub use io::{DriverFactory, IoBackend};
pub use join::{CancelGuard, JoinError, JoinHandle, with_cancel_deferred};
pub use local::LocalKey;
pub use metrics::{Metrics, WorkerMetrics};
pub use monitor::StuckReport;
pub use runtime::{
    BuildError, CANCEL_DEFERRAL_GRACE, Handle, Policy, Runtime, RuntimeBuilder, StackKind,
};
pub use scope::{Scope, ScopedJoinHandle, scope};
pub use spawn::{Builder, MIN_STACK_SIZE, spawn};
pub use time::{sleep, sleep_until};

// How the crate is built, for whoever changes it (`cargo doc --document-private-items`).
mod internals;

/// The examples of the crate's README.md, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
