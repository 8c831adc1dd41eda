//! The `hook` suite: what interposing the blocking libc calls (`spindle-hook`) buys and costs.
//!
//! The `spindle-hook` rows run in a copy of this binary built with the `hook` feature
//! (`spindle-hook/interpose`: the libc calls are interposed in that executable only), which
//! enables the hook before measuring; this binary itself interposes nothing, so its rows are
//! the plain C library's. Bench and impl names are the report's keys: do not rename them.

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::harness::{self, Bench, Ctx, Impl, Suite, Unit};

pub fn suite() -> Suite {
    // The impl a `spindle-hook` row runs in the hook build; listed only there, so that this
    // binary's table shows the rows the report names.
    let in_hook_build = |name: &'static str, f: harness::MeasureFn| {
        cfg!(feature = "hook").then(|| Impl::in_process(name, f))
    };
    Suite {
        name: "hook",
        about: "interposed blocking calls: a stalled worker's worst tick gap, pass-through cost",
        benches: vec![
            Bench {
                name: "stall_worst_gap",
                unit: Unit::Ms,
                reference: Some("spindle"),
                published: &[],
                full_only: false,
                impls: vec![
                    Impl::in_process("spindle", stall_worst_gap),
                    Impl::variant("spindle-hook", &harness::HOOK),
                ],
            },
            Bench {
                name: "passthrough_read",
                unit: Unit::Ns,
                reference: Some("libc"),
                published: &[],
                full_only: false,
                impls: [
                    Some(Impl::in_process("libc", passthrough_read)),
                    Some(Impl::variant("spindle-hook", &harness::HOOK)),
                    in_hook_build("spindle", passthrough_read),
                ]
                .into_iter()
                .flatten()
                .collect(),
            },
        ],
    }
}

/// Turns the hook on in the hook build; nothing elsewhere.
fn enable_hook() -> Result<(), String> {
    #[cfg(feature = "hook")]
    spindle_hook::enable().map_err(|e| e.to_string())?;
    Ok(())
}

/// `stall_worst_gap` (ms): a 2-worker runtime, 100 coroutines each sleeping 1 ms in a loop;
/// after 100 ms one coroutine calls `std::thread::sleep(500 ms)`, then reads a
/// `std::net::TcpStream` with a 500 ms read timeout on a connection that never sends. The
/// value is the longest gap any ticker saw between two ticks from the start of that coroutine
/// until the tickers stop.
fn stall_worst_gap(ctx: &Ctx) -> Result<f64, String> {
    let _ = ctx;
    enable_hook()?;
    let rt = spindle_rt::Runtime::builder()
        .workers(2)
        .build()
        .map_err(|e| e.to_string())?;
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let stop = Arc::new(AtomicBool::new(false));
    let worst = Arc::new(AtomicU64::new(0));
    let tickers: Vec<_> = (0..100)
        .map(|_| {
            let (stop, worst) = (stop.clone(), worst.clone());
            rt.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let t0 = Instant::now();
                    spindle_rt::sleep(Duration::from_millis(1));
                    worst.fetch_max(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    worst.store(0, Ordering::Relaxed);
    let blocker = rt.spawn(move || -> Result<(), String> {
        std::thread::sleep(Duration::from_millis(500));
        let mut s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .map_err(|e| e.to_string())?;
        match s.read(&mut [0u8; 16]) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
            other => Err(format!("the silent read returned {other:?}")),
        }
    });
    let blocked = blocker.join().map_err(|e| e.to_string())?;
    stop.store(true, Ordering::Relaxed);
    // Read once every ticker has ended: a ticker stalled behind the blocking coroutine records
    // its gap only when it runs again.
    for t in tickers {
        t.join().map_err(|e| e.to_string())?;
    }
    let gap = worst.load(Ordering::Relaxed);
    blocked?;
    Ok(gap as f64 / 1e6)
}

/// `passthrough_read` (ns): a `read` of 8 bytes from an eventfd (semaphore mode, so each read
/// succeeds at once) on a plain thread, outside any runtime: in the hook build through the
/// interposed `read` (enabled), else glibc's.
fn passthrough_read(ctx: &Ctx) -> Result<f64, String> {
    enable_hook()?;
    // SAFETY: plain call.
    let fd = unsafe { libc::eventfd(u32::MAX, libc::EFD_SEMAPHORE | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(format!("eventfd: {}", std::io::Error::last_os_error()));
    }
    let mut value = 0u64;
    let ns = ctx.time_ns(|| {
        // SAFETY: `value` is 8 writable bytes; `fd` is open.
        unsafe { libc::read(fd, (&raw mut value).cast(), 8) }
    });
    // SAFETY: ours, open.
    unsafe { libc::close(fd) };
    Ok(ns)
}
