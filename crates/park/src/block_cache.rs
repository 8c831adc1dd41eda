//! Per-thread caches of freed small heap blocks, by size class, for what a runtime allocates
//! once per use and frees in bursts: its tasks (`spindle-rt`) and one-shot channels
//! (`spindle-sync`'s `oneshot`).
//!
//! This is Go's per-P free list of dead goroutines (`gfput`/`gfget` in `runtime/proc.go`), for any
//! block of up to 1 KiB. Why: a burst of spawns (or of one-shot exchanges) frees thousands of
//! blocks of one size at once, far more than glibc's per-thread cache keeps (7 per size), so
//! `malloc` and `free` would then take their slow paths, a large part of the cost of a spawn–join
//! or of a one-shot exchange.
//!
//! * **Only threads that [`enable`] it cache** (a runtime's workers, at their start; [`disable`]
//!   at their end frees everything). On any other thread — and on a caching thread during
//!   thread-local destruction — blocks come from and go to the global allocator directly.
//! * Every block of a class is allocated with the class's [`Layout`], so whichever thread
//!   frees it, cache or global allocator, frees it with the layout it was made with.
//! * **Bounded**: a thread caches at most [`BUSY_BYTES`]; a runtime's worker that has slept a
//!   while with nothing to do [`trim`]s to [`IDLE_BYTES`], so a spike's blocks go back to the
//!   allocator once the spike is over.
//! * **Not under memory checkers**: a cached block would hide a use-after-free from the
//!   sanitizers and valgrind, so the runtime does not enable the cache there (its own
//!   `SPINDLE_TASK_CACHE` setting decides; see `spindle-rt`).
//!
//! ```
//! use std::alloc::Layout;
//! use spindle_park::block_cache;
//!
//! let layout = Layout::new::<[u64; 8]>();
//! let block = block_cache::alloc(layout);
//! // SAFETY: `block` came from `alloc` with `layout`, and nothing uses it any more.
//! unsafe { block_cache::dealloc(block, layout) };
//! ```

use std::alloc::Layout;
use std::cell::RefCell;
use std::ptr::NonNull;

/// Classes are multiples of this many bytes.
const GRANULE: usize = 64;
/// Number of classes: blocks of 64, 128, …, 1,024 bytes. Larger tasks are not cached.
const CLASSES: usize = 16;
/// The alignment of every cached block: a cache line. A block then starts a line, so a
/// task's header has its first line to itself as `spindle-rt` lays it out (its hot fields),
/// and no two blocks share a line — with 16-byte alignment the end of one task and the start
/// of the next could sit on one line, each task on another core. (A type that needs more
/// alignment is not cached.)
const ALIGN: usize = 64;

/// The most bytes a busy thread keeps (a burst of 10,000 spawns of ~300-byte tasks fits).
pub const BUSY_BYTES: usize = 4 << 20;
/// What a runtime's worker keeps once it has been idle a while (it calls [`trim`]).
pub const IDLE_BYTES: usize = 256 << 10;

struct Cache {
    enabled: bool,
    /// Bytes held in `free`.
    bytes: usize,
    /// Free blocks, per class; each allocated with [`class_layout`] of its class.
    free: [Vec<NonNull<u8>>; CLASSES],
}

impl Cache {
    /// Frees blocks until at most `keep` bytes are held.
    fn trim(&mut self, keep: usize) {
        if self.bytes <= keep {
            return;
        }
        for (class, list) in self.free.iter_mut().enumerate() {
            let size = class_layout(class).size();
            while self.bytes > keep {
                let Some(block) = list.pop() else { break };
                self.bytes -= size;
                // SAFETY: every block in `free[class]` was allocated by the global allocator
                // with `class_layout(class)` and is owned by the cache alone.
                unsafe { std::alloc::dealloc(block.as_ptr(), class_layout(class)) };
            }
        }
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        self.trim(0);
    }
}

thread_local! {
    static CACHE: RefCell<Cache> = const {
        RefCell::new(Cache {
            enabled: false,
            bytes: 0,
            free: [const { Vec::new() }; CLASSES],
        })
    };
}

/// The class of blocks that can hold `layout`, if it is cached at all.
#[inline]
fn class_of(layout: Layout) -> Option<usize> {
    if layout.align() > ALIGN || layout.size() == 0 {
        return None;
    }
    let class = (layout.size() - 1) / GRANULE;
    (class < CLASSES).then_some(class)
}

/// The layout every block of `class` is allocated with.
#[inline]
fn class_layout(class: usize) -> Layout {
    // A multiple of 64 no larger than 1,024, aligned to 16: always a valid layout.
    match Layout::from_size_align((class + 1) * GRANULE, ALIGN) {
        Ok(layout) => layout,
        Err(_) => unreachable!("class sizes are small multiples of the alignment"),
    }
}

/// Lets this thread cache freed blocks (a runtime's worker thread, at its start, unless the
/// runtime runs under a memory checker: see the module docs).
pub fn enable() {
    let _ = CACHE.try_with(|c| c.borrow_mut().enabled = true);
}

/// Stops caching on this thread and frees what it holds (a worker thread, at its end).
pub fn disable() {
    let _ = CACHE.try_with(|c| {
        if let Ok(mut cache) = c.try_borrow_mut() {
            cache.enabled = false;
            cache.trim(0);
        }
    });
}

/// The bytes this thread's cache holds.
pub fn held() -> usize {
    CACHE
        .try_with(|c| c.try_borrow().map_or(0, |cache| cache.bytes))
        .unwrap_or(0)
}

/// Frees cached blocks until this thread holds at most `keep` bytes.
pub fn trim(keep: usize) {
    let _ = CACHE.try_with(|c| {
        if let Ok(mut cache) = c.try_borrow_mut() {
            cache.trim(keep);
        }
    });
}

/// A block for a value of `layout`: a cached one of its class if this thread has one, else a
/// new one from the global allocator.
///
/// Aborts through [`std::alloc::handle_alloc_error`] if the allocator fails, as `Box::new` and
/// `Arc::new` do.
#[inline]
pub fn alloc(layout: Layout) -> NonNull<u8> {
    if layout.size() == 0 {
        // Nothing to allocate: an aligned, non-null address (what `dealloc` then ignores).
        return NonNull::new(std::ptr::without_provenance_mut(layout.align()))
            .unwrap_or(NonNull::dangling());
    }
    let Some(class) = class_of(layout) else {
        return global_alloc(layout);
    };
    let cached = CACHE
        .try_with(|c| {
            let mut cache = c.try_borrow_mut().ok()?;
            let block = cache.free[class].pop()?;
            cache.bytes -= class_layout(class).size();
            Some(block)
        })
        .ok()
        .flatten();
    cached.unwrap_or_else(|| global_alloc(class_layout(class)))
}

fn global_alloc(layout: Layout) -> NonNull<u8> {
    // SAFETY: `layout` has a non-zero size (`alloc` handles zero-sized layouts itself, and
    // class layouts are at least 64 bytes).
    let ptr = unsafe { std::alloc::alloc(layout) };
    NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout))
}

/// Returns a block from [`alloc`]: to this thread's cache if it caches and has room, else to
/// the global allocator.
///
/// # Safety
///
/// `ptr` came from [`alloc`] with this same `layout`, and nothing uses it any more.
#[inline]
pub unsafe fn dealloc(ptr: NonNull<u8>, layout: Layout) {
    if layout.size() == 0 {
        return; // `alloc` allocated nothing
    }
    let Some(class) = class_of(layout) else {
        // SAFETY: `alloc` made it with `layout` itself (uncached layouts go straight to the
        // global allocator), per the caller.
        unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) };
        return;
    };
    let size = class_layout(class).size();
    let kept = CACHE
        .try_with(|c| {
            let Ok(mut cache) = c.try_borrow_mut() else {
                return false;
            };
            if !cache.enabled || cache.bytes + size > BUSY_BYTES {
                return false;
            }
            cache.free[class].push(ptr);
            cache.bytes += size;
            true
        })
        .unwrap_or(false);
    if !kept {
        // SAFETY: blocks of a cached class are always allocated with the class's layout
        // (`alloc`), per the caller's contract.
        unsafe { std::alloc::dealloc(ptr.as_ptr(), class_layout(class)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_round_up_to_64_bytes_and_stop_at_1024() {
        let l = |size, align| Layout::from_size_align(size, align).unwrap();
        assert_eq!(class_of(l(1, 8)), Some(0));
        assert_eq!(class_of(l(64, 8)), Some(0));
        assert_eq!(class_of(l(65, 8)), Some(1));
        assert_eq!(class_of(l(1024, 16)), Some(15));
        assert_eq!(class_of(l(1025, 8)), None);
        assert_eq!(class_of(l(64, 64)), Some(0));
        assert_eq!(class_of(l(64, 128)), None, "over-aligned: not cached");
        assert_eq!(class_layout(4).size(), 320);
    }

    #[test]
    fn a_caching_thread_reuses_its_blocks_and_trims_them() {
        std::thread::spawn(|| {
            let layout = Layout::from_size_align(300, 8).unwrap();
            enable();
            let a = alloc(layout);
            // SAFETY: from `alloc` with `layout`, unused.
            unsafe { dealloc(a, layout) };
            assert_eq!(held(), 320);
            let b = alloc(layout);
            assert_eq!(a, b, "the freed block is handed out again");
            assert_eq!(held(), 0);
            // A different size in the same class shares the block.
            // SAFETY: as above.
            unsafe { dealloc(b, layout) };
            let c = alloc(Layout::from_size_align(257, 16).unwrap());
            assert_eq!(c, a);
            // SAFETY: `c` came from `alloc` with a layout of the same class; blocks are freed
            // with the class layout whatever the request was.
            unsafe { dealloc(c, Layout::from_size_align(257, 16).unwrap()) };
            trim(0);
            assert_eq!(held(), 0);
            disable();
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_cache_keeps_at_most_its_budget() {
        std::thread::spawn(|| {
            enable();
            let layout = Layout::from_size_align(1024, 8).unwrap();
            let blocks: Vec<_> = (0..BUSY_BYTES / 1024 + 100)
                .map(|_| alloc(layout))
                .collect();
            for b in blocks {
                // SAFETY: from `alloc` with `layout`, unused.
                unsafe { dealloc(b, layout) };
            }
            assert_eq!(held(), BUSY_BYTES);
            trim(IDLE_BYTES);
            assert!(held() <= IDLE_BYTES);
            disable();
            assert_eq!(held(), 0);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_zero_sized_block_is_an_aligned_address_and_allocates_nothing() {
        let layout = Layout::from_size_align(0, 64).unwrap();
        let a = alloc(layout);
        assert_eq!(a.as_ptr().addr() % 64, 0);
        // SAFETY: from `alloc` with `layout`.
        unsafe { dealloc(a, layout) };
        assert_eq!(held(), 0);
    }

    #[test]
    fn a_thread_that_does_not_cache_frees_at_once() {
        std::thread::spawn(|| {
            let layout = Layout::from_size_align(100, 8).unwrap();
            let a = alloc(layout);
            // SAFETY: from `alloc` with `layout`, unused.
            unsafe { dealloc(a, layout) };
            assert_eq!(held(), 0);
        })
        .join()
        .unwrap();
    }
}
