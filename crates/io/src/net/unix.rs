//! Unix domain sockets: [`UnixStream`], [`UnixListener`], [`UnixDatagram`].

use std::fmt;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use socket2::{Domain, SockRef, Type};

use crate::driver::{Op, OpKind};
use crate::net::backoff::AcceptBackoff;
use crate::net::tcp::fd_conversions;
use crate::source::{Direction, Evented, Framing};
use crate::sys_unix as sys;

/// A Unix stream socket server.
///
/// Like [`std::os::unix::net::UnixListener`]; `accept` suspends only the calling coroutine.
///
/// ```
/// use spindle_io::net::{UnixListener, UnixStream};
/// use std::io::{Read, Write};
/// let dir = std::env::temp_dir().join(format!("spindle-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let path = dir.join("sock");
/// let _ = std::fs::remove_file(&path);
/// let listener = UnixListener::bind(&path)?;
/// let mut client = UnixStream::connect(&path)?;
/// let (mut server, _) = listener.accept()?;
/// client.write_all(b"hi")?;
/// let mut buf = [0; 2];
/// server.read_exact(&mut buf)?;
/// assert_eq!(&buf, b"hi");
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct UnixListener {
    ev: Evented,
    inner: std::os::unix::net::UnixListener,
    backoff: AcceptBackoff,
}

impl UnixListener {
    /// Binds to `path` and listens.
    ///
    /// # Errors
    ///
    /// As [`std::os::unix::net::UnixListener::bind`] (`AddrInUse` if the path exists).
    pub fn bind<P: AsRef<Path>>(path: P) -> io::Result<UnixListener> {
        let inner = std::os::unix::net::UnixListener::bind(path)?;
        UnixListener::from_std(inner)
    }

    fn from_nonblocking(inner: std::os::unix::net::UnixListener) -> UnixListener {
        UnixListener {
            ev: Evented::new(inner.as_raw_fd()),
            inner,
            backoff: AcceptBackoff::default(),
        }
    }

    /// A socket the caller made, already non-blocking (a listener carries no timeouts to
    /// take over).
    fn adopt(inner: std::os::unix::net::UnixListener) -> UnixListener {
        UnixListener::from_nonblocking(inner)
    }

    /// Wraps a std listener (made non-blocking).
    ///
    /// # Errors
    ///
    /// Setting non-blocking mode failed.
    pub fn from_std(inner: std::os::unix::net::UnixListener) -> io::Result<UnixListener> {
        inner.set_nonblocking(true)?;
        Ok(UnixListener::adopt(inner))
    }

    /// The std listener (left non-blocking).
    pub fn into_std(self) -> std::os::unix::net::UnixListener {
        let UnixListener { ev, inner, .. } = self;
        drop(ev);
        inner
    }

    /// Accepts a connection: suspends the calling coroutine (or blocks the thread) until one
    /// arrives.
    ///
    /// Out of file descriptors (`EMFILE`/`ENFILE`) the error is returned, and the next
    /// `accept` first pauses (1 ms, doubling up to 100 ms while it lasts), as
    /// [`TcpListener::accept`](crate::net::TcpListener::accept) does.
    ///
    /// # Errors
    ///
    /// As `accept(2)`.
    pub fn accept(&self) -> io::Result<(UnixStream, SocketAddr)> {
        self.backoff.accept(|| self.accept_now())
    }

    fn accept_now(&self) -> io::Result<(UnixStream, SocketAddr)> {
        let done = self.ev.completion(OpKind::Accept, |p, fd| {
            let mut out = Box::new((
                // SAFETY: all-zero is a valid sockaddr_storage.
                unsafe { std::mem::zeroed::<libc::sockaddr_storage>() },
                std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t,
            ));
            let (addr, len) = &mut *out;
            let new = p.submit(Op::Accept { fd, addr, len }, None)?;
            // SAFETY: the proactor's accept returns a new fd that nobody else owns.
            Ok(unsafe { OwnedFd::from_raw_fd(new as RawFd) })
        });
        let fd = match done {
            Some(r) => r?,
            None => {
                self.ev
                    .readiness_op(Direction::Read, None, || {
                        sys::accept(SockRef::from(&self.inner))
                    })?
                    .0
            }
        };
        let stream = UnixStream::from_nonblocking(std::os::unix::net::UnixStream::from(fd));
        let peer = stream.inner.peer_addr()?;
        Ok((stream, peer))
    }

    /// An iterator over incoming connections (never `None`).
    pub fn incoming(&self) -> impl Iterator<Item = io::Result<UnixStream>> + '_ {
        std::iter::repeat_with(move || self.accept().map(|(s, _)| s))
    }

    /// The local address.
    ///
    /// # Errors
    ///
    /// As [`std::os::unix::net::UnixListener::local_addr`].
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// Takes the socket's pending error.
    ///
    /// # Errors
    ///
    /// As [`std::os::unix::net::UnixListener::take_error`].
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.inner.take_error()
    }

    /// A second handle (a duplicated descriptor).
    ///
    /// # Errors
    ///
    /// As `dup(2)`.
    pub fn try_clone(&self) -> io::Result<UnixListener> {
        Ok(UnixListener::from_nonblocking(self.inner.try_clone()?))
    }
}

impl fmt::Debug for UnixListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnixListener")
            .field("addr", &self.inner.local_addr().ok())
            .field("fd", &self.inner.as_raw_fd())
            .finish()
    }
}

/// A Unix stream socket: [`Read`] and [`Write`] (also for `&UnixStream`), suspending only the
/// calling coroutine.
///
/// One made from a descriptor (`From<OwnedFd>`, `from_std`) may also be a `SOCK_SEQPACKET`
/// socket, as with std: its reads return a record each and its writes send one.
pub struct UnixStream {
    ev: Evented,
    inner: std::os::unix::net::UnixStream,
    /// A `SOCK_SEQPACKET` socket: a short read is the end of a record, not of the queue, and
    /// a write is a record (never cut when bounced off a copying stack).
    records: bool,
}

impl UnixStream {
    /// Connects to the socket at `path`.
    ///
    /// A listener whose backlog is full makes a non-blocking connect fail with `EAGAIN`
    /// rather than wait; this retries every few milliseconds (suspending only the caller).
    ///
    /// # Errors
    ///
    /// As [`std::os::unix::net::UnixStream::connect`].
    pub fn connect<P: AsRef<Path>>(path: P) -> io::Result<UnixStream> {
        UnixStream::connect_deadline(path.as_ref(), None)
    }

    /// As [`connect`](UnixStream::connect), giving up after `timeout` (`TimedOut`).
    ///
    /// # Errors
    ///
    /// As `connect`; `InvalidInput` for a zero timeout.
    pub fn connect_timeout<P: AsRef<Path>>(path: P, timeout: Duration) -> io::Result<UnixStream> {
        if timeout.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot set a 0 duration timeout",
            ));
        }
        UnixStream::connect_deadline(path.as_ref(), Instant::now().checked_add(timeout))
    }

    fn connect_deadline(path: &Path, deadline: Option<Instant>) -> io::Result<UnixStream> {
        let addr = sys::unix_addr(path)?;
        let socket = sys::socket(Domain::UNIX, Type::STREAM)?;
        let stream = UnixStream::from_nonblocking(std::os::unix::net::UnixStream::from(socket));
        let mut pause = Duration::from_millis(1);
        loop {
            match sys::connect_start(SockRef::from(&stream.inner), &addr) {
                Ok(true) => return Ok(stream),
                Ok(false) => {
                    stream.ev.readiness_op(Direction::Write, deadline, || {
                        match stream.inner.take_error()? {
                            Some(e) => Err(e),
                            None => match stream.inner.peer_addr() {
                                Ok(_) => Ok(()),
                                Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
                                    Err(io::Error::from(io::ErrorKind::WouldBlock))
                                }
                                Err(e) => Err(e),
                            },
                        }
                    })?;
                    return Ok(stream);
                }
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                    // The listener's backlog is full: nothing to wait on but time. The last
                    // pause ends at the deadline, for one more try there.
                    let now = Instant::now();
                    if deadline.is_some_and(|d| now >= d) {
                        return Err(io::Error::from(io::ErrorKind::TimedOut));
                    }
                    let wake = deadline.map_or(now + pause, |d| d.min(now + pause));
                    while spindle_park::park_until(wake) == spindle_park::Wake::Woken {}
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A connected pair of sockets.
    ///
    /// # Errors
    ///
    /// As `socketpair(2)`.
    pub fn pair() -> io::Result<(UnixStream, UnixStream)> {
        let (a, b) = std::os::unix::net::UnixStream::pair()?;
        a.set_nonblocking(true)?;
        b.set_nonblocking(true)?;
        Ok((
            UnixStream::from_nonblocking(a),
            UnixStream::from_nonblocking(b),
        ))
    }

    /// A `SOCK_STREAM` socket made here, already non-blocking.
    fn from_nonblocking(inner: std::os::unix::net::UnixStream) -> UnixStream {
        UnixStream {
            ev: Evented::new(inner.as_raw_fd()),
            inner,
            records: false,
        }
    }

    /// A socket the caller made, already non-blocking: its read and write timeouts (which
    /// std keeps in the socket) are taken over, and its type asked (std takes a
    /// `SOCK_SEQPACKET` socket too).
    fn adopt(inner: std::os::unix::net::UnixStream) -> UnixStream {
        let mut stream = UnixStream::from_nonblocking(inner);
        stream.records = sys::is_seqpacket(SockRef::from(&stream.inner));
        stream
            .ev
            .adopt_timeouts(stream.inner.read_timeout(), stream.inner.write_timeout());
        stream
    }

    /// Wraps a std stream (made non-blocking), with its read and write timeouts.
    ///
    /// # Errors
    ///
    /// Setting non-blocking mode failed.
    pub fn from_std(inner: std::os::unix::net::UnixStream) -> io::Result<UnixStream> {
        inner.set_nonblocking(true)?;
        Ok(UnixStream::adopt(inner))
    }

    /// The std stream (left non-blocking).
    pub fn into_std(self) -> std::os::unix::net::UnixStream {
        let UnixStream { ev, inner, .. } = self;
        drop(ev);
        inner
    }

    /// The local address.
    ///
    /// # Errors
    ///
    /// As `getsockname(2)`.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// The peer's address.
    ///
    /// # Errors
    ///
    /// As `getpeername(2)`.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.peer_addr()
    }

    /// Shuts down one or both halves.
    ///
    /// # Errors
    ///
    /// As `shutdown(2)`.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.inner.shutdown(how)
    }

    /// Sets the read timeout (`None`: none).
    ///
    /// As with std, the socket keeps it too (`SO_RCVTIMEO`): a handle made later by
    /// [`try_clone`](UnixStream::try_clone) or from the descriptor, and the std socket of
    /// [`into_std`](UnixStream::into_std), have it. (A clone made earlier keeps its own.)
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

    /// Takes the socket's pending error.
    ///
    /// # Errors
    ///
    /// As `getsockopt(SO_ERROR)`.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.inner.take_error()
    }

    /// A second handle (a duplicated descriptor), with this one's timeouts (later changes
    /// through either handle do not reach the other).
    ///
    /// # Errors
    ///
    /// As `dup(2)`.
    pub fn try_clone(&self) -> io::Result<UnixStream> {
        let mut clone = UnixStream::from_nonblocking(self.inner.try_clone()?);
        clone.records = self.records;
        clone.ev.copy_timeouts(&self.ev);
        Ok(clone)
    }

    /// What the socket's reads and writes carry.
    fn framing(&self) -> Framing {
        if self.records {
            Framing::Datagram
        } else {
            Framing::Stream
        }
    }

    fn read_impl(&self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let deadline = self.ev.deadline(Direction::Read);
        let records = self.records;
        self.ev.read_stream_op(
            OpKind::Recv,
            self.framing(),
            buf,
            deadline,
            |fd, buf| Op::Recv { fd, buf, flags: 0 },
            |buf| {
                let (n, short_means_end) = sys::recv_stream(self.inner.as_raw_fd(), buf)?;
                Ok((n, short_means_end && !records))
            },
        )
    }

    fn write_impl(&self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let deadline = self.ev.deadline(Direction::Write);
        self.ev.write_op(
            OpKind::Send,
            self.framing(),
            buf,
            deadline,
            |fd, buf| Op::Send { fd, buf, flags: 0 },
            |buf| sys::send_nosignal(SockRef::from(&self.inner), buf),
        )
    }
}

impl Read for UnixStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_impl(buf)
    }
    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        match bufs.iter_mut().find(|b| !b.is_empty()) {
            Some(b) => self.read_impl(b),
            None => Ok(0),
        }
    }
}

impl Read for &UnixStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_impl(buf)
    }
}

impl Write for UnixStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_impl(buf)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match bufs.iter().find(|b| !b.is_empty()) {
            Some(b) => self.write_impl(b),
            None => Ok(0),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Write for &UnixStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_impl(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl fmt::Debug for UnixStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnixStream")
            .field("fd", &self.inner.as_raw_fd())
            .finish()
    }
}

/// A Unix datagram socket.
pub struct UnixDatagram {
    ev: Evented,
    inner: std::os::unix::net::UnixDatagram,
}

impl UnixDatagram {
    /// Binds to `path`.
    ///
    /// # Errors
    ///
    /// As [`std::os::unix::net::UnixDatagram::bind`].
    pub fn bind<P: AsRef<Path>>(path: P) -> io::Result<UnixDatagram> {
        UnixDatagram::from_std(std::os::unix::net::UnixDatagram::bind(path)?)
    }

    /// An unbound socket.
    ///
    /// # Errors
    ///
    /// As `socket(2)`.
    pub fn unbound() -> io::Result<UnixDatagram> {
        UnixDatagram::from_std(std::os::unix::net::UnixDatagram::unbound()?)
    }

    /// A connected pair.
    ///
    /// # Errors
    ///
    /// As `socketpair(2)`.
    pub fn pair() -> io::Result<(UnixDatagram, UnixDatagram)> {
        let (a, b) = std::os::unix::net::UnixDatagram::pair()?;
        Ok((UnixDatagram::from_std(a)?, UnixDatagram::from_std(b)?))
    }

    fn from_nonblocking(inner: std::os::unix::net::UnixDatagram) -> UnixDatagram {
        UnixDatagram {
            ev: Evented::new(inner.as_raw_fd()),
            inner,
        }
    }

    /// A socket the caller made, already non-blocking: its read and write timeouts (which
    /// std keeps in the socket) are taken over.
    fn adopt(inner: std::os::unix::net::UnixDatagram) -> UnixDatagram {
        let socket = UnixDatagram::from_nonblocking(inner);
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
    pub fn from_std(inner: std::os::unix::net::UnixDatagram) -> io::Result<UnixDatagram> {
        inner.set_nonblocking(true)?;
        Ok(UnixDatagram::adopt(inner))
    }

    /// The std socket (left non-blocking).
    pub fn into_std(self) -> std::os::unix::net::UnixDatagram {
        let UnixDatagram { ev, inner } = self;
        drop(ev);
        inner
    }

    /// Connects to the socket at `path`.
    ///
    /// # Errors
    ///
    /// As [`std::os::unix::net::UnixDatagram::connect`].
    pub fn connect<P: AsRef<Path>>(&self, path: P) -> io::Result<()> {
        self.inner.connect(path)
    }

    /// Sends to the connected peer.
    ///
    /// # Errors
    ///
    /// As `send(2)`; `TimedOut` after the write timeout.
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        let deadline = self.ev.deadline(Direction::Write);
        self.ev.write_op(
            OpKind::Send,
            Framing::Datagram,
            buf,
            deadline,
            |fd, buf| Op::Send { fd, buf, flags: 0 },
            |buf| self.inner.send(buf),
        )
    }

    /// Receives from the connected peer.
    ///
    /// # Errors
    ///
    /// As `recv(2)`; `TimedOut` after the read timeout.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        let deadline = self.ev.deadline(Direction::Read);
        self.ev.read_op(
            OpKind::Recv,
            Framing::Datagram,
            buf,
            deadline,
            |fd, buf| Op::Recv { fd, buf, flags: 0 },
            |buf| self.inner.recv(buf),
        )
    }

    /// Sends to the socket at `path` (readiness waits on every backend).
    ///
    /// # Errors
    ///
    /// As `sendto(2)`; `TimedOut` after the write timeout.
    pub fn send_to<P: AsRef<Path>>(&self, buf: &[u8], path: P) -> io::Result<usize> {
        let deadline = self.ev.deadline(Direction::Write);
        let path = path.as_ref();
        self.ev
            .readiness_op(Direction::Write, deadline, || self.inner.send_to(buf, path))
    }

    /// Receives a datagram and its sender's address (readiness waits on every backend).
    ///
    /// # Errors
    ///
    /// As `recvfrom(2)`; `TimedOut` after the read timeout.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        let deadline = self.ev.deadline(Direction::Read);
        self.ev
            .readiness_op(Direction::Read, deadline, || self.inner.recv_from(buf))
    }

    /// The local address.
    ///
    /// # Errors
    ///
    /// As `getsockname(2)`.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// The connected peer's address.
    ///
    /// # Errors
    ///
    /// As `getpeername(2)`.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.peer_addr()
    }

    /// Sets the read timeout (`None`: none).
    ///
    /// As with std, the socket keeps it too (`SO_RCVTIMEO`): a handle made later by
    /// [`try_clone`](UnixDatagram::try_clone) or from the descriptor, and the std socket of
    /// [`into_std`](UnixDatagram::into_std), have it. (A clone made earlier keeps its own.)
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a zero duration; as `setsockopt(2)`.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.inner.set_read_timeout(timeout)?;
        self.ev.set_timeout(Direction::Read, timeout)
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

    /// Shuts down one or both halves.
    ///
    /// # Errors
    ///
    /// As `shutdown(2)`.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.inner.shutdown(how)
    }

    /// Takes the socket's pending error.
    ///
    /// # Errors
    ///
    /// As `getsockopt(SO_ERROR)`.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.inner.take_error()
    }

    /// A second handle (a duplicated descriptor), with this one's timeouts (later changes
    /// through either handle do not reach the other).
    ///
    /// # Errors
    ///
    /// As `dup(2)`.
    pub fn try_clone(&self) -> io::Result<UnixDatagram> {
        let clone = UnixDatagram::from_nonblocking(self.inner.try_clone()?);
        clone.ev.copy_timeouts(&self.ev);
        Ok(clone)
    }
}

impl fmt::Debug for UnixDatagram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnixDatagram")
            .field("fd", &self.inner.as_raw_fd())
            .finish()
    }
}

fd_conversions!(UnixListener, std::os::unix::net::UnixListener);
fd_conversions!(UnixStream, std::os::unix::net::UnixStream);
fd_conversions!(UnixDatagram, std::os::unix::net::UnixDatagram);
