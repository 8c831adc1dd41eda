//! [`Mutex`]: mutual exclusion that suspends a waiting coroutine and parks a waiting thread.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::loom::{AtomicU8, DataCell, Ordering, StdMutex, lock};
use crate::waiter::{Waiter, deadline_after};

const LOCKED: u8 = 1;
/// The wait queue is not empty (set and cleared only with the queue's lock held).
const PARKED: u8 = 2;
/// A waiter was woken to retry and has not run yet: unlocks need not wake another (Go's
/// `mutexWoken`), which keeps a hot lock from waking a waiter on every unlock.
const WOKEN: u8 = 4;

/// Wake-up: the lock was released; try again.
const OP_RETRY: usize = 0;
/// Wake-up: the lock was handed to you (it stayed locked).
const OP_HANDOFF: usize = 1;

/// How long a waiter may wait before an unlock hands the lock to it directly (Go's
/// `starvationThresholdNs`; parking_lot uses about 0.5 ms).
#[cfg(not(loom))]
const HANDOFF_AFTER: Duration = Duration::from_millis(1);

/// Spin rounds (each `2^round` pause instructions) before queueing, while nobody is queued.
#[cfg(not(loom))]
const SPIN_ROUNDS: u32 = 7;
/// Under loom a spin round is a yield to the other threads: one is enough to explore it.
#[cfg(loom)]
const SPIN_ROUNDS: u32 = 1;

/// When a waiter started waiting: decides the hand-off. Under loom time does not pass, so the
/// bound is "re-queued once" instead, which loom can explore both sides of.
#[derive(Debug, Clone, Copy)]
struct Since {
    #[cfg(not(loom))]
    at: Instant,
    #[cfg(loom)]
    queued: u32,
}

impl Since {
    fn now() -> Since {
        Since {
            #[cfg(not(loom))]
            at: Instant::now(),
            #[cfg(loom)]
            queued: 0,
        }
    }

    /// Called each time the waiter queues again after a `RETRY` wake-up it lost.
    fn requeued(&mut self) {
        #[cfg(loom)]
        {
            self.queued += 1;
        }
    }

    fn overdue(&self) -> bool {
        #[cfg(not(loom))]
        {
            self.at.elapsed() >= HANDOFF_AFTER
        }
        #[cfg(loom)]
        {
            self.queued >= 1
        }
    }
}

#[derive(Debug)]
struct Queued {
    cx: Arc<Waiter>,
    since: Since,
}

/// The wait queue, and when the next hand-off may happen.
#[derive(Debug)]
struct Queue {
    waiters: VecDeque<Queued>,
    /// Hand-offs are rationed to one per [`HANDOFF_AFTER`] per lock (parking_lot's "eventual
    /// fairness" is rationed the same way): a hand-off keeps the lock locked until its new
    /// owner runs, which for a coroutine on another worker can be a sleeping thread's wake-up
    /// (tens of microseconds); unrationed, every overdue waiter in a long queue would be handed
    /// the lock in turn, a convoy. `None`: allowed now. (Unused under loom.)
    #[cfg_attr(loom, allow(dead_code))]
    next_handoff: Option<Instant>,
}

impl Queue {
    const fn new() -> Queue {
        Queue {
            waiters: VecDeque::new(),
            next_handoff: None,
        }
    }

    /// Whether a hand-off is allowed now; if so, the next one is allowed a while later.
    fn take_handoff(&mut self) -> bool {
        #[cfg(not(loom))]
        {
            let now = Instant::now();
            if self.next_handoff.is_some_and(|at| now < at) {
                return false;
            }
            self.next_handoff = Some(now + HANDOFF_AFTER);
            true
        }
        #[cfg(loom)]
        {
            true
        }
    }
}

impl std::ops::Deref for Queue {
    type Target = VecDeque<Queued>;
    fn deref(&self) -> &VecDeque<Queued> {
        &self.waiters
    }
}

impl std::ops::DerefMut for Queue {
    fn deref_mut(&mut self) -> &mut VecDeque<Queued> {
        &mut self.waiters
    }
}

/// The lock without the data: a state byte and a FIFO queue of heap-allocated waiter records.
pub(crate) struct RawMutex {
    state: AtomicU8,
    queue: StdMutex<Queue>,
}

impl RawMutex {
    #[cfg(not(loom))]
    pub(crate) const fn new() -> RawMutex {
        RawMutex {
            state: AtomicU8::new(0),
            queue: StdMutex::new(Queue::new()),
        }
    }

    #[cfg(loom)]
    pub(crate) fn new() -> RawMutex {
        RawMutex {
            state: AtomicU8::new(0),
            queue: StdMutex::new(Queue::new()),
        }
    }

    #[inline]
    pub(crate) fn try_lock(&self) -> bool {
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & LOCKED != 0 {
                return false;
            }
            match self.state.compare_exchange_weak(
                s,
                s | LOCKED,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
    }

    #[inline]
    pub(crate) fn lock(&self) {
        if self
            .state
            .compare_exchange_weak(0, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_slow(None);
        }
    }

    /// Locks before `deadline`; false if it passed first.
    pub(crate) fn lock_until(&self, deadline: Option<Instant>) -> bool {
        self.try_lock() || self.lock_slow(deadline)
    }

    #[inline]
    pub(crate) fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) & LOCKED != 0
    }

    /// # Safety
    ///
    /// The caller holds the lock (it locked it, or was handed it, and has not unlocked).
    #[inline]
    pub(crate) unsafe fn unlock(&self) {
        if self
            .state
            .compare_exchange(LOCKED, 0, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            self.unlock_slow();
        }
    }

    #[cold]
    fn lock_slow(&self, deadline: Option<Instant>) -> bool {
        let mut spins = 0;
        let mut since: Option<Since> = None;
        // Woken to retry (and lost so far): spin even though others are queued — this task
        // is running now, and a park would cost it another wake-up, possibly of a sleeping
        // worker thread — and queue again at the front, keeping its place.
        let mut woken = false;
        loop {
            let s = self.state.load(Ordering::Relaxed);
            if s & LOCKED == 0 {
                if self.try_lock() {
                    return true;
                }
                continue;
            }
            if (s & PARKED == 0 || woken) && spins < SPIN_ROUNDS {
                spin(spins);
                spins += 1;
                continue;
            }
            // Queue up. `since` survives a lost retry, and a waiter that lost queues at the
            // front again (it keeps its place).
            let cx = Waiter::new();
            if !self.queue(&cx, &mut since, woken) {
                continue;
            }
            let guard = AbandonOnUnwind { raw: self, cx: &cx };
            let outcome = cx.wait(deadline);
            std::mem::forget(guard);
            match outcome {
                Some(OP_HANDOFF) => return true,
                Some(_) => {
                    self.state.fetch_and(!WOKEN, Ordering::Relaxed);
                    woken = true;
                    spins = 0;
                    if self.try_lock() {
                        return true;
                    }
                }
                None => {
                    // Timed out and aborted: leave the queue. We were handed nothing.
                    self.remove(&cx);
                    return false;
                }
            }
        }
    }

    /// Queues `cx` while the lock is held (at the front if it was `woken` to retry and lost,
    /// keeping its place); false (nothing queued) if the lock is free now: try again.
    /// `since` survives lost retries.
    fn queue(&self, cx: &Arc<Waiter>, since: &mut Option<Since>, woken: bool) -> bool {
        let mut queue = lock(&self.queue);
        // Announce the waiter (PARKED) only while the lock is held: the holder's unlock then
        // takes the slow path and finds us; if the lock was released meanwhile, try again
        // instead.
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & LOCKED == 0 {
                return false;
            }
            if s & PARKED != 0 {
                break;
            }
            match self.state.compare_exchange_weak(
                s,
                s | PARKED,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        let entry = Queued {
            cx: cx.clone(),
            since: match since {
                Some(since) => {
                    since.requeued();
                    *since
                }
                None => *since.insert(Since::now()),
            },
        };
        if woken {
            queue.push_front(entry);
        } else {
            queue.push_back(entry);
        }
        true
    }

    /// The async lock's step ([`MutexLockFuture`]): `Ready` once the caller holds the lock.
    /// As [`lock_slow`](Self::lock_slow), without spinning: try, else queue a record holding
    /// `cx`'s waker; a `RETRY` wake-up tries again and queues at the front if it loses.
    fn poll_lock(&self, wait: &mut AsyncWait, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            if let Some(waiter) = &wait.cx {
                let Poll::Ready(op) = waiter.poll(cx) else {
                    return Poll::Pending;
                };
                wait.cx = None;
                if op == OP_HANDOFF {
                    return Poll::Ready(());
                }
                self.state.fetch_and(!WOKEN, Ordering::Relaxed);
                wait.woken = true;
            }
            if self.try_lock() {
                return Poll::Ready(());
            }
            let waiter = Waiter::new_async(cx.waker());
            if self.queue(&waiter, &mut wait.since, wait.woken) {
                wait.cx = Some(waiter);
            }
        }
    }

    #[cold]
    fn unlock_slow(&self) {
        // A woken waiter is on its way (or nobody waits): just release.
        let mut s = self.state.load(Ordering::Relaxed);
        while s & WOKEN != 0 || s & PARKED == 0 {
            match self.state.compare_exchange_weak(
                s,
                s & !LOCKED,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => s = now,
            }
        }
        let mut queue = lock(&self.queue);
        let woken = loop {
            let Some(front) = queue.pop_front() else {
                // Only aborted records were left.
                self.state.fetch_and(!(LOCKED | PARKED), Ordering::Release);
                return;
            };
            let parked = if queue.is_empty() { 0 } else { PARKED };
            if front.since.overdue() && front.cx.is_waiting() && queue.take_handoff() {
                if front.cx.try_select(OP_HANDOFF) {
                    // Fairness: the lock stays locked and now belongs to the waiter.
                    if parked == 0 {
                        self.state.fetch_and(!PARKED, Ordering::Relaxed);
                    }
                    break front.cx;
                }
            } else if front.cx.try_claim() {
                // Unlock, mark the waiter woken, keep PARKED as the queue says (WOKEN is
                // cleared concurrently by a woken waiter: read-modify-write). The waiter sees
                // its wake-up only after (`publish_claimed`): one that saw it first could clear
                // WOKEN before it was set, leaving it set with nobody on the way — every later
                // unlock would then skip the queue.
                let mut s = self.state.load(Ordering::Relaxed);
                loop {
                    let new = (s & !(LOCKED | PARKED)) | WOKEN | parked;
                    match self.state.compare_exchange_weak(
                        s,
                        new,
                        Ordering::Release,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => break,
                        Err(now) => s = now,
                    }
                }
                front.cx.publish_claimed(OP_RETRY);
                break front.cx;
            }
            // An aborted record (timed out or cancelled, not yet removed): skip it.
        };
        drop(queue);
        woken.wake();
    }

    /// Removes an aborted waiter's record.
    fn remove(&self, cx: &Arc<Waiter>) {
        let mut queue = lock(&self.queue);
        if let Some(i) = queue.iter().position(|q| Arc::ptr_eq(&q.cx, cx)) {
            queue.remove(i);
        }
        if queue.is_empty() {
            self.state.fetch_and(!PARKED, Ordering::Relaxed);
        }
    }

    /// A waiter unwinds out of its park (its coroutine was cancelled): leave the queue, or
    /// pass on what it was handed.
    #[cold]
    fn abandon(&self, cx: &Arc<Waiter>) {
        if cx.try_abort() {
            self.remove(cx);
            return;
        }
        match cx.completed_after_abort_failed() {
            // SAFETY: the lock was handed to us; we give it back.
            OP_HANDOFF => unsafe { self.unlock() },
            _ => {
                // We were woken to retry (and taken off the queue): we are no longer on our
                // way; if the lock is free, wake the next waiter in our place; if it is held,
                // its holder will (WOKEN is clear now).
                let mut queue = lock(&self.queue);
                let s = self.state.fetch_and(!WOKEN, Ordering::Relaxed);
                if s & LOCKED != 0 {
                    return;
                }
                while let Some(front) = queue.pop_front() {
                    // Claimed, published once WOKEN is set (see `unlock_slow`).
                    if front.cx.try_claim() {
                        let parked = if queue.is_empty() { 0 } else { PARKED };
                        let mut s = self.state.load(Ordering::Relaxed);
                        loop {
                            let new = (s & !PARKED) | WOKEN | parked;
                            match self.state.compare_exchange_weak(
                                s,
                                new,
                                Ordering::Relaxed,
                                Ordering::Relaxed,
                            ) {
                                Ok(_) => break,
                                Err(now) => s = now,
                            }
                        }
                        front.cx.publish_claimed(OP_RETRY);
                        drop(queue);
                        front.cx.wake();
                        return;
                    }
                }
                self.state.fetch_and(!PARKED, Ordering::Relaxed);
            }
        }
    }
}

impl fmt::Debug for RawMutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawMutex")
            .field("locked", &self.is_locked())
            .finish_non_exhaustive()
    }
}

#[inline]
fn spin(round: u32) {
    for _ in 0..(1u32 << round.min(10)) {
        std::hint::spin_loop();
    }
    #[cfg(loom)]
    ::loom::thread::yield_now();
}

/// The waiting state of a [`MutexLockFuture`].
#[derive(Debug, Default)]
struct AsyncWait {
    /// The queued record, while it waits.
    cx: Option<Arc<Waiter>>,
    /// When it first queued (for the hand-off).
    since: Option<Since>,
    /// It was woken to retry (and lost): it queues at the front.
    woken: bool,
}

/// The future of [`Mutex::lock_async`]: the guard once the lock is the caller's.
#[must_use = "futures do nothing unless polled"]
pub struct MutexLockFuture<'a, T: ?Sized> {
    mutex: &'a Mutex<T>,
    wait: AsyncWait,
}

impl<'a, T: ?Sized> Future for MutexLockFuture<'a, T> {
    type Output = MutexGuard<'a, T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        this.mutex
            .raw
            .poll_lock(&mut this.wait, cx)
            .map(|()| MutexGuard::new(this.mutex))
    }
}

impl<T: ?Sized> Drop for MutexLockFuture<'_, T> {
    fn drop(&mut self) {
        if let Some(cx) = self.wait.cx.take() {
            self.mutex.raw.abandon(&cx);
        }
    }
}

impl<T: ?Sized> fmt::Debug for MutexLockFuture<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MutexLockFuture")
            .field("waiting", &self.wait.cx.is_some())
            .finish()
    }
}

/// Runs [`RawMutex::abandon`] if the wait unwinds.
struct AbandonOnUnwind<'a> {
    raw: &'a RawMutex,
    cx: &'a Arc<Waiter>,
}

impl Drop for AbandonOnUnwind<'_> {
    fn drop(&mut self) {
        self.raw.abandon(self.cx);
    }
}

/// A mutual exclusion lock that suspends a waiting coroutine (its worker runs others) and
/// parks a waiting thread, with or without a runtime.
///
/// Coroutines and plain threads can share one `Mutex`: a thread may wait for a lock a
/// coroutine holds, and the reverse. A coroutine may hold the guard across a suspension point
/// (a sleep, a channel receive): other coroutines waiting for it suspend meanwhile.
///
/// ```
/// use std::sync::Arc;
/// use spindle_sync::Mutex;
///
/// let counter = Arc::new(Mutex::new(0));
/// let threads: Vec<_> = (0..4)
///     .map(|_| {
///         let counter = counter.clone();
///         std::thread::spawn(move || {
///             for _ in 0..1000 {
///                 *counter.lock() += 1;
///             }
///         })
///     })
///     .collect();
/// for t in threads {
///     t.join().unwrap();
/// }
/// assert_eq!(*counter.lock(), 4000);
/// ```
///
/// # Specification
///
/// * [`lock`](Mutex::lock): *postcondition*: the caller holds the lock until the returned
///   guard is dropped. Blocks (suspends a coroutine, parks a thread) while another holder has
///   it. *Errors*: none. Not reentrant: locking a mutex the caller already holds never returns.
/// * [`try_lock`](Mutex::try_lock): never blocks; `None` if the lock is held.
/// * [`try_lock_for`](Mutex::try_lock_for) / [`try_lock_until`](Mutex::try_lock_until):
///   `None` if the timeout passed first. A lock handed over just as the deadline passes is
///   taken (`Some`), never dropped.
/// * **Spurious wake-ups**: none. A waiter returns only with the lock or at its deadline.
/// * **Fairness**: unlocking wakes the first waiter (FIFO queue), which competes with
///   running callers (barging, for throughput: a lock is often re-taken before a woken waiter
///   runs); a woken waiter that loses spins briefly, then queues again at the front. A waiter
///   that has waited 1 ms or more is *handed* the lock — the unlock leaves it locked and makes
///   the waiter the owner (Go's starvation mode) — at most once per millisecond per lock
///   (parking_lot's rationing: a hand-off to a coroutine whose worker thread sleeps keeps the
///   lock idle until that thread wakes, so unrationed hand-offs would form a convoy). So no
///   waiter starves: once first in line and overdue, it gets the lock within about a
///   millisecond. Before queueing, a caller spins briefly while nobody is queued.
/// * **Poisoning**: none (parking_lot's choice). A panic — or a cancelled coroutine unwinding —
///   while a guard is held releases the lock; the data may be half-updated, and the next
///   holder sees it as it is. Poisoning would turn every cancellation of a coroutine holding a
///   lock into a poisoned lock.
/// * **Cancellation**: a coroutine cancelled while waiting leaves the queue; if the lock had
///   just been handed to it, it is passed on; if it had been woken to retry, the next waiter
///   is woken in its place.
/// * **Async**: [`lock_async`](Mutex::lock_async) is a future in the same queue; dropping it
///   pending is a cancellation, as above.
pub struct Mutex<T: ?Sized> {
    raw: RawMutex,
    data: DataCell<T>,
}

// SAFETY: the mutex gives access to `T` to one holder at a time, from whichever thread holds
// it: `T: Send` is what that needs (as for `std::sync::Mutex`).
unsafe impl<T: ?Sized + Send> Send for Mutex<T> {}
// SAFETY: as above; `&Mutex<T>` only gives exclusive access to `T`, one holder at a time.
unsafe impl<T: ?Sized + Send> Sync for Mutex<T> {}

impl<T> Mutex<T> {
    /// A new unlocked mutex holding `value`.
    #[cfg(not(loom))]
    pub const fn new(value: T) -> Mutex<T> {
        Mutex {
            raw: RawMutex::new(),
            data: DataCell::new(value),
        }
    }

    /// A new unlocked mutex holding `value`.
    #[cfg(loom)]
    pub fn new(value: T) -> Mutex<T> {
        Mutex {
            raw: RawMutex::new(),
            data: DataCell::new(value),
        }
    }

    /// Consumes the mutex, returning the value.
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Acquires the lock, waiting (suspending a coroutine, parking a thread) while it is held.
    ///
    /// ```
    /// let m = spindle_sync::Mutex::new(vec![1]);
    /// m.lock().push(2);
    /// assert_eq!(*m.lock(), [1, 2]);
    /// ```
    #[inline]
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.raw.lock();
        MutexGuard::new(self)
    }

    /// Acquires the lock, as a future: [`lock`](Self::lock) for async code, woken through the
    /// polling task's `Waker`, with no executor assumed. A pending future waits in the same
    /// FIFO queue as blocking callers (coroutines and threads), with the same fairness
    /// (barging, and the hand-off to a waiter overdue by 1 ms); it does not spin.
    ///
    /// Dropping the future while it waits leaves the queue; a lock handed to it in that
    /// instant is unlocked again (passed on), and a wake-up to retry is passed to the next
    /// waiter. The guard is the same as [`lock`](Self::lock)'s, so holding it across an
    /// `.await` makes the enclosing future `!Send`, as with `std::sync::MutexGuard`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use spindle_sync::Mutex;
    ///
    /// let m = Arc::new(Mutex::new(0));
    /// let g = m.lock();
    /// let m2 = m.clone();
    /// let t = std::thread::spawn(move || {
    ///     *spindle_park::block_on(m2.lock_async()) += 1;
    /// });
    /// drop(g); // the async waiter gets the lock
    /// t.join().unwrap();
    /// assert_eq!(*m.lock(), 1);
    /// ```
    pub fn lock_async(&self) -> MutexLockFuture<'_, T> {
        MutexLockFuture {
            mutex: self,
            wait: AsyncWait::default(),
        }
    }

    /// Acquires the lock if it is free, without waiting.
    ///
    /// ```
    /// let m = spindle_sync::Mutex::new(1);
    /// let g = m.lock();
    /// assert!(m.try_lock().is_none());
    /// drop(g);
    /// assert_eq!(*m.try_lock().unwrap(), 1);
    /// ```
    #[inline]
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.raw.try_lock().then(|| MutexGuard::new(self))
    }

    /// Acquires the lock, waiting at most `timeout`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let m = spindle_sync::Mutex::new(());
    /// let g = m.lock();
    /// assert!(m.try_lock_for(Duration::from_millis(5)).is_none());
    /// drop(g);
    /// assert!(m.try_lock_for(Duration::from_millis(5)).is_some());
    /// ```
    pub fn try_lock_for(&self, timeout: Duration) -> Option<MutexGuard<'_, T>> {
        self.raw
            .lock_until(deadline_after(timeout))
            .then(|| MutexGuard::new(self))
    }

    /// Acquires the lock, waiting until `deadline` at most.
    pub fn try_lock_until(&self, deadline: Instant) -> Option<MutexGuard<'_, T>> {
        self.raw
            .lock_until(Some(deadline))
            .then(|| MutexGuard::new(self))
    }

    /// Whether the lock is held right now (a hint: it may change at once).
    pub fn is_locked(&self) -> bool {
        self.raw.is_locked()
    }

    /// The value, through exclusive access to the mutex (no locking needed).
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }

    pub(crate) fn raw(&self) -> &RawMutex {
        &self.raw
    }
}

impl<T: Default> Default for Mutex<T> {
    fn default() -> Self {
        Mutex::new(T::default())
    }
}

impl<T> From<T> for Mutex<T> {
    fn from(value: T) -> Self {
        Mutex::new(value)
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Mutex");
        match self.try_lock() {
            Some(guard) => d.field("data", &&*guard),
            None => d.field("data", &format_args!("<locked>")),
        };
        d.finish()
    }
}

/// Holds a [`Mutex`] locked; unlocks it when dropped. Derefs to the data.
#[must_use = "if unused the Mutex will immediately unlock"]
pub struct MutexGuard<'a, T: ?Sized> {
    mutex: &'a Mutex<T>,
    /// `!Send`, like `std::sync::MutexGuard`.
    _not_send: PhantomData<*const ()>,
}

// SAFETY: sharing the guard shares `&T` only.
unsafe impl<T: ?Sized + Sync> Sync for MutexGuard<'_, T> {}

impl<'a, T: ?Sized> MutexGuard<'a, T> {
    fn new(mutex: &'a Mutex<T>) -> Self {
        MutexGuard {
            mutex,
            _not_send: PhantomData,
        }
    }

    /// The mutex this guard holds (for [`Condvar`](crate::Condvar)).
    pub(crate) fn mutex(guard: &Self) -> &'a Mutex<T> {
        guard.mutex
    }
}

impl<T: ?Sized> Deref for MutexGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock, so nobody else accesses the data.
        unsafe { &*self.mutex.data.ptr() }
    }
}

impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard holds the lock, and `&mut self` is exclusive.
        unsafe { &mut *self.mutex.data.ptr() }
    }
}

impl<T: ?Sized> Drop for MutexGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the guard holds the lock.
        unsafe { self.mutex.raw.unlock() };
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized + fmt::Display> fmt::Display for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&**self, f)
    }
}
