//! [`SpinLock`]: the lock of critical sections that move a value or two and never block.
//!
//! `spindle-rt` (a task's join cell, the registry of live tasks) and `spindle-sync` (every
//! primitive's and channel's internal state) take it around a few stores each time.
//! `std::sync::Mutex` pays an atomic read-modify-write to lock *and* one to unlock (the unlock
//! must learn whether a thread sleeps on the lock), each a serializing instruction of ~20
//! cycles on a path of a few hundred nanoseconds. Here the unlock is a plain release store:
//! nobody sleeps on this lock; a waiter spins, then yields its thread. (crossbeam-channel
//! guards its waiter lists the same way.)
//!
//! It is only right for critical sections that never block, park, suspend a coroutine or run
//! code that might: then a waiter waits for a few stores, or for a holder the OS preempted —
//! the case the `yield_now` fallback is for. Not a general-purpose lock.

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

/// A spin lock for critical sections that never block (see the [module docs](self)).
///
/// ```
/// let count = spindle_park::spin::SpinLock::new(0u32);
/// *count.lock() += 1;
/// assert_eq!(*count.lock(), 1);
/// ```
pub struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a guard, and one guard exists at a time (the
// `locked` flag, taken with Acquire and released with Release, orders the holders' accesses),
// so sharing the lock shares `T` only as a `Mutex<T>` would: `T: Send` suffices.
unsafe impl<T: Send> Sync for SpinLock<T> {}
// SAFETY: owning the lock owns the value.
unsafe impl<T: Send> Send for SpinLock<T> {}

impl<T> SpinLock<T> {
    /// An unlocked lock holding `value`.
    pub const fn new(value: T) -> Self {
        SpinLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock; spins (then yields the thread) while another holder has it.
    #[inline]
    pub fn lock(&self) -> SpinGuard<'_, T> {
        if self.locked.swap(true, Ordering::Acquire) {
            self.lock_contended();
        }
        SpinGuard {
            lock: self,
            _value: PhantomData,
        }
    }

    #[cold]
    fn lock_contended(&self) {
        let mut spins = 0u32;
        loop {
            // Wait reading (no cache-line ping-pong), then try again.
            while self.locked.load(Ordering::Relaxed) {
                if spins < 64 {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    // The holder may have been preempted: let it run.
                    std::thread::yield_now();
                }
            }
            if !self.locked.swap(true, Ordering::Acquire) {
                return;
            }
        }
    }
}

impl<T> std::fmt::Debug for SpinLock<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never takes the lock (a `Debug` call must not wait).
        f.debug_struct("SpinLock")
            .field("locked", &self.locked.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<T: Default> Default for SpinLock<T> {
    fn default() -> Self {
        SpinLock::new(T::default())
    }
}

/// Holds a [`SpinLock`]; unlocks on drop (also during a panic: the runtime's critical sections
/// only move values, so there is nothing to poison).
pub struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
    /// Send and Sync as a `&mut T` is: a shared guard hands out `&T`, so it may cross threads
    /// only if `T` is `Sync` (the lock alone, `Sync` for `T: Send`, would make every guard
    /// `Sync`: `&Cell` on two threads at once).
    _value: PhantomData<&'a mut T>,
}

impl<T> std::fmt::Debug for SpinGuard<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpinGuard").finish_non_exhaustive()
    }
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: this guard holds the lock, so no other reference to the value exists.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this the only use of the guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::SpinLock;
    use std::sync::Arc;

    #[test]
    fn excludes_concurrent_holders() {
        // Non-atomic read-modify-writes under the lock: a lost update shows a broken lock.
        let lock = Arc::new(SpinLock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        let mut g = lock.lock();
                        let v = *g;
                        std::hint::black_box(&mut *g);
                        *g = v + 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*lock.lock(), 80_000);
    }

    #[test]
    fn a_panicking_holder_releases_it() {
        let lock = SpinLock::new(1);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _g = lock.lock();
            panic!("inside");
        }));
        assert!(caught.is_err());
        assert_eq!(*lock.lock(), 1);
    }
}
