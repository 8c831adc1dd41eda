//! Waiting for futures from coroutines.

use std::future::Future;

/// Runs `future` to completion and returns its output, suspending only the calling coroutine
/// while it is pending (on a plain thread: blocking the thread).
///
/// The future is woken through the same path as every other wait of the runtime (the
/// coroutine's `Waker`), so runtime-agnostic futures — `futures`' or `async-channel`'s
/// channels, `spindle-sync`'s async methods, a [`JoinHandle`](crate::JoinHandle) — work
/// unchanged. Futures tied to another async runtime's reactor (tokio's sockets or timers) need
/// that runtime to be running. See [`spindle_park::block_on`].
///
/// # Panics
///
/// On a shared (copying) stack ([`Builder::shared_stack`](crate::Builder::shared_stack)),
/// where it cannot tell whether the future lies on the stack (a `pin!`-ed or borrowed
/// future), whose bytes move while the coroutine is suspended: use
/// [`block_on_owned_future`] there.
///
/// ```
/// let rt = spindle_rt::Runtime::builder().workers(2).build()?;
/// let sum = rt.block_on(|| {
///     let a = spindle_rt::spawn(|| 20);
///     let b = spindle_rt::spawn(|| 22);
///     // An `async` block awaiting two coroutines, driven by this coroutine.
///     spindle_rt::block_on_future(async { a.await.unwrap() + b.await.unwrap() })
/// });
/// assert_eq!(sum, 42);
/// # Ok::<(), spindle_rt::BuildError>(())
/// ```
pub fn block_on_future<F: Future>(future: F) -> F::Output {
    spindle_park::block_on(future)
}

/// [`block_on_future`] for a future it owns and that borrows nothing (`'static`), also on a
/// shared (copying) stack: there the future is moved to the heap first, so that nothing it
/// hands out while pending (an intrusive waiter node) points into a stack whose bytes move.
///
/// ```
/// let rt = spindle_rt::Runtime::builder().workers(1).build()?;
/// let answer = rt.block_on(|| {
///     let child = spindle_rt::spawn(|| 42);
///     spindle_rt::block_on_owned_future(async move { child.await.unwrap() })
/// });
/// assert_eq!(answer, 42);
/// # Ok::<(), spindle_rt::BuildError>(())
/// ```
pub fn block_on_owned_future<F: Future + 'static>(future: F) -> F::Output {
    spindle_park::block_on_owned(future)
}
