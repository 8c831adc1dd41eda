//! The servers: `spindle-bench serve <impl> --cpu <n>` runs one, pinned to CPU `n` (every
//! thread it starts inherits the pin), on a free loopback port, prints `port=<n>` and serves
//! until killed.
//!
//! Echo servers (every one reads into a 16 KiB buffer and writes back what it read, with
//! `TCP_NODELAY` on each accepted connection):
//! * `spindle-epoll`, `spindle-uring`: a `spindle_rt` runtime with one worker and that IO
//!   backend; the accept loop runs in the root coroutine (`block_on`) and spawns one coroutine
//!   per connection doing blocking-style `read` / `write_all` on `spindle_io::net::TcpStream`.
//! * `tokio-ct`: tokio's current-thread runtime (`tokio::net`, one task per connection).
//! * `may`: may with one worker (its own core pinning off: the process is pinned already), one
//!   coroutine per connection, `may::net`.
//! * `thread-per-conn`: `std::net`, one OS thread per connection.
//! * `hook-std`: `std::net` only, one coroutine per connection on the runtime of
//!   `spindle-epoll`, with `spindle-hook` making its blocking calls cooperative (in the bench
//!   binary built with the `hook` feature only; the `hook` suite's `std_echo_cpu_1024_r80k`).
//!
//! HTTP servers (`http-<impl>`: Spindle on either backend, hyper on tokio, may_minihttp): see
//! [`super::http`].

use std::io::{self, Read, Write};
use std::sync::Arc;

use spindle_rt::{BuildError, DriverFactory, IoBackend, Runtime};

use super::http;
use super::sys;

/// Per-connection read buffer of every echo server.
pub const BUF: usize = 16 * 1024;

/// Which Spindle IO backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Epoll,
    Uring,
}

impl Backend {
    /// What `Runtime::io_backend` says for it.
    fn runtime_name(self) -> &'static str {
        match self {
            Backend::Epoll => "epoll",
            Backend::Uring => "io_uring",
        }
    }
}

/// A one-worker Spindle runtime on `backend`, checked to run that backend (an explicitly
/// chosen backend never falls back, but a row must measure what its name says).
///
/// Errors start with `unavailable:` when this build or kernel lacks the backend.
pub fn spindle_runtime(backend: Backend) -> Result<Runtime, String> {
    let io = match backend {
        Backend::Epoll => IoBackend::Epoll,
        Backend::Uring => IoBackend::IoUring,
    };
    let built = Runtime::builder().workers(1).io(io).build();
    let rt = match built {
        Ok(rt) => rt,
        // Stopgap while `spindle-rt` is built without its `io-epoll` feature: the same driver
        // through `IoBackend::Custom`. The runtime then reports the backend as "custom".
        Err(BuildError::Io(_)) if backend == Backend::Epoll => {
            let factory: DriverFactory = Arc::new(|| {
                Ok(Box::new(spindle_io_epoll::EpollDriver::new()?) as Box<dyn spindle_io::Driver>)
            });
            let rt = Runtime::builder()
                .workers(1)
                .io(IoBackend::Custom(factory))
                .build()
                .map_err(|e| format!("unavailable: {e}"))?;
            return Ok(rt);
        }
        Err(e) => return Err(format!("unavailable: {e}")),
    };
    if rt.io_backend() != backend.runtime_name() {
        return Err(format!(
            "unavailable: asked for the {} backend, the runtime runs {}",
            backend.runtime_name(),
            rt.io_backend()
        ));
    }
    Ok(rt)
}

/// The echo loop of the blocking-style servers.
fn echo<S: Read + Write>(mut s: S) {
    let mut buf = vec![0u8; BUF];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if s.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
}

/// Prints an accept error once in a while (e.g. EMFILE) and backs off a little.
fn accept_failed(e: &io::Error) {
    eprintln!("accept: {e}");
    std::thread::sleep(std::time::Duration::from_millis(10));
}

/// A Spindle server: `conn` runs in its own coroutine for each accepted connection.
pub fn spindle_server(
    backend: Backend,
    ready: impl FnOnce(u16) + Send,
    conn: fn(spindle_io::net::TcpStream),
) -> Result<(), String> {
    let rt = spindle_runtime(backend)?;
    rt.block_on(move || -> Result<(), String> {
        let l = spindle_io::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        ready(l.local_addr().map_err(|e| e.to_string())?.port());
        loop {
            match l.accept() {
                Ok((s, _)) => {
                    if let Err(e) = s.set_nodelay(true) {
                        eprintln!("set_nodelay: {e}");
                    }
                    drop(spindle_rt::spawn(move || conn(s)));
                }
                Err(e) => accept_failed(&e),
            }
        }
    })
}

pub fn spindle_echo(backend: Backend, ready: impl FnOnce(u16) + Send) -> Result<(), String> {
    spindle_server(backend, ready, echo)
}

pub(super) fn tokio_ct() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))
}

pub fn tokio_echo(ready: impl FnOnce(u16)) -> Result<(), String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    tokio_ct()?.block_on(async move {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| e.to_string())?;
        ready(l.local_addr().map_err(|e| e.to_string())?.port());
        loop {
            let mut s = match l.accept().await {
                Ok((s, _)) => s,
                Err(e) => {
                    accept_failed(&e);
                    continue;
                }
            };
            if let Err(e) = s.set_nodelay(true) {
                eprintln!("set_nodelay: {e}");
            }
            tokio::spawn(async move {
                let mut buf = vec![0u8; BUF];
                loop {
                    let n = match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if s.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    })
}

/// Spawns a may coroutine.
fn may_go(f: impl FnOnce() + Send + 'static) {
    // SAFETY: `may::coroutine::spawn` is unsafe because a coroutine may move between worker
    // threads at a blocking point (breaking thread-locals held across it) and because a
    // thread-blocking call stalls its worker. With one worker nothing migrates; the closures
    // of this module hold no thread-local and block only in may's own socket calls.
    drop(unsafe { may::coroutine::spawn(f) });
}

pub fn may_echo(ready: impl FnOnce(u16)) -> Result<(), String> {
    may::config().set_workers(1);
    may::config().set_worker_pin(false);
    let l = may::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    ready(l.local_addr().map_err(|e| e.to_string())?.port());
    let (done_tx, done_rx) = std::sync::mpsc::channel::<String>();
    may_go(move || {
        loop {
            match l.accept() {
                Ok((s, _)) => {
                    if let Err(e) = s.set_nodelay(true) {
                        eprintln!("set_nodelay: {e}");
                    }
                    may_go(move || echo(s));
                }
                Err(e) => {
                    if done_tx.send(format!("accept: {e}")).is_err() {
                        return;
                    }
                    may::coroutine::sleep(std::time::Duration::from_millis(10));
                }
            }
        }
    });
    // The accept loop never ends; report its errors from here.
    for e in done_rx {
        eprintln!("{e}");
    }
    Ok(())
}

pub fn thread_echo(ready: impl FnOnce(u16)) -> Result<(), String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    ready(l.local_addr().map_err(|e| e.to_string())?.port());
    loop {
        match l.accept() {
            Ok((s, _)) => {
                if let Err(e) = s.set_nodelay(true) {
                    eprintln!("set_nodelay: {e}");
                }
                if let Err(e) = std::thread::Builder::new()
                    .stack_size(64 * 1024)
                    .spawn(move || echo(s))
                {
                    eprintln!("thread spawn: {e}");
                }
            }
            Err(e) => accept_failed(&e),
        }
    }
}

/// `hook-std`: an echo server written with `std::net` only — one coroutine per connection on
/// a one-worker runtime on epoll, as `spindle-epoll` — made cooperative by `spindle-hook`.
/// Only in the bench binary built with the `hook` feature.
pub fn hook_std_echo(ready: impl FnOnce(u16) + Send) -> Result<(), String> {
    #[cfg(not(feature = "hook"))]
    {
        let _ = ready;
        Err(
            "the `hook-std` server needs the bench binary built with the `hook` feature \
             (`cargo xtask bench hook` builds it)"
                .into(),
        )
    }
    #[cfg(feature = "hook")]
    {
        spindle_hook::enable().map_err(|e| e.to_string())?;
        let rt = spindle_runtime(Backend::Epoll)?;
        rt.block_on(move || -> Result<(), String> {
            let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
            ready(l.local_addr().map_err(|e| e.to_string())?.port());
            loop {
                match l.accept() {
                    Ok((s, _)) => {
                        if let Err(e) = s.set_nodelay(true) {
                            eprintln!("set_nodelay: {e}");
                        }
                        drop(spindle_rt::spawn(move || echo(s)));
                    }
                    Err(e) => accept_failed(&e),
                }
            }
        })
    }
}

/// Every server `serve` knows.
pub const SERVERS: [&str; 10] = [
    "spindle-epoll",
    "spindle-uring",
    "tokio-ct",
    "may",
    "thread-per-conn",
    "http-spindle-epoll",
    "http-spindle-uring",
    "http-hyper-tokio-ct",
    "hook-std",
    "http-may-minihttp",
];

/// Runs server `kind`, calling `ready(port)` once it listens. Returns only on error.
pub fn run_server(kind: &str, ready: impl FnOnce(u16) + Send) -> Result<(), String> {
    match kind {
        "spindle-epoll" => spindle_echo(Backend::Epoll, ready),
        "spindle-uring" => spindle_echo(Backend::Uring, ready),
        "tokio-ct" => tokio_echo(ready),
        "may" => may_echo(ready),
        "thread-per-conn" => thread_echo(ready),
        "http-spindle-epoll" => spindle_server(Backend::Epoll, ready, http::spindle_conn),
        "http-spindle-uring" => spindle_server(Backend::Uring, ready, http::spindle_conn),
        "http-hyper-tokio-ct" => http::hyper_server(ready),
        "hook-std" => hook_std_echo(ready),
        "http-may-minihttp" => http::may_minihttp_server(ready),
        other => Err(format!(
            "unknown server `{other}` (servers: {})",
            SERVERS.join(", ")
        )),
    }
}

/// `spindle-bench serve <impl> [--cpu N]`.
pub fn serve_main(args: &[String]) -> Result<std::process::ExitCode, String> {
    let (kind, cpu) = match args {
        [kind] => (kind.as_str(), None),
        [kind, flag, cpu] if flag == "--cpu" => (
            kind.as_str(),
            Some(
                cpu.parse::<usize>()
                    .map_err(|_| format!("serve: --cpu {cpu}: not a number"))?,
            ),
        ),
        _ => return Err("usage: spindle-bench serve <impl> [--cpu N]".into()),
    };
    sys::die_with_parent();
    if let Some(cpu) = cpu {
        sys::pin_thread(cpu)?;
    }
    run_server(kind, |port| {
        println!("port={port}");
        let _ = io::stdout().flush();
    })?;
    Ok(std::process::ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{SocketAddr, TcpStream};
    use std::time::Duration;

    /// Starts server `kind` on a thread of this process (left running); returns its address.
    pub fn start_in_thread(kind: &'static str) -> SocketAddr {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let tx2 = tx.clone();
            if let Err(e) = run_server(kind, move |port| drop(tx2.send(Ok(port)))) {
                let _ = tx.send(Err(e));
            }
        });
        let port = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the server starts")
            .expect("the server runs");
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn check_echo(addr: SocketAddr) {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        for size in [1, 1000, 40_000] {
            let msg: Vec<u8> = (0..size).map(|i| (i * 7) as u8).collect();
            s.write_all(&msg).unwrap();
            let mut back = vec![0u8; size];
            s.read_exact(&mut back).unwrap();
            assert_eq!(back, msg);
        }
    }

    #[test]
    fn spindle_epoll_echoes() {
        check_echo(start_in_thread("spindle-epoll"));
    }

    #[test]
    fn tokio_echoes() {
        check_echo(start_in_thread("tokio-ct"));
    }

    #[test]
    fn threads_echo() {
        check_echo(start_in_thread("thread-per-conn"));
    }

    /// Outside the hook build the std server would block its only worker: it refuses to run.
    #[cfg(not(feature = "hook"))]
    #[test]
    fn hook_std_needs_the_hook_build() {
        let e = run_server("hook-std", |_| panic!("it must not listen")).unwrap_err();
        assert!(e.contains("`hook` feature"), "{e}");
    }

    #[test]
    fn unknown_server_is_an_error() {
        assert!(run_server("nope", |_| {}).is_err());
    }
}
