//! Datagram sockets on io_uring from a coroutine on a copying (shared) stack.

use crate::common;

use std::time::Duration;

use spindle_io::net::UnixDatagram;
use spindle_rt::IoBackend;

const BIG: usize = 100_000;

/// A Unix datagram of 100,000 bytes is received, on io_uring, by a coroutine on a copying
/// stack into a 200,000-byte buffer. The completion path bounces the buffer through the heap,
/// but at most 64 KiB of it (`BOUNCE_MAX` in source.rs, meant for byte streams, where a short
/// read is fine): the kernel truncates the datagram to 65,536 bytes and discards the rest.
/// Correct: the whole datagram (100,000 bytes), as on every other path (a datagram read must
/// bounce the whole buffer, or at least not silently truncate).
#[test]
fn unix_datagram_recv_on_copying_stack_uring_is_not_truncated() {
    if common::io_uring_left_out("unix_datagram_recv_on_copying_stack_uring_is_not_truncated") {
        return;
    }
    let rt = common::rt(IoBackend::IoUring);
    let got = common::within(rt, Duration::from_secs(20), || {
        let (a, b) = UnixDatagram::pair().unwrap();
        a.send(&vec![7u8; BIG]).unwrap();
        // SAFETY: the coroutine lends nothing on its stack (its buffer is a Vec).
        let h = unsafe { spindle_rt::Builder::new().shared_stack() }
            .spawn(move || {
                let mut buf = vec![0u8; 2 * BIG];
                b.recv(&mut buf)
            })
            .unwrap();
        h.join().unwrap().unwrap()
    })
    .expect("hung");
    assert_eq!(got, BIG, "the datagram came truncated");
}

/// The same for a send: a 100,000-byte datagram sent on io_uring by a coroutine on a copying
/// stack while the receiver's queue is full (so the plain non-blocking call fails and the send
/// goes to the ring, bounced through at most 64 KiB). The send reports 65,536 bytes sent and
/// the peer receives a truncated datagram: for a datagram a short count is a lost tail, not a
/// partial write to retry. Correct: the whole datagram is sent (100,000).
#[test]
fn unix_datagram_send_on_copying_stack_uring_is_not_truncated() {
    if common::io_uring_left_out("unix_datagram_send_on_copying_stack_uring_is_not_truncated") {
        return;
    }
    let rt = common::rt(IoBackend::IoUring);
    let got = common::within(rt, Duration::from_secs(20), || {
        let (a, b) = UnixDatagram::pair().unwrap();
        // Fill the receiver's queue (net.unix.max_dgram_qlen, 10 by default... or its buffer).
        let a2 = a.into_std();
        let mut queued = 0;
        while a2.send(&[1u8]).is_ok() {
            queued += 1;
        }
        let a = UnixDatagram::from_std(a2).unwrap();
        // SAFETY: the coroutine lends nothing on its stack (its buffer is a Vec).
        let sender = unsafe { spindle_rt::Builder::new().shared_stack() }
            .spawn(move || a.send(&vec![9u8; BIG]))
            .unwrap();
        spindle_rt::sleep(Duration::from_millis(100));
        let mut buf = vec![0u8; 2 * BIG];
        for _ in 0..queued {
            assert_eq!(b.recv(&mut buf).unwrap(), 1);
        }
        let sent = sender.join().unwrap().unwrap();
        let received = b.recv(&mut buf).unwrap();
        (sent, received)
    })
    .expect("hung");
    assert_eq!(
        got,
        (BIG, BIG),
        "(sent, received): the datagram was truncated"
    );
}
