//! The server process: the echo and chat examples on a 2-worker runtime, controlled over
//! stdin/stdout by the load generator.
//!
//! On start it prints `ready echo=ADDR chat=ADDR backend=NAME nofile=N`; then each line on
//! stdin is a command: `stats` answers one line of `key=value` figures (see [`stats_line`]),
//! `quit` shuts the runtime down and exits. Its stderr carries the examples' error lines and
//! the runtime's stuck-coroutine reports, which the generator counts.

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::Duration;

use spindle_io::net::TcpListener;
use spindle_rt::{IoBackend, Runtime};
use spindle_stack::PoolConfig;

use crate::chat::{Config, Room};
use crate::{Opts, echo, sys};

/// The chat room's settings under soak: a short heartbeat and a small queue, so that timeouts
/// and slow-reader drops happen many times a minute.
pub const CHAT: Config = Config {
    heartbeat: Duration::from_secs(3),
    queue: 64,
    write_timeout: Duration::from_secs(2),
};

/// The stack pool's caps under soak (unless `--default-pool`): stacks each worker keeps, and stacks
/// the shared pool keeps. The runtime's defaults (16,384 each) let the stacks of coroutines spawned
/// on one worker and finished on the other pile up in the second worker's cache — dozens a second
/// under this load, each with touched pages resident — for the first 16,384: growth that is
/// bounded, but not within a one-minute soak, and that would hide a leak.
const POOL_THREAD_CACHE: usize = 256;
const POOL_SHARED: usize = 1024;

pub fn run(opts: &Opts) -> Result<(), String> {
    let nofile = sys::raise_nofile().map_err(|e| format!("raising RLIMIT_NOFILE: {e}"))?;
    let io = match opts.backend.as_str() {
        "epoll" => IoBackend::Epoll,
        "uring" => IoBackend::IoUring,
        "polling" => IoBackend::Polling,
        _ => IoBackend::Auto,
    };
    let mut builder = Runtime::builder().workers(2).io(io);
    if !opts.default_pool {
        builder = builder.stack_pool(PoolConfig {
            thread_cache: POOL_THREAD_CACHE,
            max_pooled: POOL_SHARED,
            trim_when_shared: false,
            ..PoolConfig::default()
        });
    }
    let rt = builder
        .stuck_threshold(Some(Duration::from_millis(opts.stuck_ms)))
        // The generator counts these lines on this process's stderr.
        .on_stuck(|report| eprintln!("soak-server: {report}"))
        .build()
        .map_err(|e| format!("building the runtime: {e}"))?;
    let bind = || TcpListener::bind("127.0.0.1:0").map_err(|e| format!("binding: {e}"));
    let (echo_listener, chat_listener) = (bind()?, bind()?);
    let addr = |l: &TcpListener| l.local_addr().map_err(|e| format!("local_addr: {e}"));
    let (echo_addr, chat_addr) = (addr(&echo_listener)?, addr(&chat_listener)?);
    let room = Room::new(CHAT);
    drop(rt.spawn(move || {
        if let Err(e) = echo::serve(echo_listener) {
            eprintln!("soak-server: the echo server stopped: {e}");
        }
    }));
    let serving = room.clone();
    drop(rt.spawn(move || {
        if let Err(e) = serving.serve(chat_listener) {
            eprintln!("soak-server: the chat server stopped: {e}");
        }
    }));
    let mut out = std::io::stdout().lock();
    let say = |out: &mut std::io::StdoutLock<'_>, line: &str| {
        writeln!(out, "{line}")
            .and_then(|()| out.flush())
            .map_err(|e| format!("writing to the load generator: {e}"))
    };
    say(
        &mut out,
        &format!(
            "ready echo={echo_addr} chat={chat_addr} backend={} nofile={nofile}",
            rt.io_backend()
        ),
    )?;
    let mut asked = 0u32;
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| format!("reading commands: {e}"))?;
        match line.trim() {
            "stats" => {
                asked += 1;
                // The faults, injected once the baseline has been taken (the first `stats`).
                if asked == 2 {
                    inject(&rt, opts.inject.as_deref());
                }
                say(&mut out, &stats_line(&rt, &room))?;
            }
            "quit" => break,
            other => eprintln!("soak-server: unknown command {other:?}"),
        }
    }
    // Stops the servers (their accept loops are cancelled) and joins the workers.
    drop(rt);
    say(&mut out, "bye")
}

/// `stats fds=.. rss_kib=.. cpu_us=.. live=.. members=.. resumes=.. maps=.. stacks_mapped=..
/// stacks_pooled=..` (pooled: in the stack pool's thread caches and shared pool).
fn stats_line(rt: &Runtime, room: &Arc<Room>) -> String {
    let m = rt.metrics();
    let resumes: u64 = m.workers.iter().map(|w| w.resumes).sum();
    format!(
        "stats fds={} rss_kib={} cpu_us={} live={} members={} resumes={} maps={} \
         stacks_mapped={} stacks_pooled={}",
        sys::fd_count(),
        sys::rss_kib(),
        sys::cpu_time_us(),
        m.live_coroutines,
        room.members(),
        resumes,
        sys::map_count(),
        m.stacks.mapped - m.stacks.unmapped,
        m.stacks.thread_cached + m.stacks.shared_pooled,
    )
}

/// Makes the server misbehave on purpose (`--inject`), so that a check must fail.
fn inject(rt: &Runtime, what: Option<&str>) {
    match what {
        // A descriptor that is never closed.
        Some("leak-fd") => drop(rt.spawn(|| {
            if let Ok(file) = std::fs::File::open("/dev/null") {
                std::mem::forget(file);
            }
        })),
        // A coroutine that never finishes: parked with nobody to wake it.
        Some("leak-coroutine") => drop(rt.spawn(|| {
            loop {
                spindle_rt::park();
            }
        })),
        // A coroutine that holds its worker for 300 ms without suspending.
        Some("stuck") => drop(rt.spawn(|| {
            let start = std::time::Instant::now();
            while start.elapsed() < Duration::from_millis(300) {
                std::hint::spin_loop();
            }
        })),
        // A coroutine that never sleeps: the workers are not idle at the end.
        Some("spin") => drop(rt.spawn(|| {
            loop {
                spindle_rt::yield_now();
            }
        })),
        _ => {}
    }
}
