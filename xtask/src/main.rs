//! Spindle's project automation, run as `cargo xtask <command>` (see `.cargo/config.toml`).
//!
//! * `cargo xtask ci [--full] [--only LEG,..] [--skip LEG,..] [--list]`: the one test command
//!   (`--full` adds the slow checkers: sanitizers, fuzzing).
//! * `cargo xtask bench <suite> [--quick] [--json PATH] [--markdown PATH] [--filter S]`:
//!   side-by-side benchmarks; `cargo xtask bench instr --update-baseline` rewrites the
//!   instruction-count baseline that the `instr` CI leg checks; `cargo xtask bench wine-switch
//!   [--rounds N]` times the `switch` row's Linux and x86_64 Windows builds (under Wine) in
//!   turn, with corosensei's on both sides.
//! * `cargo xtask matrix [--quick] [--list] [--only ENTRY,..]`: the facade's feature matrix.
//! * `cargo xtask demo [--quick]`: the tour (`cargo run --release --example tour`).
//! * `cargo xtask soak [--minutes N] [--backend B]`: the echo and chat examples under mixed load.
//!
//! Std plus indicatif (the matrix's progress bar), so that it builds in seconds on a fresh
//! machine.

mod bench;
mod bench_md;
mod checkers;
mod ci;
mod instr;
mod json;
mod matrix;
mod proc;
mod publish;
mod soak;
mod wine_switch;

use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <command> [args]

commands:
  ci [--full] [--only LEG,..] [--skip LEG,..] [--list]
        run the CI legs (fmt, clippy, tests, rustdoc, loom, packaging, the MSRV, cross
        checks, Wine, soak, valgrind, cargo-deny) and print a summary; --full adds
        Miri, ASan, TSan and fuzzing;
        `cargo xtask ci --list` shows the legs
  bench <suite> [--quick] [--json PATH] [--svg PATH] [--markdown PATH] [--filter S]
        [--rounds N]
        build spindle-bench in release (plus its boost-backend copy) and run the suite;
        writes a chart to --svg, beside --json, or to target/bench/<suite>.svg;
        --markdown docs/benchmarks.md updates the suite's table there;
        `cargo xtask bench list` shows the suites;
        `bench instr --update-baseline` also writes crates/bench/instr-baseline.json, the
        instruction counts the `instr` CI leg allows (+3 % for Spindle rows)
  bench wine-switch [--rounds N] [--samples N]
        the core suite's `switch` for x86_64 Windows: coro's switch_time example built for
        Linux, for windows-gnu and for windows-gnu with the Boost backend, run in turn (the
        Windows ones under Wine) for N rounds (9); prints the medians and their ratios
  matrix [--quick] [--list] [--only ENTRY,..]
        build and test the spindles facade over its feature matrix (each feature alone, the
        defaults, every scheduler x Linux IO backend, all features), check it for FreeBSD,
        macOS and windows-gnu, run its tests under Wine; builds go to <target>/matrix
  demo [--quick]
        run the tour: `cargo run --release --example tour`
  soak [--minutes N] [--backend auto|epoll|uring|polling] [--idle N] [--stuck-ms N]
       [--inject leak-fd|leak-coroutine|stuck|spin]
        the echo and chat examples on a 2-worker runtime under mixed load for N minutes
        (default 1; fractions allowed): checks every request answered or refused, fds, RSS,
        stuck coroutines, idle CPU; prints a summary, exits non-zero on a violation";

/// `cargo xtask demo [args]`: `cargo run --release -p spindle-rt --example tour -- [args]`.
fn demo(args: &[String]) -> Result<ExitCode, String> {
    let mut cmd = proc::cargo();
    cmd.args([
        "run",
        "--release",
        "-p",
        "spindle-rt",
        "--example",
        "tour",
        "--",
    ])
    .args(args);
    proc::announce(&cmd);
    let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
    Ok(if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci::main(&args[1..]),
        Some("bench") if args.get(1).map(String::as_str) == Some("wine-switch") => {
            wine_switch::main(&args[2..])
        }
        Some("bench") => bench::main(&args[1..]),
        Some("matrix") => matrix::main(&args[1..]),
        Some("demo") => demo(&args[1..]),
        Some("soak") => soak::main(&args[1..]),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        Some(other) => Err(format!("unknown command `{other}`\n{USAGE}")),
        None => Err(format!("no command given\n{USAGE}")),
    };
    result.unwrap_or_else(|e| {
        eprintln!("xtask: {e}");
        ExitCode::from(2)
    })
}
