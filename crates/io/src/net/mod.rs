//! Sockets that suspend only the calling coroutine: TCP, UDP, Unix domain.
//!
//! Each type mirrors its std counterpart (same methods, `Read`/`Write` for the type and for
//! shared references where std has them, conversions both ways), so synchronous code and
//! libraries written against `std::io` run inside coroutines unchanged. Outside a runtime they
//! block the thread, like std's.

mod addr;
mod backoff;
#[cfg(unix)]
mod multishot;
mod tcp;
mod udp;
#[cfg(unix)]
mod unix;

pub use addr::ToSocketAddrs;
pub use tcp::{Incoming, TcpListener, TcpStream};
pub use udp::UdpSocket;
#[cfg(unix)]
pub use unix::{UnixDatagram, UnixListener, UnixStream};
