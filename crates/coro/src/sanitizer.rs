//! Sanitizer annotations around the switches into and out of a coroutine, compiled only under
//! `--cfg spindle_tsan` (ThreadSanitizer) and `--cfg spindle_asan` (AddressSanitizer), which
//! the `tsan` and `asan` legs of `cargo xtask ci --full` set together with `-Zsanitizer=…`
//! (the functions declared here live in the sanitizer's runtime). Without those cfgs every
//! type here is zero-sized and every function empty.
//!
//! Both sanitizers keep per-thread state that a stack switch makes wrong:
//! * TSan keeps a shadow call stack and a vector clock per thread. A coroutine gets its own
//!   TSan *fiber* (created at its first resume, destroyed when it finishes), so its frames are
//!   pushed and popped on its own shadow stack whichever thread resumes it, and each switch
//!   synchronises the two sides (`__tsan_switch_to_fiber(_, 0)`), as the thread really does.
//! * ASan keeps the bounds of the thread's stack; a panic unwinding through frames calls
//!   `__asan_handle_no_return`, which unpoisons the stack from the stack pointer to the top of
//!   *that* stack. Without the coroutine's bounds it refuses ("ASan is ignoring requested
//!   __asan_handle_no_return"), the unwound frames' redzones stay poisoned, and a later frame
//!   there is reported as a stack-use-after-scope. `__sanitizer_start_switch_fiber` /
//!   `__sanitizer_finish_switch_fiber` tell it which stack runs.
//!
//! Every annotation is made by the resumer, around the switch itself (`Coroutine::switch_in`):
//! [`Fiber::enter`] right before it switches in, [`Fiber::leave`] right after the coroutine
//! switched back. The coroutine's side (its entry, `Yielder::suspend`) makes none, so nothing on
//! the coroutine's stack has to know the resumer's fiber or stack bounds. What runs between an
//! annotation and the switch it stands for is the switch's inline asm and a few register moves
//! of the resumer: TSan counts those as the coroutine's (harmless: both switches synchronise,
//! and the thread does run the two sides one after the other), and ASan uses the bounds only
//! when a panic unwinds or a report is printed, neither of which happens there.

use std::ptr::NonNull;

#[cfg(any(spindle_tsan, spindle_asan))]
use std::ffi::c_void;

#[cfg(spindle_tsan)]
unsafe extern "C" {
    fn __tsan_get_current_fiber() -> *mut c_void;
    fn __tsan_create_fiber(flags: u32) -> *mut c_void;
    fn __tsan_destroy_fiber(fiber: *mut c_void);
    fn __tsan_switch_to_fiber(fiber: *mut c_void, flags: u32);
}

#[cfg(spindle_asan)]
unsafe extern "C" {
    fn __sanitizer_start_switch_fiber(
        fake_stack_save: *mut *mut c_void,
        bottom: *const c_void,
        size: usize,
    );
    fn __sanitizer_finish_switch_fiber(
        fake_stack_save: *mut c_void,
        bottom_old: *mut *const c_void,
        size_old: *mut usize,
    );
    fn __asan_unpoison_memory_region(addr: *const c_void, size: usize);
}

/// A coroutine's sanitizer state: its TSan fiber, from its first resume until it finishes, and
/// where it last suspended. Zero-sized without the sanitizer cfgs.
///
/// A coroutine may suspend from inside a nested one (a task that parks while a generator it
/// resumed runs): then it is suspended on the nested coroutine's stack, in that one's TSan
/// fiber, and its next resume continues there. So [`leave`](Fiber::leave) records the fiber and
/// the stack bounds the thread was in when the coroutine switched back, and the next
/// [`enter`](Fiber::enter) announces those, not the coroutine's own.
#[derive(Debug, Default)]
pub(crate) struct Fiber {
    #[cfg(spindle_tsan)]
    tsan: Option<NonNull<c_void>>,
    /// The TSan fiber the coroutine suspended in, if not its own.
    #[cfg(spindle_tsan)]
    tsan_suspended_in: Option<NonNull<c_void>>,
    /// The stack (bottom, size) the coroutine suspended on, as ASan knew it.
    #[cfg(spindle_asan)]
    asan_suspended_on: Option<(*const c_void, usize)>,
}

/// What [`Fiber::leave`] needs to go back to the resumer: its TSan fiber and its stack's
/// bounds as ASan knew them. Zero-sized without the sanitizer cfgs.
#[must_use]
pub(crate) struct Resumer {
    #[cfg(spindle_tsan)]
    tsan: *mut c_void,
    #[cfg(spindle_asan)]
    asan: (*const c_void, usize),
}

impl Fiber {
    /// Tells the sanitizers that this thread is about to run the coroutine, on the stack
    /// `[limit, top)`.
    ///
    /// # Safety
    ///
    /// The switch into the coroutine follows right away on this thread, and
    /// [`leave`](Fiber::leave) with the result right after the coroutine switches back;
    /// `[limit, top)` is the coroutine's stack; the coroutine has not finished.
    #[inline(always)]
    #[cfg_attr(not(spindle_asan), allow(unused_variables))]
    pub(crate) unsafe fn enter(&mut self, limit: NonNull<u8>, top: NonNull<u8>) -> Resumer {
        #[cfg(spindle_tsan)]
        let tsan = {
            // SAFETY: plain calls into the TSan runtime, linked in by `-Zsanitizer=thread`
            // (the only build that sets `spindle_tsan`). The fiber created here is ours until
            // `finish` destroys it, and it is not the current fiber at that point (`leave`
            // switched back first). Switching to it is what the runtime asks for right before
            // the real switch; flags 0: the switch synchronises, as the thread really does.
            unsafe {
                let resumer = __tsan_get_current_fiber();
                let own = *self.tsan.get_or_insert_with(|| {
                    NonNull::new(__tsan_create_fiber(0)).expect("TSan fiber")
                });
                // Where it suspended: a nested coroutine's fiber, alive while the coroutine is
                // suspended inside it (the nested one cannot finish under its frames).
                let fiber = self.tsan_suspended_in.take().unwrap_or(own);
                __tsan_switch_to_fiber(fiber.as_ptr(), 0);
                resumer
            }
        };
        #[cfg(spindle_asan)]
        let asan = {
            let mut fake_stack = std::ptr::null_mut();
            let mut bottom = std::ptr::null();
            let mut size = 0;
            // The stack it suspended on (a nested coroutine's, see `Fiber`), else its own.
            let (limit, coroutine) = self.asan_suspended_on.take().unwrap_or((
                limit.as_ptr().cast_const().cast(),
                top.as_ptr().addr() - limit.as_ptr().addr(),
            ));
            // SAFETY: calls into the ASan runtime, linked in by `-Zsanitizer=address` (the only
            // build that sets `spindle_asan`), with pointers to locals. Start and finish are
            // paired on this thread, so no switch is left half done; the thread's fake stack
            // (used only with `detect_stack_use_after_return`, off in the leg) is saved and
            // handed back as it was. From here the thread's stack is the coroutine's
            // `[limit, top)`, which is where it runs until `leave`.
            unsafe {
                __sanitizer_start_switch_fiber(&mut fake_stack, limit, coroutine);
                __sanitizer_finish_switch_fiber(fake_stack, &mut bottom, &mut size);
            }
            (bottom, size)
        };
        Resumer {
            #[cfg(spindle_tsan)]
            tsan,
            #[cfg(spindle_asan)]
            asan,
        }
    }

    /// The coroutine has finished (after [`leave`](Fiber::leave)): frees its TSan fiber, and
    /// unpoisons `[sp, top)`, what its last frames leave on its stack (its entry never returns,
    /// so its frame's redzones would stay poisoned for whichever coroutine uses the stack
    /// next).
    ///
    /// # Safety
    ///
    /// The coroutine has finished and its last switch back was made with the stack pointer
    /// `sp`, on the stack whose top is `top`; no code runs there any more.
    #[inline(always)]
    #[cfg_attr(not(spindle_asan), allow(unused_variables))]
    pub(crate) unsafe fn finish(&mut self, sp: NonNull<u8>, top: NonNull<u8>) {
        #[cfg(spindle_tsan)]
        if let Some(fiber) = self.tsan.take() {
            // SAFETY: a fiber this coroutine created, not the current one (`leave` switched
            // back to the resumer's), and never switched to again: the coroutine has finished.
            unsafe { __tsan_destroy_fiber(fiber.as_ptr()) };
        }
        #[cfg(spindle_asan)]
        // SAFETY: `[sp, top)` is memory of the coroutine's stack, which nothing uses now;
        // unpoisoning only changes ASan's shadow of it.
        unsafe {
            __asan_unpoison_memory_region(
                sp.as_ptr().cast(),
                top.as_ptr().addr() - sp.as_ptr().addr(),
            );
        }
    }
}

impl Fiber {
    /// The coroutine has just switched back: the thread runs the resumer again, on its own
    /// stack. Records where the coroutine suspended (see [`Fiber`]).
    ///
    /// # Safety
    ///
    /// Called right after the switch back, with what [`Fiber::enter`] returned for this switch.
    #[inline(always)]
    #[cfg_attr(not(any(spindle_tsan, spindle_asan)), allow(unused_variables))]
    pub(crate) unsafe fn leave(&mut self, resumer: Resumer) {
        #[cfg(spindle_tsan)]
        // SAFETY: the resumer's fiber, current when `enter` ran on this thread and alive: it is
        // the fiber of this thread or of a coroutine that is running (it resumed us). The
        // current fiber is read first: the one the coroutine switched back from.
        unsafe {
            let current = NonNull::new(__tsan_get_current_fiber());
            self.tsan_suspended_in = current.filter(|&f| Some(f) != self.tsan);
            __tsan_switch_to_fiber(resumer.tsan, 0);
        }
        #[cfg(spindle_asan)]
        {
            let (bottom, size) = resumer.asan;
            let mut fake_stack = std::ptr::null_mut();
            let mut old_bottom = std::ptr::null();
            let mut old_size = 0;
            // SAFETY: as in `enter`; `[bottom, bottom + size)` is the resumer's stack as ASan
            // knew it before `enter`, on which this thread runs again. The bounds handed back
            // are those of the stack the coroutine switched back from.
            unsafe {
                __sanitizer_start_switch_fiber(&mut fake_stack, bottom, size);
                __sanitizer_finish_switch_fiber(fake_stack, &mut old_bottom, &mut old_size);
            }
            self.asan_suspended_on = (!old_bottom.is_null()).then_some((old_bottom, old_size));
        }
    }
}
