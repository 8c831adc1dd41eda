//! Synchronisation primitives and channels that work between coroutines, threads, and across
//! the two.
//!
//! Every primitive blocks its caller the cheapest right way: inside a runtime's coroutine
//! (`spindle-rt`, or any runtime that installs a `spindle_park` hook) the coroutine suspends and
//! its worker runs others; anywhere else the OS thread parks. The two mix freely — a thread may
//! wait for a lock a coroutine holds, a coroutine may receive what a thread sends — and nothing
//! here needs a runtime: the crate depends only on `spindle-park` and can be used alone.
//!
//! | primitive | what |
//! |---|---|
//! | [`Mutex`] | lock, `lock_async`, `try_lock`, `try_lock_for/until`; FIFO queue with barging; a waiter overdue by 1 ms is handed the lock (rationed to once per ms) |
//! | [`RwLock`] | readers or one writer; FIFO with read batches: neither side starves |
//! | [`Condvar`] | `wait`, `wait_while`, `wait_timeout(_while)`, `wait_until(_while)`; **no spurious wake-ups** |
//! | [`Semaphore`] | acquire `n`, `try_`, `_timeout`/`_deadline`, close; FIFO |
//! | [`Barrier`] | `n` callers per round, one leader |
//! | [`WaitGroup`] | Go's: `add`, `done`, `wait` |
//! | [`OnceCell`], [`Lazy`] | initialised once while others wait |
//! | [`Notify`] | `notify_one` (with a stored permit), `notify_all`, `wait` |
//! | [`mpsc`], [`mpmc`] | bounded, unbounded, zero-capacity (rendezvous) channels |
//! | [`oneshot`] | one message |
//! | [`select!`], [`Select`] | wait on any mix of sends and receives, with a timeout or a default |
//!
//! ```
//! use std::sync::Arc;
//! use spindle_sync::{Mutex, mpsc};
//!
//! // No runtime here: threads. The same code in coroutines suspends them instead.
//! let total = Arc::new(Mutex::new(0));
//! let (tx, rx) = mpsc::bounded(2);
//! let consumer = {
//!     let total = total.clone();
//!     std::thread::spawn(move || {
//!         for x in rx {
//!             *total.lock() += x;
//!         }
//!     })
//! };
//! for x in 1..=10 {
//!     tx.send(x).unwrap();
//! }
//! drop(tx);
//! consumer.join().unwrap();
//! assert_eq!(*total.lock(), 55);
//! ```
//!
//! # How waiting works
//!
//! Every waiting caller allocates a waiter record on the heap (an `Arc` with its
//! `std::task::Waker` from `spindle_park::waker()` and one state word), puts it in the
//! primitive's wait queue under the primitive's internal lock, releases the lock and parks
//! (`spindle_park::park`, `park_until`). `spindle_park`'s permit makes "register, unlock, park"
//! race-free. Waiter records never live on a coroutine's stack, so coroutines on shared
//! (copying) stacks can wait too. Every way out of a wait — a
//! notification, a hand-off, a timeout, a cancellation — is decided by one compare-and-swap on
//! the record's state word, so exactly one party decides and nothing is handed to a waiter
//! that has left.
//!
//! # Async variants
//!
//! So that async code and coroutines can wait on each other, the primitives that wait for
//! something offer it as a future too: [`Mutex::lock_async`], [`RwLock::read_async`] /
//! [`write_async`](RwLock::write_async), [`Semaphore::acquire_async`] /
//! [`acquire_many_async`](Semaphore::acquire_many_async), [`Notify::notified`],
//! [`WaitGroup::wait_async`], the channels' `send_async` / `recv_async`
//! ([`mpsc::Sender::send_async`], [`mpsc::Receiver::recv_async`], the same in [`mpmc`]),
//! [`oneshot::Receiver::recv_async`], and a [`oneshot::Receiver`] can be awaited.
//!
//! * **Runtime-agnostic.** A pending future is woken through the `Waker` of the `Context` it
//!   was last polled with; no executor is assumed (any executor, `spindle_park::block_on`
//!   inside a coroutine, or a hand-written loop).
//! * **One queue.** A pending future's waiter record goes into the primitive's own wait queue,
//!   next to those of blocked coroutines and threads: all are served in one FIFO order, with
//!   the same policy (a mutex's barging and hand-off, a rwlock's read batches, ...). A future
//!   does nothing until it is first polled, and it queues then.
//! * **Cancel-safe.** Dropping a pending future is a cancellation (below): its record leaves
//!   the queue, and a lock, permits, a `notify_one` or a message handed to it in that instant
//!   is passed on. A dropped send future drops its message unless it was already taken.
//! * The record is an `Arc` the future holds (nothing points into the future), so every future
//!   here is `Unpin` and may move between polls, and shared-stack coroutines can hold them.
//! * **No spurious completions**: a future is ready only with what it waited for. Polling one
//!   again after it was ready is a misuse with harmless results (the lock futures lock again,
//!   the channel futures stay pending or receive again).
//!
//! ```
//! use std::sync::Arc;
//! use spindle_sync::{Mutex, mpsc};
//!
//! // An async producer and a blocking consumer on one channel, sharing one mutex.
//! let total = Arc::new(Mutex::new(0));
//! let (tx, rx) = mpsc::bounded(1);
//! let t = {
//!     let total = total.clone();
//!     std::thread::spawn(move || {
//!         for x in rx {
//!             *total.lock() += x;
//!         }
//!     })
//! };
//! spindle_park::block_on(async move {
//!     for x in 1..=10 {
//!         tx.send_async(x).await.unwrap();
//!     }
//! });
//! t.join().unwrap();
//! assert_eq!(*spindle_park::block_on(total.lock_async()), 55);
//! ```
//!
//! # Guarantees common to all primitives
//!
//! * **No spurious wake-ups.** A blocking call returns when its condition is met (a lock
//!   granted or freed for it, a notification for it, a message) or its deadline passed —
//!   never because of a stray wake-up of the task (those are absorbed internally).
//! * **Timeouts** take a [`Duration`](std::time::Duration) (`*_for` / `*_timeout`) or an
//!   [`Instant`](std::time::Instant) (`*_until` / `*_deadline`). A timeout too large for an
//!   `Instant` means "no timeout". A hand-off that races with the deadline is kept (the call
//!   succeeds); nothing is lost to a timeout.
//! * **Cancellation.** A cancelled coroutine's park unwinds (see `spindle_park`). Every wait
//!   here has a drop guard that leaves the primitive consistent: the waiter record is removed;
//!   a lock, permits or a `notify_one` it was handed in that instant are passed on; a message
//!   it was handed is put back at the front of its channel. No lost permit, message or
//!   wake-up, no waiter left behind.
//! * **Poisoning: none** (parking_lot's choice, not std's). A panic — or a cancelled coroutine
//!   unwinding — while holding a [`Mutex`] or [`RwLock`] releases it; the next holder sees the
//!   data as it was left. With coroutines that unwind on cancellation, std's poisoning would
//!   poison every lock held across a cancellation point. Methods return guards, not
//!   `LockResult`s.
//! * **Waiting in `Drop` during a cancellation**: the guards of this crate never wait in their
//!   destructors. Code that does (a `Drop` that locks a contended `Mutex`) and runs while a
//!   cancelled coroutine unwinds would park inside the unwind; `spindle-rt` unwinds such a park
//!   again, which aborts the process (a panic while panicking).
//! * **No panics on bad input**: too many semaphore permits → [`AcquireError::TooMany`];
//!   `WaitGroup::done` below zero → `false`; `Barrier::new(0)` acts as 1; a zero-capacity
//!   channel is a rendezvous.
//!
//! # Channels
//!
//! [`mpsc`] and [`mpmc`] have the same API ([`mpmc`]'s `Receiver` is `Clone`): `bounded(cap)`,
//! `unbounded()`, and `bounded(0)` for a zero-capacity channel, where a send waits for a
//! receive to take the message (a rendezvous). [`oneshot`] carries one message.
//!
//! * `send` / `recv` block; `try_send` / `try_recv` never do; `send_timeout` / `recv_timeout`
//!   and `send_deadline` / `recv_deadline` wait at most until a deadline. `iter`, `try_iter`
//!   and `into_iter` iterate.
//! * **Disconnection** as std and crossbeam define it: when every `Sender` is gone, receivers
//!   get what is still buffered, then `RecvError` / `Disconnected`; when every `Receiver` is
//!   gone, sends fail and give the message back (waiting senders too), and buffered messages
//!   are dropped.
//! * **Order**: FIFO per channel; blocked senders complete in order; blocked receivers are
//!   served in order.
//! * **Spinning**: a blocked `send`/`recv` spins up to 20 µs before parking, but only while
//!   the channel's recent blocked operations were completed from *other* threads (a peer on
//!   another worker or a plain thread answers within microseconds, while a park and wake-up can
//!   cost a sleeping worker thread's wake-up); a peer on the same worker cannot run while one
//!   spins, so completions from the waiter's own thread turn spinning off. A spinning waiter is
//!   not woken (it sees the completion by itself). Every blocking `send`/`recv` counts against
//!   the runtime's cooperative budget (`spindle_park::consume_budget`) before it acts, and so
//!   does an operation completed while spinning: a coroutine whose channel always has a
//!   message (or room) still yields its worker now and then. That yield is a cancellation
//!   point: a cancelled coroutine unwinds there, before its `recv` takes a message (none is
//!   lost) or its `send` takes the caller's (which unwinds with the caller, as from a blocked
//!   send).
//! * Boost.Fiber's channel status matrix maps onto the result types: *success* `Ok`, *empty*
//!   `TryRecvError::Empty`, *full* `TrySendError::Full`, *closed* `…::Disconnected`,
//!   *timeout* `…::Timeout`.
//!
//! # Loom
//!
//! Under `RUSTFLAGS="--cfg loom"` the atomics, internal locks and the parker are loom's, and
//! `tests/loom_*.rs` model every wait queue and hand-off (see `src/loom.rs`).
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod loom;
mod waiter;

mod barrier;
mod chan;
mod condvar;
mod mutex;
mod notify;
mod once;
mod rwlock;
mod select;
mod semaphore;
mod waitgroup;

pub mod mpmc;
pub mod mpsc;
pub mod oneshot;

pub use barrier::{Barrier, BarrierWaitResult};
pub use chan::error::{
    RecvError, RecvTimeoutError, SendError, SendTimeoutError, TryRecvError, TrySendError,
};
pub use condvar::{Condvar, WaitTimeoutResult};
pub use mutex::{Mutex, MutexGuard, MutexLockFuture};
pub use notify::{Notified, Notify};
pub use once::{Lazy, OnceCell};
pub use rwlock::{RwLock, RwLockReadFuture, RwLockReadGuard, RwLockWriteFuture, RwLockWriteGuard};
pub use select::{Select, SelectRecv, SelectSend};
pub use semaphore::{Acquire, AcquireError, Semaphore, SemaphorePermit};
pub use waitgroup::{WaitGroup, WaitGroupWait};

/// Test hooks of the loom build (the loom-modelled parker). Not part of the API.
#[cfg(loom)]
#[doc(hidden)]
pub mod __loom {
    pub use crate::loom::loom_park::{Cancelled, cancel_next_park, clear_cancel, recycle_packets};
}

// How the crate is built, for whoever changes it (`cargo doc --document-private-items`).
mod internals;

/// The examples of the crate's README.md, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
