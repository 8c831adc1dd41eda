//! The documented abort "a coroutine cannot suspend while it unwinds" names the coroutine as
//! the stack-overflow message does: by the name given with `Builder::name` (it used to print
//! only the id). Run in a child process (it aborts), with a watchdog.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use spindle_coro::{Builder, CoroutineResult, Yielder};

struct SuspendOnDrop<'a>(&'a Yielder<(), u32>);

impl Drop for SuspendOnDrop<'_> {
    fn drop(&mut self) {
        self.0.suspend(7);
    }
}

#[test]
#[ignore = "child process of the_abort_for_suspending_while_unwinding_names_the_coroutine"]
fn child_named_suspend_in_drop() {
    let mut co = Builder::new()
        .name("tokenizer")
        .build(|y: &Yielder<(), u32>, ()| {
            let _guard = SuspendOnDrop(y);
            y.suspend(1);
        })
        .unwrap();
    eprintln!("CHILD-ID {}", co.id());
    assert_eq!(co.resume(()), CoroutineResult::Yield(1));
    drop(co); // the forced unwind suspends in `SuspendOnDrop`: a documented abort
    eprintln!("CHILD-OK");
}

#[test]
fn the_abort_for_suspending_while_unwinding_names_the_coroutine() {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "child_named_suspend_in_drop",
            "--exact",
            "--nocapture",
            "--ignored",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the child hung");
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let id = err
        .lines()
        .find_map(|l| l.strip_prefix("CHILD-ID "))
        .expect("the child started");
    assert!(
        !status.success()
            && !err.contains("CHILD-OK")
            && err.contains(&format!(
                "spindle: a coroutine cannot suspend while it unwinds: coroutine 'tokenizer' \
                 (#{id}) "
            )),
        "{status:?}\n{err}"
    );
}
