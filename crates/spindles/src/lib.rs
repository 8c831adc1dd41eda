//! Spindle: stackful coroutines for Rust.
//!
//! Every coroutine has its own call stack, so it can suspend at any call depth — inside a
//! third-party parser, inside `std::io::Read::read`, inside a callback — and ordinary
//! blocking-style code runs unchanged on top of non-blocking IO.
//!
//! This crate is the facade: it re-exports the `spindle-*` crates (one concept each; each can
//! also be used on its own) and composes them with cargo features. It has no logic of its own.
//!
//! # A runtime
//!
//! ```
//! # #[cfg(all(feature = "rt", feature = "sched-ws"))]
//! # fn main() -> Result<(), spindles::BuildError> {
//! use std::time::Duration;
//!
//! let rt = spindles::Runtime::builder().workers(2).build()?;
//! let sum = rt.block_on(|| {
//!     // Blocking-style code in coroutines: each sleep suspends only its coroutine.
//!     let handles: Vec<_> = (1..=10)
//!         .map(|i| spindles::spawn(move || { spindles::sleep(Duration::from_millis(1)); i }))
//!         .collect();
//!     handles.into_iter().map(|h| h.join().unwrap()).sum::<u32>()
//! });
//! assert_eq!(sum, 55);
//! println!("policy {}, IO backend {}", rt.metrics().policy, rt.metrics().io_backend);
//! # Ok(())
//! # }
//! # #[cfg(not(all(feature = "rt", feature = "sched-ws")))]
//! # fn main() {}
//! ```
//!
//! # Blocking-style IO
//!
//! [`net`] and `fs` (Unix) mirror `std` (and implement `std::io::{Read, Write}`), so synchronous
//! libraries work unchanged; in a coroutine a call that would block suspends the coroutine.
//!
//! ```
//! # #[cfg(all(feature = "rt", feature = "sched-ws"))]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::io::{Read, Write};
//! use spindles::net::{TcpListener, TcpStream};
//!
//! let rt = spindles::Runtime::builder().workers(1).build()?;
//! let reply = rt.block_on(|| -> std::io::Result<String> {
//!     let listener = TcpListener::bind("127.0.0.1:0")?;
//!     let addr = listener.local_addr()?;
//!     let server = spindles::spawn(move || -> std::io::Result<()> {
//!         let (mut conn, _) = listener.accept()?;
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
//! # Ok(())
//! # }
//! # #[cfg(not(all(feature = "rt", feature = "sched-ws")))]
//! # fn main() {}
//! ```
//!
//! # Coroutines without a runtime
//!
//! [`Coroutine`] and [`Generator`] are always there (no feature needed):
//!
//! ```
//! use spindles::{Coroutine, CoroutineResult, Generator};
//!
//! let mut co = Coroutine::new(|y, first: i32| {
//!     let second = y.suspend(first * 2);
//!     first + second
//! })?;
//! assert_eq!(co.resume(20), CoroutineResult::Yield(40));
//! assert_eq!(co.resume(1), CoroutineResult::Return(21));
//!
//! let squares: Vec<u64> = Generator::new(|y| (1..=4).for_each(|i| y.suspend(i * i)))?.collect();
//! assert_eq!(squares, [1, 4, 9, 16]);
//! # Ok::<(), spindles::stack::StackError>(())
//! ```
//!
//! # Async interop
//!
//! [`block_on_future`] waits for any runtime-agnostic `Future` inside a coroutine, suspending
//! only that coroutine; a [`JoinHandle`] is a `Future`, so async code can await coroutines.
//!
//! ```
//! # #[cfg(all(feature = "rt", feature = "sched-ws"))]
//! # fn main() -> Result<(), spindles::BuildError> {
//! let rt = spindles::Runtime::builder().workers(1).build()?;
//! let n = rt.block_on(|| {
//!     let child = spindles::spawn(|| 6 * 7);
//!     spindles::block_on_future(async move { child.await.unwrap() })
//! });
//! assert_eq!(n, 42);
//! # Ok(())
//! # }
//! # #[cfg(not(all(feature = "rt", feature = "sched-ws")))]
//! # fn main() {}
//! ```
//!
//! # Cargo features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `rt` | yes | [`rt`]: the runtime ([`Runtime`], [`spawn`], [`sleep`], …) and the IO types ([`io`], [`net`], [`fs`]); needs at least one `sched-*` feature (`compile_error!` otherwise) |
//! | `sched-ws` | yes | the work-stealing policy ([`sched`]`::WorkStealing`, `Policy::WorkStealing`) |
//! | `sched-rr` | no | the round-robin policy |
//! | `sched-fifo` | no | the global FIFO policy |
//! | `io-uring` | yes | io_uring (Linux); the runtime's first choice, falling back to epoll when the kernel refuses a ring |
//! | `io-epoll` | yes | epoll (Linux) |
//! | `io-kqueue` | yes | kqueue (macOS, FreeBSD) |
//! | `io-iocp` | yes | IOCP (Windows) |
//! | `io-polling` | no | the portable backend on the `polling` crate |
//! | `sync` | yes | [`sync`]: Mutex, RwLock, Condvar, Semaphore, Barrier, WaitGroup, channels, select |
//! | `stack-growable` | no | growable stacks (`stack::GrowableStack`, `StackKind::Growable`) |
//! | `stack-shared` | no | shared (copying) stacks (`stack::SharedStack`, `Coroutine::with_shared_stack`, `rt::Builder::shared_stack`): a million suspended coroutines in little memory |
//! | `hook` | no | `spindles::hook`: interpose the blocking libc calls (Linux with glibc), so that std's blocking calls and the crates built on them suspend only the calling coroutine once `hook::enable()` has run; a documented no-op elsewhere |
//! | `context-boost` | no | switch with the `context` crate (Boost.Context) instead of native asm (always used on targets without native asm) |
//!
//! Always there: [`context`], [`stack`] (fixed and pooled stacks), [`coro`], [`park`],
//! [`timer`].
//!
//! **Features that cannot exist on the target are no-ops, not errors.** `io-iocp` on Linux,
//! `io-uring`/`io-epoll` on macOS and so on compile to nothing, and the runtime never picks
//! them. Reason: cargo has no per-target default features, so the defaults name every native
//! backend and each OS keeps its own; a `compile_error!` would break the defaults everywhere.
//! Asking for a missing backend explicitly (`IoBackend::Iocp` on Linux, `SPINDLE_IO=iocp`) is a
//! [`BuildError::Io`] that says so.
//!
//! **A policy or stack kind left out is a clear error, not a missing item.** `Policy` and
//! `StackKind` keep all their variants; building a runtime with one that is not compiled in
//! returns [`BuildError::NotCompiled`] naming the feature to enable (a shared-stack spawn
//! returns an `io::Error` saying the same). The types of the crates themselves
//! (`sched::Fifo`, `stack::GrowableStack`, `stack::SharedStack`…) exist only with their feature.
//!
//! # Which IO backend runs
//!
//! The runtime picks among the backends compiled in when it is built:
//! `RuntimeBuilder::io(IoBackend::…)`, else the `SPINDLE_IO` environment variable (`uring`,
//! `epoll`, `kqueue`, `iocp`, `polling`, `none`), else the platform's best that works (on Linux
//! io_uring, falling back to epoll when the kernel refuses a ring). `Runtime::io_backend()`
//! and [`Metrics::io_backend`] say which it picked.
//!
//! # Output
//!
//! Spindle's libraries write nothing to stdout or stderr. What they report goes through the
//! [`log`](https://docs.rs/log) facade, to whatever logger the program installs (none: it is
//! dropped): the IO backend fallback (`warn`, target `spindle_rt::io`), a coroutine that kept
//! its worker past the stuck threshold (`warn`, `spindle_rt::monitor`; or to the program's
//! `RuntimeBuilder::on_stuck` hook instead), a worker whose IO driver cannot wait (`error`), a
//! runtime dropped by its own coroutine while panicking (`error`), a multishot accept io_uring
//! could not cancel (`warn`). The exception is the documented aborts: a stack overflow, a
//! coroutine suspending while it unwinds, an io_uring ring that can no longer be waited on
//! with an operation in flight. Each writes one line to stderr saying why, then aborts.
//!
//! # À la carte
//!
//! Each crate builds and tests alone (`cargo test -p spindle-rt`) with its own defaults, which
//! are *everything* it has; this facade depends on them with `default-features = false` and
//! forwards the features above, so a facade feature set compiles exactly what it names.
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use spindle_context as context;
pub use spindle_coro as coro;
pub use spindle_park as park;
pub use spindle_stack as stack;
pub use spindle_timer as timer;

/// Scheduling policies as concurrent queues (the `spindle-sched` crate); each policy is there
/// with its `sched-*` feature.
#[cfg(any(feature = "sched-fifo", feature = "sched-rr", feature = "sched-ws"))]
pub use spindle_sched as sched;

/// The runtime (the `spindle-rt` crate).
#[cfg(feature = "rt")]
pub use spindle_rt as rt;

/// Synchronisation primitives and channels that suspend only the calling coroutine (and block
/// a plain thread outside a runtime): the `spindle-sync` crate.
#[cfg(feature = "sync")]
pub use spindle_sync as sync;

/// Opt-in interposition of the blocking libc calls (the `spindle-hook` crate, with its
/// `interpose` feature): after [`hook::enable`], std's blocking calls in a coroutine suspend
/// only the coroutine.
#[cfg(feature = "hook")]
pub use spindle_hook as hook;

/// Gives each item the condition "some IO is compiled in" (`rt` or an `io-*` feature).
macro_rules! with_io {
    ($($item:item)*) => {
        $(
            #[cfg(any(
                feature = "rt",
                feature = "io-epoll",
                feature = "io-uring",
                feature = "io-kqueue",
                feature = "io-iocp",
                feature = "io-polling"
            ))]
            $item
        )*
    };
}

with_io! {
    /// Blocking-style IO (the `spindle-io` crate) and the backends compiled in.
    pub mod io {
        pub use spindle_io::{net, offload};
        #[cfg(unix)]
        pub use spindle_io::{Io, PipeReader, PipeWriter, fs, pipe};

        /// The interface between a runtime and its IO backends, for writing a backend of your
        /// own: `spindle_io::driver` (an application never needs it).
        pub use spindle_io::driver;

        /// The epoll backend (Linux; empty elsewhere): the `spindle-io-epoll` crate.
        #[cfg(feature = "io-epoll")]
        pub use spindle_io_epoll as epoll;
        /// The IOCP backend (Windows; empty elsewhere): the `spindle-io-iocp` crate.
        #[cfg(feature = "io-iocp")]
        pub use spindle_io_iocp as iocp;
        /// The kqueue backend (macOS, FreeBSD; empty elsewhere): the `spindle-io-kqueue` crate.
        #[cfg(feature = "io-kqueue")]
        pub use spindle_io_kqueue as kqueue;
        /// The portable backend on the `polling` crate: the `spindle-io-polling` crate.
        #[cfg(feature = "io-polling")]
        pub use spindle_io_polling as polling;
        /// The io_uring backend (Linux; empty elsewhere): the `spindle-io-uring` crate.
        #[cfg(feature = "io-uring")]
        pub use spindle_io_uring as uring;
    }

    pub use spindle_io::net;

    /// Files whose reads and writes suspend only the calling coroutine (Unix):
    /// `spindle_io::fs`.
    #[cfg(unix)]
    pub use spindle_io::fs;
}

pub use spindle_coro::{Coroutine, CoroutineResult, Generator, Yielder};

#[cfg(feature = "rt")]
pub use spindle_rt::{
    BuildError, Handle, IoBackend, JoinError, JoinHandle, Metrics, Policy, Runtime, RuntimeBuilder,
    StackKind, block_on_future, blocking, scope, sleep, sleep_until, spawn, yield_now,
};

/// The examples of the README (the repository's front page), run as doctests.
#[cfg(all(doctest, feature = "rt", feature = "sched-ws", feature = "sync"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
