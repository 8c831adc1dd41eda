//! Coroutine-local storage.

use std::any::Any;
use std::collections::HashMap;
use std::fmt;

use crate::worker;

/// The coroutine-local values of one coroutine, by key address.
#[derive(Default)]
pub(crate) struct Locals {
    values: HashMap<usize, Box<dyn Any>>,
}

impl Locals {
    /// Drops every value (at the coroutine's exit, on its stack). Values are dropped one at a
    /// time, so a destructor may still use other coroutine-locals (those not dropped yet, or
    /// fresh ones, which are dropped too).
    pub(crate) fn clear(&mut self) {
        while let Some(key) = self.values.keys().next().copied() {
            let value = self.values.remove(&key);
            drop(value);
        }
    }
}

/// A key for a coroutine-local value: made by [`coroutine_local!`](crate::coroutine_local).
///
/// In a coroutine, each coroutine has its own value, made on first use and dropped when the
/// coroutine exits (on its stack, before it finishes). Outside a coroutine it behaves as a
/// thread-local (each thread has its own value).
pub struct LocalKey<T: 'static> {
    #[doc(hidden)]
    pub init: fn() -> T,
    #[doc(hidden)]
    pub thread: &'static std::thread::LocalKey<T>,
}

impl<T: 'static> fmt::Debug for LocalKey<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalKey").finish_non_exhaustive()
    }
}

impl<T: 'static> LocalKey<T> {
    /// Runs `f` with a reference to the current coroutine's value (or the thread's, outside a
    /// coroutine), making it first if needed.
    ///
    /// `f` may suspend the coroutine: the value stays with the coroutine.
    pub fn with<R>(&'static self, f: impl FnOnce(&T) -> R) -> R {
        match worker::current_task_header() {
            Some(header) => {
                let key = self as *const Self as usize;
                // SAFETY: a coroutine's locals are touched only by that coroutine while it runs;
                // the map entry's value is boxed, so the reference stays valid while `f` runs
                // even if `f` adds other locals (which may rehash the map, not move the box).
                // The value is removed only by `Locals::clear`, at the coroutine's exit, which
                // cannot happen while `f` runs.
                let value: *const T = unsafe {
                    let locals = &mut *header.locals.get();
                    let entry = locals
                        .values
                        .entry(key)
                        .or_insert_with(|| Box::new((self.init)()));
                    entry
                        .downcast_ref::<T>()
                        .expect("coroutine-local keys are unique per type")
                        as *const T
                };
                // SAFETY: see above.
                f(unsafe { &*value })
            }
            None => self.thread.with(f),
        }
    }
}

/// Declares coroutine-local statics: each coroutine gets its own value, made lazily by the
/// initialiser on first use and dropped when the coroutine exits. Outside a coroutine, a key
/// behaves like a `thread_local!`.
///
/// ```
/// use std::cell::Cell;
/// spindle_rt::coroutine_local! {
///     static REQUESTS: Cell<u32> = Cell::new(0);
/// }
///
/// let rt = spindle_rt::Runtime::builder().workers(1).build()?;
/// rt.block_on(|| {
///     REQUESTS.with(|r| r.set(r.get() + 1));
///     let other = spindle_rt::spawn(|| REQUESTS.with(|r| r.get()));
///     assert_eq!(other.join().unwrap(), 0); // its own value
///     assert_eq!(REQUESTS.with(|r| r.get()), 1);
/// });
/// # Ok::<(), spindle_rt::BuildError>(())
/// ```
#[macro_export]
macro_rules! coroutine_local {
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = $init:expr; $($rest:tt)*) => {
        $(#[$attr])* $vis static $name: $crate::LocalKey<$t> = {
            ::std::thread_local! {
                static THREAD: $t = $init;
            }
            fn init() -> $t {
                $init
            }
            $crate::LocalKey { init, thread: &THREAD }
        };
        $crate::coroutine_local!($($rest)*);
    };
    () => {};
}
