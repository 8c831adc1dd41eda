//! Behaviour tests of the polling driver with plain threads: one thread parks the driver, others
//! register sources, wait in `ScheduledIo::wait` and unpark it. Each runs in every trigger mode
//! the OS has (on Linux: edge-triggered and one-shot).

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use spindle_io::{Driver, Interest, RawSource, Reactor, Readiness, ScheduledIo};

use crate::{PollingDriver, Trigger};

const LONG: Duration = Duration::from_secs(10);

/// Runs `test` with a driver in each trigger mode this OS supports.
fn each_trigger(test: impl Fn(PollingDriver)) {
    for trigger in [Trigger::Edge, Trigger::Oneshot] {
        match PollingDriver::with_trigger(trigger) {
            Ok(driver) => {
                assert_eq!(driver.trigger(), trigger);
                test(driver);
            }
            Err(e) if e.kind() == io::ErrorKind::Unsupported => {}
            Err(e) => panic!("{e}"),
        }
    }
}

#[cfg(unix)]
fn raw<T: std::os::fd::AsRawFd>(source: &T) -> RawSource {
    source.as_raw_fd()
}

#[cfg(windows)]
fn raw<T: std::os::windows::io::AsRawSocket>(source: &T) -> RawSource {
    source.as_raw_socket()
}

/// A connected loopback pair, both non-blocking.
fn tcp_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (b, _) = listener.accept().unwrap();
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    (a, b)
}

/// Parks `driver` until `done` returns true, failing after `LONG`.
fn park_until(driver: &PollingDriver, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + LONG;
    while !done() {
        assert!(Instant::now() < deadline, "the expected event never came");
        driver.park(Some(Duration::from_millis(10))).unwrap();
    }
}

fn readiness(io: &ScheduledIo) -> Readiness {
    io.readiness().readiness
}

/// What an IO type does: try `op`; on `WouldBlock` clear the readiness, re-arm, wait, retry.
fn io_op<T>(
    reactor: &dyn Reactor,
    source: RawSource,
    io: &ScheduledIo,
    interest: Interest,
    mut op: impl FnMut() -> io::Result<T>,
) -> io::Result<T> {
    let deadline = Instant::now() + LONG;
    loop {
        let event = io.readiness();
        match op() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                io.clear_readiness(event, interest);
                reactor.rearm(source, io, interest)?;
                io.wait(interest, Some(deadline))?;
            }
            other => return other,
        }
    }
}

#[test]
fn new_picks_edge_triggering_where_the_os_has_it() {
    let driver = PollingDriver::new().unwrap();
    assert_eq!(driver.name(), "polling");
    if cfg!(any(
        target_os = "linux",
        target_os = "macos",
        target_os = "freebsd"
    )) {
        assert_eq!(driver.trigger(), Trigger::Edge);
    }
}

#[test]
fn a_socket_is_writable_at_registration_and_readable_after_a_write() {
    each_trigger(|driver| {
        let reactor = driver.reactor().unwrap();
        let (a, mut b) = tcp_pair();
        let io = reactor.register(raw(&a)).unwrap();
        park_until(&driver, || readiness(&io).contains(Readiness::WRITABLE));
        assert!(!readiness(&io).contains(Readiness::READABLE));

        b.write_all(b"hello").unwrap();
        park_until(&driver, || readiness(&io).contains(Readiness::READABLE));
        reactor.deregister(raw(&a), &io).unwrap();
        assert_eq!(driver.registered(), 0);
    });
}

#[test]
fn a_drained_source_reports_again_only_on_new_data() {
    each_trigger(|driver| {
        let reactor = driver.reactor().unwrap();
        let (mut a, mut b) = tcp_pair();
        let io = reactor.register(raw(&a)).unwrap();
        b.write_all(b"one").unwrap();
        park_until(&driver, || readiness(&io).contains(Readiness::READABLE));

        let event = io.readiness();
        let mut buf = [0u8; 16];
        assert_eq!(a.read(&mut buf).unwrap(), 3);
        assert_eq!(
            a.read(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        io.clear_readiness(event, Interest::READABLE);
        reactor.rearm(raw(&a), &io, Interest::READABLE).unwrap();
        assert!(!readiness(&io).contains(Readiness::READABLE));

        driver.park(Some(Duration::from_millis(5))).unwrap();
        assert!(!readiness(&io).contains(Readiness::READABLE));

        b.write_all(b"two").unwrap();
        park_until(&driver, || readiness(&io).contains(Readiness::READABLE));
        reactor.deregister(raw(&a), &io).unwrap();
    });
}

#[test]
fn a_half_closed_peer_ends_a_read_wait_and_the_read_sees_eof() {
    each_trigger(|driver| {
        let reactor = driver.reactor().unwrap();
        let (mut a, b) = tcp_pair();
        let io = reactor.register(raw(&a)).unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let reader = {
            let (io, reactor, done) = (io.clone(), reactor.clone(), done.clone());
            thread::spawn(move || {
                let mut buf = [0u8; 8];
                let n = io_op(&*reactor, raw(&a), &io, Interest::READABLE, || {
                    a.read(&mut buf)
                });
                done.store(true, Ordering::SeqCst);
                (n.unwrap(), a)
            })
        };
        while io.waiting_interest().is_none() {
            driver.park(Some(Duration::from_millis(1))).unwrap();
        }
        b.shutdown(Shutdown::Write).unwrap();
        park_until(&driver, || done.load(Ordering::SeqCst));
        let (n, a) = reader.join().unwrap();
        assert_eq!(n, 0);
        assert!(readiness(&io).satisfies(Interest::READABLE));
        reactor.deregister(raw(&a), &io).unwrap();
    });
}

#[cfg(unix)]
mod unix {
    use super::*;
    use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};

    pub(super) fn pipe() -> (OwnedFd, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: `fds` is a live array of two ints that pipe fills.
        let rc = unsafe { libc::pipe(fds.as_mut_ptr()) };
        assert_eq!(rc, 0, "pipe: {}", io::Error::last_os_error());
        for fd in fds {
            // SAFETY: fcntl on the fds pipe just returned.
            unsafe {
                let flags = libc::fcntl(fd, libc::F_GETFL);
                libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
        // SAFETY: pipe just returned these two fds and nothing else owns them.
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
    }

    pub(super) fn write_fd(fd: &OwnedFd, bytes: &[u8]) {
        // SAFETY: writes from a live slice to an open fd.
        let n = unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
        assert_eq!(
            n,
            bytes.len() as isize,
            "write: {}",
            io::Error::last_os_error()
        );
    }

    /// Closes `old` and puts `new`'s file under `old`'s number, atomically.
    fn reuse_number(old: OwnedFd, new: OwnedFd) -> OwnedFd {
        let number = old.into_raw_fd();
        // SAFETY: dup2 on two open fds; it closes `number` (which we own, released above) and
        // makes it refer to `new`'s file.
        let rc = unsafe { libc::dup2(new.as_raw_fd(), number) };
        assert_eq!(rc, number, "dup2: {}", io::Error::last_os_error());
        // SAFETY: `number` is open again (dup2 succeeded) and owned by nothing else.
        unsafe { OwnedFd::from_raw_fd(number) }
    }

    #[test]
    fn a_pipe_becomes_readable_when_written() {
        each_trigger(|driver| {
            let reactor = driver.reactor().unwrap();
            let (r, w) = pipe();
            let io = reactor.register(r.as_raw_fd()).unwrap();
            driver.park(Some(Duration::ZERO)).unwrap();
            assert!(!readiness(&io).contains(Readiness::READABLE));

            write_fd(&w, b"x");
            park_until(&driver, || readiness(&io).contains(Readiness::READABLE));
            reactor.deregister(r.as_raw_fd(), &io).unwrap();
        });
    }

    #[test]
    fn a_pipe_whose_writer_closed_ends_read_waits() {
        each_trigger(|driver| {
            let reactor = driver.reactor().unwrap();
            let (r, w) = pipe();
            let io = reactor.register(r.as_raw_fd()).unwrap();
            drop(w);
            park_until(&driver, || readiness(&io).satisfies(Interest::READABLE));
            #[cfg(target_os = "linux")]
            assert!(
                readiness(&io).contains(Readiness::READ_CLOSED.add(Readiness::WRITE_CLOSED)),
                "{:?}",
                readiness(&io)
            );
            reactor.deregister(r.as_raw_fd(), &io).unwrap();
        });
    }

    #[test]
    fn a_write_end_whose_reader_closed_ends_write_waits() {
        each_trigger(|driver| {
            let reactor = driver.reactor().unwrap();
            let (r, w) = pipe();
            let io = reactor.register(w.as_raw_fd()).unwrap();
            let event = io.readiness();
            io.clear_readiness(event, Interest::WRITABLE);
            drop(r);
            park_until(&driver, || readiness(&io).satisfies(Interest::WRITABLE));
            #[cfg(target_os = "linux")]
            assert!(
                readiness(&io).contains(Readiness::ERROR),
                "{:?}",
                readiness(&io)
            );
            reactor.deregister(w.as_raw_fd(), &io).unwrap();
        });
    }

    #[test]
    fn a_deregistered_closed_and_reused_fd_gets_no_stale_events() {
        each_trigger(|driver| {
            let reactor = driver.reactor().unwrap();
            let (r, w) = pipe();
            let number = r.as_raw_fd();
            let old = reactor.register(number).unwrap();
            write_fd(&w, b"stale");
            reactor.deregister(number, &old).unwrap();
            drop(w);

            let (r2, w2) = pipe();
            let r2 = reuse_number(r, r2);
            let new = reactor.register(number).unwrap();
            assert_eq!(driver.park(Some(Duration::from_millis(5))).unwrap(), 0);
            assert!(readiness(&old).is_empty(), "the old source got an event");
            assert!(
                readiness(&new).is_empty(),
                "the new source got the old one's event"
            );

            write_fd(&w2, b"fresh");
            park_until(&driver, || readiness(&new).contains(Readiness::READABLE));
            assert!(readiness(&old).is_empty());
            reactor.deregister(number, &new).unwrap();
            assert_eq!(driver.registered(), 0);
            drop(r2);
        });
    }

    /// The dup'd-fd pitfall: deregistering before close is what stops the events.
    #[test]
    fn a_dupd_fd_deregistered_before_close_gets_no_events() {
        each_trigger(|driver| {
            let reactor = driver.reactor().unwrap();
            let (r, w) = pipe();
            let dup = r.try_clone().unwrap();
            let io = reactor.register(r.as_raw_fd()).unwrap();
            reactor.deregister(r.as_raw_fd(), &io).unwrap();
            drop(r);
            write_fd(&w, b"x");
            assert_eq!(driver.park(Some(Duration::from_millis(5))).unwrap(), 0);
            assert!(readiness(&io).is_empty());
            drop(dup);
        });
    }

    #[test]
    fn a_regular_file_is_refused_on_linux() {
        let driver = PollingDriver::new().unwrap();
        let reactor = driver.reactor().unwrap();
        let file = std::fs::File::open(std::env::current_exe().unwrap()).unwrap();
        let result = reactor.register(file.as_raw_fd());
        if cfg!(target_os = "linux") {
            assert_eq!(result.unwrap_err().raw_os_error(), Some(libc::EPERM));
            assert_eq!(driver.registered(), 0);
        } else if let Ok(io) = result {
            reactor.deregister(file.as_raw_fd(), &io).unwrap();
        }
    }
}

#[test]
fn a_task_waiting_on_another_thread_is_woken_by_the_event() {
    each_trigger(|driver| {
        let reactor = driver.reactor().unwrap();
        let (mut a, mut b) = tcp_pair();
        let io = reactor.register(raw(&a)).unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let reader = {
            let (io, reactor, done) = (io.clone(), reactor.clone(), done.clone());
            thread::spawn(move || {
                let mut buf = [0u8; 8];
                let n = io_op(&*reactor, raw(&a), &io, Interest::READABLE, || {
                    a.read(&mut buf)
                });
                done.store(true, Ordering::SeqCst);
                (n.unwrap(), a)
            })
        };
        while io.waiting_interest().is_none() {
            driver.park(Some(Duration::from_millis(1))).unwrap();
        }
        b.write_all(b"ping").unwrap();
        park_until(&driver, || done.load(Ordering::SeqCst));
        let (n, a) = reader.join().unwrap();
        assert_eq!(n, 4);
        reactor.deregister(raw(&a), &io).unwrap();
    });
}

#[test]
fn unpark_from_another_thread_wakes_a_blocked_park() {
    let driver = PollingDriver::new().unwrap();
    let unparker = driver.unparker();
    let start = Instant::now();
    let t = thread::spawn(move || {
        thread::sleep(Duration::from_millis(50));
        unparker.unpark();
    });
    driver.park(None).unwrap();
    let waited = start.elapsed();
    t.join().unwrap();
    assert!(
        waited >= Duration::from_millis(40),
        "returned early: {waited:?}"
    );
    assert!(waited < LONG);
}

#[test]
fn unpark_before_park_is_a_token_used_once() {
    let driver = PollingDriver::new().unwrap();
    let unparker = driver.unparker();
    unparker.unpark();
    unparker.unpark(); // tokens do not add up
    // A lost token would block the park below forever: a watchdog ends it after 5 s.
    let watchdog = driver.unparker();
    thread::spawn(move || {
        thread::sleep(Duration::from_secs(5));
        watchdog.unpark();
    });
    let start = Instant::now();
    assert_eq!(driver.park(None).unwrap(), 0);
    assert!(start.elapsed() < Duration::from_secs(1));

    let start = Instant::now();
    driver.park(Some(Duration::from_millis(20))).unwrap();
    assert!(start.elapsed() >= Duration::from_millis(20));
}

#[test]
fn a_zero_timeout_park_consumes_the_token() {
    let driver = PollingDriver::new().unwrap();
    driver.unparker().unpark();
    driver.park(Some(Duration::ZERO)).unwrap();
    let start = Instant::now();
    driver.park(Some(Duration::from_millis(20))).unwrap();
    assert!(start.elapsed() >= Duration::from_millis(20));
}

/// Ping-pong between a parking driver and unparkers, thousands of rounds; a lost wake-up leaves
/// the driver asleep in `park(None)` and fails the round's deadline.
#[test]
fn no_wake_up_is_lost_under_stress() {
    const ROUNDS: usize = 10_000;
    const UNPARKERS: usize = 2;
    let driver = PollingDriver::new().unwrap();
    let sent = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicBool::new(false));
    let unparkers: Vec<_> = (0..UNPARKERS)
        .map(|id| {
            let unparker = driver.unparker();
            let (sent, seen, failed) = (sent.clone(), seen.clone(), failed.clone());
            thread::spawn(move || {
                let mut spin = id;
                loop {
                    let round = sent.load(Ordering::SeqCst);
                    if round >= ROUNDS || failed.load(Ordering::SeqCst) {
                        return;
                    }
                    if seen.load(Ordering::SeqCst) != round {
                        std::hint::spin_loop();
                        continue;
                    }
                    if sent
                        .compare_exchange(round, round + 1, Ordering::SeqCst, Ordering::SeqCst)
                        .is_err()
                    {
                        continue;
                    }
                    spin = (spin * 7 + 3) % 64;
                    for _ in 0..spin {
                        std::hint::spin_loop();
                    }
                    if spin % 5 == 0 {
                        thread::yield_now();
                    }
                    unparker.unpark();
                    let deadline = Instant::now() + LONG;
                    while seen.load(Ordering::SeqCst) < round + 1 {
                        if Instant::now() > deadline {
                            failed.store(true, Ordering::SeqCst);
                            unparker.unpark();
                            return;
                        }
                        thread::yield_now();
                    }
                }
            })
        })
        .collect();
    loop {
        let now = sent.load(Ordering::SeqCst);
        if now > seen.load(Ordering::SeqCst) {
            seen.store(now, Ordering::SeqCst);
        }
        if now >= ROUNDS || failed.load(Ordering::SeqCst) {
            break;
        }
        // Vary where the park starts relative to the unpark, too.
        for _ in 0..(now * 13) % 48 {
            std::hint::spin_loop();
        }
        driver.park(None).unwrap();
    }
    for u in unparkers {
        u.join().unwrap();
    }
    assert!(!failed.load(Ordering::SeqCst), "a wake-up was lost");
}

#[test]
fn dropping_the_driver_ends_waits_with_an_error_and_closes_the_poller() {
    each_trigger(|driver| {
        let reactor = driver.reactor().unwrap();
        let (a, _b) = tcp_pair();
        let io = reactor.register(raw(&a)).unwrap();
        let waiter = {
            let io = io.clone();
            thread::spawn(move || io.wait(Interest::READABLE, Some(Instant::now() + LONG)))
        };
        while io.waiting_interest().is_none() {
            thread::yield_now();
        }
        assert!(reactor.is_alive());
        let owns_poller = driver.poller_probe();
        let unparker = driver.unparker();
        drop(driver);

        let err = waiter.join().unwrap().unwrap_err();
        assert!(err.to_string().contains("shut down"), "{err}");
        assert!(io.is_shutdown());
        assert!(!reactor.is_alive());
        assert!(!owns_poller());
        unparker.unpark();
        let err = reactor.register(raw(&a)).unwrap_err();
        assert!(err.to_string().contains("shut down"), "{err}");
        reactor.deregister(raw(&a), &io).unwrap();
    });
}

#[test]
fn a_300us_timeout_neither_returns_early_nor_busy_polls() {
    let driver = PollingDriver::new().unwrap();
    let timeout = Duration::from_micros(300);
    let start = Instant::now();
    driver.park(Some(timeout)).unwrap();
    assert!(
        start.elapsed() >= timeout,
        "returned after {:?}",
        start.elapsed()
    );

    let start = Instant::now();
    let mut parks = 0;
    while start.elapsed() < Duration::from_millis(30) {
        driver.park(Some(timeout)).unwrap();
        parks += 1;
    }
    assert!(
        parks <= 101,
        "{parks} parks of 300µs in 30 ms: the timeout became 0"
    );
}

#[test]
fn a_full_event_buffer_is_fetched_again_in_the_same_park() {
    each_trigger(|driver| {
        let driver = driver.with_event_capacity(2);
        let reactor = driver.reactor().unwrap();
        let pairs: Vec<_> = (0..9).map(|_| tcp_pair()).collect();
        let ios: Vec<_> = pairs
            .iter()
            .map(|(a, _)| reactor.register(raw(a)).unwrap())
            .collect();
        // Every connected socket is writable: 9 events through a buffer of 2. (Some OSes
        // report a socket's event late; collect until all are in.)
        let mut dispatched = driver.park(Some(LONG)).unwrap();
        if cfg!(target_os = "linux") {
            assert_eq!(dispatched, 9);
        }
        let deadline = Instant::now() + LONG;
        while dispatched < 9 && Instant::now() < deadline {
            dispatched += driver.park(Some(Duration::from_millis(10))).unwrap();
        }
        for io in &ios {
            assert!(readiness(io).contains(Readiness::WRITABLE));
        }
        for ((a, _), io) in pairs.iter().zip(&ios) {
            reactor.deregister(raw(a), io).unwrap();
        }
    });
}

#[test]
fn registering_the_same_source_twice_fails_and_keeps_the_first() {
    each_trigger(|driver| {
        let reactor = driver.reactor().unwrap();
        let (a, mut b) = tcp_pair();
        let first = reactor.register(raw(&a)).unwrap();
        assert!(reactor.register(raw(&a)).is_err());
        assert!(!first.is_shutdown());
        b.write_all(b"x").unwrap();
        park_until(&driver, || readiness(&first).contains(Readiness::READABLE));
        reactor.deregister(raw(&a), &first).unwrap();
        assert_eq!(driver.registered(), 0);
    });
}

/// Sources come and go on other threads while the driver dispatches.
#[test]
fn registration_from_other_threads_while_dispatching() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 100;
    each_trigger(|driver| {
        let finished = Arc::new(AtomicUsize::new(0));
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let reactor = driver.reactor().unwrap();
                let finished = finished.clone();
                thread::spawn(move || {
                    for round in 0..ROUNDS {
                        let (mut a, mut b) = tcp_pair();
                        let io = reactor.register(raw(&a)).unwrap();
                        b.write_all(&[round as u8]).unwrap();
                        let mut buf = [0u8; 4];
                        let n = io_op(&*reactor, raw(&a), &io, Interest::READABLE, || {
                            a.read(&mut buf)
                        })
                        .unwrap();
                        assert_eq!(&buf[..n], &[round as u8]);
                        reactor.deregister(raw(&a), &io).unwrap();
                    }
                    finished.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect();
        park_until(&driver, || finished.load(Ordering::SeqCst) == THREADS);
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(driver.registered(), 0);
    });
}

/// One-shot mode: a reader and a writer wait on one socket at once, each having re-armed it for
/// its own direction. The read event disarms the whole registration; the writer's interest must
/// survive both the other task's `rearm` (which must not replace it) and that event (after which
/// the driver must arm it again), or the writer never wakes. Both orders of arrival.
#[test]
fn a_reader_and_a_writer_waiting_together_both_wake() {
    each_trigger(|driver| {
        let reactor = driver.reactor().unwrap();
        for round in 0..6 {
            let (a, mut b) = tcp_pair();
            let a = Arc::new(a);
            let io = reactor.register(raw(&*a)).unwrap();
            park_until(&driver, || readiness(&io).contains(Readiness::WRITABLE));
            let chunk = vec![0u8; 64 << 10];
            loop {
                match (&*a).write(&chunk) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("{e}"),
                }
            }
            let done = Arc::new(AtomicUsize::new(0));
            let start = |interest: Interest| {
                let (a, io, reactor, done) = (a.clone(), io.clone(), reactor.clone(), done.clone());
                thread::spawn(move || {
                    let mut buf = [0u8; 1];
                    let n = if interest == Interest::READABLE {
                        io_op(&*reactor, raw(&*a), &io, interest, || (&*a).read(&mut buf))
                    } else {
                        io_op(&*reactor, raw(&*a), &io, interest, || (&*a).write(&buf))
                    };
                    assert_eq!(n.unwrap(), 1);
                    done.fetch_add(1, Ordering::SeqCst);
                })
            };
            let order = if round % 2 == 0 {
                [Interest::READABLE, Interest::WRITABLE]
            } else {
                [Interest::WRITABLE, Interest::READABLE]
            };
            let first = start(order[0]);
            park_until(&driver, || io.waiting_interest() == Some(order[0]));
            let second = start(order[1]);
            park_until(&driver, || io.waiting_interest() == Some(Interest::BOTH));

            // Readable: the reader wakes (and the writer still waits).
            b.write_all(b"x").unwrap();
            park_until(&driver, || done.load(Ordering::SeqCst) == 1);
            // Writable: drain what `a` sent; the writer must wake too.
            let mut sink = vec![0u8; 64 << 10];
            park_until(&driver, || {
                while let Ok(n) = b.read(&mut sink) {
                    assert!(n > 0);
                }
                done.load(Ordering::SeqCst) == 2
            });
            first.join().unwrap();
            second.join().unwrap();
            reactor.deregister(raw(&*a), &io).unwrap();
        }
    });
}

/// A reader and a writer on one socket, thousands of waits each, re-arming concurrently while
/// the driver dispatches: both finish.
#[test]
fn concurrent_readers_and_writers_on_one_socket_all_finish() {
    const MESSAGES: usize = 300;
    const TOTAL: usize = 4 << 20;
    each_trigger(|driver| {
        let reactor = driver.reactor().unwrap();
        let (a, b) = tcp_pair();
        b.set_nonblocking(false).unwrap();
        let a = Arc::new(a);
        let io = reactor.register(raw(&*a)).unwrap();
        let finished = Arc::new(AtomicUsize::new(0));

        // On `a`: one thread reads the peer's messages, another writes a large stream.
        let reader = {
            let (a, io, reactor, finished) =
                (a.clone(), io.clone(), reactor.clone(), finished.clone());
            thread::spawn(move || {
                let mut got = 0;
                let mut buf = [0u8; 64];
                while got < MESSAGES {
                    got += io_op(&*reactor, raw(&*a), &io, Interest::READABLE, || {
                        (&*a).read(&mut buf)
                    })
                    .unwrap();
                }
                finished.fetch_add(1, Ordering::SeqCst);
            })
        };
        let writer = {
            let (a, io, reactor, finished) =
                (a.clone(), io.clone(), reactor.clone(), finished.clone());
            thread::spawn(move || {
                let chunk = vec![7u8; 64 << 10];
                let mut sent = 0;
                while sent < TOTAL {
                    let end = chunk.len().min(TOTAL - sent);
                    sent += io_op(&*reactor, raw(&*a), &io, Interest::WRITABLE, || {
                        (&*a).write(&chunk[..end])
                    })
                    .unwrap();
                }
                finished.fetch_add(1, Ordering::SeqCst);
            })
        };
        // The peer: sends single bytes now and then, and drains the stream slowly.
        let peer = {
            let mut b = b;
            thread::spawn(move || {
                let mut drained = 0;
                let mut sent = 0;
                let mut buf = vec![0u8; 16 << 10];
                while drained < TOTAL || sent < MESSAGES {
                    if sent < MESSAGES {
                        b.write_all(&[1]).unwrap();
                        sent += 1;
                    }
                    if drained < TOTAL {
                        let n = b.read(&mut buf).unwrap();
                        assert!(n > 0, "the stream ended early");
                        drained += n;
                    }
                    if sent % 16 == 0 {
                        thread::sleep(Duration::from_micros(200));
                    }
                }
                b
            })
        };
        park_until(&driver, || finished.load(Ordering::SeqCst) == 2);
        reader.join().unwrap();
        writer.join().unwrap();
        drop(peer.join().unwrap());
        reactor.deregister(raw(&*a), &io).unwrap();
    });
}

#[test]
fn rearm_of_an_unregistered_source_is_an_error_in_oneshot_mode() {
    let driver = PollingDriver::with_trigger(Trigger::Oneshot).unwrap();
    let reactor = driver.reactor().unwrap();
    let (a, _b) = tcp_pair();
    let stranger = ScheduledIo::new();
    let err = reactor
        .rearm(raw(&a), &stranger, Interest::READABLE)
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::NotFound);
}

/// One-shot mode: a re-arm made by another thread just as the driver goes to sleep with no
/// timeout takes effect: the driver wakes for the event it armed. (Each event wakes the driver,
/// which parks again at once while the other thread re-arms: thousands of chances to meet that
/// moment. The other tests park with a 10 ms timeout, which would cover up a re-arm that
/// reached the poller only at its next wait; a runtime's idle worker parks with none.)
#[test]
fn a_rearm_from_another_thread_as_the_driver_sleeps_is_not_lost() {
    const ROUNDS: usize = 4_000;
    let driver = PollingDriver::with_trigger(Trigger::Oneshot).unwrap();
    let reactor = driver.reactor().unwrap();
    let unparker = driver.unparker();
    let stop = Arc::new(AtomicBool::new(false));
    let rearmer = {
        let stop = stop.clone();
        thread::spawn(move || {
            // Ends the driver's loop however this thread ends (a panic included).
            struct Stop(Arc<AtomicBool>, Arc<dyn spindle_io::Unpark>);
            impl Drop for Stop {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::SeqCst);
                    self.1.unpark();
                }
            }
            let _stop = Stop(stop, unparker);
            let (a, _b) = tcp_pair();
            let io = reactor.register(raw(&a)).unwrap();
            let mut lost = None;
            for round in 0..ROUNDS {
                // `a` stays writable: once armed, its event comes at once.
                let event = io.readiness();
                io.clear_readiness(event, Interest::WRITABLE);
                reactor.rearm(raw(&a), &io, Interest::WRITABLE).unwrap();
                let deadline = Instant::now() + Duration::from_secs(5);
                match io.wait(Interest::WRITABLE, Some(deadline)) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                        lost = Some(round);
                        break;
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            reactor.deregister(raw(&a), &io).unwrap();
            lost
        })
    };
    while !stop.load(Ordering::SeqCst) {
        driver.park(None).unwrap();
    }
    if let Some(round) = rearmer.join().unwrap() {
        panic!("round {round}: a writable socket re-armed for writing got no event in 5 s");
    }
}
