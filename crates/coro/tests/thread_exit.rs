//! A coroutine dropped (or resumed) from a thread-local destructor must still be able to grow
//! its growable stack (without an alternate signal stack the process would die of SIGSEGV).
//!
//! When a `std::thread` finishes, std frees (and disables) the thread's alternate signal stack
//! *before* thread-local destructors run. `spindle_stack::prepare_thread` caches "this thread
//! is prepared" in a thread-local flag that stays true, so nothing re-creates an alternate
//! stack, and the fault handler that grows growable stacks (and prints overflow messages) then
//! has no stack to run on: the kernel kills the process. A coroutine kept in a `thread_local!`
//! (a per-thread parser/generator) is dropped exactly there, and dropping it unwinds it: every
//! destructor on its stack runs, needing stack. Expected: the drop completes (the thread gets
//! an alternate stack again when it needs one), as it does when the same coroutine is dropped
//! before the thread ends (control test).
#![cfg(all(unix, feature = "stack-growable"))]

use std::cell::RefCell;
use std::process::Command;

use spindle_coro::{Coroutine, CoroutineResult, Yielder};
use spindle_stack::GrowableStack;

#[inline(never)]
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

/// Cleanup that needs 256 KiB of stack (deep, but far below the 4 MiB maximum).
struct DeepCleanup;
impl Drop for DeepCleanup {
    fn drop(&mut self) {
        std::hint::black_box(recurse(256));
    }
}

type Co = Coroutine<(), (), (), GrowableStack>;

thread_local! {
    static PER_THREAD: RefCell<Option<Co>> = const { RefCell::new(None) };
}

fn make() -> Co {
    let stack = GrowableStack::new(16 * 1024, 4 * 1024 * 1024).unwrap();
    let mut co = Coroutine::with_stack(stack, |y: &Yielder<(), ()>, ()| {
        let _cleanup = DeepCleanup;
        loop {
            y.suspend(());
        }
    });
    assert_eq!(co.resume(()), CoroutineResult::Yield(()));
    co
}

#[test]
#[ignore = "child process of a_coroutine_in_a_thread_local_can_be_dropped_at_thread_exit"]
fn child_thread_exit() {
    if std::env::var("SPINDLE_TEST_CHILD").as_deref() != Ok("child_thread_exit") {
        return;
    }
    let early = std::env::var_os("SPINDLE_TEST_EARLY").is_some();
    std::thread::spawn(move || {
        let co = make();
        if early {
            drop(co); // control: dropped while the thread runs
        } else {
            PER_THREAD.with(|slot| *slot.borrow_mut() = Some(co)); // dropped at thread exit
        }
    })
    .join()
    .unwrap();
    eprintln!("CHILD-OK");
}

fn run(early: bool) -> (std::process::ExitStatus, String) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    if early {
        command.env("SPINDLE_TEST_EARLY", "1");
    }
    let out = command
        .args(["child_thread_exit", "--exact", "--nocapture", "--ignored"])
        .env("SPINDLE_TEST_CHILD", "child_thread_exit")
        .output()
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_coroutine_in_a_thread_local_can_be_dropped_at_thread_exit() {
    let (status, err) = run(false);
    assert!(
        status.success() && err.contains("CHILD-OK"),
        "dropping the coroutine from a thread-local destructor killed the process: {status:?}\n{err}"
    );
}

/// Control (passes): the same coroutine dropped before the thread ends.
#[test]
fn control_dropped_while_the_thread_runs() {
    let (status, err) = run(true);
    assert!(
        status.success() && err.contains("CHILD-OK"),
        "{status:?}\n{err}"
    );
}
