//! [`Ring`]: the FIFO behind a worker's private queues.
//!
//! A growable ring buffer of `Option<T>` slots (no `unsafe`), whose push and pop inline into
//! the scheduling loop: `VecDeque`'s did not (its growth path is in the same function), and a
//! yield pushes and pops once each. Growth, the rare case, is out of line.

/// A first-in-first-out queue; see the module documentation.
#[derive(Debug)]
pub(crate) struct Ring<T> {
    /// Capacity: 0 or a power of two.
    slots: Box<[Option<T>]>,
    /// Index of the front element.
    head: usize,
    len: usize,
}

impl<T> Ring<T> {
    pub(crate) fn new() -> Self {
        Ring {
            slots: Box::new([]),
            head: 0,
            len: 0,
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    pub(crate) fn push_back(&mut self, value: T) {
        if self.len == self.slots.len() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let slot = &mut self.slots[(self.head + self.len) & mask];
        // The slot past the back is always empty: forgetting the `None` it held skips the
        // drop code an assignment would inline here.
        std::mem::forget(slot.replace(value));
        self.len += 1;
    }

    #[inline]
    pub(crate) fn pop_front(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let value = self.slots[self.head].take();
        self.head = (self.head + 1) & (self.slots.len() - 1);
        self.len -= 1;
        value
    }

    /// [`push_back`](Ring::push_back)`(value)` then [`pop_front`](Ring::pop_front) in one
    /// step, which never grows the ring: the front, or `value` itself when the ring is empty.
    #[inline]
    pub(crate) fn push_pop(&mut self, value: T) -> T {
        if self.len == 0 {
            return value;
        }
        let mask = self.slots.len() - 1;
        let Some(front) = self.slots[self.head].take() else {
            return value; // unreachable: the front slot of a non-empty ring holds a value
        };
        // The slot past the back (the one just emptied, when the ring is full) is empty; as in
        // `push_back`, forgetting its `None` skips drop code.
        std::mem::forget(self.slots[(self.head + self.len) & mask].replace(value));
        self.head = (self.head + 1) & mask;
        front
    }

    /// Doubles the capacity (at least 16 slots), keeping the order.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let capacity = (self.slots.len() * 2).max(16);
        let mut slots: Vec<Option<T>> = Vec::with_capacity(capacity);
        while let Some(value) = self.pop_front() {
            slots.push(Some(value));
        }
        self.len = slots.len();
        self.head = 0;
        slots.resize_with(capacity, || None);
        self.slots = slots.into_boxed_slice();
    }

    /// Removes everything, front to back.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        std::iter::from_fn(move || self.pop_front())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    #[test]
    fn behaves_as_a_fifo_across_growth_and_wrap_around_with_push_pop() {
        let mut ring = Ring::new();
        let mut model = VecDeque::new();
        let mut next = 0u32;
        // A pattern of pushes and pops that wraps the head around and grows several times.
        for round in 0..200u32 {
            for _ in 0..(round % 7 + 1) {
                ring.push_back(next);
                model.push_back(next);
                next += 1;
            }
            for _ in 0..(round % 5) {
                assert_eq!(ring.pop_front(), model.pop_front());
            }
            for _ in 0..(round % 3) {
                model.push_back(next);
                assert_eq!(Some(ring.push_pop(next)), model.pop_front());
                next += 1;
            }
            assert_eq!(ring.len(), model.len());
            assert_eq!(ring.is_empty(), model.is_empty());
        }
        assert!(ring.drain().eq(model.drain(..)));
        assert_eq!(ring.pop_front(), None);
    }
}
