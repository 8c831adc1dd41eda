//! [`Fifo`]: one first-in-first-out order over all workers; the fairness reference.

use std::collections::VecDeque;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::AtomicU64 as StatCounter;

use crate::loom::{AtomicU64, AtomicUsize, Mutex, MutexGuard, Ordering, lock};
use crate::{
    Notify, Policy, Popped, Reason, SchedError, Task, WorkerStats, check_workers, home_of,
    notify_worker,
};
use crossbeam_utils::CachePadded;

/// First in, first out: the fairness reference.
///
/// Tasks that may run anywhere (`home() == None`) wait in one global queue; tasks pinned to a
/// worker (`home() == Some(h)`) in that worker's pinned queue. Every push takes a *ticket*
/// from one global counter while it holds the lock of the queue it appends to, so each queue
/// is sorted by ticket. `pop(w)` locks `w`'s pinned queue and the global queue and returns
/// whichever head has the smaller ticket.
///
/// # What "strict FIFO" means here
///
/// With pinning a single global order cannot be kept: a task pinned to a busy worker must not
/// hold up an idle one. The promise is the global order *as each worker sees it*: among the
/// queued tasks that `w` may run (unpinned ones, and those pinned to `w`), `pop(w)` returns
/// the one that was pushed first, where "first" is the ticket order, a total order of all
/// pushes consistent with real time (if push A returned before push B began, A's ticket is
/// smaller). Tasks pinned to other workers are simply not in `w`'s view. In particular, with
/// no pinned tasks this is one strict FIFO queue shared by all workers, and a worker's pinned
/// tasks keep their place among the unpinned ones.
///
/// Two locks per pop make this the slowest policy under contention; it is the reference for
/// fairness of order, not for speed.
///
/// # Fair in turns, not in time
///
/// Every push goes to the back, a task woken by the running one too, and every pop is a fresh
/// turn (no [`inherit_slice`](crate::Popped::inherit_slice)). So each ready task gets one turn
/// per round of the queue, however long its turn lasts: a pair of tasks that wake each other
/// and work a millisecond per wake-up, sharing a worker with a pair that works a microsecond,
/// makes as many rounds as that pair but takes about a thousand times as much of the worker's
/// time.
/// Fairness in time would need a woken task to run ahead of the queue, on the waker's slice
/// (a run-next slot), which is what this order rules out. Where time should be shared evenly
/// between tasks of different cost per wake-up, use [`WorkStealing`](crate::WorkStealing).
///
/// # Examples
///
/// ```
/// use spindle_sched::{Fifo, Notify, Policy, Reason, Task};
///
/// struct Job { id: u32, home: Option<usize> }
/// impl Task for Job {
///     fn home(&self) -> Option<usize> { self.home }
/// }
///
/// let fifo = Fifo::new(2)?;
/// assert_eq!(fifo.push(None, Job { id: 1, home: None }, Reason::Spawned), Notify::Any);
/// assert_eq!(fifo.push(None, Job { id: 2, home: Some(1) }, Reason::Woken), Notify::Worker(1));
/// assert_eq!(fifo.push(None, Job { id: 3, home: None }, Reason::Spawned), Notify::Any);
///
/// // Worker 0 may not run job 2: it sees 1, 3.
/// assert_eq!(fifo.pop(0).map(|p| p.task.id), Some(1));
/// // Worker 1 sees job 2 (pushed before job 3) first.
/// assert_eq!(fifo.pop(1).map(|p| p.task.id), Some(2));
/// assert_eq!(fifo.pop(1).map(|p| p.task.id), Some(3));
/// assert!(fifo.pop(0).is_none());
/// # Ok::<(), spindle_sched::SchedError>(())
/// ```
pub struct Fifo<T> {
    global: CachePadded<TicketQueue<T>>,
    pinned: Box<[CachePadded<TicketQueue<T>>]>,
    tickets: CachePadded<AtomicU64>,
    global_pops: Box<[CachePadded<StatCounter>]>,
    _task: PhantomData<fn(T) -> T>,
}

/// A queue of ticketed tasks with its length mirrored in an atomic.
struct TicketQueue<T> {
    queue: Mutex<VecDeque<(u64, T)>>,
    len: AtomicUsize,
}

impl<T> TicketQueue<T> {
    fn new() -> Self {
        TicketQueue {
            queue: Mutex::new(VecDeque::new()),
            len: AtomicUsize::new(0),
        }
    }

    /// Appends `task` with a ticket taken under this queue's lock.
    fn push(&self, tickets: &AtomicU64, task: T) {
        let mut q = lock(&self.queue);
        let ticket = tickets.fetch_add(1, Ordering::Relaxed);
        q.push_back((ticket, task));
        self.len.store(q.len(), Ordering::Release);
    }

    fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0
    }
}

/// Pops the front of `q`, keeping the length mirror.
fn pop_front<T>(q: &mut MutexGuard<'_, VecDeque<(u64, T)>>, len: &AtomicUsize) -> Option<T> {
    let (_, task) = q.pop_front()?;
    len.store(q.len(), Ordering::Release);
    Some(task)
}

impl<T: Task> Fifo<T> {
    /// A FIFO policy for `workers` workers.
    ///
    /// # Errors
    ///
    /// [`SchedError::ZeroWorkers`] for 0 workers, [`SchedError::TooManyWorkers`] above
    /// [`MAX_WORKERS`](crate::MAX_WORKERS).
    pub fn new(workers: usize) -> Result<Self, SchedError> {
        check_workers(workers)?;
        Ok(Fifo {
            global: CachePadded::new(TicketQueue::new()),
            pinned: (0..workers)
                .map(|_| CachePadded::new(TicketQueue::new()))
                .collect(),
            tickets: CachePadded::new(AtomicU64::new(0)),
            global_pops: (0..workers)
                .map(|_| CachePadded::new(StatCounter::new(0)))
                .collect(),
            _task: PhantomData,
        })
    }
}

impl<T> fmt::Debug for Fifo<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fifo")
            .field("workers", &self.pinned.len())
            .finish_non_exhaustive()
    }
}

impl<T: Task> Policy<T> for Fifo<T> {
    fn name(&self) -> &'static str {
        "fifo"
    }

    fn workers(&self) -> usize {
        self.pinned.len()
    }

    fn push(&self, here: Option<usize>, task: T, _reason: Reason) -> Notify {
        match home_of(&task, self.pinned.len()) {
            Some(h) => {
                self.pinned[h].push(&self.tickets, task);
                notify_worker(here, h)
            }
            None => {
                self.global.push(&self.tickets, task);
                Notify::Any
            }
        }
    }

    fn pop(&self, w: usize) -> Option<Popped<T>> {
        let own = self.pinned.get(w)?;
        // Lock order everywhere: pinned queues (in index order), then the global queue.
        let mut pinned = lock(&own.queue);
        let mut global = lock(&self.global.queue);
        let from_global = match (global.front(), pinned.front()) {
            (None, None) => return None,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((g, _)), Some((p, _))) => g < p,
        };
        let task = if from_global {
            self.global_pops[w].fetch_add(1, Ordering::Relaxed);
            pop_front(&mut global, &self.global.len)
        } else {
            pop_front(&mut pinned, &own.len)
        };
        task.map(|task| Popped {
            task,
            inherit_slice: false,
        })
    }

    fn has_work(&self, w: usize) -> bool {
        self.pinned
            .get(w)
            .is_some_and(|own| !own.is_empty() || !self.global.is_empty())
    }

    /// Every queued task, in ticket (push) order.
    fn drain(&self) -> Vec<T> {
        let mut pinned: Vec<_> = self.pinned.iter().map(|q| lock(&q.queue)).collect();
        let mut global = lock(&self.global.queue);
        let mut all: Vec<(u64, T)> = global.drain(..).collect();
        self.global.len.store(0, Ordering::Release);
        for (q, own) in pinned.iter_mut().zip(self.pinned.iter()) {
            all.extend(q.drain(..));
            own.len.store(0, Ordering::Release);
        }
        all.sort_unstable_by_key(|&(ticket, _)| ticket);
        all.into_iter().map(|(_, task)| task).collect()
    }

    fn stats(&self, w: usize) -> WorkerStats {
        match self.pinned.get(w) {
            None => WorkerStats::default(),
            Some(own) => WorkerStats {
                depth: own.len.load(Ordering::Relaxed),
                global_pops: self.global_pops[w].load(Ordering::Relaxed),
                ..WorkerStats::default()
            },
        }
    }
}
