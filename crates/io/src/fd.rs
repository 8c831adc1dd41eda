//! [`Io`]: any file descriptor the user brings, made to suspend only the calling coroutine.

use std::fmt;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::{Duration, Instant};

use crate::scheduled::Interest;
use crate::source::{Direction, Evented};
use crate::sys_unix as sys;

/// Wraps any object owning a file descriptor that supports non-blocking mode and readiness
/// (a socket from another crate, a pipe, a tty, an eventfd, a `timerfd`...), so that its
/// operations suspend only the calling coroutine.
///
/// [`Io::new`] puts the descriptor in non-blocking mode. Then [`read_with`](Io::read_with) /
/// [`write_with`](Io::write_with) run a call on the object and, when it fails with
/// `WouldBlock`, wait for readiness and retry; `Read`/`Write` are implemented on top when the
/// object implements them. Readiness backends wait in the reactor; on io_uring the wait is a
/// poll operation in the ring; outside a runtime the thread blocks in `poll(2)`.
///
/// ```
/// use spindle_io::Io;
/// use std::io::{Read, Write};
/// use std::os::unix::net::UnixStream;
///
/// let (a, b) = UnixStream::pair()?;
/// let mut a = Io::new(a)?;
/// let mut b = Io::new(b)?;
/// a.write_all(b"ping")?;
/// let mut buf = [0; 4];
/// b.read_exact(&mut buf)?;
/// assert_eq!(&buf, b"ping");
/// // A raw call of your own, retried on WouldBlock:
/// let n = b.read_with(|mut s| { a.write_all(b"x")?; s.read(&mut buf) })?;
/// assert_eq!(n, 1);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Io<T: AsFd> {
    // Declared first: deregistered before `inner` closes the descriptor.
    ev: Evented,
    inner: T,
}

impl<T: AsFd> Io<T> {
    /// Takes `inner` and puts its descriptor in non-blocking mode.
    ///
    /// # Errors
    ///
    /// `fcntl(2)` refused.
    pub fn new(inner: T) -> io::Result<Io<T>> {
        let fd = inner.as_fd().as_raw_fd();
        sys::set_nonblocking(fd)?;
        Ok(Io {
            ev: Evented::new(fd),
            inner,
        })
    }

    /// The wrapped object.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    /// The wrapped object, mutably. Do not replace its descriptor.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.inner
    }

    /// The wrapped object (its descriptor left non-blocking).
    pub fn into_inner(self) -> T {
        let Io { ev, inner } = self;
        drop(ev);
        inner
    }

    /// Runs `f` until it does not fail with `WouldBlock`, waiting for readability in between.
    /// The read timeout applies.
    ///
    /// # Errors
    ///
    /// `f`'s error, or `TimedOut`.
    pub fn read_with<R>(&self, mut f: impl FnMut(&T) -> io::Result<R>) -> io::Result<R> {
        let deadline = self.ev.deadline(Direction::Read);
        self.ev
            .readiness_op(Direction::Read, deadline, || f(&self.inner))
    }

    /// Runs `f` until it does not fail with `WouldBlock`, waiting for writability in between.
    /// The write timeout applies.
    ///
    /// # Errors
    ///
    /// `f`'s error, or `TimedOut`.
    pub fn write_with<R>(&self, mut f: impl FnMut(&T) -> io::Result<R>) -> io::Result<R> {
        let deadline = self.ev.deadline(Direction::Write);
        self.ev
            .readiness_op(Direction::Write, deadline, || f(&self.inner))
    }

    /// As [`read_with`](Io::read_with), with mutable access.
    ///
    /// # Errors
    ///
    /// `f`'s error, or `TimedOut`.
    pub fn read_with_mut<R>(
        &mut self,
        mut f: impl FnMut(&mut T) -> io::Result<R>,
    ) -> io::Result<R> {
        let deadline = self.ev.deadline(Direction::Read);
        let Io { ev, inner } = self;
        ev.readiness_op(Direction::Read, deadline, || f(inner))
    }

    /// As [`write_with`](Io::write_with), with mutable access.
    ///
    /// # Errors
    ///
    /// `f`'s error, or `TimedOut`.
    pub fn write_with_mut<R>(
        &mut self,
        mut f: impl FnMut(&mut T) -> io::Result<R>,
    ) -> io::Result<R> {
        let deadline = self.ev.deadline(Direction::Write);
        let Io { ev, inner } = self;
        ev.readiness_op(Direction::Write, deadline, || f(inner))
    }

    /// Waits until the descriptor may be readable (or `timeout` passes: `TimedOut`). May wake
    /// spuriously: the next call can still fail with `WouldBlock`.
    ///
    /// # Errors
    ///
    /// `TimedOut`, or the driver's failure.
    pub fn readable(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.ev.wait_ready_now(
            Interest::READABLE,
            timeout.and_then(|t| Instant::now().checked_add(t)),
        )
    }

    /// Waits until the descriptor may be writable (or `timeout` passes: `TimedOut`).
    ///
    /// # Errors
    ///
    /// `TimedOut`, or the driver's failure.
    pub fn writable(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.ev.wait_ready_now(
            Interest::WRITABLE,
            timeout.and_then(|t| Instant::now().checked_add(t)),
        )
    }

    /// Sets the timeout of `read_with` and `Read` (`None`: none).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a zero duration.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.ev.set_timeout(Direction::Read, timeout)
    }

    /// Sets the timeout of `write_with` and `Write` (`None`: none).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a zero duration.
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.ev.set_timeout(Direction::Write, timeout)
    }
}

impl<T: AsFd + Read> Read for Io<T> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_with_mut(|inner| inner.read(buf))
    }
}

impl<T: AsFd + Write> Write for Io<T> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_with_mut(|inner| inner.write(buf))
    }
    fn flush(&mut self) -> io::Result<()> {
        self.write_with_mut(|inner| inner.flush())
    }
}

impl<T: AsFd> Read for &Io<T>
where
    for<'b> &'b T: Read,
{
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_with(|mut inner| inner.read(buf))
    }
}

impl<T: AsFd> Write for &Io<T>
where
    for<'b> &'b T: Write,
{
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_with(|mut inner| inner.write(buf))
    }
    fn flush(&mut self) -> io::Result<()> {
        self.write_with(|mut inner| inner.flush())
    }
}

impl<T: AsFd> AsFd for Io<T> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.as_fd()
    }
}

impl<T: AsFd> AsRawFd for Io<T> {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.as_fd().as_raw_fd()
    }
}

impl<T: AsFd + fmt::Debug> fmt::Debug for Io<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Io").field("inner", &self.inner).finish()
    }
}
