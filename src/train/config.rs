//! What a training run is given and gives back: [`TrainConfig`] (scene, model, algorithm,
//! hyper-parameters, folders), [`ModelChoice`], [`Resume`], the errors, and the reports of an
//! iteration and of the run.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use thiserror::Error;

use super::{Algo, Hyper, LearnerKind, Sharing, TrainSettings, UpdateStats};
use crate::headless::RunError;
use crate::policy::lm::{LmError, Preset};
use crate::scene::Scene;

/// What can go wrong in training.
#[derive(Debug, Error)]
pub enum TrainError {
    /// Settings that cannot be used ([`super::rules`]).
    #[error(transparent)]
    Settings(#[from] super::rules::SettingsError),
    /// An update that cannot go on.
    #[error(transparent)]
    Update(#[from] super::UpdateError),
    /// A run's or checkpoint's file that is not what it should be.
    #[error(transparent)]
    File(#[from] super::RunFileError),
    /// A run's folder that cannot be used as asked.
    #[error(transparent)]
    Folder(#[from] super::RunFolderError),
    /// A bad setting.
    #[error("{0}")]
    Config(String),
    /// The run could not be built.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The model.
    #[error(transparent)]
    Model(#[from] LmError),
    /// A tensor operation.
    #[error("tensor: {0}")]
    Tensor(candle_core::Error),
    /// An output file.
    #[error("{path}: {io}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        io: std::io::Error,
    },
}

/// By hand rather than `#[from]`: the message already holds the error, which as a source too
/// would be printed twice in a chain (`{:#}`).
impl From<candle_core::Error> for TrainError {
    fn from(e: candle_core::Error) -> Self {
        TrainError::Tensor(e)
    }
}

/// Where the trained model starts from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ModelChoice {
    /// A fresh embedded model of this size (seeded by the run seed).
    Preset(Preset),
    /// A model folder on disk.
    Folder(PathBuf),
}

impl ModelChoice {
    /// What `--model`, a scene's `train: (model: ...)` and `config.json` hold: `tiny`,
    /// `small`, or a model folder, which must exist (`Err` says what was expected).
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "tiny" => Ok(Self::Preset(Preset::Tiny)),
            "small" => Ok(Self::Preset(Preset::Small)),
            dir => {
                let p = PathBuf::from(dir);
                if p.is_dir() {
                    Ok(Self::Folder(p))
                } else {
                    Err(format!("{dir:?}: expected tiny, small or a model folder"))
                }
            }
        }
    }

    /// The name [`ModelChoice::parse`] reads back (a folder called `tiny` is `./tiny`).
    pub fn name(&self) -> String {
        match self {
            Self::Preset(Preset::Tiny) => "tiny".into(),
            Self::Preset(Preset::Small) => "small".into(),
            Self::Folder(p) if p.as_os_str() == "tiny" || p.as_os_str() == "small" => {
                Path::new(".").join(p).to_string_lossy().into_owned()
            }
            Self::Folder(p) => p.to_string_lossy().into_owned(),
        }
    }
}

/// Where a resumed run continues from.
#[derive(Debug, Clone, PartialEq)]
pub enum Resume {
    /// This whole checkpoint folder of the run.
    Checkpoint(PathBuf),
    /// Its first iteration: it stopped before its first checkpoint. Its settings and scene
    /// copy are kept; its metrics rows are written again.
    FromStart,
}

/// A training run.
#[derive(Debug, Clone)]
pub struct TrainConfig {
    /// The scene (teams on `lm` learn; if none is, every team is put on `lm`).
    pub scene: Scene,
    /// The scene file, for the record.
    pub scene_path: PathBuf,
    /// The algorithm.
    pub algo: Algo,
    /// Updates to make (one per episode of every arena).
    pub iterations: u32,
    /// Arenas run side by side.
    pub arenas: u32,
    /// Run seed.
    pub seed: u64,
    /// The run folder.
    pub out: PathBuf,
    /// The starting model.
    pub model: ModelChoice,
    /// Hyper-parameters.
    pub hyper: Hyper,
    /// One model for all learning agents, or one per learning team (CORY always has its
    /// two copies).
    pub sharing: Sharing,
    /// The policy that learns (`lm`, `mlp` or `gru`; `model` is the language model's start).
    pub learner: LearnerKind,
    /// Rollouts that do not wait for the update (`--overlap`; `mlp` and `gru` in one
    /// process): the next iteration's episodes are played with the weights before the
    /// update while it runs.
    pub overlap: bool,
    /// Bevy worker threads.
    pub threads: Option<usize>,
    /// Write a checkpoint every this many iterations (and after the last).
    pub checkpoint_every: u32,
    /// Continue the run in `out` (see [`crate::train::resume_config`]); `None`: a fresh run, whose `out`
    /// must be empty or absent.
    pub resume: Option<Resume>,
    /// Stop after this many iterations (counted from 0, like `iterations`) as if the run
    /// had been interrupted: the schedule stays that of `iterations`, and `--resume`
    /// continues it. A checkpoint is written at the stop.
    pub stop_after: Option<u32>,
    /// `--gui`: arena 0's frames are pushed here every step, for a window on another thread.
    pub tap: Option<crate::frames::FrameTap>,
    /// `--eval-against`: partners the learning teams play without learning, at the first
    /// iteration, every `eval_every` and at the last (see [`crate::train::eval`]).
    pub eval_against: Vec<String>,
    /// Iterations between evaluations.
    pub eval_every: u32,
    /// The ranks of a data-parallel run under mpirun ([`super::dist`]); one process by
    /// default.
    pub ranks: super::dist::Ranks,
    /// Where the language models decide and train (`--device`; not part of the run's
    /// identity: a run may resume on another device). An `mlp` learner stays on the CPU.
    pub device: candle_core::Device,
}

impl TrainConfig {
    /// A fresh run of `scene` into `out` with the given `settings`; the algorithm's and the
    /// learner's defaults fill the fields not given (see [`TrainSettings::resolve`]). Errs
    /// with the model name's problem when `settings.model` names no model.
    pub fn from_settings(
        mut scene: Scene,
        scene_path: PathBuf,
        settings: &TrainSettings,
        out: PathBuf,
    ) -> Result<Self, String> {
        let model = ModelChoice::parse(settings.model.as_deref().unwrap_or("tiny"))?;
        let (algo, learner, hyper) = settings.resolve();
        if let Some(memory) = settings.memory {
            scene.spec.memory = memory;
        }
        if let Some(text) = settings.text {
            scene.spec.text = text;
        }
        Ok(TrainConfig {
            scene,
            scene_path,
            algo,
            iterations: settings.iterations.unwrap_or(20),
            arenas: settings.arenas.unwrap_or(16),
            seed: settings.seed.unwrap_or(0),
            out,
            model,
            hyper,
            sharing: settings.sharing.unwrap_or_default(),
            learner,
            overlap: settings.overlap.unwrap_or(false),
            threads: None,
            checkpoint_every: settings.checkpoint_every.unwrap_or(10),
            resume: None,
            stop_after: None,
            tap: None,
            eval_against: Vec::new(),
            eval_every: default_eval_every(),
            ranks: Default::default(),
            device: candle_core::Device::Cpu,
        })
    }
}

/// Evaluations every 10 iterations unless told.
pub fn default_eval_every() -> u32 {
    10
}

/// Arenas of each evaluation (one episode each, on seeds training never uses).
pub const EVAL_ARENAS: u32 = 32;

/// One iteration's report.
#[derive(Debug, Clone, Serialize)]
pub struct IterationReport {
    /// Iteration, from 1.
    pub iteration: u32,
    /// Mean episode return per team (over the iteration's episodes), by team name.
    pub team_returns: BTreeMap<String, f64>,
    /// Means of the family's metrics over the iteration's episodes.
    pub metrics: BTreeMap<String, f64>,
    /// `--eval-against`: per partner, `PARTNER.return` (the learners' mean episode return),
    /// `PARTNER.return_per_step`, `PARTNER.partner_return` and, in matrix games, the
    /// learners' strategy (`PARTNER.coop_after_coop`, ...). Empty when not evaluated.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub eval: BTreeMap<String, f64>,
    /// The update.
    #[serde(flatten)]
    pub update: UpdateStats,
    /// Seconds stepping the arenas (decisions included).
    pub rollout_seconds: f64,
    /// Of which, seconds in the model's forwards.
    pub inference_seconds: f64,
    /// Model tokens per second during the rollout.
    pub tokens_per_sec: f64,
    /// Agent-steps per second during the rollout.
    pub agent_steps_per_sec: f64,
    /// Agent-steps per second of training: the rollout's agent-steps over the rollout's and
    /// the update's seconds together (what a long run sustains).
    #[serde(default)]
    pub training_steps_per_sec: f64,
    /// Wall seconds of the whole iteration.
    pub seconds: f64,
}

/// The end of a run.
#[derive(Debug, Clone)]
pub struct TrainSummary {
    /// Every iteration's report.
    pub iterations: Vec<IterationReport>,
    /// Checkpoint folders written.
    pub checkpoints: Vec<PathBuf>,
    /// Folders that stood where a checkpoint was written, not whole (an earlier run stopped
    /// while it was renamed into place, or a hand edit): kept under a new name, not deleted.
    pub set_aside: Vec<PathBuf>,
    /// What the run found and mended on its way (leftovers of killed writes removed, a
    /// metrics row cut short by a kill dropped), for the user to read.
    pub notes: Vec<String>,
    /// The plots drawn at the end (a drawing failure does not fail the run).
    pub plots: Result<Vec<PathBuf>, String>,
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> TrainError + '_ {
    move |io| TrainError::Io {
        path: path.to_path_buf(),
        io,
    }
}
