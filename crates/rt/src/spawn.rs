//! Spawning coroutines, and `block_on`.

use std::cell::{Cell, UnsafeCell};
use std::fmt;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize};

use spindle_coro::SendCoroutine;
use spindle_sched::Reason;
#[cfg(feature = "stack-growable")]
use spindle_stack::GrowableStack;
use spindle_stack::{PooledStack, StackError};

use crate::join::JoinHandle;
use crate::runtime::{Handle, Runtime, Shared, StackKind};
use crate::task::{Body, Header, NO_HOME, coroutine_body, new_task};
use crate::worker;

/// Spawns a coroutine on the current runtime and returns a handle to join or cancel it.
///
/// Works from the runtime's coroutines and worker threads. (From any other thread, spawn
/// through a [`Handle`] or the [`Runtime`].)
///
/// # Panics
///
/// If there is no current runtime, or it is shutting down (use [`Builder::spawn`] to get that
/// as an error).
///
/// The coroutine takes its stack when it first runs; if none can be had then (out of memory,
/// `vm.max_map_count`), it does not run and its join returns
/// [`JoinError::NoStack`](crate::JoinError::NoStack) saying why. To be refused at the spawn
/// instead, use [`Builder::reserve_stack`].
pub fn spawn<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    // Borrowed, not cloned: the spawn does not suspend, and a clone of the `Arc` would be two
    // read-modify-writes per spawn on a cache line every worker writes.
    let Some(worker) = worker::current() else {
        panic!(
            "spindle_rt::spawn called outside a runtime: spawn through a Runtime or a Handle, or \
             call it from a coroutine of a runtime"
        );
    };
    match spawn_plain(worker, f) {
        Some(handle) => handle,
        None => panic!("cannot spawn a coroutine: {}", closing_error()),
    }
}

/// The error of a spawn on a runtime that is shutting down.
fn closing_error() -> io::Error {
    io::Error::other("the runtime is shutting down: no new coroutines")
}

/// [`spawn_at`] with a default [`Builder`] by `worker`, on its own thread (plain [`spawn`] from a
/// coroutine): the same task, made without the builder's choices (no name, the default stack at the
/// first run — on a carrier —, not migratable), which the compiler does not fold away from a
/// default builder. `None`: the runtime is closing.
#[inline]
fn spawn_plain<F, T>(worker: &worker::WorkerCtx, f: F) -> Option<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let (shared, here) = (&worker.shared, worker.index);
    if shared.closing.load(std::sync::atomic::Ordering::Acquire) {
        return None;
    }
    let header = || new_header::<T, F>(shared, worker.next_task_id(), None, false, false, true);
    let (task_ref, typed) = new_task(header, f, |_, f| Body::OwnPending(None, f));
    // As in `spawn_at`: counted now, and a worker's spawn needs no second look at `closing`.
    shared.tasks.spawned(Some(here));
    shared.schedule_from(Some(here), task_ref, Reason::Spawned);
    Some(JoinHandle { task: typed })
}

/// A new task's header: active, with a fresh id, no home yet.
#[inline(always)]
fn new_header<T, F>(
    shared: &Arc<Shared>,
    id: u64,
    name: Option<Arc<str>>,
    migratable: bool,
    copying: bool,
    starts_on_carrier: bool,
) -> Header
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    Header {
        state: crate::state::TaskState::new_active(),
        id,
        name,
        // Like every coroutine, a shared-stack one may start on any worker (before its first
        // run it has no stack: `Body::SharedPending`), and stays on the one that first runs
        // it, whose region holds its stack from then on. (Pinning it at spawn instead kept a
        // tree of them — skynet — on the root's worker alone.)
        home: AtomicUsize::new(NO_HOME),
        migratable,
        yielder: AtomicPtr::new(std::ptr::null_mut()),
        vtable: crate::task::vtable_of::<T, F>(),
        refs: AtomicUsize::new(0), // set by `new_task`
        park_seq: AtomicU64::new(0),
        no_cancel: Cell::new(0),
        copying,
        starts_on_carrier,
        pins: Cell::new(0),
        defers_cancel: std::sync::atomic::AtomicBool::new(false),
        timer: Cell::new(None),
        registry_key: AtomicU64::new(crate::registry::Key::NONE.to_bits()),
        shared: std::ptr::NonNull::from(&**shared),
        carrier: UnsafeCell::new(None),
        locals: UnsafeCell::new(crate::local::Locals::default()),
    }
}

/// Configures one coroutine before spawning it: its name (used in stack-overflow and stuck
/// reports), its stack, and whether it may migrate.
///
/// ```
/// let rt = spindle_rt::Runtime::builder().workers(2).build()?;
/// let sum = rt.block_on(|| {
///     let h = spindle_rt::Builder::new()
///         .name("adder")
///         .stack_size(64 * 1024)
///         .spawn(|| 2 + 2)
///         .expect("a stack");
///     h.join().unwrap()
/// });
/// assert_eq!(sum, 4);
/// # Ok::<(), spindle_rt::BuildError>(())
/// ```
#[derive(Clone, Default)]
pub struct Builder {
    name: Option<Arc<str>>,
    stack: Option<StackKind>,
    migratable: bool,
    reserve_stack: bool,
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("name", &self.name)
            .field("stack", &self.stack)
            .field("migratable", &self.migratable)
            .field("reserve_stack", &self.reserve_stack)
            .finish()
    }
}

impl Builder {
    /// A coroutine with the runtime's defaults.
    pub fn new() -> Self {
        Builder::default()
    }

    /// Names the coroutine.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(Arc::from(name.into()));
        self
    }

    /// A fixed stack of this many usable bytes (instead of the runtime's default size). A size
    /// other than the runtime's comes from the runtime's pool of that size, which it keeps
    /// while it lives, trimmed like its own pool (see [`RuntimeBuilder::stack_pool`]).
    ///
    /// At least [`MIN_STACK_SIZE`] (8 KiB): a smaller size makes [`spawn`](Builder::spawn)
    /// fail with an error that names it. A small stack holds small frames only: a panic's
    /// backtrace (`RUST_BACKTRACE`) or deep formatting needs tens of KiB, and an overflow ends
    /// the process with a message naming the coroutine.
    ///
    /// [`RuntimeBuilder::stack_pool`]: crate::RuntimeBuilder::stack_pool
    pub fn stack_size(mut self, size: usize) -> Self {
        self.stack = Some(StackKind::Pooled { size });
        self
    }

    /// Another kind of stack for this coroutine. ([`StackKind::Shared`] is refused here: it
    /// takes the `unsafe` [`shared_stack`](Builder::shared_stack).)
    pub fn stack(mut self, kind: StackKind) -> Self {
        if kind != StackKind::Shared {
            self.stack = Some(kind);
        }
        self
    }

    /// Takes the coroutine's stack now, at spawn, instead of when it first runs, so that
    /// running out of stacks (memory, address space, `vm.max_map_count`) is an error of
    /// [`spawn`](Builder::spawn) itself: admission control, for a server that would rather
    /// refuse a connection than queue a coroutine that cannot start.
    ///
    /// By default a coroutine takes its stack when a worker first runs it: a burst of spawns
    /// holds no stacks while it waits, and coroutines that run one after another reuse the
    /// same cache-warm pooled stacks. One that then gets no stack does not run; its
    /// [`join`](crate::JoinHandle::join) returns [`JoinError::NoStack`](crate::JoinError::NoStack).
    /// (Shared-stack coroutines need no stack of their own; this option does not apply to
    /// them.)
    ///
    /// ```
    /// let rt = spindle_rt::Runtime::builder().workers(1).build()?;
    /// rt.block_on(|| {
    ///     match spindle_rt::Builder::new().reserve_stack().spawn(|| 1) {
    ///         Ok(h) => assert_eq!(h.join().unwrap(), 1),
    ///         Err(e) => eprintln!("refused: {e}"), // e.g. at the vm.max_map_count ceiling
    ///     }
    /// });
    /// # Ok::<(), spindle_rt::BuildError>(())
    /// ```
    pub fn reserve_stack(mut self) -> Self {
        self.reserve_stack = true;
        self
    }

    /// Runs the coroutine on its worker's shared (copying) stack: its used bytes are copied
    /// out when another coroutine takes the region and back when it resumes, so a suspended
    /// coroutine costs only what it uses (a few hundred bytes) — the way to have a million of
    /// them. Like any coroutine it may be stolen before its first run; from then on it stays
    /// on the worker that first ran it (whose region holds its stack), even with
    /// [`migratable`](Builder::migratable).
    ///
    /// # Safety
    ///
    /// The contract of `spindle_coro::Coroutine::with_shared_stack`: while the coroutine is
    /// suspended its stack bytes are elsewhere, so **nothing may use a pointer into its stack
    /// while it is suspended**. In particular it must not suspend while a scoped child
    /// ([`crate::scope`]), a [`crate::blocking`] closure or a scoped thread borrows data on its
    /// stack, nor lend a buffer on its stack to anything that runs meanwhile. Spindle's own
    /// waiting (join, sleep, park, the sync primitives) keeps its records in heap state, and
    /// [`block_on_owned_future`](crate::block_on_owned_future) moves the future it waits for to
    /// the heap ([`block_on_future`](crate::block_on_future), which may be handed a future
    /// that lies on the stack, panics there).
    pub unsafe fn shared_stack(mut self) -> Self {
        self.stack = Some(StackKind::Shared);
        self
    }

    /// Lets the scheduler move the coroutine to another worker thread at any suspension point,
    /// not only before its first run.
    ///
    /// # Safety
    ///
    /// Whatever the coroutine holds across a suspension — in its own frames and in the closure
    /// — must be usable from another thread:
    /// * no reference into a thread-local, and no `thread_local!` access whose address the
    ///   compiler could have computed before a suspension and reused after it (keep every
    ///   thread-local access inside one function call that does not suspend);
    /// * no `!Send` value shared with code that stays on the old thread (`Rc`, `RefCell`
    ///   guards…), no thread-affine OS object (a held `std::sync::Mutex` guard, thread-bound
    ///   handles).
    ///
    /// Shared (copying) stacks never migrate; this option does not apply to them.
    ///
    /// A migratable coroutine moves when another worker takes it from a queue (after a yield
    /// or a wake-up). The timer of its sleeps (and waits with a deadline) is armed where other
    /// threads may fire it: while the worker it parked on is kept by a coroutine that does not
    /// suspend, the monitor fires it once the stuck threshold has passed, and the coroutine
    /// wakes on another worker (see "Fairness" in the crate docs; not with
    /// `stuck_threshold(None)`). The IO it waits for is dispatched by that worker's driver
    /// only: such a wait lasts until the worker comes back, although another one may be idle.
    ///
    /// A [`CancelGuard`](crate::CancelGuard) it makes ends its deferral only when the coroutine
    /// itself drops it: one that other code drops (a thread-local can carry it) leaves the
    /// coroutine's cancellation deferred for good, as the runtime cannot touch the deferral of
    /// a coroutine that may be running on another thread.
    pub unsafe fn migratable(mut self) -> Self {
        self.migratable = true;
        self
    }

    /// Spawns the coroutine on the current runtime.
    ///
    /// # Errors
    ///
    /// No current runtime ([`io::ErrorKind::Other`]), the runtime is shutting down, or — with
    /// [`reserve_stack`](Builder::reserve_stack) — no stack can be had (out of memory,
    /// `vm.max_map_count`: the message says which and what to do).
    pub fn spawn<F, T>(self, f: F) -> io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let worker = worker::current().ok_or_else(|| {
            io::Error::other("spindle_rt::Builder::spawn called outside a runtime")
        })?;
        spawn_at(&worker.shared, Some(worker.index), self, f)
    }

    /// Spawns the coroutine on the runtime of `handle`.
    ///
    /// # Errors
    ///
    /// As for [`spawn`](Builder::spawn), minus "no current runtime".
    pub fn spawn_on<F, T>(self, handle: &Handle, f: F) -> io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        spawn_on(&handle.shared, self, f)
    }
}

/// A coroutine's stack, whichever kind.
pub(crate) enum TaskStack {
    Pooled(PooledStack),
    #[cfg(feature = "stack-growable")]
    Growable(GrowableStack),
}

// SAFETY: delegates to the inner stacks, which uphold the contract; the bound on the usable
// size is the smaller of theirs.
unsafe impl spindle_stack::Stack for TaskStack {
    #[cfg(not(feature = "stack-growable"))]
    const MIN_USABLE_SIZE: usize = <PooledStack as spindle_stack::Stack>::MIN_USABLE_SIZE;
    #[cfg(feature = "stack-growable")]
    const MIN_USABLE_SIZE: usize = {
        let pooled = <PooledStack as spindle_stack::Stack>::MIN_USABLE_SIZE;
        let growable = <GrowableStack as spindle_stack::Stack>::MIN_USABLE_SIZE;
        if pooled < growable { pooled } else { growable }
    };

    fn top(&self) -> std::ptr::NonNull<u8> {
        match self {
            TaskStack::Pooled(s) => s.top(),
            #[cfg(feature = "stack-growable")]
            TaskStack::Growable(s) => s.top(),
        }
    }
    fn limit(&self) -> std::ptr::NonNull<u8> {
        match self {
            TaskStack::Pooled(s) => s.limit(),
            #[cfg(feature = "stack-growable")]
            TaskStack::Growable(s) => s.limit(),
        }
    }
    fn usable_size(&self) -> usize {
        match self {
            TaskStack::Pooled(s) => s.usable_size(),
            #[cfg(feature = "stack-growable")]
            TaskStack::Growable(s) => s.usable_size(),
        }
    }
    fn guard_size(&self) -> usize {
        match self {
            TaskStack::Pooled(s) => s.guard_size(),
            #[cfg(feature = "stack-growable")]
            TaskStack::Growable(s) => s.guard_size(),
        }
    }
    fn set_owner(&self, owner: spindle_stack::Owner<'_>) {
        match self {
            TaskStack::Pooled(s) => s.set_owner(owner),
            #[cfg(feature = "stack-growable")]
            TaskStack::Growable(s) => s.set_owner(owner),
        }
    }
}

pub(crate) fn stack_for(shared: &Shared, kind: Option<StackKind>) -> Result<TaskStack, StackError> {
    match kind {
        None => shared.stacks.get().map(TaskStack::Pooled),
        Some(StackKind::Pooled { size }) => {
            if size == shared.stacks.config().stack_size {
                shared.stacks.get().map(TaskStack::Pooled)
            } else {
                // A size the runtime's pool does not hold: the runtime's pool of that size,
                // shared by its coroutines that ask for it.
                shared.pool_of_size(size)?.get().map(TaskStack::Pooled)
            }
        }
        #[cfg(feature = "stack-growable")]
        Some(StackKind::Growable { initial, max }) => {
            GrowableStack::new(initial, max).map(TaskStack::Growable)
        }
        #[cfg(not(feature = "stack-growable"))]
        Some(StackKind::Growable { .. }) => Err(StackError::Disabled {
            what: "a growable stack (StackKind::Growable)",
            feature: "growable",
        }),
        Some(StackKind::Shared) => unreachable!("shared stacks are per worker"),
    }
}

/// The smallest stack a coroutine may ask for ([`Builder::stack_size`], a growable stack's
/// maximum, a runtime's default stack): two pages of 4 KiB, room for the runtime's frames and a
/// closure with a few KiB of frames of its own (less in a debug build). Smaller sizes are
/// refused with an error naming this constant.
pub const MIN_STACK_SIZE: usize = 8 * 1024;

static NEXT_TASK_ID: AtomicU64 = AtomicU64::new(1);

/// Ids a thread takes from [`NEXT_TASK_ID`] at a time: workers spawning at once then do not
/// write one shared cache line for every spawn. Ids stay unique, not ordered across threads.
pub(crate) const TASK_ID_BLOCK: u64 = 1024;

/// The first of a fresh block of [`TASK_ID_BLOCK`] ids.
#[inline(never)]
pub(crate) fn take_task_id_block() -> u64 {
    NEXT_TASK_ID.fetch_add(TASK_ID_BLOCK, std::sync::atomic::Ordering::Relaxed)
}

thread_local! {
    /// The calling thread's block of task ids: (next, end).
    static TASK_IDS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// A task id no other task of the process has.
fn next_task_id() -> u64 {
    let take = |ids: &Cell<(u64, u64)>| {
        let (next, end) = ids.get();
        if next < end {
            ids.set((next + 1, end));
            return next;
        }
        let start = take_task_id_block();
        ids.set((start + 1, start + TASK_ID_BLOCK));
        start
    };
    TASK_IDS.try_with(take).unwrap_or_else(|_| {
        // The thread is exiting (its thread-locals are gone): one id straight from the counter.
        NEXT_TASK_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    })
}

/// Where a new coroutine's stack comes from.
enum StackPlan {
    /// Its home worker's shared (copying) region, at its first run.
    #[cfg(feature = "stack-shared")]
    Shared,
    /// A stack of its own, taken at spawn (`Builder::reserve_stack`).
    Reserved(TaskStack),
    /// A stack of its own of this kind (`None`: the runtime's pool), taken by the worker that
    /// first runs it (see `Body::OwnPending`).
    AtFirstRun(Option<StackKind>),
}

/// A coroutine builder for the task with `header` (its name).
pub(crate) fn coroutine_builder(header: &Header) -> spindle_coro::Builder {
    // A cancelled coroutine's destructors may park while it unwinds (`JoinHandle::cancel`
    // documents what `std::thread::panicking()` then reads on the worker).
    let b = spindle_coro::Builder::new().allow_suspend_while_unwinding();
    match &header.name {
        Some(name) => b.name(name.to_string()),
        None => b,
    }
}

/// Makes the coroutine of the task with `header`, running `f`, on a stack of its own.
pub(crate) fn own_coroutine<F, T>(
    header: &Header,
    f: F,
    stack: TaskStack,
) -> crate::task::OwnCoroutine<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let co = coroutine_builder(header).build_with_stack(stack, coroutine_body(header, f));
    // SAFETY: the coroutine has not started; its closure and result are Send (`F: Send`,
    // `T: Send`), so it may start on any worker — at spawn we do not know which, and at its
    // first run it is made by the worker that is about to run it. From its first run on it
    // stays on that worker (its home) unless the spawner made it migratable with the unsafe
    // builder option, whose contract covers exactly this.
    unsafe { SendCoroutine::new(co) }
}

pub(crate) fn spawn_on<F, T>(
    shared: &Arc<Shared>,
    builder: Builder,
    f: F,
) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    spawn_at(shared, worker::current_index(shared), builder, f)
}

/// [`spawn_on`] by a caller that knows which of the runtime's workers it runs on (`here`:
/// `worker::current_index(shared)`).
fn spawn_at<F, T>(
    shared: &Arc<Shared>,
    here: Option<usize>,
    builder: Builder,
    f: F,
) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let closed = closing_error;
    if shared.closing.load(std::sync::atomic::Ordering::Acquire) {
        return Err(closed());
    }
    if let Some(StackKind::Pooled { size } | StackKind::Growable { max: size, .. }) = builder.stack
        && size < MIN_STACK_SIZE
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a coroutine's stack of {size} bytes is below spindle_rt::MIN_STACK_SIZE \
                 ({MIN_STACK_SIZE} bytes); ask for at least that"
            ),
        ));
    }
    let plan = match builder.stack {
        #[cfg(not(feature = "stack-shared"))]
        Some(StackKind::Shared) => {
            return Err(StackError::Disabled {
                what: "a coroutine on a shared stack (Builder::shared_stack)",
                feature: "shared",
            }
            .into());
        }
        #[cfg(feature = "stack-shared")]
        Some(StackKind::Shared) => StackPlan::Shared,
        kind if builder.reserve_stack => {
            StackPlan::Reserved(stack_for(shared, kind).map_err(io::Error::from)?)
        }
        kind => StackPlan::AtFirstRun(kind),
    };
    let starts_on_carrier = matches!(plan, StackPlan::AtFirstRun(None));
    let header = || {
        new_header::<T, F>(
            shared,
            next_task_id(),
            builder.name,
            // Shared stacks never migrate once started (the option does not apply to them).
            builder.migratable && builder.stack != Some(StackKind::Shared),
            builder.stack == Some(StackKind::Shared),
            starts_on_carrier,
        )
    };
    let (task_ref, typed) = new_task(header, f, move |header, f| match plan {
        // The builder's `shared_stack` is `unsafe`: its caller accepted the contract that
        // `Body::SharedPending` stands for.
        #[cfg(feature = "stack-shared")]
        StackPlan::Shared => Body::SharedPending(f),
        StackPlan::Reserved(stack) => Body::Own(own_coroutine(header, f, stack)),
        StackPlan::AtFirstRun(kind) => Body::OwnPending(kind, f),
    });
    // Counted now; given a registry slot only if it is named or suspends (see `registry`).
    shared.tasks.spawned(here);
    // A spawn from outside the runtime's workers may race with its shutdown: counted after the
    // check above, it could come after shutdown found nothing live and went on to stop the
    // workers, so the task would never run and its `join` never return. So it looks at
    // `closing` again after counting (`spawned` counts a foreign spawn with a sequentially
    // consistent increment, and shutdown fences after setting `closing`): either this load
    // sees `closing` — the spawn is taken back — or shutdown's count sees the spawn and waits
    // for it (a task started while closing is cancelled before it runs). A spawn on a worker
    // needs no second look: its coroutine is live until after the count, so shutdown's wait
    // cannot end before it.
    if here.is_none() && shared.closing.load(std::sync::atomic::Ordering::SeqCst) {
        shared.tasks.unspawned_foreign();
        drop(task_ref);
        drop(typed);
        return Err(closed());
    }
    shared.schedule_from(here, task_ref, Reason::Spawned);
    Ok(JoinHandle { task: typed })
}

impl Runtime {
    /// Spawns a coroutine on this runtime, from any thread.
    ///
    /// # Panics
    ///
    /// If the runtime is shutting down (see [`Builder::spawn_on`] for the fallible form). The
    /// stack is taken when the coroutine first runs (see [`spawn`](crate::spawn())).
    pub fn spawn<F, T>(&self, f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.handle().spawn(f)
    }

    /// Runs `f` as a coroutine of this runtime — the root coroutine — and blocks the calling
    /// thread until it returns, returning its value. `f` may borrow from the caller.
    ///
    /// # Panics
    ///
    /// If `f` panics (the panic continues here), if called on a worker thread — from inside a
    /// coroutine, or from code the worker runs itself, such as a detached coroutine's value
    /// being dropped (that would block a worker, and with it perhaps the very coroutine waited
    /// for: spawn and join instead) — or if no stack can be had.
    pub fn block_on<F, T>(&self, f: F) -> T
    where
        F: FnOnce() -> T + Send,
        T: Send,
    {
        if spindle_park::in_task() {
            panic!(
                "Runtime::block_on called from inside a coroutine: it would block a worker \
                 thread; spawn the work and join its handle instead"
            );
        }
        if crate::worker::current().is_some() {
            panic!(
                "Runtime::block_on called on a runtime's worker thread (outside its coroutines: \
                 a destructor the worker runs, say): it would block the worker, which may be the \
                 one that must run the coroutine waited for; spawn the work instead"
            );
        }
        let handle = self.handle();
        // SAFETY: `scoped_spawn` requires that the coroutine is finished before `f`'s borrows
        // end; `ScopedJoin` joins it before this function returns or unwinds.
        let join = unsafe { crate::scope::scoped_spawn(&handle.shared, Builder::new(), f) };
        match join {
            Ok(join) => match join.join() {
                Ok(value) => value,
                Err(crate::JoinError::Panicked(p)) => std::panic::resume_unwind(p),
                Err(crate::JoinError::Cancelled) => {
                    panic!("the root coroutine of block_on was cancelled (the runtime shut down)")
                }
                Err(crate::JoinError::NoStack(e)) => {
                    panic!("cannot run the root coroutine of block_on: {e}")
                }
            },
            Err(e) => panic!("cannot spawn the root coroutine: {e}"),
        }
    }
}

impl Handle {
    /// Spawns a coroutine on this runtime, from any thread.
    ///
    /// # Panics
    ///
    /// If the runtime is shutting down (see [`Builder::spawn_on`] for the fallible form). The
    /// stack is taken when the coroutine first runs (see [`spawn`](crate::spawn())).
    pub fn spawn<F, T>(&self, f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        match spawn_on(&self.shared, Builder::new(), f) {
            Ok(handle) => handle,
            Err(e) => panic!("cannot spawn a coroutine: {e}"),
        }
    }
}
