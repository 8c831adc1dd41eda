//! Coroutine ids: unique per process, cheap to hand out.
//!
//! Each thread takes a block of ids from a global counter and hands them out from a
//! thread-local, so creating a coroutine costs no atomic read-modify-write in the common case.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

const BLOCK: u64 = 1024;

/// The first id of the next unclaimed block. Ids start at 1.
static NEXT_BLOCK: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// (next id to hand out, end of this thread's block)
    static LOCAL: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// A new coroutine id, never returned before in this process.
#[inline]
pub(crate) fn next() -> u64 {
    LOCAL
        .try_with(|local| {
            let (next, end) = local.get();
            if next < end {
                local.set((next + 1, end));
                next
            } else {
                let start = NEXT_BLOCK.fetch_add(BLOCK, Ordering::Relaxed);
                local.set((start + 1, start + BLOCK));
                start
            }
        })
        // During thread-local destruction: take a block of one.
        .unwrap_or_else(|_| NEXT_BLOCK.fetch_add(1, Ordering::Relaxed))
}
