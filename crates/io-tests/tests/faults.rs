//! Faults around IO, each a test whose name says what is expected: signals interrupting every
//! blocking syscall (`EINTR`), wake-ups with no data (`EAGAIN` storms), io_uring refused by the
//! kernel. Each runs in a child process (a re-executed copy of this binary running one ignored
//! `child_*` test), so the signal handlers and seccomp filters it installs touch nobody else.
//!
//! Covered elsewhere: `EMFILE` on accept (`conformance.rs`, `emfile_on_accept`: the error, no
//! spin, recovery, in every mode); a completion queue overflow survived
//! (`crates/io-uring/tests/tasks.rs`, `tiny_ring_*`: 100 receives on an 8-entry queue, all
//! complete, `UringStats::cq_overflows > 0`).
#![cfg(target_os = "linux")]

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use spindle_io::net::{TcpListener, TcpStream, UdpSocket};
use spindle_rt::{IoBackend, Runtime};

/// Runs the ignored test `child` in a child process with `env` set; returns what it did.
fn run_child(child: &str, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--ignored",
        "--exact",
        child,
        "--nocapture",
        "--test-threads=1",
    ])
    .env_remove("SPINDLE_IO");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// In a child: a panic on any thread ends the process at once (the other threads would wait
/// for ever for what the panicking one no longer does).
fn exit_on_panic() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        std::process::exit(101);
    }));
}

fn assert_child_ok(out: &Output) {
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("CHILD OK"),
        "child failed ({:?})\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn backend(mode: &str) -> IoBackend {
    match mode {
        "epoll" => IoBackend::Epoll,
        "uring" => IoBackend::IoUring,
        "polling" => IoBackend::Polling,
        m => panic!("no mode {m}"),
    }
}

/// Bytes that depend on their position and `seed`, so loss or reordering shows.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(seed) >> 56) as u8)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// EINTR

/// Signals the handler has seen.
static SIGNALS: AtomicUsize = AtomicUsize::new(0);

extern "C" fn count_signal(_: libc::c_int) {
    // Async-signal-safe: one atomic add, nothing else.
    SIGNALS.fetch_add(1, Ordering::Relaxed);
}

/// Installs a `SIGUSR1` handler *without* `SA_RESTART`: every blocking syscall the signal
/// lands in fails with `EINTR` instead of being restarted by the kernel.
fn install_interrupting_handler() {
    // SAFETY: a zeroed sigaction is valid; the handler only touches an atomic, so it is
    // async-signal-safe; the pointers are valid for the calls.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = count_signal as extern "C" fn(libc::c_int) as usize;
        sa.sa_flags = 0;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
    }
}

/// Threads that get signalled. A thread removes itself (under the lock) before it exits, so
/// the signaller never names a thread that is gone.
type Targets = Arc<Mutex<Vec<libc::pthread_t>>>;

fn register(targets: &Targets) {
    // SAFETY: pthread_self has no preconditions.
    targets
        .lock()
        .unwrap()
        .push(unsafe { libc::pthread_self() });
}

fn deregister(targets: &Targets) {
    // SAFETY: pthread_self has no preconditions.
    let me = unsafe { libc::pthread_self() };
    targets.lock().unwrap().retain(|&t| t != me);
}

/// Sends `SIGUSR1` to every target every 200 µs until `stop`.
fn signaller(targets: Targets, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            for &t in targets.lock().unwrap().iter() {
                // SAFETY: `t` is a live thread: threads deregister under this lock before
                // they exit.
                unsafe { libc::pthread_kill(t, libc::SIGUSR1) };
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    })
}

/// `write_all` that fails on `Interrupted` (std's retries it, hiding the error).
fn write_all(s: &mut TcpStream, mut data: &[u8]) {
    while !data.is_empty() {
        let n = s.write(data).expect("a write under signals");
        data = &data[n..];
    }
}

/// `read_exact` that fails on `Interrupted` (std's retries it, hiding the error).
fn read_exact(s: &mut TcpStream, mut buf: &mut [u8]) {
    while !buf.is_empty() {
        let n = s.read(buf).expect("a read under signals");
        assert!(n > 0, "early EOF");
        buf = &mut buf[n..];
    }
}

/// Echoes every connection of `listener` until each one's EOF.
fn echo_server(listener: TcpListener, conns: usize) {
    let handles: Vec<_> = (0..conns)
        .map(|_| {
            let (mut s, _) = listener.accept().expect("accept under signals");
            spindle_rt::spawn(move || {
                let mut buf = [0u8; 4096];
                loop {
                    let n = s.read(&mut buf).expect("server read under signals");
                    if n == 0 {
                        break;
                    }
                    write_all(&mut s, &buf[..n]);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

/// Sends `s` one byte every 2 ms, 50 in all, so that its reader waits (in `poll(2)`, or its
/// worker in `epoll_wait`/`io_uring_enter`) long enough for signals to land there.
fn trickle(mut s: TcpStream) {
    for i in 0..50u8 {
        spindle_rt::sleep(Duration::from_millis(2));
        write_all(&mut s, &[i]);
    }
}

/// Reads what [`trickle`] sends.
fn read_trickle(mut s: TcpStream) {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    for i in 0..50u8 {
        let mut b = [0u8; 1];
        // `read`, not `read_exact`: std's `read_exact` and `write_all` retry `Interrupted`
        // themselves, which would hide an `EINTR` the library let through.
        assert_eq!(s.read(&mut b).expect("a slow read under signals"), 1);
        assert_eq!(b[0], i, "a byte lost under signals");
    }
}

/// 256 round trips of 4 KiB over `s`, every byte checked.
fn client_round_trips(mut s: TcpStream, seed: u64) {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let data = pattern(seed, 256 * 4096);
    let mut back = vec![0u8; 4096];
    for chunk in data.chunks(4096) {
        write_all(&mut s, chunk);
        read_exact(&mut s, &mut back);
        assert_eq!(&back[..], chunk, "data lost or reordered under signals");
    }
}

/// Runs the EINTR workload on a runtime with `mode`'s backend while every thread involved is
/// signalled: accepts, connects, reads and writes in coroutines (the driver's
/// `epoll_wait`/`io_uring_enter` park interrupted), timers, a plain thread doing IO outside the
/// runtime (`poll(2)`), and a plain thread parked on a channel.
fn eintr_workload(mode: &str) {
    let targets: Targets = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let rt = {
        let (start, end) = (targets.clone(), targets.clone());
        Runtime::builder()
            .workers(2)
            .io(backend(mode))
            .on_thread_start(move || register(&start))
            .on_thread_stop(move || deregister(&end))
            .build()
            .unwrap()
    };
    register(&targets);
    let sig = signaller(targets.clone(), stop.clone());
    let before = SIGNALS.load(Ordering::Relaxed);

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let trickle_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let trickle_addr: SocketAddr = trickle_listener.local_addr().unwrap();
    // Outside the runtime: spindle-io waits in poll(2); spindle-sync parks the thread.
    let (tx, rx) = spindle_sync::mpsc::channel::<u32>();
    let plain_io = {
        let targets = targets.clone();
        std::thread::spawn(move || {
            register(&targets);
            let s = TcpStream::connect(&addr).expect("connect outside a runtime under signals");
            client_round_trips(s, 99);
            let s = TcpStream::connect(&trickle_addr).expect("connect outside a runtime");
            read_trickle(s);
            deregister(&targets);
        })
    };
    let plain_park = {
        let targets = targets.clone();
        std::thread::spawn(move || {
            register(&targets);
            for i in 0..100 {
                assert_eq!(rx.recv().expect("a parked receive under signals"), i);
            }
            deregister(&targets);
        })
    };
    rt.block_on(move || {
        let server = spindle_rt::spawn(move || echo_server(listener, 4));
        let trickler = spindle_rt::spawn(move || {
            let conns: Vec<_> = (0..2)
                .map(|_| trickle_listener.accept().expect("accept under signals").0)
                .map(|s| spindle_rt::spawn(move || trickle(s)))
                .collect();
            conns.into_iter().for_each(|h| h.join().unwrap());
        });
        let slow_reader = spindle_rt::spawn(move || {
            read_trickle(TcpStream::connect(&trickle_addr).expect("connect under signals"));
        });
        let clients: Vec<_> = (0..3)
            .map(|k| {
                spindle_rt::spawn(move || {
                    let s = TcpStream::connect(&addr).expect("connect under signals");
                    client_round_trips(s, k);
                })
            })
            .collect();
        let sleeper = spindle_rt::spawn(move || {
            for i in 0..100 {
                let start = Instant::now();
                spindle_rt::sleep(Duration::from_millis(2));
                assert!(
                    start.elapsed() >= Duration::from_millis(2),
                    "a sleep cut short"
                );
                tx.send(i).unwrap();
            }
        });
        for c in clients {
            c.join().unwrap();
        }
        sleeper.join().unwrap();
        slow_reader.join().unwrap();
        trickler.join().unwrap();
        server.join().unwrap();
    });
    plain_io.join().unwrap();
    plain_park.join().unwrap();
    deregister(&targets);
    stop.store(true, Ordering::Relaxed);
    sig.join().unwrap();
    let seen = SIGNALS.load(Ordering::Relaxed) - before;
    println!("{mode}: {seen} signals handled");
    assert!(
        seen > 200,
        "only {seen} signals: the test did not interrupt much"
    );
    drop(rt);
}

/// A signal handler without `SA_RESTART` and a thread signalling the workers, the caller and
/// two plain threads every 200 µs: no operation fails with `Interrupted`, no byte is lost, no
/// sleep is cut short, no message is missed — on epoll, io_uring and outside the runtime.
#[test]
fn eintr_storm_fails_nothing_and_loses_nothing() {
    let out = run_child("child_eintr", &[]);
    assert_child_ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("failed"),
        "a driver reported a failure:\n{stderr}"
    );
}

#[test]
#[ignore = "run by eintr_storm_fails_nothing_and_loses_nothing in a child process"]
fn child_eintr() {
    exit_on_panic();
    install_interrupting_handler();
    for mode in ["epoll", "uring"] {
        eintr_workload(mode);
    }
    println!("CHILD OK");
}

// ---------------------------------------------------------------------------------------------
// EAGAIN storms

/// CPU time used by the whole process (`RUSAGE_SELF`) or this thread (`RUSAGE_THREAD`).
fn cpu_time(who: libc::c_int) -> Duration {
    // SAFETY: a zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid rusage pointer.
    assert_eq!(unsafe { libc::getrusage(who, &mut ru) }, 0);
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// A coroutine waits on a UDP socket that wakes up thousands of times without data for it: a
/// thread sending a datagram every ~100 µs and a thread reading the same socket (a `dup`)
/// that takes most of them first, so the coroutine's reads mostly find `EAGAIN`. The waiting
/// side (the worker) must sleep between wake-ups: its CPU time stays a fraction of the wall
/// time, where a busy loop would use all of it.
#[test]
fn eagain_storm_does_not_busy_loop() {
    assert_child_ok(&run_child("child_eagain_storm", &[]));
}

#[test]
#[ignore = "run by eagain_storm_does_not_busy_loop in a child process"]
fn child_eagain_storm() {
    exit_on_panic();
    for mode in ["epoll", "uring", "polling"] {
        let rt = Runtime::builder()
            .workers(1)
            .io(backend(mode))
            .build()
            .unwrap();
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = socket.local_addr().unwrap();
        // SAFETY: dup of an open descriptor; the new one is owned by `stealer_socket` only.
        let dup = unsafe { libc::dup(socket.as_raw_fd()) };
        assert!(dup >= 0);
        // SAFETY: `dup` is a fresh descriptor that nothing else owns.
        let stealer_socket = unsafe { std::net::UdpSocket::from_raw_fd(dup) };
        let stop = Arc::new(AtomicBool::new(false));
        let stealer = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let start_cpu = cpu_time(libc::RUSAGE_THREAD);
                let mut stolen = 0u64;
                let mut pfd = libc::pollfd {
                    fd: stealer_socket.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                let mut buf = [0u8; 16];
                while !stop.load(Ordering::Relaxed) {
                    // SAFETY: one valid pollfd.
                    if unsafe { libc::poll(&mut pfd, 1, 10) } > 0 {
                        // Non-blocking (the flag is on the shared open file description).
                        if stealer_socket.recv(&mut buf).is_ok() {
                            stolen += 1;
                        }
                    }
                }
                (stolen, cpu_time(libc::RUSAGE_THREAD) - start_cpu)
            })
        };
        let sender = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let start_cpu = cpu_time(libc::RUSAGE_THREAD);
                let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                let mut sent = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    tx.send_to(b"x", addr).unwrap();
                    sent += 1;
                    std::thread::sleep(Duration::from_micros(100));
                }
                (sent, cpu_time(libc::RUSAGE_THREAD) - start_cpu)
            })
        };
        let window = Duration::from_millis(500);
        let cpu_before = cpu_time(libc::RUSAGE_SELF);
        let wall = Instant::now();
        let received = rt.block_on(move || {
            let received = Arc::new(AtomicUsize::new(0));
            let r = received.clone();
            let waiter = spindle_rt::spawn(move || {
                let mut buf = [0u8; 16];
                loop {
                    match socket.recv(&mut buf) {
                        Ok(_) => {
                            r.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => break,
                        Err(e) => panic!("recv in an EAGAIN storm: {e}"),
                    }
                    if wall.elapsed() >= window {
                        break;
                    }
                    socket
                        .set_read_timeout(Some(
                            window
                                .saturating_sub(wall.elapsed())
                                .max(Duration::from_millis(1)),
                        ))
                        .unwrap();
                }
            });
            waiter.join().unwrap();
            received.load(Ordering::Relaxed)
        });
        let wall = wall.elapsed();
        let cpu_total = cpu_time(libc::RUSAGE_SELF) - cpu_before;
        stop.store(true, Ordering::Relaxed);
        let (stolen, stealer_cpu) = stealer.join().unwrap();
        let (sent, sender_cpu) = sender.join().unwrap();
        let waiting_cpu = cpu_total.saturating_sub(stealer_cpu + sender_cpu);
        println!(
            "{mode}: sent {sent}, stolen {stolen}, received by the coroutine {received}; \
             waiting side {waiting_cpu:?} CPU in {wall:?}"
        );
        assert!(sent > 500, "the storm was too weak: {sent} datagrams");
        assert!(
            waiting_cpu < wall * 2 / 5,
            "{mode}: the waiting side used {waiting_cpu:?} of CPU in {wall:?}: a busy loop"
        );
        drop(rt);
    }
    println!("CHILD OK");
}

// ---------------------------------------------------------------------------------------------
// io_uring refused

/// Makes `io_uring_setup` fail with `errno` for this thread and the threads it starts from now
/// on (a seccomp filter, as a container's profile does). Returns false where seccomp is not
/// available.
fn forbid_io_uring(errno: i32) -> bool {
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let filter = [
        // A = seccomp_data.nr (offset 0)
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: libc::SYS_io_uring_setup as u32,
        },
        stmt(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | (errno as u32 & libc::SECCOMP_RET_DATA),
        ),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: plain prctls; `prog` points at `filter`, both alive for the call (the kernel
    // copies the program).
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return false;
        }
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &prog as *const libc::sock_fprog,
        ) == 0
    }
}

/// A kernel that refuses io_uring (`EPERM` from a seccomp profile, `ENOSYS` where it is not
/// built in): the default runtime falls back to epoll, says so in exactly one stderr line for
/// the whole process (however many runtimes are built), naming the cause, and serves IO; an
/// explicit request for io_uring is an error that names the cause.
#[test]
fn io_uring_refused_falls_back_to_epoll_with_one_log_line() {
    for (errno, name, needle) in [
        (libc::EPERM, "EPERM", "seccomp"),
        (libc::ENOSYS, "ENOSYS", "no io_uring"),
    ] {
        let out = run_child(
            "child_io_uring_refused",
            &[("SPINDLE_FAULT_ERRNO", &errno.to_string())],
        );
        assert_child_ok(&out);
        let stdout = String::from_utf8_lossy(&out.stdout);
        if stdout.contains("NO SECCOMP") {
            eprintln!("seccomp is unavailable here: io_uring refusal not tested");
            return;
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<_> = stderr
            .lines()
            .filter(|l| l.starts_with("spindle:"))
            .collect();
        assert_eq!(
            lines.len(),
            1,
            "{name}: expected one line, stderr:\n{stderr}"
        );
        assert!(lines[0].contains("io_uring"), "{}", lines[0]);
        assert!(lines[0].contains(name), "{name} not named: {}", lines[0]);
        assert!(lines[0].contains(needle), "{needle:?} not in: {}", lines[0]);
        assert!(lines[0].contains("falling back"), "{}", lines[0]);
    }
}

#[test]
#[ignore = "run by io_uring_refused_falls_back_to_epoll_with_one_log_line in a child process"]
fn child_io_uring_refused() {
    exit_on_panic();
    let errno: i32 = std::env::var("SPINDLE_FAULT_ERRNO")
        .unwrap()
        .parse()
        .unwrap();
    if !forbid_io_uring(errno) {
        println!("NO SECCOMP");
        println!("CHILD OK");
        return;
    }
    // The explicit choice is an error that says why.
    let Err(err) = Runtime::builder().workers(1).io(IoBackend::IoUring).build() else {
        panic!("io_uring was refused, yet an io_uring runtime started");
    };
    assert_eq!(
        std::error::Error::source(&err)
            .and_then(|e| e.downcast_ref::<std::io::Error>())
            .and_then(|e| e.raw_os_error())
            .or_else(|| {
                std::error::Error::source(&err)
                    .and_then(|e| e.downcast_ref::<std::io::Error>())
                    .and_then(|e| e.get_ref())
                    .and_then(|e| e.downcast_ref::<spindle_io_uring::SetupError>())
                    .and_then(|e| e.os_error())
            }),
        Some(errno),
        "{err}"
    );
    // It says why, and that it is the default choice that would fall back.
    let msg = err.to_string();
    assert!(msg.contains("io_uring_setup failed"), "{msg}");
    assert!(msg.contains("IoBackend::Auto"), "{msg}");
    // The default falls back, twice, with one line in all.
    for _ in 0..2 {
        let rt = Runtime::builder().workers(2).build().unwrap();
        assert_eq!(rt.io_backend(), "epoll");
        let echoed = rt.block_on(|| {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let server = spindle_rt::spawn(move || echo_server(listener, 1));
            let mut c = TcpStream::connect(&addr).unwrap();
            c.write_all(b"fallback").unwrap();
            let mut back = [0u8; 8];
            c.read_exact(&mut back).unwrap();
            drop(c);
            server.join().unwrap();
            back
        });
        assert_eq!(&echoed, b"fallback");
    }
    println!("CHILD OK");
}
