//! Native backend: aarch64 Windows (the ARM64 Windows ABI: AAPCS64 with `x18` = the TEB).
//!
//! The switch is [`aarch64.rs`](super)'s — the same tail at every resume address, the same
//! `blr`/`ret` pairing of `resume` and `suspend` — with two additions that Windows needs: the
//! TEB's stack words are switched with the stack, and the trampolines carry Windows unwind codes
//! (`.xdata`) instead of DWARF CFI.
//!
//! # The saved context
//!
//! A suspended context is its stack pointer `sp`. At `sp` lie 64 bytes (addresses grow upwards;
//! 8-byte rows; `sp` stays 16-byte aligned):
//!
//! ```text
//!   sp+56 | unused (alignment)                        |
//!   sp+48 | TEB DeallocationStack                     |
//!   sp+40 | TEB NtTib.StackLimit                      |
//!   sp+32 | TEB NtTib.StackBase                       |
//!   sp+24 | FPCR (feature `fp-env`), unused otherwise |
//!   sp+16 | resume address                            |
//!   sp+8  | saved x19                                 |
//!   sp+0  | saved x29 (fp)                            |
//! ```
//!
//! As on the other AAPCS64 systems, `x19` and `x29` are saved by hand (LLVM reserves them) and
//! every other callee-saved register (x20–x28, d8–d15) is declared clobbered. `x18` holds the
//! TEB's address for the thread's whole life; the switch reads through it and never writes it.
//!
//! | TEB field | at | used by |
//! |---|---|---|
//! | `NtTib.StackBase` | `[x18, #0x08]` | the exception dispatcher's frame checks, `GetCurrentThreadStackLimits` |
//! | `NtTib.StackLimit` | `[x18, #0x10]` | the dispatcher's frame checks, stack probes |
//! | `DeallocationStack` | `[x18, #0x1478]` | stack-overflow handling (`SetThreadStackGuarantee`) |
//!
//! `NtTib.ExceptionList` is not switched: 64-bit Windows does not use it (the x86_64 backend
//! switches it only because Wine's x86_64 dispatcher walks it). A fresh context gets
//! `StackBase = top` and `StackLimit = DeallocationStack = top - size`.
//!
//! # Who saves what
//!
//! As in `aarch64.rs`: the leaver computes its context (`sp - 64`), puts its resume address in
//! `x30` and branches to the target's resume address with `x0` = the word, `x1` = the leaver's
//! context, `x2` = the target's context. The code there (the *tail*) pushes the leaver's state
//! on the stack `sp` is still on — registers, resume address, and the TEB words it reads — then
//! loads the target's registers, writes the target's TEB words into the TEB and sets
//! `sp = x2 + 64`.
//!
//! # A fresh stack, and unwinding across contexts
//!
//! Windows unwind codes describe a frame as the undoing of a prologue: registers reloaded from
//! `[sp + n]`, `sp` raised by a constant, or `sp = x29` (`set_fp`). None loads `sp` from memory
//! directly, so the step from the bottom of a context's stack into its resumer takes two frames.
//! [`make`] lays out the top of a new stack as
//!
//! ```text
//!   top-8  | link: the resumer's context        |  <- STACK_RESERVED
//!   top-16 | entry function                     |  <-
//!   top-24 | 0                                  |
//!   top-32 | &unwind_stub + 24                  |  <- sp in the entry trampoline
//!          | initial saved context (64 bytes): x29 = x19 = 0, resume address =
//!          |   entry_trampoline + 12, the new stack's TEB words  <- sp of the fresh context
//! ```
//!
//! 1. [`entry_trampoline`]'s codes say: 32 bytes allocated, `x29` saved at `[sp + 24]` and `lr`
//!    at `[sp]`. So unwinding the trampoline's frame loads `x29` = the link (the resumer's
//!    context) and returns to `unwind_stub + 24`.
//! 2. [`unwind_stub`]'s codes say: `x29` was copied to `sp`, below 64 allocated bytes holding
//!    `x29`, `x19` and `lr` at 0, 8 and 16. That is a saved context: unwinding the stub's frame
//!    sets `sp` to the resumer's context, reloads its `x29`, `x19` and resume address, and pops
//!    it, leaving `sp` as it was at the resumer's switch. The unwinder carries on with the
//!    resumer's own codes (it looks its function up at the resume address minus 4: the `blr` of
//!    `resume`, inside the resumer's function).
//!
//! With no resumer the link names `END_OF_STACK`, whose resume address 0 ends the walk. Both
//! trampolines have a prologue for their codes to describe but are entered after it: the
//! entry trampoline at `entry_trampoline + 12`, the stub never (`unwind_stub + 24` is only a
//! return address for the unwinder, the second of two `brk`s so that the address minus 4 is in
//! the stub's body).
//!
//! # How it is checked
//!
//! No aarch64 Windows machine or emulator is available to the project's CI. The cross leg for
//! `aarch64-pc-windows-msvc` assembles this file (a library build: LLVM checks every
//! instruction and unwind directive) and type-checks every crate. The instructions of the switch
//! itself run in the `aarch64` leg under qemu-user: built with `--cfg
//! spindle_check_aarch64_windows` on aarch64 Linux, this backend replaces the native one there,
//! with a per-thread stand-in TEB passed in `x18` (an ordinary register on Linux, set by every
//! switch's asm block and kept across the on-top call) and the unwind directives left out. The
//! context and coroutine test suites then run on it, including the check that the TEB's stack
//! words follow the running stack. What that does not exercise is Windows itself: the unwind
//! codes (described above, not run) and `x18` being the real TEB.

use core::arch::{asm, naked_asm};
use core::ptr::NonNull;

use crate::{Context, Entry, Link};

pub(crate) const NAME: &str = "aarch64-windows";
pub(crate) const SAVES_FP_ENV: bool = cfg!(feature = "fp-env");

/// Bytes of a saved context (see the module docs), with or without `fp-env`.
const FRAME: usize = 64;

/// A saved context with a zero resume address: what the unwinder sees below a stack that has no
/// resumer. Never entered.
static END_OF_STACK: [usize; FRAME / 8] = [0; FRAME / 8];

/// Bytes of `entry_trampoline`'s prologue (three instructions, never executed).
const ENTRY_PROLOGUE: usize = 12;

/// Offset in `unwind_stub` of the return address the unwinder is handed: the second `brk` after
/// its five-instruction prologue, so that the address minus 4 lies in the stub's body.
const STUB_RETURN: usize = 24;

/// A Windows unwind directive; left out where the backend is built for checking on Linux.
#[cfg(windows)]
macro_rules! seh {
    ($d:literal) => {
        concat!($d, "\n")
    };
}
#[cfg(not(windows))]
macro_rules! seh {
    // A comment keeps the directive's operands (`{me}`) used.
    ($d:literal) => {
        concat!("// ", $d, "\n")
    };
}

/// The first half of every tail: push the leaver's state, with the TEB words it ran with, on
/// the stack `sp` is still on.
#[cfg(not(feature = "fp-env"))]
macro_rules! save_leaver {
    () => {
        concat!(
            "ldp x10, x11, [x18, #8]\n",   // StackBase, StackLimit
            "ldr x12, [x18, #0x1478]\n",   // DeallocationStack
            "stp x29, x19, [sp, #-64]!\n", // reserved by LLVM, so saved by hand
            "str x30, [sp, #16]\n",        // the leaver's resume address
            "stp x10, x11, [sp, #32]\n",
            "str x12, [sp, #48]\n",
        )
    };
}
#[cfg(feature = "fp-env")]
macro_rules! save_leaver {
    () => {
        concat!(
            "mrs x13, fpcr\n", // the leaver's FPCR: rounding mode, FZ, DN, trap enables
            "ldp x10, x11, [x18, #8]\n",
            "ldr x12, [x18, #0x1478]\n",
            "stp x29, x19, [sp, #-64]!\n",
            "stp x30, x13, [sp, #16]\n",
            "stp x10, x11, [sp, #32]\n",
            "str x12, [sp, #48]\n",
        )
    };
}

/// `save_leaver!` through `x1` (the leaver's context) instead of `sp`, for the on-top
/// trampoline, which has already left the leaver's stack.
#[cfg(not(feature = "fp-env"))]
macro_rules! save_leaver_at_x1 {
    () => {
        concat!(
            "ldp x10, x11, [x18, #8]\n",
            "ldr x12, [x18, #0x1478]\n",
            "stp x29, x19, [x1]\n",
            "str x30, [x1, #16]\n",
            "stp x10, x11, [x1, #32]\n",
            "str x12, [x1, #48]\n",
        )
    };
}
#[cfg(feature = "fp-env")]
macro_rules! save_leaver_at_x1 {
    () => {
        concat!(
            "mrs x13, fpcr\n",
            "ldp x10, x11, [x18, #8]\n",
            "ldr x12, [x18, #0x1478]\n",
            "stp x29, x19, [x1]\n",
            "stp x30, x13, [x1, #16]\n",
            "stp x10, x11, [x1, #32]\n",
            "str x12, [x1, #48]\n",
        )
    };
}
/// The second half of every tail: become the context in `x2`, its TEB words included.
#[cfg(not(feature = "fp-env"))]
macro_rules! enter_x2 {
    () => {
        concat!(
            "ldp x29, x19, [x2]\n",
            "ldp x10, x11, [x2, #32]\n",
            "ldr x12, [x2, #48]\n",
            "stp x10, x11, [x18, #8]\n",
            "str x12, [x18, #0x1478]\n",
            "add sp, x2, #64\n", // onto the entered stack, its saved context popped
        )
    };
}
#[cfg(feature = "fp-env")]
macro_rules! enter_x2 {
    // As in aarch64.rs, FPCR is written only when it differs from the current one.
    () => {
        concat!(
            "ldp x29, x19, [x2]\n",
            "ldr x14, [x2, #24]\n",
            "ldp x10, x11, [x2, #32]\n",
            "ldr x12, [x2, #48]\n",
            "cmp x13, x14\n", // x13: the current FPCR, read by save_leaver!
            "b.eq 7f\n",
            "msr fpcr, x14\n",
            "7:\n",
            "stp x10, x11, [x18, #8]\n",
            "str x12, [x18, #0x1478]\n",
            "add sp, x2, #64\n",
        )
    };
}

/// The code at every resume address.
macro_rules! tail {
    () => {
        concat!(save_leaver!(), enter_x2!())
    };
}

/// `x18` across the on-top call: on Windows the platform register, which every function
/// preserves; on Linux (the checking build) a temporary, kept in `x20` (which the leaver's asm
/// block declares clobbered, and the call preserves).
#[cfg(windows)]
macro_rules! keep_x18 {
    () => {
        ""
    };
}
#[cfg(windows)]
macro_rules! restore_x18 {
    () => {
        ""
    };
}
#[cfg(not(windows))]
macro_rules! keep_x18 {
    () => {
        "mov x20, x18\n"
    };
}
#[cfg(not(windows))]
macro_rules! restore_x18 {
    () => {
        "mov x18, x20\n"
    };
}

/// A switch's asm block: the template and operands given, then `x18` (the stand-in TEB, in the
/// checking build) and the clobbers every switch declares.
#[cfg(windows)]
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
#[cfg(not(windows))]
macro_rules! switch_asm {
    ($($operands:tt)*) => {
        asm!(
            $($operands)*
            inout("x18") crate::stand_in_teb() => _,
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
pub(crate) unsafe fn make(top: NonNull<u8>, size: usize, entry: Entry) -> Context {
    let top = (top.as_ptr() as usize & !15) as *mut usize;
    let bottom = top as usize - size;
    let fp_env = if SAVES_FP_ENV { current_fpcr() } else { 0 };
    // SAFETY: the caller guarantees the top of the stack is ours to write, and MIN_STACK_SIZE
    // covers the 12 words written here. The two code addresses are inside their functions (see
    // ENTRY_PROLOGUE and STUB_RETURN).
    unsafe {
        top.sub(1).write(END_OF_STACK.as_ptr() as usize); // link: no resumer yet
        top.sub(2).write(entry as usize); // branched to by the trampoline
        top.sub(3).write(0);
        top.sub(4)
            .write(unwind_stub as *const () as usize + STUB_RETURN);
        let ctx = top.sub(4 + FRAME / 8);
        ctx.write(0); // x29: 0 ends frame-pointer walks at the bottom of the stack
        ctx.add(1).write(0); // x19
        ctx.add(2)
            .write(entry_trampoline as *const () as usize + ENTRY_PROLOGUE);
        ctx.add(3).write(fp_env);
        ctx.add(4).write(top as usize); // StackBase
        ctx.add(5).write(bottom); // StackLimit
        ctx.add(6).write(bottom); // DeallocationStack
        ctx.add(7).write(0);
        // SAFETY: `top` is at least 16 (a stack lies below it), so `ctx` is non-null.
        Context(NonNull::new_unchecked(ctx.cast()))
    }
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

/// Never runs: its unwind codes describe a saved context whose address is in `x29`, for the
/// unwinder to step from the bottom of a context's stack into its resumer (see the module docs).
#[unsafe(naked)]
unsafe extern "C" fn unwind_stub() {
    naked_asm!(
        seh!(".seh_proc {me}"),
        "sub sp, sp, #{frame}",
        seh!(".seh_stackalloc {frame}"),
        "str x29, [sp]",
        seh!(".seh_save_reg x29, 0"),
        "str x19, [sp, #8]",
        seh!(".seh_save_reg x19, 8"),
        "str x30, [sp, #16]", // the resume address
        seh!(".seh_save_reg x30, 16"),
        "mov x29, sp", // undone as sp = x29: the resumer's context, loaded by the frame above
        seh!(".seh_set_fp"),
        seh!(".seh_endprologue"),
        "brk #1",
        "brk #1", // <- unwind_stub + STUB_RETURN: the return address the unwinder is handed
        seh!(".seh_endproc"),
        me = sym unwind_stub,
        frame = const FRAME,
    )
}

/// The first resume address of every fresh context, at `entry_trampoline + 12`: runs the tail,
/// then branches to the entry function with the `Transfer` (in `x0`/`x1`) and the link slot's
/// address. Its prologue only gives the unwind codes something to describe (see the module docs).
#[unsafe(naked)]
unsafe extern "C" fn entry_trampoline() {
    naked_asm!(
        seh!(".seh_proc {me}"),
        "sub sp, sp, #32",
        seh!(".seh_stackalloc 32"),
        "str x29, [sp, #24]", // the link slot: the resumer's context, for the stub's set_fp
        seh!(".seh_save_reg x29, 24"),
        "str x30, [sp]", // unwind_stub + STUB_RETURN
        seh!(".seh_save_reg x30, 0"),
        seh!(".seh_endprologue"),
        // <- entry_trampoline + ENTRY_PROLOGUE: the fresh context's resume address.
        tail!(),             // sp = top - 32: [sp + 16] = entry, [sp + 24] = link
        "ldr x16, [sp, #16]", // the entry
        "mov x3, x0",         // entry(Transfer { context: x1 -> x0,
        "mov x0, x1",
        "mov x1, x3",         //                  data: x0 -> x1 },
        "add x2, sp, #24",    //       link: the slot at top - 8)
        // Call the entry without `blr`: it never returns, so a `blr` would leave a predictor
        // entry that the first `suspend`'s `ret` would pop instead of the resumer's. The address
        // in lr is what the unwinder sees as the entry's return address.
        "adr x30, 2f",
        "br x16",
        "2:",
        "brk #1", // never reached: the entry never returns
        seh!(".seh_endproc"),
        me = sym entry_trampoline,
    )
}

/// Runs the `OnTop` function of [`jump_ontop`] on the target's stack, then enters the target.
/// Entered (at its start) with `x1` = the leaver's context (`sp - 64`, not yet written), `x2` =
/// the target, `x3` = f and `x30` = the leaver's resume address.
///
/// It first moves to the target's stack, below a zeroed frame that its unwind codes describe as
/// the saved `x29` and `lr`, so that backtraces taken inside f end here; then it saves the
/// leaver through `x1`, as a tail would have through `sp`, and writes the target's stack words
/// into the TEB, since f runs on the target's stack.
#[unsafe(naked)]
unsafe extern "C" fn ontop_trampoline() {
    naked_asm!(
        seh!(".seh_proc {me}"),
        "stp xzr, xzr, [x2, #-16]", // x29 = lr = 0 below the target's context: the end of walks
        seh!(".seh_nop"),
        "sub sp, x2, #16", // onto the target's stack, that frame pushed
        seh!(".seh_save_fplr_x 16"),
        seh!(".seh_endprologue"),
        save_leaver_at_x1!(),
        // f runs on the target's stack, so the TEB describes that stack from here on.
        "ldp x10, x11, [x2, #32]",
        "ldr x12, [x2, #48]",
        "stp x10, x11, [x18, #8]",
        "str x12, [x18, #0x1478]",
        "mov x19, x2", // keep the target across the call (the leaver's x19 is saved)
        keep_x18!(),
        "mov x4, x0", // f(Transfer { context: x1 -> x0,
        "mov x0, x1",
        "mov x1, x4", //              data: x0 -> x1 })
        "blr x3",     // returns the target's Transfer { context: x0, data: x1 }:
        "mov x4, x0", // back to the word in x0 and the context in x1
        "mov x0, x1",
        "mov x1, x4",
        restore_x18!(),
        "mov x2, x19",        // the context to enter,
        "mov sp, x2",         // with sp where its tail may push scratch (below its context)
        "ldr x16, [x2, #16]", // its resume address,
        "br x16",             // and in: its tail pops x19, x29 and the TEB words
        seh!(".seh_endproc"),
        me = sym ontop_trampoline,
    )
}

#[path = "aarch64_switch.rs"]
mod switch;
pub(crate) use switch::{jump, jump_ontop, resume, suspend};
