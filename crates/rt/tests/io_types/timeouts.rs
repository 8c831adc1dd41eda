//! Read timeouts that std carries and spindle's sockets drop.

use std::sync::mpsc;
use std::time::Duration;

/// Runs `f` on a thread; its result, or `None` if it has not returned within `limit` (the
/// thread is left blocked).
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).ok()
}

/// A std socket with a read timeout (a library set it: std keeps it in the socket,
/// `SO_RCVTIMEO`) wrapped with `UdpSocket::from_std`: spindle keeps its own timeouts and never
/// reads the socket's, so `read_timeout()` says `None` and a `recv` with nothing to receive
/// blocks for ever, where the std socket it was made from returns `WouldBlock`/`TimedOut`
/// after 100 ms. Correct: `from_std` takes over the socket's timeouts (`SO_RCVTIMEO` /
/// `SO_SNDTIMEO`), or says in its docs that they are dropped.
#[test]
fn from_std_keeps_the_std_sockets_read_timeout() {
    let std_sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    std_sock
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let ours = spindle_io::net::UdpSocket::from_std(std_sock).unwrap();
    let timeout = ours.read_timeout().unwrap();
    let got = within(Duration::from_secs(3), move || {
        ours.recv(&mut [0u8; 16]).map_err(|e| e.kind())
    });
    assert_eq!(
        timeout,
        Some(Duration::from_millis(100)),
        "read_timeout() after from_std"
    );
    assert!(
        got.is_some(),
        "recv did not time out within 3 s (the std socket's timeout: 100 ms)"
    );
}

/// `try_clone` of a socket with a read timeout: std's clones share it (the option lives in
/// the socket, "options set on one socket will be propagated to the other"); spindle's clone
/// starts without one, so its `recv` blocks for ever. Correct: the clone has the same timeout
/// (or the docs say it does not).
#[test]
fn try_clone_keeps_the_read_timeout() {
    let s = spindle_io::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let c = s.try_clone().unwrap();
    let timeout = c.read_timeout().unwrap();
    let got = within(Duration::from_secs(3), move || {
        c.recv(&mut [0u8; 16]).map_err(|e| e.kind())
    });
    assert_eq!(
        timeout,
        Some(Duration::from_millis(100)),
        "the clone's read_timeout()"
    );
    assert!(
        got.is_some(),
        "the clone's recv did not time out within 3 s"
    );
}
