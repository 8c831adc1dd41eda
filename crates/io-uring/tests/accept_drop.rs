//! Connections a multishot accept took but nobody claimed are closed, whatever goes first: the
//! driver (a runtime shut down with the request armed, its completions still in the completion
//! queue) or the listener (its request cancelled, its queue discarded). Counted in the process's
//! descriptor table, so the body runs in a child process of its own.
#![cfg(target_os = "linux")]

mod common;

use std::process::Command;
use std::rc::Rc;
use std::time::Duration;

use common::Exec;
use spindle_io::Driver;
use spindle_io::net::TcpListener;
use spindle_io_uring::UringConfig;

/// Runs `test` (this file's test of that name) in a child process with `SPINDLE_CHILD=test`.
fn run_child(test: &str) -> (std::process::ExitStatus, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("SPINDLE_CHILD", test)
        .output()
        .expect("spawn the test binary");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status, text)
}

fn is_child(test: &str) -> bool {
    std::env::var("SPINDLE_CHILD").as_deref() == Ok(test)
}

/// Open descriptors of this process (the directory's own descriptor included, every time).
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// What goes first once connections wait in the ring.
#[derive(Clone, Copy, Debug)]
enum End {
    /// The driver, then the listener.
    DriverFirst,
    /// The listener (its cancel waits in the driver's mailbox), then the driver.
    ListenerFirst,
    /// The listener, then one more turn of the driver (the cancel goes out, the last
    /// completions come back), then the driver.
    ListenerThenTurn,
    /// One turn of the driver (the completions reach the listener's queue), then the driver,
    /// then the listener.
    TurnThenDriver,
}

/// Arms a multishot accept (one `accept` in a task), lets `WAVE` more clients connect without
/// anyone accepting them, ends as `end` says; returns the descriptors left open beyond the
/// baseline.
fn leftover(defer_taskrun: bool, end: End) -> isize {
    const WAVE: usize = 8;
    let baseline = open_fds();
    let driver = UringConfig::new()
        .defer_taskrun(defer_taskrun)
        .build()
        .unwrap();
    let exec = Exec::new(driver);
    let listener = Rc::new(TcpListener::bind("127.0.0.1:0").unwrap());
    let addr = listener.local_addr().unwrap();
    let first = std::thread::spawn(move || std::net::TcpStream::connect(addr).unwrap());
    {
        let listener = listener.clone();
        exec.spawn(move || drop(listener.accept().unwrap()));
    }
    exec.run();
    assert_eq!(exec.driver.stats().multishot_accepts, 1);
    let mut clients = vec![first.join().unwrap()];
    // From another thread: the kernel completes the handshakes; the armed request accepts them
    // into the ring (without deferred task running, on this thread's next return from a
    // syscall; with it, in the next enter that waits for completions).
    let wave = std::thread::spawn(move || {
        (0..WAVE)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect::<Vec<_>>()
    });
    clients.extend(wave.join().unwrap());
    std::thread::sleep(Duration::from_millis(20));
    match end {
        End::DriverFirst => {
            drop(exec);
            drop(listener);
        }
        End::ListenerFirst => {
            drop(listener);
            drop(exec);
        }
        End::ListenerThenTurn => {
            drop(listener);
            exec.driver.park(Some(Duration::from_millis(20))).unwrap();
            drop(exec);
        }
        End::TurnThenDriver => {
            exec.driver.park(Some(Duration::ZERO)).unwrap();
            drop(exec);
            drop(listener);
        }
    }
    drop(clients);
    open_fds() as isize - baseline as isize
}

#[test]
fn connections_accepted_ahead_are_closed_when_the_driver_or_the_listener_goes() {
    const NAME: &str = "connections_accepted_ahead_are_closed_when_the_driver_or_the_listener_goes";
    if is_child(NAME) {
        let mut leaks = Vec::new();
        for defer_taskrun in [true, false] {
            for end in [
                End::DriverFirst,
                End::ListenerFirst,
                End::ListenerThenTurn,
                End::TurnThenDriver,
            ] {
                let left = leftover(defer_taskrun, end);
                println!("defer_taskrun={defer_taskrun} {end:?}: {left} descriptors left");
                if left != 0 {
                    leaks.push(format!("defer_taskrun={defer_taskrun} {end:?}: {left}"));
                }
            }
        }
        assert!(leaks.is_empty(), "descriptors leaked: {leaks:?}");
        return;
    }
    let (status, output) = run_child(NAME);
    assert!(status.success(), "child failed: {status}\n{output}");
}
