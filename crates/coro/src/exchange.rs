//! The protocol between a resumer and its coroutine: what crosses a switch.
//!
//! A switch carries one word each way. Resumer → coroutine: a pointer to an [`Exchange`] in the
//! resumer's `resume` frame, holding the input (with [`UNWIND`] or-ed in to ask the coroutine
//! to unwind instead; on the first resume, a pointer to a [`Start`] instead). Coroutine →
//! resumer: a tag ([`YIELDED`], [`RETURNED`], [`PANICKED`], [`UNWOUND`]) saying which field of
//! that same exchange now holds the output. The exchange lives exactly as long as the resumer is
//! suspended in the switch, which is as long as the coroutine may use it.

use std::any::Any;
use std::mem::MaybeUninit;

use spindle_context::Link;

/// Coroutine → resumer: `Exchange::yielded` holds a value; the coroutine is suspended.
pub(crate) const YIELDED: usize = 1;
/// Coroutine → resumer: `Exchange::returned` holds the return value; the coroutine finished.
pub(crate) const RETURNED: usize = 2;
/// Coroutine → resumer: `Exchange::panic` holds a panic payload; the coroutine finished.
pub(crate) const PANICKED: usize = 3;
/// Coroutine → resumer: a forced unwind reached the entry; the coroutine finished.
pub(crate) const UNWOUND: usize = 4;

/// Resumer → coroutine: or-ed into the exchange pointer (which is at least 8-aligned) to ask a
/// suspended coroutine to unwind its stack from its `suspend` call.
pub(crate) const UNWIND: usize = 1;

/// One resume's worth of values. `repr(C)` so that a pointer to it can be used as a pointer to
/// its [`ExchangeHead`] prefix by code that does not know `R` (the [`Yielder`](crate::Yielder)).
#[repr(C)]
pub(crate) struct Exchange<I, Y, R> {
    pub(crate) head: ExchangeHead<I, Y>,
    pub(crate) returned: MaybeUninit<R>,
    pub(crate) panic: MaybeUninit<Box<dyn Any + Send>>,
}

/// The part of an [`Exchange`] the yielder uses.
#[repr(C)]
pub(crate) struct ExchangeHead<I, Y> {
    /// Written by the resumer before the switch; moved out by the coroutine right after it.
    pub(crate) input: MaybeUninit<I>,
    /// Written by the coroutine before it switches back with [`YIELDED`].
    pub(crate) yielded: MaybeUninit<Y>,
}

impl<I, Y, R> Exchange<I, Y, R> {
    pub(crate) fn new(input: Option<I>) -> Self {
        Exchange {
            head: ExchangeHead {
                input: match input {
                    Some(input) => MaybeUninit::new(input),
                    None => MaybeUninit::uninit(),
                },
                yielded: MaybeUninit::uninit(),
            },
            returned: MaybeUninit::uninit(),
            panic: MaybeUninit::uninit(),
        }
    }
}

/// What the first resume passes instead of a bare exchange: where the closure is, and the link.
pub(crate) struct Start<I, Y, R> {
    pub(crate) exchange: *mut Exchange<I, Y, R>,
    /// The closure, to be moved out by the entry (its memory is not freed by the entry).
    pub(crate) closure: *mut u8,
    pub(crate) link: Link,
}

/// The payload of the panic that unwinds a coroutine being dropped. Private, so user code can
/// recognise it only as "not mine".
pub(crate) struct ForcedUnwind;
