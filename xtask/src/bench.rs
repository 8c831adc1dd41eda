//! `cargo xtask bench <suite> [--quick] [--json PATH] [...]`: builds `spindle-bench` in release
//! and runs it with the same arguments; the bench binary measures, prints the table and writes
//! the JSON.
//!
//! For the `spindle-boost` and `spindle-fp-env` impls it also builds copies of the bench binary
//! with `--features boost` (= `spindle-context/boost`, the `context`-crate backend for the whole
//! build) and `--features fp-env` in `<target>/bench-<feature>`, and passes their paths in
//! `SPINDLE_BENCH_BOOST_BIN` / `SPINDLE_BENCH_FP_ENV_BIN`; the main
//! binary runs `<that> measure <bench> spindle` for those rows. If that build fails, the bench
//! still runs and the `spindle-boost` rows report the error.
//!
//! `--markdown PATH` (for example `docs/benchmarks.md`) also writes the run's results as a
//! Markdown table into that file (see [`crate::bench_md`]).
//!
//! `cargo xtask bench instr --update-baseline` also writes the `instr` suite's report (counts
//! of instructions per operation) to `crates/bench/instr-baseline.json`, the baseline that the
//! `instr` CI leg checks against (see [`crate::instr`]).
//!
//! Each suite run also writes an SVG bar chart of the ratios: to `--svg PATH` if given, else
//! beside `--json PATH` (same name, `.svg`), else to `<target>/bench/<suite>.svg`.

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use crate::json::{self, Json};
use crate::proc::{self, cargo};

const PACKAGE: &str = "spindle-bench";
/// The variant builds the bench binary asks for: `(cargo feature, env var)` pairs, from
/// `spindle-bench variants` (the binary's own list is the one source of truth).
fn variants(main_bin: &std::path::Path) -> Result<Vec<(String, String)>, String> {
    let out = Command::new(main_bin)
        .arg("variants")
        .output()
        .map_err(|e| format!("cannot run {} variants: {e}", main_bin.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} variants failed ({})",
            main_bin.display(),
            out.status
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(f, e)| (f.to_string(), e.to_string()))
        .collect())
}

/// The workspace's target directory, as cargo sees it (honours `CARGO_TARGET_DIR` and config).
pub fn target_dir() -> Result<PathBuf, String> {
    let out = proc::run_stdout(cargo().args(["metadata", "--format-version", "1", "--no-deps"]))?;
    let meta = json::parse(out.trim())?;
    meta.get("target_directory")
        .and_then(Json::as_str)
        .map(PathBuf::from)
        .ok_or_else(|| "`cargo metadata` gave no target_directory".to_string())
}

/// Builds the bench binary in release with extra cargo arguments; returns its path.
pub fn build(extra: &[&str]) -> Result<PathBuf, String> {
    let mut args = vec!["-p", PACKAGE];
    args.extend_from_slice(extra);
    build_executable(&args, PACKAGE)
}

/// Runs `cargo build --release` with `args`; returns the path of the executable of target
/// `name` that it built.
pub fn build_executable(args: &[&str], name: &str) -> Result<PathBuf, String> {
    let out = proc::run_stdout(
        cargo()
            .args([
                "build",
                "--release",
                "--message-format=json-render-diagnostics",
            ])
            .args(args),
    )?;
    let mut exe = None;
    for line in out.lines().filter(|l| l.starts_with('{')) {
        let msg = json::parse(line)?;
        if msg.get("reason").and_then(Json::as_str) == Some("compiler-artifact")
            && msg.pointer("/target/name").and_then(Json::as_str) == Some(name)
            && let Some(path) = msg.get("executable").and_then(Json::as_str)
        {
            exe = Some(PathBuf::from(path));
        }
    }
    exe.ok_or_else(|| format!("cargo built no `{name}` executable"))
}

/// Arguments for which the bench binary measures nothing and needs no boost copy, or runs a
/// suite without variant impls (`io`: its servers are child processes of the main binary).
fn needs_boost(args: &[String]) -> bool {
    !matches!(
        args.first().map(String::as_str),
        None | Some(
            "list"
                | "backend"
                | "measure"
                | "serve"
                | "load"
                | "help"
                | "-h"
                | "--help"
                | "io"
                | "instr"
                | "instr-run"
        )
    )
}

/// Whether the arguments run a suite (not a subcommand such as `list` or `measure`).
fn runs_suite(args: &[String]) -> bool {
    !matches!(
        args.first().map(String::as_str),
        None | Some(
            "list"
                | "backend"
                | "variants"
                | "measure"
                | "instr-run"
                | "serve"
                | "load"
                | "help"
                | "-h"
                | "--help"
        )
    )
}

pub fn main(args: &[String]) -> Result<ExitCode, String> {
    // `--markdown PATH` is ours: the bench binary gets a `--json` report to make it from.
    let mut args = args.to_vec();
    let markdown = match args.iter().position(|a| a == "--markdown") {
        Some(i) if i + 1 < args.len() => {
            let path = PathBuf::from(args.remove(i + 1));
            args.remove(i);
            Some(path)
        }
        Some(_) => return Err("--markdown needs a path (e.g. docs/benchmarks.md)".into()),
        None => None,
    };
    let update_baseline = match args.iter().position(|a| a == "--update-baseline") {
        Some(i) => {
            args.remove(i);
            if args.first().map(String::as_str) != Some("instr") {
                return Err("--update-baseline goes with the `instr` suite only".into());
            }
            true
        }
        None => false,
    };
    let args = &args[..];
    let mut json_report = args
        .iter()
        .position(|a| a == "--json")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from);
    let main_bin = build(&[])?;
    let mut run = Command::new(&main_bin);
    run.args(args);
    if (markdown.is_some() || update_baseline) && runs_suite(args) && json_report.is_none() {
        let path = target_dir()?
            .join("bench")
            .join(format!("{}.json", args[0]));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        run.arg("--json").arg(&path);
        json_report = Some(path);
    }
    if runs_suite(args) && !args.iter().any(|a| a == "--svg" || a == "--json") {
        let svg = target_dir()?.join("bench").join(format!("{}.svg", args[0]));
        run.arg("--svg").arg(svg);
    }
    if needs_boost(args) {
        for (feature, env) in variants(&main_bin)? {
            let dir = target_dir()?.join(format!("bench-{feature}"));
            let dir = dir.to_string_lossy().into_owned();
            match build(&["--features", &feature, "--target-dir", &dir]) {
                Ok(bin) => {
                    run.env(&env, bin);
                }
                Err(e) => {
                    eprintln!(
                        "xtask bench: warning: the `{feature}` build failed, so its rows will \
                         fail: {e}"
                    );
                    run.env_remove(&env);
                }
            }
        }
    }
    proc::announce(&run);
    // The bench binary resolves relative paths (--json) against the caller's directory.
    let status = run
        .status()
        .map_err(|e| format!("cannot run {}: {e}", main_bin.display()))?;
    if status.success()
        && let (Some(md), Some(report)) = (&markdown, &json_report)
    {
        crate::bench_md::update(report, md)?;
    }
    if status.success()
        && update_baseline
        && let Some(report) = &json_report
    {
        crate::instr::update_baseline(report)?;
    }
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
        None => {
            eprintln!("xtask bench: {} was killed ({status})", main_bin.display());
            ExitCode::FAILURE
        }
    })
}
