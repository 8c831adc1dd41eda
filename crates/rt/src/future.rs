//! Waiting for futures from coroutines.

use std::future::Future;

/// Runs `future` to completion and returns its output, suspending only the calling coroutine
/// while it is pending (on a plain thread: blocking the thread).
///
/// The future is woken through the same path as every other wait of the runtime (the
/// coroutine's `Waker`), so runtime-agnostic futures — `futures`' or `async-channel`'s
/// channels, `spindle-sync`'s async methods, a [`JoinHandle`](crate::JoinHandle) — work
/// unchanged. Futures tied to another async runtime's reactor (tokio's sockets or timers) need
/// that runtime to be running. On a shared (copying) stack the future is boxed first, so
/// nothing that it hands out points into a stack that moves. See [`spindle_park::block_on`].
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
