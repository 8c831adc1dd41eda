//! Scheduling policies as concurrent queues, and the idle-worker protocol.
//!
//! A runtime owns worker threads `0..workers`. Whenever a task becomes ready it
//! [`push`](Policy::push)es it into a [`Policy`]; each worker [`pop`](Policy::pop)s the next task
//! to run. This crate holds tasks as an opaque type (anything implementing [`Task`]) and knows
//! nothing of coroutines, IO, time or how threads park. It is shaped after Boost.Fiber's
//! `algorithm` (`awakened` = [`push`](Policy::push), `pick_next` = [`pop`](Policy::pop),
//! `has_ready_fibers` = [`has_work`](Policy::has_work)) plus what stealing needs.
//!
//! Three policies, each behind the cargo feature of its name (`fifo`, `round-robin`,
//! `work-stealing`; all three by default):
//!
//! * [`Fifo`]: the fairness reference for order. One global first-in-first-out order (tasks
//!   pinned to a worker wait in that worker's queue but keep their place in the global order).
//! * [`RoundRobin`]: one queue per worker; new tasks are dealt to the workers in turn and never
//!   move. No stealing.
//! * [`WorkStealing`]: Go's scheduler shape. Per worker a Chase–Lev deque of tasks that may run
//!   anywhere, queues for tasks pinned to it, and a one-slot *run-next*; a global injector for
//!   tasks pushed from other threads; idle workers steal half of a random victim's deque.
//!
//! and [`Idle`], Go's spinning-worker protocol: which sleeping worker to wake after a push (so
//! a wake-up is never lost), and when an idle worker may go to sleep (so idle workers use no
//! CPU).
//!
//! # Fairness: in turns or in time
//!
//! [`Fifo`] and [`RoundRobin`] are fair in *turns*: every push, a wake-up included, goes to the
//! back of a queue, so among the tasks ready for a worker each runs once before any runs twice.
//! Tasks that do more work per turn get more of a worker's time: two tasks that wake each other
//! and work a millisecond each time, sharing a worker with two that work a microsecond, take a
//! thousand times as much of its time. [`WorkStealing`] can be fair in *time*: a task woken or spawned by the running
//! one goes to the run-next slot and inherits the running time slice
//! ([`Popped::inherit_slice`]), so such a chain runs on in one slice, and a runtime that ends
//! slices by their time (as Go's does) gives the cheap chain and the costly one a slice each.
//! The other two cannot do that and keep their promise: running a woken task ahead of the
//! queue is exactly what their order forbids. Pick [`WorkStealing`] where tasks of very
//! different cost per wake-up share workers and each should get its share of the time.
//!
//! # Pinning
//!
//! A task's [`home`](Task::home) is the worker it must run on (`Some(w)`: a coroutine that has
//! started and may not migrate: its frames may hold thread-local addresses), or `None` (any worker). Every
//! policy guarantees that a task whose home is `Some(w)` is only ever returned by `pop(w)`.
//! A home outside `0..workers` is reduced modulo `workers` (the runtime never produces one).
//! The policies read `home()` when the task is pushed and may read it again while it is
//! queued: it must not change while the task is queued.
//!
//! # Threads
//!
//! Every policy is `Send + Sync`. [`push`](Policy::push) with `here = Some(w)` and
//! [`pop(w)`](Policy::pop) are meant to be called on worker `w`'s thread only; the other methods
//! from anywhere. Breaking that rule is never undefined behaviour: the round-robin and
//! work-stealing policies guard each worker's private state with a try-lock and fall back to
//! its shared queues (a push) or to finding nothing there (a pop) when another thread holds it.
//! A worker thread that [binds](Policy::bind_worker) itself to its worker skips that try-lock:
//! its own pushes and pops then cost no atomic read-modify-write.
//!
//! # Examples
//!
//! A complete (if tiny) runtime: two worker threads driving a [`WorkStealing`] policy with the
//! [`Idle`] protocol, and a foreign thread (here: the main thread) submitting work.
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::thread::{self, Thread};
//! use spindle_sched::{Idle, Notify, Policy, Reason, Task, WorkStealing};
//!
//! struct Job(usize);
//! impl Task for Job {
//!     fn home(&self) -> Option<usize> { None } // may run anywhere
//! }
//!
//! const WORKERS: usize = 2;
//! const JOBS: usize = 1000;
//!
//! struct Shared {
//!     policy: WorkStealing<Job>,
//!     idle: Idle,
//!     done: AtomicUsize,
//!     threads: std::sync::OnceLock<Vec<Thread>>,
//! }
//! impl Shared {
//!     fn unpark(&self, w: usize) { self.threads.wait()[w].unpark() }
//!     fn notify(&self, notify: Notify) {
//!         match notify {
//!             Notify::None => {}
//!             Notify::Any => if let Some(w) = self.idle.notify_any() { self.unpark(w) },
//!             Notify::Worker(w) => if self.idle.notify_worker(w) { self.unpark(w) },
//!         }
//!     }
//!     fn finished(&self) -> bool { self.done.load(Ordering::SeqCst) == JOBS }
//! }
//!
//! fn worker(shared: Arc<Shared>, w: usize) {
//!     loop {
//!         if let Some(popped) = shared.policy.pop(w) {
//!             // Found work: stop spinning (a no-op when not spinning); maybe wake a successor.
//!             if let Some(next) = shared.idle.end_spin(w, true) { shared.unpark(next) }
//!             let _job = popped.task; // ... run it ...
//!             if shared.done.fetch_add(1, Ordering::SeqCst) + 1 == JOBS {
//!                 (0..WORKERS).for_each(|v| shared.unpark(v)); // shut down
//!             }
//!             continue;
//!         }
//!         if shared.finished() { return }
//!         // Nothing found. Spin (look again a few times) if the protocol allows it.
//!         if shared.idle.begin_spin(w) {
//!             let found = (0..3).find_map(|_| shared.policy.pop(w));
//!             let was_found = found.is_some();
//!             if let Some(next) = shared.idle.end_spin(w, was_found) { shared.unpark(next) }
//!             if let Some(_job) = found {
//!                 if shared.done.fetch_add(1, Ordering::SeqCst) + 1 == JOBS {
//!                     (0..WORKERS).for_each(|v| shared.unpark(v));
//!                 }
//!                 continue;
//!             }
//!         }
//!         // Go to sleep: announce, re-check, park.
//!         shared.idle.prepare_sleep(w);
//!         if shared.policy.has_work(w) || shared.finished() {
//!             shared.idle.cancel_sleep(w);
//!             continue;
//!         }
//!         thread::park();
//!         shared.idle.woke(w);
//!     }
//! }
//!
//! let shared = Arc::new(Shared {
//!     policy: WorkStealing::new(WORKERS)?,
//!     idle: Idle::new(WORKERS)?,
//!     done: AtomicUsize::new(0),
//!     threads: std::sync::OnceLock::new(),
//! });
//! let handles: Vec<_> = (0..WORKERS)
//!     .map(|w| { let s = shared.clone(); thread::spawn(move || worker(s, w)) })
//!     .collect();
//! shared.threads.set(handles.iter().map(|h| h.thread().clone()).collect()).ok();
//! for i in 0..JOBS {
//!     let notify = shared.policy.push(None, Job(i), Reason::Spawned);
//!     shared.notify(notify);
//! }
//! for h in handles { h.join().unwrap() }
//! assert!(shared.finished());
//! # Ok::<(), spindle_sched::SchedError>(())
//! ```
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]
// Builds that leave a feature out leave some shared helpers unused.
#![cfg_attr(
    not(all(feature = "fifo", feature = "round-robin", feature = "work-stealing")),
    allow(dead_code, unused_imports)
)]

use std::fmt;

mod cell;
#[cfg(feature = "work-stealing")]
mod deque;
#[cfg(feature = "fifo")]
mod fifo;
mod idle;
mod loom;
#[cfg(any(feature = "round-robin", feature = "work-stealing"))]
mod queue;
#[cfg(any(feature = "round-robin", feature = "work-stealing"))]
mod ring;
#[cfg(feature = "round-robin")]
mod round_robin;
#[cfg(feature = "work-stealing")]
mod work_stealing;

#[cfg(feature = "fifo")]
pub use fifo::Fifo;
pub use idle::Idle;
#[cfg(feature = "round-robin")]
pub use round_robin::RoundRobin;
#[cfg(feature = "work-stealing")]
pub use work_stealing::{RUN_NEXT_GRACE, WorkStealing};

/// What a policy schedules; implemented by the runtime's task handle (an `Arc`-like pointer).
///
/// # Examples
///
/// ```
/// use spindle_sched::Task;
///
/// /// A task that has not started yet (`home: None`), or one pinned to a worker.
/// struct Handle { home: Option<usize> }
///
/// impl Task for Handle {
///     fn home(&self) -> Option<usize> { self.home }
/// }
/// ```
pub trait Task: Send + 'static {
    /// The worker this task must run on (a coroutine that has started and may not migrate), or
    /// `None` (any worker: not started yet, or migratable).
    ///
    /// Must not change while the task is queued in a policy.
    fn home(&self) -> Option<usize>;
}

/// Why a task is pushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// A new task.
    Spawned,
    /// A task that was blocked became ready (its wake-up ran).
    Woken,
    /// A task that was blocked became ready through its worker itself, between tasks — a
    /// timer the worker fired — rather than through the task that runs. Such wake-ups come in
    /// batches in the order they are due, so they queue in that order (no run-next slot,
    /// which would run the last of the batch first).
    WokenByWorker,
    /// A running task gave up the rest of its time slice.
    Yielded,
}

/// Which worker(s) the runtime should wake after a push.
///
/// Feed it to [`Idle`]: [`Notify::Any`] → [`Idle::notify_any`], [`Notify::Worker`] →
/// [`Idle::notify_worker`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Notify {
    /// Nobody: the task went to the pushing worker itself (it is awake).
    None,
    /// Any one worker may run the task.
    Any,
    /// Only this worker may run the task.
    Worker(usize),
}

/// A task returned by [`Policy::pop`].
#[derive(Debug, PartialEq, Eq)]
pub struct Popped<T> {
    /// The task to run.
    pub task: T,
    /// It came from the run-next slot: it inherits the current time slice (Go's rule). A
    /// chain of tasks that keep waking each other then shares one slice, so it cannot
    /// monopolise a worker, and a runtime that ends slices by their time gives each chain the
    /// same share of the worker's time however cheap its hand-offs are. Only [`WorkStealing`]
    /// sets it; the other policies queue every task behind the others, and are fair in turns.
    pub inherit_slice: bool,
}

/// Counters of one worker, for metrics.
///
/// Read with relaxed atomics: a snapshot, not a consistent cut.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct WorkerStats {
    /// Tasks queued for this worker: its own queues, pinned tasks and its run-next slot.
    pub depth: usize,
    /// Tasks this worker stole from other workers (counting whole batches).
    pub stole: u64,
    /// Tasks other workers stole from this one.
    pub stolen_from: u64,
    /// Tasks this worker took from the global queue.
    pub global_pops: u64,
}

/// A scheduling policy: a concurrent queue of ready tasks for `workers` worker threads.
///
/// See the [crate documentation](crate) for how a runtime drives it together with [`Idle`].
pub trait Policy<T: Task>: Send + Sync + 'static {
    /// The policy's name (`"fifo"`, `"round-robin"`, `"work-stealing"`).
    fn name(&self) -> &'static str;

    /// The number of workers.
    fn workers(&self) -> usize;

    /// `task` became ready.
    ///
    /// `here` is `Some(w)` when called on worker `w`'s thread (its local queues may be used),
    /// `None` from any other thread (a foreign OS thread, a timer thread...). A `here` outside
    /// `0..workers` counts as `None`. Returns whom to wake.
    fn push(&self, here: Option<usize>, task: T, reason: Reason) -> Notify;

    /// The next task for worker `w`; called only on `w`'s thread. Includes stealing where the
    /// policy steals. `None` for a `w` outside `0..workers`.
    fn pop(&self, w: usize) -> Option<Popped<T>>;

    /// `task` yielded on worker `w` (called on `w`'s thread): re-queues it and returns the next
    /// task for `w`. Exactly [`push`](Policy::push)`(Some(w), task, Reason::Yielded)` followed
    /// by [`pop(w)`](Policy::pop), with the push's [`Notify`] — the default does just that. A
    /// policy overrides it to do both in one visit to its queues: a yield is the hottest path
    /// of a runtime (a yield loop costs a push, a pop and two context switches per turn).
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
    /// let rr = RoundRobin::new(1)?;
    /// rr.push(Some(0), Job(1), Reason::Spawned);
    /// // Job 2 yields: it goes behind job 1, which runs next.
    /// let (notify, next) = rr.yield_and_pop(0, Job(2));
    /// assert_eq!(notify, Notify::None);
    /// assert_eq!(next.map(|p| p.task.0), Some(1));
    /// assert_eq!(rr.pop(0).map(|p| p.task.0), Some(2));
    /// # Ok::<(), spindle_sched::SchedError>(())
    /// ```
    fn yield_and_pop(&self, w: usize, task: T) -> (Notify, Option<Popped<T>>) {
        push_then_pop(self, w, task)
    }

    /// Whether [`pop(w)`](Policy::pop) would find something.
    ///
    /// Never returns `false` when a task that `w` may run was pushed (and its push returned)
    /// before this call, unless a worker has taken it since (popped it; a task that another
    /// worker is moving between queues still counts). The runtime calls it after
    /// [`Idle::prepare_sleep`], so together they cannot lose a wake-up. It may return `true`
    /// when `pop(w)` then finds nothing (another worker was faster, or a steal was in
    /// progress): the worker just looks again.
    fn has_work(&self, w: usize) -> bool;

    /// Removes and returns every queued task (shutdown); from any thread.
    ///
    /// Waits while a thread is [bound](Policy::bind_worker) to a worker: call it after the
    /// workers have unbound (exited).
    fn drain(&self) -> Vec<T>;

    /// Binds worker `w` to the calling thread, a speed-up for a worker thread's whole life:
    /// from now on this thread's [`push`](Policy::push)`(Some(w), ..)` and
    /// [`pop(w)`](Policy::pop) reach `w`'s private queues without the try-lock that otherwise
    /// guards them (no read-modify-write on the hot path), and no other thread reaches them
    /// (its calls for `w` fall back to the shared queues, as described under "Threads" in the
    /// crate docs). Returns whether the binding holds (`false`: `w` is out of range, bound to
    /// another thread, or the policy has no private state — nothing changes then).
    ///
    /// The thread must call [`unbind_worker`](Policy::unbind_worker) before it exits (a drop
    /// guard is the way): [`drain`](Policy::drain) waits for it.
    fn bind_worker(&self, w: usize) -> bool {
        let _ = w;
        false
    }

    /// Ends the calling thread's binding to `w` (a no-op if it holds none).
    fn unbind_worker(&self, w: usize) {
        let _ = w;
    }

    /// Counters for metrics: queue depth of `w`, tasks `w` stole, tasks stolen from `w`,
    /// global-queue pops. All zero for a `w` outside `0..workers`.
    fn stats(&self, w: usize) -> WorkerStats;
}

/// The most workers a policy or [`Idle`] supports: 65,535 ([`Idle`] packs two worker counts
/// into one atomic word, which bounds it on 32-bit targets). Each worker is an OS thread with
/// its own queues and cache-line-padded state (128 bytes and more per policy); the bound keeps
/// those arrays allocatable, so that an absurd count is an error, not an allocation failure
/// that aborts. No machine has as many cores.
pub const MAX_WORKERS: usize = (1 << 16) - 1;

/// A policy or [`Idle`] could not be created.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SchedError {
    /// Zero workers were asked for; a scheduler needs at least one.
    ZeroWorkers,
    /// More than [`MAX_WORKERS`] workers were asked for.
    TooManyWorkers {
        /// The number asked for.
        requested: usize,
        /// [`MAX_WORKERS`].
        max: usize,
    },
}

impl fmt::Display for SchedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchedError::ZeroWorkers => {
                f.write_str("a scheduler needs at least one worker (0 were asked for)")
            }
            SchedError::TooManyWorkers { requested, max } => write!(
                f,
                "{requested} workers asked for; a scheduler supports at most {max}"
            ),
        }
    }
}

impl std::error::Error for SchedError {}

/// Checks a worker count for a constructor.
fn check_workers(workers: usize) -> Result<(), SchedError> {
    if workers == 0 {
        Err(SchedError::ZeroWorkers)
    } else if workers > MAX_WORKERS {
        Err(SchedError::TooManyWorkers {
            requested: workers,
            max: MAX_WORKERS,
        })
    } else {
        Ok(())
    }
}

/// [`Policy::yield_and_pop`] by its definition: the push, then the pop. The default, and the
/// fallback of the policies that override it.
fn push_then_pop<T: Task, P: Policy<T> + ?Sized>(
    policy: &P,
    w: usize,
    task: T,
) -> (Notify, Option<Popped<T>>) {
    let notify = policy.push(Some(w), task, Reason::Yielded);
    (notify, policy.pop(w))
}

/// The worker a task must run on, reduced into `0..workers`.
#[inline]
fn home_of<T: Task>(task: &T, workers: usize) -> Option<usize> {
    task.home()
        .map(|h| if h < workers { h } else { h % workers })
}

/// `here`, or `None` when it is out of range.
#[inline]
fn valid_here(here: Option<usize>, workers: usize) -> Option<usize> {
    here.filter(|&w| w < workers)
}

/// Notify for a task that now waits in worker `target`'s queues, pushed from `here`.
#[inline]
fn notify_worker(here: Option<usize>, target: usize) -> Notify {
    if here == Some(target) {
        Notify::None
    } else {
        Notify::Worker(target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_counts_are_checked() {
        assert_eq!(check_workers(0), Err(SchedError::ZeroWorkers));
        assert_eq!(check_workers(1), Ok(()));
        assert_eq!(check_workers(MAX_WORKERS), Ok(()));
        assert_eq!(
            check_workers(MAX_WORKERS + 1),
            Err(SchedError::TooManyWorkers {
                requested: MAX_WORKERS + 1,
                max: MAX_WORKERS
            })
        );
        assert!(SchedError::ZeroWorkers.to_string().contains("at least one"));
    }
}

// How the crate is built, for whoever changes it (`cargo doc --document-private-items`).
mod internals;

/// The examples of the crate's README.md, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
