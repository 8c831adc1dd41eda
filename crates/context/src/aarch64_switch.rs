//! The four switches of the AAPCS64 backends (`aarch64.rs`, `aarch64_windows.rs`), shared:
//! the including backend defines `FRAME` (the bytes of its saved context), `tail!()` (the code
//! at every resume address), `switch_asm!` (an asm block with the clobbers and extra operands
//! its platform needs) and `ontop_trampoline`, before it declares this module.

use core::arch::asm;
use core::ptr::NonNull;

use super::{FRAME, ontop_trampoline};
use crate::{Context, Link, OnTop, Transfer};

/// # Safety
///
/// See [`Context::jump`].
#[inline(always)]
pub(crate) unsafe fn jump(to: Context, data: usize) -> Transfer {
    let (from, data_in): (usize, usize);
    // SAFETY: `to` is a suspended context (caller's contract), so branching to its resume
    // address with the documented registers resumes it; its tail saves our state below our sp.
    // We come back here only through our resume address (label 2), whose tail restores x19,
    // x29 and sp (and, on Windows, our TEB words). All other registers are declared clobbered.
    unsafe {
        switch_asm!(
            "sub x1, sp, #{frame}", // our context, once the target's tail has saved us
            "adr x30, 2f",          // our resume address, for the target's tail to save
            "ldr x16, [x2, #16]",   // the target's resume address
            "br x16",               // and in; the return-address predictor is left alone
            "2:",
            tail!(),
            frame = const FRAME,
            in("x2") to.0.as_ptr(),
            inlateout("x0") data => data_in,
            lateout("x1") from,
        );
    }
    transfer(from, data_in)
}

/// # Safety
///
/// See [`Context::jump_ontop`].
#[inline(always)]
pub(crate) unsafe fn jump_ontop(to: Context, data: usize, f: OnTop) -> Transfer {
    let (from, data_in): (usize, usize);
    // SAFETY: as in `jump`; the trampoline saves our state, calls `f` on the target's stack
    // below its saved context (which it does not touch) and then enters the target normally.
    unsafe {
        switch_asm!(
            "sub x1, sp, #{frame}",
            "adr x30, 2f",
            "b {trampoline}",
            "2:",
            tail!(),
            frame = const FRAME,
            trampoline = sym ontop_trampoline,
            in("x2") to.0.as_ptr(),
            in("x3") f,
            inlateout("x0") data => data_in,
            lateout("x1") from,
        );
    }
    transfer(from, data_in)
}

/// # Safety
///
/// See [`Context::resume`].
#[inline(always)]
pub(crate) unsafe fn resume(to: Context, data: usize, link: Link) -> Transfer {
    let (from, data_in): (usize, usize);
    // SAFETY: as in `jump`. The link slot is writable (caller's contract). We publish our
    // context (`sp - FRAME`, where the target's tail saves us) in it before entering the target.
    unsafe {
        switch_asm!(
            "sub x1, sp, #{frame}", // our context once the target's tail has saved us
            "str x1, [x3]",         // the target's link: its resumer, for suspend and unwinders
            "ldr x16, [x2, #16]",   // the target's resume address
            "blr x16",              // in; lr = our resume address, predicted by suspend's `ret`
            tail!(),
            frame = const FRAME,
            in("x2") to.0.as_ptr(),
            in("x3") link.as_ptr(),
            inlateout("x0") data => data_in,
            lateout("x1") from,
        );
    }
    transfer(from, data_in)
}

/// # Safety
///
/// See [`crate::suspend`].
#[inline(always)]
pub(crate) unsafe fn suspend(link: Link, data: usize) -> usize {
    let data_in: usize;
    // SAFETY: the link names our suspended resumer (caller's contract); `ret` enters it at the
    // resume address its `blr` left, with x2 = its context as its tail expects.
    unsafe {
        switch_asm!(
            "ldr x2, [x3]",         // the resumer's context
            "sub x1, sp, #{frame}", // ours, once the resumer's tail has saved us
            "adr x30, 2f",          // our resume address, for that tail to save
            "ldr x16, [x2, #16]",   // the resumer's resume address: right after its `blr`
            "ret x16",              // pops the predictor entry that `blr` pushed
            "2:",
            tail!(),
            frame = const FRAME,
            in("x3") link.as_ptr(),
            inlateout("x0") data => data_in,
        );
    }
    data_in
}

#[inline(always)]
fn transfer(from: usize, data: usize) -> Transfer {
    // SAFETY: every switch that enters a context passes the sender's saved stack pointer, which
    // is never null.
    let context = Context(unsafe { NonNull::new_unchecked(from as *mut u8) });
    Transfer { context, data }
}
