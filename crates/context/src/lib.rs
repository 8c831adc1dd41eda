//! Save and restore a CPU context: the context switch under Spindle's stackful coroutines.
//!
//! A [`Context`] is a suspended flow of execution: the stack pointer of a stack on which the
//! callee-saved registers and a resume address have been pushed. Switching to a context pushes
//! the same state for the current flow, passes one machine word across, and pops the target's.
//! Nothing here allocates; stacks come from the caller (see the `spindle-stack` crate).
//!
//! The shape is Boost.Context's:
//!
//! * [`Context::new`] prepares a context on a stack, to run an [`Entry`] function.
//! * [`Context::jump`] switches to a context passing a word; when some other flow later jumps
//!   back, `jump` returns a [`Transfer`]: the context it came from and the word it passed.
//! * [`Context::jump_ontop`] switches and first runs a function *on top of* the target's stack,
//!   before the target continues. Its result is what the target's own `jump` returns. This is
//!   how a finished context's stack is freed by the next one, off that stack.
//!
//! plus an asymmetric, *linked* pair built for coroutines:
//!
//! * [`Context::resume`] switches into a context and records the resumer in the target stack's
//!   [`Link`] slot;
//! * [`suspend`] switches back to whoever is recorded in the link.
//!
//! On the native backends `resume` enters the target with a call (`call`, `blr`) and `suspend`
//! leaves it with the matching return (`ret`), so the CPU's return-address predictor stays in
//! step; and the link is what the unwinder follows from the bottom of a context's stack into its
//! resumer, so a backtrace captured inside a coroutine shows the coroutine's frames and then the
//! resumer's.
//!
//! # Backends
//!
//! | target | backend ([`BACKEND`]) | chosen by |
//! |---|---|---|
//! | x86_64, System V (Linux, FreeBSD, macOS, …) | native `x86_64-sysv`: Rust inline asm, no build script | default |
//! | x86_64 Windows (`-gnu`, `-msvc`) | native `x86_64-windows`: the same, with the TEB's stack fields switched and Windows unwind info | default |
//! | aarch64, AAPCS64 (Linux, macOS as `aarch64-apple`, …) | native `aarch64-aapcs` / `aarch64-apple` | default |
//! | aarch64 Windows | native `aarch64-windows`: the AAPCS64 switch with the TEB's stack fields switched and Windows unwind codes | default |
//! | every other target (32-bit, RISC-V, …), and any target with feature `boost` | `boost`: the `context` crate (a port of Boost.Context, assembled by its build script) | automatic / feature `boost` |
//!
//! The aarch64 Windows backend is assembled for its target in CI and its switch runs there on
//! aarch64 Linux with a stand-in TEB; it has not run on Windows (see its module docs). The
//! `boost` feature does not build for aarch64 Windows: the `context` crate (3.0.0) ships no
//! arm64 Windows assembly.
//!
//! All implement the same API and pass the same test suite, with two documented differences:
//! backtraces cross from a context into its resumer only on the native backends (on `boost`
//! they end at the context's entry function), and the floating-point environment is always per
//! context on `boost` (see below). Each native backend's module docs draw its saved context.
//!
//! # Cost model (native backends)
//!
//! The switch is inline asm inlined into its caller. It saves by hand only the registers that
//! the compiler reserves and cannot be told are clobbered (`rbx` and `rbp` on x86_64, `x19` and
//! the frame pointer `x29` on aarch64), the resume address, and on Windows the TEB's stack
//! fields; it declares every other register clobbered, so the compiler saves just the registers
//! that are live across the switch, and hoists those saves out of loops. Entering a context never
//! executes a return that the return-address predictor did not predict: `jump` ends in an
//! indirect jump, `resume` in a call, and `suspend` in the return that pairs with that call.
//!
//! # Floating-point environment
//!
//! The x86_64 ABIs make the control bits of MXCSR (rounding mode, exception masks, FTZ/DAZ) and
//! the x87 control word callee-saved; AAPCS64 does the same with FPCR (rounding mode, FZ, DN,
//! trap enables). Saving and restoring them costs a few nanoseconds per switch (`ldmxcsr` and
//! `msr fpcr` are slow), and almost no Rust code changes them (LLVM assumes the default
//! environment unless told otherwise). So by default on the native backends **the floating-point
//! environment belongs to the thread**: every context running on a thread shares it, exactly as
//! if the contexts were ordinary functions calls. Code that changes the rounding mode must
//! restore it before it switches away. Enable the `fp-env` feature to save and restore it per
//! context instead (a new context then starts with the environment of the thread that made it).
//! [`SAVES_FP_ENV`] tells which semantics are compiled in. The `boost` backend always saves it.
//!
//! # Example
//!
//! A context that adds one to every number it is sent:
//!
//! ```
//! use spindle_context::{Context, Link, Transfer};
//!
//! extern "C" fn add_one(mut t: Transfer, _link: Link) -> ! {
//!     loop {
//!         // SAFETY: `t.context` is the flow that jumped to us; it is suspended in `jump`.
//!         t = unsafe { t.context.jump(t.data + 1) };
//!     }
//! }
//!
//! let mut stack = vec![0u128; 4096]; // 64 KiB, 16-byte aligned
//! let size = stack.len() * 16;
//! // SAFETY: one past the end of the allocation is the stack's top; it outlives the context.
//! let top = unsafe { std::ptr::NonNull::new_unchecked(stack.as_mut_ptr().add(stack.len())).cast() };
//! // SAFETY: the stack is unused, big enough and lives until the end of the example.
//! let mut ctx = unsafe { Context::new(top, size, add_one) };
//! for i in 0..3 {
//!     // SAFETY: `ctx` is suspended; `add_one` never returns.
//!     let t = unsafe { ctx.jump(i) };
//!     assert_eq!(t.data, i + 1);
//!     ctx = t.context;
//! }
//! // The context is abandoned while suspended; its stack holds nothing that needs dropping.
//! ```
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![no_std]

use core::fmt;
use core::ptr::NonNull;

#[cfg(all(target_arch = "x86_64", not(windows), not(feature = "boost")))]
#[path = "x86_64_sysv.rs"]
mod backend;

#[cfg(all(
    target_arch = "aarch64",
    not(windows),
    not(spindle_check_aarch64_windows),
    not(feature = "boost")
))]
#[path = "aarch64.rs"]
mod backend;

#[cfg(all(
    target_arch = "aarch64",
    any(windows, spindle_check_aarch64_windows),
    not(feature = "boost")
))]
#[path = "aarch64_windows.rs"]
mod backend;

#[cfg(all(target_arch = "x86_64", windows, not(feature = "boost")))]
#[path = "x86_64_windows.rs"]
mod backend;

#[cfg(not(any(
    all(target_arch = "x86_64", not(feature = "boost")),
    all(target_arch = "aarch64", not(feature = "boost")),
)))]
#[path = "boost.rs"]
mod backend;

/// The name of the backend compiled in: `"x86_64-sysv"`, `"x86_64-windows"`, `"aarch64-aapcs"`,
/// `"aarch64-apple"` or `"aarch64-windows"` (native), or `"boost"`.
pub const BACKEND: &str = backend::NAME;

/// Whether each context has its own floating-point environment (MXCSR control bits and x87
/// control word; FPCR on aarch64) — `true` with the `fp-env` feature or on the `boost`
/// backend — or shares the thread's (`false`). See the [crate docs](crate#floating-point-environment).
pub const SAVES_FP_ENV: bool = backend::SAVES_FP_ENV;

/// Bytes at the top of a stack that [`Context::new`] reserves for its own use (the [`Link`] slot
/// and the entry function). They stay in use for the context's whole life.
///
/// A copying stack may leave them out of what it keeps of a suspended context (spindle-stack's
/// shared stacks do), as long as the context has been resumed before and the bytes that lie
/// there when it is resumed again were left by another context that had been resumed: the
/// entry word is read only by the first switch into the context, and the link slot is written
/// again for every resume before the context reads it (by [`Context::resume`] on the native
/// backends; on the Boost backend by the resumed [`suspend`], `resume` only telling a slot
/// never written since `Context::new` from one that was).
pub const STACK_RESERVED: usize = 16;

/// The smallest stack [`Context::new`] accepts the *contract* for. Real code needs far more:
/// every frame, every panic, every `format!` lives on it.
pub const MIN_STACK_SIZE: usize = 256;

/// A suspended flow of execution.
///
/// It is the stack pointer of its stack after the switch pushed the flow's state: every byte of
/// the suspended flow lies in `[as_ptr(), top)` of its stack. A `Context` is consumed by the
/// switch that resumes it; the switch hands back a new one for the flow that was left.
#[repr(transparent)]
pub struct Context(NonNull<u8>);

// SAFETY: a `Context` is a pointer to a suspended stack. Moving that pointer to another thread
// does nothing by itself; every operation that runs the context is `unsafe` and its contract
// makes the caller responsible for whatever the suspended flow holds (thread-bound data such as
// references into thread-locals), which is the higher layers' migration rule.
unsafe impl Send for Context {}

impl Context {
    /// Prepares a context on a fresh stack: the first switch to it calls `entry` on that stack
    /// with the [`Transfer`] the switch passed (the context it came from, and its word) and the
    /// stack's [`Link`] (whose address also locates anything the creator put above `top`).
    ///
    /// `top` is one past the highest byte of the stack (it is rounded down to 16 bytes) and
    /// `size` the number of usable bytes below it. The top [`STACK_RESERVED`] bytes are
    /// reserved; the [`Link`] slot lies there, initialised to "no resumer".
    ///
    /// `entry` must never return (its type says so); a context ends by switching away for the
    /// last time, typically with [`jump_ontop`](Context::jump_ontop) so that the next context
    /// frees the stack, or by [`suspend`]ing to a resumer that then frees it.
    ///
    /// # Safety
    ///
    /// * `[top - size, top)` is writable memory that nothing else uses while the context lives,
    ///   `size >= MIN_STACK_SIZE`, and it is large enough for everything `entry` runs: nothing
    ///   checks overflow here (guard pages are the stack's job).
    /// * The stack outlives the context (until it has switched away for the last time).
    pub unsafe fn new(top: NonNull<u8>, size: usize, entry: Entry) -> Context {
        // SAFETY: forwarded contract.
        unsafe { backend::make(top, size, entry) }
    }

    /// Switches to this context, passing `data`. Returns when some flow switches back to the
    /// current one, with the context it left and the word it passed.
    ///
    /// # Safety
    ///
    /// * `self` is suspended (made by [`Context::new`] or returned by a switch) and its stack
    ///   is alive.
    /// * The flow that resumes the current one must be on the same thread, or the current flow
    ///   must not hold thread-bound state (thread-local references, `Rc`s…) across the switch.
    /// * Nothing may unwind across a switch: an [`Entry`] must not return or unwind.
    #[inline(always)]
    pub unsafe fn jump(self, data: usize) -> Transfer {
        // SAFETY: forwarded contract.
        unsafe { backend::jump(self, data) }
    }

    /// Switches to this context and, on its stack, first calls `f` with the [`Transfer`] that the
    /// target would have received; what `f` returns is what the target's pending switch returns
    /// (for a fresh context: what its entry receives).
    ///
    /// Use it to run code that must not run on the stack being left — freeing it, or publishing
    /// the context just saved (the "suspend, then publish" rule of a scheduler).
    ///
    /// `f` runs on the target's stack below its saved state; a backtrace taken inside `f` ends at
    /// `f`. `f` must not unwind (it is `extern "C"`: a panic in it aborts the process).
    ///
    /// # Safety
    ///
    /// As for [`jump`](Context::jump); `f` must be sound to run on the target's stack.
    #[inline(always)]
    pub unsafe fn jump_ontop(self, data: usize, f: OnTop) -> Transfer {
        // SAFETY: forwarded contract.
        unsafe { backend::jump_ontop(self, data, f) }
    }

    /// Switches into this context as its resumer: records the current flow in `link` (the
    /// target stack's [`Link`] slot) and then switches, passing `data`. Returns when the target
    /// [`suspend`]s (or otherwise switches back), with its new context and word.
    ///
    /// Before the target runs, its link holds the resumer, so a backtrace from inside the target
    /// continues into the resumer (native backend) and `suspend(link, ..)` returns here.
    ///
    /// # Safety
    ///
    /// As for [`jump`](Context::jump), and:
    /// * `link` is the link slot of the stack that `self` runs on;
    /// * `self` is not itself suspended in `resume` (a resumer): go back to a resumer with
    ///   [`suspend`] or [`jump`](Context::jump). (On the native backend a resumer's resume
    ///   address expects to be entered already on its own stack; see the backend's docs.)
    #[inline(always)]
    pub unsafe fn resume(self, data: usize, link: Link) -> Transfer {
        // SAFETY: forwarded contract.
        unsafe { backend::resume(self, data, link) }
    }

    /// The saved stack pointer: the lowest address of the suspended flow's state. Every byte the
    /// flow needs lies in `[as_ptr(), top)`, which is what a copying (shared) stack saves.
    #[inline]
    pub fn as_ptr(&self) -> NonNull<u8> {
        self.0
    }

    /// Rebuilds a context from [`as_ptr`](Context::as_ptr).
    ///
    /// # Safety
    ///
    /// `ptr` came from `as_ptr` of a context that has not been resumed since, and the bytes
    /// `[ptr, top)` of its stack are as they were then (copied back, for a shared stack).
    #[inline]
    pub unsafe fn from_ptr(ptr: NonNull<u8>) -> Context {
        Context(ptr)
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Context").field(&self.0).finish()
    }
}

/// What a switch delivers: the context that was left, and the word it passed.
#[repr(C)]
#[derive(Debug)]
pub struct Transfer {
    /// The flow that switched to us, now suspended.
    pub context: Context,
    /// The word it passed.
    pub data: usize,
}

/// The function a fresh context runs on its first switch, with the switch's [`Transfer`] and
/// the link slot of its own stack. It must never return: it ends by switching away for the last
/// time.
///
/// (Boost.Context's entry takes only the transfer; the link is what lets a coroutine's entry
/// find its state at a fixed place near the top of its stack, so that the first resume can be
/// exactly like every other one.)
pub type Entry = extern "C" fn(Transfer, Link) -> !;

/// A function run by [`Context::jump_ontop`] on the target's stack.
pub type OnTop = extern "C" fn(Transfer) -> Transfer;

/// The slot near the top of a stack prepared by [`Context::new`] that names the context's
/// resumer: written by [`Context::resume`], read by [`suspend`] and (native backend) by the
/// unwinder. It is the word just below the `top` given to `Context::new`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(transparent)]
pub struct Link(NonNull<usize>);

impl Link {
    /// The link slot of the stack whose top is `top` (as passed to [`Context::new`]).
    ///
    /// # Safety
    ///
    /// The top [`STACK_RESERVED`] bytes below `top` belong to a stack prepared by
    /// [`Context::new`] (at the same `top`), for as long as the link is used.
    #[inline]
    pub unsafe fn for_stack(top: NonNull<u8>) -> Link {
        let slot = (top.as_ptr() as usize & !15) - core::mem::size_of::<usize>();
        // SAFETY: `top` is non-null and at least 16 (a stack lies below it), so the slot is
        // non-null.
        Link(unsafe { NonNull::new_unchecked(slot as *mut usize) })
    }

    /// The address of the slot.
    #[inline]
    pub fn as_ptr(self) -> *mut usize {
        self.0.as_ptr()
    }

    /// True once a [`Context::resume`] has recorded a resumer here, i.e. once the context of
    /// this stack has been resumed at least once.
    ///
    /// # Safety
    ///
    /// The slot is readable: its stack is alive and holds its bytes (for a copying stack: the
    /// context's bytes are in the region).
    #[inline]
    pub unsafe fn has_resumer(self) -> bool {
        // SAFETY: forwarded contract.
        unsafe { backend::link_has_resumer(self) }
    }
}

/// Switches from the current context back to its resumer, the one recorded in `link`, passing
/// `data`. Returns the word passed by the next [`Context::resume`] of the current context (or
/// any other switch to it).
///
/// # Safety
///
/// The current flow runs on the stack whose link slot is `link`, and was entered by
/// [`Context::resume`] with that link (so the link names a suspended resumer); the rest of
/// [`Context::jump`]'s contract applies.
#[inline(always)]
pub unsafe fn suspend(link: Link, data: usize) -> usize {
    // SAFETY: forwarded contract.
    unsafe { backend::suspend(link, data) }
}

/// The checking build of the aarch64 Windows backend (`--cfg spindle_check_aarch64_windows`
/// on aarch64 Linux; see `src/aarch64_windows.rs`) runs the Windows switch with a stand-in
/// for the TEB: one per thread, passed in `x18` by every switch.
#[cfg(spindle_check_aarch64_windows)]
extern crate std;

#[cfg(all(
    spindle_check_aarch64_windows,
    not(all(target_arch = "aarch64", target_os = "linux"))
))]
compile_error!("`--cfg spindle_check_aarch64_windows` is for aarch64 Linux only");

/// Words of the stand-in TEB: up to `DeallocationStack`, at 0x1478.
#[cfg(spindle_check_aarch64_windows)]
const STAND_IN_TEB_WORDS: usize = 0x1480 / 8;

#[cfg(spindle_check_aarch64_windows)]
std::thread_local! {
    static STAND_IN_TEB: [core::cell::Cell<usize>; STAND_IN_TEB_WORDS] = {
        let teb = [const { core::cell::Cell::new(0) }; STAND_IN_TEB_WORDS];
        // Values no stack has, so that a test sees whether the thread's own come back.
        teb[1].set(0x5eed_0000_b000); // NtTib.StackBase
        teb[2].set(0x5eed_0000_1000); // NtTib.StackLimit
        teb[0x1478 / 8].set(0x5eed_0000_0000); // DeallocationStack
        teb
    };
}

/// The current thread's stand-in TEB, in the checking build of the aarch64 Windows backend:
/// what `x18` points to on Windows. The tests read the stack words through it.
#[cfg(spindle_check_aarch64_windows)]
#[doc(hidden)]
pub fn stand_in_teb() -> *mut usize {
    STAND_IN_TEB.with(|teb| teb.as_ptr() as *mut usize)
}

// How the crate is built, for whoever changes it (`cargo doc --document-private-items`).
mod internals;

/// The examples of the crate's README.md, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
