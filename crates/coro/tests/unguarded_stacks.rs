//! Unguarded stacks: a *safe* caller must not be able to corrupt memory it does not own through
//! a stack without a guard page.
//!
//! `FixedStack::with_guard(size, 0)` was a safe constructor that made a stack with no guard,
//! and `Coroutine::with_stack` (safe) runs arbitrary safe code on it: a coroutine whose frames
//! outgrew the stack wrote into whatever mapping lay directly below it (the original test
//! showed a 32 KiB local on a 16 KiB unguarded stack overwriting the neighbouring stack).
//! Safe APIs must be sound for any safe caller, so now the safe constructors refuse a guard of
//! 0 with a clear error, and unguarded stacks come only from `unsafe` constructors whose caller
//! promises that nothing overflows them.
//!
//! Also: a foreign `unsafe impl Stack` too small for the coroutine's first frame got
//! out-of-bounds writes from the coroutine builder (only a `debug_assert!` checked the size);
//! now a real check refuses it (a panic, before anything is written).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;

use spindle_coro::{Coroutine, CoroutineResult, Yielder};
use spindle_stack::{
    FixedStack, GrowableStack, Owner, PoolConfig, SharedStack, Stack, StackError, StackPool,
};

#[test]
fn the_safe_constructors_refuse_a_stack_without_a_guard() {
    let err = FixedStack::with_guard(16 * 1024, 0).unwrap_err();
    assert!(
        matches!(
            err,
            StackError::InvalidSize {
                what: "guard size",
                requested: 0,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("with_guard_unchecked"), "{err}");
    assert!(matches!(
        SharedStack::with_guard(16 * 1024, 0),
        Err(StackError::InvalidSize { .. })
    ));
    if cfg!(unix) {
        assert!(matches!(
            GrowableStack::with_guard(16 * 1024, 64 * 1024, 0),
            Err(StackError::InvalidSize { .. })
        ));
    }
    let err = StackPool::new(PoolConfig {
        guard_size: 0,
        ..PoolConfig::default()
    })
    .unwrap_err();
    assert!(
        matches!(
            err,
            StackError::InvalidConfig {
                field: "guard_size",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("new_unchecked"), "{err}");
}

#[test]
fn unguarded_stacks_come_only_from_the_unsafe_constructors() {
    // SAFETY: the coroutine below uses a few hundred bytes of the 16 KiB.
    let stack = unsafe { FixedStack::with_guard_unchecked(16 * 1024, 0) }.unwrap();
    assert_eq!(stack.guard_size(), 0);
    let mut co = Coroutine::with_stack(stack, |_: &Yielder<(), ()>, ()| 7);
    assert_eq!(co.resume(()), CoroutineResult::Return(7));
    // SAFETY: nothing runs on the pool's stacks.
    let pool = unsafe {
        StackPool::new_unchecked(PoolConfig {
            guard_size: 0,
            ..PoolConfig::default()
        })
    }
    .unwrap();
    assert_eq!(pool.get().unwrap().guard_size(), 0);
}

/// A foreign stack of 256 bytes in the middle of a buffer that the test owns (nothing is ever
/// run on it: the builder must refuse it).
struct TinyStack {
    base: usize,
}

const TINY_BOTTOM: usize = 4096;
const TINY_SIZE: usize = 256;

#[repr(align(16))]
struct Buffer([u8; 8192]);

// SAFETY: `[limit, top)` lies inside the test's buffer, which outlives every `TinyStack` and
// which nothing else touches meanwhile; `top` is 16-aligned (the buffer is) and fixed.
unsafe impl Stack for TinyStack {
    fn top(&self) -> NonNull<u8> {
        NonNull::new((self.base + TINY_BOTTOM + TINY_SIZE) as *mut u8).unwrap()
    }
    fn limit(&self) -> NonNull<u8> {
        NonNull::new((self.base + TINY_BOTTOM) as *mut u8).unwrap()
    }
    fn guard_size(&self) -> usize {
        4096
    }
    fn set_owner(&self, _: Owner<'_>) {}
}

#[test]
fn a_stack_too_small_for_the_first_frame_is_refused_before_anything_is_written() {
    let mut buffer = Box::new(Buffer([0u8; 8192]));
    let base = buffer.0.as_mut_ptr() as usize;
    // A 512-byte closure: it would go on the stack, below its top, and the context under it.
    let big = [0x5Au8; 512];
    let refused = catch_unwind(AssertUnwindSafe(|| {
        Coroutine::with_stack(TinyStack { base }, move |_: &Yielder<(), ()>, ()| big[3])
    }));
    let payload = refused.expect_err("a 256-byte stack was accepted");
    let message = payload.downcast_ref::<String>().unwrap();
    assert!(message.contains("too small"), "{message}");
    let written = buffer.0.iter().filter(|&&b| b != 0).count();
    assert_eq!(
        written, 0,
        "the builder wrote {written} bytes around a stack it had to refuse"
    );
}
