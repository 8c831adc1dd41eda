//! The load client: one thread, epoll (through libc), `N` connections doing ping-pong echo of
//! `S`-byte messages, optionally paced to a fixed offered rate.
//!
//! * Every connection has `TCP_NODELAY` and at most one request in flight: it writes `S` bytes
//!   and waits until `S` bytes came back.
//! * **Unpaced** (peak): a connection sends its next request as soon as the previous response
//!   is complete. Latency is measured from the send.
//! * **Paced** at `R` req/s: request `k` (k = 0, 1, ...) is due at `start + k / R` and goes to
//!   connection `k mod N` — each connection sends every `N / R` seconds, the connections
//!   staggered evenly. A request due while its connection still waits for the previous
//!   response is queued on that connection (at most [`MAX_BACKLOG`]) and sent when the
//!   response arrives. Latency is measured from the **due time**, not the send, so a server
//!   that falls behind shows it in p99 (no coordinated omission).
//! * First a warm-up (nothing recorded), then the measured window; at the window's edges the
//!   caller's `mark` closure runs (the suite reads the server's CPU time there).
//! * The client's idle share is the time it spent inside `epoll_pwait2` during the window
//!   divided by the window: near 0 % means the client, not the server, was the bottleneck.
//!
//! The thread's timer slack is set to 1 ns while it runs (the 50 µs default would bunch the
//! paced sends).

use std::collections::VecDeque;
use std::io::{ErrorKind, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::histogram::Histogram;
use super::sys::TimerSlackGuard;

/// The most requests a paced connection queues while it waits for a response; more are
/// dropped and counted as missed (the achieved rate then falls short of the offered one).
pub const MAX_BACKLOG: usize = 64;

/// What load to apply.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    pub conns: usize,
    pub size: usize,
    /// Offered requests per second over all connections; `None`: as fast as responses come.
    pub rate: Option<f64>,
    pub warmup: Duration,
    pub window: Duration,
}

/// What the client saw in the measured window.
#[derive(Debug, Clone)]
pub struct Report {
    /// Responses completed in the window.
    pub requests: u64,
    /// The window's actual length.
    pub elapsed: Duration,
    pub latency: Histogram,
    /// Time in `epoll_pwait2` / window, in percent.
    pub idle_pct: f64,
    /// Paced: requests that were due but dropped because a connection's backlog was full.
    pub missed: u64,
    /// What `mark` returned at the window's start and end.
    pub marks: (f64, f64),
}

impl Report {
    pub fn achieved_rate(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

struct Conn {
    stream: TcpStream,
    /// Bytes of the current request written / of its response read.
    written: usize,
    read: usize,
    busy: bool,
    /// When the current request was due (ns since the run's start).
    due: u64,
    /// Paced: due times of queued requests.
    backlog: VecDeque<u64>,
    /// The first response of each connection is compared with what was sent.
    checked: bool,
}

/// The message every request sends: a position-dependent pattern.
fn message(size: usize) -> Vec<u8> {
    (0..size).map(|i| (i % 251) as u8).collect()
}

fn epoll_create() -> Result<OwnedFd, String> {
    // SAFETY: epoll_create1 takes flags only.
    let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if fd < 0 {
        return Err(format!(
            "epoll_create1: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: `fd` was just returned by epoll_create1 and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Waits for events at most `timeout_ns`. `epoll_pwait2` (Linux 5.11+) for ns precision;
/// falls back to `epoll_wait` with the timeout rounded up to a millisecond on ENOSYS.
fn wait(ep: &OwnedFd, events: &mut [libc::epoll_event], timeout_ns: u64) -> Result<usize, String> {
    static NO_PWAIT2: AtomicBool = AtomicBool::new(false);
    let max = events.len().min(i32::MAX as usize) as i32;
    loop {
        let no_pwait2 = NO_PWAIT2.load(Ordering::Relaxed);
        let n = if no_pwait2 {
            let ms = timeout_ns.div_ceil(1_000_000).min(i32::MAX as u64) as i32;
            // SAFETY: `events` is valid for `max` entries; `ep` is an epoll fd.
            unsafe { libc::epoll_wait(ep.as_raw_fd(), events.as_mut_ptr(), max, ms) }
        } else {
            let ts = libc::timespec {
                tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
            };
            // SAFETY: `events` is valid for `max` entries, `ts` is a valid timespec, a null
            // sigmask means "do not change it".
            unsafe {
                libc::epoll_pwait2(
                    ep.as_raw_fd(),
                    events.as_mut_ptr(),
                    max,
                    &ts,
                    std::ptr::null(),
                )
            }
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::ENOSYS) if !no_pwait2 => NO_PWAIT2.store(true, Ordering::Relaxed),
            _ => return Err(format!("epoll wait: {e}")),
        }
    }
}

/// Runs the load against `addr` on the calling thread (pin it first). `mark` is called at the
/// start and the end of the measured window.
pub fn run(
    addr: SocketAddr,
    load: &Load,
    mut mark: impl FnMut() -> Result<f64, String>,
) -> Result<Report, String> {
    if load.conns == 0 || load.size == 0 {
        return Err("the load needs at least one connection and one byte".into());
    }
    if load.rate.is_some_and(|r| r.is_nan() || r <= 0.0) {
        return Err("the offered rate must be positive".into());
    }
    let _slack = TimerSlackGuard::fine();
    let msg = message(load.size);
    let mut scratch = vec![0u8; load.size.max(64 * 1024)];

    let ep = epoll_create()?;
    let mut conns = Vec::with_capacity(load.conns);
    for i in 0..load.conns {
        let stream =
            TcpStream::connect(addr).map_err(|e| format!("connection {i} to {addr}: {e}"))?;
        stream
            .set_nodelay(true)
            .and_then(|()| stream.set_nonblocking(true))
            .map_err(|e| format!("connection {i}: {e}"))?;
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32,
            u64: i as u64,
        };
        // SAFETY: both fds are open; `ev` is a valid epoll_event.
        if unsafe {
            libc::epoll_ctl(
                ep.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                stream.as_raw_fd(),
                &mut ev,
            )
        } != 0
        {
            return Err(format!("epoll_ctl: {}", std::io::Error::last_os_error()));
        }
        conns.push(Conn {
            stream,
            written: 0,
            read: 0,
            busy: false,
            due: 0,
            backlog: VecDeque::new(),
            checked: false,
        });
    }
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; load.conns.clamp(1, 1024)];

    let t0 = Instant::now();
    let now_ns = || t0.elapsed().as_nanos() as u64;
    let warm_end = load.warmup.as_nanos() as u64;
    let window_ns = load.window.as_nanos() as u64;
    let period_ns = load.rate.map(|r| 1e9 / r);

    // Measured-window state.
    let mut window_start: Option<u64> = None;
    let mut mark_start = 0.0;
    let mut latency = Histogram::new();
    let mut requests: u64 = 0;
    let mut idle_ns: u64 = 0;
    let mut missed: u64 = 0;

    // Paced: the next request's sequence number.
    let mut next_seq: u64 = 0;
    let due_of = |seq: u64| -> u64 { period_ns.map_or(0, |p| (seq as f64 * p) as u64) };

    // Starts a request on an idle connection: write as much as the socket takes.
    fn start(c: &mut Conn, due: u64, msg: &[u8]) -> Result<(), String> {
        c.busy = true;
        c.due = due;
        c.written = 0;
        c.read = 0;
        push(c, msg)
    }
    fn push(c: &mut Conn, msg: &[u8]) -> Result<(), String> {
        while c.written < msg.len() {
            match c.stream.write(&msg[c.written..]) {
                Ok(0) => return Err("write returned 0".into()),
                Ok(n) => c.written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("write: {e}")),
            }
        }
        Ok(())
    }

    if period_ns.is_none() {
        for c in &mut conns {
            start(c, 0, &msg)?;
        }
    }

    let (marks, elapsed) = loop {
        let now = now_ns();
        match window_start {
            None if now >= warm_end => {
                mark_start = mark()?;
                let ws = now_ns();
                window_start = Some(ws);
                latency = Histogram::new();
                requests = 0;
                idle_ns = 0;
                missed = 0;
            }
            Some(ws) if now >= ws + window_ns => {
                let end = now_ns();
                let m = mark()?;
                break ((mark_start, m), Duration::from_nanos(end - ws));
            }
            _ => {}
        }
        // Paced: hand out every request that is due.
        let mut deadline = match window_start {
            None => warm_end,
            Some(ws) => ws + window_ns,
        };
        if period_ns.is_some() {
            let now = now_ns();
            loop {
                let due = due_of(next_seq);
                if due > now {
                    deadline = deadline.min(due);
                    break;
                }
                let c = &mut conns[(next_seq % load.conns as u64) as usize];
                if !c.busy {
                    start(c, due, &msg)?;
                } else if c.backlog.len() < MAX_BACKLOG {
                    c.backlog.push_back(due);
                } else {
                    missed += 1;
                }
                next_seq += 1;
            }
        }
        let before = now_ns();
        let n = wait(&ep, &mut events, deadline.saturating_sub(before))?;
        let after = now_ns();
        if window_start.is_some() {
            idle_ns += after - before;
        }
        for ev in &events[..n] {
            let flags = ev.events;
            let idx = ev.u64 as usize;
            let c = &mut conns[idx];
            if flags & (libc::EPOLLERR as u32) != 0 {
                let err = c.stream.take_error().ok().flatten();
                return Err(format!("connection {idx}: socket error {err:?}"));
            }
            if flags & (libc::EPOLLOUT as u32) != 0 && c.busy && c.written < msg.len() {
                push(c, &msg)?;
            }
            if flags & ((libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLHUP) as u32) == 0 {
                continue;
            }
            loop {
                let want = scratch.len();
                match c.stream.read(&mut scratch[..want]) {
                    Ok(0) => return Err(format!("connection {idx}: the server closed it")),
                    Ok(n) => {
                        if !c.busy || c.read + n > msg.len() {
                            return Err(format!(
                                "connection {idx}: the server sent more than it was sent"
                            ));
                        }
                        if !c.checked && scratch[..n] != msg[c.read..c.read + n] {
                            return Err(format!(
                                "connection {idx}: the echo differs from what was sent"
                            ));
                        }
                        c.read += n;
                        if c.read < msg.len() {
                            continue;
                        }
                        // The response is complete.
                        c.checked = true;
                        c.busy = false;
                        let t = now_ns();
                        if window_start.is_some() {
                            requests += 1;
                            latency.record(t.saturating_sub(c.due));
                        }
                        if period_ns.is_some() {
                            if let Some(due) = c.backlog.pop_front() {
                                start(c, due, &msg)?;
                            }
                        } else {
                            start(c, t, &msg)?;
                        }
                        // Only one response is ever in flight: nothing more to read now (the
                        // next response's bytes raise a new edge).
                        break;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(format!("connection {idx}: read: {e}")),
                }
            }
        }
    };
    let window = elapsed.as_nanos().max(1) as f64;
    Ok(Report {
        requests,
        elapsed,
        latency,
        idle_pct: 100.0 * idle_ns as f64 / window,
        missed,
        marks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// A thread-per-connection echo server on a free port, left running.
    fn echo_server() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let mut s = s.unwrap();
                s.set_nodelay(true).unwrap();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
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
                });
            }
        });
        addr
    }

    #[test]
    fn paced_load_is_met_and_measured() {
        let addr = echo_server();
        let load = Load {
            conns: 4,
            size: 1000,
            rate: Some(2_000.0),
            warmup: Duration::from_millis(50),
            window: Duration::from_millis(300),
        };
        let mut marks = 0;
        let r = run(addr, &load, || {
            marks += 1;
            Ok(marks as f64)
        })
        .unwrap();
        assert_eq!(r.marks, (1.0, 2.0));
        // 2,000/s for 0.3 s: about 600 responses.
        let rate = r.achieved_rate();
        assert!((1_500.0..=2_300.0).contains(&rate), "{rate} req/s, {r:?}");
        assert_eq!(r.missed, 0);
        assert_eq!(r.latency.count(), r.requests);
        // Mostly idle at this rate (a loaded machine can preempt it, hence the margin).
        assert!(r.idle_pct > 20.0, "{r:?}");
        let p99 = r.latency.percentile(0.99);
        assert!(p99 > 0.0 && p99 < 300e6, "{p99}");
    }

    #[test]
    fn unpaced_load_runs_flat_out() {
        let addr = echo_server();
        let load = Load {
            conns: 2,
            size: 16 * 1024 + 3,
            rate: None,
            warmup: Duration::from_millis(20),
            window: Duration::from_millis(100),
        };
        let r = run(addr, &load, || Ok(0.0)).unwrap();
        assert!(r.requests > 50, "{r:?}");
    }

    #[test]
    fn a_server_that_closes_is_an_error() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in l.incoming() {
                drop(s);
            }
        });
        let load = Load {
            conns: 1,
            size: 10,
            rate: None,
            warmup: Duration::from_millis(10),
            window: Duration::from_millis(100),
        };
        let e = run(addr, &load, || Ok(0.0)).unwrap_err();
        assert!(
            e.contains("closed") || e.contains("reset") || e.contains("error"),
            "{e}"
        );
    }
}
