//! Parking on plain threads and through an installed hook.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Waker;
use std::time::{Duration, Instant};

use spindle_park::{Budget, Hook, Wake, consume_budget, park, park_timeout, park_until, waker};

#[test]
fn a_wake_before_park_is_not_lost() {
    waker().wake();
    assert_eq!(park_timeout(Duration::from_secs(10)), Wake::Woken);
}

#[test]
fn the_permit_is_consumed() {
    waker().wake_by_ref();
    waker().wake();
    assert_eq!(park_timeout(Duration::from_secs(10)), Wake::Woken);
    let start = Instant::now();
    assert_eq!(park_timeout(Duration::from_millis(30)), Wake::TimedOut);
    assert!(start.elapsed() >= Duration::from_millis(30));
}

#[test]
fn a_deadline_in_the_past_times_out_at_once() {
    assert_eq!(
        park_until(Instant::now() - Duration::from_secs(1)),
        Wake::TimedOut
    );
}

#[test]
fn a_huge_timeout_is_not_clamped_to_a_short_one() {
    // Wake from another thread after 50 ms; the park must not have returned by itself before.
    let w = waker();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        w.wake();
    });
    let start = Instant::now();
    assert_eq!(park_timeout(Duration::MAX), Wake::Woken);
    assert!(start.elapsed() >= Duration::from_millis(40));
    t.join().unwrap();
}

#[test]
fn a_thread_is_woken_from_another_thread() {
    let w = waker();
    let t = std::thread::spawn(move || w.wake());
    park();
    t.join().unwrap();
}

#[test]
fn spurious_std_unparks_do_not_count_as_wake_ups() {
    let me = std::thread::current();
    let t = std::thread::spawn(move || {
        for _ in 0..5 {
            me.unpark();
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    let start = Instant::now();
    assert_eq!(park_timeout(Duration::from_millis(60)), Wake::TimedOut);
    assert!(start.elapsed() >= Duration::from_millis(60));
    t.join().unwrap();
}

/// `spindle_park::with_hook` for these tests.
fn with_hook<R>(hook: &dyn Hook, f: impl FnOnce() -> R) -> R {
    // SAFETY: the tests call it on their own thread's stack, in no coroutine.
    unsafe { spindle_park::with_hook(hook, f) }
}

/// `spindle_park::with_budget` for these tests.
fn with_budget<R>(budget: &Budget, f: impl FnOnce() -> R) -> R {
    // SAFETY: as `with_hook`'s.
    unsafe { spindle_park::with_budget(budget, f) }
}

/// A hook that pretends to be in a task and records what is asked of it.
struct Recording {
    in_task: Cell<bool>,
    parks: Cell<usize>,
    wakes: Arc<AtomicUsize>,
}

impl Recording {
    fn new(in_task: bool) -> Recording {
        Recording {
            in_task: Cell::new(in_task),
            parks: Cell::new(0),
            wakes: Arc::default(),
        }
    }
}

/// A hook that counts the times it is asked about the budget.
#[derive(Default)]
struct BudgetAsked(Cell<usize>);

impl Hook for BudgetAsked {
    fn in_task(&self) -> bool {
        true
    }
    fn park(&self, _: Option<Instant>) -> Wake {
        Wake::Woken
    }
    fn waker(&self) -> Waker {
        Waker::noop().clone()
    }
    fn consume_budget(&self) {
        self.0.set(self.0.get() + 1);
    }
}

#[test]
fn without_a_budget_every_operation_asks_the_hook() {
    let hook = BudgetAsked::default();
    with_hook(&hook, || {
        for _ in 0..5 {
            consume_budget();
        }
    });
    assert_eq!(hook.0.get(), 5);
    consume_budget(); // no hook: nothing to ask
    assert_eq!(hook.0.get(), 5);
}

#[test]
fn a_budget_asks_the_hook_only_at_its_last_unit_and_when_exhausted() {
    let hook = BudgetAsked::default();
    let budget = Budget::new();
    with_hook(&hook, || {
        with_budget(&budget, || {
            // Empty: asks.
            consume_budget();
            assert_eq!(hook.0.get(), 1);
            budget.refill(10);
            for _ in 0..9 {
                consume_budget();
            }
            assert_eq!(hook.0.get(), 1, "nine of ten units taken without asking");
            assert_eq!(budget.left(), 1);
            consume_budget();
            assert_eq!(hook.0.get(), 2, "the last unit is the hook's to decide on");
            budget.refill(100);
            consume_budget();
            // Exhausted from another thread (a monitor): the next operation asks.
            std::thread::scope(|s| {
                s.spawn(|| budget.exhaust());
            });
            consume_budget();
            assert_eq!(hook.0.get(), 3);
            assert_eq!(budget.left(), 0);
        })
    });
}

#[test]
fn budgets_nest_and_are_restored_after_a_panic() {
    let hook = BudgetAsked::default();
    let (outer, inner) = (Budget::new(), Budget::new());
    outer.refill(50);
    inner.refill(50);
    with_hook(&hook, || {
        with_budget(&outer, || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                with_budget(&inner, || {
                    consume_budget();
                    panic!("boom");
                })
            }));
            assert!(r.is_err());
            consume_budget(); // counts against the outer budget again
        });
        consume_budget(); // none installed: asks the hook
    });
    assert_eq!((outer.left(), inner.left(), hook.0.get()), (49, 49, 1));
}

struct CountingWake(Arc<AtomicUsize>);
impl std::task::Wake for CountingWake {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Hook for Recording {
    fn in_task(&self) -> bool {
        self.in_task.get()
    }
    fn park(&self, deadline: Option<Instant>) -> Wake {
        self.parks.set(self.parks.get() + 1);
        if deadline.is_some() {
            Wake::TimedOut
        } else {
            Wake::Woken
        }
    }
    fn waker(&self) -> Waker {
        Waker::from(Arc::new(CountingWake(self.wakes.clone())))
    }
}

#[test]
fn inside_a_task_the_hook_parks_and_makes_the_waker() {
    let hook = Recording::new(true);
    with_hook(&hook, || {
        assert!(spindle_park::in_task());
        park();
        assert_eq!(park_timeout(Duration::from_secs(1)), Wake::TimedOut);
        waker().wake();
    });
    assert_eq!(hook.parks.get(), 2);
    assert_eq!(hook.wakes.load(Ordering::SeqCst), 1);
    assert!(!spindle_park::in_task(), "the hook is gone after with_hook");
}

#[test]
fn outside_a_task_a_hooked_thread_parks_the_thread() {
    let hook = Recording::new(false);
    with_hook(&hook, || {
        assert!(!spindle_park::in_task());
        waker().wake();
        assert_eq!(park_timeout(Duration::from_secs(10)), Wake::Woken);
    });
    assert_eq!(hook.parks.get(), 0);
    assert_eq!(hook.wakes.load(Ordering::SeqCst), 0);
}

#[test]
fn hooks_nest_and_are_restored_after_a_panic() {
    let outer = Recording::new(true);
    let inner = Recording::new(true);
    with_hook(&outer, || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            with_hook(&inner, || {
                park();
                panic!("boom");
            })
        }));
        assert!(r.is_err());
        park(); // goes to the outer hook again
    });
    assert_eq!(inner.parks.get(), 1);
    assert_eq!(outer.parks.get(), 1);
}

/// A hook whose `will_wake` says yes to every waker.
struct WillWake {
    in_task: bool,
}

impl Hook for WillWake {
    fn in_task(&self) -> bool {
        self.in_task
    }
    fn park(&self, _: Option<Instant>) -> Wake {
        Wake::Woken
    }
    fn waker(&self) -> Waker {
        Waker::noop().clone()
    }
    fn will_wake(&self, _: &Waker) -> bool {
        assert!(self.in_task, "will_wake asked outside a task");
        true
    }
}

#[test]
fn is_current_waker_asks_the_hook_only_in_a_task() {
    let w = Waker::noop().clone();
    assert!(with_hook(&WillWake { in_task: true }, || {
        spindle_park::is_current_waker(&w)
    }));
    assert!(!with_hook(&WillWake { in_task: false }, || {
        spindle_park::is_current_waker(&w)
    }));
    assert!(!spindle_park::is_current_waker(&w));
}
