//! Experiments: a paper's claim as a RON file (`experiments/*.experiment.ron`) that
//! `emergence reproduce` runs end to end. A file names the claim and its source, the scene
//! (a file, or one written inline), the arms (an algorithm and its [`TrainSettings`] each),
//! the seeds, the partners the trained models are evaluated against, the measures read
//! from the runs, and the expected outcome as checks on the measures
//! (`self_play(adalign) >= 2.5`). [`load`] reads and checks one, every error at the file's
//! `line:col` (an inline scene's errors too, at their place in the experiment file);
//! [`runner`] trains every arm × seed (resuming where a previous invocation stopped),
//! [`report`] aggregates the runs into `report.md` and `report.json`, and [`figures`] draws
//! the PNGs. The format is documented in `docs/experiments.md`.

pub mod expect;
pub mod figures;
pub mod report;
pub mod runner;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::scene::locate::{Seg, line_col, locate, locate_value, value_span};
use crate::scene::{Scene, SceneError, SceneSpec};
use crate::train::TrainSettings;
use crate::train::eval;

/// The file name ending of experiment files.
pub const EXTENSION: &str = ".experiment.ron";

/// An experiment file as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename = "Experiment")]
pub struct ExperimentSpec {
    /// The claim, in one sentence.
    pub claim: String,
    /// Where the claim comes from (authors, year, arXiv id).
    pub source: String,
    /// Longer notes on the setup (optional).
    #[serde(default)]
    pub notes: String,
    /// The scene every arm plays unless it names its own.
    pub scene: SceneRef,
    /// Settings every arm starts from (over the scene's `train:` block).
    #[serde(default)]
    pub settings: TrainSettings,
    /// Settings laid over every arm's with `--quick` (a smaller budget).
    #[serde(default)]
    pub quick: TrainSettings,
    /// The arms compared.
    pub arms: Vec<ArmSpec>,
    /// Run seeds; every arm runs each.
    pub seeds: Vec<u64>,
    /// Partners the trained models play without learning (policy names, `self`).
    #[serde(default)]
    pub partners: Vec<String>,
    /// How the partners are played.
    #[serde(default)]
    pub eval: EvalSettings,
    /// Numbers read from each run.
    pub measures: Vec<MeasureSpec>,
    /// The expected outcome: checks on the measures' means over seeds.
    pub expect: Vec<String>,
    /// Extra figures.
    #[serde(default)]
    pub figures: Vec<FigureSpec>,
    /// Maps of the trained models playing themselves, early and late in training (grid
    /// families): drawn as frames and, with `heat`, as a heat map.
    #[serde(default)]
    pub maps: Option<MapsSpec>,
}

/// What maps to draw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename = "Maps")]
pub struct MapsSpec {
    /// Arenas played (one episode each) with the first and the last checkpoint of a run.
    pub arenas: u32,
    /// Steps of arena 0 drawn as frames.
    pub steps: Vec<u32>,
    /// A map character (the replay's: `A` an apple, `b` a box ...) whose share of the
    /// episodes' last maps is drawn per cell.
    #[serde(default)]
    pub heat: Option<char>,
    /// What `heat` is, for the figure's title.
    #[serde(default)]
    pub heat_label: String,
}

/// A scene: a file (relative to the experiment file's folder), or written inline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum SceneRef {
    /// `File("../scenes/dilemma/prisoners_dilemma.scene.ron")`.
    File(String),
    /// `Inline(name: ..., family: ..., teams: [...])`: the scene's fields.
    Inline(Box<SceneSpec>),
}

/// One arm: a name, and what it changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename = "Arm")]
pub struct ArmSpec {
    /// Short name used in checks, folders and legends (`a-z`, `0-9`, `_`).
    pub name: String,
    /// What the arm is, for the report (optional).
    #[serde(default)]
    pub about: String,
    /// Its own scene instead of the experiment's.
    #[serde(default)]
    pub scene: Option<SceneRef>,
    /// Its settings, over the experiment's.
    #[serde(default)]
    pub settings: TrainSettings,
    /// Its settings with `--quick`, over everything else.
    #[serde(default)]
    pub quick: TrainSettings,
    /// Partners this arm is not evaluated against (CORY's copies cannot be seated apart).
    #[serde(default)]
    pub skip_eval: bool,
}

/// How trained models are evaluated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EvalSettings {
    /// Arenas of the final evaluation of each run (one episode each, fresh seeds).
    pub arenas: u32,
    /// Iterations between evaluations during training (curves against each partner).
    pub every: u32,
}

impl Default for EvalSettings {
    fn default() -> Self {
        EvalSettings {
            arenas: 128,
            every: 10,
        }
    }
}

/// A number read from each run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename = "Measure")]
pub struct MeasureSpec {
    /// Name used in checks (`a-z`, `0-9`, `_`).
    pub name: String,
    /// What it is, for the report.
    #[serde(default)]
    pub about: String,
    /// Where it comes from.
    pub from: Source,
}

/// Where a measure comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Source {
    /// The final evaluation against `partner`: `return`, `return_per_step`,
    /// `partner_return`, and in matrix games `first_cooperation`, `coop_after_coop`,
    /// `coop_after_defect`.
    Eval {
        /// One of the experiment's partners.
        partner: String,
        /// The value.
        value: String,
    },
    /// A training series (`return`: mean over teams, `return.TEAM`, `metrics.NAME`, or a
    /// row field such as `kl_ref`), averaged over a window of iterations.
    Train {
        /// The series.
        value: String,
        /// Which iterations.
        at: Window,
    },
    /// The iteration where a phase starts: the first from which a training series stays
    /// past a threshold for `hold` iterations in a row (no value if never).
    Onset {
        /// The series (as in `Train`).
        value: String,
        /// `Above(x)` or `Below(x)`.
        stays: Threshold,
        /// Iterations it must stay there.
        hold: u32,
    },
}

/// Which side of a threshold an onset waits for.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Threshold {
    /// Greater than the value.
    Above(f64),
    /// Less than the value.
    Below(f64),
}

impl Threshold {
    /// Whether `y` is past it.
    pub fn passed_by(self, y: f64) -> bool {
        match self {
            Threshold::Above(x) => y > x,
            Threshold::Below(x) => y < x,
        }
    }
}

/// Iterations a training measure averages.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Window {
    /// The first `n`.
    First(u32),
    /// The last `n`.
    Last(u32),
}

/// An extra figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FigureSpec {
    /// Training series over iterations, one panel each, every arm's mean with a band.
    Curves {
        /// File stem of the PNG.
        name: String,
        /// Its title.
        title: String,
        /// The series (as in [`Source::Train`]).
        values: Vec<String>,
    },
    /// Training series with the phases their onsets mark shaded (the first arm's mean
    /// onsets) and every arm's onsets drawn as lines.
    Phases {
        /// File stem of the PNG.
        name: String,
        /// Its title.
        title: String,
        /// The series.
        values: Vec<String>,
        /// Measures of the experiment that are `Onset`s, in phase order.
        onsets: Vec<String>,
    },
    /// One series against another over training, per arm (a trade-off).
    Tradeoff {
        /// File stem of the PNG.
        name: String,
        /// Its title.
        title: String,
        /// The x series.
        x: String,
        /// The y series.
        y: String,
    },
}

/// The values a final evaluation gives (see [`Source::Eval`]).
pub const EVAL_VALUES: [&str; 6] = [
    "return",
    "return_per_step",
    "partner_return",
    "first_cooperation",
    "coop_after_coop",
    "coop_after_defect",
];

/// A checked experiment.
#[derive(Debug, Clone)]
pub struct Experiment {
    /// The file.
    pub path: PathBuf,
    /// Its name: the file name without `.experiment.ron`.
    pub name: String,
    /// As written.
    pub spec: ExperimentSpec,
    /// Each arm's scene, in arm order.
    pub scenes: Vec<ArmScene>,
    /// The partners, checked (`eval::parse_partners` keys).
    pub partners: Vec<String>,
    /// The expected outcome, parsed.
    pub checks: Vec<expect::Check>,
}

/// An arm's scene: checked, with the text a run copies.
#[derive(Debug, Clone)]
pub struct ArmScene {
    /// The checked scene.
    pub scene: Scene,
    /// The scene file, or `None` for an inline scene (its text is below).
    pub file: Option<PathBuf>,
    /// The scene's text (an inline scene's, cut from the experiment file).
    pub text: String,
}

/// What is wrong with an experiment.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// The file could not be read.
    #[error("{}: cannot read the experiment: {io}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        io: std::io::Error,
    },
    /// The file is not a valid experiment (or its scene is not a valid scene).
    #[error("{}:{line}:{col}: {message}", .path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        col: usize,
        /// What is wrong and what was expected.
        message: String,
    },
    /// A scene file it names is not valid.
    #[error(transparent)]
    Scene(#[from] SceneError),
    /// A name given on the command line matches no shipped experiment.
    #[error("{0}")]
    Unknown(String),
}

/// Errors located in one experiment file.
struct Ctx<'a> {
    path: &'a Path,
    src: &'a str,
}

impl Ctx<'_> {
    fn at(&self, at: usize, message: String) -> ExperimentError {
        let (line, col) = line_col(self.src, at);
        ExperimentError::Invalid {
            path: self.path.to_path_buf(),
            line,
            col,
            message,
        }
    }
    /// At the value of `path` or its nearest written ancestor.
    fn value(&self, path: &[Seg<'_>], message: String) -> ExperimentError {
        for n in (0..=path.len()).rev() {
            if let Some(at) = locate_value(self.src, &path[..n]) {
                return self.at(at, message);
            }
        }
        self.at(0, message)
    }
    /// At the name of the field at `path` or its nearest written ancestor.
    fn field(&self, path: &[Seg<'_>], message: String) -> ExperimentError {
        for n in (0..=path.len()).rev() {
            if let Some(at) = locate(self.src, &path[..n]) {
                return self.at(at, message);
            }
        }
        self.at(0, message)
    }
}

/// The name of an experiment file (`ipd.experiment.ron` is `ipd`).
pub fn name_of(path: &Path) -> String {
    let f = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    f.strip_suffix(EXTENSION)
        .or_else(|| f.strip_suffix(".ron"))
        .unwrap_or(&f)
        .to_string()
}

/// The experiments in `dir` (every `*.experiment.ron`), sorted by name.
pub fn find(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().ends_with(EXTENSION))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// An experiment given as a file path or as the name of one in `dir`.
pub fn resolve(given: &str, dir: &Path) -> Result<PathBuf, ExperimentError> {
    let p = Path::new(given);
    if p.is_file() {
        return Ok(p.to_path_buf());
    }
    let named = dir.join(format!("{given}{EXTENSION}"));
    if named.is_file() {
        return Ok(named);
    }
    let known: Vec<String> = find(dir).iter().map(|p| name_of(p)).collect();
    Err(ExperimentError::Unknown(format!(
        "{given:?} is neither an experiment file nor a shipped experiment; expected a path to \
         a .experiment.ron file or one of: {} (in {})",
        if known.is_empty() {
            "(none found)".to_string()
        } else {
            known.join(", ")
        },
        dir.display()
    )))
}

/// Reads and checks an experiment file.
pub fn load(path: &Path) -> Result<Experiment, ExperimentError> {
    let src = crate::scene::read_text(path).map_err(|e| match e {
        SceneError::Io { io, .. } => ExperimentError::Io {
            path: path.to_path_buf(),
            io,
        },
        other => ExperimentError::Scene(other),
    })?;
    parse(&src, path)
}

/// Parses and checks an experiment from its text; `path` is used in errors and to find the
/// scene files it names (relative to its folder).
pub fn parse(src: &str, path: &Path) -> Result<Experiment, ExperimentError> {
    let src = src.strip_prefix('\u{feff}').unwrap_or(src);
    let cx = Ctx { path, src };
    let spec: ExperimentSpec =
        crate::scene::ron_options()
            .from_str(src)
            .map_err(|e| ExperimentError::Invalid {
                path: path.to_path_buf(),
                line: e.span.start.line.max(1),
                col: e.span.start.col.max(1),
                message: e.code.to_string(),
            })?;
    let ident = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    };
    // Settings: each layer's ranges.
    let layers: Vec<(Vec<Seg<'_>>, &TrainSettings)> = {
        let mut v = vec![
            (vec![Seg::Field("settings")], &spec.settings),
            (vec![Seg::Field("quick")], &spec.quick),
        ];
        for (i, a) in spec.arms.iter().enumerate() {
            v.push((
                vec![Seg::Field("arms"), Seg::Index(i), Seg::Field("settings")],
                &a.settings,
            ));
            v.push((
                vec![Seg::Field("arms"), Seg::Index(i), Seg::Field("quick")],
                &a.quick,
            ));
        }
        v
    };
    for (at, s) in &layers {
        if let Err(bad) = crate::train::limits::check_settings(s) {
            let mut p = at.clone();
            p.push(Seg::Field(bad.name));
            return Err(cx.value(
                &p,
                format!("{} is {}; expected {}", bad.name, bad.value, bad.expected),
            ));
        }
        if s.seed.is_some() {
            let mut p = at.clone();
            p.push(Seg::Field("seed"));
            return Err(cx.field(
                &p,
                "a seed in an experiment's settings; expected the seeds in `seeds: [...]`, \
                 which every arm runs"
                    .into(),
            ));
        }
    }
    if spec.arms.is_empty() {
        return Err(cx.value(
            &[Seg::Field("arms")],
            "no arms; expected at least one arm (name, settings)".into(),
        ));
    }
    for (i, a) in spec.arms.iter().enumerate() {
        let at = [Seg::Field("arms"), Seg::Index(i), Seg::Field("name")];
        if !ident(&a.name) {
            return Err(cx.value(
                &at,
                format!(
                    "arm name {:?}; expected lowercase letters, digits and _",
                    a.name
                ),
            ));
        }
        if spec.arms[..i].iter().any(|b| b.name == a.name) {
            return Err(cx.value(
                &at,
                format!("a second arm named {:?}; expected distinct names", a.name),
            ));
        }
    }
    if spec.seeds.is_empty() {
        return Err(cx.value(
            &[Seg::Field("seeds")],
            "no seeds; expected at least one (three or more to report a spread)".into(),
        ));
    }
    for (i, s) in spec.seeds.iter().enumerate() {
        if spec.seeds[..i].contains(s) {
            return Err(cx.value(
                &[Seg::Field("seeds"), Seg::Index(i)],
                format!("seed {s} twice; expected distinct seeds"),
            ));
        }
    }
    if spec.eval.arenas == 0 || spec.eval.every == 0 {
        let f = if spec.eval.arenas == 0 {
            "arenas"
        } else {
            "every"
        };
        return Err(cx.value(
            &[Seg::Field("eval"), Seg::Field(f)],
            format!("eval.{f} is 0; expected 1 or more"),
        ));
    }
    // Scenes.
    let main_scene = scene_of(&cx, &spec.scene, &[Seg::Field("scene")])?;
    let mut scenes = Vec::new();
    for (i, a) in spec.arms.iter().enumerate() {
        scenes.push(match &a.scene {
            Some(r) => scene_of(
                &cx,
                r,
                &[Seg::Field("arms"), Seg::Index(i), Seg::Field("scene")],
            )?,
            None => main_scene.clone(),
        });
    }
    // Partners, checked against every arm's scene that is evaluated.
    let mut partners = Vec::new();
    for (i, p) in spec.partners.iter().enumerate() {
        let at = [Seg::Field("partners"), Seg::Index(i)];
        let mut keys = eval::parse_partners(p).map_err(|e| cx.value(&at, e))?;
        if keys.len() != 1 {
            return Err(cx.value(&at, format!("{p:?}: expected one partner per string")));
        }
        let key = keys.remove(0);
        if partners.contains(&key) {
            return Err(cx.value(&at, format!("partner {p:?} twice")));
        }
        partners.push(key);
    }
    // The resolved settings of every arm (at both budgets) must make a run.
    for (i, a) in spec.arms.iter().enumerate() {
        for quick in [false, true] {
            let s = arm_settings(&spec, a, &scenes[i].scene, quick);
            let at = [Seg::Field("arms"), Seg::Index(i), Seg::Field("settings")];
            let budget = if quick { " with --quick" } else { "" };
            if let Err(bad) = crate::train::limits::check_settings(&s) {
                return Err(cx.value(
                    &at,
                    format!(
                        "arm {:?}{budget}: {} is {}; expected {}",
                        a.name, bad.name, bad.value, bad.expected
                    ),
                ));
            }
            if let (Some(g), Some(n)) = (s.group_size, s.arenas)
                && !n.is_multiple_of(g)
            {
                return Err(cx.value(
                    &at,
                    format!(
                        "arm {:?}{budget}: group_size {g} does not divide arenas {n}; expected \
                         a group size that divides the arenas",
                        a.name
                    ),
                ));
            }
            if let Some(m) = &s.model {
                crate::train::ModelChoice::parse(m)
                    .map_err(|e| cx.value(&at, format!("arm {:?}: model {e}", a.name)))?;
            }
        }
        if !a.skip_eval && !partners.is_empty() {
            let s = arm_settings(&spec, a, &scenes[i].scene, false);
            let learner = s.learner.unwrap_or_default().policy();
            let mut scene = scenes[i].scene.clone();
            if !scene.agents.iter().any(|x| x.policy == learner) {
                for x in &mut scene.agents {
                    x.policy = learner.into();
                }
            }
            eval::check_partners(&scene, &partners).map_err(|e| {
                cx.value(&[Seg::Field("partners")], format!("arm {:?}: {e}", a.name))
            })?;
        }
    }
    // Measures.
    for (i, m) in spec.measures.iter().enumerate() {
        let base = [Seg::Field("measures"), Seg::Index(i)];
        if !ident(&m.name) {
            return Err(cx.value(
                &[base[0], base[1], Seg::Field("name")],
                format!(
                    "measure name {:?}; expected lowercase letters, digits and _",
                    m.name
                ),
            ));
        }
        if spec.measures[..i].iter().any(|x| x.name == m.name) {
            return Err(cx.value(
                &[base[0], base[1], Seg::Field("name")],
                format!("a second measure named {:?}", m.name),
            ));
        }
        let from = [base[0], base[1], Seg::Field("from")];
        match &m.from {
            Source::Eval { partner, value } => {
                let key = eval::parse_partners(partner)
                    .ok()
                    .and_then(|mut k| (k.len() == 1).then(|| k.remove(0)));
                if key.as_ref().is_none_or(|k| !partners.contains(k)) {
                    return Err(cx.value(
                        &[from[0], from[1], from[2], Seg::Field("partner")],
                        format!(
                            "partner {partner:?} is not one of the experiment's partners; \
                             expected one of: {}",
                            spec.partners.join(", ")
                        ),
                    ));
                }
                if !EVAL_VALUES.contains(&value.as_str()) {
                    return Err(cx.value(
                        &[from[0], from[1], from[2], Seg::Field("value")],
                        format!(
                            "evaluation value {value:?}; expected one of: {}",
                            EVAL_VALUES.join(", ")
                        ),
                    ));
                }
                if value == "partner_return" && key.as_deref() == Some(eval::SELF) {
                    return Err(cx.value(
                        &[from[0], from[1], from[2], Seg::Field("value")],
                        "partner_return against self; expected return (self-play has no \
                         partner)"
                            .into(),
                    ));
                }
            }
            Source::Onset { value, hold, .. } => {
                check_series(
                    &cx,
                    value,
                    &[from[0], from[1], from[2], Seg::Field("value")],
                )?;
                if *hold == 0 {
                    return Err(cx.value(
                        &[from[0], from[1], from[2], Seg::Field("hold")],
                        "hold is 0; expected 1 or more iterations".into(),
                    ));
                }
            }
            Source::Train { value, at } => {
                check_series(
                    &cx,
                    value,
                    &[from[0], from[1], from[2], Seg::Field("value")],
                )?;
                let n = match at {
                    Window::First(n) | Window::Last(n) => *n,
                };
                if n == 0 {
                    return Err(cx.value(
                        &[from[0], from[1], from[2], Seg::Field("at")],
                        "a window of 0 iterations; expected 1 or more".into(),
                    ));
                }
            }
        }
    }
    for (i, f) in spec.figures.iter().enumerate() {
        let at = [Seg::Field("figures"), Seg::Index(i)];
        let (name, values): (&str, Vec<&String>) = match f {
            FigureSpec::Curves { name, values, .. } => (name, values.iter().collect()),
            FigureSpec::Phases {
                name,
                values,
                onsets,
                ..
            } => {
                for o in onsets {
                    let ok = spec
                        .measures
                        .iter()
                        .any(|m| &m.name == o && matches!(m.from, Source::Onset { .. }));
                    if !ok {
                        return Err(cx.value(
                            &at,
                            format!("{o:?} is not an Onset measure of the experiment"),
                        ));
                    }
                }
                (name, values.iter().collect())
            }
            FigureSpec::Tradeoff { name, x, y, .. } => (name, vec![x, y]),
        };
        if !ident(name) {
            return Err(cx.value(
                &at,
                format!("figure name {name:?}; expected lowercase letters, digits and _"),
            ));
        }
        for v in values {
            check_series(&cx, v, &at)?;
        }
    }
    if let Some(m) = &spec.maps {
        if m.arenas == 0 || m.arenas > 1024 {
            return Err(cx.value(
                &[Seg::Field("maps"), Seg::Field("arenas")],
                format!("maps.arenas is {}; expected 1 to 1024", m.arenas),
            ));
        }
        if m.steps.len() > 8 || m.steps.contains(&0) {
            return Err(cx.value(
                &[Seg::Field("maps"), Seg::Field("steps")],
                "maps.steps; expected 1 to 8 steps, each 1 or more".into(),
            ));
        }
        if spec
            .arms
            .iter()
            .any(|a| a.settings.algo == Some(crate::train::Algo::Cory))
        {
            return Err(cx.value(
                &[Seg::Field("maps")],
                "maps of a cory arm: its copies cannot be seated alone; expected no maps".into(),
            ));
        }
    }
    // The expected outcome.
    if spec.expect.is_empty() {
        return Err(cx.value(
            &[Seg::Field("expect")],
            "no expected outcome; expected checks such as \"self_play(adalign) >= 2.5\"".into(),
        ));
    }
    let arms: Vec<&str> = spec.arms.iter().map(|a| a.name.as_str()).collect();
    let measures: Vec<&str> = spec.measures.iter().map(|m| m.name.as_str()).collect();
    let mut checks = Vec::new();
    for (i, text) in spec.expect.iter().enumerate() {
        let check = expect::parse(text, &measures, &arms).map_err(|(off, msg)| {
            let at = locate_value(src, &[Seg::Field("expect"), Seg::Index(i)]).unwrap_or(0);
            // Inside the string: one past its opening quote (exact when it has no escapes).
            let inner = if src[at..].starts_with('"') {
                at + 1 + text.char_indices().nth(off).map_or(text.len(), |(b, _)| b)
            } else {
                at
            };
            cx.at(inner.min(src.len()), msg)
        })?;
        for (arm, measure) in check.uses() {
            let ai = arms.iter().position(|a| *a == arm).unwrap_or(0);
            let m = &spec.measures[measures.iter().position(|x| *x == measure).unwrap_or(0)];
            if matches!(m.from, Source::Eval { .. }) && spec.arms[ai].skip_eval {
                return Err(cx.value(
                    &[Seg::Field("expect"), Seg::Index(i)],
                    format!(
                        "{measure}({arm}) reads an evaluation, and arm {arm:?} has skip_eval; \
                         expected a training measure for it"
                    ),
                ));
            }
        }
        checks.push(check);
    }
    Ok(Experiment {
        path: path.to_path_buf(),
        name: name_of(path),
        spec,
        scenes,
        partners,
        checks,
    })
}

/// Checks the form of a training series name.
fn check_series(cx: &Ctx<'_>, value: &str, at: &[Seg<'_>]) -> Result<(), ExperimentError> {
    let ok = value == "return"
        || value.strip_prefix("return.").is_some_and(|t| !t.is_empty())
        || value
            .strip_prefix("metrics.")
            .is_some_and(|t| !t.is_empty())
        || value.strip_prefix("eval.").is_some_and(|t| t.contains('.'))
        || crate::metrics::plot::row_series().any(|s| s == value);
    if ok {
        Ok(())
    } else {
        Err(cx.value(
            at,
            format!(
                "series {value:?}; expected return, return.TEAM, metrics.NAME, \
                 eval.PARTNER.VALUE or one of {}",
                crate::metrics::plot::row_series()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ))
    }
}

/// Reads and checks a scene reference; an inline scene's errors are located in the
/// experiment file.
fn scene_of(cx: &Ctx<'_>, r: &SceneRef, at: &[Seg<'_>]) -> Result<ArmScene, ExperimentError> {
    match r {
        SceneRef::File(f) => {
            let p = cx.path.parent().unwrap_or(Path::new("")).join(f);
            if !p.is_file() {
                return Err(cx.value(
                    at,
                    format!(
                        "scene file {} does not exist; expected a path relative to the \
                         experiment's folder",
                        p.display()
                    ),
                ));
            }
            let text = crate::scene::read_text(&p)?;
            let scene = crate::load::parse_scene(&text, &p)?;
            Ok(ArmScene {
                scene,
                file: Some(p),
                text,
            })
        }
        SceneRef::Inline(_) => {
            let (start, end) = value_span(cx.src, at)
                .ok_or_else(|| cx.value(at, "cannot find the inline scene".into()))?;
            let body = &cx.src[start..end];
            // `Inline(name: ..., ...)`: the parentheses hold the scene's fields.
            let keep_from = body.find('(').map_or(start, |o| start + o);
            let keep_to = body.rfind(')').map_or(end, |c| start + c + 1);
            // The experiment's text with all but the scene blanked, newlines kept: the
            // scene parser's lines and columns are the experiment file's.
            let padded: String = cx
                .src
                .char_indices()
                .map(|(i, c)| {
                    if (keep_from..keep_to).contains(&i) || c == '\n' {
                        c
                    } else if c == '\t' {
                        '\t'
                    } else {
                        ' '
                    }
                })
                .collect();
            let scene = crate::load::parse_scene(&padded, cx.path)?;
            Ok(ArmScene {
                scene,
                file: None,
                text: format!(
                    "// Written by emergence reproduce from the inline scene of {}.\n{}\n",
                    cx.path.display(),
                    &cx.src[keep_from..keep_to]
                ),
            })
        }
    }
}

/// What [`reproduce`] wrote.
#[derive(Debug, Clone)]
pub struct Written {
    /// The report.
    pub report: report::Report,
    /// `report.md`, `report.json` and the figures.
    pub files: Vec<PathBuf>,
    /// What the runs did.
    pub outcome: runner::Outcome,
    /// Why figures are missing, if drawing failed (the report is written anyway).
    pub figure_error: Option<String>,
}

/// Runs `exp` under `opts` ([`runner::run`]) and writes its report and figures.
pub fn reproduce(
    exp: &Experiment,
    opts: &runner::Options,
    on_event: &(dyn Fn(runner::Event) + Sync),
) -> Result<Written, runner::RunError> {
    let outcome = runner::run(exp, opts, on_event)?;
    if outcome.stopped > 0 {
        return Err(runner::RunError::Folder(format!(
            "{}: {} runs stopped early (stop_after); run again to finish them",
            opts.out.display(),
            outcome.stopped
        )));
    }
    let (report, files, figure_error) = write_report(
        exp,
        &outcome.plan,
        &opts.out,
        outcome.wall_seconds,
        outcome.invocations,
    )
    .map_err(runner::RunError::Folder)?;
    Ok(Written {
        report,
        files,
        outcome,
        figure_error,
    })
}

/// Aggregates the runs of `plan` in `out` and writes `report.md`, `report.json` and
/// `figures/*.png`; returns the report, the files and why figures failed (if they did).
pub fn write_report(
    exp: &Experiment,
    plan: &runner::Plan,
    out: &Path,
    wall_seconds: f64,
    invocations: usize,
) -> Result<(report::Report, Vec<PathBuf>, Option<String>), String> {
    let mut rep = report::aggregate(exp, plan, out, wall_seconds)?;
    rep.timing.invocations = invocations;
    let (figs, figure_error) = match figures::draw_all(exp, plan, &rep, out) {
        Ok(f) => (f, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    let names: Vec<String> = figs
        .iter()
        .filter_map(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
        .collect();
    let md = out.join("report.md");
    let json = out.join("report.json");
    let text = serde_json::to_string_pretty(&rep).map_err(|e| e.to_string())?;
    crate::train::run_dir::write_atomic(&json, text.as_bytes()).map_err(|e| e.to_string())?;
    crate::train::run_dir::write_atomic(&md, report::markdown(&rep, &names).as_bytes())
        .map_err(|e| e.to_string())?;
    let mut files = vec![md, json];
    files.extend(figs);
    Ok((rep, files, figure_error))
}

/// An arm's settings: with `quick`, its quick settings over the experiment's quick
/// settings over its settings over the experiment's over the scene's `train:` block.
pub fn arm_settings(
    spec: &ExperimentSpec,
    arm: &ArmSpec,
    scene: &Scene,
    quick: bool,
) -> TrainSettings {
    let base = arm
        .settings
        .clone()
        .over(spec.settings.clone())
        .over(scene.spec.train.clone());
    if quick {
        arm.quick.clone().over(spec.quick.clone()).over(base)
    } else {
        base
    }
}

#[cfg(test)]
mod tests;
