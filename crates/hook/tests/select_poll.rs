//! `ppoll`, `select` and `pselect` under the hook: in a coroutine only the coroutine waits, with
//! the results, `errno`, rewritten descriptor sets and timeouts a thread gets; and what a
//! signal does to a wait, in a coroutine and on a plain thread.
#![cfg(all(
    target_os = "linux",
    target_env = "gnu",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]

mod common;

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use common::{Ticker, backends, runtime, watchdog};

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn ts(d: Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos().into(),
    }
}

fn tv(d: Duration) -> libc::timeval {
    libc::timeval {
        tv_sec: d.as_secs() as libc::time_t,
        tv_usec: d.subsec_micros().into(),
    }
}

fn pfd(fd: i32, events: i16) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

/// An `fd_set` holding `fds`.
fn set_of(fds: &[i32]) -> libc::fd_set {
    // SAFETY: all-zero is an empty fd_set; FD_SET with descriptors below FD_SETSIZE.
    unsafe {
        let mut set: libc::fd_set = std::mem::zeroed();
        for &fd in fds {
            libc::FD_SET(fd, &mut set);
        }
        set
    }
}

/// The descriptors below `nfds` in `set`.
fn members(set: &libc::fd_set, nfds: i32) -> Vec<i32> {
    // SAFETY: FD_ISSET with descriptors below FD_SETSIZE.
    (0..nfds)
        .filter(|&fd| unsafe { libc::FD_ISSET(fd, set) })
        .collect()
}

/// `select` on read and write sets (empty ones passed as null).
fn select(
    nfds: i32,
    read: &mut libc::fd_set,
    write: Option<&mut libc::fd_set>,
    timeout: Option<&mut libc::timeval>,
) -> i32 {
    // SAFETY: valid sets and timeout, or null.
    unsafe {
        libc::select(
            nfds,
            read,
            write.map_or(std::ptr::null_mut(), |w| w as *mut _),
            std::ptr::null_mut(),
            timeout.map_or(std::ptr::null_mut(), |t| t as *mut _),
        )
    }
}

/// `ppoll` with a timeout waits in the coroutine (others tick), returns 0 when it passes, and
/// returns the ready count with `revents` set when a peer writes meanwhile.
#[test]
fn ppoll_times_out_and_wakes_in_the_coroutine() {
    for io in backends() {
        let rt = runtime(1, io);
        watchdog(Duration::from_secs(30), move || {
            rt.block_on(|| {
                let (a, mut b) = UnixStream::pair().unwrap();
                let ticker = Ticker::start();
                let mut fds = [pfd(a.as_raw_fd(), libc::POLLIN)];
                let t = ts(Duration::from_millis(100));
                let start = Instant::now();
                // SAFETY: one valid pollfd, a valid timeout, no mask.
                let n = unsafe { libc::ppoll(fds.as_mut_ptr(), 1, &t, std::ptr::null()) };
                let took = start.elapsed();
                assert_eq!(n, 0);
                assert_eq!(fds[0].revents, 0);
                assert!(took >= Duration::from_millis(100), "{took:?}");
                assert!(ticker.count() >= 20, "ticks: {}", ticker.count());
                // ppoll does not write the timeout back (glibc passes the kernel a copy).
                assert_eq!(t.tv_nsec, 100_000_000);

                let writer = spindle_rt::spawn(move || {
                    spindle_rt::sleep(Duration::from_millis(50));
                    b.write_all(b"x").unwrap();
                    b
                });
                // Two descriptors, one of them never ready, no timeout.
                let (c, _d) = UnixStream::pair().unwrap();
                let mut fds = [
                    pfd(c.as_raw_fd(), libc::POLLIN),
                    pfd(a.as_raw_fd(), libc::POLLIN),
                ];
                // SAFETY: two valid pollfds, no timeout, no mask.
                let n =
                    unsafe { libc::ppoll(fds.as_mut_ptr(), 2, std::ptr::null(), std::ptr::null()) };
                assert_eq!(n, 1);
                assert_eq!((fds[0].revents, fds[1].revents), (0, libc::POLLIN));
                let _b = writer.join().unwrap();
            })
        });
    }
}

/// A signal mask cannot be applied to a coroutine alone: `ppoll` and `pselect` with one pass
/// through, so the worker thread waits (the ticker stands still) with the kernel's results.
#[test]
fn ppoll_and_pselect_with_a_signal_mask_block_the_thread() {
    let rt = runtime(1, spindle_rt::IoBackend::Epoll);
    watchdog(Duration::from_secs(30), move || {
        rt.block_on(|| {
            let (a, _b) = UnixStream::pair().unwrap();
            let ticker = Ticker::start();
            // SAFETY: an empty signal set.
            let mask = unsafe {
                let mut m: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut m);
                m
            };
            let before = ticker.count();
            let mut fds = [pfd(a.as_raw_fd(), libc::POLLIN)];
            let t = ts(Duration::from_millis(60));
            // SAFETY: one valid pollfd, a valid timeout and mask.
            let n = unsafe { libc::ppoll(fds.as_mut_ptr(), 1, &t, &mask) };
            assert_eq!(n, 0);
            let mut set = set_of(&[a.as_raw_fd()]);
            // SAFETY: a valid set, timeout and mask.
            let n = unsafe {
                libc::pselect(
                    a.as_raw_fd() + 1,
                    &mut set,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    &t,
                    &mask,
                )
            };
            assert_eq!(n, 0);
            assert_eq!(
                ticker.count(),
                before,
                "the worker ran while the thread waited"
            );
        })
    });
}

/// Invalid timeouts fail at once with `EINVAL`, in a coroutine as on a thread.
#[test]
fn invalid_timeouts_fail_with_einval() {
    let check = || {
        let (a, _b) = UnixStream::pair().unwrap();
        let fd = a.as_raw_fd();
        let bad = libc::timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000_000,
        };
        let mut fds = [pfd(fd, libc::POLLIN)];
        // SAFETY: a valid pollfd and timeout.
        let n = unsafe { libc::ppoll(fds.as_mut_ptr(), 1, &bad, std::ptr::null()) };
        assert_eq!((n, errno()), (-1, libc::EINVAL), "ppoll");
        let mut set = set_of(&[fd]);
        // SAFETY: a valid set and timeout.
        let n = unsafe {
            libc::pselect(
                fd + 1,
                &mut set,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &bad,
                std::ptr::null(),
            )
        };
        assert_eq!((n, errno()), (-1, libc::EINVAL), "pselect");
        let mut t = libc::timeval {
            tv_sec: -1,
            tv_usec: 0,
        };
        let n = select(fd + 1, &mut set, None, Some(&mut t));
        assert_eq!((n, errno()), (-1, libc::EINVAL), "select");
        let mut t = tv(Duration::from_secs(1));
        let n = select(-1, &mut set, None, Some(&mut t));
        assert_eq!((n, errno()), (-1, libc::EINVAL), "select, nfds < 0");
    };
    check();
    let rt = runtime(1, spindle_rt::IoBackend::Epoll);
    watchdog(Duration::from_secs(30), move || rt.block_on(check));
}

/// `select` returns the number of ready descriptors and rewrites each set to the ready ones,
/// waits only in the coroutine until one is ready, and writes the time left back.
#[test]
fn select_rewrites_the_sets_to_the_ready_descriptors() {
    for io in backends() {
        let rt = runtime(1, io);
        watchdog(Duration::from_secs(30), move || {
            rt.block_on(|| {
                let (a, mut b) = UnixStream::pair().unwrap();
                let (c, _d) = UnixStream::pair().unwrap();
                let (fa, fc) = (a.as_raw_fd(), c.as_raw_fd());
                let nfds = fa.max(fc) + 1;
                b.write_all(b"x").unwrap();
                // Ready at once: `a` readable; both writable.
                let mut read = set_of(&[fa, fc]);
                let mut write = set_of(&[fa, fc]);
                let mut t = tv(Duration::from_secs(5));
                let n = select(nfds, &mut read, Some(&mut write), Some(&mut t));
                assert_eq!(n, 3);
                assert_eq!(members(&read, nfds), [fa]);
                assert_eq!(members(&write, nfds), {
                    let mut v = vec![fa, fc];
                    v.sort();
                    v
                });
                let mut buf = [0u8; 1];
                (&a).read_exact(&mut buf).unwrap();

                // Nothing ready: the coroutine waits until a peer writes.
                let ticker = Ticker::start();
                let writer = spindle_rt::spawn(move || {
                    spindle_rt::sleep(Duration::from_millis(80));
                    b.write_all(b"y").unwrap();
                    b
                });
                let mut read = set_of(&[fa, fc]);
                let mut t = tv(Duration::from_secs(5));
                let start = Instant::now();
                let n = select(nfds, &mut read, None, Some(&mut t));
                let took = start.elapsed();
                assert_eq!(n, 1);
                assert_eq!(members(&read, nfds), [fa]);
                assert!(took >= Duration::from_millis(70), "{took:?}");
                assert!(ticker.count() >= 20, "ticks: {}", ticker.count());
                // Linux writes back the time not slept.
                let left = Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
                assert!(
                    left < Duration::from_secs(5) && left > Duration::from_secs(4),
                    "{left:?}"
                );
                let _b = writer.join().unwrap();

                // One descriptor, no timeout: it waits on the driver.
                let (e, mut f) = UnixStream::pair().unwrap();
                let writer = spindle_rt::spawn(move || {
                    spindle_rt::sleep(Duration::from_millis(30));
                    f.write_all(b"z").unwrap();
                    f
                });
                let mut read = set_of(&[e.as_raw_fd()]);
                let n = select(e.as_raw_fd() + 1, &mut read, None, None);
                assert_eq!(n, 1);
                assert_eq!(members(&read, e.as_raw_fd() + 1), [e.as_raw_fd()]);
                let _f = writer.join().unwrap();
            })
        });
    }
}

/// A `select` whose timeout passes returns 0 with every set cleared and the time left at
/// zero; `pselect` does the same and leaves its timeout as it was.
#[test]
fn select_timeout_clears_the_sets() {
    for io in backends() {
        let rt = runtime(1, io);
        watchdog(Duration::from_secs(30), move || {
            rt.block_on(|| {
                let (a, _b) = UnixStream::pair().unwrap();
                let (c, _d) = UnixStream::pair().unwrap();
                let (fa, fc) = (a.as_raw_fd(), c.as_raw_fd());
                let nfds = fa.max(fc) + 1;
                for fds in [vec![fa], vec![fa, fc]] {
                    let ticker = Ticker::start();
                    let mut read = set_of(&fds);
                    let mut t = tv(Duration::from_millis(100));
                    let start = Instant::now();
                    let n = select(nfds, &mut read, None, Some(&mut t));
                    let took = start.elapsed();
                    assert_eq!(n, 0);
                    assert!(members(&read, nfds).is_empty());
                    assert_eq!((t.tv_sec, t.tv_usec), (0, 0));
                    assert!(took >= Duration::from_millis(100), "{took:?}");
                    assert!(ticker.count() >= 20, "ticks: {}", ticker.count());
                }
                let mut read = set_of(&[fa]);
                let t = ts(Duration::from_millis(50));
                // SAFETY: a valid set and timeout.
                let n = unsafe {
                    libc::pselect(
                        fa + 1,
                        &mut read,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                        &t,
                        std::ptr::null(),
                    )
                };
                assert_eq!(n, 0);
                assert!(members(&read, fa + 1).is_empty());
                assert_eq!(t.tv_nsec, 50_000_000);
            })
        });
    }
}

/// `select` without descriptors is a sleep of the coroutine alone, as `ppoll` without any is.
#[test]
fn select_and_ppoll_without_descriptors_sleep_in_the_coroutine() {
    for io in backends() {
        let rt = runtime(1, io);
        watchdog(Duration::from_secs(30), move || {
            rt.block_on(|| {
                let ticker = Ticker::start();
                let mut t = tv(Duration::from_millis(100));
                let start = Instant::now();
                // SAFETY: no sets, a valid timeout.
                let n = unsafe {
                    libc::select(
                        0,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                        &mut t,
                    )
                };
                assert_eq!(n, 0);
                assert_eq!((t.tv_sec, t.tv_usec), (0, 0));
                let t = ts(Duration::from_millis(100));
                // SAFETY: no descriptors, a valid timeout.
                let n = unsafe { libc::ppoll(std::ptr::null_mut(), 0, &t, std::ptr::null()) };
                assert_eq!(n, 0);
                let took = start.elapsed();
                assert!(took >= Duration::from_millis(200), "{took:?}");
                assert!(ticker.count() >= 40, "ticks: {}", ticker.count());
            })
        });
    }
}

/// A closed descriptor in a set fails with `EBADF` and leaves the sets as they were, in a
/// coroutine as on a thread.
#[test]
fn select_on_a_closed_descriptor_fails_with_ebadf() {
    let check = || {
        let (a, _b) = UnixStream::pair().unwrap();
        let (c, d) = UnixStream::pair().unwrap();
        let closed = c.as_raw_fd();
        drop(c);
        let fa = a.as_raw_fd();
        let nfds = fa.max(closed).max(d.as_raw_fd()) + 1;
        let mut read = set_of(&[fa, closed]);
        let before = members(&read, nfds);
        let mut t = tv(Duration::from_secs(1));
        let n = select(nfds, &mut read, None, Some(&mut t));
        assert_eq!((n, errno()), (-1, libc::EBADF));
        assert_eq!(members(&read, nfds), before);
        let mut fds = [pfd(fa, libc::POLLIN), pfd(closed, libc::POLLIN)];
        // poll reports a closed descriptor in its revents instead.
        // SAFETY: two valid pollfds.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, 1000) };
        assert_eq!(n, 1);
        assert_eq!(fds[1].revents, libc::POLLNVAL);
    };
    check();
    let rt = runtime(1, spindle_rt::IoBackend::Epoll);
    watchdog(Duration::from_secs(30), move || rt.block_on(check));
}

// ---------------------------------------------------------------------------------------
// Signals.

static SIGNALS: AtomicUsize = AtomicUsize::new(0);

extern "C" fn count_signal(_: libc::c_int) {
    SIGNALS.fetch_add(1, Ordering::Relaxed);
}

/// A SIGUSR1 handler installed without `SA_RESTART`: a thread's interrupted wait fails with
/// `EINTR`.
fn install_handler() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: a handler that only counts (async-signal-safe); a valid sigaction.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = count_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = 0;
            assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
        }
    });
}

/// Sends SIGUSR1 to `thread` every 10 ms while `alive` holds (the thread clears it, under the
/// lock, before it ends).
fn pester(thread: libc::pthread_t, alive: Arc<Mutex<bool>>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        loop {
            {
                let alive = alive.lock().unwrap();
                if !*alive {
                    return;
                }
                // SAFETY: the thread is alive: it clears `alive` under this lock first.
                unsafe { libc::pthread_kill(thread, libc::SIGUSR1) };
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    })
}

/// A signal handled on the worker thread while a coroutine waits does not end the coroutine's
/// wait (it was not in the kernel: as if the signal had gone to another thread): a blocking
/// `read`, `poll` and `select` each return the data that comes later.
#[test]
fn a_signal_does_not_end_a_coroutines_wait() {
    install_handler();
    for io in backends() {
        let rt = runtime(1, io);
        watchdog(Duration::from_secs(30), move || {
            rt.block_on(|| {
                // SAFETY: no preconditions.
                let worker = unsafe { libc::pthread_self() };
                let before = SIGNALS.load(Ordering::Relaxed);
                let alive = Arc::new(Mutex::new(true));
                let sender = pester(worker, alive.clone());
                let (a, b) = UnixStream::pair().unwrap();
                let b = Arc::new(b);
                let later = |b: Arc<UnixStream>| {
                    spindle_rt::spawn(move || {
                        spindle_rt::sleep(Duration::from_millis(60));
                        (&*b).write_all(b"s").unwrap();
                    })
                };
                let fa = a.as_raw_fd();

                let w = later(b.clone());
                let mut buf = [0u8; 1];
                // SAFETY: a valid buffer.
                let n = unsafe { libc::read(fa, buf.as_mut_ptr().cast(), 1) };
                assert_eq!(n, 1, "read: errno {}", errno());
                w.join().unwrap();

                let w = later(b.clone());
                let mut fds = [pfd(fa, libc::POLLIN)];
                // SAFETY: one valid pollfd.
                let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, 5000) };
                assert_eq!(n, 1, "poll: errno {}", errno());
                w.join().unwrap();
                (&a).read_exact(&mut buf).unwrap();

                let w = later(b.clone());
                let mut read = set_of(&[fa]);
                let n = select(fa + 1, &mut read, None, None);
                assert_eq!(n, 1, "select: errno {}", errno());
                w.join().unwrap();

                *alive.lock().unwrap() = false;
                sender.join().unwrap();
                assert!(
                    SIGNALS.load(Ordering::Relaxed) > before,
                    "no signal arrived"
                );
            })
        });
    }
}

/// On a plain thread the calls pass through: a signal ends a `select`, a `poll`, and a `read`
/// of a socket that a coroutine made managed, with `EINTR`, as without the hook.
#[test]
fn a_plain_threads_wait_ends_with_eintr() {
    install_handler();
    let rt = runtime(1, spindle_rt::IoBackend::Epoll);
    let (a, _b) = UnixStream::pair().unwrap();
    let fa = a.as_raw_fd();
    // A coroutine's read with a timeout makes the socket managed.
    rt.block_on(|| {
        a.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
        assert!((&a).read(&mut [0u8; 1]).is_err());
        a.set_read_timeout(None).unwrap();
    });
    type Wait = Box<dyn Fn() -> (i32, i32) + Send>;
    let waits: Vec<(&str, Wait)> = vec![
        (
            "select",
            Box::new(move || {
                let mut read = set_of(&[fa]);
                let mut t = tv(Duration::from_secs(10));
                (select(fa + 1, &mut read, None, Some(&mut t)), errno())
            }),
        ),
        (
            "poll",
            Box::new(move || {
                let mut fds = [pfd(fa, libc::POLLIN)];
                // SAFETY: one valid pollfd.
                (unsafe { libc::poll(fds.as_mut_ptr(), 1, 10_000) }, errno())
            }),
        ),
        (
            "read",
            Box::new(move || {
                let mut buf = [0u8; 1];
                // SAFETY: a valid buffer.
                let n = unsafe { libc::read(fa, buf.as_mut_ptr().cast(), 1) };
                (n as i32, errno())
            }),
        ),
    ];
    for (name, wait) in waits {
        let start = Instant::now();
        let alive = Arc::new(Mutex::new(true));
        let mine = alive.clone();
        let t = std::thread::spawn(move || {
            let r = wait();
            *mine.lock().unwrap() = false;
            r
        });
        let sender = pester(t.as_pthread_t(), alive);
        let result = t.join().unwrap();
        sender.join().unwrap();
        assert_eq!(result, (-1, libc::EINTR), "{name}");
        assert!(start.elapsed() < Duration::from_secs(5), "{name}");
    }
    drop(rt);
}
