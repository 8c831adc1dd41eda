//! `spindle-bench`: side-by-side benchmarks of Spindle against its peers.
//!
//! ```text
//! spindle-bench <suite> [--quick] [--json PATH] [--svg PATH] [--filter SUBSTRING] [--rounds N]
//! spindle-bench measure <bench> <impl> [--quick]    (prints `value=<f64>`; used for child runs)
//! spindle-bench instr-run <bench> <impl> <n>        (runs an `instr` workload n times; run under
//!                                                   callgrind by the `instr` suite)
//! spindle-bench list
//! spindle-bench backend                             (prints `native`, `native+fp-env`, `native+hook` or `boost`)
//! spindle-bench variants                            (prints `<feature> <env var>` per variant)
//! spindle-bench serve <impl> [--cpu N]              (an `io` suite server; used for child runs)
//! spindle-bench load <host:port> [--conns N] [--size S] [--rate R] [--secs T] [--pid P]
//!                                                   (the `io` echo client, against any server)
//! spindle-bench wakecost [--gaps US,US,...] [--wakes N]
//!                                                   (the CPU time a wake-up costs the woken thread)
//! ```
//!
//! Normally run through `cargo xtask bench <suite> ...`, which builds this binary in release,
//! builds a copy per variant (`variants`: the boost backend, fp-env, the hook) and passes their paths in
//! the variants' env vars. See `harness` for how values are measured.

mod chart;
mod core;
mod harness;
mod hook;
mod instr;
mod io;
mod sched;
mod sync;

use std::path::PathBuf;
use std::process::ExitCode;

use harness::{Ctx, How, RunOptions, Suite};

/// Every suite, in `list` order.
fn suites() -> Vec<Suite> {
    vec![
        core::suite(),
        sched::suite(),
        io::suite(),
        sync::suite(),
        hook::suite(),
        instr::suite(),
    ]
}

const USAGE: &str = "\
usage:
  spindle-bench <suite> [--quick] [--json PATH] [--svg PATH] [--filter SUBSTRING] [--rounds N]
  spindle-bench measure <bench> <impl> [--quick]
  spindle-bench instr-run <bench> <impl> <n>
  spindle-bench list
  spindle-bench backend
  spindle-bench variants
  spindle-bench serve <impl> [--cpu N]
  spindle-bench load <host:port> [--conns N] [--size S] [--rate R] [--secs T] [--pid P]
  spindle-bench wakecost [--gaps US,US,...] [--wakes N]

  --quick          15 ms per time sample and 3 rounds (default 100 ms and 9)
  --json PATH      write the results (value = median; null if not finite) as JSON
  --svg PATH       write a bar chart of the ratios (default: beside --json, as .svg)
  --filter S       only benches whose name contains S
  --rounds N       number of side-by-side rounds";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("spindle-bench: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &[String]) -> Result<ExitCode, String> {
    let Some(first) = args.first() else {
        return Err(format!("no suite given\n{USAGE}"));
    };
    match first.as_str() {
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        "list" => {
            for suite in suites() {
                println!("{}: {}", suite.name, suite.about);
                for b in &suite.benches {
                    let impls: Vec<&str> = b.impls.iter().map(|i| i.name).collect();
                    println!(
                        "  {:<24} {:<14} {}",
                        b.name,
                        b.unit.as_str(),
                        impls.join(", ")
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        "backend" => {
            println!("{}", core::backend_name());
            Ok(ExitCode::SUCCESS)
        }
        "variants" => {
            for v in harness::VARIANTS {
                println!("{} {}", v.feature, v.env);
            }
            Ok(ExitCode::SUCCESS)
        }
        "measure" => measure(&args[1..]),
        "instr-run" => instr_run(&args[1..]),
        "serve" => io::serve_main(&args[1..]),
        "load" => io::load_main(&args[1..]),
        "wakecost" => io::wakecost_main(&args[1..]),
        name => {
            let suites = suites();
            let Some(suite) = suites.iter().find(|s| s.name == name) else {
                let names: Vec<&str> = suites.iter().map(|s| s.name).collect();
                return Err(format!(
                    "unknown suite `{name}` (suites: {})\n{USAGE}",
                    names.join(", ")
                ));
            };
            let opts = parse_run_options(&args[1..])?;
            let suite = io::prepare(suite, &opts);
            let ok = harness::run_suite(&suite, &opts)?;
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}

fn parse_run_options(args: &[String]) -> Result<RunOptions, String> {
    let mut quick = false;
    let mut json = None;
    let mut svg = None;
    let mut filter = None;
    let mut rounds = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |flag: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
        };
        match a.as_str() {
            "--quick" => quick = true,
            "--json" => json = Some(PathBuf::from(value("--json")?)),
            "--svg" => svg = Some(PathBuf::from(value("--svg")?)),
            "--filter" => filter = Some(value("--filter")?),
            "--rounds" => {
                let v = value("--rounds")?;
                let n: usize = v
                    .parse()
                    .map_err(|_| format!("--rounds {v}: not a number"))?;
                if n == 0 {
                    return Err("--rounds must be at least 1".into());
                }
                rounds = Some(n);
            }
            other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
        }
    }
    let rounds = rounds.unwrap_or(if quick { 3 } else { 9 });
    Ok(RunOptions {
        quick,
        rounds,
        json,
        svg,
        filter,
    })
}

/// `measure <bench> <impl> [--quick]`: measures one value in this process, prints `value=<f64>`.
fn measure(args: &[String]) -> Result<ExitCode, String> {
    let (bench_name, impl_name, rest) = match args {
        [b, i, rest @ ..] => (b.as_str(), i.as_str(), rest),
        _ => return Err(format!("measure needs <bench> <impl>\n{USAGE}")),
    };
    let quick = match rest {
        [] => false,
        [q] if q == "--quick" => true,
        _ => return Err(format!("measure: unexpected arguments {rest:?}\n{USAGE}")),
    };
    let suites = suites();
    let bench = suites
        .iter()
        .flat_map(|s| s.benches.iter())
        .find(|b| b.name == bench_name)
        .ok_or_else(|| {
            format!("measure: unknown bench `{bench_name}` (see `spindle-bench list`)")
        })?;
    let imp = bench
        .impls
        .iter()
        .find(|i| i.name == impl_name)
        .ok_or_else(|| {
            format!(
                "measure: bench `{bench_name}` has no impl `{impl_name}` (see `spindle-bench list`)"
            )
        })?;
    let f = match imp.how {
        How::InProcess(f) | How::Child(f) => f,
        How::Instr(_) => {
            return Err(format!(
                "measure: `{bench_name}` counts instructions: its workload runs under callgrind \
                 through `instr-run {bench_name} {impl_name} <n>`"
            ));
        }
        How::Variant(variant) => {
            return Err(format!(
                "measure: `{impl_name}` is measured by running `${} measure {bench_name} \
                 spindle`, not in this binary",
                variant.env
            ));
        }
    };
    match harness::measure_here(f, &Ctx::new(quick)) {
        Ok(v) => {
            println!("value={v}");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("spindle-bench measure {bench_name} {impl_name}: error: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `instr-run <bench> <impl> <n>`: runs an instruction-count workload `n` times and exits; the
/// `instr` suite runs this under callgrind (see `harness::How::Instr`).
fn instr_run(args: &[String]) -> Result<ExitCode, String> {
    let [bench_name, impl_name, n] = args else {
        return Err(format!("instr-run needs <bench> <impl> <n>\n{USAGE}"));
    };
    let n: u64 = n
        .parse()
        .map_err(|_| format!("instr-run: `{n}` is not a number"))?;
    let suites = suites();
    let f = suites
        .iter()
        .flat_map(|s| s.benches.iter())
        .filter(|b| b.name == bench_name)
        .flat_map(|b| b.impls.iter())
        .find_map(|i| match i.how {
            How::Instr(f) if i.name == impl_name => Some(f),
            _ => None,
        })
        .ok_or_else(|| {
            format!(
                "instr-run: no instruction-count impl `{impl_name}` of `{bench_name}` (see \
                 `spindle-bench list`)"
            )
        })?;
    match f(n) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("spindle-bench instr-run {bench_name} {impl_name}: error: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}
