//! `sluice-bench report A.json B.json ...`: the reports of several runs (`--json` files of
//! any workload) side by side, one column per run, and with `--plot PATH` their latency
//! curves on one percentile chart.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use serde_json::Value;

use crate::harness::{Curve, write_percentile_plot};

/// Options of `sluice-bench report`.
#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// Reports written by `--json` (one column each)
    #[arg(required = true, value_name = "JSON")]
    pub files: Vec<PathBuf>,
    /// Also plot every latency curve the reports hold on one chart (SVG)
    #[arg(long, value_name = "PATH")]
    pub plot: Option<PathBuf>,
}

/// One report, flattened: `(field path, value)` in document order, and its curves.
#[derive(Debug)]
struct Run {
    name: String,
    fields: Vec<(String, String)>,
    curves: Vec<Curve>,
}

fn is_curve(v: &Value) -> bool {
    v.get("label").is_some_and(Value::is_string) && v.get("points").is_some_and(Value::is_array)
}

fn flatten(prefix: &str, v: &Value, run: &mut Run) {
    match v {
        Value::Object(map) if is_curve(v) => {
            if let Ok(mut curve) = serde_json::from_value::<Curve>(v.clone()) {
                curve.label = format!("{}: {}", run.name, curve.label);
                run.curves.push(curve);
            }
            let _ = map;
        }
        Value::Object(map) => {
            for (k, v) in map {
                let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                flatten(&path, v, run);
            }
        }
        Value::Array(_) | Value::Null => {}
        Value::Number(n) => {
            let text = match n.as_f64() {
                Some(f) if n.is_f64() => format!("{f:.2}"),
                _ => n.to_string(),
            };
            run.fields.push((prefix.to_string(), text));
        }
        Value::String(s) => run.fields.push((prefix.to_string(), s.clone())),
        Value::Bool(b) => run.fields.push((prefix.to_string(), b.to_string())),
    }
}

fn load(path: &Path) -> Result<Run> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value: Value = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    anyhow::ensure!(value.is_object(), "{} is not a report (a JSON object)", path.display());
    let name = path.file_stem().map_or_else(|| path.display().to_string(), |s| s.to_string_lossy().into_owned());
    let mut run = Run { name, fields: Vec::new(), curves: Vec::new() };
    flatten("", &value, &mut run);
    Ok(run)
}

/// Builds the side-by-side table (and writes the chart).
///
/// # Errors
///
/// A file that cannot be read or is not a JSON report; `--plot` with no curves.
pub fn run(args: &ReportArgs) -> Result<String> {
    let runs: Vec<Run> = args.files.iter().map(|p| load(p)).collect::<Result<_>>()?;
    let mut keys: Vec<String> = Vec::new();
    for run in &runs {
        for (k, _) in &run.fields {
            if !keys.contains(k) {
                keys.push(k.clone());
            }
        }
    }
    let mut rows: Vec<Vec<String>> =
        vec![std::iter::once("field".to_string()).chain(runs.iter().map(|r| r.name.clone())).collect()];
    for k in &keys {
        let mut row = vec![k.clone()];
        for run in &runs {
            row.push(run.fields.iter().find(|(f, _)| f == k).map_or_else(|| "-".to_string(), |(_, v)| v.clone()));
        }
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len()).map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(
                |(c, cell)| {
                    if c == 0 { format!("{cell:<w$}", w = widths[c]) } else { format!("{cell:>w$}", w = widths[c]) }
                },
            )
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    if let Some(path) = &args.plot {
        let curves: Vec<Curve> = runs.into_iter().flat_map(|r| r.curves).collect();
        write_percentile_plot(path, "latency by percentile", &curves)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_line_up_by_field_and_their_curves_plot() {
        let dir = std::env::temp_dir().join(format!("sluice-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = dir.join("a.json");
        let b = dir.join("b.json");
        let curve = |scale: u64| serde_json::json!({"label": "x", "points": [[0.0, 10 * scale], [90.0, 20 * scale], [99.0, 40 * scale]]});
        std::fs::write(&a, serde_json::json!({"workload": "pipeline", "events_per_sec": 1.5e6, "latency_us": {"p99": 40}, "latency_curve": curve(1)}).to_string()).unwrap();
        std::fs::write(&b, serde_json::json!({"workload": "pipeline", "events_per_sec": 2.0e6, "latency_us": {"p99": 80}, "extra": 7, "latency_curve": curve(2)}).to_string()).unwrap();
        let plot = dir.join("both.svg");
        let table = run(&ReportArgs { files: vec![a.clone(), b.clone()], plot: Some(plot.clone()) }).unwrap();
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("field") && lines[0].contains('a') && lines[0].ends_with('b'), "{table}");
        assert!(
            table.lines().any(|l| l.starts_with("latency_us.p99") && l.contains("40") && l.ends_with("80")),
            "{table}"
        );
        assert!(table.lines().any(|l| l.starts_with("extra") && l.contains('-') && l.ends_with('7')), "{table}");
        let svg = std::fs::read_to_string(&plot).unwrap();
        assert!(svg.contains("a: x") && svg.contains("b: x"), "both curves are in the legend");
        std::fs::write(&a, "not json").unwrap();
        assert!(run(&ReportArgs { files: vec![a], plot: None }).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
