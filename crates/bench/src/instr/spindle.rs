//! Spindle's impls of the `instr` suite: each runs its operation `n` times (see `super`).

use std::hint::black_box;

use spindle_coro::{Coroutine, CoroutineResult, Yielder};
use spindle_rt::Runtime;
use spindle_sync::{Mutex, mpsc, oneshot};

use super::YIELD_TASKS;

fn runtime() -> Result<Runtime, String> {
    Runtime::builder()
        .workers(1)
        .stuck_threshold(None)
        .build()
        .map_err(|e| e.to_string())
}

fn join<T: Send + 'static>(h: spindle_rt::JoinHandle<T>) -> Result<T, String> {
    h.join().map_err(|e| format!("coroutine failed: {e}"))
}

pub fn switch(n: u64) -> Result<(), String> {
    let mut co = Coroutine::new(|y: &Yielder<(), usize>, ()| {
        loop {
            y.suspend(black_box(1));
        }
    })
    .map_err(|e| e.to_string())?;
    for _ in 0..n {
        if co.resume(()) != CoroutineResult::Yield(1) {
            return Err("the coroutine did not yield".into());
        }
    }
    Ok(())
}

pub fn create_run_drop(n: u64) -> Result<(), String> {
    for _ in 0..n {
        let mut co = Coroutine::new(|_: &Yielder<(), ()>, ()| black_box(7usize))
            .map_err(|e| e.to_string())?;
        if co.resume(()) != CoroutineResult::Return(7) {
            return Err("the coroutine did not run to completion".into());
        }
    }
    Ok(())
}

pub fn yield_many(n: u64) -> Result<(), String> {
    let rt = runtime()?;
    rt.block_on(|| {
        let per_task = n / YIELD_TASKS;
        let handles: Vec<_> = (0..YIELD_TASKS)
            .map(|_| {
                spindle_rt::spawn(move || {
                    for _ in 0..per_task {
                        spindle_rt::yield_now();
                    }
                })
            })
            .collect();
        handles.into_iter().try_for_each(join)
    })
}

pub fn ping_pong(n: u64) -> Result<(), String> {
    let rt = runtime()?;
    rt.block_on(|| {
        for _ in 0..n {
            let pinger = spindle_rt::spawn(|| {
                let (ping_tx, ping_rx) = oneshot::channel::<()>();
                let (pong_tx, pong_rx) = oneshot::channel::<()>();
                spindle_rt::spawn(move || {
                    if ping_rx.recv().is_ok() {
                        let _ = pong_tx.send(());
                    }
                });
                ping_tx.send(()).map_err(|_| "ping: partner gone")?;
                pong_rx.recv().map_err(|_| "pong: partner gone")
            });
            join(pinger)??;
        }
        Ok(())
    })
}

pub fn mutex_uncontended(n: u64) -> Result<(), String> {
    let m = Mutex::new(0u64);
    for _ in 0..n {
        *black_box(&m).lock() += 1;
    }
    if m.into_inner() == n {
        Ok(())
    } else {
        Err("the mutex lost an increment".into())
    }
}

pub fn chan_ping_pong(n: u64) -> Result<(), String> {
    let rt = runtime()?;
    rt.block_on(|| {
        let (ping_tx, ping_rx) = mpsc::bounded::<u64>(1);
        let (pong_tx, pong_rx) = mpsc::bounded::<u64>(1);
        let partner = spindle_rt::spawn(move || {
            while let Ok(x) = ping_rx.recv() {
                if pong_tx.send(x).is_err() {
                    break;
                }
            }
        });
        for i in 0..n {
            ping_tx.send(i).map_err(|_| "ping: partner gone")?;
            let back = pong_rx.recv().map_err(|_| "pong: partner gone")?;
            if back != i {
                return Err(format!("pong {back}, expected {i}"));
            }
        }
        drop(ping_tx);
        join(partner)
    })
}

pub fn chan_mpsc_4x1(n: u64) -> Result<(), String> {
    runtime()?
        .block_on(|| crate::sync::spindle::mpsc_4x1_in_runtime(n))
        .map(drop)
}
