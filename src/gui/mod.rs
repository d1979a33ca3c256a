//! The visual debugger (feature `gui`): a Bevy window on one arena with bevy_egui panels.
//!
//! Three feeds give it [`Frame`]s, and it draws them all the same way:
//! - **live**: the scene's arenas run in a world built by the headless runner
//!   ([`build_app`](crate::headless::build_app)), stepped by this window at the speed the controls set, with the same
//!   [`SimSchedule`](crate::core::SimSchedule); so a seed gives the same trajectory here as
//!   headless (`--hash-log` writes the same hashes). The scene file is watched: an edit
//!   reloads it and restarts the arenas; a broken edit shows its `path:line:col` error and
//!   the last good scene keeps running.
//! - **replay**: a file written by `--record`, scrubbed with the timeline.
//! - **tap**: a training run on another thread pushes arena 0's frames (`train --gui`).
//!
//! The map is drawn with Bevy sprites and gizmos (`draw.rs`); controls, the agent inspector,
//! curves and the timeline are egui panels (`panels.rs`). `--screenshot FILE --frames N` steps
//! once per frame for N frames, saves a PNG of the window and exits.
//!
//! Over 600 lines: the window's state machine (live arenas, replays, the training tap,
//! reloads, seeds, pacing) around one `Viewer` resource; drawing, panels, input and the live
//! simulation are in their own files.

mod draw;
mod input;
mod live;
mod panels;

use live::LiveSim;
pub use live::{ManualControl, apply_manual_control};

use bevy::app::AppExit;
use bevy::prelude::*;
use bevy::render::view::screenshot::{Screenshot, ScreenshotCaptured};
use bevy::window::WindowResolution;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use crate::core::StateHash;
use crate::envs::action_names;
use crate::frames::Recorder;
use crate::frames::{Frame, FrameTap, Replay};
use crate::headless::RunConfig;
use crate::scene::Scene;

/// What a window shows.
pub enum ViewSource {
    /// Live arenas of a scene.
    Live {
        /// The run (its `episodes` is raised so the arenas never run out).
        cfg: RunConfig,
        /// Reload the scene when this file changes (`None`: no watching).
        watch: Option<SceneWatch>,
    },
    /// A recorded replay.
    Replay(Replay),
    /// Frames pushed by a run on another thread (`train --gui`).
    Tap {
        /// The feed.
        tap: FrameTap,
        /// The scene the run plays.
        scene: Scene,
        /// Set by the run when it has finished.
        done: Arc<AtomicBool>,
    },
}

/// A watched scene file: when it changes, it is loaded again and `prepare` applies the
/// command line's overrides (policy, episode length) before the arenas restart.
pub struct SceneWatch {
    /// The file.
    pub path: PathBuf,
    /// Applies the command line's overrides; an error is shown like a scene error.
    pub prepare: Box<dyn Fn(Scene) -> Result<Scene, String> + Send + Sync>,
}

/// How the window runs.
pub struct ViewConfig {
    /// What it shows.
    pub source: ViewSource,
    /// Window size in pixels.
    pub window: [u32; 2],
    /// Save a PNG of the window after `frames` frames, then exit.
    pub screenshot: Option<PathBuf>,
    /// Frames to render before the screenshot (or before exiting); the simulation steps once
    /// per frame in this mode, whatever the speed.
    pub frames: Option<u32>,
    /// Simulation steps (or replay frames) per second.
    pub speed: f32,
    /// The agent (slot) selected at the start.
    pub select: Option<u16>,
    /// The arena shown at the start.
    pub arena: u32,
    /// Write every step's state hash here (live arenas), like `emergence run --hash-log`.
    pub hash_log: Option<PathBuf>,
    /// A training run folder whose `metrics.jsonl` is drawn as training curves.
    pub run_dir: Option<PathBuf>,
}

/// What can stop the window.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// The scene or run could not be set up.
    #[error("{0}")]
    Setup(String),
    /// An output file could not be written.
    #[error("{path}: {io}")]
    Output {
        /// The file.
        path: PathBuf,
        /// The error.
        io: std::io::Error,
    },
    /// The window ended with an error (for example the screenshot never arrived).
    #[error("the window stopped: {0}")]
    Window(String),
}

/// The names a window shows: scene, family, teams, roles, action words.
#[derive(Debug, Clone, Default)]
pub struct SceneInfo {
    /// Scene name.
    pub name: String,
    /// Family ([`FamilySpec::name`](crate::scene::FamilySpec::name)).
    pub family: String,
    /// Team names.
    pub teams: Vec<String>,
    /// Role names.
    pub roles: Vec<String>,
    /// Action words.
    pub actions: Vec<String>,
}

impl SceneInfo {
    /// The names of `scene`.
    pub fn of(scene: &Scene) -> Self {
        Self {
            name: scene.spec.name.clone(),
            family: scene.spec.family.name().to_string(),
            teams: scene.team_names().iter().map(|s| s.to_string()).collect(),
            roles: scene.roles.clone(),
            actions: action_names(scene),
        }
    }
}

#[expect(
    clippy::large_enum_variant,
    reason = "one per window, never moved in a loop: its size does not matter"
)]
enum Feed {
    Live {
        sim: Box<LiveSim>,
        cfg: RunConfig,
        watch: Option<(SceneWatch, Option<SystemTime>)>,
    },
    Replay(Replay),
    Tap {
        tap: FrameTap,
        done: Arc<AtomicBool>,
        seen: (u32, usize),
    },
}

/// A finished episode of the viewed arena, for the curves.
#[derive(Debug, Clone)]
struct EpisodeSummary {
    episode: u32,
    team_returns: Vec<f32>,
    metrics: BTreeMap<String, f64>,
}

/// Everything the window's systems share.
#[derive(Resource)]
pub(crate) struct Viewer {
    feed: Feed,
    info: SceneInfo,
    /// Frames of the viewed arena: the current episode (live, tap) or the whole replay.
    frames: Vec<Frame>,
    /// The frame shown.
    cursor: usize,
    /// The cursor follows the newest frame.
    follow: bool,
    paused: bool,
    speed: f32,
    budget: f32,
    step_requests: u32,
    selected: Option<u16>,
    control: bool,
    manual: Option<u8>,
    refused: bool,
    arena: u32,
    /// The arenas that can be shown (a replay holds only the recorded ones).
    arena_list: Vec<u32>,
    seed: u64,
    seed_edit: u64,
    reload_error: Option<String>,
    message: Option<String>,
    episodes: Vec<EpisodeSummary>,
    training: Vec<(String, Vec<[f64; 2]>)>,
    /// (screenshot path, frames) of a screenshot run.
    shot: Option<(Option<PathBuf>, u32)>,
    shot_taken: bool,
    pub(crate) frames_drawn: u32,
    /// `train --gui`: the last frame found no new step (the arenas wait for an update).
    tap_quiet: bool,
    hash_log: Option<(PathBuf, std::io::BufWriter<std::fs::File>)>,
    error: Arc<std::sync::Mutex<Option<String>>>,
    last_watch: f32,
    /// A run folder whose training curves are shown (re-read while a run writes them).
    run_dir: Option<PathBuf>,
}

impl Viewer {
    /// The frame on screen.
    pub(crate) fn shown(&self) -> Option<&Frame> {
        self.frames.get(self.cursor).or(self.frames.last())
    }

    fn push(&mut self, frame: Frame) {
        if let Some(last) = self.frames.last()
            && (last.episode != frame.episode || last.step >= frame.step)
        {
            if let Some(f) = self.frames.iter().rev().find(|f| f.step > 0) {
                self.episodes.push(EpisodeSummary {
                    episode: f.episode,
                    team_returns: f.team_returns(self.info.teams.len()),
                    metrics: f.metrics.clone(),
                });
            }
            self.frames.clear();
        }
        self.frames.push(frame);
        if self.follow {
            self.cursor = self.frames.len() - 1;
        }
    }

    /// Rebuilds the live arenas (restart, new seed, reloaded scene).
    fn restart(&mut self, scene: Option<Scene>) {
        let Feed::Live { sim, cfg, .. } = &mut self.feed else {
            return;
        };
        let mut next = cfg.clone();
        next.seed = self.seed_edit;
        if let Some(s) = scene {
            next.scene = s;
        }
        // A replay or hash log holds one run: they end at a restart, flushed.
        let mut closed = Vec::new();
        if let Some(path) = next.record.take() {
            if let Err(e) = sim.flush() {
                *self.error.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(format!("{}: {e}", path.display()));
            }
            sim.world.remove_resource::<Recorder>();
            closed.push(path);
        }
        if let Some((path, mut f)) = self.hash_log.take() {
            if let Err(e) = f.flush() {
                *self.error.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(format!("{}: {e}", path.display()));
            }
            closed.push(path);
        }
        if !closed.is_empty() {
            let names: Vec<String> = closed.iter().map(|p| p.display().to_string()).collect();
            self.message = Some(format!(
                "recording stopped at the restart: {} hold the run before it",
                names.join(" and ")
            ));
        }
        match LiveSim::build(&next) {
            Ok(s) => {
                **sim = s;
                *cfg = next;
                self.seed = self.seed_edit;
                self.info = SceneInfo::of(&cfg.scene);
                self.frames.clear();
                self.episodes.clear();
                self.cursor = 0;
                self.follow = true;
                self.reload_error = None;
                if let Some(f) = sim.frame(self.arena) {
                    self.frames.push(f);
                }
            }
            Err(e) => self.reload_error = Some(e),
        }
    }

    /// Shows arena `a` from now on.
    fn pick_arena(&mut self, a: u32) {
        if a == self.arena || !self.arena_list.contains(&a) {
            return;
        }
        self.arena = a;
        self.frames.clear();
        self.episodes.clear();
        self.cursor = 0;
        self.follow = true;
        match &self.feed {
            Feed::Live { sim, .. } => {
                if let Some(f) = sim.frame(a) {
                    self.frames.push(f);
                }
            }
            Feed::Replay(r) => {
                self.frames = r.arena_frames(a).into_iter().cloned().collect();
                self.episodes = replay_episodes(&self.frames, self.info.teams.len());
                self.follow = false;
            }
            Feed::Tap { .. } => {}
        }
    }
}

/// Opens the window and runs until it is closed (or the screenshot is saved).
pub fn run_view(cfg: ViewConfig) -> Result<(), ViewError> {
    if cfg!(target_os = "linux")
        && std::env::var_os("DISPLAY").is_none()
        && std::env::var_os("WAYLAND_DISPLAY").is_none()
    {
        return Err(ViewError::Setup(
            "no display: DISPLAY is not set (on a machine without one, run under \
             `xvfb-run -a -s \"-screen 0 1920x1080x24\"`)"
                .into(),
        ));
    }
    let error = Arc::new(std::sync::Mutex::new(None));
    let mut viewer = Viewer {
        feed: Feed::Tap {
            tap: FrameTap::default(),
            done: Arc::new(AtomicBool::new(false)),
            seen: (0, 0),
        },
        info: SceneInfo::default(),
        frames: Vec::new(),
        cursor: 0,
        follow: true,
        paused: false,
        speed: cfg.speed.max(0.1),
        budget: 0.0,
        step_requests: 0,
        selected: cfg.select,
        control: false,
        manual: None,
        refused: false,
        arena: cfg.arena,
        arena_list: vec![cfg.arena],
        seed: 0,
        seed_edit: 0,
        reload_error: None,
        message: None,
        episodes: Vec::new(),
        training: Vec::new(),
        shot: cfg.frames.map(|n| (cfg.screenshot.clone(), n.max(1))),
        shot_taken: false,
        frames_drawn: 0,
        tap_quiet: false,
        hash_log: None,
        error: error.clone(),
        last_watch: 0.0,
        run_dir: cfg.run_dir.clone(),
    };
    if cfg.screenshot.is_some() && cfg.frames.is_none() {
        viewer.shot = Some((cfg.screenshot.clone(), 30));
    }
    if let Some(path) = &cfg.hash_log {
        let f = std::fs::File::create(path).map_err(|io| ViewError::Output {
            path: path.clone(),
            io,
        })?;
        viewer.hash_log = Some((path.clone(), std::io::BufWriter::new(f)));
    }
    if let Some(dir) = &cfg.run_dir
        && dir.join("metrics.jsonl").is_file()
    {
        viewer.training = training_curves(dir).map_err(ViewError::Setup)?;
    }
    match cfg.source {
        ViewSource::Live { mut cfg, watch } => {
            cfg.episodes = cfg.episodes.max(1_000_000);
            cfg.hash_steps = viewer.hash_log.is_some();
            if viewer.arena >= cfg.arenas {
                return Err(ViewError::Setup(format!(
                    "--arena {} does not exist: there are {} arenas (0 to {})",
                    viewer.arena,
                    cfg.arenas,
                    cfg.arenas - 1
                )));
            }
            let sim = LiveSim::build(&cfg).map_err(ViewError::Setup)?;
            viewer.info = SceneInfo::of(&cfg.scene);
            viewer.arena_list = (0..cfg.arenas).collect();
            viewer.seed = cfg.seed;
            viewer.seed_edit = cfg.seed;
            if let Some(f) = sim.frame(viewer.arena) {
                viewer.frames.push(f);
            }
            let watch = watch.map(|w| {
                let t = modified(&w.path);
                (w, t)
            });
            viewer.feed = Feed::Live {
                sim: Box::new(sim),
                cfg,
                watch,
            };
        }
        ViewSource::Replay(replay) => {
            let h = &replay.header;
            viewer.info = SceneInfo {
                name: h.name.clone(),
                family: h.family.clone(),
                teams: h.teams.clone(),
                roles: h.roles.clone(),
                actions: h.actions.clone(),
            };
            viewer.arena_list = h.arenas.clone();
            viewer.seed = h.seed;
            if !h.arenas.contains(&viewer.arena) {
                viewer.arena = h.arenas.first().copied().unwrap_or(0);
            }
            viewer.frames = replay
                .arena_frames(viewer.arena)
                .into_iter()
                .cloned()
                .collect();
            if viewer.frames.is_empty() {
                return Err(ViewError::Setup(format!(
                    "{}: the replay holds no step of arena {}",
                    replay.path.display(),
                    viewer.arena
                )));
            }
            viewer.episodes = replay_episodes(&viewer.frames, viewer.info.teams.len());
            viewer.follow = false;
            viewer.feed = Feed::Replay(replay);
        }
        ViewSource::Tap { tap, scene, done } => {
            viewer.info = SceneInfo::of(&scene);
            viewer.feed = Feed::Tap {
                tap,
                done,
                seen: (u32::MAX, 0),
            };
        }
    }
    let screenshot_run = viewer.shot.is_some();
    let mut app = App::new();
    let render = bevy::render::RenderPlugin {
        synchronous_pipeline_compilation: true,
        ..default()
    };
    app.add_plugins(
        DefaultPlugins
            .set(WindowPlugin {
                primary_window: Some(Window {
                    title: format!("emergence · {}", viewer.info.name),
                    resolution: WindowResolution::new(cfg.window[0], cfg.window[1])
                        .with_scale_factor_override(1.0),
                    present_mode: bevy::window::PresentMode::AutoNoVsync,
                    ..default()
                }),
                ..default()
            })
            .set(render)
            // Ctrl-C ends the process as usual (a training run behind the window too).
            .disable::<bevy::app::TerminalCtrlCHandlerPlugin>()
            .set(bevy::log::LogPlugin {
                level: bevy::log::Level::WARN,
                filter: "wgpu=error,naga=warn,bevy_render=error,bevy_egui=warn".into(),
                ..default()
            }),
    )
    .add_plugins(bevy_egui::EguiPlugin::default())
    .insert_resource(if screenshot_run {
        bevy::winit::WinitSettings::continuous()
    } else {
        let mode = bevy::winit::UpdateMode::reactive_low_power(Duration::from_millis(33));
        bevy::winit::WinitSettings {
            focused_mode: mode,
            unfocused_mode: mode,
        }
    })
    .insert_resource(ClearColor(Color::srgb_u8(12, 12, 16)))
    .insert_resource(viewer)
    .init_resource::<draw::SpritePool>()
    .add_systems(Startup, draw::spawn_camera)
    .add_systems(
        Update,
        (
            input::input,
            advance,
            watch_scene,
            draw::draw_board,
            screenshot_flow,
            pace_frames,
        )
            .chain(),
    )
    .add_systems(
        PreUpdate,
        drop_idle_modifier_events
            .after(bevy_egui::EguiPreUpdateSet::ProcessInput)
            .before(bevy_egui::EguiPreUpdateSet::BeginPass),
    )
    .add_systems(bevy_egui::EguiPrimaryContextPass, panels::panels);
    if screenshot_run {
        app.insert_resource(bevy::time::TimeUpdateStrategy::ManualDuration(
            Duration::from_secs_f64(1.0 / 30.0),
        ));
    }
    let opened = std::time::Instant::now();
    let exit = app.run();
    let open_for = opened.elapsed().as_secs_f64();
    // Flush what the live arenas wrote (replay, hash log).
    let world = app.world_mut();
    if let Some(mut v) = world.get_resource_mut::<Viewer>() {
        if let Some((path, f)) = v.hash_log.as_mut() {
            f.flush().map_err(|io| ViewError::Output {
                path: path.clone(),
                io,
            })?;
        }
        if let Feed::Live { sim, cfg, .. } = &mut v.feed {
            sim.flush().map_err(|io| ViewError::Output {
                path: cfg.record.clone().unwrap_or_default(),
                io,
            })?;
        }
    }
    if let Some(v) = app.world().get_resource::<Viewer>() {
        eprintln!(
            "window: {} frames in {open_for:.1} s ({:.1} frames/s)",
            v.frames_drawn,
            f64::from(v.frames_drawn) / open_for.max(1e-9)
        );
    }
    if let Some(e) = error.lock().unwrap_or_else(|e| e.into_inner()).take() {
        return Err(ViewError::Window(e));
    }
    match exit {
        AppExit::Success => Ok(()),
        AppExit::Error(code) => Err(ViewError::Window(format!("exit code {code}"))),
    }
}

/// The finished episodes of a replay's frames (those with an ending frame).
fn replay_episodes(frames: &[Frame], teams: usize) -> Vec<EpisodeSummary> {
    frames
        .iter()
        .filter(|f| f.end)
        .map(|f| EpisodeSummary {
            episode: f.episode,
            team_returns: f.team_returns(teams),
            metrics: f.metrics.clone(),
        })
        .collect()
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Training curves of a run folder's `metrics.jsonl` (the series `emergence plot` draws):
/// each team's return, the entropy and the approximate KL, by iteration.
fn training_curves(dir: &Path) -> Result<Vec<(String, Vec<[f64; 2]>)>, String> {
    use crate::metrics::plot::{flat, read_rows, team_returns};
    let rows = read_rows(&dir.join("metrics.jsonl")).map_err(|e| e.to_string())?;
    let pairs = |pts: Vec<(f64, f64)>| pts.into_iter().map(|(x, y)| [x, y]).collect();
    let mut curves: Vec<(String, Vec<[f64; 2]>)> = team_returns(&rows)
        .into_iter()
        .map(|(team, pts)| (format!("return {team}"), pairs(pts)))
        .collect();
    for key in ["entropy", "approx_kl"] {
        curves.push((key.to_string(), pairs(flat(&rows, key))));
    }
    Ok(curves)
}

/// Advances the feed: steps the live arenas (or the replay cursor) as the controls say, and
/// takes new frames from a training run.
fn advance(time: Res<Time<bevy::time::Real>>, mut viewer: ResMut<Viewer>, mut commands: Commands) {
    let v = &mut *viewer;
    let steps = if let Some((_, n)) = v.shot {
        u32::from(v.frames_drawn < n)
    } else if v.control && v.selected.is_some() {
        u32::from(v.manual.is_some())
    } else if v.paused {
        std::mem::take(&mut v.step_requests)
    } else {
        v.budget += time.delta_secs() * v.speed;
        let n = v.budget.floor().min(64.0);
        v.budget -= n;
        v.budget = v.budget.min(4.0);
        n as u32 + std::mem::take(&mut v.step_requests)
    };
    match &mut v.feed {
        Feed::Live { sim, .. } => {
            if steps > 0 {
                let control = v
                    .control
                    .then_some(v.selected)
                    .flatten()
                    .map(|s| (v.arena, s));
                {
                    let mut m = sim.world.resource_mut::<ManualControl>();
                    m.agent = control;
                    m.action = if control.is_some() {
                        v.manual.take()
                    } else {
                        None
                    };
                }
                let mut new = Vec::with_capacity(steps as usize);
                for _ in 0..steps {
                    sim.step();
                    if let Some((path, f)) = v.hash_log.as_mut() {
                        let h = sim.world.get_resource::<StateHash>().map_or(0, |h| h.last);
                        if let Err(io) = writeln!(f, "{h:016x}") {
                            *v.error.lock().unwrap_or_else(|e| e.into_inner()) =
                                Some(format!("{}: {io}", path.display()));
                        }
                    }
                    if let Some(f) = sim.frame(v.arena) {
                        new.push(f);
                    }
                    sim.world.resource_mut::<ManualControl>().action = None;
                }
                v.refused = sim.world.resource::<ManualControl>().refused;
                // Flushed every frame, so Ctrl-C or a crash loses nothing already shown.
                let flushed = sim
                    .flush()
                    .err()
                    .map(|e| format!("replay: {e}"))
                    .or_else(|| {
                        v.hash_log.as_mut().and_then(|(p, f)| {
                            f.flush().err().map(|e| format!("{}: {e}", p.display()))
                        })
                    });
                if let Some(e) = flushed {
                    *v.error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                }
                // A policy that could not decide ends the view with its error.
                let failed = sim
                    .world
                    .resource::<crate::policy::PolicyRegistry>()
                    .failure();
                if let Some(e) = failed {
                    *v.error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                    commands.write_message(AppExit::error());
                }
                if !v.follow {
                    // Scrubbing back pauses the view, not the arenas' history.
                    v.follow = true;
                }
                for f in new {
                    v.push(f);
                }
            }
        }
        Feed::Replay(_) => {
            if steps > 0 && !v.frames.is_empty() {
                v.cursor = (v.cursor + steps as usize).min(v.frames.len() - 1);
                if v.cursor + 1 == v.frames.len() && v.shot.is_none() {
                    v.paused = true;
                }
            }
        }
        Feed::Tap { tap, done, seen } => {
            let feed = tap.lock();
            let fresh: Vec<Frame> = if feed.episode != seen.0 || feed.frames.len() < seen.1 {
                feed.frames.clone()
            } else {
                feed.frames[seen.1..].to_vec()
            };
            *seen = (feed.episode, feed.frames.len());
            drop(feed);
            if done.load(Ordering::Relaxed) {
                v.message = Some("training finished".into());
            }
            v.tap_quiet = fresh.is_empty();
            for f in fresh {
                v.push(f);
            }
        }
    }
}

/// Hot reload: checks the scene file twice a second; a change reloads the scene and
/// restarts the arenas, a broken file keeps the last good scene running and shows why.
fn watch_scene(time: Res<Time<bevy::time::Real>>, mut viewer: ResMut<Viewer>) {
    let now = time.elapsed_secs();
    if now - viewer.last_watch < 0.5 {
        return;
    }
    viewer.last_watch = now;
    // A training run behind the window: its curves grow with every iteration.
    if matches!(viewer.feed, Feed::Tap { .. })
        && let Some(dir) = viewer.run_dir.clone()
        && let Ok(curves) = training_curves(&dir)
    {
        viewer.training = curves;
    }
    let Feed::Live {
        watch: Some((w, last)),
        ..
    } = &mut viewer.feed
    else {
        return;
    };
    let t = modified(&w.path);
    if t == *last {
        return;
    }
    *last = t;
    let loaded = crate::load::load_scene(&w.path)
        .map_err(|e| e.to_string())
        .and_then(|s| (w.prepare)(s));
    let path = w.path.display().to_string();
    match loaded {
        Ok(scene) => {
            viewer.restart(Some(scene));
            match &viewer.reload_error {
                None => {
                    eprintln!("scene reloaded: {path}");
                    viewer.message = Some(format!("scene reloaded: {path}"));
                }
                Some(e) => eprintln!("scene error (the last good scene keeps running): {e}"),
            }
        }
        Err(e) => {
            eprintln!("scene error (the last good scene keeps running): {e}");
            viewer.reload_error = Some(e);
        }
    }
}

/// Asks winit to draw only as often as there is something new: software rendering (lavapipe)
/// costs about 0.1 core-seconds a frame at 1280x800, taken from the arenas and from training.
/// Live and replay views wait at most one step's time (between 33 and 250 ms), `train --gui`
/// 200 ms while the arenas step and a second while they wait for an update; input on the window wakes it at once (raw device events do not: low-power
/// reactive mode). Screenshot runs draw continuously, one step per frame. For this to hold,
/// egui must not ask for a frame every frame: see [`drop_idle_modifier_events`].
fn pace_frames(viewer: Res<Viewer>, mut winit: ResMut<bevy::winit::WinitSettings>) {
    if viewer.shot.is_some() {
        *winit = bevy::winit::WinitSettings::continuous();
        return;
    }
    let ms = match viewer.feed {
        // While the arenas wait for an update there is nothing new to draw.
        Feed::Tap { .. } if viewer.tap_quiet => 1000,
        Feed::Tap { .. } => 200,
        _ if viewer.paused => 250,
        _ => ((1000.0 / viewer.speed.max(0.1)) as u64).clamp(33, 250),
    };
    let mode = bevy::winit::UpdateMode::reactive_low_power(Duration::from_millis(ms));
    if winit.focused_mode != mode {
        winit.focused_mode = mode;
        winit.unfocused_mode = mode;
    }
}

/// bevy_egui 0.42 adds a `ModifiersChanged` event to egui's input every frame, changed or
/// not. egui asks for an immediate repaint whenever its input holds any event, and bevy_egui
/// passes that on to winit (a wake-up and a `RequestRedraw`), so the window would redraw
/// continuously whatever [`pace_frames`] asks: about 18 frames a second under software
/// rendering, half of a two-core machine. egui keeps the modifier state between frames, so
/// only a change needs to reach it.
fn drop_idle_modifier_events(
    mut inputs: Query<&mut bevy_egui::EguiInput>,
    mut last: Local<Option<bevy_egui::egui::Modifiers>>,
) {
    for mut input in &mut inputs {
        input.0.events.retain(|e| match e {
            bevy_egui::egui::Event::ModifiersChanged(m) => {
                let changed = *last != Some(*m);
                *last = Some(*m);
                changed
            }
            _ => true,
        });
    }
}

/// `--frames N [--screenshot FILE]`: after N frames, saves the window as a PNG and exits.
fn screenshot_flow(mut commands: Commands, mut viewer: ResMut<Viewer>) {
    viewer.frames_drawn = viewer.frames_drawn.saturating_add(1);
    let Some((path, n)) = viewer.shot.clone() else {
        return;
    };
    // Two frames after the last step, so the last frame's sprites are drawn.
    if viewer.frames_drawn < n + 2 || viewer.shot_taken {
        if viewer.frames_drawn > n + 600 {
            *viewer.error.lock().unwrap_or_else(|e| e.into_inner()) =
                Some("the screenshot did not arrive within 600 frames".into());
            commands.write_message(AppExit::error());
        }
        return;
    }
    viewer.shot_taken = true;
    let Some(path) = path else {
        commands.write_message(AppExit::Success);
        return;
    };
    let error = viewer.error.clone();
    commands.spawn(Screenshot::primary_window()).observe(
        move |shot: On<ScreenshotCaptured>, mut commands: Commands| {
            let saved = shot
                .image
                .clone()
                .try_into_dynamic()
                .map_err(|e| e.to_string())
                .and_then(|img| img.to_rgb8().save(&path).map_err(|e| e.to_string()));
            if let Err(e) = saved {
                *error.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!(
                    "{}: cannot save the screenshot: {e}",
                    path.display()
                ));
            }
            commands.write_message(AppExit::Success);
        },
    );
}
