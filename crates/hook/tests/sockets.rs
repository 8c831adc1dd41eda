//! Sockets and pipes under the hook, through std's own types: coroutines wait on the driver,
//! with the results, timeouts and non-blocking mode std gives a thread.
#![cfg(all(
    target_os = "linux",
    target_env = "gnu",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use common::{Ticker, backends, enable, runtime, watchdog};
use spindle_rt::{IoBackend, JoinError};

fn flags(fd: i32) -> i32 {
    // SAFETY: F_GETFL on an open descriptor.
    unsafe { libc::fcntl(fd, libc::F_GETFL) }
}

/// The descriptor's real flags (the system call, not the hooked `fcntl`).
fn raw_flags(fd: i32) -> i64 {
    // SAFETY: F_GETFL on an open descriptor.
    unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_GETFL) }
}

/// A connected pair of std TCP streams.
fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    (a, b)
}

/// Echo over std's TcpListener/TcpStream between coroutines of a one-worker runtime (blocking
/// calls that blocked the worker would deadlock it): 20 clients, 64 KiB each way.
#[test]
fn std_tcp_echo_between_coroutines() {
    for io in backends() {
        let name = format!("{io:?}");
        let rt = runtime(1, io);
        watchdog(Duration::from_secs(60), move || {
            rt.block_on(|| {
                let listener = TcpListener::bind("127.0.0.1:0").unwrap();
                let addr = listener.local_addr().unwrap();
                let server = spindle_rt::spawn(move || {
                    let mut conns = Vec::new();
                    for _ in 0..20 {
                        let (mut s, _) = listener.accept().unwrap();
                        conns.push(spindle_rt::spawn(move || {
                            let mut buf = [0u8; 4096];
                            loop {
                                match s.read(&mut buf).unwrap() {
                                    0 => return,
                                    n => s.write_all(&buf[..n]).unwrap(),
                                }
                            }
                        }));
                    }
                    for c in conns {
                        c.join().unwrap();
                    }
                });
                let clients: Vec<_> = (0..20u8)
                    .map(|i| {
                        spindle_rt::spawn(move || {
                            let mut s = TcpStream::connect(addr).unwrap();
                            let data: Vec<u8> = (0..65536u32).map(|x| (x as u8) ^ i).collect();
                            let mut w = s.try_clone().unwrap();
                            let d = data.clone();
                            let writer = spindle_rt::spawn(move || {
                                w.write_all(&d).unwrap();
                                w.shutdown(std::net::Shutdown::Write).unwrap();
                            });
                            let mut back = Vec::new();
                            s.read_to_end(&mut back).unwrap();
                            writer.join().unwrap();
                            assert!(back == data, "client {i}: echo differs");
                        })
                    })
                    .collect();
                for c in clients {
                    c.join().unwrap();
                }
                server.join().unwrap();
            })
        });
        eprintln!("{name}: ok");
    }
}

/// A read timeout ends the wait with `WouldBlock` (std's kind for Linux's `EAGAIN`) after the
/// timeout, the worker running other coroutines meanwhile; the stream still works afterwards.
#[test]
fn read_timeout_returns_would_block() {
    for io in backends() {
        let rt = runtime(1, io);
        watchdog(Duration::from_secs(30), move || {
            rt.block_on(|| {
                let (mut a, mut b) = tcp_pair();
                a.set_read_timeout(Some(Duration::from_millis(100)))
                    .unwrap();
                let ticker = Ticker::start();
                let start = Instant::now();
                let err = a.read(&mut [0u8; 8]).unwrap_err();
                let took = start.elapsed();
                assert_eq!(err.kind(), ErrorKind::WouldBlock);
                assert!(took >= Duration::from_millis(100), "{took:?}");
                assert!(took < Duration::from_secs(5), "{took:?}");
                assert!(ticker.count() >= 20, "ticks: {}", ticker.count());
                b.write_all(b"late").unwrap();
                let mut buf = [0u8; 4];
                a.read_exact(&mut buf).unwrap();
                assert_eq!(&buf, b"late");
            })
        });
    }
}

/// A write timeout on a stream whose peer never reads: a write that could send nothing fails
/// with `WouldBlock` once the timeout passed; one that sent part returns the part, also only
/// at the timeout (a blocking send waits to send everything).
#[test]
fn write_timeout_returns_would_block_or_the_part_sent() {
    let rt = runtime(1, IoBackend::Epoll);
    watchdog(Duration::from_secs(30), move || {
        rt.block_on(|| {
            let (mut a, _b) = tcp_pair();
            a.set_write_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            let chunk = vec![7u8; 1 << 20];
            let start = Instant::now();
            let err = loop {
                let t0 = Instant::now();
                match a.write(&chunk) {
                    // A blocking send returns short only when its timeout ends it.
                    Ok(n) if n < chunk.len() => assert!(
                        t0.elapsed() >= Duration::from_millis(100),
                        "{n} bytes after {:?}",
                        t0.elapsed()
                    ),
                    Ok(_) => {}
                    Err(e) => {
                        assert!(t0.elapsed() >= Duration::from_millis(100));
                        break e;
                    }
                }
                assert!(start.elapsed() < Duration::from_secs(10), "never timed out");
            };
            assert_eq!(err.kind(), ErrorKind::WouldBlock);
        })
    });
}

/// A socket the application made non-blocking keeps answering `WouldBlock` at once in a
/// coroutine, and `fcntl` shows its mode; made blocking again, a read waits (the coroutine
/// only) for the data.
#[test]
fn user_non_blocking_mode_keeps_would_block() {
    for io in backends() {
        let rt = runtime(1, io);
        watchdog(Duration::from_secs(30), move || {
            rt.block_on(|| {
                let (mut a, mut b) = tcp_pair();
                a.set_nonblocking(true).unwrap();
                let start = Instant::now();
                let err = a.read(&mut [0u8; 8]).unwrap_err();
                assert_eq!(err.kind(), ErrorKind::WouldBlock);
                // At once: a wait would last until the watchdog, as no data comes. The bound
                // leaves room for a loaded machine's scheduling delays.
                assert!(start.elapsed() < Duration::from_secs(1));
                assert_ne!(flags(a.as_raw_fd()) & libc::O_NONBLOCK, 0);

                a.set_nonblocking(false).unwrap();
                assert_eq!(flags(a.as_raw_fd()) & libc::O_NONBLOCK, 0);
                let writer = spindle_rt::spawn(move || {
                    spindle_rt::sleep(Duration::from_millis(50));
                    b.write_all(b"data").unwrap();
                    b
                });
                let ticker = Ticker::start();
                let mut buf = [0u8; 4];
                a.read_exact(&mut buf).unwrap();
                assert_eq!(&buf, b"data");
                assert!(ticker.count() >= 10, "ticks: {}", ticker.count());
                let _b = writer.join().unwrap();
                // The hook keeps it non-blocking underneath and shows what the application
                // asked for.
                assert_eq!(flags(a.as_raw_fd()) & libc::O_NONBLOCK, 0);
                assert_ne!(raw_flags(a.as_raw_fd()) & i64::from(libc::O_NONBLOCK), 0);
                // MSG_DONTWAIT asks this one call not to wait.
                // SAFETY: a valid buffer.
                let n = unsafe {
                    libc::recv(
                        a.as_raw_fd(),
                        [0u8; 4].as_mut_ptr().cast(),
                        4,
                        libc::MSG_DONTWAIT,
                    )
                };
                assert_eq!(n, -1);
                assert_eq!(
                    std::io::Error::last_os_error().kind(),
                    ErrorKind::WouldBlock
                );
            })
        });
    }
}

/// A socket a coroutine used (so the hook made it non-blocking underneath), then used by a
/// plain thread, still blocks that thread until data comes, as a blocking socket does.
#[test]
fn a_managed_socket_blocks_a_plain_thread() {
    let rt = runtime(1, IoBackend::Epoll);
    watchdog(Duration::from_secs(30), move || {
        let (a, mut b) = tcp_pair();
        let mut a = rt.block_on(move || {
            let mut a = a;
            a.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
            assert_eq!(
                a.read(&mut [0u8; 1]).unwrap_err().kind(),
                ErrorKind::WouldBlock
            );
            a.set_read_timeout(None).unwrap();
            a
        });
        assert_ne!(raw_flags(a.as_raw_fd()) & i64::from(libc::O_NONBLOCK), 0);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            b.write_all(b"x").unwrap();
            b
        });
        let start = Instant::now();
        let mut buf = [0u8; 1];
        assert_eq!(a.read(&mut buf).unwrap(), 1);
        assert!(start.elapsed() >= Duration::from_millis(50));
        drop(t.join().unwrap());
    });
}

/// Blocking std calls on a plain thread while a runtime runs pass through: an echo between two
/// threads.
#[test]
fn a_plain_threads_calls_pass_through() {
    let _rt = runtime(2, IoBackend::Epoll);
    watchdog(Duration::from_secs(30), || {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 5];
            s.read_exact(&mut buf).unwrap();
            s.write_all(&buf).unwrap();
        });
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"hello").unwrap();
        let mut buf = [0u8; 5];
        c.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"hello");
        t.join().unwrap();
        // Nothing made it non-blocking.
        assert_eq!(raw_flags(c.as_raw_fd()) & i64::from(libc::O_NONBLOCK), 0);
    });
}

/// `connect` in a coroutine: refused as on a thread; `connect_timeout` (std's non-blocking
/// connect and `poll`) connects.
#[test]
fn connect_results_match_a_threads() {
    for io in backends() {
        let rt = runtime(1, io);
        watchdog(Duration::from_secs(30), move || {
            let closed = {
                let l = TcpListener::bind("127.0.0.1:0").unwrap();
                l.local_addr().unwrap()
            };
            let on_thread = TcpStream::connect(closed).unwrap_err().kind();
            rt.block_on(|| {
                assert_eq!(TcpStream::connect(closed).unwrap_err().kind(), on_thread);
                let l = TcpListener::bind("127.0.0.1:0").unwrap();
                let s =
                    TcpStream::connect_timeout(&l.local_addr().unwrap(), Duration::from_secs(5))
                        .unwrap();
                assert_eq!(flags(s.as_raw_fd()) & libc::O_NONBLOCK, 0);
                let (_peer, from) = l.accept().unwrap();
                assert_eq!(from, s.local_addr().unwrap());
            });
        });
    }
}

/// UDP: `recv_from` waits in the coroutine until a datagram comes; a read timeout gives
/// `WouldBlock`.
#[test]
fn udp_recv_waits_in_the_coroutine() {
    for io in backends() {
        let rt = runtime(1, io);
        watchdog(Duration::from_secs(30), move || {
            rt.block_on(|| {
                let a = UdpSocket::bind("127.0.0.1:0").unwrap();
                let b = UdpSocket::bind("127.0.0.1:0").unwrap();
                let to = a.local_addr().unwrap();
                let from = b.local_addr().unwrap();
                let sender = spindle_rt::spawn(move || {
                    spindle_rt::sleep(Duration::from_millis(50));
                    b.send_to(b"dgram", to).unwrap();
                });
                let ticker = Ticker::start();
                let mut buf = [0u8; 16];
                let (n, src) = a.recv_from(&mut buf).unwrap();
                assert_eq!((&buf[..n], src), (&b"dgram"[..], from));
                assert!(ticker.count() >= 10, "ticks: {}", ticker.count());
                sender.join().unwrap();
                a.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
                assert_eq!(a.recv(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock);
            })
        });
    }
}

/// Pipes and Unix streams: a read waits for the writer coroutine; the end of stream arrives.
#[test]
fn pipes_and_unix_streams_wait_in_the_coroutine() {
    for io in backends() {
        let rt = runtime(1, io);
        watchdog(Duration::from_secs(30), move || {
            rt.block_on(|| {
                let mut fds = [0; 2];
                // SAFETY: a valid array of two.
                assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
                // SAFETY: both were just made and are owned here.
                let (r, w) =
                    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
                let mut r = std::fs::File::from(r);
                let mut w = std::fs::File::from(w);
                let (mut u1, mut u2) = UnixStream::pair().unwrap();
                let writer = spindle_rt::spawn(move || {
                    spindle_rt::sleep(Duration::from_millis(30));
                    w.write_all(&[1u8; 200_000]).unwrap();
                    drop(w);
                    u2.write_all(b"unix").unwrap();
                });
                let ticker = Ticker::start();
                let mut got = Vec::new();
                r.read_to_end(&mut got).unwrap();
                assert_eq!(got.len(), 200_000);
                let mut buf = [0u8; 4];
                u1.read_exact(&mut buf).unwrap();
                assert_eq!(&buf, b"unix");
                assert!(ticker.count() >= 5, "ticks: {}", ticker.count());
                writer.join().unwrap();
            })
        });
    }
}

/// `poll` of one socket in a coroutine: times out after its timeout (the worker running
/// others), and reports readiness when data comes.
#[test]
fn poll_waits_in_the_coroutine() {
    for io in backends() {
        let rt = runtime(1, io);
        watchdog(Duration::from_secs(30), move || {
            rt.block_on(|| {
                let (a, mut b) = tcp_pair();
                let mut pfd = libc::pollfd {
                    fd: a.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                let ticker = Ticker::start();
                let start = Instant::now();
                // SAFETY: one valid pollfd.
                assert_eq!(unsafe { libc::poll(&mut pfd, 1, 80) }, 0);
                assert!(start.elapsed() >= Duration::from_millis(80));
                assert!(ticker.count() >= 15, "ticks: {}", ticker.count());
                let writer = spindle_rt::spawn(move || {
                    spindle_rt::sleep(Duration::from_millis(30));
                    b.write_all(b"x").unwrap();
                    b
                });
                // SAFETY: as above.
                assert_eq!(unsafe { libc::poll(&mut pfd, 1, 5000) }, 1);
                assert_ne!(pfd.revents & libc::POLLIN, 0);
                drop(writer.join().unwrap());
                // Two descriptors: looked at again every millisecond.
                let (c, mut d) = tcp_pair();
                let mut two = [
                    libc::pollfd {
                        fd: a.as_raw_fd(),
                        events: libc::POLLOUT,
                        revents: 0,
                    },
                    libc::pollfd {
                        fd: c.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    },
                ];
                d.write_all(b"y").unwrap();
                // SAFETY: two valid pollfds.
                assert_eq!(unsafe { libc::poll(two.as_mut_ptr(), 2, 1000) }, 2);
            })
        });
    }
}

/// A descriptor number reused for another socket, non-blocking from birth: the new socket
/// answers `WouldBlock` (its predecessor was managed; nothing of it is left). The number is
/// reused through `dup2` (a close and a new socket would race with the other tests' threads
/// for the lowest free number).
#[test]
fn a_reused_descriptor_number_starts_afresh() {
    for io in backends() {
        let rt = runtime(1, io);
        watchdog(Duration::from_secs(30), move || {
            rt.block_on(|| {
                let (mut a, _b) = tcp_pair();
                a.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
                assert_eq!(
                    a.read(&mut [0u8; 1]).unwrap_err().kind(),
                    ErrorKind::WouldBlock
                );
                let (c, mut peer) = tcp_pair();
                c.set_nonblocking(true).unwrap();
                // SAFETY: both are open; `a`'s number now holds `c`'s socket.
                let r = unsafe { libc::dup2(c.as_raw_fd(), a.as_raw_fd()) };
                assert_eq!(r, a.as_raw_fd());
                let start = Instant::now();
                let mut buf = [0u8; 4];
                // SAFETY: a valid buffer.
                let n = unsafe { libc::read(a.as_raw_fd(), buf.as_mut_ptr().cast(), 4) };
                assert_eq!(n, -1);
                assert_eq!(
                    std::io::Error::last_os_error().kind(),
                    ErrorKind::WouldBlock
                );
                // At once (see `user_non_blocking_mode_keeps_would_block`).
                assert!(start.elapsed() < Duration::from_secs(1));
                peer.write_all(b"ok").unwrap();
                a.read_exact(&mut buf[..2]).unwrap_or_else(|e| {
                    // Non-blocking: the bytes may not be there yet.
                    assert_eq!(e.kind(), ErrorKind::WouldBlock);
                });
            })
        });
    }
}

/// A managed socket duplicated with `try_clone` (`fcntl(F_DUPFD_CLOEXEC)`) and `dup`: the
/// copies share its mode, so they wait in the coroutine too and show blocking mode.
#[test]
fn duplicates_of_a_managed_socket_are_managed() {
    let rt = runtime(1, IoBackend::Epoll);
    watchdog(Duration::from_secs(30), move || {
        rt.block_on(|| {
            let (mut a, mut b) = tcp_pair();
            a.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
            assert_eq!(
                a.read(&mut [0u8; 1]).unwrap_err().kind(),
                ErrorKind::WouldBlock
            );
            a.set_read_timeout(None).unwrap();
            let mut c = a.try_clone().unwrap();
            // SAFETY: plain call on an open descriptor.
            let d = unsafe { libc::dup(a.as_raw_fd()) };
            assert!(d >= 0);
            // SAFETY: just made, owned here.
            let d = unsafe { OwnedFd::from_raw_fd(d) };
            for fd in [c.as_raw_fd(), d.as_raw_fd()] {
                assert_eq!(flags(fd) & libc::O_NONBLOCK, 0);
            }
            let writer = spindle_rt::spawn(move || {
                spindle_rt::sleep(Duration::from_millis(30));
                b.write_all(b"dup").unwrap();
                b
            });
            let ticker = Ticker::start();
            let mut buf = [0u8; 3];
            c.read_exact(&mut buf).unwrap();
            assert_eq!(&buf, b"dup");
            assert!(ticker.count() >= 5, "ticks: {}", ticker.count());
            let _b = writer.join().unwrap();
        })
    });
}

/// A coroutine cancelled while a hooked read waits: the read fails with `ECANCELED` (it cannot
/// unwind through the C call) and the cancellation takes effect at the next cancellation point.
#[test]
fn a_cancelled_read_fails_and_the_coroutine_ends_cancelled() {
    for io in backends() {
        let rt = runtime(1, io);
        watchdog(Duration::from_secs(30), move || {
            let (a, b) = tcp_pair();
            let (tx, rx) = std::sync::mpsc::channel();
            let h = rt.spawn(move || {
                let mut a = a;
                let r = a.read(&mut [0u8; 4]);
                tx.send(r.map_err(|e| e.raw_os_error())).unwrap();
                spindle_rt::yield_now();
            });
            std::thread::sleep(Duration::from_millis(50));
            h.cancel();
            assert!(matches!(h.join(), Err(JoinError::Cancelled)));
            assert_eq!(rx.recv().unwrap(), Err(Some(libc::ECANCELED)));
            drop(b);
        });
    }
}

/// A child forked while a runtime runs (from a plain thread and from inside a coroutine): its
/// hooked calls pass through — a sleep sleeps the process, a read on a socket a coroutine had
/// made non-blocking underneath still blocks until data comes.
#[test]
fn a_forked_child_passes_through() {
    enable();
    let rt = runtime(1, IoBackend::Epoll);
    watchdog(Duration::from_secs(30), move || {
        let (a, mut b) = tcp_pair();
        // Managed by a coroutine first.
        let a = rt.block_on(move || {
            let mut a = a;
            a.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
            let _ = a.read(&mut [0u8; 1]);
            a.set_read_timeout(None).unwrap();
            a
        });
        let fd = a.as_raw_fd();
        let child_body = move || -> i32 {
            // Only system calls here (a child of a multi-threaded process).
            let ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 20_000_000,
            };
            // SAFETY: a valid timespec.
            if unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) } != 0 {
                return 2;
            }
            let mut buf = [0u8; 1];
            // SAFETY: a valid buffer.
            let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), 1) };
            if n == 1 && buf[0] == b'z' { 0 } else { 3 }
        };
        let wait_child = |pid: libc::pid_t, b: &mut TcpStream| {
            assert!(pid > 0, "fork failed");
            std::thread::sleep(Duration::from_millis(100));
            b.write_all(b"z").unwrap();
            let mut status = 0;
            let start = Instant::now();
            loop {
                // SAFETY: our child.
                let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
                if r == pid {
                    break;
                }
                if start.elapsed() > Duration::from_secs(10) {
                    // SAFETY: our child.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    panic!("the forked child hung");
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            assert!(libc::WIFEXITED(status), "status {status}");
            assert_eq!(libc::WEXITSTATUS(status), 0, "the child's check failed");
        };
        // From a plain thread.
        // SAFETY: the child runs only system calls, then `_exit`.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: leaves the child at once.
            unsafe { libc::_exit(child_body()) };
        }
        wait_child(pid, &mut b);
        // From inside a coroutine: the child's thread is in a coroutine, with no runtime.
        let pid = rt.block_on(move || {
            // SAFETY: as above.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                // SAFETY: leaves the child at once.
                unsafe { libc::_exit(child_body()) };
            }
            pid
        });
        wait_child(pid, &mut b);
        drop(a);
    });
}

/// A listener whose accept queue is full: Linux drops further connection requests, so a
/// connect to it waits until its timeout. The first connection fills the queue of a
/// backlog of 0.
fn full_listener() -> (TcpListener, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    // SAFETY: listen again on a listening socket: only the backlog changes.
    assert_eq!(unsafe { libc::listen(l.as_raw_fd(), 0) }, 0);
    let first = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    (l, first)
}

/// A blocking `connect` on a socket with `SO_SNDTIMEO`: the result and `errno` (Linux:
/// `EINPROGRESS` when the timeout ends it), and how long it took.
fn connect_with_send_timeout(to: std::net::SocketAddr, timeout: Duration) -> (i32, i32, Duration) {
    let std::net::SocketAddr::V4(v4) = to else {
        panic!("IPv4 only")
    };
    // SAFETY: plain socket calls on a descriptor this function owns; valid option and address
    // structures.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let _owned = OwnedFd::from_raw_fd(fd);
        let tv = libc::timeval {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_usec: timeout.subsec_micros().into(),
        };
        let r = libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            (&raw const tv).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
        assert_eq!(r, 0);
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: v4.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*v4.ip()).to_be(),
            },
            sin_zero: [0; 8],
        };
        let start = Instant::now();
        let r = libc::connect(
            fd,
            (&raw const sin).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        (r, if r < 0 { e } else { 0 }, start.elapsed())
    }
}

/// Connecting to a listener that never answers: std's `connect_timeout` fails with `TimedOut`
/// after its timeout, and a blocking `connect` with `SO_SNDTIMEO` with `EINPROGRESS`, as on a
/// thread; only the coroutine waits.
#[test]
fn connect_timeout_waits_in_the_coroutine() {
    let (l, _first) = full_listener();
    let addr = l.local_addr().unwrap();
    let on_thread = connect_with_send_timeout(addr, Duration::from_millis(100));
    assert_eq!((on_thread.0, on_thread.1), (-1, libc::EINPROGRESS));
    for io in backends() {
        let rt = runtime(1, io);
        watchdog(Duration::from_secs(30), move || {
            rt.block_on(move || {
                let ticker = Ticker::start();
                let start = Instant::now();
                let err =
                    TcpStream::connect_timeout(&addr, Duration::from_millis(150)).unwrap_err();
                let took = start.elapsed();
                assert_eq!(err.kind(), ErrorKind::TimedOut);
                assert!(took >= Duration::from_millis(150), "{took:?}");
                assert!(took < Duration::from_secs(5), "{took:?}");
                assert!(ticker.count() >= 30, "ticks: {}", ticker.count());

                let before = ticker.count();
                let (r, e, took) = connect_with_send_timeout(addr, Duration::from_millis(100));
                assert_eq!((r, e), (-1, libc::EINPROGRESS));
                assert!(took >= Duration::from_millis(100), "{took:?}");
                assert!(ticker.count() - before >= 20, "ticks: {}", ticker.count());
            });
        });
    }
    drop(l);
}

/// `accept` on a listener with `SO_RCVTIMEO` fails with `EAGAIN` (`WouldBlock`) when nobody
/// connects in time, in a coroutine (which alone waits) as on a thread.
#[test]
fn accept_honours_the_receive_timeout() {
    let timed_accept = || {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 100_000,
        };
        // SAFETY: a valid option value for an open socket.
        let r = unsafe {
            libc::setsockopt(
                l.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&raw const tv).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        assert_eq!(r, 0);
        let start = Instant::now();
        let err = l.accept().unwrap_err();
        (err.raw_os_error(), start.elapsed())
    };
    let (on_thread, _) = timed_accept();
    assert_eq!(on_thread, Some(libc::EAGAIN));
    for io in backends() {
        let rt = runtime(1, io);
        watchdog(Duration::from_secs(30), move || {
            rt.block_on(move || {
                let ticker = Ticker::start();
                let (e, took) = timed_accept();
                assert_eq!(e, on_thread);
                assert!(took >= Duration::from_millis(100), "{took:?}");
                assert!(ticker.count() >= 20, "ticks: {}", ticker.count());
            })
        });
    }
}

/// Sets `SO_RCVTIMEO` through the system call itself, which the hook does not see.
fn raw_set_read_timeout(fd: i32, timeout: Duration) {
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_usec: timeout.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: a valid timeval of the size given, on an open socket.
    let r = unsafe {
        libc::syscall(
            libc::SYS_setsockopt,
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            &raw const tv,
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
}

/// Reads from `s` and returns the outcome's kind and how long it took.
fn timed_read(s: &mut impl Read) -> (Result<usize, ErrorKind>, Duration) {
    let start = Instant::now();
    let r = s.read(&mut [0u8; 8]).map_err(|e| e.kind());
    (r, start.elapsed())
}

/// A socket's timeout is the socket's, not the descriptor's: one set through a duplicate
/// (`try_clone`, `dup`) after the original has waited is honoured by the original, and one set
/// on the original by the duplicates.
#[test]
fn a_timeout_set_through_a_duplicate_is_honoured_by_the_original() {
    for io in backends() {
        let rt = runtime(1, io);
        watchdog(Duration::from_secs(30), move || {
            rt.block_on(|| {
                let (mut a, mut b) = tcp_pair();
                // A first wait, with no timeout, on the original.
                let writer = spindle_rt::spawn(move || {
                    std::thread::sleep(Duration::from_millis(20));
                    b.write_all(b"x").unwrap();
                    b
                });
                assert_eq!(timed_read(&mut a).0, Ok(1));
                let _b = writer.join().unwrap();

                let c = a.try_clone().unwrap();
                c.set_read_timeout(Some(Duration::from_millis(40))).unwrap();
                let (r, took) = timed_read(&mut a);
                assert_eq!(r, Err(ErrorKind::WouldBlock));
                assert!(took >= Duration::from_millis(40), "{took:?}");

                a.set_read_timeout(Some(Duration::from_millis(30))).unwrap();
                // SAFETY: plain call on an open descriptor.
                let d = unsafe { libc::dup(a.as_raw_fd()) };
                assert!(d >= 0);
                // SAFETY: just made, owned here.
                let mut d = unsafe { TcpStream::from_raw_fd(d) };
                let (r, took) = timed_read(&mut d);
                assert_eq!(r, Err(ErrorKind::WouldBlock));
                assert!(took >= Duration::from_millis(30), "{took:?}");
                let mut c = c;
                let (r, took) = timed_read(&mut c);
                assert_eq!(r, Err(ErrorKind::WouldBlock));
                assert!(took >= Duration::from_millis(30), "{took:?}");
                assert!(took < Duration::from_secs(5), "{took:?}");
            })
        });
    }
}

/// A timeout set before a coroutine first used the socket — on a plain thread through std,
/// through the raw system call, or on a listener whose accepted sockets inherit it — is
/// honoured by the coroutine's first wait.
#[test]
fn a_timeout_set_before_the_socket_was_managed_is_honoured() {
    for io in backends() {
        // On a plain thread (the hook sees the call) and through the raw system call (it
        // does not).
        let (a, b) = tcp_pair();
        a.set_read_timeout(Some(Duration::from_millis(40))).unwrap();
        let (c, d) = tcp_pair();
        raw_set_read_timeout(c.as_raw_fd(), Duration::from_millis(40));
        // A listener's timeout, inherited by the sockets it accepts.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        raw_set_read_timeout(l.as_raw_fd(), Duration::from_millis(40));
        let rt = runtime(1, io);
        watchdog(Duration::from_secs(30), move || {
            rt.block_on(move || {
                let _peers = (b, d);
                let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
                let (accepted, _) = l.accept().unwrap();
                for mut s in [a, c, accepted] {
                    let (r, took) = timed_read(&mut s);
                    assert_eq!(r, Err(ErrorKind::WouldBlock));
                    assert!(took >= Duration::from_millis(40), "{took:?}");
                    assert!(took < Duration::from_secs(5), "{took:?}");
                }
                drop(client);
            })
        });
    }
}

/// A timeout cleared (std's `None`: a zero `timeval`) after a wait that used it: the next read
/// waits for as long as the data takes.
#[test]
fn a_cleared_timeout_waits_for_ever_again() {
    for io in backends() {
        let rt = runtime(1, io);
        watchdog(Duration::from_secs(30), move || {
            rt.block_on(|| {
                let (mut a, mut b) = tcp_pair();
                a.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
                assert_eq!(timed_read(&mut a).0, Err(ErrorKind::WouldBlock));
                a.set_read_timeout(None).unwrap();
                assert_eq!(a.read_timeout().unwrap(), None);
                let writer = spindle_rt::spawn(move || {
                    std::thread::sleep(Duration::from_millis(80));
                    b.write_all(b"x").unwrap();
                    b
                });
                let (r, took) = timed_read(&mut a);
                assert_eq!(r, Ok(1));
                assert!(took >= Duration::from_millis(60), "{took:?}");
                let _b = writer.join().unwrap();
            })
        });
    }
}
