//! Faults in a runtime, each a test whose name says what is expected: stack overflow in a
//! runtime coroutine, spawning out of address space or at the `vm.max_map_count` ceiling, a
//! panic while holding a spindle `Mutex`, `fork()`, and SIGTERM to a server (the `graceful`
//! example). Those that crash, lower limits or install signal handlers run in a child process
//! (a re-executed copy of this binary running one ignored `child_*` test).
//!
//! Covered elsewhere: overflow of every stack kind outside a runtime and a panic in a
//! destructor during a forced unwind (`crates/coro/tests/stacks.rs`), the stack errors
//! themselves (`crates/stack/tests/exhaustion.rs`), `std::thread` panics while holding a
//! `Mutex`/`RwLock` (`crates/sync/tests/primitives.rs`, `*_no_poisoning`).
#![cfg(target_os = "linux")]

#[allow(dead_code)]
#[path = "../examples/graceful.rs"]
mod graceful;

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use spindle_rt::{Builder, JoinError, Runtime, StackKind};

fn child_command(child: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--ignored",
        "--exact",
        child,
        "--nocapture",
        "--test-threads=1",
    ]);
    // qemu-user refuses io_uring: the automatic IO choice would fall back to epoll and log a
    // `spindle:` line of its own, which the children's checks of their stderr would count.
    if common::emulator().is_some() && std::env::var_os("SPINDLE_IO").is_none() {
        cmd.env("SPINDLE_IO", "epoll");
    }
    cmd
}

fn run_child(child: &str) -> Output {
    child_command(child).output().unwrap()
}

fn describe(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn assert_child_ok(out: &Output) {
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("CHILD OK"),
        "child failed: {}",
        describe(out)
    );
}

/// In a child: a panic on any thread ends the process at once.
fn exit_on_panic() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        std::process::exit(101);
    }));
}

/// In a child that is meant to crash: no core file.
fn no_core_dumps() {
    let zero = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid rlimit; lowering our own limit is always allowed.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &zero) };
}

// ---------------------------------------------------------------------------------------------
// Stack overflow

#[inline(never)]
fn recurse(depth: usize) -> usize {
    let mut buf = [0u8; 1024];
    buf[depth % 1024] = depth as u8;
    std::hint::black_box(&mut buf);
    if depth == 0 {
        0
    } else {
        recurse(depth - 1) + usize::from(buf[0])
    }
}

/// A coroutine of a runtime that overflows its stack: one `spindle:` line naming it, then
/// `SIGABRT` (not a plain `SIGSEGV`, not a hang).
#[test]
fn stack_overflow_in_a_runtime_coroutine_prints_one_line_and_aborts() {
    assert_one_overflow_report(&run_child("child_stack_overflow"), "'deep-recursion'");
}

/// The child aborted (`SIGABRT`) after one `spindle:` line saying that the coroutine `named`
/// overflowed its stack.
fn assert_one_overflow_report(out: &Output, named: &str) {
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGABRT),
        "{}",
        describe(out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<_> = stderr
        .lines()
        .filter(|l| l.starts_with("spindle:"))
        .collect();
    assert_eq!(lines.len(), 1, "{}", describe(out));
    assert!(lines[0].contains("overflowed"), "{}", lines[0]);
    assert!(lines[0].contains(named), "{}", lines[0]);
}

#[test]
#[ignore = "run by stack_overflow_in_a_runtime_coroutine_prints_one_line_and_aborts"]
fn child_stack_overflow() {
    no_core_dumps();
    let rt = Runtime::builder().workers(2).build().unwrap();
    rt.block_on(|| {
        let h = Builder::new()
            .name("deep-recursion")
            .stack_size(64 * 1024)
            .spawn(|| recurse(usize::MAX / 2))
            .unwrap();
        let _ = h.join();
    });
    println!("CHILD OK (should have aborted)");
}

/// The same on the runtime's default stack, where a task starts on a carrier (a coroutine
/// that ran an earlier task): the report names the task that overflowed, not the first one the
/// carrier ran.
#[test]
fn stack_overflow_on_a_carrier_names_the_task_that_overflowed() {
    assert_one_overflow_report(
        &run_child("child_stack_overflow_on_a_carrier"),
        "'second-on-the-carrier'",
    );
}

#[test]
#[ignore = "run by stack_overflow_on_a_carrier_names_the_task_that_overflowed"]
fn child_stack_overflow_on_a_carrier() {
    no_core_dumps();
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.block_on(|| {
        let first = Builder::new().name("first-on-the-carrier").spawn(|| 1);
        assert_eq!(first.unwrap().join().unwrap(), 1);
        let h = Builder::new()
            .name("second-on-the-carrier")
            .spawn(|| recurse(usize::MAX / 2))
            .unwrap();
        let _ = h.join();
    });
    println!("CHILD OK (should have aborted)");
}

// ---------------------------------------------------------------------------------------------
// Out of address space / mappings

/// Coroutines that keep running while the spawning fails: each sleeps 50 times 2 ms and
/// returns its number.
fn keepers(n: usize) -> Vec<spindle_rt::JoinHandle<usize>> {
    (0..n)
        .map(|i| {
            spindle_rt::spawn(move || {
                for _ in 0..50 {
                    spindle_rt::sleep(Duration::from_millis(2));
                }
                i
            })
        })
        .collect()
}

/// A growable stack that reserves 16 MiB of address space (and two mappings) up front: the
/// quickest way to reach `RLIMIT_AS` or the mapping ceiling.
const BIG_GROWABLE: StackKind = StackKind::Growable {
    initial: 16 * 1024,
    max: 16 * 1024 * 1024,
};

/// Spawns coroutines on 16 MiB growable stacks (each reserves its maximum) until a spawn
/// fails (`reserve_stack`: the stack is taken at spawn); the successful ones wait on
/// `release`. Returns the error and the handles.
fn spawn_until_refused(
    release: &Arc<AtomicBool>,
    limit: usize,
) -> (std::io::Error, Vec<spindle_rt::JoinHandle<()>>) {
    let mut hogs = Vec::new();
    loop {
        let release = release.clone();
        match Builder::new()
            .stack(BIG_GROWABLE)
            .reserve_stack()
            .spawn(move || {
                while !release.load(Ordering::Relaxed) {
                    spindle_rt::sleep(Duration::from_millis(1));
                }
            }) {
            Ok(h) => hogs.push(h),
            Err(e) => return (e, hogs),
        }
        assert!(hogs.len() < limit, "the limit was never hit");
    }
}

/// Spawns and joins one coroutine on a 16 MiB growable stack.
fn spawn_one_growable() -> std::io::Result<()> {
    Builder::new()
        .stack(BIG_GROWABLE)
        .spawn(|| ())?
        .join()
        .map_err(|e| std::io::Error::other(e.to_string()))
}

/// Without `reserve_stack` the spawn succeeds and the coroutine, which cannot get its stack
/// when it is to run, fails: its join says why (the same message `reserve_stack` gives), and
/// its closure never ran.
fn lazy_spawn_fails_at_join(expect_in_message: &str) {
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    let h = Builder::new()
        .stack(BIG_GROWABLE)
        .spawn(move || r.store(true, Ordering::Relaxed))
        .expect("the spawn itself succeeds: the stack is taken at the first run");
    assert_no_stack(h.join(), expect_in_message);
    assert!(
        !ran.load(Ordering::Relaxed),
        "the closure ran without a stack"
    );
}

/// A join that failed for want of a stack, with a message that says `expect_in_message`.
fn assert_no_stack(joined: Result<(), JoinError>, expect_in_message: &str) {
    match joined {
        Err(JoinError::NoStack(e)) => {
            let msg = e.to_string();
            assert!(msg.contains(expect_in_message), "{msg}");
        }
        other => panic!("expected JoinError::NoStack, got {other:?}"),
    }
}

/// Plain spawns (the runtime's default stack: each task starts on a carrier of its worker)
/// that wait on `release`, until one gets no carrier — none idle, and no stack to make one
/// on: its join says why (`expect_in_message`), and its closure never ran. Returns the
/// waiting ones.
fn plain_spawn_fails_at_join(
    expect_in_message: &str,
    release: &Arc<AtomicBool>,
) -> Vec<spindle_rt::JoinHandle<()>> {
    let mut waiting = Vec::new();
    loop {
        let ran = Arc::new(AtomicBool::new(false));
        let (r, release) = (ran.clone(), release.clone());
        let h = spindle_rt::spawn(move || {
            r.store(true, Ordering::Relaxed);
            while !release.load(Ordering::Relaxed) {
                spindle_rt::sleep(Duration::from_millis(1));
            }
        });
        // Time to start (or to fail to).
        spindle_rt::sleep(Duration::from_millis(2));
        if !h.is_finished() {
            waiting.push(h);
            assert!(waiting.len() < 2000, "a carrier was always had");
            continue;
        }
        assert_no_stack(h.join(), expect_in_message);
        assert!(
            !ran.load(Ordering::Relaxed),
            "the closure ran without a carrier"
        );
        return waiting;
    }
}

/// `RLIMIT_AS` reached: `Builder::spawn` returns an error that names the limit and what to
/// do; the coroutines already running go on and finish; once memory is free, spawning works
/// again.
#[test]
fn spawn_out_of_address_space_is_an_error_and_the_runtime_keeps_serving() {
    if common::skipped_under_emulation(
        "spawn_out_of_address_space_is_an_error_and_the_runtime_keeps_serving",
        "an RLIMIT_AS enforced by the kernel (it keeps the limit to itself and fails its own \
         mappings with ENOMEM)",
    ) {
        return;
    }
    assert_child_ok(&run_child("child_spawn_enomem"));
}

#[test]
#[ignore = "run by spawn_out_of_address_space_is_an_error_and_the_runtime_keeps_serving"]
fn child_spawn_enomem() {
    exit_on_panic();
    // One malloc arena for the whole process. A thread's first allocation otherwise makes an
    // arena of its own, which reserves 64 MiB of address space (128 MiB for a moment, while it
    // aligns it): a worker or carrier thread allocating for the first time after the limit is
    // set would take the room the test leaves for stacks, and the first spawn would fail with
    // plain ENOMEM instead of reaching the limit.
    #[cfg(target_env = "gnu")]
    // SAFETY: `mallopt` with a valid parameter; glibc takes its own lock, and the setting
    // only caps how many arenas are made from now on.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
    let rt = Runtime::builder().workers(2).build().unwrap();
    rt.block_on(|| {
        let keepers = keepers(8);
        // 128 MiB above what the process uses now (threads and pools already exist).
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: usize = statm.split_whitespace().next().unwrap().parse().unwrap();
        let in_use = pages * 4096;
        let lim = libc::rlimit {
            rlim_cur: (in_use + 128 * 1024 * 1024) as libc::rlim_t,
            rlim_max: libc::RLIM_INFINITY,
        };
        // SAFETY: a valid rlimit; lowering our own soft limit is allowed.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) }, 0);
        let release = Arc::new(AtomicBool::new(false));
        let (err, hogs) = spawn_until_refused(&release, 64);
        let msg = err.to_string();
        println!("refused after {} hogs: {msg}", hogs.len());
        assert!(msg.contains("RLIMIT_AS"), "{msg}");
        assert!(msg.contains("ulimit -v"), "{msg}");
        lazy_spawn_fails_at_join("RLIMIT_AS");
        let waiting = plain_spawn_fails_at_join("RLIMIT_AS", &release);
        println!(
            "a plain spawn got no carrier after {} waiting",
            waiting.len()
        );
        for (i, k) in keepers.into_iter().enumerate() {
            assert_eq!(k.join().unwrap(), i, "a running coroutine did not finish");
        }
        release.store(true, Ordering::Relaxed);
        let n = hogs.len();
        hogs.into_iter().for_each(|h| h.join().unwrap());
        waiting.into_iter().for_each(|h| h.join().unwrap());
        assert!(n > 0);
        // Freed: spawning works again.
        spawn_one_growable().expect("spawning recovers");
        spindle_rt::spawn(|| ())
            .join()
            .expect("plain spawns recover");
    });
    println!("CHILD OK");
}

/// The `vm.max_map_count` ceiling (reached by filling this process's mappings, not by
/// lowering the sysctl): `Builder::spawn` returns the error naming the sysctl and the fix; the
/// running coroutines finish; with mappings freed, spawning works again.
#[test]
fn spawn_at_the_map_count_ceiling_is_an_error_and_the_runtime_keeps_serving() {
    if common::skipped_under_emulation(
        "spawn_at_the_map_count_ceiling_is_an_error_and_the_runtime_keeps_serving",
        "one kernel mapping per guest mapping (it reserves the guest's address space itself)",
    ) {
        return;
    }
    assert_child_ok(&run_child("child_spawn_map_count"));
}

#[test]
#[ignore = "run by spawn_at_the_map_count_ceiling_is_an_error_and_the_runtime_keeps_serving"]
fn child_spawn_map_count() {
    exit_on_panic();
    let max: usize = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    if max > 300_000 {
        // Filling that many mappings would take too long for a unit test.
        println!("vm.max_map_count = {max}: not filled");
        println!("CHILD OK");
        return;
    }
    let rt = Runtime::builder().workers(2).build().unwrap();
    rt.block_on(move || {
        let keepers = keepers(8);
        // Fill the mappings (two per one-page guarded stack, never touched) until none is left.
        let mut filler = Vec::with_capacity(max / 2 + 100);
        let fill_err = loop {
            match spindle_stack::FixedStack::new(1) {
                Ok(s) => filler.push(s),
                Err(e) => break e,
            }
            assert!(filler.len() <= max / 2, "more stacks than the limit allows");
        };
        println!("filled {} stacks: {fill_err}", filler.len());
        let release = Arc::new(AtomicBool::new(false));
        // A few more may fit (a new reservation can merge with a neighbouring mapping).
        let (err, hogs) = spawn_until_refused(&release, 1000);
        let msg = err.to_string();
        assert!(msg.contains("vm.max_map_count"), "{msg}");
        assert!(msg.contains("sysctl -w vm.max_map_count"), "{msg}");
        lazy_spawn_fails_at_join("vm.max_map_count");
        for (i, k) in keepers.into_iter().enumerate() {
            assert_eq!(k.join().unwrap(), i, "a running coroutine did not finish");
        }
        filler.truncate(filler.len() - 64);
        release.store(true, Ordering::Relaxed);
        hogs.into_iter().for_each(|h| h.join().unwrap());
        spawn_one_growable().expect("spawning recovers");
        drop(filler);
        println!("refused with: {msg}");
    });
    println!("CHILD OK");
}

// ---------------------------------------------------------------------------------------------
// A panic while holding a Mutex

/// A coroutine panics while holding a `spindle_sync::Mutex` that another coroutine waits for:
/// no poisoning (documented) — the waiter gets the lock and the data as the panicking holder
/// left it; the panic reaches the joiner. The same for a coroutine cancelled while holding it.
#[test]
fn a_panic_while_holding_a_mutex_hands_the_lock_and_data_to_the_next_locker() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    rt.block_on(|| {
        let m = Arc::new(spindle_sync::Mutex::new(1));
        let holder = {
            let m = m.clone();
            spindle_rt::spawn(move || {
                let mut g = m.lock();
                *g = 2;
                spindle_rt::sleep(Duration::from_millis(20)); // the waiter queues meanwhile
                panic!("while holding the lock");
            })
        };
        spindle_rt::sleep(Duration::from_millis(5));
        let waiter = {
            let m = m.clone();
            spindle_rt::spawn(move || *m.lock())
        };
        assert!(holder.join().is_err(), "the panic reaches the joiner");
        assert_eq!(
            waiter.join().unwrap(),
            2,
            "the waiter sees the holder's write"
        );
        assert!(!m.is_locked());

        // Cancelled while holding it: the unwind releases it too.
        let holder = {
            let m = m.clone();
            spindle_rt::spawn(move || {
                let mut g = m.lock();
                *g = 3;
                spindle_rt::sleep(Duration::from_secs(10));
            })
        };
        spindle_rt::sleep(Duration::from_millis(5));
        holder.cancel();
        assert!(holder.join().is_err());
        let start = Instant::now();
        assert_eq!(*m.lock(), 3);
        assert!(start.elapsed() < Duration::from_secs(1));
    });
}

// ---------------------------------------------------------------------------------------------
// fork()

/// `fork()` in a process whose runtime is running: the child builds a fresh runtime and uses
/// it (coroutines, timers, TCP); the parent's runtime is inert there (its workers do not
/// exist in the child: a coroutine spawned on it never runs) and is left alone (never
/// dropped: joining its workers would wait for ever). The parent's runtime goes on unharmed.
#[test]
fn fork_child_builds_and_uses_a_fresh_runtime() {
    if common::skipped_under_emulation(
        "fork_child_builds_and_uses_a_fresh_runtime",
        "fork() in a multi-threaded process (qemu-user 7.2 fails an assertion in its CPU \
         setup in the child)",
    ) {
        return;
    }
    assert_child_ok(&run_child("child_fork"));
}

#[test]
#[ignore = "run by fork_child_builds_and_uses_a_fresh_runtime in a child process"]
fn child_fork() {
    exit_on_panic();
    let rt = Runtime::builder().workers(2).build().unwrap();
    let started = Arc::new(AtomicBool::new(false));
    let busy = rt.spawn({
        let started = started.clone();
        move || {
            started.store(true, Ordering::SeqCst);
            for _ in 0..20 {
                spindle_rt::sleep(Duration::from_millis(5));
            }
            7
        }
    });
    // Fork once the parent's runtime is past its start-up (workers set up, `busy` has its
    // stack): a lock another thread holds at the fork stays held in the child (documented),
    // and mapping a stack takes the process-wide stack registry's — forking while a worker
    // mapped `busy`'s stack hung the child's first stack mapping (1 run in ~30).
    while !started.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(20));
    // SAFETY: fork; the child only runs the code below and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            in_forked_child(&rt);
        }))
        .is_ok();
        // Dropping the parent's runtime here hangs (as documented): it would wait for
        // workers that do not exist in the child.
        let dropper = std::thread::spawn(move || drop(rt));
        std::thread::sleep(Duration::from_millis(200));
        let ok = ok && !dropper.is_finished();
        // SAFETY: _exit ends the process without running destructors (the parent's runtime
        // must not be dropped here) or atexit handlers.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    // The parent: wait up to 20 s for the child.
    let start = Instant::now();
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child; `status` is a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            break;
        }
        if start.elapsed() > Duration::from_secs(20) {
            // SAFETY: kills our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the forked child hung");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the forked child failed: status {status:#x}"
    );
    assert_eq!(busy.join().unwrap(), 7, "the parent's runtime kept running");
    drop(rt);
    println!("CHILD OK");
}

fn in_forked_child(parent: &Runtime) {
    // The parent's runtime: a coroutine spawned on it never runs (no workers here).
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    let _never = parent.spawn(move || r.store(true, Ordering::SeqCst));
    // A fresh runtime works.
    let fresh = Runtime::builder().workers(2).build().unwrap();
    let sum = fresh.block_on(|| {
        let listener = spindle_io::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = spindle_rt::spawn(move || {
            use std::io::Read;
            let (mut s, _) = listener.accept().unwrap();
            let mut b = [0u8; 4];
            s.read_exact(&mut b).unwrap();
            u32::from_le_bytes(b)
        });
        let mut c = spindle_io::net::TcpStream::connect(&addr).unwrap();
        c.write_all(&5u32.to_le_bytes()).unwrap();
        let hs: Vec<_> = (0..10u32)
            .map(|i| {
                spindle_rt::spawn(move || {
                    spindle_rt::sleep(Duration::from_millis(2));
                    i
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum::<u32>() + server.join().unwrap()
    });
    assert_eq!(sum, 50);
    drop(fresh);
    assert!(
        !ran.load(Ordering::SeqCst),
        "the parent's runtime ran a coroutine in the child"
    );
}

// ---------------------------------------------------------------------------------------------
// SIGTERM to a server: the graceful example

/// The `graceful` example's server in a child process gets SIGTERM with one request in flight
/// and one connection idle: the request completes, new connections are refused from then on,
/// and the process exits cleanly well within the deadline. A request longer than the
/// deadline is cancelled at the deadline (a second child).
#[test]
fn sigterm_lets_in_flight_requests_finish_refuses_new_ones_and_exits_by_the_deadline() {
    // (request ms, deadline ms, expected reply, expected summary)
    for (request_ms, deadline_ms, reply, summary) in [
        (300, 2000, true, "finished 1, cancelled 0"),
        (5000, 300, false, "finished 0, cancelled 1"),
    ] {
        let mut child = child_command("child_graceful")
            .env("SPINDLE_GRACEFUL_DEADLINE_MS", deadline_ms.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let addr = loop {
            let mut line = String::new();
            assert!(stdout.read_line(&mut line).unwrap() > 0, "no address");
            // The test harness's "test child_graceful ... " may come first on the line.
            if let Some((_, a)) = line.split_once("listening on ") {
                break a.trim().parse::<std::net::SocketAddr>().unwrap();
            }
        };
        let idle = std::net::TcpStream::connect(addr).unwrap();
        let mut busy = std::net::TcpStream::connect(addr).unwrap();
        busy.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        writeln!(busy, "sleep {request_ms}").unwrap();
        let mut replies = BufReader::new(busy.try_clone().unwrap());
        let mut line = String::new();
        replies.read_line(&mut line).unwrap();
        assert_eq!(line, "working\n");

        // SAFETY: signals our own child.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
        let signalled = Instant::now();
        // New connections are refused soon after.
        loop {
            match std::net::TcpStream::connect(addr) {
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => break,
                _ => {
                    assert!(
                        signalled.elapsed() < Duration::from_secs(1),
                        "still accepting after SIGTERM"
                    );
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
        line.clear();
        let _ = replies.read_line(&mut line);
        if reply {
            assert_eq!(
                line,
                format!("done {request_ms}\n"),
                "the in-flight request"
            );
        } else {
            assert_eq!(line, "", "a request past the deadline is cancelled");
        }
        let status = child.wait().unwrap();
        let took = signalled.elapsed();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert!(status.success(), "{status:?}\n{rest}\n{stderr}");
        assert!(rest.contains(summary), "{rest}");
        assert!(
            took < Duration::from_millis(deadline_ms + 1000),
            "exit took {took:?} with a {deadline_ms} ms deadline"
        );
        drop(idle);
    }
}

#[test]
#[ignore = "run by sigterm_lets_in_flight_requests_finish_... in a child process"]
fn child_graceful() {
    exit_on_panic();
    let deadline: u64 = std::env::var("SPINDLE_GRACEFUL_DEADLINE_MS")
        .unwrap()
        .parse()
        .unwrap();
    let signals = graceful::shutdown_signals().unwrap();
    let rt = Runtime::builder().workers(2).build().unwrap();
    let shutdown = rt
        .block_on(move || {
            let listener = spindle_io::net::TcpListener::bind("127.0.0.1:0").unwrap();
            println!("listening on {}", listener.local_addr().unwrap());
            graceful::serve(listener, signals, Duration::from_millis(deadline))
        })
        .unwrap();
    println!(
        "finished {}, cancelled {}",
        shutdown.finished, shutdown.cancelled
    );
}
