//! `coroutine_local!` re-entrancy.
//!
//! `Locals::get_or_init` (src/local.rs) runs the initialiser with no borrow of the map, as
//! its comment says, so that an initialiser may use other locals "or, through them, this one:
//! then the value it made is kept and ours is dropped". But "ours is dropped" happens inside
//! `map.values.entry(key).or_insert(fresh)`: `HashMap::entry(..).or_insert(v)` drops `v` (the
//! occupied case) *after* it has taken the `&mut` to the slot in the table and before it
//! returns it. A destructor that uses other coroutine-locals there (documented as allowed)
//! inserts into the same map — through a second `&mut` made from the raw pointer while the
//! first is alive — and when that insert grows the table, the reference `or_insert` returns
//! points into the freed table: `get_or_init` reads the value's `Box<dyn Any>` from freed
//! memory, and `with` hands `f` a reference made from it. A use-after-free from safe code.
//!
//! This test binary's global allocator poisons freed memory, so that the freed read shows
//! (a crash in `downcast_ref`, through the poisoned vtable pointer) instead of reading stale
//! bytes that happen to be intact. It runs in a child process.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use spindle_rt::{IoBackend, Runtime};

/// The system allocator, filling every freed block with 0xAB first.
struct Poisoning;

// SAFETY: delegates to `System`; writes only into the block being freed, which the caller
// owns (its `size` bytes) until `dealloc` returns.
unsafe impl GlobalAlloc for Poisoning {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `System::alloc` (same contract).
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` is a live block of `layout.size()` bytes, ours until freed.
        unsafe {
            std::ptr::write_bytes(ptr, 0xAB, layout.size());
            System.dealloc(ptr, layout);
        }
    }
}

#[global_allocator]
static ALLOC: Poisoning = Poisoning;

/// How deep in `A`'s initialiser we are.
static A_INIT_DEPTH: AtomicUsize = AtomicUsize::new(0);

/// `A`'s value: the one made by the outer initialiser is discarded (the inner one, made
/// re-entrantly, is kept); its destructor uses a few other locals (the map grows).
struct AValue {
    kept: bool,
}
impl Drop for AValue {
    fn drop(&mut self) {
        if !self.kept {
            B1.with(|_| ());
            B2.with(|_| ());
            B3.with(|_| ());
            B4.with(|_| ());
            B5.with(|_| ());
            B6.with(|_| ());
            B7.with(|_| ());
            B8.with(|_| ());
        }
    }
}

/// `A`'s initialiser: the outer call uses `A` itself (through a helper, as a lazily built
/// registry might), which makes the inner value first.
fn make_a() -> AValue {
    if A_INIT_DEPTH.fetch_add(1, Ordering::SeqCst) == 0 {
        A.with(|a| assert!(a.kept));
        AValue { kept: false }
    } else {
        AValue { kept: true }
    }
}

spindle_rt::coroutine_local! {
    static A: AValue = make_a();
    static B1: u64 = 1;
    static B2: u64 = 2;
    static B3: u64 = 3;
    static B4: u64 = 4;
    static B5: u64 = 5;
    static B6: u64 = 6;
    static B7: u64 = 7;
    static B8: u64 = 8;
}

#[test]
#[ignore = "child process of a_discarded_initial_value_whose_destructor_uses_locals_is_not_a_use_after_free"]
fn child_reentrant_local_init() {
    if std::env::var_os("SPINDLE_TEST_CHILD").is_none() {
        return;
    }
    let rt = Runtime::builder()
        .workers(1)
        .io(IoBackend::None)
        .build()
        .unwrap();
    let kept = rt.block_on(|| A.with(|a| a.kept));
    eprintln!("CHILD: the value seen by `with`: kept = {kept}");
    assert!(kept);
    drop(rt);
    eprintln!("CHILD-OK");
}

/// Correct: `get_or_init` drops the discarded value only after it has let go of the map
/// (take the pointer to the kept value, end the borrow, then drop `fresh`), so the
/// destructor's inserts cannot move the table under a live reference.
#[test]
fn a_discarded_initial_value_whose_destructor_uses_locals_is_not_a_use_after_free() {
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            "child_reentrant_local_init",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SPINDLE_TEST_CHILD", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.contains("CHILD-OK"),
        "the child died: {} (a read of the freed hash table: the value's Box<dyn Any> came \
         from poisoned memory)\n--- its stderr ---\n{stderr}",
        out.status
    );
}
