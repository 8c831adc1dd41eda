//! [`RoundRobin`]: one queue per worker; new tasks dealt in turn; no stealing.

use std::fmt;
use std::marker::PhantomData;

use crate::cell::OwnerCell;
use crate::loom::{AtomicUsize, Ordering};
use crate::queue::Mpsc;
use crate::ring::Ring;
use crate::{
    Notify, Policy, Popped, Reason, SchedError, Task, WorkerStats, check_workers, home_of,
    notify_worker, push_then_pop, valid_here,
};
use crossbeam_utils::CachePadded;

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
/// Like [`Fifo`](crate::Fifo), it is fair in turns, not in time: a woken task goes to the back
/// of its worker's queue and starts a fresh turn, so a pair of tasks that wake each other gets
/// one turn per round of the queue however much work each turn does, and tasks that work long
/// per wake-up take most of the worker's time from tasks that work briefly. Sharing time
/// evenly would need a woken task to run ahead of the queue (a run-next slot), which a strict
/// FIFO queue rules out; use [`WorkStealing`](crate::WorkStealing) for that.
///
/// Inside, a worker's queue is two: a private one that only the worker's own thread touches
/// (what it pushes itself — a yield, a wake-up it makes — costs no atomic read-modify-write
/// once the thread is [bound](Policy::bind_worker)), and an inbox for pushes from other
/// threads. The worker moves its inbox to the back of the private queue before each of its
/// own pushes and pops, which keeps the order of arrival.
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
    queues: Box<[CachePadded<WorkerQueue<T>>]>,
    /// The deal counter: the next new task goes to `next % workers`.
    next: CachePadded<AtomicUsize>,
    _task: PhantomData<fn(T) -> T>,
}

/// One worker's queue: private part and inbox (see [`RoundRobin`]).
///
/// The inbox sits on cache lines of its own: other workers push to it (every other spawn, on
/// two workers), and on the owner's lines each of those pushes made the owner's next push or
/// pop miss.
struct WorkerQueue<T> {
    local: OwnerCell<Ring<T>>,
    /// `local`'s length, stored by the owner after every change: `has_work` and `stats` read
    /// it from any thread (the owner's own `has_work` sees its own stores).
    local_len: AtomicUsize,
    inbox: CachePadded<Mpsc<T>>,
}

impl<T> WorkerQueue<T> {
    fn new() -> Self {
        WorkerQueue {
            local: OwnerCell::new(Ring::new()),
            local_len: AtomicUsize::new(0),
            inbox: CachePadded::new(Mpsc::new()),
        }
    }

    /// Runs `f` on the private queue (after moving the inbox behind it), if this thread may.
    #[inline]
    fn with_local<R>(&self, f: impl FnOnce(&mut Ring<T>) -> R) -> Option<R> {
        let mut local = self.local.try_borrow()?;
        Some(local.with(|local| {
            self.absorb_inbox(local);
            let r = f(local);
            self.local_len.store(local.len(), Ordering::Release);
            r
        }))
    }

    /// Moves the inbox behind the private queue `local` (the owner, holding it). While the
    /// tasks move, neither half may look empty to another thread's `is_empty`: `local_len`
    /// counts them first (at least one) — its store comes before the inbox's store of its
    /// emptiness, which `is_empty` reads first — and the caller stores the exact length after.
    #[inline]
    fn absorb_inbox(&self, local: &mut Ring<T>) {
        if !self.inbox.is_empty() {
            self.local_len.store(local.len() + 1, Ordering::Release);
            self.inbox.take_all_into(local);
        }
    }

    /// Whether the queue looks empty; from any thread (see `absorb_inbox` for the order).
    fn is_empty(&self) -> bool {
        self.inbox.is_empty() && self.local_len.load(Ordering::Acquire) == 0
    }
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
            queues: (0..workers)
                .map(|_| CachePadded::new(WorkerQueue::new()))
                .collect(),
            next: CachePadded::new(AtomicUsize::new(0)),
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

    #[inline]
    fn push(&self, here: Option<usize>, task: T, reason: Reason) -> Notify {
        let workers = self.queues.len();
        let here = valid_here(here, workers);
        let target = match (home_of(&task, workers), reason) {
            (Some(h), _) => h,
            (None, Reason::Spawned) => self.deal(),
            (None, Reason::Woken | Reason::WokenByWorker | Reason::Yielded) => {
                here.unwrap_or_else(|| self.deal())
            }
        };
        let queue = &self.queues[target];
        // On the worker's own thread: its private queue (unless another thread holds it — a
        // runtime bug or a concurrent drain — then the inbox, like anyone else).
        if here == Some(target)
            && let Some(mut local) = queue.local.try_borrow()
        {
            local.with(|local| {
                queue.absorb_inbox(local);
                local.push_back(task);
                queue.local_len.store(local.len(), Ordering::Release);
            });
            return Notify::None;
        }
        queue.inbox.push(task);
        notify_worker(here, target)
    }

    /// From the private queue (after the inbox has been moved behind it); from the inbox
    /// alone if another thread holds the private queue (only a runtime bug or a concurrent
    /// [`drain`](Policy::drain) does).
    #[inline]
    fn pop(&self, w: usize) -> Option<Popped<T>> {
        let queue = self.queues.get(w)?;
        let task = match queue.with_local(Ring::pop_front) {
            Some(task) => task?,
            None => queue.inbox.pop()?,
        };
        Some(Popped {
            task,
            inherit_slice: false,
        })
    }

    /// One visit to the private queue for both halves: the inbox moved behind it, the task
    /// pushed at the back, the front popped (the task itself when nothing else waits).
    #[inline]
    fn yield_and_pop(&self, w: usize, task: T) -> (Notify, Option<Popped<T>>) {
        // A task pinned elsewhere (never the case for a task that ran here) and a `w` out of
        // range take the general path, as does a private queue another thread holds.
        let local = self
            .queues
            .get(w)
            .filter(|_| home_of(&task, self.queues.len()).is_none_or(|h| h == w))
            .and_then(|queue| Some((queue, queue.local.try_borrow()?)));
        let Some((queue, mut local)) = local else {
            return push_then_pop(self, w, task);
        };
        let next = local.with(|local| {
            queue.absorb_inbox(local);
            let next = local.push_pop(task);
            queue.local_len.store(local.len(), Ordering::Release);
            next
        });
        (
            Notify::None,
            Some(Popped {
                task: next,
                inherit_slice: false,
            }),
        )
    }

    fn has_work(&self, w: usize) -> bool {
        self.queues.get(w).is_some_and(|q| !q.is_empty())
    }

    fn drain(&self) -> Vec<T> {
        let mut all = Vec::new();
        for q in self.queues.iter() {
            let mut local = q.local.borrow_waiting();
            local.with(|local| {
                q.inbox.take_all_into(local);
                all.extend(local.drain());
            });
            q.local_len.store(0, Ordering::Release);
        }
        all
    }

    fn bind_worker(&self, w: usize) -> bool {
        self.queues.get(w).is_some_and(|q| q.local.bind())
    }

    fn unbind_worker(&self, w: usize) {
        if let Some(q) = self.queues.get(w) {
            q.local.unbind();
        }
    }

    fn stats(&self, w: usize) -> WorkerStats {
        self.queues
            .get(w)
            .map_or_else(WorkerStats::default, |q| WorkerStats {
                depth: q.local_len.load(Ordering::Relaxed) + q.inbox.len(),
                ..WorkerStats::default()
            })
    }
}
