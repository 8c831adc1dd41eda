//! Carriers: coroutines that run task after task on one pooled stack.
//!
//! Go does not free a goroutine that exits: `gfput` keeps the dead G with its stack on the P's free
//! list, and `gfget` hands it to the next `go` statement, which only resets its saved registers. A
//! carrier is that for Spindle: a coroutine on a stack of the runtime's pool whose body is a loop —
//! start the task it is handed, run it to its end, hand the outcome back, suspend until the next
//! task. A task on the runtime's default stack (`Body::OwnPending(None, _)`, the common spawn) is
//! started on an idle carrier of its worker's cache instead of on a new coroutine: no stack taken
//! from the pool, no context built, no coroutine torn down and no stack given back per spawn.
//!
//! # Protocol
//!
//! What a resume sends is a [`Resume`]: `GO` to a carrier in the middle of a task (the task's
//! parks and yields return it and ignore it), or, to an idle carrier, the header of the next
//! task to start or the order to end (`RETIRE`). A carrier whose task has ended suspends with
//! [`Suspend::Finished`], pointing at the outcome in that task's frame on its stack; the worker
//! moves the outcome out at once, before anything else can resume the carrier, and finishes the
//! task as it finishes one whose own coroutine returned. So an idle carrier's stack holds one
//! finished frame (the last task's `start`, outcome taken) and the loop.
//!
//! A carrier belongs to whichever task runs on it; while idle, to one worker's
//! [`CarrierCache`]. It is a `SendCoroutine`: a migratable task takes its carrier along, and
//! the carrier goes to the cache of the worker the task ends on. The loop itself keeps nothing
//! across a suspension but the yielder (on its own stack).
//!
//! Dropping a carrier suspended in a task (the runtime never does: it leaks unfinished tasks)
//! force-unwinds it like any coroutine: the task's body catches the unwind as a panic, hands
//! that outcome back, and the suspension that follows unwinds the rest. Dropping an idle one
//! retires it: it is resumed with `RETIRE` and returns, which is cheaper than an unwind.

use std::cell::UnsafeCell;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;

use spindle_coro::{CoroutineResult, SendCoroutine};

use crate::runtime::Shared;
use crate::spawn::TaskStack;
use crate::task::{Header, Suspend, TaskYielder};

/// A coroutine that runs tasks one after another (see the module docs). Boxed: it moves
/// between a cache and a task twice per task, and the box is two words where the coroutine
/// is a dozen (it is made once per carrier, not per task).
pub(crate) type Carrier = Box<CarrierCell>;

/// A carrier's coroutine and how many more tasks it may start before its stack goes back to
/// the pool.
pub(crate) struct CarrierCell {
    co: SendCoroutine<Resume, Suspend, (), TaskStack>,
    /// Starts left: the pool's `trim_every`. A stack gives back the memory a deep call
    /// touched when the pool recycles it (every `trim_every`-th recycle); a carrier keeps its
    /// stack across tasks, so after that many it retires and its stack is recycled.
    starts_left: u32,
}

impl CarrierCell {
    /// The coroutine (to resume, or read the stack of).
    #[inline]
    pub(crate) fn co(&mut self) -> &mut spindle_coro::Coroutine<Resume, Suspend, (), TaskStack> {
        self.co.get_mut()
    }
}

/// Idle carriers a worker keeps after its idle wake-up (see `WorkerCtx::release_idle_excess`);
/// while busy it keeps as many as the pool's thread cache keeps stacks (`PoolConfig::
/// thread_cache`): a burst of tasks that are alive at once (FIFO runs a spawning loop's
/// children after it) ends with a carrier each, and the next burst reuses them.
pub(crate) const IDLE_KEEP: usize = 64;

/// What a resume hands a task's coroutine (see the module docs): [`Resume::GO`] (carry on),
/// [`Resume::RETIRE`] (an idle carrier: end), or the header of the task an idle carrier is to
/// start.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Resume(*const Header);

// SAFETY: a `Resume` only carries a pointer from the resuming worker to the coroutine it
// resumes on that same thread; a start's header is that of a task the worker holds, alive
// until the task ends on this carrier.
unsafe impl Send for Resume {}

impl Resume {
    /// Carry on (every resume of a task in the middle of its run).
    pub(crate) const GO: Resume = Resume(std::ptr::null());
    /// End (an idle carrier only). No header is at this address (it is the alignment).
    const RETIRE: Resume = Resume(std::ptr::dangling());

    /// Starts the task of `header` (whose body is its closure, unrun).
    pub(crate) fn start(header: &Header) -> Resume {
        Resume(header)
    }

    /// The task to start, if this is a start.
    fn task(self) -> Option<NonNull<Header>> {
        if self.0 == Self::RETIRE.0 {
            return None;
        }
        NonNull::new(self.0.cast_mut())
    }
}

/// Where a task that ran on a carrier left its outcome: an `Option<Result<T, Failure>>` in its
/// `start` frame on the carrier's stack, which the worker takes (see the module docs).
#[derive(Clone, Copy, Debug)]
pub(crate) struct OutcomeSlot(pub(crate) *mut ());

// SAFETY: handed by the carrier to the worker that resumed it, on that thread, which takes the
// outcome before the carrier can run again.
unsafe impl Send for OutcomeSlot {}

/// The body of every carrier (see the module docs).
fn carrier_loop(yielder: &TaskYielder, first: Resume) {
    let mut next = first;
    // `GO` here would be a resume of an idle carrier that is not a start: never sent (only
    // tasks in the middle of their run get `GO`); ending is the harmless answer.
    while let Some(header) = next.task() {
        // SAFETY: the worker that resumed us with this start holds the task (it popped it and
        // runs it on this, its carrier, to the task's end), whose body is its unrun closure:
        // the contract of `Header::start_on_carrier`.
        next = unsafe { Header::start_on_carrier(header, yielder) };
    }
}

/// A worker's idle carriers. Touched only by its worker thread (it is a field of `WorkerCtx`,
/// which never leaves its thread).
pub(crate) struct CarrierCache {
    idle: UnsafeCell<Vec<Carrier>>,
    /// The worker's index, for its `idle_carriers` counter (the metrics' copy of the length).
    worker: usize,
}

impl CarrierCache {
    pub(crate) fn new(worker: usize) -> Self {
        CarrierCache {
            idle: UnsafeCell::new(Vec::new()),
            worker,
        }
    }

    /// The index of the worker whose cache this is.
    #[inline]
    pub(crate) fn worker(&self) -> usize {
        self.worker
    }

    /// Publishes the cache's length to the metrics.
    #[inline]
    fn count(&self, shared: &Shared, len: usize) {
        if let Some(c) = shared.counters.get(self.worker) {
            c.idle_carriers.store(len, Ordering::Relaxed);
        }
    }

    /// An idle carrier, or a new one on a stack of the runtime's pool. (Inlined for the
    /// common case, an idle one; the rest is out of line.)
    #[inline]
    pub(crate) fn take(&self, shared: &Shared) -> Result<Carrier, spindle_stack::StackError> {
        // SAFETY: only this worker's thread touches the cache, and no borrow of it is live
        // (none is held across a call that could come back here).
        let idle = unsafe { &mut *self.idle.get() };
        if let Some(mut carrier) = idle.pop() {
            self.count(shared, idle.len());
            carrier.starts_left -= 1;
            return Ok(carrier);
        }
        self.make(shared)
    }

    /// A new carrier on a stack of the runtime's pool.
    #[inline(never)]
    fn make(&self, shared: &Shared) -> Result<Carrier, spindle_stack::StackError> {
        let stack = shared.stacks.get().map(TaskStack::Pooled)?;
        let co = spindle_coro::Builder::new()
            // A cancelled task's destructors may park while it unwinds, as on a coroutine of
            // its own (`spawn::coroutine_builder`).
            .allow_suspend_while_unwinding()
            .build_with_stack(stack, carrier_loop);
        // SAFETY: the loop keeps nothing thread-bound across a suspension (see the module
        // docs); what each task does is covered by its own spawn's contract, as for a task's
        // own coroutine (`spawn::own_coroutine`): it stays on its home worker unless the
        // spawner made it migratable with the unsafe builder option.
        let co = unsafe { SendCoroutine::new(co) };
        Ok(Box::new(CarrierCell {
            co,
            // This start included (at least one).
            starts_left: shared.stacks.config().trim_every.max(1) - 1,
        }))
    }

    /// Keeps `carrier` (idle: its task has ended) for the next start, or retires it if the
    /// cache is full. `shared`: the worker's runtime.
    #[inline]
    pub(crate) fn put(&self, shared: &Shared, carrier: Carrier) {
        // SAFETY: as in `take`.
        let idle = unsafe { &mut *self.idle.get() };
        if carrier.starts_left > 0
            && idle.len() < shared.stacks.config().thread_cache
            && idle.len() < idle.capacity()
        {
            idle.push(carrier);
            self.count(shared, idle.len());
        } else {
            self.put_slow(shared, carrier);
        }
    }

    /// [`put`](Self::put) when the cache's vector must grow, or the carrier retires.
    #[inline(never)]
    fn put_slow(&self, shared: &Shared, carrier: Carrier) {
        // SAFETY: as in `take`.
        let idle = unsafe { &mut *self.idle.get() };
        if carrier.starts_left > 0 && idle.len() < shared.stacks.config().thread_cache {
            idle.push(carrier);
            self.count(shared, idle.len());
        } else {
            retire(carrier);
        }
    }

    /// Idle carriers now.
    pub(crate) fn len(&self) -> usize {
        // SAFETY: as in `take`.
        unsafe { (*self.idle.get()).len() }
    }

    /// Retires idle carriers beyond `keep` (their stacks go back to the pool). `shared`: the
    /// worker's runtime.
    pub(crate) fn trim(&self, shared: &Shared, keep: usize) {
        // The excess is taken out first, so that a retire cannot see the vector.
        let excess = {
            // SAFETY: as in `take`.
            let idle = unsafe { &mut *self.idle.get() };
            let excess = idle.split_off(keep.min(idle.len()));
            self.count(shared, idle.len());
            excess
        };
        excess.into_iter().for_each(retire);
    }

    /// Retires every idle carrier. `shared`: the worker's runtime.
    pub(crate) fn clear(&self, shared: &Shared) {
        self.trim(shared, 0);
    }

    fn retire_all(&self) {
        // SAFETY: as in `take`; taken out first, so that a retire cannot see the vector.
        let idle = std::mem::take(unsafe { &mut *self.idle.get() });
        idle.into_iter().for_each(retire);
    }
}

impl Drop for CarrierCache {
    fn drop(&mut self) {
        // (The worker clears it on its way out; this is for an unwinding worker thread.)
        self.retire_all();
    }
}

/// Ends an idle carrier: its loop returns, and the finished coroutine's drop gives the stack
/// back to the pool.
#[allow(clippy::boxed_local)] // `Carrier` is a box: this is how carriers are held
fn retire(mut carrier: Carrier) {
    let co = carrier.co();
    match co.resume(Resume::RETIRE) {
        CoroutineResult::Return(()) => {}
        // An idle carrier only suspends in a task's start; `RETIRE` makes that return into the
        // loop, which ends. Anything else would be a task's suspension: dropping it unwinds it.
        CoroutineResult::Yield(_) => debug_assert!(false, "a retired carrier suspended"),
    }
    debug_assert!(co.is_finished());
}
