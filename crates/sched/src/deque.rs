//! The work-stealing deque and the global injector.
//!
//! Normally these are `crossbeam_deque`'s (a Chase–Lev deque; an unbounded MPMC injector).
//! crossbeam is not instrumented for loom, so under `--cfg loom` this module provides a
//! `Mutex<VecDeque>` stand-in with the same interface (the subset this crate uses): loom then
//! checks *this crate's* protocol on top of a deque with the same semantics, and crossbeam's
//! own test suite covers the deque. Like crossbeam's, the stand-in's batch steals move tasks
//! through a window in which neither queue shows them (the thief holds them).

#[cfg(not(loom))]
pub(crate) use crossbeam_deque::{Injector, Steal, Stealer, Worker};

#[cfg(loom)]
pub(crate) use stand_in::{Injector, Steal, Stealer, Worker};

#[cfg(loom)]
mod stand_in {
    use std::collections::VecDeque;

    use crate::loom::{Mutex, lock};
    use ::loom::sync::Arc;

    /// The result of a steal, as crossbeam's.
    #[derive(Debug)]
    pub(crate) enum Steal<T> {
        Empty,
        Success(T),
        #[allow(dead_code)] // crossbeam's may say so; the stand-in never does
        Retry,
    }

    type Shared<T> = Arc<Mutex<VecDeque<T>>>;

    /// Takes up to `limit` tasks from the front of `source`: returns the first, appends the
    /// rest to `dest` (after releasing `source`, so two thieves never hold two locks).
    fn batch_and_pop<T>(
        source: &Mutex<VecDeque<T>>,
        dest: &Worker<T>,
        limit: Option<usize>,
    ) -> Steal<T> {
        let mut batch: VecDeque<T> = {
            let mut q = lock(source);
            let n = limit.unwrap_or(q.len().div_ceil(2).min(32)).min(q.len());
            q.drain(..n).collect()
        };
        match batch.pop_front() {
            None => Steal::Empty,
            Some(first) => {
                if !batch.is_empty() {
                    lock(&dest.queue).append(&mut batch);
                }
                Steal::Success(first)
            }
        }
    }

    /// The owner end.
    #[derive(Debug)]
    pub(crate) struct Worker<T> {
        queue: Shared<T>,
    }

    impl<T> Worker<T> {
        pub(crate) fn new_fifo() -> Self {
            Worker {
                queue: Arc::new(Mutex::new(VecDeque::new())),
            }
        }
        pub(crate) fn stealer(&self) -> Stealer<T> {
            Stealer {
                queue: self.queue.clone(),
            }
        }
        pub(crate) fn push(&self, task: T) {
            lock(&self.queue).push_back(task);
        }
        pub(crate) fn pop(&self) -> Option<T> {
            lock(&self.queue).pop_front()
        }
        pub(crate) fn len(&self) -> usize {
            lock(&self.queue).len()
        }
    }

    /// The thieves' end.
    #[derive(Debug)]
    pub(crate) struct Stealer<T> {
        queue: Shared<T>,
    }

    impl<T> Stealer<T> {
        pub(crate) fn steal_batch_and_pop(&self, dest: &Worker<T>) -> Steal<T> {
            batch_and_pop(&self.queue, dest, None)
        }
        pub(crate) fn is_empty(&self) -> bool {
            lock(&self.queue).is_empty()
        }
        pub(crate) fn len(&self) -> usize {
            lock(&self.queue).len()
        }
    }

    /// The global queue.
    #[derive(Debug)]
    pub(crate) struct Injector<T> {
        queue: Mutex<VecDeque<T>>,
    }

    impl<T> Injector<T> {
        pub(crate) fn new() -> Self {
            Injector {
                queue: Mutex::new(VecDeque::new()),
            }
        }
        pub(crate) fn push(&self, task: T) {
            lock(&self.queue).push_back(task);
        }
        pub(crate) fn steal(&self) -> Steal<T> {
            lock(&self.queue)
                .pop_front()
                .map_or(Steal::Empty, Steal::Success)
        }
        pub(crate) fn steal_batch_with_limit_and_pop(
            &self,
            dest: &Worker<T>,
            limit: usize,
        ) -> Steal<T> {
            batch_and_pop(&self.queue, dest, Some(limit.max(1)))
        }
        pub(crate) fn is_empty(&self) -> bool {
            lock(&self.queue).is_empty()
        }
        pub(crate) fn len(&self) -> usize {
            lock(&self.queue).len()
        }
    }
}
