//! Checkpoints: writing one (every model with its adapters and optimizer moments, MAPPO's
//! critic, the trainer state) into a temporary folder renamed into place, finding the newest
//! whole one, and reading a run's settings back to resume it.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

use super::RunFileError;
use super::critic;
use super::{
    Algo, Hyper, LearnerKind, ModelChoice, Sharing, TrainConfig, TrainError, TrainSettings,
    Trainer, io_err,
};
use crate::policy::lm::{ModelFolder, ModelSource, TrainHandle};
use crate::policy::mlp::MlpHandle;
use crate::scene::Scene;
use candle_core::Device;

/// A run's `config.json`: its settings with every field given (the one settings type of the
/// flags, a scene's `train:` block and experiment files), the scene file it started from, and
/// how it runs. A resumed run reads it back (the scene from the run's own copy, `scene.ron`,
/// so an edited scene file cannot change it) and writes it again with its new total of
/// iterations and its thread count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunFile {
    /// The scene file the run started from (for the record).
    pub scene: PathBuf,
    /// Every setting, each given.
    pub settings: TrainSettings,
    /// Worker threads (`--threads`; none: one per core).
    pub threads: Option<usize>,
    /// Partners played every `eval_every` iterations.
    #[serde(default)]
    pub eval_against: Vec<String>,
    /// Iterations between evaluations.
    #[serde(default = "super::default_eval_every")]
    pub eval_every: u32,
}

impl RunFile {
    /// The record of `cfg`.
    pub fn of(cfg: &TrainConfig) -> Self {
        Self {
            scene: cfg.scene_path.clone(),
            settings: TrainSettings::of_run(cfg),
            threads: cfg.threads,
            eval_against: cfg.eval_against.clone(),
            eval_every: cfg.eval_every,
        }
    }
}

/// How `config.json` was written before the settings had one type (a run started by an
/// older emergence still resumes).
#[derive(Debug, Deserialize)]
struct LegacyConfig {
    scene_path: PathBuf,
    algo: Algo,
    iterations: u32,
    arenas: u32,
    seed: u64,
    model: ModelChoice,
    hyper: Hyper,
    #[serde(default)]
    sharing: Sharing,
    #[serde(default)]
    learner: LearnerKind,
    threads: Option<usize>,
    checkpoint_every: u32,
    #[serde(default)]
    eval_against: Vec<String>,
    #[serde(default = "super::default_eval_every")]
    eval_every: u32,
}

/// The settings of the run in `run_dir` with its newest whole checkpoint to resume from (or
/// its start, when it was stopped before its first); `iterations`, when given, is the new
/// total (it may extend the run).
pub fn resume_config(run_dir: &Path, iterations: Option<u32>) -> Result<TrainConfig, TrainError> {
    let cpath = run_dir.join("config.json");
    let text = std::fs::read_to_string(&cpath).map_err(io_err(&cpath))?;
    let at = |e: serde_json::Error| RunFileError::json(&cpath, &e);
    let value: serde_json::Value = serde_json::from_str(&text).map_err(at)?;
    let spath = run_dir.join("scene.ron");
    let scene =
        crate::load::load_run_scene(&spath).map_err(|e| RunFileError::Scene(e.to_string()))?;
    // None: it stopped before its first checkpoint, and starts again.
    let checkpoint = newest_checkpoint(run_dir)?;
    let mut cfg = if value.get("settings").is_some() {
        let file: RunFile = serde_json::from_str(&text).map_err(at)?;
        let s = &file.settings;
        let missing = |field: &'static str| RunFileError::MissingSetting {
            path: cpath.clone(),
            field,
        };
        let model = s.model.as_deref().ok_or_else(|| missing("model"))?;
        let model = ModelChoice::parse(model).map_err(|e| RunFileError::BadSetting {
            path: cpath.clone(),
            field: "model",
            message: e.to_string(),
        })?;
        let (algo, learner, hyper) = s.resolve();
        TrainConfig {
            scene,
            scene_path: file.scene.clone(),
            algo,
            iterations: s.iterations.ok_or_else(|| missing("iterations"))?,
            arenas: s.arenas.ok_or_else(|| missing("arenas"))?,
            seed: s.seed.ok_or_else(|| missing("seed"))?,
            out: run_dir.to_path_buf(),
            model,
            hyper,
            sharing: s.sharing.unwrap_or_default(),
            learner,
            overlap: s.overlap.unwrap_or(false),
            threads: file.threads,
            checkpoint_every: s
                .checkpoint_every
                .ok_or_else(|| missing("checkpoint_every"))?,
            resume: None,
            stop_after: None,
            tap: None,
            eval_against: file.eval_against,
            eval_every: file.eval_every,
            ranks: Default::default(),
            device: Device::Cpu,
        }
    } else {
        let saved: LegacyConfig = serde_json::from_str(&text).map_err(at)?;
        TrainConfig {
            scene,
            scene_path: saved.scene_path,
            algo: saved.algo,
            iterations: saved.iterations,
            arenas: saved.arenas,
            seed: saved.seed,
            out: run_dir.to_path_buf(),
            model: saved.model,
            hyper: saved.hyper,
            sharing: saved.sharing,
            learner: saved.learner,
            overlap: false,
            threads: saved.threads,
            // 0 meant every iteration (`max(1)`) before the limits were checked.
            checkpoint_every: saved.checkpoint_every.max(1),
            resume: None,
            stop_after: None,
            tap: None,
            eval_against: saved.eval_against,
            eval_every: saved.eval_every.max(1),
            ranks: Default::default(),
            device: Device::Cpu,
        }
    };
    if let Some(n) = iterations {
        cfg.iterations = n;
    }
    cfg.resume = Some(match checkpoint {
        Some((_, dir)) => super::Resume::Checkpoint(dir),
        None => super::Resume::FromStart,
    });
    Ok(cfg)
}

/// Writes `cfg`'s `config.json` (a new file renamed over the old one, so a kill leaves one
/// whole version).
pub(super) fn write_run_file(cfg: &TrainConfig) -> Result<(), TrainError> {
    let cpath = cfg.out.join("config.json");
    let json = serde_json::to_string_pretty(&RunFile::of(cfg)).map_err(|e| TrainError::Io {
        path: cpath.clone(),
        io: std::io::Error::other(e),
    })?;
    super::run_dir::write_atomic(&cpath, (json + "\n").as_bytes())
}

/// The whole checkpoint with the highest iteration in `run_dir/checkpoints` (a folder
/// `iter_K` holding `trainer_state.json`; temporary folders of an interrupted save are
/// ignored).
pub fn newest_checkpoint(run_dir: &Path) -> Result<Option<(u32, PathBuf)>, TrainError> {
    Ok(whole_checkpoints(run_dir)?.pop())
}

/// Every whole checkpoint in `run_dir/checkpoints` (see [`newest_checkpoint`]), oldest first.
pub fn whole_checkpoints(run_dir: &Path) -> Result<Vec<(u32, PathBuf)>, TrainError> {
    let dir = run_dir.join("checkpoints");
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut whole = Vec::new();
    for entry in std::fs::read_dir(&dir).map_err(io_err(&dir))? {
        let entry = entry.map_err(io_err(&dir))?;
        let name = entry.file_name().to_string_lossy().to_string();
        let Some(k) = name
            .strip_prefix("iter_")
            .and_then(|k| k.parse::<u32>().ok())
        else {
            continue;
        };
        let path = entry.path();
        if path.join("trainer_state.json").is_file() {
            whole.push((k, path));
        }
    }
    whole.sort();
    Ok(whole)
}

/// What a checkpoint's `trainer_state.json` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainerState {
    /// Iterations done.
    pub iteration: u32,
    /// The algorithm.
    pub algo: Algo,
    /// The run seed (every stream derives from it: arenas from (seed, arena or group,
    /// episode), agents from (seed, arena, episode, slot), iteration `k`'s minibatch order
    /// from (seed, k)).
    pub seed: u64,
    /// AdamW steps taken by each model's optimizer (their bias corrections continue from
    /// here).
    pub optimizer_steps: Vec<u64>,
    /// The learning rate of the last update.
    pub lr: f64,
    /// MAPPO: each model's critic's AdamW steps (its weights and moments are in
    /// `critic.safetensors` beside the model).
    #[serde(default)]
    pub critic_optimizer_steps: Vec<u64>,
}

/// The model a learner trains, as its policy shares it.
pub(super) enum LearnerModel {
    /// A language model.
    Lm(TrainHandle),
    /// An `mlp`.
    Mlp(MlpHandle),
}

/// A model being trained: its handle, its trainer, and its subfolder in checkpoints.
pub(super) struct Learner {
    pub(super) name: Option<String>,
    pub(super) model: LearnerModel,
    pub(super) trainer: Trainer,
    /// `--overlap`: the network its policy decides with (saved in `behaviour/`).
    pub(super) behaviour: Option<MlpHandle>,
}

impl Learner {
    /// Its folder inside checkpoint `dir`.
    pub(super) fn dir(&self, dir: &Path) -> PathBuf {
        match &self.name {
            Some(n) => dir.join(n),
            None => dir.to_path_buf(),
        }
    }
}

/// Writes a checkpoint to `dir`: each model in the Hugging Face layout with its optimizer's
/// moments (`optimizer.safetensors`; CORY's two copies in `agent_0/` and `agent_1/`),
/// MAPPO's critic, and `trainer_state.json`, all into a temporary sibling that is renamed
/// into place last (a kill at any moment leaves the previous checkpoint whole and this one
/// absent). A failed save removes its temporary folder. Something already at `dir` is never
/// written over: only a checkpoint that is not whole can be there (a run resumes from its
/// newest whole one), and it is renamed to `iter_K.incomplete-N` and returned.
pub(super) fn save_checkpoint(
    learners: &[Learner],
    dir: &Path,
    iteration: u32,
    cfg: &TrainConfig,
) -> Result<Option<PathBuf>, TrainError> {
    let parent = dir.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io_err(parent))?;
    let name = dir
        .file_name()
        .map_or("checkpoint".into(), |n| n.to_string_lossy().to_string());
    let tmp = parent.join(format!(".{name}.partial-{}", std::process::id()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io_err(&tmp))?;
    }
    let written = write_checkpoint(learners, &tmp, iteration, cfg);
    if written.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    written?;
    // Durable before it is published: a power loss after the rename finds it whole.
    super::run_dir::sync_tree(&tmp)?;
    let aside = if dir.symlink_metadata().is_ok() {
        let aside = (1..)
            .map(|n| parent.join(format!("{name}.incomplete-{n}")))
            .find(|p| p.symlink_metadata().is_err())
            .unwrap_or_else(|| parent.join(format!("{name}.incomplete")));
        std::fs::rename(dir, &aside).map_err(io_err(dir))?;
        Some(aside)
    } else {
        None
    };
    std::fs::rename(&tmp, dir).map_err(io_err(dir))?;
    super::run_dir::sync_dir(parent)?;
    Ok(aside)
}

/// [`save_checkpoint`]'s files, into the temporary folder `tmp`.
fn write_checkpoint(
    learners: &[Learner],
    tmp: &Path,
    iteration: u32,
    cfg: &TrainConfig,
) -> Result<(), TrainError> {
    for l in learners {
        let ldir = l.dir(tmp);
        write_model(l, &ldir)?;
        if let (LearnerModel::Mlp(_), Some(b)) = (&l.model, &l.behaviour) {
            b.net()
                .ok_or_else(|| TrainError::Config("no behaviour mlp".into()))?
                .save(&ldir.join(super::models::BEHAVIOUR))
                .map_err(TrainError::Config)?;
        }
        write_moments(l, &ldir)?;
    }
    let mut critic_optimizer_steps = Vec::new();
    for l in learners {
        if let Some(c) = l.trainer.critic() {
            let cpath = l.dir(tmp).join("critic.safetensors");
            let (tensors, steps) = c.state().map_err(|e| RunFileError::tensors(&cpath, e))?;
            let map: std::collections::HashMap<String, candle_core::Tensor> =
                tensors.into_iter().collect();
            candle_core::safetensors::save(&map, &cpath)
                .map_err(|e| RunFileError::tensors(&cpath, e))?;
            critic_optimizer_steps.push(steps);
        }
    }
    let state = TrainerState {
        iteration,
        algo: cfg.algo,
        seed: cfg.seed,
        optimizer_steps: learners
            .iter()
            .map(|l| l.trainer.optimizer().steps())
            .collect(),
        lr: learners
            .first()
            .map_or(0.0, |l| l.trainer.optimizer().params.lr),
        critic_optimizer_steps,
    };
    let spath = tmp.join("trainer_state.json");
    let json = serde_json::to_string_pretty(&state).map_err(|e| TrainError::Io {
        path: spath.clone(),
        io: std::io::Error::other(e),
    })?;
    std::fs::write(&spath, json).map_err(io_err(&spath))
}

/// A learner's model into `ldir`, as a model folder others read: a language model in the
/// Hugging Face layout with its adapters (`train --model`, `lm(model: ...)`), an `mlp` or
/// `gru` as `mlp.json` and `mlp.safetensors` (`mlp:DIR`).
pub(super) fn write_model(l: &Learner, ldir: &Path) -> Result<(), TrainError> {
    let handle = match &l.model {
        LearnerModel::Lm(h) => h,
        LearnerModel::Mlp(h) => {
            return h
                .net()
                .ok_or_else(|| TrainError::Config("no trained mlp".into()))?
                .save(ldir)
                .map_err(TrainError::Config);
        }
    };
    let folder = handle
        .with(|t| ModelFolder {
            dir: ldir.to_path_buf(),
            config: t.config.clone(),
            // Views of the variables: saving reads them now, no copy needed.
            weights: t
                .vars
                .iter()
                .map(|(n, v)| (n.clone(), v.as_tensor().detach()))
                .collect(),
            tokenizer: t.tokenizer.clone(),
        })
        .ok_or_else(|| TrainError::Config("no trained model".into()))?;
    folder.save(ldir)?;
    let adapters = handle
        .with(|t| {
            t.adapters
                .iter()
                .map(|ra| (ra.name.clone(), ra.detached()))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    for (role, adapter) in adapters {
        adapter.save(&ldir.join("adapters").join(role))?;
    }
    Ok(())
}

/// A learner's optimizer moments, `optimizer.safetensors` in its folder `ldir`.
fn write_moments(l: &Learner, ldir: &Path) -> Result<(), TrainError> {
    let opath = ldir.join("optimizer.safetensors");
    let moments: std::collections::HashMap<String, candle_core::Tensor> = (l.trainer)
        .optimizer()
        .state()
        .map_err(|e| RunFileError::tensors(&opath, e))?
        .into_iter()
        .collect();
    candle_core::safetensors::save(&moments, &opath)
        .map_err(|e| RunFileError::tensors(&opath, e))?;
    Ok(())
}

/// A fresh run's folder: `config.json` (the resolved settings) and `scene.ron` (the run's own
/// copy of its scene, which a resumed run reads).
pub(super) fn start_run_folder(cfg: &TrainConfig) -> Result<(), TrainError> {
    std::fs::create_dir_all(&cfg.out).map_err(io_err(&cfg.out))?;
    // The run's own copy of its scene (a resumed run reads this one), then its settings:
    // a folder with a config.json always has its scene copy.
    let text = std::fs::read(&cfg.scene_path).map_err(io_err(&cfg.scene_path))?;
    super::run_dir::write_atomic(&cfg.out.join("scene.ron"), &text)?;
    write_run_file(cfg)
}

/// A resumed run's state from checkpoint `dir`: every model's optimizer moments and step
/// count, MAPPO's critics, and (with a KL term) the reference, which is the run's starting
/// model `initial`, not the checkpoint.
pub(super) fn restore(
    learners: &mut [Learner],
    state: &TrainerState,
    dir: &Path,
    cfg: &TrainConfig,
    initial: &ModelSource,
    scene: &Scene,
    device: &Device,
) -> Result<(), TrainError> {
    for (i, l) in learners.iter_mut().enumerate() {
        let ldir = l.dir(dir);
        // A missing adapter would start afresh (as a new run's does): not a continuation.
        let names = match &l.model {
            LearnerModel::Lm(h) => h
                .with(|t| {
                    t.adapters
                        .iter()
                        .map(|a| a.name.clone())
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default(),
            LearnerModel::Mlp(_) => Vec::new(),
        };
        for name in names {
            let apath = ldir
                .join("adapters")
                .join(&name)
                .join("adapter_model.safetensors");
            if !apath.is_file() {
                return Err(RunFileError::Missing {
                    path: apath,
                    what: format!("{name} adapter"),
                }
                .into());
            }
        }
        let opath = ldir.join("optimizer.safetensors");
        let tensors = candle_core::safetensors::load(&opath, device)
            .map_err(|e| RunFileError::tensors(&opath, e))?;
        let steps =
            state
                .optimizer_steps
                .get(i)
                .copied()
                .ok_or_else(|| RunFileError::NoStepCount {
                    path: dir.join("trainer_state.json"),
                    model: i,
                })?;
        l.trainer
            .optimizer_mut()
            .load_state(&tensors, steps)
            .map_err(|e| RunFileError::tensors(&opath, e))?;
    }
    for (l, &steps) in learners.iter_mut().zip(&state.critic_optimizer_steps) {
        let cpath = l.dir(dir).join("critic.safetensors");
        let tensors = candle_core::safetensors::load(&cpath, device)
            .map_err(|e| RunFileError::tensors(&cpath, e))?;
        let critic = critic::Critic::restore(&tensors, steps, cfg.hyper.lr, device)
            .map_err(|e| RunFileError::tensors(&cpath, e))?;
        l.trainer.set_critic(critic);
    }
    // An mlp's reference is rebuilt from the run seed by its trainer.
    if cfg.hyper.kl_coef > 0.0 && cfg.learner == LearnerKind::Lm {
        // The reference is the run's starting model, not the checkpoint.
        let folder = match initial {
            ModelSource::Embedded { preset, seed } => {
                ModelFolder::init(*preset, *seed, std::slice::from_ref(scene), device)?
            }
            ModelSource::Folder(dir) => ModelFolder::load(dir, device)?,
        };
        for l in learners.iter_mut() {
            l.trainer.set_reference(folder.decoder()?);
        }
    }
    Ok(())
}
