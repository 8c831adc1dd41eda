//! Cross-thread wake-ups of a parked driver.
#![cfg(target_os = "linux")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use spindle_io::{Driver, Unpark};
use spindle_io_uring::{UringConfig, UringDriver};

fn drivers() -> Vec<UringDriver> {
    vec![
        UringConfig::new().build().unwrap(),
        UringConfig::new().defer_taskrun(false).build().unwrap(),
    ]
}

#[test]
fn unpark_from_another_thread_wakes_park() {
    for driver in drivers() {
        let unparker = driver.unparker();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            unparker.unpark();
        });
        let start = Instant::now();
        driver.park(Some(Duration::from_secs(10))).unwrap();
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(40), "{waited:?}");
        assert!(waited < Duration::from_secs(5), "{waited:?}");
        t.join().unwrap();
        // The same with no timeout at all.
        let unparker = driver.unparker();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            unparker.unpark();
        });
        driver.park(None).unwrap();
        t.join().unwrap();
    }
}

#[test]
fn unpark_before_park_is_a_token() {
    for driver in drivers() {
        let unparker = driver.unparker();
        unparker.unpark();
        unparker.unpark(); // tokens do not add up
        // A zero-timeout park neither blocks nor consumes the token...
        assert_eq!(driver.park(Some(Duration::ZERO)).unwrap(), 0);
        // ...so the next blocking park returns at once, consuming it.
        let start = Instant::now();
        driver.park(Some(Duration::from_secs(10))).unwrap();
        assert!(start.elapsed() < Duration::from_secs(1));
        // Consumed: now a park waits for its timeout.
        let start = Instant::now();
        driver.park(Some(Duration::from_millis(50))).unwrap();
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(45), "{waited:?}");
    }
}

#[test]
fn park_times_out_and_zero_does_not_block() {
    let driver = UringDriver::new().unwrap();
    let start = Instant::now();
    assert_eq!(driver.park(Some(Duration::from_millis(30))).unwrap(), 0);
    assert!(start.elapsed() >= Duration::from_millis(25));
    let start = Instant::now();
    for _ in 0..1000 {
        driver.park(Some(Duration::ZERO)).unwrap();
    }
    assert!(start.elapsed() < Duration::from_secs(1));
}

/// A zero-timeout park with nothing queued makes no syscall; unparks while the driver is not
/// asleep make none either (checked through the count of enters and the eventfd's silence: a
/// later timed park really waits).
#[test]
fn idle_turns_and_busy_unparks_cost_no_syscall() {
    let driver = UringDriver::new().unwrap();
    driver.park(Some(Duration::ZERO)).unwrap(); // submits the wake-up poll
    let before = driver.stats().enters;
    for _ in 0..100 {
        driver.park(Some(Duration::ZERO)).unwrap();
    }
    assert_eq!(driver.stats().enters, before);
    let unparker = driver.unparker();
    std::thread::spawn(move || {
        for _ in 0..1000 {
            unparker.unpark();
        }
    })
    .join()
    .unwrap();
    // One token, consumed by this park; the eventfd was never written (the driver did not
    // sleep), so the next park waits its full timeout.
    driver.park(Some(Duration::from_secs(5))).unwrap();
    let start = Instant::now();
    driver.park(Some(Duration::from_millis(50))).unwrap();
    assert!(start.elapsed() >= Duration::from_millis(45));
}

/// No lost wake-ups: a thread publishes a counter and unparks, many thousand times, each time
/// waiting until the driver's thread saw it; the driver's thread parks with a long timeout
/// whenever it has seen everything. A lost wake-up shows as a park that runs into its timeout.
#[test]
fn no_lost_wakeups_under_stress() {
    const ROUNDS: u64 = 20_000;
    for defer in [true, false] {
        let sent = Arc::new(AtomicU64::new(0));
        let seen = Arc::new(AtomicU64::new(0));
        let (tx, rx) = mpsc::channel::<Arc<dyn Unpark>>();
        let driver_thread = {
            let (sent, seen) = (sent.clone(), seen.clone());
            std::thread::spawn(move || {
                let driver = UringConfig::new().defer_taskrun(defer).build().unwrap();
                tx.send(driver.unparker()).unwrap();
                let mut slow = 0;
                loop {
                    let s = sent.load(Ordering::Acquire);
                    seen.store(s, Ordering::Release);
                    if s == ROUNDS {
                        break;
                    }
                    let start = Instant::now();
                    driver.park(Some(Duration::from_secs(2))).unwrap();
                    if start.elapsed() >= Duration::from_secs(2) && sent.load(Ordering::Acquire) > s
                    {
                        // A lost wake-up: stop (and release the other thread).
                        slow += 1;
                        seen.store(u64::MAX, Ordering::Release);
                        break;
                    }
                }
                slow
            })
        };
        let unparker = rx.recv().unwrap();
        for i in 1..=ROUNDS {
            sent.store(i, Ordering::Release);
            unparker.unpark();
            // Half the rounds wait for the acknowledgement (the driver sleeps in between), half
            // run ahead (unparks race with parks).
            if seen.load(Ordering::Acquire) == u64::MAX {
                break;
            }
            if i % 2 == 0 {
                while seen.load(Ordering::Acquire) < i {
                    std::hint::spin_loop();
                    std::thread::yield_now();
                }
            }
        }
        let slow = driver_thread.join().unwrap();
        assert_eq!(
            slow, 0,
            "parks that missed a wake-up (defer_taskrun = {defer})"
        );
    }
}
