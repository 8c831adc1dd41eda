//! A worker thread: the scheduling loop, the park hook its coroutines use, its timers.
//!
//! # The loop (after Go's `schedule`/`findrunnable`)
//!
//! ```text
//! loop:
//!     fire due timers
//!     pop a task from the policy (own queues, global queue, stealing) → run it, repeat
//!     nothing: spin once more if the idle protocol allows (another pop, which steals)
//!     still nothing: announce sleep (Idle::prepare_sleep), re-check the queues and timers,
//!                    then park the thread until unparked or the next timer deadline
//! ```
//!
//! The re-check after the announcement is what makes a wake-up impossible to lose: a push
//! either happens before the re-check (which sees it) or after the announcement (whose
//! `notify_*` sees the sleeper and unparks it). See `spindle_sched::Idle`.
//!
//! # Running a task
//!
//! The worker takes the task (pops it: it holds it now), pins it to itself on its first run (unless
//! it is migratable: see the crate docs on migration), resumes its coroutine on the worker's own
//! stack, and when the coroutine switches back does what it asked (yield: queue it again; park: arm
//! its timer and publish it as idle — *after* the switch, invariant 1). The coroutine never
//! schedules itself.

use std::cell::{Cell, RefCell};
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Waker;
use std::time::{Duration, Instant};

use spindle_io::Driver;
use spindle_park::{Hook, Wake};
use spindle_sched::{Popped, Reason};
use spindle_timer::{TimerKey, TimerWheel};

use crate::handoff::{MOVABLE, TimerEntry};
use crate::io::Resolved;
use crate::metrics::WorkerCounters;
use crate::runtime::{Shared, WorkerUnpark};
use crate::task::{Header, NO_HOME, Suspend, TaskRef};

/// Operations a coroutine may complete without blocking before it must yield (in a slice of
/// its own), or before it looks at the slice's time (in a slice handed on through run-next;
/// see `coop`).
pub(crate) const BUDGET: u32 = 128;

/// How long an idle worker keeps looking for work before it sleeps.
const SPIN: std::time::Duration = std::time::Duration::from_micros(20);

/// How long a worker sleeps without work before it gives back what a spike left in its caches:
/// freed task blocks beyond `task_alloc::IDLE_BYTES`, and idle stacks beyond
/// `IDLE_STACKS_IN_THREAD` in its own cache and `IDLE_STACKS_SHARED` in the runtime's shared
/// pool (unmapped).
const IDLE_RELEASE_AFTER: Duration = Duration::from_secs(1);

/// Idle stacks a worker keeps cached once it has been idle a while (the busy cap is
/// `PoolConfig::thread_cache`, 16,384 by default).
const IDLE_STACKS_IN_THREAD: usize = 256;

/// Idle stacks the runtime's shared pool keeps once a worker has been idle a while.
const IDLE_STACKS_SHARED: usize = 256;

/// Timers are checked at most every this many loop iterations while the worker is busy.
const TIMER_CHECK_EVERY: u32 = 16;

/// The driver is polled (without blocking) every this many loop iterations while the worker
/// is busy (tokio's choice: a prime, so that it does not beat with other periods).
const DRIVER_POLL_EVERY: u32 = 61;

/// The state of one worker, on its own thread.
pub(crate) struct WorkerCtx {
    pub(crate) index: usize,
    pub(crate) shared: Arc<Shared>,
    /// The task being run: points to `run_task`'s own handle, which keeps the task alive while
    /// its coroutine runs (null otherwise). A pointer, not a clone: no reference-count traffic
    /// on every resume.
    current: Cell<*const TaskRef>,
    /// Its header, for the hot checks (null when no coroutine runs).
    current_header: Cell<*const Header>,
    /// The running slice has been handed on through the run-next slot (a task popped from
    /// there runs in it): it ends when its time is over, not when its budget is spent (see
    /// `coop`). False in a fresh slice.
    chained: Cell<bool>,
    pub(crate) timers: RefCell<TimerWheel<TimerEntry>>,
    /// This worker's shared (copying) stack region, made on first use.
    #[cfg(feature = "stack-shared")]
    region: RefCell<Option<spindle_stack::SharedStack>>,
    /// The IO driver (none with `IoBackend::None`): the worker sleeps in it and polls it.
    driver: Option<Box<dyn Driver>>,
    /// A failure of the driver's wait was reported already.
    driver_error_logged: Cell<bool>,
    /// Idle carriers, for the next tasks this worker starts (see `carrier`).
    pub(crate) carriers: crate::carrier::CarrierCache,
    /// This worker's block of task ids, (next, end): its spawns take ids from here, without
    /// the thread-local lookup of `spawn::next_task_id`.
    task_ids: Cell<(u64, u64)>,
}

thread_local! {
    /// The worker running on this thread (null: none). Set by `run` for the worker's life.
    static CURRENT: Cell<*const WorkerCtx> = const { Cell::new(ptr::null()) };
}

/// The worker of this thread, if any.
///
/// Not inlined, and never cached across a suspension by callers: a migratable coroutine may
/// resume on another thread.
#[inline(never)]
pub(crate) fn current() -> Option<&'static WorkerCtx> {
    let ctx = CURRENT.try_with(Cell::get).ok()?;
    // SAFETY: non-null only while `run` is on the stack of this thread, which owns the context;
    // callers use the reference without keeping it across a coroutine switch.
    (!ctx.is_null()).then(|| unsafe { &*ctx })
}

impl WorkerCtx {
    /// A task id no other task of the process has (see `spawn::next_task_id`), from this
    /// worker's block.
    #[inline]
    pub(crate) fn next_task_id(&self) -> u64 {
        let (next, end) = self.task_ids.get();
        if next < end {
            self.task_ids.set((next + 1, end));
            return next;
        }
        let start = crate::spawn::take_task_id_block();
        self.task_ids
            .set((start + 1, start + crate::spawn::TASK_ID_BLOCK));
        start
    }
}

/// Runs `f` with this thread's worker marked as running no coroutine, for code that the worker
/// runs on its own stack while a coroutine's task is still its current one (a finishing task's
/// wake-ups): user code there (a destructor) that parks must park the thread, not "suspend" a
/// coroutine that is not running — which would switch stacks from the wrong one.
pub(crate) fn outside_coroutine<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(Option<(&'static WorkerCtx, *const TaskRef, *const Header)>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some((ctx, task, header)) = self.0 {
                ctx.current.set(task);
                ctx.current_header.set(header);
            }
        }
    }
    let _restore = Restore(current().map(|ctx| {
        let saved = (ctx, ctx.current.get(), ctx.current_header.get());
        ctx.current.set(ptr::null());
        ctx.current_header.set(ptr::null());
        saved
    }));
    f()
}

/// Runs `job` — the drop of a value nobody will read, a foreign waker's wake-up — in a
/// coroutine of its own on this worker's runtime (named by `name`, which a stuck-coroutine
/// report prints), not as the worker's own code: there, a destructor that parks (a lock held by
/// another coroutine of this worker, a sleep) would park the worker's thread, and with it every
/// coroutine that could let it go on. A panic in `job` is reported by the panic hook and goes
/// no further. Where no coroutine can be had (off a worker, the runtime shutting down, no
/// stack) it runs here, as the worker's own code, as the last resort.
#[cold]
#[inline(never)]
pub(crate) fn in_cleanup_coroutine(
    name: impl FnOnce() -> String,
    job: impl FnOnce() + Send + 'static,
) {
    run_cleanup(name(), Box::new(job));
}

/// [`in_cleanup_coroutine`], type-erased: one kind of cleanup task whatever the job (whose
/// closure, were it ever dropped unrun, would want a cleanup of its own).
#[cold]
#[inline(never)]
fn run_cleanup(name: String, job: Box<dyn FnOnce() + Send>) {
    let slot = Arc::new(std::sync::Mutex::new(Some(job)));
    if let Some(shared) = current_shared() {
        let taken = slot.clone();
        let spawned = crate::spawn::spawn_on(
            &shared,
            // Its stack taken now: a cleanup coroutine never ends up with a closure dropped
            // unrun for want of one (that drop would want a cleanup coroutine of its own).
            crate::Builder::new().name(name).reserve_stack(),
            move || {
                let job = crate::task::lock(&taken).take();
                if let Some(job) = job {
                    job();
                }
            },
        );
        if spawned.is_ok() {
            return;
        }
    }
    let job = crate::task::lock(&slot).take();
    if let Some(job) = job {
        // Not the coroutine the worker last ran: a stuck-coroutine report must not blame it.
        let blamed = current().map(|ctx| {
            let counters = &ctx.shared.counters[ctx.index];
            (
                counters,
                counters
                    .running_task
                    .swap(crate::monitor::WORKER_ITSELF, Ordering::Relaxed),
            )
        });
        outside_coroutine(|| {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
        });
        if let Some((counters, task)) = blamed {
            counters.running_task.store(task, Ordering::Relaxed);
        }
    }
}

/// The index of this thread's worker if it belongs to `shared`'s runtime.
pub(crate) fn current_index(shared: &Shared) -> Option<usize> {
    current()
        .filter(|c| ptr::eq(Arc::as_ptr(&c.shared), shared))
        .map(|c| c.index)
}

/// The runtime of this thread's worker.
pub(crate) fn current_shared() -> Option<Arc<Shared>> {
    current().map(|c| c.shared.clone())
}

/// The header of the task running on this thread, if a coroutine of a runtime runs here.
#[inline]
pub(crate) fn current_task_header() -> Option<&'static Header> {
    current()?.running_header()
}

/// The task running on this thread.
pub(crate) fn current_task() -> Option<TaskRef> {
    let task = current()?.current.get();
    // SAFETY: non-null only while `run_task` runs the task, with the handle alive on its stack;
    // the caller is the running coroutine.
    (!task.is_null()).then(|| unsafe { (*task).clone() })
}

/// The body of a worker thread: makes its IO driver (reporting the outcome on `started`),
/// then runs the scheduling loop until the runtime stops.
pub(crate) fn run(
    shared: Arc<Shared>,
    index: usize,
    io: &Resolved,
    started: std::sync::mpsc::Sender<std::io::Result<()>>,
) {
    let driver: Option<Box<dyn Driver>> = match io {
        Resolved::None => None,
        Resolved::Factory(_, make) => match make() {
            Ok(d) => Some(d),
            Err(e) => {
                let _ = started.send(Err(e));
                return;
            }
        },
    };
    let unpark = match &driver {
        Some(d) => WorkerUnpark::Driver(d.unparker()),
        None => WorkerUnpark::Thread(std::thread::current()),
    };
    let _ = shared.unparkers[index].set(unpark);
    shared.counters[index]
        .tid
        .store(crate::monitor::current_tid(), Ordering::Relaxed);
    let _ = started.send(Ok(()));
    drop(started);
    let ctx = WorkerCtx {
        index,
        shared,
        current: Cell::new(ptr::null()),
        current_header: Cell::new(ptr::null()),
        chained: Cell::new(false),
        timers: RefCell::new(TimerWheel::new(Instant::now())),
        #[cfg(feature = "stack-shared")]
        region: RefCell::new(None),
        driver,
        driver_error_logged: Cell::new(false),
        carriers: crate::carrier::CarrierCache::new(index),
        task_ids: Cell::new((0, 0)),
    };
    CURRENT.with(|c| c.set(&ctx));
    struct Unset;
    impl Drop for Unset {
        fn drop(&mut self) {
            let _ = CURRENT.try_with(|c| c.set(ptr::null()));
        }
    }
    let _unset = Unset;
    // This thread alone uses worker `index`'s private queues from now on: the policy can skip
    // its try-lock on them. Unbound on the way out (also when unwinding), before `drain`.
    struct Bound<'a>(&'a Shared, usize);
    impl Drop for Bound<'_> {
        fn drop(&mut self) {
            self.0.policy.unbind_worker(self.1);
        }
    }
    ctx.shared.policy.bind_worker(index);
    let _bound = Bound(&ctx.shared, index);
    // Stacks and the alternate signal stack for overflow messages.
    let _ = spindle_stack::prepare_thread();
    // Freed task blocks are kept for this worker's next spawns until it exits.
    struct TaskCache;
    impl Drop for TaskCache {
        fn drop(&mut self) {
            crate::task_alloc::disable();
        }
    }
    crate::task_alloc::enable();
    let _task_cache = TaskCache;
    // The four thread installations (hook, budget, blocking pool, driver) are made here, on the
    // worker thread's own stack, around the scheduler loop, which switches into coroutines and
    // always comes back: no coroutine runs this code, so none can suspend inside them.
    let run_loop = || {
        // SAFETY: see above.
        unsafe {
            spindle_park::with_hook(&ctx, || {
                let budget = &ctx.shared.counters[index].budget;
                // SAFETY: see above.
                spindle_park::with_budget(budget, || ctx.schedule_loop())
            })
        }
    };
    // SAFETY: see above.
    unsafe {
        spindle_io::with_blocking_pool(&ctx.shared.blocking, || match ctx.driver.as_deref() {
            // SAFETY: see above.
            Some(driver) => spindle_io::with_driver(driver, run_loop),
            None => run_loop(),
        })
    };
    // Timers still armed hold tasks; drop them here, on the worker.
    drop(ctx.timers.borrow_mut().clear());
    drop(ctx.shared.movable_timers[index].clear());
    // Idle carriers give their stacks back to the pool now, while the thread's stack cache is
    // still there to take them (and before shutdown trims the pool).
    ctx.carriers.clear(&ctx.shared);
}

impl WorkerCtx {
    /// Whether a coroutine of this worker is running (the caller is it).
    #[inline]
    pub(crate) fn coroutine_running(&self) -> bool {
        !self.current_header.get().is_null()
    }

    /// The header of the coroutine running on this worker, if one is (the caller runs on this
    /// worker's thread: in that coroutine, since a worker runs nothing else while one runs).
    #[inline]
    pub(crate) fn running_header(&self) -> Option<&Header> {
        let header = self.current_header.get();
        // SAFETY: the worker keeps the running task alive (in `current`) while its coroutine
        // runs, and the reference does not outlive `self`'s borrow.
        (!header.is_null()).then(|| unsafe { &*header })
    }

    /// Whether the running slice goes on when its budget runs out: it has been handed on
    /// through the run-next slot and its time is not over (see `coop`).
    #[inline]
    pub(crate) fn slice_goes_on(&self) -> bool {
        self.chained.get() && !self.shared.counters[self.index].slice_over()
    }

    fn schedule_loop(&self) {
        let shared = &*self.shared;
        let counters = &shared.counters[self.index];
        // With one worker nobody else can hand us work (only IO or foreign threads, which
        // wake the driver), so spinning would only burn CPU.
        let may_spin = shared.workers() > 1;
        // Counted as a spinner by the idle protocol.
        let mut spinning = false;
        // Out of work: until when the worker keeps looking before it sleeps (set when the look
        // begins; cleared when it finds work or wakes up).
        let mut look_until: Option<Instant> = None;
        // Whether the idle protocol's books may show this worker spinning (or spun dry): true
        // after anything but `end_spin(.., true)`. A worker woken by `notify_any` starts out
        // spinning in the books, and until it says it found work, pushes do not wake other
        // sleepers; a worker that found work says so once, not on every pop.
        let mut idle_books = true;
        let mut timer_countdown = TIMER_CHECK_EVERY;
        let mut driver_countdown = DRIVER_POLL_EVERY;
        // A task popped at a yield, to run next. Popped there rather than at the top of the
        // loop: the yielding task's push and the pop are one visit to the policy's queues.
        let mut handed_over: Option<Popped<TaskRef>> = None;
        loop {
            if shared.stop.load(Ordering::Acquire) {
                if let Some(popped) = handed_over.take() {
                    // Back to the queues, which shutdown drains.
                    shared.schedule_from(Some(self.index), popped.task, Reason::Yielded);
                }
                break;
            }
            timer_countdown -= 1;
            if timer_countdown == 0 {
                timer_countdown = TIMER_CHECK_EVERY;
                self.fire_timers();
            }
            driver_countdown -= 1;
            if driver_countdown == 0 {
                driver_countdown = DRIVER_POLL_EVERY;
                // Busy: still dispatch IO events now and then, so that coroutines waiting for
                // IO are not starved by ones that never wait.
                self.poll_driver(Some(Duration::ZERO));
            }
            // The task that a yield handed over (see `run_task`), else the policy's next.
            let popped = match handed_over.take() {
                Some(popped) => Some(popped),
                None => shared.policy.pop(self.index),
            };
            if let Some(popped) = popped {
                spinning = false;
                look_until = None;
                if idle_books {
                    idle_books = false;
                    if let Some(w) = shared.idle.end_spin(self.index, true) {
                        shared.unpark(w);
                    }
                }
                handed_over = self.run_task(popped, counters);
                continue;
            }
            idle_books = true;
            // The clock is read only when a timer is pending (or for the look below). Work that
            // others pushed since the pop is seen by the look or by the check before sleeping.
            if self.fire_timers() && shared.policy.has_work(self.index) {
                continue;
            }
            if may_spin {
                let now = Instant::now();
                let until = match look_until {
                    Some(until) => until,
                    None => {
                        if self.driver.is_some() && self.poll_driver(Some(Duration::ZERO)) > 0 {
                            // IO made work: no need to look or sleep.
                            continue;
                        }
                        *look_until.insert(now + SPIN)
                    }
                };
                if now < until {
                    // Look a little before sleeping: waking a sleeping thread costs tens of
                    // microseconds, and work often comes right back (a coroutine on another worker
                    // answers). The worker looks as the idle protocol's spinner when the protocol
                    // lets it (then pushes do not wake a sleeper for it), and uncounted when it
                    // does not (at most half the busy workers spin: with two, one): work pinned or
                    // dealt to it can only run here, and two workers handing work back and forth
                    // would otherwise pay a wake-up on every hop. A push the look misses is seen by
                    // the re-check after `prepare_sleep`, as always.
                    if !spinning {
                        spinning = shared.idle.begin_spin(self.index);
                    }
                    for _ in 0..64 {
                        std::hint::spin_loop();
                    }
                    continue;
                }
            }
            if spinning {
                spinning = false;
                if let Some(w) = shared.idle.end_spin(self.index, false) {
                    shared.unpark(w);
                }
            }
            shared.idle.prepare_sleep(self.index);
            if shared.policy.has_work(self.index) || shared.stop.load(Ordering::Acquire) {
                shared.idle.cancel_sleep(self.index);
                shared.monitor.worker_awake();
                continue;
            }
            let mut deadline = self.timers.borrow().next_deadline();
            // Only this worker arms timers in its movable wheel: nothing armed since is missed.
            if let Some(at) = shared.movable_timers[self.index].next_deadline() {
                deadline = Some(deadline.map_or(at, |d| d.min(at)));
            }
            // A worker holding more freed task blocks or idle stacks than it keeps when idle
            // wakes up after `IDLE_RELEASE_AFTER` without work to give them back (once: then
            // it holds little). Not at once: a worker sleeps between every two bursts of a
            // busy program.
            let release_at = self
                .holds_idle_excess()
                .then(|| Instant::now() + IDLE_RELEASE_AFTER);
            if let Some(at) = release_at {
                deadline = Some(deadline.map_or(at, |d| d.min(at)));
            }
            counters.parks.fetch_add(1, Ordering::Relaxed);
            let timeout = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if self.driver.is_some() {
                // Sleeps in the driver: IO events and `unpark` (from the idle protocol's
                // notifications) both end it.
                self.poll_driver(timeout);
            } else {
                match timeout {
                    None => std::thread::park(),
                    Some(t) if !t.is_zero() => std::thread::park_timeout(t),
                    Some(_) => {}
                }
            }
            shared.idle.woke(self.index);
            shared.monitor.worker_awake();
            if release_at.is_some_and(|at| Instant::now() >= at) {
                self.release_idle_excess();
            }
            look_until = None;
        }
    }

    /// Waits up to `timeout` (`None`: until woken) in the driver and dispatches its events;
    /// returns how many. Without a driver, returns 0 at once.
    fn poll_driver(&self, timeout: Option<Duration>) -> usize {
        let Some(driver) = self.driver.as_deref() else {
            return 0;
        };
        match driver.park(timeout) {
            Ok(n) => n,
            Err(e) => {
                // The driver's own wait failed (not an operation): report it once, and sleep
                // briefly instead so that a persistent failure does not spin.
                if !self.driver_error_logged.replace(true) {
                    log::error!(
                        "worker {}: the {} IO driver's wait failed: {e}",
                        self.index,
                        driver.name()
                    );
                }
                if timeout != Some(Duration::ZERO) {
                    std::thread::park_timeout(timeout.unwrap_or(Duration::from_millis(10)));
                }
                0
            }
        }
    }

    /// Fires every due timer (the busy loop asks every 16 tasks, an idle worker before it
    /// sleeps); the clock is read only when a timer is pending. Returns whether it woke a
    /// task.
    ///
    /// The common case, no timer in either wheel, is a load and a look at the wheel, inlined;
    /// the rest is out of line.
    #[inline]
    fn fire_timers(&self) -> bool {
        (self.shared.movable_timers[self.index].any() || !self.timers.borrow().is_empty())
            && self.fire_due_timers()
    }

    /// The out-of-line part of [`fire_timers`](Self::fire_timers).
    #[inline(never)]
    fn fire_due_timers(&self) -> bool {
        let mut now = None;
        let mut woke = false;
        let movable = &self.shared.movable_timers[self.index];
        if movable.any() {
            let due = movable.take_due(*now.get_or_insert_with(Instant::now));
            if !due.is_empty() {
                woke = crate::handoff::fire(&self.shared, Some(self.index), due);
            }
        }
        let mut due = Vec::new();
        {
            let mut timers = self.timers.borrow_mut();
            let Some(next) = timers.next_deadline() else {
                return woke;
            };
            let now = *now.get_or_insert_with(Instant::now);
            if next > now {
                return woke;
            }
            timers.advance(now, |_, entry| due.push(entry));
        }
        crate::handoff::fire(&self.shared, Some(self.index), due) || woke
    }

    /// Runs a popped task until it suspends or finishes, and queues it or leaves it idle.
    /// Returns the task to run next when it yielded (popped together with its re-queueing; see
    /// `Shared::yield_and_pop`).
    fn run_task(
        &self,
        popped: Popped<TaskRef>,
        counters: &WorkerCounters,
    ) -> Option<Popped<TaskRef>> {
        let task = popped.task;
        let header = task.header();
        if !header.start_running() {
            return None;
        }
        if popped.inherit_slice {
            // A task handed the worker through the run-next slot (woken or spawned by the task
            // before it) runs on in that task's slice: the chain of hand-offs shares one slice
            // (Go's rule), which ends when its time is over, however cheap or costly each link
            // is — so a chain of short links gets as much of the worker's time as one of long
            // links, not a fixed number of operations. Each hand-off counts as one operation,
            // so that the budget runs out now and then and the time is looked at even in a
            // chain that makes no budgeted operation (plain wake-ups and parks): such a pair
            // would otherwise keep the slot, and the worker, for ever. Once the slice is over
            // (or a slice of its own spent its operations before the first hand-off), the task
            // goes behind the worker's queues as a yield would, and the next task starts a
            // fresh slice.
            let left = counters.budget.left();
            if left > 1 {
                // Only this thread counts the budget down (see `spindle_park::Budget`).
                counters.budget.refill(left - 1);
            } else if self.chained.get() && !counters.slice_over() {
                counters.budget.refill(BUDGET);
            } else {
                return self.shared.yield_and_pop(self.index, task);
            }
            self.chained.set(true);
        } else {
            counters.start_slice(BUDGET);
            self.chained.set(false);
        }
        if header.registry_key.load(Ordering::Relaxed) == crate::registry::Key::NONE.to_bits() {
            self.first_run(&task);
        }
        counters.begin_run(header.id);
        self.current.set(&task);
        self.current_header.set(header);
        // SAFETY: we hold the task (popped it; not complete), on this worker's own stack.
        let outcome = unsafe { task.run(&self.carriers) };
        self.current_header.set(ptr::null());
        self.current.set(ptr::null());
        counters.end_run();
        match outcome {
            // (`Finished` is handled by the task's `run`.)
            None | Some(Suspend::Finished(_)) => None,
            Some(Suspend::Yield) => {
                self.register_once(&task);
                // Back to a queue as it is: queued and running are one state (see `task`).
                self.shared.yield_and_pop(self.index, task)
            }
            Some(Suspend::Pause) => {
                // Its chain's slice goes on: it runs next, as the run-next slot's task would
                // (the budget is refilled then). Registered as a yield would be: shutdown
                // puts it back in a queue if it comes first.
                self.register_once(&task);
                Some(Popped {
                    task,
                    inherit_slice: true,
                })
            }
            Some(Suspend::Park(deadline)) => {
                // Before the task can be seen idle, or woken and run elsewhere.
                self.register_once(&task);
                if let Some(deadline) = deadline {
                    let entry = TimerEntry {
                        task: task.clone(),
                        seq: header.park_seq.load(Ordering::Relaxed),
                    };
                    // A migratable task's timer goes where other threads may fire it while
                    // this worker is kept by a coroutine (see `handoff`).
                    let at = if header.migratable {
                        let key = self.shared.movable_timers[self.index].insert(deadline, entry);
                        (self.index | MOVABLE, key)
                    } else {
                        (self.index, self.timers.borrow_mut().insert(deadline, entry))
                    };
                    header.timer.set(Some(at));
                }
                // Invariant 1: published as idle only now that its context is saved.
                if header.park_done() {
                    self.shared
                        .schedule_from(Some(self.index), task, Reason::Woken);
                } else {
                    // Idle: our reference stays with the idle state, for whoever wakes it.
                    task.into_idle();
                }
                None
            }
        }
    }

    /// What happens once per task, before its first run: it is pinned here unless migratable
    /// (invariant 2), and a named task is registered (see `registry`: the monitor's report
    /// finds a task's name there). Any other task gets a slot only when it first suspends
    /// ([`register`](Self::register), from `run_task`).
    fn first_run(&self, task: &TaskRef) {
        let header = task.header();
        if !header.migratable {
            header.home.store(self.index, Ordering::Release);
        }
        if header.name.is_some() {
            self.register(task);
            return;
        }
        header.registry_key.store(
            crate::registry::Key::UNREGISTERED.to_bits(),
            Ordering::Relaxed,
        );
        // A task that starts once shutdown has begun is cancelled before it runs (its closure
        // is dropped, never called). One that starts just as shutdown begins, before this
        // load can see `closing`, runs until it ends or suspends: at its first suspension it
        // registers, and `register`'s look at `closing` catches it.
        if self.shared.closing.load(Ordering::Acquire) {
            Self::cancel_for_shutdown(header);
        }
    }

    /// Gives the task this worker runs (or has just suspended, its context saved but not yet
    /// published) a registry slot, so that shutdown can cancel it.
    #[cold]
    fn register(&self, task: &TaskRef) {
        let header = task.header();
        let key = self.shared.tasks.insert(self.index, task);
        header.registry_key.store(key.to_bits(), Ordering::Relaxed);
        // After the insert: shutdown sets `closing`, then cancels what its snapshot of the
        // registry holds. Either the snapshot holds this task, or (the insert's lock taken
        // after the snapshot's) this load sees `closing`.
        if self.shared.closing.load(Ordering::Acquire) {
            Self::cancel_for_shutdown(header);
        }
    }

    /// [`register`](Self::register)s a task that has just suspended for the first time.
    #[inline]
    fn register_once(&self, task: &TaskRef) {
        let unregistered = crate::registry::Key::UNREGISTERED.to_bits();
        if task.header().registry_key.load(Ordering::Relaxed) == unregistered {
            self.register(task);
        }
    }

    /// Cancels a task this worker holds (runs, or has suspended and not yet published).
    fn cancel_for_shutdown(header: &crate::task::Header) {
        // The task is `ACTIVE` (we hold it): this only sets the flags, it pushes nothing.
        let pushed = header.notify(crate::task::State::CANCELLED | crate::task::State::NOTIFIED);
        debug_assert!(!pushed, "a task held by its worker is ACTIVE");
    }

    /// This worker's shared stack region (a handle; made on first use). An error if it cannot
    /// be mapped (a size out of range, no memory): the shared-stack coroutine that asked then
    /// cannot start, and its join reports why; a later one tries again.
    #[cfg(feature = "stack-shared")]
    pub(crate) fn shared_region(
        &self,
    ) -> Result<spindle_stack::SharedStack, spindle_stack::StackError> {
        let mut region = self.region.borrow_mut();
        if let Some(region) = &*region {
            return Ok(region.clone());
        }
        let made = spindle_stack::SharedStack::new(self.shared.shared_stack_size)?;
        Ok(region.insert(made).clone())
    }

    /// Whether this worker holds more than it keeps when idle (see `IDLE_RELEASE_AFTER`).
    fn holds_idle_excess(&self) -> bool {
        crate::task_alloc::held() > crate::task_alloc::IDLE_BYTES
            || self.carriers.len() > crate::carrier::IDLE_KEEP
            || self
                .shared
                .holds_idle_stacks_beyond(IDLE_STACKS_IN_THREAD, IDLE_STACKS_SHARED)
    }

    /// Gives back what a spike left: task blocks and stacks (of every size the runtime pools)
    /// beyond the idle amounts.
    fn release_idle_excess(&self) {
        // Idle carriers hold stacks: those beyond the idle allowance go back to the pool
        // first, which the shrink then trims.
        self.carriers.trim(&self.shared, crate::carrier::IDLE_KEEP);
        crate::task_alloc::trim(crate::task_alloc::IDLE_BYTES);
        self.shared
            .shrink_stacks(IDLE_STACKS_IN_THREAD, IDLE_STACKS_SHARED);
    }

    /// Ends a level of cancel deferral of task `task`, which is not the running one: its
    /// `CancelGuard` was dropped by other code of this thread (a thread-local handed it over).
    ///
    /// Its depth is a plain cell that only code on the task's thread touches: so this is done
    /// only for a task pinned to this worker, which cannot run while this code does. A
    /// migratable task may be running on another worker now: its deferral is left in place
    /// (`Builder::migratable` says so). A task that has finished needs nothing; one that has
    /// a pending cancel and no deferral left is woken to carry the cancel out, as its own drop
    /// of the guard would have made its next park do.
    #[cold]
    #[inline(never)]
    fn end_others_cancel_deferral(&self, task: u64) {
        // The guard was made on this thread by a coroutine that has switched away since, at a
        // suspension, which gave it a registry slot (see `register_once`).
        let Some(task) = self.shared.tasks.find(task) else {
            return;
        };
        let header = task.header();
        if header.migratable || header.home.load(Ordering::Acquire) != self.index {
            return;
        }
        let depth = header.no_cancel.get().saturating_sub(1);
        header.no_cancel.set(depth);
        if depth == 0 && header.load() & crate::task::State::CANCELLED != 0 {
            crate::join::cancel_task(&task);
        }
    }

    /// Cancels a timer of this worker (a parked task was woken before its deadline).
    fn cancel_timer(&self, key: TimerKey) {
        drop(self.timers.borrow_mut().cancel(key));
    }
}

impl Hook for WorkerCtx {
    fn in_task(&self) -> bool {
        self.coroutine_running()
    }

    fn park(&self, deadline: Option<Instant>) -> Wake {
        park_current(self.current_header.get(), deadline)
    }

    fn try_park(&self, deadline: Option<Instant>) -> Option<Wake> {
        let header = self.current_header.get();
        // One read answers `in_task` too: a coroutine runs iff its header is set.
        (!header.is_null()).then(|| park_current(header, deadline))
    }

    fn waker(&self) -> Waker {
        self.try_waker().unwrap_or_else(|| Waker::noop().clone())
    }

    fn try_waker(&self) -> Option<Waker> {
        // This worker's running task, read from `self` (no second thread-local lookup); one
        // read answers `in_task` too.
        let task = self.current.get();
        // SAFETY: non-null only while `run_task` runs the task, with the handle alive on its
        // stack; the caller is the running coroutine (the hook is this thread's).
        (!task.is_null()).then(|| unsafe { (*task).clone() }.waker())
    }

    fn will_wake(&self, waker: &Waker) -> bool {
        crate::task::is_waker_of(waker, self.current_header.get())
    }

    fn try_will_wake(&self, waker: &Waker) -> bool {
        // `is_waker_of` is false for a null header: outside a coroutine.
        crate::task::is_waker_of(waker, self.current_header.get())
    }

    fn defer_cancel(&self, defer: bool) {
        // SAFETY: only called when `in_task` is true: the running coroutine's header, kept
        // alive by this worker while it runs.
        let header = unsafe { &*self.current_header.get() };
        let depth = header.no_cancel.get();
        header.no_cancel.set(if defer {
            depth + 1
        } else {
            depth.saturating_sub(1)
        });
    }

    fn begin_cancel_deferral(&self) -> u64 {
        // SAFETY: as in `defer_cancel`.
        let header = unsafe { &*self.current_header.get() };
        header.no_cancel.set(header.no_cancel.get() + 1);
        header.id
    }

    fn end_cancel_deferral(&self, task: u64) {
        let header = self.current_header.get();
        // SAFETY: non-null only while the worker runs that coroutine and keeps its task alive;
        // the caller is that coroutine (a worker runs nothing else while one runs).
        match unsafe { header.as_ref() } {
            Some(header) if header.id == task => {
                header
                    .no_cancel
                    .set(header.no_cancel.get().saturating_sub(1));
            }
            _ => self.end_others_cancel_deferral(task),
        }
    }

    fn cancel_requested(&self) -> bool {
        // SAFETY: as in `defer_cancel`.
        let header = unsafe { &*self.current_header.get() };
        header.load() & crate::task::State::CANCELLED != 0
    }

    fn checkpoint(&self) {
        // SAFETY: as in `defer_cancel`.
        let header = unsafe { &*self.current_header.get() };
        if header.should_unwind() {
            crate::coop::cancel_unwind(header);
        }
    }

    fn consume_budget(&self) {
        crate::coop::budget_used_up(self);
    }

    fn pin(&self, pin: bool) {
        // SAFETY: as in `defer_cancel`.
        let header = unsafe { &*self.current_header.get() };
        if !header.migratable {
            // Pinned to its first worker for life anyway (invariant 2).
            return;
        }
        let depth = header.pins.get();
        if pin {
            if depth == 0 {
                // Wake-ups route a task with a home to that worker's queue, and stealing
                // leaves it alone: exactly "stay here".
                header.home.store(self.index, Ordering::Release);
            }
            header.pins.set(depth + 1);
        } else {
            header.pins.set(depth.saturating_sub(1));
            if depth == 1 {
                header.home.store(NO_HOME, Ordering::Release);
            }
        }
    }

    fn on_copying_stack(&self) -> bool {
        // SAFETY: as in `defer_cancel`.
        unsafe { (*self.current_header.get()).copying }
    }
}

/// Parks the running coroutine (see `spindle_park`'s contract): consumes the permit, or
/// suspends until woken, timed out or cancelled.
// Inlined into `Hook::park`: one frame fewer across the switch (see `coop::yield_now`).
#[inline]
fn park_current(header: *const Header, deadline: Option<Instant>) -> Wake {
    // SAFETY: called by the running coroutine, whose worker keeps the task alive.
    let header = unsafe { &*header };
    if header.should_unwind() {
        crate::coop::cancel_unwind(header);
    }
    if header.take_permit() {
        // Completed at once: it counts against the slice's budget (see `coop`). A park that
        // suspends does not: it gave its worker up.
        spindle_park::consume_budget();
        return Wake::Woken;
    }
    if let Some(deadline) = deadline
        && Instant::now() >= deadline
    {
        return Wake::TimedOut;
    }
    // Only this coroutine writes its park number: a load and a store, no read-modify-write.
    let seq = header.park_seq.load(Ordering::Relaxed);
    header
        .park_seq
        .store(seq.wrapping_add(1), Ordering::Release);
    if !suspend_current(header, Suspend::Park(deadline)) {
        return Wake::Woken;
    }
    // Resumed — possibly on another worker if the task is migratable: use no worker state
    // from before the switch. A migratable task's timer is in the movable wheel of the worker
    // it parked on, which any thread may cancel from; any other task's is in the own wheel of
    // its home worker, where it resumed.
    if let Some((worker, key)) = header.timer.take()
        && let Some(ctx) = current()
        && header.belongs_to(&ctx.shared)
    {
        if worker & MOVABLE != 0 {
            cancel_movable_timer(&ctx.shared, worker & !MOVABLE, key);
        } else if ctx.index == worker {
            ctx.cancel_timer(key);
        } else {
            // Not reached: a task that is not migratable resumes on its home worker, which
            // armed the timer. (Left alone, the entry fires at its deadline and finds the park
            // over; a key of another worker's wheel must not be cancelled in this one.)
            debug_assert!(
                false,
                "a pinned task resumed away from the worker of its timer"
            );
        }
    }
    // Something moved the task out of idle: a wake-up (which leaves no permit then: the resume
    // is the wake-up; see `Header::notify`), a cancel (unwinds here, unless deferred: then this
    // is its one wake-up) or the timer (which marks it). Read (and cleared) before a cancel
    // unwinds, so that no mark outlives this park.
    let wake = header.resumed();
    if header.should_unwind() {
        crate::coop::cancel_unwind(header);
    }
    wake
}

/// Cancels timer `key` of worker `owner`'s movable wheel (a migratable task's park resumed).
#[cold]
#[inline(never)]
fn cancel_movable_timer(shared: &Shared, owner: usize, key: TimerKey) {
    if let Some(timers) = shared.movable_timers.get(owner) {
        // The entry's task reference is dropped after the wheel's lock.
        drop(timers.cancel(key));
    }
}

/// Switches from the running coroutine back to its worker with `why`. Returns false, without
/// switching, if the coroutine can no longer suspend: its body is over (the yielder is
/// cleared once its last user value is dropped, so no user code should get here; a park then
/// returns at once, as a spurious wake-up).
#[inline]
pub(crate) fn suspend_current(header: &Header, why: Suspend) -> bool {
    let yielder = header.yielder.load(Ordering::Acquire);
    if yielder.is_null() {
        return false;
    }
    // SAFETY: the yielder lives on the running coroutine's stack (set at its start, cleared at
    // its end), and we are that coroutine.
    unsafe { (*yielder).suspend(why) };
    true
}
