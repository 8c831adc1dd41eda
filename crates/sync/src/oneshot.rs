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

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::chan::deque::SmallDeque;
pub use crate::chan::error::{RecvError, RecvTimeoutError, SendError, TryRecvError};
use crate::loom::{StdMutex, Wake, lock, park, park_until, waker};
use crate::select::sealed::{Arm, RecvArmSource};
use crate::waiter::{Waiter, deadline_after};

// Design. A oneshot is not a channel with a one-message buffer: one allocation holds the
// message, two flags and the list of whoever waits for the message, behind the crate's internal
// lock. A waiting receiver leaves its waker (a select: its waiter record and arm number) in the
// list and parks; the send (or the sender's drop) takes the whole list and wakes everyone, who
// look again. So a blocking receive costs no allocation of its own (the channels' waiting
// operations allocate a record each), and the message never moves but once, out of the
// channel. Waiting is "register under the lock, release it, park", race-free by
// `spindle_park`'s permit; the receive loops on its condition, so callers never see a
// spurious wake-up.

/// A one-shot channel.
pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let inner = Arc::new(Inner {
        state: StdMutex::new(State {
            msg: None,
            sender_gone: false,
            receiver_gone: false,
            waiting: SmallDeque::new(),
            next_token: 0,
        }),
    });
    (
        Sender {
            inner: Some(inner.clone()),
        },
        Receiver { inner },
    )
}

/// The sending side of a one-shot channel.
pub struct Sender<T> {
    /// `None` once sent (the send consumed it; its drop then has nothing to do).
    inner: Option<Arc<Inner<T>>>,
}

/// The receiving side of a one-shot channel.
pub struct Receiver<T> {
    inner: Arc<Inner<T>>,
}

struct Inner<T> {
    state: StdMutex<State<T>>,
}

struct State<T> {
    msg: Option<T>,
    /// The sender sent, or was dropped.
    sender_gone: bool,
    receiver_gone: bool,
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

impl<T> State<T> {
    fn register(&mut self, waker: Waker) -> u64 {
        let token = self.next_token;
        self.next_token += 1;
        self.waiting.push_back(Waiting::Task { token, waker });
        token
    }

    fn position(&self, token: u64) -> Option<usize> {
        self.waiting
            .iter()
            .position(|w| matches!(w, Waiting::Task { token: t, .. } if *t == token))
    }

    /// Removes registration `token` if it is still there (a send takes them all).
    fn deregister(&mut self, token: u64) -> Option<Waiting> {
        let index = self.position(token)?;
        self.waiting.remove(index)
    }

    /// The message, or why there is none (`None`: not yet).
    fn take(&mut self) -> Option<Result<T, RecvError>> {
        match self.msg.take() {
            Some(msg) => Some(Ok(msg)),
            None if self.sender_gone => Some(Err(RecvError)),
            None => None,
        }
    }
}

/// Wakes everyone who waited (after the lock is released: a woken thread takes it at once).
/// Usually one receiver waits, or nobody: the first is taken on its own, and the queue's
/// chained iterator (~60 instructions to build and drop) only runs when more wait.
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

impl<T> Inner<T> {
    /// The sender is gone (sent, or dropped): wake whoever waits.
    fn sender_done(&self, msg: Option<T>) -> Result<(), SendError<T>> {
        let (result, waiting) = {
            let mut st = lock(&self.state);
            st.sender_gone = true;
            match msg {
                Some(msg) if st.receiver_gone => (Err(SendError(msg)), SmallDeque::new()),
                msg => {
                    st.msg = msg;
                    (Ok(()), std::mem::take(&mut st.waiting))
                }
            }
        };
        wake_all(waiting);
        result
    }

    fn try_recv(&self) -> Result<T, TryRecvError> {
        match lock(&self.state).take() {
            Some(Ok(msg)) => Ok(msg),
            Some(Err(RecvError)) => Err(TryRecvError::Disconnected),
            None => Err(TryRecvError::Empty),
        }
    }

    /// Inlined with only the park in it (the rest is out of line), as the channels'
    /// `recv_until`: the park's switch then sits one frame below the caller.
    #[inline(always)]
    fn recv_until(&self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        // Removes the registration if the park unwinds (a cancelled coroutine).
        let mut registration = Registration {
            inner: self,
            token: None,
        };
        // The timed park said the deadline passed (under loom it says so at once, with
        // real time far from the deadline).
        let mut timed_out = false;
        loop {
            if let Some(outcome) = self.recv_step(&mut registration.token, deadline, timed_out) {
                return outcome;
            }
            match deadline {
                None => park(),
                Some(deadline) => timed_out = park_until(deadline) == Wake::TimedOut,
            }
        }
    }

    /// One look of `recv_until`: the outcome if there is one (deregistering), else registers
    /// (once; `token`) and returns `None` for the caller to park.
    fn recv_step(
        &self,
        token: &mut Option<u64>,
        deadline: Option<Instant>,
        timed_out: bool,
    ) -> Option<Result<T, RecvTimeoutError>> {
        let mut st = lock(&self.state);
        let outcome = match st.take() {
            Some(Ok(msg)) => Some(Ok(msg)),
            Some(Err(RecvError)) => Some(Err(RecvTimeoutError::Disconnected)),
            None if timed_out || deadline.is_some_and(|d| Instant::now() >= d) => {
                Some(Err(RecvTimeoutError::Timeout))
            }
            None => None,
        };
        if let Some(outcome) = outcome {
            if let Some(token) = token.take() {
                let stale = st.deregister(token);
                drop(st);
                drop(stale);
            }
            return Some(outcome);
        }
        match *token {
            Some(t) if st.position(t).is_some() => {} // a spurious wake-up
            _ => *token = Some(st.register(waker())),
        }
        None
    }

    /// A receive future's step (`token`: its registration while it waits).
    fn poll_recv(
        &self,
        token: &mut Option<u64>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<T, RecvError>> {
        let mut st = lock(&self.state);
        if let Some(outcome) = st.take() {
            let stale = token.take().and_then(|t| st.deregister(t));
            drop(st);
            drop(stale);
            return Poll::Ready(outcome);
        }
        let index = token.and_then(|t| st.position(t));
        match index.and_then(|i| st.waiting.get_mut(i)) {
            Some(Waiting::Task { waker, .. }) => {
                if !waker.will_wake(cx.waker()) {
                    *waker = cx.waker().clone();
                }
            }
            _ => *token = Some(st.register(cx.waker().clone())),
        }
        Poll::Pending
    }

    fn abandon(&self, token: &mut Option<u64>) {
        if let Some(t) = token.take() {
            let stale = lock(&self.state).deregister(t);
            drop(stale);
        }
    }
}

/// A blocking receive's registration, removed if the receive unwinds.
struct Registration<'a, T> {
    inner: &'a Inner<T>,
    token: Option<u64>,
}

impl<T> Drop for Registration<'_, T> {
    fn drop(&mut self) {
        self.inner.abandon(&mut self.token);
    }
}

impl<T> Sender<T> {
    /// Sends the message (never blocks). Fails (giving the message back) if the receiver is
    /// gone.
    pub fn send(mut self, msg: T) -> Result<(), SendError<T>> {
        match self.inner.take() {
            Some(inner) => inner.sender_done(Some(msg)),
            None => Err(SendError(msg)), // (not reached: `send` consumes the sender)
        }
    }

    /// Whether the receiver is gone.
    pub fn is_closed(&self) -> bool {
        self.inner
            .as_ref()
            .is_none_or(|inner| lock(&inner.state).receiver_gone)
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            let _ = inner.sender_done(None);
        }
    }
}

impl<T> Receiver<T> {
    /// Waits for the message.
    pub fn recv(&self) -> Result<T, RecvError> {
        self.inner.recv_until(None).map_err(|_| RecvError)
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
            inner: &self.inner,
            token: None,
        }
    }

    /// The message, if it is there.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        self.inner.try_recv()
    }

    /// Waits for the message at most `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        self.inner.recv_until(deadline_after(timeout))
    }

    /// Waits for the message until `deadline` at most.
    pub fn recv_deadline(&self, deadline: Instant) -> Result<T, RecvTimeoutError> {
        self.inner.recv_until(Some(deadline))
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let (msg, waiting) = {
            let mut st = lock(&self.inner.state);
            st.receiver_gone = true;
            // Nobody waits through a receiver that is being dropped; take the list anyway.
            (st.msg.take(), std::mem::take(&mut st.waiting))
        };
        drop(waiting);
        drop(msg);
    }
}

/// The future of [`Receiver::recv_async`]: the message, or [`RecvError`] if the sender was
/// dropped without sending (or the message was received already).
#[must_use = "futures do nothing unless polled"]
pub struct RecvFuture<'a, T> {
    inner: &'a Inner<T>,
    /// Its registration while it waits.
    token: Option<u64>,
}

impl<T> Unpin for RecvFuture<'_, T> {}

impl<T> Future for RecvFuture<'_, T> {
    type Output = Result<T, RecvError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        this.inner.poll_recv(&mut this.token, cx)
    }
}

impl<T> Drop for RecvFuture<'_, T> {
    fn drop(&mut self) {
        self.inner.abandon(&mut self.token);
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
        this.rx.inner.poll_recv(&mut this.token, cx)
    }
}

impl<T> Drop for ReceiverFuture<T> {
    fn drop(&mut self) {
        // Before the receiver (a field) is dropped.
        self.rx.inner.abandon(&mut self.token);
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
    fn try_now(&mut self) -> bool {
        match self.inner.try_recv() {
            Ok(msg) => *self.out = Some(Ok(msg)),
            Err(TryRecvError::Disconnected) => *self.out = Some(Err(RecvError)),
            Err(TryRecvError::Empty) => return false,
        }
        true
    }

    fn register(&mut self, cx: &Arc<Waiter>, op: usize) -> bool {
        let mut st = lock(&self.inner.state);
        if st.msg.is_some() || st.sender_gone {
            return true; // ready: the select takes it with `try_now`
        }
        st.waiting.push_back(Waiting::Select { cx: cx.clone(), op });
        false
    }

    fn unregister(&mut self, cx: &Arc<Waiter>) {
        let removed = {
            let mut st = lock(&self.inner.state);
            let index = st
                .waiting
                .iter()
                .position(|w| matches!(w, Waiting::Select { cx: c, .. } if Arc::ptr_eq(c, cx)));
            index.and_then(|i| st.waiting.remove(i))
        };
        drop(removed);
    }

    fn complete(&mut self) {
        // The sender completed the select with this arm after it sent or was dropped; another
        // receive through the same receiver may have taken the message since: then it was
        // received, which `recv` reports as `RecvError` too.
        *self.out = Some(lock(&self.inner.state).take().unwrap_or(Err(RecvError)));
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
            inner: &self.inner,
            out,
        })
    }
}
