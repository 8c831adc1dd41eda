//! [`RwLock`]: a fair reader-writer lock for coroutines and threads.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::loom::{AtomicUsize, DataCell, Ordering, StdMutex, lock};
use crate::waiter::{Waiter, deadline_after};

/// A writer holds the lock.
const WRITER: usize = 1;
/// The wait queue is not empty (changed only with the queue's lock held).
const PARKED: usize = 2;
/// One reader (readers are counted from bit 2 up).
const READER: usize = 4;

/// Wake-up: the lock (read or write, as asked) was granted to you.
const OP_GRANTED: usize = 0;

#[derive(Debug)]
struct Queued {
    cx: Arc<Waiter>,
    write: bool,
}

struct RawRwLock {
    state: AtomicUsize,
    queue: StdMutex<VecDeque<Queued>>,
}

impl RawRwLock {
    #[cfg(not(loom))]
    const fn new() -> Self {
        RawRwLock {
            state: AtomicUsize::new(0),
            queue: StdMutex::new(VecDeque::new()),
        }
    }

    #[cfg(loom)]
    fn new() -> Self {
        RawRwLock {
            state: AtomicUsize::new(0),
            queue: StdMutex::new(VecDeque::new()),
        }
    }

    #[inline]
    fn try_read(&self) -> bool {
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            // Nobody queued (a queued writer holds new readers back) and no writer.
            if s & (WRITER | PARKED) != 0 || s > usize::MAX - 2 * READER {
                return false;
            }
            match self.state.compare_exchange_weak(
                s,
                s + READER,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
    }

    #[inline]
    fn try_write(&self) -> bool {
        self.state
            .compare_exchange(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// # Safety
    ///
    /// The caller holds a read lock.
    #[inline]
    unsafe fn unlock_read(&self) {
        let before = self.state.fetch_sub(READER, Ordering::Release);
        if before & !PARKED == READER && before & PARKED != 0 {
            // The last reader, with waiters: a writer is first in line.
            self.unlock_slow();
        }
    }

    /// # Safety
    ///
    /// The caller holds the write lock.
    #[inline]
    unsafe fn unlock_write(&self) {
        if self
            .state
            .compare_exchange(WRITER, 0, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            self.state.fetch_and(!WRITER, Ordering::Release);
            self.unlock_slow();
        }
    }

    #[cold]
    fn unlock_slow(&self) {
        let mut queue = lock(&self.queue);
        let woken = self.dispatch(&mut queue);
        drop(queue);
        for cx in woken {
            cx.wake();
        }
    }

    /// Grants the lock to queued waiters as the policy says; returns whom to wake. Called with
    /// the queue locked after any change that may let someone in.
    ///
    /// Policy: the lock goes to the first in line; when that is a reader, every queued reader
    /// is admitted with it (a read batch). While readers hold the lock, queued readers are
    /// admitted only if no writer is queued. New readers queue (instead of joining the readers)
    /// as soon as anyone is queued.
    fn dispatch(&self, queue: &mut VecDeque<Queued>) -> Vec<Arc<Waiter>> {
        let mut woken = Vec::new();
        // Acquire: the grants below pass on what the last holder released (its unlock may have
        // been a Release RMW that this thread did not perform).
        let mut s = self.state.load(Ordering::Acquire);
        loop {
            if s & WRITER != 0 {
                break;
            }
            let readers = s / READER;
            let writer_first = queue.front().is_some_and(|q| q.write);
            let grant_writer = readers == 0 && writer_first;
            let grant_readers = if readers == 0 {
                !writer_first && !queue.is_empty()
            } else {
                !queue.is_empty() && !queue.iter().any(|q| q.write)
            };
            if grant_writer {
                let front = queue.pop_front().expect("a writer is first");
                // Claimed, not selected: the writer must not see its grant (and unlock) before
                // the state says a writer holds the lock.
                if !front.cx.try_claim() {
                    continue; // aborted: skip it
                }
                let parked = if queue.is_empty() { 0 } else { PARKED };
                // Nobody else changes the state now: it is free (no fast path succeeds while
                // PARKED is set; every holder is counted in it), and we hold the queue.
                self.state.store(WRITER | parked, Ordering::Relaxed);
                front.cx.publish_claimed(OP_GRANTED);
                woken.push(front.cx);
                return woken;
            }
            if grant_readers {
                // Claimed now, published once the state counts them: a reader that saw its
                // grant first could unlock before it was counted (the count would wrap).
                queue.retain(|q| {
                    if q.write {
                        return true;
                    }
                    if q.cx.try_claim() {
                        woken.push(q.cx.clone());
                    }
                    false
                });
                let admitted = woken.len();
                if admitted == 0 && !queue.is_empty() {
                    s = self.state.load(Ordering::Acquire);
                    continue;
                }
                // Readers may be leaving concurrently (`fetch_sub`): add with a CAS loop.
                let parked = !queue.is_empty();
                loop {
                    let new = (s + admitted * READER) & !PARKED | if parked { PARKED } else { 0 };
                    match self.state.compare_exchange_weak(
                        s,
                        new,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => break,
                        Err(now) => s = now,
                    }
                }
                for cx in &woken {
                    cx.publish_claimed(OP_GRANTED);
                }
                return woken;
            }
            break;
        }
        if queue.is_empty() {
            self.state.fetch_and(!PARKED, Ordering::Relaxed);
        }
        woken
    }

    /// Read- or write-locks, waiting until `deadline` at most.
    #[cold]
    fn lock_slow(&self, write: bool, deadline: Option<Instant>) -> bool {
        let Some(cx) = self.lock_or_queue(write, Waiter::new) else {
            return true;
        };
        let guard = AbandonOnUnwind {
            raw: self,
            cx: &cx,
            write,
        };
        let outcome = cx.wait(deadline);
        std::mem::forget(guard);
        match outcome {
            Some(_) => true,
            None => {
                self.remove(&cx);
                false
            }
        }
    }

    /// Takes the lock if it is free and nobody is queued (`None`), else queues the record
    /// `make` returns (`Some`; it may have been granted the lock already, by the dispatch
    /// that follows the queueing).
    fn lock_or_queue(
        &self,
        write: bool,
        make: impl FnOnce() -> Arc<Waiter>,
    ) -> Option<Arc<Waiter>> {
        let mut queue = lock(&self.queue);
        let mut s = self.state.load(Ordering::Relaxed);
        // Under the queue lock: take it if free and nobody is queued, else queue (setting
        // PARKED so that fast paths stop and the last unlock comes here).
        loop {
            let free = if write {
                s & !PARKED == 0
            } else {
                s & WRITER == 0 && s <= usize::MAX - 2 * READER
            };
            let acquire = free && queue.is_empty();
            let new = if !acquire {
                s | PARKED
            } else if write {
                s | WRITER
            } else {
                s + READER
            };
            if new == s {
                break; // PARKED is set already
            }
            match self
                .state
                .compare_exchange_weak(s, new, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) if acquire => return None,
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        let cx = make();
        queue.push_back(Queued {
            cx: cx.clone(),
            write,
        });
        // The lock may have become free between (a reader left): let dispatch decide.
        let woken = self.dispatch(&mut queue);
        drop(queue);
        for w in woken {
            if !Arc::ptr_eq(&w, &cx) {
                w.wake();
            }
        }
        Some(cx)
    }

    /// Removes an aborted waiter; its leaving may let others in (a writer that held readers
    /// back).
    fn remove(&self, cx: &Arc<Waiter>) {
        let mut queue = lock(&self.queue);
        if let Some(i) = queue.iter().position(|q| Arc::ptr_eq(&q.cx, cx)) {
            queue.remove(i);
        }
        let woken = self.dispatch(&mut queue);
        drop(queue);
        for w in woken {
            w.wake();
        }
    }

    #[cold]
    fn abandon(&self, cx: &Arc<Waiter>, write: bool) {
        if cx.try_abort() {
            self.remove(cx);
        } else {
            cx.completed_after_abort_failed();
            // Granted just before the cancellation: give it back.
            if write {
                // SAFETY: the write lock was granted to us.
                unsafe { self.unlock_write() }
            } else {
                // SAFETY: a read lock was granted to us.
                unsafe { self.unlock_read() }
            }
        }
    }
}

/// The waiting part of the read / write futures.
struct RawWait<'a> {
    raw: &'a RawRwLock,
    write: bool,
    /// The queued record, while it waits.
    cx: Option<Arc<Waiter>>,
}

impl RawWait<'_> {
    /// `Ready` once the lock (read or write, as asked) is the caller's.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let waiter = match &self.cx {
            Some(waiter) => waiter,
            None => {
                let got = if self.write {
                    self.raw.try_write()
                } else {
                    self.raw.try_read()
                };
                if got {
                    return Poll::Ready(());
                }
                match self
                    .raw
                    .lock_or_queue(self.write, || Waiter::new_async(cx.waker()))
                {
                    None => return Poll::Ready(()),
                    Some(waiter) => self.cx.insert(waiter),
                }
            }
        };
        // (Also right after queueing: the dispatch after it may have granted it.)
        let Poll::Ready(_) = waiter.poll(cx) else {
            return Poll::Pending;
        };
        self.cx = None;
        Poll::Ready(())
    }
}

impl Drop for RawWait<'_> {
    fn drop(&mut self) {
        if let Some(cx) = self.cx.take() {
            self.raw.abandon(&cx, self.write);
        }
    }
}

/// The future of [`RwLock::read_async`]: a read guard once the lock is shared with the caller.
#[must_use = "futures do nothing unless polled"]
pub struct RwLockReadFuture<'a, T: ?Sized> {
    lock: &'a RwLock<T>,
    wait: RawWait<'a>,
}

impl<'a, T: ?Sized> Future for RwLockReadFuture<'a, T> {
    type Output = RwLockReadGuard<'a, T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        this.wait.poll(cx).map(|()| RwLockReadGuard::new(this.lock))
    }
}

impl<T: ?Sized> fmt::Debug for RwLockReadFuture<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLockReadFuture")
            .field("waiting", &self.wait.cx.is_some())
            .finish()
    }
}

/// The future of [`RwLock::write_async`]: the write guard once the lock is the caller's.
#[must_use = "futures do nothing unless polled"]
pub struct RwLockWriteFuture<'a, T: ?Sized> {
    lock: &'a RwLock<T>,
    wait: RawWait<'a>,
}

impl<'a, T: ?Sized> Future for RwLockWriteFuture<'a, T> {
    type Output = RwLockWriteGuard<'a, T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        this.wait
            .poll(cx)
            .map(|()| RwLockWriteGuard::new(this.lock))
    }
}

impl<T: ?Sized> fmt::Debug for RwLockWriteFuture<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLockWriteFuture")
            .field("waiting", &self.wait.cx.is_some())
            .finish()
    }
}

struct AbandonOnUnwind<'a> {
    raw: &'a RawRwLock,
    cx: &'a Arc<Waiter>,
    write: bool,
}

impl Drop for AbandonOnUnwind<'_> {
    fn drop(&mut self) {
        self.raw.abandon(self.cx, self.write);
    }
}

/// A reader-writer lock: many readers or one writer, for coroutines and threads alike.
///
/// ```
/// use spindle_sync::RwLock;
///
/// let lock = RwLock::new(5);
/// {
///     let r1 = lock.read();
///     let r2 = lock.read();
///     assert_eq!(*r1 + *r2, 10);
/// }
/// *lock.write() += 1;
/// assert_eq!(*lock.read(), 6);
/// ```
///
/// # Specification
///
/// * [`read`](RwLock::read) / [`write`](RwLock::write): *postcondition*: the caller holds a
///   shared / exclusive lock until the guard is dropped; they block while the lock is
///   incompatible or (fairness, below) while others are queued. Not reentrant: a reader that
///   reads again while a writer is queued waits behind that writer, forever.
/// * `try_*` never block; `try_*_for` / `try_*_until` return `None` at the deadline (a grant
///   that races with the deadline is kept, never dropped).
/// * **Policy: FIFO with read batches.** Waiters queue in arrival order, and once anyone is
///   queued new readers queue too (they do not join the readers holding the lock), so a stream
///   of readers cannot starve a writer. When the lock becomes free it is *handed* to the first
///   in line (no barging while anyone is queued); when that is a reader, every queued reader is
///   admitted with it. So a writer waits at most for those queued before it plus one read
///   batch, and a reader for the writers queued before it: neither starves.
/// * **Spurious wake-ups**: none.
/// * **Poisoning**: none, as [`Mutex`](crate::Mutex).
/// * **Cancellation**: a cancelled waiter leaves the queue (letting in whom it held back), or
///   releases what it was granted.
/// * **Async**: [`read_async`](RwLock::read_async) / [`write_async`](RwLock::write_async) are
///   futures in the same queue; dropping one pending is a cancellation, as above.
pub struct RwLock<T: ?Sized> {
    raw: RawRwLock,
    data: DataCell<T>,
}

// SAFETY: as `std::sync::RwLock`: the value moves between threads with the lock (`Send`), and
// readers on several threads share `&T` (`Sync`).
unsafe impl<T: ?Sized + Send> Send for RwLock<T> {}
// SAFETY: as above.
unsafe impl<T: ?Sized + Send + Sync> Sync for RwLock<T> {}

impl<T> RwLock<T> {
    /// A new unlocked lock holding `value`.
    #[cfg(not(loom))]
    pub const fn new(value: T) -> Self {
        RwLock {
            raw: RawRwLock::new(),
            data: DataCell::new(value),
        }
    }

    /// A new unlocked lock holding `value`.
    #[cfg(loom)]
    pub fn new(value: T) -> Self {
        RwLock {
            raw: RawRwLock::new(),
            data: DataCell::new(value),
        }
    }

    /// Consumes the lock, returning the value.
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: ?Sized> RwLock<T> {
    /// Locks for reading, waiting while a writer holds the lock or anyone is queued.
    pub fn read(&self) -> RwLockReadGuard<'_, T> {
        if !self.raw.try_read() {
            self.raw.lock_slow(false, None);
        }
        RwLockReadGuard::new(self)
    }

    /// Locks for reading, as a future: [`read`](Self::read) for async code, woken through
    /// the polling task's `Waker`, with no executor assumed. It queues when first polled, in
    /// the same FIFO queue as blocking callers. Dropping it while it waits leaves the queue
    /// (letting in whom it held back); a read lock granted to it in that instant is released.
    ///
    /// ```
    /// use spindle_sync::RwLock;
    ///
    /// let lock = RwLock::new(1);
    /// let r1 = lock.read();
    /// let r2 = spindle_park::block_on(lock.read_async());
    /// assert_eq!(*r1 + *r2, 2);
    /// ```
    pub fn read_async(&self) -> RwLockReadFuture<'_, T> {
        RwLockReadFuture {
            lock: self,
            wait: RawWait {
                raw: &self.raw,
                write: false,
                cx: None,
            },
        }
    }

    /// Locks for reading if that is possible at once.
    pub fn try_read(&self) -> Option<RwLockReadGuard<'_, T>> {
        self.raw.try_read().then(|| RwLockReadGuard::new(self))
    }

    /// Locks for reading, waiting at most `timeout`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let lock = spindle_sync::RwLock::new(0);
    /// let w = lock.write();
    /// assert!(lock.try_read_for(Duration::from_millis(5)).is_none());
    /// drop(w);
    /// assert!(lock.try_read_for(Duration::from_millis(5)).is_some());
    /// ```
    pub fn try_read_for(&self, timeout: Duration) -> Option<RwLockReadGuard<'_, T>> {
        self.read_until(deadline_after(timeout))
    }

    /// Locks for reading, waiting until `deadline` at most.
    pub fn try_read_until(&self, deadline: Instant) -> Option<RwLockReadGuard<'_, T>> {
        self.read_until(Some(deadline))
    }

    fn read_until(&self, deadline: Option<Instant>) -> Option<RwLockReadGuard<'_, T>> {
        (self.raw.try_read() || self.raw.lock_slow(false, deadline))
            .then(|| RwLockReadGuard::new(self))
    }

    /// Locks for writing, waiting while anyone holds the lock or is queued before.
    pub fn write(&self) -> RwLockWriteGuard<'_, T> {
        if !self.raw.try_write() {
            self.raw.lock_slow(true, None);
        }
        RwLockWriteGuard::new(self)
    }

    /// Locks for writing, as a future: [`write`](Self::write) for async code, woken through
    /// the polling task's `Waker`, with no executor assumed. It queues when first polled, in
    /// the same FIFO queue as blocking callers. Dropping it while it waits leaves the queue;
    /// the write lock granted to it in that instant is released (passed on).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use spindle_sync::RwLock;
    ///
    /// let lock = Arc::new(RwLock::new(0));
    /// let r = lock.read();
    /// let l = lock.clone();
    /// let writer = std::thread::spawn(move || {
    ///     *spindle_park::block_on(l.write_async()) += 1;
    /// });
    /// drop(r); // the writer gets in once the reader is gone
    /// writer.join().unwrap();
    /// assert_eq!(*lock.read(), 1);
    /// ```
    pub fn write_async(&self) -> RwLockWriteFuture<'_, T> {
        RwLockWriteFuture {
            lock: self,
            wait: RawWait {
                raw: &self.raw,
                write: true,
                cx: None,
            },
        }
    }

    /// Locks for writing if the lock is free.
    pub fn try_write(&self) -> Option<RwLockWriteGuard<'_, T>> {
        self.raw.try_write().then(|| RwLockWriteGuard::new(self))
    }

    /// Locks for writing, waiting at most `timeout`.
    pub fn try_write_for(&self, timeout: Duration) -> Option<RwLockWriteGuard<'_, T>> {
        self.write_until(deadline_after(timeout))
    }

    /// Locks for writing, waiting until `deadline` at most.
    pub fn try_write_until(&self, deadline: Instant) -> Option<RwLockWriteGuard<'_, T>> {
        self.write_until(Some(deadline))
    }

    fn write_until(&self, deadline: Option<Instant>) -> Option<RwLockWriteGuard<'_, T>> {
        (self.raw.try_write() || self.raw.lock_slow(true, deadline))
            .then(|| RwLockWriteGuard::new(self))
    }

    /// The value, through exclusive access (no locking needed).
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }
}

impl<T: Default> Default for RwLock<T> {
    fn default() -> Self {
        RwLock::new(T::default())
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for RwLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("RwLock");
        match self.try_read() {
            Some(guard) => d.field("data", &&*guard),
            None => d.field("data", &format_args!("<locked>")),
        };
        d.field("waiters", &lock(&self.raw.queue).len());
        d.finish()
    }
}

/// A shared lock on a [`RwLock`]; released when dropped.
#[must_use = "if unused the RwLock will immediately unlock"]
pub struct RwLockReadGuard<'a, T: ?Sized> {
    lock: &'a RwLock<T>,
    _not_send: PhantomData<*const ()>,
}

// SAFETY: shares `&T` only.
unsafe impl<T: ?Sized + Sync> Sync for RwLockReadGuard<'_, T> {}

impl<'a, T: ?Sized> RwLockReadGuard<'a, T> {
    fn new(lock: &'a RwLock<T>) -> Self {
        RwLockReadGuard {
            lock,
            _not_send: PhantomData,
        }
    }
}

impl<T: ?Sized> Deref for RwLockReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: a read lock is held: no writer accesses the data.
        unsafe { &*self.lock.data.ptr_shared() }
    }
}

impl<T: ?Sized> Drop for RwLockReadGuard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the guard holds a read lock.
        unsafe { self.lock.raw.unlock_read() }
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for RwLockReadGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// The exclusive lock on a [`RwLock`]; released when dropped.
#[must_use = "if unused the RwLock will immediately unlock"]
pub struct RwLockWriteGuard<'a, T: ?Sized> {
    lock: &'a RwLock<T>,
    _not_send: PhantomData<*const ()>,
}

// SAFETY: shares `&T` only.
unsafe impl<T: ?Sized + Sync> Sync for RwLockWriteGuard<'_, T> {}

impl<'a, T: ?Sized> RwLockWriteGuard<'a, T> {
    fn new(lock: &'a RwLock<T>) -> Self {
        RwLockWriteGuard {
            lock,
            _not_send: PhantomData,
        }
    }
}

impl<T: ?Sized> Deref for RwLockWriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the write lock is held.
        unsafe { &*self.lock.data.ptr() }
    }
}

impl<T: ?Sized> DerefMut for RwLockWriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the write lock is held and `&mut self` is exclusive.
        unsafe { &mut *self.lock.data.ptr() }
    }
}

impl<T: ?Sized> Drop for RwLockWriteGuard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the guard holds the write lock.
        unsafe { self.lock.raw.unlock_write() }
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for RwLockWriteGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}
