//! How this crate is built: notes for whoever changes it (the crate docs say how to use it;
//! the repository's ARCHITECTURE.md places the crate among the others).
//!
//! **The interface** (`src/driver.rs`). A `Driver` (one per worker, not `Send`) parks with a
//! timeout, dispatches events, and hands out an `Unpark` (`Send + Sync`). Two models, neither
//! faking the other: a readiness `Reactor` (`Send + Sync`: register a source once, edge-triggered;
//! events set the source's `ScheduledIo`; `rearm` for one-shot backends) and a completion
//! `Proactor` (`submit(Op, deadline)` with the caller's borrowed buffers, parking until the kernel
//! completes it; on a deadline or a cancel it cancels and *still waits* for the completion —
//! invariant 5). `Op` borrows: a suspended coroutine keeps its stack, so no owned-buffer API.
//!
//! **`Registrations<S, V>`** (`src/registrations.rs`): the one registration table of the readiness
//! backends (epoll, polling, kqueue). A slab of slots with generations, a free list and a map from
//! each OS source to its live key. The OS gets a *token* (slot index in the low half, generation in
//! the high half, `token_bits` wide: 64 for epoll, `usize::BITS` for polling and kqueue), never a
//! pointer; removing bumps the generation, so an event for a removed registration is dropped and a
//! reused slot never gets its predecessor's events. `insert` returns the key the source was bound
//! to before (a number closed without a deregister and reused): the backend removes it once the
//! kernel accepted the new registration, or `abort`s to restore it; `unbind` removes a source's
//! registration only if it is the given `ScheduledIo`'s. Indices stay below a per-backend limit
//! (epoll and polling keep the all-ones token for themselves); only `insert` allocates (failures
//! are errors naming the driver), removal never does (the free list has room for every slot).
//!
//! **`ScheduledIo`** (`src/scheduled.rs`): readiness bits and a tick in one atomic word, plus the
//! wakers of the tasks waiting (a reader and a writer slot, more in a list). IO types try the
//! non-blocking call first; on `EWOULDBLOCK` they clear the readiness they saw *before* the call (a
//! snapshot whose tick must still match, so an event that came meanwhile is never erased) and wait;
//! the waker is registered before the readiness is re-read, so nothing slips between. A read of a
//! byte stream (TCP, Unix stream, pipe) that returns less than it asked for has drained the socket:
//! where the reactor reports half-closes as their own readiness (`Reactor::reports_read_closed`:
//! epoll's `EPOLLRDHUP`, kqueue's `EV_EOF`) it clears the read readiness (tick-checked), and the
//! next read waits for an event instead of a call that fails with `EWOULDBLOCK` — one `recv` per
//! message instead of two, as tokio does. Not on `polling`, which folds the half-close into
//! readable (an end of stream that came with the last data would never show: a conformance case
//! covers it). A short count is not always the end of the queue, though: a TCP read stops at the
//! urgent mark with the bytes behind it queued, and a Unix stream read stops after a message that
//! carried descriptors (or, with `SO_PASSCRED`, at a change of writer). No event comes for bytes
//! already there, so clearing there would make the next read wait for ever
//! (`tcp_short_read_at_the_urgent_mark`, `unix_short_read_at_passed_descriptors`). So epoll also
//! asks for `EPOLLPRI` (Apple's kqueue flags `EV_OOBAND`) as `Readiness::PRIORITY`, which wakes
//! nobody and keeps a TCP stream from clearing once urgent data came; TCP streams clear only where
//! the reactor reports urgent data (`Reactor::reports_urgent_data`); and Unix streams read with
//! `recvmsg` without room for ancillary data, whose `MSG_CTRUNC` says a descriptor or credential
//! message ended the read (the descriptors are closed, as `read(2)` closes them). Nor do
//! descriptors that return a message or a line per read (`tests/io_types.rs`): a `UnixStream` made
//! from a descriptor asks its type (`SO_TYPE`; std takes a `SOCK_SEQPACKET` socket too, and Linux
//! sets no `MSG_EOR` on its records), and a `PipeReader` takes a short read for a drained pipe only
//! when `pipe()` made it — the reading end of a packet-mode pipe (`O_DIRECT`, which only the
//! writing end shows), a terminal in canonical mode or a socket given to `from_owned_fd` try every
//! read first. An `EWOULDBLOCK` outranks every bit the reactor set before the call: it clears the
//! error bit and the closed bits of its directions too (a call that would block found no error
//! pending, and a stream whose read side is closed answers end of stream, never `EWOULDBLOCK`),
//! while the drained-read clear (`clear_drained`) keeps them (an end of stream or an error that
//! came with the data is what the next read returns). Were they kept "final", a consumed UDP ICMP
//! error or a datagram socket shut down for reading would make every later wait end at once: the
//! call would spin on `EAGAIN` past its deadline without yielding its worker. Deadlines are also
//! checked after each `EWOULDBLOCK` (a thread's `poll(2)` keeps reporting such a socket ready), and
//! `wait_ready_now` (`Io::readable`/`writable`) snapshots the readiness before its zero-timeout
//! poll: taken after it, the snapshot would hold an event that came in between, and the clear would
//! erase it (`tests/io_sockets.rs`). `TcpStream::write_vectored` on the readiness path sends with
//! `sendmsg(MSG_NOSIGNAL)` (`sys_unix::send_vectored`), not std's `writev`, which raises `SIGPIPE`
//! on a connection the peer has closed, against the type's documented promise (`BrokenPipe`, never
//! a signal), and so kills a host that does not ignore `SIGPIPE`.
//!
//! **`Evented`** (`src/source.rs`), the one piece every type shares, picks a path per call:
//! completion (the current driver has a proactor supporting the op: submit, pinned to the worker;
//! buffers of a coroutine on a copying stack are bounced through the heap, ≤ 64 KiB a time for a
//! byte stream, whole for a datagram or record (`Framing`: a part cut the message,
//! `tests/io_types.rs`) — invariant 3; so is everything a blocking-pool job of `fs` reads: the job
//! gets a `dup` of the `File`'s descriptor, an owned path, cloned options — read through a pointer
//! into the suspended coroutine's stack, the `File` would be another coroutine's bytes by then, and
//! the job would operate on whatever descriptor those held: `tests/io_ends.rs`); readiness
//! (register lazily with the current reactor; keep the registration while its driver lives,
//! re-register when the source meets another runtime or its driver shuts the registration down — a
//! wait that driver ends returns for the retry, which registers with the current one, instead of
//! failing, `tests/io_types.rs`; deregister before close — the dup'd-fd pitfall, and only the
//! source's own registration: epoll and polling look the number up first, since a number closed
//! without a deregister may be another source's by then); no driver in a task (wait on the blocking
//! pool in 50 ms slices, so cancellation stays prompt); no task at all (`poll(2)`/`WSAPoll`: the
//! std behaviour, timeouts included). Sources are always non-blocking so all paths share one fd.
//! Registrations are kept (boxed) until the source drops, so a wait reaches the latest one through
//! a pointer — no lock and no `Arc` clones, each of which would cost atomic read-modify-writes on
//! every wait; the per-call checks ask the driver `has_reactor`/`proactor` without cloning
//! anything, and pin the task only on the completion path. A source's waiter lists take the spin
//! lock of `spindle_park::spin` (its unlock is a plain store, where std's `Mutex` pays a
//! read-modify-write, twice per wait). A registration whose driver is gone is small: drivers free
//! their registration table when they shut down (`Registrations::drain`; otherwise a long-lived
//! source would keep the table of every runtime it met, a slot per source); what is left — the box,
//! the `ScheduledIo`, the reactor's struct, a few hundred bytes — stays until the source drops,
//! since freeing it would need every call to announce itself (a call may read a registration that
//! was the latest when it started): two read-modify-writes per read and write for a few hundred
//! bytes per runtime met (`tests/io_registrations.rs`). On io_uring a socket send first tries the
//! plain non-blocking call and goes to the ring only when the socket buffer is full: the ring
//! entry, its completion and often an extra enter to reap it cost more than the one `sendto`.
//!
//! **Types.** `net::{TcpListener, TcpStream, UdpSocket, UnixStream, UnixListener, UnixDatagram}`,
//! `pipe()`, `fs::File` (+ `read`, `write`…), `Io<T>` for any fd a user brings, `offload` (run
//! blocking work on the runtime's pool, borrowing from the caller, cancellation deferred
//! meanwhile), `net::ToSocketAddrs` (numeric addresses inline, host names through `offload`,
//! `(host, port)` with std's tuple impl so that a scoped IPv6 host such as `fe80::1%lo` resolves as
//! with std). Each mirrors std (methods, `Read`/`Write` for `&T` where std has them, conversions
//! both ways), so synchronous libraries run in coroutines unchanged. Read and write timeouts apply
//! on every path; the sockets keep them in `Evented` (read without a system call) and, as std does,
//! in the socket (`SO_RCVTIMEO`/`SO_SNDTIMEO`): `from_std` and the descriptor conversions take them
//! over, `try_clone` copies them, `into_std` hands them on (`tests/io_types.rs`). Writes never
//! raise `SIGPIPE` (`MSG_NOSIGNAL`, `SO_NOSIGPIPE`). `accept` (TCP and Unix) out of descriptors
//! returns the error and backs off (1 ms, doubling up to 100 ms) before the next try, so a loop
//! that logs and retries does not spin. Files: native on io_uring (`Read`/`Write` at an offset,
//! `fsync`), the blocking pool elsewhere. Operations at the file position through one `File`
//! (`&File` is `Read`/`Write`/`Seek`) take turns at a small lock of the `File` (waiters park, first
//! come first served; uncontended one read-modify-write to take and one to release): io_uring's
//! "current position" reads take the position at submission and store it at completion without the
//! kernel's `f_pos_lock`, so reads in flight together read the same bytes (`tests/io_types.rs`).
//!
//! **Backends.**
//!
//! * *epoll*: edge-triggered, `Registrations` tokens in `epoll_data` (never a pointer), eventfd for
//!   wake-ups behind a three-state atomic (syscall only when the driver is parked), timeout rounded
//!   up to whole ms, event buffer reused.
//! * *io_uring*: probes opcodes; DEFER_TASKRUN + SINGLE_ISSUER when the kernel has them; completion
//!   records in a heap slab, freed only when the driver drops (a late CQE never names freed
//!   memory); one `io_uring_enter` per park (submissions batched); full SQ → flush and retry;
//!   NODROP for CQ overflow; multishot POLL_ADD on an eventfd for wake-ups. Multishot accept
//!   (5.19+): a `TcpListener`'s first `accept` in a task arms one `IORING_ACCEPT_MULTISHOT`
//!   request; its completions fill the listener's `AcceptQueue` (any worker's task takes from it;
//!   the peer address comes from `getpeername`; handles made by `try_clone` share the queue, as
//!   they share the kernel's backlog). A completion that fills the queue to `ACCEPT_READ_AHEAD`
//!   (16) cancels the request, and the next `accept` that finds it empty arms a new one —
//!   connections nobody asked for then stay in the backlog instead of the process's descriptor
//!   table. The bound is on a burst, not exact: the kernel accepts in a loop within one turn of the
//!   ring (until the backlog is empty) before the driver sees a completion, so a burst can take a
//!   backlog's worth before the cancel lands; a later wave is not taken (`tests/io_accept.rs`
//!   checks that, not an exact count of 16, which a burst does not keep). An `accept` on a plain
//!   thread (the blocking call) cancels the request too and takes what it delivered until its last
//!   completion, so no connection is stranded in a queue while the thread waits on the backlog.
//!   Dropping the last handle cancels the request through a mailbox the ring's worker drains on its
//!   next turn (from any thread; `user_data` carries a generation so a late cancel never hits a
//!   reused slot), and closes connections accepted but not taken. Dropping the driver (its worker's
//!   exit) cancels every armed multishot accept, reaps the cancels, and closes what they had
//!   delivered and nobody claimed (`tests/accept_drop.rs`). A kernel that answers `EINVAL` turns it
//!   off for the driver. On Linux 6.18, RECV/SEND/READ/WRITE/ACCEPT on non-blocking fds wait inside
//!   the kernel; older kernels' `EAGAIN` is handled by poll-and-retry. A ping-pong request costs
//!   one `io_uring_enter` (the wait for the next read) and one `sendto` (see `Evented` above). The
//!   driver does not wait for completions in batches (`min_wait_usec`, Linux 6.12+): that saves
//!   enters and wake-ups but costs more CPU per request (the repository's docs/benchmarks.md, io
//!   section, has the figures).
//! * *polling*: the `polling` crate, edge mode where supported, else one-shot with `rearm` arming
//!   the union of what is armed and what waiters want.
//! * *kqueue*: `EV_CLEAR` read and write filters, `EVFILT_USER` wake-ups; type-checked for FreeBSD
//!   and macOS only.
//! * *IOCP*: heap records with the `OVERLAPPED` first, `AcceptEx`/`ConnectEx` loaded per driver,
//!   `CancelIoEx` and wait, `PostQueuedCompletionStatus` wake-ups; no
//!   `FILE_SKIP_COMPLETION_PORT_ON_SUCCESS` (ownership stays simple). Overlapped operations on a
//!   non-blocking socket still pend under Wine, so Windows sockets stay non-blocking too.
//!
//! **Conformance** (`crates/io-tests/tests/conformance.rs`): one set of cases, generated per mode —
//! `epoll`, `uring`, `polling`, `no_driver` (a runtime without a driver) and `thread` (no runtime):
//! echo, 16 MiB both ways at once, half-close, reset, read/write timeouts (the stream loses no data
//! after a timed-out read), refused connect, DNS, peek, std conversions, UDP, Unix sockets, files,
//! pipes, cancellation mid-read and mid-write, IO on copying stacks, `EPIPE` without `SIGPIPE` (a
//! child process with `SIGPIPE` at its default), `EMFILE` on accept (a child with a low fd limit:
//! no spin, recovers), 10,000 concurrent connections (clients in a child process).
