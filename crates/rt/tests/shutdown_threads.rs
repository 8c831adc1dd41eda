//! No threads left running after the runtime is dropped.
//!
//! `Runtime::shutdown` joins the workers and the monitor but only *tells* the blocking pool to
//! stop (`BlockingPool::shutdown`: a flag and a `notify_all`); its threads are detached and
//! exit some time after `drop(rt)` has returned. A program that counts its threads, forks, or
//! unloads after dropping the runtime still has them; so does a test harness checking for
//! leaked threads.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use spindle_rt::{IoBackend, Runtime};

/// Blocking-pool threads that have run a job (each counts once: its thread-local is made)…
static STARTED: AtomicUsize = AtomicUsize::new(0);
/// …and those whose thread-locals have been destroyed: the thread has ended its code.
static ENDED: AtomicUsize = AtomicUsize::new(0);

struct ThreadProbe;
impl Drop for ThreadProbe {
    fn drop(&mut self) {
        ENDED.fetch_add(1, Ordering::SeqCst);
    }
}

thread_local! {
    static PROBE: ThreadProbe = {
        STARTED.fetch_add(1, Ordering::SeqCst);
        ThreadProbe
    };
}

/// Correct: when `drop(rt)` returns, the runtime's threads — blocking-pool threads included —
/// have ended (the pool's threads are joined, as tokio's runtime joins its blocking threads).
/// Checked by their thread-locals' destructors, which a joined thread has run: counting the
/// process's threads in /proc was flaky, since the kernel lists a thread a moment after
/// `pthread_join` has returned.
#[test]
fn dropping_the_runtime_leaves_no_blocking_pool_thread_running() {
    let mut left = Vec::new();
    for _ in 0..60 {
        let rt = Runtime::builder()
            .workers(1)
            .io(IoBackend::None)
            .build()
            .unwrap();
        rt.block_on(|| {
            // Sixteen pool threads, idle again once their jobs are done.
            let hs: Vec<_> = (0..16)
                .map(|_| {
                    spindle_rt::spawn(|| {
                        spindle_rt::blocking(|| {
                            PROBE.with(|_| ());
                            std::thread::sleep(Duration::from_millis(5))
                        })
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
        });
        drop(rt);
        left.push(STARTED.load(Ordering::SeqCst) - ENDED.load(Ordering::SeqCst));
    }
    assert!(
        left.iter().all(|&n| n == 0),
        "blocking-pool threads still running right after drop(rt) returned, per round: {left:?}"
    );
}
