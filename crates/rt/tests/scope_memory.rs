//! A scope must not keep every child it ever spawned until it returns.
//!
//! `Scope::spawn` pushes each child's task (a counted reference: the task's whole block, its
//! header, join cell and body) onto `Children::tasks`, and nothing takes a finished child off
//! before `scope` returns. A long-lived scope — the natural shape of a server whose
//! connection coroutines borrow the listener or the configuration from the caller — grows by
//! one task block per child for as long as it runs, although each child was joined (or
//! finished) long ago. `std::thread::scope` keeps a count, not a list.
//!
//! This binary's global allocator counts live bytes.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use spindle_rt::{IoBackend, Runtime};

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: delegates to `System`, only counting.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as `System::alloc`.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as `System::dealloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: same contract as `System::realloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Correct: memory held by a scope does not grow with the number of children that have
/// already finished (finished children are dropped from the list as they are waited for or
/// joined, or the scope keeps a count and only the unfinished children's tasks, as
/// `std::thread::scope` does). Bounded here by the worker's task-block cache (4 MiB).
#[test]
fn a_long_lived_scope_does_not_keep_every_finished_child() {
    const CHILDREN: usize = 100_000;
    let rt = Runtime::builder()
        .workers(1)
        .io(IoBackend::None)
        .build()
        .unwrap();
    let config = String::from("borrowed by every child");
    let grown = rt.block_on(|| {
        spindle_rt::scope(|s| {
            // Warm up (caches, the stack pool) before measuring.
            for _ in 0..1000 {
                s.spawn(|| config.len()).join().unwrap();
            }
            let before = LIVE.load(Ordering::SeqCst);
            for _ in 0..CHILDREN {
                s.spawn(|| config.len()).join().unwrap();
            }
            let after = LIVE.load(Ordering::SeqCst);
            eprintln!("{s:?}");
            after - before
        })
    });
    let per_child = grown as f64 / CHILDREN as f64;
    assert!(
        grown < 8 << 20,
        "a scope that spawned and joined {CHILDREN} children, one at a time, grew by {grown} \
         bytes ({per_child:.0} per child): every finished child's task is kept until the \
         scope returns"
    );
}
