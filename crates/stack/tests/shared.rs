//! Shared (copying) stacks: the save/restore bookkeeping, without a coroutine library.
#![cfg(feature = "shared")]

mod common;

use std::ptr::NonNull;

use proptest::prelude::*;
use spindle_stack::{SharedSlot, SharedStack, Stack, StackError};

const KIB: usize = 1024;

/// The top bytes a region does not keep across a change of occupant.
const UNSAVED: usize = <SharedSlot as Stack>::UNSAVED_TOP;

/// What an eviction keeps of a coroutine `depth` bytes deep.
fn kept(depth: usize) -> usize {
    depth.saturating_sub(UNSAVED)
}

// The tests drive the copying hooks by hand, on one thread, with nothing running on the
// region; every `sp` they pass comes from `run`, so it lies inside the region. These
// wrappers state that once.

fn resume(slot: &SharedSlot, sp: Option<NonNull<u8>>) -> Result<(), StackError> {
    // SAFETY: see above: this thread owns the region and no code runs on it.
    unsafe { slot.before_resume(sp) }
}

fn suspend(slot: &SharedSlot, sp: NonNull<u8>) {
    // SAFETY: see above: `sp` lies in the region and the "coroutine" is not running.
    unsafe { slot.after_suspend(sp) }
}

fn finish(slot: &SharedSlot) {
    // SAFETY: see above: the "coroutine" has stopped and will not be resumed.
    unsafe { slot.after_finish() }
}

/// The stack pointer of a coroutine `depth` bytes deep.
fn sp_at(slot: &SharedSlot, depth: usize) -> NonNull<u8> {
    // SAFETY: `depth <= usable size` in every test, so this stays in the region.
    unsafe { NonNull::new_unchecked(slot.top().as_ptr().sub(depth)) }
}

/// The "coroutine" with pattern id `id` running at depth `depth`: writes its pattern over
/// `[top - depth, top)` and returns its stack pointer.
fn run(slot: &SharedSlot, id: u8, depth: usize) -> NonNull<u8> {
    let top = slot.top().as_ptr();
    for offset in 1..=depth {
        // SAFETY: the slot is the running occupant; `depth` is within the region.
        unsafe { top.sub(offset).write(pattern(id, offset)) };
    }
    sp_at(slot, depth)
}

fn pattern(id: u8, offset: usize) -> u8 {
    id.wrapping_mul(31) ^ (offset % 253) as u8
}

/// Whether the kept part of `[top - depth, top)` (all but the top [`UNSAVED`] bytes) holds
/// `id`'s pattern.
fn holds_pattern(slot: &SharedSlot, id: u8, depth: usize) -> bool {
    let top = slot.top().as_ptr();
    // SAFETY: reading the region, which is mapped and read-write.
    (UNSAVED + 1..=depth).all(|offset| unsafe { top.sub(offset).read() } == pattern(id, offset))
}

#[test]
fn all_slots_share_the_region_top_and_size() {
    let region = SharedStack::new(64 * KIB).unwrap();
    let slots: Vec<_> = (0..4).map(|_| region.slot()).collect();
    for slot in &slots {
        assert_eq!(slot.top(), slots[0].top());
        assert_eq!(slot.limit(), slots[0].limit());
        assert_eq!(slot.usable_size(), 64 * KIB);
        assert_eq!(slot.top().as_ptr() as usize % 16, 0);
    }
    const { assert!(<SharedSlot as Stack>::COPYING) };
    // The context's link and entry words, and nothing more (spindle-coro checks the bound).
    const { assert!(UNSAVED == 16) };
    const { assert!(<spindle_stack::FixedStack as Stack>::UNSAVED_TOP == 0) };
    const { assert!(!<spindle_stack::FixedStack as Stack>::COPYING) };
}

#[test]
fn resuming_the_occupant_again_copies_nothing() {
    let region = SharedStack::new(64 * KIB).unwrap();
    let slot = region.slot();
    resume(&slot, None).unwrap();
    let sp = run(&slot, 1, 4 * KIB);
    suspend(&slot, sp);
    for _ in 0..1000 {
        resume(&slot, Some(sp)).unwrap();
        suspend(&slot, sp);
    }
    let stats = region.stats();
    assert_eq!(
        (stats.switches, stats.bytes_saved, stats.bytes_restored),
        (1, 0, 0)
    );
    assert!(holds_pattern(&slot, 1, 4 * KIB));
}

#[test]
fn resuming_from_a_running_coroutine_on_the_same_region_is_busy() {
    let region = SharedStack::new(64 * KIB).unwrap();
    let (a, b) = (region.slot(), region.slot());
    resume(&a, None).unwrap();
    let sp = run(&a, 1, 256);
    let err = resume(&b, None).unwrap_err();
    assert_eq!(err, StackError::SharedStackBusy);
    assert!(err.to_string().contains("different SharedStacks"), "{err}");
    // The running coroutine resuming itself is refused too.
    assert_eq!(resume(&a, Some(sp)), Err(StackError::SharedStackBusy));
    // Nothing was disturbed.
    assert!(a.is_occupant() && !b.is_occupant());
    assert!(holds_pattern(&a, 1, 256));
    suspend(&a, sp);
    resume(&b, None).unwrap();
    assert_eq!(a.saved_len(), kept(256));
}

#[test]
fn save_buffers_are_sized_to_what_is_used() {
    let region = SharedStack::new(256 * KIB).unwrap();
    let (a, b) = (region.slot(), region.slot());
    let switch_to = |from: &SharedSlot, to: &SharedSlot, depth: usize, id: u8| {
        resume(to, None).unwrap();
        let sp = run(to, id, depth);
        suspend(to, sp);
        let _ = from;
    };
    switch_to(&b, &a, 100 * KIB, 1);
    switch_to(&a, &b, 100, 2); // evicts a: 100 KiB saved
    assert_eq!(a.saved_len(), kept(100 * KIB));
    assert!(a.capacity() >= kept(100 * KIB));
    // A restarts shallow (a new coroutine in the slot, for the test's purposes).
    finish(&a);
    assert_eq!(
        (a.saved_len(), a.capacity()),
        (0, 0),
        "finishing frees the buffer"
    );
    switch_to(&b, &a, 200, 3);
    switch_to(&a, &b, 100, 2);
    assert_eq!(a.saved_len(), kept(200));
    assert!(a.capacity() < 8 * KIB, "capacity {}", a.capacity());
}

#[test]
fn dropping_the_occupant_frees_the_region() {
    let region = SharedStack::new(64 * KIB).unwrap();
    let (a, b) = (region.slot(), region.slot());
    resume(&a, None).unwrap();
    let sp = run(&a, 1, 512);
    suspend(&a, sp);
    drop(a);
    resume(&b, None).unwrap();
    assert_eq!(
        region.stats().evictions,
        0,
        "nothing to save for a dropped slot"
    );
    assert!(b.is_occupant());
}

#[test]
fn a_slot_made_after_a_drop_starts_clean() {
    // Dropped slots' states are reused by later slots: nothing of the old one may show.
    let region = SharedStack::new(64 * KIB).unwrap();
    let (a, b) = (region.slot(), region.slot());
    resume(&a, None).unwrap();
    let a_sp = run(&a, 1, 700);
    suspend(&a, a_sp);
    resume(&b, None).unwrap(); // evicts a: a's 700 bytes in its save buffer
    let b_sp = run(&b, 2, 300);
    suspend(&b, b_sp);
    assert_eq!(a.saved_len(), kept(700));
    drop(a);
    let c = region.slot();
    assert_eq!(c.saved_len(), 0);
    assert!(!c.is_occupant());
    resume(&c, None).unwrap(); // evicts b, restores nothing
    assert!(c.is_occupant() && !b.is_occupant());
    assert_eq!(b.saved_len(), kept(300));
    let c_sp = run(&c, 3, 100);
    suspend(&c, c_sp);
    resume(&b, Some(b_sp)).unwrap();
    assert!(holds_pattern(&b, 2, 300), "b's bytes came back");
    finish(&b);
}

#[cfg(unix)]
#[test]
fn shared_region_overflow_names_the_running_occupant() {
    let output = common::crash_test("shared_region_overflow_names_the_running_occupant", || {
        let region = SharedStack::new(32 * KIB).unwrap();
        let (a, b) = (region.slot(), region.slot());
        a.set_owner(spindle_stack::Owner::named(1, "first"));
        b.set_owner(spindle_stack::Owner::named(2, "second"));
        resume(&a, None).unwrap();
        let sp = run(&a, 1, 64);
        suspend(&a, sp);
        resume(&b, None).unwrap();
        // SAFETY: deliberately not: below the region's limit is its guard page.
        unsafe { b.limit().as_ptr().sub(1).write_volatile(1) };
    });
    output.assert_overflow_abort(&[
        "coroutine 'second' (#2) overflowed its 32 KiB shared stack (guard 4 KiB)",
    ]);
}

#[cfg(target_arch = "x86_64")]
#[cfg(all(target_arch = "x86_64", unix))]
#[test]
fn code_that_overflows_a_shared_region_aborts() {
    let output = common::crash_test("code_that_overflows_a_shared_region_aborts", || {
        spindle_stack::prepare_thread().unwrap();
        let region = SharedStack::new(64 * KIB).unwrap();
        let slot = region.slot();
        slot.set_owner(spindle_stack::Owner::new(77));
        resume(&slot, None).unwrap();
        // SAFETY: guarded: running off the end aborts in the handler.
        unsafe { common::call_on_stack(slot.top().as_ptr(), common::recurse_forever, 0) };
    });
    output.assert_overflow_abort(&["coroutine #77 overflowed its 64 KiB shared stack"]);
}

#[derive(Clone, Debug)]
enum Op {
    /// Resume slot i; it runs and leaves `depth` bytes of stack.
    Resume { slot: usize, depth: usize },
    /// The running coroutine suspends.
    Suspend,
    /// The running coroutine finishes.
    Finish,
    /// Drop slot i (if it is not running) and put a fresh slot in its place.
    Replace { slot: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0usize..8, 1usize..=16 * KIB).prop_map(|(slot, depth)| Op::Resume { slot, depth }),
        5 => Just(Op::Suspend),
        1 => Just(Op::Finish),
        1 => (0usize..8).prop_map(|slot| Op::Replace { slot }),
    ]
}

/// What the model knows about each slot's coroutine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Coroutine {
    NotStarted,
    Running { depth: usize },
    Suspended { depth: usize },
    Finished,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn save_and_restore_bookkeeping_matches_a_model(
        slot_count in 2usize..6,
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        let region = SharedStack::new(64 * KIB).unwrap();
        let mut slots: Vec<SharedSlot> = (0..slot_count).map(|_| region.slot()).collect();
        // Pattern ids change when a slot is replaced, so stale bytes can't pass for fresh.
        let mut ids: Vec<u8> = (0..slot_count as u8).collect();
        let mut next_id = slot_count as u8;
        let mut model = vec![Coroutine::NotStarted; slot_count];
        let mut occupant: Option<usize> = None;
        let mut running: Option<usize> = None;

        for op in ops {
            match op {
                Op::Resume { slot, depth } => {
                    let i = slot % slot_count;
                    let sp = match model[i] {
                        Coroutine::Suspended { depth } => Some(sp_at(&slots[i], depth)),
                        Coroutine::NotStarted => None,
                        Coroutine::Running { .. } | Coroutine::Finished => {
                            if running.is_some() {
                                // Still must be refused while anything runs.
                                let result = resume(&slots[i], None);
                                prop_assert_eq!(result, Err(StackError::SharedStackBusy));
                            }
                            continue;
                        }
                    };
                    let result = resume(&slots[i], sp);
                    if running.is_some() {
                        prop_assert_eq!(result, Err(StackError::SharedStackBusy));
                        continue;
                    }
                    prop_assert_eq!(result, Ok(()));
                    if let Coroutine::Suspended { depth: old } = model[i] {
                        prop_assert!(holds_pattern(&slots[i], ids[i], old), "restored bytes differ");
                    }
                    run(&slots[i], ids[i], depth);
                    model[i] = Coroutine::Running { depth };
                    occupant = Some(i);
                    running = Some(i);
                }
                Op::Suspend => {
                    let Some(i) = running.take() else { continue };
                    let Coroutine::Running { depth } = model[i] else { unreachable!() };
                    suspend(&slots[i], sp_at(&slots[i], depth));
                    model[i] = Coroutine::Suspended { depth };
                }
                Op::Finish => {
                    let Some(i) = running.take() else { continue };
                    finish(&slots[i]);
                    model[i] = Coroutine::Finished;
                    occupant = None;
                }
                Op::Replace { slot } => {
                    let i = slot % slot_count;
                    if running == Some(i) {
                        continue;
                    }
                    slots[i] = region.slot();
                    ids[i] = next_id;
                    next_id = next_id.wrapping_add(1);
                    model[i] = Coroutine::NotStarted;
                    if occupant == Some(i) {
                        occupant = None;
                    }
                }
            }
            for (i, slot) in slots.iter().enumerate() {
                prop_assert_eq!(slot.is_occupant(), occupant == Some(i), "slot {}", i);
                let expected_saved = match model[i] {
                    Coroutine::Suspended { depth } if occupant != Some(i) => kept(depth),
                    _ => 0,
                };
                prop_assert_eq!(slot.saved_len(), expected_saved, "slot {} in {:?}", i, model[i]);
            }
        }
    }
}
