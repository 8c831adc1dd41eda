//! A task: one coroutine under the runtime, its state machine, its waker and its result.
//!
//! # The state word
//!
//! Every task has one atomic word of flags ([`State`]). It decides who may touch the coroutine
//! and whether a wake-up must schedule the task:
//!
//! | flags | meaning |
//! |---|---|
//! | none ("idle") | parked: in no queue, not running; only a wake-up or its timer brings it back |
//! | `ACTIVE` | scheduled: in a run queue, being pushed to one, or running — one party (a queue or the worker running it) holds the task |
//! | `NOTIFIED` | the wake-up permit of `spindle_park` (set by the waker, consumed by `park`) |
//! | `CANCELLED` | `JoinHandle::cancel` was called |
//! | `COMPLETE` | the coroutine finished; the result is in the join cell |
//!
//! Transitions (compare-and-swap loops):
//! * **wake** (the task's `Waker`, any thread): set `NOTIFIED`; if idle, also set `ACTIVE` and
//!   push the task to the policy. If active, the permit is all it takes.
//! * **timer fire** (the worker that owns the timer): if idle, set `ACTIVE` and push (no permit:
//!   the parked code then sees its deadline passed).
//! * **cancel**: like wake, plus `CANCELLED`.
//! * **pop**, **yield** (back to a queue): no change. Queued and running are one state: a
//!   task is pushed only by whoever moved it out of idle (one CAS decides) or by the worker
//!   that runs it (a yield, a spawn), so it is in at most one queue or on one worker at a time,
//!   and only the worker that popped it touches its coroutine. (It was two flags, with a CAS
//!   on every pop and two per yield to move between them; nothing read the difference.)
//! * **suspended** (the worker, on its own stack, after the coroutine switched back): `ACTIVE`
//!   → idle — unless `NOTIFIED` or `CANCELLED` arrived while it ran, then it stays `ACTIVE` and
//!   is pushed again. This is invariant 1, *suspend, then publish*: a task becomes idle — the
//!   state in which a waker schedules it — only after its context is saved, so no worker can
//!   resume a coroutine that is still running. A wake-up that comes earlier finds `ACTIVE` and
//!   leaves the permit, which the worker sees here.
//! * **finished**: → `COMPLETE`.

use std::any::Any;
use std::cell::{Cell, UnsafeCell};
use std::fmt;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Wake, Waker};
use std::time::Instant;

#[cfg(feature = "stack-shared")]
use spindle_coro::Coroutine;
use spindle_coro::{CoroutineResult, SendCoroutine, Yielder};
#[cfg(feature = "stack-shared")]
use spindle_stack::SharedSlot;

use crate::runtime::Shared;
use crate::runtime::StackKind;
use crate::spawn::TaskStack;

/// The flags of the state word (see the module docs).
pub(crate) struct State;

impl State {
    pub(crate) const ACTIVE: u32 = 1;
    pub(crate) const NOTIFIED: u32 = 1 << 2;
    pub(crate) const CANCELLED: u32 = 1 << 3;
    pub(crate) const COMPLETE: u32 = 1 << 4;
}

/// Why a coroutine switched back to its worker.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Suspend {
    /// `yield_now` or an exhausted budget: back to the end of the queue.
    Yield,
    /// `spindle_park::park`: idle until woken, or until the deadline (a timer).
    Park(Option<Instant>),
}

/// The yielder type of every task's coroutine.
pub(crate) type TaskYielder = Yielder<(), Suspend>;

/// What a panic, a cancellation or a missing stack leaves as a task's outcome.
pub(crate) enum Failure {
    Panicked(Box<dyn Any + Send>),
    Cancelled,
    /// No stack could be had when the coroutine was to start.
    NoStack(std::io::Error),
}

/// The payload of the unwind that cancels a coroutine. Private: user code sees only "not mine".
pub(crate) struct CancelUnwind;

/// What every task has, whatever its result type.
///
/// `repr(C)`, in this order: what a worker and a yield touch every time (state to pins) come
/// first, in one 64-byte line of the task's allocation, so that switching among many tasks
/// misses the cache as little as it can; spawn-, park- and finish-time fields follow.
#[repr(C)]
pub(crate) struct Header {
    pub(crate) state: AtomicU32,
    /// Depth of `CancelGuard`s held by the running coroutine: cancellation waits while > 0.
    pub(crate) no_cancel: Cell<u32>,
    /// The worker the task must run on (`NO_HOME`: any).
    pub(crate) home: AtomicUsize,
    /// The yielder of the running coroutine (set by the coroutine at its start).
    pub(crate) yielder: AtomicPtr<TaskYielder>,
    pub(crate) id: u64,
    /// Incremented by every park with a deadline; a timer entry carries the value it was made
    /// with, so a timer left over from an earlier park wakes nothing.
    pub(crate) park_seq: AtomicU64,
    /// Depth of `spindle_park::PinGuard`s held by a migratable coroutine: while > 0 its home
    /// is the worker it runs on (touched only by the running coroutine).
    pub(crate) pins: Cell<u32>,
    /// The task may move to another worker at any suspension point (the `unsafe` builder
    /// option), so it never gets a home.
    pub(crate) migratable: bool,
    /// The coroutine runs on a copying (shared) stack.
    pub(crate) copying: bool,
    /// Where the task sits in the runtime's registry (`registry::Key` bits), written once at
    /// spawn before the task is scheduled, read when it finishes (the queues' hand-off orders
    /// the two).
    pub(crate) registry_key: AtomicU64,
    /// The runtime: set at spawn, then read through [`Header::shared`] only (see there).
    pub(crate) shared: ptr::NonNull<Shared>,
    /// The timer armed by the current park: (worker, key). Written by the worker after the
    /// coroutine parked, read by the coroutine when it resumes (never at the same time).
    pub(crate) timer: Cell<Option<(usize, spindle_timer::TimerKey)>>,
    pub(crate) name: Option<Arc<str>>,
    /// This task's coroutine-local values (touched only by the running coroutine).
    pub(crate) locals: UnsafeCell<crate::local::Locals>,
}

// SAFETY: `no_cancel`, `pins`, `timer` and `locals` are only touched by the coroutine of this task while it runs,
// and a task runs on one thread at a time (it is in at most one queue or on one worker: see the
// module docs; the hand-off between workers goes through the policy's queues, which
// synchronize).
// Everything else is atomic or immutable.
unsafe impl Sync for Header {}

/// No home: the task may run on any worker.
pub(crate) const NO_HOME: usize = usize::MAX;

impl Header {
    pub(crate) fn load(&self) -> u32 {
        self.state.load(Ordering::Acquire)
    }

    /// Moves the state with `f` until the CAS succeeds; returns (old, new).
    fn update(&self, mut f: impl FnMut(u32) -> Option<u32>) -> Option<(u32, u32)> {
        let mut current = self.state.load(Ordering::Acquire);
        loop {
            let next = f(current)?;
            match self.state.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some((current, next)),
                Err(actual) => current = actual,
            }
        }
    }

    /// Sets `extra` (NOTIFIED, CANCELLED) and, if the task is idle, ACTIVE. Returns true if the
    /// caller must push the task.
    pub(crate) fn notify(&self, extra: u32) -> bool {
        self.update(|s| {
            if s & State::COMPLETE != 0 {
                return None;
            }
            let mut next = s | extra;
            if s & State::ACTIVE == 0 {
                next |= State::ACTIVE;
            }
            (next != s).then_some(next)
        })
        .is_some_and(|(old, new)| old & State::ACTIVE == 0 && new & State::ACTIVE != 0)
    }

    /// A timer fired for park number `seq`: schedules the task if it is still idle in that park.
    pub(crate) fn timer_fired(&self, seq: u64) -> bool {
        if self.park_seq.load(Ordering::Acquire) != seq {
            return false;
        }
        self.update(|s| (s & (State::ACTIVE | State::COMPLETE) == 0).then_some(s | State::ACTIVE))
            .is_some()
    }

    /// A worker popped the task: false if it is already complete (a stale queue entry cannot
    /// exist, but be defensive). No write: queued and running are one state (module docs).
    pub(crate) fn start_running(&self) -> bool {
        self.state.load(Ordering::Acquire) & State::COMPLETE == 0
    }

    /// After a park: `ACTIVE` → idle, or stays `ACTIVE` if a wake-up or a cancel came meanwhile.
    /// Returns true if the caller must push the task again.
    pub(crate) fn park_done(&self) -> bool {
        // `update` gives up (None) when the closure does: the task stays ACTIVE, nothing written.
        self.update(|s| {
            // A cancel the coroutine defers (a `CancelGuard`) already woke it once (it sets
            // NOTIFIED too); re-queueing for it on every park would spin.
            let cancel_now = s & State::CANCELLED != 0 && self.no_cancel.get() == 0;
            let stays = s & State::NOTIFIED != 0 || cancel_now;
            (!stays).then_some(s & !State::ACTIVE)
        })
        .is_none()
    }

    pub(crate) fn complete(&self) {
        self.update(|s| Some((s & !State::ACTIVE) | State::COMPLETE));
    }

    /// Consumes the permit, if set. Looks first: a park usually finds none, and then costs no
    /// read-modify-write (a permit set after the look is seen by `park_done`, which re-queues).
    pub(crate) fn take_permit(&self) -> bool {
        self.state.load(Ordering::Relaxed) & State::NOTIFIED != 0
            && self.state.fetch_and(!State::NOTIFIED, Ordering::AcqRel) & State::NOTIFIED != 0
    }

    /// Whether a cancel was requested and may be acted on now.
    pub(crate) fn should_unwind(&self) -> bool {
        self.load() & State::CANCELLED != 0 && self.no_cancel.get() == 0
    }

    /// The task's runtime.
    ///
    /// A pointer, not an `Arc`: a clone per spawn and a drop per task were two atomic
    /// read-modify-writes on the one cache line of the runtime's reference count, which every
    /// worker writes. What keeps the runtime alive instead is the registry: **a task's runtime
    /// outlives the task's stay in the registry** — shutdown waits until the registry is empty,
    /// and leaks the runtime's shared state when it gives up waiting (`Runtime::shutdown`).
    /// Callers reach the runtime only while the task is in the registry: it enters at spawn,
    /// before anything can see it, and leaves in `TaskPrefix::finish`, right after `COMPLETE`
    /// is set; so "not `COMPLETE`" (a successful `notify` or `timer_fired` — which also keeps it
    /// from completing until the caller has pushed it —, the task running its coroutine or
    /// parking) or "inside `finish`, before the removal" suffices.
    #[inline]
    pub(crate) fn shared(&self) -> &Shared {
        // SAFETY: see above; every caller is in one of the listed situations.
        unsafe { self.shared.as_ref() }
    }

    /// Whether the task belongs to the runtime of `shared` (compares addresses; dereferences
    /// nothing).
    pub(crate) fn belongs_to(&self, shared: &Shared) -> bool {
        ptr::eq(self.shared.as_ptr(), shared)
    }

    pub(crate) fn home(&self) -> Option<usize> {
        match self.home.load(Ordering::Acquire) {
            NO_HOME => None,
            w => Some(w),
        }
    }
}

/// What the runtime needs of a task, whatever its result type.
///
/// # Safety
///
/// The implementing type starts with a [`TaskPrefix<T>`] (`#[repr(C)]`, prefix first), `T`
/// being its result type: [`TaskRef::header`] reads the header through the data pointer,
/// without a virtual call, and [`TypedTask::join`] the join cell.
pub(crate) unsafe trait RawTask: Send + Sync + 'static {
    /// Runs the coroutine until it suspends or finishes.
    ///
    /// # Safety
    ///
    /// The caller holds the task (it popped it and `start_running` succeeded)
    /// and runs on a worker thread of the task's runtime, on the worker's own stack.
    unsafe fn run(&self) -> Option<Suspend>;

    /// A waker for this task.
    fn waker(self: Arc<Self>) -> Waker;
}

/// A task as the policies see it.
#[derive(Clone)]
pub(crate) struct TaskRef(pub(crate) Arc<dyn RawTask>);

impl TaskRef {
    #[inline]
    pub(crate) fn header(&self) -> &Header {
        // SAFETY: every `RawTask` starts with its header (the trait's contract), so the data
        // pointer of the `Arc` points to a live `Header` for as long as `self` is borrowed.
        unsafe { &*Arc::as_ptr(&self.0).cast::<Header>() }
    }
}

impl spindle_sched::Task for TaskRef {
    fn home(&self) -> Option<usize> {
        self.header().home()
    }
}

impl fmt::Debug for TaskRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Task")
            .field("id", &self.header().id)
            .finish()
    }
}

/// The result of a task, shared with its `JoinHandle`.
pub(crate) struct JoinCell<T> {
    pub(crate) slot: spindle_park::spin::SpinLock<JoinSlot<T>>,
}

pub(crate) struct JoinSlot<T> {
    pub(crate) result: Option<Result<T, Failure>>,
    /// The result was produced (it may have been taken since).
    pub(crate) done: bool,
    /// Who waits in `join`.
    pub(crate) waiter: Option<Waker>,
}

/// A task's coroutine on a guarded stack of its own.
pub(crate) type OwnCoroutine<T> = SendCoroutine<(), Suspend, Result<T, Failure>, TaskStack>;

/// A task's coroutine on its worker's shared (copying) stack.
#[cfg(feature = "stack-shared")]
pub(crate) type SharedCoroutine<T> = Coroutine<(), Suspend, Result<T, Failure>, SharedSlot>;

/// The coroutine of a task running closure `F`, and what becomes of it.
///
/// The closure waits here, in the task's own allocation, until the coroutine is made: one
/// allocation per spawn, not two (a boxed maker closure was the second).
pub(crate) enum Body<T, F> {
    /// On a stack of its own, not made yet: the worker that first runs the task takes a stack
    /// of this kind (`None`: the runtime's pool) and makes the coroutine on it. Taking the
    /// stack late keeps a burst of spawns from holding a stack each before any of them runs:
    /// they run one after another on the same few (cache-warm) pooled stacks.
    OwnPending(Option<StackKind>, F),
    /// On a stack of its own (made at spawn or at the first run; may start on any worker).
    Own(OwnCoroutine<T>),
    /// On a shared stack, not made yet: the home worker makes it on its region. Only made by
    /// a spawn that accepted `Builder::shared_stack`'s contract.
    #[cfg(feature = "stack-shared")]
    SharedPending(F),
    /// On a shared stack, made.
    #[cfg(feature = "stack-shared")]
    Shared(ThreadBound<SharedCoroutine<T>>),
    /// Finished or dropped.
    Gone,
}

/// A value that stays on one thread although the type system cannot see it.
#[cfg(feature = "stack-shared")]
pub(crate) struct ThreadBound<C>(pub(crate) C);

// SAFETY: used only for shared-stack coroutines. Such a task is pinned to its home worker at
// spawn (it never gets another home, and policies run a homed task only on its home), its
// coroutine is made on that worker at its first run and resumed and dropped only there: it
// finishes there, and while it is alive the runtime's registry holds the task, so the last
// reference to an unfinished task is never dropped elsewhere (at a shutdown timeout the task
// is leaked instead).
#[cfg(feature = "stack-shared")]
unsafe impl<C> Send for ThreadBound<C> {}

/// What a task with result type `T` has whatever its closure: the header and the join cell.
/// `repr(C)`, header first: the start of every task (see [`RawTask`]).
#[repr(C)]
pub(crate) struct TaskPrefix<T> {
    pub(crate) header: Header,
    pub(crate) join: JoinCell<T>,
}

/// A task with result type `T` running closure `F`. `repr(C)`, the prefix first: see
/// [`RawTask`].
#[repr(C)]
pub(crate) struct TaskCell<T, F> {
    pub(crate) prefix: TaskPrefix<T>,
    /// Touched only by the worker that popped the task (see `RawTask::run`).
    body: UnsafeCell<Body<T, F>>,
}

// SAFETY: `body` is only accessed by the worker that popped the task (one at a time: a task is
// in at most one queue or on one worker, see the module docs; synchronized by the queues'
// hand-off); the closure in it is
// `Send`, and the coroutine is a `SendCoroutine`, whose contract the spawn path upholds (see
// `spawn::own_coroutine`), or a shared-stack one that never leaves its worker (`ThreadBound`).
// The rest is Sync.
unsafe impl<T: Send, F: Send> Sync for TaskCell<T, F> {}
// SAFETY: as above.
unsafe impl<T: Send, F: Send> Send for TaskCell<T, F> {}

// SAFETY: `TaskCell` is `repr(C)` with its prefix first, and the prefix is `repr(C)` with the
// header first.
unsafe impl<T, F> RawTask for TaskCell<T, F>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    unsafe fn run(&self) -> Option<Suspend> {
        // SAFETY: the caller holds the task (popped it), so nobody else touches the body.
        let body = unsafe { &mut *self.body.get() };
        let header = &self.prefix.header;
        // Resumed in place: the coroutine struct is not moved out of the task and back on every
        // switch.
        let result = match body {
            Body::Own(co) => co.get_mut().resume(()),
            Body::OwnPending(..) => {
                let Body::OwnPending(kind, f) = std::mem::replace(body, Body::Gone) else {
                    unreachable!()
                };
                match crate::spawn::stack_for(header.shared(), kind) {
                    Ok(stack) => {
                        *body = Body::Own(crate::spawn::own_coroutine(header, f, stack));
                        let Body::Own(co) = body else { unreachable!() };
                        co.get_mut().resume(())
                    }
                    Err(e) => {
                        // The closure is dropped here, on the worker, without having run.
                        drop(f);
                        self.prefix.finish(Err(Failure::NoStack(e.into())));
                        return None;
                    }
                }
            }
            #[cfg(feature = "stack-shared")]
            Body::Shared(ThreadBound(co)) => co.resume(()),
            #[cfg(feature = "stack-shared")]
            Body::SharedPending(_) => {
                let Body::SharedPending(f) = std::mem::replace(body, Body::Gone) else {
                    unreachable!()
                };
                let Some(region) = crate::worker::current().map(|w| w.shared_region()) else {
                    unreachable!("tasks run on worker threads")
                };
                let b = crate::spawn::coroutine_builder(header);
                // SAFETY: `SharedPending` is only made by a spawn whose caller accepted
                // `Builder::shared_stack`'s contract, which is `Coroutine::with_shared_stack`'s;
                // the runtime itself lends nothing on a coroutine's stack (waiters and wakers
                // live in heap task state).
                let co = unsafe { b.build_shared(&region, coroutine_body(header, f)) };
                *body = Body::Shared(ThreadBound(co));
                let Body::Shared(ThreadBound(co)) = body else {
                    unreachable!()
                };
                co.resume(())
            }
            Body::Gone => return None,
        };
        if matches!(result, CoroutineResult::Return(_)) {
            // Finished: drop the coroutine now, which returns its stack.
            *body = Body::Gone;
        }
        match result {
            CoroutineResult::Yield(why) => Some(why),
            CoroutineResult::Return(outcome) => {
                self.prefix.finish(outcome);
                None
            }
        }
    }

    fn waker(self: Arc<Self>) -> Waker {
        Waker::from(self)
    }
}

impl<T> TaskPrefix<T> {
    /// Publishes the outcome and wakes the joiner.
    fn finish(&self, outcome: Result<T, Failure>) {
        self.header.complete();
        // Leave the registry first, so that whoever the result wakes sees the task gone.
        let key = self.header.registry_key.load(Ordering::Relaxed);
        self.header
            .shared()
            .tasks
            .remove(crate::registry::Key::from_bits(key));
        let waiter = {
            let mut slot = self.join.slot.lock();
            slot.result = Some(outcome);
            slot.done = true;
            slot.waiter.take()
        };
        if let Some(w) = waiter {
            w.wake();
        }
    }
}

impl<T, F> Wake for TaskCell<T, F>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    fn wake(self: Arc<Self>) {
        if self.prefix.header.notify(State::NOTIFIED) {
            // The runtime outlives the task's next run (see `Header::shared`), and `self` moves.
            let shared: *const Shared = self.prefix.header.shared();
            // SAFETY: as just said.
            unsafe { (*shared).schedule(TaskRef(self), spindle_sched::Reason::Woken) };
        }
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.prefix.header.notify(State::NOTIFIED) {
            self.prefix
                .header
                .shared()
                .schedule(TaskRef(self.clone()), spindle_sched::Reason::Woken);
        }
    }
}

/// A task whose result type is known: what a `JoinHandle` and a scope hold. Made only by
/// [`new_task`], with the task it describes, so `T` is that task's result type.
pub(crate) struct TypedTask<T> {
    task: TaskRef,
    /// Send and Sync as a shared join cell of `T` would be (the task itself is).
    _result: std::marker::PhantomData<Arc<JoinCell<T>>>,
}

impl<T> Clone for TypedTask<T> {
    fn clone(&self) -> Self {
        TypedTask {
            task: self.task.clone(),
            _result: std::marker::PhantomData,
        }
    }
}

impl<T> TypedTask<T> {
    pub(crate) fn header(&self) -> &Header {
        self.task.header()
    }

    pub(crate) fn join(&self) -> &JoinCell<T> {
        // SAFETY: the task is a `TaskCell<T, F>` for this `T` (see the type's docs), which
        // starts with a `TaskPrefix<T>` (`RawTask`'s contract), alive while `self` is.
        unsafe { &(*Arc::as_ptr(&self.task.0).cast::<TaskPrefix<T>>()).join }
    }

    pub(crate) fn task_ref(&self) -> &TaskRef {
        &self.task
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding one of our internal locks cannot leave its data inconsistent (the
    // critical sections only move values in and out), so poisoning is ignored.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The body of every task's coroutine: records the yielder, runs the closure, catches panics
/// and cancellation, drops coroutine-locals.
pub(crate) fn coroutine_body<T, F>(
    header: *const Header,
    f: F,
) -> impl FnOnce(&TaskYielder, ()) -> Result<T, Failure> + 'static
where
    F: FnOnce() -> T + 'static,
    T: 'static,
{
    let header = SendPtr(header);
    move |yielder: &TaskYielder, ()| {
        let header = header;
        // SAFETY: the task (and so its header) outlives its coroutine: the coroutine is a field
        // of the task.
        let header: &Header = unsafe { &*header.0 };
        header
            .yielder
            .store(ptr::from_ref(yielder).cast_mut(), Ordering::Release);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if header.should_unwind() {
                // Cancelled before it ever ran: do not run the closure at all.
                std::panic::resume_unwind(Box::new(CancelUnwind));
            }
            f()
        }));
        // Coroutine-locals die with the coroutine, on its stack, before it finishes.
        let locals = header.locals.get();
        let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: the running coroutine's own locals; nothing borrows them now.
            unsafe { crate::local::Locals::clear(locals) }
        }));
        header.yielder.store(ptr::null_mut(), Ordering::Release);
        match outcome {
            Ok(value) => match dropped {
                Ok(()) => Ok(value),
                Err(payload) => Err(Failure::Panicked(payload)),
            },
            Err(payload) if payload.is::<CancelUnwind>() => Err(Failure::Cancelled),
            Err(payload) => Err(Failure::Panicked(payload)),
        }
    }
}

/// A raw pointer that may be moved into a `Send` closure (the task is `Sync`).
#[derive(Clone, Copy)]
pub(crate) struct SendPtr<T>(pub(crate) *const T);
// SAFETY: only used for the task header, which is Sync; the pointer is dereferenced only while
// the task is alive (see `coroutine_body`).
unsafe impl<T> Send for SendPtr<T> {}

/// Makes a task running `f`; `make` builds its body, given the task's header and `f`.
pub(crate) fn new_task<T, F>(
    header: Header,
    f: F,
    make: impl FnOnce(&Header, F) -> Body<T, F>,
) -> (TaskRef, TypedTask<T>)
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    // Built in place in the allocation: `Arc::new` of the whole cell copied it there from the
    // stack (a few hundred bytes, ~90 instructions per spawn in callgrind).
    let mut cell = Arc::<TaskCell<T, F>>::new_uninit();
    let Some(place) = Arc::get_mut(&mut cell) else {
        unreachable!("a fresh Arc has one owner")
    };
    place.write(TaskCell {
        prefix: TaskPrefix {
            header,
            join: JoinCell {
                slot: spindle_park::spin::SpinLock::new(JoinSlot {
                    result: None,
                    done: false,
                    waiter: None,
                }),
            },
        },
        body: UnsafeCell::new(Body::Gone),
    });
    // SAFETY: initialized by the write just above.
    let cell = unsafe { cell.assume_init() };
    let body = make(&cell.prefix.header, f);
    // SAFETY: no worker can see the task yet; we are its only user.
    unsafe { *cell.body.get() = body };
    let task = TaskRef(cell);
    let typed = TypedTask {
        task: task.clone(),
        _result: std::marker::PhantomData,
    };
    (task, typed)
}
