//! The automatically chosen IO backend works wherever the program runs — including under
//! valgrind, where io_uring cannot (valgrind does not see the kernel's writes into the ring:
//! a worker waiting there for a wake-up from another thread never wakes). The `valgrind` leg
//! of `cargo xtask ci` runs this file under memcheck *without* `SPINDLE_IO`, so `Auto` picks.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// Turns a hang into a failure natively: kills the process with a message if the test is not
/// over by then. (Under valgrind a worker stuck in `io_uring_enter` holds valgrind's thread
/// lock, so this thread never runs; the `valgrind` leg kills the run from outside instead.)
fn watchdog(limit: Duration) {
    thread::spawn(move || {
        thread::sleep(limit);
        eprintln!("auto_backend: not done after {limit:?}: a worker was never woken");
        #[cfg(unix)]
        // SAFETY: `kill` on our own pid with a valid signal number has no memory effects.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
        std::process::exit(3);
    });
}

#[test]
fn the_automatic_backend_wakes_a_sleeping_worker_from_another_thread() {
    // `SPINDLE_IO` set by the environment would bypass the choice under test.
    if std::env::var_os("SPINDLE_IO").is_some_and(|v| !v.is_empty()) {
        eprintln!("SPINDLE_IO is set: this test checks the automatic choice only without it");
        return;
    }
    watchdog(Duration::from_secs(120));
    let rt = spindle_rt::Runtime::builder().workers(1).build().unwrap();
    if spindle_stack::running_on_valgrind() {
        assert_ne!(
            rt.io_backend(),
            "io_uring",
            "Auto picked io_uring under valgrind"
        );
    }
    let (tx, rx) = spindle_sync::mpsc::channel::<u32>();
    let (started_tx, started_rx) = mpsc::channel();
    let handle = rt.spawn(move || {
        started_tx.send(()).unwrap();
        // Parks the coroutine; its worker, with nothing else to run, sleeps in the driver.
        let mut sum = 0;
        for _ in 0..3 {
            sum += rx.recv().unwrap();
        }
        sum
    });
    started_rx.recv().unwrap();
    for i in 1..=3 {
        // Long enough for the worker to go to sleep before each message.
        thread::sleep(Duration::from_millis(50));
        tx.send(i).unwrap();
    }
    assert_eq!(handle.join().unwrap(), 6);
}
