//! The runtime: configuration, the shared state of its workers, start and shutdown.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::{self, JoinHandle as ThreadJoin, Thread};
use std::time::{Duration, Instant};

#[cfg(feature = "sched-fifo")]
use spindle_sched::Fifo;
#[cfg(feature = "sched-rr")]
use spindle_sched::RoundRobin;
#[cfg(feature = "sched-ws")]
use spindle_sched::WorkStealing;
use spindle_sched::{Idle, Notify, Policy as _, Reason};
use spindle_stack::{PoolConfig, PoolKind, StackPool};

use crate::blocking::BlockingPool;
use crate::io::{IoBackend, Resolved};
use crate::metrics::{Metrics, WorkerCounters};
use crate::registry::TaskRegistry;
use crate::task::TaskRef;
use crate::worker;

/// Which scheduling policy the workers share. See the crate docs for when to use which.
///
/// Each policy is compiled in by a cargo feature (`sched-fifo`, `sched-rr`, `sched-ws`; all
/// three by default). The variants exist either way; [`RuntimeBuilder::build`] refuses a policy
/// that is not compiled in with [`BuildError::NotCompiled`], which names the feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Policy {
    /// One global first-in-first-out queue: the reference for fairness of order; scales the
    /// least. Fair in turns, not in time: every wake-up queues at the back, so coroutines that
    /// work long per wake-up take more of the time than ones that work briefly (see
    /// `spindle_sched::Fifo`). Feature `sched-fifo`.
    Fifo,
    /// A queue per worker; new coroutines are dealt in turn and never migrate. Fair in turns,
    /// not in time, as `Fifo`. Feature `sched-rr`.
    RoundRobin,
    /// Per-worker deques, stealing, a run-next slot: the default. Fair in time: coroutines
    /// that wake each other share one time slice (10 to 20 ms), so a chain of cheap hand-offs
    /// gets as much of a worker's time as a chain of costly ones. Feature `sched-ws`.
    WorkStealing,
}

impl Default for Policy {
    /// `WorkStealing` when it is compiled in; else `RoundRobin`, else `Fifo`.
    fn default() -> Self {
        if cfg!(feature = "sched-ws") {
            Policy::WorkStealing
        } else if cfg!(feature = "sched-rr") {
            Policy::RoundRobin
        } else {
            Policy::Fifo
        }
    }
}

impl Policy {
    /// The cargo feature (of `spindle-rt`, and of the `spindles` facade) that compiles it in.
    pub fn feature(self) -> &'static str {
        match self {
            Policy::Fifo => "sched-fifo",
            Policy::RoundRobin => "sched-rr",
            Policy::WorkStealing => "sched-ws",
        }
    }

    /// Whether this build has it.
    pub fn is_compiled_in(self) -> bool {
        match self {
            Policy::Fifo => cfg!(feature = "sched-fifo"),
            Policy::RoundRobin => cfg!(feature = "sched-rr"),
            Policy::WorkStealing => cfg!(feature = "sched-ws"),
        }
    }
}

/// The stacks the runtime's coroutines get (per coroutine overridable with
/// [`crate::Builder::stack`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StackKind {
    /// Fixed-size guarded stacks from a pool (the default: 256 KiB).
    Pooled {
        /// Usable bytes per stack.
        size: usize,
    },
    /// Growable stacks: `initial` bytes committed, growing up to `max` (Unix only; feature
    /// `stack-growable`, else refused with [`BuildError::NotCompiled`], or a spawn error).
    Growable {
        /// Committed at first.
        initial: usize,
        /// The reservation.
        max: usize,
    },
    /// The worker's shared (copying) stack; per coroutine only, through the `unsafe`
    /// [`crate::Builder::shared_stack`]. As a runtime default it is refused by `build`.
    /// Feature `stack-shared` (without it, such a spawn fails with an error naming it).
    Shared,
}

impl Default for StackKind {
    fn default() -> Self {
        StackKind::Pooled { size: 256 * 1024 }
    }
}

type ThreadHook = Arc<dyn Fn() + Send + Sync>;

/// Configures and builds a [`Runtime`].
///
/// ```
/// use spindle_rt::{Policy, Runtime};
///
/// let rt = Runtime::builder()
///     .workers(2)
///     .policy(Policy::WorkStealing)
///     .thread_name("my-worker")
///     .build()?;
/// assert_eq!(rt.block_on(|| 6 * 7), 42);
/// # Ok::<(), spindle_rt::BuildError>(())
/// ```
#[derive(Clone)]
pub struct RuntimeBuilder {
    workers: Option<usize>,
    policy: Policy,
    stack: StackKind,
    thread_name: String,
    on_start: Option<ThreadHook>,
    on_stop: Option<ThreadHook>,
    stuck_threshold: Option<Duration>,
    on_stuck: Option<crate::monitor::StuckHook>,
    blocking_threads: usize,
    blocking_keep_alive: Duration,
    shared_stack_size: usize,
    stack_pool: Option<PoolConfig>,
    io: IoBackend,
}

impl fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("workers", &self.workers)
            .field("policy", &self.policy)
            .field("stack", &self.stack)
            .field("thread_name", &self.thread_name)
            .field("io", &self.io)
            .finish_non_exhaustive()
    }
}

/// Why a runtime could not be built.
#[derive(Debug)]
#[non_exhaustive]
pub enum BuildError {
    /// A setting is out of range; the message says which and why.
    Invalid(&'static str),
    /// The stack pool could not be set up.
    Stack(spindle_stack::StackError),
    /// A worker thread could not be spawned.
    Thread(std::io::Error),
    /// The IO backend could not be set up (an explicitly chosen one that this kernel refuses,
    /// or `SPINDLE_IO` naming no backend); the message says which and why.
    Io(std::io::Error),
    /// The scheduling policy refused the worker count (zero, or more than
    /// [`spindle_sched::MAX_WORKERS`]); the error says which.
    Sched(spindle_sched::SchedError),
    /// The configuration asks for something this build leaves out: the cargo feature named
    /// is off.
    NotCompiled {
        /// What was asked for (`"the fifo scheduling policy"`, ...).
        what: &'static str,
        /// The feature of `spindle-rt` (and of the `spindles` facade) that adds it.
        feature: &'static str,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Invalid(why) => write!(f, "invalid runtime configuration: {why}"),
            // These say what failed; why is the source's message, not repeated here.
            BuildError::Stack(_) => f.write_str("cannot set up the runtime's stacks"),
            BuildError::Thread(_) => f.write_str("cannot spawn a worker thread"),
            BuildError::Io(_) => f.write_str("cannot set up the IO driver"),
            BuildError::Sched(_) => f.write_str("invalid worker count"),
            BuildError::NotCompiled { what, feature } => write!(
                f,
                "{what} is not compiled in: enable the `{feature}` feature of spindles (or of \
                 spindle-rt)"
            ),
        }
    }
}

impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BuildError::Invalid(_) | BuildError::NotCompiled { .. } => None,
            BuildError::Stack(e) => Some(e),
            BuildError::Thread(e) | BuildError::Io(e) => Some(e),
            BuildError::Sched(e) => Some(e),
        }
    }
}

impl Default for RuntimeBuilder {
    fn default() -> Self {
        RuntimeBuilder {
            workers: None,
            policy: Policy::default(),
            stack: StackKind::default(),
            thread_name: "spindle-worker".into(),
            on_start: None,
            on_stop: None,
            stuck_threshold: Some(Duration::from_millis(10)),
            on_stuck: None,
            blocking_threads: 512,
            blocking_keep_alive: Duration::from_secs(10),
            shared_stack_size: 256 * 1024,
            stack_pool: None,
            io: IoBackend::Auto,
        }
    }
}

impl RuntimeBuilder {
    /// Worker threads (default: the available parallelism). 0, and more than
    /// [`spindle_sched::MAX_WORKERS`] (65,535), are refused by [`build`]
    /// ([`BuildError::Sched`]).
    ///
    /// [`build`]: RuntimeBuilder::build
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = Some(n);
        self
    }

    /// The single-worker flavour: one worker thread, so everything the runtime runs is
    /// serialized on it (no migration question at all).
    pub fn single_worker(self) -> Self {
        self.workers(1)
    }

    /// The scheduling policy (default [`Policy::WorkStealing`]).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// The default stack of the runtime's coroutines.
    pub fn stack(mut self, stack: StackKind) -> Self {
        self.stack = stack;
        self
    }

    /// Worker thread names: `<name>-<index>`.
    pub fn thread_name(mut self, name: impl Into<String>) -> Self {
        self.thread_name = name.into();
        self
    }

    /// Runs `f` on each worker thread when it starts.
    pub fn on_thread_start(mut self, f: impl Fn() + Send + Sync + 'static) -> Self {
        self.on_start = Some(Arc::new(f));
        self
    }

    /// Runs `f` on each worker thread when it stops.
    pub fn on_thread_stop(mut self, f: impl Fn() + Send + Sync + 'static) -> Self {
        self.on_stop = Some(Arc::new(f));
        self
    }

    /// How long a coroutine may run without suspending before the monitor reports it (once
    /// per run, naming it: through the `log` facade, or to [`on_stuck`]) and wakes a sleeping
    /// worker to take over what can be stolen from its worker; until the coroutine suspends,
    /// the monitor also fires that worker's due timers of [migratable] coroutines, which then
    /// wake elsewhere. `None` turns the report (and that hand-off) off. Default 10 ms. The
    /// monitor thread runs either way: it also ends time slices (see [`consume_budget`]).
    ///
    /// [migratable]: crate::Builder::migratable
    ///
    /// [`consume_budget`]: crate::consume_budget
    /// [`on_stuck`]: RuntimeBuilder::on_stuck
    pub fn stuck_threshold(mut self, threshold: Option<Duration>) -> Self {
        self.stuck_threshold = threshold;
        self
    }

    /// Hands each stuck-coroutine report (see [`stuck_threshold`]) to `f` instead of the
    /// [`log`] facade, where it goes by default (at `warn`, target `spindle_rt::monitor`).
    /// `f` runs on the monitor thread, which watches the workers and ends time slices: it
    /// should return quickly (send the report somewhere, count it). A panic in `f` is caught
    /// and logged at `error`.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use spindle_rt::Runtime;
    ///
    /// let reports = Arc::new(Mutex::new(Vec::new()));
    /// let sink = reports.clone();
    /// let rt = Runtime::builder()
    ///     .on_stuck(move |report| sink.lock().unwrap().push(report.to_string()))
    ///     .build()?;
    /// # drop(rt);
    /// # Ok::<(), spindle_rt::BuildError>(())
    /// ```
    ///
    /// [`stuck_threshold`]: RuntimeBuilder::stuck_threshold
    pub fn on_stuck(mut self, f: impl Fn(&crate::StuckReport) + Send + Sync + 'static) -> Self {
        self.on_stuck = Some(Arc::new(f));
        self
    }

    /// The most threads of the blocking pool ([`crate::blocking`]); default 512.
    pub fn blocking_threads(mut self, n: usize) -> Self {
        self.blocking_threads = n;
        self
    }

    /// Tunes the runtime's stack pool (how many stacks are kept for reuse, how they are
    /// trimmed; see `spindle_stack::PoolConfig`). Its `stack_size` and `kind` are overridden by
    /// [`stack`](RuntimeBuilder::stack). The default keeps up to 16,384 stacks per worker
    /// thread and 16,384 in the shared pool, untrimmed when they move between threads: mapping
    /// a stack costs microseconds, reusing one nanoseconds, and thousands of coroutines may be
    /// alive at once. Each idle pooled stack keeps the pages its last coroutine touched (usually
    /// one or two) until it is trimmed every 256th reuse or its thread exits. Those caps hold
    /// while the runtime is busy: a worker that has slept a second with nothing to do unmaps
    /// the idle stacks beyond 256 in its own cache and 256 in the shared pool, so a spike's
    /// stacks do not stay mapped for the life of the program.
    ///
    /// Coroutines that ask for another size ([`crate::Builder::stack_size`]) take their stacks
    /// from a pool of that size, one per size, which the runtime keeps with the default
    /// `PoolConfig` (32 stacks per thread, 1,024 shared), not this one: the same idle release
    /// applies to them, and the runtime's shutdown unmaps their idle stacks as it does its own
    /// pool's.
    pub fn stack_pool(mut self, config: PoolConfig) -> Self {
        self.stack_pool = Some(config);
        self
    }

    /// The size of each worker's shared stack region (for coroutines spawned with
    /// [`crate::Builder::shared_stack`]); default 256 KiB. The deepest such coroutine must fit.
    pub fn shared_stack_size(mut self, bytes: usize) -> Self {
        self.shared_stack_size = bytes;
        self
    }

    /// The IO backend of the workers (default [`IoBackend::Auto`]: `SPINDLE_IO`, else the
    /// platform's best, with a logged fallback from io_uring to epoll).
    pub fn io(mut self, backend: IoBackend) -> Self {
        self.io = backend;
        self
    }

    /// How long an idle blocking-pool thread waits for work before it exits; default 10 s.
    pub fn blocking_keep_alive(mut self, keep_alive: Duration) -> Self {
        self.blocking_keep_alive = keep_alive;
        self
    }

    /// Starts the worker threads.
    ///
    /// # Errors
    ///
    /// Zero workers (or more than [`spindle_sched::MAX_WORKERS`]) or zero blocking threads, a
    /// thread name with a NUL byte, a stack size the pool refuses, or a thread that cannot be
    /// spawned.
    pub fn build(self) -> Result<Runtime, BuildError> {
        let workers = match self.workers {
            Some(0) => return Err(BuildError::Invalid("a runtime needs at least one worker")),
            Some(n) => n,
            None => thread::available_parallelism().map_or(1, |n| n.get()),
        };
        if self.blocking_threads == 0 {
            return Err(BuildError::Invalid(
                "the blocking pool needs at least one thread",
            ));
        }
        if self.thread_name.contains('\0') {
            // `std::thread::Builder::name` would panic on it.
            return Err(BuildError::Invalid(
                "the worker thread name contains a NUL byte",
            ));
        }
        // A runtime keeps many more stacks than the process-wide default pool: thousands of
        // coroutines may be alive at once, and a stack that has to be mapped (and unmapped)
        // costs microseconds, a pooled one nanoseconds.
        let base = self.stack_pool.clone().unwrap_or(PoolConfig {
            thread_cache: 16 * 1024,
            max_pooled: 16 * 1024,
            // Coroutines are often spawned on one worker and finish on another: their stacks
            // flow through the shared pool, and must stay warm doing so.
            trim_when_shared: false,
            ..PoolConfig::default()
        });
        let user_pool = self.stack_pool.is_some();
        // The default resident part may exceed a small stack: then all of it stays (a
        // `stack_pool` the caller set is taken as it is).
        let fit = |base: PoolConfig, size: usize| PoolConfig {
            keep_resident: if user_pool {
                base.keep_resident
            } else {
                base.keep_resident.min(size)
            },
            ..base
        };
        if let StackKind::Pooled { size } | StackKind::Growable { max: size, .. } = self.stack
            && size < crate::MIN_STACK_SIZE
        {
            return Err(BuildError::Invalid(
                "the runtime's stack size is below spindle_rt::MIN_STACK_SIZE (8 KiB); ask for \
                 at least that",
            ));
        }
        let pool_config = match self.stack {
            StackKind::Pooled { size } => PoolConfig {
                stack_size: size,
                ..fit(base, size)
            },
            #[cfg(not(feature = "stack-growable"))]
            StackKind::Growable { .. } => {
                return Err(BuildError::NotCompiled {
                    what: "growable stacks (StackKind::Growable)",
                    feature: "stack-growable",
                });
            }
            #[cfg(feature = "stack-growable")]
            StackKind::Growable { initial, max } => PoolConfig {
                stack_size: max,
                kind: PoolKind::Growable { initial },
                ..fit(base, max)
            },
            StackKind::Shared => {
                return Err(BuildError::Invalid(
                    "shared stacks are per coroutine (the unsafe Builder::shared_stack), not a \
                     runtime default",
                ));
            }
        };
        let stacks = StackPool::new(pool_config).map_err(BuildError::Stack)?;
        let io = self.io.resolve().map_err(BuildError::Io)?;
        let policy = match self.policy {
            #[cfg(feature = "sched-fifo")]
            Policy::Fifo => PolicyImpl::Fifo(Fifo::new(workers).map_err(sched_error)?),
            #[cfg(feature = "sched-rr")]
            Policy::RoundRobin => {
                PolicyImpl::RoundRobin(RoundRobin::new(workers).map_err(sched_error)?)
            }
            #[cfg(feature = "sched-ws")]
            Policy::WorkStealing => {
                PolicyImpl::WorkStealing(WorkStealing::new(workers).map_err(sched_error)?)
            }
            #[cfg(not(all(feature = "sched-fifo", feature = "sched-rr", feature = "sched-ws")))]
            p => {
                return Err(BuildError::NotCompiled {
                    what: match p {
                        Policy::Fifo => "the fifo scheduling policy (Policy::Fifo)",
                        Policy::RoundRobin => {
                            "the round-robin scheduling policy (Policy::RoundRobin)"
                        }
                        Policy::WorkStealing => {
                            "the work-stealing scheduling policy (Policy::WorkStealing)"
                        }
                    },
                    feature: p.feature(),
                });
            }
        };
        let shared = Arc::new(Shared {
            id: NEXT_RUNTIME_ID.fetch_add(1, Ordering::Relaxed),
            policy,
            idle: Idle::new(workers).map_err(sched_error)?,
            unparkers: (0..workers).map(|_| OnceLock::new()).collect(),
            io_name: match &io {
                Resolved::None => "none",
                Resolved::Factory(name, _) => name,
            },
            counters: (0..workers).map(|_| WorkerCounters::default()).collect(),
            tasks: TaskRegistry::new(workers),
            closing: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            stacks,
            sized_stacks: Mutex::new(HashMap::new()),
            has_sized_stacks: AtomicBool::new(false),
            movable_timers: {
                let origin = std::time::Instant::now();
                (0..workers)
                    .map(|_| crate::handoff::MovableTimers::new(origin))
                    .collect()
            },
            blocking: BlockingPool::new(self.blocking_threads, self.blocking_keep_alive),
            stuck_threshold: self.stuck_threshold,
            shared_stack_size: self.shared_stack_size,
            monitor: crate::monitor::MonitorHandle::default(),
        });
        let mut handles = Vec::with_capacity(workers);
        let exits = Arc::new(WorkerExits::new(workers));
        // Each worker reports whether it could make its IO driver before `build` returns.
        let (started_tx, started_rx) = std::sync::mpsc::channel::<std::io::Result<()>>();
        for index in 0..workers {
            let shared2 = shared.clone();
            let on_start = self.on_start.clone();
            let on_stop = self.on_stop.clone();
            let io = io.clone();
            let started = started_tx.clone();
            let exit = ExitSignal(exits.clone(), index);
            let spawned = thread::Builder::new()
                .name(format!("{}-{index}", self.thread_name))
                .spawn(move || {
                    // Dropped last, also when the thread unwinds: after the rest of what the
                    // closure holds, moved into the locals below.
                    let _exit = exit;
                    let (on_start, on_stop, io) = (on_start, on_stop, io);
                    if let Some(f) = &on_start {
                        f();
                    }
                    worker::run(shared2, index, &io, started);
                    if let Some(f) = &on_stop {
                        f();
                    }
                });
            match spawned {
                Ok(handle) => handles.push(handle),
                Err(e) => return Err(abandon_build(&shared, handles, BuildError::Thread(e))),
            }
        }
        drop(started_tx);
        let mut failure = None;
        for _ in 0..workers {
            match started_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    failure.get_or_insert(BuildError::Io(e));
                }
                Err(_) => {
                    failure.get_or_insert(BuildError::Thread(std::io::Error::other(
                        "a worker thread exited while starting",
                    )));
                }
            }
        }
        if let Some(e) = failure {
            return Err(abandon_build(&shared, handles, e));
        }
        // Started whatever the stuck threshold: the monitor also ends time slices.
        let monitor =
            match crate::monitor::start(&shared, shared.stuck_threshold, self.on_stuck.clone()) {
                Ok(monitor) => monitor,
                Err(e) => return Err(abandon_build(&shared, handles, BuildError::Thread(e))),
            };
        Ok(Runtime {
            shared,
            threads: handles,
            exits,
            monitor: Some(monitor),
        })
    }
}

/// A build that failed after starting workers: stops and joins them, and returns `error`.
fn abandon_build(
    shared: &Shared,
    workers: Vec<thread::JoinHandle<()>>,
    error: BuildError,
) -> BuildError {
    shared.close();
    for worker in workers {
        let _ = worker.join();
    }
    error
}

fn sched_error(e: spindle_sched::SchedError) -> BuildError {
    BuildError::Sched(e)
}

static NEXT_RUNTIME_ID: AtomicU64 = AtomicU64::new(1);

/// The policies, behind one type (an enum, so that push and pop are direct calls).
pub(crate) enum PolicyImpl {
    #[cfg(feature = "sched-fifo")]
    Fifo(Fifo<TaskRef>),
    #[cfg(feature = "sched-rr")]
    RoundRobin(RoundRobin<TaskRef>),
    #[cfg(feature = "sched-ws")]
    WorkStealing(WorkStealing<TaskRef>),
}

macro_rules! dispatch {
    ($self:expr, $p:ident => $e:expr) => {
        match $self {
            #[cfg(feature = "sched-fifo")]
            PolicyImpl::Fifo($p) => $e,
            #[cfg(feature = "sched-rr")]
            PolicyImpl::RoundRobin($p) => $e,
            #[cfg(feature = "sched-ws")]
            PolicyImpl::WorkStealing($p) => $e,
        }
    };
}

impl PolicyImpl {
    #[inline]
    pub(crate) fn push(&self, here: Option<usize>, task: TaskRef, reason: Reason) -> Notify {
        dispatch!(self, p => p.push(here, task, reason))
    }
    #[inline]
    pub(crate) fn pop(&self, w: usize) -> Option<spindle_sched::Popped<TaskRef>> {
        dispatch!(self, p => p.pop(w))
    }
    #[inline]
    pub(crate) fn yield_and_pop(
        &self,
        w: usize,
        task: TaskRef,
    ) -> (Notify, Option<spindle_sched::Popped<TaskRef>>) {
        dispatch!(self, p => p.yield_and_pop(w, task))
    }
    pub(crate) fn has_work(&self, w: usize) -> bool {
        dispatch!(self, p => p.has_work(w))
    }
    pub(crate) fn bind_worker(&self, w: usize) -> bool {
        dispatch!(self, p => p.bind_worker(w))
    }
    pub(crate) fn unbind_worker(&self, w: usize) {
        dispatch!(self, p => p.unbind_worker(w))
    }
    pub(crate) fn drain(&self) -> Vec<TaskRef> {
        dispatch!(self, p => p.drain())
    }
    pub(crate) fn stats(&self, w: usize) -> spindle_sched::WorkerStats {
        dispatch!(self, p => p.stats(w))
    }
    pub(crate) fn name(&self) -> &'static str {
        dispatch!(self, p => p.name())
    }
}

/// What the workers of a runtime share.
///
/// Aligned to 128 bytes so that the `Arc`'s reference counts, which every spawn and every
/// finished task write, sit on lines of their own instead of the one every push and pop reads
/// the policy from.
#[repr(align(128))]
pub(crate) struct Shared {
    pub(crate) id: u64,
    pub(crate) policy: PolicyImpl,
    pub(crate) idle: Idle,
    /// How to wake each worker (its driver's unparker, or its thread), set by the worker
    /// before it first sleeps.
    pub(crate) unparkers: Vec<OnceLock<WorkerUnpark>>,
    /// The IO backend's name.
    pub(crate) io_name: &'static str,
    pub(crate) counters: Vec<WorkerCounters>,
    pub(crate) tasks: TaskRegistry,
    /// Shutting down: no new tasks.
    pub(crate) closing: AtomicBool,
    /// Workers exit (set after the coroutines are gone, or at the shutdown's timeout).
    pub(crate) stop: AtomicBool,
    pub(crate) stacks: StackPool,
    /// Pools of the stack sizes coroutines asked for other than `stacks`' (see
    /// [`Shared::pool_of_size`]), by size.
    pub(crate) sized_stacks: Mutex<HashMap<usize, StackPool>>,
    /// Whether `sized_stacks` has a pool (set under its lock when the first is made, never
    /// cleared): an idle worker's check for stacks to give back skips the lock without one.
    pub(crate) has_sized_stacks: AtomicBool,
    /// Per worker: the timers of migratable coroutines that parked on it, which other threads
    /// may fire while the worker is stuck (see `handoff`).
    pub(crate) movable_timers: Vec<crate::handoff::MovableTimers>,
    pub(crate) blocking: BlockingPool,
    pub(crate) stuck_threshold: Option<Duration>,
    /// Bytes of each worker's shared (copying) stack region.
    pub(crate) shared_stack_size: usize,
    /// The monitor thread, once started, and whether it sleeps until a worker wakes (it does
    /// while every worker sleeps: see `monitor`).
    pub(crate) monitor: crate::monitor::MonitorHandle,
}

impl Shared {
    pub(crate) fn workers(&self) -> usize {
        self.unparkers.len()
    }

    /// Makes `task` runnable: pushes it to the policy and wakes a worker if needed.
    pub(crate) fn schedule(&self, task: TaskRef, reason: Reason) {
        self.schedule_from(worker::current_index(self), task, reason);
    }

    /// [`schedule`](Shared::schedule) by a caller that knows which of this runtime's workers
    /// it runs on (`None`: not a worker of this runtime).
    #[inline]
    pub(crate) fn schedule_from(&self, here: Option<usize>, task: TaskRef, reason: Reason) {
        let notify = self.policy.push(here, task, reason);
        self.notify(here, notify);
    }

    /// A task that yielded on worker `w` (the caller) goes back to a queue, and `w`'s next
    /// task comes out: [`schedule_from`] then a pop, in one visit to the policy's queues (see
    /// `Policy::yield_and_pop`).
    ///
    /// [`schedule_from`]: Shared::schedule_from
    #[inline]
    pub(crate) fn yield_and_pop(
        &self,
        w: usize,
        task: TaskRef,
    ) -> Option<spindle_sched::Popped<TaskRef>> {
        let (notify, next) = self.policy.yield_and_pop(w, task);
        self.notify(Some(w), notify);
        next
    }

    /// Wakes whom a push by `here` asked to wake.
    #[inline(always)]
    fn notify(&self, here: Option<usize>, notify: Notify) {
        match notify {
            Notify::None => {}
            Notify::Any => {
                // On a runtime of one worker a push by that worker wakes nobody: the only
                // worker is the caller, awake, and it looks at its queues before it sleeps.
                // (Skips the idle protocol's StoreLoad fence on every spawn and wake-up there.)
                if here.is_some() && self.workers() == 1 {
                    return;
                }
                if let Some(w) = self.idle.notify_any() {
                    self.unpark(w);
                }
            }
            Notify::Worker(w) => {
                if Some(w) != here && self.idle.notify_worker(w) {
                    self.unpark(w);
                }
            }
        }
    }

    pub(crate) fn unpark(&self, w: usize) {
        if let Some(u) = self.unparkers[w].get() {
            u.unpark();
        }
    }

    pub(crate) fn unpark_all(&self) {
        for u in self.unparkers.iter().filter_map(OnceLock::get) {
            u.unpark();
        }
    }

    /// The runtime's pool of stacks of `size` usable bytes, for coroutines that ask for a size
    /// other than the runtime's (`Builder::stack_size`): made on first use, shared by every
    /// coroutine of the runtime that asks for that size, trimmed with the runtime's own pool
    /// (see [`shrink_stacks`](Shared::shrink_stacks)).
    pub(crate) fn pool_of_size(&self, size: usize) -> Result<StackPool, spindle_stack::StackError> {
        let mut pools = crate::task::lock(&self.sized_stacks);
        if let Some(pool) = pools.get(&size) {
            return Ok(pool.clone());
        }
        let defaults = PoolConfig::default();
        let pool = StackPool::new(PoolConfig {
            stack_size: size,
            // The default resident part may exceed a small stack: then all of it stays.
            keep_resident: defaults.keep_resident.min(size),
            ..defaults
        })?;
        pools.insert(size, pool.clone());
        self.has_sized_stacks.store(true, Ordering::Release);
        Ok(pool)
    }

    /// Unmaps idle stacks of the runtime's pool and of its pools of other sizes: those beyond
    /// `keep_in_thread` in the calling thread's caches and `keep_shared` in each shared pool.
    pub(crate) fn shrink_stacks(&self, keep_in_thread: usize, keep_shared: usize) {
        self.stacks.shrink(keep_in_thread, keep_shared);
        // Cloned out of the lock: an unmap takes a while, and a spawn may want the map.
        let sized: Vec<StackPool> = crate::task::lock(&self.sized_stacks)
            .values()
            .cloned()
            .collect();
        for pool in sized {
            pool.shrink(keep_in_thread, keep_shared);
        }
    }

    /// Whether the calling thread's caches or the shared pools hold more idle stacks than
    /// `in_thread` and `shared` (see [`shrink_stacks`](Shared::shrink_stacks)).
    pub(crate) fn holds_idle_stacks_beyond(&self, in_thread: usize, shared: usize) -> bool {
        let over =
            |pool: &StackPool| pool.thread_cached() > in_thread || pool.shared_pooled() > shared;
        // A pool made after the load is seen at the next idle check (its stacks were taken by
        // a spawn that runs now, not idle ones).
        over(&self.stacks)
            || (self.has_sized_stacks.load(Ordering::Acquire)
                && crate::task::lock(&self.sized_stacks).values().any(over))
    }

    /// The name of live task `id`, if it has one.
    pub(crate) fn task_name(&self, id: u64) -> Option<std::sync::Arc<str>> {
        self.tasks.find(id).and_then(|t| t.header().name.clone())
    }

    fn close(&self) {
        self.closing.store(true, Ordering::Release);
        self.stop.store(true, Ordering::Release);
        self.unpark_all();
    }
}

/// How a sleeping worker is woken.
pub(crate) enum WorkerUnpark {
    /// It sleeps in `std::thread::park` (no IO driver).
    Thread(Thread),
    /// It sleeps in its driver's `park`.
    Driver(Arc<dyn spindle_io::Unpark>),
}

impl WorkerUnpark {
    pub(crate) fn unpark(&self) {
        match self {
            WorkerUnpark::Thread(t) => t.unpark(),
            WorkerUnpark::Driver(u) => u.unpark(),
        }
    }
}

/// A running runtime: worker threads that run coroutines.
///
/// Dropping it shuts it down: coroutines still alive are cancelled (each unwinds from where it
/// is suspended, so its destructors run), then the worker threads and the blocking pool's
/// threads are joined (see [`shutdown_timeout`](Runtime::shutdown_timeout)).
pub struct Runtime {
    shared: Arc<Shared>,
    /// The worker threads, by index.
    threads: Vec<ThreadJoin<()>>,
    exits: Arc<WorkerExits>,
    monitor: Option<crate::monitor::Monitor>,
}

/// Which worker threads have ended, so that a shutdown with a timeout joins only those and
/// detaches the others (a coroutine that blocks its worker would keep a join waiting).
struct WorkerExits {
    exited: Mutex<Vec<bool>>,
    changed: Condvar,
}

impl WorkerExits {
    fn new(workers: usize) -> Self {
        WorkerExits {
            exited: Mutex::new(vec![false; workers]),
            changed: Condvar::new(),
        }
    }

    /// Waits until every worker thread has ended or `deadline` passes; returns which have.
    fn wait_until(&self, deadline: Instant) -> Vec<bool> {
        let mut exited = crate::task::lock(&self.exited);
        while !exited.iter().all(|&e| e) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            exited = self
                .changed
                .wait_timeout(exited, deadline - now)
                .map_or_else(|e| e.into_inner().0, |(g, _)| g);
        }
        exited.clone()
    }
}

/// Marks worker thread `.1` as ended when dropped: the last thing its thread does.
struct ExitSignal(Arc<WorkerExits>, usize);

impl Drop for ExitSignal {
    fn drop(&mut self) {
        if let Some(e) = crate::task::lock(&self.0.exited).get_mut(self.1) {
            *e = true;
        }
        self.0.changed.notify_all();
    }
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("workers", &self.shared.workers())
            .field("policy", &self.shared.policy.name())
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// A builder with the defaults: work-stealing, one worker per available core, 256 KiB
    /// pooled stacks.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// A runtime with the defaults.
    ///
    /// # Errors
    ///
    /// As for [`RuntimeBuilder::build`].
    pub fn new() -> Result<Runtime, BuildError> {
        Runtime::builder().build()
    }

    /// A handle to spawn on this runtime from anywhere; cheap to clone.
    pub fn handle(&self) -> Handle {
        Handle {
            shared: self.shared.clone(),
        }
    }

    /// Counters of the runtime and its workers.
    pub fn metrics(&self) -> Metrics {
        crate::metrics::snapshot(&self.shared)
    }

    /// The IO backend the workers use: `"io_uring"`, `"epoll"`, `"kqueue"`, `"iocp"`,
    /// `"polling"`, `"custom"` or `"none"`.
    pub fn io_backend(&self) -> &'static str {
        self.shared.io_name
    }

    /// Shuts down: cancels every coroutine still alive, waits up to `timeout` for them to
    /// unwind, then stops the workers and joins them, unmaps the pooled stacks, and joins the
    /// blocking pool's threads (within what is left of `timeout`). Returns about `timeout`
    /// after the call at the latest, false if some coroutines were still alive at the timeout
    /// (they are abandoned with their stacks: leaked, never freed under them), a worker thread
    /// had not ended by then (a coroutine that never suspends keeps it: the thread is
    /// detached, and ends when that coroutine suspends or returns), or a blocking-pool thread
    /// was still running a job then (it is detached and exits when its job returns). Dropping
    /// the runtime does this with no timeout: a [`blocking`](crate::blocking()) job that never
    /// returns keeps its coroutine alive, and the drop waits for it for ever.
    ///
    /// # Panics
    ///
    /// If called (or the runtime dropped) in one of this runtime's own coroutines, or in a job
    /// on its own blocking pool, which the shutdown would wait for.
    pub fn shutdown_timeout(mut self, timeout: Duration) -> bool {
        self.shutdown(Some(timeout))
    }

    fn shutdown(&mut self, timeout: Option<Duration>) -> bool {
        let shared = &self.shared;
        // Shutdown waits for every coroutine to end: from one of them, or from a blocking job
        // that one of them waits for, it would wait for ever. (From a coroutine of *another*
        // runtime it only blocks that worker a while.)
        let why = if crate::worker::current().is_some_and(|w| Arc::ptr_eq(&w.shared, shared)) {
            Some(
                "a Runtime was dropped (or shut down) by one of its own coroutines, which \
                 shutdown would wait for: drop it outside the runtime, e.g. after block_on \
                 returns",
            )
        } else if shared.blocking.is_own_thread() {
            Some(
                "a Runtime was dropped (or shut down) in a job on its own blocking pool, whose \
                 coroutine shutdown would wait for: drop it outside the runtime, e.g. after \
                 block_on returns",
            )
        } else {
            None
        };
        if let Some(why) = why {
            if std::thread::panicking() {
                // A second panic here would abort: say it and leave the runtime running.
                log::error!("{why}; it is left running");
                return false;
            }
            panic!("{why}");
        }
        if shared.closing.swap(true, Ordering::SeqCst) && self.threads.is_empty() {
            return true;
        }
        // Orders `closing` before the registry's counts below: a spawn from another thread
        // that these counts miss sees `closing` after counting itself, and backs out
        // (`spawn::spawn_on`).
        std::sync::atomic::fence(Ordering::SeqCst);
        // Cancel what is left; the workers run each cancelled coroutine until it unwinds.
        for task in shared.tasks.snapshot() {
            crate::join::cancel_task(&task);
        }
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let all_done = wait_for_cancelled(shared, deadline);
        shared.stop.store(true, Ordering::Release);
        shared.unpark_all();
        // Without a deadline every worker is joined. With one, only those that end by then: a
        // worker still in a coroutine that never suspends (a CPU loop, a blocking call) is
        // detached, and leaves its loop when that coroutine lets it.
        let exited = match deadline {
            None => vec![true; self.threads.len()],
            Some(deadline) => self.exits.wait_until(deadline),
        };
        let all_exited = exited.iter().all(|&e| e);
        for (t, exited) in self.threads.drain(..).zip(exited) {
            if exited {
                let _ = t.join();
            }
        }
        // No coroutine runs again (spawns are refused): the workers' stacks, which their
        // exits moved to the shared pools, are unmapped now rather than when the last `Handle`
        // goes. (Those of coroutines abandoned at the timeout are theirs, not the pools'. A
        // detached worker's cache is its own: the shrink touches only this thread's cache and
        // the shared pools, under their locks.)
        shared.shrink_stacks(0, 0);
        if let Some(m) = self.monitor.take() {
            m.stop();
        }
        // Every coroutine waits for its own blocking job: once they have all ended, the pool's
        // threads are idle or about to be. The jobs of coroutines abandoned at the timeout may
        // still run, and the deadline has passed: their threads are left to finish.
        let pool_joined = shared.blocking.shutdown(deadline);
        // Whatever is still queued (coroutines that did not unwind by the timeout) is
        // abandoned: leaked with its stack, never dropped here — dropping would unwind a
        // coroutine on this thread, away from the worker it is bound to. Not while a detached
        // worker may still run: its private queues are its own (`Policy::bind_worker`), and it
        // pushes back the task it holds when it leaves its loop; what the queues hold then is
        // leaked with the shared state (below).
        if all_exited {
            for task in shared.policy.drain() {
                std::mem::forget(task);
            }
        }
        if !all_done {
            // Tasks are still live: they reach the runtime through a plain pointer
            // (`Header::shared`), valid while they count as live, and must not be dropped
            // here (as above). So the shared state is leaked with them.
            std::mem::forget(Arc::clone(shared));
        }
        all_done && all_exited && pool_joined
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.shutdown(None);
    }
}

/// How long a shutdown waits once every coroutine still alive is parked holding its
/// cancellation off (a `CancelGuard`, perhaps forgotten with `mem::forget`): then it stops
/// waiting for them, names them, and abandons them (see [`Runtime::shutdown_timeout`]).
pub const CANCEL_DEFERRAL_GRACE: Duration = Duration::from_secs(1);

/// Waits until every coroutine has ended or `deadline` passes (`None`: no deadline) — or until
/// the coroutines left have all been parked, holding their cancellation off, for
/// [`CANCEL_DEFERRAL_GRACE`]: nothing the shutdown does can end those. Returns whether every
/// coroutine ended.
fn wait_for_cancelled(shared: &Shared, deadline: Option<Instant>) -> bool {
    // How often the coroutines left are looked at.
    const LOOK_EVERY: Duration = Duration::from_millis(20);
    let mut all_deferring_since: Option<Instant> = None;
    loop {
        let now = Instant::now();
        let slice = match deadline {
            Some(d) if d <= now => return shared.tasks.wait_empty(Some(Duration::ZERO)),
            Some(d) => (d - now).min(LOOK_EVERY),
            None => LOOK_EVERY,
        };
        if shared.tasks.wait_empty(Some(slice)) {
            return true;
        }
        // Every live coroutine that has parked has a registry slot; one without (never parked
        // yet) is running or queued, and will see its cancel.
        let left = shared.tasks.snapshot();
        let stuck = left.len() == shared.tasks.live()
            && left.iter().all(|t| t.header().parked_deferring_cancel());
        if !stuck {
            all_deferring_since = None;
            continue;
        }
        let since = *all_deferring_since.get_or_insert(now);
        if now.duration_since(since) >= CANCEL_DEFERRAL_GRACE {
            let names: Vec<String> = left
                .iter()
                .map(|t| {
                    let h = t.header();
                    match &h.name {
                        Some(name) => format!("'{name}' (#{})", h.id),
                        None => format!("#{}", h.id),
                    }
                })
                .collect();
            log::warn!(
                "spindle: shutdown stopped waiting for {} coroutine(s) that hold their \
                 cancellation off while parked ({}); they are abandoned with their stacks. A \
                 CancelGuard forgotten with mem::forget defers cancellation for good: prefer \
                 spindle_rt::with_cancel_deferred",
                names.len(),
                names.join(", ")
            );
            return false;
        }
    }
}

/// A handle to a runtime: spawn on it from any thread.
#[derive(Clone)]
pub struct Handle {
    pub(crate) shared: Arc<Shared>,
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("id", &self.shared.id)
            .finish()
    }
}

impl Handle {
    /// The handle of the runtime the current code runs on (in one of its coroutines or on one
    /// of its worker threads), if any.
    pub fn try_current() -> Option<Handle> {
        worker::current_shared().map(|shared| Handle { shared })
    }

    /// Counters of the runtime and its workers.
    pub fn metrics(&self) -> Metrics {
        crate::metrics::snapshot(&self.shared)
    }

    /// The IO backend the workers use (see [`Runtime::io_backend`]).
    pub fn io_backend(&self) -> &'static str {
        self.shared.io_name
    }
}
