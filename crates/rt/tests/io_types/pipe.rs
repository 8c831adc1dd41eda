//! `PipeReader` takes a short read for a drained queue.

use crate::common;

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::Duration;

use spindle_io::PipeReader;
use spindle_rt::IoBackend;

/// Writes `data` to a raw fd in one call.
fn raw_write(fd: &OwnedFd, data: &[u8]) {
    use std::os::fd::AsRawFd;
    // SAFETY: `data` is valid for reads of its length; `fd` is open.
    let n = unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
    assert_eq!(
        n,
        data.len() as isize,
        "{}",
        std::io::Error::last_os_error()
    );
}

/// The case: a `PipeReader` over `reader` (an fd whose reads return one message at a time),
/// in a task on epoll. The reader registers (a read that times out), two messages are written
/// at once, and the reader reads twice. The first read returns the first message, less than
/// the buffer: `PipeReader` takes that for "the queue is empty" ("A pipe's read stops short
/// only at the end of what is buffered") and clears the read readiness. The second message
/// is already queued, so no new edge comes: the second read waits for an event that never
/// comes and ends with `TimedOut` (without a read timeout: for ever).
/// Correct: the second read returns the second message (as it does outside a runtime, and
/// on the polling backend).
fn second_message_is_read(reader: OwnedFd, writer: OwnedFd) -> Result<Vec<u8>, std::io::ErrorKind> {
    let rt = common::rt(IoBackend::Epoll);
    common::within(rt, Duration::from_secs(20), move || {
        let mut r = PipeReader::from_owned_fd(reader).unwrap();
        r.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let mut buf = [0u8; 64];
        // Registers with the reactor (nothing to read yet).
        assert_eq!(
            r.read(&mut buf).unwrap_err().kind(),
            std::io::ErrorKind::TimedOut
        );
        raw_write(&writer, b"first");
        raw_write(&writer, b"second");
        spindle_rt::sleep(Duration::from_millis(50)); // the event is dispatched
        r.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let n = r.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"first");
        let second = r
            .read(&mut buf)
            .map(|n| buf[..n].to_vec())
            .map_err(|e| e.kind());
        drop(writer);
        second
    })
    .expect("hung")
}

/// A packet-mode pipe (`pipe2(O_DIRECT)`): each read returns one write's worth.
#[test]
fn packet_mode_pipe_second_message_epoll() {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for two descriptors.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_DIRECT | libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    // SAFETY: pipe2 just made both; nobody else owns them.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    assert_eq!(second_message_is_read(r, w), Ok(b"second".to_vec()));
}

/// A `SOCK_SEQPACKET` Unix socket, "any readable fd" (`PipeReader`'s docs): one message a read.
#[test]
fn seqpacket_second_message_epoll() {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for two descriptors.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    // SAFETY: socketpair just made both; nobody else owns them.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    assert_eq!(second_message_is_read(r, w), Ok(b"second".to_vec()));
}

/// A terminal in canonical mode (a pseudo-terminal's follower end; a program's stdin is often
/// one): each read returns one line, with the lines typed ahead still queued.
#[test]
fn tty_second_line_epoll() {
    // SAFETY: plain calls; results checked.
    let (leader, follower) = unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(m >= 0);
        assert_eq!(libc::grantpt(m), 0);
        assert_eq!(libc::unlockpt(m), 0);
        let name = libc::ptsname(m);
        assert!(!name.is_null());
        let s = libc::open(name, libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(s >= 0);
        // No echo (the leader would have to drain it); canonical mode stays on.
        let mut t: libc::termios = std::mem::zeroed();
        assert_eq!(libc::tcgetattr(s, &mut t), 0);
        t.c_lflag &= !(libc::ECHO | libc::ECHONL);
        assert_eq!(libc::tcsetattr(s, libc::TCSANOW, &t), 0);
        (OwnedFd::from_raw_fd(m), OwnedFd::from_raw_fd(s))
    };
    let rt = common::rt(IoBackend::Epoll);
    let got = common::within(rt, Duration::from_secs(20), move || {
        let mut r = PipeReader::from_owned_fd(follower).unwrap();
        r.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(
            r.read(&mut buf).unwrap_err().kind(),
            std::io::ErrorKind::TimedOut
        );
        raw_write(&leader, b"first\nsecond\n");
        spindle_rt::sleep(Duration::from_millis(50));
        r.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let n = r.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"first\n");
        let second = r
            .read(&mut buf)
            .map(|n| buf[..n].to_vec())
            .map_err(|e| e.kind());
        drop(leader);
        second
    })
    .expect("hung");
    assert_eq!(got, Ok(b"second\n".to_vec()));
}

/// Control (passes): the same packet-mode pipe outside a runtime reads both messages.
#[test]
fn packet_mode_pipe_second_message_thread_control() {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for two descriptors.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_DIRECT | libc::O_CLOEXEC) };
    assert_eq!(rc, 0);
    // SAFETY: pipe2 just made both; nobody else owns them.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let mut r = PipeReader::from_owned_fd(r).unwrap();
    r.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    raw_write(&w, b"first");
    raw_write(&w, b"second");
    let mut buf = [0u8; 64];
    let n = r.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"first");
    let n = r.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"second");
}

/// The same with a `UnixStream` made `From<OwnedFd>` of a `SOCK_SEQPACKET` socket (std's
/// `UnixStream::from(OwnedFd)` takes any Unix socket; std has no seqpacket type): its reads
/// return one record each (`MSG_EOR`, no `MSG_CTRUNC`), so the short read is taken for a
/// drained queue and the second record is never read. Correct: the second record.
#[test]
fn unix_stream_from_seqpacket_second_message_epoll() {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for two descriptors.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    assert_eq!(rc, 0);
    // SAFETY: socketpair just made both; nobody else owns them.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let rt = common::rt(IoBackend::Epoll);
    let got = common::within(rt, Duration::from_secs(20), move || {
        let mut r = spindle_io::net::UnixStream::from(r);
        r.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(
            r.read(&mut buf).unwrap_err().kind(),
            std::io::ErrorKind::TimedOut
        );
        raw_write(&w, b"first");
        raw_write(&w, b"second");
        spindle_rt::sleep(Duration::from_millis(50));
        r.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let n = r.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"first");
        let second = r
            .read(&mut buf)
            .map(|n| buf[..n].to_vec())
            .map_err(|e| e.kind());
        drop(w);
        second
    })
    .expect("hung");
    assert_eq!(got, Ok(b"second".to_vec()));
}
