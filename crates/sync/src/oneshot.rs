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
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

pub use crate::chan::RecvFuture;
pub use crate::chan::error::{RecvError, RecvTimeoutError, SendError, TryRecvError};
use crate::chan::{Chan, Packet};
use crate::waiter::deadline_after;

/// A one-shot channel.
pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let chan = Chan::new(Some(1));
    (Sender { chan: chan.clone() }, Receiver { chan })
}

/// The sending side of a one-shot channel.
pub struct Sender<T> {
    chan: Arc<Chan<T>>,
}

/// The receiving side of a one-shot channel.
pub struct Receiver<T> {
    chan: Arc<Chan<T>>,
}

impl<T> Sender<T> {
    /// Sends the message (never blocks). Fails if the receiver is gone.
    pub fn send(self, msg: T) -> Result<(), SendError<T>> {
        // The only send of the channel: the one-slot buffer has room.
        self.chan
            .try_send(msg)
            .map_err(|e| SendError(e.into_inner()))
    }

    /// Whether the receiver is gone.
    pub fn is_closed(&self) -> bool {
        self.chan.receivers_gone()
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        self.chan.drop_sender();
    }
}

impl<T> Receiver<T> {
    /// Waits for the message.
    pub fn recv(&self) -> Result<T, RecvError> {
        self.chan.recv_until(None).map_err(|_| RecvError)
    }

    /// Waits for the message, as a future: [`recv`](Self::recv) for async code, woken
    /// through the polling task's `Waker`, with no executor assumed (it waits in the same
    /// queue as a blocking `recv` would).
    ///
    /// ```
    /// let (tx, rx) = spindle_sync::oneshot::channel::<u8>();
    /// drop(tx); // dropped without sending
    /// assert!(spindle_park::block_on(rx.recv_async()).is_err());
    /// ```
    pub fn recv_async(&self) -> RecvFuture<'_, T> {
        RecvFuture::new(&self.chan)
    }

    /// The message, if it is there.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        self.chan.try_recv()
    }

    /// Waits for the message at most `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        self.chan.recv_until(deadline_after(timeout))
    }

    /// Waits for the message until `deadline` at most.
    pub fn recv_deadline(&self, deadline: Instant) -> Result<T, RecvTimeoutError> {
        self.chan.recv_until(Some(deadline))
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        self.chan.drop_receiver();
    }
}

impl<T> IntoFuture for Receiver<T> {
    type Output = Result<T, RecvError>;
    type IntoFuture = ReceiverFuture<T>;

    /// `rx.await`: waits for the message, consuming the receiver.
    fn into_future(self) -> ReceiverFuture<T> {
        ReceiverFuture {
            rx: self,
            pending: None,
        }
    }
}

/// The future of awaiting a [`Receiver`] (its [`IntoFuture`]): owns the receiver.
#[must_use = "futures do nothing unless polled"]
pub struct ReceiverFuture<T> {
    rx: Receiver<T>,
    /// The queued packet, while it waits.
    pending: Option<Arc<Packet<T>>>,
}

impl<T> Unpin for ReceiverFuture<T> {}

impl<T> Future for ReceiverFuture<T> {
    type Output = Result<T, RecvError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        this.rx.chan.poll_recv(&mut this.pending, cx)
    }
}

impl<T> Drop for ReceiverFuture<T> {
    fn drop(&mut self) {
        // Before the receiver (a field) is dropped.
        self.rx.chan.abandon_recv(&mut self.pending);
    }
}

impl<T> fmt::Debug for ReceiverFuture<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("oneshot::ReceiverFuture")
            .field("waiting", &self.pending.is_some())
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

impl<T> crate::select::SelectRecv<T> for Receiver<T> {}
impl<T> crate::select::sealed::AsChan<T> for Receiver<T> {
    fn chan(&self) -> &Chan<T> {
        &self.chan
    }
}
