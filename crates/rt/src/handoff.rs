//! What other threads may take over from a worker that a coroutine keeps (Go's `sysmon`
//! retaking a P from a thread blocked in a system call, reduced to what may move here).
//!
//! A coroutine that blocks without suspending — a `futex` inside `std::sync::Mutex::lock`, a
//! raw system call, a long CPU loop — keeps its worker's thread. The monitor sees it (see
//! `monitor`) and from then on, until the worker comes back:
//!
//! * **Queued coroutines that may run elsewhere** are stolen through the policy's ordinary
//!   stealing: the monitor wakes a sleeping worker, whose `pop` steals them. With work
//!   stealing these are every coroutine that has not started yet (a coroutine is pinned to a
//!   worker at its first run: before that it has no stack and no thread-locals), wherever it
//!   waits — the worker's deque, its run-next slot (stealable after `RUN_NEXT_GRACE`), the
//!   global injector — and [migratable](crate::Builder::migratable) coroutines that yielded or
//!   were woken there. A steal is the same operation whether the victim is stuck or busy, so
//!   a worker that comes back while its queue is being drained races only with thieves, which
//!   the deque and the run-next slot already resolve: each task is taken once. With FIFO the
//!   unpinned queue is global, so nothing waits for the stuck worker but its pinned tasks.
//!   Round-robin has no stealing: what was dealt to the stuck worker waits for it.
//! * **Timers of migratable coroutines** ([`MovableTimers`]): a migratable coroutine's timed
//!   park arms its timer in its worker's movable wheel, behind a lock, instead of the
//!   worker's own wheel. The worker fires it as usual; while the worker is stuck, the monitor
//!   fires its due ones every tick, and the coroutine is queued as a wake-up from outside the
//!   workers (the injector), where an idle worker takes it. A migratable coroutine that holds
//!   a `spindle_park::PinGuard` is queued to its home worker, where it waits.
//!
//! What does not move, and waits for the worker: **started coroutines that are not
//! migratable** (invariant 2: their frames may hold thread-local addresses and `!Send`
//! values), queued or parked, and their timers (firing one would only queue the coroutine
//! to the stuck worker); **IO registrations**, migratable coroutines' too: only a worker
//! polls its own driver (an io_uring ring has one submitter); and every timer when the stuck
//! report is off (`stuck_threshold(None)`).
//!
//! When the worker comes back it goes on as before: its queues hold what was not stolen, its
//! movable wheel what was not fired. Nothing runs twice: a steal takes a task off its queue,
//! and a timer entry is taken out of the wheel under its lock by one firer only; the task's
//! park generation (see `state`) keeps a fired entry from waking a later park.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use spindle_sched::Reason;
use spindle_timer::{TimerKey, TimerWheel};

use crate::runtime::Shared;
use crate::task::TaskRef;

/// A timer armed by a park with a deadline.
pub(crate) struct TimerEntry {
    pub(crate) task: TaskRef,
    pub(crate) seq: u64,
}

/// The bit of `Header::timer`'s worker index that says the timer is in that worker's
/// [`MovableTimers`], not in its own wheel. Worker indices stay below `MAX_WORKERS`.
pub(crate) const MOVABLE: usize = 1 << (usize::BITS - 1);

/// `MovableTimers::next` when the wheel is empty.
const NONE: u64 = u64::MAX;

/// One worker's wheel for the timers of migratable coroutines that parked on it: any thread
/// may fire, cancel or read them (under the lock); only the owner inserts.
///
/// The owner looks at `next` (one relaxed load) where it looks at its own wheel, and sleeps
/// no longer than it; the monitor fires the due entries while the owner is stuck. A
/// migratable coroutine that resumed on another worker cancels its timer here itself (the
/// entry holds a task reference, which would otherwise stay until the deadline).
#[repr(align(128))] // The owner reads `next` often; other workers' wheels write theirs.
pub(crate) struct MovableTimers {
    /// The wheel's next deadline, in nanoseconds since `origin` (`NONE`: empty). Written
    /// under the lock; read without it as a hint (a late value costs one look under the lock,
    /// or one early wake-up).
    next: AtomicU64,
    origin: Instant,
    wheel: Mutex<TimerWheel<TimerEntry>>,
}

impl MovableTimers {
    pub(crate) fn new(origin: Instant) -> Self {
        MovableTimers {
            next: AtomicU64::new(NONE),
            origin,
            wheel: Mutex::new(TimerWheel::new(origin)),
        }
    }

    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_nanos()).unwrap_or(NONE - 1)
    }

    /// Stores the wheel's next deadline in `next` (the caller holds the lock).
    fn publish(&self, wheel: &TimerWheel<TimerEntry>) {
        let next = wheel.next_deadline().map_or(NONE, |d| self.nanos(d));
        self.next.store(next, Ordering::Relaxed);
    }

    /// Arms a timer (the owner only: it publishes the task idle after this, so nobody else
    /// can have it yet).
    pub(crate) fn insert(&self, deadline: Instant, entry: TimerEntry) -> TimerKey {
        let mut wheel = crate::task::lock(&self.wheel);
        let key = wheel.insert(deadline, entry);
        self.publish(&wheel);
        key
    }

    /// Cancels a timer; its entry is returned, to be dropped after the lock (a drop may free
    /// a task). A key whose timer fired meanwhile matches nothing (keys carry a generation).
    pub(crate) fn cancel(&self, key: TimerKey) -> Option<TimerEntry> {
        let mut wheel = crate::task::lock(&self.wheel);
        let entry = wheel.cancel(key);
        self.publish(&wheel);
        entry
    }

    /// The earliest deadline, as last published (`None`: no timer).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        match self.next.load(Ordering::Relaxed) {
            NONE => None,
            n => self.origin.checked_add(std::time::Duration::from_nanos(n)),
        }
    }

    /// Whether any timer is armed (as last published): the owner's cheap look.
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.next.load(Ordering::Relaxed) != NONE
    }

    /// Takes the timers due at `now` (none if none is due, without taking the lock).
    pub(crate) fn take_due(&self, now: Instant) -> Vec<TimerEntry> {
        let next = self.next.load(Ordering::Relaxed);
        if next == NONE || self.nanos(now) < next {
            return Vec::new();
        }
        let mut due = Vec::new();
        let mut wheel = crate::task::lock(&self.wheel);
        wheel.advance(now, |_, entry| due.push(entry));
        self.publish(&wheel);
        due
    }

    /// Takes every timer (the owner, at its exit).
    pub(crate) fn clear(&self) -> Vec<TimerEntry> {
        let mut wheel = crate::task::lock(&self.wheel);
        let all = wheel.clear();
        self.publish(&wheel);
        all
    }
}

/// Wakes the tasks of fired timers `due`, from worker `here` (`None`: from the monitor) —
/// those still idle in the park that armed the timer; the entries' own references are
/// dropped. Returns whether it woke any.
pub(crate) fn fire(shared: &Shared, here: Option<usize>, due: Vec<TimerEntry>) -> bool {
    let mut woke = false;
    for entry in due {
        if entry.task.header().timer_fired(entry.seq) {
            woke = true;
            // SAFETY: `timer_fired` moved it out of idle: the idle state's reference is
            // ours. (The entry's own reference is dropped with the entry.)
            let task = unsafe { entry.task.idle_reference() };
            // In the order they were due: not through the run-next slot.
            shared.schedule_from(here, task, Reason::WokenByWorker);
        }
    }
    woke
}
