//! The channel core shared by [`mpsc`](crate::mpsc), [`mpmc`](crate::mpmc) and
//! [`oneshot`](crate::oneshot), and the hooks [`select`](crate::select!) uses.
//!
//! # Design
//!
//! One lock (`state`) guards the buffer and two wait queues (blocked senders, blocked
//! receivers). Every queue entry points to a heap-allocated [`Waiter`] (shared by all the
//! entries of one `select`) and a heap-allocated [`Slot`] for the message: a blocked sender's
//! slot holds its message, a blocked receiver's slot receives one.
//!
//! Messages are **handed over** by the active party: a sender that finds a waiting receiver
//! claims it (a plain send or receive: popping its entry under the lock decides; a `select`
//! arm: one compare-and-swap on the select's waiter, so a `select` registered in several
//! channels is completed at most once), writes the message into its slot, wakes it and then
//! publishes (its last touch of the record); the message never enters the buffer. A
//! receiver that takes a message from a full buffer moves the first waiting sender's message
//! into the buffer (FIFO is kept); on a zero-capacity channel it takes it from the sender's
//! slot directly (a rendezvous).
//! Invariant: receivers wait only while the buffer is empty; senders only while it is full.
//!
//! Only *passive* waiters (registered and parked, or about to park) are ever claimed; a party
//! that is trying operations is registered nowhere. That is crossbeam's design, and it rules
//! out two selects claiming each other at once.
//!
//! Disconnection (the last sender or the last receiver dropped) completes every waiter on the
//! other side without a message: a receiver's empty slot then means "disconnected", a
//! sender's still-full slot means "no receiver": it gets its message back.
//!
//! **A message handed to a waiting receiver counts as a sender until that receiver takes it**
//! (`senders` is raised at the hand-over and lowered by [`Chan::handoff_taken`]): the receiver
//! may still give it back ([`Chan::requeue`]: its coroutine was cancelled, its future dropped,
//! its select abandoned, right after the hand-over), and until then the channel is not
//! disconnected. Otherwise the last sender's drop told the other waiting receivers
//! "disconnected" while the message was on its way back into the buffer, where nobody would
//! look for it again.

pub(crate) mod deque;
pub(crate) mod error;
pub(crate) mod handles;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::ptr::NonNull;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use crate::loom::{
    AtomicPtr, AtomicU8, AtomicUsize, DataCell, Ordering, StdMutex, StdMutexGuard, lock,
};
use crate::waiter::Waiter;
use deque::SmallDeque;
use error::{RecvError, RecvTimeoutError, SendError, SendTimeoutError, TryRecvError, TrySendError};

/// A message slot of a waiting operation. Access rules: see the module docs (the owner before
/// registering or after completion/abort; a claiming peer between claim and publish).
pub(crate) struct Slot<T> {
    value: DataCell<Option<T>>,
    /// The hand-over number of a message handed to a waiting receiver (see
    /// [`Chan::requeue`]), written with it.
    handover: DataCell<u64>,
}

// SAFETY: the slot is used by one thread at a time (the protocol above orders the accesses
// through the waiter's state word and the channel lock); it moves a `T` between threads.
unsafe impl<T: Send> Sync for Slot<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for Slot<T> {}

impl<T> Slot<T> {
    pub(crate) fn new(value: Option<T>) -> Slot<T> {
        Slot {
            value: DataCell::new(value),
            handover: DataCell::new(0),
        }
    }

    pub(crate) fn new_arc(value: Option<T>) -> Arc<Slot<T>> {
        Arc::new(Slot::new(value))
    }

    /// # Safety
    ///
    /// The caller may access the slot now (see the module docs).
    pub(crate) unsafe fn take(&self) -> Option<T> {
        // SAFETY: exclusive access, per the caller.
        unsafe { (*self.value.ptr()).take() }
    }

    /// # Safety
    ///
    /// As [`take`](Self::take).
    pub(crate) unsafe fn put(&self, value: T) {
        // SAFETY: exclusive access, per the caller.
        unsafe { *self.value.ptr() = Some(value) }
    }

    /// Puts a message handed over to a waiting receiver, with its hand-over number.
    ///
    /// # Safety
    ///
    /// As [`take`](Self::take).
    unsafe fn put_handed(&self, value: T, handover: u64) {
        // SAFETY: exclusive access, per the caller.
        unsafe {
            *self.value.ptr() = Some(value);
            *self.handover.ptr() = handover;
        }
    }

    /// Takes a message handed over to this (receiving) slot, with its hand-over number.
    ///
    /// # Safety
    ///
    /// As [`take`](Self::take).
    pub(crate) unsafe fn take_handed(&self) -> Option<(T, u64)> {
        // SAFETY: exclusive access, per the caller.
        unsafe {
            let value = (*self.value.ptr()).take()?;
            Some((value, *self.handover.ptr_shared()))
        }
    }
}

/// A plain blocking send or receive: its waiter and slot in one allocation.
pub(crate) struct Packet<T> {
    cx: Waiter,
    slot: Slot<T>,
}

/// What a queue entry points to.
enum Link<T> {
    /// A plain `send` / `recv` (blocking or async): its packet, without a reference count.
    /// The waiting operation owns the packet and keeps it (neither frees nor reuses it) until
    /// it has seen its completion — which a completer publishes as its last touch of the
    /// record ([`Waiter::complete`]) — or has removed the entry from its queue under the
    /// channel lock (which is how it gives up: whoever takes the entry out of the queue
    /// decides, so claiming one costs no compare-and-swap, see [`Entry::claim`]). Meanwhile the
    /// entry is only read under that lock, or, once claimed, by its claimer before it
    /// publishes. (An `Arc` here cost an increment and a decrement per blocked operation.)
    Packet(NonNull<Packet<T>>),
    /// An arm of a select: the select's waiter (shared by its arms) and the arm's slot.
    Select(Arc<Waiter>, Arc<Slot<T>>),
}

impl<T> Link<T> {
    fn packet(packet: &Arc<Packet<T>>) -> Link<T> {
        Link::Packet(NonNull::from(&**packet))
    }
}

struct Entry<T> {
    link: Link<T>,
    op: usize,
}

// SAFETY: an entry gives access to a `Packet<T>` (a `Waiter`, which is `Sync`, and a `Slot<T>`,
// `Sync` when `T: Send`) under the rules of `Link::Packet`, or holds `Arc`s to the same
// (`Send` when `T: Send`). Moving it to another thread moves at most a `T` between threads.
unsafe impl<T: Send> Send for Entry<T> {}

impl<T> Entry<T> {
    /// Claims the entry's waiter (just popped from its queue, under the channel's lock) to
    /// move a message into or out of its slot; false if it is no longer waiting (a select
    /// completed or aborted elsewhere). A packet needs no compare-and-swap: it is in one
    /// queue, and its owner gives up only by removing it from there under the same lock, so
    /// popping it decided (see [`Waiter::mark_claimed`]).
    #[inline]
    fn claim(&self) -> bool {
        match &self.link {
            Link::Packet(_) => {
                self.cx().mark_claimed();
                true
            }
            Link::Select(cx, _) => cx.try_claim(),
        }
    }

    #[inline]
    fn cx(&self) -> &Waiter {
        match &self.link {
            // SAFETY: the packet is alive while its entry is read (see `Link::Packet`).
            Link::Packet(p) => unsafe { &p.as_ref().cx },
            Link::Select(cx, _) => cx,
        }
    }

    #[inline]
    fn slot(&self) -> &Slot<T> {
        match &self.link {
            // SAFETY: as in `cx`.
            Link::Packet(p) => unsafe { &p.as_ref().slot },
            Link::Select(_, slot) => slot,
        }
    }
}

struct State<T> {
    buf: SmallDeque<T>,
    /// The hand-over numbers of the messages at the front of `buf` that receivers put back
    /// ([`Chan::requeue`]), in `buf`'s order (ascending): one per such message, popped with it.
    requeued: SmallDeque<u64>,
    /// The next hand-over number: messages handed to waiting receivers are numbered in the
    /// order they were sent, so that those put back go back in that order.
    next_handover: u64,
    senders: SmallDeque<Entry<T>>,
    receivers: SmallDeque<Entry<T>>,
    /// Every sender is gone.
    tx_gone: bool,
    /// Every receiver is gone.
    rx_gone: bool,
}

/// How long a blocked send or receive spins before parking, while spinning pays off on this
/// channel (see [`Chan::spin_before_park`]).
const SPIN_BUDGET: std::time::Duration = std::time::Duration::from_micros(20);
/// The spin score's ceiling.
const SPIN_SCORE_MAX: u8 = 4;

/// A channel: the shared part of its senders and receivers.
pub struct Chan<T> {
    state: StdMutex<State<T>>,
    /// `None`: unbounded.
    cap: Option<usize>,
    senders: AtomicUsize,
    receivers: AtomicUsize,
    /// Adaptive spinning: recent blocked operations here were completed from another thread
    /// (up) or from the waiter's own thread (down).
    spin_score: AtomicU8,
    /// A finished blocking operation's packet, kept for the next one: an allocation and a free
    /// fewer per blocked send or receive. Null: none. Otherwise it owns one `Arc` reference
    /// (`Arc::into_raw`), and the packet is unshared: no queue entry or completer holds it, and its
    /// slot is empty; its waker is its last user's, kept for reuse. See [`Chan::packet`] and
    /// [`Chan::recycle`].
    spare: AtomicPtr<Packet<T>>,
    /// Under loom, whether `spare` is used (see `__loom::recycle_packets`).
    #[cfg(loom)]
    recycles: bool,
}

impl<T> Drop for Chan<T> {
    fn drop(&mut self) {
        let spare = self.spare.load(Ordering::Acquire);
        if !spare.is_null() {
            // SAFETY: a non-null spare owns one reference from `Arc::into_raw` (see the field).
            drop(unsafe { Arc::from_raw(spare) });
        }
    }
}

/// A claimed waiter to complete (wake, then publish) after the lock is released.
pub(crate) struct AfterUnlock<T>(Option<Entry<T>>);

impl<T> AfterUnlock<T> {
    fn none() -> Self {
        AfterUnlock(None)
    }

    /// `entry`'s waiter, claimed ([`Entry::claim`]), its slot filled or emptied.
    fn complete(entry: Entry<T>) -> Self {
        AfterUnlock(Some(entry))
    }

    fn run(self) {
        if let Some(entry) = self.0 {
            entry.cx().complete(entry.op);
        }
    }
}

impl<T> Chan<T> {
    /// A channel with one sender and one receiver. `cap`: `None` for unbounded.
    pub(crate) fn new(cap: Option<usize>) -> Arc<Chan<T>> {
        Arc::new(Chan {
            state: StdMutex::new(State {
                buf: SmallDeque::new(),
                requeued: SmallDeque::new(),
                next_handover: 0,
                senders: SmallDeque::new(),
                receivers: SmallDeque::new(),
                tx_gone: false,
                rx_gone: false,
            }),
            cap,
            senders: AtomicUsize::new(1),
            receivers: AtomicUsize::new(1),
            spin_score: AtomicU8::new(0),
            spare: AtomicPtr::new(std::ptr::null_mut()),
            #[cfg(loom)]
            recycles: crate::loom::loom_park::recycling(),
        })
    }

    /// A packet for a blocking operation of the current task, holding `msg` (a send's) or
    /// nothing (a receive's): the spare if there is one, else a new one. Called with the
    /// channel's lock held (`_locked`: the state it guards).
    ///
    /// Only this function empties the spare, and only under the lock, so nobody takes it
    /// between the load and the store below; and [`recycle`](Self::recycle) only fills an
    /// empty spare (a compare-and-swap from null), so nobody replaces it either: a load and a
    /// store do what a swap would, without a read-modify-write.
    fn packet(&self, _locked: &mut State<T>, msg: Option<T>) -> Arc<Packet<T>> {
        let spare = self.spare.load(Ordering::Acquire);
        if spare.is_null() {
            return Arc::new(Packet {
                cx: Waiter::new_inline(),
                slot: Slot::new(msg),
            });
        }
        self.spare.store(std::ptr::null_mut(), Ordering::Relaxed);
        // SAFETY: the spare owned this reference (`Arc::into_raw` in `recycle`); emptying it
        // (see above) moved the reference to us.
        let packet = unsafe { Arc::from_raw(spare) };
        // SAFETY: a spare packet is unshared (see the field), and it is ours alone now.
        unsafe {
            packet.cx.reset();
            if let Some(m) = msg {
                packet.slot.put(m);
            }
        }
        packet
    }

    /// Keeps the packet of a finished blocking operation (its slot emptied by the caller) as
    /// the spare, if there is none.
    ///
    /// The packet is unshared: queue entries hold no reference to it, and the operation is
    /// over — completed (the completer's last touch, its publication, happens before the
    /// caller's acquire read of the state) or aborted and unregistered (under the lock).
    fn recycle(&self, packet: Arc<Packet<T>>) {
        debug_assert_eq!(Arc::strong_count(&packet), 1, "a finished packet is shared");
        // Its completer's last use (the publication) must come before this (checked by loom).
        packet.cx.retire();
        #[cfg(loom)]
        if !self.recycles {
            return;
        }
        // The waker stays: the next wait on this channel is usually the same task's, which
        // then reuses it (`Waiter::reset`). Until then it keeps that task's block allocated
        // (a few hundred bytes; the coroutine and its stack are freed when it finishes).
        let raw = Arc::into_raw(packet).cast_mut();
        if self
            .spare
            .compare_exchange(
                std::ptr::null_mut(),
                raw,
                Ordering::Release,
                Ordering::Relaxed,
            )
            .is_err()
        {
            // A spare is there already: free this one. SAFETY: `raw` is the reference we just
            // gave up with `into_raw`, and nobody else saw it.
            drop(unsafe { Arc::from_raw(raw) });
        }
    }

    fn lock(&self) -> StdMutexGuard<'_, State<T>> {
        lock(&self.state)
    }

    /// Sends without waiting, with the lock held.
    fn try_send_locked(
        &self,
        st: &mut State<T>,
        msg: T,
    ) -> Result<AfterUnlock<T>, TrySendError<T>> {
        if st.rx_gone {
            return Err(TrySendError::Disconnected(msg));
        }
        while let Some(entry) = st.receivers.pop_front() {
            if entry.claim() {
                let handover = st.next_handover;
                st.next_handover += 1;
                // SAFETY: we claimed the waiter: its slot is ours until we publish.
                unsafe { entry.slot().put_handed(msg, handover) };
                self.handed_over();
                return Ok(AfterUnlock::complete(entry));
            }
            // Completed elsewhere or aborted: its owner no longer needs the entry.
        }
        if self.cap.is_none_or(|cap| st.buf.len() < cap) {
            st.buf.push_back(msg);
            return Ok(AfterUnlock::none());
        }
        Err(TrySendError::Full(msg))
    }

    /// Receives without waiting, with the lock held.
    fn try_recv_locked(&self, st: &mut State<T>) -> Result<(T, AfterUnlock<T>), TryRecvError> {
        if let Some(msg) = st.buf.pop_front() {
            // (A message put back had a number: it goes with it.)
            if !st.requeued.is_empty() {
                st.requeued.pop_front();
            }
            // Room now: move the first waiting sender's message in. (A zero-capacity channel
            // has a buffer only for messages put back by cancelled receivers: it has no room,
            // and its senders wait for a receiver.)
            let mut after = AfterUnlock::none();
            let room = self.cap.is_none_or(|cap| st.buf.len() < cap);
            while let Some(entry) = room.then(|| st.senders.pop_front()).flatten() {
                if entry.claim() {
                    // SAFETY: claimed: the slot is ours until we publish.
                    if let Some(m) = unsafe { entry.slot().take() } {
                        st.buf.push_back(m);
                    }
                    after = AfterUnlock::complete(entry);
                    break;
                }
            }
            return Ok((msg, after));
        }
        // Empty buffer: a rendezvous with a waiting sender (zero capacity).
        while let Some(entry) = st.senders.pop_front() {
            if entry.claim() {
                // SAFETY: claimed: the slot is ours until we publish.
                let msg = unsafe { entry.slot().take() };
                if let Some(msg) = msg {
                    return Ok((msg, AfterUnlock::complete(entry)));
                }
                // Unreachable in practice (a registered sender's slot holds its message);
                // complete it anyway and go on.
                entry.cx().complete(entry.op);
            }
        }
        if st.tx_gone {
            Err(TryRecvError::Disconnected)
        } else {
            Err(TryRecvError::Empty)
        }
    }

    /// Spins a little before a blocked operation parks, if spinning pays off on this channel.
    ///
    /// Why: a peer on another thread (a coroutine on another worker, or a plain thread)
    /// usually answers within a microsecond or two, while parking and being woken costs a
    /// context switch — and, for a coroutine whose worker then has nothing to do, a sleeping
    /// worker thread's wake-up (tens of microseconds). But a peer on the *same* worker cannot
    /// run while we spin: spinning only wastes time there. So the channel keeps a score:
    /// [`after_wait`](Self::after_wait) raises it when a blocked operation was completed from
    /// another thread and lowers it when completed from the waiter's own thread; blocked
    /// operations spin while it is above zero. (Under loom they always "spin" — check once —
    /// so that the models explore the spin/park hand-shake of [`Waiter::spin`].)
    fn spin_before_park(&self, cx: &Waiter) {
        if cfg!(loom) || self.spin_score.load(Ordering::Relaxed) > 0 {
            cx.spin(SPIN_BUDGET);
        }
    }

    /// Updates the spin score after a blocked operation was completed by a peer.
    fn after_wait(&self, cx: &Waiter) {
        let score = self.spin_score.load(Ordering::Relaxed);
        let new = if cx.completed_remotely() {
            (score + 1).min(SPIN_SCORE_MAX)
        } else {
            score.saturating_sub(1)
        };
        if new != score {
            self.spin_score.store(new, Ordering::Relaxed);
        }
    }

    pub(crate) fn try_send(&self, msg: T) -> Result<(), TrySendError<T>> {
        let after = self.try_send_locked(&mut self.lock(), msg)?;
        after.run();
        Ok(())
    }

    pub(crate) fn try_recv(&self) -> Result<T, TryRecvError> {
        let (msg, after) = self.try_recv_locked(&mut self.lock())?;
        after.run();
        Ok(msg)
    }

    /// Sends, waiting until `deadline` (`None`: for ever) while the channel is full.
    ///
    /// Inlined with nothing but the wait in it (trying, registering and finishing are out of
    /// line): the park's switch then sits one frame (the runtime's park hook) below the
    /// caller, and each frame a resumed coroutine returns from is a mispredicted return (the
    /// CPU's return-stack predictor holds its worker's addresses; see the
    /// cost model of `spindle_context`), which shows on a round trip between two coroutines.
    #[inline(always)]
    pub(crate) fn send_until(
        &self,
        msg: T,
        deadline: Option<Instant>,
    ) -> Result<(), SendTimeoutError<T>> {
        // Every send counts against the runtime's cooperative budget, so that a coroutine whose
        // channel always has room cannot keep its worker; before it does anything, since the
        // yield this may make is a cancellation point.
        crate::loom::consume_budget();
        let packet = match self.send_or_register(msg, deadline) {
            Ok(done) => return done,
            Err(packet) => packet,
        };
        let abandon = AbandonSend {
            chan: self,
            cx: &packet.cx,
        };
        // (After the guard: the spin may park, and so unwind.)
        self.spin_before_park(&packet.cx);
        let outcome = packet
            .cx
            .wait_or_abort(deadline, |cx| self.unregister_send(cx));
        std::mem::forget(abandon);
        self.send_waited(packet, outcome)
    }

    /// `send_until`'s first part: sends now if it can (`Ok`), else registers a packet with
    /// the message to wait on (`Err`).
    fn send_or_register(
        &self,
        msg: T,
        deadline: Option<Instant>,
    ) -> Result<Result<(), SendTimeoutError<T>>, Arc<Packet<T>>> {
        let mut st = self.lock();
        let msg = match self.try_send_locked(&mut st, msg) {
            Ok(after) => {
                drop(st);
                after.run();
                return Ok(Ok(()));
            }
            Err(TrySendError::Disconnected(m)) => {
                return Ok(Err(SendTimeoutError::Disconnected(m)));
            }
            Err(TrySendError::Full(m)) => m,
        };
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(Err(SendTimeoutError::Timeout(msg)));
        }
        let packet = self.packet(&mut st, Some(msg));
        st.senders.push_back(Entry {
            link: Link::packet(&packet),
            op: 0,
        });
        Err(packet)
    }

    /// `send_until`'s last part, once the wait is over (`outcome`: completed, or `None`:
    /// timed out and aborted).
    fn send_waited(
        &self,
        packet: Arc<Packet<T>>,
        outcome: Option<usize>,
    ) -> Result<(), SendTimeoutError<T>> {
        match outcome {
            Some(_) => {
                self.after_wait(&packet.cx);
                // SAFETY: completed: the slot is ours again.
                let back = unsafe { packet.slot.take() };
                self.recycle(packet);
                match back {
                    None => Ok(()),
                    Some(m) => Err(SendTimeoutError::Disconnected(m)),
                }
            }
            None => {
                // SAFETY: unregistered (the abort): nobody else touches the slot.
                let msg = unsafe { packet.slot.take() };
                self.recycle(packet);
                Err(SendTimeoutError::Timeout(
                    msg.expect("an aborted send keeps its message"),
                ))
            }
        }
    }

    /// Receives, waiting until `deadline` (`None`: for ever) while the channel is empty.
    /// Inlined around its wait, as [`send_until`](Self::send_until).
    #[inline(always)]
    pub(crate) fn recv_until(&self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        // As in `send_until`: a channel that always has a message must not keep the worker.
        crate::loom::consume_budget();
        let packet = match self.recv_or_register(deadline) {
            Ok(done) => return done,
            Err(packet) => packet,
        };
        let abandon = AbandonRecv {
            chan: self,
            cx: &packet.cx,
            slot: &packet.slot,
        };
        // (After the guard: the spin may park, and so unwind.)
        self.spin_before_park(&packet.cx);
        let outcome = packet
            .cx
            .wait_or_abort(deadline, |cx| self.unregister_recv(cx));
        std::mem::forget(abandon);
        self.recv_waited(packet, outcome)
    }

    /// `recv_until`'s first part: receives now if it can (`Ok`), else registers an empty
    /// packet to wait on (`Err`).
    fn recv_or_register(
        &self,
        deadline: Option<Instant>,
    ) -> Result<Result<T, RecvTimeoutError>, Arc<Packet<T>>> {
        let mut st = self.lock();
        match self.try_recv_locked(&mut st) {
            Ok((msg, after)) => {
                drop(st);
                after.run();
                return Ok(Ok(msg));
            }
            Err(TryRecvError::Disconnected) => return Ok(Err(RecvTimeoutError::Disconnected)),
            Err(TryRecvError::Empty) => {}
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(Err(RecvTimeoutError::Timeout));
        }
        let packet = self.packet(&mut st, None);
        st.receivers.push_back(Entry {
            link: Link::packet(&packet),
            op: 0,
        });
        Err(packet)
    }

    /// `recv_until`'s last part, once the wait is over (`outcome` as in `send_waited`).
    fn recv_waited(
        &self,
        packet: Arc<Packet<T>>,
        outcome: Option<usize>,
    ) -> Result<T, RecvTimeoutError> {
        match outcome {
            Some(_) => {
                self.after_wait(&packet.cx);
                // SAFETY: completed: the slot is ours again.
                let msg = unsafe { packet.slot.take() };
                self.recycle(packet);
                let msg = msg.ok_or(RecvTimeoutError::Disconnected)?;
                self.handoff_taken();
                Ok(msg)
            }
            None => {
                // (Unregistered: the abort.)
                self.recycle(packet);
                Err(RecvTimeoutError::Timeout)
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // Async sends and receives: the same packets in the same queues, with an async waiter
    // record; `pending` is the future's registration while it waits.

    /// A send future's step: sends `msg` if it can now, else queues it (once) and waits for a
    /// receiver to take it. `msg` is `None` once the send has completed: it stays pending.
    pub(crate) fn poll_send(
        &self,
        msg: &mut Option<T>,
        pending: &mut Option<Arc<Packet<T>>>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), SendError<T>>> {
        if let Some(packet) = pending {
            let Poll::Ready(_) = packet.cx.poll(cx) else {
                return Poll::Pending;
            };
            // SAFETY: completed: the slot is ours again.
            let back = unsafe { packet.slot.take() };
            *pending = None;
            return Poll::Ready(match back {
                None => Ok(()),
                Some(m) => Err(SendError(m)),
            });
        }
        let Some(m) = msg.take() else {
            return Poll::Pending;
        };
        let mut st = self.lock();
        match self.try_send_locked(&mut st, m) {
            Ok(after) => {
                drop(st);
                after.run();
                Poll::Ready(Ok(()))
            }
            Err(TrySendError::Disconnected(m)) => Poll::Ready(Err(SendError(m))),
            Err(TrySendError::Full(m)) => {
                let packet = Arc::new(Packet {
                    cx: Waiter::new_async_inline(cx.waker()),
                    slot: Slot::new(Some(m)),
                });
                st.senders.push_back(Entry {
                    link: Link::packet(&packet),
                    op: 0,
                });
                *pending = Some(packet);
                Poll::Pending
            }
        }
    }

    /// A receive future's step: receives if it can now, else queues (once) and waits for a
    /// message.
    pub(crate) fn poll_recv(
        &self,
        pending: &mut Option<Arc<Packet<T>>>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<T, RecvError>> {
        if let Some(packet) = pending {
            let Poll::Ready(_) = packet.cx.poll(cx) else {
                return Poll::Pending;
            };
            // SAFETY: completed: the slot is ours again.
            let msg = unsafe { packet.slot.take() };
            *pending = None;
            if msg.is_some() {
                self.handoff_taken();
            }
            return Poll::Ready(msg.ok_or(RecvError));
        }
        let mut st = self.lock();
        match self.try_recv_locked(&mut st) {
            Ok((msg, after)) => {
                drop(st);
                after.run();
                Poll::Ready(Ok(msg))
            }
            Err(TryRecvError::Disconnected) => Poll::Ready(Err(RecvError)),
            Err(TryRecvError::Empty) => {
                let packet = Arc::new(Packet {
                    cx: Waiter::new_async_inline(cx.waker()),
                    slot: Slot::new(None),
                });
                st.receivers.push_back(Entry {
                    link: Link::packet(&packet),
                    op: 0,
                });
                *pending = Some(packet);
                Poll::Pending
            }
        }
    }

    /// A pending send future is dropped: leave the queue (the message is dropped with the
    /// packet), unless it was completed meanwhile (delivered, or the receivers are gone).
    pub(crate) fn abandon_send(&self, pending: &mut Option<Arc<Packet<T>>>) {
        if let Some(packet) = pending.take() {
            self.abandon_send_packet(&packet.cx);
        }
    }

    /// A waiting send gives up: leave the queue, or (completed meanwhile) wait until its
    /// completer is done with the packet, which the caller frees next.
    fn abandon_send_packet(&self, cx: &Waiter) {
        if !self.unregister_send(cx) {
            cx.completed_after_abort_failed();
        }
    }

    /// A pending receive future is dropped: leave the queue, or put back a message handed to
    /// it in that instant.
    pub(crate) fn abandon_recv(&self, pending: &mut Option<Arc<Packet<T>>>) {
        if let Some(packet) = pending.take() {
            self.abandon_recv_packet(&packet.cx, &packet.slot);
        }
    }

    /// A waiting receive gives up: leave the queue, or put back a message handed over just
    /// then.
    fn abandon_recv_packet(&self, cx: &Waiter, slot: &Slot<T>) {
        if !self.unregister_recv(cx) {
            cx.completed_after_abort_failed();
            // SAFETY: completed: the slot is ours.
            if let Some((msg, handover)) = unsafe { slot.take_handed() } {
                self.requeue(msg, handover);
                self.handoff_taken();
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // Select support: register / unregister a passive waiter, and whether an operation could
    // complete now.

    /// Registers a waiting receive for `cx` (operation `op`) and returns its slot and
    /// `false`; or, if a receive could complete now, returns `true` *without* registering
    /// (the caller aborts and retries instead of parking; its
    /// [`unregister_recv`](Self::unregister_recv) then finds nothing).
    ///
    /// Not queued when ready: an entry queued while the buffer holds a message broke the
    /// invariant "receivers wait only while the buffer is empty", and a sender could claim it
    /// (the select's record still waiting, before its abort) and hand it a newer message while
    /// the older one stayed in the buffer, out of order.
    pub(crate) fn register_recv(&self, cx: &Arc<Waiter>, op: usize) -> (Arc<Slot<T>>, bool) {
        let slot = Slot::new_arc(None);
        let mut st = self.lock();
        let ready = !st.buf.is_empty()
            || st.tx_gone
            || st
                .senders
                .iter()
                .any(|e| !std::ptr::eq(e.cx(), &**cx) && e.cx().is_waiting());
        if !ready {
            st.receivers.push_back(Entry {
                link: Link::Select(cx.clone(), slot.clone()),
                op,
            });
        }
        (slot, ready)
    }

    /// Registers a waiting send of the message in `slot` and returns `false`; or, if a send
    /// could complete now, returns `true` without registering, as
    /// [`register_recv`](Self::register_recv) does (senders wait only while the buffer is
    /// full).
    pub(crate) fn register_send(&self, cx: &Arc<Waiter>, op: usize, slot: &Arc<Slot<T>>) -> bool {
        let mut st = self.lock();
        let ready = st.rx_gone
            || self.cap.is_none_or(|cap| st.buf.len() < cap)
            || st
                .receivers
                .iter()
                .any(|e| !std::ptr::eq(e.cx(), &**cx) && e.cx().is_waiting());
        if !ready {
            st.senders.push_back(Entry {
                link: Link::Select(cx.clone(), slot.clone()),
                op,
            });
        }
        ready
    }

    /// Removes `cx`'s waiting receive from the queue; false if it is not there (a completer
    /// popped it). For a packet that decides its abort (see [`Entry::claim`]).
    pub(crate) fn unregister_recv(&self, cx: &Waiter) -> bool {
        let removed = {
            let mut st = self.lock();
            let index = st.receivers.iter().position(|e| std::ptr::eq(e.cx(), cx));
            index.and_then(|i| st.receivers.remove(i))
        };
        removed.is_some()
    }

    /// As [`unregister_recv`](Self::unregister_recv), for a waiting send.
    pub(crate) fn unregister_send(&self, cx: &Waiter) -> bool {
        // Dropped after the unlock: a select arm's entry may hold the last reference to a slot
        // with a message in it.
        let removed = {
            let mut st = self.lock();
            let index = st.senders.iter().position(|e| std::ptr::eq(e.cx(), cx));
            index.and_then(|i| st.senders.remove(i))
        };
        removed.is_some()
    }

    /// Puts back a message a receiver was handed but cannot take (its coroutine was cancelled
    /// in the same instant), with its hand-over number: to a waiting receiver, or into the
    /// buffer (over the capacity if need be), so it is not lost. Dropped if every receiver is
    /// gone. The caller then calls [`handoff_taken`](Self::handoff_taken) for the hand-over it
    /// gives back (after this: a hand-over made here counts before that one stops counting).
    ///
    /// Into the buffer it goes ahead of every message there — those were sent after it: a
    /// receiver waits only while the buffer is empty — except others put back with smaller
    /// numbers, which were sent before it. (A plain `push_front` put two messages given back
    /// in the order they were handed over, by receivers cancelled one after the other, in the
    /// wrong order.)
    pub(crate) fn requeue(&self, msg: T, handover: u64) {
        let mut st = self.lock();
        if st.rx_gone {
            drop(st);
            drop(msg);
            return;
        }
        let mut msg = Some(msg);
        let mut after = AfterUnlock::none();
        while let Some(entry) = st.receivers.pop_front() {
            if entry.claim() {
                // SAFETY: claimed: the slot is ours until we publish.
                unsafe { entry.slot().put_handed(msg.take().expect("once"), handover) };
                self.handed_over();
                after = AfterUnlock::complete(entry);
                break;
            }
        }
        if let Some(msg) = msg {
            let at = st.requeued.iter().take_while(|&&n| n < handover).count();
            st.requeued.insert(at, handover);
            st.buf.insert(at, msg);
        }
        drop(st);
        after.run();
    }

    // -----------------------------------------------------------------------------------------
    // Handles.

    pub(crate) fn add_sender(&self) {
        self.senders.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add_receiver(&self) {
        self.receivers.fetch_add(1, Ordering::Relaxed);
    }

    /// A message was put into a waiting receiver's slot (under the lock): it counts as a
    /// sender until [`handoff_taken`](Self::handoff_taken) (see the module docs).
    #[inline]
    fn handed_over(&self) {
        // Relaxed: ordered against the senders' drops by being read-modify-writes of the same
        // counter, and against the receiver's `handoff_taken` by the hand-over itself.
        self.senders.fetch_add(1, Ordering::Relaxed);
    }

    /// The receiver handed a message took it, or gave it back through
    /// [`requeue`](Self::requeue): it no longer counts as a sender, and if it was the last,
    /// the channel is disconnected now.
    #[inline]
    pub(crate) fn handoff_taken(&self) {
        self.drop_sender();
    }

    /// The last sender is gone (or the last hand-over counting as one was taken): complete
    /// every waiting receiver with "disconnected".
    pub(crate) fn drop_sender(&self) {
        if self.senders.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let woken: Vec<_> = {
            let mut st = self.lock();
            st.tx_gone = true;
            if st.receivers.is_empty() {
                return; // the usual case: nobody waits (and no iterator, no vector)
            }
            st.receivers.drain_all().filter(|e| e.claim()).collect()
        };
        for entry in woken {
            entry.cx().complete(entry.op);
        }
    }

    /// The last receiver is gone: drop the buffered messages, give waiting senders their
    /// messages back.
    pub(crate) fn drop_receiver(&self) {
        if self.receivers.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let (buf, woken): (SmallDeque<T>, Vec<_>) = {
            let mut st = self.lock();
            st.rx_gone = true;
            if st.senders.is_empty() && st.buf.is_empty() {
                return; // the usual case: nothing buffered, nobody waits
            }
            let woken = st.senders.drain_all().filter(|e| e.claim()).collect();
            st.requeued = SmallDeque::new();
            (std::mem::take(&mut st.buf), woken)
        };
        for entry in woken {
            entry.cx().complete(entry.op);
        }
        drop(buf);
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().buf.len()
    }

    pub(crate) fn capacity(&self) -> Option<usize> {
        self.cap
    }

    pub(crate) fn is_full(&self) -> bool {
        self.cap.is_some_and(|cap| self.lock().buf.len() >= cap)
    }

    pub(crate) fn senders_gone(&self) -> bool {
        self.lock().tx_gone
    }

    pub(crate) fn receivers_gone(&self) -> bool {
        self.lock().rx_gone
    }
}

impl<T> fmt::Debug for Chan<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.lock();
        f.debug_struct("Chan")
            .field("cap", &self.cap)
            .field("len", &st.buf.len())
            .field("waiting_senders", &st.senders.len())
            .field("waiting_receivers", &st.receivers.len())
            .field("senders_gone", &st.tx_gone)
            .field("receivers_gone", &st.rx_gone)
            .finish()
    }
}

/// A blocked send unwinds (its coroutine was cancelled): leave the queue; the message is
/// dropped with the slot. If it was completed meanwhile there is nothing to undo (delivered,
/// or the receivers are gone).
struct AbandonSend<'a, T> {
    chan: &'a Chan<T>,
    cx: &'a Waiter,
}

impl<T> Drop for AbandonSend<'_, T> {
    fn drop(&mut self) {
        self.chan.abandon_send_packet(self.cx);
    }
}

/// A blocked receive unwinds: leave the queue, or put back a message handed over just then.
struct AbandonRecv<'a, T> {
    chan: &'a Chan<T>,
    cx: &'a Waiter,
    slot: &'a Slot<T>,
}

impl<T> Drop for AbandonRecv<'_, T> {
    fn drop(&mut self) {
        self.chan.abandon_recv_packet(self.cx, self.slot);
    }
}

/// The future of `Sender::send_async` ([`mpsc`](crate::mpsc::Sender::send_async),
/// [`mpmc`](crate::mpmc::Sender::send_async)): `Ok` once the message is sent, or the
/// message back in a [`SendError`] if every receiver is gone.
#[must_use = "futures do nothing unless polled"]
pub struct SendFuture<'a, T> {
    chan: &'a Chan<T>,
    /// The message until it is handed to the channel.
    msg: Option<T>,
    /// The queued packet (holding the message), while it waits.
    pending: Option<Arc<Packet<T>>>,
}

impl<'a, T> SendFuture<'a, T> {
    pub(crate) fn new(chan: &'a Chan<T>, msg: T) -> Self {
        SendFuture {
            chan,
            msg: Some(msg),
            pending: None,
        }
    }
}

// The future owns a `T` (and shares packets holding one): `Unpin` whatever `T` is, as nothing
// points into it.
impl<T> Unpin for SendFuture<'_, T> {}

impl<T> Future for SendFuture<'_, T> {
    type Output = Result<(), SendError<T>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        this.chan.poll_send(&mut this.msg, &mut this.pending, cx)
    }
}

impl<T> Drop for SendFuture<'_, T> {
    fn drop(&mut self) {
        self.chan.abandon_send(&mut self.pending);
    }
}

impl<T> fmt::Debug for SendFuture<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendFuture")
            .field("waiting", &self.pending.is_some())
            .finish_non_exhaustive()
    }
}

/// The future of `Receiver::recv_async` ([`mpsc`](crate::mpsc::Receiver::recv_async),
/// [`mpmc`](crate::mpmc::Receiver::recv_async)):
/// a message, or [`RecvError`] once the channel is empty and every sender is gone.
#[must_use = "futures do nothing unless polled"]
pub struct RecvFuture<'a, T> {
    chan: &'a Chan<T>,
    /// The queued packet (its slot receives the message), while it waits.
    pending: Option<Arc<Packet<T>>>,
}

impl<'a, T> RecvFuture<'a, T> {
    pub(crate) fn new(chan: &'a Chan<T>) -> Self {
        RecvFuture {
            chan,
            pending: None,
        }
    }
}

impl<T> Unpin for RecvFuture<'_, T> {}

impl<T> Future for RecvFuture<'_, T> {
    type Output = Result<T, RecvError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        this.chan.poll_recv(&mut this.pending, cx)
    }
}

impl<T> Drop for RecvFuture<'_, T> {
    fn drop(&mut self) {
        self.chan.abandon_recv(&mut self.pending);
    }
}

impl<T> fmt::Debug for RecvFuture<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecvFuture")
            .field("waiting", &self.pending.is_some())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A select's receive that registers while the buffer holds a message is ready and not
    /// queued: a send in the gap before the select aborts its record goes into the buffer,
    /// behind that message, instead of being handed to the select (which then received the
    /// newer message first). Deterministic form of `tests/select_order.rs`.
    #[test]
    fn a_ready_select_receive_is_not_queued() {
        let chan = Chan::<u32>::new(None);
        chan.try_send(1).unwrap();
        let cx = Waiter::new();
        let (slot, ready) = chan.register_recv(&cx, 0);
        assert!(ready);
        chan.try_send(2).unwrap();
        assert!(cx.try_abort(), "the sender claimed the select's record");
        assert!(!chan.unregister_recv(&cx));
        // SAFETY: never queued, and the record is aborted: the slot is ours alone.
        assert_eq!(unsafe { slot.take() }, None);
        assert_eq!(chan.try_recv(), Ok(1));
        assert_eq!(chan.try_recv(), Ok(2));
    }

    /// The same for a send arm on a channel with room: a receive in the gap finds nothing.
    #[test]
    fn a_ready_select_send_is_not_queued() {
        let chan = Chan::<u32>::new(Some(1));
        let cx = Waiter::new();
        let slot = Slot::new_arc(Some(7));
        assert!(chan.register_send(&cx, 0, &slot));
        assert_eq!(chan.try_recv(), Err(TryRecvError::Empty));
        assert!(cx.try_abort(), "the receiver claimed the select's record");
        assert!(!chan.unregister_send(&cx));
        // SAFETY: as above.
        assert_eq!(unsafe { slot.take() }, Some(7));
    }
}
