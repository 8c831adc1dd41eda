//! A listener's side of multishot accept (see `crate::accept_queue`).

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::driver::{AcceptQueue, OpKind, Take};
use crate::source::Evented;

/// The queue a multishot accept fills for one listener, closed when the listener drops.
#[derive(Debug, Default)]
pub(crate) struct MultishotAccepts {
    queue: Arc<AcceptQueue>,
    /// The listener met a driver without multishot accept: it accepts one at a time from then
    /// on (saves the probe on every `accept`).
    single: AtomicBool,
}

impl MultishotAccepts {
    /// A connection from the multishot accept of the current driver (arming it if needed), or
    /// `None` if there is none here (no task, no proactor, or a proactor or kernel without
    /// multishot accept): the caller accepts another way.
    pub(crate) fn accept(&self, ev: &Evented) -> Option<io::Result<OwnedFd>> {
        if self.single.load(Ordering::Relaxed) || !spindle_park::in_task() {
            return None;
        }
        let waker = spindle_park::waker();
        loop {
            match self.queue.take_or_wait(&waker) {
                Take::Ready(accepted) => return Some(accepted),
                Take::Wait => spindle_park::park(),
                Take::Unsupported => break,
                Take::Unarmed => {
                    match ev.completion(OpKind::Accept, |p, fd| {
                        p.arm_accept_multishot(fd, &self.queue)
                    }) {
                        Some(Ok(true)) => {}
                        Some(Err(e)) => return Some(Err(e)),
                        None | Some(Ok(false)) => break,
                    }
                }
            }
        }
        self.single.store(true, Ordering::Relaxed);
        None
    }
}

impl Drop for MultishotAccepts {
    fn drop(&mut self) {
        self.queue.close();
    }
}
