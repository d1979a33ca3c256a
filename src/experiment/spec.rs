//! The experiment file's format as serde types: the claim, the scene, the arms, the seeds,
//! the evaluation, the measures, the checks and the figures (`docs/experiments.md`), and the
//! checked [`Experiment`] that [`super::load`] makes of one.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::expect;
use crate::scene::{Scene, SceneError, SceneSpec};
use crate::train::TrainSettings;

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
    /// Further claims the same runs test, each judged on its own checks and given its own
    /// verdict beside the headline's (which is `expect`'s alone): the paper's claim asked of
    /// arms the paper did not have, such as language-model agents on a grid scene.
    #[serde(default)]
    pub also: Vec<ClaimSpec>,
    /// How much experience each seed of the paper's own runs saw (episodes, agent-steps or
    /// frames, in words), printed beside each arm's in the report's scale table.
    #[serde(default)]
    pub paper_scale: String,
    /// Extra figures.
    #[serde(default)]
    pub figures: Vec<FigureSpec>,
    /// Maps of the trained models playing themselves, early and late in training (grid
    /// families): drawn as frames and, with `heat`, as a heat map.
    #[serde(default)]
    pub maps: Option<MapsSpec>,
}

/// A further claim: its name, the claim in one sentence and its checks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename = "Claim")]
pub struct ClaimSpec {
    /// Short name (`a-z`, `0-9`, `_`), used in the report's headings.
    pub name: String,
    /// The claim, in one sentence.
    pub claim: String,
    /// Its checks, written as `expect`'s.
    pub expect: Vec<String>,
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
    /// Start each seed's run from a clone of a scripted teacher (`emergence imitate`, made
    /// with the run's seed, learner, model, text and memory before it trains).
    #[serde(default)]
    pub clone: Option<CloneSpec>,
}

/// `clone: (from: "maze_explorer", episodes: 256, epochs: 4, dagger: 1)`: an arm's runs
/// start from `emergence imitate SCENE --from FROM` with these flags, one clone a seed
/// (`OUT/clones/ARM/seed_S/`), instead of the model's initial weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename = "Clone")]
pub struct CloneSpec {
    /// The teacher: a scripted policy that plays the arm's scene.
    pub from: String,
    /// Episodes recorded (`--episodes`; 64 by default).
    #[serde(default = "CloneSpec::default_episodes")]
    pub episodes: u32,
    /// The episodes recorded under `--quick` (the same as `episodes` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quick_episodes: Option<u32>,
    /// Passes over the decisions (`--epochs`; 10 by default).
    #[serde(default = "CloneSpec::default_epochs")]
    pub epochs: u32,
    /// DAgger's rounds (`--dagger`; none by default).
    #[serde(default)]
    pub dagger: u32,
    /// Learn the teacher's words too (`--words`; off: what the agents say is left to RL).
    #[serde(default)]
    pub words: bool,
    /// The cloning's learning rate (`--lr`; `emergence imitate`'s default when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lr: Option<f64>,
}

impl CloneSpec {
    fn default_episodes() -> u32 {
        64
    }
    fn default_epochs() -> u32 {
        10
    }

    /// The clone a run of the budget makes: `quick_episodes` taken for `--quick` and for a
    /// smoke test (`--iterations N`, `smoke: Some(N)`), whose clone also makes at most N passes
    /// (and N DAgger rounds): a smoke test checks that the pipeline runs, and a full-size clone
    /// would cost it more than all its iterations.
    pub fn for_budget(&self, quick: bool, smoke: Option<u32>) -> CloneSpec {
        let small = quick || smoke.is_some();
        CloneSpec {
            episodes: match (small, self.quick_episodes) {
                (true, Some(n)) => n.min(self.episodes),
                _ => self.episodes,
            },
            quick_episodes: None,
            epochs: smoke.map_or(self.epochs, |n| self.epochs.min(n)),
            dagger: smoke.map_or(self.dagger, |n| self.dagger.min(n)),
            ..self.clone()
        }
    }
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
    /// Each further claim's checks, parsed, in `spec.also`'s order.
    pub also: Vec<Vec<expect::Check>>,
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
