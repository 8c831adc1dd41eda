//! The few system calls the soak needs beyond std: the descriptor limit, CPU time, RSS,
//! `SO_LINGER` and `SO_RCVBUF`.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Raises `RLIMIT_NOFILE`'s soft limit to the hard limit; returns the new soft limit.
pub fn raise_nofile() -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable `rlimit` for the duration of the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: `lim` is a valid `rlimit`, read by the call only.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(lim.rlim_cur)
}

/// User plus system CPU time of the whole process, in microseconds.
pub fn cpu_time_us() -> u64 {
    // SAFETY: `rusage` is plain old data; all zeroes is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable `rusage` for the duration of the call.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0;
    }
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    us(usage.ru_utime) + us(usage.ru_stime)
}

/// The process's resident set, in KiB (`/proc/self/statm`).
pub fn rss_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096) / 1024
}

/// Open descriptors of this process (`/proc/self/fd`, less the one reading it).
pub fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count().saturating_sub(1))
}

/// Memory mappings of this process (`/proc/self/maps`).
pub fn map_count() -> usize {
    std::fs::read_to_string("/proc/self/maps").map_or(0, |m| m.lines().count())
}

/// `setsockopt(2)` with a plain-data `value` (an `int`, a `linger`).
fn setsockopt<T: Copy>(sock: &impl AsRawFd, level: i32, name: i32, value: T) -> io::Result<()> {
    // SAFETY: the pointer and length describe `value`, a plain-data option value alive for the
    // call; the descriptor is owned by `sock`, which is borrowed for the call.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (&raw const value).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `SO_LINGER` with a zero timeout: closing the socket then sends a reset, not a FIN.
pub fn set_linger_zero(sock: &impl AsRawFd) -> io::Result<()> {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    setsockopt(sock, libc::SOL_SOCKET, libc::SO_LINGER, linger)
}

/// Connects to `addr` (IPv4) from a socket whose receive buffer is set to `bytes` *before*
/// the handshake, so that the window it advertises is small from the start. (Shrinking it
/// after the handshake makes the kernel prune data the peer already sent, and the
/// retransmissions back off for tens of seconds.)
pub fn connect_with_recv_buffer(addr: SocketAddr, bytes: i32) -> io::Result<TcpStream> {
    let SocketAddr::V4(v4) = addr else {
        return Err(io::Error::new(io::ErrorKind::Unsupported, "IPv4 only"));
    };
    // SAFETY: socket(2) has no memory-safety preconditions.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a descriptor just returned by socket(2) and owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, bytes)?;
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: v4.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*v4.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    loop {
        // SAFETY: the pointer and length describe `sin`, a valid `sockaddr_in` alive for the
        // call; `fd` is an open socket owned by this function.
        let rc = unsafe {
            libc::connect(
                fd.as_raw_fd(),
                (&raw const sin).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            return Ok(TcpStream::from(fd));
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}
