//! The coroutine's side of the switch.

use std::cell::Cell;
use std::marker::PhantomData;
use std::panic::resume_unwind;

use spindle_context::{Link, suspend};

use crate::exchange::{ExchangeHead, ForcedUnwind, UNWIND, YIELDED};

/// Handed to a coroutine's closure: suspends the coroutine.
///
/// It lives on the coroutine's stack for as long as the closure runs; the closure gets a
/// shared reference and cannot move it out (it is neither `Send` nor `Clone`).
pub struct Yielder<Input, Yield> {
    link: Link,
    /// The exchange of the resume that is currently running us.
    exchange: Cell<*mut ExchangeHead<Input, Yield>>,
    /// Set once a forced unwind has been delivered: any later `suspend` unwinds again at once.
    unwinding: Cell<bool>,
    _not_send: PhantomData<*mut ()>,
}

impl<Input, Yield> Yielder<Input, Yield> {
    pub(crate) fn new(link: Link, exchange: *mut ExchangeHead<Input, Yield>) -> Self {
        Yielder {
            link,
            exchange: Cell::new(exchange),
            unwinding: Cell::new(false),
            _not_send: PhantomData,
        }
    }

    /// True once a forced unwind has been delivered to this coroutine.
    pub(crate) fn is_unwinding(&self) -> bool {
        self.unwinding.get()
    }

    /// The exchange of the current resume.
    pub(crate) fn exchange(&self) -> *mut ExchangeHead<Input, Yield> {
        self.exchange.get()
    }

    /// Suspends the coroutine, handing `value` to the resumer (whose
    /// [`resume`](crate::Coroutine::resume) returns [`CoroutineResult::Yield`]); returns the
    /// input of the next `resume`.
    ///
    /// If the coroutine is dropped while suspended here, this call does not return: it unwinds
    /// (as a panic with a private payload that the panic hook does not report), so every
    /// destructor on the coroutine's stack runs. Code that catches that unwind with
    /// [`catch_unwind`](std::panic::catch_unwind) should let it continue (resume it); if it
    /// suspends again instead, the suspend unwinds again at once.
    ///
    /// [`CoroutineResult::Yield`]: crate::CoroutineResult::Yield
    #[inline]
    pub fn suspend(&self, value: Yield) -> Input {
        if self.unwinding.get() {
            drop(value);
            resume_unwind(Box::new(ForcedUnwind));
        }
        let exchange = self.exchange.get();
        // SAFETY: the exchange belongs to the resume that is running us; its resumer is
        // suspended in that resume until we switch back, so the memory is alive and ours.
        unsafe { (*exchange).yielded.write(value) };
        // SAFETY: we run on the coroutine's stack, entered by `Context::resume` with this link
        // (the coroutine crate resumes only that way).
        let word = unsafe { suspend(self.link, YIELDED) };
        if word & UNWIND != 0 {
            self.unwinding.set(true);
            self.exchange
                .set((word & !UNWIND) as *mut ExchangeHead<Input, Yield>);
            resume_unwind(Box::new(ForcedUnwind));
        }
        let exchange = word as *mut ExchangeHead<Input, Yield>;
        self.exchange.set(exchange);
        // SAFETY: a plain resume always writes the input before switching to us; we move it
        // out exactly once.
        unsafe { (*exchange).input.assume_init_read() }
    }
}

impl<Input, Yield> std::fmt::Debug for Yielder<Input, Yield> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Yielder").finish_non_exhaustive()
    }
}
