//! Portable backend: the `context` crate, a port of Boost.Context (`make_fcontext`,
//! `jump_fcontext`, `ontop_fcontext`, assembled by that crate's build script for each target).
//!
//! Boost's contexts have the same shape as ours: a context is the stack pointer of its saved
//! state, a switch passes one word and returns `{from, data}`. The differences, all documented in
//! the crate docs:
//!
//! * every switch is a call into Boost's assembly, which saves all callee-saved registers and the
//!   floating-point environment (so [`SAVES_FP_ENV`] is `true`);
//! * Boost's entry trampoline has no CFI that leads into the resumer, so backtraces end at the
//!   entry function;
//! * the link is kept by the switches themselves: [`resume`] fills it in with an `ontop` call on
//!   the first entry (the link is still empty then), and [`suspend`] refreshes it every time it
//!   is resumed, from the `Transfer` it receives.

extern crate context as boost;

use boost::c_void;
use core::mem;
use core::ptr::NonNull;

use crate::{Context, Entry, Link, OnTop, STACK_RESERVED, Transfer};

pub(crate) const NAME: &str = "boost";
pub(crate) const SAVES_FP_ENV: bool = true;

// Layout compatibility, relied on by every transmute below: our `Context` is a non-null pointer
// (repr(transparent)), Boost's is a `&'static c_void` (repr(C), one field); both `Transfer`s are
// repr(C) `{ context, usize }`.
const _: () = assert!(mem::size_of::<Context>() == mem::size_of::<boost::Context>());
const _: () = assert!(mem::size_of::<Transfer>() == mem::size_of::<boost::context::Transfer>());
const _: () = assert!(mem::align_of::<Transfer>() == mem::align_of::<boost::context::Transfer>());

#[inline(always)]
fn to_boost(ctx: Context) -> boost::Context {
    // SAFETY: same layout (asserted above); the pointer is a suspended Boost context, non-null.
    unsafe { mem::transmute::<Context, boost::Context>(ctx) }
}

#[inline(always)]
fn from_boost(t: boost::context::Transfer) -> Transfer {
    // SAFETY: same layout (asserted above); Boost never hands out a null context.
    unsafe { mem::transmute::<boost::context::Transfer, Transfer>(t) }
}

/// # Safety
///
/// See [`Context::new`].
#[inline]
pub(crate) unsafe fn make(top: NonNull<u8>, size: usize, entry: Entry) -> Context {
    let top = top.as_ptr() as usize & !15;
    // The link slot is the top word of the reserved area; empty means "not resumed yet".
    // SAFETY: the caller guarantees the top of the stack is ours to write.
    unsafe { (top as *mut usize).sub(1).write(0) };
    let usable_top = top - STACK_RESERVED;
    let bottom = top - size;
    // SAFETY: `[bottom, usable_top)` is the caller's stack minus our reserved words; Boost only
    // reads the two bounds.
    let stack =
        unsafe { boost::stack::Stack::new(usable_top as *mut c_void, bottom as *mut c_void) };
    // SAFETY: the stack outlives the context (caller's contract).
    let fresh = unsafe { boost::Context::new(&stack, started) };
    // Boost's fresh contexts cannot be entered with `ontop_fcontext` (its trampoline passes the
    // entry the registers the on-top function clobbered), so start every context at once: it
    // comes straight back, suspended in an ordinary jump, which every switch can enter.
    let launch = Launch {
        entry,
        link: (top - mem::size_of::<usize>()) as *mut usize,
    };
    // SAFETY: `fresh` has just been made; `started` copies `launch` and switches back at once.
    let t = unsafe { fresh.resume(&launch as *const Launch as usize) };
    from_boost(t).context
}

/// What `make` hands to `started`.
struct Launch {
    entry: Entry,
    link: *mut usize,
}

/// Boost's entry for every context: hands control straight back to `make`, then runs the real
/// entry with the first real switch's `Transfer` and the link.
extern "C" fn started(t: boost::context::Transfer) -> ! {
    // SAFETY: `make` passed a pointer to a `Launch` on its stack, alive until we switch back.
    let Launch { entry, link } = unsafe { core::ptr::read(t.data as *const Launch) };
    // SAFETY: `t.context` is `make`, suspended in its switch to us.
    let first = unsafe { t.context.resume(0) };
    // SAFETY: the link slot lies in the stack's reserved top words: non-null.
    let link = Link(unsafe { NonNull::new_unchecked(link) });
    entry(from_boost(first), link)
}

/// # Safety
///
/// See [`Context::jump`].
#[inline(always)]
pub(crate) unsafe fn jump(to: Context, data: usize) -> Transfer {
    // SAFETY: forwarded contract.
    from_boost(unsafe { to_boost(to).resume(data) })
}

/// # Safety
///
/// See [`Context::jump_ontop`].
#[inline(always)]
pub(crate) unsafe fn jump_ontop(to: Context, data: usize, f: OnTop) -> Transfer {
    // SAFETY: `OnTop` and Boost's `ResumeOntopFn` are `extern "C" fn(T) -> T` with layout-equal
    // `T`s (asserted above).
    let f = unsafe { mem::transmute::<OnTop, boost::context::ResumeOntopFn>(f) };
    // SAFETY: forwarded contract.
    from_boost(unsafe { to_boost(to).resume_ontop(data, f) })
}

/// # Safety
///
/// See [`Link::has_resumer`].
#[inline]
pub(crate) unsafe fn link_has_resumer(link: Link) -> bool {
    // SAFETY: forwarded contract; `make` initialised the slot to 0 and only switches into the
    // context change it.
    unsafe { link.as_ptr().read() != 0 }
}

/// What [`resume`] passes to [`record_link`] through the word of an `ontop` switch.
struct FirstResume {
    link: *mut usize,
    data: usize,
}

/// Runs on a fresh context's stack before its entry: records the resumer in the link.
extern "C" fn record_link(t: boost::context::Transfer) -> boost::context::Transfer {
    // SAFETY: `resume` passed a pointer to a `FirstResume` on its own stack, and it stays
    // suspended (so the value stays alive) until this function has returned and beyond.
    let first = unsafe { &*(t.data as *const FirstResume) };
    let from = from_boost(t);
    // SAFETY: `first.link` is the link slot of the stack we are running on (resume's contract).
    unsafe { first.link.write(from.context.as_ptr().as_ptr() as usize) };
    // SAFETY: same layout as Boost's transfer (asserted above).
    unsafe {
        mem::transmute::<Transfer, boost::context::Transfer>(Transfer {
            context: from.context,
            data: first.data,
        })
    }
}

/// # Safety
///
/// See [`Context::resume`].
#[inline(always)]
pub(crate) unsafe fn resume(to: Context, data: usize, link: Link) -> Transfer {
    // SAFETY: `link` is the target stack's link slot (caller's contract).
    let resumed_before = unsafe { link.as_ptr().read() } != 0;
    if resumed_before {
        // The target is suspended in `suspend`, which records us from the Transfer it gets.
        // SAFETY: forwarded contract.
        unsafe { jump(to, data) }
    } else {
        let first = FirstResume {
            link: link.as_ptr(),
            data,
        };
        // SAFETY: forwarded contract; `record_link` runs on the target's stack and only writes
        // the link slot of that stack.
        unsafe { jump_ontop(to, &first as *const FirstResume as usize, record_link_ontop) }
    }
}

// `record_link` typed as our `OnTop` (the same function; Boost's transfer type is layout-equal).
extern "C" fn record_link_ontop(t: Transfer) -> Transfer {
    // SAFETY: same layout (asserted above).
    let t = unsafe { mem::transmute::<Transfer, boost::context::Transfer>(t) };
    from_boost(record_link(t))
}

/// # Safety
///
/// See [`crate::suspend`].
#[inline(always)]
pub(crate) unsafe fn suspend(link: Link, data: usize) -> usize {
    let slot = link.as_ptr();
    // SAFETY: the link names our suspended resumer (caller's contract).
    let resumer = unsafe { Context(NonNull::new_unchecked(slot.read() as *mut u8)) };
    // SAFETY: forwarded contract.
    let t = unsafe { jump(resumer, data) };
    // Whoever resumed us is our resumer now.
    // SAFETY: the slot is on our own stack.
    unsafe { slot.write(t.context.as_ptr().as_ptr() as usize) };
    t.data
}
