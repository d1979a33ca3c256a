//! The headless runner: builds an [`App`] with [`SimPlugins`], spawns the
//! arenas of a scene and steps until every arena has run its episodes.

use bevy::app::{App, First, Last, PostUpdate, PreUpdate, TaskPoolOptions, Update};
use bevy::ecs::schedule::{ScheduleLabel, SingleThreadedExecutor};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use thiserror::Error;

use crate::core::{Arenas, EpisodeClock, RunProgress, StateHash};
use crate::envs::SpawnError;
use crate::frames::Recorder;
use crate::metrics::{EpisodeLog, MetricsWriter, peak_memory_bytes};
use crate::policy::PolicyRegistry;
use crate::policy::spawn_arenas;
use crate::scene::Scene;
use crate::sim::SimPlugins;

/// What to run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The scene.
    pub scene: Scene,
    /// Number of arenas.
    pub arenas: u32,
    /// The first arena's index: the arenas are `first_arena..first_arena + arenas`, seeded
    /// by their index (0 but for one rank's share of a data-parallel training run).
    pub first_arena: u32,
    /// Episodes per arena.
    pub episodes: u32,
    /// Run seed.
    pub seed: u64,
    /// Worker threads for Bevy's task pools (`None`: one per core).
    pub threads: Option<usize>,
    /// `--metrics`: one JSON line per finished episode per arena.
    pub metrics: Option<PathBuf>,
    /// `--record`: replay file.
    pub record: Option<PathBuf>,
    /// Arenas to record.
    pub record_arenas: Vec<u32>,
    /// Keep the state hash of every step.
    pub hash_steps: bool,
    /// Policies registered under these names before the arenas spawn (replacing any of the
    /// same name), in order: a language model from `--model` or on another device, a model a
    /// trainer updates (`LmPolicy::factory`, `LmPolicy::for_command`), a partner. The runner
    /// knows no policy by name.
    pub policies: Vec<(String, crate::policy::PolicyFactory)>,
    /// Consecutive arenas that share environment streams ([`crate::core::Arenas::group_size`]).
    pub group_size: u32,
    /// The episode index arenas start at (a resumed training run starts where it stopped;
    /// `episodes` still counts from 0).
    pub first_episode: u32,
    /// Where the language models the scene names (`lm`, `lm:PATH`) run: the CPU unless a
    /// command's `--device` says otherwise. The simulation is always on the CPU.
    pub device: candle_core::Device,
}

impl RunConfig {
    /// A run of `scene` with defaults: 1 arena, 1 episode, seed 0.
    pub fn new(scene: Scene) -> Self {
        Self {
            scene,
            arenas: 1,
            first_arena: 0,
            episodes: 1,
            seed: 0,
            threads: None,
            metrics: None,
            record: None,
            record_arenas: vec![0],
            hash_steps: false,
            policies: Vec::new(),
            group_size: 1,
            first_episode: 0,
            device: candle_core::Device::Cpu,
        }
    }
}

/// What went wrong in a run.
#[derive(Debug, Error)]
pub enum RunError {
    /// A bad argument.
    #[error("{0}")]
    Config(String),
    /// The scene could not be spawned.
    #[error("cannot spawn the scene")]
    Spawn(#[from] SpawnError),
    /// A policy could not decide ([`crate::policy::Policy::failure`]); the run stopped.
    #[error("{0}; the run stopped")]
    Policy(String),
    /// An output file could not be written.
    #[error("{path}: {io}")]
    Output {
        /// The file.
        path: PathBuf,
        /// The error.
        io: std::io::Error,
    },
}

/// `e` and every cause under it, joined by `: ` (what a user is shown of an error whose
/// `Display` leaves its causes out).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(cause) = src {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        src = cause.source();
    }
    s
}

/// The outcome of a run.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// Team names.
    pub teams: Vec<String>,
    /// Mean episode return per team (mean over that team's agents, then over episodes).
    pub team_returns: Vec<f64>,
    /// Mean of each metric over the episodes that report it.
    pub metrics: BTreeMap<String, f64>,
    /// Episodes finished.
    pub episodes: u64,
    /// Simulation steps.
    pub steps: u64,
    /// Agent-steps.
    pub agent_steps: u64,
    /// Wall time of the stepping loop.
    pub wall: Duration,
    /// Peak resident memory of the process.
    pub peak_memory: Option<u64>,
    /// Every step's state hash, when asked for.
    pub step_hashes: Vec<u64>,
    /// Counters of model-backed policies, by name.
    pub policies: Vec<(String, crate::policy::PolicyStats)>,
}

impl RunReport {
    /// Agent-steps per second.
    pub fn agent_steps_per_sec(&self) -> f64 {
        self.agent_steps as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// Builds the app of a run, arenas spawned, outputs opened; not yet stepped.
pub fn build_app(cfg: &RunConfig) -> Result<App, RunError> {
    build_app_with(cfg, |_| {})
}

/// [`build_app`], with `extend` adding plugins of the caller's (a training run's
/// `train::TrainPlugin`) once the policies are registered and the arenas spawned, before the
/// app is finished.
pub fn build_app_with(cfg: &RunConfig, extend: impl FnOnce(&mut App)) -> Result<App, RunError> {
    if cfg.arenas == 0 {
        return Err(RunError::Config("--arenas must be at least 1".into()));
    }
    if cfg.episodes == 0 {
        return Err(RunError::Config("--episodes must be at least 1".into()));
    }
    if cfg.first_episode >= cfg.episodes {
        return Err(RunError::Config(format!(
            "the run starts at episode {} but its budget is {} episodes",
            cfg.first_episode, cfg.episodes
        )));
    }
    if cfg.group_size == 0 || !cfg.arenas.is_multiple_of(cfg.group_size) {
        return Err(RunError::Config(format!(
            "--group-size {} must be at least 1 and divide --arenas {}",
            cfg.group_size, cfg.arenas
        )));
    }
    if let Some((_, &twice)) = cfg
        .record_arenas
        .iter()
        .enumerate()
        .find(|(i, a)| cfg.record_arenas[..*i].contains(a))
    {
        return Err(RunError::Config(format!(
            "--record-arenas names arena {twice} twice; name each arena once"
        )));
    }
    if let Some(&bad) = cfg.record_arenas.iter().find(|&&a| a >= cfg.arenas) {
        return Err(RunError::Config(format!(
            "--record-arenas names arena {bad}, but there are only {} (0 to {})",
            cfg.arenas,
            cfg.arenas - 1
        )));
    }
    let mut app = App::new();
    let pool = match cfg.threads {
        Some(n) => TaskPoolOptions::with_num_threads(n.max(1)),
        None => TaskPoolOptions::default(),
    };
    // The pools without `TaskPoolPlugin`: its only system ticks the main thread's local
    // executors 300 times a frame, for `spawn_local` tasks a headless app never makes (the
    // systems' `par_iter` scopes run their own tasks), which costs a one-arena step about a
    // fifth of its time (measured from Python's parallel env).
    pool.create_default_pools();
    app.add_plugins(SimPlugins);
    // Headless, the frame schedules hold a handful of cheap systems: running them on the
    // single-threaded executor saves thread wake-ups every step. Systems still spread their
    // own work over arenas on the task pool.
    for label in [
        First.intern(),
        PreUpdate.intern(),
        Update.intern(),
        PostUpdate.intern(),
        Last.intern(),
    ] {
        app.edit_schedule(label, |s| {
            s.set_executor(SingleThreadedExecutor::new());
        });
    }
    app.world_mut().resource_mut::<PolicyRegistry>().device = cfg.device.clone();
    for (name, make) in &cfg.policies {
        app.world_mut()
            .resource_mut::<PolicyRegistry>()
            .insert(name, (make.0)());
    }
    spawn_arenas(
        app.world_mut(),
        &cfg.scene,
        cfg.first_arena..cfg.first_arena.saturating_add(cfg.arenas),
        cfg.seed,
        Some(cfg.episodes),
    )?;
    {
        let world = app.world_mut();
        let mut arenas = world.resource_mut::<Arenas>();
        arenas.group_size = cfg.group_size;
        let entities = arenas.entities.clone();
        for e in entities {
            if let Some(mut clock) = world.get_mut::<EpisodeClock>(e) {
                clock.episode = cfg.first_episode;
            }
        }
    }
    if let Some(path) = &cfg.metrics {
        let w = MetricsWriter::create(
            path,
            cfg.scene
                .team_names()
                .iter()
                .map(|s| s.to_string())
                .collect(),
        )
        .map_err(|source| RunError::Output {
            path: path.clone(),
            io: source,
        })?;
        app.insert_resource(w);
    }
    if let Some(path) = &cfg.record {
        let rec =
            Recorder::create(path, cfg.record_arenas.clone(), app.world()).map_err(|source| {
                RunError::Output {
                    path: path.clone(),
                    io: source,
                }
            })?;
        app.insert_resource(rec);
    }
    if cfg.hash_steps {
        app.insert_resource(StateHash::with_history());
    } else if cfg.record.is_some() {
        // Replays carry every step's state hash.
        app.insert_resource(StateHash::default());
    }
    extend(&mut app);
    app.finish();
    app.cleanup();
    Ok(app)
}

/// Runs `cfg` to the end; `on_progress` is called after every step.
pub fn run(
    cfg: &RunConfig,
    mut on_progress: impl FnMut(&RunProgress),
) -> Result<RunReport, RunError> {
    let mut app = build_app(cfg)?;
    let start = Instant::now();
    loop {
        app.update();
        if let Some(e) = app.world().resource::<PolicyRegistry>().failure() {
            return Err(RunError::Policy(e));
        }
        let progress = *app.world().resource::<RunProgress>();
        on_progress(&progress);
        if progress.idle_arenas >= cfg.arenas {
            break;
        }
    }
    let wall = start.elapsed();
    let world = app.world_mut();
    if let Some(mut w) = world.get_resource_mut::<MetricsWriter>() {
        let path = w.path().to_path_buf();
        let flushed = w.flush();
        if let Some(source) = w.error.take().map(Err).unwrap_or(flushed).err() {
            return Err(RunError::Output { path, io: source });
        }
    }
    if let Some(mut rec) = world.get_resource_mut::<Recorder>()
        && let Err(source) = rec.flush()
    {
        return Err(RunError::Output {
            path: cfg.record.clone().unwrap_or_default(),
            io: source,
        });
    }
    let progress = *world.resource::<RunProgress>();
    let log = world.resource::<EpisodeLog>();
    let teams: Vec<String> = cfg
        .scene
        .team_names()
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut team_returns = log.team_means();
    team_returns.resize(teams.len(), 0.0);
    let metrics = log.metric_means();
    let step_hashes = world
        .get_resource::<StateHash>()
        .map(|h| h.history.clone())
        .unwrap_or_default();
    let policies = world.resource::<PolicyRegistry>().stats();
    Ok(RunReport {
        policies,
        teams,
        team_returns,
        metrics,
        episodes: progress.episodes,
        steps: progress.steps,
        agent_steps: progress.agent_steps,
        wall,
        peak_memory: peak_memory_bytes(),
        step_hashes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envs::family;
    use std::path::Path;

    const SCENE: &str = r#"(
    name: "payday",
    family: Payday(wage: 2.0),
    map: ["SSE"],
    legend: {'S': Spawn, 'E': Exit},
    teams: [(name: "workers", count: 2, policy: "random")],
    episode: (max_steps: 10),
)"#;

    /// A shipped family is its folder and its `mod` line: `envs/payday/` (built in tests
    /// only) is read, checked, run and tokenized with nothing registered and nothing else in
    /// the crate naming it.
    #[test]
    fn a_family_in_its_own_folder_is_read_run_and_tokenized_with_nothing_else_naming_it() {
        let name = crate::envs::payday::NAME;
        assert!(family::shipped().iter().any(|f| f.name() == name));
        assert!(
            family::registered().is_empty()
                || !family::registered().iter().any(|f| f.name() == name)
        );
        assert!(crate::scene::family::family_names().contains(&name));

        let path = Path::new("payday.scene.ron");
        let scene = crate::load::parse_scene(SCENE, path).expect("a Payday scene");
        assert_eq!(family::of(&scene).name(), name);
        // Its own parameter, its range and its legend thing, each refused where it stands.
        let typo = crate::load::parse_scene(&SCENE.replace("wage: 2.0", "wages: 2.0"), path);
        let typo = typo.expect_err("a misspelt parameter").to_string();
        assert!(typo.starts_with("payday.scene.ron:3:20"), "{typo}");
        assert!(typo.contains("`wage`"), "{typo}");
        let range = crate::load::parse_scene(&SCENE.replace("wage: 2.0", "wage: -1.0"), path);
        let range = range.expect_err("a wage out of range").to_string();
        assert!(
            range.starts_with("payday.scene.ron:3:26") && range.contains("0 to 100"),
            "{range}"
        );
        let legend = crate::load::parse_scene(&SCENE.replace("'E': Exit", "'E': Box"), path);
        let legend = legend
            .expect_err("a legend thing of another family")
            .to_string();
        assert!(legend.contains("Floor, Wall, Exit, Spawn"), "{legend}");

        // Its systems come with every app: random workers work half of their 10 steps.
        let mut cfg = RunConfig::new(scene.clone());
        cfg.arenas = 8;
        cfg.episodes = 4;
        let report = run(&cfg, |_| {}).expect("a run");
        assert!(
            (report.team_returns[0] - 10.0).abs() < 3.0,
            "{:?}",
            report.team_returns
        );

        // Its words are in every default tokenizer.
        let words = crate::policy::lm::tokenizer::default_vocabulary(&[]);
        assert!(words.iter().any(|w| w == "payslip"));
    }
}
