//! `cargo xtask bench wine-switch [--rounds N] [--samples N]`: the `switch` row of the core
//! suite for x86_64 Windows, timed under Wine beside the Linux build in one run.
//!
//! Builds spindle-coro's `switch_time` example three times in release — for this host
//! (the native System V backend), for `x86_64-pc-windows-gnu` (the native Windows backend) and
//! for `x86_64-pc-windows-gnu` with feature `boost` (in `<target>/bench-boost`) — then runs
//! them in turn, Linux / Wine native / Wine Boost, for `--rounds` rounds (9 by default), each
//! run taking the median of `--samples` samples (5). It prints every run and then, per build,
//! the median of its rounds, with the ratios the portability goal is stated in (Wine native
//! against Linux native, and against Wine Boost). Alternating the builds spreads the host's
//! drift over all three. The Wine prefix is the `test-windows-wine` leg's
//! (`ci/wine/setup.sh`), with one Wine server kept up for the whole run.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use crate::json::{self, Json};
use crate::proc::{self, cargo};

const TARGET: &str = "x86_64-pc-windows-gnu";

/// The three builds, in the order they run in each round.
const BUILDS: [&str; 3] = ["Linux, native", "Wine, native", "Wine, Boost"];

pub fn main(args: &[String]) -> Result<ExitCode, String> {
    let mut rounds = 9usize;
    let mut samples = 5usize;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let value = |it: &mut std::slice::Iter<'_, String>| -> Result<usize, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("{a} needs a positive number"))
        };
        match a.as_str() {
            "--rounds" => rounds = value(&mut it)?,
            "--samples" => samples = value(&mut it)?,
            other => {
                return Err(format!(
                    "unknown argument `{other}` (usage: cargo xtask bench wine-switch \
                     [--rounds N] [--samples N])"
                ));
            }
        }
    }
    crate::ci::ensure_target(TARGET)?;
    let target_dir = crate::bench::target_dir()?;
    let boost_dir = target_dir.join("bench-boost");
    let linux = build_example(&[])?;
    let native = build_example(&["--target", TARGET])?;
    let boost = build_example(&[
        "--target",
        TARGET,
        "--features",
        "boost",
        "--target-dir",
        &boost_dir.to_string_lossy(),
    ])?;

    let wine_dir = target_dir.join("wine");
    let setup = proc::root().join("ci/wine/setup.sh");
    let wine = proc::run_stdout(Command::new("bash").arg(&setup).arg(&wine_dir)).map_err(|e| {
        format!("{e} (it needs wine64 and gcc-mingw-w64-x86-64, which .ci/run installs)")
    })?;
    let wine = PathBuf::from(wine.trim());
    let prefix = wine_dir.join("prefix");
    let server = wine.with_file_name("wineserver");
    let wineserver = |arg: &str| {
        let _ = Command::new(&server)
            .arg(arg)
            .env("WINEPREFIX", &prefix)
            .status();
    };
    wineserver("-p");
    let result = measure(&wine, &prefix, [&linux, &native, &boost], rounds, samples);
    wineserver("-k");
    let medians = result?;
    report(&medians, rounds, samples);
    Ok(ExitCode::SUCCESS)
}

/// Builds the `switch_time` example in release with extra cargo arguments; returns its path.
fn build_example(extra: &[&str]) -> Result<PathBuf, String> {
    let out = proc::run_stdout(
        cargo()
            .args([
                "build",
                "--release",
                "-p",
                "spindle-coro",
                "--example",
                "switch_time",
                "--message-format=json-render-diagnostics",
            ])
            .args(extra),
    )?;
    let mut exe = None;
    for line in out.lines().filter(|l| l.starts_with('{')) {
        let msg = json::parse(line)?;
        if msg.get("reason").and_then(Json::as_str) == Some("compiler-artifact")
            && msg.pointer("/target/name").and_then(Json::as_str) == Some("switch_time")
            && let Some(path) = msg.get("executable").and_then(Json::as_str)
        {
            exe = Some(PathBuf::from(path));
        }
    }
    exe.ok_or_else(|| "cargo built no `switch_time` executable".to_string())
}

/// Runs the three builds `rounds` times in turn; returns each build's per-round medians.
fn measure(
    wine: &Path,
    prefix: &Path,
    exes: [&Path; 3],
    rounds: usize,
    samples: usize,
) -> Result<[Vec<f64>; 3], String> {
    let mut medians: [Vec<f64>; 3] = Default::default();
    for round in 1..=rounds {
        for (i, exe) in exes.iter().enumerate() {
            let mut cmd = if i == 0 {
                Command::new(exe)
            } else {
                let mut c = Command::new(wine);
                c.arg(exe)
                    .env("WINEPREFIX", prefix)
                    .env("WINEDEBUG", "-all");
                c
            };
            cmd.arg(samples.to_string())
                .stdin(Stdio::null())
                .stderr(Stdio::inherit());
            let out = cmd
                .output()
                .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
            let stdout = String::from_utf8_lossy(&out.stdout);
            if !out.status.success() {
                return Err(format!(
                    "{} ({}) failed ({}): {stdout}",
                    exe.display(),
                    BUILDS[i],
                    out.status
                ));
            }
            let median = median_ns(&stdout).ok_or_else(|| {
                format!("no `median_ns=` in the output of {}: {stdout}", BUILDS[i])
            })?;
            println!(
                "round {round}/{rounds}  {:<14} {}",
                BUILDS[i],
                stdout.trim()
            );
            medians[i].push(median);
        }
    }
    Ok(medians)
}

/// The `median_ns=` figure of a `switch_time` line.
fn median_ns(line: &str) -> Option<f64> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("median_ns="))
        .and_then(|v| v.parse().ok())
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Prints the Markdown table of the run: per build, the median of its rounds and the ratios.
fn report(medians: &[Vec<f64>; 3], rounds: usize, samples: usize) {
    let m: Vec<f64> = medians.iter().map(|v| median(v)).collect();
    println!();
    println!(
        "switch (ns, one direction): median of {rounds} rounds, each the median of {samples} \
         samples of 200 ms"
    );
    println!();
    println!("| build | backend | median (ns) | ratio |");
    println!("|---|---|---|---|");
    println!(
        "| {} | x86_64-sysv | {:.2} | 1.00× Linux native |",
        BUILDS[0], m[0]
    );
    println!(
        "| {} | x86_64-windows | {:.2} | {:.2}× Linux native, {:.2}× Wine Boost |",
        BUILDS[1],
        m[1],
        m[1] / m[0],
        m[1] / m[2]
    );
    println!(
        "| {} | boost | {:.2} | {:.2}× Linux native |",
        BUILDS[2],
        m[2],
        m[2] / m[0]
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_ns_is_read_from_a_switch_time_line() {
        let line = "switch backend=boost fp_env=true median_ns=11.56 min_ns=11.34 max_ns=13.39 \
                    samples=5";
        assert_eq!(median_ns(line), Some(11.56));
        assert_eq!(median_ns("switch backend=boost"), None);
    }

    #[test]
    fn median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
