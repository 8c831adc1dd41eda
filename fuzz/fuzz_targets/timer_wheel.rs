//! The timing wheel against a model: a `BTreeMap<(deadline, seq), key>` of pending timers.
//!
//! The wheel ticks once a nanosecond, so a deadline *is* its tick and the model needs no
//! rounding. Operations: inserts (in the past, near, far, across level boundaries; through
//! `insert` and `insert_after`), cancels (of live, fired, cancelled keys), advances (small,
//! large, backwards) and clears. After every step the fired timers must be exactly the model's
//! expired ones, in the documented order (timers inserted already due first, in insertion
//! order; then by deadline, ties in insertion order), and `len`, `contains`, `deadline`,
//! `next_deadline` must agree with the model.
#![no_main]

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use spindle_timer::{TimerKey, TimerWheel};

#[derive(Arbitrary, Debug)]
enum Op {
    /// `insert` at `clock + delta` (delta may be negative: already due).
    Insert(i32),
    /// `insert` at `clock + 64^level + delta` (level boundaries).
    InsertBoundary(u8, i8),
    /// `insert` far ahead: `clock + ticks % 2^48`.
    InsertFar(u64),
    /// `insert_after(clock, delay)`.
    InsertAfter(u32),
    /// Cancel the i-th key ever issued (mod their number).
    Cancel(u16),
    /// Advance by so many ticks.
    Advance(u16),
    /// Advance by up to 2^40 ticks.
    AdvanceFar(u64),
    /// Advance to a time before the clock (fires only timers inserted due since).
    AdvanceBack(u16),
    Clear,
}

struct Rec {
    deadline: u64,
    seq: u64,
    due: bool,
}

struct Model {
    origin: Instant,
    wheel: TimerWheel<u64>,
    clock: u64,
    live: HashMap<TimerKey, Rec>,
    order: BTreeMap<(u64, u64), TimerKey>,
    keys: Vec<TimerKey>,
    seq: u64,
}

/// Room before the clock's start for "past" deadlines.
const SLACK: u64 = 1 << 32;

impl Model {
    fn new() -> Self {
        let origin = Instant::now();
        Model {
            origin,
            wheel: TimerWheel::with_tick(origin, Duration::from_nanos(1)).unwrap(),
            // Start well after the origin so that negative deltas stay after it.
            clock: 0,
            live: HashMap::new(),
            order: BTreeMap::new(),
            keys: Vec::new(),
            seq: 0,
        }
        .started()
    }

    fn started(mut self) -> Self {
        self.advance_to(SLACK);
        self
    }

    fn at(&self, tick: u64) -> Instant {
        self.origin + Duration::from_nanos(tick)
    }

    fn insert(&mut self, deadline: u64) {
        let key = self.wheel.insert(self.at(deadline), self.seq);
        self.record(key, deadline);
    }

    fn record(&mut self, key: TimerKey, deadline: u64) {
        let seq = self.seq;
        self.seq += 1;
        let due = deadline <= self.clock;
        let rec = Rec { deadline, seq, due };
        assert!(self.live.insert(key, rec).is_none(), "key reused while live");
        self.order.insert((deadline, seq), key);
        self.keys.push(key);
    }

    fn step(&mut self, op: &Op) {
        match *op {
            Op::Insert(delta) => self.insert(self.clock.saturating_add_signed(delta.into())),
            Op::InsertBoundary(level, delta) => {
                let base = 1u64 << (6 * u32::from(level % 8));
                self.insert((self.clock + base).saturating_add_signed(delta.into()));
            }
            Op::InsertFar(ticks) => self.insert(self.clock + ticks % (1 << 48)),
            Op::InsertAfter(delay) => {
                let now = self.at(self.clock);
                let key = self
                    .wheel
                    .insert_after(now, Duration::from_nanos(delay.into()), self.seq);
                self.record(key, self.clock + u64::from(delay));
            }
            Op::Cancel(i) => {
                if self.keys.is_empty() {
                    return;
                }
                let key = self.keys[usize::from(i) % self.keys.len()];
                let got = self.wheel.cancel(key);
                match self.live.remove(&key) {
                    Some(rec) => {
                        assert_eq!(got, Some(rec.seq));
                        self.order.remove(&(rec.deadline, rec.seq));
                    }
                    None => assert_eq!(got, None, "a stale key cancelled something"),
                }
            }
            Op::Advance(t) => self.advance_to(self.clock + u64::from(t)),
            Op::AdvanceFar(t) => self.advance_to(self.clock + t % (1 << 40)),
            Op::AdvanceBack(t) => self.advance_to(self.clock - u64::from(t)),
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

    fn advance_to(&mut self, tick: u64) {
        // The wheel's clock never goes back.
        self.clock = self.clock.max(tick);
        let mut fired = Vec::new();
        let n = self.wheel.advance(self.at(tick), |k, v| fired.push((k, v)));
        assert_eq!(n, fired.len());
        let mut due = Vec::new();
        let mut rest = Vec::new();
        for (&(_, seq), &key) in self.order.range(..=(self.clock, u64::MAX)) {
            if self.live[&key].due {
                due.push((key, seq));
            } else {
                rest.push((key, seq));
            }
        }
        due.sort_unstable_by_key(|&(_, seq)| seq);
        due.extend(rest);
        assert_eq!(fired, due, "fired set or order differs (clock {})", self.clock);
        for (key, _) in &fired {
            let rec = self.live.remove(key).unwrap();
            self.order.remove(&(rec.deadline, rec.seq));
        }
    }

    fn check(&self) {
        let w = &self.wheel;
        assert_eq!(w.len(), self.live.len());
        assert_eq!(w.is_empty(), self.live.is_empty());
        assert_eq!(w.now(), Some(self.at(self.clock)));
        for key in &self.keys {
            match self.live.get(key) {
                Some(rec) => {
                    assert!(w.contains(*key));
                    assert_eq!(w.deadline(*key), Some(self.at(rec.deadline)));
                }
                None => assert!(!w.contains(*key)),
            }
        }
        match self.order.keys().next() {
            None => assert_eq!(w.next_deadline(), None),
            Some(&(earliest, _)) => {
                let next = w.next_deadline().expect("timers pending but no next deadline");
                assert!(next <= self.at(earliest), "next_deadline after the earliest deadline");
            }
        }
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let mut m = Model::new();
    for op in ops.iter().take(512) {
        m.step(op);
        m.check();
    }
});
