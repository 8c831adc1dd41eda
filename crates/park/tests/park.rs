//! Parking on plain threads and through an installed hook.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Waker;
use std::time::{Duration, Instant};

use spindle_park::{Hook, Wake, park, park_timeout, park_until, waker, with_hook};

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

/// A hook that pretends to be in a task and records what is asked of it.
struct Recording {
    in_task: Cell<bool>,
    parks: Cell<usize>,
    wakes: Arc<AtomicUsize>,
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
    let hook = Recording {
        in_task: Cell::new(true),
        parks: Cell::new(0),
        wakes: Arc::default(),
    };
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
    let hook = Recording {
        in_task: Cell::new(false),
        parks: Cell::new(0),
        wakes: Arc::default(),
    };
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
    let outer = Recording {
        in_task: Cell::new(true),
        parks: Cell::new(0),
        wakes: Arc::default(),
    };
    let inner = Recording {
        in_task: Cell::new(true),
        parks: Cell::new(0),
        wakes: Arc::default(),
    };
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
