//! Forced unwind of dropped coroutines (values whose destructors panic on the way, a coroutine
//! that catches the unwind), and growable stacks at their limit and reused from the pool. (A
//! panicking destructor of a value yielded or returned during the forced unwind must not leave
//! a shared stack's region busy for good.)
#![cfg(all(feature = "stack-shared", feature = "stack-growable"))]

use std::panic::{AssertUnwindSafe, catch_unwind};
#[cfg(unix)]
use std::process::Command;
#[cfg(unix)]
use std::time::Duration;

use spindle_coro::{Coroutine, CoroutineResult, SharedStack, Yielder};
#[cfg(unix)]
use spindle_stack::{GrowableStack, PoolConfig, PoolKind, Stack, StackPool};

#[cfg(unix)]
fn run_child(test: &str) -> (std::process::ExitStatus, String) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            test,
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "--ignored",
        ])
        .env("SPINDLE_CORO_TEST_CHILD", test)
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // watchdog
    let start = std::time::Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > Duration::from_secs(30) {
            child.kill().unwrap();
            panic!("child {test} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[cfg(unix)]
fn is_child(test: &str) -> bool {
    std::env::var("SPINDLE_CORO_TEST_CHILD").as_deref() == Ok(test)
}

struct Bomb(bool);
impl Drop for Bomb {
    fn drop(&mut self) {
        if self.0 {
            panic!("bomb");
        }
    }
}

/// A value yielded during the forced unwind whose `Drop` panics: the panic escapes
/// `Coroutine::drop`, and the region stays usable (it used to stay marked running: every other
/// coroutine on it was refused with `SharedStackBusy` for ever).
#[test]
fn shared_region_usable_after_yielded_value_drop_panics_in_forced_unwind() {
    let region = SharedStack::new(64 * 1024).unwrap();
    // SAFETY: the coroutine lends nothing on its stack to anything that runs while it is
    // suspended.
    let mut a = unsafe {
        Coroutine::with_shared_stack(&region, |y: &Yielder<(), Bomb>, ()| {
            let r = catch_unwind(AssertUnwindSafe(|| y.suspend(Bomb(false))));
            if r.is_err() {
                y.suspend(Bomb(true));
            }
        })
    };
    assert!(matches!(a.resume(()), CoroutineResult::Yield(_)));
    let dropped = catch_unwind(AssertUnwindSafe(move || drop(a)));
    assert!(dropped.is_err(), "the bomb's panic escapes the drop");
    // SAFETY: as above.
    let mut b = unsafe { Coroutine::with_shared_stack(&region, |_: &Yielder<(), ()>, ()| 7u32) };
    match b.try_resume(()) {
        Ok(CoroutineResult::Return(7)) => {}
        Ok(_) => panic!("unexpected"),
        Err(e) => panic!("region unusable after the panic: {e}"),
    }
}

/// Same, with the return value's `Drop` panicking.
#[test]
fn shared_region_usable_after_returned_value_drop_panics_in_forced_unwind() {
    let region = SharedStack::new(64 * 1024).unwrap();
    // SAFETY: the coroutine lends nothing on its stack to anything that runs while it is
    // suspended.
    let mut a = unsafe {
        Coroutine::with_shared_stack(&region, |y: &Yielder<(), ()>, ()| {
            let r = catch_unwind(AssertUnwindSafe(|| y.suspend(())));
            Bomb(r.is_err())
        })
    };
    assert!(matches!(a.resume(()), CoroutineResult::Yield(())));
    let dropped = catch_unwind(AssertUnwindSafe(move || drop(a)));
    assert!(dropped.is_err(), "the bomb's panic escapes the drop");
    // SAFETY: as above.
    let mut b = unsafe { Coroutine::with_shared_stack(&region, |_: &Yielder<(), ()>, ()| 7u32) };
    match b.try_resume(()) {
        Ok(CoroutineResult::Return(7)) => {}
        Ok(_) => panic!("unexpected"),
        Err(e) => panic!("region unusable after the panic: {e}"),
    }
}

/// Documented: a coroutine that catches the forced unwind and suspends again is unwound again.
#[test]
fn catching_forced_unwind_repeatedly_still_finishes() {
    use std::cell::Cell;
    use std::rc::Rc;
    let count = Rc::new(Cell::new(0));
    let c2 = count.clone();
    let mut co = Coroutine::new(move |y: &Yielder<(), u32>, ()| {
        for i in 0..5 {
            let r = catch_unwind(AssertUnwindSafe(|| y.suspend(i)));
            if r.is_err() {
                c2.set(c2.get() + 1);
            }
        }
        99u32
    })
    .unwrap();
    assert_eq!(co.resume(()), CoroutineResult::Yield(0));
    drop(co);
    assert_eq!(count.get(), 5);
}

/// Recurses until a local's address is below `floor` (a stack address), returning the depth.
#[inline(never)]
#[cfg(unix)]
fn recurse_to(floor: usize, depth: usize) -> usize {
    let frame = std::hint::black_box([0u8; 512]);
    let here = frame.as_ptr() as usize;
    if here < floor {
        depth
    } else {
        recurse_to(floor, depth + 1) + (frame[depth % 512] as usize)
    }
}

/// A grown pooled growable stack is shrunk back and grows again correctly on reuse.
#[test]
#[ignore = "child process of growable_pool_reuse (it may abort on a stack overflow)"]
#[cfg(unix)] // growable stacks grow in a SIGSEGV handler: StackError::Unsupported elsewhere
fn child_growable_pool_reuse() {
    if !is_child("child_growable_pool_reuse") {
        return;
    }
    let pool = StackPool::new(PoolConfig {
        stack_size: 1024 * 1024,
        kind: PoolKind::Growable { initial: 16 * 1024 },
        trim_every: 1,
        ..PoolConfig::default()
    })
    .unwrap();
    for round in 0..4 {
        let stack = pool.get().unwrap();
        assert_eq!(stack.committed(), 16 * 1024, "round {round}");
        let top = stack.top();
        let floor = stack.limit().as_ptr() as usize + 16 * 1024;
        let mut co =
            Coroutine::with_stack(stack, move |_: &Yielder<(), ()>, ()| recurse_to(floor, 0));
        assert!(matches!(co.resume(()), CoroutineResult::Return(_)));
        assert!(co.stack().committed() > 900 * 1024);
        drop(co);
        let again = pool.get().unwrap();
        assert_eq!(again.top(), top);
        drop(again);
    }
    eprintln!("CHILD-OK");
}

#[test]
#[cfg(unix)] // growable stacks grow in a SIGSEGV handler: StackError::Unsupported elsewhere
fn growable_pool_reuse() {
    let (status, err) = run_child("child_growable_pool_reuse");
    assert!(
        status.success() && err.contains("CHILD-OK"),
        "{status:?}\n{err}"
    );
}

/// A coroutine can use (almost) all of a growable stack's max.
#[test]
#[ignore = "child process of growable_near_max (it may abort on a stack overflow)"]
#[cfg(unix)] // growable stacks grow in a SIGSEGV handler: StackError::Unsupported elsewhere
fn child_growable_near_max() {
    if !is_child("child_growable_near_max") {
        return;
    }
    let stack = GrowableStack::new(4096, 1024 * 1024).unwrap();
    let floor = stack.limit().as_ptr() as usize + 8 * 1024;
    let mut co = Coroutine::with_stack(stack, move |_: &Yielder<(), ()>, ()| recurse_to(floor, 0));
    assert!(matches!(co.resume(()), CoroutineResult::Return(_)));
    eprintln!("CHILD-OK committed {}", co.stack().committed());
}

#[test]
#[cfg(unix)] // growable stacks grow in a SIGSEGV handler: StackError::Unsupported elsewhere
fn growable_near_max() {
    let (status, err) = run_child("child_growable_near_max");
    assert!(
        status.success() && err.contains("CHILD-OK"),
        "{status:?}\n{err}"
    );
}
