//! The `io` suite: TCP echo and HTTP servers on one core, driven from another.
//!
//! Every measurement starts a fresh server in a child process (`spindle-bench serve <impl>
//! --cpu <n>`, see [`servers`]) pinned to the first CPU this process may use (core 0), with one
//! worker; the load runs on this process's calling thread pinned to the second (core 1): the
//! [`client`] (single-threaded epoll, ping-pong echo, `TCP_NODELAY`) for the echo rows, `wrk
//! -t1` for the HTTP rows.
//!
//! # What the rows measure
//!
//! On a 2-core loopback the client costs about as much per request as the server, so peak QPS
//! barely separates servers; the primary figure is the **server's CPU time per request at a
//! fixed offered load**: the client paces requests (`_r80k`: 80,000 req/s over 50
//! connections), and the server's user + system time over the measured window (all threads,
//! from `/proc/PID/stat` at the window's start and end) is divided by the responses the client
//! received in the window.
//!
//! * `echo_cpu_<size>_r<rate>` (cpu_us_per_req): 50 connections, `<size>`-byte messages,
//!   paced to `<rate>` req/s.
//! * `echo_user_cpu_<size>_r80k` (cpu_us_per_req): the user-space part of the same runs'
//!   server CPU (`utime` of `/proc/PID/stat`): the cost that is the server's own code, without
//!   the kernel's TCP work and wake-ups, which are much the same for every server. The kernel
//!   splits run time into user and system time in proportion to the timer ticks (100 Hz) that
//!   found the process in each, so one run's figure is a sample (about ±0.2 µs at this load,
//!   where a few of the window's ~100 ticks land in user space); the median over rounds
//!   steadies it, and callgrind's instruction counts (see `docs/benchmarks.md`) are the exact
//!   measure behind it.
//! * `echo_1024_r80k_p99` (us): the 99th-percentile latency of the `echo_cpu_1024_r80k` runs,
//!   measured from each request's due time (so a server that falls behind shows). Like every
//!   row, the value is the median over the rounds, with their min and max beside it.
//! * `echo_1024_c<N>` (qps): unpaced, `N` connections, 1 KiB; `_p99` (us) from the same runs.
//! * `..._client_idle` (cpu_pct): the client's time in `epoll_pwait2` / window in the same runs:
//!   near 0 means the client, not the server, set the pace.
//! * `echo_1024_r80k_server_switches` (per_req): the server's context switches (voluntary and not,
//!   summed over its live threads from `/proc/PID/task/*/status`) per request in the
//!   `echo_cpu_1024_r80k` runs: how often it went to sleep and was woken. It explains CPU figures
//!   here: on a VM a thread's wake-up from an idle CPU can be charged to it at several µs
//!   (`spindle-bench wakecost` measures it; see docs/benchmarks.md, io section).
//! * `http_hello_c50` (qps): `wrk -t1 -c50` against a minimal HTTP/1.1 server on Spindle,
//!   hyper on tokio's current-thread runtime and may_minihttp on may; `http_hello_c50_cpu`
//!   (cpu_us_per_req): the server's CPU time over the `wrk` run / the requests `wrk` counted.
//!   Needs `wrk` (Debian package `wrk`); without it these rows are left out with a message.
//! * `http_pipelined_c256_cpu` (cpu_us_per_req) and `http_pipelined_c256` (qps): the same
//!   servers in TechEmpower's plaintext shape, `wrk -t1 -c256` with a script that pipelines
//!   16 requests per write. Near 1.5 M req/s `wrk` saturates its core before the servers do,
//!   so CPU per request is the figure here and requests/s is reported beside it.
//!
//! Rows of the same scenario (e.g. `echo_cpu_1024_r80k`, `echo_1024_r80k_p99` and
//! `echo_1024_r80k_client_idle`) share runs: the first row's `k`-th round runs the scenario
//! and records everything, the later rows' `k`-th rounds read that record. Rounds interleave
//! the impls (the harness rotates their order), so every impl sees the same host noise; the
//! value is the median over rounds.
//!
//! A paced run whose achieved rate is below 95 % of the offered one prints a warning: its
//! server could not keep up (or the client could not: see its idle share), so its CPU per
//! request is a saturated figure, not one at the stated load.
//!
//! The load client (and through inheritance the server and `wrk`) runs at nice -20 when the
//! process may raise its priority (root). That only helps against other work in the same
//! cgroup; so every run also measures how much of the server's CPU went to other work during
//! its window (that CPU's busy share in `/proc/stat` minus the server's own CPU time) and
//! warns above 15 %. `SPINDLE_BENCH_IO_VERBOSE=1` prints every run's figures (requests,
//! server CPU, p50/p99/max, client idle, other work).
//!
//! To profile a server by hand: `spindle-bench serve <impl> --cpu 0` (prints its port), then
//! `spindle-bench load 127.0.0.1:<port> --rate 40000 --pid <server pid>`, with `perf` or
//! `strace -c -f -p <pid>` attached to the server meanwhile.
//!
//! `spindle-uring` needs `spindle-rt`'s io_uring backend; when this build or kernel lacks it
//! the impl is left out with a message (not an error row).
//!
//! Timing: warm-up 0.5 s and a 1.5 s window per echo run (0.3 s and 1 s with `--quick`);
//! `wrk` runs 1 s to warm up, then 2 s (1 s with `--quick`).

mod client;
mod histogram;
mod http;
mod servers;
mod sys;
mod wakecost;

use std::io::IsTerminal as _;
use std::sync::Mutex;
use std::time::Duration;

use crate::harness::{Bench, Ctx, Impl, MeasureFn, RunOptions, Suite, Unit};

pub use servers::serve_main;
pub use wakecost::main as wakecost_main;

/// The suite's name.
pub const NAME: &str = "io";

/// The echo servers, in table order; `tokio-ct` is the reference.
const ECHO_IMPLS: [&str; 5] = [
    "spindle-epoll",
    "spindle-uring",
    "tokio-ct",
    "may",
    "thread-per-conn",
];
/// The HTTP servers; `hyper-tokio-ct` is the reference. Their `serve` names are `http-<impl>`.
const HTTP_IMPLS: [&str; 4] = [
    "spindle-epoll",
    "spindle-uring",
    "hyper-tokio-ct",
    "may-minihttp",
];

/// What load a row's runs apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    /// Ping-pong echo with the bench's own client.
    Echo {
        size: usize,
        conns: usize,
        /// Offered req/s; `None`: unpaced.
        rate: Option<u32>,
    },
    /// `wrk -t1 -c<conns>` against the HTTP servers, `depth` requests per write (1: no
    /// pipelining).
    Http { conns: usize, depth: usize },
}

impl Scenario {
    fn impls(self) -> &'static [&'static str] {
        match self {
            Scenario::Echo { .. } => &ECHO_IMPLS,
            Scenario::Http { .. } => &HTTP_IMPLS,
        }
    }

    fn reference(self) -> &'static str {
        match self {
            Scenario::Echo { .. } => "tokio-ct",
            Scenario::Http { .. } => "hyper-tokio-ct",
        }
    }

    fn server_kind(self, imp: &str) -> String {
        match self {
            Scenario::Echo { .. } => imp.to_string(),
            Scenario::Http { .. } => format!("http-{imp}"),
        }
    }
}

/// Which figure of a run a row reports.
#[derive(Debug, Clone, Copy)]
enum Metric {
    CpuPerReq,
    UserCpuPerReq,
    Qps,
    P99,
    ClientIdle,
    ServerSwitches,
}

/// What one run of a scenario measured.
#[derive(Debug, Clone, Copy)]
struct Outcome {
    requests: u64,
    qps: f64,
    server_cpu_s: f64,
    /// The user-space part of `server_cpu_s`, where the run measured it.
    server_user_s: Option<f64>,
    p99_us: Option<f64>,
    client_idle_pct: Option<f64>,
    /// The server's context switches (all its live threads) per request in the window.
    server_switches_per_req: Option<f64>,
}

impl Metric {
    fn value(self, o: &Outcome) -> Result<f64, String> {
        match self {
            Metric::CpuPerReq if o.requests == 0 => Err("no request completed".into()),
            Metric::CpuPerReq => Ok(o.server_cpu_s * 1e6 / o.requests as f64),
            Metric::UserCpuPerReq if o.requests == 0 => Err("no request completed".into()),
            Metric::UserCpuPerReq => o
                .server_user_s
                .map(|u| u * 1e6 / o.requests as f64)
                .ok_or_else(|| "this run measured no user-space CPU time".into()),
            Metric::Qps => Ok(o.qps),
            Metric::P99 => o.p99_us.ok_or_else(|| "this run measured no p99".into()),
            Metric::ClientIdle => o
                .client_idle_pct
                .ok_or_else(|| "this run measured no client idle share".into()),
            Metric::ServerSwitches => o
                .server_switches_per_req
                .ok_or_else(|| "this run counted no context switches".into()),
        }
    }
}

struct Row {
    name: &'static str,
    unit: Unit,
    scenario: Scenario,
    metric: Metric,
    /// Runs with `--quick` (the `r80k` and `c50` rows).
    quick: bool,
    published: &'static [&'static str],
}

const R80K_1024: Scenario = Scenario::Echo {
    size: 1024,
    conns: 50,
    rate: Some(80_000),
};
const R80K_64: Scenario = Scenario::Echo {
    size: 64,
    conns: 50,
    rate: Some(80_000),
};
const R20K_16384: Scenario = Scenario::Echo {
    size: 16_384,
    conns: 50,
    rate: Some(20_000),
};
const fn peak(conns: usize) -> Scenario {
    Scenario::Echo {
        size: 1024,
        conns,
        rate: None,
    }
}
const HTTP_C50: Scenario = Scenario::Http {
    conns: 50,
    depth: 1,
};
/// TechEmpower's plaintext shape: 256 connections, 16 pipelined requests per write.
const HTTP_PIPELINED: Scenario = Scenario::Http {
    conns: 256,
    depth: 16,
};

const fn row(
    name: &'static str,
    unit: Unit,
    scenario: Scenario,
    metric: Metric,
    quick: bool,
) -> Row {
    Row {
        name,
        unit,
        scenario,
        metric,
        quick,
        published: &[],
    }
}

/// Every row, in table order. A scenario's first row runs it; see the module docs.
const ROWS: [Row; 20] = [
    row(
        "echo_cpu_1024_r80k",
        Unit::CpuUsPerReq,
        R80K_1024,
        Metric::CpuPerReq,
        true,
    ),
    row("echo_1024_r80k_p99", Unit::Us, R80K_1024, Metric::P99, true),
    row(
        "echo_1024_r80k_client_idle",
        Unit::CpuPct,
        R80K_1024,
        Metric::ClientIdle,
        true,
    ),
    row(
        "echo_1024_r80k_server_switches",
        Unit::PerReq,
        R80K_1024,
        Metric::ServerSwitches,
        true,
    ),
    row(
        "echo_user_cpu_1024_r80k",
        Unit::CpuUsPerReq,
        R80K_1024,
        Metric::UserCpuPerReq,
        true,
    ),
    row(
        "echo_cpu_64_r80k",
        Unit::CpuUsPerReq,
        R80K_64,
        Metric::CpuPerReq,
        true,
    ),
    row(
        "echo_user_cpu_64_r80k",
        Unit::CpuUsPerReq,
        R80K_64,
        Metric::UserCpuPerReq,
        true,
    ),
    row(
        "echo_cpu_16384_r20k",
        Unit::CpuUsPerReq,
        R20K_16384,
        Metric::CpuPerReq,
        false,
    ),
    row("echo_1024_c1", Unit::Qps, peak(1), Metric::Qps, false),
    row("echo_1024_c1_p99", Unit::Us, peak(1), Metric::P99, false),
    Row {
        published: &[
            "Photon (published): 1.13x tokio on 1-core ping-pong",
            "monoio (published): 1.15x tokio on 1 core, 1.9x on 2",
        ],
        ..row("echo_1024_c50", Unit::Qps, peak(50), Metric::Qps, true)
    },
    row("echo_1024_c50_p99", Unit::Us, peak(50), Metric::P99, true),
    row(
        "echo_1024_c50_client_idle",
        Unit::CpuPct,
        peak(50),
        Metric::ClientIdle,
        true,
    ),
    row("echo_1024_c200", Unit::Qps, peak(200), Metric::Qps, false),
    row(
        "echo_1024_c200_p99",
        Unit::Us,
        peak(200),
        Metric::P99,
        false,
    ),
    row(
        "echo_1024_c200_client_idle",
        Unit::CpuPct,
        peak(200),
        Metric::ClientIdle,
        false,
    ),
    row("http_hello_c50", Unit::Qps, HTTP_C50, Metric::Qps, true),
    row(
        "http_hello_c50_cpu",
        Unit::CpuUsPerReq,
        HTTP_C50,
        Metric::CpuPerReq,
        true,
    ),
    row(
        "http_pipelined_c256_cpu",
        Unit::CpuUsPerReq,
        HTTP_PIPELINED,
        Metric::CpuPerReq,
        false,
    ),
    row(
        "http_pipelined_c256",
        Unit::Qps,
        HTTP_PIPELINED,
        Metric::Qps,
        false,
    ),
];

/// The bench of row `R`: one impl per server of its scenario.
fn bench<const R: usize>() -> Bench {
    let row = &ROWS[R];
    let fns: [MeasureFn; 5] = [
        measure::<R, 0>,
        measure::<R, 1>,
        measure::<R, 2>,
        measure::<R, 3>,
        measure::<R, 4>,
    ];
    Bench {
        name: row.name,
        unit: row.unit,
        reference: Some(row.scenario.reference()),
        published: row.published,
        full_only: false,
        impls: row
            .scenario
            .impls()
            .iter()
            .zip(fns)
            .map(|(name, f)| Impl::in_process(name, f))
            .collect(),
    }
}

pub fn suite() -> Suite {
    Suite {
        name: NAME,
        about: "TCP echo (server CPU per request at a fixed load, its user-space part, peak \
                qps, p99) and HTTP hello, plain and pipelined (wrk): Spindle on epoll/io_uring vs \
                tokio, may, threads, hyper, may_minihttp",
        benches: vec![
            bench::<0>(),
            bench::<1>(),
            bench::<2>(),
            bench::<3>(),
            bench::<4>(),
            bench::<5>(),
            bench::<6>(),
            bench::<7>(),
            bench::<8>(),
            bench::<9>(),
            bench::<10>(),
            bench::<11>(),
            bench::<12>(),
            bench::<13>(),
            bench::<14>(),
            bench::<15>(),
            bench::<16>(),
            bench::<17>(),
            bench::<18>(),
            bench::<19>(),
        ],
    }
}

/// `SPINDLE_BENCH_IO_VERBOSE=1`: print every run's figures.
fn verbose() -> bool {
    std::env::var_os("SPINDLE_BENCH_IO_VERBOSE").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Prints a line between the harness's rows (clearing its progress line on a terminal).
fn note(msg: &str) {
    if std::io::stderr().is_terminal() {
        eprint!("\r\x1b[K");
    }
    println!("  {msg}");
}

/// Adjusts the suite before a run: `--quick` keeps the `r80k` and `c50` rows; the
/// `spindle-uring` impls are left out when the runtime cannot run io_uring here, the HTTP rows
/// when `wrk` is missing, each with a message. Other suites are returned unchanged.
pub fn prepare(suite: &Suite, opts: &RunOptions) -> Suite {
    let mut suite = suite.clone();
    if suite.name != NAME {
        return suite;
    }
    if opts.quick {
        suite
            .benches
            .retain(|b| ROWS.iter().any(|r| r.name == b.name && r.quick));
    }
    match sys::server_and_client_cpus() {
        Ok((s, c)) if s == c => {
            println!("io: warning: this process may use only CPU {s}: server and client share it")
        }
        Ok((s, c)) => println!("io: server pinned to CPU {s}, load client (and wrk) to CPU {c}"),
        Err(e) => println!("io: warning: cannot read the CPU affinity: {e}"),
    }
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        let load: Vec<&str> = load.split_whitespace().take(3).collect();
        println!(
            "io: load average before the run: {} (other work on these CPUs skews every row)",
            load.join(" ")
        );
    }
    if sys::NiceGuard::raise(-20).is_some() {
        println!(
            "io: the client, the servers and wrk run at nice -20, so that other work on these \
             CPUs disturbs them less; runs where other work still took over {FOREIGN_WARN_PCT} % \
             of the server's CPU are flagged"
        );
    } else {
        println!(
            "io: cannot raise the priority (needs root or CAP_SYS_NICE): other work on these \
             CPUs shows in the rows; runs where it took over {FOREIGN_WARN_PCT} % of the \
             server's CPU are flagged"
        );
    }
    if let Err(e) = servers::spindle_runtime(servers::Backend::Uring) {
        println!("io: spindle-uring: {e}; its rows are left out");
        for b in &mut suite.benches {
            b.impls.retain(|i| i.name != "spindle-uring");
        }
    }
    let uses_http = suite.benches.iter().any(|b| {
        ROWS.iter()
            .any(|r| r.name == b.name && matches!(r.scenario, Scenario::Http { .. }))
    });
    if uses_http && sys::find_wrk().is_none() {
        println!(
            "io: `wrk` is not installed (Debian: `apt-get install -y wrk`): the http rows are \
             left out"
        );
        suite.benches.retain(|b| {
            !ROWS
                .iter()
                .any(|r| r.name == b.name && matches!(r.scenario, Scenario::Http { .. }))
        });
    }
    println!();
    suite
}

/// `spindle-bench load <host:port> [--conns N] [--size S] [--rate R] [--secs T] [--pid P]`:
/// drives a server started by hand (e.g. `spindle-bench serve spindle-epoll --cpu 0` under
/// `perf` or `strace`) with the echo client on this thread (pinned to the second CPU), 0.5 s
/// warm-up then `T` s (default 5) measured, and prints what it saw; with `--pid`, also that
/// process's CPU time per request.
pub fn load_main(args: &[String]) -> Result<std::process::ExitCode, String> {
    const USAGE: &str = "usage: spindle-bench load <host:port> [--conns N] [--size S] [--rate R] [--secs T] [--pid P]";
    let mut it = args.iter();
    let addr: std::net::SocketAddr = it
        .next()
        .ok_or(USAGE)?
        .parse()
        .map_err(|e| format!("load: address: {e}\n{USAGE}"))?;
    let (mut conns, mut size, mut rate, mut secs, mut pid) = (50usize, 1024usize, None, 5.0, None);
    while let Some(flag) = it.next() {
        let v = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {v}: {e}\n{USAGE}");
        match flag.as_str() {
            "--conns" => conns = v.parse().map_err(|e| bad(&e))?,
            "--size" => size = v.parse().map_err(|e| bad(&e))?,
            "--rate" => rate = Some(v.parse::<f64>().map_err(|e| bad(&e))?),
            "--secs" => secs = v.parse::<f64>().map_err(|e| bad(&e))?,
            "--pid" => pid = Some(v.parse::<u32>().map_err(|e| bad(&e))?),
            _ => return Err(format!("unknown argument {flag}\n{USAGE}")),
        }
    }
    let (_, client_cpu) = sys::server_and_client_cpus()?;
    let _pin = sys::PinGuard::pin(client_cpu)?;
    let load = client::Load {
        conns,
        size,
        rate,
        warmup: Duration::from_millis(500),
        window: Duration::from_secs_f64(secs),
    };
    let r = client::run(addr, &load, || {
        pid.map_or(Ok(0.0), sys::process_cpu_seconds)
    })?;
    let cpu = r.marks.1 - r.marks.0;
    println!(
        "{} requests in {:.3} s = {:.0}/s; p50 {:.1} us, p99 {:.1} us; client idle {:.1} %; \
         dropped {}{}",
        r.requests,
        r.elapsed.as_secs_f64(),
        r.achieved_rate(),
        r.latency.percentile(0.5) / 1e3,
        r.latency.percentile(0.99) / 1e3,
        r.idle_pct,
        r.missed,
        if pid.is_some() {
            format!(
                "; server CPU {cpu:.3} s = {:.2} us/req",
                cpu * 1e6 / r.requests.max(1) as f64
            )
        } else {
            String::new()
        }
    );
    Ok(std::process::ExitCode::SUCCESS)
}

/// Runs of each (scenario, impl), in order, and how many of them each (row, impl) has used.
type Runs = Vec<Result<Outcome, String>>;

struct Cache {
    runs: Vec<((usize, &'static str), Runs)>,
    taken: Vec<((&'static str, &'static str), usize)>,
}

static CACHE: Mutex<Cache> = Mutex::new(Cache {
    runs: Vec::new(),
    taken: Vec::new(),
});

/// The index of a scenario's first row: its key in the cache.
fn scenario_key(s: Scenario) -> usize {
    ROWS.iter()
        .position(|r| r.scenario == s)
        .unwrap_or(usize::MAX)
}

/// Row `R`, impl `I` (of its scenario's impls): the next run of the scenario for that impl,
/// from the cache if an earlier row of the scenario made it, else a new run.
fn measure<const R: usize, const I: usize>(ctx: &Ctx) -> Result<f64, String> {
    let row = &ROWS[R];
    let imp = *row
        .scenario
        .impls()
        .get(I)
        .ok_or("no such impl (bench construction bug)")?;
    let key = (scenario_key(row.scenario), imp);
    let k = {
        let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
        let k = match cache.taken.iter_mut().find(|(t, _)| *t == (row.name, imp)) {
            Some((_, n)) => {
                *n += 1;
                *n - 1
            }
            None => {
                cache.taken.push(((row.name, imp), 1));
                0
            }
        };
        if let Some(r) = cache
            .runs
            .iter()
            .find(|(s, _)| *s == key)
            .and_then(|(_, runs)| runs.get(k))
        {
            return r.clone().and_then(|o| row.metric.value(&o));
        }
        k
    };
    let outcome = run_scenario(row.name, row.scenario, imp, ctx);
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    // Only this row's `k`-th round makes run `k` (rows run one after another).
    match cache.runs.iter_mut().find(|(s, _)| *s == key) {
        Some((_, runs)) if runs.len() == k => runs.push(outcome.clone()),
        Some(_) => {}
        None if k == 0 => cache.runs.push((key, vec![outcome.clone()])),
        None => {}
    }
    outcome.and_then(|o| row.metric.value(&o))
}

/// The share of the server CPU's time (percent) that went to other work during a window:
/// that CPU's busy share (`/proc/stat`) minus the server's own CPU time over the window.
/// Work the kernel does for the server outside its own accounting (interrupts) counts as other
/// work here, so a few percent are normal.
fn foreign_pct(ticks: &[(u64, u64)], server_cpu_s: f64, window_s: f64) -> Option<f64> {
    let [(b0, t0), (b1, t1)] = ticks else {
        return None;
    };
    let total = t1.checked_sub(*t0).filter(|&t| t > 0)? as f64;
    let busy = b1.saturating_sub(*b0) as f64;
    Some(100.0 * busy / total - 100.0 * server_cpu_s / window_s.max(1e-9))
}

/// Above this share of other work on the server's CPU a run gets a warning.
const FOREIGN_WARN_PCT: f64 = 15.0;

/// One run of a scenario against a fresh server.
///
/// The client thread (and through inheritance the server and `wrk`) runs at nice -20 when
/// this process may raise its priority, so that other work on the two CPUs disturbs the run
/// less; see [`prepare`]'s message.
fn run_scenario(bench: &str, scenario: Scenario, imp: &str, ctx: &Ctx) -> Result<Outcome, String> {
    run_scenario_on(bench, scenario, imp, None, ctx)
}

/// The `echo_cpu_1024_r80k` scenario for another suite: the server CPU time per request
/// (µs) of echo server `kind` run by `exe` (this binary when `None`), with this suite's
/// client, pacing, window and warnings.
pub fn echo_cpu_1024_r80k(
    bench: &str,
    kind: &str,
    exe: Option<&std::path::Path>,
    ctx: &Ctx,
) -> Result<f64, String> {
    let o = run_scenario_on(bench, R80K_1024, kind, exe, ctx)?;
    Metric::CpuPerReq.value(&o)
}

/// [`run_scenario`] with the server run by `exe` (this binary when `None`).
fn run_scenario_on(
    bench: &str,
    scenario: Scenario,
    imp: &str,
    exe: Option<&std::path::Path>,
    ctx: &Ctx,
) -> Result<Outcome, String> {
    let (server_cpu, client_cpu) = sys::server_and_client_cpus()?;
    let _nice = sys::NiceGuard::raise(-20);
    let _pin = sys::PinGuard::pin(client_cpu)?;
    let kind = scenario.server_kind(imp);
    let server = match exe {
        Some(exe) => sys::Server::start_exe(exe, &kind, server_cpu)?,
        None => sys::Server::start(&kind, server_cpu)?,
    };
    let mut ticks = Vec::with_capacity(2);
    let mut switches = Vec::with_capacity(2);
    let mut user = Vec::with_capacity(2);
    let result = match scenario {
        Scenario::Echo { size, conns, rate } => {
            let (warmup, window) = if ctx.quick {
                (Duration::from_millis(300), Duration::from_millis(1000))
            } else {
                (Duration::from_millis(500), Duration::from_millis(1500))
            };
            let load = client::Load {
                conns,
                size,
                rate: rate.map(f64::from),
                warmup,
                window,
            };
            client::run(server.addr, &load, || {
                ticks.push(sys::cpu_ticks(server_cpu)?);
                switches.push(server.context_switches()?);
                let (u, s) = server.cpu_times()?;
                user.push(u);
                Ok(u + s)
            })
            .map(|r| echo_outcome(bench, imp, rate, &r, &ticks, &switches, &user))
        }
        Scenario::Http { conns, depth } => {
            run_http(bench, imp, &server, server_cpu, conns, depth, ctx)
        }
    };
    let log = server.stop();
    let result = result?;
    let log = log?;
    if !log.trim().is_empty() {
        let first: Vec<&str> = log.lines().take(3).collect();
        note(&format!(
            "note: {bench} / {imp}: the server wrote to stderr: {}",
            first.join(" | ")
        ));
    }
    Ok(result)
}

/// The figures of an echo run, with its warnings (and every figure when verbose).
fn echo_outcome(
    bench: &str,
    imp: &str,
    rate: Option<u32>,
    r: &client::Report,
    ticks: &[(u64, u64)],
    switches: &[u64],
    user: &[f64],
) -> Outcome {
    let achieved = r.achieved_rate();
    let switches_per_req = match switches {
        [start, end, ..] if r.requests > 0 => {
            Some(end.saturating_sub(*start) as f64 / r.requests as f64)
        }
        _ => None,
    };
    let server_cpu_s = r.marks.1 - r.marks.0;
    let server_user_s = match user {
        [start, end, ..] => Some(end - start),
        _ => None,
    };
    let window_s = r.elapsed.as_secs_f64();
    let foreign = foreign_pct(ticks, server_cpu_s, window_s);
    if let Some(rate) = rate
        && achieved < 0.95 * f64::from(rate)
    {
        note(&format!(
            "warning: {bench} / {imp}: achieved {achieved:.0} of {rate} req/s offered ({:.0} %; \
             {} requests dropped from full backlogs; client idle {:.0} %; other work {:.0} % \
             of the server's CPU): the load was not met, this run is saturated",
            100.0 * achieved / f64::from(rate),
            r.missed,
            r.idle_pct,
            foreign.unwrap_or(f64::NAN)
        ));
    } else if let Some(f) = foreign
        && f > FOREIGN_WARN_PCT
    {
        note(&format!(
            "warning: {bench} / {imp}: other work took {f:.0} % of the server's CPU during the \
             window"
        ));
    }
    if verbose() {
        note(&format!(
            "{bench} / {imp}: {} requests in {window_s:.3} s = {achieved:.0}/s, server CPU \
             {server_cpu_s:.3} s = {:.2} us/req (user {:.2}), p50 {:.0} us, p99 {:.0} us, max {:.0} us, \
             client idle {:.1} %, dropped {}, other work on the server's CPU {:.1} %, server \
             context switches {:.3}/req",
            r.requests,
            server_cpu_s * 1e6 / r.requests.max(1) as f64,
            server_user_s.unwrap_or(f64::NAN) * 1e6 / r.requests.max(1) as f64,
            r.latency.percentile(0.5) / 1e3,
            r.latency.percentile(0.99) / 1e3,
            r.latency.percentile(1.0) / 1e3,
            r.idle_pct,
            r.missed,
            foreign.unwrap_or(f64::NAN),
            switches_per_req.unwrap_or(f64::NAN)
        ));
    }
    Outcome {
        requests: r.requests,
        qps: achieved,
        server_cpu_s,
        server_user_s,
        p99_us: Some(r.latency.percentile(0.99) / 1e3),
        client_idle_pct: Some(r.idle_pct),
        server_switches_per_req: switches_per_req,
    }
}

fn run_http(
    bench: &str,
    imp: &str,
    server: &sys::Server,
    server_cpu: usize,
    conns: usize,
    depth: usize,
    ctx: &Ctx,
) -> Result<Outcome, String> {
    let wrk = sys::find_wrk().ok_or("`wrk` is not installed (apt-get install -y wrk)")?;
    // Warm-up: connections, stacks, caches.
    sys::run_wrk(&wrk, server.addr, conns, depth, 1)?;
    let secs = if ctx.quick { 1 } else { 2 };
    let ticks0 = sys::cpu_ticks(server_cpu)?;
    let before = server.cpu_seconds()?;
    let r = sys::run_wrk(&wrk, server.addr, conns, depth, secs)?;
    let after = server.cpu_seconds()?;
    let ticks1 = sys::cpu_ticks(server_cpu)?;
    if r.non_2xx > 0 {
        return Err(format!("{} responses were not 2xx", r.non_2xx));
    }
    if r.socket_errors > 0 {
        note(&format!(
            "note: {bench} / {imp}: wrk counted {} socket errors",
            r.socket_errors
        ));
    }
    let server_cpu_s = after - before;
    let foreign = foreign_pct(&[ticks0, ticks1], server_cpu_s, r.seconds);
    if let Some(f) = foreign
        && f > FOREIGN_WARN_PCT
    {
        note(&format!(
            "warning: {bench} / {imp}: other work took {f:.0} % of the server's CPU during the \
             run"
        ));
    }
    if verbose() {
        note(&format!(
            "{bench} / {imp}: {} requests in {:.2} s = {:.0}/s, server CPU {server_cpu_s:.3} s \
             = {:.2} us/req, p99 {:?} us, other work on the server's CPU {:.1} %",
            r.requests,
            r.seconds,
            r.qps,
            server_cpu_s * 1e6 / r.requests.max(1) as f64,
            r.p99_us,
            foreign.unwrap_or(f64::NAN)
        ));
    }
    Ok(Outcome {
        requests: r.requests,
        qps: r.qps,
        server_cpu_s,
        server_user_s: None,
        p99_us: r.p99_us,
        client_idle_pct: None,
        server_switches_per_req: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_consistent() {
        let s = suite();
        assert_eq!(s.benches.len(), ROWS.len());
        for (b, r) in s.benches.iter().zip(&ROWS) {
            assert_eq!(b.name, r.name);
            assert_eq!(b.impls.len(), r.scenario.impls().len());
            assert!(b.impls.iter().any(|i| Some(i.name) == b.reference));
        }
        // Names are unique, and a scenario's first row is the one that runs it.
        for (i, r) in ROWS.iter().enumerate() {
            assert!(ROWS[..i].iter().all(|o| o.name != r.name));
            assert!(scenario_key(r.scenario) <= i);
        }
        // `--quick` is the r80k and c50 rows.
        for r in &ROWS {
            assert_eq!(
                r.quick,
                r.name.contains("r80k") || r.name.contains("c50"),
                "{}",
                r.name
            );
        }
        // Every impl is a server `serve` knows.
        for r in &ROWS {
            for imp in r.scenario.impls() {
                assert!(servers::SERVERS.contains(&r.scenario.server_kind(imp).as_str()));
            }
        }
    }

    #[test]
    fn metrics() {
        let o = Outcome {
            requests: 1000,
            qps: 500.0,
            server_cpu_s: 0.01,
            server_user_s: Some(0.002),
            p99_us: Some(42.0),
            client_idle_pct: None,
            server_switches_per_req: None,
        };
        assert_eq!(Metric::CpuPerReq.value(&o).unwrap(), 10.0);
        assert_eq!(Metric::UserCpuPerReq.value(&o).unwrap(), 2.0);
        let no_user = Outcome {
            server_user_s: None,
            ..o
        };
        assert!(Metric::UserCpuPerReq.value(&no_user).is_err());
        assert_eq!(Metric::Qps.value(&o).unwrap(), 500.0);
        assert_eq!(Metric::P99.value(&o).unwrap(), 42.0);
        assert!(Metric::ClientIdle.value(&o).is_err());
        assert!(Metric::ServerSwitches.value(&o).is_err());
        let counted = Outcome {
            server_switches_per_req: Some(0.25),
            ..o
        };
        assert_eq!(Metric::ServerSwitches.value(&counted).unwrap(), 0.25);
        let none = Outcome { requests: 0, ..o };
        assert!(Metric::CpuPerReq.value(&none).is_err());
        assert!(Metric::UserCpuPerReq.value(&none).is_err());
    }
}
