//! The waiter record every primitive queues, and the wait loop.
//!
//! A [`Waiter`] is heap-allocated (`Arc`) and holds the waiting task's [`Waker`] and one state
//! word. It never lives on the waiting coroutine's stack (DESIGN.md invariant 3: a suspended
//! shared-stack coroutine's stack bytes are elsewhere), so a notifier on another thread only
//! ever touches heap memory.
//!
//! # The state word
//!
//! ```text
//! WAITING ──try_select(op)──────────────────────────▶ OP0 + op   (completed for the waiter)
//!    │    ──try_claim()──▶ BUSY ──publish(op)────────▶ OP0 + op   (a value moved into/out of
//!    │                                                            the waiter's slot between)
//!    └────try_abort()───▶ ABORTED                               (timed out / cancelled)
//! ```
//!
//! Every transition out of `WAITING` is a compare-and-swap, so exactly one party decides the
//! waiter's fate: a notifier (which then owns whatever it hands over: a lock, permits, a message
//! slot) or the waiter itself (timeout, cancellation, a `select` completing another arm). That
//! is what makes `select` complete exactly one arm while registered in many queues, and what
//! makes timeouts and cancellation lose nothing: a waiter that fails to abort has been handed
//! something and must take it (or pass it on).
//!
//! # Waiting
//!
//! "Register, release the primitive's lock, park" is race-free because of `spindle_park`'s
//! permit: a wake between the release and the park is kept. The wait loop ([`Waiter::wait`])
//! parks until the state leaves `WAITING`, so a stale wake-up (of an earlier waiter's waker
//! clone) is never visible to callers: no primitive of this crate wakes spuriously.

use std::sync::Arc;
use std::task::Waker;
use std::time::Instant;

use crate::loom::{AtomicU8, AtomicUsize, Ordering, Wake, park, park_until, spin_wait, waker};

const WAITING: usize = 0;
const BUSY: usize = 1;
const ABORTED: usize = 2;
const OP0: usize = 3;

/// [`Waiter::sleep`]: the waiter parks (or may park): its completer must wake it.
const PARKS: u8 = 0;
/// [`Waiter::sleep`]: the waiter is spinning on its state word: its completer need not wake it.
const SPINS: u8 = 1;
/// [`Waiter::sleep`]: the completer saw `SPINS` and did not wake it.
const SKIPPED: u8 = 2;

/// A waiting task's record. See the module docs.
#[derive(Debug)]
pub(crate) struct Waiter {
    state: AtomicUsize,
    waker: Waker,
    /// The OS thread the waiter registered on ([`thread_token`]).
    home: usize,
    /// The OS thread of the party that completed it, written before the state is published
    /// (0: not recorded). Channels use it to decide whether spinning before parking pays.
    by: AtomicUsize,
    /// Whether the completer must wake the waiter (`PARKS`), or it spins and will see the
    /// state word change by itself (`SPINS`; the completer then swaps in `SKIPPED`). One swap
    /// each side decides: a waiter that stops spinning swaps `PARKS` back in, and if it finds
    /// `SKIPPED` it was completed and no wake-up is coming, so it must not park.
    sleep: AtomicU8,
}

/// A token of the current OS thread (the address of a thread-local): equal tokens, same
/// thread. Read afresh at each use, never cached across a suspension.
#[inline(never)]
pub(crate) fn thread_token() -> usize {
    thread_local! {
        static TOKEN: u8 = const { 0 };
    }
    TOKEN
        .try_with(|t| std::ptr::from_ref(t) as usize)
        .unwrap_or(1)
}

impl Waiter {
    /// A record for the current task (coroutine or thread), in the `WAITING` state.
    pub(crate) fn new() -> Arc<Waiter> {
        Arc::new(Waiter::new_inline())
    }

    /// As [`new`](Self::new), to embed in another heap allocation.
    pub(crate) fn new_inline() -> Waiter {
        Waiter {
            state: AtomicUsize::new(WAITING),
            waker: waker(),
            home: thread_token(),
            by: AtomicUsize::new(0),
            sleep: AtomicU8::new(PARKS),
        }
    }

    /// Completes the wait with operation `op` if it is still waiting. The caller wakes it
    /// (after releasing its locks) if this returns true.
    #[inline]
    pub(crate) fn try_select(&self, op: usize) -> bool {
        self.state
            .compare_exchange(WAITING, OP0 + op, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Claims the waiter to move a value into or out of its slot; must be followed by
    /// [`publish`](Self::publish) without blocking in between.
    #[inline]
    pub(crate) fn try_claim(&self) -> bool {
        self.state
            .compare_exchange(WAITING, BUSY, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Completes a claimed waiter with operation `op`: what was written to its slot before is
    /// visible to it once it sees `op`. Records the completing thread.
    #[inline]
    pub(crate) fn publish(&self, op: usize) {
        self.by.store(thread_token(), Ordering::Relaxed);
        self.state.store(OP0 + op, Ordering::Release);
    }

    /// After completion by [`publish`](Self::publish): whether the completing party ran on
    /// another OS thread than the one the waiter registered on.
    #[inline]
    pub(crate) fn completed_remotely(&self) -> bool {
        let by = self.by.load(Ordering::Relaxed);
        by != 0 && by != self.home
    }

    /// The waiter gives up (timeout, cancellation, another select arm). False: someone
    /// completed it first (or is completing it): it must take what it was handed.
    #[inline]
    pub(crate) fn try_abort(&self) -> bool {
        self.state
            .compare_exchange(WAITING, ABORTED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Whether nobody has completed or aborted it yet (a hint for `select`'s readiness check).
    #[inline]
    pub(crate) fn is_waiting(&self) -> bool {
        self.state.load(Ordering::Relaxed) == WAITING
    }

    /// Wakes the waiting task; called once, by whoever completed the waiter
    /// ([`try_select`](Self::try_select), [`publish`](Self::publish)), after that. Skipped
    /// while the waiter spins (it sees the completion by itself): waking a running task costs
    /// a read-modify-write on its (remote) state and leaves a permit its next park must eat.
    #[inline]
    pub(crate) fn wake(&self) {
        if self.sleep.load(Ordering::Relaxed) == SPINS
            && self.sleep.swap(SKIPPED, Ordering::AcqRel) == SPINS
        {
            return;
        }
        self.waker.wake_by_ref();
    }

    /// The operation after a failed [`try_abort`](Self::try_abort): it has been completed (or
    /// is being completed).
    pub(crate) fn completed_after_abort_failed(&self) -> usize {
        let mut round = 0;
        loop {
            match self.state.load(Ordering::Acquire) {
                BUSY => spin_wait(&mut round),
                s => {
                    debug_assert!(s >= OP0, "abort failed but the waiter is not completed");
                    return s.saturating_sub(OP0);
                }
            }
        }
    }

    /// Parks the current task until this waiter is completed (returns the operation) or
    /// `deadline` passes and the waiter is aborted (returns `None`; the caller then removes it
    /// from the queues it is in). Never returns early on a stale wake-up.
    ///
    /// If the task is cancelled, `park` unwinds out of here with the waiter still `WAITING`
    /// (or completed meanwhile): the caller's drop guard deals with it.
    pub(crate) fn wait(&self, deadline: Option<Instant>) -> Option<usize> {
        loop {
            let state = self.state.load(Ordering::Acquire);
            match state {
                WAITING => {}
                BUSY => return Some(self.completed_after_abort_failed()),
                ABORTED => return None,
                s => return Some(s - OP0),
            }
            match deadline {
                None => park(),
                Some(deadline) => {
                    if park_until(deadline) == Wake::TimedOut && self.try_abort() {
                        return None;
                    }
                }
            }
        }
    }

    /// Spins (without parking) for about `budget` while the waiter is still waiting; true if
    /// it was completed meanwhile. Under loom it checks once (loom explores the completion
    /// racing with the end of the spin).
    ///
    /// While it spins, completers do not wake it (see [`wake`](Self::wake)). When the spin
    /// ends without a completion the waiter takes the wake-up back (`PARKS`); if a completer
    /// had skipped it meanwhile, the waiter was completed and must not park: true.
    pub(crate) fn spin(&self, budget: std::time::Duration) -> bool {
        if self.sleep.swap(SPINS, Ordering::AcqRel) != PARKS {
            return true; // (not reached: one spin per waiter)
        }
        if self.spin_on_state(budget) {
            // Completed. A completer that saw `SPINS` did not wake us; one that saw `PARKS`
            // (before our swap) did, and that wake-up stays as a permit (the next park of
            // this task returns at once; every wait loops on its condition).
            crate::loom::consume_budget();
            return true;
        }
        if self.sleep.swap(PARKS, Ordering::AcqRel) == SKIPPED {
            crate::loom::consume_budget();
            return true;
        }
        false
    }

    #[cfg(not(loom))]
    fn spin_on_state(&self, budget: std::time::Duration) -> bool {
        let start = Instant::now();
        loop {
            for _ in 0..32 {
                if self.state.load(Ordering::Relaxed) != WAITING {
                    return true;
                }
                std::hint::spin_loop();
            }
            if start.elapsed() >= budget {
                return false;
            }
        }
    }

    #[cfg(loom)]
    fn spin_on_state(&self, _budget: std::time::Duration) -> bool {
        self.state.load(Ordering::Relaxed) != WAITING
    }
}

/// `Some(deadline)` for a timeout, `None` ("wait forever") if it does not fit in an `Instant`.
pub(crate) fn deadline_after(timeout: std::time::Duration) -> Option<Instant> {
    Instant::now().checked_add(timeout)
}
