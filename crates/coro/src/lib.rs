//! Safe stackful coroutines.
//!
//! A [`Coroutine`] runs a closure on a stack of its own. The closure can [`suspend`] at any
//! call depth — inside a parser, a callback, a `std::io::Read` implementation — handing a value
//! to whoever [`resume`]d it; the next `resume` continues right there with a new input.
//!
//! ```
//! use spindle_coro::{Coroutine, CoroutineResult};
//!
//! // Sums what it is sent, reporting the running total, until it is sent 0.
//! let mut summer = Coroutine::new(|yielder, mut n: u64| {
//!     let mut total = 0;
//!     while n != 0 {
//!         total += n;
//!         n = yielder.suspend(total);
//!     }
//!     format!("final total {total}")
//! })?;
//!
//! assert_eq!(summer.resume(5), CoroutineResult::Yield(5));
//! assert_eq!(summer.resume(10), CoroutineResult::Yield(15));
//! assert_eq!(summer.resume(0), CoroutineResult::Return("final total 15".to_string()));
//! assert!(summer.is_finished());
//! # Ok::<(), spindle_stack::StackError>(())
//! ```
//!
//! For iteration, a [`Generator`] wraps a coroutine as an [`Iterator`] over its yields.
//!
//! # Guarantees
//!
//! * **Panics cross back.** A panic inside a coroutine is caught at its entry and re-raised in
//!   the resumer, from the `resume` that ran it (with the original payload, as
//!   [`std::panic::resume_unwind`] does); the coroutine is then finished. Panics never unwind
//!   through the context-switch assembly.
//! * **Dropping unwinds.** Dropping a coroutine that has started but not finished unwinds its
//!   stack — every destructor on it runs — before the stack is released. One that never
//!   started just drops its closure.
//! * **Forgetting leaks, nothing worse.** [`std::mem::forget`] on a coroutine leaks its stack
//!   and everything on it; nothing is freed under the suspended frames, so it is never
//!   undefined behaviour. (This is why every closure and value type must be `'static`: a
//!   forgotten coroutine could otherwise keep using a borrow that has ended.)
//! * **Thread-bound.** A coroutine is `!Send`: a started stack may hold references into
//!   thread-locals, `Rc`s, or values whose address the compiler cached across the switch. See
//!   [`SendCoroutine`] for the `unsafe` way to move one, and its contract.
//!
//!   ```compile_fail,E0277
//!   fn needs_send<T: Send>(_: T) {}
//!   let co = spindle_coro::Coroutine::new(|_: &spindle_coro::Yielder<(), ()>, ()| {}).unwrap();
//!   needs_send(co); // error: `*mut ()` cannot be sent between threads safely
//!   ```
//! * **Nothing runs while the thread exits.** Once a thread has begun destroying its
//!   thread-locals, no coroutine runs on it: a resume is refused
//!   ([`ResumeErrorKind::ThreadExiting`]) and a started coroutine that is dropped is leaked, not
//!   unwound — its frames may hold references into thread-locals already destroyed. On Linux
//!   with glibc (dynamically linked) this crate defines `__cxa_thread_atexit_impl`, forwarding
//!   to glibc's, to see the first thread-local destructor start; on Windows a TLS callback
//!   ordered before std's does the same; elsewhere it sees the exit of the thread-locals first
//!   used before the thread's first resume. See
//!   [`Coroutine`](Coroutine#thread-exit).
//! * **Nesting.** A coroutine can create and resume others; each runs on its own stack, so no
//!   chain of resumes grows any stack but the coroutines' own.
//! * **Backtraces** captured inside a coroutine show its frames and then the resumer's (on the
//!   native context backend; see `spindle-context`).
//!
//! # Stacks
//!
//! [`Coroutine::new`] takes a stack from the global [`StackPool`] (256 KiB, guarded, recycled
//! without syscalls in steady state). [`Coroutine::with_stack`] runs on any [`Stack`] you give
//! it: a [`FixedStack`](spindle_stack::FixedStack), a
//! [`GrowableStack`](spindle_stack::GrowableStack), a [`PooledStack`] from your own pool.
//! [`Coroutine::with_shared_stack`] puts many coroutines on one
//! [`SharedStack`] region, copying each one's used bytes out when another takes the region;
//! that is how a million coroutines fit in memory, and it is `unsafe` because of what it
//! forbids (see there). A shared stack given to the safe constructors does not compile:
//!
//! ```compile_fail,E0080
//! let region = spindle_coro::SharedStack::new(64 * 1024).unwrap();
//! let co = spindle_coro::Coroutine::with_stack(region.slot(), |_: &spindle_coro::Yielder<(), ()>, ()| {});
//! ```
//!
//! Stack overflow of any guarded kind prints one line naming the coroutine (its [`Builder`]
//! name, or `#id`) and its stack size, then aborts the process. A safe caller cannot give a
//! coroutine a stack without a guard: the safe constructors of `spindle-stack` refuse a guard
//! of 0, and a stack that has none comes from an `unsafe` constructor whose caller promised
//! that nothing overflows it.
//!
//! # Documented aborts
//!
//! Everything else is an error or a panic; these abort the process, after one line on stderr
//! saying why (the only writes to stderr in this crate: it prints nothing else):
//!
//! * **Stack overflow** (above): one line naming the coroutine, then abort.
//! * **A panic escaping a destructor during a forced unwind** (dropping a suspended
//!   coroutine): Rust aborts on a panic in a destructor that runs during unwinding.
//! * **Suspending while unwinding.** A coroutine that calls [`suspend`] while a panic unwinds
//!   its stack (from a destructor that waits for something, or from the panic hook) aborts
//!   with `spindle: a coroutine cannot suspend while it unwinds: coroutine #id ...`. Rust
//!   counts panics per thread, so with the unwind half done, `std::thread::panicking()` would
//!   read `true` in the resumer, and every `Mutex` guard it dropped would poison its lock.
//!   [`Builder::allow_suspend_while_unwinding`] allows it for resumers written for that. (The
//!   check compares the thread's panicking state before and after the switch, so it does not
//!   see a coroutine resumed by a resumer that is itself panicking.)
//! * **Suspending during a forced unwind.** A destructor that calls [`suspend`] while a
//!   dropped coroutine is unwound aborts with the same line (whatever the builder allows):
//!   that unwind cannot go on, because the suspend could only unwind again, out of a
//!   destructor that runs during unwinding. If the dropping thread is itself panicking, the
//!   check does not see it and Rust's own abort ("panic in a destructor during cleanup")
//!   comes instead.
//!
//! [`suspend`]: Yielder::suspend
//! [`resume`]: Coroutine::resume
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]
// Builds that leave a feature out leave some shared helpers unused.
#![cfg_attr(
    not(all(feature = "stack-growable", feature = "stack-shared")),
    allow(dead_code, unused_imports)
)]

mod coroutine;
mod exchange;
mod generator;
mod id;
mod sanitizer;
mod thread_exit;
mod yielder;

pub use coroutine::{
    Builder, Coroutine, CoroutineResult, ResumeError, ResumeErrorKind, SendCoroutine,
};
pub use generator::Generator;
pub use yielder::Yielder;

#[cfg(feature = "stack-shared")]
pub use spindle_stack::SharedStack;
pub use spindle_stack::{PooledStack, Stack, StackError, StackPool};

/// The stack [`Coroutine::new`] uses: a stack from [`StackPool::global`].
pub type DefaultStack = PooledStack;

// How the crate is built, for whoever changes it (`cargo doc --document-private-items`).
mod internals;

/// The examples of the crate's README.md, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
