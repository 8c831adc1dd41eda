//! The IOCP driver against loopback sockets (Windows only; CI runs these under Wine). Most
//! tests call `submit` on a plain thread, where it drives the port itself; the `in_task` tests
//! install a small stand-in for a runtime's worker (a `spindle_park::Hook` whose `park` runs
//! the driver), so that the task path, deadlines and cancellation run as they would in a
//! runtime.
#![cfg(windows)]

use std::cell::Cell;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::os::windows::io::{AsRawSocket, FromRawSocket, RawSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::task::{Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

use spindle_io::{Driver, Op, OpKind, Proactor, Unpark};
use spindle_io_iocp::{ACCEPT_ADDRESSES_LEN, IocpDriver};
use windows_sys::Win32::Networking::WinSock::{
    AF_INET, FIONBIO, INVALID_SOCKET, IPPROTO_TCP, LINGER, SO_LINGER, SOCK_STREAM, SOCKADDR,
    SOCKET_ERROR, SOL_SOCKET, WSA_FLAG_NO_HANDLE_INHERIT, WSA_FLAG_OVERLAPPED, WSASocketW, bind,
    ioctlsocket, setsockopt,
};

// ---------------------------------------------------------------------------------------
// Helpers.

fn proactor(driver: &IocpDriver) -> &dyn Proactor {
    driver.proactor().unwrap()
}

/// A connected loopback pair: (client, server).
fn tcp_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    (client, server)
}

/// A `SOCKADDR_IN`'s bytes.
fn sockaddr(addr: SocketAddr) -> Vec<u8> {
    let SocketAddr::V4(v4) = addr else {
        panic!("IPv4 only")
    };
    let mut bytes = vec![0u8; 16];
    bytes[..2].copy_from_slice(&AF_INET.to_ne_bytes());
    bytes[2..4].copy_from_slice(&v4.port().to_be_bytes());
    bytes[4..8].copy_from_slice(&v4.ip().octets());
    bytes
}

fn parse_sockaddr(bytes: &[u8]) -> SocketAddr {
    assert_eq!(u16::from_ne_bytes([bytes[0], bytes[1]]), AF_INET);
    let port = u16::from_be_bytes([bytes[2], bytes[3]]);
    let ip = Ipv4Addr::new(bytes[4], bytes[5], bytes[6], bytes[7]);
    SocketAddr::V4(SocketAddrV4::new(ip, port))
}

/// A fresh overlapped TCP socket, unbound (for `AcceptEx`) or bound to 127.0.0.1:0 (for
/// `ConnectEx`), owned by a `TcpStream` so that it is closed on drop.
fn fresh_tcp_socket(bound: bool) -> TcpStream {
    // SAFETY: creates a socket; the result is checked.
    let s = unsafe {
        WSASocketW(
            i32::from(AF_INET),
            SOCK_STREAM,
            IPPROTO_TCP,
            std::ptr::null(),
            0,
            WSA_FLAG_OVERLAPPED | WSA_FLAG_NO_HANDLE_INHERIT,
        )
    };
    assert_ne!(s, INVALID_SOCKET, "{}", io::Error::last_os_error());
    if bound {
        let addr = sockaddr("127.0.0.1:0".parse().unwrap());
        // SAFETY: binds the new socket to a valid SOCKADDR_IN of 16 bytes.
        let r = unsafe { bind(s, addr.as_ptr().cast::<SOCKADDR>(), addr.len() as i32) };
        assert_ne!(r, SOCKET_ERROR, "{}", io::Error::last_os_error());
    }
    // SAFETY: `s` is a new socket that nothing else owns.
    unsafe { TcpStream::from_raw_socket(s as RawSocket) }
}

/// Makes the peer's close send a reset (SO_LINGER with a zero timeout).
fn linger_zero(s: &TcpStream) {
    let linger = LINGER {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid LINGER of the size given, on a live socket.
    let r = unsafe {
        setsockopt(
            s.as_raw_socket() as usize,
            SOL_SOCKET,
            SO_LINGER,
            std::ptr::from_ref(&linger).cast::<u8>(),
            std::mem::size_of::<LINGER>() as i32,
        )
    };
    assert_ne!(r, SOCKET_ERROR);
}

fn recv(
    p: &dyn Proactor,
    s: &TcpStream,
    buf: &mut [u8],
    deadline: Option<Instant>,
) -> io::Result<usize> {
    p.submit(
        Op::Recv {
            socket: s.as_raw_socket(),
            buf,
            flags: 0,
        },
        deadline,
    )
}

fn send(p: &dyn Proactor, s: &TcpStream, buf: &[u8]) -> io::Result<usize> {
    p.submit(
        Op::Send {
            socket: s.as_raw_socket(),
            buf,
        },
        None,
    )
}

fn soon() -> Option<Instant> {
    Some(Instant::now() + Duration::from_secs(20))
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

// ---------------------------------------------------------------------------------------
// Operations, driven on a plain thread.

#[test]
fn supports_the_windows_operations() {
    let driver = IocpDriver::new().unwrap();
    let p = proactor(&driver);
    for kind in [
        OpKind::Recv,
        OpKind::Send,
        OpKind::Accept,
        OpKind::Connect,
        OpKind::RecvFrom,
        OpKind::SendTo,
    ] {
        assert!(p.supports(kind), "{kind:?}");
    }
    assert!(!p.supports(OpKind::Fsync));
    assert_eq!(driver.name(), "iocp");
}

#[test]
fn send_and_recv_over_tcp() {
    let driver = IocpDriver::new().unwrap();
    let p = proactor(&driver);
    let (client, server) = tcp_pair();
    p.register(client.as_raw_socket()).unwrap();
    p.register(server.as_raw_socket()).unwrap();
    assert_eq!(send(p, &client, b"ping").unwrap(), 4);
    let mut buf = [0u8; 16];
    let n = recv(p, &server, &mut buf, soon()).unwrap();
    assert_eq!(&buf[..n], b"ping");
    assert_eq!(send(p, &server, b"pong!").unwrap(), 5);
    let n = recv(p, &client, &mut buf, soon()).unwrap();
    assert_eq!(&buf[..n], b"pong!");
}

#[test]
fn a_pending_recv_completes_when_data_arrives() {
    let driver = IocpDriver::new().unwrap();
    let p = proactor(&driver);
    let (mut client, server) = tcp_pair();
    p.register(server.as_raw_socket()).unwrap();
    let writer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        client.write_all(b"late").unwrap();
        client
    });
    let start = Instant::now();
    let mut buf = [0u8; 16];
    let n = recv(p, &server, &mut buf, soon()).unwrap();
    assert_eq!(&buf[..n], b"late");
    assert!(start.elapsed() >= Duration::from_millis(50));
    writer.join().unwrap();
}

#[test]
fn peek_leaves_the_data() {
    let driver = IocpDriver::new().unwrap();
    let p = proactor(&driver);
    let (mut client, server) = tcp_pair();
    p.register(server.as_raw_socket()).unwrap();
    client.write_all(b"abc").unwrap();
    let mut buf = [0u8; 8];
    let n = p
        .submit(
            Op::Recv {
                socket: server.as_raw_socket(),
                buf: &mut buf,
                flags: windows_sys::Win32::Networking::WinSock::MSG_PEEK as u32,
            },
            soon(),
        )
        .unwrap();
    assert_eq!(&buf[..n], b"abc");
    let n = recv(p, &server, &mut buf, soon()).unwrap();
    assert_eq!(&buf[..n], b"abc");
}

#[test]
fn connect_then_accept() {
    let driver = IocpDriver::new().unwrap();
    let p = proactor(&driver);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let server_addr = listener.local_addr().unwrap();
    p.register(listener.as_raw_socket()).unwrap();
    let client = fresh_tcp_socket(true);
    p.register(client.as_raw_socket()).unwrap();
    let target = sockaddr(server_addr);
    let n = p
        .submit(
            Op::Connect {
                socket: client.as_raw_socket(),
                addr: &target,
            },
            soon(),
        )
        .unwrap();
    assert_eq!(n, 0);
    // SO_UPDATE_CONNECT_CONTEXT makes the socket's peer known.
    assert_eq!(client.peer_addr().unwrap(), server_addr);

    let accepted = fresh_tcp_socket(false);
    let mut addresses = vec![0u8; ACCEPT_ADDRESSES_LEN];
    let n = p
        .submit(
            Op::Accept {
                socket: listener.as_raw_socket(),
                accepted: accepted.as_raw_socket(),
                addresses: &mut addresses,
            },
            soon(),
        )
        .unwrap();
    assert_eq!(n, 0);
    // SO_UPDATE_ACCEPT_CONTEXT makes the accepted socket's addresses known.
    assert_eq!(accepted.peer_addr().unwrap(), client.local_addr().unwrap());
    assert_eq!(accepted.local_addr().unwrap(), server_addr);
    assert!(addresses.iter().any(|&b| b != 0));

    p.register(accepted.as_raw_socket()).unwrap();
    assert_eq!(send(p, &client, b"over ConnectEx").unwrap(), 14);
    let mut buf = [0u8; 32];
    let n = recv(p, &accepted, &mut buf, soon()).unwrap();
    assert_eq!(&buf[..n], b"over ConnectEx");
}

#[test]
fn a_pending_accept_completes_when_a_client_connects() {
    let driver = IocpDriver::new().unwrap();
    let p = proactor(&driver);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    p.register(listener.as_raw_socket()).unwrap();
    let connector = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"hi").unwrap();
        c
    });
    let accepted = fresh_tcp_socket(false);
    let mut addresses = [0u8; ACCEPT_ADDRESSES_LEN];
    p.submit(
        Op::Accept {
            socket: listener.as_raw_socket(),
            accepted: accepted.as_raw_socket(),
            addresses: &mut addresses,
        },
        soon(),
    )
    .unwrap();
    let client = connector.join().unwrap();
    assert_eq!(accepted.peer_addr().unwrap(), client.local_addr().unwrap());
    p.register(accepted.as_raw_socket()).unwrap();
    let mut buf = [0u8; 4];
    let n = recv(p, &accepted, &mut buf, soon()).unwrap();
    assert_eq!(&buf[..n], b"hi");
}

#[test]
fn accept_wants_room_for_the_addresses() {
    let driver = IocpDriver::new().unwrap();
    let p = proactor(&driver);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    p.register(listener.as_raw_socket()).unwrap();
    let accepted = fresh_tcp_socket(false);
    let mut small = [0u8; 16];
    let err = p
        .submit(
            Op::Accept {
                socket: listener.as_raw_socket(),
                accepted: accepted.as_raw_socket(),
                addresses: &mut small,
            },
            soon(),
        )
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
}

#[test]
fn connect_to_a_closed_port_is_refused() {
    let driver = IocpDriver::new().unwrap();
    let p = proactor(&driver);
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let client = fresh_tcp_socket(true);
    p.register(client.as_raw_socket()).unwrap();
    let target = sockaddr(port);
    let err = p
        .submit(
            Op::Connect {
                socket: client.as_raw_socket(),
                addr: &target,
            },
            soon(),
        )
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused, "{err}");
}

#[test]
fn udp_send_to_and_recv_from() {
    let driver = IocpDriver::new().unwrap();
    let p = proactor(&driver);
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    p.register(a.as_raw_socket()).unwrap();
    p.register(b.as_raw_socket()).unwrap();
    let to = sockaddr(b.local_addr().unwrap());
    let n = p
        .submit(
            Op::SendTo {
                socket: a.as_raw_socket(),
                buf: b"datagram",
                addr: &to,
            },
            None,
        )
        .unwrap();
    assert_eq!(n, 8);
    let mut buf = [0u8; 64];
    let mut from = [0u8; 128];
    let mut from_len = 0i32;
    let n = p
        .submit(
            Op::RecvFrom {
                socket: b.as_raw_socket(),
                buf: &mut buf,
                addr: &mut from,
                len: &mut from_len,
                flags: 0,
            },
            soon(),
        )
        .unwrap();
    assert_eq!(&buf[..n], b"datagram");
    assert!(from_len >= 16, "{from_len}");
    assert_eq!(parse_sockaddr(&from), a.local_addr().unwrap());
}

#[test]
fn a_pending_recv_from_completes_when_a_datagram_arrives() {
    let driver = IocpDriver::new().unwrap();
    let p = proactor(&driver);
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    p.register(b.as_raw_socket()).unwrap();
    let to = b.local_addr().unwrap();
    let from_addr = a.local_addr().unwrap();
    let sender = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        a.send_to(b"later", to).unwrap();
    });
    let mut buf = [0u8; 64];
    let mut from = [0u8; 128];
    let mut from_len = 0i32;
    let n = p
        .submit(
            Op::RecvFrom {
                socket: b.as_raw_socket(),
                buf: &mut buf,
                addr: &mut from,
                len: &mut from_len,
                flags: 0,
            },
            soon(),
        )
        .unwrap();
    assert_eq!(&buf[..n], b"later");
    assert_eq!(parse_sockaddr(&from), from_addr);
    sender.join().unwrap();
}

#[test]
fn large_transfers_both_ways() {
    const LEN: usize = 8 << 20;
    let driver = IocpDriver::new().unwrap();
    let p = proactor(&driver);
    let (client, server) = tcp_pair();
    p.register(client.as_raw_socket()).unwrap();
    let data = Arc::new(pattern(LEN));

    // Out: our sends (large ones, completing in parts) against a std reader.
    let mut reader = server.try_clone().unwrap();
    let reading = thread::spawn(move || {
        let mut got = vec![0u8; LEN];
        reader.read_exact(&mut got).unwrap();
        got
    });
    let mut sent = 0;
    while sent < LEN {
        let end = (sent + (3 << 20)).min(LEN);
        sent += send(p, &client, &data[sent..end]).unwrap();
    }
    assert!(reading.join().unwrap() == *data, "sent bytes differ");

    // In: a std writer against our receives.
    let mut writer = server.try_clone().unwrap();
    let data2 = data.clone();
    let writing = thread::spawn(move || writer.write_all(&data2).unwrap());
    let mut got = vec![0u8; LEN];
    let mut filled = 0;
    while filled < LEN {
        let n = recv(p, &client, &mut got[filled..], soon()).unwrap();
        assert!(n > 0, "early end of stream at {filled}");
        filled += n;
    }
    writing.join().unwrap();
    assert!(got == *data, "received bytes differ");
}

#[test]
fn a_recv_past_its_deadline_times_out_and_leaves_the_buffer_untouched() {
    let driver = IocpDriver::new().unwrap();
    let p = proactor(&driver);
    let (mut client, server) = tcp_pair();
    p.register(server.as_raw_socket()).unwrap();
    let mut buf = [0xAAu8; 64];
    let start = Instant::now();
    let err = recv(
        p,
        &server,
        &mut buf,
        Some(Instant::now() + Duration::from_millis(100)),
    )
    .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
    assert!(start.elapsed() >= Duration::from_millis(90));
    // Data that comes later is not written into the old buffer...
    client.write_all(b"after").unwrap();
    thread::sleep(Duration::from_millis(50));
    driver.park(Some(Duration::ZERO)).unwrap();
    assert!(buf.iter().all(|&b| b == 0xAA));
    // ...and is not lost: the next recv gets it.
    let mut fresh = [0u8; 16];
    let n = recv(p, &server, &mut fresh, soon()).unwrap();
    assert_eq!(&fresh[..n], b"after");
}

#[test]
fn a_peer_reset_fails_the_recv() {
    let driver = IocpDriver::new().unwrap();
    let p = proactor(&driver);
    let (client, server) = tcp_pair();
    p.register(server.as_raw_socket()).unwrap();
    linger_zero(&client);
    let closer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        drop(client);
    });
    let mut buf = [0u8; 16];
    let err = recv(p, &server, &mut buf, soon()).unwrap_err();
    assert!(
        matches!(
            err.kind(),
            io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted
        ),
        "{err} ({:?})",
        err.kind()
    );
    closer.join().unwrap();
}

#[test]
fn an_orderly_close_reads_as_the_end_of_the_stream() {
    let driver = IocpDriver::new().unwrap();
    let p = proactor(&driver);
    let (client, server) = tcp_pair();
    p.register(server.as_raw_socket()).unwrap();
    drop(client);
    let mut buf = [0u8; 16];
    assert_eq!(recv(p, &server, &mut buf, soon()).unwrap(), 0);
}

/// Overlapped operations on a socket in non-blocking mode are queued like any other (Windows
/// fails only non-overlapped calls with `WSAEWOULDBLOCK`), so the IO types may keep IOCP
/// sockets non-blocking: this recv pends, then times out, and a later one gets the data.
#[test]
fn overlapped_recv_on_a_non_blocking_socket() {
    let driver = IocpDriver::new().unwrap();
    let p = proactor(&driver);
    let (mut client, server) = tcp_pair();
    let mut on = 1u32;
    // SAFETY: FIONBIO takes a u32 flag, on a live socket.
    let r = unsafe { ioctlsocket(server.as_raw_socket() as usize, FIONBIO, &mut on) };
    assert_ne!(r, SOCKET_ERROR);
    p.register(server.as_raw_socket()).unwrap();
    let mut buf = [0xAAu8; 16];
    let err = recv(
        p,
        &server,
        &mut buf,
        Some(Instant::now() + Duration::from_millis(50)),
    )
    .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err:?}");
    assert!(buf.iter().all(|&b| b == 0xAA));
    let writer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        client.write_all(b"x").unwrap();
        client
    });
    let n = recv(p, &server, &mut buf, soon()).unwrap();
    assert_eq!(&buf[..n], b"x");
    writer.join().unwrap();
}

// ---------------------------------------------------------------------------------------
// Park and unpark.

#[test]
fn park_with_a_zero_timeout_does_not_block() {
    let driver = IocpDriver::new().unwrap();
    let start = Instant::now();
    assert_eq!(driver.park(Some(Duration::ZERO)).unwrap(), 0);
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[test]
fn park_waits_for_its_timeout() {
    let driver = IocpDriver::new().unwrap();
    let start = Instant::now();
    assert_eq!(driver.park(Some(Duration::from_millis(60))).unwrap(), 0);
    assert!(start.elapsed() >= Duration::from_millis(55));
}

#[test]
fn unpark_before_park_makes_it_return_at_once() {
    let driver = IocpDriver::new().unwrap();
    driver.unparker().unpark();
    let start = Instant::now();
    driver.park(Some(Duration::from_secs(10))).unwrap();
    assert!(start.elapsed() < Duration::from_secs(5));
    // The token was consumed: the next park waits for its timeout.
    let start = Instant::now();
    driver.park(Some(Duration::from_millis(50))).unwrap();
    assert!(start.elapsed() >= Duration::from_millis(45));
}

#[test]
fn unpark_from_another_thread_ends_a_blocked_park() {
    let driver = IocpDriver::new().unwrap();
    let unparker = driver.unparker();
    let t = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        unparker.unpark();
    });
    let start = Instant::now();
    driver.park(Some(Duration::from_secs(10))).unwrap();
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(50), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    t.join().unwrap();
}

#[test]
fn no_lost_wake_ups() {
    const ROUNDS: usize = 2000;
    let driver = IocpDriver::new().unwrap();
    let unparker = driver.unparker();
    let posted = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(AtomicUsize::new(0));
    let (posted2, seen2) = (posted.clone(), seen.clone());
    let t = thread::spawn(move || {
        for i in 1..=ROUNDS {
            posted2.store(i, Ordering::SeqCst);
            unparker.unpark();
            while seen2.load(Ordering::SeqCst) < i {
                thread::yield_now();
            }
        }
    });
    let mut slow = 0;
    while seen.load(Ordering::SeqCst) < ROUNDS {
        let p = posted.load(Ordering::SeqCst);
        if p > seen.load(Ordering::SeqCst) {
            seen.store(p, Ordering::SeqCst);
            continue;
        }
        let start = Instant::now();
        driver.park(Some(Duration::from_secs(5))).unwrap();
        if start.elapsed() >= Duration::from_secs(4) {
            slow += 1;
        }
    }
    t.join().unwrap();
    assert_eq!(slow, 0, "a park slept through an unpark");
}

#[test]
fn drop_with_nothing_in_flight() {
    let (client, server) = tcp_pair();
    let unparker;
    {
        let driver = IocpDriver::new().unwrap();
        let p = proactor(&driver);
        p.register(server.as_raw_socket()).unwrap();
        p.register(client.as_raw_socket()).unwrap();
        // A completed operation whose packet is still queued when the driver goes.
        send(p, &client, b"queued").unwrap();
        unparker = driver.unparker();
    }
    // The unparker outlives its driver harmlessly.
    unparker.unpark();
    // The sockets still work (synchronously).
    let mut server = server;
    let mut buf = [0u8; 6];
    server.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"queued");
}

// ---------------------------------------------------------------------------------------
// Two drivers.

/// A driver parking in a loop on its own thread; `register` runs there.
struct DriverThread {
    unparker: Arc<dyn Unpark>,
    stop: Arc<AtomicBool>,
    requests: mpsc::Sender<(RawSocket, mpsc::Sender<io::Result<()>>)>,
    thread: Option<thread::JoinHandle<()>>,
}

impl DriverThread {
    fn start() -> DriverThread {
        let (tx, rx) = mpsc::channel();
        let (req_tx, req_rx) = mpsc::channel::<(RawSocket, mpsc::Sender<io::Result<()>>)>();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = thread::spawn(move || {
            let driver = IocpDriver::new().unwrap();
            tx.send(driver.unparker()).unwrap();
            while !stop2.load(Ordering::Acquire) {
                while let Ok((socket, reply)) = req_rx.try_recv() {
                    let _ = reply.send(driver.proactor().unwrap().register(socket));
                }
                driver.park(None).unwrap();
            }
        });
        DriverThread {
            unparker: rx.recv().unwrap(),
            stop,
            requests: req_tx,
            thread: Some(thread),
        }
    }

    fn register(&self, socket: RawSocket) -> io::Result<()> {
        let (tx, rx) = mpsc::channel();
        self.requests.send((socket, tx)).unwrap();
        self.unparker.unpark();
        rx.recv().unwrap()
    }
}

impl Drop for DriverThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.unparker.unpark();
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

#[test]
fn a_socket_registered_with_another_live_driver_still_completes() {
    let other = DriverThread::start();
    let (mut client, server) = tcp_pair();
    other.register(server.as_raw_socket()).unwrap();
    let driver = IocpDriver::new().unwrap();
    let p = proactor(&driver);
    // Moved to this driver's port where the system allows it; otherwise the other driver
    // dispatches the completion and wakes this one.
    p.register(server.as_raw_socket()).unwrap();
    let writer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        client.write_all(b"across").unwrap();
        client
    });
    let mut buf = [0u8; 16];
    let n = recv(p, &server, &mut buf, soon()).unwrap();
    assert_eq!(&buf[..n], b"across");
    writer.join().unwrap();
}

// ---------------------------------------------------------------------------------------
// In a task: a stand-in for a runtime's worker.

/// The panic payload a cancelled task unwinds with.
struct Cancelled;

/// One task on one worker: `park` runs the driver until the task's waker fires.
struct Worker<'d> {
    driver: &'d IocpDriver,
    permit: Arc<Permit>,
    cancel: Arc<AtomicBool>,
    deferred: Cell<u32>,
    /// A deferred cancellation made `park` return once already.
    reported: Cell<bool>,
    /// What `on_copying_stack` says.
    copying: bool,
}

struct Permit {
    set: AtomicBool,
    unparker: Arc<dyn Unpark>,
}

impl Wake for Permit {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.set.store(true, Ordering::SeqCst);
        self.unparker.unpark();
    }
}

impl<'d> Worker<'d> {
    fn new(driver: &'d IocpDriver, cancel: Arc<AtomicBool>) -> Self {
        Worker {
            driver,
            permit: Arc::new(Permit {
                set: AtomicBool::new(false),
                unparker: driver.unparker(),
            }),
            cancel,
            deferred: Cell::new(0),
            reported: Cell::new(false),
            copying: false,
        }
    }

    /// Runs `f` as this worker's task.
    fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        // SAFETY: on the test thread's own stack; `f` runs on it and suspends no coroutine.
        unsafe { spindle_io::with_driver(self.driver, || spindle_park::with_hook(self, f)) }
    }

    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::SeqCst)
    }
}

impl spindle_park::Hook for Worker<'_> {
    fn in_task(&self) -> bool {
        true
    }

    fn park(&self, deadline: Option<Instant>) -> spindle_park::Wake {
        loop {
            if self.permit.set.swap(false, Ordering::SeqCst) {
                return spindle_park::Wake::Woken;
            }
            if self.cancelled() {
                if self.deferred.get() == 0 {
                    std::panic::resume_unwind(Box::new(Cancelled));
                }
                if !self.reported.replace(true) {
                    return spindle_park::Wake::Woken;
                }
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return spindle_park::Wake::TimedOut;
            }
            // Short slices, so that a cancel request from another thread is seen.
            let mut slice = Duration::from_millis(10);
            if let Some(d) = deadline {
                slice = slice.min(d - now);
            }
            self.driver.park(Some(slice)).unwrap();
        }
    }

    fn waker(&self) -> Waker {
        Waker::from(self.permit.clone())
    }

    fn defer_cancel(&self, defer: bool) {
        let d = self.deferred.get();
        self.deferred.set(if defer { d + 1 } else { d - 1 });
    }

    fn cancel_requested(&self) -> bool {
        self.cancelled()
    }

    fn checkpoint(&self) {
        if self.cancelled() && self.deferred.get() == 0 {
            std::panic::resume_unwind(Box::new(Cancelled));
        }
    }

    fn on_copying_stack(&self) -> bool {
        self.copying
    }
}

#[test]
fn in_task_a_recv_parks_the_task_until_the_worker_dispatches_it() {
    let driver = IocpDriver::new().unwrap();
    let worker = Worker::new(&driver, Arc::new(AtomicBool::new(false)));
    let (mut client, server) = tcp_pair();
    let writer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        client.write_all(b"task").unwrap();
        client
    });
    let got = worker.run(|| {
        // SAFETY: only reads the driver's name.
        assert!(unsafe { spindle_io::current(|d| d.name()) } == Some("iocp"));
        let p = proactor(&driver);
        p.register(server.as_raw_socket()).unwrap();
        let mut buf = [0u8; 16];
        let n = recv(p, &server, &mut buf, soon()).unwrap();
        buf[..n].to_vec()
    });
    assert_eq!(got, b"task");
    writer.join().unwrap();
}

#[test]
fn in_task_a_deadline_cancels_and_waits_for_the_completion() {
    let driver = IocpDriver::new().unwrap();
    let worker = Worker::new(&driver, Arc::new(AtomicBool::new(false)));
    let (mut client, server) = tcp_pair();
    let mut buf = [0xAAu8; 32];
    let start = Instant::now();
    let err = worker
        .run(|| {
            let p = proactor(&driver);
            p.register(server.as_raw_socket()).unwrap();
            recv(
                p,
                &server,
                &mut buf,
                Some(Instant::now() + Duration::from_millis(100)),
            )
        })
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
    assert!(start.elapsed() >= Duration::from_millis(90));
    client.write_all(b"later").unwrap();
    thread::sleep(Duration::from_millis(50));
    driver.park(Some(Duration::ZERO)).unwrap();
    assert!(buf.iter().all(|&b| b == 0xAA));
}

#[test]
fn in_task_a_cancelled_recv_waits_for_the_kernel_then_unwinds() {
    let driver = IocpDriver::new().unwrap();
    let cancel = Arc::new(AtomicBool::new(false));
    let worker = Worker::new(&driver, cancel.clone());
    let (mut client, server) = tcp_pair();
    let canceller = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        cancel.store(true, Ordering::SeqCst);
    });
    let mut buf = [0xAAu8; 32];
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        worker.run(|| {
            let p = proactor(&driver);
            p.register(server.as_raw_socket()).unwrap();
            recv(p, &server, &mut buf, None)
        })
    }));
    let payload = outcome.expect_err("the cancelled task unwinds");
    assert!(payload.is::<Cancelled>());
    assert_eq!(worker.deferred.get(), 0, "the cancel guard was released");
    canceller.join().unwrap();
    // The operation was aborted before `submit` unwound: later data goes elsewhere.
    client.write_all(b"later").unwrap();
    thread::sleep(Duration::from_millis(50));
    driver.park(Some(Duration::ZERO)).unwrap();
    assert!(buf.iter().all(|&b| b == 0xAA));
    let mut fresh = [0u8; 16];
    let n = recv(proactor(&driver), &server, &mut fresh, soon()).unwrap();
    assert_eq!(&fresh[..n], b"later");
}

#[test]
fn a_socket_outlives_the_driver_it_was_registered_with() {
    let (mut client, server) = tcp_pair();
    {
        let first = IocpDriver::new().unwrap();
        proactor(&first).register(server.as_raw_socket()).unwrap();
    }
    let driver = IocpDriver::new().unwrap();
    let p = proactor(&driver);
    // Moved to this port where the system allows it; otherwise its completions go to the
    // dead port, and waits watch the operation's status instead.
    p.register(server.as_raw_socket()).unwrap();
    let mut buf = [0xAAu8; 16];
    let err = recv(
        p,
        &server,
        &mut buf,
        Some(Instant::now() + Duration::from_millis(100)),
    )
    .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
    assert!(buf.iter().all(|&b| b == 0xAA));
    let writer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        client.write_all(b"still here").unwrap();
        client
    });
    let n = recv(p, &server, &mut buf, soon()).unwrap();
    assert_eq!(&buf[..n], b"still here");
    writer.join().unwrap();
}

#[test]
fn in_task_on_a_copying_stack_the_kernel_gets_heap_copies() {
    let driver = IocpDriver::new().unwrap();
    let mut worker = Worker::new(&driver, Arc::new(AtomicBool::new(false)));
    worker.copying = true;
    let (client, mut server) = tcp_pair();
    let data = pattern(200 << 10);
    let (sent, got) = worker.run(|| {
        let p = proactor(&driver);
        p.register(client.as_raw_socket()).unwrap();
        // Sent from a bounded heap copy: a short write.
        let sent = send(p, &client, &data).unwrap();
        let reader = thread::spawn(move || {
            let mut got = vec![0u8; sent];
            server.read_exact(&mut got).unwrap();
            server.write_all(b"reply").unwrap();
            (got, server)
        });
        // Received into a heap copy, then copied into this buffer.
        let mut buf = [0u8; 16];
        let n = recv(p, &client, &mut buf, soon()).unwrap();
        let (echoed, _server) = reader.join().unwrap();
        assert_eq!(echoed, data[..sent]);
        (sent, buf[..n].to_vec())
    });
    assert!(sent > 0 && sent <= 64 << 10, "{sent}");
    assert_eq!(got, b"reply");
}
