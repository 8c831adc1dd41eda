//! Deadlines for a runtime's worker: a hierarchical timing wheel with O(1) insert and cancel.
//!
//! A [`TimerWheel<T>`] holds values of any type `T`, each with a deadline. A runtime keeps one
//! per worker thread: it [`insert`](TimerWheel::insert)s a timer when a coroutine parks with a
//! deadline, [`cancel`](TimerWheel::cancel)s it when the coroutine is woken first, asks
//! [`next_deadline`](TimerWheel::next_deadline) how long the worker may sleep, and calls
//! [`advance`](TimerWheel::advance) to take every timer whose deadline has passed. The wheel knows
//! nothing of coroutines, IO or threads, and it is not shared between threads: no locks, no
//! atomics.
//!
//! # Design
//!
//! Time is counted in *ticks* (1 ms by default, see [`TimerWheel::with_tick`]) since the wheel's
//! *origin*, as a `u64`. The wheel is the hierarchical timing wheel of Varghese and Lauck (the
//! kind Linux, Kafka and tokio use): [`LEVELS`] = 11 levels of 64 slots, where a slot of level
//! *k* spans 64<sup>*k*</sup> ticks, so the levels cover the whole `u64` tick range (66 bits ≥ 64)
//! and no deadline is clamped. A timer sits at the level given by the highest bit in which its
//! deadline differs from the wheel's clock; when the clock reaches a slot of level *k* ≥ 1, the
//! slot's timers *cascade* to lower levels, and when it reaches a slot of level 0, they fire.
//!
//! Timers live in a slab (a `Vec` with a free list) and are linked into per-slot intrusive
//! doubly-linked lists by index, so [`insert`](TimerWheel::insert) and
//! [`cancel`](TimerWheel::cancel) are O(1) and allocate nothing once the slab has grown (see
//! [`reserve`](TimerWheel::reserve)). Each level keeps a `u64` occupancy bitmap, so finding the
//! next non-empty slot is one `trailing_zeros` per level: [`advance`](TimerWheel::advance) costs
//! O(fired + levels × slots visited) however far it jumps, and
//! [`next_deadline`](TimerWheel::next_deadline) O(levels).
//!
//! # Time and rounding
//!
//! * A deadline is rounded **up** to the next tick boundary, so a timer never fires early: a
//!   timer fires during the first [`advance`](TimerWheel::advance)`(now)` whose `now` is at or
//!   after its rounded deadline. Its worst-case lateness is therefore *one tick* (strictly less)
//!   plus however late `advance` is called.
//! * The wheel's clock starts at the origin and never goes back: `advance` with an earlier `now`
//!   than it has already seen moves nothing (it still fires the timers inserted meanwhile with a
//!   deadline already passed).
//! * A deadline at or before the wheel's clock (in the past) fires at the next `advance`, before
//!   the timers still in the wheel; such timers fire in insertion order among themselves.
//! * Timers due at the same tick fire in insertion order; timers due at different ticks fire in
//!   deadline order.
//! * The wheel's *horizon* is `u64::MAX` ticks after the origin (about 584 million years at 1 ms,
//!   584 years at 1 ns). A deadline beyond it is kept but **never fires**: it stays pending until
//!   cancelled or [`clear`](TimerWheel::clear)ed, and [`next_deadline`](TimerWheel::next_deadline)
//!   ignores it. This is the only saturation, and it errs on the late side.
//!
//! # Keys
//!
//! [`TimerKey`] is 8 bytes: a slab index and a generation. A key whose timer has fired or been
//! cancelled is *stale*: [`cancel`](TimerWheel::cancel) returns `None` for it, even after its slot
//! was reused by another timer. A slab slot whose 32-bit generation is exhausted (after about two
//! billion reuses) is retired rather than wrapped, so a stale key can never match a later timer.

#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::error::Error;
use std::fmt;
use std::time::{Duration, Instant};

/// Number of levels of the wheel (each 64 slots); enough to cover every `u64` tick.
pub const LEVELS: usize = 11;

/// log2 of the slots per level.
const LEVEL_BITS: u32 = 6;
const _: () = assert!(
    LEVELS as u32 * LEVEL_BITS >= u64::BITS,
    "levels must cover u64 ticks"
);
/// Slots per level.
const SLOTS: usize = 1 << LEVEL_BITS;
/// Lists of the wheel proper: `level * SLOTS + slot`.
const WHEEL_LISTS: usize = LEVELS * SLOTS;
/// The list of timers inserted with a deadline already reached (they fire at the next advance).
const DUE: u16 = WHEEL_LISTS as u16;
/// The list of timers beyond the horizon (they never fire).
const NEVER: u16 = DUE + 1;
/// All lists.
const LIST_COUNT: usize = WHEEL_LISTS + 2;
/// "No entry": the end of a list, or an empty free list.
const NIL: u32 = u32::MAX;
/// A slab slot freed with this (even) generation is retired: reusing it would wrap the
/// generation and let an ancient key match again.
const RETIRED_GEN: u32 = u32::MAX - 1;
/// Nanoseconds per second.
const NANOS_PER_SEC: u128 = 1_000_000_000;
/// The default tick, in nanoseconds (1 ms), special-cased so that its division is a multiply.
const MILLI: u64 = 1_000_000;

/// Identifies a timer in its [`TimerWheel`]; returned by [`TimerWheel::insert`].
///
/// Keys are small (8 bytes) and `Copy`. Once the timer has fired, been cancelled or cleared, the
/// key is *stale*: the wheel's methods treat it as unknown, even when its slab slot has been
/// reused since.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimerKey {
    index: u32,
    /// Odd while the slab slot is occupied by the timer this key names.
    generation: u32,
}

/// Why a [`TimerWheel`] could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimerError {
    /// The tick passed to [`TimerWheel::with_tick`] was zero.
    ZeroTick,
}

impl fmt::Display for TimerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimerError::ZeroTick => f.write_str("a timer wheel's tick must be longer than zero"),
        }
    }
}

impl Error for TimerError {}

/// One slab slot.
struct Entry<T> {
    /// The deadline in ticks since the origin (rounded up); unused on the `NEVER` list.
    deadline: u64,
    /// `Some` while occupied.
    value: Option<T>,
    /// Previous entry in its list, or `NIL`.
    prev: u32,
    /// Next entry in its list (or in the free list when vacant), or `NIL`.
    next: u32,
    /// Odd while occupied, even while vacant.
    generation: u32,
    /// The list holding it while occupied.
    list: u16,
}

/// Head and tail of an intrusive list of slab entries.
#[derive(Clone, Copy)]
struct List {
    head: u32,
    tail: u32,
}

impl List {
    const EMPTY: List = List {
        head: NIL,
        tail: NIL,
    };
}

/// A hierarchical timing wheel: deadlines with O(1) insert and cancel, for one thread.
///
/// See the [crate documentation](crate) for the design, the rounding of deadlines (always up:
/// never early, at most one tick late plus the lateness of the `advance` call) and the horizon.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, Instant};
/// use spindle_timer::TimerWheel;
///
/// let origin = Instant::now();
/// let mut wheel = TimerWheel::new(origin); // 1 ms tick
///
/// let soon = wheel.insert(origin + Duration::from_millis(5), "soon");
/// let later = wheel.insert(origin + Duration::from_secs(3600), "later");
/// let never = wheel.insert(origin + Duration::from_millis(7), "cancelled");
/// assert_eq!(wheel.len(), 3);
///
/// // Woken before its deadline: cancel it.
/// assert_eq!(wheel.cancel(never), Some("cancelled"));
///
/// // How long may the worker sleep?
/// assert_eq!(wheel.next_deadline(), Some(origin + Duration::from_millis(5)));
///
/// // Fire what has expired.
/// let mut fired = Vec::new();
/// wheel.advance(origin + Duration::from_millis(10), |key, value| fired.push((key, value)));
/// assert_eq!(fired, [(soon, "soon")]);
///
/// assert_eq!(wheel.deadline(later), Some(origin + Duration::from_secs(3600)));
/// assert_eq!(wheel.cancel(soon), None); // already fired: the key is stale
/// assert_eq!(wheel.clear(), ["later"]);
/// assert!(wheel.is_empty());
/// ```
pub struct TimerWheel<T> {
    origin: Instant,
    tick: Duration,
    /// The tick in nanoseconds.
    tick_nanos: u128,
    /// The tick in nanoseconds if it fits a `u64` (fast path), else 0.
    tick_nanos64: u64,
    /// The wheel's clock, in ticks since the origin: every timer with a deadline at or before it
    /// has fired (or sits on the `DUE` list), every timer in the wheel proper sits at
    /// `level_for(elapsed, deadline)`.
    elapsed: u64,
    /// Pending timers.
    len: usize,
    /// The slab.
    entries: Vec<Entry<T>>,
    /// Head of the slab's free list (linked through `Entry::next`).
    free_head: u32,
    /// Vacant slab slots retired for good (exhausted generation), not on the free list.
    retired: usize,
    /// Every list: the wheel's slots, then `DUE`, then `NEVER`.
    lists: Box<[List; LIST_COUNT]>,
    /// Per wheel slot, the earliest deadline inserted since the slot was last empty (a lower
    /// bound of its timers' deadlines: cancelling doesn't raise it); `u64::MAX` when empty.
    slot_min: Box<[u64; WHEEL_LISTS]>,
    /// Per level, bit `s` set iff slot `s` is non-empty.
    occupied: [u64; LEVELS],
    /// Like `slot_min`, for the `DUE` list.
    due_min: u64,
}

impl<T> fmt::Debug for TimerWheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerWheel")
            .field("origin", &self.origin)
            .field("tick", &self.tick)
            .field("elapsed_ticks", &self.elapsed)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl<T> TimerWheel<T> {
    /// Creates an empty wheel with a 1 ms tick whose clock starts at `origin`.
    ///
    /// `origin` is usually `Instant::now()`; deadlines before it are rounded up to it.
    pub fn new(origin: Instant) -> Self {
        Self::build(origin, Duration::from_millis(1))
    }

    /// Creates an empty wheel with the given tick whose clock starts at `origin`.
    ///
    /// A longer tick makes timers coarser (a timer may fire up to one tick after its deadline)
    /// and pushes the horizon (`u64::MAX` ticks after `origin`) further.
    ///
    /// # Errors
    ///
    /// [`TimerError::ZeroTick`] if `tick` is zero.
    pub fn with_tick(origin: Instant, tick: Duration) -> Result<Self, TimerError> {
        if tick.is_zero() {
            return Err(TimerError::ZeroTick);
        }
        Ok(Self::build(origin, tick))
    }

    fn build(origin: Instant, tick: Duration) -> Self {
        let tick_nanos = tick.as_nanos();
        TimerWheel {
            origin,
            tick,
            tick_nanos,
            tick_nanos64: u64::try_from(tick_nanos).unwrap_or(0),
            elapsed: 0,
            len: 0,
            entries: Vec::new(),
            free_head: NIL,
            retired: 0,
            lists: Box::new([List::EMPTY; LIST_COUNT]),
            slot_min: Box::new([u64::MAX; WHEEL_LISTS]),
            occupied: [0; LEVELS],
            due_min: u64::MAX,
        }
    }

    /// The instant the wheel's clock started at (tick 0).
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// The wheel's tick: its resolution.
    pub fn tick(&self) -> Duration {
        self.tick
    }

    /// The wheel's clock: the latest `now` passed to [`advance`](Self::advance), rounded down to
    /// the tick (the origin before the first advance).
    ///
    /// `None` only if that instant cannot be represented (a clock past what `Instant` can hold).
    pub fn now(&self) -> Option<Instant> {
        self.instant_at(self.elapsed)
    }

    /// The latest deadline that can fire: `u64::MAX` ticks after the origin. Deadlines after it
    /// are kept but never fire.
    ///
    /// `None` if it lies beyond what `Instant` can represent (then every representable deadline
    /// can fire).
    pub fn horizon(&self) -> Option<Instant> {
        self.instant_at(u64::MAX)
    }

    /// The number of pending timers (those beyond the horizon included).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no timer is pending.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many timers the slab can hold before it must grow.
    pub fn capacity(&self) -> usize {
        self.entries.capacity()
    }

    /// Makes room for at least `additional` more pending timers, so that inserting them doesn't
    /// allocate.
    pub fn reserve(&mut self, additional: usize) {
        let vacant = self.entries.len() - self.len - self.retired;
        self.entries.reserve(additional.saturating_sub(vacant));
    }

    /// Adds a timer firing at `deadline` (rounded up to the tick) with `value`. O(1).
    ///
    /// A deadline at or before the wheel's clock fires at the next [`advance`](Self::advance). A
    /// deadline beyond the [horizon](Self::horizon) never fires (see the crate documentation).
    ///
    /// # Panics
    ///
    /// Only if `u32::MAX` timers are already pending (the slab index is 32 bits).
    pub fn insert(&mut self, deadline: Instant, value: T) -> TimerKey {
        let ticks = self.ticks_ceil(deadline.saturating_duration_since(self.origin));
        self.insert_at(ticks, value)
    }

    /// Adds a timer firing `delay` after `now` (rounded up to the tick) with `value`. O(1).
    ///
    /// Unlike `now + delay`, this never overflows, and the deadline need not be representable as
    /// an `Instant`. A deadline beyond the wheel's [horizon](Self::horizon) (say `delay` is
    /// [`Duration::MAX`]) **saturates to "never"**: the timer is kept, counted by
    /// [`len`](Self::len), can be cancelled and is returned by [`clear`](Self::clear), but never
    /// fires and is ignored by [`next_deadline`](Self::next_deadline); its
    /// [`deadline`](Self::deadline) is `None`. It never fires early.
    ///
    /// # Panics
    ///
    /// Only if `u32::MAX` timers are already pending (the slab index is 32 bits).
    pub fn insert_after(&mut self, now: Instant, delay: Duration, value: T) -> TimerKey {
        let since_origin = match now.checked_duration_since(self.origin) {
            Some(since) => since.checked_add(delay),
            // `now` is before the origin: the deadline is `delay - (origin - now)` after it.
            None => Some(delay.saturating_sub(self.origin.duration_since(now))),
        };
        let ticks = since_origin.and_then(|since| self.ticks_ceil(since));
        self.insert_at(ticks, value)
    }

    /// Removes a pending timer and returns its value; `None` if `key` is stale (the timer fired,
    /// was cancelled or cleared). O(1).
    pub fn cancel(&mut self, key: TimerKey) -> Option<T> {
        let index = self.lookup(key)?;
        self.unlink(index);
        Some(self.release(index).1)
    }

    /// Whether `key` names a pending timer.
    pub fn contains(&self, key: TimerKey) -> bool {
        self.lookup(key).is_some()
    }

    /// The deadline of a pending timer, as stored: rounded up to the tick (and to the origin).
    ///
    /// `None` if `key` is stale, if the timer never fires (beyond the horizon), or if the rounded
    /// deadline cannot be represented as an `Instant`.
    pub fn deadline(&self, key: TimerKey) -> Option<Instant> {
        let entry = &self.entries[self.lookup(key)? as usize];
        if entry.list == NEVER {
            return None;
        }
        self.instant_at(entry.deadline)
    }

    /// The deadline of the earliest pending timer, or an earlier instant, never a later one; `None`
    /// if no timer can fire. O(levels): no scan of the timers.
    ///
    /// **Bound.** The result is exact (the earliest rounded deadline) unless the earliest timer
    /// of its slot was cancelled: each slot remembers the earliest deadline inserted since it was
    /// last empty, and `cancel` doesn't rescan it. Even then the result lies within the slot
    /// holding the true earliest deadline: at or after that slot's start (which is after the
    /// wheel's clock, or at it for timers already due), so it is earlier than the truth by less
    /// than 64<sup>*k*</sup> ticks, *k* being the slot's level. A worker that sleeps until the
    /// result and then calls [`advance`](Self::advance) cascades that slot, after which the result
    /// is exact again: at most one early wake-up per such cancellation.
    ///
    /// Timers inserted with a deadline already reached report their own (past) deadline. Timers
    /// beyond the horizon are ignored; a deadline `Instant` can't represent is reported as `None`
    /// (no `now` can reach it).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.instant_at(self.next_deadline_tick()?)
    }

    /// [`next_deadline`](Self::next_deadline) in ticks since the origin.
    fn next_deadline_tick(&self) -> Option<u64> {
        if self.len == 0 {
            return None; // (asked by every worker that goes to sleep, usually with no timers)
        }
        if self.lists[DUE as usize].head != NIL {
            return Some(self.due_min);
        }
        let (level, slot, start) = self.next_slot()?;
        Some(self.slot_min[level * SLOTS + slot].max(start))
    }

    /// Moves the wheel's clock to `now` and fires every timer whose (rounded) deadline is at or
    /// before it: `fire(key, value)` for each, in deadline order (insertion order within a tick;
    /// timers inserted with a past deadline first). Returns how many fired.
    ///
    /// Never fires a timer early. A `now` earlier than the clock moves nothing (the clock never
    /// goes back) but still fires timers inserted with a deadline already reached. Cost:
    /// O(fired + levels × slots cascaded), however far `now` jumps.
    ///
    /// If `fire` panics, the wheel stays consistent: the timers not yet fired are still pending
    /// and fire at the next call.
    pub fn advance(&mut self, now: Instant, mut fire: impl FnMut(TimerKey, T)) -> usize {
        let now_tick = self
            .ticks_floor(now.saturating_duration_since(self.origin))
            .max(self.elapsed);
        let mut fired = 0;
        while let Some(index) = self.pop_front(DUE) {
            let (key, value) = self.release(index);
            fired += 1;
            fire(key, value);
        }
        while let Some((level, slot, start)) = self.next_slot() {
            if start > now_tick {
                break;
            }
            self.elapsed = start;
            let list = (level * SLOTS + slot) as u16;
            if level == 0 {
                while let Some(index) = self.pop_front(list) {
                    let (key, value) = self.release(index);
                    fired += 1;
                    fire(key, value);
                }
            } else {
                // Cascade: every timer of the slot is due at or after `start`, and now differs
                // from the clock in lower bits only, so it moves down (FIFO order is kept).
                while let Some(index) = self.pop_front(list) {
                    let deadline = self.entries[index as usize].deadline;
                    self.link_in_wheel(index, deadline);
                }
            }
        }
        self.elapsed = now_tick;
        fired
    }

    /// Removes every pending timer and returns their values (in no particular order); every key
    /// becomes stale. The clock is kept.
    pub fn clear(&mut self) -> Vec<T> {
        let mut values = Vec::with_capacity(self.len);
        for index in 0..self.entries.len() {
            if self.entries[index].value.is_some() {
                values.push(self.release(index as u32).1);
            }
        }
        *self.lists = [List::EMPTY; LIST_COUNT];
        *self.slot_min = [u64::MAX; WHEEL_LISTS];
        self.occupied = [0; LEVELS];
        self.due_min = u64::MAX;
        debug_assert_eq!(self.len, 0);
        values
    }

    // ----- ticks and instants -----

    /// Ticks in `since` (a duration after the origin), rounded up; `None` beyond `u64::MAX`.
    #[inline]
    fn ticks_ceil(&self, since: Duration) -> Option<u64> {
        let tick = self.tick_nanos64;
        if tick != 0
            && let Some(nanos) = nanos_u64(since)
        {
            let (q, r) = if tick == MILLI {
                (nanos / MILLI, nanos % MILLI)
            } else {
                (nanos / tick, nanos % tick)
            };
            // No overflow: `r != 0` implies `tick >= 2`, so `q <= u64::MAX / 2`.
            return Some(q + u64::from(r != 0));
        }
        let nanos = since.as_nanos();
        let q = nanos.div_ceil(self.tick_nanos);
        u64::try_from(q).ok()
    }

    /// Ticks in `since` (a duration after the origin), rounded down, saturating at `u64::MAX`.
    #[inline]
    fn ticks_floor(&self, since: Duration) -> u64 {
        let tick = self.tick_nanos64;
        if tick != 0
            && let Some(nanos) = nanos_u64(since)
        {
            return if tick == MILLI {
                nanos / MILLI
            } else {
                nanos / tick
            };
        }
        u64::try_from(since.as_nanos() / self.tick_nanos).unwrap_or(u64::MAX)
    }

    /// The instant `ticks` ticks after the origin, if `Instant` can represent it.
    fn instant_at(&self, ticks: u64) -> Option<Instant> {
        let tick = self.tick_nanos64;
        let since = match ticks.checked_mul(tick) {
            Some(nanos) if tick != 0 => Duration::from_nanos(nanos),
            _ => {
                let nanos = u128::from(ticks).checked_mul(self.tick_nanos)?;
                let secs = u64::try_from(nanos / NANOS_PER_SEC).ok()?;
                Duration::new(secs, (nanos % NANOS_PER_SEC) as u32)
            }
        };
        self.origin.checked_add(since)
    }

    // ----- the slab -----

    /// The slab index of the pending timer `key` names.
    #[inline]
    fn lookup(&self, key: TimerKey) -> Option<u32> {
        let entry = self.entries.get(key.index as usize)?;
        // Occupied entries have odd generations and keys are only made for occupied entries, so
        // equal generations mean `key`'s timer is still there.
        (entry.generation == key.generation).then_some(key.index)
    }

    /// Takes a slab slot for `value` (its list fields are set by the caller).
    #[inline]
    fn alloc(&mut self, value: T) -> TimerKey {
        if self.free_head != NIL {
            let index = self.free_head;
            let entry = &mut self.entries[index as usize];
            self.free_head = entry.next;
            entry.generation = entry.generation.wrapping_add(1);
            entry.value = Some(value);
            TimerKey {
                index,
                generation: entry.generation,
            }
        } else {
            let index = self.entries.len();
            assert!(
                index < NIL as usize,
                "spindle-timer: more than u32::MAX - 1 timers"
            );
            self.entries.push(Entry {
                deadline: 0,
                value: Some(value),
                prev: NIL,
                next: NIL,
                generation: 1,
                list: NEVER,
            });
            TimerKey {
                index: index as u32,
                generation: 1,
            }
        }
    }

    /// Frees an occupied slab slot already unlinked from its list; returns its key and value.
    #[inline]
    fn release(&mut self, index: u32) -> (TimerKey, T) {
        let entry = &mut self.entries[index as usize];
        let key = TimerKey {
            index,
            generation: entry.generation,
        };
        let value = entry
            .value
            .take()
            .expect("spindle-timer: releasing a vacant entry");
        entry.generation = entry.generation.wrapping_add(1);
        if entry.generation < RETIRED_GEN {
            entry.next = self.free_head;
            self.free_head = index;
        } else {
            self.retired += 1;
        }
        self.len -= 1;
        (key, value)
    }

    // ----- the lists -----

    /// Inserts a fresh timer `ticks` after the origin (`None`: beyond the horizon).
    #[inline]
    fn insert_at(&mut self, ticks: Option<u64>, value: T) -> TimerKey {
        let key = self.alloc(value);
        self.len += 1;
        match ticks {
            None => {
                self.entries[key.index as usize].deadline = u64::MAX;
                self.push_back(NEVER, key.index);
            }
            Some(deadline) if deadline <= self.elapsed => {
                self.entries[key.index as usize].deadline = deadline;
                self.due_min = self.due_min.min(deadline);
                self.push_back(DUE, key.index);
            }
            Some(deadline) => self.link_in_wheel(key.index, deadline),
        }
        key
    }

    /// Links entry `index`, due at `deadline` (at or after the clock), into its wheel slot.
    #[inline]
    fn link_in_wheel(&mut self, index: u32, deadline: u64) {
        debug_assert!(deadline >= self.elapsed);
        let level = level_for(self.elapsed, deadline);
        let slot = ((deadline >> (LEVEL_BITS as usize * level)) as usize) & (SLOTS - 1);
        let list = level * SLOTS + slot;
        self.entries[index as usize].deadline = deadline;
        self.occupied[level] |= 1 << slot;
        let min = &mut self.slot_min[list];
        *min = (*min).min(deadline);
        self.push_back(list as u16, index);
    }

    /// The first non-empty wheel slot after the clock: its level, slot and start tick. Timers in
    /// lower levels are always due before those in higher ones, and the lowest non-empty level's
    /// next non-empty slot holds the earliest.
    #[inline]
    fn next_slot(&self) -> Option<(usize, usize, u64)> {
        for level in 0..LEVELS {
            let occupied = self.occupied[level];
            if occupied == 0 {
                continue;
            }
            let shift = LEVEL_BITS as usize * level;
            let now_slot = (self.elapsed >> shift) as u32 & (SLOTS as u32 - 1);
            // Every timer at this level is due in this level's current block, at or after the
            // clock's slot (after it, for levels >= 1); `rotate_right` would find it as well if
            // that invariant were ever broken, rather than losing the timer.
            let ahead = occupied & (u64::MAX << now_slot);
            debug_assert_ne!(ahead, 0, "timer behind the clock at level {level}");
            let slot = if ahead != 0 {
                ahead.trailing_zeros() as usize
            } else {
                occupied.trailing_zeros() as usize
            };
            let block_bits = shift as u32 + LEVEL_BITS;
            let block = self
                .elapsed
                .checked_shr(block_bits)
                .map_or(0, |b| b << block_bits);
            return Some((level, slot, block | ((slot as u64) << shift)));
        }
        None
    }

    /// Appends entry `index` to `list`.
    #[inline]
    fn push_back(&mut self, list: u16, index: u32) {
        let tail = self.lists[list as usize].tail;
        let entry = &mut self.entries[index as usize];
        entry.prev = tail;
        entry.next = NIL;
        entry.list = list;
        if tail == NIL {
            self.lists[list as usize].head = index;
        } else {
            self.entries[tail as usize].next = index;
        }
        self.lists[list as usize].tail = index;
    }

    /// Unlinks occupied entry `index` from its list, keeping the list's bookkeeping.
    #[inline]
    fn unlink(&mut self, index: u32) {
        let entry = &self.entries[index as usize];
        let (prev, next, list) = (entry.prev, entry.next, entry.list);
        if prev == NIL {
            self.lists[list as usize].head = next;
        } else {
            self.entries[prev as usize].next = next;
        }
        if next == NIL {
            self.lists[list as usize].tail = prev;
        } else {
            self.entries[next as usize].prev = prev;
        }
        if self.lists[list as usize].head == NIL {
            let list = list as usize;
            if list < WHEEL_LISTS {
                self.occupied[list / SLOTS] &= !(1 << (list % SLOTS));
                self.slot_min[list] = u64::MAX;
            } else if list == DUE as usize {
                self.due_min = u64::MAX;
            }
        }
    }

    /// Unlinks and returns the first entry of `list`.
    #[inline]
    fn pop_front(&mut self, list: u16) -> Option<u32> {
        let head = self.lists[list as usize].head;
        if head == NIL {
            return None;
        }
        self.unlink(head);
        Some(head)
    }
}

/// The level a timer due at `deadline` sits at while the clock is `elapsed` (`deadline >=
/// elapsed`): the 6-bit group of the highest bit in which they differ (0 if they don't).
#[inline]
fn level_for(elapsed: u64, deadline: u64) -> usize {
    let masked = (elapsed ^ deadline) | (SLOTS as u64 - 1);
    let significant = 63 - masked.leading_zeros();
    (significant / LEVEL_BITS) as usize
}

/// `d` in nanoseconds, if that fits a `u64` (about 584 years).
#[inline]
fn nanos_u64(d: Duration) -> Option<u64> {
    d.as_secs()
        .checked_mul(1_000_000_000)?
        .checked_add(u64::from(d.subsec_nanos()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_for_covers_u64() {
        assert_eq!(level_for(0, 0), 0);
        assert_eq!(level_for(0, 63), 0);
        assert_eq!(level_for(0, 64), 1);
        assert_eq!(level_for(0, 4095), 1);
        assert_eq!(level_for(0, 4096), 2);
        assert_eq!(level_for(0, u64::MAX), LEVELS - 1);
        assert_eq!(level_for(u64::MAX - 1, u64::MAX), 0);
        for k in 1..LEVELS as u32 {
            assert_eq!(level_for(0, 1 << (6 * k)), k as usize);
            assert_eq!(level_for(0, (1 << (6 * k)) - 1), k as usize - 1);
        }
    }

    #[test]
    fn key_is_small() {
        assert!(size_of::<TimerKey>() <= 16);
        assert_eq!(size_of::<TimerKey>(), 8);
    }

    #[test]
    fn fabricated_keys_are_unknown() {
        let origin = Instant::now();
        let mut wheel = TimerWheel::new(origin);
        let key = wheel.insert(origin + Duration::from_millis(3), 1);
        for bogus in [
            TimerKey {
                index: 1,
                generation: 1,
            },
            TimerKey {
                index: u32::MAX,
                generation: 1,
            },
            TimerKey {
                index: 0,
                generation: 2,
            },
            TimerKey {
                index: 0,
                generation: 3,
            },
        ] {
            assert!(!wheel.contains(bogus));
            assert_eq!(wheel.deadline(bogus), None);
            assert_eq!(wheel.cancel(bogus), None);
        }
        assert_eq!(wheel.cancel(key), Some(1));
    }

    #[test]
    fn exhausted_generation_retires_the_slot() {
        let origin = Instant::now();
        let mut wheel = TimerWheel::new(origin);
        let first = wheel.insert(origin, 0);
        assert_eq!(wheel.cancel(first), Some(0));
        // Age slot 0 to its last generation.
        wheel.entries[0].generation = RETIRED_GEN - 2;
        let last = wheel.insert(origin, 1);
        assert_eq!(last.index, 0);
        assert_eq!(last.generation, RETIRED_GEN - 1);
        assert_eq!(wheel.cancel(last), Some(1));
        // Slot 0 is retired: the next timer gets a fresh slot and no key of slot 0 matches.
        let next = wheel.insert(origin, 2);
        assert_eq!(next.index, 1);
        assert_eq!(wheel.free_head, NIL);
        assert_eq!(wheel.cancel(last), None);
        assert_eq!(wheel.clear(), [2]);
        // clear() doesn't resurrect it either.
        assert_eq!(wheel.insert(origin, 3).index, 1);
    }

    #[test]
    fn bookkeeping_resets_when_slots_empty() {
        let origin = Instant::now();
        let mut wheel = TimerWheel::new(origin);
        let a = wheel.insert(origin + Duration::from_millis(100), ());
        let b = wheel.insert(origin + Duration::from_millis(120), ());
        assert_eq!(wheel.occupied[1], 1 << 1);
        assert_eq!(wheel.slot_min[SLOTS + 1], 100);
        wheel.cancel(a);
        // Stale but a lower bound.
        assert_eq!(wheel.next_deadline_tick(), Some(100));
        wheel.cancel(b);
        assert_eq!(wheel.occupied, [0; LEVELS]);
        assert_eq!(wheel.slot_min[SLOTS + 1], u64::MAX);
        assert_eq!(wheel.next_deadline_tick(), None);
    }
}

// How the crate is built, for whoever changes it (`cargo doc --document-private-items`).
mod internals;

/// The examples of the crate's README.md, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
