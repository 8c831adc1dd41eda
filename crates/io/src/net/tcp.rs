//! TCP: [`TcpListener`] and [`TcpStream`], blocking-style, suspending only the calling task.

use std::fmt;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
#[cfg(unix)]
use std::mem;
use std::net::{Shutdown, SocketAddr};
#[cfg(unix)]
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
#[cfg(windows)]
use std::os::windows::io::{
    AsRawSocket, AsSocket, BorrowedSocket, FromRawSocket, IntoRawSocket, OwnedSocket, RawSocket,
};
use std::time::{Duration, Instant};

use socket2::SockRef;

use crate::driver::{Op, OpKind};
use crate::net::addr::{ToSocketAddrs, each_addr};
use crate::net::backoff::AcceptBackoff;
#[cfg(unix)]
use crate::net::multishot::MultishotAccepts;
use crate::source::{Direction, Evented, Framing};
use crate::sys;

/// A TCP socket server, listening for connections.
///
/// Like [`std::net::TcpListener`], but [`accept`](TcpListener::accept) suspends only the
/// calling coroutine when it runs in a runtime (and blocks the thread elsewhere).
///
/// ```
/// use spindle_io::net::{TcpListener, TcpStream};
/// use std::io::{Read, Write};
///
/// let listener = TcpListener::bind("127.0.0.1:0")?;
/// let addr = listener.local_addr()?;
/// let client = std::thread::spawn(move || -> std::io::Result<String> {
///     let mut stream = TcpStream::connect(&addr)?;
///     stream.write_all(b"ping")?;
///     let mut reply = String::new();
///     stream.read_to_string(&mut reply)?;
///     Ok(reply)
/// });
/// let (mut conn, _peer) = listener.accept()?;
/// let mut buf = [0; 4];
/// conn.read_exact(&mut buf)?;
/// conn.write_all(b"pong")?;
/// drop(conn);
/// assert_eq!(client.join().unwrap()?, "pong");
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct TcpListener {
    /// Connections a multishot accept (io_uring) took ahead of `accept`, shared with the
    /// handles `try_clone` made; closed (the request cancelled) first when the last of them
    /// drops.
    #[cfg(unix)]
    accepts: MultishotAccepts,
    // Declared before the socket: dropped (deregistered) before it closes.
    ev: Evented,
    inner: std::net::TcpListener,
    backoff: AcceptBackoff,
}

impl TcpListener {
    /// Binds to `addr` (the first of its addresses that works) and listens, with a backlog of
    /// 1024.
    ///
    /// # Errors
    ///
    /// As [`std::net::TcpListener::bind`]; a host name that does not resolve.
    pub fn bind<A: ToSocketAddrs + ?Sized>(addr: &A) -> io::Result<TcpListener> {
        each_addr(addr, |a| {
            Ok(TcpListener::from_nonblocking(sys::tcp_listener(a, 1024)?))
        })
    }

    fn from_nonblocking(inner: std::net::TcpListener) -> TcpListener {
        TcpListener {
            #[cfg(unix)]
            accepts: MultishotAccepts::default(),
            ev: Evented::new(sys::raw(&inner)),
            inner,
            backoff: AcceptBackoff::default(),
        }
    }

    /// A socket the caller made, already non-blocking (a listener carries no timeouts to
    /// take over).
    fn adopt(inner: std::net::TcpListener) -> TcpListener {
        TcpListener::from_nonblocking(inner)
    }

    /// Wraps a std listener (made non-blocking).
    ///
    /// # Errors
    ///
    /// Setting non-blocking mode failed.
    pub fn from_std(listener: std::net::TcpListener) -> io::Result<TcpListener> {
        listener.set_nonblocking(true)?;
        Ok(TcpListener::adopt(listener))
    }

    /// The std listener (left in non-blocking mode).
    ///
    /// On io_uring, where a multishot accept takes connections from the kernel's backlog
    /// ahead of [`accept`](TcpListener::accept) (a burst of them: see
    /// [`ACCEPT_READ_AHEAD`](crate::driver::ACCEPT_READ_AHEAD)), connections taken but not
    /// returned yet are closed — unless a handle made by [`try_clone`](TcpListener::try_clone)
    /// remains, whose `accept` still returns them: convert a listener before it accepts, or
    /// when no client is connecting.
    pub fn into_std(self) -> std::net::TcpListener {
        let TcpListener { ev, inner, .. } = self;
        drop(ev);
        inner
    }

    /// Accepts a connection: suspends the calling coroutine (or blocks the thread) until one
    /// arrives.
    ///
    /// Out of file descriptors (`EMFILE`/`ENFILE`; on Windows out of sockets or socket buffers:
    /// `WSAEMFILE`/`WSAENOBUFS`), the error is returned, and the next
    /// `accept` first pauses (1 ms, doubling up to 100 ms while it lasts), so that a loop that
    /// logs the error and accepts again does not spin; it recovers by itself once descriptors
    /// are free.
    ///
    /// # Errors
    ///
    /// As `accept(2)`.
    pub fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        self.backoff.accept(|| self.accept_now())
    }

    #[cfg(unix)]
    fn accept_now(&self) -> io::Result<(TcpStream, SocketAddr)> {
        while let Some(accepted) = self.accepts.accept(&self.ev) {
            let stream = std::net::TcpStream::from(accepted?);
            match stream.peer_addr() {
                Ok(peer) => return Ok((TcpStream::from_nonblocking(stream), peer)),
                // Reset by the peer after the kernel accepted it: dead already; take the next.
                Err(e) if e.kind() == io::ErrorKind::NotConnected => continue,
                Err(e) => return Err(e),
            }
        }
        // SAFETY: all-zero is a valid sockaddr_storage.
        let mut storage: libc::sockaddr_storage = unsafe { mem::zeroed() };
        let mut len = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let done = self.ev.completion(OpKind::Accept, |p, fd| {
            // The address outputs live on the heap: the task may be on a copying stack.
            let mut out = Box::new((storage, len));
            let (s, l) = &mut *out;
            let new = p.submit(
                Op::Accept {
                    fd,
                    addr: s,
                    len: l,
                },
                None,
            )?;
            (storage, len) = *out;
            // SAFETY: the proactor's accept returns a new fd that nobody else owns.
            Ok(unsafe { OwnedFd::from_raw_fd(new as RawFd) })
        });
        let fd = match done {
            Some(r) => r?,
            None => {
                let (fd, peer) = self.ev.readiness_op(Direction::Read, None, || {
                    sys::accept(SockRef::from(&self.inner))
                })?;
                let peer = peer.as_socket().ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        "accept gave no internet address",
                    )
                })?;
                return Ok((
                    TcpStream::from_nonblocking(std::net::TcpStream::from(fd)),
                    peer,
                ));
            }
        };
        let peer = sys::raw_to_socket_addr(&storage, len)?;
        Ok((
            TcpStream::from_nonblocking(std::net::TcpStream::from(fd)),
            peer,
        ))
    }

    /// Accepts with `AcceptEx` through the proactor (IOCP) when there is one, else with the
    /// non-blocking `accept` and readiness waits.
    #[cfg(windows)]
    fn accept_now(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let done = self.ev.completion(OpKind::Accept, |p, listener| {
            // AcceptEx takes the socket that becomes the connection: a fresh one of the
            // listener's family (overlapped, non-blocking like every socket here).
            let family = self.inner.local_addr()?;
            let accepted = sys::tcp_stream_socket(&family)?;
            // The address areas live on the heap: the task may be on a copying stack.
            let mut addresses = vec![0u8; sys::ACCEPT_ADDRESSES_LEN];
            p.submit(
                Op::Accept {
                    socket: listener,
                    accepted: sys::raw(&accepted),
                    addresses: &mut addresses,
                },
                None,
            )?;
            // The driver updated the accept context (SO_UPDATE_ACCEPT_CONTEXT): the socket
            // knows its peer.
            let peer = accepted.peer_addr()?;
            Ok((accepted, peer))
        });
        let (stream, peer) = match done {
            Some(r) => r?,
            None => {
                let (stream, peer) = self
                    .ev
                    .readiness_op(Direction::Read, None, || self.inner.accept())?;
                // Inherited from the listener on Windows; set it anyway (a listener that came
                // from elsewhere may be blocking).
                stream.set_nonblocking(true)?;
                (stream, peer)
            }
        };
        Ok((TcpStream::from_nonblocking(stream), peer))
    }

    /// An iterator over incoming connections (never `None`).
    pub fn incoming(&self) -> Incoming<'_> {
        Incoming { listener: self }
    }

    /// The local address.
    ///
    /// # Errors
    ///
    /// As [`std::net::TcpListener::local_addr`].
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// Sets `IP_TTL`.
    ///
    /// # Errors
    ///
    /// As [`std::net::TcpListener::set_ttl`].
    pub fn set_ttl(&self, ttl: u32) -> io::Result<()> {
        self.inner.set_ttl(ttl)
    }

    /// `IP_TTL`.
    ///
    /// # Errors
    ///
    /// As [`std::net::TcpListener::ttl`].
    pub fn ttl(&self) -> io::Result<u32> {
        self.inner.ttl()
    }

    /// Takes the socket's pending error (`SO_ERROR`).
    ///
    /// # Errors
    ///
    /// As [`std::net::TcpListener::take_error`].
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.inner.take_error()
    }

    /// A second handle on the same socket (a duplicated descriptor).
    ///
    /// # Errors
    ///
    /// As `dup(2)`.
    pub fn try_clone(&self) -> io::Result<TcpListener> {
        #[cfg_attr(not(unix), allow(unused_mut))]
        let mut clone = TcpListener::from_nonblocking(self.inner.try_clone()?);
        // Both handles take from one queue of connections accepted ahead (io_uring).
        #[cfg(unix)]
        {
            clone.accepts = self.accepts.share();
        }
        Ok(clone)
    }
}

/// The iterator of [`TcpListener::incoming`].
#[derive(Debug)]
pub struct Incoming<'a> {
    listener: &'a TcpListener,
}

impl Iterator for Incoming<'_> {
    type Item = io::Result<TcpStream>;
    fn next(&mut self) -> Option<io::Result<TcpStream>> {
        Some(self.listener.accept().map(|(s, _)| s))
    }
}

impl fmt::Debug for TcpListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpListener")
            .field("addr", &self.inner.local_addr().ok())
            .field(RAW_NAME, &sys::raw(&self.inner))
            .finish()
    }
}

/// A TCP connection.
///
/// Like [`std::net::TcpStream`] — it implements [`Read`] and [`Write`] (also for
/// `&TcpStream`), so synchronous code works inside coroutines unchanged — but every operation
/// suspends only the calling coroutine when it runs in a runtime: on io_uring and IOCP the
/// read or write is submitted with the caller's buffer; on readiness backends the non-blocking
/// call is retried when the socket is ready. Outside a runtime it blocks the thread like std's.
///
/// Read and write timeouts ([`set_read_timeout`](TcpStream::set_read_timeout)) apply to every
/// path; a timed-out operation returns `ErrorKind::TimedOut`. Writing to a connection the peer
/// closed returns `EPIPE` (`BrokenPipe`), never a `SIGPIPE` (on Windows, which has no signals,
/// `WSAECONNRESET` or `WSAECONNABORTED`).
pub struct TcpStream {
    ev: Evented,
    inner: std::net::TcpStream,
}

impl TcpStream {
    /// Connects to `addr` (each of its addresses in turn until one accepts).
    ///
    /// # Errors
    ///
    /// The last address's error (`ConnectionRefused`...); a host name that does not resolve.
    pub fn connect<A: ToSocketAddrs + ?Sized>(addr: &A) -> io::Result<TcpStream> {
        each_addr(addr, |a| TcpStream::connect_addr(a, None))
    }

    /// Connects to `addr`, giving up after `timeout` (`TimedOut`).
    ///
    /// # Errors
    ///
    /// As [`connect`](TcpStream::connect); `InvalidInput` for a zero timeout (as std).
    pub fn connect_timeout(addr: &SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
        if timeout.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot set a 0 duration timeout",
            ));
        }
        TcpStream::connect_addr(addr, Instant::now().checked_add(timeout))
    }

    fn connect_addr(addr: &SocketAddr, deadline: Option<Instant>) -> io::Result<TcpStream> {
        let stream = TcpStream::from_nonblocking(sys::tcp_stream_socket(addr)?);
        match stream.connect_completion(addr, deadline) {
            Some(r) => r?,
            None => {
                if !sys::connect_to(SockRef::from(&stream.inner), addr)? {
                    stream.ev.readiness_op(Direction::Write, deadline, || {
                        match stream.inner.take_error()? {
                            Some(e) => Err(e),
                            None => match stream.inner.peer_addr() {
                                Ok(_) => Ok(()),
                                // Not connected yet (a spurious wake-up): wait again.
                                Err(e) if sys::is_not_connected(&e) => {
                                    Err(io::Error::from(io::ErrorKind::WouldBlock))
                                }
                                Err(e) => Err(e),
                            },
                        }
                    })?;
                }
            }
        }
        Ok(stream)
    }

    /// Connects through the current proactor, if there is one (`None`: use the readiness
    /// path).
    #[cfg(unix)]
    fn connect_completion(
        &self,
        addr: &SocketAddr,
        deadline: Option<Instant>,
    ) -> Option<io::Result<()>> {
        let (raw, len) = sys::socket_addr_to_raw(addr);
        self.ev.completion(OpKind::Connect, |p, fd| {
            let raw = Box::new(raw);
            p.submit(
                Op::Connect {
                    fd,
                    addr: &raw,
                    len,
                },
                deadline,
            )
            .map(drop)
        })
    }

    /// Connects with `ConnectEx` through the current proactor (IOCP), if there is one (`None`:
    /// use the readiness path). `ConnectEx` needs a bound socket: it is bound to the wildcard
    /// address of its family first.
    #[cfg(windows)]
    fn connect_completion(
        &self,
        addr: &SocketAddr,
        deadline: Option<Instant>,
    ) -> Option<io::Result<()>> {
        self.ev.completion(OpKind::Connect, |p, socket| {
            sys::bind_to(SockRef::from(&self.inner), &sys::unspecified_like(addr))?;
            // On the heap: the task may be on a copying stack.
            let raw = Box::new(sys::RawAddr::new(addr));
            p.submit(
                Op::Connect {
                    socket,
                    addr: raw.as_bytes(),
                },
                deadline,
            )
            .map(drop)
        })
    }

    fn from_nonblocking(inner: std::net::TcpStream) -> TcpStream {
        TcpStream {
            ev: Evented::for_tcp_stream(sys::raw(&inner)),
            inner,
        }
    }

    /// A socket the caller made, already non-blocking: its read and write timeouts (which
    /// std keeps in the socket) are taken over.
    fn adopt(inner: std::net::TcpStream) -> TcpStream {
        let stream = TcpStream::from_nonblocking(inner);
        stream
            .ev
            .adopt_timeouts(stream.inner.read_timeout(), stream.inner.write_timeout());
        stream
    }

    /// Wraps a connected std stream (made non-blocking), with its read and write timeouts.
    ///
    /// # Errors
    ///
    /// Setting non-blocking mode failed.
    pub fn from_std(stream: std::net::TcpStream) -> io::Result<TcpStream> {
        stream.set_nonblocking(true)?;
        Ok(TcpStream::adopt(stream))
    }

    /// The std stream (left in non-blocking mode: call `set_nonblocking(false)` to use it
    /// blocking).
    pub fn into_std(self) -> std::net::TcpStream {
        let TcpStream { ev, inner } = self;
        drop(ev);
        inner
    }

    /// The remote address.
    ///
    /// # Errors
    ///
    /// As [`std::net::TcpStream::peer_addr`].
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.peer_addr()
    }

    /// The local address.
    ///
    /// # Errors
    ///
    /// As [`std::net::TcpStream::local_addr`].
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// Shuts down the read, write or both halves.
    ///
    /// # Errors
    ///
    /// As [`std::net::TcpStream::shutdown`].
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.inner.shutdown(how)
    }

    /// Sets `TCP_NODELAY`.
    ///
    /// # Errors
    ///
    /// As [`std::net::TcpStream::set_nodelay`].
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.inner.set_nodelay(nodelay)
    }

    /// `TCP_NODELAY`.
    ///
    /// # Errors
    ///
    /// As [`std::net::TcpStream::nodelay`].
    pub fn nodelay(&self) -> io::Result<bool> {
        self.inner.nodelay()
    }

    /// Sets `IP_TTL`.
    ///
    /// # Errors
    ///
    /// As [`std::net::TcpStream::set_ttl`].
    pub fn set_ttl(&self, ttl: u32) -> io::Result<()> {
        self.inner.set_ttl(ttl)
    }

    /// `IP_TTL`.
    ///
    /// # Errors
    ///
    /// As [`std::net::TcpStream::ttl`].
    pub fn ttl(&self) -> io::Result<u32> {
        self.inner.ttl()
    }

    /// Takes the socket's pending error (`SO_ERROR`).
    ///
    /// # Errors
    ///
    /// As [`std::net::TcpStream::take_error`].
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.inner.take_error()
    }

    /// Sets the read timeout (`None`: none). Every read, peek and wait for readability gives
    /// up with `TimedOut` after it.
    ///
    /// As with std, the socket keeps it too (`SO_RCVTIMEO`): a handle made later by
    /// [`try_clone`](TcpStream::try_clone) or from the descriptor, and the std stream of
    /// [`into_std`](TcpStream::into_std), have it. (A clone made earlier keeps its own.)
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a zero duration (as std); as `setsockopt(2)`.
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
    /// `InvalidInput` for a zero duration (as std); as `setsockopt(2)`.
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

    /// Reads without removing the data from the socket's queue.
    ///
    /// # Errors
    ///
    /// As [`read`](Read::read).
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let deadline = self.ev.deadline(Direction::Read);
        self.ev.read_op(
            OpKind::Recv,
            Framing::Stream,
            buf,
            deadline,
            |fd, buf| sys::recv_op(fd, buf, true),
            |buf| self.inner.peek(buf),
        )
    }

    /// A second handle on the same connection (a duplicated descriptor), with this one's
    /// timeouts (later changes through either handle do not reach the other).
    ///
    /// # Errors
    ///
    /// As `dup(2)`.
    pub fn try_clone(&self) -> io::Result<TcpStream> {
        let clone = TcpStream::from_nonblocking(self.inner.try_clone()?);
        clone.ev.copy_timeouts(&self.ev);
        Ok(clone)
    }

    fn read_impl(&self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let deadline = self.ev.deadline(Direction::Read);
        self.ev.read_stream_op(
            OpKind::Recv,
            Framing::Stream,
            buf,
            deadline,
            |fd, buf| sys::recv_op(fd, buf, false),
            |buf| Ok((self.recv_now(buf)?, true)),
        )
    }

    /// One non-blocking receive.
    #[cfg(unix)]
    fn recv_now(&self, buf: &mut [u8]) -> io::Result<usize> {
        sys::recv(self.inner.as_raw_fd(), buf)
    }

    /// One non-blocking receive.
    #[cfg(windows)]
    fn recv_now(&self, buf: &mut [u8]) -> io::Result<usize> {
        (&self.inner).read(buf)
    }

    /// One non-blocking send (`EPIPE`, never `SIGPIPE`, on a closed connection).
    #[cfg(unix)]
    fn send_now(&self, buf: &[u8]) -> io::Result<usize> {
        sys::send(self.inner.as_raw_fd(), buf)
    }

    /// One non-blocking send.
    #[cfg(windows)]
    fn send_now(&self, buf: &[u8]) -> io::Result<usize> {
        (&self.inner).write(buf)
    }

    fn write_impl(&self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let deadline = self.ev.deadline(Direction::Write);
        // send(MSG_NOSIGNAL) on Linux (SO_NOSIGPIPE elsewhere, set at socket creation): EPIPE,
        // never SIGPIPE. (Windows has no signals: an error, WSAECONNRESET or WSAECONNABORTED.)
        self.ev.write_op(
            OpKind::Send,
            Framing::Stream,
            buf,
            deadline,
            sys::send_op,
            |buf| self.send_now(buf),
        )
    }

    fn read_vectored_impl(&self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        if self.ev.has_proactor() {
            // One buffer at a time through the proactor.
            return match bufs.iter_mut().find(|b| !b.is_empty()) {
                Some(b) => self.read_impl(b),
                None => Ok(0),
            };
        }
        let deadline = self.ev.deadline(Direction::Read);
        self.ev.readiness_op(Direction::Read, deadline, || {
            (&self.inner).read_vectored(bufs)
        })
    }

    fn write_vectored_impl(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if self.ev.has_proactor() {
            return match bufs.iter().find(|b| !b.is_empty()) {
                Some(b) => self.write_impl(b),
                None => Ok(0),
            };
        }
        let deadline = self.ev.deadline(Direction::Write);
        // Not std's write_vectored on Unix: that is writev(2), which raises SIGPIPE on a
        // closed connection.
        #[cfg(unix)]
        return self.ev.readiness_op(Direction::Write, deadline, || {
            sys::send_vectored(SockRef::from(&self.inner), bufs)
        });
        #[cfg(windows)]
        self.ev.readiness_op(Direction::Write, deadline, || {
            (&self.inner).write_vectored(bufs)
        })
    }
}

impl Read for TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_impl(buf)
    }
    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        self.read_vectored_impl(bufs)
    }
}

impl Read for &TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_impl(buf)
    }
    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        self.read_vectored_impl(bufs)
    }
}

impl Write for TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_impl(buf)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.write_vectored_impl(bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Write for &TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_impl(buf)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.write_vectored_impl(bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl fmt::Debug for TcpStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpStream")
            .field("local", &self.inner.local_addr().ok())
            .field("peer", &self.inner.peer_addr().ok())
            .field(RAW_NAME, &sys::raw(&self.inner))
            .finish()
    }
}

/// What `Debug` calls the OS handle.
pub(crate) const RAW_NAME: &str = if cfg!(windows) { "socket" } else { "fd" };

#[cfg(unix)]
macro_rules! fd_conversions {
    ($ty:ident, $std:ty) => {
        impl AsRawFd for $ty {
            fn as_raw_fd(&self) -> RawFd {
                self.inner.as_raw_fd()
            }
        }

        impl AsFd for $ty {
            fn as_fd(&self) -> BorrowedFd<'_> {
                self.inner.as_fd()
            }
        }

        impl IntoRawFd for $ty {
            fn into_raw_fd(self) -> RawFd {
                self.into_std().into_raw_fd()
            }
        }

        impl From<$ty> for OwnedFd {
            fn from(value: $ty) -> OwnedFd {
                value.into_std().into()
            }
        }

        impl FromRawFd for $ty {
            /// Takes ownership of `fd` and puts it in non-blocking mode (the mode change's
            /// error, if any, shows at the first operation), with the socket's timeouts.
            unsafe fn from_raw_fd(fd: RawFd) -> $ty {
                // SAFETY: the caller passes ownership of an open fd of the right kind.
                let inner = unsafe { <$std>::from_raw_fd(fd) };
                let _ = inner.set_nonblocking(true);
                <$ty>::adopt(inner)
            }
        }

        impl From<OwnedFd> for $ty {
            /// Takes ownership of `fd` and puts it in non-blocking mode, with the socket's
            /// timeouts.
            fn from(fd: OwnedFd) -> $ty {
                let inner = <$std>::from(fd);
                let _ = inner.set_nonblocking(true);
                <$ty>::adopt(inner)
            }
        }

        impl TryFrom<$std> for $ty {
            type Error = io::Error;
            fn try_from(value: $std) -> io::Result<$ty> {
                <$ty>::from_std(value)
            }
        }

        impl From<$ty> for $std {
            fn from(value: $ty) -> $std {
                value.into_std()
            }
        }
    };
}

#[cfg(unix)]
pub(crate) use fd_conversions;

#[cfg(windows)]
macro_rules! socket_conversions {
    ($ty:ident, $std:ty) => {
        impl AsRawSocket for $ty {
            fn as_raw_socket(&self) -> RawSocket {
                self.inner.as_raw_socket()
            }
        }

        impl AsSocket for $ty {
            fn as_socket(&self) -> BorrowedSocket<'_> {
                self.inner.as_socket()
            }
        }

        impl IntoRawSocket for $ty {
            fn into_raw_socket(self) -> RawSocket {
                self.into_std().into_raw_socket()
            }
        }

        impl From<$ty> for OwnedSocket {
            fn from(value: $ty) -> OwnedSocket {
                value.into_std().into()
            }
        }

        impl FromRawSocket for $ty {
            /// Takes ownership of `socket` and puts it in non-blocking mode (the mode change's
            /// error, if any, shows at the first operation). For the IOCP driver the socket
            /// must have been made overlapped (`WSA_FLAG_OVERLAPPED`; std's and this crate's
            /// sockets are). The socket's timeouts are taken over.
            unsafe fn from_raw_socket(socket: RawSocket) -> $ty {
                // SAFETY: the caller passes ownership of an open socket of the right kind.
                let inner = unsafe { <$std>::from_raw_socket(socket) };
                let _ = inner.set_nonblocking(true);
                <$ty>::adopt(inner)
            }
        }

        impl From<OwnedSocket> for $ty {
            /// Takes ownership of `socket` and puts it in non-blocking mode, with the socket's
            /// timeouts.
            fn from(socket: OwnedSocket) -> $ty {
                let inner = <$std>::from(socket);
                let _ = inner.set_nonblocking(true);
                <$ty>::adopt(inner)
            }
        }

        impl TryFrom<$std> for $ty {
            type Error = io::Error;
            fn try_from(value: $std) -> io::Result<$ty> {
                <$ty>::from_std(value)
            }
        }

        impl From<$ty> for $std {
            fn from(value: $ty) -> $std {
                value.into_std()
            }
        }
    };
}

#[cfg(windows)]
pub(crate) use socket_conversions;

#[cfg(unix)]
fd_conversions!(TcpListener, std::net::TcpListener);
#[cfg(unix)]
fd_conversions!(TcpStream, std::net::TcpStream);
#[cfg(windows)]
socket_conversions!(TcpListener, std::net::TcpListener);
#[cfg(windows)]
socket_conversions!(TcpStream, std::net::TcpStream);
