//! Loom models of a task's state word (`src/state.rs`) and join cell (`src/join_cell.rs`).
//!
//! Both files are compiled here again, with the `loom` module below in place of the runtime's
//! (`src/loom.rs`): loom's atomics, a loom lock for the join cell, and loom's `UnsafeCell`
//! behind the cell's `DataCell`, which reports any two unsynchronised accesses to a result or a
//! waker field. The threads play the parts the runtime's code plays (the finishing task, a
//! joining handle, a scope, a dropped handle, a worker publishing a parked task, a waker, a
//! timer), calling the same methods in the same order as `task.rs`, `join.rs`, `scope.rs` and
//! `worker.rs` do. A lost wake-up leaves a thread parked for ever: loom reports it as a
//! deadlock.
//!
//! `RUSTFLAGS="--cfg loom -C overflow-checks=on" LOOM_MAX_PREEMPTIONS=2 cargo test -p spindle-rt --release --test loom_task`
#![cfg(loom)]

/// What `state.rs` and `join_cell.rs` take from `crate::loom`, as loom's.
mod loom {
    pub(crate) use ::loom::sync::atomic::{AtomicU32, Ordering};

    pub(crate) type Lock = ::loom::sync::Mutex<()>;

    pub(crate) fn lock(lock: &Lock) -> impl Sized + '_ {
        lock.lock().unwrap()
    }

    pub(crate) struct DataCell<T>(::loom::cell::UnsafeCell<T>);

    impl<T> DataCell<T> {
        pub(crate) fn new(value: T) -> DataCell<T> {
            DataCell(::loom::cell::UnsafeCell::new(value))
        }

        pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            self.0.with_mut(f)
        }
    }
}

#[allow(dead_code)] // the models use most of it
#[path = "../src/state.rs"]
mod state;

#[allow(dead_code)]
#[path = "../src/join_cell.rs"]
mod join_cell;

use std::task::{Wake, Waker};

use ::loom::sync::atomic::{AtomicUsize, Ordering};
use ::loom::sync::{Arc, Condvar, Mutex};
use ::loom::thread;

use join_cell::JoinCell;
use spindle_park::Wake as Resumed;
use state::{State, TaskState};

/// Runs `f` under loom, bounding preemptions to 2 unless `LOOM_MAX_PREEMPTIONS` says
/// otherwise.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = ::loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(f);
}

/// A token parker (`std::thread::park`'s behaviour: an unpark before the park is kept), and
/// the `Waker` that unparks it. Loom's own `thread::park` would do, but a waker must be a
/// `Send + Sync` value.
struct Parker {
    token: Mutex<bool>,
    condvar: Condvar,
}

impl Parker {
    fn new() -> std::sync::Arc<Parker> {
        std::sync::Arc::new(Parker {
            token: Mutex::new(false),
            condvar: Condvar::new(),
        })
    }

    fn park(&self) {
        let mut token = self.token.lock().unwrap();
        while !*token {
            token = self.condvar.wait(token).unwrap();
        }
        *token = false;
    }
}

impl Wake for Parker {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        *self.token.lock().unwrap() = true;
        self.condvar.notify_one();
    }
}

fn waker_of(parker: &std::sync::Arc<Parker>) -> Waker {
    Waker::from(parker.clone())
}

/// A result value that counts its drops.
struct Value {
    n: u32,
    drops: Arc<AtomicUsize>,
}

impl Drop for Value {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::Relaxed);
    }
}

/// The task's result: a value, or a failure (a panic's stand-in).
type Outcome = Result<Value, &'static str>;

/// The parts of a task the join protocol uses.
struct Task {
    state: TaskState,
    cell: JoinCell<Value, &'static str>,
}

impl Task {
    fn new() -> Arc<Task> {
        Arc::new(Task {
            state: TaskState::new_active(),
            cell: JoinCell::new(),
        })
    }

    /// `TaskCell::finish` and `finish_flagged`: the result, `COMPLETE`, then the wakers and a
    /// detached handle's unwanted value.
    fn finish(&self, outcome: Outcome) {
        // SAFETY: this thread finishes the task, once, before it completes it.
        unsafe { self.cell.put(outcome) };
        let before = self.state.complete();
        let after = self.cell.after_complete(&self.state, before);
        drop(after.unwanted);
        if let Some(w) = after.waiter {
            w.wake();
        }
        if let Some(w) = after.scope_waiter {
            w.wake();
        }
    }

    /// `JoinHandle::join`: take the result, or register and park until woken, and look again.
    fn join(&self) -> Outcome {
        let parker = Parker::new();
        loop {
            match self
                .cell
                .take_or_wait(&self.state, |_| false, || waker_of(&parker))
            {
                Some(Some(outcome)) => return outcome,
                Some(None) => panic!("the result was taken twice"),
                None => parker.park(),
            }
        }
    }

    /// `scope.rs`'s `wait_done`: park until the task finished, without taking its result.
    fn wait_done(&self) {
        let parker = Parker::new();
        loop {
            if self.state.is_complete()
                || !self.cell.register(
                    &self.state,
                    State::SCOPE_WAITER,
                    |_| false,
                    || waker_of(&parker),
                )
            {
                return;
            }
            parker.park();
        }
    }

    /// `JoinHandle`'s drop (a result with drop glue): the value it returns is the caller's to
    /// drop.
    fn detach(&self) -> Option<Value> {
        let (waiter, value) = self.cell.detach(&self.state);
        drop(waiter);
        value
    }
}

/// Runs `f` on `task` in a new loom thread.
fn on_thread<R: Send + 'static>(
    task: &Arc<Task>,
    f: impl FnOnce(&Task) -> R + Send + 'static,
) -> thread::JoinHandle<R> {
    let task = task.clone();
    thread::spawn(move || f(&task))
}

/// Starts the finishing task: it finishes `task` with value `n`, whose drops count in `drops`.
fn finish_on_thread(task: &Arc<Task>, n: u32, drops: &Arc<AtomicUsize>) -> thread::JoinHandle<()> {
    let v = value(n, drops);
    on_thread(task, move |t| t.finish(Ok(v)))
}

fn value(n: u32, drops: &Arc<AtomicUsize>) -> Value {
    Value {
        n,
        drops: drops.clone(),
    }
}

#[test]
fn a_join_gets_the_value_whenever_the_finish_lands() {
    model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let task = Task::new();
        let finisher = finish_on_thread(&task, 7, &drops);
        let outcome = task.join();
        finisher.join().unwrap();
        assert_eq!(outcome.map(|v| v.n), Ok(7));
        assert_eq!(drops.load(Ordering::Relaxed), 1);
    });
}

#[test]
fn a_join_as_a_future_polled_again_with_another_waker_is_woken_through_the_new_one() {
    model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let task = Task::new();
        let finisher = finish_on_thread(&task, 7, &drops);
        // First poll with one waker, second with another (`JoinHandle::poll`'s `current`
        // compares with `will_wake`: a different waker replaces the first); then only the
        // second is waited on, so a wake-up through the stale one would be lost.
        let (first, second) = (Parker::new(), Parker::new());
        let mut outcome = None;
        for parker in [&first, &second] {
            if let Some(taken) = task.cell.take_or_wait(
                &task.state,
                |w| w.will_wake(&waker_of(parker)),
                || waker_of(parker),
            ) {
                outcome = Some(taken.expect("taken once"));
                break;
            }
        }
        let outcome = outcome.unwrap_or_else(|| {
            loop {
                second.park();
                if let Some(taken) = task.cell.take_or_wait(
                    &task.state,
                    |w| w.will_wake(&waker_of(&second)),
                    || waker_of(&second),
                ) {
                    break taken.expect("taken once");
                }
            }
        });
        finisher.join().unwrap();
        assert_eq!(outcome.map(|v| v.n), Ok(7));
    });
}

#[test]
fn a_scope_and_a_join_waiting_together_are_both_woken() {
    model(|| {
        let task = Task::new();
        let drops = Arc::new(AtomicUsize::new(0));
        let finisher = finish_on_thread(&task, 3, &drops);
        let scope = on_thread(&task, |t| t.wait_done());
        let outcome = task.join();
        scope.join().unwrap();
        finisher.join().unwrap();
        assert_eq!(outcome.map(|v| v.n), Ok(3));
    });
}

#[test]
fn a_dropped_handle_racing_the_finish_drops_the_value_exactly_once_and_keeps_a_failure() {
    model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let task = Task::new();
        let finisher = finish_on_thread(&task, 1, &drops);
        drop(task.detach());
        finisher.join().unwrap();
        // Dropped by whichever side came second, not left in the task.
        assert_eq!(drops.load(Ordering::Relaxed), 1);
        let left = task.cell.with_result(&task.state, |r| r.is_some());
        assert_eq!(left, Some(false));
    });
    model(|| {
        let task = Task::new();
        let finisher = on_thread(&task, |t| t.finish(Err("panicked")));
        assert!(
            task.detach().is_none(),
            "a failure is not taken by a detach"
        );
        finisher.join().unwrap();
        // A scope reads a detached child's panic.
        let left = task.cell.with_result(&task.state, |r| {
            r.as_ref().map(|r| r.as_ref().err().copied())
        });
        assert_eq!(left, Some(Some(Some("panicked"))));
    });
}

#[test]
fn a_future_dropped_after_it_registered_leaves_no_waker_and_no_value() {
    model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let task = Task::new();
        let finisher = finish_on_thread(&task, 2, &drops);
        let parker = Parker::new();
        let first = task
            .cell
            .take_or_wait(&task.state, |_| false, || waker_of(&parker));
        // Ready at once, or pending and then dropped (the handle's drop detaches).
        match first {
            Some(taken) => drop(taken),
            None => drop(task.detach()),
        }
        finisher.join().unwrap();
        assert_eq!(drops.load(Ordering::Relaxed), 1);
        // Every waker made for the registration is gone: only our own handle is left.
        assert_eq!(std::sync::Arc::strong_count(&parker), 1);
    });
}

/// The worker's side of a park (`worker.rs`): the coroutine looks for a permit before it
/// suspends (`park_current`'s `take_permit`); without one it suspends, and the worker then
/// publishes it idle unless a wake-up came meanwhile (`park_done`), which re-queues it.
/// Returns whether the task goes on (at once, or re-queued).
fn park_or_go_on(state: &TaskState, seq: u64) -> bool {
    state.take_permit() || state.park_done(State::park_gen(seq), false)
}

#[test]
fn wake_ups_racing_a_park_schedule_the_task_exactly_once() {
    // Suspend, then publish: a wake-up before the publication leaves the permit, one after it
    // finds the task idle and schedules it; never neither, never both.
    model(|| {
        let task = Task::new();
        let scheduled = Arc::new(AtomicUsize::new(0));
        let wakers: Vec<_> = (0..2)
            .map(|_| {
                let scheduled = scheduled.clone();
                on_thread(&task, move |task| {
                    if task.state.notify(State::NOTIFIED) {
                        scheduled.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        if park_or_go_on(&task.state, 1) {
            scheduled.fetch_add(1, Ordering::Relaxed);
        }
        for w in wakers {
            w.join().unwrap();
        }
        assert_eq!(scheduled.load(Ordering::Relaxed), 1);
        assert_ne!(task.state.load() & State::ACTIVE, 0, "scheduled, so active");
    });
}

#[test]
fn a_cancel_racing_a_park_schedules_the_task_exactly_once() {
    model(|| {
        let task = Task::new();
        let canceller = on_thread(&task, |t| {
            t.state.notify(State::CANCELLED | State::NOTIFIED)
        });
        let parked_then_rescheduled = park_or_go_on(&task.state, 1);
        let by_cancel = canceller.join().unwrap();
        assert_eq!(
            usize::from(parked_then_rescheduled) + usize::from(by_cancel),
            1,
            "scheduled once"
        );
        assert_ne!(task.state.load() & State::CANCELLED, 0);
    });
}

#[test]
fn a_cancel_held_off_by_a_guard_keeps_the_task_scheduled_at_the_first_park_after_it() {
    model(|| {
        let task = Task::new();
        let canceller = on_thread(&task, |t| {
            t.state.notify(State::CANCELLED | State::NOTIFIED)
        });
        // A park inside a `CancelGuard`: the cancel wakes it once (its permit), no more.
        let went_on = task.state.take_permit() || task.state.park_done(State::park_gen(1), true);
        let by_cancel = canceller.join().unwrap();
        assert_eq!(usize::from(went_on) + usize::from(by_cancel), 1);
        assert_eq!(task.state.resumed(), Resumed::Woken);
        // The guard is gone: the next park must not publish the task idle, or nothing would
        // ever resume it to unwind.
        assert!(
            park_or_go_on(&task.state, 2),
            "a pending cancel was parked away"
        );
    });
}

#[test]
fn a_timer_and_a_wake_up_racing_for_a_parked_task_schedule_it_once_and_the_wake_up_wins() {
    model(|| {
        let task = Task::new();
        // Published idle by park number 1.
        assert!(!park_or_go_on(&task.state, 1));
        let timer = on_thread(&task, |t| t.state.fire(1));
        let by_wake = task.state.notify(State::NOTIFIED);
        let by_timer = timer.join().unwrap();
        assert_eq!(usize::from(by_wake) + usize::from(by_timer), 1);
        // The resumed park: a wake-up came, so it is no time-out, whichever moved the task.
        assert_eq!(task.state.resumed(), Resumed::Woken);
        assert_eq!(task.state.load() & (State::FIRED | State::NOTIFIED), 0);
    });
}

#[test]
fn a_timer_left_from_an_earlier_park_never_schedules_a_later_one() {
    model(|| {
        let task = Task::new();
        assert!(!park_or_go_on(&task.state, 1));
        // Park 1's timer fires late, while a wake-up resumes the task and it parks again
        // (park 2) on its worker.
        let timer = on_thread(&task, |t| t.state.fire(1));
        let woken = task.state.notify(State::NOTIFIED);
        if woken {
            assert_eq!(task.state.resumed(), Resumed::Woken);
            // No permit was left (the wake-up moved it out of idle): it parks again.
            assert!(!park_or_go_on(&task.state, 2));
        }
        let fired = timer.join().unwrap();
        // Park 1 ended once, by its wake-up or its timer; a fire during park 2 (the park
        // generation differs) schedules nothing.
        assert_eq!(usize::from(woken) + usize::from(fired), 1);
    });
}
