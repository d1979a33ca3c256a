//! Runs an experiment: every arm × seed as an ordinary training run under
//! `OUT/runs/ARM/seed_S/` (the same folder `emergence train` writes), several at once
//! within the thread budget, then each run's final checkpoint against every partner
//! (`final_eval.json` beside it). Run again on the same `OUT`, it keeps the runs that
//! finished, resumes a half-finished one from its newest checkpoint (as `train --resume`
//! does), and refuses a folder that holds another experiment or another budget
//! (`plan.json` records what the folder is for). `OUT/.lock` keeps two invocations apart.
//!
//! Under `mpirun -np N` ([`Options::ranks`]) rank 0 prepares the folder and holds its lock;
//! each rank then trains and evaluates its share of the runs ([`Ranks::mine`]: every N-th,
//! so each rank gets runs of every arm), the ranks' results are gathered, and rank 0 writes
//! the wall time and the report. The runs are the one-process runs (each is an ordinary
//! one-process training run with its own seed), so the report is the same; the folder must
//! be on a filesystem every rank sees (always so on one machine; checked).
//!
//! Over 600 lines: the folder's life (lock, plan, keep, resume, refuse another experiment's
//! folder) and the runs' schedule within the thread budget are one sequence whose order a
//! resumed invocation depends on; the report and the figures are their own modules.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::{Experiment, arm_settings};
use crate::train::dist::Ranks;
use crate::train::run_dir::{RunLock, write_atomic};
use crate::train::{
    TrainConfig, TrainError, TrainSettings, eval, newest_checkpoint, resume_config, train,
};

/// The budget of an invocation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Budget {
    /// The experiment's settings.
    Full,
    /// `--quick`: its quick settings laid over them.
    Quick,
    /// `--iterations N` over the full or quick budget: a smoke test, not a result.
    Custom {
        /// Whether the quick settings are laid over the full ones first.
        quick: bool,
        /// Iterations of every run.
        iterations: u32,
    },
}

impl Budget {
    /// How the report names it.
    pub fn describe(&self) -> String {
        match self {
            Budget::Full => "full".into(),
            Budget::Quick => "quick (--quick: a smaller budget than the paper's claim needs; \
                              a verdict at this budget is indicative only)"
                .into(),
            Budget::Custom { quick, iterations } => format!(
                "custom ({}--iterations {iterations}: a smoke test of the pipeline, not a \
                 result)",
                if *quick { "--quick " } else { "" }
            ),
        }
    }
}

/// How to run an experiment.
#[derive(Debug, Clone)]
pub struct Options {
    /// The report folder.
    pub out: PathBuf,
    /// Use this many seeds: the file's first ones, then the numbers after its last.
    pub seeds: Option<usize>,
    /// The quick budget.
    pub quick: bool,
    /// Every run's iterations (a smoke test).
    pub iterations: Option<u32>,
    /// Threads for the whole experiment; runs go side by side, one thread each (at most
    /// this many at once).
    pub threads: usize,
    /// Stop every run after this many iterations as if the invocation had been killed
    /// (tests of resuming; see [`TrainConfig::stop_after`]).
    pub stop_after: Option<u32>,
    /// The ranks of a job under mpirun, which share the runs; one process by default.
    pub ranks: Ranks,
    /// Where the runs' language models train and play (`--device`); the CPU by default.
    pub device: candle_core::Device,
}

/// One run of the plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedRun {
    /// The arm.
    pub arm: String,
    /// The seed.
    pub seed: u64,
    /// The run folder, relative to the report folder.
    pub dir: PathBuf,
    /// The scene copy, relative to the report folder.
    pub scene: PathBuf,
    /// The settings it trains with (seed included; defaults filled in when it starts).
    pub settings: TrainSettings,
    /// Whether its final checkpoint is evaluated against the partners.
    pub evaluated: bool,
    /// The clone it starts from (the arm's `clone:`, its episodes for this budget), made in
    /// [`PlannedRun::clone_dir`] before it trains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clone: Option<super::CloneSpec>,
}

impl PlannedRun {
    /// Where its clone is made, relative to the report folder: `clones/ARM/seed_S`.
    pub fn clone_dir(&self) -> PathBuf {
        Path::new("clones")
            .join(&self.arm)
            .join(format!("seed_{}", self.seed))
    }
}

/// What a report folder is for: `OUT/plan.json`. It holds what the runs depend on (the
/// scenes, each run's settings, the partners, the evaluations, the maps), not the claim,
/// the measures, the expected checks or the figures: editing those and running again
/// recomputes the report from the runs that are there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The experiment's name.
    pub experiment: String,
    /// Each arm's scene text, by arm.
    pub scenes: BTreeMap<String, String>,
    /// How the runs are evaluated.
    pub eval: super::EvalSettings,
    /// The maps played after training.
    pub maps: Option<super::MapsSpec>,
    /// The budget.
    pub budget: Budget,
    /// The seeds.
    pub seeds: Vec<u64>,
    /// The partners (checked keys).
    pub partners: Vec<String>,
    /// Every run.
    pub runs: Vec<PlannedRun>,
}

/// The plan of `exp` under `opts`.
pub fn plan(exp: &Experiment, opts: &Options) -> Plan {
    let mut seeds = exp.spec.seeds.clone();
    if let Some(n) = opts.seeds {
        let mut next = seeds.iter().max().copied().unwrap_or(0);
        while seeds.len() < n {
            next += 1;
            if !seeds.contains(&next) {
                seeds.push(next);
            }
        }
        seeds.truncate(n.max(1));
    }
    let budget = match (opts.quick, opts.iterations) {
        (quick, Some(iterations)) => Budget::Custom { quick, iterations },
        (true, None) => Budget::Quick,
        (false, None) => Budget::Full,
    };
    let mut runs = Vec::new();
    for (i, arm) in exp.spec.arms.iter().enumerate() {
        let mut s = arm_settings(&exp.spec, arm, &exp.scenes[i].scene, opts.quick);
        if let Some(n) = opts.iterations {
            s.iterations = Some(n);
        }
        for &seed in &seeds {
            runs.push(PlannedRun {
                arm: arm.name.clone(),
                seed,
                dir: Path::new("runs")
                    .join(&arm.name)
                    .join(format!("seed_{seed}")),
                scene: Path::new("scenes").join(format!("{}.scene.ron", arm.name)),
                settings: TrainSettings {
                    seed: Some(seed),
                    ..s.clone()
                },
                evaluated: !arm.skip_eval && !exp.partners.is_empty(),
                clone: arm
                    .clone
                    .as_ref()
                    .map(|c| c.for_budget(opts.quick, opts.iterations)),
            });
        }
    }
    Plan {
        experiment: exp.name.clone(),
        scenes: exp
            .spec
            .arms
            .iter()
            .zip(&exp.scenes)
            .map(|(a, s)| (a.name.clone(), s.text.clone()))
            .collect(),
        eval: exp.spec.eval.clone(),
        maps: exp.spec.maps.clone(),
        budget,
        seeds,
        partners: exp.partners.clone(),
        runs,
    }
}

/// Something that happened, for a progress display.
#[derive(Debug, Clone)]
pub enum Event {
    /// A run starts; `done` of its `iterations` were done before (a resumed run).
    Started {
        /// Its index in the plan.
        run: usize,
        /// Iterations already done.
        done: u32,
        /// Its iterations.
        iterations: u32,
    },
    /// A run finished an iteration.
    Iteration {
        /// Its index in the plan.
        run: usize,
        /// The iteration, from 1.
        iteration: u32,
    },
    /// A run's clone is being made (before it trains).
    Cloning {
        /// Its index in the plan.
        run: usize,
    },
    /// A run is evaluated against its partners.
    Evaluating {
        /// Its index in the plan.
        run: usize,
    },
    /// A run is done (this time, or kept from an earlier invocation).
    Finished {
        /// Its index in the plan.
        run: usize,
        /// Kept as it was.
        kept: bool,
    },
}

/// The final evaluation of a run: `final_eval.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinalEval {
    /// The checkpoint's iteration.
    pub iteration: u32,
    /// Per partner label, its values (see [`super::EVAL_VALUES`]).
    pub partners: BTreeMap<String, BTreeMap<String, f64>>,
    /// Arenas per partner.
    pub arenas: u32,
    /// Seconds the evaluation took.
    pub seconds: f64,
}

/// A run's maps at one checkpoint (`maps.json` holds `early` and `late`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMaps {
    /// The checkpoint's iteration.
    pub iteration: u32,
    /// What its model did.
    pub maps: eval::PlayedMaps,
}

/// The name of a run's maps file.
pub const MAPS: &str = "maps.json";

/// A run's `maps.json`.
pub fn read_maps(dir: &Path) -> Result<BTreeMap<String, RunMaps>, String> {
    read_json(&dir.join(MAPS))
}

/// The name of a run's final evaluation file.
pub const FINAL_EVAL: &str = "final_eval.json";

/// What went wrong running an experiment.
#[derive(Debug, thiserror::Error)]
pub enum ReproduceError {
    /// The report folder cannot be used.
    #[error("{0}")]
    Folder(String),
    /// Runs failed (the others finished and are kept).
    #[error("{} of {total} runs failed (the others are kept; run the same command again to \
             resume):\n{}", .failed.len(), .failed.join("\n"))]
    Runs {
        /// `arm seed S: error` per failed run.
        failed: Vec<String>,
        /// Runs planned.
        total: usize,
    },
    /// Training or evaluation machinery.
    #[error(transparent)]
    Train(#[from] TrainError),
}

/// What [`run`] did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The plan.
    pub plan: Plan,
    /// Runs kept from an earlier invocation.
    pub kept: usize,
    /// Runs resumed from a checkpoint.
    pub resumed: usize,
    /// Runs stopped early by [`Options::stop_after`] (the report is not written).
    pub stopped: usize,
    /// Wall seconds of this invocation.
    pub seconds: f64,
    /// Wall seconds of every invocation that ran something, this one included.
    pub wall_seconds: f64,
    /// How many invocations those were.
    pub invocations: usize,
}

/// The wall seconds of each invocation that ran something: `OUT/wall.json`.
pub const WALL: &str = "wall.json";

/// Runs every arm × seed of `exp` into `opts.out` (see the module's docs).
pub fn run(
    exp: &Experiment,
    opts: &Options,
    on_event: &(dyn Fn(Event) + Sync),
) -> Result<Outcome, ReproduceError> {
    let start = Instant::now();
    let plan = plan(exp, opts);
    let out = &opts.out;
    let ranks = &opts.ranks;
    // Rank 0 alone locks and prepares the folder (a failure there ends the job).
    let _lock = if ranks.is_root() {
        refuse_foreign_folder(out)?;
        let lock = RunLock::acquire(out)?;
        prepare_folder(out, &plan)?;
        // The scene copies the runs train on (and the rerun commands name).
        for (i, arm) in exp.spec.arms.iter().enumerate() {
            let p = out.join("scenes").join(format!("{}.scene.ron", arm.name));
            if std::fs::read_to_string(&p).ok().as_deref() != Some(&exp.scenes[i].text) {
                std::fs::create_dir_all(out.join("scenes")).map_err(|e| folder_err(out, e))?;
                write_atomic(&p, exp.scenes[i].text.as_bytes())?;
            }
        }
        Some(lock)
    } else {
        None
    };
    if ranks.parallel() {
        // The other ranks start once the folder is ready, and must see it.
        ranks.all_gather(()).map_err(ReproduceError::Folder)?;
        if !out.join("plan.json").is_file() {
            return Err(folder_err(
                out,
                format!(
                    "rank {} does not see the folder rank 0 prepared; under mpirun --out must \
                     be on a filesystem every rank shares",
                    ranks.rank()
                ),
            ));
        }
    }
    let pending = ranks.mine(plan.runs.len());
    let jobs = opts.threads.max(1).min(pending.len().max(1));
    let per_run = (opts.threads.max(1) / jobs).max(1);
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<RunDone, String>>>> =
        Mutex::new(vec![None; plan.runs.len()]);
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&i) = pending.get(k) else { break };
                    let r = run_one(exp, &plan, i, opts, per_run, on_event);
                    let r = r.map_err(|e| {
                        format!("{} seed {}: {e:#}", plan.runs[i].arm, plan.runs[i].seed)
                    });
                    if let Ok(mut g) = results.lock() {
                        g[i] = Some(r);
                    }
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_default();
    if ranks.parallel() {
        // Every rank's results, so that every rank returns the same outcome.
        let mine: Vec<(usize, Result<RunDone, String>)> = results
            .iter()
            .enumerate()
            .filter_map(|(i, r)| Some((i, r.clone()?)))
            .collect();
        for (i, r) in ranks
            .all_gather(mine)
            .map_err(ReproduceError::Folder)?
            .into_iter()
            .flatten()
        {
            if let Some(slot) = results.get_mut(i) {
                *slot = Some(r);
            }
        }
    }
    let mut failed = Vec::new();
    let (mut kept, mut resumed, mut stopped) = (0, 0, 0);
    for r in results.into_iter().flatten() {
        match r {
            Ok(RunDone::Stopped) => stopped += 1,
            Ok(RunDone::Kept) => kept += 1,
            Ok(RunDone::Resumed) => resumed += 1,
            Ok(RunDone::Fresh) => {}
            Err(e) => failed.push(e),
        }
    }
    // Wall time, summed over the invocations that ran something (a resumed experiment's
    // cost is all of them).
    let seconds = start.elapsed().as_secs_f64();
    let wfile = out.join(WALL);
    let mut walls: Vec<f64> = std::fs::read_to_string(&wfile)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    if kept < plan.runs.len() && ranks.is_root() {
        walls.push(seconds);
        let json = serde_json::to_string(&walls).map_err(|e| folder_err(&wfile, e))?;
        write_atomic(&wfile, json.as_bytes())?;
    }
    if !failed.is_empty() {
        return Err(ReproduceError::Runs {
            failed,
            total: plan.runs.len(),
        });
    }
    Ok(Outcome {
        plan,
        kept,
        resumed,
        stopped,
        seconds,
        wall_seconds: walls.iter().sum(),
        invocations: walls.len(),
    })
}

fn folder_err(out: &Path, e: impl std::fmt::Display) -> ReproduceError {
    ReproduceError::Folder(format!("{}: {e}", out.display()))
}

/// Refuses an `out` that exists, is not empty and is not an experiment's folder.
fn refuse_foreign_folder(out: &Path) -> Result<(), ReproduceError> {
    if out.join("plan.json").is_file() || !out.exists() {
        return Ok(());
    }
    let empty = std::fs::read_dir(out)
        .map_err(|e| folder_err(out, e))?
        .flatten()
        .all(|e| e.file_name() == ".lock");
    if empty {
        Ok(())
    } else {
        Err(ReproduceError::Folder(format!(
            "{}: the folder exists, is not empty and holds no plan.json; choose another \
             --out (nothing was touched)",
            out.display()
        )))
    }
}

/// Checks that the locked `out` holds this plan, or writes it.
fn prepare_folder(out: &Path, plan: &Plan) -> Result<(), ReproduceError> {
    let pfile = out.join("plan.json");
    if pfile.is_file() {
        let old: Plan = read_json(&pfile).map_err(|e| {
            ReproduceError::Folder(format!(
                "{e}; expected the plan `emergence reproduce` wrote (nothing was touched)"
            ))
        })?;
        if old != *plan {
            let what = if old.experiment != plan.experiment {
                format!("experiment {:?}", old.experiment)
            } else if old.budget != plan.budget {
                format!("the {} budget", old.budget.describe())
            } else if old.seeds != plan.seeds {
                format!("seeds {:?}", old.seeds)
            } else if old.runs.len() != plan.runs.len()
                || old.runs.iter().zip(&plan.runs).any(|(a, b)| a.arm != b.arm)
            {
                "other arms".to_string()
            } else if old.scenes != plan.scenes {
                "runs of other scenes".to_string()
            } else {
                "runs with other settings, partners, evaluations or maps".to_string()
            };
            return Err(ReproduceError::Folder(format!(
                "{}: the folder holds {what}, not this one; choose another --out, or give the \
                 same experiment, budget and seeds to resume it (nothing was touched)",
                out.display()
            )));
        }
        return Ok(());
    }
    let json = serde_json::to_string_pretty(plan).map_err(|e| folder_err(&pfile, e))?;
    write_atomic(&pfile, json.as_bytes())?;
    Ok(())
}

#[derive(Clone, Serialize, Deserialize)]
enum RunDone {
    Stopped,
    Kept,
    Resumed,
    Fresh,
}

/// Trains (or resumes) run `i` and evaluates its final checkpoint.
fn run_one(
    exp: &Experiment,
    plan: &Plan,
    i: usize,
    opts: &Options,
    threads: usize,
    on_event: &(dyn Fn(Event) + Sync),
) -> Result<RunDone, anyhow::Error> {
    let (out, stop_after, device) = (&opts.out, opts.stop_after, &opts.device);
    let r = &plan.runs[i];
    let dir = out.join(&r.dir);
    let iterations = r.settings.iterations.unwrap_or(20);
    if read_final_eval(&dir).is_ok() {
        on_event(Event::Started {
            run: i,
            done: iterations,
            iterations,
        });
        on_event(Event::Finished { run: i, kept: true });
        return Ok(RunDone::Kept);
    }
    let arm = exp
        .spec
        .arms
        .iter()
        .position(|a| a.name == r.arm)
        .unwrap_or(0);
    let scene_path = out.join(&r.scene);
    let scene = crate::load::load_scene(&scene_path)?;
    let resumed = dir.join("config.json").is_file();
    let done = if resumed {
        newest_checkpoint(&dir)?.map_or(0, |(k, _)| k)
    } else {
        0
    };
    on_event(Event::Started {
        run: i,
        done,
        iterations,
    });
    if done < iterations {
        let mut cfg = if resumed {
            resume_config(&dir, None)?
        } else {
            let mut settings = r.settings.clone();
            if let Some(c) = &r.clone {
                on_event(Event::Cloning { run: i });
                let model = make_clone(
                    &scene,
                    &scene_path,
                    r,
                    c,
                    &out.join(r.clone_dir()),
                    opts,
                    threads,
                )?;
                settings.model = Some(model.display().to_string());
            }
            let mut cfg =
                TrainConfig::from_settings(scene.clone(), scene_path, &settings, dir.clone())
                    .map_err(|e| anyhow::anyhow!("model {e}"))?;
            if r.evaluated {
                cfg.eval_against = plan.partners.clone();
                cfg.eval_every = exp.spec.eval.every;
            }
            cfg
        };
        cfg.threads = Some(threads);
        cfg.stop_after = stop_after;
        cfg.device = device.clone();
        train(&cfg, |rep| {
            on_event(Event::Iteration {
                run: i,
                iteration: rep.iteration,
            })
        })?;
        if newest_checkpoint(&dir)?.is_none_or(|(k, _)| k < iterations) {
            return Ok(RunDone::Stopped);
        }
    }
    on_event(Event::Evaluating { run: i });
    let (k, ckpt) = newest_checkpoint(&dir)?
        .ok_or_else(|| anyhow::anyhow!("{}: no checkpoint after training", dir.display()))?;
    let t = Instant::now();
    // The arm's scene as its runs played it: its text style and memory (the model reads the
    // text it was trained on).
    let mut played = exp.scenes[arm].scene.clone();
    if let Some(text) = r.settings.text {
        played.spec.text = text;
    }
    if let Some(memory) = r.settings.memory {
        played.spec.memory = memory;
    }
    let mut partners = BTreeMap::new();
    if r.evaluated {
        let spec = eval::EvalSpec {
            scene: played.clone(),
            model: ckpt,
            arenas: exp.spec.eval.arenas,
            episodes: 1,
            // Seeds neither training nor its evaluations use.
            seed: r.seed ^ 0x6669_6e61_6c00_0000,
            threads: Some(threads),
            device: device.clone(),
        };
        for p in &plan.partners {
            let res = eval::evaluate(&spec, p)?;
            let mut v = BTreeMap::new();
            v.insert("return".to_string(), res.model_return);
            v.insert("return_per_step".to_string(), res.model_return_per_step);
            if let Some(x) = res.partner_return {
                v.insert("partner_return".to_string(), x);
            }
            v.extend(res.strategy);
            // The family's episode metrics, as `metrics.NAME` (hide-and-seek's transfer
            // tests read `metrics.hider_success`).
            v.extend(
                res.metrics
                    .into_iter()
                    .map(|(k, x)| (format!("metrics.{k}"), x)),
            );
            partners.insert(eval::label(p), v);
        }
    }
    if let Some(m) = &exp.spec.maps {
        let whole = crate::train::whole_checkpoints(&dir)?;
        let mut maps = BTreeMap::new();
        let first = whole.first().cloned();
        for (label, c) in [("early", first), ("late", whole.last().cloned())] {
            let Some((iteration, model)) = c else {
                continue;
            };
            let spec = eval::EvalSpec {
                scene: played.clone(),
                model,
                arenas: m.arenas,
                episodes: 1,
                seed: r.seed ^ 0x6d61_7073_0000_0000,
                threads: Some(threads),
                device: device.clone(),
            };
            maps.insert(
                label.to_string(),
                RunMaps {
                    iteration,
                    maps: eval::play_maps(&spec, &m.steps)?,
                },
            );
        }
        let json = serde_json::to_string(&maps)?;
        write_atomic(&dir.join(MAPS), json.as_bytes())?;
    }
    let fe = FinalEval {
        iteration: k,
        partners,
        arenas: exp.spec.eval.arenas,
        seconds: t.elapsed().as_secs_f64(),
    };
    let json = serde_json::to_string_pretty(&fe)?;
    write_atomic(&dir.join(FINAL_EVAL), json.as_bytes())?;
    on_event(Event::Finished {
        run: i,
        kept: false,
    });
    Ok(if resumed {
        RunDone::Resumed
    } else {
        RunDone::Fresh
    })
}

/// Makes run `r`'s clone in `cdir` (`emergence imitate` of its scene from `c.from`, with the
/// run's seed, learner, model, text and memory; no fresh episodes played: the run's first
/// iterations measure the clone) and returns its model folder. A finished clone
/// (`imitation.json` written) is kept; a folder a killed invocation left half made is made
/// again.
fn make_clone(
    scene: &crate::scene::Scene,
    scene_path: &Path,
    r: &PlannedRun,
    c: &super::CloneSpec,
    cdir: &Path,
    opts: &Options,
    threads: usize,
) -> Result<PathBuf, anyhow::Error> {
    let model = cdir.join("model");
    if cdir.join("imitation.json").is_file() && model.is_dir() {
        return Ok(model);
    }
    if cdir.exists() {
        std::fs::remove_dir_all(cdir)
            .map_err(|e| anyhow::anyhow!("{}: {e} (a half-made clone)", cdir.display()))?;
    }
    if let Some(parent) = cdir.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| anyhow::anyhow!("{}: {e}", parent.display()))?;
    }
    let given = TrainSettings {
        seed: Some(r.seed),
        model: r.settings.model.clone(),
        text: r.settings.text,
        memory: r.settings.memory,
        lr: c.lr,
        ..Default::default()
    };
    let mut cfg = crate::train::imitate::ImitateConfig::new(
        scene.clone(),
        scene_path.to_path_buf(),
        &c.from,
        r.settings.learner.unwrap_or_default(),
        cdir.to_path_buf(),
        &given,
    )
    .map_err(|e| anyhow::anyhow!("clone: {e}"))?;
    cfg.episodes = c.episodes;
    cfg.epochs = c.epochs;
    cfg.dagger = c.dagger;
    cfg.words = c.words;
    cfg.play_episodes = 0;
    cfg.train.threads = Some(threads);
    cfg.train.device = opts.device.clone();
    crate::train::imitate::imitate(&cfg, |_| {}).map_err(|e| anyhow::anyhow!("clone: {e}"))?;
    Ok(model)
}

/// A run's `final_eval.json`.
pub fn read_final_eval(dir: &Path) -> Result<FinalEval, String> {
    read_json(&dir.join(FINAL_EVAL))
}

/// A JSON file this module wrote; errors name the file (and the line and column).
fn read_json<T: serde::de::DeserializeOwned>(p: &Path) -> Result<T, String> {
    let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
    serde_json::from_str(&text)
        .map_err(|e| format!("{}:{}:{}: {e}", p.display(), e.line(), e.column()))
}
