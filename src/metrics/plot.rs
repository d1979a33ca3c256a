//! Training curves as PNG files: reads a run's `metrics.jsonl` (one JSON object per
//! training iteration) and draws mean returns per team, the environment family's metrics,
//! the update's losses and the run's speed into `plots/` beside it.
//!
//! Text is drawn with the DejaVu Sans font embedded in the binary and registered with
//! plotters' `ab_glyph` backend under the family name `sans-serif`, the name plotters'
//! own defaults (axis labels, legends) ask for, so no system font lookup ever happens.
//!
//! Over 600 lines with its tests (110 of them): the plots share one set of axis, font and
//! series helpers that splitting by plot would scatter.

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::{Map, Value};

/// The font family every text of the plots uses (and plotters' default).
const FONT: &str = "sans-serif";
/// DejaVu Sans, embedded so that plots need no font installed on the machine.
static FONT_BYTES: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/assets/fonts/DejaVuSans.ttf"
));
/// Width of every PNG, in pixels.
const WIDTH: u32 = 900;
/// Height of a PNG with at most two rows of panels, in pixels.
const HEIGHT: u32 = 520;

/// What can go wrong drawing a run's plots.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// `metrics.jsonl` could not be read.
    #[error("cannot read {}: {io}", .path.display())]
    Read {
        /// The file that could not be read.
        path: PathBuf,
        /// Why (in the message, so not also a source that `{:#}` would print again).
        io: std::io::Error,
    },
    /// A line of `metrics.jsonl` is not a JSON object.
    #[error("{}:{line}: {message}", .path.display())]
    BadLine {
        /// The metrics file.
        path: PathBuf,
        /// The 1-based line number.
        line: usize,
        /// What is wrong with the line.
        message: String,
    },
    /// `metrics.jsonl` holds no iteration.
    #[error("{} has no iterations yet", .path.display())]
    NoRows {
        /// The metrics file.
        path: PathBuf,
    },
    /// Drawing or writing a PNG (or creating its folder) failed.
    #[error("cannot draw {}: {message}", .path.display())]
    Draw {
        /// The PNG (or folder) being written.
        path: PathBuf,
        /// What plotters or the file system reported.
        message: String,
    },
}

/// One series of `(iteration, value)` points with its legend name.
type Line = (String, Vec<(f64, f64)>);

/// One small chart: a title, an optional y-axis description and its lines.
struct Panel {
    title: String,
    y_desc: Option<&'static str>,
    lines: Vec<Line>,
}

/// Reads `path` (a `metrics.jsonl`): one JSON object per non-blank line, in file order.
pub fn read_rows(path: &Path) -> Result<Vec<Map<String, Value>>, PlotError> {
    read_rows_by(path, "iteration", "`emergence train`'s metrics")
}

/// [`read_rows`] of a file whose rows are counted by the whole number `x` (`iteration`,
/// `epoch`), `what` naming the file's kind in errors.
fn read_rows_by(path: &Path, x: &str, what: &str) -> Result<Vec<Map<String, Value>>, PlotError> {
    let text = std::fs::read_to_string(path).map_err(|io| PlotError::Read {
        path: path.to_path_buf(),
        io,
    })?;
    let mut rows = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |message: String| PlotError::BadLine {
            path: path.to_path_buf(),
            line: index + 1,
            message,
        };
        match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(row)) => {
                // Every series is drawn against the iteration, and reads numbers.
                match row.get(x) {
                    Some(Value::Number(n)) if n.as_u64().is_some() => {}
                    Some(v) => {
                        return Err(bad(format!(
                            "field `{x}` is {}; expected a whole number",
                            kind(v)
                        )));
                    }
                    None => {
                        return Err(bad(format!("no field `{x}`; expected a row of {what}")));
                    }
                }
                // The fields drawn hold numbers (null: none that iteration); others are
                // left alone.
                let number = |v: &Value| matches!(v, Value::Number(_) | Value::Null);
                for (key, v) in &row {
                    let wrong = match (key.as_str(), v) {
                        ("team_returns" | "metrics", Value::Object(m)) => m
                            .iter()
                            .find(|(_, x)| !number(x))
                            .map(|(k, x)| (format!("{key}.{k}"), x, "a number")),
                        ("team_returns" | "metrics", v) => {
                            Some((key.clone(), v, "an object of numbers"))
                        }
                        (k, v) if LOSSES.contains(&k) || SPEEDS.contains(&k) => {
                            (!number(v)).then(|| (key.clone(), v, "a number"))
                        }
                        _ => None,
                    };
                    if let Some((field, v, expected)) = wrong {
                        return Err(bad(format!(
                            "field `{field}` holds {}; expected {expected}",
                            kind(v)
                        )));
                    }
                }
                rows.push(row);
            }
            Ok(other) => {
                return Err(bad(format!(
                    "expected a JSON object, found {}",
                    kind(&other)
                )));
            }
            Err(e) => return Err(bad(e.to_string())),
        }
    }
    Ok(rows)
}

/// The per-iteration numbers of a row besides returns, metrics and evaluations (the
/// losses, the learning rate and the timings): what an experiment's measures and figures
/// may read.
pub fn row_series() -> impl Iterator<Item = &'static str> {
    LOSSES
        .iter()
        .chain(std::iter::once(&"lr"))
        .chain(SPEEDS.iter())
        .copied()
}

/// The update's series drawn in `losses.png`.
const LOSSES: [&str; 9] = [
    "policy_loss",
    "value_loss",
    "entropy",
    "approx_kl",
    "clip_frac",
    "kl_ref",
    "grad_norm",
    "explained_variance",
    "advantage_std",
];

/// The timing series drawn in `speed.png`.
const SPEEDS: [&str; 6] = [
    "seconds",
    "rollout_seconds",
    "update_seconds",
    "agent_steps_per_sec",
    "training_steps_per_sec",
    "tokens_per_sec",
];

/// Reads `dir/metrics.jsonl` and writes the run's plots into `dir/plots/`; returns the files written.
pub fn plot_run(dir: &Path) -> Result<Vec<PathBuf>, PlotError> {
    let metrics = dir.join("metrics.jsonl");
    let rows = read_rows(&metrics)?;
    if rows.is_empty() {
        return Err(PlotError::NoRows { path: metrics });
    }
    let plots = dir.join("plots");
    std::fs::create_dir_all(&plots).map_err(|e| draw_err(&plots, e))?;
    register_font().map_err(|message| PlotError::Draw {
        path: plots.clone(),
        message,
    })?;
    let Some(x_range) = span(rows.iter().enumerate().map(|(i, r)| x_of(i, r)), false) else {
        return Ok(Vec::new());
    };

    let returns: Vec<Line> = team_returns(&rows);
    let returns = panel("Mean episode return per team", Some("mean return"), returns);

    let family: Vec<Panel> = keys_of(&rows, "metrics")
        .into_iter()
        .filter_map(|name| {
            let pts = points(&rows, |r| {
                num(r.get("metrics").and_then(|m| m.get(name.as_str())))
            });
            panel(&name, None, vec![(name.clone(), pts)])
        })
        .collect();

    let mut losses = Vec::new();
    for key in LOSSES {
        let pts = flat(&rows, key);
        let optional = matches!(key, "clip_frac" | "kl_ref");
        if optional && pts.iter().all(|&(_, y)| y == 0.0) {
            continue;
        }
        losses.extend(panel(key, None, vec![(key.to_string(), pts)]));
    }

    let seconds = vec![
        ("total".to_string(), flat(&rows, "seconds")),
        ("rollout".to_string(), flat(&rows, "rollout_seconds")),
        ("update".to_string(), flat(&rows, "update_seconds")),
    ];
    let speed: Vec<Panel> = [
        panel(
            "agent steps per second",
            None,
            vec![
                ("rollout".to_string(), flat(&rows, "agent_steps_per_sec")),
                (
                    "training (rollout and update)".to_string(),
                    flat(&rows, "training_steps_per_sec"),
                ),
            ],
        ),
        panel(
            "tokens per second",
            None,
            vec![("tokens_per_sec".to_string(), flat(&rows, "tokens_per_sec"))],
        ),
        panel("seconds per iteration", Some("seconds"), seconds),
    ]
    .into_iter()
    .flatten()
    .collect();

    let evals = eval_panels(&rows);

    let files: [(&str, Option<&str>, Vec<Panel>); 5] = [
        ("returns.png", None, returns.into_iter().collect()),
        (
            "eval.png",
            Some("Evaluation against fixed partners (no learning, fresh seeds)"),
            evals,
        ),
        ("metrics.png", Some("Environment metrics"), family),
        ("losses.png", Some("Losses and update statistics"), losses),
        (
            "speed.png",
            Some("Throughput and time per iteration"),
            speed,
        ),
    ];
    let mut written = Vec::new();
    for (name, title, panels) in files {
        if panels.is_empty() {
            continue;
        }
        let png = plots.join(name);
        draw_file(&png, title, &panels, (x_range, "iteration"))?;
        written.push(png);
    }
    Ok(written)
}

/// Reads `dir/imitation.jsonl` (`emergence imitate`'s epochs) and draws
/// `dir/plots/imitation.png`: the agreement with the teacher (held out, and on the training
/// decisions) and the cross-entropies, by epoch. Returns the file written.
pub fn plot_imitation(dir: &Path) -> Result<Vec<PathBuf>, PlotError> {
    let path = dir.join("imitation.jsonl");
    let mut rows = read_rows_by(&path, "epoch", "`emergence imitate`'s epochs")?;
    if rows.is_empty() {
        return Err(PlotError::NoRows { path });
    }
    // The epoch is the x axis.
    for r in &mut rows {
        if let Some(e) = r.get("epoch").cloned() {
            r.insert("iteration".into(), e);
        }
    }
    let plots = dir.join("plots");
    std::fs::create_dir_all(&plots).map_err(|e| draw_err(&plots, e))?;
    register_font().map_err(|message| PlotError::Draw {
        path: plots.clone(),
        message,
    })?;
    let Some(x_range) = span(rows.iter().enumerate().map(|(i, r)| x_of(i, r)), false) else {
        return Ok(Vec::new());
    };
    // The training pass's agreement exists from epoch 1.
    let trained: Vec<Map<String, Value>> = rows
        .iter()
        .filter(|r| num(r.get("epoch")).is_some_and(|e| e >= 1.0))
        .cloned()
        .collect();
    let panels: Vec<Panel> = [
        panel(
            "agreement with the teacher",
            Some("share of decisions"),
            vec![
                ("held out".into(), flat(&rows, "held_out_agreement")),
                (
                    "held-out words".into(),
                    flat(&rows, "held_out_word_agreement"),
                ),
                ("training decisions".into(), flat(&trained, "agreement")),
            ],
        ),
        panel(
            "cross-entropy of the teacher's choices",
            Some("nats per decision"),
            vec![
                ("actions".into(), flat(&trained, "action_loss")),
                ("words".into(), flat(&trained, "word_loss")),
            ],
        ),
        panel(
            "value loss",
            None,
            vec![("value_loss".into(), flat(&trained, "value_loss"))],
        ),
        panel(
            "grad_norm",
            None,
            vec![("grad_norm".into(), flat(&trained, "grad_norm"))],
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    let png = plots.join("imitation.png");
    draw_file(
        &png,
        Some("Behaviour cloning: the clone against its teacher"),
        &panels,
        (x_range, "epoch"),
    )?;
    Ok(vec![png])
}

/// `--eval-against`: the learners' return per step against every partner in one panel, and
/// in matrix games one panel per partner with the learners' strategy.
fn eval_panels(rows: &[Map<String, Value>]) -> Vec<Panel> {
    let keys = keys_of(rows, "eval");
    let series = |key: &str| points(rows, |r| num(r.get("eval").and_then(|e| e.get(key))));
    let partners: Vec<String> = keys
        .iter()
        .filter_map(|k| k.strip_suffix(".return_per_step"))
        .map(str::to_string)
        .collect();
    let mut out: Vec<Panel> = panel(
        "learners' return per step against each partner",
        Some("return per step"),
        partners
            .iter()
            .map(|p| (p.clone(), series(&format!("{p}.return_per_step"))))
            .collect(),
    )
    .into_iter()
    .collect();
    for p in &partners {
        let lines = ["first_cooperation", "coop_after_coop", "coop_after_defect"]
            .iter()
            .map(|m| (m.to_string(), series(&format!("{p}.{m}"))))
            .collect();
        out.extend(panel(
            &format!("strategy against {p}"),
            Some("probability"),
            lines,
        ));
    }
    out
}

/// Registers the embedded font once per process; later calls return the first outcome.
pub(crate) fn register_font() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            plotters::style::register_font(FONT, FontStyle::Normal, FONT_BYTES)
                .map_err(|_| "the embedded DejaVuSans.ttf is not a valid font".to_string())
        })
        .clone()
}

/// Draws `panels` in a grid into `png`, under `title` when given.
fn draw_file(
    png: &Path,
    title: Option<&str>,
    panels: &[Panel],
    x: ((f64, f64), &str),
) -> Result<(), PlotError> {
    let n = panels.len();
    let cols = match n {
        0 | 1 => 1,
        2..=4 => 2,
        _ => 3,
    };
    let rows = n.div_ceil(cols);
    let height = if rows <= 2 {
        HEIGHT
    } else {
        250 * rows as u32 + 40
    };
    let root = BitMapBackend::new(png, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_err(png, e))?;
    let (areas, caption) = match title {
        Some(t) => (
            root.titled(t, (FONT, 22))
                .map_err(|e| draw_err(png, e))?
                .split_evenly((rows, cols)),
            15,
        ),
        None => (root.split_evenly((1, 1)), 22),
    };
    for (area, panel) in areas.iter().zip(panels) {
        draw_panel(area, panel, x, caption, png)?;
    }
    root.present().map_err(|e| draw_err(png, e))
}

/// Draws one panel (caption, axes, lines, a legend when it has several lines) on `area`.
fn draw_panel(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    panel: &Panel,
    ((x0, x1), x_desc): ((f64, f64), &str),
    caption: u32,
    png: &Path,
) -> Result<(), PlotError> {
    let Some((y0, y1)) = span(
        panel
            .lines
            .iter()
            .flat_map(|(_, p)| p.iter().map(|&(_, y)| y)),
        true,
    ) else {
        return Ok(());
    };
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, (FONT, caption))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| draw_err(png, e))?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(panel.y_desc.unwrap_or(""))
        .x_labels(6)
        .y_labels(6)
        .x_label_formatter(&fmt_x)
        .y_label_formatter(&fmt_y)
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .draw()
        .map_err(|e| draw_err(png, e))?;
    let several = panel.lines.len() > 1;
    for (i, (name, pts)) in panel.lines.iter().enumerate() {
        let style = Palette99::pick(i).stroke_width(2);
        let marker = if pts.len() <= 40 { 3 } else { 0 };
        let series = LineSeries::new(pts.iter().copied(), style).point_size(marker);
        let anno = chart.draw_series(series).map_err(|e| draw_err(png, e))?;
        if several {
            anno.label(name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        }
    }
    if several {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font((FONT, 12))
            .draw()
            .map_err(|e| draw_err(png, e))?;
    }
    Ok(())
}

/// A panel of the non-empty `lines`, or `None` when no line has a point.
fn panel(title: &str, y_desc: Option<&'static str>, mut lines: Vec<Line>) -> Option<Panel> {
    lines.retain(|(_, pts)| !pts.is_empty());
    (!lines.is_empty()).then(|| Panel {
        title: title.to_string(),
        y_desc,
        lines,
    })
}

/// The points `(iteration, value)` of the top-level column `key` (finite values only).
pub fn flat(rows: &[Map<String, Value>], key: &str) -> Vec<(f64, f64)> {
    points(rows, |r| num(r.get(key)))
}

/// Each team's mean episode return by iteration, teams in order of first appearance.
pub fn team_returns(rows: &[Map<String, Value>]) -> Vec<(String, Vec<(f64, f64)>)> {
    keys_of(rows, "team_returns")
        .into_iter()
        .map(|team| {
            let pts = points(rows, |r| {
                num(r.get("team_returns").and_then(|t| t.get(team.as_str())))
            });
            (team, pts)
        })
        .collect()
}

/// The points `(iteration, value)` of the rows where `value` gives a finite number.
fn points(
    rows: &[Map<String, Value>],
    value: impl Fn(&Map<String, Value>) -> Option<f64>,
) -> Vec<(f64, f64)> {
    rows.iter()
        .enumerate()
        .filter_map(|(i, r)| Some((x_of(i, r), value(r)?)))
        .collect()
}

/// The keys of the objects under `outer`, in order of first appearance across rows.
fn keys_of(rows: &[Map<String, Value>], outer: &str) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    for object in rows
        .iter()
        .filter_map(|r| r.get(outer).and_then(Value::as_object))
    {
        for key in object.keys() {
            if !keys.contains(key) {
                keys.push(key.clone());
            }
        }
    }
    keys
}

/// The row's iteration, or its 1-based position when it has none.
fn x_of(index: usize, row: &Map<String, Value>) -> f64 {
    num(row.get("iteration")).unwrap_or((index + 1) as f64)
}

/// A finite number, or `None` for a missing key, `null`, a non-number or NaN/infinity.
fn num(value: Option<&Value>) -> Option<f64> {
    value.and_then(Value::as_f64).filter(|v| v.is_finite())
}

/// The range of the finite `values`, never empty: widened when all are (nearly) equal and,
/// when `pad`, given a 5% margin either side. `None` when there is no finite value.
fn span(values: impl Iterator<Item = f64>, pad: bool) -> Option<(f64, f64)> {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold(None, |acc: Option<(f64, f64)>, v| {
            Some(acc.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))))
        })?;
    let scale = lo.abs().max(hi.abs());
    if hi - lo <= scale * 1e-9 {
        let half = if pad && scale > 0.0 { scale * 0.1 } else { 1.0 };
        return Some((lo - half, hi + half));
    }
    let margin = if pad { (hi - lo) * 0.05 } else { 0.0 };
    Some((lo - margin, hi + margin))
}

/// An x tick: whole iterations without decimals.
fn fmt_x(v: &f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// A y tick: at most four decimals, scientific notation for very large or small values.
fn fmt_y(v: &f64) -> String {
    let a = v.abs();
    if a < 1e-12 {
        return "0".to_string();
    }
    if !(1e-3..1e5).contains(&a) {
        return format!("{v:.2e}");
    }
    let s = format!("{v:.4}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A drawing error of `path`, with the reporter's message.
fn draw_err(path: &Path, e: impl Display) -> PlotError {
    PlotError::Draw {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// The JSON kind of `value`, for error messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROWS: &str = r#"{"iteration":1,"team_returns":{"red":0.5,"blue":-1.0},"metrics":{"cooperation_rate":0.2,"gini":0.1},"policy_loss":0.3,"value_loss":1.2,"entropy":2.0,"approx_kl":0.001,"clip_frac":0.0,"grad_norm":0.7,"explained_variance":null,"lr":1e-5,"tokens_per_sec":1200.0,"agent_steps_per_sec":40.0,"rollout_seconds":3.0,"update_seconds":1.5,"seconds":4.6,"extra":"ignored"}
{"iteration":2,"team_returns":{"red":0.8,"blue":-0.5},"metrics":{"cooperation_rate":0.4,"gini":0.15},"policy_loss":0.2,"value_loss":0.9,"entropy":1.9,"approx_kl":0.002,"clip_frac":0.1,"grad_norm":0.6,"explained_variance":0.1,"tokens_per_sec":1300.0,"agent_steps_per_sec":42.0,"rollout_seconds":2.9,"update_seconds":1.4,"seconds":4.4}

{"iteration":3,"team_returns":{"red":1.1,"blue":0.0},"metrics":{"cooperation_rate":0.5,"gini":0.12},"policy_loss":0.1,"value_loss":0.7,"entropy":1.8,"approx_kl":0.002,"clip_frac":0.05,"grad_norm":0.5,"explained_variance":0.3,"tokens_per_sec":1250.0,"agent_steps_per_sec":41.0,"rollout_seconds":3.1,"update_seconds":1.6,"seconds":4.8}
"#;

    fn be_u32(bytes: &[u8]) -> u32 {
        bytes.iter().fold(0, |acc, &b| (acc << 8) | u32::from(b))
    }

    #[test]
    fn plots_a_small_run() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("metrics.jsonl"), ROWS)?;
        let files = plot_run(dir.path())?;
        let names: Vec<String> = files
            .iter()
            .filter_map(|f| f.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        assert_eq!(
            names,
            ["returns.png", "metrics.png", "losses.png", "speed.png"]
        );
        for file in &files {
            let bytes = std::fs::read(file)?;
            assert!(
                bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
                "{} is not a PNG",
                file.display()
            );
        }
        let returns = std::fs::read(dir.path().join("plots").join("returns.png"))?;
        assert!(returns.len() > 24);
        assert_eq!(&returns[12..16], b"IHDR");
        assert_eq!(
            (be_u32(&returns[16..20]), be_u32(&returns[20..24])),
            (WIDTH, HEIGHT)
        );
        Ok(())
    }

    #[test]
    fn plots_a_single_row() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let first = ROWS.lines().next().unwrap_or_default();
        std::fs::write(dir.path().join("metrics.jsonl"), format!("{first}\n"))?;
        let files = plot_run(dir.path())?;
        assert!(files.iter().any(|f| f.ends_with("returns.png")));
        Ok(())
    }

    #[test]
    fn a_bad_line_names_its_number() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        std::fs::write(
            dir.path().join("metrics.jsonl"),
            "{\"iteration\":1}\n[1,2]\n{\"iteration\":3}\n",
        )?;
        let err = plot_run(dir.path()).err().ok_or("a bad line must fail")?;
        assert!(matches!(err, PlotError::BadLine { line: 2, .. }), "{err}");
        assert!(err.to_string().contains(":2:"), "{err}");
        std::fs::write(
            dir.path().join("metrics.jsonl"),
            "{\"iteration\":1}\n{not json\n",
        )?;
        let err = plot_run(dir.path()).err().ok_or("a bad line must fail")?;
        assert!(err.to_string().contains(":2:"), "{err}");
        // Rows that are objects but not metrics rows.
        for (rows, says) in [
            ("{\"iteration\":1}\n{}\n", "no field `iteration`"),
            (
                "{\"iteration\":\"one\"}\n",
                "field `iteration` is a string; expected a whole number",
            ),
            (
                "{\"iteration\":1,\"team_returns\":{\"a\":\"high\"}}\n",
                "field `team_returns.a` holds a string; expected a number",
            ),
            (
                "{\"iteration\":1,\"entropy\":true}\n",
                "`entropy` holds a boolean",
            ),
        ] {
            std::fs::write(dir.path().join("metrics.jsonl"), rows)?;
            let err = plot_run(dir.path()).err().ok_or("a bad row must fail")?;
            assert!(err.to_string().contains(says), "{err}");
        }
        std::fs::write(
            dir.path().join("metrics.jsonl"),
            "{\"iteration\":1,\"entropy\":null,\"team_returns\":{\"a\":1.5}}\n",
        )?;
        plot_run(dir.path())?;
        Ok(())
    }

    #[test]
    fn an_empty_file_has_no_rows() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("metrics.jsonl"), "\n")?;
        let err = plot_run(dir.path())
            .err()
            .ok_or("an empty file must fail")?;
        assert!(matches!(err, PlotError::NoRows { .. }), "{err}");
        assert!(err.to_string().ends_with("has no iterations yet"), "{err}");
        Ok(())
    }
}
