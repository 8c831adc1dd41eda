//! Native backend: x86_64 Windows (the Microsoft x64 ABI; `-pc-windows-gnu` and `-msvc`).
//!
//! # The saved context
//!
//! A suspended context is its stack pointer `sp`. At `sp` lies the state pushed by the switch
//! that left it, in the order a function prologue would push it — resume address first, at the
//! top — so that Windows unwind codes can describe it (addresses grow upwards; 8-byte rows):
//!
//! ```text
//!            default                                  with feature `fp-env`
//!   sp+48 | resume address           |        sp+64 | resume address              |
//!   sp+40 | saved rbp                |        sp+56 | saved rbp                   |
//!   sp+32 | saved rbx                |        sp+48 | saved rbx                   |
//!   sp+24 | TEB DeallocationStack    |        sp+40 | TEB DeallocationStack       |
//!   sp+16 | TEB StackLimit           |        sp+32 | TEB StackLimit              |
//!   sp+8  | TEB StackBase            |        sp+24 | TEB StackBase               |
//!   sp+0  | TEB ExceptionList        |        sp+16 | TEB ExceptionList           |
//!                                             sp+8  | MXCSR (4 B) | x87 CW (2 B)  |
//!                                             sp+0  | scratch for the restore     |
//! ```
//!
//! `rbx` and `rbp` are saved by hand because LLVM reserves them. Every other callee-saved
//! register of the Microsoft x64 ABI — `rdi`, `rsi`, `r12`–`r15` and `xmm6`–`xmm15` — is
//! declared clobbered by the asm blocks, so the compiler saves only the ones that are live
//! across a switch, in the caller's frame.
//!
//! The four words of the Thread Environment Block (TEB, at `gs:0`) describe the stack that
//! runs, so they are switched with it (read and written through the TEB's address, `gs:[0x30]`,
//! as plain memory: gs-prefixed pushes and pops of memory cost more):
//!
//! | TEB field | at | used by |
//! |---|---|---|
//! | `NtTib.StackBase` | `gs:[0x08]` | the exception dispatcher's frame checks, `GetCurrentThreadStackLimits` |
//! | `NtTib.StackLimit` | `gs:[0x10]` | `__chkstk`'s probes, the dispatcher's frame checks |
//! | `DeallocationStack` | `gs:[0x1478]` | stack-overflow handling (`SetThreadStackGuarantee`) |
//! | `NtTib.ExceptionList` | `gs:[0x00]` | unused by Windows on x64, but Wine's dispatcher walks it, comparing its entries' addresses with the faulting stack pointer |
//!
//! A fresh context gets `StackBase = top`, `StackLimit = DeallocationStack = top - size` and
//! an empty `ExceptionList` (`!0`). The on-top function of `jump_ontop` runs on the target's
//! stack, so the TEB holds the target's words while it runs.
//!
//! # Entering a context
//!
//! The flow that enters a context pops its saved state (`mov rsp, <context>`, the TEB words,
//! `rbx`, `rbp`) and then branches to the resume address with
//!
//! | register | holds |
//! |---|---|
//! | `rsi` | the context being left (becomes `Transfer::context`) |
//! | `rdi` | the word passed (becomes `Transfer::data`) |
//!
//! so the code at a resume address is empty. The branch is `pop rax; jmp rax`, which leaves the
//! return-stack buffer (RSB) alone, except in `suspend`, which `ret`s into its resumer: `resume`
//! pushes its own resume address with a `call` (to the code that saves and enters, a few bytes
//! on), so the resumer's resume address is on the RSB and `suspend`'s `ret` is predicted.
//!
//! # A fresh stack, and unwinding across contexts
//!
//! Windows unwind codes cannot load a frame address from memory, except for one:
//! `UWOP_PUSH_MACHFRAME`, the frame an interrupt pushes, from which the unwinder loads both
//! `rip` (at offset 0) and `rsp` (at offset 24). [`make`] lays out the top of a new stack so
//! that the link slot is that `rsp`:
//!
//! ```text
//!   top-8  | link: the resumer's context  |  machine frame: rsp     <- STACK_RESERVED
//!   top-16 | entry function               |                  eflags  <-
//!   top-24 | 0                            |                  cs
//!   top-32 | &unwind_stub + 6             |                  rip
//!   top-48 | Transfer for the entry (16 B)  |
//!   top-80 | home space for the entry (32 B) |  <- rsp in the trampoline
//!          | initial saved context (TEB words of the new stack, rbx = rbp = 0,
//!          |   resume address = entry_trampoline)  <- sp of the fresh context
//! ```
//!
//! The trampoline calls the entry (by pushing a return address and jumping, for the RSB's
//! sake, as on System V) with `rcx` = the `Transfer` (passed by reference: it is 16 bytes) and
//! `rdx` = the link. Its unwind info says: 48 bytes allocated, below a machine frame. So the
//! unwinder continues at `rip = unwind_stub + 6` with `rsp` = the resumer's context, and the
//! stub's unwind info describes exactly a saved context: 32 bytes (48 with `fp-env`)
//! allocated below `rbx` and `rbp` pushed below a return address. The unwinder thus restores
//! the resumer's `rbx`, `rbp`, `rip` (its resume address, inside its asm block) and `rsp` (as
//! at that asm block's entry), and carries on with the resumer's own unwind info. With no
//! resumer the link names `END_OF_STACK`, whose resume address 0 ends the walk.

use core::arch::{asm, naked_asm};
use core::ptr::NonNull;

use crate::{Context, Entry, Link, OnTop, Transfer};

pub(crate) const NAME: &str = "x86_64-windows";
pub(crate) const SAVES_FP_ENV: bool = cfg!(feature = "fp-env");

/// Bytes below the TEB words: the FP environment word and its scratch word, with `fp-env`.
const FP_BYTES: usize = if SAVES_FP_ENV { 16 } else { 0 };

/// Words of a saved context: TEB (4), rbx, rbp, resume address, and the FP words.
const FRAME_WORDS: usize = 7 + FP_BYTES / 8;

/// A saved context with a zero resume address: what the unwinder sees below a stack that has no
/// resumer. Never entered.
static END_OF_STACK: [usize; FRAME_WORDS] = [0; FRAME_WORDS];

/// Bytes from the bottom of a saved context to its `rbx`: what the stub's unwind info skips.
const BELOW_RBX: usize = 32 + FP_BYTES;

/// The end of Wine's (and 32-bit Windows') exception-registration chain.
const EXCEPTION_LIST_END: usize = !0;

/// Saves the leaving flow's state, after its resume address has been pushed; leaves the TEB's
/// address in `r11` for `restore!`.
macro_rules! save {
    () => {
        concat!(
            "push rbp\n", // callee-saved, reserved by LLVM (frame pointer)
            "push rbx\n", // callee-saved, reserved by LLVM
            // The TEB words, through the TEB's own address (NtTib.Self): plain loads and stores
            // are cheaper than gs-prefixed pushes and pops.
            "mov r11, gs:[0x30]\n",
            "movups xmm0, [r11]\n",      // ExceptionList, StackBase
            "mov rax, [r11 + 0x10]\n",   // StackLimit
            "mov r10, [r11 + 0x1478]\n", // DeallocationStack
            "sub rsp, 32\n",
            "movups [rsp], xmm0\n",
            "mov [rsp + 16], rax\n",
            "mov [rsp + 24], r10\n",
            fp_save!(),
        )
    };
}

/// Pops the state of the context `rsp` points to, all but its resume address, with `r11` = the
/// TEB's address.
macro_rules! restore {
    () => {
        concat!(
            fp_restore!(),
            "movups xmm0, [rsp]\n",
            "mov rax, [rsp + 16]\n",
            "mov r10, [rsp + 24]\n",
            "movups [r11], xmm0\n",
            "mov [r11 + 0x10], rax\n",
            "mov [r11 + 0x1478], r10\n",
            "add rsp, 32\n",
            "pop rbx\n",
            "pop rbp\n",
        )
    };
}

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
            "sub rsp, 16\n",       // the FP word, and a scratch word below it
            "stmxcsr [rsp + 8]\n", // MXCSR: rounding mode, exception masks, FTZ/DAZ
            "fnstcw [rsp + 12]\n", // x87 control word: precision and rounding
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
    // As on System V: only MXCSR's control bits are the context's, and each register is
    // written only when it differs (both writes are slow). The scratch word is in the saved
    // context because Windows has no red zone below rsp.
    () => {
        concat!(
            "stmxcsr [rsp]\n", // the thread's current MXCSR
            "mov eax, [rsp]\n",
            "xor eax, [rsp + 8]\n",
            "test eax, 0xffc0\n", // control bits that differ: DAZ, masks, rounding, FTZ
            "jz 7f\n",
            "mov eax, [rsp]\n",
            "and eax, 0x3f\n", // keep the current exception flags
            "mov ecx, [rsp + 8]\n",
            "and ecx, 0xffc0\n", // take the context's control bits
            "or eax, ecx\n",
            "mov [rsp], eax\n",
            "ldmxcsr [rsp]\n",
            "7:\n",
            "fnstcw [rsp]\n",
            "mov ax, [rsp]\n",
            "cmp ax, [rsp + 12]\n",
            "je 8f\n",
            "fldcw [rsp + 12]\n",
            "8:\n",
            "add rsp, 16\n",
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
    // SAFETY: the caller guarantees the top of the stack is ours to write; MIN_STACK_SIZE
    // covers the 10 + FRAME_WORDS words written here. `unwind_stub + 6` is the first
    // instruction after the stub's 6-byte prologue (see `unwind_stub`).
    unsafe {
        top.sub(1).write(END_OF_STACK.as_ptr() as usize); // link: no resumer yet
        top.sub(2).write(entry as usize);
        top.sub(3).write(0);
        top.sub(4).write(unwind_stub as *const () as usize + 6);
        // top-48..top-32: the entry's Transfer; top-80..top-48: its home space.
        let ctx = top.sub(10 + FRAME_WORDS);
        let mut w = ctx;
        if SAVES_FP_ENV {
            w.write(0);
            w.add(1).write(current_fp_env());
            w = w.add(2);
        }
        w.write(EXCEPTION_LIST_END);
        w.add(1).write(top as usize); // StackBase
        w.add(2).write(bottom); // StackLimit
        w.add(3).write(bottom); // DeallocationStack
        w.add(4).write(0); // rbx
        w.add(5).write(0); // rbp: 0 ends frame-pointer walks
        w.add(6).write(entry_trampoline as *const () as usize);
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

/// The FP environment word of the current thread, in the layout `fp_save!` stores.
#[cfg_attr(not(feature = "fp-env"), allow(dead_code))]
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

/// Never runs: its unwind info describes a saved context, for the unwinder to step from the
/// bottom of a context's stack into its resumer (see the module docs). Its prologue is 6
/// bytes (`push rbp`, `push rbx`, `sub rsp, imm8`), so `unwind_stub + 6` is in its body.
#[unsafe(naked)]
unsafe extern "C" fn unwind_stub() {
    naked_asm!(
        ".seh_proc {me}",
        "push rbp",
        ".seh_pushreg rbp",
        "push rbx",
        ".seh_pushreg rbx",
        "sub rsp, {below_rbx}", // the TEB words (and FP words): no registers to restore
        ".seh_stackalloc {below_rbx}",
        ".seh_endprologue",
        "ud2", // <- unwind_stub + 6: where the unwinder "is" in this frame
        ".seh_endproc",
        me = sym unwind_stub,
        below_rbx = const BELOW_RBX,
    )
}

/// The first resume address of every fresh context: calls the entry function with the
/// `Transfer` and the link (see the module docs for the frame).
#[unsafe(naked)]
unsafe extern "C" fn entry_trampoline() {
    naked_asm!(
        ".seh_proc {me}",
        // The frame as the unwinder must see it at the entry's return address: a machine frame
        // (rip = the stub's body, rsp = the link slot's value) with 48 bytes below it.
        ".seh_pushframe",
        ".seh_stackalloc 48",
        ".seh_endprologue",
        "mov [rsp + 32], rsi", // Transfer { context: from,
        "mov [rsp + 40], rdi", //            data }
        "lea rcx, [rsp + 32]", // passed by reference (16 bytes)
        "lea rdx, [rsp + 72]", // the link slot, at top - 8
        // Call the entry without `call`: it never returns, so a `call` would leave an RSB
        // entry that the first `suspend`'s `ret` would pop instead of the resumer's.
        "lea rax, [rip + 2f]",
        "push rax",
        "jmp [rsp + 72]", // the entry function, at top - 16
        "2:",
        "ud2", // never reached: the entry never returns
        ".seh_endproc",
        me = sym entry_trampoline,
    )
}

/// Runs the `OnTop` function of [`jump_ontop`] on the target's stack, with the target's stack
/// words in the TEB, then enters the target. Entered like a resume address (the sender's state
/// is saved), with `rdx` = the target and `r8` = f.
#[unsafe(naked)]
unsafe extern "C" fn ontop_trampoline() {
    naked_asm!(
        ".seh_proc {me}",
        // At f's return address: 64 bytes below a machine frame whose rip is 0, so that
        // backtraces taken inside f end here.
        ".seh_pushframe",
        ".seh_stackalloc 64",
        ".seh_endprologue",
        "mov rbx, rdx",  // keep the target across the call (the sender saved its rbx)
        // f runs on the target's stack, so the TEB describes that stack from here on.
        "movups xmm0, [rdx + {fp_bytes}]",
        "mov rax, [rdx + {fp_bytes} + 16]",
        "mov r10, [rdx + {fp_bytes} + 24]",
        "mov r11, gs:[0x30]",
        "movups [r11], xmm0",
        "mov [r11 + 0x10], rax",
        "mov [r11 + 0x1478], r10",
        "mov rsp, rdx",  // run f on the target's stack, below its saved context,
        "and rsp, -16",  // aligned for the call,
        "sub rsp, 96",   // with home space, two Transfers and the machine frame
        "mov qword ptr [rsp + 64], 0", // the machine frame's rip: the end of the walk
        "mov [rsp + 32], rsi",
        "mov [rsp + 40], rdi",
        "lea rdx, [rsp + 32]", // f(&Transfer { from, data }),
        "lea rcx, [rsp + 48]", // returning its Transfer here (16 bytes: by hidden pointer)
        "call r8",
        "mov rsi, [rax]",     // Transfer::context
        "mov rdi, [rax + 8]", // Transfer::data
        "mov rsp, rbx",       // the context to enter
        "mov r11, gs:[0x30]", // the TEB, for restore!
        restore!(),
        "pop rax",
        "jmp rax",
        ".seh_endproc",
        me = sym ontop_trampoline,
        fp_bytes = const FP_BYTES,
    )
}

/// # Safety
///
/// See [`Context::jump`].
#[inline(always)]
pub(crate) unsafe fn jump(to: Context, data: usize) -> Transfer {
    let (from, data_in): (usize, usize);
    // SAFETY: `to` is a suspended context (caller's contract), so popping its state and
    // branching to its resume address resumes it. We come back here only through our resume
    // address (label 2), entered with our state popped. All other registers are declared
    // clobbered.
    unsafe {
        asm!(
            "lea rax, [rip + 2f]", // our resume address
            "push rax",
            save!(),
            "mov rsi, rsp", // we are now a saved context: the target's Transfer::context
            "mov rsp, rdx", // onto the target's stack,
            restore!(),     // its state,
            "pop rax",      // its resume address,
            "jmp rax",      // and in; the RSB is left untouched
            "2:",
            in("rdx") to.0.as_ptr(),
            inlateout("rdi") data => data_in,
            lateout("rsi") from,
            lateout("r12") _, lateout("r13") _, lateout("r14") _, lateout("r15") _,
            lateout("xmm6") _, lateout("xmm7") _, lateout("xmm8") _, lateout("xmm9") _,
            lateout("xmm10") _, lateout("xmm11") _, lateout("xmm12") _, lateout("xmm13") _,
            lateout("xmm14") _, lateout("xmm15") _,
            clobber_abi("C"),
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
            "lea rax, [rip + 2f]",
            "push rax",
            save!(),
            "mov rsi, rsp",
            "jmp {trampoline}",
            "2:",
            trampoline = sym ontop_trampoline,
            in("rdx") to.0.as_ptr(),
            in("r8") f,
            inlateout("rdi") data => data_in,
            lateout("rsi") from,
            lateout("r12") _, lateout("r13") _, lateout("r14") _, lateout("r15") _,
            lateout("xmm6") _, lateout("xmm7") _, lateout("xmm8") _, lateout("xmm9") _,
            lateout("xmm10") _, lateout("xmm11") _, lateout("xmm12") _, lateout("xmm13") _,
            lateout("xmm14") _, lateout("xmm15") _,
            clobber_abi("C"),
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
    // SAFETY: as in `jump`. The link slot is writable (caller's contract). The `call` pushes
    // our resume address (the end of the block) and runs the code at 3, which saves the rest
    // of our state, publishes our context in the link and enters the target.
    unsafe {
        asm!(
            "jmp 4f",
            "3:",
            save!(),
            "mov rsi, rsp",   // our context,
            "mov [rcx], rsi", // the target's link: its resumer, for suspend and unwinders
            "mov rsp, rdx",
            restore!(),
            "pop rax",
            "jmp rax",
            "4:",
            "call 3b", // our resume address, on the stack and on the RSB for suspend's `ret`
            in("rdx") to.0.as_ptr(),
            in("rcx") link.as_ptr(),
            inlateout("rdi") data => data_in,
            lateout("rsi") from,
            lateout("r12") _, lateout("r13") _, lateout("r14") _, lateout("r15") _,
            lateout("xmm6") _, lateout("xmm7") _, lateout("xmm8") _, lateout("xmm9") _,
            lateout("xmm10") _, lateout("xmm11") _, lateout("xmm12") _, lateout("xmm13") _,
            lateout("xmm14") _, lateout("xmm15") _,
            clobber_abi("C"),
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
    // the resume address its `call` pushed, after we popped the rest of its state.
    unsafe {
        asm!(
            "lea rax, [rip + 2f]",
            "push rax",
            save!(),
            "mov rsi, rsp",   // our context, for the resumer's Transfer
            "mov rsp, [rcx]", // the resumer's stack
            restore!(),
            "ret", // pops the resumer's resume address: predicted by the RSB
            "2:",
            in("rcx") link.as_ptr(),
            inlateout("rdi") data => data_in,
            lateout("rsi") _,
            lateout("r12") _, lateout("r13") _, lateout("r14") _, lateout("r15") _,
            lateout("xmm6") _, lateout("xmm7") _, lateout("xmm8") _, lateout("xmm9") _,
            lateout("xmm10") _, lateout("xmm11") _, lateout("xmm12") _, lateout("xmm13") _,
            lateout("xmm14") _, lateout("xmm15") _,
            clobber_abi("C"),
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
