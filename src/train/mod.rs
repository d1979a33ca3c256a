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
pub mod loss;
pub mod rollout;
pub mod trainer;

use bevy::ecs::schedule::IntoScheduleConfigs;
use rand::SeedableRng;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;
use thiserror::Error;

use crate::core::{RecordSystems, RunProgress, SimSchedule};
use crate::envs::ActionNames;
use crate::headless::{RunConfig, RunError, build_app};
use crate::policy::PolicyRegistry;
use crate::policy::lm::{LmError, ModelFolder, ModelSource, Preset, TrainHandle};
use crate::scene::Scene;
pub use rollout::{Batch, Rollouts, Step, Trajectory};
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
#[derive(Debug, Clone, PartialEq, Serialize)]
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
    /// Bevy worker threads.
    pub threads: Option<usize>,
    /// Write a checkpoint every this many iterations (and after the last).
    pub checkpoint_every: u32,
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
    if cfg.out.exists()
        && std::fs::read_dir(&cfg.out)
            .map_err(io_err(&cfg.out))?
            .next()
            .is_some()
    {
        return Err(TrainError::Config(format!(
            "{}: the run folder exists and is not empty; choose another --out (nothing in it \
             was touched)",
            cfg.out.display()
        )));
    }
    let mut scene = cfg.scene.clone();
    if !scene.agents.iter().any(|a| a.policy == "lm") {
        for a in &mut scene.agents {
            a.policy = "lm".into();
        }
    }
    let source = match &cfg.model {
        ModelChoice::Preset(p) => ModelSource::Embedded {
            preset: *p,
            seed: cfg.seed,
        },
        ModelChoice::Folder(dir) => ModelSource::Folder(dir.clone()),
    };
    let handle = TrainHandle::default();
    let mut run = RunConfig::new(scene.clone());
    run.arenas = cfg.arenas;
    run.episodes = cfg.iterations;
    run.seed = cfg.seed;
    run.threads = cfg.threads;
    run.train = Some((source, handle.clone()));
    let mut app = build_app(&run)?;
    let actions = app.world().resource::<ActionNames>().0.len();
    let policy = app
        .world_mut()
        .resource_mut::<PolicyRegistry>()
        .handle("lm")
        .ok_or_else(|| TrainError::Config("no lm policy".into()))?;
    app.insert_resource(Rollouts::new(policy, actions));
    app.add_systems(
        SimSchedule,
        (
            rollout::collect_steps.in_set(RecordSystems::Summarize),
            rollout::collect_episodes.after(RecordSystems::Finish),
        ),
    );
    let device = candle_core::Device::Cpu;
    let mut trainer = Trainer::new(&handle, cfg.algo, cfg.hyper.clone(), &device)?;

    std::fs::create_dir_all(&cfg.out).map_err(io_err(&cfg.out))?;
    let cpath = cfg.out.join("config.json");
    let json = serde_json::to_string_pretty(cfg).map_err(|e| TrainError::Io {
        path: cpath.clone(),
        io: std::io::Error::other(e),
    })?;
    std::fs::write(&cpath, json).map_err(io_err(&cpath))?;
    let mut writer = MetricsFiles::create(&cfg.out)?;

    let teams: Vec<String> = scene.team_names().iter().map(|s| s.to_string()).collect();
    let mut reports = Vec::new();
    let mut checkpoints = Vec::new();
    let mut iter_start = Instant::now();
    let mut last_progress = *app.world().resource::<RunProgress>();
    let mut last_stats = lm_stats(&app);
    for k in 0..cfg.iterations {
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
        trainer.schedule(f64::from(k) / f64::from(cfg.iterations.saturating_sub(1).max(1)));
        let mut rng =
            rand_chacha::ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x7261_696e_0000_0000 ^ u64::from(k));
        let update = trainer.update(&batch, &mut rng)?;
        let report = IterationReport {
            iteration: k + 1,
            team_returns: mean_team_returns(&batch, &teams),
            metrics: mean_metrics(&batch),
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
        if (k + 1) % cfg.checkpoint_every.max(1) == 0 || k + 1 == cfg.iterations {
            let dir = cfg.out.join("checkpoints").join(format!("iter_{}", k + 1));
            save_checkpoint(&handle, &dir, k + 1, cfg)?;
            checkpoints.push(dir);
        }
        last_progress = progress;
        last_stats = stats;
        iter_start = Instant::now();
    }
    Ok(TrainSummary {
        iterations: reports,
        checkpoints,
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

/// Writes the model in the Hugging Face layout plus `trainer_state.json` to `dir`, through
/// a temporary sibling renamed into place (a kill leaves the previous checkpoint whole).
fn save_checkpoint(
    handle: &TrainHandle,
    dir: &Path,
    iteration: u32,
    cfg: &TrainConfig,
) -> Result<(), TrainError> {
    let folder = handle
        .with(|t| ModelFolder {
            dir: dir.to_path_buf(),
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
    folder.save(dir)?;
    let state = serde_json::json!({
        "iteration": iteration,
        "algo": cfg.algo,
        "seed": cfg.seed,
    });
    let spath = dir.join("trainer_state.json");
    std::fs::write(&spath, state.to_string()).map_err(io_err(&spath))?;
    Ok(())
}

/// `metrics.jsonl` and `metrics.csv` in the run folder, a row per iteration.
struct MetricsFiles {
    jsonl: (PathBuf, std::fs::File),
    csv: (PathBuf, std::fs::File),
    columns: Option<Vec<String>>,
}

impl MetricsFiles {
    fn create(dir: &Path) -> Result<Self, TrainError> {
        let open = |name: &str| -> Result<(PathBuf, std::fs::File), TrainError> {
            let p = dir.join(name);
            let f = std::fs::File::create(&p).map_err(io_err(&p))?;
            Ok((p, f))
        };
        Ok(Self {
            jsonl: open("metrics.jsonl")?,
            csv: open("metrics.csv")?,
            columns: None,
        })
    }

    fn write(&mut self, r: &IterationReport) -> Result<(), TrainError> {
        let value = serde_json::to_value(r).map_err(|e| TrainError::Io {
            path: self.jsonl.0.clone(),
            io: std::io::Error::other(e),
        })?;
        writeln!(self.jsonl.1, "{value}").map_err(io_err(&self.jsonl.0))?;
        // CSV: flatten one level (team_returns.X, metrics.Y).
        let mut row: BTreeMap<String, String> = BTreeMap::new();
        if let serde_json::Value::Object(map) = &value {
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
        let columns = self.columns.get_or_insert_with(|| {
            let mut c: Vec<String> = row.keys().cloned().collect();
            c.retain(|k| k != "iteration");
            c.insert(0, "iteration".into());
            c
        });
        if r.iteration == 1 {
            writeln!(self.csv.1, "{}", columns.join(",")).map_err(io_err(&self.csv.0))?;
        }
        let line: Vec<String> = columns
            .iter()
            .map(|c| row.get(c).cloned().unwrap_or_default())
            .collect();
        writeln!(self.csv.1, "{}", line.join(",")).map_err(io_err(&self.csv.0))?;
        self.jsonl.1.flush().map_err(io_err(&self.jsonl.0))?;
        self.csv.1.flush().map_err(io_err(&self.csv.0))?;
        Ok(())
    }
}
