//! [`Barrier`]: wait until a number of tasks have all arrived.

use std::fmt;
use std::sync::Arc;

use crate::loom::{StdMutex, const_fn, lock};
use crate::waiter::Waiter;

struct State {
    arrived: usize,
    waiters: Vec<Arc<Waiter>>,
}

/// A barrier: `n` tasks (coroutines or threads, mixed) call [`wait`](Barrier::wait), and all
/// are released when the `n`-th arrives. Reusable: the next `n` calls form the next round.
///
/// ```
/// use std::sync::Arc;
/// use spindle_sync::Barrier;
///
/// let barrier = Arc::new(Barrier::new(3));
/// let threads: Vec<_> = (0..3).map(|_| {
///     let b = barrier.clone();
///     std::thread::spawn(move || b.wait().is_leader())
/// }).collect();
/// let leaders = threads.into_iter().map(|t| t.join().unwrap());
/// assert_eq!(leaders.filter(|&leader| leader).count(), 1);
/// ```
///
/// # Specification
///
/// * [`wait`](Barrier::wait): blocks until `n` callers (this one included) have arrived in
///   this round; exactly one of them (the last to arrive) gets
///   [`is_leader`](BarrierWaitResult::is_leader) `true`. `Barrier::new(0)` behaves as
///   `Barrier::new(1)` (std's rule): nobody waits.
/// * **Spurious wake-ups**: none.
/// * **Cancellation**: a coroutine cancelled while waiting withdraws its arrival, so the round
///   still needs `n` live callers (nobody is released one short, and nobody waits for a
///   caller that is gone).
pub struct Barrier {
    n: usize,
    state: StdMutex<State>,
}

/// What [`Barrier::wait`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BarrierWaitResult(bool);

impl BarrierWaitResult {
    /// True for exactly one caller per round: the one whose arrival released it.
    pub fn is_leader(&self) -> bool {
        self.0
    }
}

impl Barrier {
    const_fn! {
        /// A barrier for `n` callers per round.
        pub fn new(n: usize) -> Barrier {
            Barrier {
                n,
                state: StdMutex::new(State {
                    arrived: 0,
                    waiters: Vec::new(),
                }),
            }
        }
    }

    /// Arrives and waits for the others of this round.
    pub fn wait(&self) -> BarrierWaitResult {
        let cx = {
            let mut state = lock(&self.state);
            state.arrived += 1;
            if state.arrived >= self.n {
                state.arrived = 0;
                let waiters = std::mem::take(&mut state.waiters);
                drop(state);
                for w in waiters {
                    if w.try_select(0) {
                        w.wake();
                    }
                }
                return BarrierWaitResult(true);
            }
            let cx = Waiter::new();
            state.waiters.push(cx.clone());
            cx
        };
        let abandon = Abandon {
            barrier: self,
            cx: &cx,
        };
        cx.wait(None);
        std::mem::forget(abandon);
        BarrierWaitResult(false)
    }
}

struct Abandon<'a> {
    barrier: &'a Barrier,
    cx: &'a Arc<Waiter>,
}

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        if self.cx.try_abort() {
            let mut state = lock(&self.barrier.state);
            if let Some(i) = state.waiters.iter().position(|w| Arc::ptr_eq(w, self.cx)) {
                state.waiters.swap_remove(i);
                state.arrived -= 1;
            }
        }
        // Released already: the round is over, nothing to undo.
    }
}

impl fmt::Debug for Barrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Barrier")
            .field("n", &self.n)
            .field("arrived", &lock(&self.state).arrived)
            .finish()
    }
}
