//! Structured concurrency: coroutines that may borrow from the caller, all joined before the
//! scope returns.

use std::cell::UnsafeCell;
use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::join::{JoinError, JoinHandle};
use crate::runtime::Shared;
use crate::spawn::{Builder, spawn_on};
use crate::task::{Failure, State, TypedTask, lock};
use crate::worker;

/// The result slot of a scoped coroutine: written once by the coroutine, read by the joiner
/// after `join` returned. Shared (an `Arc`) so that it lives as long as either side needs it —
/// a detached child of a scope may finish after its handle is gone.
struct Slot<T>(UnsafeCell<Option<T>>);
// SAFETY: the cell is written once by the coroutine and read by the joiner only after `join`
// returned, which happens-after the coroutine finished (the join cell's mutex); T: Send.
unsafe impl<T: Send> Send for Slot<T> {}
// SAFETY: as above: the two accesses never overlap.
unsafe impl<T: Send> Sync for Slot<T> {}

/// A coroutine that may borrow for `'a`: its [`Drop`] joins it, so it cannot outlive `'a`.
pub(crate) struct ScopedJoin<'a, T> {
    handle: Option<JoinHandle<()>>,
    slot: Arc<Slot<T>>,
    /// Whether dropping waits for the coroutine. A [`Scope`]'s children do not: the scope
    /// waits for all of them itself (as `std::thread::scope` does), so dropping a handle
    /// detaches the child within the scope.
    wait_on_drop: bool,
    _borrows: PhantomData<&'a ()>,
}

/// Spawns `f`, which may borrow for `'a`.
///
/// # Safety
///
/// The returned `ScopedJoin` must be dropped or joined before `'a` ends (so: not leaked with
/// `mem::forget`): its drop waits for the coroutine to finish.
pub(crate) unsafe fn scoped_spawn<'a, F, T>(
    shared: &Arc<Shared>,
    builder: Builder,
    f: F,
) -> io::Result<ScopedJoin<'a, T>>
where
    F: FnOnce() -> T + Send + 'a,
    T: Send + 'a,
{
    let slot = Arc::new(Slot(UnsafeCell::new(None)));
    let writer = slot.clone();
    let job: Box<dyn FnOnce() + Send + 'a> = Box::new(move || {
        let value = f();
        // SAFETY: the only write, before the coroutine finishes; nobody reads the slot before
        // `join` returned (see `Slot`).
        unsafe { *writer.0.get() = Some(value) };
    });
    // SAFETY: only the lifetime bound changes. The closure may borrow for 'a; the caller
    // guarantees (this function's contract) that the coroutine finishes before 'a ends.
    let job: Box<dyn FnOnce() + Send + 'static> = unsafe {
        std::mem::transmute::<Box<dyn FnOnce() + Send + 'a>, Box<dyn FnOnce() + Send + 'static>>(
            job,
        )
    };
    let handle = spawn_on(shared, builder, job)?;
    Ok(ScopedJoin {
        handle: Some(handle),
        wait_on_drop: true,
        slot,
        _borrows: PhantomData,
    })
}

impl<T> ScopedJoin<'_, T> {
    pub(crate) fn join(mut self) -> Result<T, JoinError> {
        let handle = self.handle.take().expect("joined once");
        let outcome = handle.join();
        outcome.map(|()| {
            // SAFETY: the coroutine finished (join returned Ok), after writing the slot.
            unsafe { (*self.slot.0.get()).take() }
                .expect("a finished scoped coroutine left its value")
        })
    }
}

impl<T> Drop for ScopedJoin<'_, T> {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take()
            && self.wait_on_drop
        {
            // Borrowed data must outlive the coroutine: wait for it, whatever happens (a
            // cancellation of the waiting coroutine included).
            let _no_cancel = spindle_park::defer_cancel();
            wait_done(&handle.task, None);
        }
    }
}

/// Runs `f` with a [`Scope`] on which it can spawn coroutines that borrow from the caller; all
/// of them are joined before `scope` returns.
///
/// Works like [`std::thread::scope`], in a coroutine of a runtime (it suspends only the
/// caller while it waits):
/// * every child is joined before `scope` returns (even if `f` or a child panics);
/// * if `f` panics, or a child panics, the children still running are **cancelled** (they
///   unwind from their next suspension point), then joined; then the panic continues from
///   `scope` — `f`'s if it panicked, else the first child's (unless that child's handle was
///   joined, which consumes its panic, as with threads);
/// * if the coroutine running `scope` is cancelled, the children are cancelled too and joined
///   before anything unwinds past `scope` (they may borrow from its caller): a cancellation
///   that unwound `f` continues from `scope` once they have finished, and one that comes
///   while `scope` waits for them takes effect at the coroutine's next suspension point.
///
/// A scope keeps what it needs of its children, not all it ever spawned: those that may still
/// run and those that panicked without being joined. A long-lived scope (a server whose
/// connection coroutines borrow from the caller) holds memory for its running children only.
///
/// ```
/// let rt = spindle_rt::Runtime::builder().workers(2).build()?;
/// let mut numbers = vec![1, 2, 3];
/// let total = rt.block_on(|| {
///     spindle_rt::scope(|s| {
///         let left = s.spawn(|| numbers[..2].iter().sum::<i32>());
///         let right = s.spawn(|| numbers[2..].iter().sum::<i32>());
///         left.join().unwrap() + right.join().unwrap()
///     })
/// });
/// assert_eq!(total, 6);
/// numbers.push(4); // the borrows have ended
/// # Ok::<(), spindle_rt::BuildError>(())
/// ```
///
/// # Panics
///
/// Outside a coroutine of a runtime — on a runtime's worker thread too, in code the worker runs
/// as its own (a detached coroutine's value dropped when it finishes, say): the children would
/// be queued on the worker that the scope's wait blocks — and as described above.
pub fn scope<'env, F, T>(f: F) -> T
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> T,
{
    let Some(shared) = worker::current_shared() else {
        panic!("spindle_rt::scope called outside a runtime: call it from a coroutine");
    };
    if !spindle_park::in_task() {
        panic!(
            "spindle_rt::scope called on a runtime's worker thread outside its coroutines (a \
             destructor the worker runs, say): it would block the worker, which may be the one \
             that must run the children; call it from a coroutine, or spawn the work instead"
        );
    }
    let scope = Scope {
        shared,
        children: Arc::new(Children {
            list: Mutex::new(ChildList {
                tasks: Vec::new(),
                waited: 0,
                prune_at: ChildList::MIN_PRUNE_AT,
            }),
            failed: AtomicBool::new(false),
        }),
        _scope: PhantomData,
        _env: PhantomData,
    };
    let body = catch_unwind(AssertUnwindSafe(|| f(&scope)));
    // From here until every child has finished this coroutine must not unwind: the children
    // may borrow from its frame. A cancellation of it — which unwound the body into `body`, or
    // comes while we wait below — is held off, cancels the children (so that the scope ends
    // soon), and takes effect at the coroutine's next suspension point after the scope.
    let _no_cancel = spindle_park::defer_cancel();
    if body.is_err() {
        scope.children.cancel_all();
    }
    // Join every child (their handles may be gone: wait on the tasks themselves). Children
    // may spawn more children through the shared `&Scope` until they finish, so the list can
    // grow while we wait: take its entries one at a time until none is left. Each entry is
    // pushed by the body or a child that has not finished yet (and so is still in the list:
    // pruning keeps unfinished children), so once every entry has finished nothing can add
    // another. (The list is not taken out: a child that fails while we wait still finds its
    // siblings there to cancel. The cursor lives in the list, which a spawn meanwhile may
    // prune.)
    while let Some(task) = {
        let mut list = lock(&scope.children.list);
        let next = list.tasks.get(list.waited).cloned();
        list.waited += usize::from(next.is_some());
        next
    } {
        wait_done(&task, Some(&scope.children));
    }
    // Only now take a child's panic: while a sibling still runs it may hold the failed
    // child's handle and join it (which consumes the panic); taken from under it, its join
    // found no result and waited for ever — and so did the scope, for that sibling. Now every
    // handle's holder (the body, a child) has finished.
    let tasks = std::mem::take(&mut lock(&scope.children.list).tasks);
    let child_panic = tasks.iter().find_map(|task| {
        let panic = task.join().with_result(&task.header().state, |result| {
            result.take_if(|r| matches!(r, Err(Failure::Panicked(_))))
        })?;
        match panic {
            Some(Err(Failure::Panicked(p))) => Some(p),
            _ => None,
        }
    });
    match body {
        Err(p) => resume_unwind(p),
        Ok(value) => match child_panic {
            Some(p) => resume_unwind(p),
            None => value,
        },
    }
}

/// Parks until `task` has finished, without taking its result. The caller holds off its own
/// cancellation (a cancelled coroutine's park unwinds); if one is requested meanwhile, the
/// scope's `children` (if given) are cancelled, so that the wait ends soon.
fn wait_done<T>(task: &TypedTask<T>, children: Option<&Children>) {
    loop {
        if let Some(children) = children
            && !children.failed.load(Ordering::Acquire)
            && spindle_park::cancel_requested()
        {
            children.cancel_all();
        }
        if task.header().is_complete()
            || !task.join().register(
                &task.header().state,
                State::SCOPE_WAITER,
                |_| false,
                spindle_park::waker,
            )
        {
            return;
        }
        spindle_park::park();
    }
}

/// The children of one scope.
struct Children {
    list: Mutex<ChildList>,
    failed: AtomicBool,
}

/// The children a scope still needs, in spawn order: those that may not have finished (to
/// cancel and wait for) and finished ones whose panic nobody took (to propagate). The others
/// are pruned as the list grows, so a long-lived scope holds its running children, not every
/// child it ever spawned.
struct ChildList {
    tasks: Vec<TypedTask<()>>,
    /// How many of `tasks`, from the start, the scope's final wait has taken.
    waited: usize,
    /// The length of `tasks` at which the next spawn prunes it: twice what the last pruning
    /// kept, so that pruning costs O(1) per spawn, amortised.
    prune_at: usize,
}

impl ChildList {
    const MIN_PRUNE_AT: usize = 64;

    /// Adds a child; first prunes the list if it has grown enough. Returns the pruned
    /// children, for the caller to drop outside the lock (a task's last reference may go).
    fn push(&mut self, task: TypedTask<()>) -> Vec<TypedTask<()>> {
        let pruned = if self.tasks.len() >= self.prune_at {
            self.prune()
        } else {
            Vec::new()
        };
        self.tasks.push(task);
        pruned
    }

    /// Drops the children the scope no longer needs (keeping the order of the rest and the
    /// final wait's place among them); returns them.
    fn prune(&mut self) -> Vec<TypedTask<()>> {
        let mut kept = 0;
        let mut kept_before_cursor = 0;
        for i in 0..self.tasks.len() {
            if still_needed(&self.tasks[i]) {
                self.tasks.swap(kept, i);
                kept += 1;
                if i < self.waited {
                    kept_before_cursor += 1;
                }
            }
        }
        let pruned = self.tasks.split_off(kept);
        self.waited = kept_before_cursor;
        self.prune_at = (2 * kept).max(Self::MIN_PRUNE_AT);
        // A spike's capacity goes too, down to what the list may grow to before the next prune.
        self.tasks.shrink_to(self.prune_at);
        pruned
    }
}

/// Whether a scope still needs `task`: it may not have finished, or it panicked and nobody
/// took the panic (by joining its handle).
fn still_needed(task: &TypedTask<()>) -> bool {
    task.join()
        .with_result(&task.header().state, |result| {
            matches!(result, Some(Err(Failure::Panicked(_))))
        })
        .unwrap_or(true)
}

impl Children {
    fn cancel_all(&self) {
        self.failed.store(true, Ordering::Release);
        let tasks: Vec<_> = lock(&self.list).tasks.clone();
        for t in tasks {
            crate::join::cancel_task(t.task_ref());
        }
    }
}

/// Spawns coroutines that may borrow from the environment of a [`scope`] call.
pub struct Scope<'scope, 'env: 'scope> {
    shared: Arc<Shared>,
    children: Arc<Children>,
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

impl fmt::Debug for Scope<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scope")
            .field("children_kept", &lock(&self.children.list).tasks.len())
            .finish()
    }
}

impl<'scope> Scope<'scope, '_> {
    /// Spawns a coroutine that may borrow anything that outlives the scope.
    ///
    /// # Panics
    ///
    /// If the runtime is shutting down. (Its stack is taken when it first runs: see
    /// [`spawn`](crate::spawn()).)
    pub fn spawn<F, T>(&'scope self, f: F) -> ScopedJoinHandle<'scope, T>
    where
        F: FnOnce() -> T + Send + 'scope,
        T: Send + 'scope,
    {
        let children = self.children.clone();
        let guarded = move || match catch_unwind(AssertUnwindSafe(f)) {
            Ok(v) => v,
            Err(p) => {
                // A failing child cancels its siblings, then fails itself.
                children.cancel_all();
                resume_unwind(p)
            }
        };
        // SAFETY: `scope` waits for every child (through `children`) before it returns or
        // unwinds, and the `ScopedJoin` lives in the handle, which cannot outlive 'scope.
        let join = unsafe { scoped_spawn(&self.shared, Builder::new(), guarded) };
        let mut join = match join {
            Ok(j) => j,
            Err(e) => panic!("cannot spawn a scoped coroutine: {e}"),
        };
        // The scope waits for this child (below, through `children`), not the handle.
        join.wait_on_drop = false;
        let task = join.handle.as_ref().expect("fresh").task.clone();
        let pruned = lock(&self.children.list).push(task);
        drop(pruned);
        if self.children.failed.load(Ordering::Acquire) {
            join.handle.as_ref().expect("fresh").cancel();
        }
        ScopedJoinHandle { join }
    }
}

/// A handle to a coroutine of a [`Scope`].
pub struct ScopedJoinHandle<'scope, T> {
    join: ScopedJoin<'scope, T>,
}

impl<T> ScopedJoinHandle<'_, T> {
    /// Waits for the coroutine and returns its value (see [`JoinHandle::join`]). Joining
    /// consumes its panic: the scope does not propagate it again.
    ///
    /// # Errors
    ///
    /// As for [`JoinHandle::join`].
    pub fn join(self) -> Result<T, JoinError> {
        self.join.join()
    }

    /// Cancels the coroutine (see [`JoinHandle::cancel`]).
    pub fn cancel(&self) {
        if let Some(h) = &self.join.handle {
            h.cancel();
        }
    }

    /// Whether the coroutine has finished.
    pub fn is_finished(&self) -> bool {
        self.join
            .handle
            .as_ref()
            .is_none_or(JoinHandle::is_finished)
    }
}

impl<T> fmt::Debug for ScopedJoinHandle<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScopedJoinHandle").finish_non_exhaustive()
    }
}
