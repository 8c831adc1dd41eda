//! [`RoundRobin`]: one queue per worker; new tasks dealt in turn; no stealing.

use std::fmt;
use std::marker::PhantomData;

use crate::loom::{AtomicUsize, Ordering};
use crate::queue::Mpsc;
use crate::{
    Notify, Padded, Policy, Popped, Reason, SchedError, Task, WorkerStats, check_workers, home_of,
    notify_worker, valid_here,
};

/// Round-robin: one FIFO queue per worker, new tasks dealt to the workers in turn.
///
/// * A task pinned to worker `h` (`home() == Some(h)`) goes to the back of `h`'s queue.
/// * A new task (`Reason::Spawned`, `home() == None`) is dealt: worker 0, 1, 2, ... in turn
///   (one shared counter).
/// * An unpinned task that is woken or yields goes to the back of the pushing worker's queue
///   (`here`), or is dealt when pushed from outside the workers.
///
/// A task never leaves the queue it was put in: there is no stealing. Since the runtime pins a
/// task to the worker that first runs it, the worker a task is dealt to is the one that runs
/// it. Each worker's queue is strictly FIFO.
///
/// # Examples
///
/// ```
/// use spindle_sched::{Notify, Policy, Reason, RoundRobin, Task};
///
/// struct Job(u32);
/// impl Task for Job {
///     fn home(&self) -> Option<usize> { None }
/// }
///
/// let rr = RoundRobin::new(2)?;
/// assert_eq!(rr.push(None, Job(1), Reason::Spawned), Notify::Worker(0));
/// assert_eq!(rr.push(None, Job(2), Reason::Spawned), Notify::Worker(1));
/// assert_eq!(rr.push(None, Job(3), Reason::Spawned), Notify::Worker(0));
/// assert_eq!(rr.pop(1).map(|p| p.task.0), Some(2));
/// assert!(rr.pop(1).is_none()); // no stealing: jobs 1 and 3 wait for worker 0
/// assert_eq!(rr.pop(0).map(|p| p.task.0), Some(1));
/// # Ok::<(), spindle_sched::SchedError>(())
/// ```
pub struct RoundRobin<T> {
    queues: Box<[Padded<Mpsc<T>>]>,
    /// The deal counter: the next new task goes to `next % workers`.
    next: Padded<AtomicUsize>,
    _task: PhantomData<fn(T) -> T>,
}

impl<T: Task> RoundRobin<T> {
    /// A round-robin policy for `workers` workers.
    ///
    /// # Errors
    ///
    /// [`SchedError::ZeroWorkers`] for 0 workers, [`SchedError::TooManyWorkers`] above
    /// [`MAX_WORKERS`](crate::MAX_WORKERS).
    pub fn new(workers: usize) -> Result<Self, SchedError> {
        check_workers(workers)?;
        Ok(RoundRobin {
            queues: (0..workers).map(|_| Padded(Mpsc::new())).collect(),
            next: Padded(AtomicUsize::new(0)),
            _task: PhantomData,
        })
    }

    fn deal(&self) -> usize {
        self.next.fetch_add(1, Ordering::Relaxed) % self.queues.len()
    }
}

impl<T> fmt::Debug for RoundRobin<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RoundRobin")
            .field("workers", &self.queues.len())
            .finish_non_exhaustive()
    }
}

impl<T: Task> Policy<T> for RoundRobin<T> {
    fn name(&self) -> &'static str {
        "round-robin"
    }

    fn workers(&self) -> usize {
        self.queues.len()
    }

    fn push(&self, here: Option<usize>, task: T, reason: Reason) -> Notify {
        let workers = self.queues.len();
        let here = valid_here(here, workers);
        let target = match (home_of(&task, workers), reason) {
            (Some(h), _) => h,
            (None, Reason::Spawned) => self.deal(),
            (None, Reason::Woken | Reason::Yielded) => here.unwrap_or_else(|| self.deal()),
        };
        self.queues[target].push(task);
        notify_worker(here, target)
    }

    fn pop(&self, w: usize) -> Option<Popped<T>> {
        let task = self.queues.get(w)?.pop()?;
        Some(Popped {
            task,
            inherit_slice: false,
        })
    }

    fn has_work(&self, w: usize) -> bool {
        self.queues.get(w).is_some_and(|q| !q.is_empty())
    }

    fn drain(&self) -> Vec<T> {
        let mut all = std::collections::VecDeque::new();
        for q in self.queues.iter() {
            q.take_all_into(&mut all);
        }
        all.into()
    }

    fn stats(&self, w: usize) -> WorkerStats {
        self.queues
            .get(w)
            .map_or_else(WorkerStats::default, |q| WorkerStats {
                depth: q.len(),
                ..WorkerStats::default()
            })
    }
}
