//! The report's figures (PNG, plotters, the embedded font of [`crate::metrics::plot`]):
//! learning curves per arm (the mean over seeds with a band of ± one standard deviation),
//! the final evaluation against each partner (bars with the spread over seeds), the
//! evaluations over training, and the experiment's own figures (more curves, or one series
//! against another: a trade-off).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use serde_json::{Map, Value};

use super::report::{Report, mean_sd, points, read_rows};
use super::runner::{Plan, read_final_eval};
use super::{Experiment, FigureSpec, Source};

mod maps;
use maps::draw_maps;

const FONT: &str = "sans-serif";
const WIDTH: u32 = 1000;
const ROW_HEIGHT: u32 = 340;

/// The arms' colours, in arm order.
const COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
    RGBColor(140, 86, 75),
    RGBColor(127, 127, 127),
];

fn colour(i: usize) -> RGBColor {
    COLOURS[i % COLOURS.len()]
}

type Rows = Vec<Map<String, Value>>;

/// Per arm, each seed's rows.
fn rows_by_arm(
    exp: &Experiment,
    plan: &Plan,
    out: &Path,
) -> Result<Vec<(String, Vec<Rows>)>, String> {
    let mut v = Vec::new();
    for arm in &exp.spec.arms {
        let mut seeds = Vec::new();
        for r in plan.runs.iter().filter(|r| r.arm == arm.name) {
            seeds.push(read_rows(&out.join(&r.dir))?);
        }
        v.push((arm.name.clone(), seeds));
    }
    Ok(v)
}

/// Mean and standard deviation over seeds at each iteration where any seed has a value.
fn band(seeds: &[Rows], series: &str) -> Vec<(f64, f64, f64)> {
    let mut at: BTreeMap<i64, Vec<f64>> = BTreeMap::new();
    for rows in seeds {
        for (x, y) in points(rows, series) {
            if y.is_finite() {
                at.entry(x as i64).or_default().push(y);
            }
        }
    }
    at.into_iter()
        .filter_map(|(x, v)| mean_sd(&v).map(|(m, sd)| (x as f64, m, sd)))
        .collect()
}

fn err(path: &Path, e: impl std::fmt::Display) -> String {
    format!("cannot draw {}: {e}", path.display())
}

fn range(v: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for x in v.filter(|x| x.is_finite()) {
        lo = lo.min(x);
        hi = hi.max(x);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if (hi - lo).abs() < 1e-9 {
        return (lo - 0.5, hi + 0.5);
    }
    let pad = (hi - lo) * 0.06;
    (lo - pad, hi + pad)
}

/// A polyline as separate two-point segments: plotters joins the segments of a wide
/// `LineSeries` with mitres, which spike far out of the chart where a noisy line turns
/// sharply.
fn segments(pts: impl Iterator<Item = (f64, f64)>, c: RGBColor) -> Vec<PathElement<(f64, f64)>> {
    let pts: Vec<(f64, f64)> = pts.collect();
    pts.windows(2)
        .map(|w| PathElement::new(vec![w[0], w[1]], c.stroke_width(2)))
        .collect()
}

/// Phase marks over curves: shaded spans (label, from, to) and per-arm onset lines.
#[derive(Default)]
struct Overlay {
    spans: Vec<(String, f64, f64)>,
    lines: Vec<(usize, f64)>,
}

/// Panels of curves: one per series, each arm's mean with its band.
fn draw_curves(
    path: &Path,
    title: &str,
    series: &[(String, String)],
    arms: &[(String, Vec<Rows>)],
    overlay: &Overlay,
) -> Result<bool, String> {
    let panels: Vec<(&String, Vec<(usize, &String, Vec<(f64, f64, f64)>)>)> = series
        .iter()
        .map(|(s, label)| {
            let lines = arms
                .iter()
                .enumerate()
                .map(|(i, (name, seeds))| (i, name, band(seeds, s)))
                .filter(|l| !l.2.is_empty())
                .collect();
            (label, lines)
        })
        .filter(|(_, lines): &(_, Vec<_>)| !lines.is_empty())
        .collect();
    if panels.is_empty() {
        return Ok(false);
    }
    let cols = if panels.len() == 1 { 1 } else { 2 };
    let rows = panels.len().div_ceil(cols);
    let root = BitMapBackend::new(path, (WIDTH, ROW_HEIGHT * rows as u32 + 40)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(path, e))?;
    let root = root.titled(title, (FONT, 22)).map_err(|e| err(path, e))?;
    let areas = root.split_evenly((rows, cols));
    for ((label, lines), area) in panels.iter().zip(areas.iter()) {
        let (x0, x1) = range(lines.iter().flat_map(|l| l.2.iter().map(|p| p.0)));
        let (y0, y1) = range(
            lines
                .iter()
                .flat_map(|l| l.2.iter().flat_map(|p| [p.1 - p.2, p.1 + p.2])),
        );
        let mut chart = ChartBuilder::on(area)
            .caption(label.as_str(), (FONT, 16))
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(|e| err(path, e))?;
        for (k, (label, a, b)) in overlay.spans.iter().enumerate() {
            let shade = [
                RGBColor(255, 223, 128),
                RGBColor(160, 210, 255),
                RGBColor(190, 235, 170),
            ][k % 3];
            let (a, b) = (a.max(x0), b.min(x1));
            if b > a {
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(a, y0), (b, y1)],
                        shade.mix(0.35).filled(),
                    )))
                    .map_err(|e| err(path, e))?;
                chart
                    .draw_series(std::iter::once(Text::new(
                        label.clone(),
                        (a, y1),
                        (FONT, 12).into_font().color(&BLACK),
                    )))
                    .map_err(|e| err(path, e))?;
            }
        }
        for (i, x) in &overlay.lines {
            let c = colour(*i);
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(*x, y0), (*x, y1)],
                    c.stroke_width(1),
                )))
                .map_err(|e| err(path, e))?;
        }
        chart
            .configure_mesh()
            .x_desc("iteration")
            .label_style((FONT, 12))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(|e| err(path, e))?;
        for (i, name, pts) in lines {
            let c = colour(*i);
            if pts.len() > 1 {
                let mut poly: Vec<(f64, f64)> = pts.iter().map(|p| (p.0, p.1 + p.2)).collect();
                poly.extend(pts.iter().rev().map(|p| (p.0, p.1 - p.2)));
                chart
                    .draw_series(std::iter::once(Polygon::new(poly, c.mix(0.18).filled())))
                    .map_err(|e| err(path, e))?;
            }
            chart
                .draw_series(segments(pts.iter().map(|p| (p.0, p.1)), c))
                .map_err(|e| err(path, e))?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
                });
            if pts.len() == 1 {
                chart
                    .draw_series(pts.iter().map(|p| Circle::new((p.0, p.1), 4, c.filled())))
                    .map_err(|e| err(path, e))?;
            }
        }
        chart
            .configure_series_labels()
            .label_font((FONT, 12))
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK.mix(0.3))
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(|e| err(path, e))?;
    }
    root.present().map_err(|e| err(path, e))?;
    Ok(true)
}

/// Bars: per partner, each arm's mean final return per step, with a line for ± one
/// standard deviation over seeds.
fn draw_eval_bars(path: &Path, exp: &Experiment, plan: &Plan, out: &Path) -> Result<bool, String> {
    let labels: Vec<String> = plan
        .partners
        .iter()
        .map(|p| crate::train::eval::label(p))
        .collect();
    if labels.is_empty() {
        return Ok(false);
    }
    // (partner, arm) -> per-seed values
    let mut vals: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); exp.spec.arms.len()]; labels.len()];
    for (ai, arm) in exp.spec.arms.iter().enumerate() {
        for r in plan
            .runs
            .iter()
            .filter(|r| r.arm == arm.name && r.evaluated)
        {
            let fe = read_final_eval(&out.join(&r.dir))?;
            for (pi, l) in labels.iter().enumerate() {
                if let Some(v) = fe.partners.get(l).and_then(|m| m.get("return_per_step")) {
                    vals[pi][ai].push(*v);
                }
            }
        }
    }
    let stats = |v: &Vec<f64>| mean_sd(v);
    let all: Vec<f64> = vals
        .iter()
        .flatten()
        .filter_map(stats)
        .flat_map(|(m, s)| [m - s, m + s, 0.0])
        .collect();
    if all.len() <= 1 {
        return Ok(false);
    }
    let (y0, y1) = range(all.into_iter());
    let y1 = y1 + (y1 - y0) * 0.3;
    let series: Vec<(String, Vec<Option<(f64, f64)>>)> = exp
        .spec
        .arms
        .iter()
        .enumerate()
        .map(|(ai, arm)| {
            (
                arm.name.clone(),
                vals.iter().map(|v| stats(&v[ai])).collect(),
            )
        })
        .collect();
    draw_grouped_bars(
        path,
        "Final evaluation: return per step against each partner (mean ± sd over seeds)",
        "return per step",
        &labels,
        &series,
        (y0, y1),
        true,
    )?;
    Ok(true)
}

/// One series against another over training, per arm (means over seeds, iteration by
/// iteration; a ring marks the first iteration and a dot the last).
fn draw_tradeoff(
    path: &Path,
    title: &str,
    x: &str,
    y: &str,
    arms: &[(String, Vec<Rows>)],
) -> Result<bool, String> {
    let lines: Vec<(usize, &String, Vec<(f64, f64)>)> = arms
        .iter()
        .enumerate()
        .map(|(i, (name, seeds))| {
            let bx: BTreeMap<i64, f64> = band(seeds, x)
                .into_iter()
                .map(|p| (p.0 as i64, p.1))
                .collect();
            let pts = band(seeds, y)
                .into_iter()
                .filter_map(|p| bx.get(&(p.0 as i64)).map(|&xv| (xv, p.1)))
                .collect();
            (i, name, pts)
        })
        .filter(|l: &(usize, &String, Vec<(f64, f64)>)| !l.2.is_empty())
        .collect();
    if lines.is_empty() {
        return Ok(false);
    }
    let (x0, x1) = range(lines.iter().flat_map(|l| l.2.iter().map(|p| p.0)));
    let (y0, y1) = range(lines.iter().flat_map(|l| l.2.iter().map(|p| p.1)));
    let root = BitMapBackend::new(path, (WIDTH, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(path, e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| err(path, e))?;
    chart
        .configure_mesh()
        .x_desc(x)
        .y_desc(y)
        .label_style((FONT, 13))
        .draw()
        .map_err(|e| err(path, e))?;
    for (i, name, pts) in &lines {
        let c = colour(*i);
        chart
            .draw_series(segments(pts.iter().copied(), c))
            .map_err(|e| err(path, e))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
        if let (Some(a), Some(b)) = (pts.first(), pts.last()) {
            chart
                .draw_series([
                    Circle::new(*a, 6, c.stroke_width(2)),
                    Circle::new(*b, 5, c.filled()),
                ])
                .map_err(|e| err(path, e))?;
        }
    }
    chart
        .configure_series_labels()
        .label_font((FONT, 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(|e| err(path, e))?;
    root.present().map_err(|e| err(path, e))?;
    Ok(true)
}

/// A bar chart of groups (x) with one bar per series in each, in the series' colours;
/// with `error_bars`, a line for ± the second value of each bar.
fn draw_grouped_bars(
    path: &Path,
    title: &str,
    y_desc: &str,
    groups: &[String],
    series: &[(String, Vec<Option<(f64, f64)>>)],
    (y0, y1): (f64, f64),
    error_bars: bool,
) -> Result<(), String> {
    let root = BitMapBackend::new(path, (WIDTH, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(path, e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..groups.len() as f64, y0..y1)
        .map_err(|e| err(path, e))?;
    let lab = groups.to_vec();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.len() * 2 + 1)
        .x_label_formatter(&move |x| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 0.26 {
                lab.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc(y_desc)
        .label_style((FONT, 13))
        .draw()
        .map_err(|e| err(path, e))?;
    let width = 0.8 / series.len().max(1) as f64;
    for (si, (name, bars)) in series.iter().enumerate() {
        let c = colour(si);
        let mut first = true;
        for (gi, bar) in bars.iter().enumerate() {
            let Some((m, sd)) = *bar else { continue };
            let x0 = gi as f64 + 0.1 + width * si as f64;
            let drawn = chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(x0, 0.0), (x0 + width * 0.9, m)],
                    c.mix(0.85).filled(),
                )))
                .map_err(|e| err(path, e))?;
            if first {
                drawn.label(name.as_str()).legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled())
                });
                first = false;
            }
            if error_bars {
                let xm = x0 + width * 0.45;
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(xm, m - sd), (xm, m + sd)],
                        BLACK.stroke_width(2),
                    )))
                    .map_err(|e| err(path, e))?;
            }
        }
    }
    chart
        .configure_series_labels()
        .label_font((FONT, 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| err(path, e))?;
    root.present().map_err(|e| err(path, e))?;
    Ok(())
}

/// Draws every figure into `out/figures/`; returns the files written.
pub fn draw_all(
    exp: &Experiment,
    plan: &Plan,
    report: &Report,
    out: &Path,
) -> Result<Vec<PathBuf>, String> {
    let dir = out.join("figures");
    std::fs::create_dir_all(&dir).map_err(|e| err(&dir, e))?;
    crate::metrics::plot::register_font().map_err(|e| err(&dir, e))?;
    let arms = rows_by_arm(exp, plan, out)?;
    let mut files = Vec::new();
    // Learning curves: the mean return, then every training measure's series.
    let mut series: Vec<(String, String)> =
        vec![("return".into(), "mean episode return (over teams)".into())];
    for m in &exp.spec.measures {
        if let Source::Train { value, .. } = &m.from
            && !series.iter().any(|s| &s.0 == value)
        {
            series.push((value.clone(), value.clone()));
        }
    }
    let p = dir.join("curves.png");
    if draw_curves(
        &p,
        &format!("{}: learning curves (mean ± sd over seeds)", exp.name),
        &series,
        &arms,
        &Overlay::default(),
    )? {
        files.push(p);
    }
    let p = dir.join("eval.png");
    if draw_eval_bars(&p, exp, plan, out)? {
        files.push(p);
    }
    let eval_series: Vec<(String, String)> = plan
        .partners
        .iter()
        .map(|k| {
            let l = crate::train::eval::label(k);
            (
                format!("eval.{l}.return_per_step"),
                format!("against {l}: return per step"),
            )
        })
        .collect();
    let p = dir.join("eval_curves.png");
    if !eval_series.is_empty()
        && draw_curves(
            &p,
            "Evaluations during training (fresh arenas, no learning)",
            &eval_series,
            &arms,
            &Overlay::default(),
        )?
    {
        files.push(p);
    }
    files.extend(draw_maps(exp, plan, out, &dir)?);
    for f in &exp.spec.figures {
        match f {
            FigureSpec::Curves {
                name,
                title,
                values,
            } => {
                let p = dir.join(format!("{name}.png"));
                let s: Vec<(String, String)> =
                    values.iter().map(|v| (v.clone(), v.clone())).collect();
                if draw_curves(&p, title, &s, &arms, &Overlay::default())? {
                    files.push(p);
                }
            }
            FigureSpec::Phases {
                name,
                title,
                values,
                onsets,
            } => {
                let p = dir.join(format!("{name}.png"));
                let s: Vec<(String, String)> =
                    values.iter().map(|v| (v.clone(), v.clone())).collect();
                let mut overlay = Overlay::default();
                let x_end = arms
                    .iter()
                    .flat_map(|a| a.1.iter())
                    .map(|rows| rows.len() as f64)
                    .fold(0.0, f64::max);
                let mean_onset = |m: &str, arm: &str| {
                    report
                        .measures
                        .iter()
                        .find(|x| x.name == m)
                        .and_then(|x| x.arms.get(arm))
                        .and_then(|st| st.mean)
                };
                if let Some(first) = exp.spec.arms.first() {
                    let starts: Vec<(String, f64)> = onsets
                        .iter()
                        .filter_map(|o| mean_onset(o, &first.name).map(|x| (o.clone(), x)))
                        .collect();
                    for (k, (o, a)) in starts.iter().enumerate() {
                        let b = starts.get(k + 1).map_or(x_end, |n| n.1);
                        overlay
                            .spans
                            .push((format!("{o} ({})", first.name), *a, b.max(*a)));
                    }
                }
                for (i, arm) in exp.spec.arms.iter().enumerate() {
                    for o in onsets {
                        if let Some(x) = mean_onset(o, &arm.name) {
                            overlay.lines.push((i, x));
                        }
                    }
                }
                if draw_curves(&p, title, &s, &arms, &overlay)? {
                    files.push(p);
                }
            }
            FigureSpec::Tradeoff { name, title, x, y } => {
                let p = dir.join(format!("{name}.png"));
                if draw_tradeoff(&p, title, x, y, &arms)? {
                    files.push(p);
                }
            }
        }
    }
    Ok(files)
}
