//! Review 17: threads left running after the runtime is dropped.
//!
//! `Runtime::shutdown` joins the workers and the monitor but only *tells* the blocking pool to
//! stop (`BlockingPool::shutdown`: a flag and a `notify_all`); its threads are detached and
//! exit some time after `drop(rt)` has returned. A program that counts its threads, forks, or
//! unloads after dropping the runtime still has them; so does a test harness checking for
//! leaked threads.

use std::time::Duration;

use spindle_rt::{IoBackend, Runtime};

/// Threads of this process whose name starts with `prefix`.
fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end().starts_with(prefix))
        .count()
}

/// Correct: when `drop(rt)` returns, the runtime's threads — blocking-pool threads included —
/// are gone (the pool's threads are joined, as tokio's runtime joins its blocking threads).
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
                        spindle_rt::blocking(|| std::thread::sleep(Duration::from_millis(5)))
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
        });
        drop(rt);
        left.push(threads_named("spindle-blocki"));
        // Let them go before the next round.
        std::thread::sleep(Duration::from_millis(30));
    }
    assert!(
        left.iter().all(|&n| n == 0),
        "blocking-pool threads still running right after drop(rt) returned, per round: {left:?}"
    );
}
