//! Behaviour tests of the epoll driver with plain threads: one thread parks the driver, others
//! register sources, wait in `ScheduledIo::wait` and unpark it.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use spindle_io::{Driver, Interest, Readiness, ScheduledIo};

use crate::EpollDriver;

const LONG: Duration = Duration::from_secs(10);

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a live array of two ints that pipe2 fills.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", io::Error::last_os_error());
    // SAFETY: pipe2 just returned these two fds and nothing else owns them.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

fn write_fd(fd: &OwnedFd, bytes: &[u8]) {
    // SAFETY: writes from a live slice to an open fd.
    let n = unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
    assert_eq!(
        n,
        bytes.len() as isize,
        "write: {}",
        io::Error::last_os_error()
    );
}

/// Closes `old` and puts `new`'s file under `old`'s number, atomically (as a `close` followed by
/// an `open` that reuses the number would, without racing the other tests for the number).
fn reuse_number(old: OwnedFd, new: OwnedFd) -> OwnedFd {
    let number = old.into_raw_fd();
    // SAFETY: dup3 on two open fds; it closes `number` (which we own, released above) and
    // makes it refer to `new`'s file.
    let rc = unsafe { libc::dup3(new.as_raw_fd(), number, libc::O_CLOEXEC) };
    assert_eq!(rc, number, "dup3: {}", io::Error::last_os_error());
    // SAFETY: `number` is open again (dup3 succeeded) and owned by nothing else.
    unsafe { OwnedFd::from_raw_fd(number) }
}

fn pair() -> (UnixStream, UnixStream) {
    let (a, b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    (a, b)
}

/// Parks `driver` until `done` returns true, failing after `LONG`.
fn park_until(driver: &EpollDriver, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + LONG;
    while !done() {
        assert!(Instant::now() < deadline, "the expected event never came");
        driver.park(Some(Duration::from_millis(10))).unwrap();
    }
}

fn readiness(io: &ScheduledIo) -> Readiness {
    io.readiness().readiness
}

#[test]
fn a_pipe_becomes_readable_when_written() {
    let driver = EpollDriver::new().unwrap();
    let reactor = driver.reactor().unwrap();
    let (r, w) = pipe();
    let io = reactor.register(r.as_raw_fd()).unwrap();
    driver.park(Some(Duration::ZERO)).unwrap();
    assert!(!readiness(&io).contains(Readiness::READABLE));

    write_fd(&w, b"x");
    let n = driver.park(Some(LONG)).unwrap();
    assert_eq!(n, 1);
    assert_eq!(readiness(&io), Readiness::READABLE);
    reactor.deregister(r.as_raw_fd(), &io).unwrap();
    assert_eq!(driver.registered(), 0);
}

#[test]
fn a_socket_is_writable_at_registration_and_readable_after_a_write() {
    let driver = EpollDriver::new().unwrap();
    let reactor = driver.reactor().unwrap();
    let (a, mut b) = pair();
    let io = reactor.register(a.as_raw_fd()).unwrap();
    park_until(&driver, || readiness(&io).contains(Readiness::WRITABLE));
    assert!(!readiness(&io).contains(Readiness::READABLE));

    b.write_all(b"hello").unwrap();
    park_until(&driver, || readiness(&io).contains(Readiness::READABLE));
    reactor.deregister(a.as_raw_fd(), &io).unwrap();
}

#[test]
fn edge_triggered_a_drained_source_reports_again_only_on_new_data() {
    let driver = EpollDriver::new().unwrap();
    let reactor = driver.reactor().unwrap();
    let (mut a, mut b) = pair();
    let io = reactor.register(a.as_raw_fd()).unwrap();
    b.write_all(b"one").unwrap();
    park_until(&driver, || readiness(&io).contains(Readiness::READABLE));

    // The IO-type protocol: snapshot, read to EWOULDBLOCK, clear.
    let event = io.readiness();
    let mut buf = [0u8; 16];
    assert_eq!(a.read(&mut buf).unwrap(), 3);
    assert_eq!(
        a.read(&mut buf).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
    io.clear_readiness(event, Interest::READABLE);
    assert!(!readiness(&io).contains(Readiness::READABLE));

    // No new edge, no event.
    assert_eq!(driver.park(Some(Duration::from_millis(5))).unwrap(), 0);
    assert!(!readiness(&io).contains(Readiness::READABLE));

    b.write_all(b"two").unwrap();
    park_until(&driver, || readiness(&io).contains(Readiness::READABLE));
    reactor.deregister(a.as_raw_fd(), &io).unwrap();
}

#[test]
fn a_closed_peer_reports_read_closed() {
    let driver = EpollDriver::new().unwrap();
    let reactor = driver.reactor().unwrap();
    let (a, b) = pair();
    let io = reactor.register(a.as_raw_fd()).unwrap();
    driver.park(Some(Duration::ZERO)).unwrap();
    assert!(!readiness(&io).contains(Readiness::READ_CLOSED));

    b.shutdown(std::net::Shutdown::Write).unwrap();
    park_until(&driver, || readiness(&io).contains(Readiness::READ_CLOSED));
    assert!(readiness(&io).satisfies(Interest::READABLE));

    drop(b);
    park_until(&driver, || readiness(&io).contains(Readiness::WRITE_CLOSED));
    reactor.deregister(a.as_raw_fd(), &io).unwrap();
}

#[test]
fn a_pipe_whose_writer_closed_reports_hang_up() {
    let driver = EpollDriver::new().unwrap();
    let reactor = driver.reactor().unwrap();
    let (r, w) = pipe();
    let io = reactor.register(r.as_raw_fd()).unwrap();
    drop(w);
    park_until(&driver, || {
        readiness(&io).contains(Readiness::READ_CLOSED.add(Readiness::WRITE_CLOSED))
    });
    reactor.deregister(r.as_raw_fd(), &io).unwrap();
}

#[test]
fn a_write_end_whose_reader_closed_reports_an_error() {
    let driver = EpollDriver::new().unwrap();
    let reactor = driver.reactor().unwrap();
    let (r, w) = pipe();
    let io = reactor.register(w.as_raw_fd()).unwrap();
    drop(r);
    park_until(&driver, || readiness(&io).contains(Readiness::ERROR));
    assert!(readiness(&io).satisfies(Interest::WRITABLE));
    reactor.deregister(w.as_raw_fd(), &io).unwrap();
}

#[test]
fn a_task_waiting_on_another_thread_is_woken_by_the_event() {
    let driver = EpollDriver::new().unwrap();
    let reactor = driver.reactor().unwrap();
    let (mut a, mut b) = pair();
    let io = reactor.register(a.as_raw_fd()).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let io = io.clone();
        let done = done.clone();
        thread::spawn(move || {
            let mut buf = [0u8; 8];
            let got = loop {
                let event = io.readiness();
                match a.read(&mut buf) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        io.clear_readiness(event, Interest::READABLE);
                        io.wait(Interest::READABLE, Some(Instant::now() + LONG))
                            .unwrap();
                    }
                    Err(e) => panic!("{e}"),
                }
            };
            done.store(true, Ordering::SeqCst);
            (got, a)
        })
    };
    // Let the reader block first, then write.
    while io.waiting_interest().is_none() {
        driver.park(Some(Duration::from_millis(1))).unwrap();
    }
    b.write_all(b"ping").unwrap();
    park_until(&driver, || done.load(Ordering::SeqCst));
    let (got, a) = reader.join().unwrap();
    assert_eq!(got, 4);
    reactor.deregister(a.as_raw_fd(), &io).unwrap();
}

#[test]
fn unpark_from_another_thread_wakes_a_blocked_park() {
    let driver = EpollDriver::new().unwrap();
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
    let driver = EpollDriver::new().unwrap();
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

    // Consumed: the next park waits out its timeout.
    let start = Instant::now();
    driver.park(Some(Duration::from_millis(20))).unwrap();
    assert!(start.elapsed() >= Duration::from_millis(20));
}

#[test]
fn a_zero_timeout_park_consumes_the_token() {
    let driver = EpollDriver::new().unwrap();
    driver.unparker().unpark();
    driver.park(Some(Duration::ZERO)).unwrap();
    let start = Instant::now();
    driver.park(Some(Duration::from_millis(20))).unwrap();
    assert!(start.elapsed() >= Duration::from_millis(20));
}

/// Ping-pong between a parking driver and unparkers, thousands of rounds, with the unparks
/// landing at every point of the park's protocol. A lost wake-up leaves the driver asleep in
/// `park(None)`: the round's acknowledgement never comes and the test fails (after waking the
/// driver, so that it can end).
#[test]
fn no_wake_up_is_lost_under_stress() {
    const ROUNDS: usize = 20_000;
    const UNPARKERS: usize = 2;
    let driver = EpollDriver::new().unwrap();
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
                    // Take the next round, if any is left.
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
                    // Vary where the unpark lands relative to the driver's park.
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
fn a_deregistered_closed_and_reused_fd_gets_no_stale_events() {
    let driver = EpollDriver::new().unwrap();
    let reactor = driver.reactor().unwrap();
    let (r, w) = pipe();
    let number = r.as_raw_fd();
    let old = reactor.register(number).unwrap();
    // An event is pending in the kernel's ready list when the source goes away.
    write_fd(&w, b"stale");
    reactor.deregister(number, &old).unwrap();
    drop(w);

    // The number is reused for a new pipe.
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
}

/// The dup'd-fd pitfall: an fd whose file is still open elsewhere keeps its epoll registration
/// after `close` — unless it was deregistered first, as the reactor's contract asks.
#[test]
fn a_dupd_fd_deregistered_before_close_gets_no_events() {
    let driver = EpollDriver::new().unwrap();
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
}

/// The other side of the pitfall: a registration orphaned by closing a dup'd fd without
/// deregistering keeps firing in the kernel, but its token is dead once the number is reused.
#[test]
fn an_orphaned_registration_does_not_reach_the_new_source() {
    let driver = EpollDriver::new().unwrap();
    let reactor = driver.reactor().unwrap();
    let (r, w) = pipe();
    let dup = r.try_clone().unwrap();
    let number = r.as_raw_fd();
    let orphan = reactor.register(number).unwrap();
    // No deregister: the kernel keeps the registration (the file is open via `dup`).
    let (a, b) = pair();
    let reused = reuse_number(r, a.into());
    let fresh = reactor.register(number).unwrap();
    // The stale table entry was replaced, and its owner's waits ended.
    assert!(orphan.is_shutdown());
    park_until(&driver, || readiness(&fresh).contains(Readiness::WRITABLE));

    write_fd(&w, b"for the orphan");
    // The kernel reports it under the orphan's dead token: dropped, not dispatched.
    assert_eq!(driver.park(Some(Duration::from_millis(5))).unwrap(), 0);
    assert!(!readiness(&fresh).contains(Readiness::READABLE));
    reactor.deregister(number, &fresh).unwrap();
    drop((dup, b, reused));
}

#[test]
fn dropping_the_driver_ends_waits_with_an_error() {
    let driver = EpollDriver::new().unwrap();
    let reactor = driver.reactor().unwrap();
    let (a, _b) = pair();
    let io = reactor.register(a.as_raw_fd()).unwrap();
    let waiter = {
        let io = io.clone();
        thread::spawn(move || io.wait(Interest::READABLE, Some(Instant::now() + LONG)))
    };
    while io.waiting_interest().is_none() {
        thread::yield_now();
    }
    assert!(reactor.is_alive());
    let unparker = driver.unparker();
    drop(driver);

    let err = waiter.join().unwrap().unwrap_err();
    assert!(err.to_string().contains("shut down"), "{err}");
    assert!(io.is_shutdown());
    assert!(!reactor.is_alive());
    unparker.unpark(); // harmless
    let err = reactor.register(a.as_raw_fd()).unwrap_err();
    assert!(err.to_string().contains("shut down"), "{err}");
    reactor.deregister(a.as_raw_fd(), &io).unwrap();
}

#[test]
fn dropping_the_driver_closes_its_fds_though_handles_live_on() {
    let driver = EpollDriver::new().unwrap();
    let owns_fds = driver.fds_probe();
    let reactor = driver.reactor().unwrap();
    let unparker = driver.unparker();
    assert!(owns_fds());
    drop(driver);
    // The owned fds were dropped (closed), although handles keep the shared state alive.
    assert!(!owns_fds());
    assert!(!reactor.is_alive());
    unparker.unpark();
}

#[test]
fn a_300us_timeout_neither_returns_early_nor_busy_polls() {
    let driver = EpollDriver::new().unwrap();
    let timeout = Duration::from_micros(300);
    let start = Instant::now();
    driver.park(Some(timeout)).unwrap();
    assert!(
        start.elapsed() >= timeout,
        "returned after {:?}",
        start.elapsed()
    );

    // A timeout rounded down to 0 ms would spin here thousands of times.
    let start = Instant::now();
    let mut parks = 0;
    while start.elapsed() < Duration::from_millis(30) {
        driver.park(Some(timeout)).unwrap();
        parks += 1;
    }
    assert!(
        parks <= 31,
        "{parks} parks of 300µs in 30 ms: the timeout became 0"
    );
}

#[test]
fn a_full_event_buffer_is_fetched_again_in_the_same_park() {
    let driver = EpollDriver::with_event_capacity(2).unwrap();
    let reactor = driver.reactor().unwrap();
    let pairs: Vec<_> = (0..9).map(|_| pair()).collect();
    let ios: Vec<_> = pairs
        .iter()
        .map(|(a, _)| reactor.register(a.as_raw_fd()).unwrap())
        .collect();
    // Every fresh socket is writable: 9 events through a buffer of 2.
    assert_eq!(driver.park(Some(LONG)).unwrap(), 9);
    for io in &ios {
        assert!(readiness(io).contains(Readiness::WRITABLE));
    }
    for ((a, _), io) in pairs.iter().zip(&ios) {
        reactor.deregister(a.as_raw_fd(), io).unwrap();
    }
}

#[test]
fn a_regular_file_is_refused_with_eperm() {
    let driver = EpollDriver::new().unwrap();
    let reactor = driver.reactor().unwrap();
    let file = std::fs::File::open("/proc/self/exe")
        .or_else(|_| std::fs::File::open(std::env::current_exe().unwrap()))
        .unwrap();
    let err = reactor.register(file.as_raw_fd()).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EPERM), "{err}");
    assert_eq!(driver.registered(), 0);
}

#[test]
fn registering_the_same_fd_twice_fails_and_keeps_the_first() {
    let driver = EpollDriver::new().unwrap();
    let reactor = driver.reactor().unwrap();
    let (a, mut b) = pair();
    let first = reactor.register(a.as_raw_fd()).unwrap();
    let err = reactor.register(a.as_raw_fd()).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EEXIST), "{err}");
    assert!(!first.is_shutdown());
    b.write_all(b"x").unwrap();
    park_until(&driver, || readiness(&first).contains(Readiness::READABLE));
    reactor.deregister(a.as_raw_fd(), &first).unwrap();
    assert_eq!(driver.registered(), 0);
}

/// Sources come and go on other threads while the driver dispatches: every one gets its own
/// events, and the table ends empty.
#[test]
fn registration_from_other_threads_while_dispatching() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 300;
    let driver = EpollDriver::new().unwrap();
    let finished = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let reactor = driver.reactor().unwrap();
            let finished = finished.clone();
            thread::spawn(move || {
                for round in 0..ROUNDS {
                    let (mut a, mut b) = pair();
                    let io = reactor.register(a.as_raw_fd()).unwrap();
                    b.write_all(&[round as u8]).unwrap();
                    let mut buf = [0u8; 4];
                    loop {
                        let event = io.readiness();
                        match a.read(&mut buf) {
                            Ok(n) => {
                                assert_eq!(&buf[..n], &[round as u8]);
                                break;
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                                io.clear_readiness(event, Interest::READABLE);
                                io.wait(Interest::READABLE, Some(Instant::now() + LONG))
                                    .unwrap();
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                    reactor.deregister(a.as_raw_fd(), &io).unwrap();
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
}
