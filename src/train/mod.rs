//! Multi-agent reinforcement fine-tuning between episodes.
//!
//! [`train`] runs a scene's arenas headless with the `lm` policy opened for training
//! ([`crate::policy::lm::TrainHandle`]): every step the rollout buffer files each trained
//! agent's decision ([`rollout`]); when every arena has finished episode `k`, that batch is
//! turned into advantages ([`advantage`]) and losses ([`loss`]) and the model takes its
//! gradient steps ([`trainer`]) before the next decision. Agents of other policies (scripted
//! bots) stay in the arenas as they are: opponents or partners that do not learn.
//!
//! All agents on `lm` share one model (parameter sharing). Iterations are synchronous on
//! episode boundaries: an arena that finishes early starts its next episode with the weights
//! it has, and its log-probabilities are those it acted with, which the PPO ratio accounts
//! for.

pub mod advantage;
pub mod cory;
pub mod critic;
pub mod loss;
pub mod optim;
pub mod rollout;
pub mod sharing;
pub mod trainer;

use bevy::ecs::schedule::IntoScheduleConfigs;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;
use thiserror::Error;

use crate::core::{Arenas, RecordSystems, RunProgress, SimSchedule};
use crate::envs::ActionNames;
use crate::headless::{RunConfig, RunError, build_app};
use crate::policy::lm::{LmError, LmPolicy, ModelFolder, ModelSource, Preset, TrainHandle};
use crate::policy::{PolicyFactory, PolicyRegistry};
use crate::scene::Scene;
pub use rollout::{Batch, Rollouts, Step, Trajectory};
pub use sharing::Sharing;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
pub use trainer::{Algo, Hyper, Trainer, UpdateStats};

/// What can go wrong in training.
#[derive(Debug, Error)]
pub enum TrainError {
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
    Tensor(#[from] candle_core::Error),
    /// An output file.
    #[error("{path}: {io}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        io: std::io::Error,
    },
}

/// Where the trained model starts from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ModelChoice {
    /// A fresh embedded model of this size (seeded by the run seed).
    Preset(Preset),
    /// A model folder on disk.
    Folder(PathBuf),
}

/// A training run.
#[derive(Debug, Clone, Serialize)]
pub struct TrainConfig {
    /// The scene (teams on `lm` learn; if none is, every team is put on `lm`).
    #[serde(skip)]
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
    /// Bevy worker threads.
    pub threads: Option<usize>,
    /// Write a checkpoint every this many iterations (and after the last).
    pub checkpoint_every: u32,
    /// Continue from this checkpoint folder of the run in `out` (see [`resume_config`]).
    #[serde(skip)]
    pub resume: Option<PathBuf>,
    /// Stop after this many iterations (counted from 0, like `iterations`) as if the run
    /// had been interrupted: the schedule stays that of `iterations`, and `--resume`
    /// continues it. A checkpoint is written at the stop.
    #[serde(skip)]
    pub stop_after: Option<u32>,
}

/// The part of `config.json` a resumed run reads back (the scene comes from the run's own
/// copy, `scene.ron`, so an edited scene file cannot change a resumed run).
#[derive(Debug, Deserialize)]
struct SavedConfig {
    algo: Algo,
    iterations: u32,
    arenas: u32,
    seed: u64,
    model: ModelChoice,
    hyper: Hyper,
    #[serde(default)]
    sharing: Sharing,
    threads: Option<usize>,
    checkpoint_every: u32,
}

/// The settings of the run in `run_dir` with its newest whole checkpoint to resume from;
/// `iterations`, when given, is the new total (it may extend the run).
pub fn resume_config(run_dir: &Path, iterations: Option<u32>) -> Result<TrainConfig, TrainError> {
    let cpath = run_dir.join("config.json");
    let text = std::fs::read_to_string(&cpath).map_err(io_err(&cpath))?;
    let saved: SavedConfig = serde_json::from_str(&text).map_err(|e| {
        TrainError::Config(format!(
            "{}:{}:{}: {e}",
            cpath.display(),
            e.line(),
            e.column()
        ))
    })?;
    let spath = run_dir.join("scene.ron");
    let scene = crate::scene::load_scene(&spath)
        .map_err(|e| TrainError::Config(format!("the run's scene copy: {e}")))?;
    let checkpoint = newest_checkpoint(run_dir)?.ok_or_else(|| {
        TrainError::Config(format!(
            "{}: no whole checkpoint to resume from (checkpoints/iter_K with \
             trainer_state.json)",
            run_dir.display()
        ))
    })?;
    Ok(TrainConfig {
        scene,
        scene_path: spath,
        algo: saved.algo,
        iterations: iterations.unwrap_or(saved.iterations),
        arenas: saved.arenas,
        seed: saved.seed,
        out: run_dir.to_path_buf(),
        model: saved.model,
        hyper: saved.hyper,
        sharing: saved.sharing,
        threads: saved.threads,
        checkpoint_every: saved.checkpoint_every,
        resume: Some(checkpoint.1),
        stop_after: None,
    })
}

/// The whole checkpoint with the highest iteration in `run_dir/checkpoints` (a folder
/// `iter_K` holding `trainer_state.json`; temporary folders of an interrupted save are
/// ignored).
pub fn newest_checkpoint(run_dir: &Path) -> Result<Option<(u32, PathBuf)>, TrainError> {
    let dir = run_dir.join("checkpoints");
    if !dir.exists() {
        return Ok(None);
    }
    let mut best: Option<(u32, PathBuf)> = None;
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
        if path.join("trainer_state.json").is_file() && best.as_ref().is_none_or(|b| k > b.0) {
            best = Some((k, path));
        }
    }
    Ok(best)
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

/// One iteration's report.
#[derive(Debug, Clone, Serialize)]
pub struct IterationReport {
    /// Iteration, from 1.
    pub iteration: u32,
    /// Mean episode return per team (over the iteration's episodes), by team name.
    pub team_returns: BTreeMap<String, f64>,
    /// Means of the family's metrics over the iteration's episodes.
    pub metrics: BTreeMap<String, f64>,
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
    /// The plots drawn at the end (a drawing failure does not fail the run).
    pub plots: Result<Vec<PathBuf>, String>,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> TrainError + '_ {
    move |io| TrainError::Io {
        path: path.to_path_buf(),
        io,
    }
}

/// Runs `cfg`; `on_iteration` sees every iteration's report as it is written.
pub fn train(
    cfg: &TrainConfig,
    mut on_iteration: impl FnMut(&IterationReport),
) -> Result<TrainSummary, TrainError> {
    if cfg.iterations == 0 || cfg.arenas == 0 {
        return Err(TrainError::Config(
            "--iterations and --arenas must be at least 1".into(),
        ));
    }
    let g = cfg.hyper.group_size;
    if g == 0 || !cfg.arenas.is_multiple_of(g) {
        return Err(TrainError::Config(format!(
            "--group-size {g} must be at least 1 and divide --arenas {}",
            cfg.arenas
        )));
    }
    if cfg.algo == Algo::Magrpo && g < 2 {
        return Err(TrainError::Config(
            "magrpo compares rollouts that share a seed: give --group-size 2 or more".into(),
        ));
    }
    let resumed: Option<(TrainerState, &Path)> = match &cfg.resume {
        None => None,
        Some(dir) => {
            let spath = dir.join("trainer_state.json");
            let text = std::fs::read_to_string(&spath).map_err(io_err(&spath))?;
            let state: TrainerState = serde_json::from_str(&text).map_err(|e| {
                TrainError::Config(format!(
                    "{}:{}:{}: {e}",
                    spath.display(),
                    e.line(),
                    e.column()
                ))
            })?;
            Some((state, dir.as_path()))
        }
    };
    let start = resumed.as_ref().map_or(0, |(s, _)| s.iteration);
    if start >= cfg.iterations {
        return Err(TrainError::Config(format!(
            "{}: the run has done {start} of {} iterations already; pass a larger \
             --iterations to continue it",
            cfg.out.display(),
            cfg.iterations
        )));
    }
    if resumed.is_none()
        && cfg.out.exists()
        && std::fs::read_dir(&cfg.out)
            .map_err(io_err(&cfg.out))?
            .next()
            .is_some()
    {
        return Err(TrainError::Config(format!(
            "{}: the run folder exists and is not empty; choose another --out, or continue \
             it with --resume (nothing in it was touched)",
            cfg.out.display()
        )));
    }
    let mut scene = cfg.scene.clone();
    if !scene.agents.iter().any(|a| a.policy == "lm") {
        for a in &mut scene.agents {
            a.policy = "lm".into();
        }
    }
    let initial = match &cfg.model {
        ModelChoice::Preset(p) => ModelSource::Embedded {
            preset: *p,
            seed: cfg.seed,
        },
        ModelChoice::Folder(dir) => ModelSource::Folder(dir.clone()),
    };
    let cory = cfg.algo == Algo::Cory;
    if cory && cfg.hyper.swap_every == 0 {
        return Err(TrainError::Config("--swap-every must be at least 1".into()));
    }
    // One model; CORY's two copies (checkpoint subfolders agent_0 and agent_1); or a model
    // per learning team (team_NAME).
    let (model_of_slot, names): (Vec<Option<usize>>, Vec<Option<String>>) = if cory {
        let of = cory::copies_of_slots(&scene).ok_or_else(|| {
            TrainError::Config(
                "cory needs exactly two agents on `lm` in the scene (pioneer and observer)".into(),
            )
        })?;
        (of, (0..2).map(|m| Some(format!("agent_{m}"))).collect())
    } else if cfg.sharing == Sharing::Separate {
        let (of, n) = sharing::models_of_slots(&scene);
        let team_names = scene.team_names();
        let mut names = vec![None; n];
        for (slot, m) in of.iter().enumerate() {
            if let Some(m) = *m {
                let team = usize::from(scene.agents[slot].team);
                names[m] = Some(format!(
                    "team_{}",
                    team_names.get(team).copied().unwrap_or("")
                ));
            }
        }
        (of, names)
    } else {
        (Vec::new(), vec![None])
    };
    let routed = names.len() > 1 || cory;
    let handles: Vec<TrainHandle> = names.iter().map(|_| TrainHandle::default()).collect();
    let sources: Vec<ModelSource> = names
        .iter()
        .map(|n| match (&resumed, n) {
            (Some((_, dir)), Some(n)) => ModelSource::Folder(dir.join(n)),
            (Some((_, dir)), None) => ModelSource::Folder(dir.to_path_buf()),
            (None, _) => initial.clone(),
        })
        .collect();
    let mut run = RunConfig::new(scene.clone());
    run.arenas = cfg.arenas;
    run.episodes = cfg.iterations;
    run.seed = cfg.seed;
    run.threads = cfg.threads;
    run.group_size = g;
    run.first_episode = start;
    let pioneer = Arc::new(AtomicUsize::new(
        (start / cfg.hyper.swap_every.max(1)) as usize % 2,
    ));
    if cory {
        let (s, h, p) = (sources.clone(), handles.clone(), pioneer.clone());
        run.policies.push((
            "lm".into(),
            PolicyFactory(Arc::new(move || {
                let copy = |m: usize| {
                    LmPolicy::with_handle(s[m].clone(), candle_core::Device::Cpu, h[m].clone())
                };
                Box::new(cory::CoryPolicy::new([copy(0), copy(1)], p.clone()))
            })),
        ));
    } else if routed {
        let (s, h, of) = (sources.clone(), handles.clone(), model_of_slot.clone());
        run.policies.push((
            "lm".into(),
            PolicyFactory(Arc::new(move || {
                let models = (0..s.len())
                    .map(|m| {
                        LmPolicy::with_handle(s[m].clone(), candle_core::Device::Cpu, h[m].clone())
                    })
                    .collect();
                Box::new(sharing::RoutedPolicy::new(models, of.clone()))
            })),
        ));
    } else if cfg.sharing == Sharing::RoleLora {
        if cfg.hyper.lora_rank == 0 {
            return Err(TrainError::Config("--lora-rank must be at least 1".into()));
        }
        let (s, h) = (sources[0].clone(), handles[0].clone());
        let lora = crate::policy::lm::LoraConfig::all(cfg.hyper.lora_rank);
        run.policies.push((
            "lm".into(),
            PolicyFactory(Arc::new(move || {
                Box::new(
                    LmPolicy::with_handle(s.clone(), candle_core::Device::Cpu, h.clone())
                        .with_lora(lora.clone()),
                )
            })),
        ));
    } else {
        run.train = Some((sources[0].clone(), handles[0].clone()));
    }
    let mut app = build_app(&run)?;
    // Hold every arena after the episode of this iteration until the update is done.
    app.world_mut().resource_mut::<Arenas>().gate = Some(start + 1);
    let actions = app.world().resource::<ActionNames>().0.len();
    let policy = app
        .world_mut()
        .resource_mut::<PolicyRegistry>()
        .handle("lm")
        .ok_or_else(|| TrainError::Config("no lm policy".into()))?;
    let mut rollouts = Rollouts::new(policy, actions);
    rollouts.global = cfg.algo == Algo::Mappo;
    app.insert_resource(rollouts);
    app.add_systems(
        SimSchedule,
        (
            rollout::collect_steps.in_set(RecordSystems::Summarize),
            rollout::collect_episodes.after(RecordSystems::Finish),
        ),
    );
    let device = candle_core::Device::Cpu;
    let mut learners: Vec<Learner> = names
        .into_iter()
        .zip(&handles)
        .map(|(name, handle)| {
            let mut trainer = Trainer::new(handle, cfg.algo, cfg.hyper.clone(), &device)?;
            trainer.seed = cfg.seed;
            Ok(Learner {
                name,
                handle: handle.clone(),
                trainer,
            })
        })
        .collect::<Result<_, TrainError>>()?;

    let mut writer = match &resumed {
        None => {
            std::fs::create_dir_all(&cfg.out).map_err(io_err(&cfg.out))?;
            let cpath = cfg.out.join("config.json");
            let json = serde_json::to_string_pretty(cfg).map_err(|e| TrainError::Io {
                path: cpath.clone(),
                io: std::io::Error::other(e),
            })?;
            std::fs::write(&cpath, json).map_err(io_err(&cpath))?;
            // The run's own copy of its scene: a resumed run reads this one.
            let scopy = cfg.out.join("scene.ron");
            std::fs::copy(&cfg.scene_path, &scopy).map_err(io_err(&cfg.scene_path))?;
            MetricsFiles::create(&cfg.out)?
        }
        Some((state, dir)) => {
            for (i, l) in learners.iter_mut().enumerate() {
                let ldir = l.dir(dir);
                let opath = ldir.join("optimizer.safetensors");
                let tensors = candle_core::safetensors::load(&opath, &device)
                    .map_err(|e| TrainError::Config(format!("{}: {e}", opath.display())))?;
                let steps = state.optimizer_steps.get(i).copied().ok_or_else(|| {
                    TrainError::Config(format!(
                        "{}: no optimizer step count for model {i}",
                        dir.join("trainer_state.json").display()
                    ))
                })?;
                l.trainer
                    .optimizer_mut()
                    .load_state(&tensors, steps)
                    .map_err(|e| TrainError::Config(format!("{}: {e}", opath.display())))?;
            }
            for (l, &steps) in learners.iter_mut().zip(&state.critic_optimizer_steps) {
                let cpath = l.dir(dir).join("critic.safetensors");
                let tensors = candle_core::safetensors::load(&cpath, &device)
                    .map_err(|e| TrainError::Config(format!("{}: {e}", cpath.display())))?;
                let critic = critic::Critic::restore(&tensors, steps, cfg.hyper.lr, &device)
                    .map_err(|e| TrainError::Config(format!("{}: {e}", cpath.display())))?;
                l.trainer.set_critic(critic);
            }
            if cfg.hyper.kl_coef > 0.0 {
                // The reference is the run's starting model, not the checkpoint.
                let folder = match &initial {
                    ModelSource::Embedded { preset, seed } => {
                        ModelFolder::init(*preset, *seed, std::slice::from_ref(&scene), &device)?
                    }
                    ModelSource::Folder(dir) => ModelFolder::load(dir, &device)?,
                };
                for l in &mut learners {
                    l.trainer.set_reference(folder.decoder()?);
                }
            }
            MetricsFiles::resume(&cfg.out, start)?
        }
    };

    let teams: Vec<String> = scene.team_names().iter().map(|s| s.to_string()).collect();
    let mut reports = Vec::new();
    let mut checkpoints = Vec::new();
    let mut iter_start = Instant::now();
    let mut last_progress = *app.world().resource::<RunProgress>();
    let mut last_stats = lm_stats(&app);
    let end = cfg
        .stop_after
        .map_or(cfg.iterations, |s| s.clamp(start + 1, cfg.iterations));
    for k in start..end {
        loop {
            app.update();
            if app.world().resource::<Rollouts>().complete(k, cfg.arenas) {
                break;
            }
            let p = app.world().resource::<RunProgress>();
            if p.idle_arenas >= cfg.arenas {
                return Err(TrainError::Config(format!(
                    "every arena stopped before iteration {} was complete",
                    k + 1
                )));
            }
        }
        let rollout_seconds = iter_start.elapsed().as_secs_f64();
        let progress = *app.world().resource::<RunProgress>();
        let stats = lm_stats(&app);
        let batch = app.world_mut().resource_mut::<Rollouts>().take(k);
        let team_returns = mean_team_returns(&batch, &teams);
        let metrics = mean_metrics(&batch);
        let parts = if routed {
            split_batch(batch, &model_of_slot, learners.len(), cory)
        } else {
            vec![batch]
        };
        let frac = f64::from(k) / f64::from(cfg.iterations.saturating_sub(1).max(1));
        let mut updates = Vec::with_capacity(parts.len());
        for (m, (l, part)) in learners.iter_mut().zip(&parts).enumerate() {
            l.trainer.schedule(frac);
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(
                cfg.seed ^ 0x7261_696e_0000_0000 ^ u64::from(k) ^ ((m as u64) << 32),
            );
            updates.push(l.trainer.update(part, &mut rng)?);
        }
        let update = UpdateStats::combine(&updates);
        if cory && (k + 1) % cfg.hyper.swap_every.max(1) == 0 {
            pioneer.fetch_xor(1, Ordering::Relaxed);
        }
        app.world_mut().resource_mut::<Arenas>().gate = Some(k + 2);
        let report = IterationReport {
            iteration: k + 1,
            team_returns,
            metrics,
            rollout_seconds,
            inference_seconds: stats.seconds - last_stats.seconds,
            tokens_per_sec: (stats.tokens - last_stats.tokens) as f64
                / (stats.seconds - last_stats.seconds).max(1e-9),
            agent_steps_per_sec: (progress.agent_steps - last_progress.agent_steps) as f64
                / rollout_seconds.max(1e-9),
            seconds: iter_start.elapsed().as_secs_f64(),
            update,
        };
        writer.write(&report)?;
        on_iteration(&report);
        reports.push(report);
        if (k + 1) % cfg.checkpoint_every.max(1) == 0 || k + 1 == end {
            let dir = cfg.out.join("checkpoints").join(format!("iter_{}", k + 1));
            save_checkpoint(&learners, &dir, k + 1, cfg)?;
            checkpoints.push(dir);
            // Curves so far, for a look while the run goes on (drawn again at the end).
            if k + 1 < end {
                let _ = crate::metrics::plot::plot_run(&cfg.out);
            }
        }
        last_progress = progress;
        last_stats = stats;
        iter_start = Instant::now();
    }
    let plots = crate::metrics::plot::plot_run(&cfg.out).map_err(|e| e.to_string());
    Ok(TrainSummary {
        iterations: reports,
        checkpoints,
        plots,
    })
}

fn lm_stats(app: &bevy::app::App) -> crate::policy::PolicyStats {
    app.world()
        .resource::<PolicyRegistry>()
        .stats()
        .into_iter()
        .find(|(n, _)| n == "lm")
        .map(|(_, s)| s)
        .unwrap_or_default()
}

fn mean_team_returns(batch: &Batch, teams: &[String]) -> BTreeMap<String, f64> {
    let n = batch.episodes.len().max(1) as f64;
    teams
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let sum: f64 = batch
                .episodes
                .iter()
                .map(|e| e.team_returns.get(i).copied().unwrap_or(0.0))
                .sum();
            (t.clone(), sum / n)
        })
        .collect()
}

fn mean_metrics(batch: &Batch) -> BTreeMap<String, f64> {
    let mut sums: BTreeMap<String, (f64, u32)> = BTreeMap::new();
    for e in &batch.episodes {
        for (k, v) in &e.metrics {
            let s = sums.entry((*k).to_string()).or_default();
            s.0 += v;
            s.1 += 1;
        }
    }
    sums.into_iter()
        .map(|(k, (s, n))| (k, s / f64::from(n.max(1))))
        .collect()
}

/// A model being trained: its handle, its trainer, and its subfolder in checkpoints.
struct Learner {
    name: Option<String>,
    handle: TrainHandle,
    trainer: Trainer,
}

impl Learner {
    /// Its folder inside checkpoint `dir`.
    fn dir(&self, dir: &Path) -> PathBuf {
        match &self.name {
            Some(n) => dir.join(n),
            None => dir.to_path_buf(),
        }
    }
}

/// One batch per model (by the slot's model); with `sum_rewards` (CORY) every step's reward
/// is replaced by the sum of the learning agents' rewards in that arena at that step.
fn split_batch(
    batch: Batch,
    model_of_slot: &[Option<usize>],
    models: usize,
    sum_rewards: bool,
) -> Vec<Batch> {
    let mut summed: BTreeMap<u32, Vec<f32>> = BTreeMap::new();
    for tr in &batch.trajectories {
        let r = summed.entry(tr.arena).or_default();
        if r.len() < tr.steps.len() {
            r.resize(tr.steps.len(), 0.0);
        }
        for (t, s) in tr.steps.iter().enumerate() {
            r[t] += s.reward;
        }
    }
    let mut parts: Vec<Batch> = (0..models)
        .map(|_| Batch {
            episodes: batch.episodes.clone(),
            slots: batch.slots,
            ..Default::default()
        })
        .collect();
    for mut tr in batch.trajectories {
        let Some(m) = model_of_slot.get(usize::from(tr.slot)).copied().flatten() else {
            continue;
        };
        if let (true, Some(r)) = (sum_rewards, summed.get(&tr.arena)) {
            for (t, s) in tr.steps.iter_mut().enumerate() {
                s.reward = r[t];
            }
        }
        if let Some(p) = parts.get_mut(m) {
            p.trajectories.push(tr);
        }
    }
    parts
}

/// Writes a checkpoint to `dir`: each model in the Hugging Face layout with its optimizer's
/// moments (`optimizer.safetensors`; CORY's two copies in `agent_0/` and `agent_1/`),
/// MAPPO's critic, and `trainer_state.json`, all into a temporary sibling that is renamed
/// into place last (a kill at any moment leaves the previous checkpoint whole and this one
/// absent).
fn save_checkpoint(
    learners: &[Learner],
    dir: &Path,
    iteration: u32,
    cfg: &TrainConfig,
) -> Result<(), TrainError> {
    let parent = dir.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io_err(parent))?;
    let name = dir
        .file_name()
        .map_or("checkpoint".into(), |n| n.to_string_lossy().to_string());
    let tmp = parent.join(format!(".{name}.partial-{}", std::process::id()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io_err(&tmp))?;
    }
    for l in learners {
        let ldir = l.dir(&tmp);
        let folder = l
            .handle
            .with(|t| ModelFolder {
                dir: ldir.clone(),
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
        folder.save(&ldir)?;
        let adapters = l
            .handle
            .with(|t| {
                t.adapters
                    .iter()
                    .map(|ra| (ra.role.clone(), ra.detached()))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        for (role, adapter) in adapters {
            adapter.save(&ldir.join("adapters").join(role))?;
        }
        let opath = ldir.join("optimizer.safetensors");
        let moments: std::collections::HashMap<String, candle_core::Tensor> =
            l.trainer.optimizer().state().into_iter().collect();
        candle_core::safetensors::save(&moments, &opath)
            .map_err(|e| TrainError::Config(format!("{}: {e}", opath.display())))?;
    }
    let mut critic_optimizer_steps = Vec::new();
    for l in learners {
        if let Some(c) = l.trainer.critic() {
            let (tensors, steps) = c.state();
            let cpath = l.dir(&tmp).join("critic.safetensors");
            let map: std::collections::HashMap<String, candle_core::Tensor> =
                tensors.into_iter().collect();
            candle_core::safetensors::save(&map, &cpath)
                .map_err(|e| TrainError::Config(format!("{}: {e}", cpath.display())))?;
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
    std::fs::write(&spath, json).map_err(io_err(&spath))?;
    std::fs::rename(&tmp, dir).map_err(io_err(dir))
}

/// `metrics.jsonl` and `metrics.csv` in the run folder, a row per iteration.
struct MetricsFiles {
    jsonl: (PathBuf, std::fs::File),
    csv: (PathBuf, std::fs::File),
    columns: Option<Vec<String>>,
}

impl MetricsFiles {
    fn create(dir: &Path) -> Result<Self, TrainError> {
        Self::create_named(dir, "metrics.jsonl", "metrics.csv")
    }

    /// Keeps the rows of iterations up to `upto` (a resumed run redoes the later ones):
    /// both files are rewritten through temporary files renamed into place.
    fn resume(dir: &Path, upto: u32) -> Result<Self, TrainError> {
        let path = dir.join("metrics.jsonl");
        let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
        let mut kept = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let value: serde_json::Value = serde_json::from_str(line)
                .map_err(|e| TrainError::Config(format!("{}:{}: {e}", path.display(), i + 1)))?;
            if value
                .get("iteration")
                .and_then(|v| v.as_u64())
                .is_some_and(|k| k <= u64::from(upto))
            {
                kept.push(value);
            }
        }
        let mut files = Self::create_named(dir, ".metrics.jsonl.tmp", ".metrics.csv.tmp")?;
        for v in &kept {
            files.write_value(v)?;
        }
        for (from, to) in [
            (files.jsonl.0.clone(), dir.join("metrics.jsonl")),
            (files.csv.0.clone(), dir.join("metrics.csv")),
        ] {
            std::fs::rename(&from, &to).map_err(io_err(&to))?;
        }
        files.jsonl.0 = dir.join("metrics.jsonl");
        files.csv.0 = dir.join("metrics.csv");
        Ok(files)
    }

    fn create_named(dir: &Path, jsonl: &str, csv: &str) -> Result<Self, TrainError> {
        let open = |name: &str| -> Result<(PathBuf, std::fs::File), TrainError> {
            let p = dir.join(name);
            let f = std::fs::File::create(&p).map_err(io_err(&p))?;
            Ok((p, f))
        };
        Ok(Self {
            jsonl: open(jsonl)?,
            csv: open(csv)?,
            columns: None,
        })
    }

    fn write(&mut self, r: &IterationReport) -> Result<(), TrainError> {
        let value = serde_json::to_value(r).map_err(|e| TrainError::Io {
            path: self.jsonl.0.clone(),
            io: std::io::Error::other(e),
        })?;
        self.write_value(&value)
    }

    fn write_value(&mut self, value: &serde_json::Value) -> Result<(), TrainError> {
        writeln!(self.jsonl.1, "{value}").map_err(io_err(&self.jsonl.0))?;
        // CSV: flatten one level (team_returns.X, metrics.Y).
        let mut row: BTreeMap<String, String> = BTreeMap::new();
        if let serde_json::Value::Object(map) = value {
            for (k, v) in map {
                match v {
                    serde_json::Value::Object(inner) => {
                        for (k2, v2) in inner {
                            row.insert(format!("{k}.{k2}"), v2.to_string());
                        }
                    }
                    other => {
                        row.insert(k.clone(), other.to_string());
                    }
                }
            }
        }
        if self.columns.is_none() {
            let mut c: Vec<String> = row.keys().cloned().collect();
            c.retain(|k| k != "iteration");
            c.insert(0, "iteration".into());
            writeln!(self.csv.1, "{}", c.join(",")).map_err(io_err(&self.csv.0))?;
            self.columns = Some(c);
        }
        let line: Vec<String> = self
            .columns
            .iter()
            .flatten()
            .map(|c| row.get(c).cloned().unwrap_or_default())
            .collect();
        writeln!(self.csv.1, "{}", line.join(",")).map_err(io_err(&self.csv.0))?;
        self.jsonl.1.flush().map_err(io_err(&self.jsonl.0))?;
        self.csv.1.flush().map_err(io_err(&self.csv.0))?;
        Ok(())
    }
}
