//! `emergence view`: watch an arena in a window, live or from a replay (the `gui` feature).

use anyhow::Result;
use std::path::PathBuf;

#[cfg(not(feature = "gui"))]
use super::NO_GUI;
#[cfg(feature = "gui")]
use super::{apply_overrides, check_outputs, model_source, parse_device};
#[cfg(feature = "gui")]
use emergence::{headless::RunConfig, load::load_scene};
#[cfg(feature = "gui")]
use std::path::Path;

#[derive(clap::Args)]
pub struct ViewArgs {
    /// The `.scene.ron` file (watched: an edit reloads it and restarts the arenas).
    #[arg(required_unless_present = "replay", conflicts_with = "replay")]
    pub scene: Option<PathBuf>,
    /// Play this replay (written by `run --record` or `view --record`) instead of a scene.
    #[arg(long)]
    pub replay: Option<PathBuf>,
    /// Let this policy decide for every team (e.g. `lm`), whatever the scene says.
    #[arg(long)]
    pub policy: Option<String>,
    /// The `lm` policy's model: `tiny` or `small` (embedded, weights from seed 0) or a model
    /// folder [default: tiny].
    #[arg(long, conflicts_with = "checkpoint")]
    pub model: Option<String>,
    /// A training checkpoint (`runs/NAME/checkpoints/iter_K`): its model plays the scene's
    /// `lm` teams, reading the text style and memory the run trained with (unless `--text`
    /// or `--memory` is given), and the run's training curves are drawn.
    #[arg(long)]
    pub checkpoint: Option<PathBuf>,
    /// Run seed: the same seed gives the same trajectories as `emergence run`.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Arenas run side by side (pick the one shown in the window).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub arenas: u32,
    /// The arena shown at the start.
    #[arg(long, default_value_t = 0)]
    pub arena: u32,
    /// The agent (slot) selected in the inspector at the start.
    #[arg(long)]
    pub agent: Option<u16>,
    /// Simulation steps per second.
    #[arg(long, default_value_t = 4.0)]
    pub speed: f32,
    /// Truncate episodes after this many steps.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub max_steps: Option<u32>,
    /// How language-model agents read their observations, overriding the scene's `text:`
    /// (`full` or `compact`); the inspector shows that text.
    #[arg(long, value_enum, hide_possible_values = true)]
    pub text: Option<emergence::scene::TextStyle>,
    /// How many past turns of its episode a language-model agent reads besides this step's
    /// observation, overriding the scene's `memory:` (0 to 64; docs/language-models.md).
    #[arg(long, value_parser = |s: &str| emergence::train::limits::parse_u32(s, emergence::train::limits::MEMORY))]
    pub memory: Option<u32>,
    /// Where language models run: `cpu`, or `cuda:N`.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Threads for all the run's compute: Bevy's task pools, and the model's kernels and
    /// matrix products (rayon's pool) [default: one per core]. Several runs with a share each
    /// can run side by side.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
    /// Record the shown arenas' steps to this replay file (a file that exists is refused
    /// unless --force).
    #[arg(long)]
    pub record: Option<PathBuf>,
    /// Write every step's state hash (hex, one per line), like `run --hash-log` (a file that
    /// exists is refused unless --force).
    #[arg(long)]
    pub hash_log: Option<PathBuf>,
    /// Save a PNG of the window after --frames frames and exit (a file that exists is
    /// refused unless --force).
    #[arg(long)]
    pub screenshot: Option<PathBuf>,
    /// Replace output files that exist (never an input: the scene, the replay, the model's
    /// files).
    #[arg(long)]
    pub force: bool,
    /// Render this many frames, stepping once per frame, then exit (or take the screenshot).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub frames: Option<u32>,
    /// Window width and height in pixels.
    #[arg(long, value_delimiter = 'x', default_value = "1280x800", num_args = 1)]
    pub size: Vec<u32>,
}

#[cfg(not(feature = "gui"))]
pub fn cmd_view(_args: ViewArgs) -> Result<()> {
    anyhow::bail!("{NO_GUI}")
}

#[cfg(feature = "gui")]
pub fn cmd_view(args: ViewArgs) -> Result<()> {
    use emergence::gui::{SceneWatch, ViewConfig, ViewSource, run_view};
    let [w, h] = args.size[..] else {
        anyhow::bail!(
            "--size {:?}: expected WIDTHxHEIGHT, e.g. 1280x800",
            args.size
        );
    };
    if !(320..=8192).contains(&w) || !(240..=8192).contains(&h) {
        anyhow::bail!("--size {w}x{h}: expected 320x240 to 8192x8192");
    }
    if !(args.speed.is_finite() && args.speed > 0.0) {
        anyhow::bail!(
            "--speed {}: expected a positive number of steps per second",
            args.speed
        );
    }
    let model = model_source(args.model.as_deref())?;
    let folder = model.as_ref().and_then(|(_, f)| f.clone());
    check_outputs(
        &[
            ("the scene", args.scene.as_ref()),
            ("--replay", args.replay.as_ref()),
            ("--model", folder.as_ref()),
            ("--checkpoint", args.checkpoint.as_ref()),
        ],
        &[
            ("--record", args.record.as_ref()),
            ("--hash-log", args.hash_log.as_ref()),
            ("--screenshot", args.screenshot.as_ref()),
        ],
        Some(args.force),
    )?;
    let mut run_dir = None;
    let source = if let Some(path) = &args.replay {
        ViewSource::Replay(emergence::frames::Replay::load(path)?)
    } else {
        let Some(path) = &args.scene else {
            anyhow::bail!("give a SCENE or --replay FILE");
        };
        let policy = args.policy.clone();
        // A checkpoint's run folder (runs/NAME from runs/NAME/checkpoints/iter_K, or from its
        // team_NAME/ subfolder): the curves are drawn, and its models read the text style
        // and memory they were trained with unless --text or --memory says otherwise.
        run_dir = args.checkpoint.as_ref().and_then(|c| {
            c.ancestors()
                .skip(2)
                .take(2)
                .find(|r| r.join("metrics.jsonl").is_file())
                .map(Path::to_path_buf)
        });
        let trained = run_dir
            .as_deref()
            .map(emergence::load::run_text)
            .unwrap_or_default();
        let text = (args.text.or(trained.0), args.memory.or(trained.1));
        let max_steps = args.max_steps;
        let scene = apply_overrides(load_scene(path)?, policy.as_deref(), max_steps, text)?;
        let model = match &args.checkpoint {
            Some(c) => {
                if !c.join("model.safetensors").is_file() {
                    anyhow::bail!(
                        "--checkpoint {}: expected a checkpoint folder holding model.safetensors \
                         (runs/NAME/checkpoints/iter_K; a run with separate models keeps one per \
                         team_NAME/ subfolder: give that one)",
                        c.display()
                    );
                }
                Some(emergence::policy::lm::ModelSource::Folder(c.clone()))
            }
            None => model.map(|(s, _)| s),
        };
        let device = parse_device(&args.device)?;
        let cfg = RunConfig {
            arenas: args.arenas,
            seed: args.seed,
            threads: args.threads.map(usize::from),
            record: args.record.clone(),
            record_arenas: vec![args.arena],
            policies: emergence::policy::lm::LmPolicy::for_command(model, device.clone())
                .into_iter()
                .collect(),
            device,
            ..RunConfig::new(scene)
        };
        ViewSource::Live {
            cfg,
            watch: Some(SceneWatch {
                path: path.clone(),
                prepare: Box::new(move |s| {
                    apply_overrides(s, policy.as_deref(), max_steps, text)
                        .map_err(|e| format!("{e:#}"))
                }),
            }),
        }
    };
    run_view(ViewConfig {
        source,
        window: [w, h],
        screenshot: args.screenshot.clone(),
        frames: args.frames,
        speed: args.speed,
        select: args.agent,
        arena: args.arena,
        hash_log: args.hash_log.clone(),
        run_dir,
    })?;
    if let Some(p) = &args.screenshot {
        println!("screenshot: {}", p.display());
    }
    Ok(())
}
