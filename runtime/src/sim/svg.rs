//! A picture of memory over time: one panel per tier, bytes held as a step
//! line, the budget as a dashed line. A budget more than four times the
//! peak would flatten the line, so the panel is then scaled to the peak and
//! the budget drawn dotted along its top edge, labelled "off scale". Plain
//! SVG, no scripts.
//!
//! Long simulations have far more changes than pixels, so each pixel column
//! keeps only its first, lowest, highest and last value: the picture is
//! exact at its resolution and its size is bounded by the width.

use std::fmt::Write;

use fateplan_planner::units::{format_bytes, format_seconds};

use super::memory::TIERS;
use super::{Recording, SimReport};

const WIDTH: f64 = 960.0;
const PANEL_HEIGHT: f64 = 180.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 50.0;
const TOP: f64 = 60.0;
const GAP: f64 = 50.0;
const PLOT_WIDTH: f64 = WIDTH - LEFT - RIGHT;
const COLUMNS: usize = PLOT_WIDTH as usize;

const _: () = assert!(WIDTH > LEFT + RIGHT);

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Per pixel column: first, lowest, highest and last value.
fn columns(samples: &[(f64, u64)], iteration_s: f64) -> Vec<Option<[u64; 4]>> {
    let mut out: Vec<Option<[u64; 4]>> = vec![None; COLUMNS + 1];
    let span = if iteration_s > 0.0 { iteration_s } else { 1.0 };
    let mut current = 0u64;
    let column_of = |t: f64| ((t / span).clamp(0.0, 1.0) * COLUMNS as f64) as usize;
    let mut next_column = 0usize;
    for &(t, value) in samples {
        let c = column_of(t);
        // Columns with no change hold the value from before.
        while next_column < c {
            out[next_column].get_or_insert([current; 4]);
            next_column += 1;
        }
        let cell = out[c].get_or_insert([current; 4]);
        cell[1] = cell[1].min(value);
        cell[2] = cell[2].max(value);
        cell[3] = value;
        current = value;
        next_column = next_column.max(c);
    }
    while next_column <= COLUMNS {
        out[next_column].get_or_insert([current; 4]);
        next_column += 1;
    }
    out
}

/// The memory picture of a simulation.
pub fn memory_svg(report: &SimReport, recording: &Recording) -> String {
    let height = TOP + 3.0 * (PANEL_HEIGHT + GAP);
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
         viewBox=\"0 0 {WIDTH} {height}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(svg, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
    let planned = match report.profile == report.planned_profile {
        true => String::new(),
        false => format!(" (planned for {})", report.planned_profile),
    };
    let title = format!(
        "{} on {}{planned}, seed {}: memory per tier over {}",
        report.workload,
        report.profile,
        report.seed,
        format_seconds(recording.iteration_s)
    );
    let _ = writeln!(
        svg,
        "<text x=\"{LEFT}\" y=\"24\" font-size=\"14\">{}</text>",
        escape(&title)
    );
    for (panel, tier) in TIERS.iter().enumerate() {
        let top = TOP + panel as f64 * (PANEL_HEIGHT + GAP);
        let bottom = top + PANEL_HEIGHT;
        let budget = recording.budgets.of(*tier);
        let samples: Vec<(f64, u64)> = recording
            .memory
            .iter()
            .map(|&(t, bytes)| (t, bytes[panel]))
            .collect();
        let peak = samples.iter().map(|s| s.1).max().unwrap_or(0);
        let off_scale = peak > 0 && budget as f64 > 4.0 * peak as f64;
        let top_bytes = if off_scale { peak } else { peak.max(budget) };
        let scale_max = (top_bytes as f64 * 1.05).max(1.0);
        let y = |bytes: u64| bottom - PANEL_HEIGHT * (bytes as f64 / scale_max);
        let x = |column: usize| LEFT + column as f64;
        let _ = writeln!(
            svg,
            "<g class=\"tier\" id=\"tier-{tier}\">\n<rect x=\"{LEFT}\" y=\"{top}\" width=\"{PLOT_WIDTH}\" \
             height=\"{PANEL_HEIGHT}\" fill=\"none\" stroke=\"#999\"/>"
        );
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{}\" font-weight=\"bold\">{tier}: peak {} of {} budget</text>",
            LEFT,
            top - 8.0,
            format_bytes(peak),
            format_bytes(budget)
        );
        for (fraction, label) in [(0.0, 0u64), (1.0, top_bytes)] {
            let _ = writeln!(
                svg,
                "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                LEFT - 6.0,
                bottom - PANEL_HEIGHT * fraction / 1.05 + 4.0,
                format_bytes(label)
            );
        }
        // Bytes held: a step line through each column's first, lowest,
        // highest and last value.
        let mut points = String::new();
        let mut previous: Option<u64> = None;
        for (column, cell) in columns(&samples, recording.iteration_s)
            .into_iter()
            .enumerate()
        {
            let Some([first, low, high, last]) = cell else {
                continue;
            };
            if let Some(p) = previous {
                let _ = write!(points, "{:.1},{:.1} ", x(column), y(p));
            }
            for value in [first, low, high, last] {
                let _ = write!(points, "{:.1},{:.1} ", x(column), y(value));
            }
            previous = Some(last);
        }
        let _ = writeln!(
            svg,
            "<polyline class=\"used\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.2\" points=\"{}\"/>",
            points.trim_end()
        );
        let (by, dashes, note) = if off_scale {
            (top, "2,6", " (off scale)")
        } else {
            (y(budget), "6,4", "")
        };
        let _ = writeln!(
            svg,
            "<line class=\"budget\" x1=\"{LEFT}\" y1=\"{by:.1}\" x2=\"{}\" y2=\"{by:.1}\" \
             stroke=\"#d62728\" stroke-dasharray=\"{dashes}\"/>",
            LEFT + PLOT_WIDTH
        );
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#d62728\">budget {}{note}</text>",
            LEFT + PLOT_WIDTH - 4.0,
            by - 4.0,
            format_bytes(budget)
        );
        for k in 0..=4 {
            let fraction = k as f64 / 4.0;
            let _ = writeln!(
                svg,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#555\">{}</text>",
                LEFT + PLOT_WIDTH * fraction,
                bottom + 16.0,
                format_seconds(recording.iteration_s * fraction)
            );
        }
        let _ = writeln!(svg, "</g>");
    }
    let _ = writeln!(svg, "</svg>");
    svg
}
