//! Native backend: x86_64, System V ABI (Linux, FreeBSD, macOS, and the other Unix-likes).
//!
//! # The saved context
//!
//! A suspended context is its stack pointer `sp`. At `sp` lies the state pushed by the switch
//! that left it (addresses grow upwards; each row is 8 bytes):
//!
//! ```text
//!            default                          with feature `fp-env`
//!   sp+16 | saved rbp        |        sp+24 | saved rbp               |
//!   sp+8  | saved rbx        |        sp+16 | saved rbx               |
//!   sp+0  | resume address   |        sp+8  | MXCSR (4 B) | x87 CW (2 B) |
//!                                     sp+0  | resume address          |
//! ```
//!
//! `rbx` and `rbp` are saved by hand because LLVM reserves them (inline asm cannot declare them
//! clobbered). Every other register is declared clobbered by the asm blocks, so the compiler
//! saves only the ones that are live across a switch, in the caller's frame.
//!
//! Switches happen at asm-block entry, where the ABI guarantees a 16-byte aligned `rsp`, so a
//! saved `sp` is 8 mod 16 by default and 0 mod 16 with `fp-env`.
//!
//! # Entering a context
//!
//! Control reaches a context's resume address with
//!
//! | register | holds |
//! |---|---|
//! | `rdx` | the context being entered (its `sp`) |
//! | `rsi` | the context being left (becomes `Transfer::context`) |
//! | `rdi` | the word passed (becomes `Transfer::data`) |
//!
//! Three ways in, chosen for the return-stack buffer (RSB), which predicts `ret`s:
//! * `jump` (and `jump_ontop`) switch `rsp` to the target and `pop rax; jmp rax`: the RSB is
//!   left alone.
//! * `resume` ends with `call [rdx]` on the resumer's own stack: the `call`'s return address is
//!   the resumer's resume address, pushed on its stack and on the RSB. `rsp` is still on the
//!   resumer's stack when the target runs.
//! * `suspend` loads the resumer's context from the link and `ret`s into it: the `ret` pops
//!   exactly the RSB entry that the resumer's `call` pushed, so it is predicted.
//!
//! So there are two kinds of resume address, with two *tails* (the code that finishes a switch):
//! * a context that `resume` may enter (made by `make`, left by `jump`, `jump_ontop` or
//!   `suspend`) starts its tail with `lea rsp, [rdx + 8]`, which moves onto its own stack after
//!   a `call` and is a no-op after a `jump`;
//! * a resumer (left by `resume`) is entered only with `rsp` already on its stack (by `ret` or a
//!   `jump`), so its tail skips the `lea`, which would otherwise sit on the critical path of
//!   every round trip. Hence the contract of `Context::resume`: its target is never a context
//!   that is itself suspended in `resume`.
//!
//! Both tails then pop what the switch pushed.

//! # A fresh stack
//!
//! [`make`] lays out the top of a new stack so that the first switch into it pops an initial
//! saved context whose resume address is [`entry_trampoline`]:
//!
//! ```text
//!   top-8  | link: the resumer's context (initially END_OF_STACK)  |  <- STACK_RESERVED
//!   top-16 | entry function                                       |  <-
//!   top-24 | (the entry's return address, pushed by the trampoline)
//!  [top-32 | FP environment           |  fp-env only: initial saved context]
//!   top-32 | &entry_trampoline        |  <- sp of the fresh context (top-40 with fp-env)
//! ```
//!
//! A fresh context saves no `rbx` and `rbp` (nobody needs their values at the bottom of a
//! stack): its own tail in the trampoline moves `rsp` to `top - 16` (restoring the FP environment
//! on the way with `fp-env`) and zeroes `rbp`, which ends frame-pointer walks there.
//!
//! The trampoline enters the entry function — with the `Transfer` and the link slot's address — as
//! if called with `rsp = top - 16`, so the entry's frame is properly aligned and its return address
//! points into the trampoline, whose CFI tells the unwinder how to step from the bottom of this
//! stack into the resumer recorded in the link. It pushes that return address by hand and jumps:
//! the entry never returns, and a real `call` would leave an RSB entry behind that the first
//! `suspend`'s `ret` would pop instead of the resumer's (two return mispredictions per coroutine).
//!
//! # Unwinding across contexts
//!
//! A resumer suspended in `resume` has the same saved-context layout as any other context, with
//! its `call`'s return address as the resume address. So the trampoline's CFI says: the caller's
//! frame is described by the context stored in the link slot `[rsp + 8]`:
//! `CFA = [rsp + 8] + FRAME` (FRAME = 24, or 32 with `fp-env`), the return address is at
//! `CFA - FRAME`, `rbx` at `CFA - 16`, `rbp` at `CFA - 8`. The resumer's frame then unwinds with
//! its own compiler-generated CFI, which is valid there because `rsp` is back to its value at the
//! asm block's entry. The trampoline is marked as a signal frame, so the unwinder looks up the
//! resumer's CFI at the exact return address (which is inside the asm block, never at its end)
//! and GDB accepts that the stack pointer jumps between stacks.
//!
//! With no resumer the link holds `END_OF_STACK`, a static all-zero saved context: its return
//! address is 0, which unwinders take as the outermost frame.

use core::arch::{asm, naked_asm};
use core::ptr::NonNull;

use crate::{Context, Entry, Link, OnTop, Transfer};

pub(crate) const NAME: &str = "x86_64-sysv";
pub(crate) const SAVES_FP_ENV: bool = cfg!(feature = "fp-env");

/// Bytes a switch pushes: resume address, rbx, rbp, and the FP environment word with `fp-env`.
const FRAME: usize = if SAVES_FP_ENV { 32 } else { 24 };

/// A saved context with a zero resume address: what the unwinder sees below a stack that has no
/// resumer. Never entered.
static END_OF_STACK: [usize; 4] = [0; 4];

// The asm fragments shared by every switch. `fp_save!` runs after rbx/rbp are pushed and
// `fp_restore!` before they are popped, so the FP word sits between them and the resume address.
#[cfg(not(feature = "fp-env"))]
macro_rules! fp_save {
    () => {
        ""
    };
}
#[cfg(feature = "fp-env")]
macro_rules! fp_save {
    () => {
        concat!(
            "sub rsp, 8\n",       // room for the FP environment word
            "stmxcsr [rsp]\n",    // MXCSR: rounding mode, exception masks, FTZ/DAZ
            "fnstcw [rsp + 4]\n", // x87 control word: precision and rounding
        )
    };
}
#[cfg(not(feature = "fp-env"))]
macro_rules! fp_restore {
    () => {
        ""
    };
}
#[cfg(feature = "fp-env")]
macro_rules! fp_restore {
    // Only the *control* bits are the context's (the ABI makes MXCSR's exception flags
    // caller-saved), and they are written only when they differ from the thread's current ones:
    // `ldmxcsr` followed by `stmxcsr` stalls for tens of nanoseconds on some CPUs when the
    // exception flags change, which is what restoring the whole register on every switch would do.
    () => {
        concat!(
            "stmxcsr [rsp - 8]\n", // the thread's current MXCSR (below rsp is free)
            "mov eax, [rsp - 8]\n",
            "xor eax, [rsp]\n",   // bits that differ from the entered context's
            "test eax, 0xffc0\n", // control bits: DAZ, masks, rounding, FTZ
            "jz 7f\n",
            "mov eax, [rsp - 8]\n",
            "and eax, 0x3f\n", // keep the current exception flags
            "mov ecx, [rsp]\n",
            "and ecx, 0xffc0\n", // take the context's control bits
            "or eax, ecx\n",
            "mov [rsp - 8], eax\n",
            "ldmxcsr [rsp - 8]\n",
            "7:\n",
            "fnstcw [rsp - 8]\n", // the thread's x87 control word
            "mov ax, [rsp - 8]\n",
            "cmp ax, [rsp + 4]\n",
            "je 8f\n",
            "fldcw [rsp + 4]\n", // only if it differs: fldcw is slow too
            "8:\n",
            "add rsp, 8\n", // drop the FP word
        )
    };
}

/// The code at a resume address that may be entered by `resume`'s `call`: switch to the entered
/// context's stack (a no-op when the sender already did) and pop what its switch pushed.
macro_rules! tail {
    () => {
        concat!(
            "lea rsp, [rdx + 8]\n", // rsp = entered context, past its resume address
            resumer_tail!(),
        )
    };
}

/// The code at a resume address that is only entered with `rsp` already at `context + 8` (the
/// resume address popped): a resumer's, entered by `suspend`'s `ret` or by `jump`.
macro_rules! resumer_tail {
    () => {
        concat!(
            fp_restore!(),
            "pop rbx\n", // callee-saved, reserved by LLVM
            "pop rbp\n", // callee-saved, reserved by LLVM (frame pointer)
        )
    };
}

/// The tail of a fresh context, in the trampoline: onto its stack with `rsp = top - 16` (past
/// its initial saved context, which is only the FP environment with `fp-env`), and `rbp` = 0,
/// which ends frame-pointer walks at the bottom of the stack. Entered with `rdx` = the context,
/// like every tail.
#[cfg(not(feature = "fp-env"))]
macro_rules! fresh_tail {
    () => {
        concat!("lea rsp, [rdx + 16]\n", "xor ebp, ebp\n")
    };
}
#[cfg(feature = "fp-env")]
macro_rules! fresh_tail {
    () => {
        concat!(
            "lea rsp, [rdx + 8]\n", // the FP environment word
            fp_restore!(),          // pops it
            "add rsp, 8\n",         // past the entry's return address slot
            "xor ebp, ebp\n",
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
    let fresh_sp;
    // SAFETY: the caller guarantees the top of the stack is ours to write, and MIN_STACK_SIZE
    // covers the at most 5 words used here.
    unsafe {
        top.sub(1).write(END_OF_STACK.as_ptr() as usize); // link: no resumer yet
        top.sub(2).write(entry as usize); // called by the trampoline
        // top - 24: the entry's return address, pushed by the trampoline.
        if SAVES_FP_ENV {
            top.sub(4).write(current_fp_env());
            top.sub(5).write(entry_trampoline as *const () as usize);
            fresh_sp = top.sub(5);
        } else {
            top.sub(4).write(entry_trampoline as *const () as usize);
            fresh_sp = top.sub(4);
        }
    }
    // SAFETY: `top` is at least 16 (a stack lies below it), so `fresh_sp` is non-null.
    Context(unsafe { NonNull::new_unchecked(fresh_sp.cast()) })
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

/// The FP environment word of the current thread, in the layout `fp_save!` stores.
fn current_fp_env() -> usize {
    let mut word: u64 = 0;
    // SAFETY: stores MXCSR and the x87 control word into `word`, which is 8 bytes; touches
    // nothing else.
    unsafe {
        asm!(
            "stmxcsr [{p}]",
            "fnstcw [{p} + 4]",
            p = in(reg) &mut word as *mut u64,
            options(nostack, preserves_flags),
        );
    }
    word as usize
}

/// The first resume address of every fresh context. Entered like any context (see the module
/// docs): moves onto the fresh stack past its initial saved context, then calls the entry
/// function with the `Transfer`.
#[unsafe(naked)]
unsafe extern "C" fn entry_trampoline() {
    naked_asm!(
        ".cfi_startproc",
        // Frames taking the S augmentation: look the resumer's CFI up at its exact return
        // address, and let GDB accept the change of stacks.
        ".cfi_signal_frame",
        // Until the call below, this frame is half built: say it is the outermost one.
        ".cfi_undefined rip",
        fresh_tail!(), // rsp = top - 16: [rsp] = entry, [rsp + 8] = link
        "xchg rdi, rsi",      // entry(Transfer { context: from = rsi, data = rdi },
        "lea rdx, [rsp + 8]", //       link = the slot at top - 8)
        // From the call on, the caller of this frame is the context in the link slot:
        // DW_CFA_def_cfa_expression, 5 bytes: DW_OP_breg7 (rsp) + 8; DW_OP_deref;
        // DW_OP_plus_uconst FRAME.
        ".cfi_escape 0x0f, 5, 0x77, 0x08, 0x06, 0x23, {frame}",
        ".cfi_offset rip, -{frame}", // the resume address, at the bottom of the saved context
        ".cfi_offset rbx, -16",
        ".cfi_offset rbp, -8",
        // Call the entry without `call`: push a return address by hand and jump. The entry
        // never returns, so a `call` would leave an RSB entry that the first `suspend`'s `ret`
        // would pop instead of the resumer's — a mispredict there, and another later in the
        // resumer. The pushed address is what the unwinder sees as the entry's return address.
        "lea rax, [rip + 2f]",
        "push rax",
        "jmp [rsp + 8]",
        "2:",
        "ud2", // never reached: the entry never returns
        ".cfi_endproc",
        frame = const FRAME,
    )
}

/// Runs the `OnTop` function of [`jump_ontop`] on the target's stack, then enters the target.
/// Entered with the switch registers (`rdx` = target, `rsi` = from, `rdi` = data) and `rcx` = f.
#[unsafe(naked)]
unsafe extern "C" fn ontop_trampoline() {
    naked_asm!(
        ".cfi_startproc",
        ".cfi_undefined rip", // backtraces taken inside f end here
        "mov rbx, rdx",       // keep the target across the call (the sender saved its rbx)
        "mov rsp, rdx",       // run f on the target's stack, below its saved context,
        "and rsp, -16",       // aligned for the call
        "xchg rdi, rsi",      // f(Transfer { context: from, data })
        "call rcx",           // returns the Transfer for the target in rax:rdx
        "mov rsi, rax",       // Transfer::context
        "mov rdi, rdx",       // Transfer::data
        "mov rdx, rbx",       // the context to enter:
        "mov rsp, rdx",       // onto its stack,
        "pop rax",            // its resume address,
        "jmp rax",            // and in (its tail pops rbx and rbp)
        ".cfi_endproc",
    )
}

/// # Safety
///
/// See [`Context::jump`].
#[inline(always)]
pub(crate) unsafe fn jump(to: Context, data: usize) -> Transfer {
    let (from, data_in): (usize, usize);
    // SAFETY: `to` is a suspended context (caller's contract), so entering it with the
    // documented registers resumes it; we come back here only through our own resume address
    // (label 2), with the stack and rbx/rbp restored by the tail. All other registers are
    // declared clobbered.
    unsafe {
        asm!(
            "push rbp",
            "push rbx",
            fp_save!(),
            "lea rax, [rip + 2f]", // our resume address
            "push rax",
            "mov rsi, rsp", // we are now a saved context: the target's Transfer::context
            "mov rsp, rdx", // onto the target's stack,
            "pop rax",      // its resume address,
            "jmp rax",      // and in; the RSB is left untouched
            "2:",
            tail!(),
            in("rdx") to.0.as_ptr(),
            inlateout("rdi") data => data_in,
            lateout("rsi") from,
            lateout("r12") _, lateout("r13") _, lateout("r14") _, lateout("r15") _,
            clobber_abi("sysv64"),
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
    // SAFETY: as in `jump`; the trampoline calls `f` on the target's stack below its saved
    // context (which it does not touch) and then enters the target normally.
    unsafe {
        asm!(
            "push rbp",
            "push rbx",
            fp_save!(),
            "lea rax, [rip + 2f]",
            "push rax",
            "mov rsi, rsp",
            "jmp {trampoline}",
            "2:",
            tail!(),
            trampoline = sym ontop_trampoline,
            in("rdx") to.0.as_ptr(),
            in("rcx") f,
            inlateout("rdi") data => data_in,
            lateout("rsi") from,
            lateout("r12") _, lateout("r13") _, lateout("r14") _, lateout("r15") _,
            clobber_abi("sysv64"),
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
    // SAFETY: as in `jump`. The link slot is writable (caller's contract). Our saved context is
    // completed by the `call`, which pushes the resume address (the tail right after it); we
    // publish `rsp - 8`, which is where that push lands, before making it.
    unsafe {
        asm!(
            "push rbp",
            "push rbx",
            fp_save!(),
            "lea rsi, [rsp - 8]", // our context once the call has pushed its return address
            "mov [rcx], rsi",     // the target's link: its resumer, for suspend and unwinders
            "call [rdx]",         // enter the target; its suspend's `ret` comes back here
            // Our resume address: entered only with rsp already on our stack (see the module
            // docs), so no `lea rsp` here — it would sit on the critical path of every switch.
            resumer_tail!(),
            in("rdx") to.0.as_ptr(),
            in("rcx") link.as_ptr(),
            inlateout("rdi") data => data_in,
            lateout("rsi") from,
            lateout("r12") _, lateout("r13") _, lateout("r14") _, lateout("r15") _,
            clobber_abi("sysv64"),
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
    // SAFETY: the link names our suspended resumer (caller's contract); `ret` enters it through
    // the return address its `call` pushed, with rdx = its context as the tail expects.
    unsafe {
        asm!(
            "push rbp",
            "push rbx",
            fp_save!(),
            "lea rax, [rip + 2f]",
            "push rax",
            "mov rsi, rsp",   // our context, for the resumer's Transfer
            "mov rsp, [rcx]", // the resumer's stack (its tail needs nothing else: no rdx)
            "ret",            // pops the resumer's return address: predicted by the RSB
            "2:",
            tail!(),
            in("rcx") link.as_ptr(),
            inlateout("rdi") data => data_in,
            lateout("r12") _, lateout("r13") _, lateout("r14") _, lateout("r15") _,
            clobber_abi("sysv64"),
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
