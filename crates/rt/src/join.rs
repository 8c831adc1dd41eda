//! Joining and cancelling coroutines.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use crate::task::{Failure, State, TaskRef, TypedTask};
use crate::worker;

/// An owned permission to join a coroutine (wait for its result) or cancel it.
///
/// Dropping the handle detaches the coroutine: it keeps running; its panic, if any, has already
/// been reported by the panic hook where it happened.
pub struct JoinHandle<T> {
    pub(crate) task: TypedTask<T>,
}

/// Why a coroutine produced no value.
#[non_exhaustive]
pub enum JoinError {
    /// It panicked; the payload is the panic's.
    Panicked(Box<dyn Any + Send + 'static>),
    /// It was cancelled ([`JoinHandle::cancel`], or its runtime shut down) and unwound.
    Cancelled,
    /// It never started: no stack could be had when it was to run (out of memory or address
    /// space, `vm.max_map_count`; the error says which and what to do). Its closure was
    /// dropped without running. A coroutine takes its stack when it first runs unless it was
    /// spawned with [`Builder::reserve_stack`](crate::Builder::reserve_stack), which makes
    /// running out an error of the spawn itself.
    NoStack(std::io::Error),
}

impl JoinError {
    /// True for [`JoinError::Cancelled`].
    pub fn is_cancelled(&self) -> bool {
        matches!(self, JoinError::Cancelled)
    }

    /// True for [`JoinError::Panicked`].
    pub fn is_panic(&self) -> bool {
        matches!(self, JoinError::Panicked(_))
    }

    /// The panic payload, to re-raise it with [`std::panic::resume_unwind`].
    ///
    /// # Panics
    ///
    /// If the error is not a panic.
    pub fn into_panic(self) -> Box<dyn Any + Send + 'static> {
        match self {
            JoinError::Panicked(payload) => payload,
            JoinError::Cancelled => panic!("JoinError::into_panic on a cancelled coroutine"),
            JoinError::NoStack(_) => {
                panic!("JoinError::into_panic on a coroutine that got no stack")
            }
        }
    }
}

impl fmt::Debug for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinError::Panicked(p) => {
                let msg = p
                    .downcast_ref::<&str>()
                    .copied()
                    .or_else(|| p.downcast_ref::<String>().map(String::as_str))
                    .unwrap_or("<non-string payload>");
                f.debug_tuple("Panicked").field(&msg).finish()
            }
            JoinError::Cancelled => f.write_str("Cancelled"),
            JoinError::NoStack(e) => f.debug_tuple("NoStack").field(e).finish(),
        }
    }
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinError::Panicked(_) => f.write_str("the coroutine panicked"),
            JoinError::Cancelled => f.write_str("the coroutine was cancelled"),
            // The reason is the source's message, not repeated here.
            JoinError::NoStack(_) => f.write_str("the coroutine could not start: no stack"),
        }
    }
}

impl std::error::Error for JoinError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            JoinError::NoStack(e) => Some(e),
            _ => None,
        }
    }
}

impl From<Failure> for JoinError {
    fn from(f: Failure) -> Self {
        match f {
            Failure::Panicked(p) => JoinError::Panicked(p),
            Failure::Cancelled => JoinError::Cancelled,
            Failure::NoStack(e) => JoinError::NoStack(e),
            // Only made for a task whose handle is gone: no join reads it. Were one to, the
            // value is gone as if the task had been cancelled at its end.
            Failure::ValueDropped => JoinError::Cancelled,
        }
    }
}

impl<T: Send + 'static> JoinHandle<T> {
    /// Waits for the coroutine to finish and returns its value.
    ///
    /// In a coroutine this suspends only the caller; on a plain thread it blocks the thread.
    ///
    /// # Errors
    ///
    /// [`JoinError::Panicked`] with the payload if it panicked, [`JoinError::Cancelled`] if it
    /// was cancelled, [`JoinError::NoStack`] if it could not start for want of a stack.
    ///
    /// # Panics
    ///
    /// If a coroutine joins its own handle (that would never return), or if the handle was
    /// already awaited to `Ready` as a future (through `&mut`: the result was handed out).
    // Inlined, so that the park's switch sits one frame below the caller (see `coop::yield_now` on
    // mispredicted returns). Always: left to itself, the compiler keeps part of it out of line,
    // since the join cell's protocol lives in another module (`join_cell.rs`).
    #[inline(always)]
    pub fn join(self) -> Result<T, JoinError> {
        self.refuse_own();
        // Counted before the result is taken: the yield this may make is a cancellation point.
        spindle_park::consume_budget();
        loop {
            if let Some(result) = self.take_or_register() {
                self.joined();
                return result;
            }
            spindle_park::park();
        }
    }

    /// Lets go of a handle whose result was taken, without its `Drop`: the cell holds nothing
    /// left to drop (no value; no waiter: `finish` took it, or the wait that found the task
    /// finished took its own back, and no wait registers one after), so the detach's work
    /// would be for nothing.
    #[inline]
    fn joined(self) {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again, so the task reference is moved out
        // (and dropped) exactly once.
        drop(unsafe { std::ptr::read(&this.task) });
    }

    /// Panics if the calling coroutine is the one this handle joins.
    fn refuse_own(&self) {
        if let Some(me) = worker::current_task_header()
            && std::ptr::eq(me, self.task.header())
        {
            panic!("a coroutine cannot join its own JoinHandle: it would wait for itself forever");
        }
    }

    /// The result if the coroutine has finished; else registers the current task's waker (the
    /// caller then parks) and returns `None`.
    ///
    /// Panics if the result was already taken (the handle was awaited to `Ready` through
    /// `&mut`): nothing would ever wake the caller.
    #[inline]
    fn take_or_register(&self) -> Option<Result<T, JoinError>> {
        // (A waker already there may be a future's, from an earlier poll: replaced.)
        match self.take_or_wait(|_| false, spindle_park::waker)? {
            Some(result) => Some(result.map_err(JoinError::from)),
            None => panic!(
                "JoinHandle::join after the handle returned Ready as a future (its result was \
                 already taken)"
            ),
        }
    }

    /// The result if the coroutine has finished (`Some(None)`: it was taken already); else
    /// makes the caller's waker the one its finish wakes and returns `None` (see
    /// `JoinCell::take_or_wait`).
    fn take_or_wait(
        &self,
        current: impl FnOnce(&Waker) -> bool,
        make: impl FnOnce() -> Waker,
    ) -> Option<Option<Result<T, Failure>>> {
        let state = &self.task.header().state;
        self.task.join().take_or_wait(state, current, make)
    }

    /// Whether the coroutine has finished (its result waits for `join`).
    pub fn is_finished(&self) -> bool {
        self.task.header().is_complete()
    }

    /// Asks the coroutine to stop: it unwinds from the suspension point where it waits now (a
    /// sleep, a join, any park) or from the next one it reaches — its destructors run — and
    /// `join` then reports [`JoinError::Cancelled`]. A coroutine that holds a
    /// [`CancelGuard`] is cancelled when it drops the last one. A coroutine that never
    /// suspends cannot be cancelled. Cancelling a finished coroutine does nothing.
    ///
    /// Once the unwind has begun (or the coroutine's closure has returned), the cancellation
    /// is spent: a destructor that suspends on the way out (a sleep, a lock, a join of a
    /// child) waits as usual instead of unwinding again. While such a destructor waits,
    /// `std::thread::panicking()` reads `true` on that worker thread — for the other
    /// coroutines it runs too (the panic count is the thread's, not the coroutine's).
    ///
    /// The unwind is sticky: a `catch_unwind` in the coroutine catches it like a panic, but
    /// dropping what it caught resumes the unwind there, so that a loop that survives its
    /// handlers' panics (`let _ = catch_unwind(handler);`) still ends when it is cancelled.
    /// (Resuming it explicitly, `resume_unwind(payload)`, works as well.)
    pub fn cancel(&self) {
        cancel_task(self.task.task_ref());
    }

    /// The coroutine's id (unique in the process).
    pub fn id(&self) -> u64 {
        self.task.header().id
    }

    /// The coroutine's name, if it was given one.
    pub fn name(&self) -> Option<&str> {
        self.task.header().name.as_deref()
    }
}

/// A `JoinHandle` is also a future of the coroutine's result, so async code can wait for a
/// coroutine: `handle.await` in an `async` block, or [`block_on_future`](crate::block_on_future)
/// (which is what [`join`](JoinHandle::join) amounts to). Dropping the future detaches the
/// coroutine, as dropping the handle does.
///
/// Polling it again after it returned `Ready` panics (the result was handed out), as `async fn`
/// futures do; so does [`join`](JoinHandle::join) after that.
///
/// ```
/// let rt = spindle_rt::Runtime::builder().workers(1).build()?;
/// let child = rt.spawn(|| 6 * 7);
/// // Any executor can drive it; here, the current thread.
/// let answer = spindle_rt::block_on_future(async { child.await.unwrap() });
/// assert_eq!(answer, 42);
/// # Ok::<(), spindle_rt::BuildError>(())
/// ```
impl<T: Send + 'static> Future for JoinHandle<T> {
    type Output = Result<T, JoinError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Awaited by its own coroutine (`block_on_future(handle)` inside it), as `join` there.
        self.refuse_own();
        let current = |w: &Waker| w.will_wake(cx.waker());
        let Some(taken) = self.take_or_wait(current, || cx.waker().clone()) else {
            return Poll::Pending;
        };
        match taken {
            Some(result) => Poll::Ready(result.map_err(JoinError::from)),
            None => panic!(
                "a JoinHandle polled again after it returned Ready (its result was already taken)"
            ),
        }
    }
}

/// Dropping the handle detaches the coroutine, and its value is dropped as soon as it exists:
/// now if it finished, else by `finish` when it does (`State::DETACHED`). (Left in the
/// task until the task's last reference went, a value that held the coroutine's own waker — or
/// anything that keeps one — kept the task alive, and so itself: never dropped, never freed.)
/// A failure stays: a scope reads a detached child's panic.
impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        if !std::mem::needs_drop::<T>() {
            // A value without drop glue cannot keep anything alive: leave it (and the cell)
            // alone, which is what a detached spawn of `()` costs.
            return;
        }
        let state = &self.task.header().state;
        let (waiter, output) = self.task.join().detach(state);
        // Outside the lock: the value's destructor may do anything.
        drop(waiter);
        drop(output);
    }
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("id", &self.task.header().id)
            .field("name", &self.task.header().name)
            .finish()
    }
}

/// Requests cancellation and wakes the task so it unwinds.
pub(crate) fn cancel_task(task: &TaskRef) {
    let header = task.header();
    if header.notify(State::CANCELLED | State::NOTIFIED) {
        // SAFETY: `notify` moved it out of idle: the idle state's reference is ours.
        unsafe { task.idle_reference() }.schedule(spindle_sched::Reason::Woken);
    }
}

/// Holds off cancellation of the current coroutine while it lives: a critical section that
/// must not be interrupted (between two writes that must both happen, say), or a wait for
/// something that borrows the coroutine's frame. A cancel that arrives meanwhile wakes the
/// coroutine's current or next park once (so it can notice with
/// [`spindle_park::cancel_requested`]) and takes effect at the first suspension point after the
/// last guard is dropped. Guards nest. Outside a coroutine it does nothing. (This is
/// `spindle_park`'s guard: the IO and sync crates use the same one.)
///
/// ```
/// let rt = spindle_rt::Runtime::builder().workers(1).build()?;
/// rt.block_on(|| {
///     let _guard = spindle_rt::CancelGuard::new();
///     spindle_rt::sleep(std::time::Duration::from_millis(1)); // not cancellable here
/// });
/// # Ok::<(), spindle_rt::BuildError>(())
/// ```
///
/// A guard that is never dropped (`mem::forget`) defers cancellation for good; a shutdown
/// abandons such a coroutine once it is all that is left, after
/// [`CANCEL_DEFERRAL_GRACE`](crate::CANCEL_DEFERRAL_GRACE). Prefer
/// [`with_cancel_deferred`](crate::with_cancel_deferred), which cannot be forgotten.
pub use spindle_park::CancelGuard;

/// Runs `f` with cancellation of the current coroutine held off, as a [`CancelGuard`] held for
/// the call would, ending the deferral when `f` returns or unwinds: unlike a guard, it cannot be
/// forgotten.
///
/// ```
/// let rt = spindle_rt::Runtime::builder().workers(1).build()?;
/// rt.block_on(|| {
///     spindle_rt::with_cancel_deferred(|| {
///         spindle_rt::sleep(std::time::Duration::from_millis(1)); // not cancellable here
///     });
/// });
/// # Ok::<(), spindle_rt::BuildError>(())
/// ```
pub use spindle_park::with_cancel_deferred;

#[cfg(test)]
mod tests {
    use std::error::Error;

    use super::JoinError;
    use crate::BuildError;

    /// `err`'s message says what failed and its source says why: neither repeats the other,
    /// so a program that prints the chain (`err`, then each source) shows each part once.
    fn assert_message_and_source_apart(err: &dyn Error) {
        let msg = err.to_string();
        let source = err
            .source()
            .expect("an error that wraps another has a source");
        let why = source.to_string();
        assert!(!msg.contains(&why), "{msg:?} repeats its source {why:?}");
        assert!(!why.contains(&msg), "{why:?} repeats the message {msg:?}");
    }

    #[test]
    fn join_error_no_stack_gives_its_reason_as_the_source() {
        let err = JoinError::NoStack(std::io::Error::other("vm.max_map_count reached"));
        assert_message_and_source_apart(&err);
        assert_eq!(err.to_string(), "the coroutine could not start: no stack");
        assert!(JoinError::Cancelled.source().is_none());
    }

    #[test]
    fn build_errors_give_their_reason_as_the_source() {
        let many = crate::Runtime::builder()
            .workers(1 << 20)
            .build()
            .unwrap_err();
        assert!(matches!(many, BuildError::Sched(_)), "{many:?}");
        let stack = crate::Runtime::builder()
            .stack(crate::StackKind::Pooled { size: usize::MAX })
            .build()
            .unwrap_err();
        assert!(matches!(stack, BuildError::Stack(_)), "{stack:?}");
        let cases = [
            many,
            stack,
            BuildError::Io(std::io::Error::other("io_uring_setup failed: EPERM")),
            BuildError::Thread(std::io::Error::other("Resource temporarily unavailable")),
        ];
        for err in &cases {
            assert_message_and_source_apart(err);
        }
        // The source says why.
        let why = cases[0].source().unwrap().to_string();
        assert!(why.contains("at most"), "{why}");
        assert!(BuildError::Invalid("x").source().is_none());
    }
}
