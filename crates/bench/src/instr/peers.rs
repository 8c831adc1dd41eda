//! Peer impls of the `instr` suite: corosensei, tokio's current-thread runtime, parking_lot.
//! Each runs its operation `n` times (see `super`).

use std::hint::black_box;

use corosensei::stack::DefaultStack;
use corosensei::{Coroutine, CoroutineResult, Yielder};

use super::{STACK_SIZE, YIELD_TASKS};

pub fn corosensei_switch(n: u64) -> Result<(), String> {
    let mut co: Coroutine<(), usize, ()> = Coroutine::new(|y: &Yielder<(), usize>, ()| {
        loop {
            y.suspend(black_box(1));
        }
    });
    for _ in 0..n {
        if !matches!(co.resume(()), CoroutineResult::Yield(1)) {
            return Err("corosensei coroutine did not yield".into());
        }
    }
    Ok(())
}

/// As `core`'s `create_run_drop`: one `DefaultStack` reused through `Coroutine::into_stack`.
pub fn corosensei_create_run_drop(n: u64) -> Result<(), String> {
    let mut stack =
        DefaultStack::new(STACK_SIZE).map_err(|e| format!("corosensei DefaultStack: {e}"))?;
    for _ in 0..n {
        let mut co = Coroutine::with_stack(stack, |_: &Yielder<(), ()>, ()| black_box(7usize));
        if !matches!(co.resume(()), CoroutineResult::Return(7)) {
            return Err("corosensei coroutine did not run to completion".into());
        }
        stack = co.into_stack();
    }
    Ok(())
}

fn tokio_ct() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))
}

fn join_err(e: tokio::task::JoinError) -> String {
    format!("task failed: {e}")
}

pub fn tokio_yield_many(n: u64) -> Result<(), String> {
    tokio_ct()?.block_on(async {
        let per_task = n / YIELD_TASKS;
        let handles: Vec<_> = (0..YIELD_TASKS)
            .map(|_| {
                tokio::spawn(async move {
                    for _ in 0..per_task {
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        for h in handles {
            h.await.map_err(join_err)?;
        }
        Ok(())
    })
}

pub fn tokio_ping_pong(n: u64) -> Result<(), String> {
    use tokio::sync::oneshot;
    tokio_ct()?.block_on(async {
        for _ in 0..n {
            let pinger = tokio::spawn(async {
                let (ping_tx, ping_rx) = oneshot::channel::<()>();
                let (pong_tx, pong_rx) = oneshot::channel::<()>();
                tokio::spawn(async move {
                    if ping_rx.await.is_ok() {
                        let _ = pong_tx.send(());
                    }
                });
                ping_tx.send(()).map_err(|()| "ping: partner gone")?;
                pong_rx.await.map_err(|_| "pong: partner gone")
            });
            pinger.await.map_err(join_err)??;
        }
        Ok(())
    })
}

pub fn parking_lot_mutex_uncontended(n: u64) -> Result<(), String> {
    let m = parking_lot::Mutex::new(0u64);
    for _ in 0..n {
        *black_box(&m).lock() += 1;
    }
    if m.into_inner() == n {
        Ok(())
    } else {
        Err("the mutex lost an increment".into())
    }
}

pub fn tokio_chan_ping_pong(n: u64) -> Result<(), String> {
    tokio_ct()?.block_on(async {
        let (ping_tx, mut ping_rx) = tokio::sync::mpsc::channel::<u64>(1);
        let (pong_tx, mut pong_rx) = tokio::sync::mpsc::channel::<u64>(1);
        let partner = tokio::spawn(async move {
            while let Some(x) = ping_rx.recv().await {
                if pong_tx.send(x).await.is_err() {
                    break;
                }
            }
        });
        for i in 0..n {
            ping_tx.send(i).await.map_err(|_| "ping: partner gone")?;
            let back = pong_rx.recv().await.ok_or("pong: partner gone")?;
            if back != i {
                return Err(format!("pong {back}, expected {i}"));
            }
        }
        drop(ping_tx);
        partner.await.map_err(join_err)
    })
}

pub fn tokio_chan_mpsc_4x1(n: u64) -> Result<(), String> {
    tokio_ct()?
        .block_on(crate::sync::peers::tokio_mpsc_4x1_task(n))
        .map(drop)
}
