//! The waiter record every primitive queues, and the wait loop.
//!
//! A [`Waiter`] is heap-allocated (`Arc`) and holds the waiting task's [`Waker`] and one state
//! word. It never lives on the waiting coroutine's stack (a suspended
//! shared-stack coroutine's stack bytes are elsewhere), so a notifier on another thread only
//! ever touches heap memory.
//!
//! # The state word
//!
//! ```text
//! WAITING ──try_select(op)──────────────────────────▶ OP0 + op   (completed for the waiter)
//!    │    ──try_claim()──▶ BUSY ──complete(op)───────▶ OP0 + op   (a value moved into/out of
//!    │                         │                                  the waiter's slot between;
//!    │                         │                                  woken, then published)
//!    │                         └──publish_claimed(op)─▶ OP0 + op   (a lock's state changed
//!    │                                                            between; woken after)
//!    │    ──mark_claimed()▶ BUSY ──complete(op)──────▶ OP0 + op   (a channel packet popped
//!    │                                                            from its one queue)
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
//!
//! # Async waiters
//!
//! The `*_async` futures queue the same records in the same queues, made with
//! [`Waiter::new_async`]: instead of the task's fixed waker the record holds the waker of the
//! latest poll, behind a small lock (an executor may poll with a different waker each time).
//! [`Waiter::poll`] stores the poll's waker, then reads the state word: a completer changes the
//! state first and takes the waker (under that lock) after, so either the poll sees the
//! completion or the completer sees the new waker: no lost wake-up. A pending future holds its
//! record in an `Arc` (nothing points into the future, so it is `Unpin`); dropping it runs the
//! same abandon logic as a cancelled coroutine's drop guard.

use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use crate::loom::{
    Alive, AtomicU8, AtomicUsize, DataCell, Ordering, StdMutex, Wake, is_current_waker, lock, park,
    park_until, spin_wait, waker,
};

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

/// A waiting task's record. See the module docs. (`pub` only so that the select machinery's
/// sealed traits may name it: the module is private.)
#[derive(Debug)]
pub struct Waiter {
    state: AtomicUsize,
    waker: WakerSlot,
    /// The OS thread the waiter registered on ([`thread_token`]). Relaxed: written only while
    /// the record is unshared ([`reset`](Self::reset)).
    home: AtomicUsize,
    /// The OS thread of the party that completed it, written before the state is published
    /// (0: not recorded). Channels use it to decide whether spinning before parking pays.
    by: AtomicUsize,
    /// Whether the completer must wake the waiter (`PARKS`), or it spins and will see the
    /// state word change by itself (`SPINS`; the completer then swaps in `SKIPPED`). One swap
    /// each side decides: a waiter that stops spinning swaps `PARKS` back in, and if it finds
    /// `SKIPPED` it was completed and no wake-up is coming, so it must not park.
    sleep: AtomicU8,
    /// Under loom, the check of [`complete`](Self::complete)'s "nothing touches the record
    /// after the publication": `complete` touches it, and an owner that takes the record back
    /// ([`retire`](Self::retire): a channel's packet, reused or freed) writes it, so a
    /// completer's use that the owner's view does not include is a race loom reports (see
    /// `crate::loom::Alive`). Records held through a reference count are not retired: their
    /// completers' uses are covered by the count (which loom does not see).
    alive: Alive,
}

/// Whom [`Waiter::wake`] wakes.
enum WakerSlot {
    /// A blocking wait's task (coroutine or thread): fixed while the record is shared
    /// (queued, or held by a completer); replaced only while nobody else can reach the record
    /// ([`Waiter::reset`]: a channel reusing a packet).
    Task(DataCell<Waker>),
    /// A future's: the waker of its latest poll ([`Waiter::poll`] replaces it).
    Future(StdMutex<Waker>),
}

// SAFETY: the task waker is written only while the record is unshared (`Waiter::reset`,
// whose callers guarantee it) and only read while shared; a `Waker`
// is `Send + Sync`. The future waker is behind a lock.
unsafe impl Sync for WakerSlot {}

impl std::fmt::Debug for WakerSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WakerSlot::Task(_) => "Task",
            WakerSlot::Future(_) => "Future",
        })
    }
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
        Waiter::with_waker(WakerSlot::Task(DataCell::new(waker())))
    }

    /// A record for a future polled with `waker` (see [`poll`](Self::poll)).
    pub(crate) fn new_async(waker: &Waker) -> Arc<Waiter> {
        Arc::new(Waiter::new_async_inline(waker))
    }

    /// As [`new_async`](Self::new_async), to embed in another heap allocation.
    pub(crate) fn new_async_inline(waker: &Waker) -> Waiter {
        Waiter::with_waker(WakerSlot::Future(StdMutex::new(waker.clone())))
    }

    fn with_waker(waker: WakerSlot) -> Waiter {
        Waiter {
            state: AtomicUsize::new(WAITING),
            waker,
            home: AtomicUsize::new(thread_token()),
            by: AtomicUsize::new(0),
            sleep: AtomicU8::new(PARKS),
            alive: Alive::default(),
        }
    }

    /// The owner takes the record back (to reuse or free it) after its completion: every use
    /// by the completer must have happened before (checked under loom, see `alive`).
    #[inline(always)]
    pub(crate) fn retire(&self) {
        self.alive.retire();
    }

    /// Makes a finished blocking record fresh for a new wait of the current task (a channel
    /// reusing its packet): `WAITING`, this thread, the current task's waker — the one it holds
    /// if that is the current task's already (the usual case: a task waiting on a channel
    /// again), which saves a reference count's increment and decrement.
    ///
    /// # Safety
    ///
    /// Nobody else can reach the record: it is in no queue, and every reference a completer
    /// held is gone (and its uses happen before this call).
    pub(crate) unsafe fn reset(&self) {
        self.state.store(WAITING, Ordering::Relaxed);
        self.home.store(thread_token(), Ordering::Relaxed);
        self.by.store(0, Ordering::Relaxed);
        self.sleep.store(PARKS, Ordering::Relaxed);
        if let WakerSlot::Task(slot) = &self.waker {
            // SAFETY: unshared, per the caller: nobody reads the waker meanwhile.
            let slot = unsafe { &mut *slot.ptr() };
            if !is_current_waker(slot) {
                *slot = waker();
            }
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
    /// [`complete`](Self::complete) without blocking in between.
    #[inline]
    pub(crate) fn try_claim(&self) -> bool {
        self.state
            .compare_exchange(WAITING, BUSY, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Marks a waiter as being completed where no other party can race for it — a channel's
    /// packet popped from its queue under the channel's lock (its owner aborts only by
    /// removing it from the queue under that lock) — so a plain store does what
    /// [`try_claim`](Self::try_claim)'s compare-and-swap does. Must be followed by
    /// [`complete`](Self::complete) without blocking in between. (`BUSY` tells a waiter woken
    /// before the publication to wait for it rather than park again.)
    #[inline]
    pub(crate) fn mark_claimed(&self) {
        self.state.store(BUSY, Ordering::Relaxed);
    }

    /// Completes a claimed waiter with operation `op` and wakes it: what was written to its
    /// slot before is visible to it once it sees `op`. Records the completing thread.
    ///
    /// The wake-up comes *before* the state is published, and nothing touches the record
    /// after: a waiter that sees `op` may free or reuse its record at once, so a completer
    /// need not hold a reference to it (a channel's queue entry points to its packet without
    /// one: two atomic read-modify-writes fewer per blocked operation). A waiter woken
    /// before the publication sees `BUSY` and waits out the few instructions left. A
    /// future's waker is the exception: it is cloned out, the state published, and the clone
    /// woken (a waker may poll the future at once, on this thread, which would wait for the
    /// publication for ever).
    #[inline]
    pub(crate) fn complete(&self, op: usize) {
        if self.skip_spinning_waiter() {
            // Spinning on the state word: it sees the publication by itself.
            self.publish(op);
            return;
        }
        match &self.waker {
            WakerSlot::Task(waker) => {
                self.alive.touch();
                // SAFETY: claimed and not yet published: the owner is waiting (it cannot
                // replace the waker, see `WakerSlot::Task`, nor free the record).
                unsafe { (*waker.ptr_shared()).wake_by_ref() }
                self.publish(op);
            }
            WakerSlot::Future(slot) => {
                let waker = lock(slot).clone();
                self.publish(op);
                waker.wake();
            }
        }
    }

    /// Completes a claimed waiter with operation `op` without waking it, for a completer
    /// that must change its primitive's state between claiming a waiter and letting it see
    /// its grant (a waiter that saw a lock granted could release it before the lock's state
    /// counted it). The completer holds a reference to the record and wakes it afterwards
    /// with [`wake`](Self::wake).
    #[inline]
    pub(crate) fn publish_claimed(&self, op: usize) {
        self.publish(op);
    }

    /// The last touch of a claimed record: what was written before is visible to the waiter
    /// once it sees `op`.
    #[inline]
    fn publish(&self, op: usize) {
        self.alive.touch();
        self.by.store(thread_token(), Ordering::Relaxed);
        self.alive.touch();
        self.state.store(OP0 + op, Ordering::Release);
    }

    /// After [`complete`](Self::complete): whether the completing party ran on
    /// another OS thread than the one the waiter registered on.
    #[inline]
    pub(crate) fn completed_remotely(&self) -> bool {
        let by = self.by.load(Ordering::Relaxed);
        by != 0 && by != self.home.load(Ordering::Relaxed)
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

    /// Wakes the waiting task; called once, by whoever completed the waiter with
    /// [`try_select`](Self::try_select) or [`publish_claimed`](Self::publish_claimed), after
    /// that (and while it still holds a reference to the record: the owner may reuse it once
    /// completed). Skipped while the waiter spins (it sees the completion by itself): waking a
    /// running task costs a read-modify-write on its (remote) state and leaves a permit its
    /// next park must eat.
    #[inline]
    pub(crate) fn wake(&self) {
        if self.skip_spinning_waiter() {
            return;
        }
        match &self.waker {
            WakerSlot::Task(waker) => {
                // SAFETY: the completer calls this while it holds the record (a queue entry's
                // reference), so the owner is not replacing the waker (see `WakerSlot::Task`).
                unsafe { (*waker.ptr_shared()).wake_by_ref() }
            }
            WakerSlot::Future(slot) => {
                // Cloned out, woken after the unlock: a waker may poll the future at once
                // (on this thread), and that poll takes this lock.
                let waker = lock(slot).clone();
                waker.wake();
            }
        }
    }

    /// Whether the waiter is spinning on its state word ([`spin`](Self::spin)) and needs no
    /// wake-up: if so it is told so (`SKIPPED`), one swap against its own.
    #[inline]
    fn skip_spinning_waiter(&self) -> bool {
        self.alive.touch();
        self.sleep.load(Ordering::Relaxed) == SPINS
            && self.sleep.swap(SKIPPED, Ordering::AcqRel) == SPINS
    }

    /// An async record ([`new_async`](Self::new_async)): `Ready(op)` once it was completed
    /// with operation `op`; else stores `cx`'s waker (the one the completer will wake) and
    /// returns `Pending`.
    ///
    /// The state is read again after the waker is stored: a completer moves the state out of
    /// `WAITING` (`try_select`, or `try_claim` before [`complete`](Self::complete)) before it
    /// takes the waker, under the same lock, so a completion this second read misses wakes the
    /// waker stored here. Never called on an aborted record (only the future's drop
    /// aborts it); that reads as `Pending`.
    pub(crate) fn poll(&self, cx: &mut Context<'_>) -> Poll<usize> {
        if let Some(op) = self.completion() {
            return Poll::Ready(op);
        }
        if let WakerSlot::Future(slot) = &self.waker {
            let mut waker = lock(slot);
            if !waker.will_wake(cx.waker()) {
                waker.clone_from(cx.waker());
            }
        }
        match self.completion() {
            Some(op) => Poll::Ready(op),
            None => Poll::Pending,
        }
    }

    /// The operation the waiter was completed with, if it was (waiting out a claimed,
    /// not yet published hand-off: a few instructions).
    fn completion(&self) -> Option<usize> {
        match self.state.load(Ordering::Acquire) {
            WAITING | ABORTED => None,
            BUSY => Some(self.completed_after_abort_failed()),
            s => Some(s - OP0),
        }
    }

    /// The operation after a failed [`try_abort`](Self::try_abort) (or a failed removal of a
    /// [`mark_claimed`](Self::mark_claimed) waiter from its queue): it has been completed (or
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
    #[inline]
    pub(crate) fn wait(&self, deadline: Option<Instant>) -> Option<usize> {
        self.wait_or_abort(deadline, Self::try_abort)
    }

    /// As [`wait`](Self::wait), with the way to give up at the deadline: `abort` returns true
    /// if the waiter is out of every completer's reach (aborted), false if a completer has it
    /// (it then waits for the completion, without a deadline).
    #[inline]
    pub(crate) fn wait_or_abort(
        &self,
        mut deadline: Option<Instant>,
        mut abort: impl FnMut(&Waiter) -> bool,
    ) -> Option<usize> {
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
                Some(d) => {
                    if park_until(d) == Wake::TimedOut {
                        if abort(self) {
                            return None;
                        }
                        deadline = None;
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

/// The waiting state of a simple future (one that waits once for a wake-up that hands it
/// nothing to pass on but the wake-up itself: `Notify`, `WaitGroup`): its queued record, and
/// whether it has returned `Ready`.
#[derive(Debug, Default)]
pub(crate) struct OnceWait {
    /// The queued record, while it waits.
    pub(crate) cx: Option<Arc<Waiter>>,
    /// Returned `Ready` (later polls are `Ready` again, and queue nothing).
    pub(crate) done: bool,
}

impl OnceWait {
    /// `Ready` once the record was completed. On the first poll `register` either finds the
    /// condition met (`None`: ready at once) or queues a record made with the waker it is
    /// given (`Some`).
    pub(crate) fn poll(
        &mut self,
        cx: &mut Context<'_>,
        register: impl FnOnce(&Waker) -> Option<Arc<Waiter>>,
    ) -> Poll<()> {
        if self.done {
            return Poll::Ready(());
        }
        match &self.cx {
            Some(waiter) => {
                if waiter.poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.cx = None;
            }
            None => {
                if let Some(waiter) = register(cx.waker()) {
                    self.cx = Some(waiter);
                    return Poll::Pending;
                }
            }
        }
        self.done = true;
        Poll::Ready(())
    }
}

/// `Some(deadline)` for a timeout, `None` ("wait forever") if it does not fit in an `Instant`.
pub(crate) fn deadline_after(timeout: std::time::Duration) -> Option<Instant> {
    Instant::now().checked_add(timeout)
}
