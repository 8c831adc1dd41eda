//! Futures and coroutines waiting on each other: `block_on_future` in coroutines and threads,
//! `JoinHandle` as a future.
#![cfg(all(
    feature = "sched-fifo",
    feature = "sched-rr",
    feature = "sched-ws",
    feature = "stack-growable",
    feature = "stack-shared"
))]

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::task::{Context, Poll};
use std::time::Duration;

use common::Signal;
use spindle_rt::{Builder, JoinError, Runtime, block_on_future};

/// Runs `f` on another thread and fails the test if it does not finish in 20 s (a wait that
/// blocked a worker instead of suspending a coroutine would hang).
fn within_20s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(f()).unwrap());
    rx.recv_timeout(Duration::from_secs(20))
        .expect("hung: a future's wait blocked the worker instead of the coroutine")
}

#[test]
fn block_on_future_suspends_only_the_calling_coroutine() {
    let got = within_20s(|| {
        // One worker: if the waiting coroutine blocked the thread, the firing one never runs.
        let rt = Runtime::builder().workers(1).build().unwrap();
        rt.block_on(|| {
            let signal = Signal::default();
            let polls = Arc::new(AtomicUsize::new(0));
            let waiter = {
                let signal = signal.clone();
                let polls = polls.clone();
                spindle_rt::spawn(move || {
                    block_on_future(async move {
                        polls.fetch_add(1, Ordering::SeqCst);
                        signal.await + 1
                    })
                })
            };
            spindle_rt::sleep(Duration::from_millis(20)); // the waiter is parked by now
            assert_eq!(polls.load(Ordering::SeqCst), 1);
            let firing = spindle_rt::spawn(move || signal.fire(41));
            firing.join().unwrap();
            waiter.join().unwrap()
        })
    });
    assert_eq!(got, 42);
}

#[test]
fn block_on_future_on_a_plain_thread_is_woken_from_another_thread() {
    let signal = Signal::default();
    let firing = {
        let signal = signal.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            signal.fire(7);
        })
    };
    assert_eq!(block_on_future(signal), 7);
    firing.join().unwrap();
}

#[test]
fn a_join_handle_is_a_future_of_the_coroutines_result() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    // Awaited from a plain thread.
    let slow = rt.spawn(|| {
        spindle_rt::sleep(Duration::from_millis(20));
        "slow"
    });
    assert_eq!(block_on_future(slow).unwrap(), "slow");
    // Awaited from a coroutine, several at once in one async block.
    let total = rt.block_on(|| {
        let children: Vec<_> = (1..=10u64)
            .map(|i| {
                spindle_rt::spawn(move || {
                    spindle_rt::sleep(Duration::from_millis(i));
                    i
                })
            })
            .collect();
        block_on_future(async move {
            let mut total = 0;
            for child in children {
                total += child.await.unwrap();
            }
            total
        })
    });
    assert_eq!(total, 55);
    // Failures come through as they do from `join`.
    let panicking = rt.spawn(|| -> u32 { panic!("boom") });
    assert!(matches!(
        block_on_future(panicking),
        Err(JoinError::Panicked(_))
    ));
    let parked = rt.spawn(|| spindle_rt::sleep(Duration::from_secs(3600)));
    parked.cancel();
    assert!(matches!(block_on_future(parked), Err(JoinError::Cancelled)));
}

#[test]
fn a_cancelled_coroutine_drops_the_future_it_was_waiting_for() {
    struct DropFlag(Arc<AtomicBool>);
    impl Drop for DropFlag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let rt = Runtime::builder().workers(1).build().unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    let never = Signal::default();
    let waiter = {
        let flag = DropFlag(dropped.clone());
        let never = never.clone();
        rt.spawn(move || {
            block_on_future(async move {
                let _flag = flag;
                never.await
            })
        })
    };
    std::thread::sleep(Duration::from_millis(20));
    waiter.cancel();
    assert!(matches!(waiter.join(), Err(JoinError::Cancelled)));
    assert!(dropped.load(Ordering::SeqCst));
}

/// A future that hands out a pointer to itself while pending (as intrusive waiter lists do),
/// and a second coroutine that reads through that pointer while the first is suspended.
#[test]
fn on_a_copying_stack_a_pending_future_does_not_live_in_the_moving_stack() {
    const MAGIC: u64 = 0x5eed_f00d_cafe_d00d;
    struct SelfExposing {
        magic: u64,
        exposed: Arc<Mutex<Option<usize>>>,
        signal: Signal,
    }
    impl Future for SelfExposing {
        type Output = u32;
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u32> {
            *self.exposed.lock().unwrap() = Some(&self.magic as *const u64 as usize);
            // SAFETY: `signal` is structurally unpinned (never pinned-projected elsewhere).
            let signal = unsafe { &mut self.get_unchecked_mut().signal };
            Pin::new(signal).poll(cx)
        }
    }
    let rt = Runtime::builder().workers(1).build().unwrap();
    let seen = rt.block_on(|| {
        let exposed = Arc::new(Mutex::new(None));
        let signal = Signal::default();
        let waiter = {
            let exposed = exposed.clone();
            let signal = signal.clone();
            // SAFETY: the coroutine lends nothing on its stack to anything that runs while it
            // is suspended: `block_on_owned_future` moves the future to the heap on a copying stack,
            // which is what this test checks.
            let builder = unsafe { Builder::new().shared_stack() };
            builder
                .spawn(move || {
                    assert!(spindle_park::on_copying_stack());
                    let future = SelfExposing {
                        magic: MAGIC,
                        exposed,
                        signal,
                    };
                    spindle_rt::block_on_owned_future(future)
                })
                .unwrap()
        };
        // Another coroutine on the same shared stack: it takes over the region the waiter's
        // bytes occupied, and reads through the exposed pointer meanwhile.
        let reader = {
            let exposed = exposed.clone();
            // SAFETY: this coroutine keeps no pointer into its own stack across a suspension.
            let builder = unsafe { Builder::new().shared_stack() };
            builder
                .spawn(move || {
                    let at = loop {
                        if let Some(at) = *exposed.lock().unwrap() {
                            break at;
                        }
                        spindle_rt::yield_now();
                    };
                    let mut scribble = [0xa5u8; 8192]; // overwrite the shared region
                    std::hint::black_box(&mut scribble);
                    // SAFETY: `at` points into the heap-allocated future, alive while the
                    // waiter is pending (it is: only `signal.fire` below completes it). Were it
                    // on the shared stack, this would read this coroutine's own stack bytes —
                    // still memory we may read, just the wrong value, which the test reports.
                    unsafe { std::ptr::read_volatile(at as *const u64) }
                })
                .unwrap()
        };
        let seen = reader.join().unwrap();
        signal.fire(1);
        assert_eq!(waiter.join().unwrap(), 1);
        seen
    });
    assert_eq!(
        seen, MAGIC,
        "the pending future's bytes moved with the copying stack"
    );
}

/// On a copying stack `block_on_future` cannot tell a future it may move to the heap from one
/// that only points at a future on the stack (`pin!`, `&mut`): it refuses, with a panic that
/// points to `block_on_owned_future` (it used to box the pointer and leave the future, and
/// any waiter node in it, on the stack whose bytes move). A pinned future on an ordinary
/// stack is fine.
#[test]
fn on_a_copying_stack_a_future_that_may_lie_on_the_stack_is_refused() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let (pinned, borrowed, owned, ordinary) = rt.block_on(|| {
        let on_shared = |case: fn() -> u32| {
            // SAFETY: the coroutine lends nothing on its stack to anything that runs while it
            // is suspended (the refused cases are refused before they wait).
            let builder = unsafe { Builder::new().shared_stack() };
            builder.spawn(case).unwrap().join()
        };
        let pinned = on_shared(|| {
            let child = spindle_rt::spawn(|| 1);
            block_on_future(std::pin::pin!(async move { child.await.unwrap() }))
        });
        let borrowed = on_shared(|| {
            let mut child = spindle_rt::spawn(|| 2);
            block_on_future(&mut child).unwrap()
        });
        let owned = on_shared(|| {
            let child = spindle_rt::spawn(|| 3);
            spindle_rt::block_on_owned_future(async move { child.await.unwrap() })
        });
        let child = spindle_rt::spawn(|| 4);
        let ordinary = block_on_future(std::pin::pin!(async move { child.await.unwrap() }));
        (pinned, borrowed, owned, ordinary)
    });
    for refused in [pinned, borrowed] {
        let Err(JoinError::Panicked(payload)) = refused else {
            panic!("refused on a copying stack: {refused:?}")
        };
        let message = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        assert!(message.contains("block_on_owned"), "{message}");
    }
    assert_eq!(owned.unwrap(), 3);
    assert_eq!(ordinary, 4);
}
