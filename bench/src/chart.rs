//! results.svg: one panel per case.

use std::path::Path;

use plotters::prelude::*;

/// (K, p99 ms, hand-offs/s).
pub type HandoffPoint = (usize, f64, f64);

/// What the chart shows; NaN values are left out.
#[derive(Default)]
pub struct ChartData {
    /// (label, [relock, A, B]) in ops/s.
    pub throughput: Vec<(String, [f64; 3])>,
    /// (approach, [(K, p99 ms, hand-offs/s)]).
    pub handoff: Vec<(String, Vec<HandoffPoint>)>,
    /// (approach, median ms from TTL end to grant).
    pub expiry: Vec<(String, f64)>,
    /// (masters, p50 ms, p99 ms).
    pub redlock: Vec<(usize, f64, f64)>,
    /// (approach, bytes per lock).
    pub memory: Vec<(String, f64)>,
}

const COLORS: [RGBColor; 5] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
];

fn color_of(name: &str) -> RGBColor {
    match name.chars().next() {
        Some('A') => COLORS[1],
        Some('B') => COLORS[2],
        Some('C') => COLORS[3],
        Some('D') => COLORS[4],
        _ => COLORS[0],
    }
}

type Res = Result<(), Box<dyn std::error::Error>>;

pub fn write(path: &Path, data: &ChartData, title: &str) -> Res {
    let root = SVGBackend::new(path, (1500, 900)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 20))?;
    let panels = root.split_evenly((2, 3));
    let names = ["relock", "A", "B"];
    let series: Vec<(String, Vec<f64>)> = (0..3)
        .map(|i| {
            (
                names[i].to_string(),
                data.throughput.iter().map(|(_, v)| v[i] / 1000.0).collect(),
            )
        })
        .collect();
    let labels: Vec<String> = data.throughput.iter().map(|(l, _)| l.clone()).collect();
    bars(
        &panels[0],
        "1. Uncontended throughput",
        "k ops/s",
        &labels,
        &series,
    )?;
    lines(
        &panels[1],
        "2. Hand-off latency p99 vs waiters K",
        "waiters K (log)",
        "p99 ms (log)",
        &data
            .handoff
            .iter()
            .map(|(n, pts)| (n.clone(), pts.iter().map(|p| (p.0 as f64, p.1)).collect()))
            .collect::<Vec<_>>(),
    )?;
    lines(
        &panels[2],
        "2. Hand-offs per second vs waiters K",
        "waiters K (log)",
        "hand-offs/s (log)",
        &data
            .handoff
            .iter()
            .map(|(n, pts)| (n.clone(), pts.iter().map(|p| (p.0 as f64, p.2)).collect()))
            .collect::<Vec<_>>(),
    )?;
    let single = |v: &[(String, f64)]| -> (Vec<String>, Vec<(String, Vec<f64>)>) {
        (
            vec![String::new()],
            v.iter().map(|(n, x)| (n.clone(), vec![*x])).collect(),
        )
    };
    let (l, s) = single(&data.expiry);
    bars(
        &panels[3],
        "3. Expiry hand-off, median",
        "ms after TTL end",
        &l,
        &s,
    )?;
    let redlock = vec![
        (
            "p50".to_string(),
            data.redlock.iter().map(|p| (p.0 as f64, p.1)).collect(),
        ),
        (
            "p99".to_string(),
            data.redlock.iter().map(|p| (p.0 as f64, p.2)).collect(),
        ),
    ];
    lines(
        &panels[4],
        "5. Redlock acquire+release vs masters",
        "masters (log)",
        "ms (log)",
        &redlock,
    )?;
    let (l, s) = single(&data.memory);
    bars(&panels[5], "4. Memory per held lock", "bytes", &l, &s)?;
    root.present()?;
    Ok(())
}

fn bars(
    area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    title: &str,
    y_desc: &str,
    groups: &[String],
    series: &[(String, Vec<f64>)],
) -> Res {
    let max = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .filter(|x| x.is_finite())
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let n = groups.len().max(1) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(55)
        .build_cartesian_2d(0f64..n, 0f64..max * 1.2)?;
    let group_labels = groups.to_vec();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 1e-6 && i < group_labels.len() {
                group_labels[i].clone()
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| crate::report::num(*y))
        .y_desc(y_desc)
        .draw()?;
    let width = 0.8 / series.len().max(1) as f64;
    for (s, (name, values)) in series.iter().enumerate() {
        let color = color_of(name);
        let rects = values
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(g, v)| {
                let x0 = g as f64 + 0.1 + s as f64 * width;
                Rectangle::new([(x0, 0.0), (x0 + width * 0.9, *v)], color.filled())
            });
        chart
            .draw_series(rects)?
            .label(name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    Ok(())
}

fn lines(
    area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Res {
    let finite = |p: &&(f64, f64)| p.0 > 0.0 && p.1 > 0.0 && p.1.is_finite();
    let pts: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|(_, v)| v.iter().filter(finite).copied())
        .collect();
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in &pts {
        x0 = x0.min(*x);
        x1 = x1.max(*x);
        y0 = y0.min(*y);
        y1 = y1.max(*y);
    }
    if pts.is_empty() {
        (x0, x1, y0, y1) = (1.0, 10.0, 0.1, 1.0);
    }
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(55)
        .build_cartesian_2d(
            (x0 * 0.8..x1 * 1.25).log_scale(),
            (y0 / 2.0..y1 * 2.0).log_scale(),
        )?;
    let mut ticks: Vec<f64> = pts.iter().map(|p| p.0).collect();
    ticks.sort_by(|a, b| a.total_cmp(b));
    ticks.dedup();
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .x_labels(30)
        .x_label_formatter(&|x| {
            if ticks.iter().any(|t| ((t - x) / t).abs() < 1e-6) {
                format!("{x}")
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| crate::report::num(*y))
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()?;
    for (i, (name, values)) in series.iter().enumerate() {
        let color = if name.starts_with('p') {
            COLORS[i % COLORS.len()]
        } else {
            color_of(name)
        };
        let v: Vec<(f64, f64)> = values.iter().filter(finite).copied().collect();
        chart
            .draw_series(LineSeries::new(v.clone(), color.stroke_width(2)))?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 14, y)], color.stroke_width(2))
            });
        chart.draw_series(v.into_iter().map(|p| Circle::new(p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    Ok(())
}
