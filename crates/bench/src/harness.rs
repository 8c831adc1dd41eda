//! The benchmark harness: suites, benches, impls, time-based measurement, side-by-side
//! rounds, child-process measurement, the table and the JSON report.
//!
//! No criterion: the harness is small on purpose, so that what it measures is easy to read.
//!
//! * A [`Suite`] is a list of [`Bench`]es; a bench is a list of [`Impl`]s that measure the same
//!   thing, each returning one `f64` in the bench's [`Unit`].
//! * Side by side: for each bench, `rounds` rounds; each round measures every impl once, the
//!   order rotated by one each round; the reported value is the median over the rounds (min and
//!   max are shown too).
//! * An impl that fails (returns `Err`, panics, or its child process fails) gets an `error:` row;
//!   the run goes on and the process exits non-zero at the end.
//! * The results go to the terminal as a table, to `--json PATH`, and as a bar chart of the
//!   ratios to `--svg PATH` (default: beside the JSON, same name, `.svg`; see [`crate::chart`]).

use std::hint::black_box;
use std::io::IsTerminal as _;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::chart::{self, ChartBench};

/// The unit of a bench's values. Lower is better for all but [`Unit::Qps`].
#[allow(dead_code, reason = "the units of later suites (rt, io, sync)")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Ns,
    Us,
    /// Milliseconds (a latency measured once per run, such as a stalled worker's tick gap).
    Ms,
    Bytes,
    CpuPct,
    CpuUsPerReq,
    /// Events per request (e.g. a server's context switches).
    PerReq,
    Qps,
    /// Instructions per operation, counted by callgrind (see [`How::Instr`]).
    Instr,
}

impl Unit {
    /// The name used in the table and the JSON report.
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Ns => "ns",
            Unit::Us => "us",
            Unit::Ms => "ms",
            Unit::Bytes => "bytes",
            Unit::CpuPct => "cpu_pct",
            Unit::CpuUsPerReq => "cpu_us_per_req",
            Unit::PerReq => "per_req",
            Unit::Qps => "qps",
            Unit::Instr => "instr",
        }
    }

    /// Whether a higher value is better (only queries per second).
    pub fn higher_is_better(self) -> bool {
        matches!(self, Unit::Qps)
    }
}

/// Measures one value of a bench for one impl. Errors are reported in the impl's row.
pub type MeasureFn = fn(&Ctx) -> Result<f64, String>;

/// How an impl's value is obtained.
#[derive(Debug, Clone, Copy)]
pub enum How {
    /// Call the function in this process.
    InProcess(MeasureFn),
    /// Run `<this binary> measure <bench> <impl>` and read its `value=<f64>` line; the child calls
    /// the function. For memory benches, so that each measurement starts from a fresh process.
    Child(MeasureFn),
    /// Run `$<variant env> measure <bench> spindle`: the same bench's `spindle` impl in a copy
    /// of this binary built with a different Spindle configuration (see [`Variant`]).
    Variant(&'static Variant),
    /// Instructions per operation: run `<this binary> instr-run <bench> <impl> <n>` under
    /// `valgrind --tool=callgrind` with `n` = [`INSTR_N`] and `2n`, and divide the difference of
    /// the two instruction totals by `n`. See [`instr_per_op`].
    Instr(InstrFn),
}

/// Runs one instruction-count workload: `n` operations, with whatever setup and teardown it
/// needs (those cost the same for `n` and `2n`, so they cancel out).
pub type InstrFn = fn(u64) -> Result<(), String>;

/// The operation count of the shorter of the two callgrind runs of an [`How::Instr`] impl.
pub const INSTR_N: u64 = 20_000;

/// A build of this binary with another Spindle configuration, for impls such as
/// `spindle-boost`. `cargo xtask bench` builds each with `--features <feature>` into
/// `<target>/bench-<feature>` and passes its path in the env var `env`.
#[derive(Debug)]
pub struct Variant {
    /// The cargo feature of `spindle-bench` that selects it.
    pub feature: &'static str,
    /// The env var holding the path of that build.
    pub env: &'static str,
    /// What `<binary> backend` must print, so that a row measures what its name says.
    pub backend: &'static str,
}

/// The `context`-crate (Boost.Context) backend.
pub static BOOST: Variant = Variant {
    feature: "boost",
    env: "SPINDLE_BENCH_BOOST_BIN",
    backend: "boost",
};

/// The native backend saving the floating-point environment per context.
pub static FP_ENV: Variant = Variant {
    feature: "fp-env",
    env: "SPINDLE_BENCH_FP_ENV_BIN",
    backend: "native+fp-env",
};

/// The libc calls interposed by `spindle-hook` (feature `hook`): the `spindle-hook` impls of the
/// `hook` suite.
pub static HOOK: Variant = Variant {
    feature: "hook",
    env: "SPINDLE_BENCH_HOOK_BIN",
    backend: "native+hook",
};

/// Every variant; `spindle-bench variants` lists them for `cargo xtask bench`, which builds
/// them.
pub static VARIANTS: [&Variant; 3] = [&BOOST, &FP_ENV, &HOOK];

/// One contender in a bench.
#[derive(Debug, Clone)]
pub struct Impl {
    pub name: &'static str,
    pub how: How,
}

impl Impl {
    pub fn in_process(name: &'static str, f: MeasureFn) -> Self {
        Impl {
            name,
            how: How::InProcess(f),
        }
    }

    pub fn child(name: &'static str, f: MeasureFn) -> Self {
        Impl {
            name,
            how: How::Child(f),
        }
    }

    pub fn instr(name: &'static str, f: InstrFn) -> Self {
        Impl {
            name,
            how: How::Instr(f),
        }
    }

    pub fn variant(name: &'static str, variant: &'static Variant) -> Self {
        Impl {
            name,
            how: How::Variant(variant),
        }
    }
}

/// One measured quantity, with the impls that compete on it.
#[derive(Debug, Clone)]
pub struct Bench {
    pub name: &'static str,
    pub unit: Unit,
    /// The impl the ratio column compares against.
    pub reference: Option<&'static str>,
    /// Published figures from elsewhere, printed under the table as labeled notes, never as
    /// measured rows. Each should say where it comes from, e.g. "libaco (published): 33 ns".
    pub published: &'static [&'static str],
    /// Measured only by the full suite, not with `--quick` (a bench that needs minutes or
    /// gigabytes).
    pub full_only: bool,
    pub impls: Vec<Impl>,
}

/// A named list of benches, run by `spindle-bench <suite>`.
#[derive(Debug, Clone)]
pub struct Suite {
    pub name: &'static str,
    pub about: &'static str,
    pub benches: Vec<Bench>,
}

/// What a measurement function gets: the run's settings and the time-based measurement helper.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The time one sample should take (100 ms, 15 ms with `--quick`).
    pub target: Duration,
    /// `--quick` was given: functions with fixed sizes may shrink them.
    #[allow(dead_code, reason = "read by the spindle impls once wired")]
    pub quick: bool,
}

impl Ctx {
    pub fn new(quick: bool) -> Self {
        let target = if quick {
            Duration::from_millis(15)
        } else {
            Duration::from_millis(100)
        };
        Ctx { target, quick }
    }

    /// Nanoseconds per call of `op`, from one sample that takes about [`Ctx::target`].
    ///
    /// First calibrates: runs `op` 1, 2, 4, ... times until a run takes a tenth of the target,
    /// then runs it as many times as fit in the target and returns the elapsed time divided by
    /// the count. The result of every call goes through [`black_box`]; bodies should pass their
    /// inputs through `black_box` too. Everything inside `op` is timed: do the setup before.
    pub fn time_ns<R>(&self, mut op: impl FnMut() -> R) -> f64 {
        fn run<R>(op: &mut impl FnMut() -> R, n: u64) -> Duration {
            let start = Instant::now();
            for _ in 0..n {
                black_box(op());
            }
            start.elapsed()
        }
        let calibrated = self.target / 10;
        let mut n: u64 = 1;
        loop {
            let t = run(&mut op, n);
            if t >= calibrated || n >= 1 << 40 {
                let per_op = t.as_secs_f64().max(1e-12) / n as f64;
                let count = (self.target.as_secs_f64() / per_op).ceil().clamp(1.0, 1e15) as u64;
                let t = run(&mut op, count);
                return t.as_nanos() as f64 / count as f64;
            }
            n *= 2;
        }
    }
}

/// Resident set size of this process in bytes (`VmRSS` in `/proc/self/status`), for memory
/// benches: measure before and after creating N suspended coroutines, divide the difference by N.
#[allow(dead_code, reason = "used by the spindle memory benches once wired")]
pub fn resident_bytes() -> Result<u64, String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("cannot read /proc/self/status (memory benches need Linux): {e}"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .ok_or("no VmRSS line in /proc/self/status")?;
    let kib: u64 = line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .map_err(|e| format!("cannot parse {line:?}: {e}"))?;
    Ok(kib * 1024)
}

/// Options of `spindle-bench <suite>`.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub quick: bool,
    pub rounds: usize,
    pub json: Option<PathBuf>,
    /// Where the chart goes; `None`: beside `json` (`.svg`), or nowhere without `json`.
    pub svg: Option<PathBuf>,
    pub filter: Option<String>,
}

impl RunOptions {
    /// Where the chart goes: `--svg`, else beside `--json` with the extension `.svg`.
    pub fn svg_path(&self) -> Option<PathBuf> {
        self.svg
            .clone()
            .or_else(|| self.json.as_ref().map(|j| j.with_extension("svg")))
    }
}

/// Runs `f`, turning a panic into an error.
fn catch(f: impl FnOnce() -> Result<f64, String>) -> Result<f64, String> {
    match panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_string());
            Err(format!("panicked: {msg}"))
        }
    }
}

/// Runs a measurement function in this process (the `measure` subcommand's side).
pub fn measure_here(f: MeasureFn, ctx: &Ctx) -> Result<f64, String> {
    let v = catch(|| f(ctx))?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(format!("measured a non-finite value ({v})"))
    }
}

/// Runs `<exe> measure <bench> <impl> [--quick]` and parses its `value=<f64>` line.
fn measure_in_child(exe: &Path, bench: &str, imp: &str, quick: bool) -> Result<f64, String> {
    let mut cmd = Command::new(exe);
    cmd.args(["measure", bench, imp]);
    if quick {
        cmd.arg("--quick");
    }
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let why = stderr
            .lines()
            .map(str::trim)
            .rfind(|l| !l.is_empty())
            .unwrap_or("no output on stderr");
        let name = exe.file_name().unwrap_or(exe.as_os_str()).to_string_lossy();
        return Err(format!(
            "child `{name} measure` failed ({}): {why}",
            out.status
        ));
    }
    let line = stdout
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("value="))
        .ok_or_else(|| format!("child `measure {bench} {imp}` printed no `value=` line"))?;
    let v: f64 = line
        .trim()
        .parse()
        .map_err(|e| format!("child printed `value={line}`: {e}"))?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(format!("child measured a non-finite value ({v})"))
    }
}

/// Instructions per operation of `<exe> instr-run <bench> <imp> <n>`: callgrind counts every
/// instruction the process executes (all threads), once with `n` = [`INSTR_N`] operations and
/// once with `2n`; the setup, the teardown and the process's start and exit are the same in both
/// runs, so the difference divided by `n` is the cost of one operation in steady state.
///
/// The harness's own timing loops are not used: callgrind slows the code down by ~50×, and
/// an instruction count needs no calibration. The count does not depend on the machine's load,
/// which makes it fit for a regression check in CI (`cargo xtask ci --only instr`).
fn instr_per_op(exe: &Path, bench: &str, imp: &str) -> Result<f64, String> {
    let total = |n: u64| -> Result<u64, String> {
        let out = Command::new("valgrind")
            .args([
                "--tool=callgrind",
                "--callgrind-out-file=/dev/null",
                "--error-exitcode=99",
            ])
            .arg(exe)
            .args(["instr-run", bench, imp, &n.to_string()])
            .output()
            .map_err(|e| {
                format!("cannot run valgrind ({e}): instruction counts need it (apt-get install valgrind)")
            })?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            let why = stderr
                .lines()
                .map(str::trim)
                .rfind(|l| !l.is_empty() && !l.starts_with("=="))
                .unwrap_or("no output on stderr");
            return Err(format!(
                "callgrind run with n={n} failed ({}): {why}",
                out.status
            ));
        }
        callgrind_total(&stderr)
            .ok_or_else(|| format!("callgrind printed no `Collected :` line (n={n})"))
    };
    let one = total(INSTR_N)?;
    let two = total(2 * INSTR_N)?;
    if two < one {
        return Err(format!(
            "{two} instructions for {} operations but {one} for {INSTR_N}: the workload does \
             not scale with n",
            2 * INSTR_N
        ));
    }
    Ok((two - one) as f64 / INSTR_N as f64)
}

/// The instruction total from callgrind's summary on stderr (`==pid== Collected : 123456`).
fn callgrind_total(stderr: &str) -> Option<u64> {
    stderr.lines().find_map(|l| {
        let (_, rest) = l.split_once("Collected :")?;
        rest.trim().parse().ok()
    })
}

/// Checks that the variant's env var names a bench binary built with that configuration, so
/// that its rows measure what their names say.
pub fn variant_binary(variant: &Variant) -> Result<PathBuf, String> {
    let env = variant.env;
    let Some(path) = std::env::var_os(env) else {
        return Err(format!(
            "{env} is not set: run through `cargo xtask bench`, which builds the `{}` copy of \
             this binary",
            variant.feature
        ));
    };
    let path = PathBuf::from(path);
    let out = Command::new(&path)
        .arg("backend")
        .output()
        .map_err(|e| format!("{env}={}: cannot run: {e}", path.display()))?;
    let backend = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || backend != variant.backend {
        return Err(format!(
            "{env}={} is not a `{}` bench binary (`backend` printed {backend:?})",
            path.display(),
            variant.backend
        ));
    }
    Ok(path)
}

#[derive(Debug)]
struct Row {
    imp: &'static str,
    samples: Vec<f64>,
    error: Option<String>,
}

#[derive(Debug, Clone, Copy)]
struct Stats {
    median: f64,
    min: f64,
    max: f64,
}

fn stats(samples: &[f64]) -> Option<Stats> {
    if samples.is_empty() {
        return None;
    }
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let median = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    Some(Stats {
        median,
        min: s[0],
        max: s[n - 1],
    })
}

/// Formats a value with a precision that suits its size.
pub fn fmt_value(v: f64) -> String {
    let a = v.abs();
    if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A value for the JSON report, rounded to 3 decimals (more precision is noise). JSON has no
/// NaN or infinity: such a value (a measurement that divided by zero) is written as `null`.
fn json_value(v: f64) -> serde_json::Value {
    let r = (v * 1000.0).round() / 1000.0;
    serde_json::Number::from_f64(r).map_or(serde_json::Value::Null, serde_json::Value::Number)
}

/// The CPU model and core counts, for the header.
pub fn machine_info() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_string())
        .unwrap_or_else(|| "unknown CPU (no /proc/cpuinfo model name)".to_string());
    let logical = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let available = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let logical = if logical == 0 {
        "?".to_string()
    } else {
        logical.to_string()
    };
    format!("{model}; {logical} logical CPUs, {available} available to this process")
}

const W_BENCH: usize = 24;
const W_IMPL: usize = 15;
const W_NUM: usize = 10;
const W_UNIT: usize = 14;

fn header_line() -> String {
    format!(
        "{:<W_BENCH$} {:<W_IMPL$} {:>W_NUM$} {:>W_NUM$} {:>W_NUM$}  {:<W_UNIT$} ratio",
        "bench", "impl", "median", "min", "max", "unit"
    )
}

/// Runs a suite side by side, prints the table, writes the JSON. Returns whether every row
/// measured (no errors).
pub fn run_suite(suite: &Suite, opts: &RunOptions) -> Result<bool, String> {
    let ctx = Ctx::new(opts.quick);
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let benches: Vec<&Bench> = suite
        .benches
        .iter()
        .filter(|b| opts.filter.as_deref().is_none_or(|f| b.name.contains(f)))
        .filter(|b| !(opts.quick && b.full_only))
        .collect();
    if benches.is_empty() {
        return Err(format!(
            "no bench of suite `{}` matches --filter {:?}",
            suite.name,
            opts.filter.as_deref().unwrap_or("")
        ));
    }
    let rounds = opts.rounds.max(1);
    let progress = std::io::stderr().is_terminal();

    println!("machine: {}", machine_info());
    println!(
        "settings: {} ms per time sample, {rounds} rounds, impl order rotated each round{}",
        ctx.target.as_millis(),
        if opts.quick { " (--quick)" } else { "" }
    );
    println!();
    println!(
        "{} (median of {rounds} rounds; lower is better except qps)",
        suite.name
    );
    println!("{}", header_line());

    let mut variant_bins: Vec<(&'static str, Result<PathBuf, String>)> = Vec::new();
    let mut json_rows = Vec::new();
    let mut chart_benches = Vec::new();
    let mut all_ok = true;
    for bench in &benches {
        let mut rows: Vec<Row> = bench
            .impls
            .iter()
            .map(|i| Row {
                imp: i.name,
                samples: Vec::new(),
                error: None,
            })
            .collect();
        let k = bench.impls.len();
        for round in 0..rounds {
            for j in 0..k {
                let idx = (j + round) % k;
                if rows[idx].error.is_some() {
                    continue;
                }
                let imp = &bench.impls[idx];
                // An instruction count is the same every time: one sample is enough.
                if matches!(imp.how, How::Instr(_)) && !rows[idx].samples.is_empty() {
                    continue;
                }
                if progress {
                    eprint!(
                        "\r\x1b[K  {} round {}/{rounds}: {}",
                        bench.name,
                        round + 1,
                        imp.name
                    );
                }
                let r = match imp.how {
                    How::InProcess(f) => measure_here(f, &ctx),
                    How::Child(_) => measure_in_child(&exe, bench.name, imp.name, opts.quick),
                    How::Instr(_) => instr_per_op(&exe, bench.name, imp.name),
                    How::Variant(variant) => {
                        let bin = match variant_bins.iter().find(|(f, _)| *f == variant.feature) {
                            Some((_, bin)) => bin.clone(),
                            None => {
                                let bin = variant_binary(variant);
                                variant_bins.push((variant.feature, bin.clone()));
                                bin
                            }
                        };
                        bin.and_then(|bin| {
                            measure_in_child(&bin, bench.name, "spindle", opts.quick)
                        })
                    }
                };
                match r {
                    Ok(v) => rows[idx].samples.push(v),
                    Err(e) => rows[idx].error = Some(e),
                }
            }
        }
        if progress {
            eprint!("\r\x1b[K");
        }
        let reference = bench.reference.and_then(|r| {
            rows.iter()
                .find(|row| row.imp == r && row.error.is_none())
                .and_then(|row| stats(&row.samples))
                .map(|s| (r, s.median))
        });
        let mut chart = ChartBench {
            name: bench.name.to_string(),
            unit: bench.unit.as_str().to_string(),
            higher_is_better: bench.unit.higher_is_better(),
            reference: bench.reference.map(str::to_string),
            values: Vec::new(),
        };
        for row in &rows {
            let prefix = format!("{:<W_BENCH$} {:<W_IMPL$}", bench.name, row.imp);
            if let Some(e) = &row.error {
                all_ok = false;
                println!("{prefix} error: {e}");
                continue;
            }
            let Some(s) = stats(&row.samples) else {
                all_ok = false;
                println!("{prefix} error: no samples");
                continue;
            };
            let ratio = match (bench.reference, reference) {
                (Some(r), _) if r == row.imp => "(reference)".to_string(),
                (_, Some((r, m))) if m != 0.0 => format!("{:.2}x {r}", s.median / m),
                (Some(r), _) => format!("n/a ({r} has no value)"),
                (None, _) => String::new(),
            };
            println!(
                "{prefix} {:>W_NUM$} {:>W_NUM$} {:>W_NUM$}  {:<W_UNIT$} {ratio}",
                fmt_value(s.median),
                fmt_value(s.min),
                fmt_value(s.max),
                bench.unit.as_str()
            );
            json_rows.push(serde_json::json!({
                "bench": bench.name,
                "impl": row.imp,
                "value": json_value(s.median),
                "unit": bench.unit.as_str(),
            }));
            chart.values.push((row.imp.to_string(), s.median));
        }
        chart_benches.push(chart);
    }

    let notes: Vec<(&str, &str)> = benches
        .iter()
        .flat_map(|b| b.published.iter().map(move |n| (b.name, *n)))
        .collect();
    if !notes.is_empty() {
        println!();
        println!("published figures from elsewhere (not measured in this run, for orientation):");
        for (bench, note) in notes {
            println!("  {bench:<W_BENCH$} {note}");
        }
    }

    if let Some(path) = &opts.json {
        let report = serde_json::json!({ "suite": suite.name, "results": json_rows });
        let json = serde_json::to_string_pretty(&report)
            .map_err(|e| format!("cannot format the JSON report: {e}"))?;
        std::fs::write(path, json + "\n")
            .map_err(|e| format!("cannot write JSON report {}: {e}", path.display()))?;
        println!();
        println!("wrote {}", path.display());
    }
    if let Some(path) = opts.svg_path() {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        let subtitle = format!(
            "spindle-bench {}{}, median of {rounds} rounds, {}; {}",
            suite.name,
            if opts.quick { " --quick" } else { "" },
            chart::today(),
            machine_info()
        );
        let n = chart::write_svg(&path, suite.name, &subtitle, &chart_benches)?;
        if json_rows.is_empty() || opts.json.is_none() {
            println!();
        }
        println!("wrote {} ({n} benches charted)", path.display());
    }
    if !all_ok {
        eprintln!("spindle-bench: some rows failed to measure (see `error:` rows above)");
    }
    Ok(all_ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_min_max() {
        let s = stats(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        let s = stats(&[4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert!(stats(&[]).is_none());
    }

    #[test]
    fn json_values_are_rounded_and_never_nan_or_infinite() {
        assert_eq!(json_value(1.23456).to_string(), "1.235");
        assert_eq!(json_value(1e6).to_string(), "1000000.0");
        for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(json_value(v), serde_json::Value::Null, "{v}");
        }
        let row = serde_json::json!({ "bench": "a\"b", "value": json_value(f64::NAN) });
        assert_eq!(row.to_string(), r#"{"bench":"a\"b","value":null}"#);
    }

    #[test]
    fn callgrind_total_is_read_from_the_summary() {
        let stderr = "==12== Callgrind, a call-graph generating cache profiler\n\
                      ==12== Events    : Ir\n\
                      ==12== Collected : 4521987\n\
                      ==12== I   refs:      4,521,987\n";
        assert_eq!(callgrind_total(stderr), Some(4_521_987));
        assert_eq!(callgrind_total("==1== Events : Ir\n"), None);
    }

    #[test]
    fn time_ns_is_plausible() {
        let ctx = Ctx {
            target: Duration::from_millis(5),
            quick: true,
        };
        let ns = ctx.time_ns(|| std::thread::sleep(Duration::from_micros(200)));
        assert!(ns >= 200_000.0, "{ns}");
    }
}
