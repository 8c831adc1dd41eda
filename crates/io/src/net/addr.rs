//! Address resolution that suspends only the calling task: DNS goes to the blocking pool.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// Types that resolve to socket addresses, like [`std::net::ToSocketAddrs`] and implemented for
/// the same types; host names are looked up on the runtime's blocking pool
/// ([`offload`](crate::offload)), so a lookup suspends only the calling coroutine. Numeric
/// addresses never leave the caller.
///
/// ```
/// use spindle_io::net::ToSocketAddrs;
/// let addrs = ("127.0.0.1", 80).to_socket_addrs()?;
/// assert_eq!(addrs, vec!["127.0.0.1:80".parse().unwrap()]);
/// # Ok::<(), std::io::Error>(())
/// ```
pub trait ToSocketAddrs {
    /// Resolves to one or more addresses.
    ///
    /// # Errors
    ///
    /// A malformed address, a failed lookup, or a blocking pool that refused the lookup.
    fn to_socket_addrs(&self) -> io::Result<Vec<SocketAddr>>;
}

/// Resolves `host_port` ("name:port") with the system resolver, off the calling task.
fn lookup(host_port: &str) -> io::Result<Vec<SocketAddr>> {
    let owned = host_port.to_owned();
    crate::offload(move || std::net::ToSocketAddrs::to_socket_addrs(&owned).map(Iterator::collect))?
}

/// Resolves `(host, port)` with std's tuple impl, off the calling task: it hands the host to
/// the resolver as it is (a "host:port" string would need brackets around an IPv6 host, which
/// the resolver rejects with a zone such as "fe80::1%lo").
fn lookup_host(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    let owned = host.to_owned();
    crate::offload(move || {
        std::net::ToSocketAddrs::to_socket_addrs(&(owned.as_str(), port)).map(Iterator::collect)
    })?
}

impl ToSocketAddrs for SocketAddr {
    fn to_socket_addrs(&self) -> io::Result<Vec<SocketAddr>> {
        Ok(vec![*self])
    }
}

impl ToSocketAddrs for SocketAddrV4 {
    fn to_socket_addrs(&self) -> io::Result<Vec<SocketAddr>> {
        Ok(vec![SocketAddr::V4(*self)])
    }
}

impl ToSocketAddrs for SocketAddrV6 {
    fn to_socket_addrs(&self) -> io::Result<Vec<SocketAddr>> {
        Ok(vec![SocketAddr::V6(*self)])
    }
}

impl ToSocketAddrs for (IpAddr, u16) {
    fn to_socket_addrs(&self) -> io::Result<Vec<SocketAddr>> {
        Ok(vec![SocketAddr::new(self.0, self.1)])
    }
}

impl ToSocketAddrs for (Ipv4Addr, u16) {
    fn to_socket_addrs(&self) -> io::Result<Vec<SocketAddr>> {
        Ok(vec![SocketAddr::new(IpAddr::V4(self.0), self.1)])
    }
}

impl ToSocketAddrs for (Ipv6Addr, u16) {
    fn to_socket_addrs(&self) -> io::Result<Vec<SocketAddr>> {
        Ok(vec![SocketAddr::new(IpAddr::V6(self.0), self.1)])
    }
}

impl ToSocketAddrs for (&str, u16) {
    fn to_socket_addrs(&self) -> io::Result<Vec<SocketAddr>> {
        let (host, port) = *self;
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        lookup_host(host, port)
    }
}

impl ToSocketAddrs for (String, u16) {
    fn to_socket_addrs(&self) -> io::Result<Vec<SocketAddr>> {
        (self.0.as_str(), self.1).to_socket_addrs()
    }
}

impl ToSocketAddrs for str {
    fn to_socket_addrs(&self) -> io::Result<Vec<SocketAddr>> {
        if let Ok(addr) = self.parse::<SocketAddr>() {
            return Ok(vec![addr]);
        }
        lookup(self)
    }
}

impl ToSocketAddrs for String {
    fn to_socket_addrs(&self) -> io::Result<Vec<SocketAddr>> {
        self.as_str().to_socket_addrs()
    }
}

impl ToSocketAddrs for [SocketAddr] {
    fn to_socket_addrs(&self) -> io::Result<Vec<SocketAddr>> {
        Ok(self.to_vec())
    }
}

impl<T: ToSocketAddrs + ?Sized> ToSocketAddrs for &T {
    fn to_socket_addrs(&self) -> io::Result<Vec<SocketAddr>> {
        (**self).to_socket_addrs()
    }
}

/// Tries `f` on every address `addr` resolves to; the first success, or the last error.
pub(crate) fn each_addr<A: ToSocketAddrs + ?Sized, T>(
    addr: &A,
    mut f: impl FnMut(&SocketAddr) -> io::Result<T>,
) -> io::Result<T> {
    let mut last = None;
    for a in addr.to_socket_addrs()? {
        match f(&a) {
            Ok(t) => return Ok(t),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "could not resolve to any addresses",
        )
    }))
}
