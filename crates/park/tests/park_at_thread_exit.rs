//! Parking a plain thread from a thread-local destructor.
//!
//! `thread_parker()` falls back to a *fresh* `ThreadParker` on every call once the thread's
//! `THREAD_PARKER` has been destroyed (a thread-local destructor that runs after it). A waker
//! made by one call and a `park` by the next then use two different permits: the wake sets the
//! waker's permit and unparks the thread, the park looks at its own permit, never set, and
//! parks again — a lost wake-up (a hang without a deadline). Its comment says the fallback
//! "still works (a waker made here and used later finds the same thread)"; it finds the thread
//! but not the permit.
//!
//! Correct behaviour: a waker taken and woken (from another thread) while a thread-local
//! destructor waits makes that wait return `Woken`, as anywhere else on the thread.

// Not on Windows: a thread-local destructor runs there under the loader lock, and the
// thread it spawns to wake it cannot start until that lock is free (a deadlock of the test's
// own making, seen under Wine).
#[cfg(not(windows))]
mod thread_local_destruction {
    use std::sync::mpsc;
    use std::time::Duration;

    use spindle_park::{Wake, park_timeout, waker};

    /// Waits (park) in its destructor for a wake from another thread, and reports what it got.
    struct WaitsInDrop(mpsc::Sender<Wake>);

    impl Drop for WaitsInDrop {
        fn drop(&mut self) {
            let w = waker();
            let t = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                w.wake();
            });
            // Generous: the wake comes after 20 ms.
            let got = park_timeout(Duration::from_secs(3));
            t.join().unwrap();
            let _ = self.0.send(got);
        }
    }

    thread_local! {
        static WAITER: std::cell::RefCell<Option<WaitsInDrop>> = const { std::cell::RefCell::new(None) };
    }

    #[test]
    fn a_wait_in_a_thread_local_destructor_is_woken() {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            // This thread-local first, then the park crate's (its first use below): thread-local
            // destructors run in reverse order, so the parker is gone when `WaitsInDrop` runs.
            WAITER.with(|w| *w.borrow_mut() = Some(WaitsInDrop(tx)));
            waker().wake();
            assert_eq!(park_timeout(Duration::from_secs(1)), Wake::Woken);
        })
        .join()
        .unwrap();
        let got = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the destructor reported");
        assert_eq!(
            got,
            Wake::Woken,
            "a wake from another thread was lost during thread-local destruction"
        );
    }

    /// The same through `block_on`: a future woken from another thread, awaited in a thread-local
    /// destructor, is never polled again (without a deadline, the thread hangs for ever).
    struct BlocksOnInDrop(mpsc::Sender<bool>);

    impl Drop for BlocksOnInDrop {
        fn drop(&mut self) {
            use std::sync::{Arc, Mutex};
            use std::task::{Poll, Waker};
            let state: Arc<Mutex<(bool, Option<Waker>)>> = Arc::default();
            let s2 = state.clone();
            let t = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                let w = {
                    let mut s = s2.lock().unwrap();
                    s.0 = true;
                    s.1.take()
                };
                if let Some(w) = w {
                    w.wake();
                }
            });
            let tx = self.0.clone();
            // Report "not finished" after 3 s from a watchdog, since block_on would hang for ever.
            let watchdog_tx = tx.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_secs(3));
                let _ = watchdog_tx.send(false);
            });
            spindle_park::block_on(std::future::poll_fn(|cx| {
                let mut s = state.lock().unwrap();
                if s.0 {
                    Poll::Ready(())
                } else {
                    s.1 = Some(cx.waker().clone());
                    Poll::Pending
                }
            }));
            t.join().unwrap();
            let _ = tx.send(true);
        }
    }

    thread_local! {
        static BLOCKER: std::cell::RefCell<Option<BlocksOnInDrop>> = const { std::cell::RefCell::new(None) };
    }

    #[test]
    fn block_on_in_a_thread_local_destructor_finishes() {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            BLOCKER.with(|b| *b.borrow_mut() = Some(BlocksOnInDrop(tx)));
            waker().wake();
            assert_eq!(park_timeout(Duration::from_secs(1)), Wake::Woken);
        });
        let finished = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the destructor or its watchdog reported");
        assert!(
            finished,
            "block_on in a thread-local destructor hung: the future's wake-up was lost"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// `spin::SpinGuard` is `Sync` whenever `T: Send`.
//
// The guard holds only `&SpinLock<T>`, so its auto traits follow `SpinLock<T>: Sync`, which the
// crate grants for `T: Send`. A shared `&SpinGuard<T>` then crosses threads and derefs to `&T`
// on each: for `T = Cell<_>` (Send, not Sync) that is an unsynchronised data race from safe
// code. `std::sync::MutexGuard` is `Sync` only for `T: Sync` for exactly this reason.
//
// Correct: `SpinGuard<'_, T>: Sync` only if `T: Sync` (e.g. `unsafe impl<T: Sync> Sync for
// SpinGuard<'_, T> {}` plus a `PhantomData<*const ()>`-style marker to drop the auto impl, or
// a field of type `&'a UnsafeCell<T>`-like that carries `T`'s own `Sync`).

use std::cell::Cell;
use std::marker::PhantomData;

use spindle_park::spin::SpinGuard;

/// Autoref probe: the inherent `is_sync` applies only when `T: Sync`; otherwise the trait's.
struct Probe<T: ?Sized>(PhantomData<T>);
trait NotSync {
    fn is_sync(&self) -> bool {
        false
    }
}
impl<T: ?Sized> NotSync for Probe<T> {}
impl<T: ?Sized + Sync> Probe<T> {
    fn is_sync(&self) -> bool {
        true
    }
}

// (When found, this compiled — two threads using one `Cell` through a shared guard, a data
// race — and no longer does:
//     let guard = lock.lock();
//     std::thread::scope(|s| for _ in 0..2 { s.spawn(|| guard.set(guard.get() + 1)); });
// the probe below checks the same at run time.)

#[test]
fn a_spin_guard_of_a_non_sync_value_is_not_sync() {
    assert!(
        !Probe::<Cell<u64>>(PhantomData).is_sync(),
        "probe sanity: Cell is not Sync"
    );
    assert!(
        !Probe::<SpinGuard<'static, Cell<u64>>>(PhantomData).is_sync(),
        "SpinGuard<Cell<u64>> is Sync: a shared guard hands &Cell to several threads at once"
    );
    assert!(
        Probe::<SpinGuard<'static, u64>>(PhantomData).is_sync(),
        "a guard of a Sync value stays Sync"
    );
}
