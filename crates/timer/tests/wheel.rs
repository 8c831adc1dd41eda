//! Targeted tests of the timing wheel: ordering, cascades at level boundaries, far deadlines,
//! the horizon, cancellation around cascades, stale keys, `clear`, robustness.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use spindle_timer::{LEVELS, TimerError, TimerKey, TimerWheel};

const NS: Duration = Duration::from_nanos(1);
const MS: Duration = Duration::from_millis(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Advances to `now` and returns what fired.
fn fire<T>(wheel: &mut TimerWheel<T>, now: Instant) -> Vec<T> {
    let mut out = Vec::new();
    let n = wheel.advance(now, |_, v| out.push(v));
    assert_eq!(n, out.len());
    out
}

/// Walks a wheel holding one timer due at `deadline` by sleeping until `next_deadline` each time,
/// as a runtime would; returns the number of wake-ups it took to fire it.
fn walk_to(wheel: &mut TimerWheel<u64>, deadline: Instant) -> usize {
    let mut wakeups = 0;
    loop {
        let next = wheel.next_deadline().expect("timer lost");
        assert!(next <= deadline, "next_deadline after the deadline");
        wakeups += 1;
        let fired = fire(wheel, next);
        if !fired.is_empty() {
            assert_eq!(next, deadline, "fired early");
            return wakeups;
        }
        assert!(wakeups <= LEVELS, "too many early wake-ups");
    }
}

#[test]
fn fires_in_insertion_order_within_a_tick() {
    let origin = Instant::now();
    let mut wheel = TimerWheel::new(origin);
    // Different nanoseconds, same tick (rounded up to 5 ms), plus a far-level tick.
    for (i, sub) in [900_000u64, 100, 4_000_001, 4_500_000, 4_999_999]
        .iter()
        .enumerate()
    {
        wheel.insert(origin + ms(4) + Duration::from_nanos(*sub % 1_000_000), i);
    }
    for i in 5..10 {
        wheel.insert(origin + ms(5_000_000), i);
    }
    assert_eq!(fire(&mut wheel, origin + ms(5)), [0, 1, 2, 3, 4]);
    // Those went through several cascades and kept their order.
    assert_eq!(fire(&mut wheel, origin + ms(5_000_000)), [5, 6, 7, 8, 9]);
}

#[test]
fn fires_in_deadline_order_across_ticks_and_levels() {
    let origin = Instant::now();
    let mut wheel = TimerWheel::with_tick(origin, NS).unwrap();
    let ticks: Vec<u64> = (0..200u64)
        .map(|i| (i * 7_919_993) % 300_000 + 1)
        .rev()
        .collect();
    for &t in &ticks {
        wheel.insert(origin + Duration::from_nanos(t), t);
    }
    let mut want = ticks.clone();
    want.sort_unstable();
    assert_eq!(fire(&mut wheel, origin + Duration::from_secs(1)), want);
}

#[test]
fn cascades_at_level_boundaries() {
    let origin = Instant::now();
    let mut boundaries = Vec::new();
    for k in 0..LEVELS as u32 {
        let p = 1u64 << (6 * k);
        boundaries.extend([p - 1, p, p + 1]);
    }
    boundaries.extend([u64::MAX - 1, u64::MAX]);
    for &t in &boundaries {
        let deadline = origin + Duration::from_nanos(t);
        // Step by step.
        let mut wheel = TimerWheel::with_tick(origin, NS).unwrap();
        let key = wheel.insert(deadline, t);
        assert_eq!(wheel.deadline(key), Some(deadline));
        if t > 0 {
            assert!(
                fire(&mut wheel, deadline - NS).is_empty(),
                "{t} fired early"
            );
        }
        assert_eq!(fire(&mut wheel, deadline), [t], "{t}");
        assert!(wheel.is_empty());
        // As a runtime would: sleep until next_deadline, advance, repeat.
        let mut wheel = TimerWheel::with_tick(origin, NS).unwrap();
        wheel.insert(deadline, t);
        let wakeups = walk_to(&mut wheel, deadline);
        assert_eq!(
            wakeups, 1,
            "next_deadline is exact when nothing was cancelled ({t})"
        );
        // From a clock just before the boundary.
        let mut wheel = TimerWheel::with_tick(origin, NS).unwrap();
        if t > 0 {
            fire(&mut wheel, deadline - NS);
        }
        wheel.insert(deadline, t);
        assert_eq!(wheel.next_deadline(), Some(deadline));
        assert_eq!(fire(&mut wheel, deadline), [t]);
    }
    // All at once, in one jump to the end of time: deadline order.
    let mut wheel = TimerWheel::with_tick(origin, NS).unwrap();
    for &t in boundaries.iter().rev() {
        wheel.insert(origin + Duration::from_nanos(t), t);
    }
    assert_eq!(
        fire(&mut wheel, origin + Duration::from_nanos(u64::MAX)),
        boundaries
    );
}

#[test]
fn ten_year_timer() {
    let origin = Instant::now();
    let mut wheel = TimerWheel::new(origin);
    let ten_years = Duration::from_secs(10 * 365 * 24 * 3600);
    let key = wheel.insert(origin + ten_years, 10);
    let near = wheel.insert(origin + ms(3), 3);
    assert_eq!(wheel.deadline(key), Some(origin + ten_years));
    assert_eq!(fire(&mut wheel, origin + ms(3)), [3]);
    assert_eq!(wheel.cancel(near), None);
    assert_eq!(wheel.next_deadline(), Some(origin + ten_years));
    // A year at a time.
    for year in 1..10 {
        assert!(fire(&mut wheel, origin + ten_years / 10 * year).is_empty());
    }
    assert!(fire(&mut wheel, origin + ten_years - NS).is_empty());
    assert_eq!(wheel.next_deadline(), Some(origin + ten_years));
    assert_eq!(fire(&mut wheel, origin + ten_years), [10]);
    assert!(wheel.is_empty());
}

#[test]
fn far_deadlines_are_kept_exactly() {
    let origin = Instant::now();
    // The last tick of a 1 ms wheel, ~584 million years away.
    let mut wheel = TimerWheel::new(origin);
    let last = Duration::from_millis(u64::MAX);
    if let Some(deadline) = origin.checked_add(last) {
        assert_eq!(wheel.horizon(), Some(deadline));
        let key = wheel.insert(deadline, 1);
        assert_eq!(wheel.deadline(key), Some(deadline));
        assert_eq!(wheel.next_deadline(), Some(deadline));
        assert!(fire(&mut wheel, deadline - NS).is_empty());
        assert_eq!(fire(&mut wheel, deadline + Duration::from_secs(5)), [1]);
    }
    // `u64::MAX / 4` seconds away, with a 1 s tick.
    let mut wheel = TimerWheel::with_tick(origin, Duration::from_secs(1)).unwrap();
    if let Some(deadline) = origin.checked_add(Duration::from_secs(u64::MAX / 4)) {
        let key = wheel.insert(deadline, 2);
        assert_eq!(wheel.deadline(key), Some(deadline));
        assert_eq!(wheel.next_deadline(), Some(deadline));
        assert!(fire(&mut wheel, deadline - NS).is_empty());
        assert_eq!(fire(&mut wheel, deadline), [2]);
    }
    // Same through insert_after, which needs no representable `Instant` for the deadline.
    let mut wheel = TimerWheel::with_tick(origin, Duration::from_secs(1)).unwrap();
    let key = wheel.insert_after(origin, Duration::from_secs(u64::MAX / 4), 3);
    assert!(wheel.contains(key));
    assert_eq!(
        wheel.deadline(key),
        origin.checked_add(Duration::from_secs(u64::MAX / 4))
    );
}

#[test]
fn beyond_the_horizon_never_fires() {
    let origin = Instant::now();
    // A 1 ns wheel's horizon is ~584 years away; Instant can go further.
    let mut wheel = TimerWheel::with_tick(origin, NS).unwrap();
    let horizon = origin + Duration::from_nanos(u64::MAX);
    assert_eq!(wheel.horizon(), Some(horizon));
    let beyond = horizon + NS;
    let never = wheel.insert(beyond, "never");
    let last = wheel.insert(horizon, "last");
    let after = wheel.insert_after(origin, Duration::from_secs(600 * 365 * 86400), "after");
    assert_eq!(wheel.len(), 3);
    assert!(wheel.contains(never));
    assert_eq!(wheel.deadline(never), None);
    assert_eq!(wheel.deadline(after), None);
    assert_eq!(wheel.deadline(last), Some(horizon));
    assert_eq!(wheel.next_deadline(), Some(horizon));
    assert_eq!(
        fire(&mut wheel, beyond + Duration::from_secs(1 << 40)),
        ["last"]
    );
    assert_eq!(wheel.next_deadline(), None);
    assert_eq!(wheel.len(), 2);
    assert_eq!(wheel.cancel(never), Some("never"));
    assert_eq!(wheel.clear(), ["after"]);
}

#[test]
fn insert_after_saturates_to_never() {
    let origin = Instant::now();
    let mut wheel = TimerWheel::new(origin);
    let now = origin + ms(10);
    let forever = wheel.insert_after(now, Duration::MAX, 0);
    let soon = wheel.insert_after(now, ms(5), 1);
    assert_eq!(wheel.deadline(soon), Some(origin + ms(15)));
    assert!(wheel.contains(forever));
    assert_eq!(wheel.deadline(forever), None);
    assert_eq!(wheel.next_deadline(), Some(origin + ms(15)));
    assert_eq!(wheel.len(), 2);
    let end = origin.checked_add(Duration::from_secs(1 << 50)).unwrap();
    assert_eq!(fire(&mut wheel, end), [1]);
    assert_eq!(wheel.next_deadline(), None);
    assert_eq!(wheel.len(), 1);
    assert_eq!(wheel.cancel(forever), Some(0));
    assert!(wheel.is_empty());
    // From a `now` before the origin: exact, not shifted to the origin.
    let key = wheel.insert_after(origin - ms(3), ms(5), 2);
    assert_eq!(wheel.deadline(key), Some(origin + ms(2)));
    assert_eq!(fire(&mut wheel, end), [2]);
    let mut wheel = TimerWheel::new(origin);
    let key = wheel.insert_after(origin - ms(3), ms(5), 2);
    assert_eq!(wheel.deadline(key), Some(origin + ms(2)));
    let key = wheel.insert_after(origin - ms(3), ms(1), 3);
    assert_eq!(wheel.deadline(key), Some(origin));
}

#[test]
fn deadlines_round_up_to_the_tick() {
    let origin = Instant::now();
    let mut wheel = TimerWheel::new(origin);
    let key = wheel.insert(origin + NS, 1);
    assert_eq!(wheel.deadline(key), Some(origin + MS));
    assert!(fire(&mut wheel, origin + MS - NS).is_empty());
    assert_eq!(fire(&mut wheel, origin + MS), [1]);
    // Before the origin: rounded up to it.
    let mut wheel = TimerWheel::new(origin);
    let key = wheel.insert(origin - ms(5), 2);
    assert_eq!(wheel.deadline(key), Some(origin));
    assert_eq!(fire(&mut wheel, origin), [2]);
    // An odd tick.
    let tick = Duration::from_nanos(7);
    let mut wheel = TimerWheel::with_tick(origin, tick).unwrap();
    let key = wheel.insert(origin + Duration::from_nanos(15), 3);
    assert_eq!(wheel.deadline(key), Some(origin + Duration::from_nanos(21)));
    assert!(fire(&mut wheel, origin + Duration::from_nanos(20)).is_empty());
    assert_eq!(fire(&mut wheel, origin + Duration::from_nanos(21)), [3]);
}

#[test]
fn past_deadline_fires_at_the_next_advance() {
    let origin = Instant::now();
    let mut wheel = TimerWheel::new(origin);
    wheel.insert(origin + ms(200), 200);
    assert!(fire(&mut wheel, origin + ms(100)).is_empty());
    let b = wheel.insert(origin + ms(50), 50);
    let a = wheel.insert(origin + ms(30), 30);
    wheel.insert(origin + ms(100), 100);
    assert_eq!(wheel.deadline(a), Some(origin + ms(30)));
    assert_eq!(wheel.deadline(b), Some(origin + ms(50)));
    // Not later than any pending deadline.
    assert_eq!(wheel.next_deadline(), Some(origin + ms(30)));
    // Even with an earlier `now`: the wheel's clock is at 100 ms already. Insertion order.
    assert_eq!(fire(&mut wheel, origin + ms(10)), [50, 30, 100]);
    assert_eq!(wheel.next_deadline(), Some(origin + ms(200)));
    assert_eq!(fire(&mut wheel, origin + ms(200)), [200]);
}

#[test]
fn advancing_backwards_moves_nothing() {
    let origin = Instant::now();
    let mut wheel = TimerWheel::new(origin);
    wheel.insert(origin + ms(100), 1);
    assert!(fire(&mut wheel, origin + ms(50)).is_empty());
    assert_eq!(wheel.now(), Some(origin + ms(50)));
    assert!(fire(&mut wheel, origin + ms(20)).is_empty());
    assert!(fire(&mut wheel, origin - ms(20)).is_empty());
    assert_eq!(wheel.now(), Some(origin + ms(50)));
    assert_eq!(wheel.next_deadline(), Some(origin + ms(100)));
    assert_eq!(fire(&mut wheel, origin + ms(100)), [1]);
}

#[test]
fn cancel_during_and_after_cascade() {
    let origin = Instant::now();
    let mut wheel = TimerWheel::with_tick(origin, NS).unwrap();
    // 100 timers in one level-2 slot ([8192, 12288) ticks).
    let keys: Vec<(TimerKey, u64)> = (0..100u64)
        .map(|i| {
            let t = 8192 + i * 40;
            (wheel.insert(origin + Duration::from_nanos(t), t), t)
        })
        .collect();
    // Cancel some before the cascade.
    for (key, t) in keys.iter().step_by(5) {
        assert_eq!(wheel.cancel(*key), Some(*t));
    }
    // Into the slot: cascaded to levels 1/0, nothing due yet but the first few.
    let fired = fire(&mut wheel, origin + Duration::from_nanos(8192 + 100));
    assert_eq!(fired, [8192 + 40, 8192 + 80]);
    // Cancel some after the cascade (and the fired and cancelled ones again: None).
    for (i, (key, t)) in keys.iter().enumerate() {
        let got = wheel.cancel(*key);
        if i % 5 == 0 || i < 3 {
            assert_eq!(got, None);
        } else if i % 3 == 0 {
            assert_eq!(got, Some(*t));
        } else {
            // Put it back: cancel and re-insert at the same deadline.
            assert_eq!(got, Some(*t));
            wheel.insert(origin + Duration::from_nanos(*t), *t);
        }
    }
    let want: Vec<u64> = keys
        .iter()
        .enumerate()
        .filter(|&(i, _)| i % 5 != 0 && i >= 3 && i % 3 != 0)
        .map(|(_, &(_, t))| t)
        .collect();
    assert_eq!(wheel.len(), want.len());
    assert_eq!(fire(&mut wheel, origin + Duration::from_secs(1)), want);
    assert!(wheel.is_empty());
    assert_eq!(wheel.next_deadline(), None);
}

#[test]
fn next_deadline_after_cancel_is_a_lower_bound() {
    let origin = Instant::now();
    let mut wheel = TimerWheel::new(origin);
    // Both in level 1, slot 1 (ticks 64..128).
    let first = wheel.insert(origin + ms(100), 100);
    wheel.insert(origin + ms(120), 120);
    wheel.cancel(first);
    let next = wheel.next_deadline().unwrap();
    assert!(next <= origin + ms(120));
    assert!(next >= origin + ms(64), "outside the documented bound");
    // One early wake-up cascades the slot; then it is exact.
    assert!(fire(&mut wheel, next).is_empty());
    assert_eq!(wheel.next_deadline(), Some(origin + ms(120)));
    assert_eq!(fire(&mut wheel, origin + ms(120)), [120]);
}

#[test]
fn stale_keys_after_slab_reuse() {
    let origin = Instant::now();
    let mut wheel = TimerWheel::new(origin);
    let a = wheel.insert(origin + ms(10), "a");
    assert_eq!(wheel.cancel(a), Some("a"));
    assert_eq!(wheel.cancel(a), None);
    let b = wheel.insert(origin + ms(20), "b");
    assert_ne!(a, b, "same slot, new generation");
    assert_eq!(wheel.cancel(a), None);
    assert!(!wheel.contains(a));
    assert_eq!(wheel.deadline(a), None);
    assert_eq!(wheel.deadline(b), Some(origin + ms(20)));
    assert_eq!(fire(&mut wheel, origin + ms(20)), ["b"]);
    assert_eq!(wheel.cancel(b), None);
    let c = wheel.insert(origin + ms(30), "c");
    assert_eq!(wheel.cancel(a), None);
    assert_eq!(wheel.cancel(b), None);
    assert_eq!(wheel.len(), 1);
    assert_eq!(wheel.cancel(c), Some("c"));
    // The keys fired by `advance` are the ones `insert` returned.
    let d = wheel.insert(origin + ms(40), "d");
    let mut got = Vec::new();
    wheel.advance(origin + ms(40), |k, v| got.push((k, v)));
    assert_eq!(got, [(d, "d")]);
}

#[test]
fn slab_is_reused_without_growing() {
    let origin = Instant::now();
    let mut wheel = TimerWheel::new(origin);
    // 1000 pending plus one inserted and cancelled at a time.
    wheel.reserve(1001);
    let cap = wheel.capacity();
    assert!(cap >= 1001);
    let keys: Vec<_> = (0..1000u64)
        .map(|i| wheel.insert(origin + ms(i * 37), i))
        .collect();
    for round in 0..1000u64 {
        let key = wheel.insert(origin + ms(round * 1009), round);
        wheel.cancel(key).unwrap();
    }
    assert_eq!(wheel.capacity(), cap);
    for key in keys {
        wheel.cancel(key).unwrap();
    }
    for i in 0..1000u64 {
        wheel.insert(origin + ms(i), i);
    }
    assert_eq!(wheel.capacity(), cap);
}

#[test]
fn clear_returns_everything_and_invalidates_keys() {
    let origin = Instant::now();
    let mut wheel = TimerWheel::new(origin);
    fire(&mut wheel, origin + ms(1000));
    let keys = [
        wheel.insert(origin + ms(500), 1), // past: due list
        wheel.insert(origin + ms(1001), 2),
        wheel.insert(origin + Duration::from_secs(1 << 30), 3),
        wheel.insert_after(origin, Duration::MAX, 4), // never
    ];
    let mut values = wheel.clear();
    values.sort_unstable();
    assert_eq!(values, [1, 2, 3, 4]);
    assert!(wheel.is_empty());
    assert_eq!(wheel.next_deadline(), None);
    for key in keys {
        assert!(!wheel.contains(key));
        assert_eq!(wheel.cancel(key), None);
    }
    assert!(fire(&mut wheel, origin + Duration::from_secs(1 << 31)).is_empty());
    // Still usable, clock kept.
    assert_eq!(wheel.now(), Some(origin + Duration::from_secs(1 << 31)));
    let key = wheel.insert(origin + Duration::from_secs((1 << 31) + 1), 5);
    assert!(!keys.contains(&key));
    assert_eq!(
        wheel.next_deadline(),
        Some(origin + Duration::from_secs((1 << 31) + 1))
    );
    assert_eq!(fire(&mut wheel, origin + Duration::from_secs(1 << 32)), [5]);
    assert!(wheel.clear().is_empty());
}

#[test]
fn zero_tick_is_an_error() {
    let err = TimerWheel::<()>::with_tick(Instant::now(), Duration::ZERO).unwrap_err();
    assert_eq!(err, TimerError::ZeroTick);
    assert!(err.to_string().contains("tick"));
    let wheel = TimerWheel::<()>::new(Instant::now());
    assert_eq!(wheel.tick(), MS);
    assert!(format!("{wheel:?}").contains("TimerWheel"));
}

#[test]
fn huge_tick_does_not_panic() {
    let origin = Instant::now();
    let mut wheel = TimerWheel::with_tick(origin, Duration::MAX).unwrap();
    assert_eq!(wheel.horizon(), None);
    let now = wheel.insert(origin, 0);
    let later = wheel.insert(origin + NS, 1);
    let forever = wheel.insert_after(origin + NS, Duration::MAX, 2);
    assert_eq!(wheel.deadline(now), Some(origin));
    // One tick after the origin can't be represented.
    assert_eq!(wheel.deadline(later), None);
    assert!(wheel.contains(later));
    assert_eq!(wheel.next_deadline(), Some(origin));
    assert_eq!(fire(&mut wheel, origin + Duration::from_secs(1 << 40)), [0]);
    assert_eq!(wheel.next_deadline(), None, "no Instant reaches it");
    assert_eq!(wheel.len(), 2);
    assert_eq!(wheel.cancel(forever), Some(2));
    assert_eq!(wheel.clear(), [1]);
}

#[test]
fn a_panicking_callback_leaves_the_wheel_consistent() {
    let origin = Instant::now();
    let mut wheel = TimerWheel::new(origin);
    for i in 0..10u64 {
        wheel.insert(origin + ms(5 + i / 3), i);
    }
    let mut seen = Vec::new();
    let result = catch_unwind(AssertUnwindSafe(|| {
        wheel.advance(origin + ms(100), |_, v| {
            seen.push(v);
            if v == 4 {
                panic!("callback panics");
            }
        });
    }));
    assert!(result.is_err());
    assert_eq!(seen, [0, 1, 2, 3, 4]);
    assert_eq!(wheel.len(), 5);
    assert_eq!(wheel.next_deadline(), Some(origin + ms(6)));
    let late = wheel.insert(origin + ms(7), 99);
    assert_eq!(fire(&mut wheel, origin + ms(6)), [5]);
    assert_eq!(fire(&mut wheel, origin + ms(100)), [6, 7, 8, 99, 9]);
    assert_eq!(wheel.cancel(late), None);
    assert!(wheel.is_empty());
}

#[test]
fn many_timers_in_one_slot() {
    // Under Miri 10,000 timers take a quarter of an hour: 1,000 over 256 deadlines there (still
    // several timers per deadline, all in one coarse slot of the wheel).
    let (timers, spread): (u64, u64) = if cfg!(miri) {
        (1_000, 256)
    } else {
        (10_000, 4096)
    };
    let origin = Instant::now();
    let mut wheel = TimerWheel::new(origin);
    for i in 0..timers {
        wheel.insert(origin + ms(1_000_000 + i % spread), i);
    }
    assert_eq!(wheel.next_deadline(), Some(origin + ms(1_000_000)));
    let fired = fire(&mut wheel, origin + ms(2_000_000));
    assert_eq!(fired.len() as u64, timers);
    assert!(
        fired
            .windows(2)
            .all(|w| (w[0] % spread, w[0]) < (w[1] % spread, w[1]))
    );
}
