//! Block the current task.
//!
//! This is the one interface that IO and synchronisation use to wait. It answers two
//! questions for whatever code is running:
//!
//! * **How do I wait?** [`park`] (or [`park_until`] / [`park_timeout`]) blocks the current task
//!   until it is woken or a deadline passes. Inside a runtime's coroutine that suspends the
//!   coroutine and lets its worker run others; anywhere else it parks the OS thread.
//! * **How do I get woken?** [`waker`] returns a [`std::task::Waker`] that wakes the current
//!   task. Wakers are `Send + Sync` and can be woken from any thread, from a coroutine of any
//!   runtime, or from a `Future`.
//!
//! A runtime installs a [`Hook`] on each of its worker threads with [`with_hook`]; this crate
//! does not know any runtime.
//!
//! # Semantics: a permit, like `std::thread::park`
//!
//! Each task has one wake-up permit. Waking sets it; `park` consumes it, returning at once if
//! it is already set. So the usual pattern is race-free without any further protocol:
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use std::task::Waker;
//!
//! struct Slot { value: Option<u32>, waiter: Option<Waker> }
//! let slot = Arc::new(Mutex::new(Slot { value: None, waiter: None }));
//!
//! let producer = {
//!     let slot = slot.clone();
//!     std::thread::spawn(move || {
//!         let waiter = {
//!             let mut s = slot.lock().unwrap();
//!             s.value = Some(42);
//!             s.waiter.take()
//!         };
//!         if let Some(w) = waiter { w.wake(); }
//!     })
//! };
//!
//! // The consumer: register, release the lock, park; re-check after every wake-up.
//! let value = loop {
//!     {
//!         let mut s = slot.lock().unwrap();
//!         if let Some(v) = s.value.take() { break v; }
//!         s.waiter = Some(spindle_park::waker());
//!     }
//!     spindle_park::park(); // a wake between the unlock and here is not lost: the permit is set
//! };
//! assert_eq!(value, 42);
//! producer.join().unwrap();
//! ```
//!
//! `park` returns [`Wake::Woken`] only after the task's waker was woken since the previous
//! `park` returned — possibly by a stale clone of it (a waker registered for an earlier wait), so
//! callers always re-check their condition in a loop, as above. [`Wake::TimedOut`] means the
//! deadline passed first.
//!
//! # Cancellation
//!
//! A runtime may cancel a coroutine. A cancelled coroutine's `park` does not return: it unwinds
//! (its destructors run), so code that waits must keep its data structures consistent when
//! unwound from `park` — typically with a guard whose `Drop` deregisters the waiter.
//!
//! Some waits must not be left early: an operation that lent a buffer to the kernel (io_uring,
//! IOCP) or to another thread must see that borrower finish before its frame goes away. Such
//! code holds a [`CancelGuard`] ([`defer_cancel`]): while it lives, `park` never unwinds; a
//! cancel request instead makes the next `park` return once, so the holder can notice it
//! ([`cancel_requested`]), ask the borrower to stop, and keep waiting for it. When the guard is
//! gone, [`checkpoint`] (or the next `park`) carries the cancellation out.
//!
//! # Copying stacks
//!
//! A coroutine on a shared (copying) stack has its stack bytes moved elsewhere while it is
//! suspended, so nothing may keep a pointer into its stack across a `park`. Code that lends a
//! buffer to the kernel asks [`on_copying_stack`] and bounces such buffers through the heap.
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

// Shared with Spindle's other crates (spindle-rt, spindle-sync, spindle-io), which is why they
// are public; they are not part of this crate's API and may change in any release.
#[doc(hidden)]
pub mod block_cache;
#[doc(hidden)]
pub mod spin;

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Wake as WakeTrait, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

/// Why [`park`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Wake {
    /// The task's waker was woken (the permit was set).
    Woken,
    /// The deadline passed before a wake-up.
    TimedOut,
}

/// What a runtime provides on its worker threads to park its coroutines.
///
/// Installed per thread with [`with_hook`]. The functions of this crate call it whenever code
/// runs on that thread.
pub trait Hook {
    /// Whether the code calling [`park`] runs in a task of this runtime (a coroutine). When it
    /// does not (for example the worker's own scheduling loop, or a callback it runs), the
    /// thread is parked instead.
    fn in_task(&self) -> bool;

    /// Parks the current task until its waker is woken or `deadline` passes; consumes the
    /// permit. Only called when [`in_task`](Hook::in_task) is true.
    ///
    /// May unwind instead of returning if the task is cancelled.
    fn park(&self, deadline: Option<Instant>) -> Wake;

    /// [`park`](Hook::park) if the calling code runs in a task of this runtime (`Some`), else
    /// `None` (the caller then parks the thread): what [`park`] asks on every
    /// wait. The default asks [`in_task`](Hook::in_task), then parks; a runtime may answer
    /// both with one call.
    #[inline]
    fn try_park(&self, deadline: Option<Instant>) -> Option<Wake> {
        if self.in_task() {
            Some(self.park(deadline))
        } else {
            None
        }
    }

    /// A waker for the current task. Only called when [`in_task`](Hook::in_task) is true.
    fn waker(&self) -> Waker;

    /// [`waker`](Hook::waker) if the calling code runs in a task of this runtime (`Some`),
    /// else `None` (the caller then takes the thread's waker): what [`crate::waker`]
    /// asks. The default asks [`in_task`](Hook::in_task), then takes the waker; a runtime may
    /// answer both with one call.
    #[inline]
    fn try_waker(&self) -> Option<Waker> {
        if self.in_task() {
            Some(self.waker())
        } else {
            None
        }
    }

    /// Whether `waker` wakes the current task, as one from [`waker`](Hook::waker) would (see
    /// [`is_current_waker`]). Only called when
    /// [`in_task`](Hook::in_task) is true. The default says no, which is always correct: the
    /// caller then takes a new waker.
    fn will_wake(&self, waker: &Waker) -> bool {
        let _ = waker;
        false
    }

    /// Whether the calling code runs in a task of this runtime and `waker` wakes it: what
    /// [`is_current_waker`] asks. The default asks [`in_task`](Hook::in_task), then
    /// [`will_wake`](Hook::will_wake); a runtime may answer both with one call.
    #[inline]
    fn try_will_wake(&self, waker: &Waker) -> bool {
        self.in_task() && self.will_wake(waker)
    }

    /// Starts (`true`) or ends (`false`) one level of deferring the current task's
    /// cancellation (see [`CancelGuard`]). Only called when [`in_task`](Hook::in_task) is true.
    /// A runtime without cancellation keeps the default, which does nothing.
    fn defer_cancel(&self, defer: bool) {
        let _ = defer;
    }

    /// Starts one level of deferring the current task's cancellation, as
    /// [`defer_cancel(true)`](Hook::defer_cancel) does, and returns a number naming the task,
    /// which the guard gives back to [`end_cancel_deferral`](Hook::end_cancel_deferral) (0:
    /// the runtime names none). Only called when [`in_task`](Hook::in_task) is true. The
    /// default starts the level with `defer_cancel(true)` and returns 0.
    fn begin_cancel_deferral(&self) -> u64 {
        self.defer_cancel(true);
        0
    }

    /// Ends the level of deferral that [`begin_cancel_deferral`](Hook::begin_cancel_deferral)
    /// started for task `task`: called when its [`CancelGuard`] is dropped on this thread,
    /// whatever runs here then — usually that task, but the guard may have been handed to
    /// other code of the thread (it is `!Send`, yet a thread-local can carry it from one task
    /// to another). A runtime that names its tasks ends `task`'s deferral, not the current
    /// one's. The default, for `task` 0, ends a level of the current task's with
    /// [`defer_cancel(false)`](Hook::defer_cancel), if code runs in a task.
    fn end_cancel_deferral(&self, task: u64) {
        let _ = task;
        if self.in_task() {
            self.defer_cancel(false);
        }
    }

    /// Whether the current task was asked to cancel (whether or not it is deferred now).
    fn cancel_requested(&self) -> bool {
        false
    }

    /// Unwinds the current task if it was cancelled and no [`CancelGuard`] is held; returns
    /// otherwise.
    fn checkpoint(&self) {}

    /// Whether the current task runs on a copying (shared) stack.
    fn on_copying_stack(&self) -> bool {
        false
    }

    /// An operation is about to be made (one that may complete without suspending: data already
    /// there): counts against the task's time slice, and may yield to let other tasks run when
    /// it is used up (a cancellation point). Called without asking [`in_task`](Hook::in_task)
    /// first (it is on every such operation's path): outside a task it must do nothing. With a
    /// [`Budget`] installed ([`with_budget`]) it is called only when that budget is down to its
    /// last unit: the budget did the counting. The default does nothing.
    fn consume_budget(&self) {}

    /// Starts (`true`) or ends (`false`) one level of keeping the current task on its thread
    /// (see [`PinGuard`]). A runtime that never moves a task once it ran keeps the default,
    /// which does nothing.
    fn pin(&self, pin: bool) {
        let _ = pin;
    }
}

thread_local! {
    /// The hook of the runtime whose worker this thread is (null: none). Set only by
    /// `with_hook`, for the duration of its closure.
    static HOOK: Cell<*const dyn Hook> = const { Cell::new(ptr::null::<NoHook>() as *const dyn Hook) };
    /// The worker's operation budget (null: none). Set only by `with_budget`, for the duration
    /// of its closure.
    static BUDGET: Cell<*const Budget> = const { Cell::new(ptr::null()) };
}

/// A type to make a null `*const dyn Hook` from (never instantiated).
struct NoHook;

impl Hook for NoHook {
    fn in_task(&self) -> bool {
        false
    }
    fn park(&self, _: Option<Instant>) -> Wake {
        Wake::TimedOut
    }
    fn waker(&self) -> Waker {
        Waker::noop().clone()
    }
}

/// Runs `f` with `hook` installed on the current thread, then restores what was installed
/// before (also if `f` unwinds). A runtime calls this around its worker loop.
///
/// # Safety
///
/// The installation belongs to the thread, not to the stack `f` runs on: `f` must not suspend
/// a coroutine that this call runs in. A suspension would leave `hook` installed for whatever
/// the thread runs next, borrowed from a frame that is then switched away from — on a copying
/// stack, its bytes are copied out and the address reused by another coroutine. A runtime calls
/// this on its worker thread's own stack, around its scheduler loop (which switches into
/// coroutines and always back).
///
/// ```
/// use std::time::Instant;
/// use std::task::Waker;
/// use spindle_park::{Hook, Wake};
///
/// /// A hook that never sees a task: everything parks the thread.
/// struct Outside;
/// impl Hook for Outside {
///     fn in_task(&self) -> bool { false }
///     fn park(&self, _: Option<Instant>) -> Wake { unreachable!() }
///     fn waker(&self) -> Waker { unreachable!() }
/// }
// SAFETY: the closure runs on this thread's own stack and suspends no coroutine.
/// let woke = unsafe {
///     spindle_park::with_hook(&Outside, || {
///         spindle_park::waker().wake();
///         spindle_park::park_timeout(std::time::Duration::from_secs(5))
///     })
/// };
/// assert_eq!(woke, Wake::Woken);
/// ```
pub unsafe fn with_hook<R>(hook: &dyn Hook, f: impl FnOnce() -> R) -> R {
    struct Restore(*const dyn Hook);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0;
            let _ = HOOK.try_with(|h| h.set(previous));
        }
    }
    // SAFETY (lifetime erasure): the pointer is only dereferenced while it is installed, and it
    // is installed only while `f` runs — `hook` outlives that — and removed by `Restore` when
    // `with_hook` returns or unwinds; no other code runs on this thread meanwhile, except what
    // `f` calls (the caller's contract: `f` suspends no coroutine this call runs in).
    let erased: *const dyn Hook = hook;
    let erased: *const (dyn Hook + 'static) =
        // SAFETY: only the lifetime bound of the trait object changes; see above.
        unsafe { std::mem::transmute::<*const dyn Hook, *const (dyn Hook + 'static)>(erased) };
    let previous = HOOK.with(|h| h.replace(erased));
    let _restore = Restore(previous);
    f()
}

/// The hook installed on this thread, if code here runs in one of its tasks.
///
/// Not inlined: a coroutine that migrates between threads must read the thread-local afresh
/// after every suspension, never through an address cached before it.
#[inline(never)]
fn task_hook() -> Option<&'static dyn Hook> {
    read_hook().filter(|hook| hook.in_task())
}

/// The hook installed on this thread, whether or not code here runs in one of its tasks.
///
/// Not inlined, as [`task_hook`].
#[inline(never)]
fn installed_hook() -> Option<&'static dyn Hook> {
    read_hook()
}

/// The thread-local read of the two above (inlined into them, never into their callers).
#[inline(always)]
fn read_hook() -> Option<&'static dyn Hook> {
    let hook = HOOK.try_with(Cell::get).ok()?;
    if hook.is_null() {
        return None;
    }
    // SAFETY: a non-null pointer is installed only by `with_hook` while the hook is alive (see
    // there); we use the reference only during this call of a parking function, which runs
    // inside that `with_hook` on this thread.
    Some(unsafe { &*hook })
}

/// Whether the current code runs in a runtime's task (a coroutine), as opposed to on a plain
/// thread.
pub fn in_task() -> bool {
    task_hook().is_some()
}

/// Blocks the current task until it is woken. See the [crate docs](crate) for the permit
/// semantics and cancellation.
#[inline]
pub fn park() {
    park_inner(None);
}

/// Blocks the current task until it is woken or `deadline` passes.
#[inline]
pub fn park_until(deadline: Instant) -> Wake {
    park_inner(Some(deadline))
}

/// Blocks the current task until it is woken or `timeout` elapses. A timeout too large to
/// represent as a deadline means "no deadline" (it is never clamped to something shorter).
pub fn park_timeout(timeout: Duration) -> Wake {
    park_inner(Instant::now().checked_add(timeout))
}

// Inlined (with `park`, `park_until`) so that a parked coroutine has one frame fewer on its
// stack across the switch: each frame that a resumed coroutine returns from costs a
// mispredicted return (the CPU's return-stack predictor holds the worker's return addresses,
// not the coroutine's).
#[inline]
fn park_inner(deadline: Option<Instant>) -> Wake {
    match installed_hook().and_then(|hook| hook.try_park(deadline)) {
        Some(wake) => wake,
        None => park_thread(deadline),
    }
}

/// Runs `future` to completion on the current task and returns its output.
///
/// The future is polled with a waker that wakes the current task (as [`waker`]'s does); while
/// it is pending the task [`park`]s — inside a runtime's coroutine only that coroutine is
/// suspended and its worker runs others; on a plain thread the thread blocks. Its `poll` may
/// itself park (a nested `block_on`, a blocking-style wait inside an `async` block): a wake-up
/// of the future that such a park takes is not lost. So any runtime-agnostic future (the
/// `futures` or `async-channel` kind, or one of `spindle-sync`'s) can be awaited from blocking
/// code. Futures that need a particular async runtime's reactor (tokio's sockets and timers)
/// need that runtime running somewhere; this function is not one.
///
/// # Panics
///
/// On a shared (copying) stack ([`on_copying_stack`]): there a pending future must not lie on
/// the stack — it may have handed out pointers to itself (an intrusive waiter node, say), and a
/// copying stack's bytes are elsewhere while the coroutine is suspended — and this function
/// cannot tell a future it may move to the heap from one that only points at a future on the
/// stack (`block_on(pin!(fut))`, `block_on(&mut fut)`). Use [`block_on_owned`] there.
///
/// Cancellation: a cancelled coroutine unwinds out of the `park` here; the future is dropped
/// on the way, as an async runtime drops a cancelled task's future.
///
/// ```
/// use std::future::Future;
/// use std::pin::Pin;
/// use std::task::{Context, Poll};
///
/// /// Pending on its first poll (waking itself), ready on the second.
/// struct YieldOnce(bool);
/// impl Future for YieldOnce {
///     type Output = &'static str;
///     fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<&'static str> {
///         if self.0 {
///             return Poll::Ready("done");
///         }
///         self.0 = true;
///         cx.waker().wake_by_ref();
///         Poll::Pending
///     }
/// }
///
/// assert_eq!(spindle_park::block_on(YieldOnce(false)), "done");
/// assert_eq!(spindle_park::block_on(async { 6 * 7 }), 42);
/// ```
pub fn block_on<F: Future>(future: F) -> F::Output {
    if on_copying_stack() {
        refuse_block_on_copying_stack();
    }
    drive(std::pin::pin!(future))
}

#[cold]
#[inline(never)]
#[track_caller]
fn refuse_block_on_copying_stack() -> ! {
    panic!(
        "spindle_park::block_on (spindle_rt::block_on_future) on a shared (copying) stack: the \
         future may lie on that stack (a pin!-ed or borrowed future), whose bytes move while the \
         coroutine is suspended; use block_on_owned (spindle_rt::block_on_owned_future) with a \
         future it can own"
    )
}

/// [`block_on`] for a future that it owns and that borrows nothing (`'static`): usable on a
/// shared (copying) stack too, where the future is moved to the heap first, so that nothing it
/// hands out while pending (an intrusive waiter node, say) points into a stack whose bytes move.
/// No future it polls can lie on the stack: a `'static` future borrows nothing there.
///
/// ```
/// let (tx, rx) = std::sync::mpsc::channel();
/// tx.send(7).unwrap();
/// assert_eq!(spindle_park::block_on_owned(async move { rx.recv().unwrap() }), 7);
/// ```
pub fn block_on_owned<F: Future + 'static>(future: F) -> F::Output {
    if on_copying_stack() {
        drive(Box::pin(future).as_mut())
    } else {
        drive(std::pin::pin!(future))
    }
}

fn drive<F: Future + ?Sized>(mut future: Pin<&mut F>) -> F::Output {
    let task = waker();
    // First with the task's own waker: a future that is ready at once costs no allocation.
    if let Poll::Ready(output) = future.as_mut().poll(&mut Context::from_waker(&task)) {
        return output;
    }
    // The task has one permit, and `poll` may park (a nested `block_on`, a `join`, a `sleep`
    // or a blocking-style lock inside an `async` block): such a park takes the permit that the
    // future's waker set for this loop, which then parked for ever. So the future gets a waker
    // of its own that also records the wake-up here; the loop polls again while it is set and
    // parks only while it is not. Set at first: a wake-up of the first poll may have been
    // taken the same way.
    let woken = Arc::new(DriveWaker {
        woken: AtomicBool::new(true),
        task,
    });
    let waker = own_waker(woken.clone());
    let mut cx = Context::from_waker(&waker);
    loop {
        // Acquire: what the waker's caller did before waking is visible to the poll.
        if woken.woken.swap(false, Ordering::Acquire) {
            if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
                return output;
            }
            // One operation of the slice's budget per poll that left the future pending: one
            // that wakes itself (an async `yield_now`, a re-polling select) keeps this loop
            // polling without a park, and would keep the worker for good, with no cancellation
            // point; this yields the coroutine when the slice is spent (a no-op on a thread).
            consume_budget();
        } else {
            // A wake-up that comes now sets the permit (and the flag): this returns at once.
            park();
        }
    }
}

/// The waker [`block_on`] polls its future with: records the wake-up for its loop, then wakes
/// the task.
struct DriveWaker {
    woken: AtomicBool,
    task: Waker,
}

impl WakeTrait for DriveWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Release: pairs with the loop's Acquire swap.
        self.woken.store(true, Ordering::Release);
        self.task.wake_by_ref();
    }
}

/// A [`Waker`] that wakes the current task: the current coroutine inside a runtime, the current
/// thread elsewhere.
pub fn waker() -> Waker {
    match installed_hook().and_then(|hook| hook.try_waker()) {
        Some(waker) => waker,
        None => thread_waker(),
    }
}

/// Whether `waker` wakes the current task as one from [`waker`] would, so that code keeping
/// the waker of its previous wait may reuse it instead of taking a new one (which costs a
/// reference count's increment, and the old one's decrement). `false` when unsure — always on
/// a plain thread — which only costs that new waker.
///
/// ```
/// let w = spindle_park::waker();
/// // On a plain thread: unsure, so take a new one.
/// assert!(!spindle_park::is_current_waker(&w));
/// ```
pub fn is_current_waker(waker: &Waker) -> bool {
    installed_hook().is_some_and(|hook| hook.try_will_wake(waker))
}

/// Runs `f` with the current task's cancellation deferred, as a [`CancelGuard`] held for the
/// call would (see [`defer_cancel`]), and ends the deferral when `f` returns or unwinds. Unlike a
/// guard, it cannot be forgotten: prefer it wherever the deferral fits one call.
///
/// ```
/// let answer = spindle_park::with_cancel_deferred(|| {
///     // ... lend a buffer to the kernel, wait for its completion with `park` ...
///     42
/// });
/// assert_eq!(answer, 42);
/// ```
pub fn with_cancel_deferred<R>(f: impl FnOnce() -> R) -> R {
    let _deferred = defer_cancel();
    f()
}

/// Defers the current task's cancellation while the returned guard lives.
///
/// A guard that is never dropped (`mem::forget`) defers the task's cancellation for good: a
/// runtime shutting down can only abandon such a task. Prefer [`with_cancel_deferred`] where
/// the deferral fits one call.
///
/// While a guard is held, [`park`] never unwinds; a cancel request makes the next `park` return
/// (as if woken) once, so that the holder can see it with [`cancel_requested`], stop whatever
/// borrows its frame (submit an io_uring cancel, say) and keep waiting for that to finish.
/// Guards nest; once the last one is dropped, the next `park` or [`checkpoint`] unwinds. Outside
/// a task it does nothing.
///
/// ```
/// let _guard = spindle_park::defer_cancel();
/// // ... lend a buffer to the kernel, wait for its completion with `park` ...
/// assert!(!spindle_park::cancel_requested()); // outside a runtime: never
/// ```
pub fn defer_cancel() -> CancelGuard {
    let (active, task) = match task_hook() {
        Some(hook) => (true, hook.begin_cancel_deferral()),
        None => (false, 0),
    };
    CancelGuard {
        active,
        task,
        _not_send: std::marker::PhantomData,
    }
}

/// Holds off the current task's cancellation; made by [`defer_cancel`] (see there).
///
/// Dropping it ends a deferral of the task that made it, with a runtime that names its tasks
/// ([`Hook::begin_cancel_deferral`]) — also when other code of the thread drops it (it is
/// `!Send`, but a thread-local can hand it over); what the runtime can do for a task that
/// runs elsewhere by then is its own affair ([`Hook::end_cancel_deferral`]). Without names,
/// it ends a deferral of whichever task runs when it is dropped.
#[must_use = "cancellation is deferred only while the guard lives"]
pub struct CancelGuard {
    active: bool,
    /// The task that made it, as its runtime names it (0: unnamed).
    task: u64,
    /// The guard belongs to the task (and its thread) that made it.
    _not_send: std::marker::PhantomData<*mut ()>,
}

impl CancelGuard {
    /// The same as [`defer_cancel`].
    pub fn new() -> Self {
        defer_cancel()
    }
}

impl Default for CancelGuard {
    fn default() -> Self {
        defer_cancel()
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        // Looked up afresh: a migratable task may have moved to another worker meanwhile.
        // Whether code runs in a task here, and which, is the hook's question: the guard may
        // be dropped by other code than the task that made it.
        if self.active
            && let Some(hook) = installed_hook()
        {
            hook.end_cancel_deferral(self.task);
        }
    }
}

impl std::fmt::Debug for CancelGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelGuard")
            .field("active", &self.active)
            .finish()
    }
}

/// Keeps the current task on its thread while the returned guard lives, even if its runtime
/// could otherwise move it to another thread at a suspension point.
///
/// For code that keeps thread-bound state across a `park`: an io_uring operation is in flight
/// on *this* worker's ring and its cancellation must be submitted there. Guards nest. Outside a
/// task, or in a runtime that never migrates running tasks, it costs nothing.
///
/// ```
/// let _pin = spindle_park::pin_to_thread();
/// // ... park, and still be on the same thread afterwards ...
/// ```
pub fn pin_to_thread() -> PinGuard {
    let active = match task_hook() {
        Some(hook) => {
            hook.pin(true);
            true
        }
        None => false,
    };
    PinGuard {
        active,
        _not_send: std::marker::PhantomData,
    }
}

/// Keeps the current task on its thread; made by [`pin_to_thread`] (see there).
#[must_use = "the task is kept on its thread only while the guard lives"]
pub struct PinGuard {
    active: bool,
    _not_send: std::marker::PhantomData<*mut ()>,
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        // The task is still on the thread that pinned it (that is the point of the guard).
        if self.active
            && let Some(hook) = task_hook()
        {
            hook.pin(false);
        }
    }
}

impl std::fmt::Debug for PinGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinGuard")
            .field("active", &self.active)
            .finish()
    }
}

/// Counts an operation against the current task's budget, so that a task whose operations
/// always complete at once (data already there) cannot keep its worker for ever: when its
/// slice's budget is used up, this yields. Call it before the operation: the yield is a
/// cancellation point, and an unwind after the operation would lose its result. Does nothing
/// outside a task.
///
/// With a [`Budget`] installed ([`with_budget`]) an operation that leaves some of it costs a
/// few instructions and no call into the hook; the hook's
/// [`consume_budget`](Hook::consume_budget) is asked only when the budget is down to its last
/// unit (or was [exhausted](Budget::exhaust)). Without one, every call asks the hook.
///
/// Not inlined: a coroutine that migrates between threads must read the thread-local afresh
/// in every call, never through an address cached before a suspension.
#[inline(never)]
pub fn consume_budget() {
    if let Ok(budget) = BUDGET.try_with(Cell::get)
        && !budget.is_null()
    {
        // SAFETY: a non-null pointer is installed only by `with_budget`, while the budget it
        // borrows is alive (see there); used only during this call, on this thread.
        let budget = unsafe { &*budget };
        if budget.take_one() {
            return;
        }
    }
    consume_budget_slow();
}

#[cold]
fn consume_budget_slow() {
    // No `in_task` check: the hook's `consume_budget` makes it (see there).
    if let Some(hook) = installed_hook() {
        hook.consume_budget();
    }
}

/// A worker's operation budget: how many more operations the running slice may make before
/// [`consume_budget`] asks the runtime's hook (which then usually yields the task).
///
/// A runtime keeps one per worker, installs it on the worker thread with [`with_budget`],
/// [refills](Budget::refill) it when a task starts a fresh slice, and may
/// [exhaust](Budget::exhaust) it from another thread (a monitor that sees a slice has run too
/// long) so that the running task is asked to yield at its next operation. Only the worker's
/// thread counts it down, with a plain load and store (no read-modify-write): an exhaustion
/// that races with a count-down may be undone by it, so a monitor exhausts again at its next
/// look if the slice is still running.
///
/// ```
/// use std::time::Instant;
/// use std::task::Waker;
/// use std::cell::Cell;
/// use spindle_park::{Budget, Hook, Wake};
///
/// /// Counts the times the hook is asked.
/// struct Asked(Cell<u32>);
/// impl Hook for Asked {
///     fn in_task(&self) -> bool { false }
///     fn park(&self, _: Option<Instant>) -> Wake { unreachable!() }
///     fn waker(&self) -> Waker { unreachable!() }
///     fn consume_budget(&self) { self.0.set(self.0.get() + 1) }
/// }
/// let hook = Asked(Cell::new(0));
/// let budget = Budget::new();
/// budget.refill(3);
// SAFETY: the closures run on this thread's own stack and suspend no coroutine.
/// unsafe {
///     spindle_park::with_hook(&hook, || {
///         spindle_park::with_budget(&budget, || {
///             for _ in 0..4 {
///                 spindle_park::consume_budget();
///             }
///         })
///     })
/// };
/// // Two operations took from the budget; the third and fourth found it at its last unit.
/// assert_eq!(hook.0.get(), 2);
/// assert_eq!(budget.left(), 1);
/// ```
#[derive(Debug, Default)]
pub struct Budget {
    left: AtomicU32,
}

impl Budget {
    /// An empty budget (every operation asks the hook until it is refilled).
    pub const fn new() -> Budget {
        Budget {
            left: AtomicU32::new(0),
        }
    }

    /// Sets the budget to `ops` operations: the first `ops - 1` operations take one unit
    /// each without asking the hook; the one after asks it.
    #[inline]
    pub fn refill(&self, ops: u32) {
        self.left.store(ops, Ordering::Relaxed);
    }

    /// Empties the budget, from any thread: the next operation on the budget's thread asks
    /// the hook. (A count-down racing with it may undo it; see the type's docs.)
    #[inline]
    pub fn exhaust(&self) {
        self.left.store(0, Ordering::Relaxed);
    }

    /// The units left.
    #[inline]
    pub fn left(&self) -> u32 {
        self.left.load(Ordering::Relaxed)
    }

    /// Takes one unit if more than one is left (the last is the hook's to decide on).
    #[inline]
    fn take_one(&self) -> bool {
        let left = self.left.load(Ordering::Relaxed);
        if left > 1 {
            // Only this thread counts down (see the type's docs): a load and a store.
            self.left.store(left - 1, Ordering::Relaxed);
            true
        } else {
            false
        }
    }
}

/// Runs `f` with `budget` installed as the current thread's [`Budget`], then restores what was
/// installed before (also if `f` unwinds). A runtime calls this around its worker loop, inside
/// [`with_hook`]; see [`Budget`].
///
/// # Safety
///
/// The installation belongs to the thread, not to the stack `f` runs on: `f` must not suspend
/// a coroutine that this call runs in. A suspension would leave `budget` installed for whatever
/// the thread runs next, borrowed from a frame that is then switched away from — on a copying
/// stack, its bytes are copied out and the address reused by another coroutine. A runtime calls
/// this on its worker thread's own stack, around its scheduler loop (which switches into
/// coroutines and always back).
pub unsafe fn with_budget<R>(budget: &Budget, f: impl FnOnce() -> R) -> R {
    struct Restore(*const Budget);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0;
            let _ = BUDGET.try_with(|b| b.set(previous));
        }
    }
    // The pointer is only dereferenced while it is installed, which is only while `f` runs
    // (`budget` outlives that, and no other code runs on this thread meanwhile: the caller's
    // contract); `Restore` removes it when this returns or unwinds.
    let previous = BUDGET.with(|b| b.replace(budget));
    let _restore = Restore(previous);
    f()
}

/// Whether the current task was asked to cancel. False outside a task.
pub fn cancel_requested() -> bool {
    task_hook().is_some_and(|hook| hook.cancel_requested())
}

/// Unwinds now if the current task was cancelled and holds no [`CancelGuard`]; otherwise
/// returns. Does nothing outside a task.
pub fn checkpoint() {
    if let Some(hook) = task_hook() {
        hook.checkpoint();
    }
}

/// Whether the current task runs on a copying (shared) stack, whose bytes move while it is
/// suspended: a buffer on its stack must not be lent to anything that runs meanwhile. False
/// outside a task.
pub fn on_copying_stack() -> bool {
    task_hook().is_some_and(|hook| hook.on_copying_stack())
}

// ---------------------------------------------------------------------------------------
// Plain threads: the permit is an AtomicBool next to the thread's handle, so that unrelated
// uses of `std::thread::park` on the same thread (which may wake it spuriously) do not count as
// wake-ups.

/// The parking state of one OS thread.
struct ThreadParker {
    thread: Thread,
    permit: AtomicBool,
}

impl WakeTrait for ThreadParker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Release: what the waker did before waking is visible to the parked thread once it
        // sees the permit (Acquire below).
        self.permit.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

thread_local! {
    static THREAD_PARKER: Arc<ThreadParker> = Arc::new(ThreadParker {
        thread: thread::current(),
        permit: AtomicBool::new(false),
    });
    /// The thread's parker once `THREAD_PARKER` is destroyed (thread exit), if something parks
    /// or takes a waker then: a leaked `Arc` (no destructor, so it stays usable to the end).
    static LATE_PARKER: Cell<*const ThreadParker> = const { Cell::new(ptr::null()) };
}

/// The thread's parker.
///
/// While thread-locals are destroyed at thread exit, a destructor that runs after
/// `THREAD_PARKER`'s may still wait: it gets the late parker, the same one for every call from
/// then on, so that a waker it takes and the park after it share one permit (one small leaked
/// allocation per thread that does this). A waker taken *before* `THREAD_PARKER` was destroyed
/// keeps the parker it was taken from alive, but a wait after the destruction does not see its
/// wake-ups: a wait takes its waker and parks within one call, so only a thread that hands out
/// a waker in one thread-local destructor and waits for it in a later one could notice. Keeping
/// the first parker for the late waits instead would leak it whenever a waker of it is still
/// out at thread exit, which is common (a wait queue's entry that another thread drops later),
/// and LeakSanitizer rightly reported it.
fn thread_parker() -> Arc<ThreadParker> {
    THREAD_PARKER
        .try_with(Arc::clone)
        .unwrap_or_else(|_| late_parker())
}

/// The parker during and after the destruction of `THREAD_PARKER`: the same one every time
/// (a park and the waker taken just before it must share a permit), leaked with the thread.
#[cold]
fn late_parker() -> Arc<ThreadParker> {
    let mut raw = LATE_PARKER.get();
    if raw.is_null() {
        raw = Arc::into_raw(Arc::new(ThreadParker {
            thread: thread::current(),
            permit: AtomicBool::new(false),
        }));
        LATE_PARKER.set(raw);
    }
    // SAFETY: `raw` came from `Arc::into_raw` and that reference is never given back (leaked):
    // the parker is alive, and this makes one more reference for the caller.
    unsafe {
        Arc::increment_strong_count(raw);
        Arc::from_raw(raw)
    }
}

fn thread_waker() -> Waker {
    own_waker(thread_parker())
}

/// The waker vtables of this crate's own wakers: statics, so that [`wakes_without_blocking`]
/// can recognise them by address (a vtable made by `Waker::from` is a constant that each
/// codegen unit may copy).
static THREAD_WAKER_VTABLE: RawWakerVTable = vtable_of::<ThreadParker>();
static DRIVE_WAKER_VTABLE: RawWakerVTable = vtable_of::<DriveWaker>();

/// This crate's own waker types, each with its static vtable.
trait OwnWaker: WakeTrait + Send + Sync + 'static {
    fn vtable() -> &'static RawWakerVTable;
}

impl OwnWaker for ThreadParker {
    fn vtable() -> &'static RawWakerVTable {
        &THREAD_WAKER_VTABLE
    }
}

impl OwnWaker for DriveWaker {
    fn vtable() -> &'static RawWakerVTable {
        &DRIVE_WAKER_VTABLE
    }
}

/// The vtable of a waker made of an `Arc<T>`: as `Waker::from` does, with [`WakeTrait`].
const fn vtable_of<T: OwnWaker>() -> RawWakerVTable {
    unsafe fn clone<T: OwnWaker>(data: *const ()) -> RawWaker {
        // SAFETY: `data` is an `Arc<T>`'s pointer, whose count the waker holds one of.
        unsafe { Arc::increment_strong_count(data.cast::<T>()) };
        RawWaker::new(data, T::vtable())
    }
    unsafe fn wake<T: OwnWaker>(data: *const ()) {
        // SAFETY: as above; `wake` consumes the waker's count.
        WakeTrait::wake(unsafe { Arc::from_raw(data.cast::<T>()) });
    }
    unsafe fn wake_by_ref<T: OwnWaker>(data: *const ()) {
        // SAFETY: as above; the count stays the waker's (`ManuallyDrop`).
        let arc = std::mem::ManuallyDrop::new(unsafe { Arc::from_raw(data.cast::<T>()) });
        WakeTrait::wake_by_ref(&*arc);
    }
    unsafe fn drop<T: OwnWaker>(data: *const ()) {
        // SAFETY: as above; dropping the waker gives back its count.
        unsafe { Arc::decrement_strong_count(data.cast::<T>()) };
    }
    RawWakerVTable::new(clone::<T>, wake::<T>, wake_by_ref::<T>, drop::<T>)
}

/// A waker made of `arc`, with `T`'s static vtable.
fn own_waker<T: OwnWaker>(arc: Arc<T>) -> Waker {
    let data = Arc::into_raw(arc).cast::<()>();
    // SAFETY: `T::vtable()` is `vtable_of::<T>()`, whose functions take `data` as an `Arc<T>`'s
    // pointer with one count handed to the waker; `T` is `Send + Sync`.
    unsafe { Waker::from_raw(RawWaker::new(data, T::vtable())) }
}

/// Whether `waker` is one of this crate's own, whose wake-up never blocks and runs no user
/// code: a thread's (sets a permit and unparks the thread) or `block_on`'s (sets a flag and
/// wakes a task or a thread). A runtime may run those inline where another waker's wake-up,
/// which may run anything, must run where blocking is allowed.
///
/// ```
/// assert!(spindle_park::wakes_without_blocking(&spindle_park::waker()));
/// assert!(!spindle_park::wakes_without_blocking(std::task::Waker::noop()));
/// ```
pub fn wakes_without_blocking(waker: &Waker) -> bool {
    let vtable = waker.vtable();
    std::ptr::eq(vtable, &THREAD_WAKER_VTABLE) || std::ptr::eq(vtable, &DRIVE_WAKER_VTABLE)
}

fn park_thread(deadline: Option<Instant>) -> Wake {
    let parker = thread_parker();
    loop {
        if parker.permit.swap(false, Ordering::Acquire) {
            return Wake::Woken;
        }
        match deadline {
            None => thread::park(),
            Some(deadline) => {
                let now = Instant::now();
                if now >= deadline {
                    return Wake::TimedOut;
                }
                thread::park_timeout(deadline - now);
            }
        }
    }
}

// How the crate is built, for whoever changes it (`cargo doc --document-private-items`).
mod internals;

/// The examples of the crate's README.md, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
