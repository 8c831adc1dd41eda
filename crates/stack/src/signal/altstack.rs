//! The per-thread alternate signal stack the fault handler runs on.

use std::cell::Cell;
use std::ptr;

use crate::error::StackError;
use crate::os;

/// Size of the alternate signal stacks we create: far more than the handler needs (a
/// ~300-byte frame) plus the kernel's signal frame (a few KiB with AVX-512), so a handler
/// we chain to has room too. Committed lazily, so mostly untouched.
const ALT_STACK_SIZE: usize = 64 * 1024;

thread_local! {
    /// Set once this thread has an alternate signal stack (ours or someone else's).
    static PREPARED: Cell<bool> = const { Cell::new(false) };
    /// The alternate signal stack we created for this thread, freed at thread exit.
    static OWNED_ALT_STACK: OwnedAltStack = const {
        OwnedAltStack { mapping: Cell::new(ptr::null_mut()), total: Cell::new(0) }
    };
}

/// Prepares the calling thread to run coroutines on guarded stacks.
///
/// A stack overflow is detected by a fault in the guard page, and the fault handler that
/// prints the message cannot run on the stack that just overflowed. This function makes
/// sure the calling thread has an alternate signal stack (`sigaltstack`): if it has none, it
/// maps one (64 KiB plus a guard page), which is freed when the thread exits. It also
/// installs the process-wide fault handler if no stack has done so yet.
///
/// Cheap after the first call on a thread (one thread-local flag). The coroutine crate calls
/// it on every thread that resumes coroutines; stack constructors call it too. Threads
/// started by `std::thread` usually have an alternate stack already (Rust installs one for
/// its own overflow message), and then nothing is allocated.
///
/// Growable stacks need this as well: their growth happens in the fault handler.
///
/// # Errors
///
/// [`StackError::MapCountLimit`], [`StackError::OutOfMemory`] and the like if the alternate
/// stack cannot be mapped; [`StackError::Os`] if `sigaltstack` or `sigaction` fails.
///
/// # Example
///
/// ```
/// std::thread::spawn(|| {
///     spindle_stack::prepare_thread()?;
///     // ... resume coroutines on this thread ...
///     Ok::<(), spindle_stack::StackError>(())
/// })
/// .join()
/// .unwrap()?;
/// # Ok::<(), spindle_stack::StackError>(())
/// ```
#[inline]
pub fn prepare_thread() -> Result<(), StackError> {
    if PREPARED.try_with(Cell::get).unwrap_or(false) {
        return Ok(());
    }
    prepare_thread_slow()
}

/// Like [`prepare_thread`], but asks the OS whether the calling thread has an alternate
/// signal stack now instead of trusting what this thread found before, and installs one if
/// it has none.
///
/// For code that may run while a thread exits: std disables and frees the alternate stack it
/// gave a thread *before* the thread-local destructors run, so a coroutine dropped from one
/// (its unwind runs code on its stack, which may grow or overflow) finds none although
/// [`prepare_thread`] said the thread was prepared. The coroutine crate calls this before it
/// unwinds a coroutine being dropped. An alternate stack installed that late, after this
/// thread's own record of it is gone, is leaked with the thread (64 KiB, once per thread).
///
/// Costs a system call (`sigaltstack`) every time; use [`prepare_thread`] on hot paths.
///
/// # Errors
///
/// As for [`prepare_thread`].
#[cold]
pub fn prepare_thread_uncached() -> Result<(), StackError> {
    prepare_thread_slow()
}

#[cold]
fn prepare_thread_slow() -> Result<(), StackError> {
    super::install_fault_handler()?;
    let current = current_alt_stack()?;
    if current.ss_flags & libc::SS_DISABLE != 0 {
        install_own_alt_stack()?;
    }
    // If the thread-local is already destroyed (thread exit), we just won't cache the answer.
    let _ = PREPARED.try_with(|prepared| prepared.set(true));
    Ok(())
}

fn current_alt_stack() -> Result<libc::stack_t, StackError> {
    // SAFETY: `stack_t` is plain data; all-zero is a valid value to be overwritten.
    let mut current: libc::stack_t = unsafe { std::mem::zeroed() };
    // SAFETY: query only (null new stack); `current` is valid and writable.
    if unsafe { libc::sigaltstack(ptr::null(), &mut current) } != 0 {
        return Err(StackError::os(
            "sigaltstack",
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
            0,
        ));
    }
    Ok(current)
}

fn install_own_alt_stack() -> Result<(), StackError> {
    let guard = os::page_size();
    let total = ALT_STACK_SIZE + guard;
    // The one we made before, if something disabled it since (it is still ours, mapped
    // until the thread exits): mapping another would leak it.
    let ours = OWNED_ALT_STACK
        .try_with(|owned| owned.mapping.get())
        .ok()
        .and_then(std::ptr::NonNull::new);
    let reused = ours.is_some();
    // A guard page below, so that a handler overflowing the alternate stack faults instead
    // of corrupting memory (the kernel then kills the process: SIGSEGV is blocked).
    let mapping = match ours {
        Some(mapping) => mapping,
        None => os::map_stack(total, ALT_STACK_SIZE, ALT_STACK_SIZE)?,
    };
    // SAFETY: `stack_t` is plain data; all-zero is valid.
    let mut new: libc::stack_t = unsafe { std::mem::zeroed() };
    // SAFETY: `guard < total`: the usable part starts inside the mapping.
    new.ss_sp = unsafe { mapping.as_ptr().add(guard) }.cast();
    new.ss_size = ALT_STACK_SIZE;
    new.ss_flags = 0;
    // SAFETY: `new` describes read-write memory we own, which stays mapped until the thread
    // exits (see `OwnedAltStack`).
    if unsafe { libc::sigaltstack(&new, ptr::null_mut()) } != 0 {
        let code = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        if !reused {
            // SAFETY: the mapping was just made and is not in use.
            unsafe { os::unmap(mapping.as_ptr(), total) };
        }
        return Err(StackError::os("sigaltstack", code, ALT_STACK_SIZE));
    }
    let registered = OWNED_ALT_STACK.try_with(|owned| {
        owned.mapping.set(mapping.as_ptr());
        owned.total.set(total);
    });
    // If the thread is already tearing down its thread-locals (and this record is gone), the
    // alternate stack stays installed and is leaked with the exiting thread (64 KiB of
    // address space, once); if the record is still there, its destructor frees it.
    let _ = registered;
    Ok(())
}

/// Frees the alternate stack we made when the thread exits, if it is still the active one.
/// If something replaced it, that something may restore ours later, so it is left mapped.
struct OwnedAltStack {
    mapping: Cell<*mut u8>,
    total: Cell<usize>,
}

impl Drop for OwnedAltStack {
    fn drop(&mut self) {
        let mapping = self.mapping.get();
        if mapping.is_null() {
            return;
        }
        let guard = os::page_size();
        // SAFETY: `guard < total`: inside the mapping.
        let usable_start = unsafe { mapping.add(guard) };
        let Ok(current) = current_alt_stack() else {
            return;
        };
        let still_ours = current.ss_sp.cast::<u8>() == usable_start
            && current.ss_flags & (libc::SS_DISABLE | libc::SS_ONSTACK) == 0;
        if !still_ours {
            return;
        }
        // SAFETY: `stack_t` is plain data; all-zero is valid.
        let mut disable: libc::stack_t = unsafe { std::mem::zeroed() };
        disable.ss_flags = libc::SS_DISABLE;
        // SAFETY: disabling the alternate stack has no memory preconditions.
        if unsafe { libc::sigaltstack(&disable, ptr::null_mut()) } == 0 {
            // SAFETY: the mapping is ours, no longer the alternate stack, and we are not
            // running on it (SS_ONSTACK was clear).
            unsafe { os::unmap(mapping, self.total.get()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alt_stack_of_this_thread() -> libc::stack_t {
        current_alt_stack().unwrap()
    }

    /// Runs `body` on a raw pthread (Rust's std would give a thread an alternate stack of
    /// its own) and returns what it returned.
    fn on_raw_thread(body: fn() -> [usize; 4]) -> [usize; 4] {
        extern "C" fn thread_main(body: *mut libc::c_void) -> *mut libc::c_void {
            // SAFETY: `on_raw_thread` passes a `fn() -> [usize; 4]` as the argument.
            let body: fn() -> [usize; 4] = unsafe { std::mem::transmute(body) };
            Box::into_raw(Box::new(body())).cast()
        }
        // SAFETY: pthread_t is plain data.
        let mut thread: libc::pthread_t = unsafe { std::mem::zeroed() };
        // SAFETY: `thread_main` has the pthread start signature and reads its argument as
        // the function pointer we pass.
        let rc = unsafe {
            libc::pthread_create(
                &mut thread,
                ptr::null(),
                thread_main,
                body as *mut libc::c_void,
            )
        };
        assert_eq!(rc, 0);
        let mut result: *mut libc::c_void = ptr::null_mut();
        // SAFETY: joining the thread we created, once.
        assert_eq!(unsafe { libc::pthread_join(thread, &mut result) }, 0);
        // SAFETY: the thread returned a `Box<[usize; 4]>` made with `into_raw`.
        *unsafe { Box::from_raw(result.cast::<[usize; 4]>()) }
    }

    #[test]
    fn a_thread_without_an_alt_stack_gets_one() {
        let report = on_raw_thread(|| {
            let before = alt_stack_of_this_thread();
            prepare_thread().unwrap();
            let after = alt_stack_of_this_thread();
            [
                usize::from(before.ss_flags & libc::SS_DISABLE != 0),
                usize::from(after.ss_flags & libc::SS_DISABLE == 0),
                after.ss_size,
                0,
            ]
        });
        assert_eq!(
            report[0], 1,
            "a raw pthread starts without an alternate stack"
        );
        assert_eq!(report[1], 1, "prepare_thread installed one");
        assert_eq!(report[2], ALT_STACK_SIZE);
    }

    #[test]
    fn the_owned_alt_stack_is_disabled_and_unmapped_only_while_active() {
        let report = on_raw_thread(|| {
            prepare_thread().unwrap();
            // Take over what the thread-local would free at exit, and free it now.
            let owned = OWNED_ALT_STACK.with(|tls| OwnedAltStack {
                mapping: Cell::new(tls.mapping.replace(ptr::null_mut())),
                total: Cell::new(tls.total.get()),
            });
            let mapping = owned.mapping.get();
            // Mapped before ours is freed, so it cannot land at the same address.
            let replacement = os::map_stack(ALT_STACK_SIZE, ALT_STACK_SIZE, 0).unwrap();
            drop(owned);
            let disabled = alt_stack_of_this_thread().ss_flags & libc::SS_DISABLE != 0;
            let mut residency = [0u8; 1];
            // SAFETY: mincore only inspects the address range; it fails with ENOMEM if it
            // is not mapped (nothing else maps memory on this thread in between).
            let unmapped =
                unsafe { libc::mincore(mapping.cast(), 4096, residency.as_mut_ptr().cast()) } != 0;

            // An alternate stack that is not ours is left alone.
            let foreign = OwnedAltStack {
                mapping: Cell::new(mapping),
                total: Cell::new(0),
            };
            // SAFETY: stack_t is plain data.
            let mut other: libc::stack_t = unsafe { std::mem::zeroed() };
            other.ss_sp = replacement.as_ptr().cast();
            other.ss_size = ALT_STACK_SIZE;
            // SAFETY: `other` describes memory we own and keep mapped until disabled below.
            assert_eq!(unsafe { libc::sigaltstack(&other, ptr::null_mut()) }, 0);
            drop(foreign);
            let kept = alt_stack_of_this_thread().ss_sp == other.ss_sp;
            // SAFETY: stack_t is plain data.
            let mut disable: libc::stack_t = unsafe { std::mem::zeroed() };
            disable.ss_flags = libc::SS_DISABLE;
            // SAFETY: disabling, then unmapping the stack we made for this test.
            unsafe {
                libc::sigaltstack(&disable, ptr::null_mut());
                os::unmap(replacement.as_ptr(), ALT_STACK_SIZE);
            }
            [
                usize::from(disabled),
                usize::from(unmapped),
                usize::from(kept),
                0,
            ]
        });
        assert_eq!(report[0], 1, "the alternate stack was disabled");
        assert_eq!(report[1], 1, "its mapping was unmapped");
        assert_eq!(report[2], 1, "a foreign alternate stack was kept");
    }

    #[test]
    fn an_existing_alt_stack_is_kept() {
        std::thread::spawn(|| {
            let before = alt_stack_of_this_thread();
            prepare_thread().unwrap();
            let after = alt_stack_of_this_thread();
            if before.ss_flags & libc::SS_DISABLE == 0 {
                assert_eq!(before.ss_sp, after.ss_sp);
            }
            assert_eq!(after.ss_flags & libc::SS_DISABLE, 0);
        })
        .join()
        .unwrap();
    }
}
