//! [`Condvar`]: wait for a condition under a [`Mutex`](crate::Mutex).

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::loom::{StdMutex, lock};
use crate::mutex::MutexGuard;
use crate::waiter::{Waiter, deadline_after};

/// Woken by `notify_one` (passed on if the waiter is cancelled before it returns).
const OP_ONE: usize = 0;
/// Woken by `notify_all`.
const OP_ALL: usize = 1;

/// Whether a timed wait returned because its timeout passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitTimeoutResult(bool);

impl WaitTimeoutResult {
    /// True if the wait ended at its deadline rather than by a notification.
    pub fn timed_out(&self) -> bool {
        self.0
    }
}

/// A condition variable: coroutines and threads wait on it with a [`MutexGuard`] of this
/// crate's [`Mutex`](crate::Mutex) until notified.
///
/// ```
/// use std::sync::Arc;
/// use spindle_sync::{Condvar, Mutex};
///
/// let pair = Arc::new((Mutex::new(false), Condvar::new()));
/// let pair2 = pair.clone();
/// std::thread::spawn(move || {
///     let (ready, cv) = &*pair2;
///     *ready.lock() = true;
///     cv.notify_one();
/// });
/// let (ready, cv) = &*pair;
/// let guard = cv.wait_while(ready.lock(), |ready| !*ready);
/// assert!(*guard);
/// ```
///
/// # Specification
///
/// * [`wait`](Condvar::wait): *precondition*: the guard locks some [`Mutex`](crate::Mutex)
///   (any: a condvar is not tied to one mutex). Atomically (with respect to notifications)
///   unlocks it and waits; *postcondition*: the mutex is locked again when `wait` returns.
/// * **Spurious wake-ups: none.** Unlike `std::sync::Condvar` (and like Boost.Fiber's), `wait`
///   returns only after a `notify_one` chose this waiter or a `notify_all` came after it began
///   waiting; timed waits also return at their deadline. Re-check the condition anyway
///   (another waiter may have consumed it first): [`wait_while`](Condvar::wait_while) does.
/// * [`notify_one`](Condvar::notify_one) wakes the longest-waiting waiter (FIFO);
///   [`notify_all`](Condvar::notify_all) wakes every current waiter. Neither is remembered
///   when nobody waits.
/// * **Timeouts**: a notification that races with the deadline wins: the wait reports
///   `timed_out() == false` and the notification is not lost.
/// * **Cancellation**: a coroutine cancelled while waiting leaves the queue; a `notify_one`
///   that had chosen it is passed on to the next waiter — also when the cancellation comes
///   while it re-locks the mutex after the notification. It does not re-lock the mutex (its
///   guard was given to `wait`).
pub struct Condvar {
    queue: StdMutex<VecDeque<Arc<Waiter>>>,
}

impl Condvar {
    /// A new condition variable.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Condvar {
            queue: StdMutex::new(VecDeque::new()),
        }
    }

    /// A new condition variable.
    #[cfg(loom)]
    pub fn new() -> Self {
        Condvar {
            queue: StdMutex::new(VecDeque::new()),
        }
    }

    /// Unlocks the guard's mutex, waits for a notification, locks it again.
    pub fn wait<'a, T: ?Sized>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.wait_until_inner(guard, None).0
    }

    /// Waits while `condition` holds: returns with the lock held and `condition` false.
    pub fn wait_while<'a, T: ?Sized>(
        &self,
        mut guard: MutexGuard<'a, T>,
        mut condition: impl FnMut(&mut T) -> bool,
    ) -> MutexGuard<'a, T> {
        while condition(&mut *guard) {
            guard = self.wait(guard);
        }
        guard
    }

    /// Waits for a notification at most `timeout`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let m = spindle_sync::Mutex::new(());
    /// let cv = spindle_sync::Condvar::new();
    /// let (_guard, r) = cv.wait_timeout(m.lock(), Duration::from_millis(5));
    /// assert!(r.timed_out());
    /// ```
    pub fn wait_timeout<'a, T: ?Sized>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
    ) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
        self.wait_until_inner(guard, deadline_after(timeout))
    }

    /// Waits for a notification until `deadline` at most.
    pub fn wait_until<'a, T: ?Sized>(
        &self,
        guard: MutexGuard<'a, T>,
        deadline: Instant,
    ) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
        self.wait_until_inner(guard, Some(deadline))
    }

    /// Waits while `condition` holds, at most `timeout`; the result says whether the timeout
    /// passed with the condition still true.
    pub fn wait_timeout_while<'a, T: ?Sized>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
        condition: impl FnMut(&mut T) -> bool,
    ) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
        self.wait_while_until_inner(guard, deadline_after(timeout), condition)
    }

    /// Waits while `condition` holds, until `deadline` at most.
    pub fn wait_until_while<'a, T: ?Sized>(
        &self,
        guard: MutexGuard<'a, T>,
        deadline: Instant,
        condition: impl FnMut(&mut T) -> bool,
    ) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
        self.wait_while_until_inner(guard, Some(deadline), condition)
    }

    fn wait_while_until_inner<'a, T: ?Sized>(
        &self,
        mut guard: MutexGuard<'a, T>,
        deadline: Option<Instant>,
        mut condition: impl FnMut(&mut T) -> bool,
    ) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
        loop {
            if !condition(&mut *guard) {
                return (guard, WaitTimeoutResult(false));
            }
            let (g, r) = self.wait_until_inner(guard, deadline);
            guard = g;
            if r.timed_out() {
                let still = condition(&mut *guard);
                return (guard, WaitTimeoutResult(still));
            }
        }
    }

    fn wait_until_inner<'a, T: ?Sized>(
        &self,
        guard: MutexGuard<'a, T>,
        deadline: Option<Instant>,
    ) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
        let mutex = MutexGuard::mutex(&guard);
        let cx = Waiter::new();
        // Queue before unlocking: a notify after the unlock finds us.
        lock(&self.queue).push_back(cx.clone());
        std::mem::forget(guard);
        // SAFETY: the guard we just forgot held the lock.
        unsafe { mutex.raw().unlock() };
        let abandon = AbandonOnUnwind { cv: self, cx: &cx };
        let outcome = cx.wait(deadline);
        std::mem::forget(abandon);
        let timed_out = match outcome {
            Some(_) => false,
            None => {
                self.remove(&cx);
                true
            }
        };
        // Re-locking may park, and a cancelled coroutine's park unwinds: a `notify_one` this
        // waiter took would then be lost with it, so pass it on.
        let pass_on = PassOnUnwind {
            cv: self,
            armed: outcome == Some(OP_ONE),
        };
        let guard = mutex.lock();
        std::mem::forget(pass_on);
        (guard, WaitTimeoutResult(timed_out))
    }

    fn remove(&self, cx: &Arc<Waiter>) {
        let mut queue = lock(&self.queue);
        if let Some(i) = queue.iter().position(|w| Arc::ptr_eq(w, cx)) {
            queue.remove(i);
        }
    }

    /// Wakes the longest-waiting waiter, if any.
    pub fn notify_one(&self) {
        let woken = {
            let mut queue = lock(&self.queue);
            loop {
                match queue.pop_front() {
                    None => return,
                    Some(w) if w.try_select(OP_ONE) => break w,
                    Some(_) => {} // aborted
                }
            }
        };
        woken.wake();
    }

    /// Wakes every current waiter.
    pub fn notify_all(&self) {
        let woken: Vec<_> = {
            let mut queue = lock(&self.queue);
            queue.drain(..).filter(|w| w.try_select(OP_ALL)).collect()
        };
        for w in woken {
            w.wake();
        }
    }
}

impl Default for Condvar {
    fn default() -> Self {
        Condvar::new()
    }
}

struct AbandonOnUnwind<'a> {
    cv: &'a Condvar,
    cx: &'a Arc<Waiter>,
}

impl Drop for AbandonOnUnwind<'_> {
    fn drop(&mut self) {
        if self.cx.try_abort() {
            self.cv.remove(self.cx);
        } else if self.cx.completed_after_abort_failed() == OP_ONE {
            self.cv.notify_one();
        }
    }
}

/// Passes a taken `notify_one` on if the re-lock after the wait unwinds.
struct PassOnUnwind<'a> {
    cv: &'a Condvar,
    armed: bool,
}

impl Drop for PassOnUnwind<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.cv.notify_one();
        }
    }
}

impl fmt::Debug for Condvar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Condvar")
            .field("waiters", &lock(&self.queue).len())
            .finish()
    }
}
