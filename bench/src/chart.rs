//! The two SVG charts of a run (plotters, SVG backend): resume / read time against log length
//! for every peer, and append throughput per durability mode for every peer.

use std::path::Path;

use plotters::prelude::*;

use super::Results;
use super::peers::{BenchResult, PeerKind};

fn color(peer: &str) -> RGBColor {
    match peer {
        "sessionlog" => RGBColor(214, 39, 40),
        "sqlite-wal-full" => RGBColor(31, 119, 180),
        "sqlite-wal-normal" => RGBColor(158, 202, 225),
        "dsh-jsonl" => RGBColor(44, 160, 44),
        "dsh-jsonl-zstd" => RGBColor(23, 190, 207),
        "dsh-sqlite-18" => RGBColor(188, 189, 34),
        "redb" => RGBColor(255, 127, 14),
        "raw-disk" => RGBColor(90, 90, 90),
        "sessionlog-read-only" => RGBColor(255, 152, 150),
        "sessionlog-full-read" => RGBColor(140, 86, 75),
        _ => RGBColor(148, 103, 189),
    }
}

fn err(e: impl std::fmt::Display) -> super::peers::BenchError {
    format!("drawing a chart: {e}").into()
}

/// Resume time (ms, log scale) against session length (events, log scale), one line per peer.
pub fn resume_chart(r: &Results, path: &Path) -> BenchResult<()> {
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let xs: Vec<f64> = r.resume.iter().map(|x| x.events as f64).collect();
    let ys: Vec<f64> = r.resume.iter().map(|x| x.ms).collect();
    let (x0, x1) = bounds(&xs, 5_000.0, 2_000_000.0);
    let (y0, y1) = bounds(&ys, 0.1, 10_000.0);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Resume one session: open, load, surface + messages (child process)",
            ("sans-serif", 20),
        )
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("events in the session")
        .y_desc("milliseconds (median)")
        .x_label_formatter(&|x| human(*x))
        .y_label_formatter(&|y| format!("{y}"))
        .draw()
        .map_err(err)?;
    let mut names: Vec<&str> = Vec::new();
    for x in &r.resume {
        if !names.contains(&x.peer.as_str()) {
            names.push(&x.peer);
        }
    }
    for name in names {
        let pts: Vec<(f64, f64)> = r
            .resume
            .iter()
            .filter(|x| x.peer == name)
            .map(|x| (x.events as f64, x.ms))
            .collect();
        let c = color(name);
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(err)?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart
            .draw_series(pts.into_iter().map(|p| Circle::new(p, 4, c.filled())))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Append throughput (events/s, log scale) per durability mode, grouped bars per peer; one
/// panel for 1 session, one for 64.
pub fn append_chart(r: &Results, path: &Path) -> BenchResult<()> {
    let root = SVGBackend::new(path, (1300, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let panels = root.split_evenly((1, 2));
    let ys: Vec<f64> = r.append.iter().map(|a| a.events_per_sec).collect();
    let (y0, y1) = bounds(&ys, 100.0, 1e7);
    for (panel, sessions) in panels.iter().zip([1usize, 64]) {
        let rows: Vec<_> = r.append.iter().filter(|a| a.sessions == sessions).collect();
        let mut modes: Vec<String> = Vec::new();
        for a in &rows {
            if !modes.contains(&a.mode) {
                modes.push(a.mode.clone());
            }
        }
        let n = modes.len().max(1) as f64;
        let mut chart = ChartBuilder::on(panel)
            .caption(
                format!(
                    "Append, {sessions} concurrent session{}",
                    if sessions == 1 { "" } else { "s" }
                ),
                ("sans-serif", 20),
            )
            .margin(14)
            .x_label_area_size(40)
            .y_label_area_size(72)
            .build_cartesian_2d(-0.5f64..(n - 0.5), (y0..y1).log_scale())
            .map_err(err)?;
        let labels = modes.clone();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(modes.len().max(1))
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 {
                    labels.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc("events/s")
            .y_label_formatter(&|y| human(*y))
            .draw()
            .map_err(err)?;
        let peers: Vec<&str> = PeerKind::ALL.iter().map(|p| p.name()).collect();
        let w = 0.84 / peers.len() as f64;
        for (pi, peer) in peers.iter().enumerate() {
            let c = color(peer);
            let bars: Vec<_> = rows
                .iter()
                .filter(|a| a.peer == *peer)
                .filter_map(|a| {
                    let m = modes.iter().position(|m| *m == a.mode)? as f64;
                    let left = m - 0.42 + pi as f64 * w;
                    Some(Rectangle::new(
                        [(left, y0), (left + w * 0.9, a.events_per_sec)],
                        c.filled(),
                    ))
                })
                .collect();
            chart
                .draw_series(bars)
                .map_err(err)?
                .label(*peer)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], c.filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

fn bounds(values: &[f64], lo: f64, hi: f64) -> (f64, f64) {
    let min = values
        .iter()
        .copied()
        .filter(|v| *v > 0.0)
        .fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(0.0, f64::max);
    if !min.is_finite() || max <= 0.0 {
        return (lo, hi);
    }
    (min / 2.0, max * 3.0)
}

fn human(x: f64) -> String {
    if x >= 1e6 {
        format!("{}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{}k", x / 1e3)
    } else {
        format!("{x}")
    }
}
