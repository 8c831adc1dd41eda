//! Behaviour of coroutines on the default (pooled) stack: values, panics, drops, nesting,
//! backtraces, floating point. `cargo xtask ci` runs this file on both context backends.

use std::cell::{Cell, RefCell};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;

use spindle_coro::{Coroutine, CoroutineResult, Generator, ResumeErrorKind, Yielder};

mod common;

/// Sets a flag when dropped: a destructor we can watch.
struct DropFlag(Rc<Cell<u32>>);
impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}

#[test]
fn values_flow_both_ways_across_many_interleaved_coroutines() {
    // 64 coroutines, each keeping a running state that depends on every input it gets; the
    // test resumes them in a scrambled order and checks every yield against a model.
    const N: u64 = 64;
    const ROUNDS: u64 = 200;
    let mut coroutines: Vec<Coroutine<u64, (u64, u64), u64>> = (0..N)
        .map(|k| {
            Coroutine::new(move |yielder: &Yielder<u64, (u64, u64)>, mut input: u64| {
                let mut state = k;
                for _ in 0..ROUNDS {
                    state = state.wrapping_mul(31).wrapping_add(input);
                    input = yielder.suspend((k, state));
                }
                state
            })
            .unwrap()
        })
        .collect();
    let mut model: Vec<u64> = (0..N).collect();
    for round in 0..ROUNDS {
        for i in 0..N {
            let k = (i * 37 + round * 11) % N; // every coroutine once per round, scrambled
            let input = round * 1000 + k;
            model[k as usize] = model[k as usize].wrapping_mul(31).wrapping_add(input);
            let got = coroutines[k as usize].resume(input);
            assert_eq!(got, CoroutineResult::Yield((k, model[k as usize])));
        }
    }
    for (k, co) in coroutines.iter_mut().enumerate() {
        assert_eq!(co.resume(0), CoroutineResult::Return(model[k]));
        assert!(co.is_finished());
    }
}

#[test]
fn floats_survive_switches_and_formatting_works_on_the_coroutine_stack() {
    let mut co = Coroutine::new(|yielder: &Yielder<f64, String>, mut x: f64| {
        let kept = 1.0f64 / 3.0;
        loop {
            let text = format!("{:.3}", x * kept);
            let parsed: f64 = text.parse().unwrap();
            assert_eq!(format!("{parsed:.3}"), text);
            x = yielder.suspend(text);
        }
    })
    .unwrap();
    let local = 2.0f64.sqrt();
    for i in 1..100 {
        let x = i as f64 * 0.75;
        let got = co.resume(x).into_yield().unwrap();
        assert_eq!(got, format!("{:.3}", x * (1.0 / 3.0)));
        assert_eq!(
            local * local,
            2.0000000000000004,
            "a float live across the switch"
        );
    }
}

#[test]
fn a_panic_inside_is_re_raised_in_the_resumer_and_finishes_the_coroutine() {
    let mut co = Coroutine::new(|yielder: &Yielder<(), u32>, ()| {
        yielder.suspend(1);
        panic!("boom from inside");
    })
    .unwrap();
    assert!(!co.is_started());
    assert_eq!(co.resume(()), CoroutineResult::Yield(1));
    assert!(co.is_started() && !co.is_finished());
    let err = catch_unwind(AssertUnwindSafe(|| co.resume(()))).unwrap_err();
    assert_eq!(err.downcast_ref::<&str>(), Some(&"boom from inside"));
    assert!(co.is_finished());
    let refused = co.try_resume(()).unwrap_err();
    assert!(matches!(refused.kind, ResumeErrorKind::Finished));
    // `resume` on a finished coroutine panics with a message that says what to do.
    let err = catch_unwind(AssertUnwindSafe(|| co.resume(()))).unwrap_err();
    let msg = err.downcast_ref::<String>().unwrap();
    assert!(msg.contains("finished"), "{msg}");
}

#[test]
fn a_panic_payload_of_any_type_crosses_back() {
    #[derive(Debug, PartialEq)]
    struct Custom(u32);
    let mut co = Coroutine::new(|_: &Yielder<(), ()>, ()| {
        std::panic::panic_any(Custom(7));
    })
    .unwrap();
    let err = catch_unwind(AssertUnwindSafe(|| co.resume(()))).unwrap_err();
    assert_eq!(err.downcast_ref::<Custom>(), Some(&Custom(7)));
}

#[test]
fn dropping_before_the_first_resume_drops_the_closure_only() {
    let drops = Rc::new(Cell::new(0));
    let flag = DropFlag(drops.clone());
    let ran = Rc::new(Cell::new(false));
    let ran2 = ran.clone();
    let co = Coroutine::new(move |_: &Yielder<(), ()>, ()| {
        let _keep = &flag;
        ran2.set(true);
    })
    .unwrap();
    assert_eq!(drops.get(), 0);
    drop(co);
    assert_eq!(drops.get(), 1, "the captured value was dropped");
    assert!(!ran.get(), "the closure never ran");
}

#[test]
fn dropping_mid_way_unwinds_every_frame_on_the_coroutine_stack() {
    let drops = Rc::new(Cell::new(0));
    let after_suspend = Rc::new(Cell::new(false));
    let (d, a) = (drops.clone(), after_suspend.clone());
    let mut co = Coroutine::new(move |yielder: &Yielder<(), u32>, ()| {
        let _outer = DropFlag(d.clone());
        fn nested(yielder: &Yielder<(), u32>, d: &Rc<Cell<u32>>, depth: u32) {
            let _frame = DropFlag(d.clone());
            if depth == 0 {
                yielder.suspend(42);
            } else {
                nested(yielder, d, depth - 1);
            }
        }
        nested(yielder, &d, 9); // 10 frames, each with a destructor, then suspend
        a.set(true);
    })
    .unwrap();
    assert_eq!(co.resume(()), CoroutineResult::Yield(42));
    assert_eq!(drops.get(), 0);
    drop(co);
    assert_eq!(
        drops.get(),
        11,
        "the outer value and all 10 frames were dropped"
    );
    assert!(!after_suspend.get(), "the code after the suspend never ran");
}

#[test]
fn dropping_after_finishing_drops_nothing_twice() {
    let drops = Rc::new(Cell::new(0));
    let d = drops.clone();
    let mut co = Coroutine::new(move |_: &Yielder<(), ()>, ()| {
        let _x = DropFlag(d);
        5u8
    })
    .unwrap();
    assert_eq!(co.resume(()), CoroutineResult::Return(5));
    assert_eq!(drops.get(), 1);
    drop(co);
    assert_eq!(drops.get(), 1);
}

#[test]
fn a_coroutine_that_catches_its_forced_unwind_cannot_suspend_again() {
    let drops = Rc::new(Cell::new(0));
    let caught = Rc::new(Cell::new(0));
    let (d, c) = (drops.clone(), caught.clone());
    let mut co = Coroutine::new(move |yielder: &Yielder<(), u32>, ()| {
        let _outer = DropFlag(d.clone());
        let r = catch_unwind(AssertUnwindSafe(|| {
            let _inner = DropFlag(d.clone());
            yielder.suspend(1);
        }));
        if r.is_err() {
            c.set(c.get() + 1);
            // Tries to keep living: this suspend must unwind at once instead of switching.
            yielder.suspend(2);
            unreachable!("a suspend after a forced unwind never returns");
        }
    })
    .unwrap();
    assert_eq!(co.resume(()), CoroutineResult::Yield(1));
    drop(co);
    assert_eq!(
        caught.get(),
        1,
        "the coroutine caught the unwind once, then it escaped"
    );
    assert_eq!(
        drops.get(),
        2,
        "the inner value and the outer one were dropped"
    );
}

#[test]
fn mem_forget_on_a_suspended_coroutine_only_leaks() {
    let drops = Rc::new(Cell::new(0));
    let d = drops.clone();
    let mut co = Coroutine::new(move |yielder: &Yielder<(), ()>, ()| {
        let _x = DropFlag(d);
        yielder.suspend(());
    })
    .unwrap();
    co.resume(());
    std::mem::forget(co);
    assert_eq!(drops.get(), 0, "nothing on the leaked stack was dropped");
    assert_eq!(
        Rc::strong_count(&drops),
        2,
        "the leaked frame still holds its Rc"
    );
}

#[test]
fn nested_coroutines_resume_each_other() {
    // Each level resumes a child coroutine and adds its own depth to the child's yields.
    fn level(depth: u32) -> Coroutine<(), u32, ()> {
        Coroutine::new(move |yielder: &Yielder<(), u32>, ()| {
            if depth == 0 {
                for i in 0..3 {
                    yielder.suspend(i);
                }
            } else {
                let mut child = level(depth - 1);
                while let CoroutineResult::Yield(v) = child.resume(()) {
                    yielder.suspend(v + depth);
                }
            }
        })
        .unwrap()
    }
    let depth = 50;
    let mut top = level(depth);
    let offset: u32 = (1..=depth).sum();
    for i in 0..3 {
        assert_eq!(top.resume(()), CoroutineResult::Yield(i + offset));
    }
    assert_eq!(top.resume(()), CoroutineResult::Return(()));
}

#[test]
fn dropping_a_nested_chain_unwinds_every_level() {
    let drops = Rc::new(Cell::new(0));
    fn level(depth: u32, drops: Rc<Cell<u32>>) -> Coroutine<(), (), ()> {
        Coroutine::new(move |yielder: &Yielder<(), ()>, ()| {
            let _flag = DropFlag(drops.clone());
            if depth == 0 {
                yielder.suspend(());
            } else {
                let mut child = level(depth - 1, drops);
                child.resume(());
                yielder.suspend(());
            }
        })
        .unwrap()
    }
    let mut top = level(20, drops.clone());
    top.resume(());
    drop(top);
    assert_eq!(drops.get(), 21);
}

#[test]
fn a_backtrace_inside_a_coroutine_reaches_the_resumer() {
    #[inline(never)]
    fn captured_deep_inside() -> String {
        std::hint::black_box(std::backtrace::Backtrace::force_capture().to_string())
    }
    #[inline(never)]
    fn resumer_side_function() -> String {
        let mut co = Coroutine::new(|_: &Yielder<(), ()>, ()| captured_deep_inside()).unwrap();
        co.resume(()).into_return().unwrap()
    }
    let trace = resumer_side_function();
    let position = |name: &str| common::frame_position(&trace, name);
    let inside = position("captured_deep_inside").unwrap_or_else(|| panic!("{trace}"));
    if !common::backtraces_cross_into_the_resumer() {
        return;
    }
    let resumer = position("resumer_side_function").unwrap_or_else(|| panic!("{trace}"));
    let test = position("a_backtrace_inside_a_coroutine_reaches_the_resumer")
        .unwrap_or_else(|| panic!("{trace}"));
    assert!(inside < resumer && resumer < test, "{trace}");
}

/// The rounding-mode field of the floating-point control register: MXCSR bits 13–14 on x86_64,
/// FPCR's RMode bits 22–23 on aarch64; "toward zero" is 0b11 in both.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod fp_control {
    use std::arch::asm;
    #[cfg(target_arch = "x86_64")]
    pub const ROUNDING: usize = 0b11 << 13;
    #[cfg(target_arch = "aarch64")]
    pub const ROUNDING: usize = 0b11 << 22;
    pub const TOWARD_ZERO: usize = ROUNDING;
    #[cfg(target_arch = "x86_64")]
    pub fn get() -> usize {
        let mut v = 0u32;
        // SAFETY: stores MXCSR into `v`.
        unsafe { asm!("stmxcsr [{}]", in(reg) &mut v as *mut u32, options(nostack)) };
        v as usize
    }
    #[cfg(target_arch = "x86_64")]
    pub fn set(v: usize) {
        let v = v as u32;
        // SAFETY: a value read from MXCSR with only the rounding bits changed.
        unsafe { asm!("ldmxcsr [{}]", in(reg) &v as *const u32, options(nostack)) };
    }
    #[cfg(target_arch = "aarch64")]
    pub fn get() -> usize {
        let v: usize;
        // SAFETY: reads FPCR, which EL0 may read.
        unsafe { asm!("mrs {}, fpcr", out(reg) v, options(nomem, nostack)) };
        v
    }
    #[cfg(target_arch = "aarch64")]
    pub fn set(v: usize) {
        // SAFETY: a value read from FPCR with only the rounding bits changed.
        unsafe { asm!("msr fpcr, {}", in(reg) v, options(nomem, nostack)) };
    }
}

#[test]
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn the_rounding_mode_follows_the_documented_floating_point_semantics() {
    use fp_control::{ROUNDING, TOWARD_ZERO, get as mxcsr, set as set_mxcsr};
    let original = mxcsr();
    let mut co = Coroutine::new(|yielder: &Yielder<(), usize>, ()| {
        set_mxcsr(mxcsr() | TOWARD_ZERO);
        loop {
            yielder.suspend(mxcsr() & ROUNDING);
        }
    })
    .unwrap();
    let inside = co.resume(()).into_yield().unwrap();
    let outside = mxcsr() & ROUNDING;
    set_mxcsr(original);
    let inside_again = co.resume(()).into_yield().unwrap();
    set_mxcsr(original);
    assert_eq!(inside, TOWARD_ZERO);
    if spindle_context::SAVES_FP_ENV {
        assert_eq!(
            outside, 0,
            "per coroutine: the resumer keeps round-to-nearest"
        );
        assert_eq!(
            inside_again, TOWARD_ZERO,
            "and the coroutine keeps its own mode"
        );
    } else {
        assert_eq!(
            outside, TOWARD_ZERO,
            "shared by the thread: the change leaks out"
        );
        assert_eq!(inside_again, 0, "and the coroutine sees the thread's mode");
    }
}

#[test]
fn a_generator_iterates_its_yields_and_unwinds_when_dropped_early() {
    let squares: Vec<u32> = Generator::new(|y| {
        for i in 1..=5 {
            y.suspend(i * i);
        }
    })
    .unwrap()
    .collect();
    assert_eq!(squares, [1, 4, 9, 16, 25]);

    let drops = Rc::new(Cell::new(0));
    let d = drops.clone();
    let mut endless = Generator::new(move |y| {
        let _x = DropFlag(d);
        let mut i = 0u64;
        loop {
            y.suspend(i);
            i += 1;
        }
    })
    .unwrap();
    assert_eq!(endless.nth(3), Some(3));
    drop(endless);
    assert_eq!(drops.get(), 1);
}

#[test]
fn coroutine_ids_are_unique() {
    let a = Coroutine::new(|_: &Yielder<(), ()>, ()| {}).unwrap();
    let b = Coroutine::new(|_: &Yielder<(), ()>, ()| {}).unwrap();
    let c = std::thread::spawn(|| Coroutine::new(|_: &Yielder<(), ()>, ()| {}).unwrap().id())
        .join()
        .unwrap();
    assert_ne!(a.id(), b.id());
    assert_ne!(a.id(), c);
    assert_ne!(b.id(), c);
}

#[test]
fn thread_bound_values_work_inside_a_coroutine_on_its_thread() {
    thread_local! {
        static LOG: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
    }
    let mut co = Coroutine::new(|yielder: &Yielder<(), ()>, ()| {
        for i in 0..3 {
            LOG.with(|l| l.borrow_mut().push(i));
            yielder.suspend(());
        }
    })
    .unwrap();
    while !co.is_finished() {
        co.resume(());
    }
    assert_eq!(LOG.with(|l| l.borrow().clone()), [0, 1, 2]);
}

#[test]
fn a_large_closure_is_boxed_and_still_works() {
    let big = [7u8; 4096];
    let mut co =
        Coroutine::new(move |_: &Yielder<(), ()>, ()| big.iter().map(|&b| b as u32).sum::<u32>())
            .unwrap();
    assert_eq!(co.resume(()), CoroutineResult::Return(7 * 4096));
}

#[test]
fn closures_with_strict_alignment_are_placed_correctly() {
    #[repr(align(64))]
    #[derive(Clone, Copy)]
    struct Aligned([u8; 64]);
    let value = Aligned([3; 64]);
    let mut co = Coroutine::new(move |_: &Yielder<(), ()>, ()| {
        let v = value;
        (
            std::ptr::addr_of!(v) as usize % 64,
            v.0.iter().map(|&b| b as u32).sum::<u32>(),
        )
    })
    .unwrap();
    assert_eq!(co.resume(()), CoroutineResult::Return((0, 3 * 64)));
}
