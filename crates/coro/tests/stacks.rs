//! Coroutines on every stack kind: fixed, pooled, growable, shared (copying); overflow of each
//! guarded kind (in child processes), exhaustion, pool reuse.
#![cfg(all(feature = "stack-shared", feature = "stack-growable"))]

#[cfg(unix)]
use std::process::Command;

use spindle_coro::{Coroutine, CoroutineResult, ResumeErrorKind, SharedStack, Yielder};
use spindle_stack::{FixedStack, PoolConfig, Stack, StackError, StackPool};
#[cfg(unix)]
use spindle_stack::{GrowableStack, PoolKind};

mod common;

/// True when the test runs under valgrind (`cargo xtask ci`'s valgrind leg): big sizes shrink.
fn under_valgrind() -> bool {
    std::env::var_os("SPINDLE_UNDER_VALGRIND").is_some()
}

/// The emulator this test process runs under, if any: qemu-user, recognised by the executable
/// of `/proc/thread-self/exe`, which it leaves alone (it makes `/proc/self/exe` name the guest
/// program). Some kernel interfaces differ there: qemu-user keeps `RLIMIT_AS` to itself (it
/// reserves the guest's address space and fails mappings with its own `ENOMEM`), maps guest
/// memory with mappings of its own, answers `mincore` with `ENOMEM` for guest stacks, and
/// refuses `io_uring_setup` (`ENOSYS`).
#[cfg(unix)]
fn emulator() -> Option<String> {
    let exe = std::fs::read_link("/proc/thread-self/exe").ok()?;
    let name = exe.file_name()?.to_string_lossy().into_owned();
    name.starts_with("qemu-").then_some(name)
}

/// Whether the calling test must be skipped because it runs under an emulator that does not
/// give it `needs`; says so on stderr, outside the test harness's capture, so that the line
/// shows even though the test passes.
#[cfg(unix)]
fn skipped_under_emulation(test: &str, needs: &str) -> bool {
    use std::io::Write;
    let Some(emulator) = emulator() else {
        return false;
    };
    let _ = writeln!(
        std::io::stderr(),
        "{test}: skipped under {emulator}, which does not provide {needs}"
    );
    true
}

/// Runs `test` (this file's test of that name) in a child process with `SPINDLE_CHILD=test`,
/// returning its exit status and stderr.
#[cfg(unix)]
fn run_child(test: &str) -> (std::process::ExitStatus, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("SPINDLE_CHILD", test)
        .output()
        .expect("spawn the test binary");
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[cfg(unix)]
fn is_child(test: &str) -> bool {
    std::env::var("SPINDLE_CHILD").as_deref() == Ok(test)
}

#[cfg(unix)]
fn died_of_abort(status: &std::process::ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    status.signal() == Some(libc::SIGABRT)
}

/// Recurses `depth` times with a 1 KiB frame each (never optimised away).
#[inline(never)]
#[cfg(unix)]
fn recurse(depth: usize) -> u64 {
    let mut frame = [0u8; 1024];
    frame[depth % 1024] = depth as u8;
    let frame = std::hint::black_box(frame);
    if depth == 0 {
        frame[0] as u64
    } else {
        recurse(depth - 1) + frame[depth % 1024] as u64
    }
}

#[test]
fn coroutines_run_on_a_fixed_stack() {
    let stack = FixedStack::new(64 * 1024).unwrap();
    let mut co = Coroutine::with_stack(stack, |y: &Yielder<u32, u32>, x: u32| {
        let x = y.suspend(x + 1);
        x * 2
    });
    assert_eq!(co.resume(1), CoroutineResult::Yield(2));
    assert_eq!(co.resume(5), CoroutineResult::Return(10));
}

#[test]
#[cfg(unix)] // growable stacks grow in a SIGSEGV handler: StackError::Unsupported elsewhere
fn deep_recursion_grows_a_growable_stack_from_16_kib() {
    let stack = GrowableStack::new(16 * 1024, 8 * 1024 * 1024).unwrap();
    let start = stack.committed();
    if spindle_stack::running_on_valgrind() {
        // Documented: under valgrind growable stacks are committed in full up front (valgrind
        // cannot restart the faulting instruction of a grow).
        assert_eq!(start, 8 * 1024 * 1024);
    } else {
        assert!(start <= 32 * 1024, "starts small: {start}");
    }
    let mut co = Coroutine::with_stack(stack, |_: &Yielder<(), ()>, ()| recurse(1024)); // ≥ 1 MiB
    assert!(matches!(co.resume(()), CoroutineResult::Return(_)));
    let grown = co.stack().committed();
    assert!(
        grown >= 1024 * 1024,
        "grew to hold 1 MiB of frames: {grown}"
    );
}

#[test]
fn the_global_pool_reuses_stacks_in_steady_state() {
    let pool = StackPool::new(PoolConfig {
        stack_size: 64 * 1024,
        ..PoolConfig::default()
    })
    .unwrap();
    let run_one = |pool: &StackPool| {
        let mut co = Coroutine::with_stack(pool.get().unwrap(), |_: &Yielder<(), ()>, ()| 1);
        assert_eq!(co.resume(()), CoroutineResult::Return(1));
    };
    for _ in 0..10 {
        run_one(&pool);
    }
    let mapped = pool.stats().mapped;
    for _ in 0..10_000 {
        run_one(&pool);
    }
    assert_eq!(
        pool.stats().mapped,
        mapped,
        "no new stack was mapped in steady state"
    );
}

#[test]
#[cfg(unix)] // growable stacks grow in a SIGSEGV handler: StackError::Unsupported elsewhere
fn a_growable_pool_shrinks_a_grown_stack_when_it_is_recycled() {
    let pool = StackPool::new(PoolConfig {
        stack_size: 4 * 1024 * 1024,
        kind: PoolKind::Growable { initial: 16 * 1024 },
        ..PoolConfig::default()
    })
    .unwrap();
    let mut co = Coroutine::with_stack(pool.get().unwrap(), |_: &Yielder<(), ()>, ()| recurse(512));
    co.resume(());
    drop(co);
    let again = pool.get().unwrap();
    // The recycled stack is back to (about) its initial size: nothing below it is usable
    // without growing again, which the next deep call will do.
    let mut co = Coroutine::with_stack(again, |_: &Yielder<(), ()>, ()| recurse(512));
    assert!(matches!(co.resume(()), CoroutineResult::Return(_)));
}

#[test]
fn many_coroutines_on_shared_stacks_suspended_at_different_depths_keep_their_data() {
    // Under TSan (`cfg(spindle_tsan)`, the `tsan` leg) every coroutine that has run holds a
    // TSan fiber (a thread's worth of TSan state); 100,000 of them do not fit in memory.
    let count = if under_valgrind() || cfg!(spindle_tsan) {
        2_000
    } else {
        100_000
    };
    let regions: Vec<SharedStack> = (0..4)
        .map(|_| SharedStack::new(256 * 1024).unwrap())
        .collect();
    let mut coroutines = Vec::with_capacity(count);
    for i in 0..count {
        let region = &regions[i % regions.len()];
        // SAFETY: the coroutines lend nothing on their stacks to anyone.
        let co = unsafe {
            Coroutine::with_shared_stack(region, move |y: &Yielder<u64, u64>, seed: u64| {
                // Suspend at a depth that depends on i, with data on every frame.
                fn dive(y: &Yielder<u64, u64>, seed: u64, depth: u32) -> u64 {
                    let mut frame = [0u64; 8];
                    for (j, v) in frame.iter_mut().enumerate() {
                        *v = seed.wrapping_mul(j as u64 + 1) ^ depth as u64;
                    }
                    let frame = std::hint::black_box(frame);
                    let below = if depth == 0 {
                        y.suspend(seed)
                    } else {
                        dive(y, seed, depth - 1)
                    };
                    // Check this frame's data after the resume.
                    for (j, v) in frame.iter().enumerate() {
                        assert_eq!(*v, seed.wrapping_mul(j as u64 + 1) ^ depth as u64);
                    }
                    below + 1
                }
                dive(y, seed, (i % 17) as u32)
            })
        };
        coroutines.push(co);
    }
    for (i, co) in coroutines.iter_mut().enumerate() {
        assert_eq!(
            co.resume(i as u64 * 7919),
            CoroutineResult::Yield(i as u64 * 7919)
        );
    }
    // Resume in another order; every coroutine checks its frames and returns its depth.
    for (i, co) in coroutines.iter_mut().enumerate().rev() {
        let expected = 1 + (i % 17) as u64;
        assert_eq!(co.resume(0), CoroutineResult::Return(expected));
    }
}

#[test]
fn a_shared_coroutine_gets_its_closure_and_first_input_and_drops_an_unstarted_closure() {
    use std::rc::Rc;
    let region = SharedStack::new(64 * 1024).unwrap();
    // A capture bigger than any closure slot, and one whose drop is counted.
    let big = [7u8; 4096];
    let token = Rc::new(());
    let held = Rc::clone(&token);
    // SAFETY: lends nothing.
    let mut co = unsafe {
        Coroutine::with_shared_stack(&region, move |y: &Yielder<u32, usize>, first: u32| {
            let _held = held;
            let next = y.suspend(big.iter().map(|&b| usize::from(b)).sum::<usize>());
            first + next
        })
    };
    // SAFETY: lends nothing.
    let mut unit = unsafe { Coroutine::with_shared_stack(&region, |_: &Yielder<(), ()>, ()| 3u8) };
    let never_started_token = Rc::clone(&token);
    // SAFETY: lends nothing.
    let never_started = unsafe {
        Coroutine::with_shared_stack(&region, move |_: &Yielder<(), ()>, ()| {
            drop(never_started_token)
        })
    };
    assert_eq!(Rc::strong_count(&token), 3);
    drop(never_started);
    assert_eq!(
        Rc::strong_count(&token),
        2,
        "the unstarted closure was dropped"
    );
    assert_eq!(co.resume(40), CoroutineResult::Yield(7 * 4096));
    // A zero-sized first input, while `co` is evicted.
    assert_eq!(unit.resume(()), CoroutineResult::Return(3));
    assert_eq!(co.resume(2), CoroutineResult::Return(42));
    assert_eq!(
        Rc::strong_count(&token),
        1,
        "the closure's captures were dropped"
    );
}

#[test]
fn a_coroutine_cannot_resume_another_on_its_own_shared_region() {
    let region = SharedStack::new(128 * 1024).unwrap();
    // SAFETY: lends nothing.
    let inner = unsafe { Coroutine::with_shared_stack(&region, |_: &Yielder<(), ()>, ()| 1u8) };
    let cell = std::rc::Rc::new(std::cell::RefCell::new(Some(inner)));
    let cell2 = cell.clone();
    // SAFETY: lends nothing.
    let mut outer = unsafe {
        Coroutine::with_shared_stack(&region, move |_: &Yielder<(), ()>, ()| {
            let mut inner = cell2.borrow_mut().take().unwrap();
            let refused = inner.try_resume(()).unwrap_err();
            matches!(
                refused.kind,
                ResumeErrorKind::Stack(StackError::SharedStackBusy)
            )
        })
    };
    assert_eq!(outer.resume(()), CoroutineResult::Return(true));
    // From outside the region it works.
    let other = SharedStack::new(128 * 1024).unwrap();
    // SAFETY: lends nothing.
    let mut fine = unsafe { Coroutine::with_shared_stack(&other, |_: &Yielder<(), ()>, ()| 2u8) };
    assert_eq!(fine.resume(()), CoroutineResult::Return(2));
    drop(cell);
}

#[test]
fn dropping_suspended_shared_stack_coroutines_unwinds_them_even_when_evicted() {
    use std::cell::Cell;
    use std::rc::Rc;
    let region = SharedStack::new(128 * 1024).unwrap();
    let drops = Rc::new(Cell::new(0));
    struct Flag(Rc<Cell<u32>>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.set(self.0.get() + 1);
        }
    }
    let mut all = Vec::new();
    for _ in 0..10 {
        let d = drops.clone();
        // SAFETY: lends nothing.
        let mut co = unsafe {
            Coroutine::with_shared_stack(&region, move |y: &Yielder<(), ()>, ()| {
                let _f = Flag(d);
                y.suspend(());
            })
        };
        co.resume(());
        all.push(co);
    }
    // Nine of them are evicted (their bytes in their buffers); dropping restores each to unwind.
    drop(all);
    assert_eq!(drops.get(), 10);
}

/// A coroutine on a shared stack, evicted and restored, switches back to whoever resumes it now,
/// and a backtrace taken inside it crosses into that resumer. (The region does not keep its top
/// words, the context's link and entry words, across an eviction: the resume writes the link
/// again, and the other coroutine left its own there meanwhile.)
#[test]
fn a_restored_shared_coroutine_returns_to_its_new_resumer_and_its_backtrace_reaches_it() {
    #[inline(never)]
    fn captured_inside() -> String {
        std::hint::black_box(std::backtrace::Backtrace::force_capture().to_string())
    }
    #[inline(never)]
    fn second_resumer(co: &mut Coroutine<(), (), String, spindle_stack::SharedSlot>) -> String {
        co.resume(()).into_return().unwrap()
    }
    let region = SharedStack::new(128 * 1024).unwrap();
    // SAFETY: lends nothing.
    let mut a = unsafe {
        Coroutine::with_shared_stack(&region, |y: &Yielder<(), ()>, ()| {
            y.suspend(());
            captured_inside()
        })
    };
    // SAFETY: lends nothing.
    let mut b = unsafe {
        Coroutine::with_shared_stack(&region, |y: &Yielder<(), ()>, ()| {
            // Deeper than `a`, so that its frames cover every byte `a` keeps.
            let deep = std::hint::black_box([7u8; 2048]);
            y.suspend(());
            deep.iter().map(|&b| u64::from(b)).sum::<u64>()
        })
    };
    assert_eq!(a.resume(()), CoroutineResult::Yield(()));
    assert_eq!(b.resume(()), CoroutineResult::Yield(())); // evicts `a`
    assert!(b.stack().is_occupant() && !a.stack().is_occupant());
    let trace = second_resumer(&mut a); // evicts `b`, restores `a`
    assert_eq!(b.resume(()), CoroutineResult::Return(7 * 2048));
    let position = |name: &str| common::frame_position(&trace, name);
    let inside = position("captured_inside").unwrap_or_else(|| panic!("{trace}"));
    if !common::backtraces_cross_into_the_resumer() {
        return;
    }
    let resumer = position("second_resumer").unwrap_or_else(|| panic!("{trace}"));
    assert!(inside < resumer, "{trace}");
}

#[test]
#[cfg(unix)] // RLIMIT_AS
fn the_exhaustion_path_returns_an_error_not_a_crash() {
    const NAME: &str = "the_exhaustion_path_returns_an_error_not_a_crash";
    if skipped_under_emulation(
        NAME,
        "an RLIMIT_AS enforced by the kernel (it keeps the limit to itself and fails its own \
         mappings with ENOMEM)",
    ) {
        return;
    }
    if is_child(NAME) {
        // 256 MiB of address space: the pool runs out of it long before memory.
        let limit = libc::rlimit {
            rlim_cur: 256 << 20,
            rlim_max: 256 << 20,
        };
        // SAFETY: plain syscall on a valid struct.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) }, 0);
        let mut held = Vec::new();
        let err = loop {
            match Coroutine::new(|y: &Yielder<(), ()>, ()| y.suspend(())) {
                Ok(mut co) => {
                    co.resume(());
                    held.push(co);
                }
                Err(e) => break e,
            }
            assert!(held.len() < 100_000, "never ran out");
        };
        // The coroutines we have keep working.
        for co in &mut held {
            assert_eq!(co.resume(()), CoroutineResult::Return(()));
        }
        eprintln!("CHILD-ERROR: {err}");
        std::process::exit(0);
    }
    if under_valgrind() {
        return; // the child runs natively anyway; nothing to check under valgrind
    }
    let (status, stderr) = run_child(NAME);
    assert!(status.success(), "child failed: {status}\n{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("CHILD-ERROR: "))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        line.contains("RLIMIT_AS") || line.contains("address space"),
        "{line}"
    );
}

/// One child-process overflow test per guarded kind: the message names the coroutine, then the
/// process aborts.
macro_rules! overflow_test {
    ($name:ident, $make:expr, $kind_word:expr) => {
        #[test]
        #[cfg(unix)]
        fn $name() {
            const NAME: &str = stringify!($name);
            if is_child(NAME) {
                let mut co = spindle_coro::Builder::new()
                    .name("overflowing-coroutine")
                    .build_with_stack($make, |_: &Yielder<(), ()>, ()| {
                        recurse(usize::MAX / 2);
                    });
                co.resume(());
                unreachable!("the overflow must abort");
            }
            if under_valgrind() {
                return;
            }
            let (status, stderr) = run_child(NAME);
            assert!(died_of_abort(&status), "status {status}, stderr:\n{stderr}");
            let line = stderr
                .lines()
                .find(|l| l.contains("overflowed"))
                .unwrap_or_else(|| panic!("no overflow line in:\n{stderr}"));
            assert!(line.contains("'overflowing-coroutine'"), "{line}");
            assert!(line.contains($kind_word), "{line}");
        }
    };
}

overflow_test!(
    overflow_of_a_fixed_stack_aborts_with_a_message,
    FixedStack::new(64 * 1024).unwrap(),
    "fixed"
);
overflow_test!(
    overflow_of_a_pooled_stack_aborts_with_a_message,
    StackPool::global().get().unwrap(),
    "KiB"
);
overflow_test!(
    overflow_of_a_growable_stack_aborts_with_a_message,
    GrowableStack::new(16 * 1024, 1024 * 1024).unwrap(),
    "growable"
);

#[test]
#[cfg(unix)]
fn overflow_of_a_shared_stack_aborts_with_a_message() {
    const NAME: &str = "overflow_of_a_shared_stack_aborts_with_a_message";
    if is_child(NAME) {
        let region = SharedStack::new(64 * 1024).unwrap();
        // SAFETY: lends nothing.
        let mut co = unsafe {
            spindle_coro::Builder::new()
                .name("shared-overflower")
                .build_shared(&region, |_: &Yielder<(), ()>, ()| {
                    recurse(usize::MAX / 2);
                })
        };
        co.resume(());
        unreachable!();
    }
    if under_valgrind() {
        return;
    }
    let (status, stderr) = run_child(NAME);
    assert!(died_of_abort(&status), "status {status}, stderr:\n{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains("overflowed"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(line.contains("'shared-overflower'"), "{line}");
}

#[test]
#[cfg(unix)]
fn a_panic_in_a_destructor_during_a_forced_unwind_aborts() {
    const NAME: &str = "a_panic_in_a_destructor_during_a_forced_unwind_aborts";
    if is_child(NAME) {
        struct PanicsOnDrop;
        impl Drop for PanicsOnDrop {
            fn drop(&mut self) {
                panic!("destructor panicked during the unwind");
            }
        }
        let mut co = Coroutine::new(|y: &Yielder<(), ()>, ()| {
            let _p = PanicsOnDrop;
            y.suspend(());
        })
        .unwrap();
        co.resume(());
        drop(co); // the forced unwind runs PanicsOnDrop::drop, which panics: abort
        unreachable!();
    }
    if under_valgrind() {
        return;
    }
    let (status, stderr) = run_child(NAME);
    assert!(died_of_abort(&status), "status {status}, stderr:\n{stderr}");
    assert!(
        stderr.contains("destructor panicked during the unwind"),
        "{stderr}"
    );
}

#[test]
fn stacks_report_their_geometry() {
    let fixed = FixedStack::new(100 * 1024).unwrap();
    assert!(fixed.usable_size() >= 100 * 1024);
    assert!(fixed.guard_size() > 0);
    assert_eq!(fixed.top().as_ptr() as usize % 16, 0);
}
