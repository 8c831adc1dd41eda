//! The wheel against a model: a `BTreeMap<(deadline_tick, seq), value>` of pending timers.
//!
//! Random sequences of inserts (near, far, past, at level boundaries, beyond the horizon; through
//! `insert` and `insert_after`), cancels (of live, fired, cancelled and reused keys), advances
//! (small and huge steps, backwards, to level boundaries, to the end of time) and clears, with
//! several ticks. After every step: the fired timers are exactly the model's expired ones, in the
//! documented order, none early; `len`, `contains`, `deadline`, `now` agree; `next_deadline` is
//! never later than the model's earliest and within the documented bound (exact while nothing
//! was cancelled).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use spindle_timer::{TimerKey, TimerWheel};

/// Where a new timer's deadline lies, relative to the model's clock or to the origin.
#[derive(Clone, Debug)]
enum When {
    /// `ticks` after the clock, plus `sub` nanoseconds (mod the tick).
    Near(u16, u64),
    /// `nanos` before the clock (possibly before the origin).
    Past(u32),
    /// `64^k` ticks after the origin, plus `delta` ticks.
    Boundary(u8, i8),
    /// `ticks` after the origin, plus `sub` nanoseconds.
    Far(u64, u64),
    /// Beyond the horizon by `extra` ticks.
    Huge(u64),
}

#[derive(Clone, Debug)]
enum Op {
    /// Insert with `insert` (or, if `after` is `Some(back)`, with `insert_after` from a `now`
    /// `back` nanoseconds before the clock).
    Insert(When, Option<u32>),
    /// `insert_after(clock, Duration::MAX)`.
    InsertForever,
    /// Cancel the i-th key ever issued (mod their number).
    Cancel(usize),
    /// Advance by a fraction of a few ticks.
    AdvanceSmall(u16),
    /// Advance by up to any number of ticks.
    AdvanceTicks(u64),
    /// "Advance" backwards by so many nanoseconds.
    AdvanceBack(u64),
    /// Advance to `64^k + delta` ticks after the origin.
    AdvanceBoundary(u8, i8),
    /// Advance to the end of the tick range (and past it).
    AdvanceMax(u32),
    Clear,
}

fn when() -> impl Strategy<Value = When> {
    prop_oneof![
        6 => (0u16..300, any::<u64>()).prop_map(|(t, s)| When::Near(t, s)),
        2 => any::<u32>().prop_map(When::Past),
        3 => (0u8..=11, -2i8..=2).prop_map(|(k, d)| When::Boundary(k, d)),
        2 => (any::<u64>(), any::<u64>()).prop_map(|(t, s)| When::Far(t, s)),
        1 => any::<u64>().prop_map(When::Huge),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (when(), prop::option::weighted(0.3, any::<u32>())).prop_map(|(w, a)| Op::Insert(w, a)),
        1 => Just(Op::InsertForever),
        5 => any::<usize>().prop_map(Op::Cancel),
        5 => any::<u16>().prop_map(Op::AdvanceSmall),
        1 => any::<u64>().prop_map(Op::AdvanceTicks),
        1 => (0u64..1 << 40).prop_map(Op::AdvanceBack),
        2 => (0u8..=11, -2i8..=2).prop_map(|(k, d)| Op::AdvanceBoundary(k, d)),
        1 => any::<u32>().prop_map(Op::AdvanceMax),
        1 => Just(Op::Clear),
    ]
}

/// A pending timer in the model.
#[derive(Clone, Debug)]
struct Rec {
    /// Deadline tick; `None` = beyond the horizon.
    deadline: Option<u64>,
    seq: u64,
    /// Inserted with a deadline already reached (fires first, in insertion order).
    due: bool,
}

struct Harness {
    origin: Instant,
    tick: u128,
    wheel: TimerWheel<u64>,
    /// The model clock in ticks.
    clock: u64,
    /// The model clock's exact position in nanoseconds since the origin (for relative ops).
    clock_nanos: i128,
    live: HashMap<TimerKey, Rec>,
    /// `(deadline, seq) -> key`, firing timers only.
    order: BTreeMap<(u64, u64), TimerKey>,
    keys: Vec<TimerKey>,
    seq: u64,
    cancelled_any: bool,
}

/// `origin + nanos` (nanos may be negative), if representable.
fn at(origin: Instant, nanos: i128) -> Option<Instant> {
    let d = duration(nanos.unsigned_abs())?;
    if nanos >= 0 {
        origin.checked_add(d)
    } else {
        origin.checked_sub(d)
    }
}

fn duration(nanos: u128) -> Option<Duration> {
    let secs = u64::try_from(nanos / 1_000_000_000).ok()?;
    Some(Duration::new(secs, (nanos % 1_000_000_000) as u32))
}

/// The slot start of `deadline` at its level relative to `clock`.
fn slot_start(clock: u64, deadline: u64) -> u64 {
    let masked = (clock ^ deadline) | 63;
    let level = (63 - masked.leading_zeros()) / 6;
    let shift = 6 * level;
    deadline >> shift << shift
}

impl Harness {
    fn new(tick: Duration) -> Self {
        // Leave room before the origin for backward steps.
        let origin = Instant::now() + Duration::from_secs(1 << 20);
        Harness {
            origin,
            tick: tick.as_nanos(),
            wheel: TimerWheel::with_tick(origin, tick).unwrap(),
            clock: 0,
            clock_nanos: 0,
            live: HashMap::new(),
            order: BTreeMap::new(),
            keys: Vec::new(),
            seq: 0,
            cancelled_any: false,
        }
    }

    /// Deadline tick of a deadline `nanos` after the origin (rounded up; before it = 0).
    fn ceil_ticks(&self, nanos: i128) -> Option<u64> {
        if nanos <= 0 {
            return Some(0);
        }
        let n = nanos as u128;
        u64::try_from(n.div_ceil(self.tick)).ok()
    }

    fn floor_ticks(&self, nanos: i128) -> u64 {
        if nanos <= 0 {
            return 0;
        }
        u64::try_from(nanos as u128 / self.tick).unwrap_or(u64::MAX)
    }

    fn tick_nanos(&self, ticks: u128) -> i128 {
        // Saturate far beyond anything representable.
        ticks.saturating_mul(self.tick).min(i128::MAX as u128 / 2) as i128
    }

    fn when_nanos(&self, when: &When) -> i128 {
        let tick = self.tick as i128;
        match *when {
            When::Near(t, sub) => {
                self.tick_nanos(self.clock as u128 + t as u128) + (sub as u128 % self.tick) as i128
            }
            When::Past(back) => self.clock_nanos - back as i128,
            When::Boundary(k, delta) => {
                let base: u128 = if k >= 11 {
                    u64::MAX as u128
                } else {
                    1u128 << (6 * k)
                };
                self.tick_nanos(base) + delta as i128 * tick
            }
            When::Far(t, sub) => self.tick_nanos(t as u128) + (sub as u128 % self.tick) as i128,
            When::Huge(extra) => self.tick_nanos(u64::MAX as u128 + 1 + extra as u128),
        }
    }

    fn record(&mut self, key: TimerKey, deadline: Option<u64>) {
        let seq = self.seq;
        self.seq += 1;
        let due = deadline.is_some_and(|d| d <= self.clock);
        assert!(
            self.live.insert(key, Rec { deadline, seq, due }).is_none(),
            "key reused while live"
        );
        if let Some(d) = deadline {
            self.order.insert((d, seq), key);
        }
        self.keys.push(key);
    }

    fn step(&mut self, op: &Op) {
        match op {
            Op::Insert(when, after) => {
                let nanos = self.when_nanos(when);
                match after {
                    None => {
                        if let Some(deadline) = at(self.origin, nanos) {
                            let key = self.wheel.insert(deadline, self.seq);
                            let d = self.ceil_ticks(nanos);
                            self.record(key, d);
                        }
                    }
                    Some(back) => {
                        let now_nanos = self.clock_nanos - *back as i128;
                        let Some(now) = at(self.origin, now_nanos) else {
                            return;
                        };
                        let delay_nanos = (nanos - now_nanos).max(0) as u128;
                        let (delay, d) = match duration(delay_nanos) {
                            Some(delay) => {
                                let total = now_nanos + delay_nanos as i128;
                                let fits = total <= Duration::MAX.as_nanos() as i128;
                                (delay, if fits { self.ceil_ticks(total) } else { None })
                            }
                            None => (Duration::MAX, None),
                        };
                        let key = self.wheel.insert_after(now, delay, self.seq);
                        self.record(key, d);
                    }
                }
            }
            Op::InsertForever => {
                let now = at(self.origin, self.clock_nanos).unwrap();
                let key = self.wheel.insert_after(now, Duration::MAX, self.seq);
                self.record(key, None);
            }
            Op::Cancel(i) => {
                if self.keys.is_empty() {
                    return;
                }
                let key = self.keys[i % self.keys.len()];
                let got = self.wheel.cancel(key);
                match self.live.remove(&key) {
                    Some(rec) => {
                        assert_eq!(got, Some(rec.seq));
                        if let Some(d) = rec.deadline {
                            self.order.remove(&(d, rec.seq));
                        }
                        self.cancelled_any = true;
                    }
                    None => assert_eq!(got, None, "a stale key cancelled something"),
                }
            }
            Op::AdvanceSmall(f) => {
                let nanos = self.clock_nanos + (*f as u128 * self.tick / 4096) as i128;
                self.advance(nanos);
            }
            Op::AdvanceTicks(t) => {
                let nanos = self.clock_nanos.saturating_add(self.tick_nanos(*t as u128));
                self.advance(nanos);
            }
            Op::AdvanceBack(b) => self.advance(self.clock_nanos - *b as i128),
            Op::AdvanceBoundary(k, delta) => {
                let nanos = self.when_nanos(&When::Boundary(*k, *delta));
                self.advance(nanos);
            }
            Op::AdvanceMax(extra) => {
                let nanos = self.tick_nanos(u64::MAX as u128) + *extra as i128;
                self.advance(nanos);
            }
            Op::Clear => {
                let mut got = self.wheel.clear();
                got.sort_unstable();
                let mut want: Vec<u64> = self.live.values().map(|r| r.seq).collect();
                want.sort_unstable();
                assert_eq!(got, want);
                self.live.clear();
                self.order.clear();
            }
        }
    }

    fn advance(&mut self, nanos: i128) {
        let Some(now) = at(self.origin, nanos) else {
            return;
        };
        let tick = self.floor_ticks(nanos);
        // The wheel's clock never goes back.
        if tick >= self.clock {
            self.clock = tick;
            self.clock_nanos = self.clock_nanos.max(nanos);
        }
        let mut fired = Vec::new();
        let n = self
            .wheel
            .advance(now, |key, value| fired.push((key, value)));
        assert_eq!(n, fired.len());

        // Expected: the due timers in insertion order, then the others by (deadline, seq).
        let mut due: Vec<(u64, TimerKey)> = Vec::new();
        let mut rest: Vec<((u64, u64), TimerKey)> = Vec::new();
        for (&(d, seq), &key) in self.order.range(..=(self.clock, u64::MAX)) {
            if self.live[&key].due {
                due.push((seq, key));
            } else {
                rest.push(((d, seq), key));
            }
        }
        due.sort_unstable_by_key(|&(seq, _)| seq);
        let want: Vec<(TimerKey, u64)> = due
            .iter()
            .map(|&(seq, key)| (key, seq))
            .chain(rest.iter().map(|&((_, seq), key)| (key, seq)))
            .collect();
        assert_eq!(
            fired, want,
            "fired set or order differs (clock {})",
            self.clock
        );
        for (key, _) in &fired {
            let rec = self.live.remove(key).unwrap();
            let d = rec.deadline.expect("a timer beyond the horizon fired");
            assert!(d <= self.clock, "fired early");
            self.order.remove(&(d, rec.seq));
        }
        // Past-deadline timers still pending would be a bug; none are `due` any more.
        assert!(self.live.values().all(|r| !r.due));
    }

    fn check(&self) {
        let w = &self.wheel;
        assert_eq!(w.len(), self.live.len());
        assert_eq!(w.is_empty(), self.live.is_empty());
        assert_eq!(
            w.now(),
            at(self.origin, self.tick_nanos(self.clock as u128))
        );
        for (key, rec) in &self.live {
            assert!(w.contains(*key));
            let want = rec
                .deadline
                .and_then(|d| at(self.origin, self.tick_nanos(d as u128)));
            assert_eq!(w.deadline(*key), want);
        }
        for key in self.keys.iter().rev().take(20) {
            if !self.live.contains_key(key) {
                assert!(!w.contains(*key));
                assert_eq!(w.deadline(*key), None);
            }
        }

        let next = w.next_deadline();
        let Some((&(earliest, _), _)) = self.order.iter().next() else {
            assert_eq!(next, None);
            return;
        };
        let earliest_at = at(self.origin, self.tick_nanos(earliest as u128));
        let Some(next) = next else {
            // Only when no `Instant` can reach the earliest deadline.
            assert_eq!(earliest_at, None);
            return;
        };
        let since = next
            .checked_duration_since(self.origin)
            .expect("next_deadline before origin");
        assert_eq!(
            since.as_nanos() % self.tick,
            0,
            "next_deadline not on a tick"
        );
        let next_tick = u64::try_from(since.as_nanos() / self.tick).unwrap();
        assert!(
            next_tick <= earliest,
            "next_deadline {next_tick} after the earliest {earliest}"
        );
        if !self.cancelled_any {
            assert_eq!(next_tick, earliest, "next_deadline inexact without cancels");
        }
        if earliest > self.clock {
            // The documented bound: within the slot holding the earliest, after the clock.
            assert!(next_tick > self.clock);
            assert!(next_tick >= slot_start(self.clock, earliest));
        }
    }
}

fn run(tick: Duration, ops: &[Op]) {
    let mut h = Harness::new(tick);
    h.check();
    for op in ops {
        h.step(op);
        h.check();
    }
    // Finally everything that can fire does, and what remains is beyond the horizon.
    h.step(&Op::AdvanceMax(u32::MAX));
    h.check();
    assert!(h.live.values().all(|r| r.deadline.is_none() || at(h.origin, h.tick_nanos(u64::MAX as u128)).is_none()));
}

fn tick() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::from_nanos(1)),
        Just(Duration::from_nanos(7)),
        Just(Duration::from_micros(1)),
        Just(Duration::from_millis(1)),
        Just(Duration::from_secs(1)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn wheel_matches_model(tick in tick(), ops in prop::collection::vec(op(), 1..200)) {
        run(tick, &ops);
    }

    /// Mostly near deadlines and small steps: many timers fire, dense cascades.
    #[test]
    fn wheel_matches_model_dense(
        tick in tick(),
        ops in prop::collection::vec(
            prop_oneof![
                8 => (0u16..5000, any::<u64>()).prop_map(|(t, s)| Op::Insert(When::Near(t, s), None)),
                3 => any::<usize>().prop_map(Op::Cancel),
                4 => (0u16..u16::MAX).prop_map(Op::AdvanceSmall),
                2 => (0u64..5000).prop_map(Op::AdvanceTicks),
            ],
            1..400,
        ),
    ) {
        run(tick, &ops);
    }
}
