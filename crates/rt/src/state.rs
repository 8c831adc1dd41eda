//! A task's state word: its flags and every transition of them.
//!
//! Every task has one atomic word of flags ([`State`]). It decides who may touch the coroutine
//! and whether a wake-up must schedule the task:
//!
//! | flags | meaning |
//! |---|---|
//! | none ("idle") | parked: in no queue, not running; only a wake-up or its timer brings it back |
//! | `ACTIVE` | scheduled: in a run queue, being pushed to one, or running — one party (a queue or the worker running it) holds the task |
//! | `NOTIFIED` | the wake-up permit of `spindle_park` (set by the waker, consumed by `park`) |
//! | `CANCELLED` | `JoinHandle::cancel` was called |
//! | `COMPLETE` | the coroutine finished; the result is in the join cell |
//! | `FIRED` | its timer moved the parked task out of idle (cleared by the resumed park) |
//! | `JOIN_WAITER` | the handle's waker waits in the join cell (see `join_cell`) |
//! | `SCOPE_WAITER` | the scope's waker waits in the join cell |
//! | `DETACHED` | the `JoinHandle` of a result with drop glue was dropped first |
//! | bits 8–31 | the park generation: the low 24 bits of the park number (`park_seq`) of the park that last published the task idle |
//!
//! Transitions (compare-and-swap loops):
//! * **wake** (the task's `Waker`, any thread: [`TaskState::notify`]): if idle, set `ACTIVE`
//!   and push the task to the policy — no permit: being resumed is the parked task's wake-up,
//!   so it need not clear one (a read-modify-write) — else set `NOTIFIED`, the permit its next
//!   park takes.
//! * **timer fire** (the worker that owns the timer: [`TaskState::fire`]): if idle *in the
//!   timer's park* (the park generation matches), set `ACTIVE` and `FIRED` and push (no
//!   permit): the resumed park reads `FIRED` and reports the time-out. The generation is
//!   checked in the same CAS: a check of the park number before it (alone, as it was) let a
//!   migratable task that was woken, moved and parked again on another worker in between take
//!   the old timer's fire as its new park's time-out.
//! * **cancel**: like wake, plus `CANCELLED`.
//! * **pop**, **yield** (back to a queue): no change. Queued and running are one state: a
//!   task is pushed only by whoever moved it out of idle (one CAS decides) or by the worker
//!   that runs it (a yield, a spawn), so it is in at most one queue or on one worker at a time,
//!   and only the worker that popped it touches its coroutine. (It was two flags, with a CAS
//!   on every pop and two per yield to move between them; nothing read the difference.)
//! * **suspended** (the worker, on its own stack, after the coroutine switched back:
//!   [`TaskState::park_done`]): `ACTIVE` → idle, with the park's generation — unless
//!   `NOTIFIED` or `CANCELLED` arrived while it ran, then it stays `ACTIVE` and is pushed
//!   again. This is invariant 1, *suspend, then publish*: a task becomes idle — the state in
//!   which a waker schedules it — only after its context is saved, so no worker can resume a
//!   coroutine that is still running. A wake-up that comes earlier finds `ACTIVE` and leaves
//!   the permit, which the worker sees here.
//! * **finished** ([`TaskState::complete`]): → `COMPLETE`, after the result was written to the
//!   join cell; the old state says whether anything else is to be done (`JOIN_WAITER`,
//!   `SCOPE_WAITER`, `DETACHED`: see `join_cell`).
//!
//! `tests/loom_task.rs` checks these transitions (and the join cell's protocol) under loom:
//! this file is compiled there again, with loom's atomics behind `crate::loom`.

use spindle_park::Wake;

use crate::loom::{AtomicU32, Ordering};

/// The flags of the state word (see the module docs).
pub(crate) struct State;

impl State {
    pub(crate) const ACTIVE: u32 = 1;
    /// The scope's waker waits in the join cell (see `join_cell`).
    pub(crate) const SCOPE_WAITER: u32 = 1 << 1;
    pub(crate) const NOTIFIED: u32 = 1 << 2;
    pub(crate) const CANCELLED: u32 = 1 << 3;
    pub(crate) const COMPLETE: u32 = 1 << 4;
    /// The parked task's timer moved it out of idle (its deadline passed); cleared by the
    /// resumed park.
    pub(crate) const FIRED: u32 = 1 << 5;
    /// The handle's waker waits in the join cell (see `join_cell`).
    pub(crate) const JOIN_WAITER: u32 = 1 << 6;
    /// The handle of a result with drop glue was dropped before the task finished (see
    /// `join_cell`).
    pub(crate) const DETACHED: u32 = 1 << 7;
    /// The park generation's bits (see the module docs).
    pub(crate) const PARK_GEN: u32 = !0 << Self::PARK_GEN_SHIFT;
    const PARK_GEN_SHIFT: u32 = 8;

    /// Park number `seq` as a park generation (its low 24 bits, in place).
    #[inline]
    pub(crate) fn park_gen(seq: u64) -> u32 {
        // Truncation intended: two parks 2^24 apart share a generation, and a timer entry is
        // also checked against the whole number first (`Header::timer_fired`).
        (seq as u32) << Self::PARK_GEN_SHIFT
    }
}

/// The timer of park number `seq` fires on state `s`: the new state if the task is idle in
/// that park (not running, queued or finished, and published idle by that park), else `None`.
fn fire_in_park(s: u32, seq: u64) -> Option<u32> {
    let idle = s & (State::ACTIVE | State::COMPLETE) == 0;
    let in_that_park = s & State::PARK_GEN == State::park_gen(seq);
    (idle && in_that_park).then_some(s | State::ACTIVE | State::FIRED)
}

/// A task's state word (see the module docs).
pub(crate) struct TaskState(AtomicU32);

impl TaskState {
    /// A new task: `ACTIVE` (it is about to be pushed by its spawn).
    pub(crate) fn new_active() -> TaskState {
        TaskState(AtomicU32::new(State::ACTIVE))
    }

    #[inline]
    pub(crate) fn load(&self) -> u32 {
        self.0.load(Ordering::Acquire)
    }

    /// Moves the state with `f` until the CAS succeeds; returns (old, new). `None` when `f`
    /// gives up (nothing written).
    fn update(&self, mut f: impl FnMut(u32) -> Option<u32>) -> Option<(u32, u32)> {
        let mut current = self.0.load(Ordering::Acquire);
        loop {
            let next = f(current)?;
            match self
                .0
                .compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some((current, next)),
                Err(actual) => current = actual,
            }
        }
    }

    /// Sets `extra` (NOTIFIED, CANCELLED) and, if the task is idle, ACTIVE. Returns true if the
    /// caller must push the task.
    ///
    /// From idle it leaves no permit (`NOTIFIED`): the task is parked, and being resumed is its
    /// wake-up (`worker::park_current`), so the resumed park need not clear a permit with a
    /// read-modify-write. A task that is `ACTIVE` (running or queued) gets the permit, for its
    /// next park.
    pub(crate) fn notify(&self, extra: u32) -> bool {
        self.update(|s| {
            if s & State::COMPLETE != 0 {
                return None;
            }
            let mut next = s | extra;
            if s & State::ACTIVE == 0 {
                // (Idle implies no permit: `park_done` publishes idle only without one.)
                next = (next & !State::NOTIFIED) | State::ACTIVE;
            }
            (next != s).then_some(next)
        })
        .is_some_and(|(old, new)| old & State::ACTIVE == 0 && new & State::ACTIVE != 0)
    }

    /// The timer of park number `seq` fired: moves the task out of idle if it is still idle in
    /// that park; true if the caller must push it.
    pub(crate) fn fire(&self, seq: u64) -> bool {
        self.update(|s| fire_in_park(s, seq)).is_some()
    }

    /// A worker popped the task: false if it is already complete (a stale queue entry cannot
    /// exist, but be defensive). No write: queued and running are one state (module docs).
    pub(crate) fn start_running(&self) -> bool {
        self.0.load(Ordering::Acquire) & State::COMPLETE == 0
    }

    /// After a park: `ACTIVE` → idle (with `generation`, the park's), or stays `ACTIVE` if a
    /// wake-up or a cancel came meanwhile. Returns true if the caller must push the task again.
    /// `cancel_held_off`: the coroutine holds a `CancelGuard`, so a cancel does not count.
    pub(crate) fn park_done(&self, generation: u32, cancel_held_off: bool) -> bool {
        // `update` gives up (None) when the closure does: the task stays ACTIVE, nothing written.
        self.update(|s| {
            // A cancel the coroutine defers (a `CancelGuard`) already woke it once (it sets
            // NOTIFIED if it found it running); re-queueing for it on every park would spin.
            let cancel_now = s & State::CANCELLED != 0 && !cancel_held_off;
            let stays = s & State::NOTIFIED != 0 || cancel_now;
            (!stays).then_some((s & !State::ACTIVE & !State::PARK_GEN) | generation)
        })
        .is_none()
    }

    /// → `COMPLETE`; returns the state before.
    pub(crate) fn complete(&self) -> u32 {
        self.update(|s| Some((s & !State::ACTIVE) | State::COMPLETE))
            .map_or(State::COMPLETE, |(old, _)| old)
    }

    /// Whether the task has finished (its result is in the join cell, or was taken).
    #[inline]
    pub(crate) fn is_complete(&self) -> bool {
        self.load() & State::COMPLETE != 0
    }

    /// Sets `flag` (`JOIN_WAITER`, `SCOPE_WAITER`, `DETACHED`); returns whether the task was
    /// complete before, in which case `finish` has not seen the flag (see `join_cell`).
    pub(crate) fn set_join_flag(&self, flag: u32) -> bool {
        self.0.fetch_or(flag, Ordering::AcqRel) & State::COMPLETE != 0
    }

    /// Clears `flag` (`JOIN_WAITER`, `SCOPE_WAITER`) unless the task is complete; returns
    /// whether it did (see `join_cell`).
    pub(crate) fn clear_join_flag(&self, flag: u32) -> bool {
        self.update(|s| (s & State::COMPLETE == 0).then_some(s & !flag))
            .is_some()
    }

    /// What resumed a parked task (the task itself, right after the resume): its timer
    /// (`TimedOut`, unless a wake-up came too) or a wake-up. Clears the timer's mark and the
    /// permit; in the usual case — a wake-up moved it out of idle, leaving neither — with a
    /// load alone.
    pub(crate) fn resumed(&self) -> Wake {
        if self.0.load(Ordering::Acquire) & (State::FIRED | State::NOTIFIED) == 0 {
            return Wake::Woken;
        }
        let old = self
            .0
            .fetch_and(!(State::FIRED | State::NOTIFIED), Ordering::AcqRel);
        if old & State::FIRED != 0 && old & State::NOTIFIED == 0 {
            Wake::TimedOut
        } else {
            Wake::Woken
        }
    }

    /// Consumes the permit, if set. Looks first: a park usually finds none, and then costs no
    /// read-modify-write (a permit set after the look is seen by `park_done`, which re-queues).
    pub(crate) fn take_permit(&self) -> bool {
        self.0.load(Ordering::Relaxed) & State::NOTIFIED != 0
            && self.0.fetch_and(!State::NOTIFIED, Ordering::AcqRel) & State::NOTIFIED != 0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The state a task has while idle in park number `seq` (as `park_done` publishes it).
    fn idle_in(seq: u64) -> u32 {
        State::park_gen(seq)
    }

    #[test]
    fn a_timer_fires_only_on_a_task_idle_in_the_timers_park() {
        assert_eq!(
            fire_in_park(idle_in(7), 7),
            Some(idle_in(7) | State::ACTIVE | State::FIRED)
        );
        // The race the generation closes: park 7's timer checked the park number, then the
        // (migratable) task was woken, moved to another worker and parked there again (park 8)
        // before the timer's CAS.
        assert_eq!(fire_in_park(idle_in(8), 7), None);
        // Woken (queued or running), or finished: nothing to fire.
        assert_eq!(fire_in_park(idle_in(7) | State::ACTIVE, 7), None);
        assert_eq!(fire_in_park(idle_in(7) | State::COMPLETE, 7), None);
    }

    #[test]
    fn the_park_generation_keeps_off_the_flags_and_wraps_at_2_pow_24() {
        let each = [
            State::ACTIVE,
            State::NOTIFIED,
            State::CANCELLED,
            State::COMPLETE,
            State::FIRED,
            State::SCOPE_WAITER,
            State::JOIN_WAITER,
            State::DETACHED,
        ];
        let flags = each.iter().fold(0, |all, flag| {
            assert_eq!(all & flag, 0, "flag {flag:#x} shares a bit");
            all | flag
        });
        assert_eq!(State::PARK_GEN & flags, 0);
        for seq in [0, 1, 7, (1 << 24) - 1, 1 << 24, u64::MAX] {
            assert_eq!(State::park_gen(seq) & !State::PARK_GEN, 0, "park {seq}");
        }
        assert_eq!(State::park_gen(1 << 24), State::park_gen(0));
        assert_ne!(State::park_gen((1 << 24) - 1), State::park_gen(0));
    }
}
