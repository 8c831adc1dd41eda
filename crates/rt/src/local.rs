//! Coroutine-local storage.

use std::any::Any;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt;
use std::panic::AssertUnwindSafe;

use crate::worker;

/// The coroutine-local values of one coroutine, by key address.
///
/// Reached only through a raw pointer (the header's `UnsafeCell`), and never borrowed across
/// user code: an initialiser or a destructor may itself use coroutine-locals, which would
/// otherwise make a second `&mut` to the map while the first is alive.
#[derive(Default)]
pub(crate) struct Locals {
    /// Made on first use: most coroutines have none, and an empty `HashMap` is 48 bytes of every
    /// task (a sixth of it) and a destructor call at its end.
    map: Option<Box<Map>>,
}

#[derive(Default)]
struct Map {
    values: HashMap<usize, Box<dyn Any>>,
    /// Keys whose values [`Locals::clear`] has dropped, once per drop. A key dropped once may
    /// be used again by a later destructor (a fresh value, dropped too); one dropped twice is
    /// refused, so destructors that use each other's keys (or their own) cannot make values
    /// that are dropped and made again for ever.
    dropped: Vec<usize>,
}

impl Locals {
    /// Whether the coroutine never had a local (the map is made on first use), so dropping
    /// this drops nothing.
    #[inline]
    pub(crate) fn is_unused(&self) -> bool {
        self.map.is_none()
    }

    /// The value of `key`, made with `init` if there is none yet; a pointer to it (it is
    /// boxed: adding other values, which may move the map's entries, does not move it).
    ///
    /// # Panics
    ///
    /// If the coroutine is exiting and `key`'s value has already been dropped twice.
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
        if let Some(map) = unsafe { &*locals }.map.as_deref() {
            if let Some(value) = map.values.get(&key) {
                return &**value as *const dyn Any;
            }
            assert!(
                map.dropped.iter().filter(|&&k| k == key).count() < 2,
                "a coroutine-local was used after its value had been dropped twice, by \
                 destructors of coroutine-locals that use each other (or their own) as the \
                 coroutine exits"
            );
        }
        // No borrow of the map while the initialiser runs: it may use other locals (or, through
        // them, this one: then the value it made is kept and ours is dropped).
        let fresh = init();
        // SAFETY: per the contract; `init` has returned, so nothing else borrows the map.
        let map = unsafe { &mut *locals }
            .map
            .get_or_insert_with(Default::default);
        let (value, discarded) = match map.values.entry(key) {
            Entry::Occupied(kept) => (&**kept.get() as *const dyn Any, Some(fresh)),
            Entry::Vacant(slot) => (&**slot.insert(fresh) as *const dyn Any, None),
        };
        // Dropped only now that the map is not borrowed: its destructor may use (and add)
        // coroutine-locals. The value returned is boxed, so that does not move it.
        drop(discarded);
        value
    }

    /// Drops every value (at the coroutine's exit, on its stack), one at a time and without a
    /// borrow of the map while each destructor runs: a destructor may still use other
    /// coroutine-locals (those not dropped yet, or fresh ones, which are dropped too; a key's
    /// value is made at most twice: a third use panics). A destructor that panics does not
    /// stop the others:
    /// every value is dropped here, and the first panic's payload is returned.
    ///
    /// # Safety
    ///
    /// As for [`get_or_init`](Self::get_or_init).
    ///
    /// Inlined: the common case — the coroutine made no coroutine-local — is one load.
    #[inline]
    pub(crate) unsafe fn clear(locals: *mut Locals) -> Result<(), Box<dyn Any + Send>> {
        // SAFETY: per the contract; the borrow ends with this statement.
        if unsafe { &*locals }.map.is_none() {
            return Ok(());
        }
        // SAFETY: per the contract.
        unsafe { Self::clear_values(locals) }
    }

    /// The rest of [`clear`](Self::clear), once there is a map.
    ///
    /// # Safety
    ///
    /// As for [`get_or_init`](Self::get_or_init).
    #[inline(never)]
    unsafe fn clear_values(locals: *mut Locals) -> Result<(), Box<dyn Any + Send>> {
        let mut first_panic = None;
        loop {
            let value = {
                // SAFETY: per the contract; the borrow ends with this block.
                let Some(map) = unsafe { &mut *locals }.map.as_deref_mut() else {
                    return Ok(());
                };
                let Some(key) = map.values.keys().next().copied() else {
                    break;
                };
                map.dropped.push(key);
                map.values.remove(&key)
            };
            if let Err(payload) = std::panic::catch_unwind(AssertUnwindSafe(|| drop(value))) {
                first_panic.get_or_insert(payload);
            }
        }
        // Empty now: free the map too.
        // SAFETY: as above.
        let empty = unsafe { &mut *locals }.map.take();
        drop(empty);
        first_panic.map_or(Ok(()), Err)
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
    ///
    /// # Panics
    ///
    /// In a coroutine-local's destructor as the coroutine exits, if this key's value has
    /// already been dropped twice: a destructor may use a local already dropped (a fresh
    /// value is made and dropped too), but destructors that use each other's keys, or their
    /// own, would otherwise make and drop values for ever. The panic surfaces at the
    /// coroutine's `join`, after every other value is dropped.
    pub fn with<R>(&'static self, f: impl FnOnce(&T) -> R) -> R {
        match worker::current_task_header() {
            Some(header) => {
                // The coroutine's locals are dropped for good once its yielder is cleared (at
                // its very end, after every user value of it is dropped): none is made after.
                assert!(
                    !header
                        .yielder
                        .load(std::sync::atomic::Ordering::Acquire)
                        .is_null(),
                    "a coroutine-local was used after the coroutine's locals were dropped for good"
                );
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
