//! The kqueue driver against real sockets (FreeBSD and macOS only; elsewhere this file is
//! empty). A driver thread parks in a loop while test threads register sources and wait in
//! their `ScheduledIo`, as a runtime's tasks would.
#![cfg(any(target_os = "freebsd", target_os = "macos"))]

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use spindle_io::{Driver, Interest, Reactor, Readiness, Unpark};
use spindle_io_kqueue::KqueueDriver;

/// A driver parking in a loop on its own thread, until dropped.
struct DriverThread {
    reactor: Arc<dyn Reactor>,
    unparker: Arc<dyn Unpark>,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl DriverThread {
    fn start() -> DriverThread {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = thread::spawn(move || {
            let driver = KqueueDriver::new().unwrap();
            tx.send((driver.reactor().unwrap(), driver.unparker()))
                .unwrap();
            while !stop2.load(Ordering::Acquire) {
                driver.park(None).unwrap();
            }
        });
        let (reactor, unparker) = rx.recv().unwrap();
        DriverThread {
            reactor,
            unparker,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for DriverThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.unparker.unpark();
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

fn pair() -> (UnixStream, UnixStream) {
    let (a, b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    (a, b)
}

fn soon() -> Option<Instant> {
    Some(Instant::now() + Duration::from_secs(10))
}

#[test]
fn unpark_before_park_makes_it_return_at_once() {
    let driver = KqueueDriver::new().unwrap();
    driver.unparker().unpark();
    let start = Instant::now();
    driver.park(Some(Duration::from_secs(10))).unwrap();
    assert!(start.elapsed() < Duration::from_secs(5));
    // The token was consumed: the next park waits for its timeout.
    let start = Instant::now();
    driver.park(Some(Duration::from_millis(50))).unwrap();
    assert!(start.elapsed() >= Duration::from_millis(40));
}

#[test]
fn unpark_from_another_thread_ends_a_blocked_park() {
    let driver = KqueueDriver::new().unwrap();
    let unparker = driver.unparker();
    let t = thread::spawn(move || {
        thread::sleep(Duration::from_millis(50));
        unparker.unpark();
    });
    let start = Instant::now();
    driver.park(Some(Duration::from_secs(10))).unwrap();
    assert!(start.elapsed() < Duration::from_secs(5));
    t.join().unwrap();
}

#[test]
fn no_lost_wake_ups() {
    const ROUNDS: usize = 2000;
    let driver = KqueueDriver::new().unwrap();
    let unparker = driver.unparker();
    let posted = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(AtomicUsize::new(0));
    let (posted2, seen2) = (posted.clone(), seen.clone());
    let t = thread::spawn(move || {
        for i in 1..=ROUNDS {
            posted2.store(i, Ordering::SeqCst);
            unparker.unpark();
            while seen2.load(Ordering::SeqCst) < i {
                thread::yield_now();
            }
        }
    });
    let mut slow = 0;
    while seen.load(Ordering::SeqCst) < ROUNDS {
        let p = posted.load(Ordering::SeqCst);
        if p > seen.load(Ordering::SeqCst) {
            seen.store(p, Ordering::SeqCst);
            continue;
        }
        let start = Instant::now();
        driver.park(Some(Duration::from_secs(5))).unwrap();
        if start.elapsed() >= Duration::from_secs(4) {
            slow += 1;
        }
    }
    t.join().unwrap();
    assert_eq!(slow, 0, "a park slept through an unpark");
}

#[test]
fn park_waits_for_its_timeout() {
    let driver = KqueueDriver::new().unwrap();
    let start = Instant::now();
    assert_eq!(driver.park(Some(Duration::from_millis(60))).unwrap(), 0);
    assert!(start.elapsed() >= Duration::from_millis(50));
}

#[test]
fn a_new_socket_is_writable_and_becomes_readable() {
    let driver = KqueueDriver::new().unwrap();
    let reactor = driver.reactor().unwrap();
    let (a, mut b) = pair();
    let io = reactor.register(a.as_raw_fd()).unwrap();
    assert!(driver.park(Some(Duration::ZERO)).unwrap() >= 1);
    let r = io.readiness().readiness;
    assert!(r.contains(Readiness::WRITABLE), "{r:?}");
    assert!(!r.contains(Readiness::READABLE), "{r:?}");
    b.write_all(b"x").unwrap();
    driver.park(Some(Duration::from_secs(5))).unwrap();
    assert!(io.readiness().readiness.contains(Readiness::READABLE));
    reactor.deregister(a.as_raw_fd(), &io).unwrap();
}

#[test]
fn an_event_wakes_a_waiting_thread() {
    let driver = DriverThread::start();
    let (mut a, mut b) = pair();
    let io = driver.reactor.register(a.as_raw_fd()).unwrap();
    let waiter = thread::spawn(move || {
        let mut buf = [0u8; 16];
        loop {
            let event = io.readiness();
            match a.read(&mut buf) {
                Ok(n) => return (buf[..n].to_vec(), io, a),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    io.clear_readiness(event, Interest::READABLE);
                    io.wait(Interest::READABLE, soon()).unwrap();
                }
                Err(e) => panic!("{e}"),
            }
        }
    });
    thread::sleep(Duration::from_millis(50));
    b.write_all(b"hello").unwrap();
    let (got, io, a) = waiter.join().unwrap();
    assert_eq!(got, b"hello");
    driver.reactor.deregister(a.as_raw_fd(), &io).unwrap();
}

#[test]
fn peer_close_sets_read_closed() {
    let driver = DriverThread::start();
    let (a, b) = pair();
    let io = driver.reactor.register(a.as_raw_fd()).unwrap();
    drop(b);
    let event = io.wait(Interest::READABLE, soon()).unwrap();
    assert!(
        event.readiness.contains(Readiness::READ_CLOSED),
        "{:?}",
        event.readiness
    );
    driver.reactor.deregister(a.as_raw_fd(), &io).unwrap();
}

#[test]
fn deregistered_sources_get_no_events() {
    let driver = KqueueDriver::new().unwrap();
    let reactor = driver.reactor().unwrap();
    let (a, mut b) = pair();
    let io = reactor.register(a.as_raw_fd()).unwrap();
    driver.park(Some(Duration::ZERO)).unwrap();
    reactor.deregister(a.as_raw_fd(), &io).unwrap();
    let before = io.readiness();
    b.write_all(b"x").unwrap();
    assert_eq!(driver.park(Some(Duration::from_millis(20))).unwrap(), 0);
    assert_eq!(io.readiness(), before);
}

#[test]
fn a_reused_descriptor_number_replaces_the_stale_registration() {
    let driver = KqueueDriver::new().unwrap();
    let reactor = driver.reactor().unwrap();
    let (a, _b) = pair();
    let old = reactor.register(a.as_raw_fd()).unwrap();
    // Registered again without a deregister (as if closed and the number reused).
    let new = reactor.register(a.as_raw_fd()).unwrap();
    assert!(old.is_shutdown());
    assert!(!new.is_shutdown());
    // The stale deregister does not remove the new registration.
    reactor.deregister(a.as_raw_fd(), &old).unwrap();
    driver.park(Some(Duration::ZERO)).unwrap();
    assert!(new.readiness().readiness.contains(Readiness::WRITABLE));
    reactor.deregister(a.as_raw_fd(), &new).unwrap();
}

#[test]
fn drop_shuts_down_every_source() {
    let driver = KqueueDriver::new().unwrap();
    let reactor = driver.reactor().unwrap();
    let (a, _b) = pair();
    let io = reactor.register(a.as_raw_fd()).unwrap();
    let io2 = io.clone();
    let waiter = thread::spawn(move || io2.wait(Interest::READABLE, soon()));
    thread::sleep(Duration::from_millis(20));
    drop(driver);
    let err = waiter.join().unwrap().unwrap_err();
    assert!(err.to_string().contains("shut down"), "{err}");
    assert!(io.is_shutdown());
    assert!(!reactor.is_alive());
    assert!(reactor.register(a.as_raw_fd()).is_err());
}

#[test]
fn a_closed_descriptor_is_refused() {
    let driver = KqueueDriver::new().unwrap();
    let reactor = driver.reactor().unwrap();
    let (a, _b) = pair();
    let fd = a.as_raw_fd();
    drop(a);
    let err = reactor.register(fd).unwrap_err();
    assert_eq!(err.raw_os_error(), None, "the error carries its context");
    assert!(err.to_string().contains("kevent"), "{err}");
}
