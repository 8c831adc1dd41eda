//! A FIFO queue that holds its first element inline.
//!
//! A channel's buffer and wait queues are almost always empty or hold one element: a oneshot
//! carries one message and has at most one waiting receiver; a ping-pong channel never holds
//! more than one of either. A `VecDeque` allocates on its first push, which for a short-lived
//! channel (every oneshot) was two allocations per channel. Here one element costs nothing;
//! the second and later go to a `VecDeque` behind it.

use std::collections::VecDeque;

/// See the module documentation. Invariant: `first` is the front; it is `None` only when the
/// queue is empty (so `rest` is empty too). `rest` is `None` until a second element comes: then
/// dropping a queue that never held two costs one test (an empty `VecDeque`'s drop is ~50
/// instructions, and a oneshot drops one per channel).
pub(crate) struct SmallDeque<T> {
    first: Option<T>,
    rest: Option<VecDeque<T>>,
}

impl<T> Default for SmallDeque<T> {
    fn default() -> Self {
        SmallDeque::new()
    }
}

impl<T> SmallDeque<T> {
    pub(crate) const fn new() -> Self {
        SmallDeque {
            first: None,
            rest: None,
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.as_ref().map_or(0, VecDeque::len)
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    /// Whether dropping it would drop nothing: empty, and no spill-over queue allocated.
    #[inline]
    pub(crate) fn holds_nothing(&self) -> bool {
        self.first.is_none() && self.rest.is_none()
    }

    #[inline]
    pub(crate) fn push_back(&mut self, value: T) {
        if self.first.is_none() {
            self.first = Some(value);
        } else {
            self.rest.get_or_insert_with(VecDeque::new).push_back(value);
        }
    }

    pub(crate) fn push_front(&mut self, value: T) {
        if let Some(old) = self.first.replace(value) {
            self.rest.get_or_insert_with(VecDeque::new).push_front(old);
        }
    }

    /// Inserts `value` at `index` (0 is the front; at most the length).
    pub(crate) fn insert(&mut self, index: usize, value: T) {
        if index == 0 || self.first.is_none() {
            self.push_front(value);
        } else {
            let rest = self.rest.get_or_insert_with(VecDeque::new);
            rest.insert((index - 1).min(rest.len()), value);
        }
    }

    #[inline]
    pub(crate) fn pop_front(&mut self) -> Option<T> {
        // `replace`/`take` rather than an assignment to `first`: an assignment drops the old value,
        // and the compiler does not see that it is `None` (a queue entry's drop code would run in
        // every pop).
        match self.rest.as_mut().and_then(VecDeque::pop_front) {
            Some(next) => self.first.replace(next),
            None => self.first.take(),
        }
    }

    pub(crate) fn get_mut(&mut self, index: usize) -> Option<&mut T> {
        match index {
            0 => self.first.as_mut(),
            i => self.rest.as_mut()?.get_mut(i - 1),
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.first.iter().chain(self.rest.iter().flatten())
    }

    /// Removes and returns the element at `index` (0 is the front), if there is one.
    pub(crate) fn remove(&mut self, index: usize) -> Option<T> {
        match index {
            0 => self.pop_front(),
            i => self.rest.as_mut()?.remove(i - 1),
        }
    }

    /// Empties the queue, front first.
    pub(crate) fn drain_all(&mut self) -> impl Iterator<Item = T> + use<T> {
        let first = self.first.take();
        first
            .into_iter()
            .chain(self.rest.take().into_iter().flatten())
    }
}

impl<T> IntoIterator for SmallDeque<T> {
    type Item = T;
    type IntoIter = std::iter::Chain<
        std::option::IntoIter<T>,
        std::iter::Flatten<std::option::IntoIter<VecDeque<T>>>,
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.first
            .into_iter()
            .chain(self.rest.into_iter().flatten())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::SmallDeque;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    #[derive(Debug, Clone)]
    enum Op {
        PushBack(u8),
        PushFront(u8),
        PopFront,
        Remove(usize),
        /// At an index up to the length (taken modulo the length plus one).
        Insert(usize, u8),
        DrainAll,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => any::<u8>().prop_map(Op::PushBack),
            1 => any::<u8>().prop_map(Op::PushFront),
            3 => Just(Op::PopFront),
            1 => (0usize..6).prop_map(Op::Remove),
            2 => (any::<usize>(), any::<u8>()).prop_map(|(i, v)| Op::Insert(i, v)),
            1 => Just(Op::DrainAll),
        ]
    }

    proptest! {
        /// Every operation agrees with a `VecDeque` doing the same.
        #[test]
        fn behaves_as_a_vecdeque(ops in proptest::collection::vec(op(), 0..200)) {
            let mut ours = SmallDeque::new();
            let mut model = VecDeque::new();
            for op in ops {
                match op {
                    Op::PushBack(v) => { ours.push_back(v); model.push_back(v); }
                    Op::PushFront(v) => { ours.push_front(v); model.push_front(v); }
                    Op::PopFront => prop_assert_eq!(ours.pop_front(), model.pop_front()),
                    Op::Remove(i) => prop_assert_eq!(ours.remove(i), model.remove(i)),
                    Op::Insert(i, v) => {
                        let i = i % (model.len() + 1);
                        ours.insert(i, v);
                        model.insert(i, v);
                    }
                    Op::DrainAll => {
                        let got: Vec<_> = ours.drain_all().collect();
                        let want: Vec<_> = model.drain(..).collect();
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert_eq!(ours.len(), model.len());
                prop_assert_eq!(ours.is_empty(), model.is_empty());
                prop_assert!(ours.iter().eq(model.iter()));
            }
        }
    }
}
