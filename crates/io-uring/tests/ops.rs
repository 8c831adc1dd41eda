//! Every operation, on plain threads: outside a runtime `submit` drives the ring itself.
#![cfg(target_os = "linux")]

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use spindle_io::{Driver, Op, OpKind, Proactor};
use spindle_io_uring::{SetupError, UringConfig, UringDriver};

fn drivers() -> Vec<UringDriver> {
    vec![
        UringConfig::new().build().unwrap(),
        UringConfig::new().defer_taskrun(false).build().unwrap(),
    ]
}

fn proactor(driver: &UringDriver) -> &dyn Proactor {
    driver.proactor().unwrap()
}

fn nonblocking_pair() -> (UnixStream, UnixStream) {
    let (a, b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    (a, b)
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `pipe2` writes two fds into `fds`.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
    assert_eq!(rc, 0);
    // SAFETY: fresh descriptors, owned by nobody else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

fn fd_flags(fd: RawFd) -> (i32, i32) {
    // SAFETY: plain fcntl queries.
    unsafe {
        (
            libc::fcntl(fd, libc::F_GETFL),
            libc::fcntl(fd, libc::F_GETFD),
        )
    }
}

fn sockaddr_v4(addr: SocketAddrV4) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: addr.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*addr.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_storage is larger than sockaddr_in and suitably aligned.
    unsafe { std::ptr::write((&raw mut storage).cast::<libc::sockaddr_in>(), sin) };
    (storage, size_of::<libc::sockaddr_in>() as libc::socklen_t)
}

fn port_of(storage: &libc::sockaddr_storage) -> u16 {
    // SAFETY: the storage holds a sockaddr_in (checked by the caller's family assertion).
    u16::from_be(unsafe {
        (*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>()).sin_port
    })
}

fn new_tcp_socket() -> OwnedFd {
    // SAFETY: plain syscall.
    let fd = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    assert!(fd >= 0);
    // SAFETY: a fresh descriptor.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn temp_file(name: &str) -> (std::fs::File, std::path::PathBuf) {
    let path = std::env::temp_dir().join(format!("spindle-io-uring-{}-{name}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    (file, path)
}

#[test]
fn the_driver_describes_itself() {
    let driver = UringDriver::new().unwrap();
    assert_eq!(driver.name(), "io_uring");
    assert!(driver.reactor().is_none());
    assert!(driver.proactor().is_some());
    for kind in [
        OpKind::Read,
        OpKind::Write,
        OpKind::Recv,
        OpKind::Send,
        OpKind::Accept,
        OpKind::Connect,
        OpKind::Shutdown,
        OpKind::Fsync,
        OpKind::Poll,
        OpKind::RecvFrom,
        OpKind::SendTo,
    ] {
        assert!(driver.proactor().unwrap().supports(kind), "{kind:?} on 6.x");
    }
    assert_eq!(driver.entries(), spindle_io_uring::DEFAULT_ENTRIES);
    assert!(format!("{driver:?}").contains("UringDriver"));
}

#[test]
fn send_and_recv_on_a_socketpair() {
    for driver in drivers() {
        let p = proactor(&driver);
        let (a, b) = nonblocking_pair();
        let n = p
            .submit(
                Op::Send {
                    fd: a.as_raw_fd(),
                    buf: b"hello world",
                    flags: 0,
                },
                None,
            )
            .unwrap();
        assert_eq!(n, 11);
        let mut buf = [0u8; 5];
        // MSG_PEEK leaves the data in the socket.
        let n = p
            .submit(
                Op::Recv {
                    fd: b.as_raw_fd(),
                    buf: &mut buf,
                    flags: libc::MSG_PEEK,
                },
                None,
            )
            .unwrap();
        assert_eq!(&buf[..n], b"hello");
        let mut buf = [0u8; 32];
        let n = p
            .submit(
                Op::Recv {
                    fd: b.as_raw_fd(),
                    buf: &mut buf,
                    flags: 0,
                },
                None,
            )
            .unwrap();
        assert_eq!(&buf[..n], b"hello world");
        assert_eq!(driver.in_flight(), 0);
    }
}

#[test]
fn read_and_write_on_a_nonblocking_pipe() {
    let driver = UringDriver::new().unwrap();
    let p = proactor(&driver);
    let (r, w) = pipe();
    let n = p
        .submit(
            Op::Write {
                fd: w.as_raw_fd(),
                buf: b"through the pipe",
                offset: None,
            },
            None,
        )
        .unwrap();
    assert_eq!(n, 16);
    let mut buf = [0u8; 64];
    let n = p
        .submit(
            Op::Read {
                fd: r.as_raw_fd(),
                buf: &mut buf,
                offset: None,
            },
            None,
        )
        .unwrap();
    assert_eq!(&buf[..n], b"through the pipe");
    // EOF once the writer is gone.
    drop(w);
    let n = p
        .submit(
            Op::Read {
                fd: r.as_raw_fd(),
                buf: &mut buf,
                offset: None,
            },
            None,
        )
        .unwrap();
    assert_eq!(n, 0);
}

#[test]
fn file_read_write_at_offsets_and_at_the_position_then_fsync() {
    let driver = UringDriver::new().unwrap();
    let p = proactor(&driver);
    let (file, path) = temp_file("offsets");
    let fd = file.as_raw_fd();
    // At the file position (advances it), then at explicit offsets.
    assert_eq!(
        p.submit(
            Op::Write {
                fd,
                buf: b"0123456789",
                offset: None
            },
            None
        )
        .unwrap(),
        10
    );
    assert_eq!(
        p.submit(
            Op::Write {
                fd,
                buf: b"abc",
                offset: Some(20)
            },
            None
        )
        .unwrap(),
        3
    );
    assert_eq!(
        p.submit(
            Op::Write {
                fd,
                buf: b"XY",
                offset: None
            },
            None
        )
        .unwrap(),
        2
    );
    assert_eq!(
        p.submit(
            Op::Fsync {
                fd,
                data_only: false
            },
            None
        )
        .unwrap(),
        0
    );
    assert_eq!(
        p.submit(
            Op::Fsync {
                fd,
                data_only: true
            },
            None
        )
        .unwrap(),
        0
    );
    let mut buf = [0u8; 4];
    assert_eq!(
        p.submit(
            Op::Read {
                fd,
                buf: &mut buf,
                offset: Some(8)
            },
            None
        )
        .unwrap(),
        4
    );
    assert_eq!(&buf, b"89XY");
    let mut buf = [0u8; 8];
    assert_eq!(
        p.submit(
            Op::Read {
                fd,
                buf: &mut buf,
                offset: Some(20)
            },
            None
        )
        .unwrap(),
        3
    );
    assert_eq!(&buf[..3], b"abc");
    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(&on_disk[..12], b"0123456789XY");
    assert_eq!(on_disk.len(), 23);
    // Errors are the syscall's: reading a write-only pipe end is EBADF.
    let (_r, w) = pipe();
    let err = p
        .submit(
            Op::Read {
                fd: w.as_raw_fd(),
                buf: &mut buf,
                offset: None,
            },
            None,
        )
        .unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EBADF));
    std::fs::remove_file(path).unwrap();
}

#[test]
fn large_file_transfer() {
    let driver = UringDriver::new().unwrap();
    let p = proactor(&driver);
    let (file, path) = temp_file("large");
    let data: Vec<u8> = (0..16 << 20).map(|i: u32| (i * 7 % 251) as u8).collect();
    let mut written = 0;
    while written < data.len() {
        written += p
            .submit(
                Op::Write {
                    fd: file.as_raw_fd(),
                    buf: &data[written..],
                    offset: Some(written as u64),
                },
                None,
            )
            .unwrap();
    }
    let mut back = vec![0u8; data.len()];
    let mut read = 0;
    while read < back.len() {
        let n = p
            .submit(
                Op::Read {
                    fd: file.as_raw_fd(),
                    buf: &mut back[read..],
                    offset: Some(read as u64),
                },
                None,
            )
            .unwrap();
        assert!(n > 0);
        read += n;
    }
    assert!(back == data);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn large_socket_transfer_both_ways() {
    const SIZE: usize = 8 << 20;
    let driver = UringDriver::new().unwrap();
    let p = proactor(&driver);
    let (a, b) = nonblocking_pair();
    let data: Vec<u8> = (0..SIZE).map(|i| (i % 253) as u8).collect();
    // We send (partial sends: the socket buffer is far smaller), a thread reads with std.
    let reader = std::thread::spawn(move || {
        let mut b = b;
        b.set_nonblocking(false).unwrap();
        let mut got = vec![0u8; SIZE];
        b.read_exact(&mut got).unwrap();
        // Then it writes everything back.
        b.write_all(&got).unwrap();
        got
    });
    let mut sent = 0;
    while sent < SIZE {
        sent += p
            .submit(
                Op::Send {
                    fd: a.as_raw_fd(),
                    buf: &data[sent..],
                    flags: 0,
                },
                None,
            )
            .unwrap();
    }
    let mut back = vec![0u8; SIZE];
    let mut got = 0;
    while got < SIZE {
        let n = p
            .submit(
                Op::Recv {
                    fd: a.as_raw_fd(),
                    buf: &mut back[got..],
                    flags: 0,
                },
                None,
            )
            .unwrap();
        assert!(n > 0);
        got += n;
    }
    assert!(reader.join().unwrap() == data);
    assert!(back == data);
}

#[test]
fn accept_and_connect_over_tcp_loopback() {
    for driver in drivers() {
        let p = proactor(&driver);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let std::net::SocketAddr::V4(addr) = listener.local_addr().unwrap() else {
            unreachable!()
        };
        let client = new_tcp_socket();
        let (to, to_len) = sockaddr_v4(addr);
        assert_eq!(
            p.submit(
                Op::Connect {
                    fd: client.as_raw_fd(),
                    addr: &to,
                    len: to_len
                },
                None
            )
            .unwrap(),
            0
        );
        // SAFETY: all-zero is a valid sockaddr_storage.
        let mut peer: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let fd = p
            .submit(
                Op::Accept {
                    fd: listener.as_raw_fd(),
                    addr: &mut peer,
                    len: &mut len,
                },
                None,
            )
            .unwrap() as RawFd;
        // SAFETY: accept returned a fresh descriptor that we now own.
        let conn = unsafe { OwnedFd::from_raw_fd(fd) };
        assert_eq!(len as usize, size_of::<libc::sockaddr_in>());
        assert_eq!(peer.ss_family, libc::AF_INET as libc::sa_family_t);
        let (status, fd_flags) = fd_flags(conn.as_raw_fd());
        assert_ne!(status & libc::O_NONBLOCK, 0, "accepted non-blocking");
        assert_ne!(fd_flags & libc::FD_CLOEXEC, 0, "accepted close-on-exec");
        // The connection works.
        p.submit(
            Op::Send {
                fd: client.as_raw_fd(),
                buf: b"hi",
                flags: 0,
            },
            None,
        )
        .unwrap();
        let mut buf = [0u8; 2];
        p.submit(
            Op::Recv {
                fd: conn.as_raw_fd(),
                buf: &mut buf,
                flags: 0,
            },
            None,
        )
        .unwrap();
        assert_eq!(&buf, b"hi");
        // The peer's port is the client's.
        // SAFETY: all-zero is a valid sockaddr_storage.
        let mut local: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut local_len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: getsockname writes at most `local_len` bytes.
        unsafe { libc::getsockname(client.as_raw_fd(), (&raw mut local).cast(), &mut local_len) };
        assert_eq!(port_of(&peer), port_of(&local));
    }
}

#[test]
fn connect_refused_is_the_syscalls_error() {
    let driver = UringDriver::new().unwrap();
    let p = proactor(&driver);
    // A port nobody listens on: bind a listener, note its port, close it.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (to, len) = sockaddr_v4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
    let s = new_tcp_socket();
    let err = p
        .submit(
            Op::Connect {
                fd: s.as_raw_fd(),
                addr: &to,
                len,
            },
            None,
        )
        .unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ECONNREFUSED));
}

#[test]
fn udp_send_to_and_recv_from() {
    for driver in drivers() {
        let p = proactor(&driver);
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        let std::net::SocketAddr::V4(b_addr) = b.local_addr().unwrap() else {
            unreachable!()
        };
        let (to, to_len) = sockaddr_v4(b_addr);
        let n = p
            .submit(
                Op::SendTo {
                    fd: a.as_raw_fd(),
                    buf: b"datagram",
                    addr: &to,
                    len: to_len,
                    flags: 0,
                },
                None,
            )
            .unwrap();
        assert_eq!(n, 8);
        let mut buf = [0u8; 64];
        // SAFETY: all-zero is a valid sockaddr_storage.
        let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let n = p
            .submit(
                Op::RecvFrom {
                    fd: b.as_raw_fd(),
                    buf: &mut buf,
                    addr: &mut from,
                    len: &mut len,
                    flags: 0,
                },
                None,
            )
            .unwrap();
        assert_eq!(&buf[..n], b"datagram");
        assert_eq!(
            len as usize,
            size_of::<libc::sockaddr_in>(),
            "the address length is written back"
        );
        assert_eq!(from.ss_family, libc::AF_INET as libc::sa_family_t);
        assert_eq!(port_of(&from), a.local_addr().unwrap().port());
    }
}

#[test]
fn shutdown_gives_the_peer_eof() {
    let driver = UringDriver::new().unwrap();
    let p = proactor(&driver);
    let (a, b) = nonblocking_pair();
    assert_eq!(
        p.submit(
            Op::Shutdown {
                fd: a.as_raw_fd(),
                how: libc::SHUT_WR
            },
            None
        )
        .unwrap(),
        0
    );
    let mut buf = [0u8; 8];
    assert_eq!(
        p.submit(
            Op::Recv {
                fd: b.as_raw_fd(),
                buf: &mut buf,
                flags: 0
            },
            None
        )
        .unwrap(),
        0
    );
    // Sending on the shut side is EPIPE (and no SIGPIPE: MSG_NOSIGNAL).
    let err = p
        .submit(
            Op::Send {
                fd: a.as_raw_fd(),
                buf: b"x",
                flags: 0,
            },
            None,
        )
        .unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EPIPE));
}

#[test]
fn poll_readable_and_writable() {
    let driver = UringDriver::new().unwrap();
    let p = proactor(&driver);
    let (a, b) = nonblocking_pair();
    let events = p
        .submit(Op::PollWritable { fd: a.as_raw_fd() }, None)
        .unwrap();
    assert_ne!(events & libc::POLLOUT as usize, 0);
    // Nothing to read: the poll waits until the deadline.
    let deadline = Instant::now() + Duration::from_millis(30);
    let err = p
        .submit(Op::PollReadable { fd: b.as_raw_fd() }, Some(deadline))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TimedOut);
    // Data arrives from another thread while we wait.
    let mut writer = a.try_clone().unwrap();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        writer.set_nonblocking(false).unwrap();
        writer.write_all(b"!").unwrap();
    });
    let events = p
        .submit(Op::PollReadable { fd: b.as_raw_fd() }, None)
        .unwrap();
    assert_ne!(events & libc::POLLIN as usize, 0);
    t.join().unwrap();
}

/// Send to a closed peer: `EPIPE`, and no `SIGPIPE` is raised. SIGPIPE is blocked on this
/// thread so that one raised would stay pending and show in `sigpending`; a plain `send`
/// without `MSG_NOSIGNAL` serves as the control.
#[test]
fn send_to_a_closed_peer_is_epipe_without_sigpipe() {
    let driver = UringDriver::new().unwrap();
    let p = proactor(&driver);
    // SAFETY: sigset manipulation on local sets; blocks SIGPIPE for this thread only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    let sigpipe_pending = || {
        // SAFETY: sigpending writes one sigset.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigpending(&mut set);
            libc::sigismember(&set, libc::SIGPIPE) == 1
        }
    };
    let take_sigpipe = || {
        // SAFETY: waits (no time) for a pending SIGPIPE, consuming it.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGPIPE);
            let zero = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            libc::sigtimedwait(&set, std::ptr::null_mut(), &zero);
        }
    };
    assert!(!sigpipe_pending());
    for closed_by_peer in [true, false] {
        let (a, b) = nonblocking_pair();
        if closed_by_peer {
            drop(b);
        } else {
            a.shutdown(std::net::Shutdown::Write).unwrap();
        }
        let err = p
            .submit(
                Op::Send {
                    fd: a.as_raw_fd(),
                    buf: b"lost",
                    flags: 0,
                },
                None,
            )
            .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EPIPE));
        assert!(!sigpipe_pending(), "io_uring send raised SIGPIPE");
        // Control: the plain syscall without MSG_NOSIGNAL does raise it (so the check works).
        // SAFETY: sends 1 byte from a static buffer.
        let rc = unsafe { libc::send(a.as_raw_fd(), b"x".as_ptr().cast(), 1, 0) };
        assert_eq!(rc, -1);
        assert!(sigpipe_pending(), "the control send raised SIGPIPE");
        take_sigpipe();
    }
}

/// What io_uring does on this kernel with an operation on an `O_NONBLOCK` source that would
/// block: it waits inside the kernel (no `EAGAIN` reaches us), and the wait can be cut by a
/// deadline (cancel) or ended by the event.
#[test]
fn nonblocking_sources_wait_in_the_kernel() {
    let driver = UringDriver::new().unwrap();
    let p = proactor(&driver);
    let short = || Some(Instant::now() + Duration::from_millis(30));
    let (a, b) = nonblocking_pair();
    let (r, w) = pipe();
    let mut buf = [0u8; 16];
    let timed_out = |r: std::io::Result<usize>| {
        assert_eq!(r.unwrap_err().kind(), ErrorKind::TimedOut);
    };
    timed_out(p.submit(
        Op::Recv {
            fd: a.as_raw_fd(),
            buf: &mut buf,
            flags: 0,
        },
        short(),
    ));
    timed_out(p.submit(
        Op::Read {
            fd: a.as_raw_fd(),
            buf: &mut buf,
            offset: None,
        },
        short(),
    ));
    timed_out(p.submit(
        Op::Read {
            fd: r.as_raw_fd(),
            buf: &mut buf,
            offset: None,
        },
        short(),
    ));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut peer: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    timed_out(p.submit(
        Op::Accept {
            fd: listener.as_raw_fd(),
            addr: &mut peer,
            len: &mut len,
        },
        short(),
    ));
    // Fill the socket and the pipe, then a send/write waits for room.
    let chunk = vec![0u8; 1 << 16];
    // SAFETY: non-blocking sends from `chunk` until the buffer is full.
    while unsafe {
        libc::send(
            b.as_raw_fd(),
            chunk.as_ptr().cast(),
            chunk.len(),
            libc::MSG_DONTWAIT,
        )
    } > 0
    {}
    // SAFETY: non-blocking writes from `chunk` until the pipe is full.
    while unsafe { libc::write(w.as_raw_fd(), chunk.as_ptr().cast(), chunk.len()) } > 0 {}
    timed_out(p.submit(
        Op::Send {
            fd: b.as_raw_fd(),
            buf: b"more",
            flags: 0,
        },
        short(),
    ));
    timed_out(p.submit(
        Op::Write {
            fd: b.as_raw_fd(),
            buf: b"more",
            offset: None,
        },
        short(),
    ));
    timed_out(p.submit(
        Op::Write {
            fd: w.as_raw_fd(),
            buf: b"more",
            offset: None,
        },
        short(),
    ));
    // Asked for explicitly, MSG_DONTWAIT does answer EAGAIN.
    let (e, _f) = nonblocking_pair();
    let err = p
        .submit(
            Op::Recv {
                fd: e.as_raw_fd(),
                buf: &mut buf,
                flags: libc::MSG_DONTWAIT,
            },
            None,
        )
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WouldBlock);
    // A waiting receive completes when data comes.
    let (c, d) = nonblocking_pair();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        let mut d = d;
        d.set_nonblocking(false).unwrap();
        d.write_all(b"late").unwrap();
        d
    });
    let n = p
        .submit(
            Op::Recv {
                fd: c.as_raw_fd(),
                buf: &mut buf,
                flags: 0,
            },
            None,
        )
        .unwrap();
    assert_eq!(&buf[..n], b"late");
    t.join().unwrap();
    assert_eq!(driver.in_flight(), 0);
}

/// Outside a runtime, a deadline cancels the operation in the kernel before `submit` returns:
/// data sent afterwards is still there for a plain read, and the buffer was not written.
#[test]
fn deadline_cancel_on_a_thread_leaves_the_buffer_and_the_data_alone() {
    for driver in drivers() {
        let p = proactor(&driver);
        let (a, b) = nonblocking_pair();
        let mut buf = [0x55u8; 16];
        let start = Instant::now();
        let err = p
            .submit(
                Op::Recv {
                    fd: a.as_raw_fd(),
                    buf: &mut buf,
                    flags: 0,
                },
                Some(start + Duration::from_millis(40)),
            )
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::TimedOut);
        assert!(start.elapsed() >= Duration::from_millis(40));
        assert_eq!(
            driver.in_flight(),
            0,
            "the cancelled receive completed in the kernel"
        );
        let mut b = b;
        b.set_nonblocking(false).unwrap();
        b.write_all(b"kept").unwrap();
        let mut a = a;
        a.set_nonblocking(false).unwrap();
        let mut got = [0u8; 4];
        a.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"kept");
        assert_eq!(buf, [0x55u8; 16]);
    }
}

#[test]
fn ring_setup_failure_is_a_clear_error() {
    for entries in [0, 1 << 20] {
        let err = UringConfig::new().entries(entries).build().unwrap_err();
        let message = err.to_string();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{message}");
        assert!(message.contains("io_uring_setup failed"), "{message}");
        assert!(
            message.contains(&format!("entries = {entries}")),
            "{message}"
        );
        assert!(message.contains("falls back to epoll"), "{message}");
        let setup = err
            .get_ref()
            .and_then(|e| e.downcast_ref::<SetupError>())
            .unwrap();
        assert_eq!(setup.os_error(), Some(libc::EINVAL));
    }
    // A completion queue smaller than the submission queue is refused too.
    let err = UringConfig::new()
        .entries(64)
        .cq_entries(8)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("cq_entries"), "{err}");
}

#[test]
fn sqpoll_ring_works() {
    let driver = UringConfig::new()
        .sqpoll(Some(Duration::from_millis(10)))
        .build()
        .unwrap();
    assert!(!driver.is_defer_taskrun());
    let p = proactor(&driver);
    let (a, b) = nonblocking_pair();
    p.submit(
        Op::Send {
            fd: a.as_raw_fd(),
            buf: b"polled",
            flags: 0,
        },
        None,
    )
    .unwrap();
    let mut buf = [0u8; 8];
    let n = p
        .submit(
            Op::Recv {
                fd: b.as_raw_fd(),
                buf: &mut buf,
                flags: 0,
            },
            None,
        )
        .unwrap();
    assert_eq!(&buf[..n], b"polled");
}
