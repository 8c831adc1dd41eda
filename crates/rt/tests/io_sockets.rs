//! The Linux IO path: readiness bits that must not outlive what they reported, errors that are
//! not sticky, timeouts that must fire, positioned IO beyond the kernel's offsets, and gathering
//! TCP writes that must not raise `SIGPIPE`.
#![cfg(target_os = "linux")]

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{rt, within};
use spindle_rt::IoBackend;

/// Runs `f` in the current task while another task of the same worker ticks every 10 ms;
/// returns `f`'s result, how long it took and whether the worker kept ticking meanwhile (a
/// task that spins instead of waiting keeps its worker from the ticker).
fn ticking<T>(f: impl FnOnce() -> T) -> (T, Duration, bool) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let ticks = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let ticker = {
        let (ticks, stop) = (ticks.clone(), stop.clone());
        spindle_rt::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                spindle_rt::sleep(Duration::from_millis(10));
                ticks.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    spindle_rt::sleep(Duration::from_millis(1)); // the ticker starts
    let start = Instant::now();
    let value = f();
    let took = start.elapsed();
    let ticked = ticks.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    ticker.join().unwrap();
    // One tick per 10 ms when the worker is free; a task spinning on it allows none. (Any
    // tick counts: a loaded machine may delay the ticker's sleeps.)
    let kept_ticking = ticked >= 1 || took < Duration::from_millis(20);
    (value, took, kept_ticking)
}

/// A UDP port with nothing bound to it (for ICMP port-unreachable errors).
fn closed_udp_port() -> std::net::SocketAddr {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap()
}

/// A connected UDP socket whose peer's port is closed gets an ICMP error: the reactor reports
/// it (`EPOLLERR`: `Readiness::ERROR`) and the next `recv` returns it (`ConnectionRefused`),
/// which consumes it. A `recv` after that must wait as usual — and time out. The error bit was
/// kept for good ("final"), so every later wait ended at once: the `recv` spun on `EAGAIN`
/// without ever reaching its deadline or yielding its worker.
fn udp_error_is_not_sticky(io: IoBackend) {
    let rt = rt(io);
    let result = within(rt, Duration::from_secs(5), || {
        let sock = spindle_io::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.connect(&closed_udp_port()).unwrap();
        // The ICMP error must arrive while the socket is registered and its task waits, so
        // that the reactor reports it: a second handle on the socket sends from a thread.
        let sender = sock.try_clone().unwrap().into_std();
        let sending = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            sender.send(b"ping").unwrap();
        });
        sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut buf = [0u8; 64];
        let refused = sock.recv(&mut buf).unwrap_err();
        assert_eq!(
            refused.kind(),
            std::io::ErrorKind::ConnectionRefused,
            "{refused}"
        );
        sending.join().unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        // The error is consumed: this recv waits for data, and times out.
        let (err, took, kept_ticking) = ticking(|| sock.recv(&mut buf).unwrap_err());
        (err.kind(), took, kept_ticking)
    });
    let (kind, took, kept_ticking) =
        result.expect("a recv after a consumed socket error never returned");
    assert_eq!(kind, std::io::ErrorKind::TimedOut);
    assert!(took >= Duration::from_millis(40), "{took:?}");
    assert!(kept_ticking, "the worker spun in recv for {took:?}");
}

#[test]
fn udp_error_is_not_sticky_epoll() {
    udp_error_is_not_sticky(IoBackend::Epoll);
}

/// A task waits in `recv` on a Unix datagram socket (with a read timeout) when another task
/// shuts its read side down. The kernel then reports the socket readable and read-closed for
/// good while `recv` keeps failing with `EAGAIN` (datagram sockets have no end of stream):
/// the wait must still end — with the timeout at the latest — and not spin on its worker.
fn dgram_shutdown_while_waiting(io: IoBackend) {
    let rt = rt(io);
    let result = within(rt, Duration::from_secs(5), || {
        let (a, _b) = spindle_io::net::UnixDatagram::pair().unwrap();
        let a = std::sync::Arc::new(a);
        a.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let closer = {
            let a = a.clone();
            spindle_rt::spawn(move || {
                spindle_rt::sleep(Duration::from_millis(50));
                a.shutdown(std::net::Shutdown::Read).unwrap();
            })
        };
        let mut buf = [0u8; 16];
        let (got, took, kept_ticking) = ticking(|| a.recv(&mut buf).map_err(|e| e.kind()));
        closer.join().unwrap();
        (got, took, kept_ticking)
    });
    let (got, took, kept_ticking) =
        result.expect("a recv on a socket shut down meanwhile never returned");
    assert!(
        matches!(got, Ok(0) | Err(std::io::ErrorKind::TimedOut)),
        "{got:?} after {took:?}"
    );
    assert!(kept_ticking, "the worker spun in recv for {took:?}");
}

#[test]
fn dgram_shutdown_while_waiting_epoll() {
    dgram_shutdown_while_waiting(IoBackend::Epoll);
}

/// Held before the fix (io_uring's receive returns 0, as std's blocking one): kept to pin the
/// backends to one answer class.
#[test]
fn dgram_shutdown_while_waiting_uring() {
    if common::io_uring_left_out("dgram_shutdown_while_waiting_uring") {
        return;
    }
    dgram_shutdown_while_waiting(IoBackend::IoUring);
}

/// The same with no runtime (the thread waits in `poll(2)`): `poll` reports the shut-down
/// socket ready at once, `recv` answers `EAGAIN`, again and again — the read timeout must
/// still end it (std's blocking `recv` would return 0; `TimedOut` is the least a deadline
/// owes).
#[test]
fn dgram_shutdown_while_waiting_thread() {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (a, _b) = spindle_io::net::UnixDatagram::pair().unwrap();
        let a = std::sync::Arc::new(a);
        a.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let closer = {
            let a = a.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                a.shutdown(std::net::Shutdown::Read).unwrap();
            })
        };
        let start = Instant::now();
        let mut buf = [0u8; 16];
        let got = a.recv(&mut buf).map_err(|e| e.kind());
        closer.join().unwrap();
        let _ = tx.send((got, start.elapsed()));
    });
    let (got, took) = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("a recv on a socket shut down meanwhile never returned");
    assert!(
        matches!(got, Ok(0) | Err(std::io::ErrorKind::TimedOut)),
        "{got:?} after {took:?}"
    );
}

mod sigpipe {
    use std::io::{IoSlice, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Mutex, MutexGuard};
    use std::time::Duration;

    use spindle_rt::IoBackend;

    use super::{rt, within};

    static SIGPIPES: AtomicUsize = AtomicUsize::new(0);

    extern "C" fn count_sigpipe(_: libc::c_int) {
        SIGPIPES.fetch_add(1, Ordering::SeqCst);
    }

    /// Counts SIGPIPEs instead of ignoring them (as a host program that does not ignore
    /// SIGPIPE would die of them) while it lives; restores the previous disposition on drop.
    struct CountSigpipe(libc::sigaction, #[allow(dead_code)] MutexGuard<'static, ()>);

    /// One counting test at a time: the disposition is process-wide.
    static SERIAL: Mutex<()> = Mutex::new(());

    impl CountSigpipe {
        fn install() -> CountSigpipe {
            let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: all-zero is a valid sigaction; the handler only touches an atomic
            // (async-signal-safe); `old` is valid for writes.
            unsafe {
                let mut new: libc::sigaction = std::mem::zeroed();
                new.sa_sigaction = count_sigpipe as *const () as libc::sighandler_t;
                libc::sigemptyset(&mut new.sa_mask);
                let mut old: libc::sigaction = std::mem::zeroed();
                assert_eq!(libc::sigaction(libc::SIGPIPE, &new, &mut old), 0);
                CountSigpipe(old, serial)
            }
        }
    }

    impl Drop for CountSigpipe {
        fn drop(&mut self) {
            // SAFETY: restores the disposition `install` saved.
            unsafe { libc::sigaction(libc::SIGPIPE, &self.0, std::ptr::null_mut()) };
        }
    }

    /// `TcpStream` documents that writing to a connection the peer closed returns `EPIPE`,
    /// never a `SIGPIPE`. Its `write_vectored` went, on the readiness path (epoll, polling,
    /// no runtime), to std's `write_vectored`: `writev(2)`, which has no `MSG_NOSIGNAL`, so
    /// a program that does not ignore SIGPIPE died of it.
    fn tcp_write_vectored_no_sigpipe(io: Option<IoBackend>) {
        let _guard = CountSigpipe::install();
        let before = SIGPIPES.load(Ordering::SeqCst);
        let case = || {
            let listener = spindle_io::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let mut client =
                spindle_io::net::TcpStream::connect(&listener.local_addr().unwrap()).unwrap();
            let (server, _) = listener.accept().unwrap();
            drop(server);
            // The first writes may succeed (the peer answers them with a reset); then EPIPE.
            for _ in 0..100 {
                let bufs = [IoSlice::new(b"ab"), IoSlice::new(b"cd")];
                match client.write_vectored(&bufs) {
                    Ok(n) => {
                        assert_eq!(n, 4);
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => return e.kind(),
                }
            }
            panic!("writes to a closed connection kept succeeding");
        };
        let kind = match io {
            Some(io) => within(rt(io), Duration::from_secs(10), case).expect("the case hung"),
            None => case(),
        };
        assert!(
            matches!(
                kind,
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            ),
            "{kind:?}"
        );
        assert_eq!(
            SIGPIPES.load(Ordering::SeqCst) - before,
            0,
            "write_vectored raised SIGPIPE"
        );
    }

    #[test]
    fn tcp_write_vectored_no_sigpipe_epoll() {
        tcp_write_vectored_no_sigpipe(Some(IoBackend::Epoll));
    }

    /// Outside a runtime (the thread waits in poll(2)): the same call.
    #[test]
    fn tcp_write_vectored_no_sigpipe_no_runtime() {
        tcp_write_vectored_no_sigpipe(None);
    }
}

/// A positioned read or write at an offset the kernel cannot take (beyond `i64::MAX`) fails
/// with `InvalidInput` on every path, as `pread`/`pwrite` do. On io_uring `u64::MAX` (`-1`)
/// means "the current position": the read returned the file's data from wherever the file
/// position stood.
fn positioned_io_beyond_the_kernels_offsets(io: Option<IoBackend>) {
    let path =
        std::env::temp_dir().join(format!("spindle-test-offset-{}-{io:?}", std::process::id()));
    std::fs::write(&path, b"hello").unwrap();
    let case = {
        let path = path.clone();
        move || {
            let file = spindle_io::fs::File::open_with(
                &path,
                std::fs::OpenOptions::new().read(true).write(true),
            )
            .unwrap();
            let mut buf = [0u8; 8];
            let read = file.read_at(&mut buf, u64::MAX).map_err(|e| e.kind());
            let write = file.write_at(b"x", u64::MAX).map_err(|e| e.kind());
            (read, write)
        }
    };
    let (read, write) = match io {
        Some(io) => within(rt(io), Duration::from_secs(10), case).expect("hung"),
        None => case(),
    };
    let _ = std::fs::remove_file(&path);
    assert_eq!(read, Err(std::io::ErrorKind::InvalidInput), "read_at");
    assert_eq!(write, Err(std::io::ErrorKind::InvalidInput), "write_at");
}

#[test]
fn positioned_io_beyond_the_kernels_offsets_uring() {
    if common::io_uring_left_out("positioned_io_beyond_the_kernels_offsets_uring") {
        return;
    }
    positioned_io_beyond_the_kernels_offsets(Some(IoBackend::IoUring));
}

/// Held before the fix (`pread` refuses the offset itself): kept to pin the paths to one
/// answer.
#[test]
fn positioned_io_beyond_the_kernels_offsets_thread() {
    positioned_io_beyond_the_kernels_offsets(None);
}
