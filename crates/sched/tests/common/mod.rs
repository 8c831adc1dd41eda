//! What the policy tests share (the loom models too, through `loom_common`): the task type
//! they queue.
#![allow(dead_code)] // each test crate uses a part

use proptest::prelude::*;
use spindle_sched::{Reason, Task};

/// A task: an id to follow it by, and the worker it is pinned to, if any.
#[derive(Debug, PartialEq, Eq)]
pub struct Job {
    pub id: usize,
    pub home: Option<usize>,
}

impl Task for Job {
    fn home(&self) -> Option<usize> {
        self.home
    }
}

/// Any push reason.
pub fn reason() -> impl Strategy<Value = Reason> {
    prop_oneof![
        Just(Reason::Spawned),
        Just(Reason::Woken),
        Just(Reason::WokenByWorker),
        Just(Reason::Yielded)
    ]
}

/// A `here` for `n` workers: mostly a worker, sometimes none, now and then out of range.
pub fn here(n: usize) -> impl Strategy<Value = Option<usize>> {
    prop_oneof![
        1 => Just(None),
        3 => (0..n).prop_map(Some),
        1 => (n..n + 2).prop_map(Some),
    ]
}

/// A home for `n` workers: none, a worker, now and then out of range.
pub fn home(n: usize) -> impl Strategy<Value = Option<usize>> {
    prop_oneof![
        3 => Just(None),
        3 => (0..n).prop_map(Some),
        1 => (n..n + 2).prop_map(Some),
    ]
}
