//! Winsock calls the std types do not offer in non-blocking form: overlapped, non-blocking
//! socket creation, non-blocking `connect`, socket addresses as Winsock lays them out. Sockets
//! and addresses go through `socket2`.
//!
//! Every socket made here is created with `WSA_FLAG_OVERLAPPED` (socket2 does, so the IOCP
//! driver can run overlapped operations on it) and non-inheritable, and put in non-blocking
//! mode (`FIONBIO`), so that the readiness path (the polling driver) and the thread path
//! (`WSAPoll`) can share it: overlapped operations pend and complete through the port whatever
//! the blocking mode.

use std::io;
use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::windows::io::AsRawSocket;

use socket2::{Domain, SockAddr, SockRef, Socket, Type};
use windows_sys::Win32::Networking::WinSock::{
    AF_INET, AF_INET6, SOCKADDR_IN, SOCKADDR_IN6, SOCKADDR_STORAGE, WSAEALREADY, WSAEINPROGRESS,
    WSAEINVAL, WSAEISCONN, WSAEMFILE, WSAENOBUFS, WSAENOTCONN, WSAEWOULDBLOCK,
};

pub(crate) use windows_sys::Win32::Networking::WinSock::MSG_PEEK;

use crate::driver::{Op, RawSource};

/// The size of `AcceptEx`'s output buffer with no data received: a local and a remote area,
/// each a `SOCKADDR_STORAGE` plus the 16 bytes `AcceptEx` requires (the IOCP backend's
/// `ACCEPT_ADDRESSES_LEN`).
pub(crate) const ACCEPT_ADDRESSES_LEN: usize = 2 * (SOCKADDR_STORAGE_LEN + 16);

/// The size of a `SOCKADDR_STORAGE`: room for any socket address.
pub(crate) const SOCKADDR_STORAGE_LEN: usize = mem::size_of::<SOCKADDR_STORAGE>();

/// The raw handle of a socket, as the driver interface names sources.
pub(crate) fn raw<S: AsRawSocket + ?Sized>(s: &S) -> RawSource {
    s.as_raw_socket()
}

/// A new overlapped, non-inheritable socket of `addr`'s family, in non-blocking mode. (socket2
/// starts Winsock first, once per process, as std does.)
fn socket(addr: &SocketAddr, ty: Type) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(*addr), ty, None)?;
    s.set_nonblocking(true)?;
    Ok(s)
}

/// Binds `s` to `addr`.
pub(crate) fn bind_to(s: SockRef<'_>, addr: &SocketAddr) -> io::Result<()> {
    s.bind(&SockAddr::from(*addr))
}

/// A listening TCP socket bound to `addr`, non-blocking, with a backlog of `backlog`.
///
/// No `SO_REUSEADDR`: on Windows it would let another socket take over the port (std does not
/// set it either).
pub(crate) fn tcp_listener(addr: &SocketAddr, backlog: i32) -> io::Result<std::net::TcpListener> {
    let s = socket(addr, Type::STREAM)?;
    s.bind(&SockAddr::from(*addr))?;
    s.listen(backlog)?;
    Ok(s.into())
}

/// An unconnected TCP socket of `addr`'s family, non-blocking.
pub(crate) fn tcp_stream_socket(addr: &SocketAddr) -> io::Result<std::net::TcpStream> {
    Ok(socket(addr, Type::STREAM)?.into())
}

/// A UDP socket bound to `addr`, non-blocking.
pub(crate) fn udp_bind(addr: &SocketAddr) -> io::Result<std::net::UdpSocket> {
    let s = socket(addr, Type::DGRAM)?;
    s.bind(&SockAddr::from(*addr))?;
    Ok(s.into())
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

/// Starts a non-blocking `connect`. `Ok(true)`: connected; `Ok(false)`: in progress (wait for
/// writability, then read `SO_ERROR`).
pub(crate) fn connect_to(s: SockRef<'_>, addr: &SocketAddr) -> io::Result<bool> {
    let Err(e) = s.connect(&SockAddr::from(*addr)) else {
        return Ok(true);
    };
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

/// A socket address as Winsock takes it: a `SOCKADDR_IN` or `SOCKADDR_IN6` (in socket2's
/// storage, aligned for any address) and its length.
pub(crate) struct RawAddr(SockAddr);

impl RawAddr {
    pub(crate) fn new(addr: &SocketAddr) -> RawAddr {
        RawAddr(SockAddr::from(*addr))
    }

    /// The address's bytes (its length of them), as `Op::Connect` and `Op::SendTo` take them.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        // SAFETY: socket2's storage is plain data, zeroed and then written, and at least
        // `len` bytes long; the slice borrows `self`.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast::<u8>(), self.0.len() as usize) }
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
            let len = raw.as_bytes().len() as i32;
            assert_eq!(bytes_to_socket_addr(raw.as_bytes(), len).unwrap(), addr);
        }
        assert!(bytes_to_socket_addr(&[0; 4], 4).is_err());
    }
}
