//! [`Mpsc`]: a queue many threads push into and one thread (mostly) pops from.
//!
//! A `Mutex<VecDeque>` with its length mirrored in an atomic, so that the common "is it empty?"
//! check on a pop or a sleep takes no lock. Against `crossbeam_queue::SegQueue` (push+pop on one
//! thread; bursts of 1,000; one producer and one consumer thread) the mutex is as fast or faster in
//! every case (the repository's docs/benchmarks.md has the figures), needs no extra dependency and
//! allocates no blocks, so it is the choice.

use std::collections::VecDeque;

use crate::loom::{AtomicUsize, Mutex, Ordering, lock};
use crate::ring::Ring;

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Mpsc<T> {
    queue: Mutex<VecDeque<T>>,
    /// The queue's length, stored (under the lock) after every change.
    len: AtomicUsize,
}

impl<T> Mpsc<T> {
    pub(crate) fn new() -> Self {
        Mpsc {
            queue: Mutex::new(VecDeque::new()),
            len: AtomicUsize::new(0),
        }
    }

    pub(crate) fn push(&self, task: T) {
        let mut q = lock(&self.queue);
        q.push_back(task);
        self.len.store(q.len(), Ordering::Release);
    }

    pub(crate) fn pop(&self) -> Option<T> {
        if self.is_empty() {
            return None;
        }
        let mut q = lock(&self.queue);
        let task = q.pop_front();
        self.len.store(q.len(), Ordering::Release);
        task
    }

    /// Appends everything queued to `into`, in order. Inlined: the owner calls it on every
    /// push and pop of its private queue, and the inbox is almost always empty.
    #[inline]
    pub(crate) fn take_all_into(&self, into: &mut Ring<T>) {
        if !self.is_empty() {
            self.take_all_into_slow(into);
        }
    }

    #[cold]
    #[inline(never)]
    fn take_all_into_slow(&self, into: &mut Ring<T>) {
        let mut q = lock(&self.queue);
        for task in q.drain(..) {
            into.push_back(task);
        }
        self.len.store(0, Ordering::Release);
    }

    /// Whether the queue is empty. A push that returned before the caller's last SeqCst fence
    /// (or that happens-before this call) is seen.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0
    }

    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }
}
