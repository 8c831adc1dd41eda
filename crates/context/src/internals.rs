//! How this crate is built: notes for whoever changes it (the crate docs say how to use it;
//! the repository's ARCHITECTURE.md places the crate among the others).
//!
//! One concept: a *context* is the stack pointer of a suspended flow whose resume address and
//! callee-saved state sit on its own stack. API in Boost.Context's shape (`Context::new`, `jump`,
//! `jump_ontop`, `Transfer { context, data }`) plus an asymmetric linked pair for coroutines
//! (`Context::resume(data, link)` / `suspend(link, data)`).
//!
//! **Native backends.** Described here for `src/x86_64_sysv.rs` (x86_64 System V: Linux, FreeBSD,
//! macOS); `src/aarch64.rs` (AAPCS64), `src/x86_64_windows.rs` (Microsoft x64, which also
//! switches the TEB's stack fields) and `src/aarch64_windows.rs` (AAPCS64 with the TEB in x18)
//! follow the same design, and their module docs give their saved-context layouts:
//!
//! * Every switch is `#[inline(always)]` Rust inline asm. It pushes only `rbx` and `rbp` (LLVM
//!   reserves them, so asm cannot declare them clobbered) and a resume address, and declares all
//!   other registers clobbered (`clobber_abi("sysv64")` plus `r12`–`r15`): the compiler saves only
//!   what is live across the switch, in the caller's frame, and hoists it out of loops. This is the
//!   whole gap between a naked "save everything" switch and corosensei's.
//! * One saved-context format: `[sp] = resume address, [sp+8] = rbx, [sp+16] = rbp` (plus an FP
//!   word with `fp-env`). Entering a context means: `rdx` = the context, `rsi` = the sender, `rdi`
//!   = the word, and control to its resume address.
//! * Return prediction: `jump` enters with `mov rsp, rdx; pop rax; jmp rax` (RSB untouched);
//!   `resume` enters with `call [rdx]` and the matching `suspend` leaves with `mov rsp, [link];
//!   ret`, which pops exactly the RSB entry the `call` pushed. A `ret` into a different call site
//!   never happens; the entry trampoline pushes a return address by hand and jumps to the entry (a
//!   `call` that never returns would leave an RSB entry behind and cost two return mispredictions
//!   per coroutine).
//! * Two tails. Contexts that `resume` may enter start their tail with `lea rsp, [rdx + 8]` (they
//!   arrive on the resumer's stack after the `call`); a resumer's own resume address is only ever
//!   entered with `rsp` already switched (by `ret` or `jump`), so its tail skips that `lea`: one
//!   instruction less on the critical path of every round trip. Contract of `Context::resume`: its
//!   target is never itself suspended in `resume`.
//! * Backtraces: a fresh stack's first resume address is `entry_trampoline`, which calls the entry
//!   function; its CFI computes the caller's frame from the *link* slot at the top of the stack
//!   (`CFA = [rsp + 8] + 24`; RA, rbx, rbp at fixed offsets), and `resume` stores the resumer's
//!   context there before switching. So a `Backtrace` inside a coroutine shows the coroutine's
//!   frames, the trampoline, then the resumer's frames. With no resumer the link points at a static
//!   all-zero context, whose return address 0 ends the walk. The trampoline is a signal frame (S
//!   augmentation) so unwinders look up the resumer at its exact return address and GDB accepts the
//!   change of stacks.
//! * `jump_ontop` runs its function in `ontop_trampoline` on the target stack (CFI: outermost
//!   frame), then enters the target with the function's result.
//!
//! **Floating-point environment — decision.** MXCSR control bits and the x87 control word are
//! callee-saved by the SysV ABI. By default they belong to the *thread*: all contexts on a thread
//! share them, as plain function calls would (a coroutine that changes the rounding mode must
//! restore it before suspending). Reason: saving and restoring them adds work to every switch for a
//! feature almost no Rust code uses (LLVM assumes the default environment anyway). The `fp-env`
//! cargo feature saves them per context (a fresh context inherits its creator's); `SAVES_FP_ENV`
//! tells which. Tests in both `context` and `coro` show each semantics (a coroutine switching to
//! round-up / toward-zero). `cargo xtask bench core` measures the cost (`switch/spindle` against a
//! build with `fp-env`; the repository's docs/benchmarks.md has the figures).
//!
//! **Boost backend** (`src/boost.rs`, feature `boost`, automatic on every target without a native
//! backend: every target but x86_64 and non-Windows aarch64). Same API. Boost's fresh contexts
//! can't be entered with `ontop_fcontext` (its trampoline hands the entry the registers the on-top
//! function clobbered), so `Context::new` starts every context at once and it comes back suspended
//! in an ordinary jump. The link is recorded by `resume` via an `ontop` call on the first entry and
//! refreshed by `suspend` from its `Transfer` afterwards. Differences (documented): always saves
//! the FP environment; backtraces end at the entry (Boost's trampoline has no CFI into the
//! resumer).
