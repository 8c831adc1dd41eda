//! UDP: [`UdpSocket`], blocking-style, suspending only the calling task.

use std::fmt;
use std::io;
#[cfg(unix)]
use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
#[cfg(unix)]
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
#[cfg(windows)]
use std::os::windows::io::{
    AsRawSocket, AsSocket, BorrowedSocket, FromRawSocket, IntoRawSocket, OwnedSocket, RawSocket,
};
use std::time::{Duration, Instant};

use crate::driver::{Op, OpKind, Proactor, RawSource};
use crate::net::addr::{ToSocketAddrs, each_addr};
use crate::net::tcp::RAW_NAME;
#[cfg(unix)]
use crate::net::tcp::fd_conversions;
#[cfg(windows)]
use crate::net::tcp::socket_conversions;
use crate::source::{Direction, Evented, Framing};
use crate::sys;

/// A UDP socket.
///
/// Like [`std::net::UdpSocket`], but receiving (and sending, when the buffer is full) suspends
/// only the calling coroutine in a runtime, and blocks the thread elsewhere. Read and write
/// timeouts apply on every path.
///
/// ```
/// use spindle_io::net::UdpSocket;
/// let a = UdpSocket::bind("127.0.0.1:0")?;
/// let b = UdpSocket::bind("127.0.0.1:0")?;
/// a.send_to(b"hello", &b.local_addr()?)?;
/// let mut buf = [0; 16];
/// let (n, from) = b.recv_from(&mut buf)?;
/// assert_eq!((&buf[..n], from), (&b"hello"[..], a.local_addr()?));
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct UdpSocket {
    ev: Evented,
    inner: std::net::UdpSocket,
}

impl UdpSocket {
    /// Binds to `addr` (the first of its addresses that works).
    ///
    /// # Errors
    ///
    /// As [`std::net::UdpSocket::bind`].
    pub fn bind<A: ToSocketAddrs + ?Sized>(addr: &A) -> io::Result<UdpSocket> {
        each_addr(addr, |a| Ok(UdpSocket::from_nonblocking(sys::udp_bind(a)?)))
    }

    fn from_nonblocking(inner: std::net::UdpSocket) -> UdpSocket {
        UdpSocket {
            ev: Evented::new(sys::raw(&inner)),
            inner,
        }
    }

    /// A socket the caller made, already non-blocking: its read and write timeouts (which
    /// std keeps in the socket) are taken over.
    fn adopt(inner: std::net::UdpSocket) -> UdpSocket {
        let socket = UdpSocket::from_nonblocking(inner);
        socket
            .ev
            .adopt_timeouts(socket.inner.read_timeout(), socket.inner.write_timeout());
        socket
    }

    /// Wraps a std socket (made non-blocking), with its read and write timeouts.
    ///
    /// # Errors
    ///
    /// Setting non-blocking mode failed.
    pub fn from_std(socket: std::net::UdpSocket) -> io::Result<UdpSocket> {
        socket.set_nonblocking(true)?;
        Ok(UdpSocket::adopt(socket))
    }

    /// The std socket (left non-blocking).
    pub fn into_std(self) -> std::net::UdpSocket {
        let UdpSocket { ev, inner } = self;
        drop(ev);
        inner
    }

    /// Sets the default destination and the only source datagrams are received from.
    ///
    /// # Errors
    ///
    /// As [`std::net::UdpSocket::connect`].
    pub fn connect<A: ToSocketAddrs + ?Sized>(&self, addr: &A) -> io::Result<()> {
        each_addr(addr, |a| self.inner.connect(a))
    }

    /// Sends to the connected peer.
    ///
    /// # Errors
    ///
    /// As [`std::net::UdpSocket::send`]; `TimedOut` after the write timeout.
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        let deadline = self.ev.deadline(Direction::Write);
        self.ev.write_op(
            OpKind::Send,
            Framing::Datagram,
            buf,
            deadline,
            sys::send_op,
            |buf| self.inner.send(buf),
        )
    }

    /// Receives from the connected peer.
    ///
    /// # Errors
    ///
    /// As [`std::net::UdpSocket::recv`]; `TimedOut` after the read timeout.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        let deadline = self.ev.deadline(Direction::Read);
        self.ev.read_op(
            OpKind::Recv,
            Framing::Datagram,
            buf,
            deadline,
            |fd, buf| sys::recv_op(fd, buf, false),
            |buf| self.inner.recv(buf),
        )
    }

    /// Receives from the connected peer without removing the datagram.
    ///
    /// # Errors
    ///
    /// As [`recv`](UdpSocket::recv).
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        let deadline = self.ev.deadline(Direction::Read);
        self.ev.read_op(
            OpKind::Recv,
            Framing::Datagram,
            buf,
            deadline,
            |fd, buf| sys::recv_op(fd, buf, true),
            |buf| self.inner.peek(buf),
        )
    }

    /// Sends a datagram to `addr` (its first address).
    ///
    /// # Errors
    ///
    /// As [`std::net::UdpSocket::send_to`]; `TimedOut` after the write timeout.
    pub fn send_to<A: ToSocketAddrs + ?Sized>(&self, buf: &[u8], addr: &A) -> io::Result<usize> {
        let Some(target) = addr.to_socket_addrs()?.into_iter().next() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no addresses to send data to",
            ));
        };
        let deadline = self.ev.deadline(Direction::Write);
        let done = self.ev.completion(OpKind::SendTo, |p, fd| {
            let bounce;
            let data = if spindle_park::on_copying_stack() {
                bounce = buf.to_vec();
                &bounce[..]
            } else {
                buf
            };
            send_to_via(p, fd, data, &target, deadline)
        });
        match done {
            Some(r) => r,
            None => self.ev.readiness_op(Direction::Write, deadline, || {
                self.inner.send_to(buf, target)
            }),
        }
    }

    /// Receives a datagram and its sender's address.
    ///
    /// # Errors
    ///
    /// As [`std::net::UdpSocket::recv_from`]; `TimedOut` after the read timeout.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.recv_from_flags(buf, false)
    }

    /// Receives a datagram and its sender's address without removing it.
    ///
    /// # Errors
    ///
    /// As [`recv_from`](UdpSocket::recv_from).
    pub fn peek_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.recv_from_flags(buf, true)
    }

    fn recv_from_flags(&self, buf: &mut [u8], peek: bool) -> io::Result<(usize, SocketAddr)> {
        let deadline = self.ev.deadline(Direction::Read);
        let done = self.ev.completion(OpKind::RecvFrom, |p, fd| {
            if spindle_park::on_copying_stack() {
                let mut bounce = vec![0u8; buf.len()];
                let (n, from) = recv_from_via(p, fd, &mut bounce, peek, deadline)?;
                let n = n.min(buf.len());
                buf[..n].copy_from_slice(&bounce[..n]);
                Ok((n, from))
            } else {
                recv_from_via(p, fd, buf, peek, deadline)
            }
        });
        match done {
            Some(r) => r,
            None if peek => self
                .ev
                .readiness_op(Direction::Read, deadline, || self.inner.peek_from(buf)),
            None => self
                .ev
                .readiness_op(Direction::Read, deadline, || self.inner.recv_from(buf)),
        }
    }

    /// The local address.
    ///
    /// # Errors
    ///
    /// As [`std::net::UdpSocket::local_addr`].
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// The connected peer's address.
    ///
    /// # Errors
    ///
    /// As [`std::net::UdpSocket::peer_addr`].
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.peer_addr()
    }

    /// Sets the read timeout (`None`: none).
    ///
    /// As with std, the socket keeps it too (`SO_RCVTIMEO`): a handle made later by
    /// [`try_clone`](UdpSocket::try_clone) or from the descriptor, and the std socket of
    /// [`into_std`](UdpSocket::into_std), have it. (A clone made earlier keeps its own.)
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a zero duration; as `setsockopt(2)`.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.inner.set_read_timeout(timeout)?;
        self.ev.set_timeout(Direction::Read, timeout)
    }

    /// The read timeout.
    ///
    /// # Errors
    ///
    /// Never; `Result` for std's signature.
    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.ev.timeout(Direction::Read))
    }

    /// Sets the write timeout (`None`: none); kept in the socket too (`SO_SNDTIMEO`), as the
    /// read timeout is.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a zero duration; as `setsockopt(2)`.
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.inner.set_write_timeout(timeout)?;
        self.ev.set_timeout(Direction::Write, timeout)
    }

    /// The write timeout.
    ///
    /// # Errors
    ///
    /// Never; `Result` for std's signature.
    pub fn write_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.ev.timeout(Direction::Write))
    }

    /// Sets `SO_BROADCAST`.
    ///
    /// # Errors
    ///
    /// As [`std::net::UdpSocket::set_broadcast`].
    pub fn set_broadcast(&self, on: bool) -> io::Result<()> {
        self.inner.set_broadcast(on)
    }

    /// `SO_BROADCAST`.
    ///
    /// # Errors
    ///
    /// As [`std::net::UdpSocket::broadcast`].
    pub fn broadcast(&self) -> io::Result<bool> {
        self.inner.broadcast()
    }

    /// Sets `IP_TTL`.
    ///
    /// # Errors
    ///
    /// As [`std::net::UdpSocket::set_ttl`].
    pub fn set_ttl(&self, ttl: u32) -> io::Result<()> {
        self.inner.set_ttl(ttl)
    }

    /// `IP_TTL`.
    ///
    /// # Errors
    ///
    /// As [`std::net::UdpSocket::ttl`].
    pub fn ttl(&self) -> io::Result<u32> {
        self.inner.ttl()
    }

    /// Joins an IPv4 multicast group.
    ///
    /// # Errors
    ///
    /// As [`std::net::UdpSocket::join_multicast_v4`].
    pub fn join_multicast_v4(&self, group: &Ipv4Addr, interface: &Ipv4Addr) -> io::Result<()> {
        self.inner.join_multicast_v4(group, interface)
    }

    /// Leaves an IPv4 multicast group.
    ///
    /// # Errors
    ///
    /// As [`std::net::UdpSocket::leave_multicast_v4`].
    pub fn leave_multicast_v4(&self, group: &Ipv4Addr, interface: &Ipv4Addr) -> io::Result<()> {
        self.inner.leave_multicast_v4(group, interface)
    }

    /// Joins an IPv6 multicast group.
    ///
    /// # Errors
    ///
    /// As [`std::net::UdpSocket::join_multicast_v6`].
    pub fn join_multicast_v6(&self, group: &Ipv6Addr, interface: u32) -> io::Result<()> {
        self.inner.join_multicast_v6(group, interface)
    }

    /// Leaves an IPv6 multicast group.
    ///
    /// # Errors
    ///
    /// As [`std::net::UdpSocket::leave_multicast_v6`].
    pub fn leave_multicast_v6(&self, group: &Ipv6Addr, interface: u32) -> io::Result<()> {
        self.inner.leave_multicast_v6(group, interface)
    }

    /// Takes the socket's pending error (`SO_ERROR`).
    ///
    /// # Errors
    ///
    /// As [`std::net::UdpSocket::take_error`].
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.inner.take_error()
    }

    /// A second handle on the same socket (a duplicated descriptor), with this one's timeouts
    /// (later changes through either handle do not reach the other).
    ///
    /// # Errors
    ///
    /// As `dup(2)`.
    pub fn try_clone(&self) -> io::Result<UdpSocket> {
        let clone = UdpSocket::from_nonblocking(self.inner.try_clone()?);
        clone.ev.copy_timeouts(&self.ev);
        Ok(clone)
    }
}

impl fmt::Debug for UdpSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UdpSocket")
            .field("addr", &self.inner.local_addr().ok())
            .field(RAW_NAME, &sys::raw(&self.inner))
            .finish()
    }
}

/// `sendto` through a proactor; `buf` is not on a copying stack.
#[cfg(unix)]
fn send_to_via(
    p: &dyn Proactor,
    fd: RawSource,
    buf: &[u8],
    target: &SocketAddr,
    deadline: Option<Instant>,
) -> io::Result<usize> {
    // The address lives on the heap: the task may be on a copying stack.
    let (raw, len) = sys::socket_addr_to_raw(target);
    let raw = Box::new(raw);
    p.submit(
        Op::SendTo {
            fd,
            buf,
            addr: &raw,
            len,
            flags: 0,
        },
        deadline,
    )
}

/// `WSASendTo` through a proactor; `buf` is not on a copying stack.
#[cfg(windows)]
fn send_to_via(
    p: &dyn Proactor,
    socket: RawSource,
    buf: &[u8],
    target: &SocketAddr,
    deadline: Option<Instant>,
) -> io::Result<usize> {
    // The address lives on the heap: the task may be on a copying stack.
    let raw = Box::new(sys::RawAddr::new(target));
    p.submit(
        Op::SendTo {
            socket,
            buf,
            addr: raw.as_bytes(),
        },
        deadline,
    )
}

/// `recvfrom` through a proactor; `buf` is not on a copying stack.
#[cfg(unix)]
fn recv_from_via(
    p: &dyn Proactor,
    fd: RawSource,
    buf: &mut [u8],
    peek: bool,
    deadline: Option<Instant>,
) -> io::Result<(usize, SocketAddr)> {
    // The address outputs live on the heap: the task may be on a copying stack.
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut out: Box<(libc::sockaddr_storage, libc::socklen_t)> =
        Box::new((unsafe { mem::zeroed() }, 0));
    out.1 = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let (addr, len) = &mut *out;
    let n = p.submit(
        Op::RecvFrom {
            fd,
            buf,
            addr,
            len,
            flags: if peek { libc::MSG_PEEK } else { 0 },
        },
        deadline,
    )?;
    Ok((n, sys::raw_to_socket_addr(&out.0, out.1)?))
}

/// `WSARecvFrom` through a proactor; `buf` is not on a copying stack.
#[cfg(windows)]
fn recv_from_via(
    p: &dyn Proactor,
    socket: RawSource,
    buf: &mut [u8],
    peek: bool,
    deadline: Option<Instant>,
) -> io::Result<(usize, SocketAddr)> {
    // The address outputs live on the heap: the task may be on a copying stack.
    let mut addr = vec![0u8; sys::SOCKADDR_STORAGE_LEN];
    let mut len = Box::new(0i32);
    let n = p.submit(
        Op::RecvFrom {
            socket,
            buf,
            addr: &mut addr,
            len: &mut len,
            flags: if peek { sys::MSG_PEEK as u32 } else { 0 },
        },
        deadline,
    )?;
    Ok((n, sys::bytes_to_socket_addr(&addr, *len)?))
}

#[cfg(unix)]
fd_conversions!(UdpSocket, std::net::UdpSocket);
#[cfg(windows)]
socket_conversions!(UdpSocket, std::net::UdpSocket);
