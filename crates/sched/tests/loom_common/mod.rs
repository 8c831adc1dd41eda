//! Shared by the loom models (`tests/loom_*.rs`).
#![allow(dead_code)] // each model uses a part

#[path = "../common/mod.rs"]
mod common;

pub use common::Job;

/// Runs `f` under loom, bounding preemptions to 2 unless `LOOM_MAX_PREEMPTIONS` says
/// otherwise (unbounded exploration of these models would take hours).
pub fn model<F>(f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    use std::sync::atomic::{AtomicUsize, Ordering};

    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    let iterations = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = iterations.clone();
    let start = std::time::Instant::now();
    builder.check(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        f();
    });
    eprintln!(
        "loom: {} interleavings in {:.2?} (preemption bound {:?})",
        iterations.load(Ordering::Relaxed),
        start.elapsed(),
        builder.preemption_bound
    );
}

/// Checks that tasks `0..total` came out exactly once, and pinned ones only on their home.
/// `popped`: (worker, job) pairs; `drained`: what `drain` returned at the end.
pub fn check_exactly_once(total: usize, popped: &[(usize, Job)], drained: &[Job]) {
    let mut seen = vec![0; total];
    for (w, job) in popped {
        if let Some(h) = job.home {
            assert_eq!(h, *w, "task {} pinned to {h} popped by {w}", job.id);
        }
        seen[job.id] += 1;
    }
    for job in drained {
        seen[job.id] += 1;
    }
    assert!(seen.iter().all(|&n| n == 1), "not exactly once: {seen:?}");
}
