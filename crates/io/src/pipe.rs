//! Anonymous pipes that suspend only the calling coroutine.

use std::fmt;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

use crate::driver::{Op, OpKind};
use crate::source::{Direction, Evented, Framing};
use crate::sys_unix as sys;

/// Makes a pipe: bytes written to the [`PipeWriter`] are read from the [`PipeReader`].
///
/// ```
/// use std::io::{Read, Write};
/// let (mut reader, mut writer) = spindle_io::pipe()?;
/// writer.write_all(b"through")?;
/// drop(writer);
/// let mut s = String::new();
/// reader.read_to_string(&mut s)?;
/// assert_eq!(s, "through");
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # Errors
///
/// As `pipe(2)` (`EMFILE`...).
pub fn pipe() -> io::Result<(PipeReader, PipeWriter)> {
    let (r, w) = std::io::pipe()?;
    let mut reader = PipeReader::try_from(r)?;
    // Made here, without `O_DIRECT`: a byte stream, which its reading end cannot tell.
    reader.byte_stream = true;
    Ok((reader, PipeWriter::try_from(w)?))
}

/// The reading end of a pipe (or any readable fd it was made from: a child's stdout, a
/// terminal...).
///
/// On epoll and kqueue, a read of a pipe made by [`pipe`] that returns less than it asked
/// for has emptied the pipe, so the next read waits for data without a system call first.
/// Made from a descriptor, it cannot know that: the reading end of a packet-mode pipe
/// (`O_DIRECT`, one write's worth per read) looks like any other pipe's, a terminal returns a
/// line per read, a `SOCK_SEQPACKET` socket a record — each with more queued behind. So there
/// every read is tried first.
pub struct PipeReader {
    ev: Evented,
    inner: OwnedFd,
    /// A pipe in byte-stream mode, known only for one made by [`pipe`]: a short read there is
    /// the end of what is buffered, and a read may be served in parts when bounced off a
    /// copying stack (anything else is read a message at a time, bounced whole).
    byte_stream: bool,
}

/// The writing end of a pipe (or a child's stdin...). Writing after the reader is gone
/// returns `BrokenPipe` (Rust programs ignore `SIGPIPE`; a host program that does not must
/// ignore it too).
pub struct PipeWriter {
    ev: Evented,
    inner: OwnedFd,
    /// A pipe or FIFO in byte-stream mode (no `O_DIRECT`, which the writing end shows), told
    /// by `fstat(2)` when made: a write may be served in parts when bounced off a copying
    /// stack. Anything else (a packet-mode pipe, a socket...) is written a message at a time,
    /// bounced whole.
    byte_stream: bool,
}

macro_rules! pipe_end {
    ($ty:ident) => {
        impl $ty {
            /// Takes ownership of `fd` and puts it in non-blocking mode.
            ///
            /// # Errors
            ///
            /// `fcntl(2)` refused.
            pub fn from_owned_fd(fd: OwnedFd) -> io::Result<$ty> {
                sys::set_nonblocking(fd.as_raw_fd())?;
                Ok($ty {
                    ev: Evented::new(fd.as_raw_fd()),
                    byte_stream: <$ty>::is_byte_stream(fd.as_raw_fd()),
                    inner: fd,
                })
            }

            /// The descriptor (left non-blocking).
            pub fn into_owned_fd(self) -> OwnedFd {
                let $ty { ev, inner, .. } = self;
                drop(ev);
                inner
            }
        }

        impl AsFd for $ty {
            fn as_fd(&self) -> BorrowedFd<'_> {
                self.inner.as_fd()
            }
        }

        impl AsRawFd for $ty {
            fn as_raw_fd(&self) -> RawFd {
                self.inner.as_raw_fd()
            }
        }

        impl From<$ty> for OwnedFd {
            fn from(value: $ty) -> OwnedFd {
                value.into_owned_fd()
            }
        }

        impl TryFrom<OwnedFd> for $ty {
            type Error = io::Error;
            fn try_from(fd: OwnedFd) -> io::Result<$ty> {
                $ty::from_owned_fd(fd)
            }
        }

        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field("fd", &self.inner.as_raw_fd())
                    .finish()
            }
        }
    };
}

pipe_end!(PipeReader);
pipe_end!(PipeWriter);

macro_rules! from_std_end {
    ($ty:ident: $($std:ty),*) => {$(
        impl TryFrom<$std> for $ty {
            type Error = io::Error;
            fn try_from(value: $std) -> io::Result<$ty> {
                $ty::from_owned_fd(OwnedFd::from(value))
            }
        }
    )*};
}

from_std_end!(PipeReader: std::io::PipeReader, std::process::ChildStdout, std::process::ChildStderr);
from_std_end!(PipeWriter: std::io::PipeWriter, std::process::ChildStdin);

/// What a pipe end's reads and writes carry (see [`PipeWriter`]'s `byte_stream`).
fn framing(byte_stream: bool) -> Framing {
    if byte_stream {
        Framing::Stream
    } else {
        Framing::Datagram
    }
}

fn raw_read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writes of its length.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

fn raw_write(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for reads of its length.
    let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

impl PipeReader {
    /// What a reading end made from a descriptor knows of it: nothing (see the type's docs).
    fn is_byte_stream(_fd: RawFd) -> bool {
        false
    }

    /// Sets the read timeout (`None`: none).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a zero duration.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.ev.set_timeout(Direction::Read, timeout)
    }

    fn read_impl(&self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let deadline = self.ev.deadline(Direction::Read);
        let (fd, byte_stream) = (self.inner.as_raw_fd(), self.byte_stream);
        self.ev.read_stream_op(
            OpKind::Read,
            framing(byte_stream),
            buf,
            deadline,
            |fd, buf| Op::Read {
                fd,
                buf,
                offset: None,
            },
            // A byte-stream pipe's read stops short only at the end of what is buffered.
            |buf| Ok((raw_read(fd, buf)?, byte_stream)),
        )
    }
}

impl PipeWriter {
    fn is_byte_stream(fd: RawFd) -> bool {
        sys::is_byte_stream_fifo(fd)
    }

    /// Sets the write timeout (`None`: none).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a zero duration.
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.ev.set_timeout(Direction::Write, timeout)
    }

    fn write_impl(&self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let deadline = self.ev.deadline(Direction::Write);
        let fd = self.inner.as_raw_fd();
        self.ev.write_op(
            OpKind::Write,
            framing(self.byte_stream),
            buf,
            deadline,
            |fd, buf| Op::Write {
                fd,
                buf,
                offset: None,
            },
            |buf| raw_write(fd, buf),
        )
    }
}

impl Read for PipeReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_impl(buf)
    }
}

impl Read for &PipeReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_impl(buf)
    }
}

impl Write for PipeWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_impl(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Write for &PipeWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_impl(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
