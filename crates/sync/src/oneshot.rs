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

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::chan::Chan;
pub use crate::chan::error::{RecvError, RecvTimeoutError, SendError, TryRecvError};
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
