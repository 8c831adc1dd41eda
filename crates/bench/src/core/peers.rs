//! Peer impls of the `core` suite: corosensei, generator, std threads.

use std::hint::black_box;

use corosensei::stack::DefaultStack;
use corosensei::{Coroutine, CoroutineResult, Yielder};
use generator::Gn;

use super::STACK_SIZE;
use crate::harness::Ctx;

/// `switch`: one resume + suspend round trip of a corosensei coroutine, divided by 2.
pub fn corosensei_switch(ctx: &Ctx) -> Result<f64, String> {
    let mut co: Coroutine<(), usize, ()> = Coroutine::new(|y: &Yielder<(), usize>, ()| {
        loop {
            y.suspend(black_box(1));
        }
    });
    if !matches!(co.resume(()), CoroutineResult::Yield(1)) {
        return Err("corosensei coroutine did not yield".into());
    }
    Ok(ctx.time_ns(|| co.resume(())) / 2.0)
}

/// `switch`: one resume + yield round trip of a `generator` (generator-rs) generator, divided
/// by 2.
pub fn generator_switch(ctx: &Ctx) -> Result<f64, String> {
    let mut g = Gn::<()>::new_scoped_local(|mut s| {
        loop {
            s.yield_with(black_box(1usize));
        }
    });
    if g.resume() != Some(1) {
        return Err("generator did not yield".into());
    }
    Ok(ctx.time_ns(|| g.resume()) / 2.0)
}

/// `create_run_drop`: create a corosensei coroutine on a preallocated stack, run it to
/// completion, drop it. The stack (a `DefaultStack` of [`STACK_SIZE`] bytes) is reused: each
/// coroutine gets it by value and `Coroutine::into_stack` (which consumes the finished
/// coroutine) hands it back for the next one.
pub fn corosensei_create_run_drop(ctx: &Ctx) -> Result<f64, String> {
    let stack =
        DefaultStack::new(STACK_SIZE).map_err(|e| format!("corosensei DefaultStack: {e}"))?;
    let mut slot = Some(stack);
    let mut run_one = || {
        let stack = slot.take()?;
        let mut co = Coroutine::with_stack(stack, |_: &Yielder<(), ()>, ()| black_box(7usize));
        let v = match co.resume(()) {
            CoroutineResult::Return(v) => v,
            CoroutineResult::Yield(()) => 0,
        };
        slot = Some(co.into_stack());
        Some(v)
    };
    if run_one() != Some(7) {
        return Err("corosensei coroutine did not run to completion".into());
    }
    Ok(ctx.time_ns(run_one))
}

/// `create_run_drop`: `std::thread::spawn` + `join` of a thread that returns at once.
pub fn std_thread_spawn_join(ctx: &Ctx) -> Result<f64, String> {
    let spawn_join = || std::thread::spawn(|| black_box(7usize)).join().ok();
    if spawn_join() != Some(7) {
        return Err("spawned thread did not return its value".into());
    }
    Ok(ctx.time_ns(spawn_join))
}
