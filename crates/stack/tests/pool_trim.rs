//! With `thread_cache: 0`, a recycle must not trim the stack every time (one `madvise` per
//! coroutine) whatever `trim_every` and `trim_when_shared` say.
//!
//! `PoolConfig::trim_when_shared` (false) promises: trimmed "only every `trim_every`-th
//! recycle, and when a thread's cache is flushed", and `trim_every` (256) promises a trim every
//! 256th recycle. `PoolInner::recycle` honours both on the thread-cache path, but when
//! `thread_cache == 0` it calls `put_shared(entry, trimmed)`, which trims every stack that was
//! not trimmed just before: `trim_when_shared` is ignored and `trim_every` is defeated, costing
//! a system call (and later page faults) per recycle. Expected: 0 trims for 10 recycles.

use spindle_stack::{PoolConfig, StackPool};

#[test]
fn a_pool_without_thread_cache_honours_trim_every_and_trim_when_shared() {
    let pool = StackPool::new(PoolConfig {
        thread_cache: 0,
        trim_every: 256,
        trim_when_shared: false,
        ..PoolConfig::default()
    })
    .unwrap();
    for _ in 0..10 {
        drop(pool.get().unwrap());
    }
    let stats = pool.stats();
    assert_eq!(stats.mapped, 1);
    assert_eq!(
        stats.trims, 0,
        "10 recycles with trim_every 256 and trim_when_shared false trimmed {} times",
        stats.trims
    );
}
