//! Spindle's IOCP IO driver, for Windows: a completion backend ([`Proactor`]).
//!
//! One I/O completion port per driver, made on the worker thread that uses it. An operation
//! ([`Op`]: `WSARecv`, `WSASend`, `AcceptEx`, `ConnectEx`, `WSARecvFrom`, `WSASendTo`) runs on
//! the caller's own buffer; its `OVERLAPPED` lives in a heap record, never on the (possibly
//! copying) coroutine stack, and the record lives until the port has delivered its
//! completion. The submitting task parks (`spindle_park`) until the driver's [`park`] dequeues
//! the completion (`GetQueuedCompletionStatusEx`) and wakes it. Cross-thread wake-ups are
//! completion packets too (`PostQueuedCompletionStatus` with a reserved key), so one wait
//! serves both.
//!
//! # Sockets
//!
//! * **Overlapped; either blocking mode.** A socket must be made with `WSA_FLAG_OVERLAPPED`
//!   (std's sockets are). Its blocking mode (`FIONBIO`) does not matter to overlapped
//!   operations: they are queued and complete through the port either way — Windows applies
//!   non-blocking semantics (`WSAEWOULDBLOCK`) to non-overlapped calls only (libuv relies on
//!   this: it makes every socket it uses with IOCP non-blocking), and Wine 8 does the same
//!   (the test `overlapped_recv_on_a_non_blocking_socket` checks it). So the IO types may keep
//!   their sockets non-blocking, as on Unix, and use non-blocking std calls beside the driver.
//! * **One port per socket.** [`Proactor::register`] associates the socket with this driver's
//!   port (`CreateIoCompletionPort`). Windows lets a socket be associated with one port at a
//!   time; if it already is (another driver registered it: a migrated task, a socket shared
//!   between workers, a runtime that shut down), `register` moves it to this port with
//!   `NtSetInformationFile(FileReplaceCompletionInformation)` where the system allows it
//!   (Windows 8.1 and later, when no operation is in flight on the socket). Where it does not,
//!   the socket stays with the other port and its completions are dispatched by the driver
//!   that owns that port. That still works across threads, because a completion wakes the
//!   submitter through its waker whichever driver dequeues it — **as long as that driver is
//!   alive and parking**. A socket whose port's driver is gone, on a system that cannot move
//!   it, would never see its completions: do not carry sockets from one runtime to the next
//!   there.
//! * **No `FILE_SKIP_COMPLETION_PORT_ON_SUCCESS`.** Every operation that starts (whether it
//!   completes at once or pends) queues exactly one completion packet, and that packet owns the
//!   heap record. An operation that completes at once still returns at once — its buffer is
//!   the caller's again — and the record is freed when the packet is dequeued later. Skipping
//!   the packet would save a dequeue (cheap: dequeued in batches) but would make the record's
//!   owner depend on a per-socket mode that a driver cannot read back for a socket another
//!   driver set up, and is unsafe with non-IFS layered providers.
//! * **Only this driver's overlapped operations.** A completion packet carries a pointer to
//!   the record of the operation; a socket registered here must not be used for overlapped
//!   operations issued by other code (synchronous calls — std's `read`, `write` — are fine:
//!   they queue no packets).
//!
//! # Buffers
//!
//! The kernel reads and writes the caller's data buffer directly: a suspended coroutine keeps
//! its stack, so a borrowed buffer stays valid until the completion. The small things the
//! kernel fills besides (addresses, lengths, flags, `AcceptEx`'s address areas) live in the
//! heap record and are copied out after the completion. A task on a copying (shared) stack
//! ([`spindle_park::on_copying_stack`]) has its stack bytes moved while it is suspended, so
//! for it the kernel gets a heap copy of the data buffer instead (at most 64 KiB: a short
//! read or write), whether or not the caller bounced it already.
//!
//! # Outside a runtime
//!
//! `submit` parks the current task when this driver is the current worker's
//! (`spindle_io::current`): the worker's loop calls `park`, which dispatches the completion.
//! Otherwise nothing else would dequeue this port, so `submit` drives it itself: it calls
//! `park` in a loop until its own operation has completed, dispatching any other completions
//! it meets (their tasks are woken as usual).
//!
//! # Cancellation and deadlines
//!
//! While an operation is in flight `submit` holds a [`spindle_park::defer_cancel`] guard. When
//! the deadline passes or the task is asked to cancel, it calls `CancelIoEx` for that
//! operation and *keeps waiting* for its completion (the kernel may write into the buffer until
//! then). If the operation completed anyway, its real result is
//! returned; if it was aborted, `TimedOut` (deadline) or the cancellation continues
//! (`spindle_park::checkpoint` unwinds).
//!
//! On other targets this crate is empty.
//!
//! [`Proactor`]: spindle_io::Proactor
//! [`Proactor::register`]: spindle_io::Proactor::register
//! [`Op`]: spindle_io::Op
//! [`park`]: spindle_io::Driver::park
//! [`spindle_park::defer_cancel`]: spindle_park::defer_cancel
//! [`spindle_park::on_copying_stack`]: spindle_park::on_copying_stack
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(windows)]
mod iocp;
#[cfg(windows)]
mod ops;
#[cfg(windows)]
mod record;

#[cfg(windows)]
pub use iocp::IocpDriver;
#[cfg(windows)]
pub use record::ACCEPT_ADDRESSES_LEN;

/// The examples of the crate's README.md, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
