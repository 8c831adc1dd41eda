//! The `hook` suite: what interposing the blocking libc calls (`spindle-hook`) buys and costs.
//!
//! The `spindle-hook` rows run in a copy of this binary built with the `hook` feature
//! (`spindle-hook/interpose`: the libc calls are interposed in that executable only), which
//! enables the hook before measuring; this binary itself interposes nothing, so its rows are
//! the plain C library's. Bench and impl names are the report's keys: do not rename them.
//!
//! * `stall_worst_gap` (ms), `passthrough_read` (ns): see their functions.
//! * `std_echo_cpu_1024_r80k` (cpu_us_per_req): the `io` suite's `echo_cpu_1024_r80k` run
//!   (same client on its own core, 50 connections, 1 KiB messages paced to 80,000 req/s, the
//!   server's CPU time per request) against two servers on the same one-worker epoll runtime:
//!   `spindle-hook-std`, written with `std::net` only and run by the hook build (`serve
//!   hook-std`), and `spindle-io`, the `io` suite's `spindle-epoll` on `spindle_io`'s types.
//! * `http_client_1000` (ms): see [`http_client`].

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
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
        about: "interposed blocking calls: a stalled worker's worst tick gap, pass-through cost, a std echo server's CPU per request, 1,000 HTTP clients' wall time",
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
            Bench {
                name: "std_echo_cpu_1024_r80k",
                unit: Unit::CpuUsPerReq,
                reference: Some("spindle-io"),
                published: &[],
                full_only: false,
                impls: vec![
                    Impl::in_process("spindle-hook-std", std_echo_hook),
                    Impl::in_process("spindle-io", std_echo_spindle_io),
                ],
            },
            Bench {
                name: "http_client_1000",
                unit: Unit::Ms,
                reference: Some("spindle"),
                published: &[],
                full_only: false,
                impls: vec![
                    Impl::in_process("spindle", http_client),
                    Impl::variant("spindle-hook", &harness::HOOK),
                ],
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

/// `std_echo_cpu_1024_r80k`, `spindle-hook-std`: the `hook-std` server of the hook build.
fn std_echo_hook(ctx: &Ctx) -> Result<f64, String> {
    let exe = if cfg!(feature = "hook") {
        None
    } else {
        Some(harness::variant_binary(&harness::HOOK)?)
    };
    crate::io::echo_cpu_1024_r80k("std_echo_cpu_1024_r80k", "hook-std", exe.as_deref(), ctx)
}

/// `std_echo_cpu_1024_r80k`, `spindle-io`: the `io` suite's `spindle-epoll` server.
fn std_echo_spindle_io(ctx: &Ctx) -> Result<f64, String> {
    crate::io::echo_cpu_1024_r80k("std_echo_cpu_1024_r80k", "spindle-epoll", None, ctx)
}

/// How long the `http_client_1000` server waits before it answers.
const HTTP_DELAY: Duration = Duration::from_millis(100);

/// `http_client_1000` (ms): the wall time of `n` coroutines on a 2-worker runtime, each making
/// one GET with `ureq` (one agent shared by all) against a local server that answers after
/// 100 ms: `n` = 1,000 in the hook build (`spindle-hook`), 20 without the hook (`spindle`:
/// each request holds its worker for the delay, so 2 workers serve them 2 at a time). From the
/// first spawn until every response has been read and checked.
///
/// The server is a `spindle_io` one on a runtime of its own with one worker (one coroutine per
/// connection, `spindle_rt::sleep` for the delay: 1,000 connections held cheaply; its sockets
/// are non-blocking, so the hook leaves them alone).
fn http_client(ctx: &Ctx) -> Result<f64, String> {
    let _ = ctx;
    enable_hook()?;
    let requests = if cfg!(feature = "hook") { 1000 } else { 20 };
    let server_rt = spindle_rt::Runtime::builder()
        .workers(1)
        .build()
        .map_err(|e| e.to_string())?;
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let server = {
        let stop = stop.clone();
        server_rt.spawn(move || -> Result<(), String> {
            let l = spindle_io::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
            let _ = tx.send(l.local_addr().map_err(|e| e.to_string())?);
            while !stop.load(Ordering::Relaxed) {
                let (s, _) = l.accept().map_err(|e| e.to_string())?;
                drop(spindle_rt::spawn(move || slow_answer(s)));
            }
            Ok(())
        })
    };
    let addr = rx
        .recv_timeout(Duration::from_secs(10))
        .map_err(|_| "the HTTP server did not start".to_string())?;
    let rt = spindle_rt::Runtime::builder()
        .workers(2)
        .build()
        .map_err(|e| e.to_string())?;
    let agent = ureq::Agent::new_with_defaults();
    let start = Instant::now();
    let clients: Vec<_> = (0..requests)
        .map(|i| {
            let agent = agent.clone();
            let url = format!("http://{addr}/item/{i}");
            rt.spawn(move || -> Result<(), String> {
                let mut response = agent.get(&url).call().map_err(|e| e.to_string())?;
                let body = response
                    .body_mut()
                    .read_to_string()
                    .map_err(|e| e.to_string())?;
                if body != format!("item {i}") {
                    return Err(format!("GET {url} returned {body:?}"));
                }
                Ok(())
            })
        })
        .collect();
    let mut failed = None;
    for c in clients {
        if let Err(e) = c.join().map_err(|e| e.to_string()).and_then(|r| r) {
            failed.get_or_insert(e);
        }
    }
    let took = start.elapsed();
    // Wake the accept loop to see the stop flag.
    stop.store(true, Ordering::Relaxed);
    drop(TcpStream::connect(addr));
    server.join().map_err(|e| e.to_string())??;
    match failed {
        Some(e) => Err(e),
        None => Ok(took.as_secs_f64() * 1e3),
    }
}

/// One connection of the `http_client_1000` server: reads a GET, waits [`HTTP_DELAY`], answers
/// `item <n>` for `/item/<n>` and closes.
fn slow_answer(mut s: spindle_io::net::TcpStream) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    let path = head.split(' ').nth(1).unwrap_or("/");
    let body = format!("item {}", path.rsplit('/').next().unwrap_or(""));
    spindle_rt::sleep(HTTP_DELAY);
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = s.write_all(response.as_bytes());
}
