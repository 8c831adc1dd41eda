//! Shared by the runtime's integration tests (`tests/*.rs` that declare `mod common;`).
#![allow(dead_code)] // each test crate uses a part

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, mpsc};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use spindle_rt::{IoBackend, Runtime};

/// A minimal runtime-agnostic one-shot: a future completed by `fire` from anywhere.
#[derive(Clone, Default)]
pub struct Signal(Arc<Mutex<(Option<u32>, Option<Waker>)>>);

impl Signal {
    pub fn fire(&self, value: u32) {
        let waker = {
            let mut s = self.0.lock().unwrap();
            s.0 = Some(value);
            s.1.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl Future for Signal {
    type Output = u32;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u32> {
        let mut s = self.0.lock().unwrap();
        match s.0 {
            Some(v) => Poll::Ready(v),
            None => {
                s.1 = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// Whether a test written for io_uring must be left out of this run: under valgrind (the
/// `valgrind-rt` leg sets `SPINDLE_UNDER_VALGRIND`), which does not see the kernel's writes
/// into an io_uring's shared rings, so a worker parked in `io_uring_enter` is never woken, and
/// the whole process hangs (valgrind runs one thread at a time: a test's watchdog thread too).
/// Also under an emulator that refuses io_uring (qemu-user, the `aarch64` leg). Says so on
/// stderr. Every other run (the test leg) runs these tests.
pub fn io_uring_left_out(test: &str) -> bool {
    let left_out = std::env::var_os("SPINDLE_UNDER_VALGRIND").is_some();
    if left_out {
        eprintln!("{test}: left out under valgrind (it does not see io_uring's ring writes)");
    }
    left_out || skipped_under_emulation(test, "io_uring (it answers io_uring_setup with ENOSYS)")
}

/// A runtime on `io` with one worker and one blocking thread.
pub fn rt(io: IoBackend) -> Runtime {
    Runtime::builder()
        .io(io)
        .workers(1)
        .blocking_threads(1)
        .build()
        .unwrap()
}

/// Runs `case` in a task of `rt` and returns its result, or `None` if it has not finished
/// within `limit` (the runtime is then leaked: a task that never ends would hang its drop).
pub fn within<T: Send + 'static>(
    rt: Runtime,
    limit: Duration,
    case: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    let _task = rt.spawn(move || {
        let _ = tx.send(case());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => {
            drop(rt);
            Some(v)
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            std::mem::forget(rt);
            None
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            drop(rt);
            panic!("the case panicked (see its message above)");
        }
    }
}

/// What a child test process did: its exit status (`None`: killed by the watchdog after
/// `limit`), and its stdout and stderr.
pub struct ChildRun {
    pub status: Option<std::process::ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

impl ChildRun {
    /// It exited successfully and printed `CHILD OK`.
    pub fn ok(&self) -> bool {
        self.status.is_some_and(|s| s.success()) && self.stdout.contains("CHILD OK")
    }
}

impl std::fmt::Display for ChildRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.status {
            Some(s) => write!(f, "status {s}")?,
            None => f.write_str("hung: killed by the watchdog")?,
        }
        write!(f, "\nstdout:\n{}\nstderr:\n{}", self.stdout, self.stderr)
    }
}

/// Runs the ignored test `child` of this test binary in a child process (it should print
/// `CHILD OK` at its end), killing it if it runs past `limit`.
///
/// Under qemu-user a child can hang before the test harness starts (it prints nothing, not
/// even `running 1 test`): qemu-user emulates the `clone` behind `Command::spawn` as a fork of
/// the whole emulator, and a lock that another thread of the emulator held at that moment
/// stays held in the child. Such a child never ran the test, so it is started once more, with
/// a line on stderr that says so. A child that started and then hung still fails the test.
pub fn run_child_with_watchdog(child: &str, limit: Duration) -> ChildRun {
    use std::io::Write;
    let run = run_child_once(child, limit);
    let never_started = run.status.is_none() && run.stdout.is_empty() && run.stderr.is_empty();
    match emulator() {
        Some(emulator) if never_started => {
            let _ = writeln!(
                std::io::stderr(),
                "{child}: the child process printed nothing in {limit:?} under {emulator} (it \
                 hung before the test harness started); starting it once more"
            );
            run_child_once(child, limit)
        }
        _ => run,
    }
}

fn run_child_once(child: &str, limit: Duration) -> ChildRun {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let mut proc = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            child,
            "--nocapture",
            "--test-threads=1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = proc.stdout.take().unwrap();
    let mut err = proc.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(status) = proc.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() >= deadline {
            let _ = proc.kill();
            let _ = proc.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    ChildRun {
        status,
        stdout: out_reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    }
}

/// The emulator this test process runs under, if any: qemu-user, recognised by the executable
/// of `/proc/thread-self/exe`, which it leaves alone (it makes `/proc/self/exe` name the guest
/// program). Some kernel interfaces differ there: qemu-user keeps `RLIMIT_AS` to itself (it
/// reserves the guest's address space and fails mappings with its own `ENOMEM`), maps guest
/// memory with mappings of its own, answers `mincore` with `ENOMEM` for guest stacks, and
/// refuses `io_uring_setup` (`ENOSYS`).
pub fn emulator() -> Option<String> {
    let exe = std::fs::read_link("/proc/thread-self/exe").ok()?;
    let name = exe.file_name()?.to_string_lossy().into_owned();
    name.starts_with("qemu-").then_some(name)
}

/// Whether the calling test must be skipped because it runs under an emulator that does not
/// give it `needs`; says so on stderr, outside the test harness's capture, so that the line
/// shows even though the test passes.
pub fn skipped_under_emulation(test: &str, needs: &str) -> bool {
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
