//! Unix system calls the std types do not offer in non-blocking form: socket creation with
//! `O_NONBLOCK`, `accept4`, non-blocking `connect`, address conversions.

use std::io;
use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
use std::os::fd::AsRawFd;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// Turns a `-1` return into the thread's `errno` as an error.
pub(crate) fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// A new socket in non-blocking, close-on-exec mode.
pub(crate) fn socket(domain: libc::c_int, ty: libc::c_int) -> io::Result<OwnedFd> {
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
    {
        // SAFETY: plain syscall; the flags are valid for socket(2) on these systems.
        let fd =
            cvt(unsafe { libc::socket(domain, ty | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) })?;
        // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
    {
        // SAFETY: plain syscall.
        let fd = cvt(unsafe { libc::socket(domain, ty, 0) })?;
        // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        set_cloexec(fd.as_raw_fd())?;
        set_nonblocking(fd.as_raw_fd())?;
        #[cfg(target_vendor = "apple")]
        {
            // No MSG_NOSIGNAL on Apple systems: the socket option instead (EPIPE, not SIGPIPE).
            let one: libc::c_int = 1;
            // SAFETY: a valid option value of the right size for SO_NOSIGPIPE.
            cvt(unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_NOSIGPIPE,
                    (&one as *const libc::c_int).cast(),
                    mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            })?;
        }
        Ok(fd)
    }
}

/// Sets `O_NONBLOCK` on `fd` (no-op if set).
pub(crate) fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd the caller owns; F_GETFL takes no argument.
    let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    if flags & libc::O_NONBLOCK == 0 {
        // SAFETY: as above; F_SETFL takes an int.
        cvt(unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) })?;
    }
    Ok(())
}

#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
fn set_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd the caller owns.
    let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFD) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) })?;
    Ok(())
}

/// `accept4(2)` with `SOCK_NONBLOCK | SOCK_CLOEXEC` (or the equivalent): the new connection and
/// the raw peer address.
pub(crate) fn accept(fd: RawFd) -> io::Result<(OwnedFd, libc::sockaddr_storage, libc::socklen_t)> {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut storage: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let mut len = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
    {
        // SAFETY: `storage` and `len` are valid for writes and `len` holds storage's size.
        let new = cvt(unsafe {
            libc::accept4(
                fd,
                (&mut storage as *mut libc::sockaddr_storage).cast(),
                &mut len,
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            )
        })?;
        // SAFETY: a new fd from accept4, owned by nobody else.
        Ok((unsafe { OwnedFd::from_raw_fd(new) }, storage, len))
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
    {
        // SAFETY: as above.
        let new = cvt(unsafe {
            libc::accept(
                fd,
                (&mut storage as *mut libc::sockaddr_storage).cast(),
                &mut len,
            )
        })?;
        // SAFETY: a new fd from accept, owned by nobody else.
        let new = unsafe { OwnedFd::from_raw_fd(new) };
        set_cloexec(new.as_raw_fd())?;
        set_nonblocking(new.as_raw_fd())?;
        Ok((new, storage, len))
    }
}

/// `getsockopt(SO_ERROR)`: the pending error of a socket, cleared by reading it.
pub(crate) fn take_error(fd: RawFd) -> io::Result<Option<io::Error>> {
    let mut err: libc::c_int = 0;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `err` and `len` are valid for writes and `len` holds err's size.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut err as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    Ok((err != 0).then(|| io::Error::from_raw_os_error(err)))
}

/// Whether `fd` is a socket that keeps message boundaries in order (`SOCK_SEQPACKET`), whose
/// reads return one record each: a short read there leaves the next record queued. False if
/// the type cannot be read.
pub(crate) fn is_seqpacket(fd: RawFd) -> bool {
    let mut ty: libc::c_int = 0;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `ty` and `len` are valid for writes and `len` holds ty's size.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            (&mut ty as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    rc == 0 && ty == libc::SOCK_SEQPACKET
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
pub(crate) fn connect_start(
    fd: RawFd,
    addr: &libc::sockaddr_storage,
    len: libc::socklen_t,
) -> io::Result<bool> {
    loop {
        // SAFETY: `addr` is a valid socket address of `len` bytes.
        let r = unsafe { libc::connect(fd, (addr as *const libc::sockaddr_storage).cast(), len) };
        if r == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
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

/// A `SocketAddr` as a C socket address.
pub(crate) fn socket_addr_to_raw(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut storage: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            // SAFETY: all-zero is a valid sockaddr_in.
            let mut sin: libc::sockaddr_in = unsafe { mem::zeroed() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr = libc::in_addr {
                s_addr: u32::from_ne_bytes(a.ip().octets()),
            };
            #[cfg(any(target_os = "freebsd", target_vendor = "apple"))]
            {
                sin.sin_len = mem::size_of::<libc::sockaddr_in>() as u8;
            }
            // SAFETY: sockaddr_storage is larger than and aligned for any sockaddr type.
            unsafe { ptr_write(&mut storage, sin) };
            mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: all-zero is a valid sockaddr_in6.
            let mut sin6: libc::sockaddr_in6 = unsafe { mem::zeroed() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr = libc::in6_addr {
                s6_addr: a.ip().octets(),
            };
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_scope_id = a.scope_id();
            #[cfg(any(target_os = "freebsd", target_vendor = "apple"))]
            {
                sin6.sin6_len = mem::size_of::<libc::sockaddr_in6>() as u8;
            }
            // SAFETY: as above.
            unsafe { ptr_write(&mut storage, sin6) };
            mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

/// Writes a concrete socket address at the start of `storage`.
///
/// # Safety
///
/// `T` must be a C socket address type (no larger than, and aligned no more strictly than,
/// `sockaddr_storage`).
unsafe fn ptr_write<T>(storage: &mut libc::sockaddr_storage, value: T) {
    debug_assert!(mem::size_of::<T>() <= mem::size_of::<libc::sockaddr_storage>());
    // SAFETY: the caller guarantees that `T` fits and is suitably aligned; `storage` is a
    // valid, exclusive place.
    unsafe {
        (storage as *mut libc::sockaddr_storage)
            .cast::<T>()
            .write(value)
    };
}

/// A C socket address as a `SocketAddr`.
pub(crate) fn raw_to_socket_addr(
    storage: &libc::sockaddr_storage,
    len: libc::socklen_t,
) -> io::Result<SocketAddr> {
    let len = len as usize;
    match libc::c_int::from(storage.ss_family) {
        libc::AF_INET if len >= mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says it is a sockaddr_in and it is long enough.
            let sin: libc::sockaddr_in = unsafe {
                (storage as *const libc::sockaddr_storage)
                    .cast::<libc::sockaddr_in>()
                    .read()
            };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Ok(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len >= mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: the family says it is a sockaddr_in6 and it is long enough.
            let sin6: libc::sockaddr_in6 = unsafe {
                (storage as *const libc::sockaddr_storage)
                    .cast::<libc::sockaddr_in6>()
                    .read()
            };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Ok(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not an IPv4 or IPv6 socket address",
        )),
    }
}

/// The address family of a `SocketAddr`.
pub(crate) fn domain_of(addr: &SocketAddr) -> libc::c_int {
    match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    }
}

/// A Unix socket path as a `sockaddr_un` (in a `sockaddr_storage`).
pub(crate) fn unix_addr(
    path: &std::path::Path,
) -> io::Result<(libc::sockaddr_storage, libc::socklen_t)> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: all-zero is a valid sockaddr_un.
    let mut sun: libc::sockaddr_un = unsafe { mem::zeroed() };
    if bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a Unix socket path must not contain a NUL byte",
        ));
    }
    if bytes.len() >= sun.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a Unix socket path must be shorter than {} bytes",
                sun.sun_path.len()
            ),
        ));
    }
    sun.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (dst, src) in sun.sun_path.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    let len = mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    #[cfg(any(target_os = "freebsd", target_vendor = "apple"))]
    {
        sun.sun_len = len as u8;
    }
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut storage: libc::sockaddr_storage = unsafe { mem::zeroed() };
    // SAFETY: sockaddr_un fits in (and is aligned for) sockaddr_storage.
    unsafe { ptr_write(&mut storage, sun) };
    Ok((storage, len as libc::socklen_t))
}

/// The raw descriptor of a socket, as the driver interface names sources.
pub(crate) fn raw<S: std::os::fd::AsRawFd + ?Sized>(s: &S) -> RawFd {
    s.as_raw_fd()
}

/// A listening TCP socket bound to `addr` (with `SO_REUSEADDR`), non-blocking, with a backlog
/// of `backlog`.
pub(crate) fn tcp_listener(addr: &SocketAddr, backlog: i32) -> io::Result<std::net::TcpListener> {
    use std::os::fd::AsRawFd;
    let fd = socket(domain_of(addr), libc::SOCK_STREAM)?;
    let one: libc::c_int = 1;
    // SAFETY: a valid option value of the right size for SO_REUSEADDR.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    let (raw, len) = socket_addr_to_raw(addr);
    // SAFETY: `raw` is a valid socket address of `len` bytes.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw as *const libc::sockaddr_storage).cast(),
            len,
        )
    })?;
    // SAFETY: plain syscall on a socket we own.
    cvt(unsafe { libc::listen(fd.as_raw_fd(), backlog) })?;
    Ok(std::net::TcpListener::from(fd))
}

/// An unconnected TCP socket of `addr`'s family, non-blocking.
pub(crate) fn tcp_stream_socket(addr: &SocketAddr) -> io::Result<std::net::TcpStream> {
    Ok(std::net::TcpStream::from(socket(
        domain_of(addr),
        libc::SOCK_STREAM,
    )?))
}

/// A UDP socket bound to `addr`, non-blocking.
pub(crate) fn udp_bind(addr: &SocketAddr) -> io::Result<std::net::UdpSocket> {
    use std::os::fd::AsRawFd;
    let fd = socket(domain_of(addr), libc::SOCK_DGRAM)?;
    let (raw, len) = socket_addr_to_raw(addr);
    // SAFETY: `raw` is a valid socket address of `len` bytes.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw as *const libc::sockaddr_storage).cast(),
            len,
        )
    })?;
    Ok(std::net::UdpSocket::from(fd))
}

/// Starts a non-blocking `connect(2)` to an internet address; see [`connect_start`].
pub(crate) fn connect_to(fd: RawFd, addr: &SocketAddr) -> io::Result<bool> {
    let (raw, len) = socket_addr_to_raw(addr);
    connect_start(fd, &raw, len)
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
pub(crate) fn send_vectored(fd: RawFd, bufs: &[std::io::IoSlice<'_>]) -> io::Result<usize> {
    // At most IOV_MAX (1024 on Linux and the BSDs) buffers: more fail with EMSGSIZE; a
    // partial write is allowed anyway.
    let bufs = &bufs[..bufs.len().min(1024)];
    // SAFETY: all-zero is a valid msghdr (no name, no control data).
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    // `IoSlice` is ABI-compatible with `iovec` on Unix (std guarantees it); sendmsg only
    // reads the buffers.
    msg.msg_iov = bufs.as_ptr().cast_mut().cast::<libc::iovec>();
    msg.msg_iovlen = bufs.len() as _;
    // SAFETY: `msg` points at `bufs.len()` valid iovecs, each describing a live buffer.
    let n = unsafe { libc::sendmsg(fd, &msg, SEND_NO_SIGPIPE) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// A send on `fd` from `buf`, for a proactor.
pub(crate) fn send_op(fd: RawFd, buf: &[u8]) -> crate::Op<'_> {
    crate::Op::Send { fd, buf, flags: 0 }
}
