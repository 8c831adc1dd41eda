//! Spindle's io_uring driver: a completion backend ([`spindle_io::Proactor`]) with one ring per
//! worker thread.
//!
//! ```no_run
//! # #[cfg(target_os = "linux")] {
//! use spindle_io::{Driver, Op, Proactor};
//! use spindle_io_uring::UringDriver;
//!
//! let driver = UringDriver::new()?; // the runtime falls back to epoll if this fails
//! let (a, b) = std::os::unix::net::UnixStream::pair()?;
//! use std::os::fd::AsRawFd;
//! let proactor = driver.proactor().unwrap();
//! proactor.submit(Op::Send { fd: a.as_raw_fd(), buf: b"ping", flags: 0 }, None)?;
//! let mut buf = [0u8; 4];
//! let n = proactor.submit(Op::Recv { fd: b.as_raw_fd(), buf: &mut buf, flags: 0 }, None)?;
//! assert_eq!(&buf[..n], b"ping");
//! # }
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! # How an operation runs
//!
//! [`Proactor::submit`](spindle_io::Proactor::submit) takes a completion record (heap, fixed
//! address, reused through a free list), pushes one SQE whose `user_data` is the record's index
//! and which points at the caller's buffers, and waits:
//!
//! * **In a task of the runtime whose worker parks in this driver** (the driver installed with
//!   [`spindle_io::with_driver`]): it parks the task (`spindle_park`). The SQE is not submitted
//!   at once: the worker's next [`Driver::park`](spindle_io::Driver::park) submits everything
//!   queued since the last turn and reaps every completion in **one `io_uring_enter`**, marks
//!   the records completed and wakes their tasks.
//! * **Anywhere else** (a plain thread, a worker's own code, a task of another driver): nobody
//!   else drives this ring, so `submit` drives it itself — `io_uring_enter` with a wait, reap,
//!   until its own record completes (dispatching whatever else completes meanwhile). This
//!   blocks the thread, like the std call would.
//!
//! The record lives until the driver is dropped and stays "in the kernel" until its completion
//! is reaped, so a completion can never name freed memory. `submit` itself never returns (nor
//! unwinds) before that completion: the kernel may use the caller's buffers until then.
//!
//! ## Buffers on copying stacks
//!
//! The records, the `msghdr` of `RecvFrom`/`SendTo` and everything else this driver owns are on
//! the heap. The *data buffers and addresses in the [`Op`](spindle_io::Op)* are the caller's and
//! are handed to the kernel as they are: a caller running on a copying (shared) stack
//! ([`spindle_park::on_copying_stack`]) must bounce them through the heap first (invariant 3),
//! because while it is suspended its stack bytes live elsewhere. That is the IO types' job.
//!
//! # Deadlines and cancellation
//!
//! While an operation is in the kernel, `submit` holds a [`spindle_park::defer_cancel`] guard.
//! When the deadline passes or the task is asked to cancel, it pushes `IORING_OP_ASYNC_CANCEL`
//! for the record and **keeps waiting for the operation's own completion**. Then:
//!
//! * the operation completed anyway (the data moved before the cancel took): its real result;
//! * deadline: `TimedOut`;
//! * cancellation: the guard is dropped and [`spindle_park::checkpoint`] unwinds the task (if an
//!   outer guard still defers it, `submit` returns the result, `ECANCELED` typically).
//!
//! If `submit` is unwound anyway while its operation is in the kernel (a runtime that unwinds a
//! park despite the guard, a panicking waker), a drop guard cancels the operation and drives the
//! ring until its completion before the unwind continues.
//!
//! # Non-blocking sources: what the kernel does (measured on Linux 6.18)
//!
//! The IO types keep their sockets and pipes `O_NONBLOCK`. On 6.18, io_uring does **not**
//! answer `EAGAIN` for them: `RECV`, `SEND`, `READ` and `WRITE` on an empty/full `O_NONBLOCK`
//! socket or pipe, `ACCEPT` on a non-blocking listener, all arm the kernel's internal poll and
//! complete when the operation can proceed (they can be cancelled while waiting: `-ECANCELED`).
//! `CONNECT` on a non-blocking socket completes with the connection's result (0 or
//! `-ECONNREFUSED`...), not `-EINPROGRESS`. Older kernels did answer `EAGAIN` for
//! `O_NONBLOCK` files, so `submit` still handles it: on `-EAGAIN` (unless the caller asked for
//! `MSG_DONTWAIT`) it submits a one-shot `POLL_ADD` for the direction, then the operation
//! again; on `-EINPROGRESS`/`-EALREADY` from `CONNECT` it polls for `POLLOUT` and reads
//! `SO_ERROR`. The test `nonblocking_sources_wait_in_the_kernel` checks the 6.18 behaviour, and a
//! unit test forces the `EAGAIN` path.
//!
//! `Send`/`SendTo` always add `MSG_NOSIGNAL` (a closed peer is `EPIPE`, never `SIGPIPE`).
//! `Write` is `write(2)`: on a socket or pipe whose reader is gone it raises `SIGPIPE` as
//! `write(2)` does (Rust programs ignore it by default); sockets should use `Send`. `Accept`
//! creates the connection `SOCK_NONBLOCK | SOCK_CLOEXEC` (accept4 semantics). One read or write
//! moves at most `0x7ffff000` bytes, as the syscalls do.
//!
//! # Full queues
//!
//! * **Submission queue full**: the push flushes the queue to the kernel (`io_uring_enter`),
//!   reaps what completed, and retries; so more operations than ring entries can be in flight.
//!   `EBUSY`/`EAGAIN` from the kernel are answered by reaping and retrying.
//! * **Completion queue full**: the driver requires `IORING_FEAT_NODROP` (5.5): the kernel keeps
//!   completions that do not fit and flags `IORING_SQ_CQ_OVERFLOW`; `park` then enters the kernel
//!   again (with `GETEVENTS`) to flush them, and the kernel's wait flushes them too. Nothing is
//!   lost. The completion queue is twice the submission queue by default.
//!
//! # Multishot accept
//!
//! [`Proactor::arm_accept_multishot`](spindle_io::Proactor::arm_accept_multishot): a
//! `TcpListener`'s first `accept` in a task arms one `IORING_ACCEPT_MULTISHOT` request (Linux
//! 5.19) that accepts connection after connection into the listener's
//! [`AcceptQueue`](spindle_io::driver::AcceptQueue); later `accept`s take from the queue with
//! no submission at all ([`UringStats::multishot_accepts`] counts the requests armed). The
//! request ends on an accept error (the next `accept` returns the error and arms again), when
//! the queue holds [`ACCEPT_READ_AHEAD`](spindle_io::driver::ACCEPT_READ_AHEAD) connections
//! nobody took yet (the next `accept` that empties it arms again: the rest wait in the
//! kernel's backlog; a burst can exceed it, since the kernel accepts what the backlog holds
//! within one turn of the ring), when an `accept` on a plain thread needs the backlog to itself, or when
//! the last handle on the listener is dropped. Each of these posts a cancel to this driver's
//! mailbox (from any thread) and wakes it; its next `park` submits the cancel. Connections
//! accepted but not taken are closed with the listener. A kernel that answers `EINVAL` turns multishot accept off for this driver (single
//! accepts from then on).
//!
//! # `park`, wake-ups and cost
//!
//! [`Driver::park`](spindle_io::Driver::park) makes **at most one `io_uring_enter`** per call
//! in the normal case: it submits all queued SQEs and, unless the timeout is zero, waits for a
//! completion (with `IORING_ENTER_EXT_ARG` and a timespec for a timeout); a zero timeout makes
//! no syscall at all when nothing is queued and the kernel flagged no pending work. Then it
//! reaps every completion from the shared queue (no syscall) and wakes the tasks.
//!
//! Other threads wake a parked driver through an eventfd that the ring polls (one multishot
//! `POLL_ADD`, armed once), and only when the driver is actually asleep: see the protocol in
//! the `unpark` module's source — an atomic "sleeping" flag makes
//! [`Unpark::unpark`](spindle_io::Unpark::unpark) a single atomic operation while the worker
//! is busy, and an unpark before a park is a token that makes that park return at once.
//!
//! By default the ring is set up with `IORING_SETUP_DEFER_TASKRUN | SINGLE_ISSUER |
//! TASKRUN_FLAG` where the kernel has it (6.1+): completion work runs only inside the worker's
//! `io_uring_enter`, never by interrupting it.
//!
//! **Syscalls per ping-pong request** (one connection, a task doing `recv` then `send`): one
//! `io_uring_enter` per operation, so two per request-response, and no other syscall (epoll:
//! `recv` → `EAGAIN`, `epoll_wait`, `recv`, `send`: four). Measured by the test
//! `ping_pong_syscalls` with [`UringDriver::stats`]: 2.00 enters and 2.00 SQEs per request, in
//! both ring modes. With many connections a worker's turn submits every connection's next
//! operation and collects every completion in the same single enter, so the count per request
//! falls below one (the test `many_pending_ops_on_a_tiny_ring`: 200 operations in about 50
//! enters on a ring of only 4 entries).
//!
//! # Dropping the driver
//!
//! A runtime drops its drivers after its tasks are gone, and a task never leaves `submit` with
//! its operation in the kernel, so normally nothing is in flight. Defensively, `Drop` cancels
//! whatever still is and reaps for up to two seconds; records still in the kernel after that are
//! leaked (never freed), so the kernel cannot write into freed memory of the driver's.
//!
//! Multishot accepts still armed are cancelled the same way and reaped until their last
//! completion: a connection the kernel accepted is a descriptor in the process, and one left in
//! the completion queue when the ring closes would never be closed (without
//! `DEFER_TASKRUN` the kernel accepts into the ring at any time). What they took goes to
//! their listeners' queues (closed with the listener, at once if it is gone). An accept whose
//! result nobody will take — its `submit` unwound, or its record still in the kernel at the
//! drop — is closed too.
//!
//! # Output and aborts
//!
//! The driver writes nothing itself: what it has to report (a multishot accept it could not
//! cancel, so that its listener's socket stays open until the ring goes) is logged through the
//! [`log`](https://docs.rs/log) facade, at `warn`. One case aborts the process, after one line
//! on stderr saying why: a task that drives the ring itself (`submit` without a parked worker)
//! and whose `io_uring_enter` fails a thousand times in a row, 1 ms apart, while its operation
//! is in the kernel. It cannot wait for the completion any more, and returning would let the
//! kernel write into memory that is then freed.
//!
//! # Requirements
//!
//! Linux 5.11 or newer (`IORING_FEAT_EXT_ARG`, `IORING_FEAT_NODROP`, `POLL_ADD`,
//! `ASYNC_CANCEL`); which operations the kernel has is probed (`IORING_REGISTER_PROBE`) and
//! reported by [`Proactor::supports`](spindle_io::Proactor::supports). If the ring cannot be set
//! up — no io_uring (`ENOSYS`), forbidden by seccomp (`EPERM`) or by
//! `kernel.io_uring_disabled`, the locked-memory limit (`ENOMEM`: before Linux 5.12 and again on
//! recent kernels, a ring counts against `RLIMIT_MEMLOCK` unless the process has
//! `CAP_IPC_LOCK`), bad parameters — [`UringDriver::new`] returns an error saying so, with a
//! [`SetupError`] inside; the runtime then falls back to epoll and logs that once.
//!
//! Not done: multishot receive into provided buffers, registered buffers and files; SQPOLL is
//! available ([`UringConfig::sqpoll`]) but off by default.
//!
//! On targets other than Linux this crate is empty.
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(target_os = "linux")]
mod config;
#[cfg(target_os = "linux")]
mod driver;
#[cfg(target_os = "linux")]
mod unpark;

#[cfg(target_os = "linux")]
pub use config::{DEFAULT_ENTRIES, SetupError, UringConfig};
#[cfg(target_os = "linux")]
pub use driver::{UringDriver, UringStats};

/// The examples of the crate's README.md, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
