//! Resuming a coroutine prepares the resuming thread (`prepare_thread`): without an alternate
//! signal stack a growable stack could not grow (the process would die of SIGSEGV) and a guarded
//! stack's overflow would die without the promised message.
//!
//! `spindle-stack`'s docs say "The coroutine crate calls it [`prepare_thread`] on every thread
//! that resumes coroutines", but `spindle-coro` calls it only when a coroutine is *built*
//! (`Builder::build*`). A coroutine moved with `SendCoroutine` (whose documented contract this
//! test keeps: nothing thread-bound on the stack) to a thread that has no alternate signal
//! stack (any thread not started by Rust's std: a C library's callback thread, a raw pthread)
//! runs its fault handler on the faulting stack itself, which has no room: the kernel kills
//! the process. Expected: `try_resume` makes sure the thread is prepared (one thread-local
//! check on the fast path), so the stack grows / the overflow is reported.
#![cfg(all(unix, feature = "stack-growable"))]

use std::process::Command;

use spindle_coro::{Coroutine, CoroutineResult, SendCoroutine, Yielder};
use spindle_stack::GrowableStack;

fn run_child(test: &str) -> (std::process::ExitStatus, String) {
    run_child_with(test, false)
}

fn run_child_with(test: &str, prepare: bool) -> (std::process::ExitStatus, String) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    if prepare {
        command.env("SPINDLE_TEST_PREPARE", "1");
    }
    let out = command
        .args([
            test,
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "--ignored",
        ])
        .env("SPINDLE_TEST_CHILD", test)
        .output()
        .expect("spawn the test binary");
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn is_child(test: &str) -> bool {
    std::env::var("SPINDLE_TEST_CHILD").as_deref() == Ok(test)
}

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

type Co = SendCoroutine<(), (), u64, GrowableStack>;

extern "C" fn raw_thread_main(arg: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: `arg` is the `Box<Co>` leaked by the spawner.
    let co = unsafe { Box::from_raw(arg.cast::<Co>()) };
    let mut co = co.into_inner();
    if std::env::var_os("SPINDLE_TEST_PREPARE").is_some() {
        // Control: with the thread prepared by hand, the same program works.
        spindle_stack::prepare_thread().unwrap();
    }
    // 256 KiB of frames on a stack that starts with 16 KiB committed: it must grow.
    let result = co.resume(());
    assert!(matches!(result, CoroutineResult::Return(_)));
    eprintln!("CHILD-OK committed {}", co.stack().committed());
    std::ptr::null_mut()
}

#[test]
#[ignore = "child process of a_growable_stack_grows_on_a_thread_that_only_resumes"]
fn child_growable_on_raw_thread() {
    if !is_child("child_growable_on_raw_thread") {
        return;
    }
    let stack = GrowableStack::new(16 * 1024, 4 * 1024 * 1024).unwrap();
    let co = Coroutine::with_stack(stack, |_: &Yielder<(), ()>, ()| recurse(256));
    // SAFETY: nothing on the coroutine's stack is thread-bound (it has not even started).
    let co: Co = unsafe { SendCoroutine::new(co) };
    let arg = Box::into_raw(Box::new(co)).cast::<libc::c_void>();
    // A thread not started by std (so it has no alternate signal stack), as C code makes them.
    // SAFETY: pthread_t is plain data.
    let mut thread: libc::pthread_t = unsafe { std::mem::zeroed() };
    // SAFETY: `raw_thread_main` has the pthread signature and takes ownership of `arg`.
    let rc = unsafe { libc::pthread_create(&mut thread, std::ptr::null(), raw_thread_main, arg) };
    assert_eq!(rc, 0);
    // SAFETY: joining the thread we created, once.
    let rc = unsafe { libc::pthread_join(thread, std::ptr::null_mut()) };
    assert_eq!(rc, 0);
}

#[test]
fn a_growable_stack_grows_on_a_thread_that_only_resumes() {
    let (status, err) = run_child("child_growable_on_raw_thread");
    assert!(
        status.success() && err.contains("CHILD-OK"),
        "the coroutine could not grow its stack on the resuming thread: {status:?}\n{err}"
    );
}

/// Control (passes): the same child with `prepare_thread()` called by hand on the raw thread.
#[test]
fn control_the_same_program_works_when_the_thread_is_prepared_by_hand() {
    let (status, err) = run_child_with("child_growable_on_raw_thread", true);
    assert!(
        status.success() && err.contains("CHILD-OK"),
        "{status:?}\n{err}"
    );
}
