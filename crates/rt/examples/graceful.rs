//! Graceful shutdown on SIGINT/SIGTERM: stop accepting, let the requests in flight finish
//! within a deadline, cancel what is left, exit.
//!
//! ```text
//! cargo run -p spindle-rt --example graceful -- 127.0.0.1:7000 2000
//! printf 'sleep 500\n' | nc 127.0.0.1 7000   # "working", then "done 500"
//! kill -TERM <pid>                             # in-flight requests finish, then it exits
//! ```
//!
//! The protocol: a client sends `sleep N` lines; the server answers `working` at once and
//! `done N` after N ms.
//!
//! The signal side is the self-pipe pattern: the handler only `write(2)`s one byte to a
//! non-blocking pipe (async-signal-safe: no locks, no allocation), and a coroutine reading the
//! other end turns it into an ordinary event. No signal-handling crate is needed; the same
//! works with `signal-hook`'s pipe or `signalfd(2)`.

#![cfg_attr(not(unix), allow(unused))]

#[cfg(unix)]
pub use imp::*;

#[cfg(unix)]
mod imp {
    use std::io::{self, BufRead, BufReader, Read, Write};
    use std::os::fd::IntoRawFd;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    use spindle_io::PipeReader;
    use spindle_io::net::{TcpListener, TcpStream};

    /// The write end of the self-pipe, for the signal handler (-1: not installed). Global because
    /// a signal handler can reach nothing else.
    static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);

    extern "C" fn on_signal(signal: libc::c_int) {
        // Async-signal-safe: an atomic load and write(2); errno is saved and restored so the
        // interrupted code does not see it change.
        // SAFETY: errno_slot returns this thread's errno slot.
        let errno = unsafe { *errno_slot() };
        let fd = SIGNAL_PIPE.load(Ordering::Relaxed);
        if fd >= 0 {
            let byte = signal as u8;
            // SAFETY: writes one byte from a valid local to an open descriptor; a full pipe
            // (EAGAIN: a shutdown is already pending) is fine to ignore.
            unsafe { libc::write(fd, (&byte as *const u8).cast(), 1) };
        }
        // SAFETY: as above.
        unsafe { *errno_slot() = errno };
    }

    /// This thread's `errno`.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn errno_slot() -> *mut libc::c_int {
        // SAFETY: no preconditions; the pointer is valid for the calling thread's life.
        unsafe { libc::__errno_location() }
    }

    /// This thread's `errno`.
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn errno_slot() -> *mut libc::c_int {
        // SAFETY: no preconditions; the pointer is valid for the calling thread's life.
        unsafe { libc::__error() }
    }

    /// Routes SIGINT and SIGTERM to a pipe; the returned end becomes readable when one arrives.
    /// Call once per process.
    pub fn shutdown_signals() -> io::Result<PipeReader> {
        let (reader, writer) = spindle_io::pipe()?;
        // The write end lives as long as the process: the handler may run at any time.
        let fd = std::os::fd::OwnedFd::from(writer).into_raw_fd();
        SIGNAL_PIPE.store(fd, Ordering::Relaxed);
        for signal in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: a zeroed sigaction is valid; the handler is async-signal-safe (above);
            // SA_RESTART so that blocking calls elsewhere are not cut short by it.
            let rc = unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
                sa.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(signal, &sa, std::ptr::null_mut())
            };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(reader)
    }

    /// How a shutdown went.
    #[derive(Debug, PartialEq, Eq)]
    pub struct Shutdown {
        /// Requests still in flight when the signal came that finished before the deadline.
        pub finished: usize,
        /// Connections cancelled at the deadline.
        pub cancelled: usize,
    }

    /// Serves `listener` until a byte arrives on `signals`; then closes the listener (new
    /// connections are refused), waits up to `deadline` for the connections being served, and
    /// cancels the rest. Runs in a coroutine.
    pub fn serve(
        listener: TcpListener,
        mut signals: PipeReader,
        deadline: Duration,
    ) -> io::Result<Shutdown> {
        let in_flight = Arc::new(AtomicUsize::new(0));
        let conns = Arc::new(spindle_sync::Mutex::new(Vec::new()));
        let acceptor = {
            let (in_flight, conns) = (in_flight.clone(), conns.clone());
            spindle_rt::spawn(move || {
                loop {
                    let (stream, _) = match listener.accept() {
                        Ok(conn) => conn,
                        // Out of descriptors and the like: the listener backs off; keep going.
                        Err(e) => {
                            eprintln!("accept: {e}");
                            continue;
                        }
                    };
                    let in_flight = in_flight.clone();
                    let handle = spindle_rt::spawn(move || handle(stream, &in_flight));
                    let mut conns = conns.lock();
                    conns.retain(|h: &spindle_rt::JoinHandle<()>| !h.is_finished());
                    conns.push(handle);
                }
            })
        };
        // Wait for SIGINT/SIGTERM.
        let mut byte = [0u8; 1];
        signals.read_exact(&mut byte)?;
        // Stop accepting: cancelling the acceptor unwinds it out of `accept` and drops the
        // listener, so new connections are refused from here on.
        acceptor.cancel();
        let _ = acceptor.join();
        let busy_at_signal = in_flight.load(Ordering::SeqCst);
        let until = Instant::now() + deadline;
        while in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < until {
            spindle_rt::sleep(Duration::from_millis(5));
        }
        let cancelled = in_flight.load(Ordering::SeqCst);
        let conns = std::mem::take(&mut *conns.lock());
        for c in &conns {
            c.cancel(); // idle connections and requests past the deadline
        }
        for c in conns {
            let _ = c.join();
        }
        Ok(Shutdown {
            finished: busy_at_signal - cancelled.min(busy_at_signal),
            cancelled,
        })
    }

    /// One connection: `sleep N` → `working`, then `done N` after N ms.
    fn handle(stream: TcpStream, in_flight: &AtomicUsize) {
        let mut out = match stream.try_clone() {
            Ok(s) => s,
            Err(_) => return,
        };
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { return };
            let Some(ms) = line
                .strip_prefix("sleep ")
                .and_then(|n| n.trim().parse::<u64>().ok())
            else {
                let _ = out.write_all(b"bad request\n");
                continue;
            };
            // Counted from the request's start to its reply; a guard so that a cancelled request
            // (an unwind) is uncounted too.
            struct Busy<'a>(&'a AtomicUsize);
            impl Drop for Busy<'_> {
                fn drop(&mut self) {
                    self.0.fetch_sub(1, Ordering::SeqCst);
                }
            }
            in_flight.fetch_add(1, Ordering::SeqCst);
            let _busy = Busy(in_flight);
            if out.write_all(b"working\n").is_err() {
                return;
            }
            spindle_rt::sleep(Duration::from_millis(ms));
            if out.write_all(format!("done {ms}\n").as_bytes()).is_err() {
                return;
            }
        }
    }
}

#[cfg(not(unix))]
fn main() {
    eprintln!("this example needs Unix signals");
}

#[cfg(unix)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    use std::time::Duration;

    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:0".into());
    let deadline = Duration::from_millis(args.next().map_or(Ok(5000), |a| a.parse())?);
    let signals = shutdown_signals()?;
    let rt = spindle_rt::Runtime::new()?;
    let shutdown = rt.block_on(move || -> std::io::Result<Shutdown> {
        let listener = spindle_io::net::TcpListener::bind(addr.as_str())?;
        println!("listening on {}", listener.local_addr()?);
        serve(listener, signals, deadline)
    })?;
    println!(
        "shut down: {} in-flight requests finished, {} cancelled",
        shutdown.finished, shutdown.cancelled
    );
    Ok(())
}
