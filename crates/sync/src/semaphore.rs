//! [`Semaphore`]: a fair counting semaphore.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::loom::{AtomicUsize, Ordering, StdMutex, lock};
use crate::waiter::{Waiter, deadline_after};

const CLOSED: usize = 1;
/// The wait queue is not empty (changed only with the queue's lock held).
const PARKED: usize = 2;
const SHIFT: u32 = 2;

const OP_GRANTED: usize = 0;
const OP_CLOSED: usize = 1;

/// Why an acquire failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AcquireError {
    /// The semaphore was [closed](Semaphore::close).
    Closed,
    /// More permits were asked for than a semaphore can hold ([`Semaphore::MAX_PERMITS`]).
    TooMany,
    /// `try_acquire*`: not enough permits now (or others are queued first).
    NoPermits,
    /// The timeout or deadline passed first.
    TimedOut,
}

impl fmt::Display for AcquireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AcquireError::Closed => "the semaphore is closed",
            AcquireError::TooMany => "more permits asked for than Semaphore::MAX_PERMITS",
            AcquireError::NoPermits => "not enough permits available",
            AcquireError::TimedOut => "timed out waiting for permits",
        })
    }
}

impl std::error::Error for AcquireError {}

#[derive(Debug)]
struct Queued {
    cx: Arc<Waiter>,
    n: usize,
}

/// A counting semaphore: a number of permits that callers acquire (waiting while there are
/// not enough) and release.
///
/// ```
/// use std::sync::Arc;
/// use spindle_sync::Semaphore;
///
/// let sem = Arc::new(Semaphore::new(2)); // at most two at once
/// let threads: Vec<_> = (0..4).map(|_| {
///     let sem = sem.clone();
///     std::thread::spawn(move || {
///         let _permit = sem.acquire().unwrap();
///         // ... at most two threads here ...
///     })
/// }).collect();
/// for t in threads { t.join().unwrap(); }
/// assert_eq!(sem.available_permits(), 2);
/// ```
///
/// # Specification
///
/// * [`acquire_many(n)`](Semaphore::acquire_many): *postcondition* on `Ok`: the caller holds
///   `n` permits until the [`SemaphorePermit`] is dropped (or [forgotten](SemaphorePermit::forget)).
///   *Errors*: [`TooMany`](AcquireError::TooMany) if `n > MAX_PERMITS` (it could never be
///   satisfied; no panic), [`Closed`](AcquireError::Closed) if the semaphore is or becomes
///   closed. `n == 0` succeeds at once, in every form (`try_`, timed, async), even with
///   waiters queued (unless the semaphore is closed).
/// * `try_acquire*`: never block; [`NoPermits`](AcquireError::NoPermits) if not enough are
///   available *or others are queued* (they come first). `*_timeout` / `*_deadline`:
///   [`TimedOut`](AcquireError::TimedOut) at the deadline; permits granted as it passes are
///   kept, never lost.
/// * **Fairness: FIFO.** Released permits go to queued waiters first, in order; a waiter
///   asking for many holds back those behind it (no starvation of large requests). Permits
///   are handed over directly: a woken waiter owns them.
/// * [`add_permits`](Semaphore::add_permits) saturates at `MAX_PERMITS`.
/// * **Spurious wake-ups**: none. **Cancellation**: a cancelled waiter leaves the queue (and
///   lets those it held back proceed), or releases permits granted to it.
/// * **Async**: [`acquire_async`](Semaphore::acquire_async) /
///   [`acquire_many_async`](Semaphore::acquire_many_async) are futures in the same queue;
///   dropping one pending is a cancellation, as above.
pub struct Semaphore {
    state: AtomicUsize,
    queue: StdMutex<VecDeque<Queued>>,
}

impl Semaphore {
    /// The most permits a semaphore holds, and the most one acquire may ask for.
    pub const MAX_PERMITS: usize = usize::MAX >> 3;

    /// A semaphore with `permits` permits (at most [`MAX_PERMITS`](Self::MAX_PERMITS); more
    /// is clamped).
    #[cfg(not(loom))]
    pub const fn new(permits: usize) -> Self {
        let permits = if permits > Self::MAX_PERMITS {
            Self::MAX_PERMITS
        } else {
            permits
        };
        Semaphore {
            state: AtomicUsize::new(permits << SHIFT),
            queue: StdMutex::new(VecDeque::new()),
        }
    }

    /// A semaphore with `permits` permits (at most [`MAX_PERMITS`](Self::MAX_PERMITS); more
    /// is clamped).
    #[cfg(loom)]
    pub fn new(permits: usize) -> Self {
        Semaphore {
            state: AtomicUsize::new(permits.min(Self::MAX_PERMITS) << SHIFT),
            queue: StdMutex::new(VecDeque::new()),
        }
    }

    /// Permits available now (a hint).
    pub fn available_permits(&self) -> usize {
        self.state.load(Ordering::Relaxed) >> SHIFT
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.state.load(Ordering::Relaxed) & CLOSED != 0
    }

    /// Acquires one permit, waiting while there is none.
    pub fn acquire(&self) -> Result<SemaphorePermit<'_>, AcquireError> {
        self.acquire_many(1)
    }

    /// Acquires `n` permits, waiting while there are not enough (or others are queued).
    ///
    /// ```
    /// use spindle_sync::{AcquireError, Semaphore};
    /// let sem = Semaphore::new(3);
    /// let p = sem.acquire_many(3).unwrap();
    /// assert_eq!(sem.try_acquire().unwrap_err(), AcquireError::NoPermits);
    /// drop(p);
    /// assert_eq!(sem.acquire_many(usize::MAX).unwrap_err(), AcquireError::TooMany);
    /// ```
    pub fn acquire_many(&self, n: usize) -> Result<SemaphorePermit<'_>, AcquireError> {
        self.acquire_until(n, None)
    }

    /// Acquires `n` permits, waiting at most `timeout`.
    pub fn acquire_many_timeout(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<SemaphorePermit<'_>, AcquireError> {
        self.acquire_until(n, deadline_after(timeout))
    }

    /// Acquires `n` permits, waiting until `deadline` at most.
    pub fn acquire_many_deadline(
        &self,
        n: usize,
        deadline: Instant,
    ) -> Result<SemaphorePermit<'_>, AcquireError> {
        self.acquire_until(n, Some(deadline))
    }

    /// Acquires one permit, waiting at most `timeout`.
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<SemaphorePermit<'_>, AcquireError> {
        self.acquire_many_timeout(1, timeout)
    }

    /// Acquires one permit, waiting until `deadline` at most.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use spindle_sync::{AcquireError, Semaphore};
    ///
    /// let sem = Semaphore::new(1);
    /// let p = sem.acquire().unwrap();
    /// let soon = Instant::now() + Duration::from_millis(5);
    /// assert_eq!(sem.acquire_deadline(soon).unwrap_err(), AcquireError::TimedOut);
    /// drop(p);
    /// assert!(sem.acquire_deadline(soon).is_ok());
    /// ```
    pub fn acquire_deadline(&self, deadline: Instant) -> Result<SemaphorePermit<'_>, AcquireError> {
        self.acquire_many_deadline(1, deadline)
    }

    /// Acquires one permit if one is available now and nobody is queued.
    pub fn try_acquire(&self) -> Result<SemaphorePermit<'_>, AcquireError> {
        self.try_acquire_many(1)
    }

    /// Acquires `n` permits if they are available now and nobody is queued.
    pub fn try_acquire_many(&self, n: usize) -> Result<SemaphorePermit<'_>, AcquireError> {
        if n > Self::MAX_PERMITS {
            return Err(AcquireError::TooMany);
        }
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & CLOSED != 0 {
                return Err(AcquireError::Closed);
            }
            if n == 0 {
                // Nothing to take, so nobody to wait for: every form succeeds at once.
                return Ok(SemaphorePermit { sem: self, n });
            }
            if s & PARKED != 0 || s >> SHIFT < n {
                return Err(AcquireError::NoPermits);
            }
            match self.state.compare_exchange_weak(
                s,
                s - (n << SHIFT),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(SemaphorePermit { sem: self, n }),
                Err(now) => s = now,
            }
        }
    }

    fn acquire_until(
        &self,
        n: usize,
        deadline: Option<Instant>,
    ) -> Result<SemaphorePermit<'_>, AcquireError> {
        match self.try_acquire_many(n) {
            Err(AcquireError::NoPermits) => {}
            other => return other,
        }
        let cx = match self.acquire_or_queue(n, Waiter::new)? {
            None => return Ok(SemaphorePermit { sem: self, n }),
            Some(cx) => cx,
        };
        let abandon = AbandonOnUnwind {
            sem: self,
            cx: &cx,
            n,
        };
        let outcome = cx.wait(deadline);
        std::mem::forget(abandon);
        match outcome {
            Some(OP_GRANTED) => Ok(SemaphorePermit { sem: self, n }),
            Some(_) => Err(AcquireError::Closed),
            None => {
                self.remove(&cx);
                Err(AcquireError::TimedOut)
            }
        }
    }

    /// Under the queue lock: takes `n` permits if nobody is queued and there are enough
    /// (`None`), else queues the record `make` returns (`Some`). `Closed` if it is closed.
    fn acquire_or_queue(
        &self,
        n: usize,
        make: impl FnOnce() -> Arc<Waiter>,
    ) -> Result<Option<Arc<Waiter>>, AcquireError> {
        let mut queue = lock(&self.queue);
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & CLOSED != 0 {
                return Err(AcquireError::Closed);
            }
            let acquire = queue.is_empty() && s >> SHIFT >= n;
            let new = if acquire {
                s - (n << SHIFT)
            } else {
                s | PARKED
            };
            match self
                .state
                .compare_exchange_weak(s, new, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) if acquire => return Ok(None),
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        let cx = make();
        queue.push_back(Queued { cx: cx.clone(), n });
        Ok(Some(cx))
    }

    /// Acquires one permit, as a future: [`acquire_many_async(1)`](Self::acquire_many_async).
    pub fn acquire_async(&self) -> Acquire<'_> {
        self.acquire_many_async(1)
    }

    /// Acquires `n` permits, as a future: [`acquire_many`](Self::acquire_many) for async code,
    /// woken through the polling task's `Waker`, with no executor assumed. It queues when first
    /// polled, in the same FIFO queue as blocking callers (coroutines, threads).
    ///
    /// Dropping the future while it waits leaves the queue (letting those it held back
    /// proceed); permits granted to it in that instant are released again, never lost.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use spindle_sync::Semaphore;
    ///
    /// let sem = Arc::new(Semaphore::new(0));
    /// let s = sem.clone();
    /// let t = std::thread::spawn(move || s.add_permits(2));
    /// let permits = spindle_park::block_on(sem.acquire_many_async(2)).unwrap();
    /// assert_eq!(permits.num_permits(), 2);
    /// t.join().unwrap();
    /// ```
    pub fn acquire_many_async(&self, n: usize) -> Acquire<'_> {
        Acquire {
            sem: self,
            n,
            cx: None,
        }
    }

    /// Adds `n` permits (releases them): queued waiters are served first, in order. Saturates
    /// at [`MAX_PERMITS`](Self::MAX_PERMITS).
    pub fn add_permits(&self, n: usize) {
        let n = n.min(Self::MAX_PERMITS);
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & PARKED != 0 {
                break;
            }
            let permits = ((s >> SHIFT) + n).min(Self::MAX_PERMITS);
            match self.state.compare_exchange_weak(
                s,
                (permits << SHIFT) | (s & CLOSED),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => s = now,
            }
        }
        let mut queue = lock(&self.queue);
        // PARKED may have been cleared meanwhile (then fast paths run again): add with a CAS.
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            let permits = ((s >> SHIFT) + n).min(Self::MAX_PERMITS);
            match self.state.compare_exchange_weak(
                s,
                (permits << SHIFT) | (s & (CLOSED | PARKED)),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        let woken = self.dispatch(&mut queue);
        drop(queue);
        for w in woken {
            w.wake();
        }
    }

    /// Hands permits to queued waiters in order while there are enough for the first.
    fn dispatch(&self, queue: &mut VecDeque<Queued>) -> Vec<Arc<Waiter>> {
        let mut woken = Vec::new();
        // Acquire: the grants pass on what the releasers released.
        let s = self.state.load(Ordering::Acquire);
        let mut permits = s >> SHIFT;
        while let Some(front) = queue.front() {
            if front.n > permits {
                break;
            }
            let front = queue.pop_front().expect("front exists");
            if front.cx.try_select(OP_GRANTED) {
                permits -= front.n;
                woken.push(front.cx);
            }
        }
        let parked = if queue.is_empty() { 0 } else { PARKED };
        // The queue lock is held and (until this store) PARKED was set: nobody else changes
        // the state concurrently, except that it may not have been set if the queue was empty,
        // in which case there is nothing to dispatch and this is a CAS-free no-op.
        if !woken.is_empty() || s & PARKED != parked {
            let mut s = s;
            loop {
                let new = (permits << SHIFT) | (s & CLOSED) | parked;
                match self
                    .state
                    .compare_exchange_weak(s, new, Ordering::AcqRel, Ordering::Relaxed)
                {
                    Ok(_) => break,
                    Err(now) => {
                        // Only a fast-path release can race here (PARKED was clear): keep
                        // what it added.
                        permits += (now >> SHIFT).saturating_sub(s >> SHIFT);
                        s = now;
                    }
                }
            }
        }
        woken
    }

    fn remove(&self, cx: &Arc<Waiter>) {
        let mut queue = lock(&self.queue);
        if let Some(i) = queue.iter().position(|q| Arc::ptr_eq(&q.cx, cx)) {
            queue.remove(i);
        }
        // A large request that leaves may let those behind it proceed.
        let woken = self.dispatch(&mut queue);
        drop(queue);
        for w in woken {
            w.wake();
        }
    }

    /// Closes the semaphore: every queued and future acquire fails with
    /// [`AcquireError::Closed`]. Permits already held stay valid (and are returned on drop).
    ///
    /// ```
    /// let sem = spindle_sync::Semaphore::new(1);
    /// sem.close();
    /// assert_eq!(sem.acquire().unwrap_err(), spindle_sync::AcquireError::Closed);
    /// ```
    pub fn close(&self) {
        let woken: Vec<_> = {
            let mut queue = lock(&self.queue);
            self.state.fetch_or(CLOSED, Ordering::Release);
            let woken = queue
                .drain(..)
                .filter(|q| q.cx.try_select(OP_CLOSED))
                .map(|q| q.cx)
                .collect();
            self.state.fetch_and(!PARKED, Ordering::Relaxed);
            woken
        };
        for w in woken {
            w.wake();
        }
    }
}

struct AbandonOnUnwind<'a> {
    sem: &'a Semaphore,
    cx: &'a Arc<Waiter>,
    n: usize,
}

impl Drop for AbandonOnUnwind<'_> {
    fn drop(&mut self) {
        self.sem.abandon(self.cx, self.n);
    }
}

impl Semaphore {
    /// A waiter gives up (cancelled, or its future dropped): leave the queue, or release the
    /// permits granted to it in that instant.
    fn abandon(&self, cx: &Arc<Waiter>, n: usize) {
        if cx.try_abort() {
            self.remove(cx);
        } else if cx.completed_after_abort_failed() == OP_GRANTED {
            self.add_permits(n);
        }
    }
}

/// The future of [`Semaphore::acquire_async`] / [`acquire_many_async`](Semaphore::acquire_many_async).
#[must_use = "futures do nothing unless polled"]
pub struct Acquire<'a> {
    sem: &'a Semaphore,
    n: usize,
    /// The queued record, while it waits.
    cx: Option<Arc<Waiter>>,
}

impl<'a> Future for Acquire<'a> {
    type Output = Result<SemaphorePermit<'a>, AcquireError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let (sem, n) = (this.sem, this.n);
        let Some(waiter) = &this.cx else {
            match sem.try_acquire_many(n) {
                Err(AcquireError::NoPermits) => {}
                other => return Poll::Ready(other),
            }
            return Poll::Ready(
                match sem.acquire_or_queue(n, || Waiter::new_async(cx.waker())) {
                    Ok(None) => Ok(SemaphorePermit { sem, n }),
                    Ok(Some(waiter)) => {
                        this.cx = Some(waiter);
                        return Poll::Pending;
                    }
                    Err(e) => Err(e),
                },
            );
        };
        let Poll::Ready(op) = waiter.poll(cx) else {
            return Poll::Pending;
        };
        this.cx = None;
        Poll::Ready(if op == OP_GRANTED {
            Ok(SemaphorePermit { sem, n })
        } else {
            Err(AcquireError::Closed)
        })
    }
}

impl Drop for Acquire<'_> {
    fn drop(&mut self) {
        if let Some(cx) = self.cx.take() {
            self.sem.abandon(&cx, self.n);
        }
    }
}

impl fmt::Debug for Acquire<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acquire")
            .field("n", &self.n)
            .field("waiting", &self.cx.is_some())
            .finish()
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("permits", &self.available_permits())
            .field("closed", &self.is_closed())
            .field("waiters", &lock(&self.queue).len())
            .finish()
    }
}

/// Permits held from a [`Semaphore`]; released when dropped.
#[must_use = "the permits are released at once if the guard is not kept"]
pub struct SemaphorePermit<'a> {
    sem: &'a Semaphore,
    n: usize,
}

impl SemaphorePermit<'_> {
    /// How many permits this holds.
    pub fn num_permits(&self) -> usize {
        self.n
    }

    /// Keeps the permits out of the semaphore for good (they are not released).
    pub fn forget(mut self) {
        self.n = 0;
    }
}

impl Drop for SemaphorePermit<'_> {
    fn drop(&mut self) {
        if self.n > 0 {
            self.sem.add_permits(self.n);
        }
    }
}

impl fmt::Debug for SemaphorePermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphorePermit")
            .field("n", &self.n)
            .finish()
    }
}
