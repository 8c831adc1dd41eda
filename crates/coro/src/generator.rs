//! A coroutine as an iterator over its yields.

use std::fmt;

use spindle_stack::{Stack, StackError};

use crate::{Coroutine, CoroutineResult, DefaultStack, Yielder};

/// A coroutine that produces values: an [`Iterator`] over what it
/// [`suspend`](Yielder::suspend)s, ending when its closure returns.
///
/// ```
/// use spindle_coro::Generator;
///
/// let fibonacci = Generator::new(|yielder| {
///     let (mut a, mut b) = (0u64, 1u64);
///     loop {
///         yielder.suspend(a);
///         (a, b) = (b, a + b);
///     }
/// })?;
/// let first: Vec<u64> = fibonacci.take(10).collect();
/// assert_eq!(first, [0, 1, 1, 2, 3, 5, 8, 13, 21, 34]);
/// # Ok::<(), spindle_stack::StackError>(())
/// ```
///
/// Dropping a generator that has not finished unwinds it, like any coroutine.
pub struct Generator<Item, S: Stack = DefaultStack> {
    coroutine: Coroutine<(), Item, (), S>,
}

impl<Item: 'static> Generator<Item, DefaultStack> {
    /// A generator running `f` on a stack from the global pool.
    ///
    /// # Errors
    ///
    /// As for [`Coroutine::new`].
    pub fn new<F>(f: F) -> Result<Self, StackError>
    where
        F: FnOnce(&Yielder<(), Item>) + 'static,
    {
        Ok(Generator {
            coroutine: Coroutine::new(move |yielder, ()| f(yielder))?,
        })
    }
}

impl<Item: 'static, S: Stack> Generator<Item, S> {
    /// A generator running `f` on `stack`.
    ///
    /// # Panics
    ///
    /// As [`Coroutine::with_stack`]: only for a foreign [`Stack`] too small for the
    /// coroutine's first frame.
    pub fn with_stack<F>(stack: S, f: F) -> Self
    where
        F: FnOnce(&Yielder<(), Item>) + 'static,
    {
        Generator {
            coroutine: Coroutine::with_stack(stack, move |yielder, ()| f(yielder)),
        }
    }
}

impl<Item, S: Stack> Iterator for Generator<Item, S> {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        if self.coroutine.is_finished() {
            return None;
        }
        match self.coroutine.resume(()) {
            CoroutineResult::Yield(item) => Some(item),
            CoroutineResult::Return(()) => None,
        }
    }
}

impl<Item, S: Stack> std::iter::FusedIterator for Generator<Item, S> {}

impl<Item, S: Stack> fmt::Debug for Generator<Item, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Generator")
            .field("coroutine", &self.coroutine)
            .finish()
    }
}
