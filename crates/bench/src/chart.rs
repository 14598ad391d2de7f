//! SVG charts of a suite run (plotters, SVG backend, no fonts needed):
//! grouped bars of throughput per scenario and target, grouped bars of p99 latency, and the
//! per-second throughput of the mixed 1:9 phase with the checkpoint window shaded.

use std::path::Path;

use plotters::prelude::*;

use crate::rows::Row;

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

fn names(summary: &[(Row, f64, f64)]) -> (Vec<String>, Vec<String>) {
    let mut scenarios = Vec::new();
    let mut targets = Vec::new();
    for (r, _, _) in summary {
        if !scenarios.contains(&r.scenario) {
            scenarios.push(r.scenario.clone());
        }
        if !targets.contains(&r.target) {
            targets.push(r.target.clone());
        }
    }
    (scenarios, targets)
}

/// Grouped bars: one group per scenario, one bar per target.
fn grouped_bars(
    summary: &[(Row, f64, f64)],
    path: &Path,
    title: &str,
    y_label: &str,
    value: fn(&Row) -> f64,
) -> Result<(), String> {
    let (scenarios, targets) = names(summary);
    // Headroom above the tallest bar keeps the legend clear of the bars.
    let max = summary.iter().map(|(r, _, _)| value(r)).fold(0.0, f64::max) * 1.45 + 1e-9;
    let root = SVGBackend::new(path, (1100, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let n = scenarios.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..n, 0.0..max)
        .map_err(err)?;
    let labels = scenarios.clone();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(scenarios.len() * 2 + 1)
        .x_label_formatter(&move |x| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 0.01 && i < labels.len() {
                labels[i].clone()
            } else {
                String::new()
            }
        })
        .x_desc("scenario")
        .y_desc(y_label)
        .draw()
        .map_err(err)?;
    let width = 0.8 / targets.len() as f64;
    for (ti, t) in targets.iter().enumerate() {
        let color = PALETTE[ti % PALETTE.len()];
        let bars: Vec<_> = scenarios
            .iter()
            .enumerate()
            .filter_map(|(si, s)| {
                let (r, _, _) = summary
                    .iter()
                    .find(|(r, _, _)| &r.scenario == s && &r.target == t)?;
                let x0 = si as f64 + 0.1 + ti as f64 * width;
                Some(Rectangle::new(
                    [(x0, 0.0), (x0 + width * 0.9, value(r))],
                    color.filled(),
                ))
            })
            .collect();
        chart
            .draw_series(bars)
            .map_err(err)?
            .label(t.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

/// Per-second throughput of one phase for every target, checkpoint windows shaded.
fn timeline(rows: &[Row], scenario: &str, path: &Path) -> Result<(), String> {
    let picked: Vec<&Row> = rows
        .iter()
        .filter(|r| r.scenario == scenario && r.repeat == 0)
        .collect();
    let max_ops = picked
        .iter()
        .flat_map(|r| r.timeline_ops.iter().copied())
        .max()
        .unwrap_or(1) as f64
        * 1.15;
    let max_t = picked
        .iter()
        .map(|r| r.timeline_ops.len())
        .max()
        .unwrap_or(1) as f64;
    let root = SVGBackend::new(path, (1100, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("Throughput per second, {scenario} (shaded: checkpoint running)"),
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..max_t, 0.0..max_ops)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("seconds into the phase")
        .y_desc("requests per second")
        .draw()
        .map_err(err)?;
    for (i, r) in picked.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        if let Some((a, b)) = r.checkpoint_window {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(a, 0.0), (b.max(a + 0.2), max_ops)],
                    color.mix(0.15).filled(),
                )))
                .map_err(err)?;
        }
        // The last second is partial: leave it out.
        let n = r.timeline_ops.len().saturating_sub(1);
        chart
            .draw_series(LineSeries::new(
                r.timeline_ops
                    .iter()
                    .take(n)
                    .enumerate()
                    .map(|(s, &ops)| (s as f64 + 0.5, ops as f64)),
                color.stroke_width(2),
            ))
            .map_err(err)?
            .label(r.target.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

pub fn all(summary: &[(Row, f64, f64)], rows: &[Row], dir: &Path) -> Result<(), String> {
    grouped_bars(
        summary,
        &dir.join("throughput.svg"),
        "Throughput by scenario (median over repeats)",
        "requests per second",
        |r| r.ops_per_sec,
    )?;
    grouped_bars(
        summary,
        &dir.join("latency.svg"),
        "p99 latency by scenario",
        "p99 latency (ms)",
        |r| r.p99_ms,
    )?;
    timeline(rows, "mixed 1:9", &dir.join("timeline.svg"))
}
