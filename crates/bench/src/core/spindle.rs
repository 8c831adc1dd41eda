//! Spindle's impls of the `core` suite.
//!
//! The `spindle-boost` and `spindle-fp-env` rows of `switch` need no code here: `cargo xtask
//! bench` builds copies of this binary with `--features boost` (= `spindle-context/boost`) and
//! `--features fp-env` (= `spindle-context/fp-env`), and the main binary runs `<that copy>
//! measure switch spindle`, i.e. [`switch`] below in that configuration.

use std::hint::black_box;

use spindle_coro::{Coroutine, CoroutineResult, SharedStack, Yielder};
use spindle_stack::Stack;

use crate::harness::{Ctx, resident_bytes};

/// The backend this binary's Spindle was built with; `spindle-bench backend` prints it and the
/// main binary checks it before trusting a `spindle-boost` measurement.
pub fn backend_name() -> &'static str {
    if cfg!(feature = "hook") {
        return "native+hook";
    }
    match (spindle_context::BACKEND, spindle_context::SAVES_FP_ENV) {
        ("boost", _) => "boost",
        (_, true) => "native+fp-env",
        _ => "native",
    }
}

/// `switch`: one resume + suspend round trip of a coroutine (default pooled stack), divided
/// by 2.
pub fn switch(ctx: &Ctx) -> Result<f64, String> {
    let mut co = Coroutine::new(|y: &Yielder<(), usize>, ()| {
        loop {
            y.suspend(black_box(1));
        }
    })
    .map_err(|e| e.to_string())?;
    if co.resume(()) != CoroutineResult::Yield(1) {
        return Err("the coroutine did not yield".into());
    }
    Ok(ctx.time_ns(|| co.resume(())) / 2.0)
}

/// `switch`, `spindle-context` impl: the bare context switch underneath — `Context::resume` into
/// a context that `suspend`s straight back, round trip divided by 2 — on a pooled stack.
pub fn context_switch(ctx: &Ctx) -> Result<f64, String> {
    use spindle_context::{Context, Link, Transfer, suspend};
    extern "C" fn bounce(_: Transfer, link: Link) -> ! {
        loop {
            // SAFETY: entered by `resume` with this link, every time.
            unsafe { suspend(link, black_box(1)) };
        }
    }
    let stack = spindle_stack::StackPool::global()
        .get()
        .map_err(|e| e.to_string())?;
    let (top, size) = (stack.top(), stack.usable_size());
    // SAFETY: the stack is unused and outlives the context (it is dropped at the end of this
    // function, after the last switch; the context holds nothing that needs dropping).
    let fresh = unsafe { Context::new(top, size, bounce) };
    // SAFETY: `Context::new` prepared this stack at `top`.
    let link = unsafe { Link::for_stack(top) };
    // SAFETY: a fresh context on this link's stack.
    let mut context = Some(unsafe { fresh.resume(0, link) }.context);
    let ns = ctx.time_ns(|| {
        let Some(c) = context.take() else { return 0 };
        // SAFETY: `c` is suspended in `bounce`'s `suspend`.
        let t = unsafe { c.resume(0, link) };
        context = Some(t.context);
        t.data
    }) / 2.0;
    drop(stack);
    Ok(ns)
}

/// `create_run_drop`: `Coroutine::new` (a stack from the global pool), run to completion, drop.
pub fn create_run_drop(ctx: &Ctx) -> Result<f64, String> {
    let run_one = || -> Result<usize, String> {
        let mut co = Coroutine::new(|_: &Yielder<(), ()>, ()| black_box(7usize))
            .map_err(|e| e.to_string())?;
        match co.resume(()) {
            CoroutineResult::Return(v) => Ok(v),
            CoroutineResult::Yield(()) => Err("the coroutine yielded".into()),
        }
    };
    if run_one()? != 7 {
        return Err("the coroutine did not run to completion".into());
    }
    Ok(ctx.time_ns(|| run_one().ok()))
}

/// Coroutines that alternate on one region, each holding about `live_bytes` of stack.
const SHARED_COROUTINES: usize = 16;

/// Recurses in 64-byte frames until the stack depth below `top` reaches `live_bytes`, then
/// suspends forever (checking its frames are intact after each resume).
#[inline(never)]
fn hold_depth(y: &Yielder<(), usize>, top: usize, live_bytes: usize, salt: usize) {
    let frame = [salt; 6];
    let frame = black_box(frame);
    let here = &frame as *const _ as usize;
    if top - here + 64 < live_bytes {
        hold_depth(y, top, live_bytes, salt.wrapping_add(1));
    } else {
        loop {
            y.suspend(top - here);
        }
    }
    assert_eq!(frame, [salt; 6]);
}

/// `shared_resume_<live_bytes>`: resume + suspend of a coroutine on a shared (copying) stack
/// whose live stack is about `live_bytes` (or the minimum a coroutine needs, if larger), with
/// [`SHARED_COROUTINES`] of them taking turns on one region, so that every resume saves the
/// previous occupant's bytes and restores its own — what libaco's `aco_resume` figures count as
/// one operation (a resume and the yield back).
pub fn shared_resume(ctx: &Ctx, live_bytes: usize) -> Result<f64, String> {
    let region = SharedStack::new(256 * 1024).map_err(|e| e.to_string())?;
    let top = region.slot().top().as_ptr() as usize;
    let mut coroutines: Vec<_> = (0..SHARED_COROUTINES)
        .map(|k| {
            // SAFETY: the coroutines lend nothing on their stacks to anyone.
            unsafe {
                Coroutine::with_shared_stack(&region, move |y: &Yielder<(), usize>, ()| {
                    hold_depth(y, top, live_bytes, k)
                })
            }
        })
        .collect();
    for co in &mut coroutines {
        co.resume(())
            .into_yield()
            .ok_or("the coroutine did not suspend")?;
    }
    // Report the live size actually used once (to stderr, outside the table).
    let saved = coroutines[0].stack().saved_len();
    if std::env::var_os("SPINDLE_BENCH_VERBOSE").is_some() {
        eprintln!("shared_resume: asked {live_bytes} B, saved {saved} B per coroutine");
    }
    let mut next = 0;
    Ok(ctx.time_ns(|| {
        next = (next + 1) % SHARED_COROUTINES;
        coroutines[next].resume(())
    }))
}

/// `mem_shared_1m`, `mem_shared_10m`: bytes per suspended coroutine, for `count` coroutines on shared stacks,
/// measured from RSS (the `Vec` holding the coroutines included). Runs in a child process.
pub fn mem_shared(_ctx: &Ctx, count: usize) -> Result<f64, String> {
    let region = SharedStack::new(128 * 1024).map_err(|e| e.to_string())?;
    let before = resident_bytes()?;
    let mut coroutines = Vec::with_capacity(count);
    for i in 0..count {
        // SAFETY: the coroutines lend nothing on their stacks to anyone.
        let mut co = unsafe {
            Coroutine::with_shared_stack(&region, move |y: &Yielder<u64, u64>, mut x: u64| {
                loop {
                    x = y.suspend(x.wrapping_add(i as u64));
                }
            })
        };
        co.resume(1)
            .into_yield()
            .ok_or("the coroutine did not suspend")?;
        coroutines.push(co);
    }
    let after = resident_bytes()?;
    if std::env::var_os("SPINDLE_BENCH_VERBOSE").is_some() {
        eprintln!(
            "mem_shared: {} B per Coroutine value, {} B of stack saved per coroutine",
            std::mem::size_of_val(&coroutines[0]),
            coroutines[0].stack().saved_len()
        );
    }
    // Every one of them is alive and resumable.
    let probe = coroutines.len() / 2;
    if coroutines[probe].resume(1).into_yield() != Some(1 + probe as u64) {
        return Err("a suspended coroutine lost its state".into());
    }
    Ok(after.saturating_sub(before) as f64 / count as f64)
}

/// `mem_pooled_30k`: bytes per suspended coroutine, for `count` coroutines on stacks from the
/// global pool, measured from RSS. Runs in a child process.
pub fn mem_pooled(_ctx: &Ctx, count: usize) -> Result<f64, String> {
    let before = resident_bytes()?;
    let mut coroutines = Vec::with_capacity(count);
    for i in 0..count {
        let mut co = Coroutine::new(move |y: &Yielder<u64, u64>, mut x: u64| {
            loop {
                x = y.suspend(x.wrapping_add(i as u64));
            }
        })
        .map_err(|e| e.to_string())?;
        co.resume(1)
            .into_yield()
            .ok_or("the coroutine did not suspend")?;
        coroutines.push(co);
    }
    let after = resident_bytes()?;
    let probe = coroutines.len() / 2;
    if coroutines[probe].resume(1).into_yield() != Some(1 + probe as u64) {
        return Err("a suspended coroutine lost its state".into());
    }
    Ok(after.saturating_sub(before) as f64 / count as f64)
}
