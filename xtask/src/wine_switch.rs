//! `cargo xtask bench wine-switch [--rounds N] [--samples N]`: the `switch` row of the core
//! suite for x86_64 Windows, timed under Wine beside the Linux build in one run, with
//! corosensei on both sides as the reference.
//!
//! Builds, in release: spindle-coro's `switch_time` example for this host (the native System V
//! backend), for `x86_64-pc-windows-gnu` (the native Windows backend) and for
//! `x86_64-pc-windows-gnu` with feature `boost` (in `<target>/bench-boost`); and spindle-bench's
//! `corosensei_switch_time` example (the same measurement with corosensei's coroutine) for this
//! host and for `x86_64-pc-windows-gnu`. It runs the five in turn for `--rounds` rounds (9 by
//! default), each run taking the median of `--samples` samples (5), prints every run and then,
//! per build, the median of its rounds, with the ratios the portability goal is stated in (Wine
//! native against Linux native, and against Wine Boost) and the same for corosensei, whose
//! Windows backend also switches the TEB's stack fields. Alternating the builds spreads the
//! host's drift over all five. The Wine prefix is the `test-windows-wine` leg's
//! (`ci/wine/setup.sh`), with one Wine server kept up for the whole run.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use crate::proc;

const TARGET: &str = "x86_64-pc-windows-gnu";

/// One of the builds a round runs.
struct Build {
    name: &'static str,
    backend: &'static str,
    exe: PathBuf,
    under_wine: bool,
}

/// Indices into the builds, in the order they run in each round.
const LINUX: usize = 0;
const WINE: usize = 1;
const WINE_BOOST: usize = 2;
const COROSENSEI_LINUX: usize = 3;
const COROSENSEI_WINE: usize = 4;

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
    let spindle = ("spindle-coro", "switch_time");
    let corosensei = ("spindle-bench", "corosensei_switch_time");
    let builds = [
        Build {
            name: "Linux, native",
            backend: "x86_64-sysv",
            exe: build_example(spindle, &[])?,
            under_wine: false,
        },
        Build {
            name: "Wine, native",
            backend: "x86_64-windows",
            exe: build_example(spindle, &["--target", TARGET])?,
            under_wine: true,
        },
        Build {
            name: "Wine, Boost",
            backend: "boost",
            exe: build_example(
                spindle,
                &[
                    "--target",
                    TARGET,
                    "--features",
                    "boost",
                    "--target-dir",
                    &boost_dir.to_string_lossy(),
                ],
            )?,
            under_wine: true,
        },
        Build {
            name: "Linux, corosensei",
            backend: "corosensei",
            exe: build_example(corosensei, &[])?,
            under_wine: false,
        },
        Build {
            name: "Wine, corosensei",
            backend: "corosensei",
            exe: build_example(corosensei, &["--target", TARGET])?,
            under_wine: true,
        },
    ];

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
    let result = measure(&wine, &prefix, &builds, rounds, samples);
    wineserver("-k");
    let medians = result?;
    report(&builds, &medians, rounds, samples);
    Ok(ExitCode::SUCCESS)
}

/// Builds example `name` of package `package` in release with extra cargo arguments; returns
/// its path.
fn build_example((package, name): (&str, &str), extra: &[&str]) -> Result<PathBuf, String> {
    let mut args = vec!["-p", package, "--example", name];
    args.extend_from_slice(extra);
    crate::bench::build_executable(&args, name)
}

/// Runs the builds `rounds` times in turn; returns each build's per-round medians.
fn measure(
    wine: &Path,
    prefix: &Path,
    builds: &[Build],
    rounds: usize,
    samples: usize,
) -> Result<Vec<Vec<f64>>, String> {
    let mut medians: Vec<Vec<f64>> = builds.iter().map(|_| Vec::new()).collect();
    for round in 1..=rounds {
        for (build, medians) in builds.iter().zip(&mut medians) {
            let mut cmd = if build.under_wine {
                let mut c = Command::new(wine);
                c.arg(&build.exe)
                    .env("WINEPREFIX", prefix)
                    .env("WINEDEBUG", "-all");
                c
            } else {
                Command::new(&build.exe)
            };
            cmd.arg(samples.to_string())
                .stdin(Stdio::null())
                .stderr(Stdio::inherit());
            let out = cmd
                .output()
                .map_err(|e| format!("cannot run {}: {e}", build.exe.display()))?;
            let stdout = String::from_utf8_lossy(&out.stdout);
            if !out.status.success() {
                return Err(format!(
                    "{} ({}) failed ({}): {stdout}",
                    build.exe.display(),
                    build.name,
                    out.status
                ));
            }
            let median = median_ns(&stdout).ok_or_else(|| {
                format!("no `median_ns=` in the output of {}: {stdout}", build.name)
            })?;
            println!(
                "round {round}/{rounds}  {:<18} {}",
                build.name,
                stdout.trim()
            );
            medians.push(median);
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
fn report(builds: &[Build], medians: &[Vec<f64>], rounds: usize, samples: usize) {
    let m: Vec<f64> = medians.iter().map(|v| median(v)).collect();
    let ratios = |i: usize| -> String {
        match i {
            LINUX => "1.00× Linux native".to_string(),
            WINE => format!(
                "{:.2}× Linux native, {:.2}× Wine Boost, {:.2}× Wine corosensei",
                m[WINE] / m[LINUX],
                m[WINE] / m[WINE_BOOST],
                m[WINE] / m[COROSENSEI_WINE]
            ),
            WINE_BOOST => format!("{:.2}× Linux native", m[WINE_BOOST] / m[LINUX]),
            COROSENSEI_LINUX => format!("{:.2}× Linux native", m[COROSENSEI_LINUX] / m[LINUX]),
            _ => format!(
                "{:.2}× Linux corosensei, {:.2}× Linux native",
                m[COROSENSEI_WINE] / m[COROSENSEI_LINUX],
                m[COROSENSEI_WINE] / m[LINUX]
            ),
        }
    };
    println!();
    println!(
        "switch (ns, one direction): median of {rounds} rounds, each the median of {samples} \
         samples of 200 ms"
    );
    println!();
    println!("| build | backend | median (ns) | ratio |");
    println!("|---|---|---|---|");
    for (i, build) in builds.iter().enumerate() {
        println!(
            "| {} | {} | {:.2} | {} |",
            build.name,
            build.backend,
            m[i],
            ratios(i)
        );
    }
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
