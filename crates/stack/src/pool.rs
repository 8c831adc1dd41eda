//! Recycled stacks: a per-thread cache in front of a shared pool.
//!
//! Mapping and unmapping a stack costs two or three system calls and a TLB shootdown;
//! recycling costs a few loads and stores. In steady state `get()` and dropping a
//! [`PooledStack`] make no system call at all.
//!
//! ```text
//!   get() ──► this thread's cache ──(empty)──► shared pool ──(empty)──► mmap
//!   drop  ──► this thread's cache ──(full)───► shared pool ──(full)───► munmap
//! ```
//!
//! The thread cache is a `thread_local!` keyed by pool (several pools may exist). A
//! thread's cached stacks move to the shared pool when the thread exits. In front of it sits
//! one *hot slot* per thread: the stack returned last, for the pool that returned it last.
//! Creating and dropping coroutines one after another moves one stack between the slot and
//! its loan, which costs a pool-id compare, a few loads and stores and one counter (no
//! `RefCell` borrow, no search through the per-pool entries, and no thread-local
//! registration check: the slot is a thread-local of its own, without a destructor). Both
//! moves are inlined into their callers; everything else (a full or foreign slot, a stack due
//! for a trim, a growable pool's shrink) takes the out-of-line paths.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};

use crate::error::StackError;
use crate::growable::validate_growable_sizes;
use crate::mapping::{GuardedMapping, round_to_pages};
use crate::owner::Owner;
use crate::registry::StackKind;
use crate::{Stack, os};

/// What kind of stacks a [`StackPool`] hands out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PoolKind {
    /// [`FixedStack`](crate::FixedStack)-like stacks of `stack_size` bytes.
    #[default]
    Fixed,
    /// [`GrowableStack`](crate::GrowableStack)-like stacks that start with `initial` bytes
    /// committed and may grow to `stack_size`. A stack that grew is shrunk back to `initial`
    /// when it is recycled. Unix only.
    Growable {
        /// Bytes committed when a stack is handed out.
        initial: usize,
    },
}

/// How a [`StackPool`] sizes, caches and trims its stacks.
///
/// Build one from [`PoolConfig::default`] and change what you need:
///
/// ```
/// use spindle_stack::{PoolConfig, PoolKind, StackPool};
///
/// let pool = StackPool::new(PoolConfig {
///     stack_size: 1024 * 1024,
///     kind: PoolKind::Growable { initial: 16 * 1024 },
///     thread_cache: 8,
///     ..PoolConfig::default()
/// })?;
/// assert_eq!(pool.config().stack_size, 1024 * 1024);
/// # Ok::<(), spindle_stack::StackError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PoolConfig {
    /// Usable bytes per stack (the maximum, for growable stacks). Rounded up to whole pages.
    /// Default: 256 KiB.
    pub stack_size: usize,
    /// Fixed or growable stacks. Default: fixed.
    pub kind: PoolKind,
    /// Bytes of no-access guard below each stack, rounded up to whole pages. Default: one
    /// page. 0 (no guard: an overflow silently overwrites whatever lies below) is refused by
    /// [`StackPool::new`]; only the `unsafe` [`StackPool::new_unchecked`] accepts it.
    pub guard_size: usize,
    /// Stacks each thread keeps for itself (0: no thread cache, every `get` locks the
    /// shared pool). Default: 32.
    pub thread_cache: usize,
    /// Stacks the shared pool keeps; returned stacks beyond that are unmapped. Default: 1024.
    pub max_pooled: usize,
    /// Bytes just below the top of a recycled stack that stay resident when it is trimmed;
    /// the pages below are given back to the OS (`MADV_DONTNEED`). Rounded up to whole
    /// pages; at most `stack_size`. Default: 16 KiB.
    pub keep_resident: usize,
    /// A stack is trimmed every `trim_every`-th time it is recycled (at least 1), every time
    /// a thread's cache is flushed to the shared pool, and — if `trim_when_shared` — every time
    /// a recycle passes it to the shared pool.
    ///
    /// Between trims, memory that a coroutine touched deep in its stack stays resident: a single
    /// deep use pins that memory for at most `trim_every` recycles of the stack. Trimming on every
    /// recycle (1) bounds residency tightly but costs a system call per coroutine (a `madvise`, on
    /// the order of a microsecond for a default-sized stack). Default: 256, which spreads that cost
    /// over 256 recycles.
    pub trim_every: u32,
    /// Whether a stack is also trimmed when a recycle passes it to the shared pool — a full
    /// thread cache passing it on, or any recycle when `thread_cache` is 0 (otherwise only
    /// every `trim_every`-th recycle, and when a thread's cache is flushed).
    /// Trimming costs a system call and, later, page faults when the stack is used again:
    /// a runtime whose coroutines are spawned on one thread and finish on another moves
    /// stacks through the shared pool all the time, and turns this off. Default: true.
    pub trim_when_shared: bool,
}

impl Default for PoolConfig {
    fn default() -> Self {
        let page = os::page_size();
        let round = |bytes: usize| bytes.next_multiple_of(page);
        PoolConfig {
            stack_size: round(256 * 1024),
            kind: PoolKind::Fixed,
            guard_size: page,
            thread_cache: 32,
            max_pooled: 1024,
            keep_resident: round(16 * 1024),
            trim_every: 256,
            trim_when_shared: true,
        }
    }
}

impl PoolConfig {
    /// Rounds sizes to pages and checks them; a `guard_size` of 0 only if `allow_unguarded`.
    fn normalized(&self, allow_unguarded: bool) -> Result<PoolConfig, StackError> {
        let stack_size = round_to_pages(self.stack_size, "stack size", false).map_err(|_| {
            invalid(
                "stack_size",
                "it must be between 1 byte and the address space size",
            )
        })?;
        if self.guard_size == 0 && !allow_unguarded {
            return Err(invalid(
                "guard_size",
                "it must be at least 1 (rounded up to a page): without a guard an overflow \
                 silently overwrites whatever lies below the stack (a pool of unguarded stacks \
                 needs the `unsafe` StackPool::new_unchecked)",
            ));
        }
        let guard_size = round_to_pages(self.guard_size, "guard size", true)
            .map_err(|_| invalid("guard_size", "it is too large for the address space"))?;
        if stack_size
            .checked_add(guard_size)
            .is_none_or(|total| total > isize::MAX as usize)
        {
            return Err(invalid(
                "guard_size",
                "stack_size plus guard_size is too large",
            ));
        }
        let kind = match self.kind {
            PoolKind::Fixed => PoolKind::Fixed,
            #[cfg(not(feature = "growable"))]
            PoolKind::Growable { .. } => {
                return Err(StackError::Disabled {
                    what: "a pool of growable stacks (PoolKind::Growable)",
                    feature: "growable",
                });
            }
            #[cfg(feature = "growable")]
            PoolKind::Growable { initial } => {
                let (initial, _) =
                    validate_growable_sizes(initial, stack_size).map_err(|err| match err {
                        StackError::Unsupported { .. } => err,
                        _ => invalid(
                            "kind",
                            "PoolKind::Growable { initial } must be at least 1 byte and at most \
                             stack_size",
                        ),
                    })?;
                PoolKind::Growable { initial }
            }
        };
        let keep_resident = self
            .keep_resident
            .checked_next_multiple_of(os::page_size())
            .filter(|&keep| keep <= stack_size)
            .ok_or(invalid("keep_resident", "it must not exceed stack_size"))?;
        if self.trim_every == 0 {
            return Err(invalid(
                "trim_every",
                "it must be at least 1 (use u32::MAX to trim only when stacks move to the \
                 shared pool)",
            ));
        }
        Ok(PoolConfig {
            stack_size,
            kind,
            guard_size,
            thread_cache: self.thread_cache,
            max_pooled: self.max_pooled,
            keep_resident,
            trim_every: self.trim_every,
            trim_when_shared: self.trim_when_shared,
        })
    }
}

fn invalid(field: &'static str, reason: &'static str) -> StackError {
    StackError::InvalidConfig { field, reason }
}

/// Counters of a [`StackPool`]'s activity.
///
/// Read without stopping other threads, so a snapshot taken while other threads use the
/// pool may be off by the operations in flight.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PoolStats {
    /// Stacks mapped from the OS.
    pub mapped: u64,
    /// Stacks unmapped (returned beyond the caps, failed to shrink, or freed with the pool).
    pub unmapped: u64,
    /// `get()`s served from the calling thread's cache.
    pub from_thread_cache: u64,
    /// `get()`s served from the shared pool.
    pub from_shared_pool: u64,
    /// Stacks returned to the pool: dropped [`PooledStack`]s, whether they were then cached,
    /// pooled or unmapped.
    pub returned: u64,
    /// Trims: unused pages below `keep_resident` given back to the OS.
    pub trims: u64,
    /// Growable stacks shrunk back to their initial size on recycle.
    pub shrinks: u64,
    /// Stacks in the shared pool now.
    pub shared_pooled: u64,
    /// Stacks in all threads' caches now.
    pub thread_cached: u64,
}

impl PoolStats {
    /// Stacks handed out and not yet returned: mapped − unmapped − pooled − cached.
    pub fn outstanding(&self) -> u64 {
        self.mapped
            .saturating_sub(self.unmapped)
            .saturating_sub(self.shared_pooled)
            .saturating_sub(self.thread_cached)
    }
}

/// A pool of recycled stacks.
///
/// `get()` hands out a [`PooledStack`]; dropping it returns the stack. Cheap to clone (an
/// `Arc` inside), `Send` and `Sync`: share one pool between threads.
///
/// See [`PoolConfig`] for the knobs: stack size and kind, the per-thread and shared caps,
/// and how recycled stacks give memory back (`keep_resident`, `trim_every`).
///
/// # Memory
///
/// A pooled stack that a coroutine used deeply keeps those pages until it is trimmed: on
/// every `trim_every`-th recycle, when a thread's cache is flushed, and (with
/// [`PoolConfig::trim_when_shared`], the default) whenever a recycle passes it to the shared
/// pool. A growable pool also shrinks a stack that grew back to its initial size on every
/// recycle. Dropping the last handle to a pool unmaps the stacks in its shared pool; stacks
/// held in other threads' caches keep the pool alive until those threads exit or call
/// [`flush_thread_cache`](StackPool::flush_thread_cache).
///
/// # Example
///
/// ```
/// use spindle_stack::{PoolConfig, Stack, StackPool};
///
/// let pool = StackPool::new(PoolConfig { stack_size: 64 * 1024, ..PoolConfig::default() })?;
/// let first_top = {
///     let stack = pool.get()?;
///     assert_eq!(stack.usable_size(), 64 * 1024);
///     stack.top()
/// }; // dropped: back to this thread's cache
/// let again = pool.get()?;
/// assert_eq!(again.top(), first_top); // the same memory, no system call
/// assert_eq!(pool.stats().mapped, 1);
/// # Ok::<(), spindle_stack::StackError>(())
/// ```
#[derive(Clone)]
pub struct StackPool {
    inner: Arc<PoolInner>,
}

impl fmt::Debug for StackPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StackPool")
            .field("config", &self.inner.config)
            .field("stats", &self.stats())
            .finish()
    }
}

struct PoolInner {
    /// Keys this pool's entry in each thread's cache (addresses could be reused).
    id: u64,
    /// Normalized (page-rounded) configuration.
    config: PoolConfig,
    kind: StackKind,
    /// Bytes committed when a stack is mapped or after it is shrunk.
    initial_commit: usize,
    shared: Mutex<Vec<PoolEntry>>,
    /// `shared`'s length, stored under its lock whenever it changes: `shared_pooled` reads it
    /// without the lock (a runtime's worker asks each time it goes to sleep).
    shared_len: AtomicUsize,
    counters: SharedCounters,
    /// Counters of the threads that have a cache for this pool (each written by its thread
    /// only, so the hot path never contends on a shared cache line).
    threads: Mutex<Vec<Arc<ThreadCounters>>>,
}

/// A stack's mapping and recycling state, boxed: the hot path moves stacks between the
/// thread cache and [`PooledStack`]s, and moving one pointer is much cheaper than moving
/// the whole struct through the stack (which stalls on store forwarding).
type PoolEntry = Box<StackRecord>;

#[derive(Debug)]
struct StackRecord {
    mapping: GuardedMapping,
    /// Recycles left until the next periodic trim.
    recycles_until_trim: u32,
}

/// `Box::new` without the abort on allocation failure.
fn try_box<T>(value: T) -> Option<Box<T>> {
    let layout = std::alloc::Layout::new::<T>();
    if layout.size() == 0 {
        return Some(Box::new(value));
    }
    // SAFETY: the layout has a non-zero size.
    let raw = unsafe { std::alloc::alloc(layout) }.cast::<T>();
    if raw.is_null() {
        return None;
    }
    // SAFETY: `raw` is non-null, aligned and large enough for a `T` (allocated with its
    // layout by the global allocator), so writing a `T` and handing it to `Box` (which frees
    // it with the same layout) is sound.
    unsafe {
        raw.write(value);
        Some(Box::from_raw(raw))
    }
}

#[derive(Default)]
struct SharedCounters {
    mapped: AtomicU64,
    unmapped: AtomicU64,
    from_shared_pool: AtomicU64,
    /// Returns that did not go to a thread cache.
    returned_to_shared: AtomicU64,
    trims: AtomicU64,
    shrinks: AtomicU64,
    /// Totals of threads that have exited.
    retired_from_thread_cache: AtomicU64,
    retired_returned: AtomicU64,
}

/// One thread's counters for one pool. Single writer (the thread), so it updates them with
/// a plain load and store instead of a read-modify-write.
///
/// The stacks the thread's cache holds are not counted apart: every stack that enters the
/// cache is a `returned` one, and it leaves either by a `get` (`from_thread_cache`) or by
/// being moved out otherwise (`evicted`: shrinks, flushes, thread exit), so a recycle and a
/// `get` through the cache each bump one counter, not two (see [`cached`](Self::cached)).
#[derive(Default)]
struct ThreadCounters {
    from_thread_cache: AtomicU64,
    returned: AtomicU64,
    evicted: AtomicU64,
}

impl ThreadCounters {
    /// The stacks the thread's cache holds now. Exact on the thread itself; from another
    /// thread the three loads may see the counters at different moments, off by the
    /// operations in flight like the rest of [`PoolStats`] (and never below 0).
    fn cached(&self) -> u64 {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        load(&self.returned)
            .saturating_sub(load(&self.from_thread_cache))
            .saturating_sub(load(&self.evicted))
    }

    /// Records `n` stacks moved out of the thread's cache other than by a `get`.
    fn evict(&self, n: u64) {
        self.evicted.store(
            self.evicted.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

#[inline]
fn bump_single_writer(counter: &AtomicU64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(1),
        Ordering::Relaxed,
    );
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // No code panics while holding these locks; if some did, the data is still consistent
    // (every update is a single push or pop).
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The id of the global pool ([`StackPool::global`]), fixed so that
/// [`StackPool::get_global`] can look for its stacks without the pool at hand.
const GLOBAL_POOL_ID: u64 = 1;

/// The id of the next pool made (ids are never 0 and never reused).
static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(GLOBAL_POOL_ID + 1);

impl StackPool {
    /// A pool with the given configuration. Maps nothing until the first `get()`.
    ///
    /// # Errors
    ///
    /// [`StackError::InvalidConfig`] naming the field that is out of range (a `guard_size`
    /// of 0 included: see [`new_unchecked`](StackPool::new_unchecked));
    /// [`StackError::Unsupported`] for growable stacks on non-Unix platforms.
    pub fn new(config: PoolConfig) -> Result<Self, StackError> {
        Ok(Self::from_normalized(config.normalized(false)?))
    }

    /// Like [`new`](StackPool::new), but a `guard_size` of 0 makes a pool of unguarded
    /// stacks: one kernel mapping per stack instead of two, but nothing stops an overflow,
    /// which silently overwrites whatever lies below.
    ///
    /// # Errors
    ///
    /// As for [`new`](StackPool::new), except that a `guard_size` of 0 is accepted.
    ///
    /// # Safety
    ///
    /// If `config.guard_size` is 0, nothing that runs on any stack of this pool may ever use
    /// more than `stack_size` (rounded up to whole pages) of it — for a coroutine, its closure
    /// and everything it calls, unwinding included. (With a guard this is `new`, and safe.)
    pub unsafe fn new_unchecked(config: PoolConfig) -> Result<Self, StackError> {
        Ok(Self::from_normalized(config.normalized(true)?))
    }

    fn from_normalized(config: PoolConfig) -> Self {
        Self::with_id(config, NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed))
    }

    fn with_id(config: PoolConfig, id: u64) -> Self {
        let (kind, initial_commit) = match config.kind {
            PoolKind::Fixed => (StackKind::PooledFixed, config.stack_size),
            PoolKind::Growable { initial } => (
                StackKind::PooledGrowable,
                crate::growable::initial_commit(initial, config.stack_size),
            ),
        };
        StackPool {
            inner: Arc::new(PoolInner {
                id,
                config,
                kind,
                initial_commit,
                shared: Mutex::new(Vec::new()),
                shared_len: AtomicUsize::new(0),
                counters: SharedCounters::default(),
                threads: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The process-wide pool: 256 KiB fixed stacks with a one-page guard, otherwise
    /// [`PoolConfig::default`].
    ///
    /// ```
    /// use spindle_stack::{Stack, StackPool};
    ///
    /// let stack = StackPool::global().get()?;
    /// assert_eq!(stack.usable_size(), 256 * 1024);
    /// # Ok::<(), spindle_stack::StackError>(())
    /// ```
    #[inline]
    pub fn global() -> &'static StackPool {
        static GLOBAL: OnceLock<StackPool> = OnceLock::new();
        GLOBAL.get_or_init(|| {
            let config = PoolConfig::default();
            // The default is already page-rounded and valid, so normalizing cannot fail;
            // falling back to it unchanged is therefore equivalent.
            let normalized = config.normalized(false).unwrap_or(config);
            StackPool::with_id(normalized, GLOBAL_POOL_ID)
        })
    }

    /// `StackPool::global().get()`: a stack from the global pool. When this thread's hot slot
    /// holds one of its stacks (a coroutine made right after another one finished), it is
    /// handed out without looking the pool up.
    ///
    /// ```
    /// use spindle_stack::{Stack, StackPool};
    ///
    /// let stack = StackPool::get_global()?;
    /// assert_eq!(stack.usable_size(), StackPool::global().config().stack_size);
    /// # Ok::<(), spindle_stack::StackError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As for [`get`](StackPool::get).
    #[inline]
    pub fn get_global() -> Result<PooledStack, StackError> {
        // A stack of the global pool in the slot means the pool exists.
        if let Some(stack) = take_hot(GLOBAL_POOL_ID) {
            return Ok(stack);
        }
        Self::global().get_cold()
    }

    /// A stack from this thread's cache, else from the shared pool, else freshly mapped.
    ///
    /// # Errors
    ///
    /// Only when a new stack must be mapped and the OS refuses: see [`FixedStack::new`]
    /// for the errors ([`StackError::MapCountLimit`], ...).
    ///
    /// [`FixedStack::new`]: crate::FixedStack::new
    #[inline]
    pub fn get(&self) -> Result<PooledStack, StackError> {
        // The hot slot first: it holds a stack of this pool only if the pool has a thread
        // cache (see `HotSlot`).
        if let Some(stack) = take_hot(self.inner.id) {
            return Ok(stack);
        }
        self.get_cold()
    }

    /// `get` when the hot slot has no stack of this pool: the thread's entry, else the
    /// shared pool or a new mapping.
    #[cold]
    #[inline(never)]
    fn get_cold(&self) -> Result<PooledStack, StackError> {
        if self.inner.config.thread_cache > 0
            && let Some(stack) = take_from_entries(self.inner.id)
        {
            return Ok(stack);
        }
        self.get_uncached()
    }

    #[cold]
    fn get_uncached(&self) -> Result<PooledStack, StackError> {
        let inner = &self.inner;
        let pooled = {
            let mut shared = lock(&inner.shared);
            let entry = shared.pop();
            inner.shared_len.store(shared.len(), Ordering::Relaxed);
            entry
        };
        if let Some(entry) = pooled {
            bump(&inner.counters.from_shared_pool);
            return Ok(PooledStack::new(entry, Arc::clone(inner)));
        }
        let mapping = GuardedMapping::new(
            inner.config.stack_size,
            inner.config.guard_size,
            inner.initial_commit,
            inner.kind,
        )?;
        let requested = mapping.usable();
        let entry = try_box(StackRecord {
            mapping,
            recycles_until_trim: inner.config.trim_every,
        })
        .ok_or(StackError::OutOfMemory { requested })?;
        bump(&inner.counters.mapped);
        Ok(PooledStack::new(entry, Arc::clone(inner)))
    }

    /// The configuration, with sizes rounded up to whole pages.
    pub fn config(&self) -> &PoolConfig {
        &self.inner.config
    }

    /// The pool's counters.
    pub fn stats(&self) -> PoolStats {
        let inner = &self.inner;
        let counters = &inner.counters;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let mut stats = PoolStats {
            mapped: load(&counters.mapped),
            unmapped: load(&counters.unmapped),
            from_thread_cache: load(&counters.retired_from_thread_cache),
            from_shared_pool: load(&counters.from_shared_pool),
            returned: load(&counters.returned_to_shared) + load(&counters.retired_returned),
            trims: load(&counters.trims),
            shrinks: load(&counters.shrinks),
            shared_pooled: lock(&inner.shared).len() as u64,
            thread_cached: 0,
        };
        for thread in lock(&inner.threads).iter() {
            stats.from_thread_cache += load(&thread.from_thread_cache);
            stats.returned += load(&thread.returned);
            stats.thread_cached += thread.cached();
        }
        stats
    }

    /// How many stacks the shared pool holds.
    pub fn shared_pooled(&self) -> usize {
        self.inner.shared_len.load(Ordering::Relaxed)
    }

    /// How many stacks of this pool the calling thread's cache holds.
    pub fn thread_cached(&self) -> usize {
        let hot = HOT
            .try_with(|hot| hot.holds(self.inner.id))
            .unwrap_or(false);
        THREAD_CACHES
            .try_with(|caches| {
                let entries = caches.entries.try_borrow().ok()?;
                let cache = entries.iter().find(|e| e.pool_id == self.inner.id)?;
                Some(cache.stacks.len() + usize::from(hot))
            })
            .ok()
            .flatten()
            .unwrap_or(0)
    }

    /// Unmaps idle stacks: those beyond `keep_in_thread` in the calling thread's cache, then
    /// those beyond `keep_shared` in the shared pool. Returns how many were unmapped.
    ///
    /// The caps ([`PoolConfig::thread_cache`], [`PoolConfig::max_pooled`]) bound what a pool
    /// keeps while it is busy; this gives back what a spike left behind once it is over (a
    /// runtime's worker calls it after idling a while). Each stack is unmapped outside the
    /// pool's locks.
    ///
    /// ```
    /// use spindle_stack::{PoolConfig, StackPool};
    ///
    /// let pool = StackPool::new(PoolConfig { thread_cache: 8, ..PoolConfig::default() })?;
    /// let stacks: Vec<_> = (0..8).map(|_| pool.get()).collect::<Result<_, _>>()?;
    /// drop(stacks); // all eight go to this thread's cache
    /// assert_eq!(pool.thread_cached(), 8);
    /// assert_eq!(pool.shrink(2, 0), 6);
    /// assert_eq!(pool.thread_cached(), 2);
    /// # Ok::<(), spindle_stack::StackError>(())
    /// ```
    pub fn shrink(&self, keep_in_thread: usize, keep_shared: usize) -> usize {
        let mut unmapped = 0;
        // One at a time, each unmapped outside the cache's borrow (dropping a cached stack may
        // drop the last reference to a pool).
        loop {
            let excess = HOT
                .try_with(|hot| {
                    THREAD_CACHES.try_with(|caches| {
                        let mut entries = caches.entries.try_borrow_mut().ok()?;
                        let cache = entries.iter_mut().find(|e| e.pool_id == self.inner.id)?;
                        let in_hot = usize::from(hot.holds(self.inner.id));
                        if cache.stacks.len() + in_hot <= keep_in_thread {
                            return None;
                        }
                        // The vector's stacks first; the hot slot's last.
                        let stack = cache.stacks.pop().or_else(|| hot.stack.take());
                        cache.counters.evict(1);
                        stack
                    })
                })
                .ok()
                .and_then(Result::ok)
                .flatten();
            let Some(cached) = excess else { break };
            cached.pool.unmap(cached.entry);
            unmapped += 1;
        }
        loop {
            let excess = {
                let mut shared = lock(&self.inner.shared);
                if shared.len() <= keep_shared {
                    break;
                }
                let entry = shared.pop();
                self.inner.shared_len.store(shared.len(), Ordering::Relaxed);
                entry
            };
            let Some(entry) = excess else { break };
            self.inner.unmap(entry);
            unmapped += 1;
        }
        unmapped
    }

    /// Moves the calling thread's cached stacks of this pool to the shared pool (trimming
    /// them), as happens when the thread exits. Useful before a thread idles for long.
    pub fn flush_thread_cache(&self) {
        let taken = HOT
            .try_with(|hot| {
                THREAD_CACHES.try_with(|caches| {
                    let mut entries = caches.entries.try_borrow_mut().ok()?;
                    let entry = entries.iter_mut().find(|e| e.pool_id == self.inner.id)?;
                    let mut stacks = std::mem::take(&mut entry.stacks);
                    if hot.holds(self.inner.id) {
                        stacks.extend(hot.stack.take());
                    }
                    entry.counters.evict(stacks.len() as u64);
                    Some(stacks)
                })
            })
            .ok()
            .and_then(Result::ok)
            .flatten();
        // Moved out of the borrow first: putting them back may drop the last `Arc` of a pool.
        for cached in taken.into_iter().flatten() {
            cached.pool.put_shared(cached.entry, false);
        }
    }
}

impl PoolInner {
    /// A stack came back: forget its owner, shrink or trim it, and cache, pool or unmap it.
    /// (The common case, a stack that goes into the hot slot, is `recycle_hot`, inlined into
    /// the drop; this is the rest.)
    #[cold]
    #[inline(never)]
    fn recycle(self: Arc<Self>, mut entry: PoolEntry) {
        entry.mapping.slot().clear_owner();
        if let PoolKind::Growable { .. } = self.config.kind {
            match entry.mapping.shrink_to(self.initial_commit) {
                Ok(false) => {}
                Ok(true) => bump(&self.counters.shrinks),
                Err(_) => {
                    // Could not re-protect the grown part: don't hand it out as if it had
                    // its initial size. Unmapping is always possible.
                    bump(&self.counters.returned_to_shared);
                    self.unmap(entry);
                    return;
                }
            }
        }
        entry.recycles_until_trim -= 1;
        let mut trimmed = false;
        if entry.recycles_until_trim == 0 {
            entry.recycles_until_trim = self.config.trim_every;
            trimmed = self.trim(&entry);
        }
        let entry = if self.config.thread_cache > 0 {
            match put_in_thread_cache(entry, self) {
                Ok(()) => return,
                Err((entry, pool)) => {
                    bump(&pool.counters.returned_to_shared);
                    let skip_trim = trimmed || !pool.config.trim_when_shared;
                    pool.put_shared(entry, skip_trim);
                    return;
                }
            }
        } else {
            entry
        };
        // Without a thread cache the shared pool is where every recycle goes: the same rule as
        // for a full cache's overflow.
        bump(&self.counters.returned_to_shared);
        let skip_trim = trimmed || !self.config.trim_when_shared;
        self.put_shared(entry, skip_trim);
    }

    fn trim(&self, entry: &PoolEntry) -> bool {
        let trimmed = entry.mapping.discard_below(self.config.keep_resident);
        if trimmed {
            bump(&self.counters.trims);
        }
        trimmed
    }

    /// Puts a stack in the shared pool (trimming it first, unless `skip_trim`: it was just
    /// trimmed, or the configuration says not to), or unmaps it if the pool is full. Consumes
    /// the caller's `Arc`.
    fn put_shared(self: Arc<Self>, entry: PoolEntry, skip_trim: bool) {
        if self.config.max_pooled == 0 {
            self.unmap(entry);
            return;
        }
        if !skip_trim {
            self.trim(&entry);
        }
        let rejected = {
            let mut shared = lock(&self.shared);
            if shared.len() < self.config.max_pooled && shared.try_reserve(1).is_ok() {
                shared.push(entry);
                self.shared_len.store(shared.len(), Ordering::Relaxed);
                None
            } else {
                Some(entry)
            }
        };
        if let Some(entry) = rejected {
            self.unmap(entry);
        }
        // `self` (an `Arc`) is dropped here, outside the lock: if it was the last one, the
        // pool is freed, unmapping what we just pooled.
    }

    fn unmap(&self, entry: PoolEntry) {
        drop(entry);
        bump(&self.counters.unmapped);
    }

    fn register_thread(&self, counters: Arc<ThreadCounters>) -> bool {
        let mut threads = lock(&self.threads);
        if threads.try_reserve(1).is_err() {
            return false;
        }
        threads.push(counters);
        true
    }

    /// A thread with a cache for this pool exited: fold its counters into the totals.
    fn retire_thread(&self, counters: &Arc<ThreadCounters>) {
        let mut threads = lock(&self.threads);
        if let Some(index) = threads.iter().position(|c| Arc::ptr_eq(c, counters)) {
            threads.swap_remove(index);
            let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
            self.counters
                .retired_from_thread_cache
                .fetch_add(load(&counters.from_thread_cache), Ordering::Relaxed);
            self.counters
                .retired_returned
                .fetch_add(load(&counters.returned), Ordering::Relaxed);
        }
    }
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        let shared = std::mem::take(
            self.shared
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        self.counters
            .unmapped
            .fetch_add(shared.len() as u64, Ordering::Relaxed);
        drop(shared);
    }
}

// ---------------------------------------------------------------------------------------
// The per-thread cache.

thread_local! {
    static THREAD_CACHES: ThreadCaches = const {
        ThreadCaches {
            entries: RefCell::new(Vec::new()),
        }
    };

    /// The hot slot, in front of [`THREAD_CACHES`]. In a `ManuallyDrop`, so that the
    /// thread-local has no destructor: reaching it is a plain thread-local access, without the
    /// check that registers a destructor on first use. `ThreadCaches`' destructor, which runs
    /// on every thread that ever made the slot a pool's, empties it at thread exit.
    static HOT: ManuallyDrop<HotSlot> = const {
        ManuallyDrop::new(HotSlot {
            stack: Cell::new(None),
            pool_id: Cell::new(0),
            counters: Cell::new(std::ptr::null()),
        })
    };
}

/// This thread's caches, one per pool it used (the hot slot in front of them is [`HOT`]).
struct ThreadCaches {
    entries: RefCell<Vec<CacheEntry>>,
}

/// One stack of one pool, cached on this thread in front of the pool's entry.
///
/// Invariants:
/// * `pool_id` is 0 (no pool; pool ids start at 1) or the id of a pool that has an entry in
///   this thread's [`THREAD_CACHES`], and then `counters` points to that entry's `counters`
///   (an `Arc`'s target: it does not move when `entries` reallocates, and lives as long as
///   the entry). The slot becomes a pool's only inside a borrow of `THREAD_CACHES`, whose
///   destructor is therefore registered and resets `pool_id` to 0 (and takes the stack out)
///   before the entries go.
/// * `stack` holds a stack only of pool `pool_id`; the entry's counters count it as cached,
///   and the entry's `stacks.len()` plus that one stack is at most the entry's `capacity`.
/// * While the slot is a pool's, that pool's `stacks.len()` is below its `capacity`, full slot
///   or not: the slot becomes a pool's only when its vector has room, and while it is the
///   pool's the vector grows only when the slot is full, to `capacity - 1`. So a return into
///   the pool's free slot stays within the cap without looking at the entry. (A pool without
///   a thread cache, `capacity` 0, never gets the slot.)
/// * An entry is removed only when its pool is gone (then `stack` cannot hold one of its
///   stacks: a cached stack keeps its pool alive) or when the thread exits; `pool_id` is
///   reset to 0 when its entry goes.
struct HotSlot {
    stack: Cell<Option<CachedStack>>,
    pool_id: Cell<u64>,
    counters: Cell<*const ThreadCounters>,
}

impl HotSlot {
    /// Whether the slot holds a stack of pool `pool_id`.
    fn holds(&self, pool_id: u64) -> bool {
        if self.pool_id.get() != pool_id {
            return false;
        }
        let stack = self.stack.take();
        let holds = stack.is_some();
        self.stack.set(stack);
        holds
    }

    /// The counters of pool `pool_id`'s entry.
    ///
    /// # Safety
    ///
    /// `pool_id` must not be 0 (then, by the invariants above, `counters` points to a live
    /// entry's counters).
    #[inline]
    unsafe fn counters(&self) -> &ThreadCounters {
        // SAFETY: by the caller's contract and the invariants of `HotSlot`, the pointer is the
        // target of an `Arc<ThreadCounters>` held by an entry of this thread's
        // `THREAD_CACHES`, which outlives this borrow of `self` (entries are removed only by
        // `new_cache_entry` and on thread exit, neither of which runs while this reference is
        // used, and both reset `pool_id` first).
        unsafe { &*self.counters.get() }
    }
}

struct CacheEntry {
    pool_id: u64,
    /// To notice a dead pool whose empty entry can be pruned.
    pool: Weak<PoolInner>,
    counters: Arc<ThreadCounters>,
    /// At most `thread_cache` stacks; the capacity is reserved when the entry is made, so
    /// pushing never allocates.
    stacks: Vec<CachedStack>,
    capacity: usize,
}

/// A cached stack keeps its pool alive: handing it out moves this `Arc` into the
/// [`PooledStack`] and returning it moves it back, so the hot path never touches the
/// reference count.
struct CachedStack {
    entry: PoolEntry,
    pool: Arc<PoolInner>,
}

/// The hot slot's stack, if it is one of pool `pool_id`'s (the common case of `get`,
/// inlined into it).
#[inline]
fn take_hot(pool_id: u64) -> Option<PooledStack> {
    HOT.try_with(|hot| {
        if hot.pool_id.get() == pool_id
            && let Some(cached) = hot.stack.take()
        {
            // SAFETY: `pool_id` is the slot's, and pool ids are never 0.
            let counters = unsafe { hot.counters() };
            bump_single_writer(&counters.from_thread_cache);
            return Some(PooledStack::new(cached.entry, cached.pool));
        }
        None
    })
    .ok()
    .flatten()
}

/// The slow path of `get` through the thread cache: the pool's entry (the hot slot is empty
/// or holds another pool's stack).
#[cold]
fn take_from_entries(pool_id: u64) -> Option<PooledStack> {
    THREAD_CACHES
        .try_with(|caches| {
            let mut entries = caches.entries.try_borrow_mut().ok()?;
            let cache = entries.iter_mut().find(|e| e.pool_id == pool_id)?;
            let cached = cache.stacks.pop()?;
            bump_single_writer(&cache.counters.from_thread_cache);
            Some(PooledStack::new(cached.entry, cached.pool))
        })
        .ok()
        .flatten()
}

/// The common case of [`PoolInner::recycle`], inlined into `PooledStack`'s drop: a fixed
/// pool's stack that is not due for a trim, whose pool has this thread's hot slot, goes into
/// the slot. Does what `recycle` does for it, in the same order (forget the owner, count down
/// to the next trim, cache it); gives the stack back untouched in every other case.
#[inline]
fn recycle_hot(
    mut entry: PoolEntry,
    pool: Arc<PoolInner>,
) -> Result<(), (PoolEntry, Arc<PoolInner>)> {
    if pool.config.kind != PoolKind::Fixed || entry.recycles_until_trim <= 1 {
        return Err((entry, pool));
    }
    let Ok(pool_id) = HOT.try_with(|hot| hot.pool_id.get()) else {
        return Err((entry, pool));
    };
    if pool_id != pool.id {
        return Err((entry, pool));
    }
    entry.mapping.slot().clear_owner();
    entry.recycles_until_trim -= 1;
    // The slot is this pool's, so the pool has a thread cache: `recycle` would cache the
    // stack now, in the slot.
    // SAFETY: the slot is the stack's pool's (checked above, on this thread).
    unsafe { put_in_hot(CachedStack { entry, pool }) };
    Ok(())
}

/// Puts a recycled stack in the hot slot; the stack the slot held, if any, goes to its
/// pool's entry (or, if that is full, to the shared pool).
///
/// # Safety
///
/// The hot slot is `stack`'s pool's (`HOT.pool_id` is its id).
#[inline]
unsafe fn put_in_hot(stack: CachedStack) {
    let displaced = HOT.with(|hot| {
        let previous = hot.stack.replace(Some(stack));
        if previous.is_none() {
            // (Within the cap: see `HotSlot`.)
            // SAFETY: the slot is this pool's (caller's contract), whose id is never 0.
            bump_single_writer(&unsafe { hot.counters() }.returned);
        }
        previous
    });
    if let Some(previous) = displaced {
        put_displaced(previous);
    }
}

/// The hot slot was taken: the stack it held goes to its pool's entry instead, or to the
/// shared pool if the entry is full (as a full cache's overflow does).
#[cold]
#[inline(never)]
fn put_displaced(previous: CachedStack) {
    if let Err(stack) = put_in_entries(previous) {
        bump(&stack.pool.counters.returned_to_shared);
        let skip_trim = !stack.pool.config.trim_when_shared;
        stack.pool.put_shared(stack.entry, skip_trim);
    }
}

/// Caches a returned stack on this thread; gives it back if the cache is full or
/// unavailable (thread exiting, out of memory for the cache itself).
fn put_in_thread_cache(
    entry: PoolEntry,
    pool: Arc<PoolInner>,
) -> Result<(), (PoolEntry, Arc<PoolInner>)> {
    let stack = CachedStack { entry, pool };
    let hot_is_ours = HOT
        .try_with(|hot| hot.pool_id.get() == stack.pool.id)
        .unwrap_or(false);
    if hot_is_ours {
        // SAFETY: checked right above, on this thread.
        unsafe { put_in_hot(stack) };
        return Ok(());
    }
    put_in_entries(stack).map_err(|stack| (stack.entry, stack.pool))
}

/// The slow path of [`put_in_thread_cache`]: caches `stack` in its pool's entry (making the
/// entry if needed), or in the hot slot if that is free; gives it back if the entry is full
/// or cannot be made (or the thread's caches are gone: it is exiting).
#[cold]
fn put_in_entries(stack: CachedStack) -> Result<(), CachedStack> {
    let mut payload = Some(stack);
    let _ = HOT.try_with(|hot| {
        THREAD_CACHES.try_with(|caches| {
            let Ok(mut entries) = caches.entries.try_borrow_mut() else {
                return;
            };
            let Some(stack) = payload.take() else { return };
            let index = match entries.iter().position(|e| e.pool_id == stack.pool.id) {
                Some(index) => index,
                None => match new_cache_entry(hot, &mut entries, &stack.pool) {
                    Some(index) => index,
                    None => {
                        payload = Some(stack);
                        return;
                    }
                },
            };
            let cache = &mut entries[index];
            let hot_taken = hot.holds(cache.pool_id);
            if !hot_taken {
                let in_hot = hot.stack.take();
                if in_hot.is_none() && cache.stacks.len() < cache.capacity {
                    // The hot slot is free (and the cap leaves room): it becomes this pool's.
                    hot.pool_id.set(cache.pool_id);
                    hot.counters.set(Arc::as_ptr(&cache.counters));
                    hot.stack.set(Some(stack));
                    bump_single_writer(&cache.counters.returned);
                    return;
                }
                hot.stack.set(in_hot);
            }
            if cache.stacks.len() + usize::from(hot_taken) < cache.capacity {
                cache.stacks.push(stack);
                bump_single_writer(&cache.counters.returned);
            } else {
                payload = Some(stack);
            }
        })
    });
    match payload {
        None => Ok(()),
        Some(stack) => Err(stack),
    }
}

/// Makes this thread's cache for `pool` (cold: once per thread and pool). Also prunes the
/// empty entries of pools that no longer exist.
fn new_cache_entry(
    hot: &HotSlot,
    entries: &mut Vec<CacheEntry>,
    pool: &Arc<PoolInner>,
) -> Option<usize> {
    entries.retain(|e| !e.stacks.is_empty() || e.pool.strong_count() > 0);
    let hot_pool_id = hot.pool_id.get();
    if !entries.iter().any(|e| e.pool_id == hot_pool_id) {
        // The hot slot's entry is gone (its pool is, so the slot is empty): forget it before
        // its counters' pointer dangles.
        hot.pool_id.set(0);
        hot.counters.set(std::ptr::null());
    }
    let capacity = pool.config.thread_cache;
    let mut stacks = Vec::new();
    stacks.try_reserve_exact(capacity).ok()?;
    entries.try_reserve(1).ok()?;
    let counters = Arc::new(ThreadCounters::default());
    if !pool.register_thread(Arc::clone(&counters)) {
        return None;
    }
    entries.push(CacheEntry {
        pool_id: pool.id,
        pool: Arc::downgrade(pool),
        counters,
        stacks,
        capacity,
    });
    Some(entries.len() - 1)
}

impl Drop for ThreadCaches {
    /// Thread exit: every cached stack moves to its pool's shared pool.
    fn drop(&mut self) {
        let hot = HOT
            .try_with(|hot| {
                let pool_id = hot.pool_id.replace(0);
                hot.counters.set(std::ptr::null());
                hot.stack.take().map(|stack| (pool_id, stack))
            })
            .ok()
            .flatten();
        let entries = std::mem::take(self.entries.get_mut());
        let hot_pool_id = hot.as_ref().map_or(0, |&(id, _)| id);
        if let Some((_, cached)) = hot {
            cached.pool.put_shared(cached.entry, false);
        }
        for cache in entries {
            let leaving = cache.stacks.len() + usize::from(cache.pool_id == hot_pool_id);
            cache.counters.evict(leaving as u64);
            if let Some(pool) = cache.pool.upgrade() {
                pool.retire_thread(&cache.counters);
            }
            for cached in cache.stacks {
                cached.pool.put_shared(cached.entry, false);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------

/// A stack on loan from a [`StackPool`]; dropping it returns it to the pool.
///
/// Implements [`Stack`]. `Send` and `Sync`: it may be dropped on another thread (it then
/// goes to that thread's cache).
pub struct PooledStack {
    /// Moved out in `drop`.
    entry: ManuallyDrop<PoolEntry>,
    /// Moved out in `drop`.
    pool: ManuallyDrop<Arc<PoolInner>>,
}

impl PooledStack {
    #[inline]
    fn new(entry: PoolEntry, pool: Arc<PoolInner>) -> Self {
        PooledStack {
            entry: ManuallyDrop::new(entry),
            pool: ManuallyDrop::new(pool),
        }
    }

    /// Bytes currently committed below the top (grows for a growable pool's stacks).
    pub fn committed(&self) -> usize {
        self.entry.mapping.committed()
    }
}

impl fmt::Debug for PooledStack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PooledStack")
            .field("top", &self.top())
            .field("usable_size", &self.usable_size())
            .field("guard_size", &self.guard_size())
            .field("pool_id", &self.pool.id)
            .finish()
    }
}

impl Drop for PooledStack {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: both fields are taken exactly once, here, and `self` is not used after.
        let (entry, pool) = unsafe {
            (
                ManuallyDrop::take(&mut self.entry),
                ManuallyDrop::take(&mut self.pool),
            )
        };
        if let Err((entry, pool)) = recycle_hot(entry, pool) {
            pool.recycle(entry);
        }
    }
}

// SAFETY: `[limit, top)` is the read-write part (committed on touch, for growable pools) of
// a mapping that this loan holds exclusively: the pool hands each mapping to one
// `PooledStack` at a time and takes it back only in `drop`. `top` is page-aligned and the
// mapping does not move while on loan. Below `limit` lies a no-access guard of at least a
// page, unless the pool was made by `new_unchecked` with a `guard_size` of 0, whose caller
// promised that nothing overflows its stacks.
unsafe impl Stack for PooledStack {
    /// A pool's stacks are at least a page (`stack_size` is rounded up to whole pages and is
    /// never 0), and a page is at least 4 KiB on every supported target.
    const MIN_USABLE_SIZE: usize = 4096;

    #[inline]
    fn top(&self) -> NonNull<u8> {
        self.entry.mapping.top()
    }

    #[inline]
    fn limit(&self) -> NonNull<u8> {
        self.entry.mapping.limit()
    }

    #[inline]
    fn usable_size(&self) -> usize {
        self.entry.mapping.usable()
    }

    #[inline]
    fn guard_size(&self) -> usize {
        self.entry.mapping.guard()
    }

    #[inline]
    fn set_owner(&self, owner: Owner<'_>) {
        self.entry.mapping.slot().set_owner(owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_is_256_kib_fixed_with_one_guard_page() {
        let config = StackPool::global().config();
        assert_eq!(config.stack_size, 256 * 1024);
        assert_eq!(config.kind, PoolKind::Fixed);
        assert_eq!(config.guard_size, os::page_size());
        assert_eq!(
            PoolConfig::default().normalized(false).unwrap(),
            PoolConfig::default()
        );
    }

    #[test]
    fn invalid_configs_name_the_field() {
        let cases = [
            (
                PoolConfig {
                    stack_size: 0,
                    ..PoolConfig::default()
                },
                "stack_size",
            ),
            (
                PoolConfig {
                    stack_size: usize::MAX,
                    ..PoolConfig::default()
                },
                "stack_size",
            ),
            (
                PoolConfig {
                    guard_size: usize::MAX - 4095,
                    ..PoolConfig::default()
                },
                "guard_size",
            ),
            (
                PoolConfig {
                    trim_every: 0,
                    ..PoolConfig::default()
                },
                "trim_every",
            ),
            (
                PoolConfig {
                    keep_resident: 1 << 30,
                    ..PoolConfig::default()
                },
                "keep_resident",
            ),
            (
                PoolConfig {
                    kind: PoolKind::Growable { initial: 0 },
                    ..PoolConfig::default()
                },
                "kind",
            ),
            (
                PoolConfig {
                    kind: PoolKind::Growable { initial: 1 << 30 },
                    ..PoolConfig::default()
                },
                "kind",
            ),
        ];
        for (config, field) in cases {
            let err = StackPool::new(config.clone()).unwrap_err();
            assert!(
                matches!(err, StackError::InvalidConfig { field: f, .. } if f == field),
                "{config:?}: {err:?}"
            );
            assert!(
                err.to_string().contains(&format!("PoolConfig::{field}")),
                "{err}"
            );
        }
    }

    #[test]
    fn sizes_are_rounded_to_pages() {
        let pool = StackPool::new(PoolConfig {
            stack_size: 10_000,
            keep_resident: 1,
            guard_size: 1,
            ..PoolConfig::default()
        })
        .unwrap();
        let page = os::page_size();
        assert_eq!(pool.config().stack_size, 10_000usize.next_multiple_of(page));
        assert_eq!(pool.config().keep_resident, page);
        assert_eq!(pool.config().guard_size, page);
        let stack = pool.get().unwrap();
        assert_eq!(stack.usable_size(), pool.config().stack_size);
        assert_eq!(stack.guard_size(), page);
    }
}
