//! The protocol between a resumer and its coroutine: what crosses a switch.
//!
//! A switch carries one word each way, and every value travels by pointer to the sender's own
//! stack, read by the receiver right after the switch (while the sender is suspended, so the
//! value is still there):
//!
//! * resumer → coroutine: a pointer to a [`Slot`] holding the input, in the resumer's `resume`
//!   frame — or [`UNWIND`] (odd, so never a slot) to ask the coroutine to unwind instead;
//! * coroutine → resumer: a pointer to a [`Slot`] on the coroutine's stack holding the output,
//!   with a tag in its low bits: [`YIELDED`], [`RETURNED`], [`PANICKED`], or [`UNWOUND`] (no
//!   value).
//!
//! Neither side keeps a pointer into the other's stack between switches, so nothing has to be
//! stored and reloaded on the way: the hot path is the switch itself.

use std::mem::MaybeUninit;

/// Coroutine → resumer: the slot holds the yielded value; the coroutine is suspended.
pub(crate) const YIELDED: usize = 0;
/// Coroutine → resumer: the slot holds the return value; the coroutine finished.
pub(crate) const RETURNED: usize = 1;
/// Coroutine → resumer: the slot holds a panic payload; the coroutine finished.
pub(crate) const PANICKED: usize = 2;
/// Coroutine → resumer: a forced unwind reached the entry; the coroutine finished. No slot.
pub(crate) const UNWOUND: usize = 3;
/// The tag bits of a coroutine → resumer word.
pub(crate) const TAG: usize = 0b111;

/// Resumer → coroutine: unwind the stack from the pending `suspend` (instead of an input).
pub(crate) const UNWIND: usize = 1;

/// A value in transit, aligned so that the low three bits of its address are free for a tag.
#[repr(C, align(8))]
pub(crate) struct Slot<T>(MaybeUninit<T>);

impl<T> Slot<T> {
    pub(crate) fn new(value: T) -> Self {
        Slot(MaybeUninit::new(value))
    }

    /// The word that sends this slot with `tag`. A zero-sized value needs no address, so the
    /// word is just the tag (one register less for the compiler to keep around a switch).
    #[inline(always)]
    pub(crate) fn word(&self, tag: usize) -> usize {
        if size_of::<T>() == 0 {
            tag
        } else {
            self as *const Self as usize | tag
        }
    }

    /// [`take`](Slot::take) for a word whose tag is known to be 0 (no masking).
    ///
    /// # Safety
    ///
    /// As for `take`, and the word's tag is 0.
    #[inline(always)]
    pub(crate) unsafe fn take_untagged(word: usize) -> T {
        if size_of::<T>() == 0 {
            // SAFETY: a zero-sized value has no bytes: any aligned non-null pointer reads it.
            return unsafe { std::ptr::NonNull::<T>::dangling().as_ptr().read() };
        }
        // SAFETY: forwarded contract; with a 0 tag the word is the slot's address.
        unsafe { (*(word as *const Slot<T>)).0.assume_init_read() }
    }

    /// Moves the value out of the slot a word points to.
    ///
    /// # Safety
    ///
    /// `word` was made by [`Slot::word`] for a `Slot<T>` that is still alive and holds a
    /// value, which nobody else moves out.
    #[inline(always)]
    pub(crate) unsafe fn take(word: usize) -> T {
        if size_of::<T>() == 0 {
            // SAFETY: a zero-sized value has no bytes: any aligned non-null pointer reads it.
            return unsafe { std::ptr::NonNull::<T>::dangling().as_ptr().read() };
        }
        let slot = (word & !TAG) as *const Slot<T>;
        // SAFETY: forwarded contract.
        unsafe { (*slot).0.assume_init_read() }
    }
}

/// The payload of the panic that unwinds a coroutine being dropped. Private, so user code can
/// recognise it only as "not mine".
pub(crate) struct ForcedUnwind;
