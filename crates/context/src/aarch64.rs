//! Native backend: aarch64, AAPCS64 (Linux and the other ELF systems, macOS and iOS).
//!
//! # The saved context
//!
//! A suspended context is its stack pointer `sp`. At `sp` lie 32 bytes (addresses grow upwards;
//! each row is 8 bytes; `sp` stays 16-byte aligned, as AAPCS64 requires at all times):
//!
//! ```text
//!   sp+24 | FPCR (feature `fp-env`), unused otherwise |
//!   sp+16 | resume address                            |
//!   sp+8  | saved x19                                 |
//!   sp+0  | saved x29 (fp)                            |
//! ```
//!
//! `x19` and `x29` are saved by hand because LLVM reserves them (inline asm cannot declare them
//! clobbered). Every other callee-saved register — x20–x28 and the low halves of v8–v15 (d8–d15)
//! — is declared clobbered by the asm blocks, so the compiler saves only the ones that are live
//! across a switch, in the caller's frame. `x18` is never touched: on macOS (and Windows) it is
//! the platform register, which LLVM reserves and `clobber_abi("C")` leaves out; elsewhere it is
//! an ordinary temporary and is declared clobbered.
//!
//! # Who saves what
//!
//! The flow that *leaves* does not write its own saved context: the code at the resume address
//! of the context being *entered* (its *tail*) does, on the stack it finds in `sp`, which is
//! still the leaver's. So a switch is, in the leaver:
//!
//! 1. compute its context, `sp - 32` (which its `Transfer::context` names);
//! 2. put its resume address in `x30` (`lr`) — `resume`'s `blr` does that by itself;
//! 3. load the target's resume address and branch to it;
//!
//! and in the tail, at the target's resume address:
//!
//! 1. `stp x29, x19, [sp, #-32]!; str x30, [sp, #16]` (and FPCR): the leaver is now suspended;
//! 2. load the target's `x29` and `x19` from its context in `x2`, and `sp = x2 + 32`.
//!
//! One tail serves every resume address, and any context can be entered by any switch. The
//! return-address predictor stays in step: `resume` enters with `blr`, which pushes the
//! resumer's resume address on it, and `suspend` goes back with `ret`, which pops it; `jump`
//! and `jump_ontop` use `br`, which leaves it alone.
//!
//! Control reaches a resume address with
//!
//! | register | holds |
//! |---|---|
//! | `x0` | the word passed (becomes `Transfer::data`) |
//! | `x1` | the context being left (becomes `Transfer::context`) |
//! | `x2` | the context being entered |
//! | `x30` | the leaver's resume address |
//! | `sp` | the leaver's stack pointer (the tail pushes the leaver's state there) |
//!
//! The word comes in `x0`, the return register, because it is what a `suspend` returns and what
//! the caller of a `resume` usually looks at first. (AAPCS64 passes and returns a `Transfer`, a
//! 16-byte composite, in `x0`/`x1` in the opposite order; only the trampolines, off the round
//! trip's path, swap the two.)
//!
//! # A fresh stack
//!
//! [`make`] lays out the top of a new stack so that the first switch into it finds an initial
//! saved context whose resume address is [`entry_trampoline`]:
//!
//! ```text
//!   top-8  | link: the resumer's context (initially END_OF_STACK) |  <- STACK_RESERVED
//!   top-16 | entry function                                      |  <-
//!   top-24 | FPCR of the creating thread (fp-env) / 0 |
//!   top-32 | &entry_trampoline                        |  initial saved context
//!   top-40 | x19 = 0                                  |
//!   top-48 | x29 = 0                                  |  <- sp of the fresh context
//! ```
//!
//! The trampoline runs the tail like any resume address (so `sp = top - 16`), then branches to
//! the entry function with `x0`/`x1` = the `Transfer`, `x2` = the link slot's address and `lr`
//! pointing back into the trampoline, whose CFI leads the unwinder into the resumer. It uses
//! `br`, not `blr`: the entry never returns, and a `blr` would leave a predictor entry behind
//! that the first `suspend`'s `ret` would pop instead of the resumer's.
//!
//! # Unwinding across contexts
//!
//! A resumer suspended in `resume` has the same saved-context layout as any other context,
//! with its `blr`'s return address as the resume address. So the trampoline's CFI says: the
//! caller's frame is described by the context stored in the link slot `[sp + 8]`:
//! `CFA = [sp + 8] + 32`, the return address (`x30`) at `CFA - 16`, `x19` at `CFA - 24`, `x29`
//! at `CFA - 32`. The resumer's frame then unwinds with its own compiler-generated CFI, valid
//! there because `sp` is back to its value at the asm block's entry. As on x86_64 the trampoline
//! is a signal frame (the unwinder looks the resumer's CFI up at the exact return address), and
//! with no resumer the link holds `END_OF_STACK`, whose return address 0 ends the walk.
//!
//! # Branch protection
//!
//! The switches branch with `br`/`blr`/`ret` to resume addresses inside asm blocks, which carry
//! no BTI landing pads, and store return addresses unsigned. Binaries built with
//! `-Z branch-protection=bti` or `pac-ret` enforced are not supported by this backend; use the
//! `boost` feature there.

use core::arch::{asm, naked_asm};
use core::ptr::NonNull;

use crate::{Context, Entry, Link};

#[cfg(target_vendor = "apple")]
pub(crate) const NAME: &str = "aarch64-apple";
#[cfg(not(target_vendor = "apple"))]
pub(crate) const NAME: &str = "aarch64-aapcs";
pub(crate) const SAVES_FP_ENV: bool = cfg!(feature = "fp-env");

/// Bytes of a saved context (see the module docs), with or without `fp-env`.
const FRAME: usize = 32;

/// A saved context with a zero resume address: what the unwinder sees below a stack that has no
/// resumer. Never entered.
static END_OF_STACK: [usize; 4] = [0; 4];

/// The first half of every tail: push the leaver's state on the stack `sp` is still on.
#[cfg(not(feature = "fp-env"))]
macro_rules! save_leaver {
    () => {
        concat!(
            "stp x29, x19, [sp, #-32]!\n", // reserved by LLVM, so saved by hand
            "str x30, [sp, #16]\n",        // the leaver's resume address
        )
    };
}
#[cfg(feature = "fp-env")]
macro_rules! save_leaver {
    () => {
        concat!(
            "mrs x10, fpcr\n", // the leaver's FPCR: rounding mode, FZ, DN, trap enables
            "stp x29, x19, [sp, #-32]!\n",
            "stp x30, x10, [sp, #16]\n",
        )
    };
}

/// The second half of every tail: become the context in `x2`.
#[cfg(not(feature = "fp-env"))]
macro_rules! enter_x2 {
    () => {
        concat!(
            "ldp x29, x19, [x2]\n",
            "add sp, x2, #32\n", // onto the entered stack, its saved context popped
        )
    };
}
#[cfg(feature = "fp-env")]
macro_rules! enter_x2 {
    // The FPCR is written only when it differs from the current one: `msr fpcr` serialises
    // the pipeline on many cores, and nearly every switch keeps the default environment.
    () => {
        concat!(
            "ldp x29, x19, [x2]\n",
            "ldr x11, [x2, #24]\n",
            "cmp x10, x11\n", // x10: the current FPCR, read by save_leaver!
            "b.eq 7f\n",
            "msr fpcr, x11\n",
            "7:\n",
            "add sp, x2, #32\n",
        )
    };
}

/// The code at every resume address.
macro_rules! tail {
    () => {
        concat!(save_leaver!(), enter_x2!())
    };
}

/// A switch's asm block: the template and operands given, then the clobbers every switch
/// declares (`clobber_abi("C")` leaves x18 out on macOS, where it is the platform register).
macro_rules! switch_asm {
    ($($operands:tt)*) => {
        asm!(
            $($operands)*
            lateout("x20") _, lateout("x21") _, lateout("x22") _, lateout("x23") _,
            lateout("x24") _, lateout("x25") _, lateout("x26") _, lateout("x27") _,
            lateout("x28") _,
            lateout("d8") _, lateout("d9") _, lateout("d10") _, lateout("d11") _,
            lateout("d12") _, lateout("d13") _, lateout("d14") _, lateout("d15") _,
            clobber_abi("C"),
        )
    };
}

/// Prepares the top of a fresh stack; see the module docs for the layout.
///
/// # Safety
///
/// See [`Context::new`].
#[inline]
pub(crate) unsafe fn make(top: NonNull<u8>, _size: usize, entry: Entry) -> Context {
    let top = (top.as_ptr() as usize & !15) as *mut usize;
    let fp_env = if SAVES_FP_ENV { current_fpcr() } else { 0 };
    // SAFETY: the caller guarantees the top of the stack is ours to write, and MIN_STACK_SIZE
    // covers the 6 words written here.
    unsafe {
        top.sub(1).write(END_OF_STACK.as_ptr() as usize); // link: no resumer yet
        top.sub(2).write(entry as usize); // branched to by the trampoline
        top.sub(3).write(fp_env);
        top.sub(4).write(entry_trampoline as *const () as usize);
        top.sub(5).write(0); // x19
        top.sub(6).write(0); // x29: 0 ends frame-pointer walks at the bottom of the stack
    }
    // SAFETY: `top` is at least 16 (a stack lies below it), so `top - 48` is non-null.
    Context(unsafe { NonNull::new_unchecked(top.sub(6).cast()) })
}

/// # Safety
///
/// See [`Link::has_resumer`].
#[inline]
pub(crate) unsafe fn link_has_resumer(link: Link) -> bool {
    // SAFETY: forwarded contract; `make` initialised the slot to END_OF_STACK and only
    // `resume` changes it.
    unsafe { link.as_ptr().read() != END_OF_STACK.as_ptr() as usize }
}

/// The FPCR of the current thread, as the `fp-env` tail stores it.
#[cfg_attr(not(feature = "fp-env"), allow(dead_code))]
fn current_fpcr() -> usize {
    let fpcr: usize;
    // SAFETY: reads a system register that EL0 may read; touches nothing else.
    unsafe { asm!("mrs {}, fpcr", out(reg) fpcr, options(nomem, nostack, preserves_flags)) };
    fpcr
}

/// The first resume address of every fresh context: runs the tail, then branches to the entry
/// function with the `Transfer` (in `x0`/`x1`) and the link slot's address.
#[unsafe(naked)]
unsafe extern "C" fn entry_trampoline() {
    naked_asm!(
        ".cfi_startproc",
        // Frames taking the S augmentation: look the resumer's CFI up at its exact return
        // address, and let debuggers accept the change of stacks.
        ".cfi_signal_frame",
        // Until the branch below this frame is half built: say it is the outermost one.
        ".cfi_undefined x30",
        tail!(), // sp = top - 16: [sp] = entry, [sp + 8] = link
        "ldr x16, [sp]",  // the entry (x16: an indirect branch that BTI would accept)
        "mov x3, x0",     // entry(Transfer { context: x1 -> x0,
        "mov x0, x1",
        "mov x1, x3",     //                  data: x0 -> x1 },
        "add x2, sp, #8", //       link: the slot at top - 8)
        // From here on, the caller of this frame is the context in the link slot:
        // DW_CFA_def_cfa_expression, 5 bytes: DW_OP_breg31 (sp) + 8; DW_OP_deref;
        // DW_OP_plus_uconst FRAME.
        ".cfi_escape 0x0f, 5, 0x8f, 0x08, 0x06, 0x23, {frame}",
        ".cfi_offset x29, -{frame}",
        ".cfi_offset x19, -{frame} + 8",
        ".cfi_offset x30, -{frame} + 16", // the resume address
        // Call the entry without `blr`: it never returns, so a `blr` would leave a predictor
        // entry that the first `suspend`'s `ret` would pop instead of the resumer's. The address
        // in lr is what the unwinder sees as the entry's return address.
        "adr x30, 2f",
        "br x16",
        "2:",
        "brk #1", // never reached: the entry never returns
        ".cfi_endproc",
        frame = const FRAME,
    )
}

/// Runs the `OnTop` function of [`jump_ontop`] on the target's stack, then enters the target.
/// Entered like a resume address (see the module docs), with `x3` = f.
#[unsafe(naked)]
unsafe extern "C" fn ontop_trampoline() {
    naked_asm!(
        ".cfi_startproc",
        ".cfi_undefined x30", // backtraces taken inside f end here
        save_leaver!(),       // the leaver is now suspended, as by any tail
        "mov x19, x2",        // keep the target across the call (the leaver's x19 is saved)
        "mov sp, x2",         // run f on the target's stack, below its saved context
        "mov x2, x0",         // f(Transfer { context: x1 -> x0,
        "mov x0, x1",
        "mov x1, x2", //              data: x0 -> x1 })
        "blr x3",     // returns the target's Transfer { context: x0, data: x1 }:
        "mov x2, x0", // back to the word in x0 and the context in x1
        "mov x0, x1",
        "mov x1, x2",
        "mov x2, x19",        // the context to enter,
        "mov sp, x2",         // with sp where its tail may push scratch (below its context)
        "ldr x16, [x2, #16]", // its resume address,
        "br x16",             // and in: its tail pops x19 and x29
        ".cfi_endproc",
    )
}

#[path = "aarch64_switch.rs"]
mod switch;
pub(crate) use switch::{jump, jump_ontop, resume, suspend};
