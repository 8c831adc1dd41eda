//! [`Idle`]: the idle-worker protocol (Go's spinning-worker protocol).
//!
//! # Worker parking and unparking
//!
//! We need to balance between keeping enough workers running to use the hardware's
//! parallelism and parking the excess to save CPU and power (invariant 6: no lost wake-ups, no
//! idle spin). Two things make it hard: the scheduler's state is deliberately distributed
//! (per-worker queues), so no global predicate can be computed on a fast path; and the best
//! decision would need the future (do not park a worker when a task will be ready in a
//! microsecond).
//!
//! ## Rejected designs
//!
//! 1. *Wake a sleeper on every push.* Each push of a stream of tasks would unpark another
//!    worker, which usually finds nothing (the pusher or an earlier wakee took the task) and
//!    parks again: a futex storm, and the CPU cost grows with the push rate (Go's approach 3).
//! 2. *Hand the task to the woken worker (direct handoff).* Thread-state thrashing: the pusher
//!    may run out of work a moment later and need to park itself; it also breaks locality (a
//!    task and the one it woke belong together) and layering (the policy, not the wake-up
//!    path, decides where a task goes) (Go's approach 2).
//! 3. *One mutex and condition variable for all idle workers, locked on every push.* A
//!    central lock on the hot path (Go's approach 1). Here the push path takes no lock unless
//!    it actually wakes somebody.
//! 4. *Sleep with a timeout and poll.* Idle CPU > 0, and a task pushed just after a worker
//!    dozed off waits for the timeout. Boost.Fiber's work-stealing algorithm lost wake-ups and
//!    spun on idle (fiber#203, #327); a timeout only hides the first and is the second.
//! 5. *The sleeper re-checks only its own queues.* A worker that may steal must not sleep
//!    while a stealable task sits in another worker's deque or the injector: the re-check is
//!    [`Policy::has_work`](crate::Policy::has_work), which covers every queue the worker may
//!    take from.
//! 6. *Sleeping workers as a bitmask in one atomic word.* Limits the number of workers to the
//!    word size and makes every sleep, wake and spin write the same cache line. Here the
//!    counts live in one word (read on every push, written rarely) and the set of sleepers
//!    behind a mutex that only the slow paths (going to sleep, waking someone) take, both of
//!    which end in a park or unpark system call anyway.
//! 7. *`SeqCst` loads and stores instead of fences.* Correct in C++20's model, but loom does
//!    not model `SeqCst` accesses (it treats them as `AcqRel`), so the protocol could not be
//!    checked; a `SeqCst` fence costs the same as an RMW on x86. The argument below uses
//!    fences and read-modify-writes only.
//!
//! ## The approach (Go's)
//!
//! A worker is *spinning* when it is out of local work and is looking for work elsewhere
//! (stealing). We wake a sleeper on a push of work that any worker may run
//! ([`notify_any`](Idle::notify_any), Go's `wakep`) only if (1) some worker sleeps and (2) no
//! worker is spinning. The woken worker starts out spinning (nothing was handed to it). If it
//! finds work and it was the last spinner, it wakes another sleeper
//! ([`end_spin`](Idle::end_spin) returns it, Go's `resetspinning`), so parallelism keeps
//! growing while there is work, one worker at a time, without a wake per push. At most half of
//! the busy workers spin at once ([`begin_spin`](Idle::begin_spin)), so spinning cannot eat a
//! machine. Work pinned to one worker wakes exactly that worker, if it sleeps
//! ([`notify_worker`](Idle::notify_worker)).
//!
//! A spinner that gives up ([`end_spin`](Idle::end_spin) with `found == false`), announces
//! its sleep and then finds work in its final re-check becomes a spinner again
//! ([`cancel_sleep`](Idle::cancel_sleep); Go's `findRunnable` does `becomeSpinning` there):
//! pushers may have skipped a wake-up because it was spinning, so when it takes the work it
//! must wake a successor like any spinner that finds work. (Loom found the lost wake-up
//! without this rule: a worker spins, two tasks are pushed, the spinner gives up, re-checks,
//! takes the first task and runs it for a long time; the second waits while the other worker
//! sleeps.)
//!
//! ## Invariants
//!
//! * Every worker is in one state: *awake*, *spinning* or *sleeping* (plus two flavours that
//!   remember "it was spinning until just now": *spun dry*, awake, and *sleeping after a
//!   spin*, counted as sleeping). `counts` holds the
//!   number of spinning and of sleeping workers in one word; the sleeping ones (and only
//!   they) are in the `sleepers` stack. A worker claimed by a waker leaves *sleeping* before
//!   it is unparked, so two wakers never both unpark it for the same sleep and counts never
//!   include a worker that is already on its way back.
//! * Every transition into or out of *sleeping* happens under the `sleepers` lock;
//!   *awake* ↔ *spinning* is done by the worker itself without the lock (plus *sleeping* →
//!   *spinning* by a waker, under the lock).
//! * A worker parks only after `prepare_sleep` (which also ends its spinning) and a
//!   `has_work` that said `false`.
//!
//! ## No lost wake-up: the orderings
//!
//! The pattern for a push (policy push, then `notify_*`):
//!
//! 1. put the task in a queue (`E`);
//! 2. `fence(SeqCst)` (`Fp`), a StoreLoad barrier;
//! 3. read the worker's state (`notify_worker`) or `counts` (`notify_any`).
//!
//! The pattern for going to sleep and for leaving the spinning state:
//!
//! 1. RMW on `counts` (and, for sleep, store the worker's state) — `R`;
//! 2. `fence(SeqCst)` (`Fs`);
//! 3. check every queue the worker may take from (`has_work`).
//!
//! `Fp` and `Fs` are ordered in the single total order of `SeqCst` fences. If `Fs` comes
//! first, the pusher's read in step 3 sees `R` or a later value (C++ `[atomics.fences]`): it
//! sees the worker asleep (and wakes it), or a later value, which only a worker that woke up,
//! cancelled its sleep or was claimed by another waker writes — and such a worker runs its
//! sleep pattern again before it parks, with an `R` that the pusher's read precedes, so its
//! `Fs` comes after `Fp`. If `Fp` comes first, the worker's check sees `E` (or a later state
//! of that queue: someone took the task) and it does not park.
//!
//! The spinning shortcut: a pusher that reads "someone spins" wakes nobody. That spinner's
//! later decrement of `counts` follows the value the pusher read, so (same fence argument) if
//! the spinner ends *without* work it re-checks every queue after the pusher's `Fp` and sees
//! `E` — and then spins again (or, if [`notify_worker`](Idle::notify_worker) claimed it
//! between its announcement and its re-check, it is *spun dry*, whose `end_spin` with work
//! wakes a successor the same way), so the next case applies to it; if it ends *with* work
//! and was the last spinner, it reads `counts` in the same RMW and wakes a sleeper if there is one
//! (the wakee spins, and the argument repeats); if there was no sleeper, every worker that
//! goes to sleep later does so with an `R` after that RMW, hence after the pusher's read, and
//! sees `E`. A worker that is awake will call `pop`.
//!
//! What `has_work` must see: every queue the worker may take from, including tasks that
//! another worker is moving between queues (a batch steal removes them from the victim
//! before it publishes them in the thief's deque; the work-stealing policy counts steals in
//! progress and its `has_work` says `true` while one is). Without that, loom found a worker
//! sleeping while the tasks of a batch the other worker took sat behind that worker's
//! long-running task.
//!
//! Spurious unparks are harmless: a worker claimed by a waker just after it cancelled its
//! sleep gets an unpark it does not need, which makes a later park return at once (the
//! parker must keep a token, as `std::thread::park` does); it then loops and re-checks.
//!
//! Loom checks this protocol with two workers, a foreign pusher and a token parker
//! (`tests/loom_idle.rs`).

use crate::loom::{AtomicU8, AtomicUsize, Mutex, Ordering, fence, lock};
use crate::{SchedError, check_workers};
use crossbeam_utils::CachePadded;

/// A worker that is running tasks or looking in its own queues.
const AWAKE: u8 = 0;
/// A worker looking for work elsewhere (stealing); counted in `counts`.
const SPINNING: u8 = 1;
/// A worker that announced it is going to sleep, or sleeps; counted and in `sleepers`.
const SLEEPING: u8 = 2;
/// Awake, and just stopped spinning without finding work (on its way to sleep); or claimed by
/// [`Idle::notify_worker`] while `SLEEPING_SPUN`, before its re-check. If it finds work it
/// wakes a successor (see `end_spin`).
const SPUN_DRY: u8 = 3;
/// Like `SLEEPING`, for a worker that was `SPUN_DRY`: if it cancels its sleep (its re-check
/// found work), it becomes a spinner again.
const SLEEPING_SPUN: u8 = 4;

fn is_asleep(state: u8) -> bool {
    state == SLEEPING || state == SLEEPING_SPUN
}

/// `counts` layout: spinning workers in the low half, sleeping workers in the high half.
const HALF: u32 = usize::BITS / 2;
const ONE_SPINNING: usize = 1;
const ONE_SLEEPING: usize = 1 << HALF;

fn spinning_of(counts: usize) -> usize {
    counts & (ONE_SLEEPING - 1)
}

fn sleeping_of(counts: usize) -> usize {
    counts >> HALF
}

/// The idle-worker protocol: whom to wake after a push, and when a worker may spin or sleep.
///
/// A small state machine the runtime calls; it never parks or unparks anything itself (it
/// returns which worker to unpark). The comment at the top of `src/idle.rs` holds the design:
/// the invariants, the designs rejected, and the argument that no wake-up is lost. The
/// [crate documentation](crate) has a complete worker loop.
///
/// In short (Go's `runtime/proc.go`): a push of work any worker may run wakes one sleeper
/// only if nobody is spinning (looking for work elsewhere); the woken worker spins, and when a
/// spinner finds work and it was the last one, it wakes the next sleeper. Pushers put the task
/// in a queue, then issue a `SeqCst` fence and read this state; sleepers announce themselves
/// here, issue a `SeqCst` fence, then re-check every queue they may take from
/// ([`Policy::has_work`](crate::Policy::has_work)): one of the two always sees the other.
///
/// The protocol, per worker `w`:
///
/// ```text
/// loop {
///     if let Some(task) = policy.pop(w) {
///         if let Some(v) = idle.end_spin(w, true) { unpark(v) }   // no-op unless spinning
///         run(task);
///         continue;
///     }
///     if idle.begin_spin(w) {                                    // may w look elsewhere?
///         let found = /* pop a few more times */;
///         if let Some(v) = idle.end_spin(w, found.is_some()) { unpark(v) }
///         if let Some(task) = found { run(task); continue }
///     }
///     idle.prepare_sleep(w);
///     if policy.has_work(w) { idle.cancel_sleep(w); continue }
///     park();                                                    // until unparked, or a deadline
///     idle.woke(w);
/// }
/// ```
///
/// and after every push: `Notify::Any` → `if let Some(v) = idle.notify_any() { unpark(v) }`,
/// `Notify::Worker(h)` → `if idle.notify_worker(h) { unpark(h) }`.
///
/// A worker woken by [`notify_any`](Idle::notify_any) or [`end_spin`](Idle::end_spin) starts
/// out *spinning* ([`is_spinning`](Idle::is_spinning)): it must end that with
/// [`end_spin`](Idle::end_spin) once it finds work (the loop above does, after every
/// successful pop) or by going back to sleep ([`prepare_sleep`](Idle::prepare_sleep) ends it).
/// A worker that keeps spinning without ever calling either stops other sleepers from being
/// woken.
///
/// Out-of-range worker indices are ignored (`false`, `None`, no effect).
///
/// # Examples
///
/// ```
/// use spindle_sched::Idle;
///
/// let idle = Idle::new(2)?;
/// // Both workers find nothing and go to sleep.
/// for w in 0..2 {
///     idle.prepare_sleep(w);
///     // ... policy.has_work(w) said false: park ...
/// }
/// assert_eq!(idle.sleeping(), 2);
///
/// // Work that anyone may run arrives: one sleeper is woken, as a spinner.
/// let w = idle.notify_any().expect("someone sleeps");
/// assert_eq!((idle.sleeping(), idle.spinning()), (1, 1));
/// // More work: the spinner will find it, nobody else is woken.
/// assert_eq!(idle.notify_any(), None);
///
/// // The wakee finds work; it was the last spinner and someone still sleeps: wake them too.
/// idle.woke(w);
/// let next = idle.end_spin(w, true);
/// assert_eq!(next, Some(1 - w));
/// # Ok::<(), spindle_sched::SchedError>(())
/// ```
#[derive(Debug)]
pub struct Idle {
    /// Spinning and sleeping workers, packed (see `ONE_SPINNING`, `ONE_SLEEPING`).
    counts: CachePadded<AtomicUsize>,
    /// Each worker's state: `AWAKE`, `SPINNING`, `SLEEPING`, `SPUN_DRY` or `SLEEPING_SPUN`.
    states: Box<[CachePadded<AtomicU8>]>,
    sleepers: Mutex<Sleepers>,
}

/// The sleeping workers: a stack (the most recent sleeper is woken first: its caches are the
/// warmest), with each worker's position for O(1) removal.
#[derive(Debug)]
struct Sleepers {
    stack: Vec<usize>,
    position: Vec<usize>,
}

const NOT_SLEEPING: usize = usize::MAX;

impl Sleepers {
    fn push(&mut self, w: usize) {
        self.position[w] = self.stack.len();
        self.stack.push(w);
    }

    fn pop(&mut self) -> Option<usize> {
        let w = self.stack.pop()?;
        self.position[w] = NOT_SLEEPING;
        Some(w)
    }

    fn remove(&mut self, w: usize) {
        let at = self.position[w];
        if at == NOT_SLEEPING {
            return;
        }
        self.stack.swap_remove(at);
        if let Some(&moved) = self.stack.get(at) {
            self.position[moved] = at;
        }
        self.position[w] = NOT_SLEEPING;
    }
}

impl Idle {
    /// The protocol for `workers` workers, all awake.
    ///
    /// # Errors
    ///
    /// [`SchedError::ZeroWorkers`] for 0 workers, [`SchedError::TooManyWorkers`] above
    /// [`MAX_WORKERS`](crate::MAX_WORKERS).
    pub fn new(workers: usize) -> Result<Self, SchedError> {
        check_workers(workers)?;
        Ok(Idle {
            counts: CachePadded::new(AtomicUsize::new(0)),
            states: (0..workers)
                .map(|_| CachePadded::new(AtomicU8::new(AWAKE)))
                .collect(),
            sleepers: Mutex::new(Sleepers {
                stack: Vec::with_capacity(workers),
                position: vec![NOT_SLEEPING; workers],
            }),
        })
    }

    /// The number of workers.
    pub fn workers(&self) -> usize {
        self.states.len()
    }

    /// Work that any worker may run was made available (a push returned
    /// [`Notify::Any`](crate::Notify::Any)): returns a sleeping worker the runtime should
    /// unpark, or `None` (someone is already spinning, or nobody sleeps).
    ///
    /// The returned worker is no longer counted as sleeping, and is spinning.
    pub fn notify_any(&self) -> Option<usize> {
        // StoreLoad: the push before, the state after (see the module documentation).
        fence(Ordering::SeqCst);
        let counts = self.counts.load(Ordering::Relaxed);
        if sleeping_of(counts) == 0 || spinning_of(counts) != 0 {
            return None;
        }
        self.wake_spinner()
    }

    /// Claims the most recent sleeper as a spinner, if nobody spins.
    fn wake_spinner(&self) -> Option<usize> {
        let mut sleepers = lock(&self.sleepers);
        // Sleeping workers cannot change under the lock; spinning ones may (lock-free).
        if spinning_of(self.counts.load(Ordering::Relaxed)) != 0 {
            return None;
        }
        let w = sleepers.pop()?;
        self.states[w].store(SPINNING, Ordering::Relaxed);
        self.counts
            .fetch_add(ONE_SPINNING.wrapping_sub(ONE_SLEEPING), Ordering::SeqCst);
        Some(w)
    }

    /// Work pinned to worker `w` was pushed (a push returned
    /// [`Notify::Worker(w)`](crate::Notify::Worker)): `true` if `w` is sleeping and must be
    /// unparked (it is then no longer counted as sleeping).
    pub fn notify_worker(&self, w: usize) -> bool {
        let Some(state) = self.states.get(w) else {
            return false;
        };
        fence(Ordering::SeqCst);
        if !is_asleep(state.load(Ordering::Relaxed)) {
            return false;
        }
        let mut sleepers = lock(&self.sleepers);
        if !is_asleep(state.load(Ordering::Relaxed)) {
            return false;
        }
        sleepers.remove(w);
        // A worker that was spinning until it announced its sleep may be claimed before its
        // re-check, which then finds work a pusher skipped waking anyone for (it counted on
        // the spinner): it must still wake a successor when it finds work, as `cancel_sleep`
        // would have made it do. So it is claimed as spun dry, not awake; `woke` (it parked
        // after a re-check that found nothing, so it owes nothing) makes it awake.
        let now = state.load(Ordering::Relaxed);
        state.store(
            if now == SLEEPING_SPUN {
                SPUN_DRY
            } else {
                AWAKE
            },
            Ordering::Relaxed,
        );
        self.counts.fetch_sub(ONE_SLEEPING, Ordering::SeqCst);
        true
    }

    /// Worker `w` found nothing in its own queues and wants to look elsewhere (steal): `true`
    /// if it may spin. At most half of the busy (not sleeping) workers spin at once (Go's
    /// rule). `true` if `w` is spinning already; `false` if it is between
    /// [`prepare_sleep`](Idle::prepare_sleep) and [`woke`](Idle::woke).
    pub fn begin_spin(&self, w: usize) -> bool {
        let Some(state) = self.states.get(w) else {
            return false;
        };
        match state.load(Ordering::Relaxed) {
            SPINNING => return true,
            SLEEPING | SLEEPING_SPUN => return false,
            _ => {}
        }
        let workers = self.states.len();
        let mut counts = self.counts.load(Ordering::Relaxed);
        loop {
            let busy = workers.saturating_sub(sleeping_of(counts));
            if 2 * spinning_of(counts) >= busy {
                return false;
            }
            match self.counts.compare_exchange_weak(
                counts,
                counts + ONE_SPINNING,
                Ordering::SeqCst,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => counts = now,
            }
        }
        state.store(SPINNING, Ordering::Relaxed);
        true
    }

    /// Worker `w` stops spinning; `found`: it found work. If it found work and was the last
    /// spinner while someone sleeps, returns a worker to wake (as a spinner) so that someone
    /// keeps looking (Go's `resetspinning` → `wakep`). A no-op (`None`) if `w` is not
    /// spinning, so the runtime may call it after every successful pop.
    pub fn end_spin(&self, w: usize, found: bool) -> Option<usize> {
        let state = self.states.get(w)?;
        match state.load(Ordering::Relaxed) {
            SPINNING => {
                state.store(if found { AWAKE } else { SPUN_DRY }, Ordering::Relaxed);
                let before = self.counts.fetch_sub(ONE_SPINNING, Ordering::SeqCst);
                if found && spinning_of(before) == 1 && sleeping_of(before) > 0 {
                    return self.wake_spinner();
                }
                None
            }
            SPUN_DRY if found => {
                // It gave up spinning, then found work anyway (without going through
                // `prepare_sleep`): it may have been the spinner a pusher relied on, so do
                // what a spinner that finds work does.
                state.store(AWAKE, Ordering::Relaxed);
                self.notify_any()
            }
            _ => None,
        }
    }

    /// Worker `w` is going to sleep.
    ///
    /// Protocol: `prepare_sleep(w)`; then the runtime re-checks
    /// [`policy.has_work(w)`](crate::Policy::has_work); if `true`,
    /// [`cancel_sleep(w)`](Idle::cancel_sleep) and keep running; else park the thread until
    /// unparked (or a timer deadline), then [`woke(w)`](Idle::woke). A spinning worker stops
    /// spinning here. Ends with a `SeqCst` fence, so that a push racing with this is seen
    /// either by the re-check or by the pusher's `notify_*`.
    pub fn prepare_sleep(&self, w: usize) {
        let Some(state) = self.states.get(w) else {
            return;
        };
        self.end_spin(w, false);
        {
            let mut sleepers = lock(&self.sleepers);
            let now = state.load(Ordering::Relaxed);
            if !is_asleep(now) {
                let asleep = if now == SPUN_DRY {
                    SLEEPING_SPUN
                } else {
                    SLEEPING
                };
                state.store(asleep, Ordering::Relaxed);
                sleepers.push(w);
                self.counts.fetch_add(ONE_SLEEPING, Ordering::SeqCst);
            }
        }
        fence(Ordering::SeqCst);
    }

    /// Worker `w` found work after [`prepare_sleep`](Idle::prepare_sleep) and will not park.
    ///
    /// If `w` had been spinning until it prepared to sleep, it spins again (Go's
    /// `findRunnable` → `becomeSpinning` after its final re-check): pushers may have counted
    /// on it, so when it finds the work its [`end_spin`](Idle::end_spin) wakes a successor
    /// if needed.
    ///
    /// If a waker claimed `w` meanwhile, it stays claimed (spinning, if
    /// [`notify_any`](Idle::notify_any) claimed it) and the waker's unpark will arrive: the
    /// parker must treat it as a spurious wake-up.
    pub fn cancel_sleep(&self, w: usize) {
        self.leave_sleep(w, true);
    }

    /// Worker `w` woke up from its park, for whatever reason (unparked, spurious, a timer).
    pub fn woke(&self, w: usize) {
        self.leave_sleep(w, false);
    }

    fn leave_sleep(&self, w: usize, cancelled: bool) {
        let Some(state) = self.states.get(w) else {
            return;
        };
        // Claimed by `notify_worker` after a spin (see there), and it parked: its re-check
        // found nothing, so no pusher's work waits on it. Only `w` itself leaves `SPUN_DRY`.
        let owed_nothing = |now: u8| !cancelled && now == SPUN_DRY;
        let now = state.load(Ordering::Relaxed);
        if owed_nothing(now) {
            state.store(AWAKE, Ordering::Relaxed);
            return;
        }
        if !is_asleep(now) {
            return; // claimed by a waker, who did the bookkeeping
        }
        let mut sleepers = lock(&self.sleepers);
        let now = state.load(Ordering::Relaxed);
        if owed_nothing(now) {
            state.store(AWAKE, Ordering::Relaxed);
        } else if is_asleep(now) {
            sleepers.remove(w);
            if cancelled && now == SLEEPING_SPUN {
                state.store(SPINNING, Ordering::Relaxed);
                self.counts
                    .fetch_add(ONE_SPINNING.wrapping_sub(ONE_SLEEPING), Ordering::SeqCst);
            } else {
                state.store(AWAKE, Ordering::Relaxed);
                self.counts.fetch_sub(ONE_SLEEPING, Ordering::SeqCst);
            }
        }
    }

    /// The number of workers counted as sleeping (between
    /// [`prepare_sleep`](Idle::prepare_sleep) and a wake-up).
    pub fn sleeping(&self) -> usize {
        sleeping_of(self.counts.load(Ordering::SeqCst))
    }

    /// The number of spinning workers.
    pub fn spinning(&self) -> usize {
        spinning_of(self.counts.load(Ordering::SeqCst))
    }

    /// Whether worker `w` is spinning (it began to, or a waker woke it as a spinner).
    pub fn is_spinning(&self, w: usize) -> bool {
        self.states
            .get(w)
            .is_some_and(|s| s.load(Ordering::Relaxed) == SPINNING)
    }

    /// Whether worker `w` is counted as sleeping.
    pub fn is_sleeping(&self, w: usize) -> bool {
        self.states
            .get(w)
            .is_some_and(|s| is_asleep(s.load(Ordering::Relaxed)))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn zero_workers_is_an_error() {
        assert_eq!(Idle::new(0).unwrap_err(), SchedError::ZeroWorkers);
    }

    #[test]
    fn notify_worker_wakes_only_a_sleeper() {
        let idle = Idle::new(3).unwrap();
        assert!(!idle.notify_worker(1));
        idle.prepare_sleep(1);
        assert!(idle.is_sleeping(1));
        assert!(idle.notify_worker(1));
        assert!(!idle.notify_worker(1), "claimed once");
        assert_eq!(idle.sleeping(), 0);
        idle.woke(1);
        assert_eq!(idle.sleeping(), 0);
        assert!(!idle.notify_worker(7), "out of range");
    }

    #[test]
    fn cancel_and_woke_uncount() {
        let idle = Idle::new(2).unwrap();
        idle.prepare_sleep(0);
        idle.prepare_sleep(0); // twice: counted once
        assert_eq!(idle.sleeping(), 1);
        idle.cancel_sleep(0);
        assert_eq!(idle.sleeping(), 0);
        idle.prepare_sleep(1);
        idle.woke(1); // a timer
        assert_eq!(idle.sleeping(), 0);
        assert_eq!(idle.notify_any(), None, "nobody sleeps");
    }

    #[test]
    fn at_most_half_the_busy_workers_spin() {
        let idle = Idle::new(4).unwrap();
        assert!(idle.begin_spin(0));
        assert!(idle.begin_spin(0), "already spinning");
        assert!(idle.begin_spin(1));
        assert!(!idle.begin_spin(2), "2 of 4 busy spin");
        assert_eq!(idle.spinning(), 2);
        idle.prepare_sleep(3);
        idle.prepare_sleep(2); // busy: 2, spinning: 2
        assert_eq!(idle.end_spin(1, false), None);
        assert!(!idle.begin_spin(1), "1 of 2 busy spins");
        assert_eq!(idle.end_spin(0, true), Some(2), "last spinner found work");
        assert!(idle.is_spinning(2));
        assert_eq!(idle.end_spin(3, true), None, "not spinning: no-op");
    }

    #[test]
    fn notify_any_wakes_one_spinner_at_a_time() {
        let idle = Idle::new(3).unwrap();
        for w in 0..3 {
            idle.prepare_sleep(w);
        }
        assert_eq!(idle.notify_any(), Some(2), "most recent sleeper first");
        assert_eq!(idle.notify_any(), None, "2 spins");
        idle.woke(2);
        assert!(idle.is_spinning(2));
        assert_eq!(idle.end_spin(2, true), Some(1));
        assert_eq!(idle.end_spin(1, false), None);
        assert_eq!((idle.sleeping(), idle.spinning()), (1, 0));
        // A sleeper claimed right after it cancelled stays claimed (a spurious unpark follows).
        idle.prepare_sleep(1);
        assert_eq!(idle.notify_any(), Some(1));
        idle.cancel_sleep(1);
        assert!(idle.is_spinning(1));
        idle.prepare_sleep(1); // going back to sleep ends the spin
        assert_eq!((idle.sleeping(), idle.spinning()), (2, 0));
    }
}
