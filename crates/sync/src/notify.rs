//! [`Notify`]: wake one or all waiting tasks, with a stored permit.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::loom::{StdMutex, const_fn, lock};
use crate::waiter::{OnceWait, Waiter, deadline_after};

const OP_ONE: usize = 0;
const OP_ALL: usize = 1;

struct State {
    permit: bool,
    waiters: VecDeque<Arc<Waiter>>,
}

/// An event to wait for: [`notify_one`](Notify::notify_one) wakes one waiter or, if nobody
/// waits, stores a permit that the next [`wait`](Notify::wait) consumes;
/// [`notify_all`](Notify::notify_all) wakes every current waiter (tokio's `Notify` semantics).
///
/// ```
/// use std::sync::Arc;
/// use spindle_sync::Notify;
///
/// let notify = Arc::new(Notify::new());
/// let n = notify.clone();
/// let t = std::thread::spawn(move || n.wait());
/// notify.notify_one(); // before or after the wait began: either way it is not lost
/// t.join().unwrap();
/// ```
///
/// # Specification
///
/// * [`wait`](Notify::wait): returns at once if a permit is stored (consuming it), else when
///   a `notify_one` chooses this waiter or a `notify_all` comes while it waits.
/// * `notify_one`: wakes the longest waiter; with none, stores the permit (at most one: more
///   `notify_one`s with nobody waiting still store one).
/// * `notify_all`: wakes all current waiters; stores nothing.
/// * Timed waits return `false` at the deadline; a notification racing with it wins (`true`).
/// * **Spurious wake-ups**: none. **Cancellation**: a cancelled waiter leaves the queue; a
///   `notify_one` that had chosen it is passed on (to the next waiter, or stored as the
///   permit).
/// * **Async**: [`notified`](Notify::notified) is `wait` as a future; it queues (or consumes
///   the permit) when first polled, in the same queue as blocking waiters. Dropping it
///   pending is a cancellation, as above.
pub struct Notify {
    state: StdMutex<State>,
}

impl Notify {
    const_fn! {
        /// A `Notify` with no permit stored.
        pub fn new() -> Notify {
            Notify {
                state: StdMutex::new(State {
                    permit: false,
                    waiters: VecDeque::new(),
                }),
            }
        }
    }

    /// Wakes one waiter, or stores the permit if nobody waits.
    pub fn notify_one(&self) {
        let woken = {
            let mut state = lock(&self.state);
            loop {
                match state.waiters.pop_front() {
                    None => {
                        state.permit = true;
                        return;
                    }
                    Some(w) if w.try_select(OP_ONE) => break w,
                    Some(_) => {}
                }
            }
        };
        woken.wake();
    }

    /// Wakes every current waiter (stores no permit).
    pub fn notify_all(&self) {
        let woken: Vec<_> = {
            let mut state = lock(&self.state);
            state
                .waiters
                .drain(..)
                .filter(|w| w.try_select(OP_ALL))
                .collect()
        };
        for w in woken {
            w.wake();
        }
    }

    /// Waits for a notification (or consumes the stored permit).
    pub fn wait(&self) {
        self.wait_until_inner(None);
    }

    /// Waits at most `timeout`; false if it timed out.
    ///
    /// ```
    /// use std::time::Duration;
    /// let n = spindle_sync::Notify::new();
    /// assert!(!n.wait_timeout(Duration::from_millis(1)));
    /// n.notify_one();
    /// assert!(n.wait_timeout(Duration::from_millis(1)));
    /// ```
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        self.wait_until_inner(deadline_after(timeout))
    }

    /// Waits until `deadline` at most; false if it passed.
    pub fn wait_deadline(&self, deadline: Instant) -> bool {
        self.wait_until_inner(Some(deadline))
    }

    fn wait_until_inner(&self, deadline: Option<Instant>) -> bool {
        let cx = {
            let mut state = lock(&self.state);
            if std::mem::take(&mut state.permit) {
                return true;
            }
            let cx = Waiter::new();
            state.waiters.push_back(cx.clone());
            cx
        };
        let abandon = Abandon {
            notify: self,
            cx: &cx,
        };
        let outcome = cx.wait(deadline);
        std::mem::forget(abandon);
        if outcome.is_none() {
            self.remove(&cx);
            return false;
        }
        true
    }

    /// Waits for a notification as a future (or consumes the stored permit): [`wait`]
    /// for async code, woken through the polling task's `Waker`, with no executor assumed.
    ///
    /// The future joins the queue when it is first polled (a `notify_all` before that does
    /// not reach it; a `notify_one` before that stores the permit it then consumes). Async
    /// waiters, coroutines and threads wait in the same FIFO queue. Dropping the future while
    /// it waits leaves the queue; a `notify_one` it was chosen by in that instant is passed on.
    ///
    /// [`wait`]: Notify::wait
    ///
    /// ```
    /// use std::sync::Arc;
    /// use spindle_sync::Notify;
    ///
    /// let notify = Arc::new(Notify::new());
    /// let n = notify.clone();
    /// let t = std::thread::spawn(move || n.notify_one());
    /// spindle_park::block_on(notify.notified());
    /// t.join().unwrap();
    /// ```
    pub fn notified(&self) -> Notified<'_> {
        Notified {
            notify: self,
            wait: OnceWait::default(),
        }
    }

    fn remove(&self, cx: &Arc<Waiter>) {
        let mut state = lock(&self.state);
        if let Some(i) = state.waiters.iter().position(|w| Arc::ptr_eq(w, cx)) {
            state.waiters.remove(i);
        }
    }
}

impl Default for Notify {
    fn default() -> Self {
        Notify::new()
    }
}

struct Abandon<'a> {
    notify: &'a Notify,
    cx: &'a Arc<Waiter>,
}

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        self.notify.abandon(self.cx);
    }
}

impl Notify {
    /// A waiter gives up (cancelled, or its future dropped): leave the queue, or pass on a
    /// `notify_one` that chose it.
    fn abandon(&self, cx: &Arc<Waiter>) {
        if cx.try_abort() {
            self.remove(cx);
        } else if cx.completed_after_abort_failed() == OP_ONE {
            self.notify_one();
        }
    }
}

/// The future of [`Notify::notified`]: ready when a notification reaches it.
#[must_use = "futures do nothing unless polled"]
pub struct Notified<'a> {
    notify: &'a Notify,
    wait: OnceWait,
}

impl Future for Notified<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let notify = this.notify;
        this.wait.poll(cx, |waker| {
            let mut state = lock(&notify.state);
            if std::mem::take(&mut state.permit) {
                return None;
            }
            let waiter = Waiter::new_async(waker);
            state.waiters.push_back(waiter.clone());
            Some(waiter)
        })
    }
}

impl Drop for Notified<'_> {
    fn drop(&mut self) {
        if let Some(cx) = self.wait.cx.take() {
            self.notify.abandon(&cx);
        }
    }
}

impl fmt::Debug for Notified<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Notified")
            .field("waiting", &self.wait.cx.is_some())
            .field("done", &self.wait.done)
            .finish()
    }
}

impl fmt::Debug for Notify {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock(&self.state);
        f.debug_struct("Notify")
            .field("permit", &state.permit)
            .field("waiters", &state.waiters.len())
            .finish()
    }
}
