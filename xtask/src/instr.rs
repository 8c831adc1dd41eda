//! The instruction-count baseline: `cargo xtask ci --only instr` and
//! `cargo xtask bench instr --update-baseline`.
//!
//! The `instr` suite of `spindle-bench` counts instructions per operation with callgrind (see
//! `crates/bench/src/instr/mod.rs`). Those counts do not depend on the machine's load, so CI
//! compares them with the baseline committed in [`BASELINE`] (a JSON report of the suite, in
//! the format of `--json`) and fails when a Spindle row (an impl whose name starts with
//! `spindle`) costs more than [`TOLERANCE`] above its baseline. Peer rows (corosensei, tokio,
//! parking_lot) are shown for orientation only: they change with their crates' versions.
//!
//! Updating the baseline is explicit: `cargo xtask bench instr --update-baseline` runs the
//! suite and writes its report to [`BASELINE`]; the commit that changes the file says why.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::bench_md::{Row, parse_report};
use crate::proc;

/// The committed baseline, relative to the workspace root.
pub const BASELINE: &str = "crates/bench/instr-baseline.json";

/// The allowed regression of a Spindle row: 3 %.
pub const TOLERANCE: f64 = 0.03;

/// The baseline's path in this checkout.
pub fn baseline_path() -> PathBuf {
    proc::root().join(BASELINE)
}

/// Writes the report of an `instr` run as the new baseline.
pub fn update_baseline(report: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(report)
        .map_err(|e| format!("cannot read {}: {e}", report.display()))?;
    let (suite, rows) = parse_report(&text)?;
    if suite != "instr" {
        return Err(format!(
            "--update-baseline needs the `instr` suite (this report is `{suite}`)"
        ));
    }
    if rows.iter().any(|r| !r.value.is_finite()) {
        return Err("the run has rows without a value: the baseline is left as it was".into());
    }
    let path = baseline_path();
    std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    println!(
        "wrote {} ({} rows); commit it with a message that says why the counts changed",
        path.display(),
        rows.len()
    );
    Ok(())
}

/// Whether a row is Spindle's own (checked against the baseline) rather than a peer's.
fn is_spindle(imp: &str) -> bool {
    imp.starts_with("spindle")
}

/// Compares a run with the baseline: one line per row, and the list of regressions (Spindle
/// rows more than [`TOLERANCE`] above the baseline, or missing from the run).
pub fn compare(baseline: &[Row], run: &[Row]) -> (Vec<String>, Vec<String>) {
    let mut lines = Vec::new();
    let mut regressions = Vec::new();
    for b in baseline {
        let now = run.iter().find(|r| r.bench == b.bench && r.imp == b.imp);
        let label = format!("{} {}", b.bench, b.imp);
        let Some(now) = now.filter(|r| r.value.is_finite()) else {
            let line = format!("{label:<40} baseline {:>9.2}  now: no value", b.value);
            if is_spindle(&b.imp) {
                regressions.push(format!("{label}: not measured"));
            }
            lines.push(line);
            continue;
        };
        let change = if b.value > 0.0 {
            now.value / b.value - 1.0
        } else {
            0.0
        };
        let verdict = if !is_spindle(&b.imp) {
            "(peer, not checked)"
        } else if change > TOLERANCE {
            regressions.push(format!(
                "{label}: {:.2} instructions, baseline {:.2} ({:+.1} %)",
                now.value,
                b.value,
                change * 100.0
            ));
            "REGRESSION"
        } else {
            "ok"
        };
        lines.push(format!(
            "{label:<40} baseline {:>9.2}  now {:>9.2}  {:+6.1} %  {verdict}",
            b.value,
            now.value,
            change * 100.0
        ));
    }
    for r in run.iter().filter(|r| {
        !baseline
            .iter()
            .any(|b| b.bench == r.bench && b.imp == r.imp)
    }) {
        lines.push(format!(
            "{:<40} not in the baseline  now {:>9.2}",
            format!("{} {}", r.bench, r.imp),
            r.value
        ));
    }
    (lines, regressions)
}

/// The `instr` CI leg: builds `spindle-bench` in release, runs the `instr` suite once and
/// checks the Spindle rows against the baseline.
pub fn ci() -> Result<(), String> {
    if !proc::succeeds(Command::new("valgrind").arg("--version")) {
        return Err("valgrind is not installed (or does not run): apt-get install valgrind".into());
    }
    let baseline_text = std::fs::read_to_string(baseline_path()).map_err(|e| {
        format!(
            "cannot read the baseline {BASELINE}: {e} (make one with `cargo xtask bench instr \
             --update-baseline`)"
        )
    })?;
    let (_, baseline) = parse_report(&baseline_text)?;
    let bin = crate::bench::build(&[])?;
    let report = crate::bench::target_dir()?
        .join("bench")
        .join("instr-ci.json");
    if let Some(dir) = report.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let mut run = Command::new(&bin);
    run.args(["instr", "--rounds", "1", "--json"]).arg(&report);
    proc::run(&mut run)?;
    let text = std::fs::read_to_string(&report)
        .map_err(|e| format!("cannot read {}: {e}", report.display()))?;
    let (_, rows) = parse_report(&text)?;
    let (lines, regressions) = compare(&baseline, &rows);
    println!("instructions per operation against {BASELINE}:");
    for l in &lines {
        println!("  {l}");
    }
    if regressions.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "more than {:.0} % above the baseline: {} (if intended, run `cargo xtask bench instr \
             --update-baseline` and say why in the commit)",
            TOLERANCE * 100.0,
            regressions.join("; ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(bench: &str, imp: &str, value: f64) -> Row {
        Row {
            bench: bench.into(),
            imp: imp.into(),
            value,
            unit: "instr".into(),
        }
    }

    #[test]
    fn spindle_rows_fail_above_three_percent() {
        let base = [row("switch_instr", "spindle", 100.0)];
        let (_, bad) = compare(&base, &[row("switch_instr", "spindle", 103.5)]);
        assert_eq!(bad.len(), 1, "{bad:?}");
        let (_, ok) = compare(&base, &[row("switch_instr", "spindle", 102.9)]);
        assert!(ok.is_empty(), "{ok:?}");
        let (_, faster) = compare(&base, &[row("switch_instr", "spindle", 50.0)]);
        assert!(faster.is_empty(), "{faster:?}");
    }

    #[test]
    fn peer_rows_are_not_checked() {
        let base = [row("switch_instr", "corosensei", 30.0)];
        let (lines, bad) = compare(&base, &[row("switch_instr", "corosensei", 60.0)]);
        assert!(bad.is_empty(), "{bad:?}");
        assert!(lines[0].contains("peer"), "{lines:?}");
    }

    #[test]
    fn a_missing_spindle_row_is_a_regression() {
        let base = [row("ping_pong_instr", "spindle-rt", 10.0)];
        let (_, bad) = compare(&base, &[]);
        assert_eq!(bad.len(), 1, "{bad:?}");
        let (_, bad) = compare(&base, &[row("ping_pong_instr", "spindle-rt", f64::NAN)]);
        assert_eq!(bad.len(), 1, "{bad:?}");
    }
}
