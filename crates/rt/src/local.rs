//! Coroutine-local storage.

use std::any::Any;
use std::collections::HashMap;
use std::fmt;

use crate::worker;

/// The coroutine-local values of one coroutine, by key address.
///
/// Reached only through a raw pointer (the header's `UnsafeCell`), and never borrowed across
/// user code: an initialiser or a destructor may itself use coroutine-locals, which would
/// otherwise make a second `&mut` to the map while the first is alive.
#[derive(Default)]
pub(crate) struct Locals {
    /// Made on first use: most coroutines have none, and an empty `HashMap` is 48 bytes of every
    /// task (a sixth of it) and a destructor call at its end. (Boxed on purpose, against
    /// clippy's advice: the box is what keeps the 48 bytes out of the task.)
    #[allow(clippy::box_collection)]
    values: Option<Box<HashMap<usize, Box<dyn Any>>>>,
}

impl Locals {
    /// The value of `key`, made with `init` if there is none yet; a pointer to it (it is
    /// boxed: adding other values, which may move the map's entries, does not move it).
    ///
    /// # Safety
    ///
    /// `locals` is the running coroutine's own (only that coroutine touches it), and no
    /// reference into it is alive.
    unsafe fn get_or_init(
        locals: *mut Locals,
        key: usize,
        init: impl FnOnce() -> Box<dyn Any>,
    ) -> *const dyn Any {
        // SAFETY: per the contract; the shared borrow ends before `init` runs.
        let existing = unsafe { &*locals }
            .values
            .as_ref()
            .and_then(|map| map.get(&key))
            .map(|value| &**value as *const dyn Any);
        if let Some(value) = existing {
            return value;
        }
        // No borrow of the map while the initialiser runs: it may use other locals (or, through
        // them, this one: then the value it made is kept and ours is dropped).
        let fresh = init();
        // SAFETY: per the contract; `init` has returned, so nothing else borrows the map.
        let map = unsafe { &mut *locals }
            .values
            .get_or_insert_with(Default::default);
        &**map.entry(key).or_insert(fresh) as *const dyn Any
    }

    /// Drops every value (at the coroutine's exit, on its stack), one at a time and without a
    /// borrow of the map while each destructor runs: a destructor may still use other
    /// coroutine-locals (those not dropped yet, or fresh ones, which are dropped too).
    ///
    /// # Safety
    ///
    /// As for [`get_or_init`](Self::get_or_init).
    pub(crate) unsafe fn clear(locals: *mut Locals) {
        loop {
            let value = {
                // SAFETY: per the contract; the borrow ends with this block.
                let Some(map) = unsafe { &mut *locals }.values.as_mut() else {
                    return;
                };
                let Some(key) = map.keys().next().copied() else {
                    break;
                };
                map.remove(&key)
            };
            drop(value);
        }
        // Empty now: free the map too.
        // SAFETY: as above.
        let empty = unsafe { &mut *locals }.values.take();
        drop(empty);
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
                // SAFETY: a coroutine's locals are touched only by that coroutine while it runs,
                // and this function holds no reference into them. The value is boxed, so the
                // pointer stays valid while `f` runs even if `f` adds other locals (which may
                // rehash the map, not move the box); it is removed only by `Locals::clear`, at
                // the coroutine's exit, which cannot happen while `f` runs.
                let value = unsafe {
                    Locals::get_or_init(header.locals.get(), key, || Box::new((self.init)()))
                };
                // SAFETY: see above: the boxed value lives until the coroutine exits.
                let value: *const T = unsafe { &*value }
                    .downcast_ref::<T>()
                    .expect("coroutine-local keys are unique per type");
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
