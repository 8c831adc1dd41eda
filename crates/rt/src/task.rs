//! A task: one coroutine under the runtime, its state machine, its waker and its result.
//!
//! # The state word
//!
//! Every task has one atomic word of flags, and every transition of it is in
//! [`crate::state`] (its module docs have the table and the transitions; `tests/loom_task.rs`
//! checks them under loom). [`Header`]'s methods below call those with the task's park number
//! and cancel guards.
//!
//! **The idle state holds a reference.** The worker that publishes a task idle keeps the
//! reference it popped the task with in the idle state instead of dropping it, and whoever moves
//! the task out of idle (the one CAS that decides) pushes *that* reference rather than a new
//! one. So `wake_by_ref` — a channel waking the waker it keeps — costs no count increment, and
//! the worker no decrement when the task parks: two atomic read-modify-writes fewer per
//! blocked operation. (`wake` by value, and a fired timer, drop the reference they held
//! instead: the same count as before.)

use std::any::Any;
use std::cell::{Cell, UnsafeCell};
use std::fmt;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{RawWaker, RawWakerVTable, Waker};
use std::time::Instant;

#[cfg(feature = "stack-shared")]
use spindle_coro::Coroutine;
use spindle_coro::{CoroutineResult, SendCoroutine, Yielder};
#[cfg(feature = "stack-shared")]
use spindle_stack::SharedSlot;

use crate::carrier::{Carrier, CarrierCache, CarrierCell, OutcomeSlot, Resume};
use crate::runtime::Shared;
use crate::runtime::StackKind;
use crate::spawn::TaskStack;

use crate::join_cell::JoinCell;
pub(crate) use crate::state::State;
use crate::state::TaskState;

/// Why a coroutine switched back to its worker.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Suspend {
    /// `yield_now`, or an exhausted budget in a slice of its own or one whose time is over:
    /// back to the end of the queue.
    Yield,
    /// An exhausted budget in a slice handed on through the run-next slot whose time is not
    /// over: the worker resumes the task at once, in the same slice (see `coop`). The switch
    /// back lets the worker count a resume (the monitor sees it switch) and look at its
    /// timers and IO on its way round its loop.
    Pause,
    /// `spindle_park::park`: idle until woken, or until the deadline (a timer).
    Park(Option<Instant>),
    /// A task on a carrier has ended; its outcome is in the slot (see `carrier`). Handled by
    /// the task's own `run`: a worker never sees it.
    Finished(OutcomeSlot),
}

/// The yielder type of every task's coroutine (carriers' included: see `carrier`).
pub(crate) type TaskYielder = Yielder<Resume, Suspend>;

/// What a panic, a cancellation or a missing stack leaves as a task's outcome.
pub(crate) enum Failure {
    Panicked(Box<dyn Any + Send>),
    Cancelled,
    /// No stack could be had when the coroutine was to start.
    NoStack(std::io::Error),
    /// The coroutine returned after its handle was dropped: it dropped its value itself, as
    /// its last act (nobody reads this: a handle that is gone reads nothing, and a scope reads
    /// only panics).
    ValueDropped,
}

/// The payload of the unwind that cancels a coroutine. Private: user code sees only "not mine".
///
/// Sticky: a `catch_unwind` in the coroutine's own code catches it like any panic, but
/// dropping it there — in the coroutine it cancels, outside another unwind — resumes the
/// unwind from the drop (as .NET re-raises a thread abort at the end of each `catch`). So a
/// loop that survives its handlers' panics (`let _ = catch_unwind(handler)`) does not swallow
/// its cancellation, which would leave it running for good and a runtime's drop waiting for
/// it for ever. Only the coroutine's body, where the unwind ends, takes it for good
/// ([`CancelUnwind::spent`]).
pub(crate) struct CancelUnwind {
    /// The cancelled coroutine's id (unique in the process): dropped anywhere else (sent to
    /// another thread, returned as a value), the payload is inert.
    task: u64,
}

impl CancelUnwind {
    /// Starts (or resumes) the unwind that cancels the running coroutine `task`.
    pub(crate) fn raise(task: u64) -> ! {
        std::panic::resume_unwind(Box::new(CancelUnwind { task }))
    }

    /// Whether `payload` is a cancellation's; if so it is taken for good (its drop does not
    /// resume the unwind).
    fn spent(payload: Box<dyn Any + Send>) -> Result<(), Box<dyn Any + Send>> {
        let cancel = payload.downcast::<CancelUnwind>()?;
        // Moved out of its box (freed) and forgotten: no drop, so no resumed unwind.
        std::mem::forget(*cancel);
        Ok(())
    }
}

impl Drop for CancelUnwind {
    fn drop(&mut self) {
        // Not inside another unwind (a second panic there aborts); only in the coroutine it
        // cancels, which is running (its code dropped the payload).
        if !std::thread::panicking()
            && crate::worker::current_task_header().is_some_and(|h| h.id == self.task)
        {
            CancelUnwind::raise(self.task);
        }
    }
}

/// What every task has, whatever its result type.
///
/// `repr(C)`, in this order: what a worker, a yield and a wake-up touch every time (state to
/// `copying`) come first, in the first 64 bytes of the task's allocation, so that switching
/// among many tasks misses the cache as little as it can; spawn-, park- and finish-time fields
/// follow.
#[repr(C)]
pub(crate) struct Header {
    pub(crate) state: TaskState,
    /// Depth of `CancelGuard`s held by the running coroutine: cancellation waits while > 0.
    pub(crate) no_cancel: Cell<u32>,
    /// The worker the task must run on (`NO_HOME`: any).
    pub(crate) home: AtomicUsize,
    /// The yielder of the running coroutine (set by the coroutine at its start).
    pub(crate) yielder: AtomicPtr<TaskYielder>,
    /// The task's type-erased operations (set by [`new_task`]).
    pub(crate) vtable: &'static TaskVtable,
    /// References to the task: [`TaskRef`]s and wakers (see [`TaskRef`]).
    pub(crate) refs: AtomicUsize,
    pub(crate) id: u64,
    /// The runtime: set at spawn, then read through [`Header::shared`] only (see there).
    pub(crate) shared: ptr::NonNull<Shared>,
    /// The carrier the task runs on, from its first run on a carrier to its end (see
    /// `carrier`). Touched only by the worker that holds the task (as the body is). Here and
    /// not in the body: resuming a carrier does not depend on the task's types, so the worker
    /// resumes it directly ([`Header::carrier`]) instead of through the vtable — an indirect
    /// call whose target changes with every task type the worker switches between.
    pub(crate) carrier: UnsafeCell<Option<Carrier>>,
    /// Depth of `spindle_park::PinGuard`s held by a migratable coroutine: while > 0 its home
    /// is the worker it runs on (touched only by the running coroutine).
    pub(crate) pins: Cell<u32>,
    /// The task may move to another worker at any suspension point (the `unsafe` builder
    /// option), so it never gets a home.
    pub(crate) migratable: bool,
    /// The coroutine runs on a copying (shared) stack.
    pub(crate) copying: bool,
    /// The task starts on a carrier of the worker that first runs it (a spawn on the runtime's
    /// default stack: `Body::OwnPending(None, _)`; see `carrier`). Set at spawn.
    pub(crate) starts_on_carrier: bool,
    /// At its last park the coroutine held cancellation off (a `CancelGuard`, or
    /// `with_cancel_deferred`): written by the worker it parked to, read by a shutdown that
    /// waits for cancelled coroutines to end (see `Runtime::shutdown`).
    pub(crate) defers_cancel: AtomicBool,
    /// Incremented by every park (by the parking coroutine alone); a timer entry carries the
    /// value it was made with, and the state word the low bits of the last park's (see the
    /// module docs), so a timer left over from an earlier park wakes nothing.
    pub(crate) park_seq: AtomicU64,
    /// Where the task sits in the runtime's registry (`registry::Key` bits): `NONE` until its
    /// first run, then `UNREGISTERED` or, once it has a slot, the slot's key. Written by the
    /// worker that holds the task (first run, first suspension), read when it finishes (the
    /// queues' hand-offs order the two).
    pub(crate) registry_key: AtomicU64,
    /// The timer armed by the current park: (worker, key). Written by the worker after the
    /// coroutine parked, read by the coroutine when it resumes (never at the same time).
    pub(crate) timer: Cell<Option<(usize, spindle_timer::TimerKey)>>,
    pub(crate) name: Option<Arc<str>>,
    /// This task's coroutine-local values (touched only by the running coroutine).
    pub(crate) locals: UnsafeCell<crate::local::Locals>,
}

// SAFETY: `no_cancel`, `pins`, `timer` and `locals` are only touched by the coroutine of this
// task while it runs, and a task runs on one thread at a time (it is in at most one queue or on
// one worker: see the module docs; the hand-off between workers goes through the policy's
// queues, which synchronize). One exception, on that same thread: `no_cancel` of a suspended
// task pinned to a worker (not migratable) may be lowered by other code that worker runs (its
// `CancelGuard` dropped there: `WorkerCtx::end_others_cancel_deferral`), which cannot overlap
// the task's own run on that thread.
// Everything else is atomic or immutable.
unsafe impl Sync for Header {}

/// No home: the task may run on any worker.
pub(crate) const NO_HOME: usize = usize::MAX;

// `TaskCell::holds_nothing_to_drop` looks at the header's owning fields (`name`, `carrier`,
// `locals`); every other field has no drop glue. Checked here, with the header's size, so that
// a field added to the header is added there too (update both).
const _: () = {
    use std::mem::needs_drop;
    assert!(
        !needs_drop::<TaskState>()
            && !needs_drop::<Cell<u32>>()
            && !needs_drop::<AtomicUsize>()
            && !needs_drop::<AtomicPtr<TaskYielder>>()
            && !needs_drop::<&'static TaskVtable>()
            && !needs_drop::<ptr::NonNull<Shared>>()
            && !needs_drop::<AtomicU64>()
            && !needs_drop::<AtomicBool>()
            && !needs_drop::<Cell<Option<(usize, spindle_timer::TimerKey)>>>()
    );
    #[cfg(target_pointer_width = "64")]
    assert!(
        std::mem::size_of::<Header>() == 136,
        "Header changed: update TaskCell::holds_nothing_to_drop and this check"
    );
};

impl Header {
    #[inline]
    pub(crate) fn load(&self) -> u32 {
        self.state.load()
    }

    /// Starts the task of `header` on the calling carrier: its type's
    /// [`TaskVtable::start`].
    ///
    /// # Safety
    ///
    /// As for `TaskVtable::start`.
    #[inline]
    pub(crate) unsafe fn start_on_carrier(
        header: ptr::NonNull<Header>,
        yielder: &TaskYielder,
    ) -> Resume {
        // SAFETY: the header is alive (the caller's contract); the rest is the contract.
        unsafe { (header.as_ref().vtable.start)(header, yielder) }
    }

    /// The carrier the task runs on, if it runs on one (see [`Header::carrier`]'s field).
    ///
    /// # Safety
    ///
    /// The caller holds the task (it popped it and runs it on its own worker thread), and no
    /// other borrow of the carrier is live.
    #[inline]
    #[allow(clippy::mut_from_ref)] // exclusive by the caller's contract, as the body is
    pub(crate) unsafe fn carrier(&self) -> Option<&mut CarrierCell> {
        // SAFETY: the caller holds the task, so nobody else touches the field, and no other
        // borrow of it is live (the contract).
        unsafe { (*self.carrier.get()).as_deref_mut() }
    }

    /// Sets `extra` (NOTIFIED, CANCELLED) and, if the task is idle, ACTIVE. Returns true if the
    /// caller must push the task (see [`TaskState::notify`]).
    pub(crate) fn notify(&self, extra: u32) -> bool {
        self.state.notify(extra)
    }

    /// A timer fired for park number `seq`: schedules the task if it is still idle in that park.
    pub(crate) fn timer_fired(&self, seq: u64) -> bool {
        // A quick filter; the CAS decides (the task may park again after this load).
        if self.park_seq.load(Ordering::Acquire) != seq {
            return false;
        }
        self.state.fire(seq)
    }

    /// A worker popped the task: false if it is already complete.
    pub(crate) fn start_running(&self) -> bool {
        self.state.start_running()
    }

    /// After a park: `ACTIVE` → idle, or stays `ACTIVE` if a wake-up or a cancel came
    /// meanwhile (see [`TaskState::park_done`]). Returns true if the caller must push the task
    /// again. Called by the worker the coroutine suspended to, on that thread (so it reads the
    /// park number the coroutine wrote before suspending, and its cancel guards).
    pub(crate) fn park_done(&self) -> bool {
        let generation = State::park_gen(self.park_seq.load(Ordering::Relaxed));
        let held_off = self.no_cancel.get() != 0;
        // Written before the park is published: a shutdown that sees the task idle sees this.
        self.defers_cancel.store(held_off, Ordering::Relaxed);
        self.state.park_done(generation, held_off)
    }

    /// → `COMPLETE`; returns the state before.
    pub(crate) fn complete(&self) -> u32 {
        self.state.complete()
    }

    /// Whether the task has finished (its result is in the join cell, or was taken).
    #[inline]
    pub(crate) fn is_complete(&self) -> bool {
        self.state.is_complete()
    }

    /// What resumed a parked task (the task itself, right after the resume): its timer or a
    /// wake-up (see [`TaskState::resumed`]).
    pub(crate) fn resumed(&self) -> spindle_park::Wake {
        self.state.resumed()
    }

    /// Consumes the permit, if set (see [`TaskState::take_permit`]).
    pub(crate) fn take_permit(&self) -> bool {
        self.state.take_permit()
    }

    /// Holds cancellation off until the coroutine ends (the running coroutine, about to unwind
    /// for its cancellation or past the end of its body: see `coop::cancel_unwind`).
    pub(crate) fn hold_off_cancel_for_good(&self) {
        // Above any depth `CancelGuard`s can reach, so their drops never bring it back to 0.
        self.no_cancel
            .set(self.no_cancel.get().saturating_add(1 << 30));
    }

    /// Whether the task is parked, cancelled, and held its cancellation off when it parked: a
    /// shutdown cannot make it end, only wait for whatever it waits for (see
    /// `Runtime::shutdown`). Read from any thread.
    pub(crate) fn parked_deferring_cancel(&self) -> bool {
        let s = self.load();
        s & (State::ACTIVE | State::COMPLETE) == 0
            && s & State::CANCELLED != 0
            && self.defers_cancel.load(Ordering::Relaxed)
    }

    /// Whether a cancel was requested and may be acted on now.
    #[inline]
    pub(crate) fn should_unwind(&self) -> bool {
        self.load() & State::CANCELLED != 0 && self.no_cancel.get() == 0
    }

    /// The task's runtime.
    ///
    /// A pointer, not an `Arc`: a clone per spawn and a drop per task were two atomic
    /// read-modify-writes on the one cache line of the runtime's reference count, which every
    /// worker writes. What keeps the runtime alive instead is the registry's count of live
    /// tasks: **a task's runtime outlives the task's life as the registry counts it** —
    /// shutdown waits until every spawned task has ended, and leaks the runtime's shared state
    /// when it gives up waiting (`Runtime::shutdown`). Callers reach the runtime only while the
    /// task counts as live: it is counted at spawn, before anything can see it, and ends in
    /// `TaskPrefix::finish`, right after `COMPLETE` is set; so "not `COMPLETE`" (a successful
    /// `notify` or `timer_fired` — which also keeps it from completing until the caller has
    /// pushed it —, the task running its coroutine or parking) or "inside `finish`, before
    /// `TaskRegistry::ended`" suffices.
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

/// What the runtime needs of a task whatever its types: the task's "vtable", one `static` per
/// task type, found through [`Header::vtable`].
pub(crate) struct TaskVtable {
    /// Runs the coroutine until it suspends or finishes.
    ///
    /// Safety: the caller holds the task (it popped it and `start_running` succeeded) and
    /// runs on a worker thread of the task's runtime, on the worker's own stack; `carriers` is
    /// that worker's.
    run: unsafe fn(ptr::NonNull<Header>, &CarrierCache) -> Option<Suspend>,
    /// The task's carrier has just suspended with [`Suspend::Finished`]: takes the outcome
    /// from the slot, gives the carrier to `carriers` and finishes the task.
    ///
    /// Safety: as for `run`, right after a resume of the task's carrier (by the same caller)
    /// returned `Finished(slot)`, with no borrow of the carrier left.
    finished: unsafe fn(ptr::NonNull<Header>, OutcomeSlot, &CarrierCache),
    /// Runs the task on the calling carrier: moves its closure out of the body, runs it as
    /// `coroutine_body` does, hands the outcome back with [`Suspend::Finished`], and returns
    /// what the carrier is resumed with next.
    ///
    /// Safety: called by a carrier's loop, resumed with a start of this task by the worker
    /// that holds it (which installed the carrier in the header); the body is
    /// `OwnPending(None, _)`, its closure unrun.
    start: unsafe fn(ptr::NonNull<Header>, &TaskYielder) -> Resume,
    /// Drops the task in place and frees its allocation.
    ///
    /// Safety: the last reference is gone (the count reached zero).
    destroy: unsafe fn(ptr::NonNull<Header>),
}

/// The most references a task may have; more means references are being leaked in a loop, and
/// the process aborts before the count can wrap (as `Arc` does).
const MAX_REFS: usize = isize::MAX as usize;

/// A counted reference to a task: what the policies queue, wakers and join handles are.
///
/// The task is one allocation (a [`TaskCell`], from [`task_alloc`](crate::task_alloc)) that
/// starts with its [`Header`]; the header holds the reference count and the vtable. Not an
/// `Arc<dyn …>`: an `Arc`'s block can only come from the global allocator, and a task's comes
/// from its worker's cache of freed task blocks. The counting is `Arc`'s: clones increment
/// (relaxed: a new reference is made from an existing one), drops decrement (release), and the
/// drop that reaches zero destroys the task after an acquire fence, so every use by every
/// other reference happens before the destruction.
pub(crate) struct TaskRef(ptr::NonNull<Header>);

// SAFETY: a task is `Sync` (its header is, and its body is only touched by the worker that
// popped it; see `TaskCell`) and its closure and result are `Send` (`new_task`'s bounds), so
// references may move between threads and be shared, as an `Arc` of the task could.
unsafe impl Send for TaskRef {}
// SAFETY: as above.
unsafe impl Sync for TaskRef {}

impl TaskRef {
    #[inline]
    pub(crate) fn header(&self) -> &Header {
        // SAFETY: `self` counts one reference, so the task (whose allocation starts with its
        // header) is alive for as long as `self` is borrowed.
        unsafe { self.0.as_ref() }
    }

    /// Runs the coroutine until it suspends or finishes.
    ///
    /// # Safety
    ///
    /// The caller holds the task (it popped it and `start_running` succeeded) and runs on a
    /// worker thread of the task's runtime, on the worker's own stack; `carriers` is that
    /// worker's.
    #[inline]
    pub(crate) unsafe fn run(&self, carriers: &CarrierCache) -> Option<Suspend> {
        let header = self.header();
        // A started task on a carrier (the common resume): no call through the vtable.
        // SAFETY: the caller holds the task; the borrow ends with the resume.
        if let Some(carrier) = unsafe { header.carrier() } {
            return match carrier.co().resume(Resume::GO) {
                CoroutineResult::Yield(Suspend::Finished(slot)) => {
                    // SAFETY: the carrier has just handed the outcome back; its borrow is over.
                    unsafe { (header.vtable.finished)(self.0, slot, carriers) };
                    None
                }
                CoroutineResult::Yield(why) => Some(why),
                // A carrier only returns when retired, idle (see `carrier`).
                CoroutineResult::Return(()) => None,
            };
        }
        // A first run on a carrier: the worker installs and starts one itself, so that the
        // task type's code is reached by one indirect call (the carrier's start) instead of
        // two (the vtable's run, then the start). A carrier that cannot be had is left to the
        // vtable's run, which reports it.
        if header.starts_on_carrier
            // SAFETY: the caller's guarantees; with no carrier (just checked) a task that
            // starts on one has not started.
            && let Some(outcome) = unsafe { self.start_carried(carriers) }
        {
            return outcome;
        }
        // SAFETY: the vtable of this task's type, with the caller's guarantees.
        unsafe { (header.vtable.run)(self.0, carriers) }
    }

    /// Starts the task (on the default stack, never run, no carrier yet) on a carrier of
    /// `carriers`; `None` if none can be had (nothing was done).
    ///
    /// # Safety
    ///
    /// As for [`run`](Self::run), and the task has not started (its `starts_on_carrier` is set
    /// and it has no carrier: a carried task keeps its carrier until it ends, and never runs
    /// again after).
    #[inline(never)]
    unsafe fn start_carried(&self, carriers: &CarrierCache) -> Option<Option<Suspend>> {
        let header = self.header();
        let carrier = carriers.take(header.shared()).ok()?;
        // SAFETY: as for this call.
        Some(unsafe { start_on(header, carrier, carriers) })
    }

    /// A waker for this task (it counts as a reference).
    pub(crate) fn waker(self) -> Waker {
        let raw = RawWaker::new(self.0.as_ptr().cast_const().cast(), &WAKER_VTABLE);
        std::mem::forget(self);
        // SAFETY: `WAKER_VTABLE`'s functions uphold `RawWaker`'s contract: the data pointer
        // is a task header carrying the reference `self` gave up; clone counts another, drop
        // and wake give theirs back; all of it is thread-safe (atomic counts; waking is the
        // thread-safe `wake_task`).
        unsafe { Waker::from_raw(raw) }
    }

    /// Wakes the task: sets its permit and schedules it if it was idle.
    pub(crate) fn wake(self) {
        self.wake_by_ref();
    }

    /// [`wake`](Self::wake) without giving up this reference.
    pub(crate) fn wake_by_ref(&self) {
        if self.header().notify(State::NOTIFIED) {
            // SAFETY: we moved the task out of idle, so the idle state's reference is ours.
            unsafe { self.idle_reference() }.schedule(spindle_sched::Reason::Woken);
        }
    }

    /// The reference the idle state held (see the module docs), for whoever moved the task
    /// out of idle.
    ///
    /// # Safety
    ///
    /// The caller's compare-and-swap moved the task from idle to `ACTIVE` (`notify` or
    /// `timer_fired` returned true), and it takes the reference once.
    pub(crate) unsafe fn idle_reference(&self) -> TaskRef {
        // SAFETY: the idle state counted a reference to this live task (the worker that
        // published it idle kept its own), handed over to the caller, per the contract.
        unsafe { TaskRef::from_raw(self.0.as_ptr().cast_const().cast()) }
    }

    /// Pushes the task (a reference that now stands for its place in a queue) to its runtime.
    pub(crate) fn schedule(self, reason: spindle_sched::Reason) {
        // The runtime outlives the task's next run (see `Header::shared`), and `self` moves.
        let shared: *const Shared = self.header().shared();
        // SAFETY: as just said.
        unsafe { (*shared).schedule(self, reason) };
    }

    /// Keeps this reference in the task's idle state (the worker, after publishing the task
    /// idle with `park_done`; see the module docs).
    pub(crate) fn into_idle(self) {
        std::mem::forget(self);
    }

    /// A new reference to the task whose header is `header`.
    ///
    /// # Safety
    ///
    /// The task is alive, and stays so until the count is raised: another reference holder
    /// keeps it (the registry's slots: see `registry`).
    pub(crate) unsafe fn clone_from_header(header: ptr::NonNull<Header>) -> TaskRef {
        let borrowed = std::mem::ManuallyDrop::new(TaskRef(header));
        // Clones count a reference of their own; `borrowed` counted none and is not dropped.
        TaskRef::clone(&borrowed)
    }

    /// A reference from a pointer that carries one (a waker's data pointer).
    ///
    /// # Safety
    ///
    /// `header` points to a live task's header, and the caller gives the reference it counted
    /// to the result.
    unsafe fn from_raw(header: *const ()) -> TaskRef {
        // SAFETY: non-null: it points to a live header, per the caller.
        TaskRef(unsafe { ptr::NonNull::new_unchecked(header.cast_mut().cast()) })
    }
}

impl Clone for TaskRef {
    #[inline]
    fn clone(&self) -> Self {
        if self.header().refs.fetch_add(1, Ordering::Relaxed) > MAX_REFS {
            // Billions of leaked references: the count is about to wrap, which would free a
            // task still in use. `Arc` aborts here too.
            std::process::abort();
        }
        TaskRef(self.0)
    }
}

impl Drop for TaskRef {
    #[inline]
    fn drop(&mut self) {
        let refs = &self.header().refs;
        // The last reference, by a load: a count of one is ours alone, and nobody can add to
        // it — a new reference is made only from an existing one (a clone, a waker's clone)
        // or from a registry slot, which the task has left before its runner's reference can
        // be the last one (`registry`: a task in a slot is alive and unfinished, so its
        // runner — a queue, a worker or its idle state — holds a reference besides any other).
        // So the drop of a finished task's last reference (the worker's, once the handle is
        // gone; or the handle's, once the worker let go) costs no read-modify-write. The
        // acquire load synchronizes with every earlier release decrement, as the fence below
        // does for the decrement that reaches zero.
        if refs.load(Ordering::Acquire) != 1 {
            if refs.fetch_sub(1, Ordering::Release) != 1 {
                return;
            }
            // Every other reference's uses happen before this destruction (their decrements
            // are releases; this fence acquires them). ThreadSanitizer does not model fences:
            // its build acquires with a load of the count instead, as `Arc` does.
            #[cfg(not(spindle_tsan))]
            std::sync::atomic::fence(Ordering::Acquire);
            #[cfg(spindle_tsan)]
            refs.load(Ordering::Acquire);
        }
        // SAFETY: the count reached zero, or was one and ours alone: this was the last
        // reference.
        unsafe { (self.header().vtable.destroy)(self.0) };
    }
}

/// Whether `waker` is the waker of the task with header `header` (made by [`TaskRef::waker`]).
pub(crate) fn is_waker_of(waker: &Waker, header: *const Header) -> bool {
    !header.is_null()
        && ptr::eq(waker.data(), header.cast())
        && ptr::eq(waker.vtable(), &WAKER_VTABLE)
}

/// The wakers of tasks: a data pointer to the task's header that counts one reference.
static WAKER_VTABLE: RawWakerVTable =
    RawWakerVTable::new(waker_clone, waker_wake, waker_wake_by_ref, waker_drop);

/// Safety (all four): `data` is a task header carrying the waker's reference (`TaskRef::waker`).
unsafe fn waker_clone(data: *const ()) -> RawWaker {
    // SAFETY: the waker's reference keeps the task alive; the clone is a new reference,
    // handed to the new waker.
    let task = std::mem::ManuallyDrop::new(unsafe { TaskRef::from_raw(data) });
    std::mem::forget(TaskRef::clone(&task));
    RawWaker::new(data, &WAKER_VTABLE)
}

unsafe fn waker_wake(data: *const ()) {
    // SAFETY: the waker is consumed: its reference moves to `task`.
    unsafe { TaskRef::from_raw(data) }.wake();
}

unsafe fn waker_wake_by_ref(data: *const ()) {
    // SAFETY: the waker keeps its reference: `task` must not drop it.
    let task = std::mem::ManuallyDrop::new(unsafe { TaskRef::from_raw(data) });
    task.wake_by_ref();
}

unsafe fn waker_drop(data: *const ()) {
    // SAFETY: the waker is dropped: its reference moves to `task`, which gives it back.
    drop(unsafe { TaskRef::from_raw(data) });
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

/// A task's coroutine on a guarded stack of its own.
pub(crate) type OwnCoroutine<T> = SendCoroutine<Resume, Suspend, Result<T, Failure>, TaskStack>;

/// A task's coroutine on its worker's shared (copying) stack.
#[cfg(feature = "stack-shared")]
pub(crate) type SharedCoroutine<T> = Coroutine<Resume, Suspend, Result<T, Failure>, SharedSlot>;

/// The coroutine of a task running closure `F`, and what becomes of it.
///
/// The closure waits here, in the task's own allocation, until the coroutine is made: one
/// allocation per spawn, not two (a boxed maker closure was the second).
pub(crate) enum Body<T, F> {
    /// On a stack of its own, not made yet: the worker that first runs the task takes a stack
    /// of this kind (`None`: the runtime's pool — then it starts on a carrier of that worker,
    /// see `carrier`) and makes the coroutine on it. Taking the stack late keeps a burst of
    /// spawns from holding a stack each before any of them runs: they run one after another on
    /// the same few (cache-warm) pooled stacks.
    OwnPending(Option<StackKind>, F),
    /// Started on a carrier, which the header holds until the task ends (see `carrier` and
    /// `Header::carrier`); the closure moved onto it.
    Carried,
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
// finishes there, and while it is unfinished one reference stands for its next run (a queue's,
// its worker's, or its idle state's: see `TaskRef::into_idle`) and is only ever handed on, so
// the last reference to an unfinished task is never dropped elsewhere (at a shutdown timeout
// the task is leaked instead).
#[cfg(feature = "stack-shared")]
unsafe impl<C> Send for ThreadBound<C> {}

/// What a task with result type `T` has whatever its closure: the header and the join cell.
/// `repr(C)`, header first: the start of every task (see [`TaskCell`]).
#[repr(C)]
pub(crate) struct TaskPrefix<T> {
    pub(crate) header: Header,
    pub(crate) join: JoinCell<T, Failure>,
}

/// A task with result type `T` running closure `F`. `repr(C)`, the prefix first (and the
/// prefix's header first): a pointer to the task is a pointer to its header
/// ([`TaskRef::header`]) and to its prefix ([`TypedTask::join`]).
#[repr(C)]
pub(crate) struct TaskCell<T, F> {
    pub(crate) prefix: TaskPrefix<T>,
    /// Touched only by the worker that popped the task (see `TaskCell::run`).
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

impl<T, F> TaskCell<T, F>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    /// This task type's vtable (a promoted constant: one `static` per type).
    const VTABLE: &'static TaskVtable = &TaskVtable {
        run: Self::run_raw,
        finished: Self::finished_raw,
        start: Self::start_on_carrier,
        destroy: Self::destroy_raw,
    };

    /// Safety: as `TaskVtable::run`; `header` is the header of a `TaskCell<T, F>`.
    unsafe fn run_raw(header: ptr::NonNull<Header>, carriers: &CarrierCache) -> Option<Suspend> {
        // SAFETY: the task is a `TaskCell<T, F>` (this vtable is only ever set on those), which
        // starts with its header; the caller holds a reference and the task.
        unsafe { header.cast::<Self>().as_ref().run(carriers) }
    }

    /// Safety: as `TaskVtable::finished`; `header` is the header of a `TaskCell<T, F>`.
    unsafe fn finished_raw(
        header: ptr::NonNull<Header>,
        slot: OutcomeSlot,
        carriers: &CarrierCache,
    ) {
        // SAFETY: as for `run_raw`; the contract of `finished` is `carrier_finished`'s.
        unsafe {
            header
                .cast::<Self>()
                .as_ref()
                .carrier_finished(slot, carriers)
        }
    }

    /// Safety: as `TaskVtable::destroy`; `header` is the header of a `TaskCell<T, F>`.
    unsafe fn destroy_raw(header: ptr::NonNull<Header>) {
        let mut cell = header.cast::<Self>();
        // SAFETY: the last reference is gone: nobody else uses the task. It was written in a
        // block from `task_alloc::alloc` with this layout (`new_task`).
        unsafe {
            // A task that finished as most do leaves nothing to drop, and its drop glue is a nest
            // of out-of-line calls that would find that out.
            if !cell.as_mut().holds_nothing_to_drop() {
                ptr::drop_in_place(cell.as_ptr());
            }
            crate::task_alloc::dealloc(cell.cast(), std::alloc::Layout::new::<Self>());
        }
    }

    /// Whether dropping the task would drop nothing: its body is gone, its join cell holds
    /// nothing with drop glue, and the header's owning fields are empty.
    ///
    /// The header's other fields have no drop glue (checked below, with the header's size, so
    /// that a field added to it is added here too).
    #[inline]
    fn holds_nothing_to_drop(&mut self) -> bool {
        let header = &mut self.prefix.header;
        matches!(self.body.get_mut(), Body::Gone)
            && header.name.is_none()
            && header.carrier.get_mut().is_none()
            && header.locals.get_mut().is_unused()
            && self.prefix.join.holds_nothing_to_drop()
    }

    /// Safety: the caller holds the task (it popped it and `start_running` succeeded) and runs
    /// on a worker thread of the task's runtime, on the worker's own stack; `carriers` is that
    /// worker's.
    unsafe fn run(&self, carriers: &CarrierCache) -> Option<Suspend> {
        // (A started task on a carrier is resumed by `TaskRef::run` itself, without the
        // vtable: what comes here is a first run, an own-stack or a shared-stack coroutine.)
        // SAFETY: as for this call.
        unsafe { self.run_other(carriers) }
    }

    /// The task that ran on a carrier has ended and left its outcome in `slot`: takes it, puts
    /// the carrier in `carriers` (idle) and finishes the task.
    ///
    /// Safety: the task's carrier has just suspended with [`Suspend::Finished`]`(slot)`; the
    /// caller holds the task (as for `run`) and keeps no borrow of its body.
    #[inline(never)]
    unsafe fn carrier_finished(&self, slot: OutcomeSlot, carriers: &CarrierCache) {
        // SAFETY: the slot is the `Option<Result<T, Failure>>` that this task type's `start`
        // (`start_on_carrier`, the one its vtable's `start` names) filled and handed back, in its
        // frame on the suspended carrier's stack; nothing else touches it until the carrier
        // resumes, which it does only for its next task, after this.
        let outcome = unsafe { (*slot.0.cast::<Option<Result<T, Failure>>>()).take() };
        // SAFETY: the caller holds the task and keeps no borrow of the carrier or the body.
        let body = unsafe { &mut *self.body.get() };
        // A carried task's body is `Carried` (nothing to drop: the closure moved to the
        // carrier); written over without its drop glue, an out-of-line call.
        if matches!(body, Body::Carried) {
            // SAFETY: `body` is a valid place we hold exclusively (as above), and its value,
            // `Carried`, owns nothing: overwriting it without dropping it leaks nothing.
            unsafe { ptr::write(body, Body::Gone) };
        } else {
            *body = Body::Gone;
        }
        // SAFETY: as just said.
        if let Some(carrier) = unsafe { (*self.prefix.header.carrier.get()).take() } {
            // The task is live until `finish` says otherwise: its runtime is there.
            carriers.put(self.prefix.header.shared(), carrier);
        }
        let outcome = outcome.unwrap_or_else(|| {
            // `start_on_carrier` always fills the slot before it hands it back.
            Err(Failure::Panicked(Box::new(
                "spindle internal error: a carrier finished a task without its outcome",
            )))
        });
        self.prefix.finish(outcome, carriers.worker());
    }

    /// Starts the task on a carrier of `carriers`: what [`run_other`](Self::run_other) does
    /// for a task on the runtime's default stack that has not started.
    ///
    /// Safety: as for `run`; the body is `OwnPending(None, _)`, and the caller keeps no borrow
    /// of it.
    unsafe fn run_pending(&self, carriers: &CarrierCache) -> Option<Suspend> {
        let header = &self.prefix.header;
        let carrier = match carriers.take(header.shared()) {
            Ok(carrier) => carrier,
            Err(e) => {
                // SAFETY: the caller holds the task and keeps no borrow of the body.
                let body = unsafe { &mut *self.body.get() };
                if let Body::OwnPending(_, f) = std::mem::replace(body, Body::Gone) {
                    drop_unrun(f);
                }
                self.prefix
                    .finish(Err(Failure::NoStack(e.into())), carriers.worker());
                return None;
            }
        };
        // SAFETY: the caller holds the task; the body is `OwnPending(None, _)` (this call's
        // contract), so the task has not started.
        unsafe { start_on(header, carrier, carriers) }
    }

    /// This task type's start on a carrier ([`TaskVtable::start`]): moves the closure out of
    /// the body, runs it as a task's own coroutine would (`coroutine_body`), then hands the
    /// outcome back and waits in this frame for the carrier's next resume, which it returns.
    ///
    /// Safety: as for `TaskVtable::start`.
    unsafe fn start_on_carrier(header: ptr::NonNull<Header>, yielder: &TaskYielder) -> Resume {
        // SAFETY: `header` is a `TaskCell<T, F>`'s (this vtable's type), held by the worker
        // that resumed us, so nobody else touches the body.
        let body = unsafe { &mut *header.cast::<Self>().as_ref().body.get() };
        let Body::OwnPending(None, f) = std::mem::replace(body, Body::Carried) else {
            // Not reachable (the contract); finishing without running is the harmless answer.
            let mut outcome: Option<Result<T, Failure>> = Some(Err(Failure::Panicked(Box::new(
                "spindle internal error: a carrier was asked to start a started task",
            ))));
            return yielder.suspend(Suspend::Finished(OutcomeSlot(
                ptr::from_mut(&mut outcome).cast(),
            )));
        };
        let body = coroutine_body::<T, F>(header.as_ptr(), f);
        let mut outcome = Some(body(yielder, Resume::GO));
        // The worker takes the outcome out of this frame before it can resume us again.
        yielder.suspend(Suspend::Finished(OutcomeSlot(
            ptr::from_mut(&mut outcome).cast(),
        )))
    }

    /// [`run`](Self::run) for a body that is not a started own-stack coroutine.
    ///
    /// Safety: as for `run`.
    #[inline(never)]
    unsafe fn run_other(&self, carriers: &CarrierCache) -> Option<Suspend> {
        // SAFETY: the caller holds the task (popped it), so nobody else touches the body.
        let body = unsafe { &mut *self.body.get() };
        let header = &self.prefix.header;
        let result = match body {
            Body::Own(co) => co.get_mut().resume(Resume::GO),
            // SAFETY: as for this call; `body` is not used again.
            Body::OwnPending(None, _) => return unsafe { self.run_pending(carriers) },
            // Reached only through `run`, which handles it.
            Body::Carried => return None,
            Body::OwnPending(..) => {
                let Body::OwnPending(kind, f) = std::mem::replace(body, Body::Gone) else {
                    unreachable!()
                };
                match crate::spawn::stack_for(header.shared(), kind) {
                    Ok(stack) => {
                        *body = Body::Own(crate::spawn::own_coroutine(header, f, stack));
                        let Body::Own(co) = body else { unreachable!() };
                        co.get_mut().resume(Resume::GO)
                    }
                    Err(e) => {
                        drop_unrun(f);
                        self.prefix
                            .finish(Err(Failure::NoStack(e.into())), carriers.worker());
                        return None;
                    }
                }
            }
            #[cfg(feature = "stack-shared")]
            Body::Shared(ThreadBound(co)) => co.resume(Resume::GO),
            #[cfg(feature = "stack-shared")]
            Body::SharedPending(_) => {
                let Body::SharedPending(f) = std::mem::replace(body, Body::Gone) else {
                    unreachable!()
                };
                let Some(region) = crate::worker::current().map(|w| w.shared_region()) else {
                    unreachable!("tasks run on worker threads")
                };
                let region = match region {
                    Ok(region) => region,
                    Err(e) => {
                        // As a stack that cannot be had for an own-stack coroutine (above): the
                        // closure is dropped unrun, and the join says why.
                        drop_unrun(f);
                        self.prefix
                            .finish(Err(Failure::NoStack(e.into())), carriers.worker());
                        return None;
                    }
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
                co.resume(Resume::GO)
            }
            Body::Gone => return None,
        };
        match result {
            CoroutineResult::Yield(why) => Some(why),
            CoroutineResult::Return(outcome) => {
                // As `returned`, inlined here: most coroutines finish in their first run.
                *body = Body::Gone;
                self.prefix.finish(outcome, carriers.worker());
                None
            }
        }
    }
}

/// Installs `carrier` as the task's and starts the task on it (the common part of
/// [`TaskRef::start_carried`] and `TaskCell::run_pending`).
///
/// # Safety
///
/// The caller holds the task (popped it, on its worker's own stack; `carriers` is that
/// worker's), which is on the default stack and has not started (its body is
/// `OwnPending(None, _)`), and keeps no borrow of its carrier field.
#[inline(always)]
unsafe fn start_on(
    header: &Header,
    mut carrier: Carrier,
    carriers: &CarrierCache,
) -> Option<Suspend> {
    // The stack names the task it runs (a stack overflow's report reads it).
    spindle_stack::Stack::set_owner(
        carrier.co().stack(),
        spindle_stack::Owner {
            id: header.id,
            name: header.name.as_deref(),
        },
    );
    // SAFETY: the caller holds the task; nothing else borrows its carrier field.
    let co = unsafe { &mut *header.carrier.get() }.insert(carrier);
    match co.co().resume(Resume::start(header)) {
        CoroutineResult::Yield(Suspend::Finished(slot)) => {
            // SAFETY: the carrier has just handed the outcome back; `co` is not used again.
            unsafe { (header.vtable.finished)(ptr::NonNull::from(header), slot, carriers) };
            None
        }
        CoroutineResult::Yield(why) => Some(why),
        CoroutineResult::Return(()) => None,
    }
}

impl<T: Send + 'static> TaskPrefix<T> {
    /// Publishes the outcome and wakes the joiner. `here`: the worker running this (of the
    /// task's runtime: tasks run only on their own runtime's workers).
    #[inline(always)]
    fn finish(&self, outcome: Result<T, Failure>, here: usize) {
        // SAFETY: the task is not `COMPLETE` yet, and we are finishing it, once.
        unsafe { self.join.put(outcome) };
        // Leave the registry first, so that whoever finds the result sees the task gone.
        let key = self.header.registry_key.load(Ordering::Relaxed);
        let shared = self.header.shared();
        shared
            .tasks
            .ended(crate::registry::Key::from_bits(key), Some(here));
        // Nobody else can look any more: the worker's reference (the one it runs the task
        // with) is the only one — the handle was dropped, no waker or timer entry is out —
        // and the task has left its registry slot just above, so no new reference can be
        // made (see `TaskRef`'s drop). Nobody will read the state word or the join cell
        // again but the destruction, which follows when the worker lets go: `COMPLETE` (a
        // compare-and-swap) would tell nobody anything. A detached spawn that runs to its end
        // (the partner of a `ping_pong`, a leaf of a tree) finishes so. Not for a `T` with
        // drop glue: its detached value is dropped now, as the worker's own code
        // (`finish_flagged`), not later by the destruction.
        if !std::mem::needs_drop::<T>() && self.header.refs.load(Ordering::Acquire) == 1 {
            return;
        }
        let before = self.header.complete();
        if before & (State::JOIN_WAITER | State::SCOPE_WAITER | State::DETACHED) != 0 {
            self.finish_flagged(before);
        }
    }

    /// The rest of [`finish`](Self::finish) when the state it replaced (`before`) says a waker
    /// waits or the handle was dropped (`join_cell`).
    #[cold]
    #[inline(never)]
    fn finish_flagged(&self, before: u32) {
        // (`DETACHED` is only ever set for a `T` with drop glue: see `JoinHandle`'s drop; the
        // check compiles away for the others.)
        let before = if std::mem::needs_drop::<T>() {
            before
        } else {
            before & !State::DETACHED
        };
        let after = self.join.after_complete(&self.header.state, before);
        if let Some(value) = after.unwanted {
            // The value of a coroutine whose handle was dropped after the coroutine's own look
            // (see `coroutine_body`), dropped now: left in the task until its last reference
            // went, a value that held the coroutine's own waker (a channel's kept packet) kept
            // the task, and so itself, alive for good. Dropped in a cleanup coroutine, where its
            // destructor may park (see `in_cleanup_coroutine`).
            let task = self.header.id;
            crate::worker::in_cleanup_coroutine(
                || format!("spindle-rt cleanup: the unread value of task #{task}"),
                move || drop(value),
            );
        }
        if let Some(w) = after.waiter {
            wake_as_worker(w);
        }
        if let Some(w) = after.scope_waiter {
            wake_as_worker(w);
        }
    }
}

/// Wakes `waker` from code the worker runs on its own stack while a finished task is still its
/// current one. A task's waker (the common case: a coroutine joining) only schedules, and a
/// thread's only unparks: both are woken here. Any other — a future's, polled by some executor
/// — may run anything, a blocking wait included, so it is woken in a cleanup coroutine (see
/// `worker::in_cleanup_coroutine`), where a park parks that coroutine, not the worker.
#[inline]
fn wake_as_worker(waker: Waker) {
    // A task's waker only schedules; a thread's or `block_on`'s (spindle-park's own) only sets
    // a flag and unparks: inline. Any other may run anything, a blocking wait included.
    if ptr::eq(waker.vtable(), &WAKER_VTABLE) || spindle_park::wakes_without_blocking(&waker) {
        waker.wake();
    } else {
        wake_foreign(waker);
    }
}

#[cold]
#[inline(never)]
fn wake_foreign(waker: Waker) {
    crate::worker::in_cleanup_coroutine(
        || "spindle-rt cleanup: a foreign waker's wake-up".to_string(),
        move || waker.wake(),
    );
}

/// A task whose result type is known: what a `JoinHandle` and a scope hold. Made only by
/// [`new_task`], with the task it describes, so `T` is that task's result type.
pub(crate) struct TypedTask<T> {
    task: TaskRef,
    /// Send and Sync as a shared join cell of `T` would be (the task itself is).
    _result: std::marker::PhantomData<Arc<JoinCell<T, Failure>>>,
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

    pub(crate) fn join(&self) -> &JoinCell<T, Failure> {
        // SAFETY: the task is a `TaskCell<T, F>` for this `T` (see the type's docs), which
        // starts with a `TaskPrefix<T>` (`repr(C)`), alive while `self` is.
        unsafe { &self.task.0.cast::<TaskPrefix<T>>().as_ref().join }
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
) -> impl FnOnce(&TaskYielder, Resume) -> Result<T, Failure> + 'static
where
    F: FnOnce() -> T + 'static,
    T: 'static,
{
    let header = SendPtr(header);
    move |yielder: &TaskYielder, _: Resume| {
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
                crate::coop::cancel_unwind(header);
            }
            f()
        }));
        // The body is over: a cancel that comes now is too late to act on (the result stands),
        // and a coroutine-local's destructor that parks must not unwind.
        header.hold_off_cancel_for_good();
        let mut outcome = match outcome {
            Ok(value) => Ok(value),
            Err(payload) => match CancelUnwind::spent(payload) {
                Ok(()) => Err(Failure::Cancelled),
                Err(payload) => Err(Failure::Panicked(payload)),
            },
        };
        // A value nobody will read (its handle was dropped) is dropped here, in the coroutine,
        // where its destructor may park: dropped by the worker as its own code it could park
        // the worker's thread for good (a lock held by another coroutine of that worker). A
        // handle dropped after this look leaves the value to `finish`, which drops it in a
        // cleanup coroutine.
        if std::mem::needs_drop::<T>()
            && outcome.is_ok()
            && header.state.load() & State::DETACHED != 0
            && let Ok(value) = std::mem::replace(&mut outcome, Err(Failure::ValueDropped))
        {
            drop_in_coroutine(value);
        }
        // Coroutine-locals die with the coroutine, on its stack, before it finishes; so do the
        // user values that will not be handed out (a return value displaced by a local's
        // panicking destructor, a second panic's payload): their destructors may park, or use
        // coroutine-locals, which only a coroutine that can still suspend allows. A destructor
        // may make locals again, so this goes on until none are left.
        loop {
            // SAFETY: the running coroutine's own locals; nothing borrows them now.
            if let Err(payload) = unsafe { crate::local::Locals::clear(header.locals.get()) } {
                match &mut outcome {
                    Ok(_) => {
                        let displaced =
                            std::mem::replace(&mut outcome, Err(Failure::Panicked(payload)));
                        drop_in_coroutine(displaced);
                    }
                    Err(_) => drop_in_coroutine(payload),
                }
            }
            // SAFETY: as above.
            if unsafe { &*header.locals.get() }.is_unused() {
                break;
            }
        }
        // From here on the coroutine cannot suspend, and coroutine-locals are refused (see
        // `LocalKey::with`); no user code of this coroutine runs any more.
        header.yielder.store(ptr::null_mut(), Ordering::Release);
        outcome
    }
}

/// Drops a user value inside the finishing coroutine; a panic from its destructor is dropped
/// the same way, and a panic from that one's is leaked (its payload forgotten): the coroutine's
/// outcome is already decided.
fn drop_in_coroutine<V>(value: V) {
    if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(value)))
        && let Err(again) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(payload)))
    {
        std::mem::forget(again);
    }
}

/// A raw pointer that may be moved into a `Send` closure (the task is `Sync`).
#[derive(Clone, Copy)]
pub(crate) struct SendPtr<T>(pub(crate) *const T);
// SAFETY: only used for the task header, which is Sync; the pointer is dereferenced only while
// the task is alive (see `coroutine_body`).
unsafe impl<T> Send for SendPtr<T> {}

/// The vtable of tasks running closure `F` with result `T` (what [`new_task`] sets; a spawn
/// fills the header it passes there with it too).
pub(crate) fn vtable_of<T, F>() -> &'static TaskVtable
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    TaskCell::<T, F>::VTABLE
}

/// Drops the closure of a coroutine that will never run (no stack could be had for it): in a
/// cleanup coroutine with a stack of its own, where a destructor that parks parks that
/// coroutine, not the worker (see [`in_cleanup_coroutine`](crate::worker::in_cleanup_coroutine),
/// whose last resort — no stack for it either — drops it as the worker's own code). A panic in
/// it goes no further than the panic hook (the join reports the missing stack).
#[cold]
fn drop_unrun<F: Send + 'static>(f: F) {
    crate::worker::in_cleanup_coroutine(
        || "spindle-rt cleanup: the closure of a task that never ran".to_string(),
        move || drop(f),
    );
}

/// Makes a task running `f`; `make` builds its body, given the task's header and `f`. Sets
/// the header's vtable and reference count (whatever `header` had there). Inlined, so that
/// the header is written straight into the task's block, not built in the caller's frame
/// and copied.
#[inline(always)]
pub(crate) fn new_task<T, F>(
    header: impl FnOnce() -> Header,
    f: F,
    make: impl FnOnce(&Header, F) -> Body<T, F>,
) -> (TaskRef, TypedTask<T>)
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let layout = std::alloc::Layout::new::<TaskCell<T, F>>();
    let cell = crate::task_alloc::alloc(layout).cast::<TaskCell<T, F>>();
    // Built in place in the allocation (a whole cell built on the stack would be copied in: a few
    // hundred bytes per spawn); the header is made only now, after the allocation, so that its
    // fields are stored straight into the block (made before, by the caller, it would be copied in
    // with a `memcpy`).
    // SAFETY: `cell` is a fresh block for a `TaskCell<T, F>` (its layout), ours alone.
    unsafe {
        cell.write(TaskCell {
            prefix: TaskPrefix {
                header: Header {
                    // The two references handed out below.
                    refs: AtomicUsize::new(2),
                    vtable: TaskCell::<T, F>::VTABLE,
                    ..header()
                },
                join: JoinCell::new(),
            },
            body: UnsafeCell::new(Body::Gone),
        });
    }
    // SAFETY: initialized just above; no other thread can see the task yet.
    let cell_ref = unsafe { cell.as_ref() };
    let body = make(&cell_ref.prefix.header, f);
    // SAFETY: no worker can see the task yet; we are its only user.
    unsafe { *cell_ref.body.get() = body };
    // The two references the count was set to.
    let task = TaskRef(cell.cast::<Header>());
    let typed = TypedTask {
        task: TaskRef(cell.cast::<Header>()),
        _result: std::marker::PhantomData,
    };
    (task, typed)
}
