//! How IO operations end early — cancellation, timeouts, shutdown — and IO from coroutines on
//! copying stacks: the kernel and the blocking pool never touch a stack whose owner has moved
//! on (an `fs::File` pool job must not read the `File` through a pointer into the suspended
//! coroutine's stack).
#![cfg(target_os = "linux")]

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener as StdListener, TcpStream as StdStream};
use std::sync::Once;
use std::time::Duration;

use common::rt;
use spindle_rt::{Builder, IoBackend, JoinError};

fn watchdog() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        std::thread::spawn(|| {
            std::thread::sleep(Duration::from_secs(60));
            eprintln!("io_ends: watchdog fired (hang)");
            std::process::abort();
        });
    });
}

/// A connected std pair: (client, server).
fn pair() -> (StdStream, StdStream) {
    let l = StdListener::bind("127.0.0.1:0").unwrap();
    let c = StdStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    (c, s)
}

/// The data written after an abandoned read must still be readable (a zombie recv in the ring
/// would swallow it).
fn read_back(client: &StdStream, want: &[u8]) {
    let mut c = client.try_clone().unwrap();
    c.set_nonblocking(false).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut got = vec![0u8; want.len()];
    c.read_exact(&mut got)
        .expect("data written after the abandoned read was lost");
    assert_eq!(got, want);
}

/// Cancelled recv on a pooled stack, io_uring: the stack is reused by a canary coroutine; data
/// sent afterwards must neither land in the canary nor vanish.
#[test]
fn uring_cancelled_recv_no_zombie() {
    if common::io_uring_left_out("uring_cancelled_recv_no_zombie") {
        return;
    }
    watchdog();
    let rt = rt(IoBackend::IoUring);
    assert_eq!(rt.io_backend(), "io_uring");
    let (client, mut server) = pair();
    let keep = client.try_clone().unwrap();
    rt.block_on(move || {
        let c = spindle_io::net::TcpStream::from_std(client).unwrap();
        let reader = spindle_rt::spawn(move || {
            let mut buf = [0u8; 4096];
            let _ = (&c).read(&mut buf);
            unreachable!();
        });
        spindle_rt::sleep(Duration::from_millis(30));
        reader.cancel();
        assert!(matches!(reader.join(), Err(JoinError::Cancelled)));
        let canary = spindle_rt::spawn(|| {
            let mut canary = [0xAAu8; 16 * 1024];
            std::hint::black_box(&mut canary);
            spindle_rt::sleep(Duration::from_millis(80));
            std::hint::black_box(&mut canary);
            canary.iter().all(|&b| b == 0xAA)
        });
        spindle_rt::sleep(Duration::from_millis(10));
        server.write_all(&[0x55u8; 64]).unwrap();
        assert!(canary.join().unwrap(), "canary overwritten");
        server
    });
    read_back(&keep, &[0x55u8; 64]);
}

/// Timed-out read on io_uring: the data sent afterwards is read by the next read.
#[test]
fn uring_timed_out_read_loses_nothing() {
    if common::io_uring_left_out("uring_timed_out_read_loses_nothing") {
        return;
    }
    watchdog();
    let rt = rt(IoBackend::IoUring);
    let (client, mut server) = pair();
    rt.block_on(move || {
        let c = spindle_io::net::TcpStream::from_std(client).unwrap();
        c.set_read_timeout(Some(Duration::from_millis(30))).unwrap();
        for round in 0..20u8 {
            let mut buf = [0u8; 8];
            let e = (&c).read(&mut buf).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
            server.write_all(&[round; 8]).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            (&c).read_exact(&mut buf).unwrap();
            assert_eq!(buf, [round; 8]);
            c.set_read_timeout(Some(Duration::from_millis(30))).unwrap();
        }
    });
}

/// Runtime shut down (with a timeout) while a coroutine is blocked in a recv on io_uring: the
/// recv must be gone from the kernel afterwards (it would swallow data or write freed memory).
#[test]
fn uring_shutdown_with_blocked_recv() {
    if common::io_uring_left_out("uring_shutdown_with_blocked_recv") {
        return;
    }
    watchdog();
    let rt = rt(IoBackend::IoUring);
    let (client, mut server) = pair();
    let keep = client.try_clone().unwrap();
    let h = rt.spawn(move || {
        let c = spindle_io::net::TcpStream::from_std(client).unwrap();
        let mut buf = vec![0u8; 4096];
        let _ = (&c).read(&mut buf);
    });
    std::thread::sleep(Duration::from_millis(50));
    assert!(rt.shutdown_timeout(Duration::from_secs(5)));
    drop(h);
    server.write_all(b"after-shutdown").unwrap();
    read_back(&keep, b"after-shutdown");
}

/// A coroutine on a copying stack blocked in a recv on io_uring is cancelled while another
/// copying-stack coroutine fills the region: its stack must not be written by the kernel.
#[test]
fn uring_copying_stack_cancelled_recv() {
    if common::io_uring_left_out("uring_copying_stack_cancelled_recv") {
        return;
    }
    watchdog();
    let rt = rt(IoBackend::IoUring);
    let (client, mut server) = pair();
    let _keep = client.try_clone().unwrap();
    rt.block_on(move || {
        let c = spindle_io::net::TcpStream::from_std(client).unwrap();
        // SAFETY: the coroutine lends nothing on its stack itself.
        let reader = unsafe { Builder::new().shared_stack() }
            .spawn(move || {
                let mut buf = [0u8; 4096];
                let _ = (&c).read(&mut buf);
                unreachable!();
            })
            .unwrap();
        spindle_rt::sleep(Duration::from_millis(20));
        // SAFETY: as above.
        let clobber = unsafe { Builder::new().shared_stack() }
            .spawn(|| {
                let mut x = [0xAAu8; 16 * 1024];
                std::hint::black_box(&mut x);
                spindle_rt::sleep(Duration::from_millis(80));
                std::hint::black_box(&mut x);
                x.iter().all(|&b| b == 0xAA)
            })
            .unwrap();
        spindle_rt::sleep(Duration::from_millis(10));
        server.write_all(&[0x55u8; 64]).unwrap();
        spindle_rt::sleep(Duration::from_millis(10));
        reader.cancel();
        let _ = reader.join();
        assert!(clobber.join().unwrap(), "region overwritten");
    });
}

/// epoll: a `spindle_io::fs::File` read by a coroutine on a copying stack goes to the blocking
/// pool; by the time the pool runs the job another copying-stack coroutine owns the region.
/// The job must not read the `File` (a local of the reader) there: it used to, through
/// `&self.inner`, and read a descriptor from the other coroutine's bytes.
#[test]
fn epoll_copying_stack_file_read_does_not_read_the_moved_stack() {
    file_read_case(true);
}

/// Control: the same with the clobbering coroutine on its own stack (the region is left to the
/// reader): passes.
#[test]
fn epoll_copying_stack_file_read_control() {
    file_read_case(false);
}

fn file_read_case(clobber_shared: bool) {
    watchdog();
    let rt = rt(IoBackend::Epoll);
    assert_eq!(rt.io_backend(), "epoll");
    let path = std::env::temp_dir().join(format!(
        "spindle_io_ends_{}_{clobber_shared}",
        std::process::id()
    ));
    std::fs::write(&path, b"the file's contents").unwrap();
    let std_file = std::fs::File::open(&path).unwrap();
    let got = rt.block_on(move || {
        // Occupy the pool's one thread, so that the read's job runs later.
        let blocker = spindle_rt::spawn(|| {
            spindle_rt::blocking(|| std::thread::sleep(Duration::from_millis(200)))
        });
        spindle_rt::sleep(Duration::from_millis(20));
        // SAFETY: the coroutine itself lends nothing on its stack to anything.
        let reader = unsafe { Builder::new().shared_stack() }
            .spawn(move || {
                let f = spindle_io::fs::File::from_std(std_file);
                let mut buf = [0u8; 64];
                let n = (&f).read(&mut buf);
                n.map(|n| buf[..n].to_vec())
            })
            .unwrap();
        spindle_rt::sleep(Duration::from_millis(5));
        let b = if clobber_shared {
            // SAFETY: as above.
            unsafe { Builder::new().shared_stack() }
        } else {
            Builder::new()
        };
        let clobber = b
            .spawn(|| {
                let mut x = [0xFFu8; 32 * 1024];
                std::hint::black_box(&mut x);
                spindle_rt::sleep(Duration::from_millis(400));
                std::hint::black_box(&mut x);
            })
            .unwrap();
        blocker.join().unwrap();
        let got = reader.join().unwrap();
        clobber.join().unwrap();
        got
    });
    let _ = std::fs::remove_file(&path);
    match got {
        Ok(data) => assert_eq!(data, b"the file's contents"),
        Err(e) => panic!("read failed: {e} (the pool thread read the File from a moved stack)"),
    }
}

/// Same on io_uring: `File::metadata` always goes to the blocking pool (it used to borrow
/// `self.inner`, on the copying stack).
#[test]
fn uring_copying_stack_file_metadata_does_not_read_the_moved_stack() {
    if common::io_uring_left_out("uring_copying_stack_file_metadata_does_not_read_the_moved_stack")
    {
        return;
    }
    watchdog();
    let rt = rt(IoBackend::IoUring);
    let path = std::env::temp_dir().join(format!("spindle_io_ends_md_{}", std::process::id()));
    std::fs::write(&path, b"0123456789").unwrap();
    let std_file = std::fs::File::open(&path).unwrap();
    let got = rt.block_on(move || {
        let blocker = spindle_rt::spawn(|| {
            spindle_rt::blocking(|| std::thread::sleep(Duration::from_millis(200)))
        });
        spindle_rt::sleep(Duration::from_millis(20));
        // SAFETY: the coroutine itself lends nothing on its stack to anything.
        let reader = unsafe { Builder::new().shared_stack() }
            .spawn(move || {
                let f = spindle_io::fs::File::from_std(std_file);
                f.metadata().map(|m| m.len())
            })
            .unwrap();
        spindle_rt::sleep(Duration::from_millis(5));
        // SAFETY: as above.
        let clobber = unsafe { Builder::new().shared_stack() }
            .spawn(|| {
                let mut x = [0xFFu8; 32 * 1024];
                std::hint::black_box(&mut x);
                spindle_rt::sleep(Duration::from_millis(400));
                std::hint::black_box(&mut x);
            })
            .unwrap();
        blocker.join().unwrap();
        let got = reader.join().unwrap();
        clobber.join().unwrap();
        got
    });
    let _ = std::fs::remove_file(&path);
    assert_eq!(
        got.expect("metadata failed (read the File from a moved stack)"),
        10
    );
}
