//! The coroutine's side of the switch.

use std::cell::Cell;
use std::marker::PhantomData;
use std::panic::resume_unwind;

use spindle_context::{Link, suspend};

use crate::coroutine::NotSend;
use crate::exchange::{ForcedUnwind, Slot, UNWIND, YIELDED};

/// Handed to a coroutine's closure: suspends the coroutine.
///
/// It lives on the coroutine's stack for as long as the closure runs; the closure gets a
/// shared reference and cannot move it out (it is neither `Send` nor `Clone`).
pub struct Yielder<Input, Yield> {
    link: Link,
    /// Set once a forced unwind has been delivered (so the entry can tell it from a panic).
    unwinding: Cell<bool>,
    _not_send: NotSend,
    _types: PhantomData<fn(Yield) -> Input>,
}

impl<Input, Yield> Yielder<Input, Yield> {
    pub(crate) fn new(link: Link) -> Self {
        Yielder {
            link,
            unwinding: Cell::new(false),
            _not_send: PhantomData,
            _types: PhantomData,
        }
    }

    /// True once a forced unwind has been delivered to this coroutine.
    pub(crate) fn is_unwinding(&self) -> bool {
        self.unwinding.get()
    }

    /// Suspends the coroutine, handing `value` to the resumer (whose
    /// [`resume`](crate::Coroutine::resume) returns [`CoroutineResult::Yield`]); returns the
    /// input of the next `resume`.
    ///
    /// If the coroutine is dropped while suspended here, this call does not return: it unwinds
    /// (as a panic with a private payload that the panic hook does not report), so every
    /// destructor on the coroutine's stack runs. Code that catches that unwind with
    /// [`catch_unwind`](std::panic::catch_unwind) should let it continue (resume it); if it
    /// suspends again instead, the dropping side takes the value and asks again, so each
    /// further `suspend` unwinds too, until the coroutine finishes.
    ///
    /// Calling it while the coroutine unwinds — from a destructor during a panic or during
    /// that forced unwind, or from the panic hook — aborts the process with a message naming
    /// the coroutine (unless the panic is not a forced unwind and
    /// [`Builder::allow_suspend_while_unwinding`](crate::Builder::allow_suspend_while_unwinding)
    /// allows it); see the [documented aborts](crate#documented-aborts).
    ///
    /// A reference into a thread-local may be held across this call. If the thread exits while
    /// the coroutine is suspended here, the coroutine never runs again: once the thread has
    /// begun destroying its thread-locals, a resume is refused and a drop leaks the coroutine
    /// instead of unwinding this call (see [`Coroutine`'s thread exit
    /// rules](crate::Coroutine#thread-exit)).
    ///
    /// [`CoroutineResult::Yield`]: crate::CoroutineResult::Yield
    #[inline]
    pub fn suspend(&self, value: Yield) -> Input {
        let out = Slot::new(value);
        // SAFETY: we run on the coroutine's stack, entered by `Context::resume` with this link
        // (the coroutine crate resumes only that way). The resumer moves the value out of
        // `out` right after the switch, while we are suspended and `out` is alive.
        let word = unsafe { suspend(self.link, out.word(YIELDED)) };
        if word & UNWIND != 0 {
            self.unwinding.set(true);
            resume_unwind(Box::new(ForcedUnwind));
        }
        // SAFETY: a plain resume sends a slot with the input, in its own frame, alive while it
        // waits for us; we move it out exactly once.
        unsafe { Slot::take(word) }
    }
}

impl<Input, Yield> std::fmt::Debug for Yielder<Input, Yield> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Yielder").finish_non_exhaustive()
    }
}
