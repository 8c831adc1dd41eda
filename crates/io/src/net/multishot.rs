//! A listener's side of multishot accept (see `crate::accept_queue`).

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use spindle_park::Wake;

use crate::driver::{AcceptQueue, OpKind, Take};
use crate::source::Evented;

/// The queue a multishot accept fills for one listening socket, shared by every handle on it
/// ([`TcpListener::try_clone`](crate::net::TcpListener::try_clone) duplicates the descriptor,
/// not the queue: a connection the kernel took ahead is for whichever handle accepts next, as
/// the kernel's backlog is). Closed when the last handle drops.
#[derive(Debug, Default)]
pub(crate) struct MultishotAccepts {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    queue: Arc<AcceptQueue>,
    /// The socket met a driver without multishot accept: it accepts one at a time from then
    /// on (saves the probe on every `accept`).
    single: AtomicBool,
}

impl MultishotAccepts {
    /// The same queue, for another handle on the same socket.
    pub(crate) fn share(&self) -> MultishotAccepts {
        MultishotAccepts {
            shared: self.shared.clone(),
        }
    }

    /// A connection from the multishot accept of the current driver (arming it if needed), or
    /// `None` if there is none here (no proactor, or a proactor or kernel without multishot
    /// accept): the caller accepts another way.
    ///
    /// Outside a task (a plain thread, which accepts with the blocking call) it only takes
    /// what a request armed earlier delivered, after cancelling that request: a blocking
    /// accept racing an armed request could wait in the kernel while the request takes the
    /// connection into the queue.
    pub(crate) fn accept(&self, ev: &Evented) -> Option<io::Result<OwnedFd>> {
        let Shared { queue, single } = &*self.shared;
        if single.load(Ordering::Relaxed) {
            return None;
        }
        let waker = spindle_park::waker();
        if !spindle_park::in_task() {
            // Until the cancelled request's last completion (or a connection it took). A
            // bound on the wait: on a worker thread outside its coroutines (a start hook, say)
            // that completion may be for this very thread's ring to reap.
            let deadline = Instant::now() + Duration::from_secs(1);
            loop {
                match queue.take_or_disarm(&waker) {
                    Take::Ready(accepted) => return Some(accepted),
                    Take::Wait if spindle_park::park_until(deadline) == Wake::Woken => {}
                    Take::Wait | Take::Unarmed | Take::Unsupported => return None,
                }
            }
        }
        loop {
            match queue.take_or_wait(&waker) {
                Take::Ready(accepted) => return Some(accepted),
                Take::Wait => spindle_park::park(),
                Take::Unsupported => break,
                Take::Unarmed => {
                    match ev.completion(OpKind::Accept, |p, fd| p.arm_accept_multishot(fd, queue)) {
                        Some(Ok(true)) => {}
                        Some(Err(e)) => return Some(Err(e)),
                        None | Some(Ok(false)) => break,
                    }
                }
            }
        }
        single.store(true, Ordering::Relaxed);
        None
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.queue.close();
    }
}
