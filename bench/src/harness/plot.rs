//! Latency-by-percentile charts (`--plot PATH`): an SVG with one curve per run, the
//! percentile axis log-scaled as HdrHistogram's plotter draws it (0%, 90%, 99%, 99.9%,
//! ... evenly spaced), so the tail gets the room it deserves.

use std::path::Path;

use anyhow::{Context, Result};
use plotters::prelude::*;
use serde::{Deserialize, Serialize};

/// One run's latency distribution, as percentile (0-100) and value (microseconds) pairs,
/// sampled evenly on the log-scaled percentile axis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Curve {
    /// The legend entry.
    pub label: String,
    /// `(percentile, microseconds)`, percentiles rising.
    pub points: Vec<(f64, u64)>,
}

/// Where percentile `p` (0-100) sits on the log-scaled axis: `log10(1 / (1 - p/100))`,
/// so 90% is 1, 99% is 2, 99.9% is 3.
#[must_use]
pub fn percentile_axis(p: f64) -> f64 {
    let rest = (1.0 - p / 100.0).max(1e-9);
    -rest.log10()
}

/// The percentile at axis position `x` (the inverse of [`percentile_axis`]).
#[must_use]
pub fn axis_percentile(x: f64) -> f64 {
    100.0 * (1.0 - 10f64.powf(-x))
}

/// Samples a histogram of microseconds: 20 points per decade of the percentile axis, up to
/// the decade its count can resolve (at most 99.9999%), then the maximum.
#[must_use]
pub fn curve_of(label: &str, histogram: &hdrhistogram::Histogram<u64>) -> Curve {
    let mut points = Vec::new();
    if !histogram.is_empty() {
        let decades = (histogram.len() as f64).log10().clamp(1.0, 6.0);
        let steps = (decades * 20.0).round() as usize;
        for i in 0..=steps {
            let x = decades * i as f64 / steps as f64;
            let p = axis_percentile(x);
            points.push((p, histogram.value_at_quantile(p / 100.0)));
        }
        points.push((
            100.0 * (1.0 - 1.0 / histogram.len() as f64).max(points.last().map_or(0.0, |l| l.0 / 100.0)),
            histogram.max(),
        ));
    }
    Curve { label: label.to_string(), points }
}

/// Writes `curves` as an SVG chart to `path`.
///
/// # Errors
///
/// No curve with points, or the file cannot be written.
pub fn write_percentile_plot(path: &Path, title: &str, curves: &[Curve]) -> Result<()> {
    let drawn: Vec<&Curve> = curves.iter().filter(|c| !c.points.is_empty()).collect();
    anyhow::ensure!(!drawn.is_empty(), "nothing to plot: no latency was recorded");
    let x_max = drawn.iter().flat_map(|c| c.points.iter().map(|p| percentile_axis(p.0))).fold(1.0f64, f64::max).ceil();
    let y_max = drawn.iter().flat_map(|c| c.points.iter().map(|p| p.1)).max().unwrap_or(1).max(1) as f64 * 1.05;
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    let draw = || -> std::result::Result<(), Box<dyn std::error::Error>> {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(16)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
        chart
            .configure_mesh()
            .x_labels(x_max as usize + 1)
            .x_label_formatter(&|x| {
                let p = axis_percentile(*x);
                let text = format!("{p:.6}");
                let text = text.trim_end_matches('0').trim_end_matches('.');
                format!("{text}%")
            })
            .x_desc("percentile")
            .y_desc("latency (us)")
            .draw()?;
        for (i, curve) in drawn.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    curve.points.iter().map(|&(p, v)| (percentile_axis(p), v as f64)),
                    color.stroke_width(2),
                ))?
                .label(curve.label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        }
        chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| anyhow::anyhow!("{e}")).with_context(|| format!("plotting {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_percentile_axis_is_log_scaled_and_invertible() {
        for (p, x) in [(0.0, 0.0), (90.0, 1.0), (99.0, 2.0), (99.9, 3.0)] {
            assert!((percentile_axis(p) - x).abs() < 1e-9, "{p}");
            assert!((axis_percentile(x) - p).abs() < 1e-9, "{x}");
        }
    }

    #[test]
    fn curves_rise_and_plot_to_svg() {
        let mut h = hdrhistogram::Histogram::<u64>::new(3).unwrap();
        for v in 1..=10_000u64 {
            h.record(v).unwrap();
        }
        let curve = curve_of("run", &h);
        assert!(curve.points.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1), "{curve:?}");
        assert_eq!(curve.points.last().unwrap().1, h.max());
        let dir = std::env::temp_dir().join(format!("sluice-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.svg");
        write_percentile_plot(
            &path,
            "test",
            &[
                curve.clone(),
                Curve { label: "b".into(), points: curve.points.iter().map(|&(p, v)| (p, v * 2)).collect() },
            ],
        )
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("99.9%") && svg.contains("run"),
            "{}",
            &svg[..200.min(svg.len())]
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(write_percentile_plot(&dir.join("q.svg"), "empty", &[]).is_err());
    }
}
