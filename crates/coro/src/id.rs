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
    /// The next id to hand out, and the end of this thread's block. Two cells rather than one
    /// pair, so that handing out an id stores only the first.
    static NEXT: Cell<u64> = const { Cell::new(0) };
    static END: Cell<u64> = const { Cell::new(0) };
}

/// A new coroutine id, never returned before in this process.
#[inline]
pub(crate) fn next() -> u64 {
    // Neither thread-local has a destructor, so both are there during thread-local
    // destruction too; `try_with` fails only on targets that keep them in OS-keyed slots.
    let local = NEXT
        .try_with(Cell::get)
        .and_then(|next| Ok((next, END.try_with(Cell::get)?)));
    match local {
        Ok((next, end)) if next < end => {
            NEXT.set(next + 1);
            next
        }
        Ok(_) => new_block(),
        // Without this thread's block: take a block of one.
        Err(_) => NEXT_BLOCK.fetch_add(1, Ordering::Relaxed),
    }
}

/// Takes a new block for this thread and hands out its first id.
#[cold]
fn new_block() -> u64 {
    let start = NEXT_BLOCK.fetch_add(BLOCK, Ordering::Relaxed);
    NEXT.set(start + 1);
    END.set(start + BLOCK);
    start
}
