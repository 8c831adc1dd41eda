//! Growable stacks: growth in the fault handler, the hard guard.
#![cfg(unix)]
#![cfg(feature = "growable")]

mod common;

use spindle_stack::{GrowableStack, Owner, Stack, StackError, page_size};

const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;

/// Under Valgrind growable stacks are committed in full up front (it cannot restart a
/// faulting `call`), so there is no growth to observe; the tests check that instead.
fn under_valgrind() -> bool {
    spindle_stack::running_on_valgrind()
}

#[test]
fn starts_with_initial_committed_and_reserves_max() {
    if common::skipped_under_emulation(
        "starts_with_initial_committed_and_reserves_max",
        "`mincore` on stack mappings (it answers ENOMEM)",
    ) {
        return;
    }
    let stack = GrowableStack::new(16 * KIB, 8 * MIB).unwrap();
    assert_eq!(stack.usable_size(), 8 * MIB);
    let initial = if under_valgrind() { 8 * MIB } else { 16 * KIB };
    assert_eq!(stack.committed(), initial);
    assert_eq!(stack.initial_size(), initial);
    assert_eq!(stack.guard_size(), page_size());
    assert_eq!(stack.top().as_ptr() as usize % 16, 0);
    let resident_before = common::resident_pages(stack.limit().as_ptr(), stack.usable_size());
    assert!(
        resident_before.iter().all(|&r| !r),
        "nothing is resident before use"
    );
}

#[test]
fn writes_walking_down_to_1_mib_grow_the_stack_in_place() {
    let stack = GrowableStack::new(16 * KIB, 8 * MIB).unwrap();
    let top = stack.top().as_ptr();
    let page = page_size();
    let mut last_committed = stack.committed();
    let mut growths = 0;
    for offset in (page..=MIB).step_by(page) {
        // SAFETY: inside the reservation: the handler commits the page on first touch.
        unsafe { top.sub(offset).write_volatile((offset / page) as u8) };
        let committed = stack.committed();
        assert!(committed >= offset, "{committed} < {offset}");
        if committed > last_committed {
            growths += 1;
            last_committed = committed;
        }
    }
    if under_valgrind() {
        assert_eq!(growths, 0);
    } else {
        // Growth at least doubles: walking down 1 MiB from 16 KiB takes a handful of faults.
        assert!((1..=10).contains(&growths), "{growths} growths");
    }
    assert_eq!(stack.top().as_ptr(), top, "the stack never moves");
    for offset in (page..=MIB).step_by(page) {
        // SAFETY: written above.
        let byte = unsafe { top.sub(offset).read_volatile() };
        assert_eq!(byte, (offset / page) as u8);
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn deep_recursion_on_the_stack_grows_it_from_the_handler() {
    // The faults happen on the growable stack itself, so the handler must run on the
    // alternate signal stack.
    spindle_stack::prepare_thread().unwrap();
    let stack = GrowableStack::new(16 * KIB, 8 * MIB).unwrap();
    // ~2000 levels of ~560 bytes: over 1 MiB.
    // SAFETY: 8 MiB is enough for that, and `recurse` does not unwind.
    let on_stack = unsafe { common::call_on_stack(stack.top().as_ptr(), common::recurse, 2000) };
    assert_eq!(on_stack, common::recurse(2000));
    assert!(
        stack.committed() >= MIB,
        "committed only {}",
        stack.committed()
    );
    if !under_valgrind() {
        assert!(
            stack.committed() <= 4 * MIB,
            "grew far too much: {}",
            stack.committed()
        );
    }
}

#[test]
fn invalid_sizes_are_errors() {
    let err = GrowableStack::new(64 * KIB, 16 * KIB).unwrap_err();
    assert!(
        matches!(
            err,
            StackError::InvalidSize {
                what: "initial stack size",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("larger than the maximum"), "{err}");
    assert!(matches!(
        GrowableStack::new(0, MIB),
        Err(StackError::InvalidSize { .. })
    ));
    assert!(matches!(
        GrowableStack::new(KIB, 0),
        Err(StackError::InvalidSize { .. })
    ));
    assert!(matches!(
        GrowableStack::new(KIB, usize::MAX),
        Err(StackError::InvalidSize { .. })
    ));
}

#[test]
fn writing_into_the_hard_guard_aborts_naming_the_owner() {
    let output = common::crash_test(
        "writing_into_the_hard_guard_aborts_naming_the_owner",
        || {
            let stack = GrowableStack::new(16 * KIB, MIB).unwrap();
            stack.set_owner(Owner::named(9, "grower"));
            // SAFETY: deliberately not: just below the reservation is the hard guard.
            unsafe { stack.limit().as_ptr().sub(1).write_volatile(1) };
        },
    );
    output.assert_overflow_abort(&[
        "spindle: coroutine 'grower' (#9) overflowed its 1 MiB growable stack (guard 4 KiB); aborting",
    ]);
}

#[cfg(target_arch = "x86_64")]
#[test]
fn code_that_outgrows_the_reservation_aborts_naming_the_owner() {
    let output = common::crash_test(
        "code_that_outgrows_the_reservation_aborts_naming_the_owner",
        || {
            spindle_stack::prepare_thread().unwrap();
            let stack = GrowableStack::new(16 * KIB, 512 * KIB).unwrap();
            stack.set_owner(Owner::named(3, "deep"));
            // SAFETY: guarded; it grows to 512 KiB in the handler, then hits the hard guard.
            unsafe { common::call_on_stack(stack.top().as_ptr(), common::recurse_forever, 0) };
        },
    );
    output.assert_overflow_abort(&["coroutine 'deep' (#3) overflowed its 512 KiB growable stack"]);
}
