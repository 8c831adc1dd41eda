//! A tour of Spindle in four parts, each measured as it runs:
//!
//! 1. a million coroutines at once, on shared (copying) stacks, and the memory they used;
//! 2. a channel pipeline across worker threads (`spindle_sync::mpmc` / `mpsc`), in messages/s;
//! 3. the `echo` example's server with a built-in client: requests/s and p99 latency;
//! 4. std's `BufReader::lines` — unchanged, synchronous library code — reading a
//!    `spindle_io` pipe in a coroutine, while other coroutines run on the same thread.
//!
//! ```text
//! cargo run --release --example tour            (about 15 s on a 2-core machine)
//! cargo run --release --example tour -- --quick (a tenth of the sizes)
//! ```
//!
//! `SPINDLE_IO=epoll` (or `uring`, `polling`) picks the IO backend.

#[allow(dead_code)] // `main` of the echo example is unused here
#[path = "echo.rs"]
pub mod echo;

use std::collections::HashSet;
use std::error::Error;
use std::io::{self, Read, Write};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use spindle_io::net::{TcpListener, TcpStream};
use spindle_rt::{Builder, Policy, Runtime};
use spindle_sync::{WaitGroup, mpmc, mpsc};

type Result<T, E = Box<dyn Error + Send + Sync>> = std::result::Result<T, E>;

/// How big each part is.
#[derive(Debug, Clone)]
pub struct Scale {
    /// Part 1: coroutines alive at once.
    pub coroutines: usize,
    /// Part 2: messages through the pipeline.
    pub messages: u64,
    /// Part 3: client connections, and how long the client runs.
    pub connections: usize,
    pub echo_time: Duration,
    /// Part 4: lines sent through the pipe.
    pub lines: usize,
}

impl Scale {
    /// What `cargo run --release --example tour` runs.
    pub fn full() -> Scale {
        Scale {
            coroutines: 1_000_000,
            messages: 2_000_000,
            connections: 32,
            echo_time: Duration::from_secs(3),
            lines: 200_000,
        }
    }

    /// `--quick`: a tenth of the sizes.
    pub fn quick() -> Scale {
        Scale {
            coroutines: 100_000,
            messages: 200_000,
            connections: 16,
            echo_time: Duration::from_millis(500),
            lines: 20_000,
        }
    }

    /// For the tests (debug builds).
    pub fn tiny() -> Scale {
        Scale {
            coroutines: 10_000,
            messages: 20_000,
            connections: 4,
            echo_time: Duration::from_millis(200),
            lines: 2_000,
        }
    }
}

/// Runs the four parts, printing each one's figures.
pub fn run(scale: &Scale) -> Result<()> {
    let started = Instant::now();
    million(scale.coroutines)?;
    pipeline(scale.messages)?;
    echo_load(scale.connections, scale.echo_time)?;
    blocking_library(scale.lines)?;
    println!();
    println!("tour done in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Joins a coroutine, its failure (a panic, a cancel) as an error.
fn join<T: Send + 'static>(h: spindle_rt::JoinHandle<T>) -> Result<T> {
    h.join().map_err(|e| e.to_string().into())
}

fn heading(n: u32, title: &str) {
    println!();
    println!("[{n}] {title}");
}

/// Per-worker coroutine resumes, from the runtime's metrics.
fn resumes(rt: &Runtime) -> Vec<u64> {
    rt.metrics().workers.iter().map(|w| w.resumes).collect()
}

fn resumes_since(rt: &Runtime, before: &[u64]) -> String {
    let now = resumes(rt);
    let per: Vec<String> = now
        .iter()
        .zip(before)
        .map(|(a, b)| thousands((a - b) as f64))
        .collect();
    per.join(" + ")
}

/// Formats a count with thin thousands separators: 1 234 567.
fn thousands(v: f64) -> String {
    let digits = format!("{:.0}", v.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

// ---- 1. A million coroutines ----

/// Resident memory of this process in bytes: `VmRSS` from `/proc/self/status` on Linux, else
/// `ps -o rss=` (KiB on Linux, macOS and the BSDs); `None` where neither works (Windows).
fn resident_bytes() -> Option<u64> {
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        let kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
        if kib.is_some() {
            return kib.map(|k| k * 1024);
        }
    }
    let out = std::process::Command::new("ps")
        .args(["-o", "rss=", "-p", &std::process::id().to_string()])
        .output()
        .ok()?;
    let kib: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().ok()?;
    Some(kib * 1024)
}

fn million(n: usize) -> Result<()> {
    heading(
        1,
        &format!(
            "{} coroutines at once, on shared (copying) stacks",
            thousands(n as f64)
        ),
    );
    let workers = 2;
    let rt = Runtime::builder()
        .workers(workers)
        .stuck_threshold(None)
        .build()?;
    let handle = rt.handle();
    let ready = Arc::new(WaitGroup::new());
    ready.add(n);
    let gate = Arc::new(WaitGroup::new());
    gate.add(1);

    let rss_before = resident_bytes();
    let before = resumes(&rt);
    let start = Instant::now();
    // One spawner per worker. Spawned from this (non-worker) thread, shared-stack coroutines are
    // dealt to the workers in turn and stay there; the children of each stay on its worker.
    let spawners = (0..workers)
        .map(|w| {
            let count = n / workers + usize::from(w < n % workers);
            let (ready, gate) = (ready.clone(), gate.clone());
            // SAFETY: the spawner lends nothing on its stack to anything that runs while it is
            // suspended: it spawns, keeps the handles in a heap `Vec`, and joins them.
            unsafe { Builder::new().shared_stack() }
                .name("spawner")
                .spawn_on(&handle, move || -> io::Result<u64> {
                    let children = (0..count)
                        .map(|i| {
                            let (ready, gate) = (ready.clone(), gate.clone());
                            // SAFETY: the child only counts down one wait group and waits on
                            // another; both keep their waiter records on the heap, and it
                            // lends nothing on its stack.
                            unsafe { Builder::new().shared_stack() }.spawn(move || {
                                ready.done();
                                gate.wait();
                                i as u64
                            })
                        })
                        .collect::<io::Result<Vec<_>>>()?;
                    let mut sum = 0;
                    for child in children {
                        sum += child.join().map_err(|e| io::Error::other(e.to_string()))?;
                    }
                    Ok(sum)
                })
        })
        .collect::<io::Result<Vec<_>>>()?;
    ready.wait(); // every child has run up to its `gate.wait()`
    let all_waiting = start.elapsed();
    let rss_after = resident_bytes();
    let live = rt.metrics().live_coroutines;
    let woke = Instant::now();
    gate.done();
    let mut sum = 0;
    for s in spawners {
        sum += join(s)??;
    }
    let finished = woke.elapsed();
    let want: u64 = (0..workers)
        .map(|w| {
            let c = (n / workers + usize::from(w < n % workers)) as u64;
            c * c.saturating_sub(1) / 2
        })
        .sum();
    if sum != want {
        return Err(format!("children returned {sum}, expected {want}").into());
    }

    println!(
        "  spawned and suspended:  {} coroutines in {:.2} s ({:.0} ns each), {} alive at once",
        thousands(n as f64),
        all_waiting.as_secs_f64(),
        all_waiting.as_nanos() as f64 / n as f64,
        thousands(live as f64),
    );
    match (rss_before, rss_after) {
        (Some(b), Some(a)) => {
            let delta = a.saturating_sub(b);
            println!(
                "  memory (RSS delta):     {:.1} MiB in all, {:.0} bytes per coroutine",
                delta as f64 / (1 << 20) as f64,
                delta as f64 / n as f64
            );
            println!(
                "                          (task, saved stack bytes, join handle and waiter \
                 record, all counted)"
            );
        }
        _ => println!("  memory:                 not measured (no /proc, no `ps` here)"),
    }
    println!(
        "  woken and finished:     {:.2} s ({:.0} ns each); resumes per worker: {}",
        finished.as_secs_f64(),
        finished.as_nanos() as f64 / n as f64,
        resumes_since(&rt, &before)
    );
    if let Ok(max) = std::fs::read_to_string("/proc/sys/vm/max_map_count") {
        println!(
            "  (vm.max_map_count is {}: guarded stacks, two mappings each, would stop near {}; \
             shared stacks use one region per worker)",
            max.trim(),
            thousands(max.trim().parse::<f64>().unwrap_or(0.0) / 2.0)
        );
    }
    Ok(())
}

// ---- 2. A channel pipeline ----

const PARSERS: usize = 4;

fn pipeline(n: u64) -> Result<()> {
    heading(
        2,
        &format!(
            "a channel pipeline: source -> {PARSERS} parsers (mpmc) -> summer (mpsc) -> sink, 2 \
             workers"
        ),
    );
    for (policy, about) in [
        (
            Policy::WorkStealing,
            "work-stealing (the default): stages stay where they start, idle workers steal",
        ),
        (
            Policy::RoundRobin,
            "round-robin: the stages are dealt to the workers in turn",
        ),
    ] {
        println!("  {about}");
        pipeline_with(policy, n)?;
    }
    println!(
        "  (a hop between coroutines on one thread is a queue push; between threads it can be a \
         wake-up)"
    );
    Ok(())
}

fn pipeline_with(policy: Policy, n: u64) -> Result<()> {
    let rt = Runtime::builder()
        .workers(2)
        .policy(policy)
        .stuck_threshold(None)
        .build()?;
    let before = resumes(&rt);
    let threads: Arc<Mutex<HashSet<ThreadId>>> = Arc::default();
    let note_thread = {
        let threads = threads.clone();
        move || {
            threads.lock().unwrap().insert(std::thread::current().id());
        }
    };
    let start = Instant::now();
    let (total, count) = rt.block_on(move || -> Result<(u64, u64)> {
        // source: the numbers as text, as if read from a file
        let (text_tx, text_rx) = mpmc::bounded::<String>(1024);
        // parsers: text -> number (several coroutines share one receiver)
        let (num_tx, num_rx) = mpsc::bounded::<u64>(1024);
        // summer: batches of 1000 -> partial sums
        let (sum_tx, sum_rx) = mpsc::bounded::<(u64, u64)>(64);

        let note = note_thread.clone();
        let source = spindle_rt::spawn(move || {
            note();
            for i in 0..n {
                if text_tx.send(i.to_string()).is_err() {
                    break;
                }
            }
        });
        let parsers: Vec<_> = (0..PARSERS)
            .map(|_| {
                let (rx, tx, note) = (text_rx.clone(), num_tx.clone(), note_thread.clone());
                spindle_rt::spawn(move || {
                    note();
                    for text in rx.iter() {
                        let v: u64 = text.parse().expect("a number");
                        if tx.send(v).is_err() {
                            break;
                        }
                    }
                })
            })
            .collect();
        drop((text_rx, num_tx));
        let note = note_thread.clone();
        let summer = spindle_rt::spawn(move || {
            note();
            let (mut sum, mut count) = (0, 0);
            for v in num_rx.iter() {
                sum += v;
                count += 1;
                if count == 1000 {
                    if sum_tx.send((sum, count)).is_err() {
                        break;
                    }
                    (sum, count) = (0, 0);
                }
            }
            let _ = sum_tx.send((sum, count));
        });
        note_thread();
        let (total, count) = sum_rx
            .iter()
            .fold((0, 0), |(s, c), (ps, pc)| (s + ps, c + pc));
        join(source)?;
        for p in parsers {
            join(p)?;
        }
        join(summer)?;
        Ok((total, count))
    })?;
    let t = start.elapsed();
    let want = n * n.saturating_sub(1) / 2;
    if (total, count) != (want, n) {
        return Err(format!(
            "the sink got {count} numbers summing to {total}, expected {n} / {want}"
        )
        .into());
    }
    let coroutines = PARSERS + 3;
    let threads = threads.lock().unwrap().len();
    println!(
        "    {} messages end to end in {:.2} s: {} messages/s ({} channel sends/s)",
        thousands(n as f64),
        t.as_secs_f64(),
        thousands(n as f64 / t.as_secs_f64()),
        thousands(2.0 * n as f64 / t.as_secs_f64()),
    );
    println!(
        "    {coroutines} coroutines on {threads} worker thread{}; resumes per worker: {}; sum \
         checked",
        if threads == 1 { "" } else { "s" },
        resumes_since(&rt, &before)
    );
    Ok(())
}

// ---- 3. An echo server and its client ----

/// One client connection: ping-pongs `size`-byte messages until `until`; returns each
/// request's latency in nanoseconds.
fn echo_client(addr: std::net::SocketAddr, size: usize, until: Instant) -> io::Result<Vec<u32>> {
    let mut conn = TcpStream::connect(&addr)?;
    conn.set_nodelay(true)?;
    let msg = vec![7u8; size];
    let mut back = vec![0u8; size];
    let mut latencies = Vec::with_capacity(64 * 1024);
    while Instant::now() < until {
        let sent = Instant::now();
        conn.write_all(&msg)?;
        conn.read_exact(&mut back)?;
        latencies.push(u32::try_from(sent.elapsed().as_nanos()).unwrap_or(u32::MAX));
        if back != msg {
            return Err(io::Error::other("the echo differs from what was sent"));
        }
    }
    Ok(latencies)
}

fn echo_load(connections: usize, time: Duration) -> Result<()> {
    const SIZE: usize = 64;
    heading(
        3,
        &format!("the echo example's server, {connections} connections, {SIZE}-byte ping-pong"),
    );
    // One worker each for the server and the client: two cores, one each.
    let server = Runtime::builder().workers(1).build()?;
    let client = Runtime::builder().workers(1).build()?;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    server.spawn(move || echo::serve(listener));
    let (latencies, elapsed) = client.block_on(move || -> Result<(Vec<u32>, Duration)> {
        let start = Instant::now();
        let until = start + time;
        let conns: Vec<_> = (0..connections)
            .map(|_| spindle_rt::spawn(move || echo_client(addr, SIZE, until)))
            .collect();
        let mut all = Vec::new();
        for c in conns {
            all.extend(join(c)??);
        }
        Ok((all, start.elapsed()))
    })?;
    drop(server); // cancels the server's coroutines
    if latencies.is_empty() {
        return Err("the echo client completed no request".into());
    }
    let mut sorted = latencies;
    sorted.sort_unstable();
    let pct = |p: f64| {
        let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
        f64::from(sorted[i]) / 1000.0
    };
    println!(
        "  {} requests in {:.2} s: {} req/s  (server: 1 worker, {} IO; client: 1 worker)",
        thousands(sorted.len() as f64),
        elapsed.as_secs_f64(),
        thousands(sorted.len() as f64 / elapsed.as_secs_f64()),
        client.io_backend(),
    );
    println!(
        "  latency: p50 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs, max {:.1} µs",
        pct(0.50),
        pct(0.99),
        pct(0.999),
        pct(1.0)
    );
    Ok(())
}

// ---- 4. A blocking library in a coroutine ----

#[cfg(unix)]
use blocking_part::blocking_library;

/// Part 4 reads a `spindle_io` pipe, which is Unix-only.
#[cfg(not(unix))]
fn blocking_library(_lines: usize) -> Result<()> {
    heading(4, "a blocking library over a spindle_io pipe");
    println!("  skipped: spindle_io's pipes are Unix-only");
    Ok(())
}

#[cfg(unix)]
mod blocking_part {
    use std::io::{BufRead, BufReader};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    use super::*;

    /// Wraps a reader to count its `read` calls and those during which other coroutines ran
    /// (the read had to wait, and only its coroutine waited).
    struct Watched<R> {
        inner: R,
        ticks: Arc<AtomicU64>,
        reads: u64,
        waited: u64,
        thread: ThreadId,
        same_thread: bool,
    }

    impl<R: Read> Read for Watched<R> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let before = self.ticks.load(Ordering::Relaxed);
            let n = self.inner.read(buf)?;
            self.reads += 1;
            if self.ticks.load(Ordering::Relaxed) != before {
                self.waited += 1;
            }
            self.same_thread &= std::thread::current().id() == self.thread;
            Ok(n)
        }
    }

    /// The "library": plain synchronous code over any `BufRead`, written for files and std's
    /// sockets. It parses `id,item,cents` lines and totals the cents.
    fn total_cents(input: impl BufRead) -> io::Result<(u64, u64)> {
        let (mut records, mut cents) = (0, 0);
        for line in input.lines() {
            let line = line?;
            let amount = line
                .rsplit(',')
                .next()
                .and_then(|f| f.parse::<u64>().ok())
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, line.clone()))?;
            records += 1;
            cents += amount;
        }
        Ok((records, cents))
    }

    pub(super) fn blocking_library(lines: usize) -> Result<()> {
        heading(
            4,
            "std::io::BufRead::lines (synchronous code, unchanged) over a spindle_io pipe",
        );
        // One worker thread, so everything below shares it.
        let rt = Runtime::builder().workers(1).build()?;
        let start = Instant::now();
        let report = rt.block_on(move || -> Result<_> {
            let (reader, mut writer) = spindle_io::pipe()?;
            let ticks = Arc::new(AtomicU64::new(0));
            let done = Arc::new(AtomicBool::new(false));
            // A ticker: proof that the thread is free while the parser waits.
            let ticker = {
                let (ticks, done) = (ticks.clone(), done.clone());
                spindle_rt::spawn(move || {
                    while !done.load(Ordering::Relaxed) {
                        ticks.fetch_add(1, Ordering::Relaxed);
                        spindle_rt::sleep(Duration::from_micros(200));
                    }
                })
            };
            // The producer writes in bursts with pauses, as a slow peer would.
            let producer = spindle_rt::spawn(move || -> io::Result<u64> {
                let mut sent = 0;
                let mut burst = String::new();
                for i in 0..lines {
                    let cents = (i as u64 * 7919) % 10_000;
                    sent += cents;
                    burst.push_str(&format!("{i},item-{},{cents}\n", i % 97));
                    if burst.len() > 16 * 1024 || i + 1 == lines {
                        writer.write_all(burst.as_bytes())?;
                        burst.clear();
                        spindle_rt::sleep(Duration::from_millis(1));
                    }
                }
                Ok(sent) // dropping the writer ends the reader's input
            });
            let mut watched = Watched {
                inner: reader,
                ticks: ticks.clone(),
                reads: 0,
                waited: 0,
                thread: std::thread::current().id(),
                same_thread: true,
            };
            let (records, cents) = total_cents(BufReader::new(&mut watched))?;
            done.store(true, Ordering::Relaxed);
            let sent = join(producer)??;
            join(ticker)?;
            if cents != sent || records != lines as u64 {
                return Err(format!(
                    "parsed {records} records, {cents} cents; sent {lines}, {sent}"
                )
                .into());
            }
            Ok((
                records,
                cents,
                watched.reads,
                watched.waited,
                watched.same_thread,
                ticks.load(Ordering::Relaxed),
            ))
        })?;
        let (records, cents, reads, waited, same_thread, ticks) = report;
        println!(
            "  parsed {} records (total {}.{:02}) in {:.2} s with std's BufReader::lines",
            thousands(records as f64),
            thousands((cents / 100) as f64),
            cents % 100,
            start.elapsed().as_secs_f64()
        );
        println!(
            "  {} read() calls from inside std's BufReader; {} of them waited for data, and \
             meanwhile",
            thousands(reads as f64),
            thousands(waited as f64)
        );
        println!(
            "  a ticker coroutine ran {} times on the same worker thread{} — only the coroutine \
             blocked, not the thread",
            thousands(ticks as f64),
            if same_thread {
                ""
            } else {
                " (the parser moved threads!)"
            }
        );
        Ok(())
    }
}

#[allow(dead_code)] // `main` is unused when a test includes this file as a module
fn main() -> Result<()> {
    let quick = std::env::args().skip(1).any(|a| a == "--quick");
    let scale = if quick { Scale::quick() } else { Scale::full() };
    println!(
        "Spindle tour{}: stackful coroutines doing real work, measured as they run",
        if quick { " (--quick)" } else { "" }
    );
    println!(
        "machine: {} CPUs available",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    run(&scale)
}
