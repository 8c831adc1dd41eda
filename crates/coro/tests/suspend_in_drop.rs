//! Dropping a coroutine whose cleanup code suspends (a destructor that calls
//! `Yielder::suspend`, e.g. to wait for something before releasing a resource) must not abort
//! the whole process with Rust's "panic in a destructor during cleanup" when no user code
//! panicked.
//!
//! The forced unwind runs the destructor; its `suspend` switched back to the dropping side,
//! which sent UNWIND again; `suspend` then raised the private `ForcedUnwind` panic *inside a
//! destructor that runs during unwinding*, which Rust turns into an abort. The drop cannot
//! complete normally (the suspend can neither return an input nor unwind), so the fix detects
//! it at the suspend and aborts with a clear spindle message naming the coroutine, a
//! documented abort. (This test used to expect no abort; it now expects that message.)

use std::process::Command;

use spindle_coro::{Builder, Coroutine, CoroutineResult, Yielder};

struct SuspendOnDrop<'a>(&'a Yielder<(), u32>);

impl Drop for SuspendOnDrop<'_> {
    fn drop(&mut self) {
        self.0.suspend(7);
    }
}

#[test]
#[ignore = "child process of dropping_a_coroutine_whose_destructor_suspends_aborts_clearly"]
fn child_suspend_in_drop() {
    if std::env::var("SPINDLE_TEST_CHILD").as_deref() != Ok("child_suspend_in_drop") {
        return;
    }
    let body = |y: &Yielder<(), u32>, ()| {
        let _guard = SuspendOnDrop(y);
        y.suspend(1);
    };
    let mut co = if std::env::var_os("SPINDLE_TEST_ALLOW").is_some() {
        // The opt-in for suspending in a panic's unwind does not cover a forced unwind.
        Builder::new().allow_suspend_while_unwinding().build(body)
    } else {
        Coroutine::new(body)
    }
    .unwrap();
    eprintln!("CHILD-ID {}", co.id());
    assert_eq!(co.resume(()), CoroutineResult::Yield(1));
    drop(co);
    eprintln!("CHILD-OK");
}

#[test]
fn dropping_a_coroutine_whose_destructor_suspends_aborts_clearly() {
    check_child(false);
}

#[test]
fn it_aborts_clearly_even_if_the_builder_allows_suspending_while_unwinding() {
    check_child(true);
}

fn check_child(allow: bool) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    if allow {
        command.env("SPINDLE_TEST_ALLOW", "1");
    }
    let out = command
        .args([
            "child_suspend_in_drop",
            "--exact",
            "--nocapture",
            "--ignored",
        ])
        .env("SPINDLE_TEST_CHILD", "child_suspend_in_drop")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let id = err
        .lines()
        .find_map(|l| l.strip_prefix("CHILD-ID "))
        .expect("the child started");
    assert!(
        !out.status.success()
            && !err.contains("CHILD-OK")
            && err.contains(&format!(
                "spindle: a coroutine cannot suspend while it unwinds: coroutine #{id} "
            ))
            && !err.contains("panic in a destructor during cleanup"),
        "expected spindle's documented abort naming the coroutine: {:?}\n{}",
        out.status,
        err.lines()
            .filter(|l| !l.starts_with("  "))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
