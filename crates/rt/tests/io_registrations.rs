//! What a long-lived IO source keeps of the runtimes it met.
#![cfg(target_os = "linux")]

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Read;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use spindle_io::net::UnixStream;
use spindle_rt::{IoBackend, Runtime};

/// Counts the bytes allocated and not yet freed.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as the caller's contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as the caller's contract.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as the caller's contract.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// One short-lived epoll runtime in which `s` waits once (and so registers).
fn one_runtime(s: Option<&'static UnixStream>, sources: usize) {
    let rt = Runtime::builder()
        .io(IoBackend::Epoll)
        .workers(1)
        .blocking_threads(1)
        .build()
        .unwrap();
    rt.block_on(move || {
        // Other sources of that runtime (a server's connections...), closed before it ends.
        let others: Vec<_> = (0..sources)
            .map(|_| {
                spindle_rt::spawn(|| {
                    let (a, _b) = UnixStream::pair().unwrap();
                    a.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
                    let _ = (&a).read(&mut [0u8; 1]);
                })
            })
            .collect();
        for o in others {
            o.join().unwrap();
        }
        if let Some(s) = s {
            s.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
            let _ = (&*s).read(&mut [0u8; 1]);
        }
    });
}

/// A socket that outlives many runtimes (a long-lived connection used by a program that makes
/// a runtime per job, say) registers once in each. `Evented` keeps every registration until
/// the socket drops ("the list stays tiny": it assumes few runtimes), each holding its dead
/// driver's shared state alive — and the epoll driver's `Drop` drains its registration table
/// without freeing its storage, so each dead runtime's table (sized for every source it ever
/// had) stays allocated too. Memory grows with every runtime the socket met.
/// Correct: a registration whose driver is gone is released (or at least shrunk to a few
/// bytes), so memory stays flat.
/// Live bytes grown over `rounds` runtimes (after a warm-up).
fn growth(s: Option<&'static UnixStream>, rounds: isize) -> isize {
    for _ in 0..5 {
        one_runtime(s, 1000); // warm up
    }
    std::thread::sleep(Duration::from_millis(100));
    let before = LIVE.load(Ordering::Relaxed);
    for _ in 0..rounds {
        one_runtime(s, 1000);
    }
    std::thread::sleep(Duration::from_millis(100));
    LIVE.load(Ordering::Relaxed) - before
}

#[test]
fn a_long_lived_source_does_not_keep_dead_runtimes() {
    const ROUNDS: isize = 30;
    // Control: the same runtimes, the long-lived socket not used in them.
    let control = growth(None, ROUNDS);
    let (s, _peer) = UnixStream::pair().unwrap();
    let s: &'static UnixStream = Box::leak(Box::new(s));
    let grown = growth(Some(s), ROUNDS);
    eprintln!(
        "control: {control} bytes; with the long-lived socket: {grown} bytes over {ROUNDS} \
         runtimes ({} per runtime)",
        grown / ROUNDS
    );
    assert!(control < 64 * 1024, "the control grew {control} bytes");
    assert!(
        grown < 64 * 1024,
        "grew {grown} bytes ({} per runtime)",
        grown / ROUNDS
    );
}
