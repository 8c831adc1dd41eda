//! What a task drops as it ends, and where.
//!
//! * Values of the task that will not be handed out — its return value when a
//!   coroutine-local's destructor panicked, a second panic's payload when the closure had
//!   panicked too — are dropped inside the coroutine while it can still park: a destructor that
//!   sleeps, locks or yields parks the coroutine (it used to find no yielder: a null
//!   dereference in release builds, a failed assertion and a hung runtime in debug builds).
//! * A coroutine-local that such a destructor touches after the locals were cleared is made
//!   and dropped again in the coroutine, on its worker, before the join sees the result (it
//!   used to outlive the clear and be freed on whichever thread dropped the task).
//!
//! * The value of a coroutine whose handle was dropped, the closure of one that never ran and a
//!   foreign waker woken at a task's end are dropped or woken in a coroutine (the finishing
//!   one, or a cleanup coroutine), never as the worker's own code: a destructor that locks a
//!   mutex held by a sleeping coroutine of the same worker used to park the worker's thread for
//!   good.
//!
//! The cases that used to crash or hang run in child processes with a watchdog.

mod common;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::ThreadId;
use std::time::Duration;

use common::run_child_with_watchdog;
use spindle_rt::{JoinError, Runtime};

const LIMIT: Duration = Duration::from_secs(30);

static PARKED_IN_DROP: AtomicBool = AtomicBool::new(false);

/// A value whose destructor parks its coroutine (sleeps), then records that it did.
struct ParksOnDrop;

impl Drop for ParksOnDrop {
    fn drop(&mut self) {
        spindle_rt::sleep(Duration::from_millis(2));
        spindle_rt::yield_now();
        PARKED_IN_DROP.store(true, Ordering::SeqCst);
    }
}

/// A coroutine-local whose destructor panics, with `payload` chosen by the test.
struct PanicsOnDrop(fn() -> Box<dyn std::any::Any + Send>);

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        std::panic::resume_unwind((self.0)());
    }
}

spindle_rt::coroutine_local! {
    static PANICS_WITH_TEXT: PanicsOnDrop = PanicsOnDrop(|| Box::new("local's destructor"));
    static PANICS_WITH_PARKER: PanicsOnDrop = PanicsOnDrop(|| Box::new(ParksOnDrop));
}

fn one_worker() -> Runtime {
    Runtime::builder().workers(1).build().unwrap()
}

#[test]
#[ignore = "child process of a_displaced_return_value_may_park_in_its_destructor"]
fn child_displaced_return_value_parks() {
    let rt = one_worker();
    let joined = rt.block_on(|| {
        spindle_rt::spawn(|| {
            PANICS_WITH_TEXT.with(|_| ());
            ParksOnDrop
        })
        .join()
    });
    let Err(JoinError::Panicked(payload)) = joined else {
        panic!("the local's panic is the task's outcome")
    };
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"local's destructor"));
    assert!(PARKED_IN_DROP.load(Ordering::SeqCst));
    println!("CHILD OK");
}

#[test]
fn a_displaced_return_value_may_park_in_its_destructor() {
    let run = run_child_with_watchdog("child_displaced_return_value_parks", LIMIT);
    assert!(run.ok(), "{run}");
}

#[test]
#[ignore = "child process of a_second_panic_payload_may_park_in_its_destructor"]
fn child_second_panic_payload_parks() {
    let rt = one_worker();
    let joined = rt.block_on(|| {
        spindle_rt::spawn(|| {
            PANICS_WITH_PARKER.with(|_| ());
            panic!("the closure's panic");
        })
        .join()
    });
    let Err(JoinError::Panicked(payload)) = joined else {
        panic!("the closure's panic is the task's outcome")
    };
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"the closure's panic"));
    assert!(PARKED_IN_DROP.load(Ordering::SeqCst));
    println!("CHILD OK");
}

#[test]
fn a_second_panic_payload_may_park_in_its_destructor() {
    let run = run_child_with_watchdog("child_second_panic_payload_parks", LIMIT);
    assert!(run.ok(), "{run}");
}

/// Where `ThreadBound` values were dropped.
static DROPPED_ON: Mutex<Vec<ThreadId>> = Mutex::new(Vec::new());

/// A coroutine-local that must die on the thread that made it (`!Send`).
struct ThreadBound {
    made_on: ThreadId,
    _not_send: std::marker::PhantomData<*mut ()>,
}

impl Drop for ThreadBound {
    fn drop(&mut self) {
        assert_eq!(std::thread::current().id(), self.made_on);
        DROPPED_ON.lock().unwrap().push(self.made_on);
    }
}

spindle_rt::coroutine_local! {
    static BOUND: ThreadBound = ThreadBound {
        made_on: std::thread::current().id(),
        _not_send: std::marker::PhantomData,
    };
}

/// Returned by the task: displaced by the local's panic, it is dropped at the task's end and
/// touches `BOUND` after the locals were cleared.
struct TouchesLocalOnDrop;

impl Drop for TouchesLocalOnDrop {
    fn drop(&mut self) {
        BOUND.with(|_| ());
    }
}

#[test]
fn a_local_made_again_at_the_end_dies_in_the_coroutine_on_its_worker() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let worker = std::sync::Arc::new(Mutex::new(None));
    let seen = worker.clone();
    let handle = rt.spawn(move || {
        *seen.lock().unwrap() = Some(std::thread::current().id());
        PANICS_WITH_TEXT.with(|_| ());
        TouchesLocalOnDrop
    });
    // Joined from this thread, not a worker: the task's last reference may be dropped here.
    assert!(matches!(handle.join(), Err(JoinError::Panicked(_))));
    let worker = worker.lock().unwrap().expect("the task ran");
    assert_eq!(
        *DROPPED_ON.lock().unwrap(),
        vec![worker],
        "the local made by the displaced value's destructor was dropped once, in the coroutine"
    );
    drop(rt);
}

static HELD: spindle_sync::Mutex<()> = spindle_sync::Mutex::new(());
static LOCKED_IN_DROP: AtomicBool = AtomicBool::new(false);

/// Its destructor takes `HELD`.
struct LocksOnDrop;

impl Drop for LocksOnDrop {
    fn drop(&mut self) {
        drop(HELD.lock());
        LOCKED_IN_DROP.store(true, Ordering::SeqCst);
    }
}

/// Holds `HELD` across a sleep, in a coroutine of the same (single) worker.
fn hold_lock_while_sleeping() -> spindle_rt::JoinHandle<()> {
    spindle_rt::spawn(|| {
        let _guard = HELD.lock();
        spindle_rt::sleep(Duration::from_millis(50));
    })
}

#[test]
#[ignore = "child process of a_detached_value_may_block_on_a_lock_in_its_destructor"]
fn child_detached_value_locks() {
    let rt = one_worker();
    rt.block_on(|| {
        let holder = hold_lock_while_sleeping();
        spindle_rt::yield_now(); // the holder takes the lock and sleeps
        drop(spindle_rt::spawn(|| LocksOnDrop)); // detached: nobody reads its value
        holder.join().unwrap();
        while !LOCKED_IN_DROP.load(Ordering::SeqCst) {
            spindle_rt::sleep(Duration::from_millis(1));
        }
    });
    drop(rt);
    println!("CHILD OK");
}

#[test]
fn a_detached_value_may_block_on_a_lock_in_its_destructor() {
    let run = run_child_with_watchdog("child_detached_value_locks", LIMIT);
    assert!(run.ok(), "{run}");
}

/// A waker of no runtime: its wake-up takes `HELD`.
struct LocksOnWake;

impl std::task::Wake for LocksOnWake {
    fn wake(self: std::sync::Arc<Self>) {
        drop(HELD.lock());
        LOCKED_IN_DROP.store(true, Ordering::SeqCst);
    }
}

#[test]
#[ignore = "child process of a_foreign_waker_may_block_on_a_lock_when_woken"]
fn child_foreign_waker_locks() {
    use std::future::Future;
    let rt = one_worker();
    rt.block_on(|| {
        let holder = hold_lock_while_sleeping();
        spindle_rt::yield_now();
        let mut child = spindle_rt::spawn(|| spindle_rt::sleep(Duration::from_millis(5)));
        // Polled with a foreign waker: the child's end wakes it.
        let waker = std::task::Waker::from(std::sync::Arc::new(LocksOnWake));
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(std::pin::Pin::new(&mut child).poll(&mut cx).is_pending());
        holder.join().unwrap();
        while !LOCKED_IN_DROP.load(Ordering::SeqCst) {
            spindle_rt::sleep(Duration::from_millis(1));
        }
        child.join().unwrap();
    });
    drop(rt);
    println!("CHILD OK");
}

#[test]
fn a_foreign_waker_may_block_on_a_lock_when_woken() {
    let run = run_child_with_watchdog("child_foreign_waker_locks", LIMIT);
    assert!(run.ok(), "{run}");
}

/// A waker of no runtime whose wake-up blocks the thread (a plain sleep).
struct SleepsOnWake;

impl std::task::Wake for SleepsOnWake {
    fn wake(self: std::sync::Arc<Self>) {
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// A wake-up that blocks runs in its cleanup coroutine, so a stuck report names that
/// coroutine, not the task that had finished (which the report used to blame: the worker
/// still showed it as running).
#[test]
fn a_stuck_report_names_the_cleanup_not_the_finished_task() {
    use std::future::Future;
    let reports = std::sync::Arc::new(Mutex::new(Vec::new()));
    let seen = reports.clone();
    let rt = Runtime::builder()
        .workers(1)
        .stuck_threshold(Some(Duration::from_millis(50)))
        .on_stuck(move |r| seen.lock().unwrap().push((r.task_id, r.to_string())))
        .build()
        .unwrap();
    let finished_id = rt.block_on(|| {
        let mut child = spindle_rt::Builder::new()
            .name("finishing-child")
            .spawn(|| spindle_rt::sleep(Duration::from_millis(5)))
            .unwrap();
        let id = child.id();
        let waker = std::task::Waker::from(std::sync::Arc::new(SleepsOnWake));
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(std::pin::Pin::new(&mut child).poll(&mut cx).is_pending());
        // The child finishes; its wake-up sleeps 300 ms in a cleanup coroutine meanwhile.
        spindle_rt::sleep(Duration::from_millis(400));
        id
    });
    drop(rt);
    let reports = reports.lock().unwrap();
    assert!(!reports.is_empty(), "the blocking wake-up was reported");
    for (task, line) in reports.iter() {
        assert_ne!(*task, finished_id, "{line}");
        assert!(
            line.contains("spindle-rt cleanup: a foreign waker's wake-up"),
            "{line}"
        );
    }
}
