//! The SVG chart of a suite's results: one grouped horizontal bar chart — a group of bars per
//! bench, a bar per impl — of each impl's median as a ratio to the bench's reference impl.
//!
//! Ratios run left to right on a linear axis from 0, or on a log axis centred on 1× when they
//! span more than 10× (bars then grow left of 1× for "less than the reference" and right for
//! "more"). Each bar is labelled with the impl, the ratio and the measured value. A bench without
//! a measured reference has no ratios and is left out (the chart's footer says which).
//!
//! Drawn with plotters' SVG backend only (no font files, no fontconfig: text is written as SVG
//! `<text>` and laid out with plotters' built-in size estimate), so it works on a fresh machine.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::harness::fmt_value;

/// One bench's results, as the chart needs them.
#[derive(Debug, Clone)]
pub struct ChartBench {
    pub name: String,
    /// The unit's name (`ns`, `qps`, ...).
    pub unit: String,
    pub higher_is_better: bool,
    /// The impl the ratios are to.
    pub reference: Option<String>,
    /// `(impl, median)`, in the suite's impl order; failed impls are absent.
    pub values: Vec<(String, f64)>,
}

impl ChartBench {
    /// The reference's value, if it was measured and is non-zero.
    fn reference_value(&self) -> Option<f64> {
        let r = self.reference.as_deref()?;
        self.values
            .iter()
            .find(|(i, v)| i == r && *v != 0.0 && v.is_finite())
            .map(|(_, v)| *v)
    }
}

const WIDTH: u32 = 1000;
const ROW: u32 = 17;
const TOP: u32 = 56;
const BOTTOM: u32 = 110;

/// Formats a ratio: 0.952×, 2.38×, 42×.
fn fmt_ratio(r: f64) -> String {
    if r >= 100.0 {
        format!("{r:.0}×")
    } else if r >= 10.0 {
        format!("{r:.1}×")
    } else if r >= 1.0 {
        format!("{r:.2}×")
    } else {
        format!("{r:.3}×")
    }
}

/// Writes the chart of `benches` to `path` (an SVG file). `suite` and `subtitle` (the machine,
/// the date, the settings) head it. Returns how many benches were charted.
pub fn write_svg(
    path: &Path,
    suite: &str,
    subtitle: &str,
    benches: &[ChartBench],
) -> Result<usize, String> {
    let charted: Vec<(&ChartBench, f64)> = benches
        .iter()
        .filter_map(|b| b.reference_value().map(|r| (b, r)))
        .collect();
    let skipped: Vec<&str> = benches
        .iter()
        .filter(|b| b.reference_value().is_none())
        .map(|b| b.name.as_str())
        .collect();

    // Ratios, and whether they need a log axis.
    let ratios: Vec<f64> = charted
        .iter()
        .flat_map(|(b, r)| b.values.iter().map(move |(_, v)| v / r))
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect();
    let lo = ratios.iter().copied().fold(1.0, f64::min);
    let hi = ratios.iter().copied().fold(1.0, f64::max);
    let log = hi / lo > 10.0;
    let x = |r: f64| if log { r.max(1e-9).log10() } else { r };
    // Room on the right for the labels of the longest bars.
    let (x_lo, x_hi) = if log {
        let (a, b) = (lo.log10(), hi.log10());
        let span = (b - a).max(0.5);
        (a - span * 0.08, b + span * 0.45)
    } else {
        (0.0, hi * 1.45)
    };

    // Rows: one heading per bench, then one per impl, then a gap.
    let rows: usize = charted.iter().map(|(b, _)| b.values.len() + 2).sum();
    let rows = rows.max(1);
    let height = TOP + BOTTOM + ROW * rows as u32;

    let mut impls: Vec<&str> = Vec::new();
    for (b, _) in &charted {
        for (i, _) in &b.values {
            if !impls.contains(&i.as_str()) {
                impls.push(i);
            }
        }
    }
    let color = |imp: &str| {
        let k = impls.iter().position(|i| *i == imp).unwrap_or(0);
        Palette99::pick(k).to_rgba()
    };

    let err = |e: &dyn std::fmt::Display| format!("chart {}: {e}", path.display());
    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (upper, footer) = root.split_vertically(height - 44);
    let title = format!("{suite}: ratio to each bench's reference impl");
    let mut chart = ChartBuilder::on(&upper)
        .caption(&title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(0)
        .build_cartesian_2d(x_lo..x_hi, 0.0..rows as f64)
        .map_err(|e| err(&e))?;
    let tick = |v: &f64| {
        let r = if log { 10f64.powf(*v) } else { *v };
        fmt_ratio(r)
    };
    let x_desc = if log {
        "ratio to the reference (log scale; the reference is 1×)"
    } else {
        "ratio to the reference (1×)"
    };
    // On the log axis, ticks at the powers of ten: as many labels as whole decades.
    let labels = if log {
        (x_hi - x_lo).ceil() as usize + 1
    } else {
        12
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .x_labels(labels)
        .x_max_light_lines(if log { 0 } else { 4 })
        .x_label_formatter(&tick)
        .x_desc(x_desc)
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(|e| err(&e))?;

    // The reference line at 1×.
    let one = x(1.0);
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![(one, 0.0), (one, rows as f64)],
            BLACK.mix(0.6).stroke_width(1),
        )))
        .map_err(|e| err(&e))?;

    let base = if log { 0.0 } else { 0.0_f64.max(x_lo) };
    let heading_style = TextStyle::from(("sans-serif", 13).into_font().style(FontStyle::Bold))
        .pos(Pos::new(HPos::Left, VPos::Center));
    let label_style =
        TextStyle::from(("sans-serif", 11).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    // y runs upwards: the first bench is at the top.
    let mut row = rows as f64;
    for (bench, reference) in &charted {
        row -= 1.0;
        let better = if bench.higher_is_better {
            "higher is better"
        } else {
            "lower is better"
        };
        let heading = format!(
            "{} ({}, {better}; reference: {})",
            bench.name,
            bench.unit,
            bench.reference.as_deref().unwrap_or("?")
        );
        chart
            .draw_series(std::iter::once(Text::new(
                heading,
                (x_lo, row - 0.5),
                heading_style.clone(),
            )))
            .map_err(|e| err(&e))?;
        for (imp, v) in &bench.values {
            row -= 1.0;
            let ratio = v / reference;
            let end = x(ratio);
            let (y0, y1) = (row - 0.9, row - 0.1);
            let (a, b) = if end >= base {
                (base, end)
            } else {
                (end, base)
            };
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(a, y0), (b, y1)],
                    color(imp).filled(),
                )))
                .map_err(|e| err(&e))?;
            let label = if Some(imp.as_str()) == bench.reference.as_deref() {
                format!("{imp}: reference ({} {})", fmt_value(*v), bench.unit)
            } else {
                format!(
                    "{imp}: {} ({} {})",
                    fmt_ratio(ratio),
                    fmt_value(*v),
                    bench.unit
                )
            };
            let at = end.max(base) + (x_hi - x_lo) * 0.005;
            chart
                .draw_series(std::iter::once(Text::new(
                    label,
                    (at, row - 0.5),
                    label_style.clone(),
                )))
                .map_err(|e| err(&e))?;
        }
        row -= 1.0; // gap
    }

    let footer_style = TextStyle::from(("sans-serif", 12).into_font());
    footer
        .draw(&Text::new(
            subtitle.to_string(),
            (12, 26),
            footer_style.clone(),
        ))
        .map_err(|e| err(&e))?;
    if !skipped.is_empty() {
        footer
            .draw(&Text::new(
                format!(
                    "not charted (no measured reference): {}",
                    skipped.join(", ")
                ),
                (12, 8),
                footer_style,
            ))
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(charted.len())
}

/// Today's date (UTC) as `YYYY-MM-DD`, for the chart's footer.
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bench(name: &str, reference: Option<&str>, values: &[(&str, f64)]) -> ChartBench {
        ChartBench {
            name: name.to_string(),
            unit: "ns".to_string(),
            higher_is_better: false,
            reference: reference.map(str::to_string),
            values: values.iter().map(|(i, v)| (i.to_string(), *v)).collect(),
        }
    }

    fn tmp(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("spindle-chart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    fn check_svg(path: &Path) -> String {
        let svg = std::fs::read_to_string(path).unwrap();
        assert!(svg.trim_start().starts_with("<svg"), "{svg}");
        assert!(svg.trim_end().ends_with("</svg>"), "{svg}");
        assert_eq!(svg.matches("<svg").count(), 1);
        svg
    }

    #[test]
    fn writes_an_svg_with_every_bench_and_impl() {
        let path = tmp("linear.svg");
        let benches = [
            bench(
                "switch",
                Some("corosensei"),
                &[("spindle", 1.73), ("corosensei", 1.82), ("generator", 6.29)],
            ),
            bench(
                "create_run_drop",
                Some("corosensei"),
                &[("spindle", 39.3), ("corosensei", 14.6)],
            ),
            bench("shared_resume_8", None, &[("spindle", 38.5)]),
        ];
        let n = write_svg(&path, "core", "test machine, 2026-01-01", &benches).unwrap();
        assert_eq!(n, 2);
        let svg = check_svg(&path);
        for s in [
            "switch",
            "create_run_drop",
            "spindle",
            "corosensei",
            "generator",
            "core: ratio",
            "test machine, 2026-01-01",
            "not charted (no measured reference): shared_resume_8",
            "0.951×", // spindle's switch ratio, 1.73 / 1.82
        ] {
            assert!(svg.contains(s), "no {s:?} in the chart");
        }
        assert!(svg.contains("<rect"), "no bars");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn wide_ratios_use_a_log_axis() {
        let path = tmp("log.svg");
        let benches = [bench(
            "spawn_many",
            Some("tokio-mt"),
            &[
                ("spindle-ws", 1227.0),
                ("tokio-mt", 478.0),
                ("std-thread", 37018.0),
            ],
        )];
        write_svg(&path, "sched", "", &benches).unwrap();
        let svg = check_svg(&path);
        assert!(svg.contains("log scale"));
        assert!(svg.contains("std-thread: 77.4×"), "{svg}");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn an_empty_result_still_makes_a_valid_file() {
        let path = tmp("empty.svg");
        assert_eq!(write_svg(&path, "io", "", &[]).unwrap(), 0);
        check_svg(&path);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn dates() {
        assert_eq!(today().len(), 10);
        assert!(today().starts_with("20"));
    }
}
