//! Fixed stacks: layout, writability, the guard page, unmapping.
#![cfg(all(feature = "growable", feature = "shared"))]

mod common;

use spindle_stack::{FixedStack, GrowableStack, Stack, StackError, page_size};

#[test]
fn top_is_aligned_and_sizes_are_rounded_to_pages() {
    let page = page_size();
    for requested in [1, 4096, 10_000, 64 * 1024, 256 * 1024 + 1] {
        let stack = FixedStack::new(requested).unwrap();
        let top = stack.top().as_ptr() as usize;
        let limit = stack.limit().as_ptr() as usize;
        assert_eq!(top % 16, 0);
        assert_eq!(top % page, 0);
        assert_eq!(stack.usable_size(), requested.next_multiple_of(page));
        assert_eq!(top - limit, stack.usable_size());
        assert_eq!(stack.guard_size(), page);
    }
    let stack = FixedStack::with_guard(8192, 3 * page + 1).unwrap();
    assert_eq!(stack.guard_size(), 4 * page);
    // An unguarded stack only through the unsafe constructor.
    assert!(matches!(
        FixedStack::with_guard(8192, 0),
        Err(StackError::InvalidSize { .. })
    ));
    // SAFETY: nothing runs on the stack.
    let unguarded = unsafe { FixedStack::with_guard_unchecked(8192, 0) }.unwrap();
    assert_eq!(unguarded.guard_size(), 0);
}

#[test]
fn the_whole_usable_range_is_writable() {
    let stack = FixedStack::new(256 * 1024).unwrap();
    let limit = stack.limit().as_ptr();
    let len = stack.usable_size();
    // SAFETY: [limit, top) is the stack's read-write memory and nothing else uses it.
    let memory = unsafe { std::slice::from_raw_parts_mut(limit, len) };
    for (i, byte) in memory.iter_mut().enumerate() {
        *byte = (i % 251) as u8;
    }
    assert!(
        memory
            .iter()
            .enumerate()
            .all(|(i, &b)| b == (i % 251) as u8)
    );
}

#[test]
fn invalid_sizes_are_errors_that_say_why() {
    let zero = FixedStack::new(0).unwrap_err();
    assert!(matches!(zero, StackError::InvalidSize { requested: 0, .. }));
    assert!(
        zero.to_string().contains("must be greater than zero"),
        "{zero}"
    );

    let huge = FixedStack::new(usize::MAX).unwrap_err();
    assert!(matches!(huge, StackError::InvalidSize { .. }), "{huge:?}");
    assert!(huge.to_string().contains("too large"), "{huge}");

    let huge_guard = FixedStack::with_guard(4096, usize::MAX - 10).unwrap_err();
    assert!(matches!(
        huge_guard,
        StackError::InvalidSize {
            what: "guard size",
            ..
        }
    ));

    // Fits in isize once rounded, but not in the address space: the OS says no.
    let too_big = FixedStack::new(1 << 62).unwrap_err();
    assert!(
        matches!(
            too_big,
            StackError::OutOfMemory { .. }
                | StackError::AddressSpaceLimit { .. }
                | StackError::InvalidSize { .. }
        ),
        "{too_big:?}"
    );
    assert!(
        too_big.to_string().contains(&(1usize << 62).to_string()),
        "{too_big}"
    );
}

#[test]
fn stacks_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<FixedStack>();
    assert_send_sync::<GrowableStack>();
}

#[cfg(unix)]
#[test]
fn writing_below_the_limit_aborts_naming_the_owner() {
    let output = common::crash_test("writing_below_the_limit_aborts_naming_the_owner", || {
        let stack = FixedStack::new(64 * 1024).unwrap();
        stack.set_owner(spindle_stack::Owner {
            id: 42,
            name: Some("worker-3"),
        });
        // SAFETY: deliberately not: one byte below the limit is the guard page.
        unsafe { stack.limit().as_ptr().sub(1).write_volatile(1) };
    });
    output.assert_overflow_abort(&[
        "spindle: coroutine 'worker-3' (#42) overflowed its 64 KiB fixed stack (guard 4 KiB); aborting",
    ]);
}

#[cfg(unix)]
#[test]
fn unowned_stack_overflow_says_so() {
    let output = common::crash_test("unowned_stack_overflow_says_so", || {
        let stack = FixedStack::with_guard(16 * 1024, 8192).unwrap();
        // SAFETY: deliberately not: the bottom of the guard.
        unsafe { stack.limit().as_ptr().sub(8192).write_volatile(1) };
    });
    output.assert_overflow_abort(&["an unowned stack", "16 KiB fixed stack (guard 8 KiB)"]);
}

#[cfg(target_arch = "x86_64")]
#[cfg(all(target_arch = "x86_64", unix))]
#[test]
fn code_that_overflows_a_fixed_stack_aborts_naming_the_owner() {
    let output = common::crash_test(
        "code_that_overflows_a_fixed_stack_aborts_naming_the_owner",
        || {
            spindle_stack::prepare_thread().unwrap();
            let stack = FixedStack::new(128 * 1024).unwrap();
            stack.set_owner(spindle_stack::Owner::new(7));
            // SAFETY: the stack is guarded; running off its end aborts in the handler,
            // which runs on this thread's alternate signal stack.
            unsafe { common::call_on_stack(stack.top().as_ptr(), common::recurse_forever, 0) };
        },
    );
    output.assert_overflow_abort(&["coroutine #7 overflowed its 128 KiB fixed stack"]);
}

#[cfg(target_arch = "x86_64")]
#[cfg(all(target_arch = "x86_64", unix))]
#[test]
fn code_runs_on_a_fixed_stack() {
    let stack = FixedStack::new(256 * 1024).unwrap();
    // ~200 levels of ~560 bytes: about 110 KiB.
    // SAFETY: the stack is large enough, and `recurse` does not unwind.
    let on_stack = unsafe { common::call_on_stack(stack.top().as_ptr(), common::recurse, 200) };
    assert_eq!(on_stack, common::recurse(200));
}

#[cfg(target_os = "linux")]
#[test]
fn dropping_stacks_unmaps_them() {
    // In a child: a single-threaded process, so the mapping count is not disturbed by
    // other tests.
    let output = common::crash_test("dropping_stacks_unmaps_them", || {
        let before = common::mapping_count();
        let mut fixed = Vec::with_capacity(300);
        let mut growable = Vec::with_capacity(100);
        let mut shared = Vec::with_capacity(100);
        for _ in 0..300 {
            fixed.push(FixedStack::new(16 * 1024).unwrap());
        }
        for _ in 0..100 {
            growable.push(GrowableStack::new(8192, 1024 * 1024).unwrap());
            shared.push(spindle_stack::SharedStack::new(16 * 1024).unwrap());
        }
        let during = common::mapping_count();
        assert!(during >= before + 2 * 500, "{before} -> {during}");
        drop((fixed, growable, shared));
        let after = common::mapping_count();
        assert!(
            after <= before + 2,
            "{before} -> {after}: stacks were not unmapped"
        );
        println!("unmapped: {before} -> {during} -> {after}");
    });
    assert!(output.status.success(), "{output:?}");
    assert!(output.stdout.contains("unmapped:"), "{output:?}");
}
