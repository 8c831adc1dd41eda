//! Where task allocations come from: the per-thread caches of freed blocks that
//! `spindle_park::block_cache` keeps, enabled on each worker thread (and freed at its end).
//!
//! This is Go's per-P free list of dead goroutines (`gfput`/`gfget` in `runtime/proc.go`), for the
//! one heap block a task is (header, join cell, closure or coroutine: a few hundred bytes). Why: a
//! burst of spawns frees thousands of blocks of one size at once, far more than glibc's per-thread
//! cache keeps (7 per size), so `malloc` and `free` would then take their slow paths, a large part
//! of a spawn–join's cost. The same caches serve `spindle-sync`'s one-shot channels (one block per
//! channel, in the same bursts).
//!
//! **Off under the sanitizers and valgrind**: a cached block would hide a use-after-free of a
//! task from them (`--cfg spindle_asan`/`spindle_tsan`; valgrind is detected at run time).
//! `SPINDLE_TASK_CACHE=0` turns it off anywhere; `SPINDLE_TASK_CACHE=1` turns it on even under
//! valgrind (to count instructions with callgrind as the program runs natively).

pub(crate) use spindle_park::block_cache::{IDLE_BYTES, alloc, dealloc, disable, held, trim};

/// Whether caching is possible in this build and process (see the module docs).
fn cache_allowed() -> bool {
    if cfg!(any(spindle_asan, spindle_tsan)) {
        return false;
    }
    match std::env::var_os("SPINDLE_TASK_CACHE") {
        Some(v) if v == "0" => false,
        Some(v) if v == "1" => true,
        _ => !spindle_stack::running_on_valgrind(),
    }
}

/// Lets this thread cache freed blocks (a worker thread, at its start), unless a memory
/// checker watches (see the module docs).
pub(crate) fn enable() {
    if cache_allowed() {
        spindle_park::block_cache::enable();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_enabled_worker_thread_reuses_task_blocks() {
        if !cache_allowed() {
            return; // nothing to observe: every block goes to the allocator
        }
        std::thread::spawn(|| {
            let layout = std::alloc::Layout::from_size_align(300, 8).unwrap();
            enable();
            let a = alloc(layout);
            // SAFETY: from `alloc` with `layout`, unused.
            unsafe { dealloc(a, layout) };
            assert_eq!(held(), 320);
            assert_eq!(alloc(layout), a, "the freed block is handed out again");
            disable();
            assert_eq!(held(), 0);
        })
        .join()
        .unwrap();
    }
}
