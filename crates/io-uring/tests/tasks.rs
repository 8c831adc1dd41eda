//! The driver as a runtime uses it: tasks (coroutines) park in `submit`, the executor's idle
//! loop parks in the driver, which dispatches completions.
#![cfg(target_os = "linux")]

mod common;

use std::cell::{Cell, RefCell};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::time::{Duration, Instant};

use common::{Exec, socketpair, submit};
use spindle_io::Op;
use spindle_io_uring::{UringConfig, UringDriver};

/// Both ring modes (deferred task running on and off).
fn drivers() -> Vec<UringDriver> {
    vec![
        UringConfig::new().build().unwrap(),
        UringConfig::new().defer_taskrun(false).build().unwrap(),
    ]
}

#[test]
fn tasks_recv_and_send_through_the_worker_park() {
    for driver in drivers() {
        let exec = Exec::new(driver);
        let (a, b) = socketpair();
        let got = Rc::new(RefCell::new(Vec::new()));
        let got2 = got.clone();
        let (fa, fb) = (a.as_raw_fd(), b.as_raw_fd());
        exec.spawn(move || {
            let mut buf = [0u8; 16];
            let n = submit(
                Op::Recv {
                    fd: fa,
                    buf: &mut buf,
                    flags: 0,
                },
                None,
            )
            .unwrap();
            got2.borrow_mut().extend_from_slice(&buf[..n]);
        });
        exec.spawn(move || {
            // Let the receiver park first.
            spindle_park::park_timeout(Duration::from_millis(20));
            let n = submit(
                Op::Send {
                    fd: fb,
                    buf: b"hello",
                    flags: 0,
                },
                None,
            )
            .unwrap();
            assert_eq!(n, 5);
        });
        exec.run();
        assert_eq!(&got.borrow()[..], b"hello");
        assert_eq!(exec.driver.in_flight(), 0);
    }
}

/// 100 operations in flight on a ring of 4 submission entries (8 completion entries): pushes
/// flush the full queue, and a burst of 200 completions (100 sends issued in one turn, and the
/// 100 receives they complete) overflows the completion queue (with deferred task running);
/// the kernel keeps the overflow (NODROP) and `park` flushes it. Nothing is lost.
#[test]
fn many_pending_ops_on_a_tiny_ring() {
    const N: usize = 100;
    for defer in [true, false] {
        let driver = UringConfig::new()
            .entries(4)
            .defer_taskrun(defer)
            .build()
            .unwrap();
        assert_eq!(driver.entries(), 4);
        let exec = Exec::new(driver);
        let pairs: Vec<_> = (0..N).map(|_| socketpair()).collect();
        let received = Rc::new(Cell::new(0));
        let sent = Rc::new(Cell::new(0));
        let peak = Rc::new(Cell::new(0));
        let start = Instant::now();
        for (i, (a, b)) in pairs.iter().enumerate() {
            let (fa, fb) = (a.as_raw_fd(), b.as_raw_fd());
            let received = received.clone();
            exec.spawn(move || {
                let mut buf = [0u8; 8];
                let n = submit(
                    Op::Recv {
                        fd: fa,
                        buf: &mut buf,
                        flags: 0,
                    },
                    None,
                )
                .unwrap();
                assert_eq!(&buf[..n], format!("m{i}").as_bytes());
                received.set(received.get() + 1);
            });
            let sent = sent.clone();
            exec.spawn(move || {
                // All senders wake in the same turn and push their sends together.
                spindle_park::park_until(start + Duration::from_millis(40));
                let msg = format!("m{i}");
                submit(
                    Op::Send {
                        fd: fb,
                        buf: msg.as_bytes(),
                        flags: 0,
                    },
                    None,
                )
                .unwrap();
                sent.set(sent.get() + 1);
            });
        }
        let peak2 = peak.clone();
        let exec_ptr: *const Exec = &exec;
        exec.spawn(move || {
            spindle_park::park_until(start + Duration::from_millis(20));
            // SAFETY: the executor outlives its tasks (they run inside `exec.run()`) and does
            // not move meanwhile.
            peak2.set(unsafe { &*exec_ptr }.driver.in_flight());
        });
        exec.run();
        assert_eq!(received.get(), N);
        assert_eq!(sent.get(), N);
        assert_eq!(peak.get(), N, "all receives were in flight at once");
        assert_eq!(exec.driver.in_flight(), 0);
        let stats = exec.driver.stats();
        eprintln!("tiny ring (defer_taskrun = {defer}): {stats:?}");
        if exec.driver.is_defer_taskrun() {
            // Deferred completion work posts the 100 receives' completions at once, in the
            // worker's enter: more than the queue holds. (Without it, each flush of the full
            // submission queue reaps right away, and the queue never fills.)
            assert!(
                stats.cq_overflows > 0,
                "the completion queue overflowed: {stats:?}"
            );
        }
    }
}

/// A receive with a deadline and no data: `TimedOut`, after the kernel completed the cancelled
/// operation — data sent afterwards is still in the socket, and the buffer is untouched.
#[test]
fn deadline_in_a_task_times_out_and_the_kernel_is_done() {
    for driver in drivers() {
        let exec = Exec::new(driver);
        let (a, mut b) = socketpair();
        let fa = a.as_raw_fd();
        let buf = Rc::new(RefCell::new(vec![0xAAu8; 32]));
        let buf2 = buf.clone();
        exec.spawn(move || {
            let start = Instant::now();
            let deadline = start + Duration::from_millis(50);
            let mut buf = buf2.borrow_mut();
            let err = submit(
                Op::Recv {
                    fd: fa,
                    buf: &mut buf,
                    flags: 0,
                },
                Some(deadline),
            )
            .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::TimedOut);
            assert!(start.elapsed() >= Duration::from_millis(50));
        });
        exec.run();
        assert_eq!(exec.driver.in_flight(), 0);
        b.set_nonblocking(false).unwrap();
        b.write_all(b"later").unwrap();
        let mut a = a;
        a.set_nonblocking(false).unwrap();
        let mut got = [0u8; 5];
        a.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"later");
        assert!(buf.borrow().iter().all(|&x| x == 0xAA));
    }
}

/// A cancelled task with a receive in flight: the receive is cancelled in the kernel, then the
/// task unwinds (its destructors run); the kernel does not consume later data.
#[test]
fn cancel_while_in_flight_unwinds_after_the_kernel_is_done() {
    for driver in drivers() {
        let exec = Exec::new(driver);
        let (a, mut b) = socketpair();
        let fa = a.as_raw_fd();
        let unwound = Rc::new(Cell::new(false));
        let returned = Rc::new(Cell::new(false));
        struct SetOnDrop(Rc<Cell<bool>>);
        impl Drop for SetOnDrop {
            fn drop(&mut self) {
                self.0.set(true);
            }
        }
        let (unwound2, returned2) = (unwound.clone(), returned.clone());
        let id = exec.spawn(move || {
            let _mark = SetOnDrop(unwound2);
            let mut buf = [0u8; 16];
            let _ = submit(
                Op::Recv {
                    fd: fa,
                    buf: &mut buf,
                    flags: 0,
                },
                None,
            );
            returned2.set(true);
        });
        exec.cancel_after(id, Duration::from_millis(30));
        exec.run();
        assert!(unwound.get(), "the task's frame was unwound");
        assert!(
            !returned.get(),
            "submit did not return to the cancelled task"
        );
        assert_eq!(&exec.cancelled.borrow()[..], &[id]);
        assert_eq!(exec.driver.in_flight(), 0);
        b.set_nonblocking(false).unwrap();
        b.write_all(b"after").unwrap();
        let mut a = a;
        a.set_nonblocking(false).unwrap();
        let mut got = [0u8; 5];
        a.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"after");
    }
}

/// Cancelled under an outer `CancelGuard`: `submit` does not unwind, it reports `ECANCELED`.
#[test]
fn cancel_under_an_outer_guard_reports_ecanceled() {
    let exec = Exec::new(UringDriver::new().unwrap());
    let (a, _b) = socketpair();
    let fa = a.as_raw_fd();
    let result = Rc::new(RefCell::new(None));
    let result2 = result.clone();
    let id = exec.spawn(move || {
        let _outer = spindle_park::defer_cancel();
        let mut buf = [0u8; 16];
        let r = submit(
            Op::Recv {
                fd: fa,
                buf: &mut buf,
                flags: 0,
            },
            None,
        );
        *result2.borrow_mut() = Some(r.map_err(|e| e.raw_os_error()));
    });
    exec.cancel_after(id, Duration::from_millis(20));
    exec.run();
    assert_eq!(*result.borrow(), Some(Err(Some(libc::ECANCELED))));
    assert_eq!(exec.driver.in_flight(), 0);
}

/// The deadline has passed before the operation was even submitted, but the data is there: the
/// operation and its cancel go to the kernel in the same enter, the receive completes first,
/// and its data is returned (never dropped on the floor).
#[test]
fn an_operation_that_completes_before_its_cancel_returns_its_data() {
    for driver in drivers() {
        let exec = Exec::new(driver);
        let (a, mut b) = socketpair();
        b.set_nonblocking(false).unwrap();
        b.write_all(b"ready").unwrap();
        let fa = a.as_raw_fd();
        exec.spawn(move || {
            let mut buf = [0u8; 16];
            let past = Instant::now() - Duration::from_millis(1);
            let n = submit(
                Op::Recv {
                    fd: fa,
                    buf: &mut buf,
                    flags: 0,
                },
                Some(past),
            )
            .unwrap();
            assert_eq!(&buf[..n], b"ready");
        });
        exec.run();
    }
}

/// Dropping the executor with a task parked in `submit`: the coroutine is unwound, and
/// `submit`'s drop guard cancels the operation and waits for the kernel before the frame goes.
#[test]
fn a_task_dropped_while_in_flight_waits_for_the_kernel() {
    let exec = Exec::new(UringDriver::new().unwrap());
    let (a, mut b) = socketpair();
    let fa = a.as_raw_fd();
    // A task that never finishes by itself; run the executor until it is parked, via a second
    // task that panics out of `run` after a while.
    exec.spawn(move || {
        let mut buf = [0u8; 16];
        let _ = submit(
            Op::Recv {
                fd: fa,
                buf: &mut buf,
                flags: 0,
            },
            None,
        );
    });
    exec.spawn(|| {
        spindle_park::park_timeout(Duration::from_millis(20));
        std::panic::resume_unwind(Box::new("stop"));
    });
    let stopped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| exec.run()));
    assert!(stopped.is_err());
    assert_eq!(exec.driver.in_flight(), 1);
    exec.drop_tasks(); // unwinds the parked task, in place
    assert_eq!(
        exec.driver.in_flight(),
        0,
        "the unwound submit waited for the kernel"
    );
    drop(exec);
    b.set_nonblocking(false).unwrap();
    b.write_all(b"after").unwrap();
    let mut a = a;
    a.set_nonblocking(false).unwrap();
    let mut got = [0u8; 5];
    a.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"after");
}

/// Ping-pong echo on one connection: `io_uring_enter` calls per request-response.
#[test]
fn ping_pong_syscalls() {
    const ROUNDS: usize = 2000;
    for driver in drivers() {
        let defer = driver.is_defer_taskrun();
        let exec = Exec::new(driver);
        let (a, b) = socketpair();
        let fa = a.as_raw_fd();
        exec.spawn(move || {
            let mut buf = [0u8; 64];
            loop {
                let n = submit(
                    Op::Recv {
                        fd: fa,
                        buf: &mut buf,
                        flags: 0,
                    },
                    None,
                )
                .unwrap();
                if n == 0 {
                    break;
                }
                submit(
                    Op::Send {
                        fd: fa,
                        buf: &buf[..n],
                        flags: 0,
                    },
                    None,
                )
                .unwrap();
            }
        });
        let client = std::thread::spawn(move || {
            let mut b = b;
            b.set_nonblocking(false).unwrap();
            let mut buf = [0u8; 64];
            for _ in 0..ROUNDS {
                b.write_all(&[7u8; 64]).unwrap();
                b.read_exact(&mut buf).unwrap();
            }
        });
        let before = exec.driver.stats();
        // The client drops its socket when done: the server's receive returns 0 and it ends.
        exec.run();
        client.join().unwrap();
        let after = exec.driver.stats();
        let per_request = (after.enters - before.enters) as f64 / ROUNDS as f64;
        eprintln!(
            "ping-pong (defer_taskrun = {defer}): {per_request:.2} io_uring_enter per request, \
             {:.2} SQEs per request",
            (after.submissions - before.submissions) as f64 / ROUNDS as f64
        );
        assert!(per_request <= 2.5, "{per_request} enters per request");
        drop(a);
    }
}

#[test]
fn one_multishot_accept_serves_many_connections() {
    // As many as the accept queue takes ahead: more would let a burst fill it, cancel the
    // request and arm a second one for the rest (the read-ahead bound, not a failure).
    const N: usize = spindle_io::driver::ACCEPT_READ_AHEAD;
    for driver in drivers() {
        let exec = Exec::new(driver);
        let listener = Rc::new(spindle_io::net::TcpListener::bind("127.0.0.1:0").unwrap());
        let addr = listener.local_addr().unwrap();
        let clients = std::thread::spawn(move || {
            (0..N)
                .map(|_| std::net::TcpStream::connect(addr).unwrap())
                .collect::<Vec<_>>()
        });
        let accepted = Rc::new(Cell::new(0));
        {
            let (listener, accepted) = (listener.clone(), accepted.clone());
            exec.spawn(move || {
                for _ in 0..N {
                    let (_conn, peer) = listener.accept().unwrap();
                    assert!(peer.ip().is_loopback());
                    accepted.set(accepted.get() + 1);
                }
            });
        }
        exec.run();
        assert_eq!(accepted.get(), N);
        // One request in the kernel accepted them all.
        assert_eq!(exec.driver.stats().multishot_accepts, 1);
        drop(clients.join().unwrap());
    }
}
