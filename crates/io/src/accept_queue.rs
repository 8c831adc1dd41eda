//! Connections accepted ahead of `accept` calls by a multishot accept (io_uring's
//! `IORING_ACCEPT_MULTISHOT`): one request in the kernel accepts connection after connection,
//! and the listener's `accept` takes them from here.
//!
//! The queue is shared by a [`TcpListener`](crate::net::TcpListener) and the driver that armed the request ([`Proactor::arm_accept_multishot`]). The driver
//! pushes each completion ([`AcceptQueue::complete`]); the listener pops. The request lives in
//! one worker's ring, but any coroutine may take from the queue, on any worker. When the
//! listener is dropped it [closes](AcceptQueue::close) the queue: the request is cancelled
//! through the function its driver left ([`AcceptQueue::armed`]) — from whatever thread drops
//! it — and connections accepted but not taken are closed.
//!
//! The queue cancels its request once it holds [`ACCEPT_READ_AHEAD`] connections nobody took,
//! and the next `accept` that finds it empty arms a new one: connections nobody asked for then
//! stay in the kernel's backlog, as they would without multishot accept, instead of filling
//! the process's descriptor table. The bound is on a burst, not exact: the kernel accepts in a
//! loop inside one turn of the ring (until the backlog is empty), before the driver sees a
//! completion, so a burst may take up to a listen backlog's worth (1,024 for `bind`) before
//! the cancel lands — once, until an `accept` empties the queue again. An `accept`
//! outside a task (a plain thread, which accepts with the blocking call) cancels the request
//! too and takes what it delivered until its last completion, so that no connection is left
//! in a queue nobody reads while the thread waits in the kernel's backlog.
//!
//! [`Proactor::arm_accept_multishot`]: crate::Proactor::arm_accept_multishot

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::Waker;

/// Stops an armed multishot request (called at most once, from any thread).
pub type CancelFn = Box<dyn FnOnce() + Send>;

/// The connections a queue holds, not taken yet, at which it cancels its request (see the
/// module docs: a burst may exceed it).
pub const ACCEPT_READ_AHEAD: usize = 16;

/// Connections accepted ahead of `accept` calls by a multishot accept (io_uring's
/// `IORING_ACCEPT_MULTISHOT`), shared by a listener and the driver that armed the request.
///
/// The driver pushes each completion ([`complete`](AcceptQueue::complete)); the listener takes
/// them ([`take_or_wait`](AcceptQueue::take_or_wait)). When the listener goes it
/// [`close`](AcceptQueue::close)s the queue: the request is cancelled through the function its
/// driver left with [`armed`](AcceptQueue::armed) (callable from any thread), and connections
/// accepted but not taken are closed.
pub struct AcceptQueue {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Accepted connections (owned here until taken) and errors, in completion order.
    ready: VecDeque<io::Result<OwnedFd>>,
    /// Tasks waiting for `ready` to be non-empty or the request to end.
    waiters: Vec<Waker>,
    /// A request is in some ring; its cancel function.
    armed: Option<CancelFn>,
    /// The request was cancelled (queue full, or an accept outside a task) and its last
    /// completion has not come yet: no new one is armed until it has.
    cancelling: bool,
    /// The listener is gone: nothing is queued any more.
    closed: bool,
    /// The kernel refused a multishot accept here: use single accepts.
    unsupported: bool,
}

/// What [`AcceptQueue::take_or_wait`] found.
#[derive(Debug)]
pub enum Take {
    /// A connection (or the error an accept ended with).
    Ready(io::Result<OwnedFd>),
    /// Nothing queued and no request armed: arm one (or accept another way).
    Unarmed,
    /// Nothing queued; the waker is registered and will be woken by the next completion.
    Wait,
    /// Multishot accept does not work here: accept another way.
    Unsupported,
}

impl AcceptQueue {
    /// An empty queue, no request armed.
    pub fn new() -> AcceptQueue {
        AcceptQueue {
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing here panics while the lock is held; a poisoned lock still has a consistent
        // state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the oldest accepted connection; or, with none queued, registers `waker` if a
    /// request is armed.
    pub fn take_or_wait(&self, waker: &Waker) -> Take {
        self.take_or_register(waker, false)
    }

    /// For an `accept` outside a task, which does not take from the queue by waiting for a
    /// request: the oldest accepted connection; or, with none queued, cancels the armed
    /// request and registers `waker` (`Wait`) until its last completion; `Unarmed` once no
    /// request is in the kernel and the queue is empty (the caller accepts another way).
    pub fn take_or_disarm(&self, waker: &Waker) -> Take {
        self.take_or_register(waker, true)
    }

    /// [`take_or_wait`](Self::take_or_wait), and if `disarm` the armed request is cancelled
    /// before the wait ([`take_or_disarm`](Self::take_or_disarm)).
    fn take_or_register(&self, waker: &Waker, disarm: bool) -> Take {
        let cancel = {
            let mut state = self.lock();
            if let Some(ready) = state.ready.pop_front() {
                return Take::Ready(ready);
            }
            if state.unsupported {
                return Take::Unsupported;
            }
            if state.armed.is_none() && !state.cancelling {
                return Take::Unarmed;
            }
            state.register(waker);
            if disarm { state.begin_cancel() } else { None }
        };
        if let Some(cancel) = cancel {
            cancel();
        }
        Take::Wait
    }

    /// Driver side: a request for this queue is now in the kernel; `cancel` stops it. Returns
    /// false (and drops `cancel` unused) if the queue is closed, already armed, or its
    /// cancelled request has not ended yet: the driver must not submit then.
    pub fn armed(&self, cancel: CancelFn) -> bool {
        let mut state = self.lock();
        if state.closed || state.armed.is_some() || state.cancelling {
            return false;
        }
        state.armed = Some(cancel);
        true
    }

    /// Driver side: one completion of the request. `result` is the accept's (a new fd, or
    /// `-errno`); `more` is false when it was the request's last (`IORING_CQE_F_MORE` clear).
    /// A request ended by a cancel (`-ECANCELED`) queues nothing; a kernel without multishot
    /// accept (`-EINVAL` as the first and last completion) marks the queue unsupported. A
    /// completion that fills the queue to [`ACCEPT_READ_AHEAD`] cancels the request.
    pub fn complete(&self, result: i32, more: bool) {
        let (waiters, cancel) = {
            let mut state = self.lock();
            if result >= 0 {
                // SAFETY: the kernel's accept returned a new descriptor that nothing else
                // owns; it is ours to close.
                let fd = unsafe { OwnedFd::from_raw_fd(result as RawFd) };
                if !state.closed {
                    state.ready.push_back(Ok(fd));
                }
            } else if result == -libc::EINVAL && !more {
                state.unsupported = true;
            } else if result != -libc::ECANCELED && !state.closed {
                state
                    .ready
                    .push_back(Err(io::Error::from_raw_os_error(-result)));
            }
            let cancel = if !more {
                state.armed = None;
                state.cancelling = false;
                None
            } else if state.ready.len() >= ACCEPT_READ_AHEAD {
                state.begin_cancel()
            } else {
                None
            };
            (std::mem::take(&mut state.waiters), cancel)
        };
        if let Some(cancel) = cancel {
            cancel();
        }
        for waker in waiters {
            waker.wake();
        }
    }

    /// Driver side: the request is gone without a final completion (its ring was torn down).
    pub fn disarmed(&self) {
        let waiters = {
            let mut state = self.lock();
            state.armed = None;
            state.cancelling = false;
            std::mem::take(&mut state.waiters)
        };
        for waker in waiters {
            waker.wake();
        }
    }

    /// Listener side: the listener is going away. Cancels the armed request (if any) and
    /// closes the connections nobody took.
    pub fn close(&self) {
        let (cancel, ready) = {
            let mut state = self.lock();
            state.closed = true;
            (state.armed.take(), std::mem::take(&mut state.ready))
        };
        drop(ready);
        if let Some(cancel) = cancel {
            cancel();
        }
    }
}

impl State {
    fn register(&mut self, waker: &Waker) {
        if !self.waiters.iter().any(|w| w.will_wake(waker)) {
            self.waiters.push(waker.clone());
        }
    }

    /// The armed request's cancel function, to call once the lock is released (`None` if no
    /// request is armed or it is being cancelled already).
    fn begin_cancel(&mut self) -> Option<CancelFn> {
        let cancel = self.armed.take()?;
        self.cancelling = true;
        Some(cancel)
    }
}

impl Default for AcceptQueue {
    fn default() -> Self {
        AcceptQueue::new()
    }
}

impl fmt::Debug for AcceptQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("AcceptQueue")
            .field("ready", &state.ready.len())
            .field("armed", &state.armed.is_some())
            .field("cancelling", &state.cancelling)
            .field("closed", &state.closed)
            .field("unsupported", &state.unsupported)
            .finish()
    }
}
