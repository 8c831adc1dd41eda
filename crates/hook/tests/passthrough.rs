//! Before `enable`, the interposed symbols are in the executable but every call is the real
//! one. This binary never enables the hook.
#![cfg(all(
    target_os = "linux",
    target_env = "gnu",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A coroutine's `std::thread::sleep` blocks its worker: the hook is not on.
#[test]
fn before_enable_a_coroutines_sleep_blocks_its_worker() {
    assert!(!spindle_hook::is_enabled());
    let rt = spindle_rt::Runtime::builder().workers(1).build().unwrap();
    let ticks = rt.block_on(|| {
        let ticks = Arc::new(AtomicUsize::new(0));
        let t = ticks.clone();
        let ticker = spindle_rt::spawn(move || {
            for _ in 0..1000 {
                spindle_rt::sleep(Duration::from_millis(1));
                t.fetch_add(1, Ordering::Relaxed);
            }
        });
        spindle_rt::sleep(Duration::from_millis(5));
        let before = ticks.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(100));
        let during = ticks.load(Ordering::Relaxed) - before;
        ticker.cancel();
        let _ = ticker.join();
        during
    });
    assert_eq!(ticks, 0, "the worker ran the ticker while the thread slept");
}

/// Socket calls in a coroutine before `enable` leave the socket as it is: a read with a timeout
/// blocks the thread and the socket stays in blocking mode.
#[test]
fn before_enable_sockets_are_left_alone() {
    let rt = spindle_rt::Runtime::builder().workers(1).build().unwrap();
    rt.block_on(|| {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut b, _) = l.accept().unwrap();
        a.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        assert_eq!(
            a.read(&mut [0u8; 1]).unwrap_err().kind(),
            ErrorKind::WouldBlock
        );
        // SAFETY: F_GETFL on an open descriptor.
        let raw = unsafe { libc::syscall(libc::SYS_fcntl, a.as_raw_fd(), libc::F_GETFL) };
        assert_eq!(raw & i64::from(libc::O_NONBLOCK), 0);
        b.write_all(b"x").unwrap();
        assert_eq!(a.read(&mut [0u8; 1]).unwrap(), 1);
    });
}

/// The bookkeeping calls return what the kernel returns: `fcntl` flags (non-blocking mode
/// shown as it is), `ioctl(FIONBIO)`, `dup2` onto itself, `F_GETOWN`, errors with their errno.
#[test]
fn before_enable_calls_return_the_kernels_results() {
    let mut fds = [0; 2];
    // SAFETY: a valid array of two.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let [r, w] = fds;
    // SAFETY: plain calls on descriptors this test owns, with valid pointers.
    unsafe {
        let on: libc::c_int = 1;
        assert_eq!(libc::ioctl(r, libc::FIONBIO, &on), 0);
        assert_ne!(libc::fcntl(r, libc::F_GETFL) & libc::O_NONBLOCK, 0);
        let mut b = [0u8; 1];
        assert_eq!(libc::read(r, b.as_mut_ptr().cast(), 1), -1);
        assert_eq!(errno(), libc::EAGAIN);
        assert_eq!(libc::write(w, b"z".as_ptr().cast(), 1), 1);
        let mut pfd = libc::pollfd {
            fd: r,
            events: libc::POLLIN,
            revents: 0,
        };
        assert_eq!(libc::poll(&mut pfd, 1, 1000), 1);
        assert_eq!(libc::read(r, b.as_mut_ptr().cast(), 1), 1);
        assert_eq!(libc::dup2(r, r), r);
        assert_eq!(libc::dup2(-1, r), -1);
        assert_eq!(errno(), libc::EBADF);
        assert_eq!(libc::fcntl(r, libc::F_GETOWN), 0);
        assert_eq!(libc::close(r), 0);
        assert_eq!(libc::close(r), -1);
        assert_eq!(errno(), libc::EBADF);
        assert_eq!(libc::close(w), 0);
        let start = Instant::now();
        assert_eq!(libc::usleep(10_000), 0);
        assert_eq!(libc::sleep(0), 0);
        assert!(start.elapsed() >= Duration::from_millis(10));
    }
}
