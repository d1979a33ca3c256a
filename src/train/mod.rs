//! Multi-agent reinforcement fine-tuning between episodes.
//!
//! [`train`] runs a scene's arenas headless with the `lm` policy opened for training
//! ([`crate::policy::lm::TrainHandle`]): every step the rollout buffer files each trained
//! agent's decision ([`rollout`]); when every arena has finished episode `k`, that batch is
//! turned into advantages ([`advantage`]) and losses ([`loss`]) and the model takes its
//! gradient steps ([`trainer`]) before the next decision. Agents of other policies (scripted
//! bots) stay in the arenas as they are: opponents or partners that do not learn.
//!
//! The agents on `lm` share one model, a LoRA adapter per role over one frozen base, or a
//! model per team ([`sharing`]); CORY trains two copies ([`cory`]); MAPPO adds a centralised
//! critic ([`critic`]). Iterations are synchronous on episode boundaries: an arena that
//! finishes its episode early waits ([`crate::core::Arenas::gate`]) until the update is
//! done, so every episode of a batch acts with the same weights, and a resumed run
//! ([`resume_config`]) continues exactly where a checkpoint left off.
//!
//! Over 600 lines: [`train`] is the run in four numbered steps (the settings and the folder;
//! the models and the arenas' app; the folder's outputs; the iterations), each a few named
//! calls, so that its order of effects, which the exact resume depends on, reads top to
//! bottom in one function; the helpers it calls follow it here. Its types are in `config.rs`,
//! the update in `trainer/`, the rest in the modules below.

pub mod advantage;
pub mod algo;
pub mod bench;
mod checkpoint;
mod config;
pub mod critic;
pub mod dist;
mod error;
pub mod eval;
#[cfg(test)]
mod fused_tests;
mod hyper;
pub mod imitate;
pub mod loss;
mod metrics_files;
mod models;
pub mod optim;
pub mod rollout;
pub mod rules;
pub mod run_dir;
pub mod settings;
pub mod sharing;
pub mod trainer;

use rand::SeedableRng;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use crate::core::{Arenas, RunProgress};
use crate::headless::{RunConfig, RunError, build_app_with};
use crate::policy::PolicyRegistry;
use crate::policy::lm::ModelSource;
use crate::scene::Scene;
pub use crate::scene::limits;
pub use crate::scene::settings::{Algo, LearnerKind, Sharing};
pub use algo::cory;
use checkpoint::{Learner, LearnerModel, save_checkpoint};
pub use checkpoint::{RunFile, TrainerState, newest_checkpoint, resume_config, whole_checkpoints};
pub(crate) use config::io_err;
pub use config::{
    EVAL_ARENAS, IterationReport, ModelChoice, Resume, TrainConfig, TrainError, TrainSummary,
    default_eval_every,
};
pub use error::{RunFileError, RunFolderError, UpdateError};
pub use hyper::Hyper;
use metrics_files::MetricsFiles;
pub use rollout::{Batch, Rollouts, Step, TrainPlugin, Trajectory};
pub use rules::SettingsError;
pub use settings::TrainSettings;
use std::sync::atomic::Ordering;
pub use trainer::{Trainer, UpdateStats};

/// Runs `cfg`; `on_iteration` sees every iteration's report as it is written.
pub fn train(
    cfg: &TrainConfig,
    mut on_iteration: impl FnMut(&IterationReport),
) -> Result<TrainSummary, TrainError> {
    // 1. The settings and the run's folder: the learner's agents, the rules of the settings,
    //    the lock, the state a resumed run starts from, what the ranks and the folder allow.
    let learner = cfg.learner.policy();
    let scene = learners_scene(cfg);
    rules::check(cfg, &scene)?;
    // A resumed run's folder is locked before its state is read; a fresh one's once it is
    // known to be fresh, just before anything is written.
    // Under mpirun rank 0 alone holds the folder (the others only read a checkpoint).
    let mut lock = match &cfg.resume {
        Some(_) if cfg.ranks.is_root() => Some(run_dir::RunLock::acquire(&cfg.out)?),
        _ => None,
    };
    let resumed = read_trainer_state(cfg)?;
    let ranks = cfg.ranks.clone();
    let root = ranks.is_root();
    let share = ranks.share(cfg.arenas);
    let start = resumed.as_ref().map_or(0, |(s, _)| s.iteration);
    check_not_done(cfg, start)?;
    if cfg.resume.is_none() && root {
        refuse_used_folder(&cfg.out)?;
    }
    // The classic networks (`mlp`, `gru`) share one path; `gru` differs in the network.
    let mlp = cfg.learner.classic();
    if !cfg.eval_against.is_empty() {
        eval::check_partners(&scene, &cfg.eval_against).map_err(SettingsError::EvalAgainst)?;
    }

    // 2. The models (shared, per role, per team, CORY's two copies) and the arenas' app.
    let initial = match &cfg.model {
        ModelChoice::Preset(p) => ModelSource::Embedded {
            preset: *p,
            seed: cfg.seed,
        },
        ModelChoice::Folder(dir) => ModelSource::Folder(dir.clone()),
    };
    let cory = cfg.algo == Algo::Cory;
    let models::Models {
        names,
        model_of_slot,
        routed,
        handles,
        mlp_handles,
        behaviour,
        pioneer,
        policy,
    } = models::wire(
        cfg,
        &scene,
        learner,
        mlp,
        resumed.as_ref().map(|(_, dir)| *dir),
        &initial,
        start,
    )?;
    let run = run_config(cfg, &scene, &share, start, policy);
    let mut app = build_app_with(&run, |app| {
        app.add_plugins(TrainPlugin {
            learner: learner.to_string(),
            global: cfg.algo == Algo::Mappo,
            features: mlp,
        });
    })?;
    if let Some(tap) = &cfg.tap {
        app.insert_resource(crate::frames::TapSink::new(tap.clone()));
    }
    // Hold every arena after the episode of this iteration until the update is done.
    app.world_mut().resource_mut::<Arenas>().gate = Some(start + 1);
    let actions = app.world().resource::<Rollouts>().actions;
    if app.world().resource::<Rollouts>().policy.is_none() {
        return Err(TrainError::Config(format!("no {learner} policy")));
    }
    // The language model where `--device` puts it; an mlp is small and stays on the CPU.
    let device = if mlp {
        candle_core::Device::Cpu
    } else {
        cfg.device.clone()
    };
    let trainers = Trainers {
        mlp,
        actions,
        device: &device,
        share: &share,
    };
    let mut learners = trainers.learners(cfg, names, &handles, &mlp_handles, &behaviour)?;

    // 3. The folder: locked, leftovers of a killed process removed, the run's record and
    //    metrics files started (or, resumed, the checkpoint restored and the files reopened).
    if lock.is_none() && root {
        lock = Some(run_dir::RunLock::acquire(&cfg.out)?);
        // Another process may have started here since the check.
        refuse_used_folder(&cfg.out)?;
    }
    let mut notes = remove_leftovers(cfg)?;
    let mut writer = match &resumed {
        None if !root => None,
        None => Some(start_outputs(cfg)?),
        Some((state, dir)) => {
            checkpoint::restore(&mut learners, state, dir, cfg, &initial, &scene, &device)?;
            if root {
                Some(reopen_outputs(cfg, start, &mut notes)?)
            } else {
                None
            }
        }
    };

    // 4. The iterations: a rollout of every arena's episode, the update, the report, the
    //    evaluation and the checkpoint when due.
    let teams: Vec<String> = scene.team_names().iter().map(|s| s.to_string()).collect();
    let mut reports = Vec::new();
    let mut checkpoints = Vec::new();
    let mut set_aside = Vec::new();
    let mut iter_start = Instant::now();
    let mut last_progress = *app.world().resource::<RunProgress>();
    let mut last_stats = policy_stats(&app, learner);
    let end = cfg
        .stop_after
        .map_or(cfg.iterations, |s| s.clamp(start + 1, cfg.iterations));
    // `--overlap`: the rollout of iteration k + 1 runs while iteration k's update does (it
    // was collected already when the loop comes to it).
    let mut collected = false;
    let mut rollout_seconds_next = 0.0;
    for k in start..end {
        if !collected {
            collect(&mut app, k, &share)?;
            rollout_seconds_next = ranks.max_f64(iter_start.elapsed().as_secs_f64());
        }
        // Under mpirun: the slowest rank's rollout, every rank's steps and tokens.
        let rollout_seconds = rollout_seconds_next;
        let progress = *app.world().resource::<RunProgress>();
        let stats = policy_stats(&app, learner);
        let mut counts = [
            (progress.agent_steps - last_progress.agent_steps) as f64,
            (stats.tokens - last_stats.tokens) as f64,
            stats.seconds - last_stats.seconds,
        ];
        ranks.sum_f64(&mut counts);
        let [agent_steps, tokens, inference_seconds] = counts;
        let batch = app.world_mut().resource_mut::<Rollouts>().take(k);
        let batch = ranks.gather_batch(batch)?;
        let team_returns = mean_team_returns(&batch, &teams);
        let metrics = mean_metrics(&batch);
        let parts = if routed {
            split_batch(batch, &model_of_slot, learners.len(), cory)
        } else {
            vec![batch]
        };
        let frac = f64::from(k) / f64::from(cfg.iterations.saturating_sub(1).max(1));
        let update_all = |learners: &mut Vec<Learner>| -> Result<Vec<UpdateStats>, TrainError> {
            let mut updates = Vec::with_capacity(parts.len());
            for (m, (l, part)) in learners.iter_mut().zip(&parts).enumerate() {
                l.trainer.schedule(frac);
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(
                    cfg.seed ^ 0x7261_696e_0000_0000 ^ u64::from(k) ^ ((m as u64) << 32),
                );
                updates.push(l.trainer.update(part, &mut rng)?);
            }
            Ok(updates)
        };
        let overlapped = cfg.overlap && k + 1 < end;
        let updates = if overlapped {
            // The policy plays the next iteration with the weights the update starts from.
            sync_behaviour(&learners)?;
            if cory && (k + 1) % cfg.hyper.swap_every.max(1) == 0 {
                pioneer.fetch_xor(1, Ordering::Relaxed);
            }
            app.world_mut().resource_mut::<Arenas>().gate = Some(k + 2);
            let next_start = Instant::now();
            let (updates, rolled) = std::thread::scope(|s| {
                let learners = &mut learners;
                let update = s.spawn(move || update_all(learners));
                let rolled = collect(&mut app, k + 1, &share);
                let secs = next_start.elapsed().as_secs_f64();
                let updates = match update.join() {
                    Ok(u) => u,
                    Err(p) => std::panic::resume_unwind(p),
                };
                (updates, rolled.map(|()| secs))
            });
            rollout_seconds_next = rolled?;
            collected = true;
            updates?
        } else {
            if cfg.overlap {
                sync_behaviour(&learners)?;
            }
            collected = false;
            update_all(&mut learners)?
        };
        // The rollout's and the update's wall time (side by side under --overlap).
        let work_seconds = iter_start.elapsed().as_secs_f64();
        let mut update = UpdateStats::combine(&updates);
        if ranks.parallel() {
            update.reduce_seconds = Some(ranks.take_seconds());
        }
        if !overlapped {
            if cory && (k + 1) % cfg.hyper.swap_every.max(1) == 0 {
                pioneer.fetch_xor(1, Ordering::Relaxed);
            }
            app.world_mut().resource_mut::<Arenas>().gate = Some(k + 2);
        }
        let eval = if root {
            evaluate_if_due(cfg, &scene, &learners, k)?
        } else {
            BTreeMap::new()
        };
        let report = IterationReport {
            iteration: k + 1,
            team_returns,
            eval,
            metrics,
            rollout_seconds,
            inference_seconds,
            tokens_per_sec: tokens / inference_seconds.max(1e-9),
            agent_steps_per_sec: agent_steps / rollout_seconds.max(1e-9),
            training_steps_per_sec: if cfg.overlap {
                // The steps of this iteration's rollout over the wall time until its update
                // was done (the next rollout ran beside that update).
                agent_steps / work_seconds.max(1e-9)
            } else {
                agent_steps / (rollout_seconds + update.update_seconds).max(1e-9)
            },
            seconds: iter_start.elapsed().as_secs_f64(),
            update,
        };
        if let Some(w) = &mut writer {
            w.write(&report)?;
            on_iteration(&report);
        }
        reports.push(report);
        if (k + 1) % cfg.checkpoint_every.max(1) == 0 || k + 1 == end {
            let dir = cfg.out.join("checkpoints").join(format!("iter_{}", k + 1));
            if root {
                set_aside.extend(save_checkpoint(&learners, &dir, k + 1, cfg)?);
            }
            checkpoints.push(dir);
            // Curves so far, for a look while the run goes on (drawn again at the end).
            if root && k + 1 < end {
                let _ = crate::metrics::plot::plot_run(&cfg.out);
            }
        }
        last_progress = progress;
        last_stats = stats;
        iter_start = Instant::now();
    }
    let plots = if root {
        crate::metrics::plot::plot_run(&cfg.out).map_err(|e| e.to_string())
    } else {
        Err(format!("rank {} draws nothing (rank 0 does)", ranks.rank()))
    };
    drop(lock);
    Ok(TrainSummary {
        iterations: reports,
        checkpoints,
        set_aside,
        plots,
        notes,
    })
}

/// The arenas' run of a training run: this rank's share of the arenas, one episode an
/// iteration from `start`, the learner's policy.
fn run_config(
    cfg: &TrainConfig,
    scene: &Scene,
    share: &std::ops::Range<u32>,
    start: u32,
    policy: (String, crate::policy::PolicyFactory),
) -> RunConfig {
    let mut run = RunConfig::new(scene.clone());
    run.arenas = share.len() as u32;
    run.first_arena = share.start;
    // One episode more than the updates: after the last one the arenas wait (gated) rather
    // than go idle, so the state after a truncated episode's last step is still observed
    // and valued (the bootstrap of its advantages). That episode never starts.
    run.episodes = cfg.iterations + 1;
    run.seed = cfg.seed;
    run.threads = cfg.threads;
    run.group_size = cfg.hyper.group_size;
    run.first_episode = start;
    run.policies.push(policy);
    run
}

/// `--eval-against`: after the first iteration, every `--eval-every`-th and the last, the
/// model of iteration `k` against each partner (empty when not due).
fn evaluate_if_due(
    cfg: &TrainConfig,
    scene: &Scene,
    learners: &[Learner],
    k: u32,
) -> Result<BTreeMap<String, f64>, TrainError> {
    let due = k == 0 || (k + 1).is_multiple_of(cfg.eval_every.max(1)) || k + 1 == cfg.iterations;
    if cfg.eval_against.is_empty() || !due {
        return Ok(BTreeMap::new());
    }
    // The evaluation reads the model from a scratch folder: the iteration's row is written
    // before its checkpoint, so that a resumed run always finds the rows of the checkpoint it
    // starts from.
    let scratch = cfg.out.join(".eval");
    let dir = scratch.join(format!("iter_{}", k + 1));
    // A scratch folder a killed run left behind.
    let _ = std::fs::remove_dir_all(&scratch);
    save_checkpoint(learners, &dir, k + 1, cfg)?;
    let result = evaluate_iteration(cfg, scene, &dir, k + 1);
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// The scene as trained: the teams on the learner's policy learn, or every team when none is
/// on it.
fn learners_scene(cfg: &TrainConfig) -> Scene {
    let learner = cfg.learner.policy();
    let mut scene = cfg.scene.clone();
    if !scene.agents.iter().any(|a| a.policy == learner) {
        for a in &mut scene.agents {
            a.policy = learner.into();
        }
    }
    scene
}

/// A resumed run's trainer state and its checkpoint's folder (`None`: a fresh run, or one
/// resumed before its first checkpoint).
fn read_trainer_state(cfg: &TrainConfig) -> Result<Option<(TrainerState, &Path)>, TrainError> {
    match &cfg.resume {
        None | Some(Resume::FromStart) => Ok(None),
        Some(Resume::Checkpoint(dir)) => {
            let spath = dir.join("trainer_state.json");
            let text = std::fs::read_to_string(&spath).map_err(io_err(&spath))?;
            let state: TrainerState =
                serde_json::from_str(&text).map_err(|e| RunFileError::json(&spath, &e))?;
            Ok(Some((state, dir.as_path())))
        }
    }
}

/// A resumed run must have iterations left.
fn check_not_done(cfg: &TrainConfig, start: u32) -> Result<(), TrainError> {
    if start >= cfg.iterations {
        return Err(RunFolderError::Done {
            path: cfg.out.clone(),
            done: start,
            iterations: cfg.iterations,
        }
        .into());
    }
    Ok(())
}

/// What every learner's trainer is made with.
struct Trainers<'a> {
    mlp: bool,
    actions: usize,
    device: &'a candle_core::Device,
    share: &'a std::ops::Range<u32>,
}

impl Trainers<'_> {
    /// A trainer for each model `names` lists.
    fn learners(
        &self,
        cfg: &TrainConfig,
        names: Vec<Option<String>>,
        handles: &[crate::policy::lm::TrainHandle],
        mlp_handles: &[crate::policy::mlp::MlpHandle],
        behaviour: &[crate::policy::mlp::MlpHandle],
    ) -> Result<Vec<Learner>, TrainError> {
        let device = self.device;
        names
            .into_iter()
            .enumerate()
            .map(|(m, name)| {
                let (model, mut trainer) = if self.mlp {
                    let h = &mlp_handles[m];
                    let mut t = Trainer::new_mlp(
                        h,
                        self.actions,
                        cfg.algo,
                        cfg.hyper.clone(),
                        cfg.seed,
                        device,
                    )?;
                    if let ModelChoice::Folder(dir) = &cfg.model {
                        t.start_from(dir)?;
                    }
                    (LearnerModel::Mlp(h.clone()), t)
                } else {
                    let h = &handles[m];
                    let t = Trainer::new(h, cfg.algo, cfg.hyper.clone(), device)?;
                    (LearnerModel::Lm(h.clone()), t)
                };
                trainer.seed = cfg.seed;
                trainer.ranks = cfg.ranks.clone();
                trainer.share = self.share.clone();
                Ok(Learner {
                    name,
                    model,
                    trainer,
                    behaviour: behaviour.get(m).cloned(),
                })
            })
            .collect()
    }
}

/// Removes what a process killed while it wrote left in the run's folder (rank 0 alone
/// touches it); a note for each.
fn remove_leftovers(cfg: &TrainConfig) -> Result<Vec<String>, TrainError> {
    let mut notes = Vec::new();
    let folders = if cfg.ranks.is_root() {
        vec![cfg.out.clone(), cfg.out.join("checkpoints")]
    } else {
        Vec::new()
    };
    for dir in folders {
        for p in run_dir::remove_leftovers(&dir)? {
            notes.push(format!(
                "removed {}, left by a process killed while it wrote",
                p.display()
            ));
        }
    }
    Ok(notes)
}

/// A run from its start: its record (`config.json`, the scene's copy) and new metrics files.
fn start_outputs(cfg: &TrainConfig) -> Result<MetricsFiles, TrainError> {
    if cfg.resume.is_none() {
        checkpoint::start_run_folder(cfg)?;
    } else {
        // Stopped before its first checkpoint: the same run from its start.
        checkpoint::write_run_file(cfg)?;
    }
    MetricsFiles::create(&cfg.out)
}

/// A resumed run: its record follows the run (its new total of iterations, its threads), and
/// its metrics files reopen at iteration `start` (a row cut short is dropped, with a note).
fn reopen_outputs(
    cfg: &TrainConfig,
    start: u32,
    notes: &mut Vec<String>,
) -> Result<MetricsFiles, TrainError> {
    checkpoint::write_run_file(cfg)?;
    let (files, torn) = MetricsFiles::resume(&cfg.out, start)?;
    if let Some(line) = torn {
        notes.push(format!(
            "{}:{line}: dropped a row cut short (the process was killed while it wrote it); \
             the rows after iteration {start} are written again",
            cfg.out.join("metrics.jsonl").display()
        ));
    }
    Ok(files)
}

/// Steps `app` until every arena of `share` has finished episode `k` (and the arenas that
/// ended at its very last step have valued their last state, at the next step); a policy's
/// failure, or every arena stopped first, is an error.
fn collect(
    app: &mut bevy::app::App,
    k: u32,
    share: &std::ops::Range<u32>,
) -> Result<(), TrainError> {
    let failed = |app: &bevy::app::App| -> Result<(), TrainError> {
        match app.world().resource::<PolicyRegistry>().failure() {
            Some(e) => Err(RunError::Policy(e).into()),
            None => Ok(()),
        }
    };
    loop {
        app.update();
        failed(app)?;
        let rollouts = app.world().resource::<Rollouts>();
        if rollouts.complete(k, share.clone()) {
            // Arenas that ended at this very step value their last state at the next.
            if rollouts.missing_bootstrap(k) {
                app.update();
                failed(app)?;
            }
            return Ok(());
        }
        let p = app.world().resource::<RunProgress>();
        if p.idle_arenas as usize >= share.len() {
            return Err(TrainError::Config(format!(
                "every arena stopped before iteration {} was complete",
                k + 1
            )));
        }
    }
}

/// `--overlap`: each learner's trained weights copied into the network its policy decides
/// with; the first time, when the trainer has none yet, the other way round (the trainer
/// takes a copy of the network the policy built at its first decision).
fn sync_behaviour(learners: &[Learner]) -> Result<(), TrainError> {
    for l in learners {
        let (LearnerModel::Mlp(trained), Some(behaviour)) = (&l.model, &l.behaviour) else {
            continue;
        };
        match (trained.net(), behaviour.net()) {
            (Some(t), Some(b)) => {
                for ((_, bv), (_, tv)) in b.vars().iter().zip(t.vars()) {
                    bv.set(tv.as_tensor())?;
                }
            }
            (None, Some(b)) => trained.set(b.frozen_copy()?),
            _ => {}
        }
    }
    Ok(())
}

/// Refuses a fresh run's `--out` that holds anything but a lock left by a run killed
/// before it wrote its settings (see [`run_dir::is_fresh`]); says how to continue a run
/// that is there.
fn refuse_used_folder(out: &Path) -> Result<(), TrainError> {
    if run_dir::is_fresh(out)? {
        return Ok(());
    }
    let how = if out.join("config.json").is_file() {
        "continue the run in it with --resume (from its newest checkpoint, or from its start if \
         it has none)"
    } else {
        "it is not a run folder"
    };
    Err(RunFolderError::NotEmpty {
        path: out.to_path_buf(),
        how: how.to_string(),
    }
    .into())
}

/// The learners of checkpoint `dir` against every partner of `--eval-against`, as the row's
/// `eval` object. The arenas' seed depends on the run seed and the iteration only, so a
/// resumed run evaluates as the uninterrupted one did.
fn evaluate_iteration(
    cfg: &TrainConfig,
    scene: &Scene,
    dir: &Path,
    iteration: u32,
) -> Result<BTreeMap<String, f64>, TrainError> {
    let spec = eval::EvalSpec {
        scene: scene.clone(),
        model: dir.to_path_buf(),
        arenas: EVAL_ARENAS,
        episodes: 1,
        seed: cfg.seed ^ 0x6576_616c_0000_0000 ^ (u64::from(iteration) << 16),
        threads: cfg.threads,
        device: cfg.device.clone(),
    };
    let mut out = BTreeMap::new();
    for partner in &cfg.eval_against {
        let r = eval::evaluate(&spec, partner)?;
        let label = eval::label(partner);
        out.insert(format!("{label}.return"), r.model_return);
        out.insert(format!("{label}.return_per_step"), r.model_return_per_step);
        if let Some(p) = r.partner_return {
            out.insert(format!("{label}.partner_return"), p);
        }
        for (k, v) in r.strategy {
            out.insert(format!("{label}.{k}"), v);
        }
    }
    Ok(out)
}

fn policy_stats(app: &bevy::app::App, name: &str) -> crate::policy::PolicyStats {
    app.world()
        .resource::<PolicyRegistry>()
        .stats()
        .into_iter()
        .find(|(n, _)| n == name)
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

/// One batch per model (by the slot's model); with `sum_rewards` (CORY) every step's reward
/// is replaced by the sum of the learning agents' rewards in that arena at that step.
fn split_batch(
    batch: Batch,
    model_of_slot: &[Option<usize>],
    models: usize,
    sum_rewards: bool,
) -> Vec<Batch> {
    let summed = batch.shared_rewards();
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
