//! One-shot channels: one message, sent once, received once.
//!
//! ```
//! let (tx, rx) = spindle_sync::oneshot::channel();
//! std::thread::spawn(move || tx.send("done").unwrap());
//! assert_eq!(rx.recv(), Ok("done"));
//! assert!(rx.recv().is_err()); // the sender is gone and the message was taken
//! ```
//!
//! # Specification
//!
//! * [`Sender::send`] consumes the sender and never blocks; it fails (giving the message
//!   back) if the receiver is gone.
//! * [`Receiver::recv`] waits for the message; it fails with [`RecvError`] if the sender was
//!   dropped without sending, or once the message was received. Timed and non-blocking forms
//!   as for the other channels; a `Receiver` can be an arm of [`select!`](crate::select!).
//! * **Async**: [`Receiver::recv_async`] is `recv` as a future, and a `Receiver` can be
//!   awaited itself (it is [`IntoFuture`]). Dropping the future while it waits leaves the
//!   channel as it was (a message handed to it in that instant stays in the channel).
//!
//! ```
//! let (tx, rx) = spindle_sync::oneshot::channel();
//! std::thread::spawn(move || tx.send(42).unwrap());
//! // `rx.await` in async code; driven here by `block_on`.
//! assert_eq!(spindle_park::block_on(async { rx.await }), Ok(42));
//! ```

#[cfg(not(loom))]
use std::alloc::Layout;
use std::fmt;
use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::pin::Pin;
use std::ptr::NonNull;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::chan::deque::SmallDeque;
pub use crate::chan::error::{RecvError, RecvTimeoutError, SendError, TryRecvError};
use crate::loom::{
    Alive, AtomicUsize, DataCell, Ordering, Wake, park, park_until, spin_wait, waker,
};
use crate::select::sealed::{Arm, RecvArmSource};
use crate::waiter::{Waiter, deadline_after};

// Design. A oneshot is not a channel with a one-message buffer: one allocation holds the
// message, one atomic state word and the list of whoever waits for the message; the two
// handles own the allocation together (two bits of the state, no reference count), and the
// last one to go frees it.
//
// The state word says where the message is (sent, taken), which side is gone, and whether
// anybody waits; it is also the waiting list's lock (`LOCKED`). Every change of the state is a
// compare-and-swap from a value without `LOCKED`, so whoever holds the lock is the only one
// changing the state and releases it with a plain store of the next state; the others wait for
// the few stores of the list's critical section (`spin_wait`). So the common paths are one
// atomic operation each: a send that nobody waits for, taking a message that is there, each
// handle's drop — and none for the receiver's drop once the sender is gone (its bit clear:
// nobody else can reach the allocation, so the receiver frees it after a load). A receive
// that has to wait locks the state, adds its waker to the list, and sets `WAITERS` in the
// unlocking store; a send that sees `WAITERS` takes the lock with the same compare-and-swap
// that publishes the message, takes the whole list, and unlocks with `WAITERS` clear before
// it wakes anyone.
//
// Once the outcome (the message, or the sender's end) is published and the state is unlocked,
// the list is empty for good: the sender emptied it, or nobody had registered — and nobody
// registers after the outcome (registering needs the lock and no outcome). A receive that sees
// the outcome therefore never has a registration left to remove, and one that sees none after
// a wake-up (a spurious one) is still registered. Waiting is "register, unlock, park",
// race-free by `spindle_park`'s permit; receives loop on their condition, so callers never see
// a spurious wake-up.
//
// A previous design kept the message and flags behind a spin lock in an `Arc`: 13 atomic
// read-modify-writes per ping-and-pong pair of oneshots (`ping_pong` bench); 7 with this one,
// 5 since the receiver's drop after a completed exchange takes none.

/// The waiting list is being changed; only its holder changes the state (see above).
const LOCKED: usize = 1;
/// The message is in the cell (until taken: `TAKEN`).
const SENT: usize = 1 << 1;
/// The sender sent, or was dropped without sending.
const TX_CLOSED: usize = 1 << 2;
/// A receive took the message out of the cell.
const TAKEN: usize = 1 << 3;
/// The receiver was dropped.
const RX_CLOSED: usize = 1 << 4;
/// The waiting list is not empty.
const WAITERS: usize = 1 << 5;
/// The `Sender` still refers to the allocation.
const TX_ALIVE: usize = 1 << 6;
/// The `Receiver` still refers to the allocation.
const RX_ALIVE: usize = 1 << 7;

/// A one-shot channel.
pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let inner = allocate(Inner {
        alive: Alive::default(),
        state: AtomicUsize::new(TX_ALIVE | RX_ALIVE),
        msg: DataCell::new(MaybeUninit::uninit()),
        list: DataCell::new(ManuallyDrop::new(WaitList {
            waiting: SmallDeque::new(),
            next_token: 0,
        })),
    });
    (
        Sender {
            inner,
            _msg: PhantomData,
        },
        Receiver {
            inner,
            _msg: PhantomData,
        },
    )
}

/// The sending side of a one-shot channel.
pub struct Sender<T> {
    /// Alive while this sender is (`TX_ALIVE`).
    inner: NonNull<Inner<T>>,
    _msg: PhantomData<T>,
}

/// The receiving side of a one-shot channel.
pub struct Receiver<T> {
    /// Alive while this receiver is (`RX_ALIVE`).
    inner: NonNull<Inner<T>>,
    _msg: PhantomData<T>,
}

// SAFETY: a sender moves its `T` into the channel, possibly read on the receiver's thread:
// `T: Send` suffices. Shared, a sender only reads the state word (`is_closed`).
unsafe impl<T: Send> Send for Sender<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Sender<T> {}
// SAFETY: a receiver moves the `T` out of the channel to its thread, or drops it there:
// `T: Send`. Shared, any number of receives race for the message through the state word's
// compare-and-swap, and exactly one takes it; the waiting list is only reached under the lock.
unsafe impl<T: Send> Send for Receiver<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Receiver<T> {}

struct Inner<T> {
    /// Under loom: every use of the allocation reads it, and `free` writes it, so that loom
    /// reports a use that the freeing handle's view does not include (see `Alive`). The
    /// fields below are only reached through the accessors that do that.
    alive: Alive,
    state: AtomicUsize,
    /// Written once by the sender before it publishes `SENT`; read once by the receive that
    /// sets `TAKEN`, or dropped with the allocation if nobody took it.
    msg: DataCell<MaybeUninit<T>>,
    /// Only reached while holding `LOCKED`.
    /// Dropped by `Inner`'s drop only if it holds something: it is empty by then after every
    /// exchange, and its drop glue is an out-of-line call that finds that out.
    list: DataCell<ManuallyDrop<WaitList>>,
}

struct WaitList {
    /// Who waits for the message (usually nobody, or one receiver).
    waiting: SmallDeque<Waiting>,
    /// Tells registrations apart, so that a receive removes its own.
    next_token: u64,
}

enum Waiting {
    /// A blocking receive, or a receive future: woken to look again.
    Task { token: u64, waker: Waker },
    /// A select arm: completed with operation `op`, then woken.
    Select { cx: Arc<Waiter>, op: usize },
}

/// Wakes everyone who waited (after the lock is released: a woken thread takes it at once). Usually
/// one receiver waits, or nobody: the first is taken on its own, and the queue's chained iterator
/// (costly to build and drop) only runs when more wait.
fn wake_all(mut waiting: SmallDeque<Waiting>) {
    let Some(first) = waiting.pop_front() else {
        return;
    };
    wake_one(first);
    if !waiting.is_empty() {
        for w in waiting.into_iter() {
            wake_one(w);
        }
    }
}

fn wake_one(w: Waiting) {
    match w {
        Waiting::Task { waker, .. } => waker.wake(),
        Waiting::Select { cx, op } => {
            if cx.try_select(op) {
                cx.wake();
            }
        }
    }
}

/// Frees the channel's allocation (dropping a message nobody took).
///
/// # Safety
///
/// `inner` came from [`channel`], and the caller was the last of the two handles: the other
/// has already given up its bit (`TX_ALIVE`/`RX_ALIVE`), which the caller saw clear with an
/// acquire load or read-modify-write, so nothing else reaches the allocation now or later.
unsafe fn free<T>(inner: NonNull<Inner<T>>) {
    // SAFETY: alive until the drop below (the contract).
    unsafe { inner.as_ref() }.alive.retire();
    #[cfg(not(loom))]
    {
        /// Returns the block even if the message's destructor panics.
        struct Block<T>(NonNull<Inner<T>>);
        impl<T> Drop for Block<T> {
            fn drop(&mut self) {
                // SAFETY: a block from the block cache with this layout (`allocate`), whose
                // `Inner` has just been dropped in place; nothing uses it any more.
                unsafe {
                    spindle_park::block_cache::dealloc(self.0.cast(), Layout::new::<Inner<T>>());
                }
            }
        }
        let block = Block(inner);
        // SAFETY: made by `allocate` in `channel`, holding an initialised `Inner`; exclusively
        // ours (the contract). `block` returns the memory after.
        unsafe { std::ptr::drop_in_place(block.0.as_ptr()) };
    }
    #[cfg(loom)]
    // SAFETY: made by `Box::leak` in `allocate`; exclusively ours (the contract).
    drop(unsafe { Box::from_raw(inner.as_ptr()) });
}

/// The channel's allocation, holding `inner`. From the calling thread's block cache
/// (`spindle_park::block_cache`): a runtime's worker keeps the blocks of the channels it frees, so
/// a burst of one-shot exchanges (a `ping_pong`) reuses them instead of taking `malloc`'s and
/// `free`'s slow paths. Under loom, a plain `Box`.
fn allocate<T>(inner: Inner<T>) -> NonNull<Inner<T>> {
    #[cfg(not(loom))]
    {
        let block = spindle_park::block_cache::alloc(Layout::new::<Inner<T>>()).cast::<Inner<T>>();
        // SAFETY: a fresh block for an `Inner<T>` (its layout), ours alone.
        unsafe { block.write(inner) };
        block
    }
    #[cfg(loom)]
    NonNull::from(Box::leak(Box::new(inner)))
}

impl<T> Drop for Inner<T> {
    #[inline]
    fn drop(&mut self) {
        let s = self.state.load(Ordering::Acquire);
        if s & SENT != 0 && s & TAKEN == 0 {
            // SAFETY: the sender wrote the message before publishing `SENT`, and no receive
            // took it (`TAKEN` clear); `&mut self` is exclusive.
            unsafe { self.msg.get_mut().assume_init_drop() };
        }
        let list = self.list.get_mut();
        if !list.waiting.holds_nothing() {
            // SAFETY: dropped once, here, in the allocation's drop; never used again.
            unsafe { ManuallyDrop::drop(list) };
        }
    }
}

impl<T> Inner<T> {
    /// The state word (a use of the allocation: see `alive`).
    #[inline(always)]
    fn state(&self) -> &AtomicUsize {
        self.alive.touch();
        &self.state
    }

    /// The message's cell (a use of the allocation: see `alive`).
    #[inline(always)]
    fn msg(&self) -> &DataCell<MaybeUninit<T>> {
        self.alive.touch();
        &self.msg
    }

    /// The waiting list's cell (a use of the allocation: see `alive`).
    #[inline(always)]
    fn list(&self) -> &DataCell<ManuallyDrop<WaitList>> {
        self.alive.touch();
        &self.list
    }

    /// `s`, or the state once the lock's holder released it (only the holder changes the
    /// state: the others wait for its few stores).
    #[inline]
    fn unlocked(&self, mut s: usize) -> usize {
        let mut round = 0;
        while s & LOCKED != 0 {
            spin_wait(&mut round);
            s = self.state().load(Ordering::Acquire);
        }
        s
    }

    /// Changes the state from `current` (unlocked) to `new`; else the state found.
    #[inline]
    fn cas(&self, current: usize, new: usize) -> Result<usize, usize> {
        self.state()
            .compare_exchange_weak(current, new, Ordering::AcqRel, Ordering::Acquire)
    }

    /// The message, if it is there and the state is as simple as it gets (sent, not taken,
    /// not locked) and one compare-and-swap takes it; `None` leaves everything else to
    /// [`try_take`](Self::try_take).
    #[inline(always)]
    fn take_sent(&self) -> Option<T> {
        let s = self.state().load(Ordering::Acquire);
        if s & (SENT | TAKEN | LOCKED) != SENT {
            return None;
        }
        self.cas(s, s | TAKEN).ok()?;
        // SAFETY: as in `try_take`: `SENT` (acquired) says the sender wrote the message, and
        // our compare-and-swap set `TAKEN`, so no other receive reads it and the allocation's
        // drop will not drop it.
        Some(unsafe { self.msg().ptr_shared().read().assume_init() })
    }

    /// The message if it is there (taking it); an error if there never will be one (the
    /// sender was dropped, or a receive took the message); `None`: not yet.
    fn try_take(&self) -> Option<Result<T, RecvError>> {
        let mut s = self.state().load(Ordering::Acquire);
        loop {
            s = self.unlocked(s);
            if s & TAKEN != 0 || (s & SENT == 0 && s & TX_CLOSED != 0) {
                return Some(Err(RecvError));
            }
            if s & SENT == 0 {
                return None;
            }
            match self.cas(s, s | TAKEN) {
                Ok(_) => {
                    // SAFETY: `SENT` (acquired) says the sender wrote the message, and our
                    // compare-and-swap set `TAKEN`: no other receive reads it, and the
                    // allocation's drop will not drop it.
                    let msg = unsafe { self.msg().ptr_shared().read().assume_init() };
                    return Some(Ok(msg));
                }
                Err(actual) => s = actual,
            }
        }
    }

    /// Takes the lock unless the outcome (the message or the sender's end) is published;
    /// returns the state it locked (without `LOCKED`), or `None` (then the list is empty and
    /// stays so: see the design notes).
    fn lock_unless_done(&self) -> Option<usize> {
        let mut s = self.state().load(Ordering::Acquire);
        loop {
            s = self.unlocked(s);
            if s & (SENT | TX_CLOSED) != 0 {
                return None;
            }
            match self.cas(s, s | LOCKED) {
                Ok(_) => return Some(s),
                Err(actual) => s = actual,
            }
        }
    }

    /// Runs `f` on the waiting list under the lock, unless the outcome is published (`None`:
    /// then the list is empty and stays so, see the design notes); the unlocking store sets
    /// `WAITERS` to whether `f` left anybody in the list.
    fn with_list<R>(&self, f: impl FnOnce(&mut WaitList) -> R) -> Option<R> {
        let s = self.lock_unless_done()?;
        let (r, waiters) = {
            // SAFETY: `lock_unless_done` took the lock, so we alone reach the list until the
            // store below releases it, and the reference does not outlive this block.
            let list = unsafe { &mut *self.list().ptr() };
            let r = f(list);
            (r, if list.waiting.is_empty() { 0 } else { WAITERS })
        };
        self.state()
            .store((s & !WAITERS) | waiters, Ordering::Release);
        Some(r)
    }

    /// Adds `make(token)` to the waiting list and returns its token, unless the outcome is
    /// published (`None`: look again).
    fn register(&self, make: impl FnOnce(u64) -> Waiting) -> Option<u64> {
        self.with_list(|list| {
            let token = list.next_token;
            list.next_token += 1;
            list.waiting.push_back(make(token));
            token
        })
    }

    /// Removes the registration `pick` chooses, unless the sender took the whole list
    /// already; returns it, for the caller to drop (outside the lock).
    fn deregister(&self, pick: impl Fn(&Waiting) -> bool) -> Option<Waiting> {
        self.with_list(|list| {
            let index = list.waiting.iter().position(pick);
            index.and_then(|i| list.waiting.remove(i))
        })
        .flatten()
    }

    /// Refreshes the waker of registration `token` (a future polled again with another
    /// waker); `false` if the outcome is published (the list is gone: look again).
    fn refresh(&self, token: u64, new: &Waker) -> bool {
        let old = self.with_list(|list| {
            let index = list
                .waiting
                .iter()
                .position(|w| matches!(w, Waiting::Task { token: t, .. } if *t == token));
            match index.and_then(|i| list.waiting.get_mut(i)) {
                Some(Waiting::Task { waker, .. }) => {
                    (!waker.will_wake(new)).then(|| std::mem::replace(waker, new.clone()))
                }
                // Not there (it cannot be gone without an outcome; this keeps the future
                // waking even so).
                _ => {
                    list.waiting.push_back(Waiting::Task {
                        token,
                        waker: new.clone(),
                    });
                    None
                }
            }
        });
        // The replaced waker, if any, is dropped here, outside the lock.
        old.is_some()
    }

    /// The sender is done: it sent (`sent`: the message is in the cell) or is dropped.
    /// Publishes that, wakes whoever waits and gives up the sender's share of the allocation.
    /// `Err` if the receiver is gone: then nothing was published, and the caller, the last
    /// owner, takes the message back and frees the allocation.
    fn close_tx(&self, sent: bool) -> Result<(), ()> {
        let done = if sent { SENT | TX_CLOSED } else { TX_CLOSED };
        let mut s = self.state().load(Ordering::Acquire);
        loop {
            s = self.unlocked(s);
            if s & RX_CLOSED != 0 {
                return Err(());
            }
            if s & WAITERS == 0 {
                // Nobody waits: publish and leave in one step (the receiver, still there,
                // frees the allocation).
                match self.cas(s, (s | done) & !TX_ALIVE) {
                    Ok(_) => return Ok(()),
                    Err(actual) => s = actual,
                }
                continue;
            }
            // Somebody waits: publish and take the lock in one step, take the list, and
            // unlock, leaving, with `WAITERS` clear.
            match self.cas(s, s | done | LOCKED) {
                Ok(_) => {
                    // SAFETY: our compare-and-swap took the lock, so we alone reach the list
                    // until the store below releases it.
                    let waiting = std::mem::take(&mut unsafe { &mut *self.list().ptr() }.waiting);
                    self.state()
                        .store((s | done) & !(WAITERS | TX_ALIVE), Ordering::Release);
                    // From here the receiver may free the allocation: only the list we took.
                    wake_all(waiting);
                    return Ok(());
                }
                Err(actual) => s = actual,
            }
        }
    }

    /// Inlined with only the park in it (the rest is out of line), as the channels'
    /// `recv_until`: the park's switch then sits one frame below the caller.
    #[inline(always)]
    fn recv_until(&self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        // Removes the registration if the park unwinds (a cancelled coroutine) or the receive
        // times out.
        let mut registration = Registration {
            inner: self,
            token: None,
        };
        // The timed park said the deadline passed (under loom it says so at once, with
        // real time far from the deadline).
        let mut timed_out = false;
        loop {
            // The message is there (it came before the receive, or its send is what woke us):
            // taken here, without the out-of-line step. Once the outcome is published the
            // list is empty for good (design notes), so no registration is left to remove.
            if let Some(msg) = self.take_sent() {
                registration.token = None;
                return Ok(msg);
            }
            if let Some(outcome) = self.recv_step(&mut registration.token, deadline, timed_out) {
                return outcome;
            }
            match deadline {
                None => park(),
                Some(deadline) => timed_out = park_until(deadline) == Wake::TimedOut,
            }
        }
    }

    /// One look of `recv_until`: the outcome if there is one, else registers (once; `token`)
    /// and returns `None` for the caller to park.
    fn recv_step(
        &self,
        token: &mut Option<u64>,
        deadline: Option<Instant>,
        timed_out: bool,
    ) -> Option<Result<T, RecvTimeoutError>> {
        loop {
            if let Some(outcome) = self.try_take() {
                // The outcome is published: the sender took the list, with our registration.
                *token = None;
                return Some(outcome.map_err(|RecvError| RecvTimeoutError::Disconnected));
            }
            if timed_out || deadline.is_some_and(|d| Instant::now() >= d) {
                // (The registration, if any, is removed by the caller's guard.)
                return Some(Err(RecvTimeoutError::Timeout));
            }
            if token.is_some() {
                // Still registered (no outcome): a spurious wake-up.
                return None;
            }
            match self.register(|t| Waiting::Task {
                token: t,
                waker: waker(),
            }) {
                Some(t) => {
                    *token = Some(t);
                    return None;
                }
                None => continue, // the outcome came meanwhile: take it
            }
        }
    }

    /// A receive future's step (`token`: its registration while it waits).
    fn poll_recv(
        &self,
        token: &mut Option<u64>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<T, RecvError>> {
        loop {
            if let Some(outcome) = self.try_take() {
                *token = None;
                return Poll::Ready(outcome);
            }
            let registered = match *token {
                Some(t) => self.refresh(t, cx.waker()),
                None => match self.register(|t| Waiting::Task {
                    token: t,
                    waker: cx.waker().clone(),
                }) {
                    Some(t) => {
                        *token = Some(t);
                        true
                    }
                    None => false,
                },
            };
            if registered {
                return Poll::Pending;
            }
        }
    }

    #[inline(never)]
    fn abandon(&self, token: &mut Option<u64>) {
        if let Some(t) = token.take() {
            let stale =
                self.deregister(|w| matches!(w, Waiting::Task { token, .. } if *token == t));
            drop(stale);
        }
    }
}

/// A blocking receive's registration, removed if the receive unwinds or times out.
struct Registration<'a, T> {
    inner: &'a Inner<T>,
    token: Option<u64>,
}

impl<T> Drop for Registration<'_, T> {
    /// Inlined for the common case, nothing left to remove (a receive that got its message).
    #[inline]
    fn drop(&mut self) {
        if self.token.is_some() {
            self.inner.abandon(&mut self.token);
        }
    }
}

impl<T> Sender<T> {
    fn inner(&self) -> &Inner<T> {
        // SAFETY: the allocation lives while this sender does (`TX_ALIVE`, given up only by
        // `send` and `drop`, which consume it).
        unsafe { self.inner.as_ref() }
    }

    /// Sends the message (never blocks). Fails (giving the message back) if the receiver is
    /// gone.
    pub fn send(self, msg: T) -> Result<(), SendError<T>> {
        // Gives up the sender's share here, not in `Drop`.
        let this = ManuallyDrop::new(self);
        let ptr = this.inner;
        let inner = this.inner();
        // SAFETY: only the sender writes the cell, once, before publishing `SENT`; no
        // receive reads it before it sees `SENT`.
        unsafe { inner.msg().ptr().write(MaybeUninit::new(msg)) };
        match inner.close_tx(true) {
            Ok(()) => Ok(()),
            Err(()) => {
                // SAFETY: written just above and never published (`SENT` is clear), so it is
                // still ours.
                let msg = unsafe { inner.msg().ptr_shared().read().assume_init() };
                // SAFETY: the receiver is gone (seen by `close_tx`); we are the last owner.
                unsafe { free(ptr) };
                Err(SendError(msg))
            }
        }
    }

    /// Whether the receiver is gone.
    pub fn is_closed(&self) -> bool {
        self.inner().state().load(Ordering::Acquire) & RX_CLOSED != 0
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        if self.inner().close_tx(false).is_err() {
            // SAFETY: the receiver is gone (seen by `close_tx`); we are the last owner.
            unsafe { free(self.inner) };
        }
    }
}

impl<T> Receiver<T> {
    fn inner(&self) -> &Inner<T> {
        // SAFETY: the allocation lives while this receiver does (`RX_ALIVE`, given up only
        // by its `drop`).
        unsafe { self.inner.as_ref() }
    }

    /// Waits for the message.
    pub fn recv(&self) -> Result<T, RecvError> {
        self.inner().recv_until(None).map_err(|_| RecvError)
    }

    /// Waits for the message, as a future: [`recv`](Self::recv) for async code, woken
    /// through the polling task's `Waker`, with no executor assumed.
    ///
    /// ```
    /// let (tx, rx) = spindle_sync::oneshot::channel::<u8>();
    /// drop(tx); // dropped without sending
    /// assert!(spindle_park::block_on(rx.recv_async()).is_err());
    /// ```
    pub fn recv_async(&self) -> RecvFuture<'_, T> {
        RecvFuture {
            rx: self,
            token: None,
        }
    }

    /// The message, if it is there.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        match self.inner().try_take() {
            Some(Ok(msg)) => Ok(msg),
            Some(Err(RecvError)) => Err(TryRecvError::Disconnected),
            None => Err(TryRecvError::Empty),
        }
    }

    /// Waits for the message at most `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        self.inner().recv_until(deadline_after(timeout))
    }

    /// Waits for the message until `deadline` at most.
    pub fn recv_deadline(&self, deadline: Instant) -> Result<T, RecvTimeoutError> {
        self.inner().recv_until(Some(deadline))
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        // Nobody waits through a receiver that is being dropped (every receive removed its
        // registration before it returned), so the list is empty: just leave.
        let inner = self.inner();
        let mut s = inner.state().load(Ordering::Acquire);
        if s & TX_ALIVE == 0 {
            // The sender is gone for good (it sent, or was dropped): its last change of the
            // state gave up its share (release; our load acquires it) — after it took the
            // waiting list, if it had to (`close_tx` clears `TX_ALIVE` only with the store
            // that unlocks; `TX_CLOSED` alone is set while it still holds the lock) — and
            // nobody else reaches the allocation: this receiver is borrowed by nothing while
            // it drops, and the waiting list holds no reference to it. So no compare-and-swap
            // to leave: free it. (One atomic read-modify-write fewer per exchange that
            // completed.) Loom checks the order: a use of the allocation by the sender that
            // this free does not come after is a race on `Inner::alive` (`tests/loom_chan.rs`,
            // `oneshot_receiver_dropped_with_a_forgotten_registration_races_send`).
            // SAFETY: we are the last owner (see above).
            unsafe { free(self.inner) };
            return;
        }
        loop {
            s = inner.unlocked(s);
            match inner.cas(s, (s | RX_CLOSED) & !RX_ALIVE) {
                Ok(_) => break,
                Err(actual) => s = actual,
            }
        }
        if s & TX_ALIVE == 0 {
            // SAFETY: the sender is gone (its bit clear, seen by our acquiring
            // compare-and-swap); we are the last owner. An untaken message is dropped with
            // the allocation.
            unsafe { free(self.inner) };
        }
        // Else the sender frees it: its send or drop sees `RX_CLOSED`.
    }
}

/// The future of [`Receiver::recv_async`]: the message, or [`RecvError`] if the sender was
/// dropped without sending (or the message was received already).
#[must_use = "futures do nothing unless polled"]
pub struct RecvFuture<'a, T> {
    /// The receiver, not its `&Inner<T>` (which is neither `Send` nor `Sync`): so the future
    /// is `Send` and `Sync` as the receiver is, for `T: Send`.
    rx: &'a Receiver<T>,
    /// Its registration while it waits.
    token: Option<u64>,
}

// The futures of a oneshot can be moved to and shared with other threads, like the channels'
// (checked at compile time, so that a field change cannot make them `!Send` again).
const _: fn() = || {
    fn send_and_sync<F: Send + Sync>() {}
    send_and_sync::<RecvFuture<'static, u32>>();
    send_and_sync::<ReceiverFuture<u32>>();
};

impl<T> Unpin for RecvFuture<'_, T> {}

impl<T> Future for RecvFuture<'_, T> {
    type Output = Result<T, RecvError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        this.rx.inner().poll_recv(&mut this.token, cx)
    }
}

impl<T> Drop for RecvFuture<'_, T> {
    fn drop(&mut self) {
        self.rx.inner().abandon(&mut self.token);
    }
}

impl<T> fmt::Debug for RecvFuture<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("oneshot::RecvFuture")
            .field("waiting", &self.token.is_some())
            .finish_non_exhaustive()
    }
}

impl<T> IntoFuture for Receiver<T> {
    type Output = Result<T, RecvError>;
    type IntoFuture = ReceiverFuture<T>;

    /// `rx.await`: waits for the message, consuming the receiver.
    fn into_future(self) -> ReceiverFuture<T> {
        ReceiverFuture {
            rx: self,
            token: None,
        }
    }
}

/// The future of awaiting a [`Receiver`] (its [`IntoFuture`]): owns the receiver.
#[must_use = "futures do nothing unless polled"]
pub struct ReceiverFuture<T> {
    rx: Receiver<T>,
    /// Its registration while it waits.
    token: Option<u64>,
}

impl<T> Unpin for ReceiverFuture<T> {}

impl<T> Future for ReceiverFuture<T> {
    type Output = Result<T, RecvError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        this.rx.inner().poll_recv(&mut this.token, cx)
    }
}

impl<T> Drop for ReceiverFuture<T> {
    fn drop(&mut self) {
        // Before the receiver (a field) is dropped.
        self.rx.inner().abandon(&mut self.token);
    }
}

impl<T> fmt::Debug for ReceiverFuture<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("oneshot::ReceiverFuture")
            .field("waiting", &self.token.is_some())
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("oneshot::Sender").finish_non_exhaustive()
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("oneshot::Receiver").finish_non_exhaustive()
    }
}

/// A `Receiver` as an arm of a select: registered in the waiting list; the send completes the
/// select with this arm and wakes it, and the arm then takes the message from the channel.
struct SelectArm<'a, T> {
    inner: &'a Inner<T>,
    out: &'a mut Option<Result<T, RecvError>>,
}

impl<T> Arm for SelectArm<'_, T> {
    fn spent(&self) -> bool {
        self.out.is_some()
    }

    fn try_now(&mut self) -> bool {
        if self.spent() {
            // Completed in an earlier wait of this select: a second "completion" would only
            // overwrite the message with `RecvError` (see `Arm`).
            return false;
        }
        match self.inner.try_take() {
            Some(outcome) => {
                *self.out = Some(outcome);
                true
            }
            None => false,
        }
    }

    fn register(&mut self, cx: &Arc<Waiter>, op: usize) -> bool {
        if self.spent() {
            return false; // waits nowhere
        }
        // Ready (`true`) if the outcome is there: the select takes it with `try_now`.
        self.inner
            .register(|_| Waiting::Select { cx: cx.clone(), op })
            .is_none()
    }

    fn unregister(&mut self, cx: &Arc<Waiter>) {
        if self.spent() {
            return; // registered nowhere
        }
        let removed = self
            .inner
            .deregister(|w| matches!(w, Waiting::Select { cx: c, .. } if Arc::ptr_eq(c, cx)));
        drop(removed);
    }

    fn complete(&mut self) {
        // The sender completed the select with this arm after it sent or was dropped; another
        // receive through the same receiver may have taken the message since: then it was
        // received, which `recv` reports as `RecvError` too.
        *self.out = Some(self.inner.try_take().unwrap_or(Err(RecvError)));
    }

    fn complete_abandoned(&mut self) {
        // Nothing was handed over: the message is still in the channel.
    }
}

impl<T> crate::select::SelectRecv<T> for Receiver<T> {}
impl<T> RecvArmSource<T> for Receiver<T> {
    fn recv_arm<'a>(&'a self, out: &'a mut Option<Result<T, RecvError>>) -> Box<dyn Arm + 'a>
    where
        T: 'a,
    {
        Box::new(SelectArm {
            inner: self.inner(),
            out,
        })
    }
}
