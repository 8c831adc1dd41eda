//! `cargo xtask matrix`: the `spindles` facade over a curated feature matrix.
//!
//! Tests: the defaults, no default features, each feature alone (with what it needs), every
//! scheduler × every Linux IO backend, all features. Checks: the facade for FreeBSD, macOS and
//! windows-gnu. And the facade's tests for windows-gnu under Wine. And every library crate's
//! own tests with that crate alone (`cargo test -p <crate>`: à la carte, nothing of another
//! crate's features forced on it by the workspace). Every build goes to
//! `<target>/matrix` (flipping features in the main target directory would rebuild the
//! workspace's crates back and forth); each entry's output goes to
//! `<target>/matrix/logs/<entry>.log`, and the tail of a failing one is printed. A progress bar
//! (indicatif) shows where it is; a pass/fail table with times ends it.
//!
//! `cargo xtask ci` runs a quick slice of it (the `matrix-quick` leg).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::ci;
use crate::proc::{self, cargo};

/// The Linux IO backends (features of the facade) and their `SPINDLE_IO` names.
const LINUX_IO: [(&str, &str); 3] = [
    ("io-uring", "uring"),
    ("io-epoll", "epoll"),
    ("io-polling", "polling"),
];

const SCHEDULERS: [&str; 3] = ["sched-fifo", "sched-rr", "sched-ws"];

/// Every feature of the facade, and what it needs to build on its own.
const FEATURES: [(&str, &str); 14] = [
    ("rt", "rt,sched-ws"),
    ("sched-fifo", "sched-fifo"),
    ("sched-rr", "sched-rr"),
    ("sched-ws", "sched-ws"),
    ("io-uring", "io-uring"),
    ("io-epoll", "io-epoll"),
    ("io-kqueue", "io-kqueue"),
    ("io-iocp", "io-iocp"),
    ("io-polling", "io-polling"),
    ("sync", "sync"),
    ("stack-growable", "stack-growable"),
    ("stack-shared", "stack-shared"),
    ("context-boost", "context-boost"),
    ("hook", "hook"),
];

/// The library crates, each tested alone (à la carte: only what it asks of its dependencies).
const CRATES: [&str; 16] = [
    "spindle-context",
    "spindle-stack",
    "spindle-coro",
    "spindle-park",
    "spindle-timer",
    "spindle-sched",
    "spindle-io",
    "spindle-io-epoll",
    "spindle-io-uring",
    "spindle-io-polling",
    "spindle-io-kqueue",
    "spindle-io-iocp",
    "spindle-sync",
    "spindle-rt",
    "spindle-io-tests",
    "spindle-hook",
];

/// Targets the facade is type-checked for.
const CHECK_TARGETS: [&str; 3] = [
    "x86_64-unknown-freebsd",
    "x86_64-apple-darwin",
    "x86_64-pc-windows-gnu",
];

/// What an entry does.
enum Job {
    /// `cargo test -p spindles` with these features (`None`: the defaults), and `SPINDLE_IO`.
    Test {
        features: Option<String>,
        io: Option<&'static str>,
    },
    /// `cargo check -p spindles --target T` (defaults).
    Check { target: &'static str },
    /// The facade's tests for windows-gnu, run under Wine.
    Wine,
    /// `cargo test -p CRATE` alone: the crate with its own default features and no feature of
    /// another crate forced on it by the rest of the workspace.
    Alone { krate: &'static str },
}

struct Entry {
    name: String,
    job: Job,
}

impl Entry {
    fn test(name: &str, features: Option<&str>) -> Entry {
        Entry {
            name: name.to_string(),
            job: Job::Test {
                features: features.map(String::from),
                io: None,
            },
        }
    }

    /// What the table shows in its second column.
    fn what(&self) -> String {
        match &self.job {
            Job::Test { features, io } => {
                let f = match features.as_deref() {
                    None => "test: defaults".to_string(),
                    Some("") => "test: --no-default-features".to_string(),
                    Some("ALL") => "test: --all-features".to_string(),
                    Some(f) => format!("test: {f}"),
                };
                match io {
                    Some(io) => format!("{f} (SPINDLE_IO={io})"),
                    None => f,
                }
            }
            Job::Check { target } => format!("check: {target}"),
            Job::Wine => "test under Wine: x86_64-pc-windows-gnu".to_string(),
            Job::Alone { krate } => format!("test: -p {krate} alone"),
        }
    }
}

/// The whole matrix.
fn full() -> Vec<Entry> {
    let mut entries = vec![
        Entry::test("defaults", None),
        Entry::test("no-default-features", Some("")),
    ];
    for (name, features) in FEATURES {
        entries.push(Entry::test(&format!("only-{name}"), Some(features)));
    }
    for sched in SCHEDULERS {
        for (io, io_name) in LINUX_IO {
            entries.push(Entry {
                name: format!("{sched}+{io}"),
                job: Job::Test {
                    features: Some(format!("rt,{sched},{io}")),
                    io: Some(io_name),
                },
            });
        }
    }
    entries.push(Entry::test(
        "all-linux",
        Some(
            "rt,sched-fifo,sched-rr,sched-ws,io-uring,io-epoll,io-polling,sync,stack-growable,\
             stack-shared",
        ),
    ));
    entries.push(Entry::test("all-features", Some("ALL")));
    for target in CHECK_TARGETS {
        entries.push(Entry {
            name: format!("check-{target}"),
            job: Job::Check { target },
        });
    }
    entries.push(Entry {
        name: "wine".to_string(),
        job: Job::Wine,
    });
    for krate in CRATES {
        entries.push(Entry {
            name: format!("alone-{krate}"),
            job: Job::Alone { krate },
        });
    }
    entries
}

/// The quick slice `cargo xtask ci` runs.
fn slice() -> Vec<Entry> {
    vec![
        Entry::test("defaults", None),
        Entry::test("no-default-features", Some("")),
        Entry {
            name: format!("check-{}", CHECK_TARGETS[0]),
            job: Job::Check {
                target: CHECK_TARGETS[0],
            },
        },
    ]
}

/// Runs one entry, its output to `log`.
fn run_entry(entry: &Entry, build_dir: &Path, log: &Path, bar: &ProgressBar) -> Result<(), String> {
    let file = |log: &Path| File::create(log).map_err(|e| format!("{}: {e}", log.display()));
    let mut cmd = cargo();
    cmd.env("CARGO_TARGET_DIR", build_dir);
    match &entry.job {
        Job::Test { features, io } => {
            // The facade alone is built: its tests may check that what it leaves out is
            // really left out.
            cmd.env("SPINDLE_FEATURES_EXACT", "1")
                .args(["test", "-p", "spindles"]);
            match features.as_deref() {
                None => {}
                Some("ALL") => {
                    cmd.arg("--all-features");
                }
                Some(f) => {
                    cmd.args(["--no-default-features", "--features", f]);
                }
            }
            if let Some(io) = io {
                cmd.env("SPINDLE_IO", io);
            }
        }
        Job::Check { target } => {
            ci::ensure_target(target)?;
            cmd.args([
                "check",
                "-p",
                "spindles",
                "--all-targets",
                "--target",
                target,
            ]);
        }
        Job::Wine => {
            // Its own progress: Wine's output goes to the terminal, the bar waits.
            return bar.suspend(|| ci::test_windows_wine(&["spindles"], Some(build_dir.into())));
        }
        Job::Alone { krate } => {
            cmd.args(["test", "-p", krate]);
        }
    }
    let out = file(log)?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    let shown = proc::show(&cmd);
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run `{shown}`: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{shown}` failed ({status}); log: {}",
            log.display()
        ))
    }
}

/// The last `n` lines of a file.
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn run(entries: Vec<Entry>) -> Result<bool, String> {
    let build_dir: PathBuf = ci::target_dir()?.join("matrix");
    let logs = build_dir.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    println!(
        "matrix: {} entries; builds in {}, logs in {}",
        entries.len(),
        build_dir.display(),
        logs.display()
    );
    let bar = ProgressBar::new(entries.len() as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30.cyan/blue} {pos}/{len} {msg}",
        )
        .map_err(|e| e.to_string())?,
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    let total = Instant::now();
    let mut results = Vec::new();
    for entry in &entries {
        bar.set_message(entry.name.clone());
        let log = logs.join(format!("{}.log", entry.name));
        let start = Instant::now();
        let r = run_entry(entry, &build_dir, &log, &bar);
        let secs = start.elapsed().as_secs_f64();
        let line = match &r {
            Ok(()) => format!("PASS {:<40} {secs:>6.1} s", entry.name),
            Err(e) => format!(
                "FAIL {:<40} {secs:>6.1} s: {e}\n{}",
                entry.name,
                tail(&log, 30)
            ),
        };
        if bar.is_hidden() {
            println!("{line}");
        } else {
            bar.println(line);
        }
        bar.inc(1);
        results.push((entry, r.is_ok(), secs));
    }
    bar.finish_and_clear();

    println!();
    println!("matrix summary");
    println!("| entry | what | result | seconds |");
    println!("|---|---|---|---:|");
    for (entry, ok, secs) in &results {
        let verdict = if *ok { "PASS" } else { "FAIL" };
        println!(
            "| {} | {} | {verdict} | {secs:.1} |",
            entry.name,
            entry.what()
        );
    }
    let failed: Vec<&str> = results
        .iter()
        .filter(|(_, ok, _)| !ok)
        .map(|(e, _, _)| e.name.as_str())
        .collect();
    let secs = total.elapsed().as_secs_f64();
    if failed.is_empty() {
        println!("matrix: all {} entries passed ({secs:.0} s)", results.len());
        Ok(true)
    } else {
        println!(
            "matrix: {} of {} entries FAILED ({secs:.0} s): {}",
            failed.len(),
            results.len(),
            failed.join(", ")
        );
        Ok(false)
    }
}

/// The `matrix-quick` leg of `cargo xtask ci`.
pub fn quick() -> Result<(), String> {
    if run(slice())? {
        Ok(())
    } else {
        Err("the quick matrix slice failed (see the table above)".into())
    }
}

const USAGE: &str = "\
usage: cargo xtask matrix [--quick] [--list] [--only ENTRY[,ENTRY...]]

  --quick  only the slice `cargo xtask ci` runs (defaults, no default features, a FreeBSD check)
  --list   list the entries and exit
  --only   run only these entries (a trailing * matches a prefix)";

pub fn main(args: &[String]) -> Result<ExitCode, String> {
    let mut entries = full();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => entries = slice(),
            "--list" => {
                for e in &entries {
                    println!("  {:<40} {}", e.name, e.what());
                }
                return Ok(ExitCode::SUCCESS);
            }
            "--only" => {
                let v = it
                    .next()
                    .ok_or_else(|| format!("--only needs entry names\n{USAGE}"))?;
                let names: Vec<&str> = v.split(',').map(str::trim).collect();
                entries.retain(|e| {
                    names.iter().any(|n| match n.strip_suffix('*') {
                        Some(p) => e.name.starts_with(p),
                        None => e.name == *n,
                    })
                });
                if entries.is_empty() {
                    return Err(format!("--only {v} matches no entry (see --list)"));
                }
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(ExitCode::SUCCESS);
            }
            other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
        }
    }
    Ok(if run(entries)? {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names_are_unique_and_cover_the_matrix() {
        let entries = full();
        let mut names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), entries.len());
        // 3 schedulers × 3 Linux backends.
        assert_eq!(
            names
                .iter()
                .filter(|n| n.contains("sched-") && n.contains("+io-"))
                .count(),
            9
        );
        assert!(names.contains(&"wine"));
        assert!(slice().len() < entries.len());
    }
}
