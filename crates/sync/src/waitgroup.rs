//! [`WaitGroup`]: wait for a counted set of tasks to finish.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::loom::{StdMutex, const_fn, lock};
use crate::waiter::{OnceWait, Waiter, deadline_after};

struct State {
    count: usize,
    waiters: Vec<Arc<Waiter>>,
}

/// A counter that tasks wait on until it drops to zero (Go's `sync.WaitGroup`).
///
/// ```
/// use std::sync::Arc;
/// use spindle_sync::WaitGroup;
///
/// let wg = Arc::new(WaitGroup::new());
/// for _ in 0..4 {
///     wg.add(1);
///     let wg = wg.clone();
///     std::thread::spawn(move || {
///         // ... work ...
///         wg.done();
///     });
/// }
/// wg.wait();
/// assert_eq!(wg.count(), 0);
/// ```
///
/// # Specification
///
/// * [`add(n)`](WaitGroup::add) raises the count (saturating); [`done`](WaitGroup::done)
///   lowers it by one and, at zero, releases every waiter. `done` at zero is an error that
///   changes nothing: it returns `false` (Go panics; this crate does not panic on misuse).
/// * [`wait`](WaitGroup::wait) returns at once if the count is zero, else when it reaches
///   zero. A `WaitGroup` is reusable: `add` after a release starts a new round.
/// * **Spurious wake-ups**: none. **Cancellation**: a cancelled waiter leaves the list.
/// * **Async**: [`wait_async`](WaitGroup::wait_async) is `wait` as a future, in the same
///   list as blocking waiters; dropping it pending leaves the list.
pub struct WaitGroup {
    state: StdMutex<State>,
}

impl WaitGroup {
    const_fn! {
        /// A wait group with count zero.
        pub fn new() -> WaitGroup {
            WaitGroup {
                state: StdMutex::new(State {
                    count: 0,
                    waiters: Vec::new(),
                }),
            }
        }
    }

    /// Adds `n` to the count.
    pub fn add(&self, n: usize) {
        let mut state = lock(&self.state);
        state.count = state.count.saturating_add(n);
    }

    /// Subtracts one from the count, releasing the waiters when it reaches zero. Returns false
    /// (and changes nothing) if the count was already zero.
    pub fn done(&self) -> bool {
        let waiters = {
            let mut state = lock(&self.state);
            if state.count == 0 {
                return false;
            }
            state.count -= 1;
            if state.count > 0 {
                return true;
            }
            std::mem::take(&mut state.waiters)
        };
        for w in waiters {
            if w.try_select(0) {
                w.wake();
            }
        }
        true
    }

    /// The current count.
    pub fn count(&self) -> usize {
        lock(&self.state).count
    }

    /// Waits until the count is zero.
    pub fn wait(&self) {
        self.wait_until_inner(None);
    }

    /// Waits until the count is zero, at most `timeout`; false if it timed out.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        self.wait_until_inner(deadline_after(timeout))
    }

    /// Waits until the count is zero, until `deadline` at most; false if it passed.
    pub fn wait_deadline(&self, deadline: Instant) -> bool {
        self.wait_until_inner(Some(deadline))
    }

    fn wait_until_inner(&self, deadline: Option<Instant>) -> bool {
        let cx = {
            let mut state = lock(&self.state);
            if state.count == 0 {
                return true;
            }
            let cx = Waiter::new();
            state.waiters.push(cx.clone());
            cx
        };
        let abandon = Abandon { wg: self, cx: &cx };
        let outcome = cx.wait(deadline);
        std::mem::forget(abandon);
        if outcome.is_none() {
            self.remove(&cx);
            return false;
        }
        true
    }

    /// Waits until the count is zero, as a future: [`wait`](WaitGroup::wait) for async code,
    /// woken through the polling task's `Waker`, with no executor assumed. Ready at once
    /// (when polled) if the count is zero. Dropping it while it waits leaves the wait list.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use spindle_sync::WaitGroup;
    ///
    /// let wg = Arc::new(WaitGroup::new());
    /// wg.add(2);
    /// for _ in 0..2 {
    ///     let wg = wg.clone();
    ///     std::thread::spawn(move || wg.done());
    /// }
    /// spindle_park::block_on(wg.wait_async());
    /// assert_eq!(wg.count(), 0);
    /// ```
    pub fn wait_async(&self) -> WaitGroupWait<'_> {
        WaitGroupWait {
            wg: self,
            wait: OnceWait::default(),
        }
    }

    fn remove(&self, cx: &Arc<Waiter>) {
        let mut state = lock(&self.state);
        if let Some(i) = state.waiters.iter().position(|w| Arc::ptr_eq(w, cx)) {
            state.waiters.swap_remove(i);
        }
    }
}

impl Default for WaitGroup {
    fn default() -> Self {
        WaitGroup::new()
    }
}

struct Abandon<'a> {
    wg: &'a WaitGroup,
    cx: &'a Arc<Waiter>,
}

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        if self.cx.try_abort() {
            self.wg.remove(self.cx);
        }
    }
}

/// The future of [`WaitGroup::wait_async`]: ready when the count is zero.
#[must_use = "futures do nothing unless polled"]
pub struct WaitGroupWait<'a> {
    wg: &'a WaitGroup,
    wait: OnceWait,
}

impl Future for WaitGroupWait<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let wg = this.wg;
        this.wait.poll(cx, |waker| {
            let mut state = lock(&wg.state);
            if state.count == 0 {
                return None;
            }
            let waiter = Waiter::new_async(waker);
            state.waiters.push(waiter.clone());
            Some(waiter)
        })
    }
}

impl Drop for WaitGroupWait<'_> {
    fn drop(&mut self) {
        if let Some(cx) = self.wait.cx.take()
            && cx.try_abort()
        {
            self.wg.remove(&cx);
        }
    }
}

impl fmt::Debug for WaitGroupWait<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitGroupWait")
            .field("waiting", &self.wait.cx.is_some())
            .field("done", &self.wait.done)
            .finish()
    }
}

impl fmt::Debug for WaitGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock(&self.state);
        f.debug_struct("WaitGroup")
            .field("count", &state.count)
            .field("waiters", &state.waiters.len())
            .finish()
    }
}
