//! Winsock calls the std types do not offer in non-blocking form: overlapped, non-blocking
//! socket creation, non-blocking `connect`, socket addresses as Winsock lays them out.
//!
//! Every socket made here is created with `WSA_FLAG_OVERLAPPED` (so the IOCP driver can run
//! overlapped operations on it) and put in non-blocking mode (`FIONBIO`), so that the
//! readiness path (the polling driver) and the thread path (`WSAPoll`) can share it: overlapped
//! operations pend and complete through the port whatever the blocking mode.

use std::io;
use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::windows::io::{AsRawSocket, AsSocket, FromRawSocket, OwnedSocket, RawSocket};
use std::ptr;
use std::sync::OnceLock;

use windows_sys::Win32::Networking::WinSock::{
    AF_INET, AF_INET6, FIONBIO, INVALID_SOCKET, SO_ERROR, SOCKADDR, SOCKADDR_IN, SOCKADDR_IN6,
    SOCKADDR_STORAGE, SOCKET, SOCKET_ERROR, SOL_SOCKET, WSA_FLAG_NO_HANDLE_INHERIT,
    WSA_FLAG_OVERLAPPED, WSADATA, WSAEALREADY, WSAEINPROGRESS, WSAEINVAL, WSAEISCONN, WSAEMFILE,
    WSAENOBUFS, WSAENOTCONN, WSAEWOULDBLOCK, WSAGetLastError, WSASocketW, WSAStartup, bind,
    connect, getsockopt, ioctlsocket, listen,
};

pub(crate) use windows_sys::Win32::Networking::WinSock::{MSG_PEEK, SOCK_DGRAM, SOCK_STREAM};

use crate::driver::{Op, RawSource};

/// The size of `AcceptEx`'s output buffer with no data received: a local and a remote area,
/// each a `SOCKADDR_STORAGE` plus the 16 bytes `AcceptEx` requires (the IOCP backend's
/// `ACCEPT_ADDRESSES_LEN`).
pub(crate) const ACCEPT_ADDRESSES_LEN: usize = 2 * (SOCKADDR_STORAGE_LEN + 16);

/// The size of a `SOCKADDR_STORAGE`: room for any socket address.
pub(crate) const SOCKADDR_STORAGE_LEN: usize = mem::size_of::<SOCKADDR_STORAGE>();

/// The thread's last Winsock error.
pub(crate) fn last_error() -> io::Error {
    // SAFETY: reads the calling thread's last error; no preconditions.
    io::Error::from_raw_os_error(unsafe { WSAGetLastError() })
}

/// Turns a `SOCKET_ERROR` return into the thread's last Winsock error.
pub(crate) fn cvt(ret: i32) -> io::Result<i32> {
    if ret == SOCKET_ERROR {
        Err(last_error())
    } else {
        Ok(ret)
    }
}

/// Starts Winsock (once per process; std does the same lazily, and the two calls nest).
fn init() -> io::Result<()> {
    static STARTED: OnceLock<i32> = OnceLock::new();
    let code = *STARTED.get_or_init(|| {
        let mut data = WSADATA::default();
        // SAFETY: `data` is a valid out-parameter; version 2.2. Never paired with
        // `WSACleanup`: Winsock stays up for the process's life, as with std.
        unsafe { WSAStartup(0x202, &mut data) }
    });
    if code == 0 {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "WSAStartup failed ({}): Winsock is not available",
            io::Error::from_raw_os_error(code)
        )))
    }
}

/// The raw handle of a socket, as the driver interface names sources.
pub(crate) fn raw<S: AsRawSocket + ?Sized>(s: &S) -> RawSource {
    s.as_raw_socket()
}

/// A new overlapped, non-inheritable socket of `addr`'s family, in non-blocking mode.
pub(crate) fn socket(addr: &SocketAddr, ty: i32) -> io::Result<OwnedSocket> {
    init()?;
    let family = match addr {
        SocketAddr::V4(_) => AF_INET,
        SocketAddr::V6(_) => AF_INET6,
    };
    // SAFETY: plain call; no protocol info structure, no group.
    let s = unsafe {
        WSASocketW(
            i32::from(family),
            ty,
            0,
            ptr::null(),
            0,
            WSA_FLAG_OVERLAPPED | WSA_FLAG_NO_HANDLE_INHERIT,
        )
    };
    if s == INVALID_SOCKET {
        return Err(last_error());
    }
    // SAFETY: a new socket, owned by nobody else.
    let s = unsafe { OwnedSocket::from_raw_socket(s as RawSocket) };
    set_nonblocking(&s)?;
    Ok(s)
}

/// Puts a socket in non-blocking mode (`FIONBIO`).
pub(crate) fn set_nonblocking(s: &impl AsSocket) -> io::Result<()> {
    let mut on: u32 = 1;
    // SAFETY: FIONBIO takes a pointer to a u32; the socket is open (borrowed).
    cvt(unsafe { ioctlsocket(s.as_socket().as_raw_socket() as SOCKET, FIONBIO, &mut on) })?;
    Ok(())
}

/// Binds `s` to `addr`.
pub(crate) fn bind_to(s: &impl AsSocket, addr: &SocketAddr) -> io::Result<()> {
    let raw = RawAddr::new(addr);
    // SAFETY: `raw` is a valid socket address of `raw.len` bytes; the socket is open.
    cvt(unsafe {
        bind(
            s.as_socket().as_raw_socket() as SOCKET,
            raw.as_ptr(),
            raw.len,
        )
    })?;
    Ok(())
}

/// A listening TCP socket bound to `addr`, non-blocking, with a backlog of `backlog`.
///
/// No `SO_REUSEADDR`: on Windows it would let another socket take over the port (std does not
/// set it either).
pub(crate) fn tcp_listener(addr: &SocketAddr, backlog: i32) -> io::Result<std::net::TcpListener> {
    let s = socket(addr, SOCK_STREAM)?;
    bind_to(&s, addr)?;
    // SAFETY: plain call on a socket we own.
    cvt(unsafe { listen(s.as_raw_socket() as SOCKET, backlog) })?;
    Ok(std::net::TcpListener::from(s))
}

/// An unconnected TCP socket of `addr`'s family, non-blocking.
pub(crate) fn tcp_stream_socket(addr: &SocketAddr) -> io::Result<std::net::TcpStream> {
    Ok(std::net::TcpStream::from(socket(addr, SOCK_STREAM)?))
}

/// A UDP socket bound to `addr`, non-blocking.
pub(crate) fn udp_bind(addr: &SocketAddr) -> io::Result<std::net::UdpSocket> {
    let s = socket(addr, SOCK_DGRAM)?;
    bind_to(&s, addr)?;
    Ok(std::net::UdpSocket::from(s))
}

/// Whether `e` says the process (or the system) ran out of sockets or socket buffers: the
/// errors after which `accept` backs off.
pub(crate) fn is_out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(WSAEMFILE | WSAENOBUFS))
}

/// Whether `e` says the socket is not connected (yet).
pub(crate) fn is_not_connected(e: &io::Error) -> bool {
    e.raw_os_error() == Some(WSAENOTCONN)
}

/// `getsockopt(SO_ERROR)`: the pending error of a socket (a failed non-blocking connect).
pub(crate) fn take_error(s: RawSource) -> io::Result<Option<io::Error>> {
    let mut err: i32 = 0;
    let mut len = mem::size_of::<i32>() as i32;
    // SAFETY: `err` and `len` are valid for writes and `len` holds err's size.
    cvt(unsafe {
        getsockopt(
            s as SOCKET,
            SOL_SOCKET,
            SO_ERROR,
            (&mut err as *mut i32).cast(),
            &mut len,
        )
    })?;
    Ok((err != 0).then(|| io::Error::from_raw_os_error(err)))
}

/// Starts a non-blocking `connect`. `Ok(true)`: connected; `Ok(false)`: in progress (wait for
/// writability, then read `SO_ERROR`).
pub(crate) fn connect_to(s: RawSource, addr: &SocketAddr) -> io::Result<bool> {
    let raw = RawAddr::new(addr);
    // SAFETY: `raw` is a valid socket address of `raw.len` bytes.
    let r = unsafe { connect(s as SOCKET, raw.as_ptr(), raw.len) };
    if r == 0 {
        return Ok(true);
    }
    let e = last_error();
    match e.raw_os_error() {
        Some(WSAEWOULDBLOCK | WSAEINPROGRESS | WSAEALREADY) => Ok(false),
        // Older stacks report a second connect on a connecting socket as WSAEINVAL.
        Some(WSAEINVAL) => Ok(false),
        Some(WSAEISCONN) => Ok(true),
        _ => Err(e),
    }
}

/// The wildcard address of `addr`'s family, port 0: what a socket is bound to before
/// `ConnectEx` (which needs a bound socket).
pub(crate) fn unspecified_like(addr: &SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        SocketAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
    }
}

/// A socket address as Winsock takes it: a `SOCKADDR_STORAGE` (for its alignment) holding a
/// `SOCKADDR_IN` or `SOCKADDR_IN6`, and that structure's length.
pub(crate) struct RawAddr {
    storage: SOCKADDR_STORAGE,
    len: i32,
}

impl RawAddr {
    pub(crate) fn new(addr: &SocketAddr) -> RawAddr {
        let mut storage = SOCKADDR_STORAGE::default();
        let len = match addr {
            SocketAddr::V4(a) => {
                let mut sin = SOCKADDR_IN {
                    sin_family: AF_INET,
                    sin_port: a.port().to_be(),
                    ..SOCKADDR_IN::default()
                };
                sin.sin_addr.S_un.S_addr = u32::from_ne_bytes(a.ip().octets());
                // SAFETY: SOCKADDR_STORAGE is larger than and aligned for SOCKADDR_IN.
                unsafe { ptr::from_mut(&mut storage).cast::<SOCKADDR_IN>().write(sin) };
                mem::size_of::<SOCKADDR_IN>()
            }
            SocketAddr::V6(a) => {
                let mut sin6 = SOCKADDR_IN6 {
                    sin6_family: AF_INET6,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo(),
                    ..SOCKADDR_IN6::default()
                };
                sin6.sin6_addr.u.Byte = a.ip().octets();
                sin6.Anonymous.sin6_scope_id = a.scope_id();
                // SAFETY: SOCKADDR_STORAGE is larger than and aligned for SOCKADDR_IN6.
                unsafe {
                    ptr::from_mut(&mut storage)
                        .cast::<SOCKADDR_IN6>()
                        .write(sin6)
                };
                mem::size_of::<SOCKADDR_IN6>()
            }
        };
        RawAddr {
            storage,
            len: len as i32,
        }
    }

    fn as_ptr(&self) -> *const SOCKADDR {
        ptr::from_ref(&self.storage).cast()
    }

    /// The address's bytes (`len` of them), as `Op::Connect` and `Op::SendTo` take them.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        // SAFETY: SOCKADDR_STORAGE is plain data, fully initialised (zeroed, then written);
        // `len` is at most its size.
        unsafe {
            std::slice::from_raw_parts(ptr::from_ref(&self.storage).cast::<u8>(), self.len as usize)
        }
    }
}

/// A socket address from the bytes of a `SOCKADDR_IN` or `SOCKADDR_IN6` (`len` of them), as
/// `Op::RecvFrom` returns it.
pub(crate) fn bytes_to_socket_addr(bytes: &[u8], len: i32) -> io::Result<SocketAddr> {
    let len = usize::try_from(len).unwrap_or(0).min(bytes.len());
    let bytes = &bytes[..len];
    let word = |at: usize| u16::from_ne_bytes([bytes[at], bytes[at + 1]]);
    let dword =
        |at: usize| u32::from_ne_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    if len >= 2 && word(0) == AF_INET && len >= mem::size_of::<SOCKADDR_IN>() {
        // sin_family, sin_port (network order), sin_addr.
        let port = u16::from_be(word(2));
        let ip = Ipv4Addr::new(bytes[4], bytes[5], bytes[6], bytes[7]);
        return Ok(SocketAddr::V4(SocketAddrV4::new(ip, port)));
    }
    if len >= 2 && word(0) == AF_INET6 && len >= mem::size_of::<SOCKADDR_IN6>() {
        // sin6_family, sin6_port, sin6_flowinfo, sin6_addr, sin6_scope_id.
        let port = u16::from_be(word(2));
        let mut octets = [0u8; 16];
        octets.copy_from_slice(&bytes[8..24]);
        return Ok(SocketAddr::V6(SocketAddrV6::new(
            Ipv6Addr::from(octets),
            port,
            dword(4),
            dword(24),
        )));
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        "not an IPv4 or IPv6 socket address",
    ))
}

/// A receive on `s` into `buf` (peeking when `peek`), for a proactor.
pub(crate) fn recv_op(s: RawSource, buf: &mut [u8], peek: bool) -> Op<'_> {
    Op::Recv {
        socket: s,
        buf,
        flags: if peek { MSG_PEEK as u32 } else { 0 },
    }
}

/// A send on `s` from `buf`, for a proactor.
pub(crate) fn send_op(s: RawSource, buf: &[u8]) -> Op<'_> {
    Op::Send { socket: s, buf }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip_through_winsock_layout() {
        for addr in [
            "127.0.0.1:8080".parse::<SocketAddr>().unwrap(),
            "[::1]:443".parse().unwrap(),
            SocketAddr::V6(SocketAddrV6::new(
                "fe80::1".parse().unwrap(),
                9,
                0x1234_5678,
                7,
            )),
        ] {
            let raw = RawAddr::new(&addr);
            assert_eq!(bytes_to_socket_addr(raw.as_bytes(), raw.len).unwrap(), addr);
        }
        assert!(bytes_to_socket_addr(&[0; 4], 4).is_err());
    }
}
