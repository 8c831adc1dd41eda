//! Unix system calls the std types do not offer in non-blocking form. Sockets and socket
//! addresses go through `socket2` (non-blocking, close-on-exec sockets, `accept4`,
//! non-blocking `connect`, address layouts with `sin_len` where the platform has it); what it
//! does not offer is here: the flags of a stream read (`MSG_CTRUNC`), pipe inspection,
//! `O_NONBLOCK` on descriptors that are not sockets.

use std::io;
use std::mem;
use std::net::SocketAddr;
use std::os::fd::{OwnedFd, RawFd};
#[cfg(target_os = "linux")]
use std::ptr;

use socket2::{Domain, SockAddr, SockAddrStorage, SockRef, Socket, Type};

/// Turns a `-1` return into the thread's `errno` as an error.
pub(crate) fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// A new socket in non-blocking, close-on-exec mode (and `SO_NOSIGPIPE` on Apple systems,
/// which have no `MSG_NOSIGNAL`: a send on a closed connection gives `EPIPE`, not `SIGPIPE`).
pub(crate) fn socket(domain: Domain, ty: Type) -> io::Result<Socket> {
    // Where the kernel takes SOCK_NONBLOCK, one syscall; `Socket::new` adds the rest.
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
    {
        Socket::new(domain, ty.nonblocking(), None)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
    {
        let s = Socket::new(domain, ty, None)?;
        s.set_nonblocking(true)?;
        Ok(s)
    }
}

/// Sets `O_NONBLOCK` on `fd` (no-op if set): for descriptors that need not be sockets.
pub(crate) fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd the caller owns; F_GETFL takes no argument.
    let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    if flags & libc::O_NONBLOCK == 0 {
        // SAFETY: as above; F_SETFL takes an int.
        cvt(unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) })?;
    }
    Ok(())
}

/// `accept4(2)` with `SOCK_NONBLOCK | SOCK_CLOEXEC` (or the equivalent): the new connection and
/// the peer's address.
pub(crate) fn accept(listener: SockRef<'_>) -> io::Result<(OwnedFd, SockAddr)> {
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
    let (new, addr) = listener.accept4(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)?;
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
    let (new, addr) = {
        // Close-on-exec (and SO_NOSIGPIPE on Apple systems) come with socket2's accept.
        let (new, addr) = listener.accept()?;
        new.set_nonblocking(true)?;
        (new, addr)
    };
    Ok((new.into(), addr))
}

/// Whether `socket` keeps message boundaries in order (`SOCK_SEQPACKET`), whose reads return
/// one record each: a short read there leaves the next record queued. False if the type
/// cannot be read.
pub(crate) fn is_seqpacket(socket: SockRef<'_>) -> bool {
    socket.r#type().is_ok_and(|ty| ty == Type::SEQPACKET)
}

/// Whether `fd` is a pipe or FIFO whose writes are a byte stream: not a packet-mode pipe's
/// writing end (Linux's `O_DIRECT`: each write a message; only the writing end shows the
/// flag), nor a socket, a terminal or anything else; false if the descriptor cannot be
/// inspected.
pub(crate) fn is_byte_stream_fifo(fd: RawFd) -> bool {
    let mut stat = mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `stat` is valid for writes of a `struct stat`, which fstat fills on success.
    if unsafe { libc::fstat(fd, stat.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: fstat succeeded, so it initialised `stat`.
    let mode = unsafe { stat.assume_init() }.st_mode;
    if mode & libc::S_IFMT != libc::S_IFIFO {
        return false;
    }
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // SAFETY: fcntl on an fd the caller owns; F_GETFL takes no argument.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if flags < 0 || flags & libc::O_DIRECT != 0 {
            return false;
        }
    }
    true
}

/// Starts a non-blocking `connect(2)`. `Ok(true)`: connected; `Ok(false)`: in progress (wait
/// for writability, then read `SO_ERROR`).
pub(crate) fn connect_start(socket: SockRef<'_>, addr: &SockAddr) -> io::Result<bool> {
    loop {
        let Err(e) = socket.connect(addr) else {
            return Ok(true);
        };
        match e.raw_os_error() {
            Some(libc::EINPROGRESS) => return Ok(false),
            Some(libc::EINTR) => {
                // The connection continues in the background after EINTR; the second call
                // reports EALREADY/EISCONN, handled as "in progress"/"connected".
                continue;
            }
            Some(libc::EALREADY) => return Ok(false),
            Some(libc::EISCONN) => return Ok(true),
            _ => return Err(e),
        }
    }
}

/// A `SocketAddr` as a C socket address, as the proactor's operations take it.
pub(crate) fn socket_addr_to_raw(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    let addr = SockAddr::from(*addr);
    let len = addr.len();
    let mut storage = addr.as_storage();
    // SAFETY: `sockaddr_storage` is one of this platform's socket address types.
    let raw = *unsafe { storage.view_as::<libc::sockaddr_storage>() };
    (raw, len)
}

/// A C socket address (as the kernel filled it in for an accept or a receive) as a
/// `SocketAddr`.
pub(crate) fn raw_to_socket_addr(
    raw: &libc::sockaddr_storage,
    len: libc::socklen_t,
) -> io::Result<SocketAddr> {
    // Only a whole `sockaddr_in` or `sockaddr_in6` is an internet address.
    let needed = match libc::c_int::from(raw.ss_family) {
        libc::AF_INET => mem::size_of::<libc::sockaddr_in>(),
        libc::AF_INET6 => mem::size_of::<libc::sockaddr_in6>(),
        _ => return Err(not_an_internet_address()),
    };
    if (len as usize) < needed || len as usize > mem::size_of::<libc::sockaddr_storage>() {
        return Err(not_an_internet_address());
    }
    let mut storage = SockAddrStorage::zeroed();
    // SAFETY: `sockaddr_storage` is one of this platform's socket address types.
    *unsafe { storage.view_as::<libc::sockaddr_storage>() } = *raw;
    // SAFETY: the kernel wrote one address of `len` bytes, whose family matches its layout.
    let addr = unsafe { SockAddr::new(storage, len) };
    addr.as_socket().ok_or_else(not_an_internet_address)
}

fn not_an_internet_address() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "not an IPv4 or IPv6 socket address",
    )
}

/// The room for a Unix socket path in a `sockaddr_un` (108 bytes on Linux, 104 on the BSDs),
/// its terminating NUL included.
const SUN_PATH_LEN: usize =
    mem::size_of::<libc::sockaddr_un>() - mem::offset_of!(libc::sockaddr_un, sun_path);

/// A Unix socket path as a socket address: a filesystem path (no NUL bytes; Linux's abstract
/// names are not offered), shorter than `sun_path`.
pub(crate) fn unix_addr(path: &std::path::Path) -> io::Result<SockAddr> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    if bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a Unix socket path must not contain a NUL byte",
        ));
    }
    if bytes.len() >= SUN_PATH_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a Unix socket path must be shorter than {SUN_PATH_LEN} bytes"),
        ));
    }
    SockAddr::unix(path)
}

/// The raw descriptor of a socket, as the driver interface names sources.
pub(crate) fn raw<S: std::os::fd::AsRawFd + ?Sized>(s: &S) -> RawFd {
    s.as_raw_fd()
}

/// A listening TCP socket bound to `addr` (with `SO_REUSEADDR`), non-blocking, with a backlog
/// of `backlog`.
pub(crate) fn tcp_listener(addr: &SocketAddr, backlog: i32) -> io::Result<std::net::TcpListener> {
    let s = socket(Domain::for_address(*addr), Type::STREAM)?;
    s.set_reuse_address(true)?;
    s.bind(&SockAddr::from(*addr))?;
    s.listen(backlog)?;
    Ok(s.into())
}

/// An unconnected TCP socket of `addr`'s family, non-blocking.
pub(crate) fn tcp_stream_socket(addr: &SocketAddr) -> io::Result<std::net::TcpStream> {
    Ok(socket(Domain::for_address(*addr), Type::STREAM)?.into())
}

/// A UDP socket bound to `addr`, non-blocking.
pub(crate) fn udp_bind(addr: &SocketAddr) -> io::Result<std::net::UdpSocket> {
    let s = socket(Domain::for_address(*addr), Type::DGRAM)?;
    s.bind(&SockAddr::from(*addr))?;
    Ok(s.into())
}

/// Starts a non-blocking `connect(2)` to an internet address; see [`connect_start`].
pub(crate) fn connect_to(socket: SockRef<'_>, addr: &SocketAddr) -> io::Result<bool> {
    connect_start(socket, &SockAddr::from(*addr))
}

/// Whether `e` says the process (or the system) ran out of file descriptors: the errors after
/// which `accept` backs off.
pub(crate) fn is_out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// Whether `e` says the socket is not connected (yet).
pub(crate) fn is_not_connected(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOTCONN)
}

/// A read of a Unix stream socket (`recvmsg(2)` without room for ancillary data): the count,
/// and whether a short count may mean the end of the queue. The kernel ends a read at a
/// message that carried descriptors (`SCM_RIGHTS`, closed for want of room, as `read(2)`
/// closes them) or, with `SO_PASSCRED`, at a change of writer; either sets `MSG_CTRUNC`, and
/// then data may be queued behind the short count. So may a record's end (`MSG_EOR`).
pub(crate) fn recv_stream(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, bool)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: all-zero is a valid `msghdr` (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    // SAFETY: `msg` points at one iovec over `buf`, valid and writable for its length for the
    // call's duration; no name or control buffer.
    let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // `MSG_EOR`: a record's end (a `SOCK_SEQPACKET` socket where the kernel says so; Linux
    // does not, so `UnixStream` also asks the socket's type when it adopts one).
    Ok((
        n as usize,
        msg.msg_flags & (libc::MSG_CTRUNC | libc::MSG_EOR) == 0,
    ))
}

/// A non-blocking `recv(2)` on stream socket `fd` into `buf`.
///
/// On Linux it is the system call itself (`recvfrom` through `syscall(2)`), not libc's
/// `recv`: libc's is a thread-cancellation point, and once the process has a second thread
/// glibc brackets every such call with cancellation bookkeeping that Rust code never uses
/// (it does not call `pthread_cancel`), a cost on every read of a busy socket.
pub(crate) fn recv(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    #[cfg(target_os = "linux")]
    // SAFETY: `buf` is valid and writable for `buf.len()` bytes for the call's duration; no
    // source address is asked for (null pointers).
    let n = unsafe {
        libc::syscall(
            libc::SYS_recvfrom,
            libc::c_long::from(fd),
            buf.as_mut_ptr(),
            buf.len(),
            0 as libc::c_long,
            ptr::null_mut::<libc::sockaddr>(),
            ptr::null_mut::<libc::socklen_t>(),
        )
    };
    #[cfg(not(target_os = "linux"))]
    // SAFETY: as above.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// A non-blocking `send(2)` on stream socket `fd` from `buf`, with [`SEND_NO_SIGPIPE`]: a
/// closed connection gives `EPIPE`, never `SIGPIPE`. On Linux the system call itself, as in
/// [`recv`].
pub(crate) fn send(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    #[cfg(target_os = "linux")]
    // SAFETY: `buf` is valid for reads of `buf.len()` bytes for the call's duration; no
    // destination address (null, length 0).
    let n = unsafe {
        libc::syscall(
            libc::SYS_sendto,
            libc::c_long::from(fd),
            buf.as_ptr(),
            buf.len(),
            libc::c_long::from(SEND_NO_SIGPIPE),
            ptr::null::<libc::sockaddr>(),
            0 as libc::c_long,
        )
    };
    #[cfg(not(target_os = "linux"))]
    // SAFETY: as above.
    let n = unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), SEND_NO_SIGPIPE) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// A receive on `fd` into `buf` (peeking when `peek`), for a proactor.
pub(crate) fn recv_op(fd: RawFd, buf: &mut [u8], peek: bool) -> crate::Op<'_> {
    crate::Op::Recv {
        fd,
        buf,
        flags: if peek { libc::MSG_PEEK } else { 0 },
    }
}

/// The flags of a send that must not raise `SIGPIPE`: `MSG_NOSIGNAL` where it exists; none
/// elsewhere, where sockets get `SO_NOSIGPIPE` at creation.
#[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
pub(crate) const SEND_NO_SIGPIPE: libc::c_int = libc::MSG_NOSIGNAL;
/// See above.
#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
pub(crate) const SEND_NO_SIGPIPE: libc::c_int = 0;

/// A gathering send on a stream socket: `sendmsg(2)` with `MSG_NOSIGNAL` (where it exists;
/// `SO_NOSIGPIPE` is set at creation elsewhere), so that a closed connection gives `EPIPE`,
/// never `SIGPIPE` — unlike `writev(2)`, which std's `write_vectored` makes.
pub(crate) fn send_vectored(socket: SockRef<'_>, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
    // At most IOV_MAX (1024 on Linux and the BSDs) buffers: more fail with EMSGSIZE; a
    // partial write is allowed anyway.
    let bufs = &bufs[..bufs.len().min(1024)];
    socket.send_vectored_with_flags(bufs, SEND_NO_SIGPIPE)
}

/// `send(2)` with `MSG_NOSIGNAL` where it exists (std's `UnixStream::write` is `write(2)`,
/// which raises `SIGPIPE` on a closed peer).
pub(crate) fn send_nosignal(socket: SockRef<'_>, buf: &[u8]) -> io::Result<usize> {
    socket.send_with_flags(buf, SEND_NO_SIGPIPE)
}

/// A send on `fd` from `buf`, for a proactor.
pub(crate) fn send_op(fd: RawFd, buf: &[u8]) -> crate::Op<'_> {
    crate::Op::Send { fd, buf, flags: 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internet_addresses_round_trip_through_the_c_layout() {
        for addr in [
            "127.0.0.1:8080".parse::<SocketAddr>().unwrap(),
            "[::1]:443".parse().unwrap(),
            SocketAddr::V6(std::net::SocketAddrV6::new(
                "fe80::1".parse().unwrap(),
                9,
                0x1234_5678,
                7,
            )),
        ] {
            let (raw, len) = socket_addr_to_raw(&addr);
            assert_eq!(raw_to_socket_addr(&raw, len).unwrap(), addr);
            // Cut short, it names no address.
            assert!(raw_to_socket_addr(&raw, len - 1).is_err());
        }
        let (unix, len) = {
            let addr = SockAddr::unix("/tmp/x").unwrap();
            let len = addr.len();
            let mut storage = addr.as_storage();
            // SAFETY: `sockaddr_storage` is one of this platform's socket address types.
            (*unsafe { storage.view_as::<libc::sockaddr_storage>() }, len)
        };
        assert!(raw_to_socket_addr(&unix, len).is_err());
    }

    #[test]
    fn unix_paths_with_a_nul_or_too_long_are_refused_with_a_reason() {
        let nul = unix_addr(std::path::Path::new("/tmp/a\0b")).unwrap_err();
        assert!(nul.to_string().contains("NUL"), "{nul}");
        let long = "x".repeat(SUN_PATH_LEN);
        let err = unix_addr(std::path::Path::new(&long)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("shorter than"), "{err}");
        let fits = "x".repeat(SUN_PATH_LEN - 1);
        let addr = unix_addr(std::path::Path::new(&fits)).unwrap();
        assert_eq!(
            addr.as_pathname(),
            Some(std::path::Path::new(&fits)),
            "{addr:?}"
        );
    }

    #[test]
    fn sockets_are_non_blocking_and_close_on_exec() {
        let s = socket(Domain::IPV4, Type::STREAM).unwrap();
        assert!(s.nonblocking().unwrap());
        // SAFETY: fcntl(F_GETFD) on a descriptor we own.
        let fd_flags = unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&s), libc::F_GETFD) };
        assert!(fd_flags >= 0 && fd_flags & libc::FD_CLOEXEC != 0);
        assert!(!is_seqpacket(SockRef::from(&s)));
        let seq = socket(Domain::UNIX, Type::SEQPACKET).unwrap();
        assert!(is_seqpacket(SockRef::from(&seq)));
    }
}
