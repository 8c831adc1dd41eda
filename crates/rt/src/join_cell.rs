//! The result of a task, shared with its `JoinHandle` and its scope, and who waits for it.
//!
//! **The result.** Before `COMPLETE` only the finishing task touches it: it writes the result
//! once ([`JoinCell::put`]), then sets `COMPLETE` (release). From `COMPLETE` on, everyone else
//! does, under `lock`, after seeing `COMPLETE` (acquire) — the handle takes the value, a scope
//! a child's panic, `finish` a detached handle's unwanted value ([`JoinCell::with_result`]).
//!
//! **The wakers.** Two fields, each with one owner besides `finish` and a flag in the state
//! word that says which of the two may touch it: `waiter` (the handle's; `JOIN_WAITER`) and
//! `scope_waiter` (the scope that spawned the task; `SCOPE_WAITER` — a sibling may join the
//! handle meanwhile, and one shared field made the later waiter replace the earlier, which
//! never woke). While the flag is clear the owner alone uses the field; it stores its waker,
//! then sets the flag ([`JoinCell::register`]), and from then on leaves the field alone unless
//! it clears the flag again with a compare-and-swap that fails once `COMPLETE` is set.
//! `finish` sets `COMPLETE` and learns from the state it replaced which flags were set: those
//! fields are its own from then on, and it takes their wakers without a lock
//! ([`JoinCell::after_complete`]). An owner whose flag lands after `COMPLETE` (the `fetch_or`
//! returns a state with `COMPLETE`) knows `finish` did not see it: the field is still its own,
//! and the task finished, so it takes the result instead of parking. `DETACHED` (the handle of
//! a result with drop glue dropped: [`JoinCell::detach`]) works the same way for the value,
//! which `finish` then drops at once.
//!
//! So a finish nobody waits for takes no lock and a waited-for one none either; a join that
//! waits costs its flag and the lock that takes the result. (It was one lock around all of it,
//! which every finish took and a waiting join took twice: three atomic operations where a
//! waited-for finish and its join now take two, and one where an unwaited finish takes none.)
//!
//! `tests/loom_task.rs` checks this protocol under loom (joins, re-registrations, scopes and
//! detaches against the finish): this file is compiled there again, with loom's atomics, lock
//! and cells behind `crate::loom`.

use std::task::Waker;

use crate::loom::{DataCell, Lock, lock};
use crate::state::{State, TaskState};

/// A task's join cell: its result (`Ok`: the value; `E`: the task's `Failure`) and the wakers
/// of those who wait for it. Every method takes the task's state word (`state`).
pub(crate) struct JoinCell<T, E> {
    /// Guards `result` once the task is complete.
    lock: Lock,
    result: DataCell<Option<Result<T, E>>>,
    waiter: DataCell<Option<Waker>>,
    scope_waiter: DataCell<Option<Waker>>,
}

// SAFETY: `result` is written by the finishing task before `COMPLETE` and touched by anyone
// else only after it, under `lock`; each waker field is touched by its owner while its flag is
// clear and by `finish` once it saw the flag set when it completed the task, which ends the
// owner's use (module docs): never by two threads at once. Values and wakers move between
// threads that way, so `T: Send` and `E: Send` are needed; wakers are `Send + Sync`.
unsafe impl<T: Send, E: Send> Sync for JoinCell<T, E> {}

/// What `finish` has left to do once it completed the task ([`JoinCell::after_complete`]).
pub(crate) struct AfterComplete<T> {
    /// The handle's waker, to wake.
    pub(crate) waiter: Option<Waker>,
    /// The scope's waker, to wake.
    pub(crate) scope_waiter: Option<Waker>,
    /// The value a detached handle left unwanted, to drop.
    pub(crate) unwanted: Option<T>,
}

/// The part of a result that a detached handle leaves unwanted: the value. A failure stays in
/// the cell (a scope reads a detached child's panic).
fn take_value<T, E>(result: &mut Option<Result<T, E>>) -> Option<T> {
    result.take_if(|r| r.is_ok()).and_then(Result::ok)
}

impl<T, E> JoinCell<T, E> {
    /// Whether dropping the cell would drop nothing: no value with drop glue or failure in
    /// the result, no waker in either field (the destruction's fast path, `TaskCell::destroy`;
    /// `&mut`: nobody else can touch the cell).
    #[inline]
    pub(crate) fn holds_nothing_to_drop(&mut self) -> bool {
        const { assert!(!std::mem::needs_drop::<Lock>(), "the lock needs no drop") };
        // SAFETY: `&mut self`: no other access to the fields exists.
        let result = self.result.with_mut(|r| match unsafe { &*r } {
            None => true,
            Some(Ok(_)) => !std::mem::needs_drop::<T>(),
            Some(Err(_)) => false,
        });
        // SAFETY: as above.
        let no_waiter = self.waiter.with_mut(|w| unsafe { (*w).is_none() });
        // SAFETY: as above.
        let no_scope_waiter = self.scope_waiter.with_mut(|w| unsafe { (*w).is_none() });
        result && no_waiter && no_scope_waiter
    }

    pub(crate) fn new() -> Self {
        JoinCell {
            lock: Lock::new(()),
            result: DataCell::new(None),
            waiter: DataCell::new(None),
            scope_waiter: DataCell::new(None),
        }
    }

    /// Stores the task's result.
    ///
    /// # Safety
    ///
    /// Called once, by the finishing task, before it completes `state` (the task's).
    #[inline]
    pub(crate) unsafe fn put(&self, result: Result<T, E>) {
        // SAFETY: not `COMPLETE` yet, so nobody else touches the result (module docs; the
        // caller's contract).
        self.result.with_mut(|r| unsafe { *r = Some(result) });
    }

    /// Runs `f` on the result (`None` in it once taken) under the lock, if the task is
    /// complete; `None` if it is not.
    pub(crate) fn with_result<X>(
        &self,
        state: &TaskState,
        f: impl FnOnce(&mut Option<Result<T, E>>) -> X,
    ) -> Option<X> {
        if !state.is_complete() {
            return None;
        }
        let _locked = lock(&self.lock);
        // SAFETY: `COMPLETE` is set (acquire: the finisher's write is visible and it touches
        // `result` no more except under the lock) and we hold the lock, which everyone else
        // takes to touch it.
        Some(self.result.with_mut(|r| f(unsafe { &mut *r })))
    }

    /// The waker field governed by `flag`.
    fn field(&self, flag: u32) -> &DataCell<Option<Waker>> {
        if flag == State::SCOPE_WAITER {
            &self.scope_waiter
        } else {
            &self.waiter
        }
    }

    /// Makes the caller's waker the one `finish` wakes, in the field of `flag` (`JOIN_WAITER`:
    /// called by the task's handle only; `SCOPE_WAITER`: by its scope only): the waker there
    /// if `current` says it is the caller's already, else one made by `make`. Returns false if
    /// the task has completed and `finish` will not wake it: the caller must not park, the
    /// result is there.
    pub(crate) fn register(
        &self,
        state: &TaskState,
        flag: u32,
        current: impl FnOnce(&Waker) -> bool,
        make: impl FnOnce() -> Waker,
    ) -> bool {
        if state.load() & flag != 0 && !state.clear_join_flag(flag) {
            // Complete with our flag set: `finish` owns the field (it wakes our old waker).
            return false;
        }
        self.field(flag).with_mut(|slot| {
            // SAFETY: the flag is clear, so `finish` does not touch the field (it only takes a
            // field whose flag it saw when it completed the task, and the flag was clear before
            // our `fetch_or` below); the caller is the field's one owner.
            let slot = unsafe { &mut *slot };
            if !slot.as_ref().is_some_and(current) {
                *slot = Some(make());
            }
        });
        if state.set_join_flag(flag) {
            // Completed before the flag: `finish` did not see it and will never touch the
            // field, which is still ours.
            // SAFETY: as just said.
            let stale = self.field(flag).with_mut(|slot| unsafe { (*slot).take() });
            drop(stale);
            return false;
        }
        true
    }

    /// Takes back the waker in the field of `flag` (its owner, for good: a dropped handle),
    /// unless `finish` owns it now.
    pub(crate) fn unregister(&self, state: &TaskState, flag: u32) -> Option<Waker> {
        if state.load() & flag != 0 && !state.clear_join_flag(flag) {
            return None;
        }
        // SAFETY: the flag is clear (as in `register`), and the caller is the field's owner.
        self.field(flag).with_mut(|slot| unsafe { (*slot).take() })
    }

    /// The handle's side of a join: the result if the task has finished (`Some(None)`: it was
    /// taken already); else makes the caller's waker the one `finish` wakes (`current`,
    /// `make`: see [`register`](Self::register)) and returns `None` (the caller parks, or
    /// returns `Pending`).
    #[inline]
    pub(crate) fn take_or_wait(
        &self,
        state: &TaskState,
        current: impl FnOnce(&Waker) -> bool,
        make: impl FnOnce() -> Waker,
    ) -> Option<Option<Result<T, E>>> {
        if let Some(taken) = self.with_result(state, Option::take) {
            return Some(taken);
        }
        if self.register(state, State::JOIN_WAITER, current, make) {
            return None;
        }
        // Finished meanwhile, before it could see the flag: nobody will wake us.
        Some(self.with_result(state, Option::take).flatten())
    }

    /// The handle's side of a detach (its drop, for a result with drop glue): takes its waker
    /// back, and either leaves the value to `finish` (`DETACHED`: it drops it at once) or, if
    /// the task finished first, returns it. The caller drops both, after this returns (outside
    /// the lock). A failure stays in the cell either way.
    pub(crate) fn detach(&self, state: &TaskState) -> (Option<Waker>, Option<T>) {
        let waiter = self.unregister(state, State::JOIN_WAITER);
        // Not finished yet: `finish` drops the value — unless it finished before it could see
        // the flag, and then it is ours to drop after all.
        let finished = state.is_complete() || state.set_join_flag(State::DETACHED);
        let value = if finished {
            self.with_result(state, take_value).flatten()
        } else {
            None
        };
        (waiter, value)
    }

    /// `finish`'s side, once `state.complete()` returned `before` (the state it replaced): the
    /// wakers of the fields whose flags were set, and, if the handle was detached, the value
    /// (a failure stays).
    #[inline]
    pub(crate) fn after_complete(&self, state: &TaskState, before: u32) -> AfterComplete<T> {
        AfterComplete {
            waiter: self.take_flagged(before, State::JOIN_WAITER),
            scope_waiter: self.take_flagged(before, State::SCOPE_WAITER),
            unwanted: if before & State::DETACHED != 0 {
                self.with_result(state, take_value).flatten()
            } else {
                None
            },
        }
    }

    /// `finish`'s side: takes the waker of a field whose flag was set in `before`, the state
    /// that `COMPLETE` replaced.
    #[inline]
    fn take_flagged(&self, before: u32, flag: u32) -> Option<Waker> {
        if before & flag == 0 {
            return None;
        }
        // SAFETY: the flag was set when `COMPLETE` was (the compare-and-swap read it, acquire:
        // the owner's store of the waker is visible), and an owner leaves a flagged field alone
        // once it cannot clear the flag, which it cannot after `COMPLETE`: the field is ours.
        self.field(flag).with_mut(|slot| unsafe { (*slot).take() })
    }
}
