//! The `emergence` command line: run scenes headless, check scene files, list what ships.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use emergence::envs::action_names;
use emergence::headless::{RunConfig, RunReport, run};
use emergence::load::load_scene;
use emergence::policy::catalogue;
use emergence::scene::{FamilySpec, Scene, Thing, find_scenes};
use emergence::train::limits;

#[derive(Parser)]
#[command(
    name = "emergence",
    version,
    about = "Language-model agents in Bevy ECS multi-agent environments"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a scene headless: many arenas, many episodes, then a summary table.
    Run(RunArgs),
    /// Train the scene's `lm` agents with a multi-agent RL algorithm between episodes.
    Train(TrainArgs),
    /// Play a trained model (a run, a checkpoint or a model folder) against fixed partners
    /// without learning, and print its returns and, in matrix games, its strategy.
    Eval(EvalArgs),
    /// Redraw a training run's plots (RUN/plots/*.png) from its metrics.jsonl.
    Plot(PlotArgs),
    /// Watch an arena in a window (built with the `gui` feature): live, or a replay.
    View(ViewArgs),
    /// Run a named experiment (or an experiment file): train every arm on every seed,
    /// evaluate, and write a report that says whether the paper's result reproduced.
    Reproduce(ReproduceArgs),
    /// Validate a scene file (or an experiment file) and print a summary of it.
    Check {
        /// The `.scene.ron` (or `.experiment.ron`) file.
        scene: PathBuf,
    },
    /// Create or inspect language-model folders.
    #[command(subcommand)]
    Model(ModelCommand),
    /// List the shipped scenes, the families and the policies.
    List {
        /// Folder to look for scenes in.
        #[arg(long, default_value = "scenes")]
        scenes: PathBuf,
    },
}

#[derive(clap::Args)]
struct ReproduceArgs {
    /// A shipped experiment's name (see --list) or an `.experiment.ron` file.
    #[arg(required_unless_present = "list")]
    experiment: Option<String>,
    /// List the shipped experiments.
    #[arg(long)]
    list: bool,
    /// The report folder (runs, report.md, report.json, figures/); run again on the same
    /// folder to resume.
    #[arg(long, required_unless_present = "list")]
    out: Option<PathBuf>,
    /// Seeds: the file's first N, then the numbers after its last, 1 to 1,000.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1000))]
    seeds: Option<u16>,
    /// The smaller budget (about 10 minutes on two cores); the report says so.
    #[arg(long)]
    quick: bool,
    /// Every run's iterations: a smoke test of the pipeline, not a result, 1 to 1,000,000.
    #[arg(long, value_parser = |s: &str| emergence::train::limits::parse_u32(s, emergence::train::limits::ITERATIONS))]
    iterations: Option<u32>,
    /// Threads for the whole experiment: that many runs side by side, one thread each
    /// [default: one per core].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
    /// Where shipped experiments are looked for.
    #[arg(long, default_value = "experiments")]
    dir: PathBuf,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

#[derive(clap::Args)]
struct RunArgs {
    /// The `.scene.ron` file.
    scene: PathBuf,
    /// Number of arenas run side by side.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    arenas: u32,
    /// Episodes each arena runs.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    episodes: u32,
    /// Run seed: the same seed gives the same trajectories.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Threads for all the run's compute: Bevy's task pools, and the model's kernels and
    /// matrix products (rayon's pool) [default: one per core].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
    /// Write one JSON line per finished episode per arena to this file (a file that exists
    /// is refused unless --force).
    #[arg(long)]
    metrics: Option<PathBuf>,
    /// Write a replay of every step of the recorded arenas to this file (a file that exists
    /// is refused unless --force).
    #[arg(long)]
    record: Option<PathBuf>,
    /// Arenas to record, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    record_arenas: Vec<u32>,
    /// Write every step's state hash (hex, one per line) to this file (a file that exists is
    /// refused unless --force).
    #[arg(long)]
    hash_log: Option<PathBuf>,
    /// Replace output files that exist (never an input: the scene or the model's files).
    #[arg(long)]
    force: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Let this policy decide for every team (e.g. `lm`), whatever the scene says.
    #[arg(long)]
    policy: Option<String>,
    /// Model folder (config.json, model.safetensors, tokenizer.json) for the `lm` policy;
    /// without it, `lm` uses the embedded tiny model.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Where language models run: `cpu`, or `cuda:N` (built with the `cuda` feature).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Truncate episodes after this many steps, overriding the scene's
    /// `episode.max_steps` (a short look at a slow policy).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    max_steps: Option<u32>,
}

#[derive(clap::Args)]
struct ViewArgs {
    /// The `.scene.ron` file (watched: an edit reloads it and restarts the arenas).
    #[arg(required_unless_present = "replay", conflicts_with = "replay")]
    scene: Option<PathBuf>,
    /// Play this replay (written by `run --record` or `view --record`) instead of a scene.
    #[arg(long)]
    replay: Option<PathBuf>,
    /// Let this policy decide for every team (e.g. `lm`), whatever the scene says.
    #[arg(long)]
    policy: Option<String>,
    /// Model folder for the `lm` policy (the embedded tiny model otherwise).
    #[arg(long, conflicts_with = "checkpoint")]
    model: Option<PathBuf>,
    /// A training checkpoint (`runs/NAME/checkpoints/iter_K`): its model plays the scene's
    /// `lm` teams, and the run's training curves are drawn.
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// Run seed: the same seed gives the same trajectories as `emergence run`.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Arenas run side by side (pick the one shown in the window).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    arenas: u32,
    /// The arena shown at the start.
    #[arg(long, default_value_t = 0)]
    arena: u32,
    /// The agent (slot) selected in the inspector at the start.
    #[arg(long)]
    agent: Option<u16>,
    /// Simulation steps per second.
    #[arg(long, default_value_t = 4.0)]
    speed: f32,
    /// Truncate episodes after this many steps.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    max_steps: Option<u32>,
    /// Where language models run: `cpu`, or `cuda:N`.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Threads for all the run's compute: Bevy's task pools, and the model's kernels and
    /// matrix products (rayon's pool) [default: one per core]. Several runs with a share each
    /// can run side by side.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
    /// Record the shown arenas' steps to this replay file (a file that exists is refused
    /// unless --force).
    #[arg(long)]
    record: Option<PathBuf>,
    /// Write every step's state hash (hex, one per line), like `run --hash-log` (a file that
    /// exists is refused unless --force).
    #[arg(long)]
    hash_log: Option<PathBuf>,
    /// Save a PNG of the window after --frames frames and exit (a file that exists is
    /// refused unless --force).
    #[arg(long)]
    screenshot: Option<PathBuf>,
    /// Replace output files that exist (never an input: the scene, the replay, the model's
    /// files).
    #[arg(long)]
    force: bool,
    /// Render this many frames, stepping once per frame, then exit (or take the screenshot).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    frames: Option<u32>,
    /// Window width and height in pixels.
    #[arg(long, value_delimiter = 'x', default_value = "1280x800", num_args = 1)]
    size: Vec<u32>,
}

#[derive(clap::Args)]
struct PlotArgs {
    /// The run folder (`emergence train --out`).
    run: PathBuf,
}

use limits::parse_u32 as whole32;

#[derive(clap::Args)]
struct EvalArgs {
    /// A run folder (its newest whole checkpoint plays), a checkpoint
    /// (`RUN/checkpoints/iter_K`) or a model folder (a language model's, or an `mlp`'s with
    /// its mlp.json).
    model: PathBuf,
    /// The scene [default: a run's own scene copy]. Its teams on `lm` (on `mlp`, for an
    /// `mlp` model) are the model's seats (every team when none is).
    scene: Option<PathBuf>,
    /// Partners, comma-separated: policy names (`always_defect`, `tit_for_tat`, `random`,
    /// ...), `self`, `lm(model: "DIR")`, or `mlp:DIR` for a trained `mlp`.
    #[arg(long, value_parser = parse_partners, required = true)]
    against: Vec<Partners>,
    /// Arenas per partner (one episode each unless --episodes).
    #[arg(long, default_value_t = 64, value_parser = |s: &str| whole32(s, limits::ARENAS))]
    arenas: u32,
    /// Episodes per arena.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    episodes: u32,
    /// Seed of the evaluation's arenas.
    #[arg(long, default_value_t = 1_000_003)]
    seed: u64,
    /// Threads for all the run's compute: Bevy's task pools, and the model's kernels and
    /// matrix products (rayon's pool) [default: one per core]. Several runs with a share each
    /// can run side by side.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
    /// Also write the results as JSON to this file (a file that exists is refused unless
    /// --force).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Replace the --json file if it exists (never an input: the scene or the model's files).
    #[arg(long)]
    force: bool,
}

/// A comma-separated list of partners, checked.
#[derive(Debug, Clone)]
struct Partners(Vec<String>);

fn parse_partners(s: &str) -> Result<Partners, String> {
    emergence::train::eval::parse_partners(s).map(Partners)
}

fn cmd_eval(args: EvalArgs) -> Result<()> {
    use emergence::train::eval::{EvalSpec, evaluate};
    if !args.model.exists() {
        anyhow::bail!(
            "{}: not found; expected a run, a checkpoint or a model folder",
            args.model.display()
        );
    }
    let (model, scene_path) = if args.model.join("checkpoints").is_dir() {
        let (_, ckpt) = emergence::train::newest_checkpoint(&args.model)?.ok_or_else(|| {
            anyhow::anyhow!(
                "{}: the run holds no whole checkpoint to evaluate",
                args.model.display()
            )
        })?;
        let scene = args
            .scene
            .clone()
            .unwrap_or_else(|| args.model.join("scene.ron"));
        (ckpt, scene)
    } else {
        let scene = match &args.scene {
            Some(s) => s.clone(),
            None => {
                let run_scene = args.model.join("../../scene.ron");
                if !run_scene.is_file() {
                    anyhow::bail!(
                        "{}: give the SCENE to play (only a run folder or one of its checkpoints \
                         brings its own)",
                        args.model.display()
                    );
                }
                run_scene
            }
        };
        (args.model.clone(), scene)
    };
    if !model.is_dir() {
        anyhow::bail!(
            "{}: expected a run, a checkpoint or a model folder",
            model.display()
        );
    }
    check_outputs(
        &[
            ("the scene", Some(&scene_path)),
            ("the model", Some(&model)),
        ],
        &[("--json", args.json.as_ref())],
        Some(args.force),
    )?;
    let scene = if scene_path.file_name().is_some_and(|f| f == "scene.ron") {
        emergence::load::load_run_scene(&scene_path)?
    } else {
        load_scene(&scene_path)?
    };
    let spec = EvalSpec {
        scene,
        model: model.clone(),
        arenas: args.arenas,
        episodes: args.episodes,
        seed: args.seed,
        threads: args.threads.map(usize::from),
    };
    println!(
        "{} on {} ({} arenas x {} episodes per seat, seed {})",
        model.display(),
        scene_path.display(),
        args.arenas,
        args.episodes,
        args.seed
    );
    println!(
        "{:<24} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "partner", "return", "per step", "partner", "first C", "C|C", "C|D"
    );
    let mut results = Vec::new();
    for partner in args.against.iter().flat_map(|p| &p.0) {
        let r = evaluate(&spec, partner)?;
        let f = |k: &str| {
            r.strategy
                .get(k)
                .map_or("-".to_string(), |v| format!("{v:.3}"))
        };
        println!(
            "{:<24} {:>10.3} {:>10.3} {:>10} {:>10} {:>10} {:>10}",
            emergence::train::eval::label(partner),
            r.model_return,
            r.model_return_per_step,
            r.partner_return
                .map_or("-".to_string(), |p| format!("{p:.3}")),
            f("first_cooperation"),
            f("coop_after_coop"),
            f("coop_after_defect"),
        );
        results.push(r);
    }
    if let Some(j) = &args.json {
        let text = serde_json::to_string_pretty(&results)?;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(j)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .with_context(|| j.display().to_string())?;
    }
    Ok(())
}

#[derive(clap::Args)]
struct TrainArgs {
    /// The `.scene.ron` file. Teams on `lm` (on `mlp` with --learner mlp) learn (all teams
    /// when none is). Its `train:` block gives defaults that these flags override.
    #[arg(required_unless_present = "resume")]
    scene: Option<PathBuf>,
    /// The training settings (each also in the scene's `train:` block, which they override).
    #[command(flatten)]
    settings: emergence::train::TrainSettings,
    /// The run folder (must not exist or be empty): config, metrics, plots, checkpoints.
    #[arg(long, required_unless_present = "resume", conflicts_with = "resume")]
    out: Option<PathBuf>,
    /// Continue the run in this folder from its newest whole checkpoint, with its own
    /// settings and scene copy (only --iterations, --threads and --quiet may be given).
    #[arg(long, value_name = "RUN")]
    resume: Option<PathBuf>,
    /// Stop after this many iterations, as if interrupted (the learning-rate schedule stays
    /// that of --iterations); a checkpoint is written, and --resume continues the run.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    stop_after: Option<u32>,
    /// Every --eval-every iterations (and at the first and the last), the learning teams
    /// play these partners on fresh seeds without learning: comma-separated policy names
    /// (`always_defect`, `tit_for_tat`, `random`, ...), `self`, `lm(model: "DIR")` or
    /// `mlp:DIR`. The
    /// returns (and, in matrix games, the strategy) go into the metrics rows (`eval.*`) and
    /// plots/eval.png.
    #[arg(long, value_parser = parse_partners)]
    eval_against: Option<Partners>,
    /// Iterations between evaluations [default: 10].
    #[arg(long, value_parser = |s: &str| whole32(s, limits::CHECKPOINT_EVERY))]
    eval_every: Option<u32>,
    /// Threads for all the run's compute: Bevy's task pools, and the model's kernels and
    /// matrix products (rayon's pool) [default: one per core]. Several runs with a share each
    /// can run side by side.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Draw arena 0 live in a window while training (built with the `gui` feature).
    #[arg(long)]
    gui: bool,
    /// With --gui: save a PNG of the window after --frames frames and close it (training
    /// goes on); a file that exists is refused.
    #[arg(long, requires = "gui")]
    screenshot: Option<PathBuf>,
    /// With --gui: close the window after this many frames.
    #[arg(long, requires = "gui")]
    frames: Option<u32>,
}

#[derive(Subcommand)]
enum ModelCommand {
    /// Write a fresh, seeded model folder in the Hugging Face layout.
    Init {
        /// The folder to create (must not exist).
        #[arg(long)]
        out: PathBuf,
        /// Size: `tiny` (about 1M parameters) or `small` (about 38M).
        #[arg(long, default_value = "tiny")]
        preset: String,
        /// Weight seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Scenes whose words the tokenizer must cover (every `*.scene.ron` below).
        #[arg(long, default_value = "scenes")]
        scenes: PathBuf,
    },
    /// Load a model folder and print its shape.
    Info {
        /// The model folder.
        path: PathBuf,
    },
}

/// Tensors come and go every step; mimalloc keeps their pages for reuse where glibc hands
/// large blocks back to the kernel and pays a page fault per page the next step.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    emergence::alloc::keep_freed_memory();
    let cli = Cli::parse();
    let threads = match &cli.command {
        Command::Run(a) => a.threads,
        Command::Train(a) => a.threads,
        Command::Eval(a) => a.threads,
        Command::View(a) => a.threads,
        Command::Reproduce(a) => a.threads,
        _ => None,
    };
    // --threads bounds all the compute: Bevy's pools (through the run's settings) and rayon's
    // global pool, which the model's kernels and candle's gemm run on.
    if let Some(n) = threads
        && let Err(e) = rayon::ThreadPoolBuilder::new()
            .num_threads(usize::from(n))
            .build_global()
    {
        eprintln!("error: --threads {n}: {e}");
        return ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::Run(args) => cmd_run(args),
        Command::Train(args) => cmd_train(args),
        Command::Eval(args) => cmd_eval(args),
        Command::Plot(args) => cmd_plot(args),
        Command::View(args) => cmd_view(args),
        Command::Reproduce(args) => cmd_reproduce(args),
        Command::Check { scene } => cmd_check(&scene),
        Command::List { scenes } => cmd_list(&scenes),
        Command::Model(m) => cmd_model(m),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Refuses outputs that would write over an input, share a file, or replace an existing
/// file without `--force` ([`emergence::outputs::check`]); nothing is written on refusal.
fn check_outputs(
    inputs: &[(&str, Option<&PathBuf>)],
    outputs: &[(&str, Option<&PathBuf>)],
    force: Option<bool>,
) -> Result<()> {
    use emergence::outputs::{Named, check};
    let named = |list: &[(&str, Option<&PathBuf>)]| -> Vec<Named> {
        list.iter()
            .filter_map(|(w, p)| p.map(|p| Named::new(*w, p.clone())))
            .collect()
    };
    check(&named(inputs), &named(outputs), force).map_err(|e| anyhow::anyhow!(e))
}

fn cmd_run(args: RunArgs) -> Result<()> {
    let scene = apply_overrides(
        load_scene(&args.scene)?,
        args.policy.as_deref(),
        args.max_steps,
    )?;
    let device = parse_device(&args.device)?;
    check_outputs(
        &[
            ("the scene", Some(&args.scene)),
            ("--model", args.model.as_ref()),
        ],
        &[
            ("--metrics", args.metrics.as_ref()),
            ("--record", args.record.as_ref()),
            ("--hash-log", args.hash_log.as_ref()),
        ],
        Some(args.force),
    )?;
    let cfg = RunConfig {
        arenas: args.arenas,
        episodes: args.episodes,
        seed: args.seed,
        threads: args.threads.map(usize::from),
        metrics: args.metrics.clone(),
        record: args.record.clone(),
        record_arenas: args.record_arenas.clone(),
        hash_steps: args.hash_log.is_some(),
        model: args.model.clone(),
        device,
        ..RunConfig::new(scene)
    };
    let total = u64::from(cfg.arenas) * u64::from(cfg.episodes);
    let bar = progress_bar(
        args.quiet,
        total,
        "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} episodes  {msg}",
    );
    let started = std::time::Instant::now();
    let report = run(&cfg, |p| {
        if p.steps % 64 == 0 || p.episodes == total {
            bar.set_position(p.episodes);
            let secs = started.elapsed().as_secs_f64().max(1e-9);
            bar.set_message(format!(
                "{:.2}M agent-steps/s",
                p.agent_steps as f64 / secs / 1e6
            ));
        }
    })?;
    bar.finish_and_clear();
    if let Some(path) = &args.hash_log {
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("{}: cannot create the hash log", path.display()))?,
        );
        for h in &report.step_hashes {
            writeln!(f, "{h:016x}").with_context(|| format!("{}: cannot write", path.display()))?;
        }
        f.flush()
            .with_context(|| format!("{}: cannot write", path.display()))?;
    }
    print_report(&cfg, &report);
    Ok(())
}

fn print_report(cfg: &RunConfig, r: &RunReport) {
    println!(
        "{} — {} arenas × {} episodes, seed {}",
        cfg.scene.spec.name, cfg.arenas, cfg.episodes, cfg.seed
    );
    println!();
    println!("{:<28} {:>14}", "team", "mean return");
    for (t, v) in r.teams.iter().zip(&r.team_returns) {
        println!("{t:<28} {v:>14.3}");
    }
    println!();
    println!("{:<28} {:>14}", "metric (mean per episode)", "value");
    for (k, v) in &r.metrics {
        println!("{k:<28} {v:>14.4}");
    }
    println!();
    println!("{:<28} {:>14}", "episodes", r.episodes);
    println!("{:<28} {:>14}", "steps", r.steps);
    println!("{:<28} {:>14}", "agent-steps", r.agent_steps);
    println!("{:<28} {:>14.0}", "agent-steps/s", r.agent_steps_per_sec());
    for (name, p) in &r.policies {
        let secs = p.seconds.max(1e-9);
        println!(
            "{:<28} {:>14.0}",
            format!("{name} decisions/s"),
            p.decisions as f64 / secs
        );
        if p.tokens > 0 {
            println!(
                "{:<28} {:>14.0}",
                format!("{name} tokens/s"),
                p.tokens as f64 / secs
            );
        }
        println!(
            "{:<28} {:>14.3}",
            format!("{name} seconds deciding"),
            p.seconds
        );
        if p.errors > 0 {
            println!("{:<28} {:>14}", format!("{name} FAILED batches"), p.errors);
        }
    }
    println!("{:<28} {:>14.3}", "wall time (s)", r.wall.as_secs_f64());
    match r.peak_memory {
        Some(b) => println!(
            "{:<28} {:>14.1}",
            "peak memory (MiB)",
            b as f64 / (1024.0 * 1024.0)
        ),
        None => println!("{:<28} {:>14}", "peak memory (MiB)", "unknown"),
    }
    if let Some(p) = &cfg.metrics {
        println!("metrics written to {}", p.display());
    }
    if let Some(p) = &cfg.record {
        println!(
            "replay of arenas {:?} written to {}",
            cfg.record_arenas,
            p.display()
        );
    }
}

fn describe(scene: &Scene) -> String {
    let mut s = String::new();
    let spec = &scene.spec;
    s += &format!("scene     {}\n", spec.name);
    if !spec.description.is_empty() {
        s += &format!("about     {}\n", spec.description.trim());
    }
    s += &format!("family    {}\n", spec.family.name());
    if scene.width > 0 {
        s += &format!("map       {} × {}\n", scene.width, scene.height);
    }
    s += &format!("agents    {} per arena\n", scene.agent_count());
    s += &format!("episode   {} steps at most\n", spec.episode.max_steps);
    match &spec.family {
        FamilySpec::Matrix(m) => {
            s += &format!("game      {} rounds, payoffs {:?}\n", m.rounds, m.payoffs);
        }
        FamilySpec::HideAndSeek(h) => {
            let boxes = scene
                .cells
                .iter()
                .filter(|t| matches!(t, Thing::Box))
                .count();
            let ramps = scene
                .cells
                .iter()
                .filter(|t| matches!(t, Thing::Ramp))
                .count();
            s += &format!(
                "rules     preparation {} steps; vision {}° cone, range {}; {boxes} boxes, {ramps} ramps\n",
                (h.prep_fraction * spec.episode.max_steps as f32).floor(),
                h.vision_cone,
                h.vision_range
            );
        }
        FamilySpec::Maze(m) => {
            match &m.generate {
                Some(g) => {
                    s += &format!(
                        "maze      generated {}×{}, {} plate doors, {} key doors, {}\n",
                        g.width,
                        g.height,
                        g.plate_doors,
                        g.key_doors,
                        g.seed
                            .map_or("a new layout every episode".to_string(), |x| format!(
                                "layout seed {x}"
                            ))
                    );
                }
                None => s += "maze      fixed map\n",
            }
            s += &format!(
                "knowledge {:?}; window radius {}; vocabulary {}\n",
                m.knowledge,
                m.view,
                m.vocabulary.join(" ")
            );
        }
        _ => {}
    }
    s += &format!("actions   {}\n", action_names(scene).join(" "));
    s += "teams\n";
    for (i, t) in spec.teams.iter().enumerate() {
        let n = scene.agents.iter().filter(|a| a.team as usize == i).count();
        let role = t.role.as_deref().unwrap_or(&t.name);
        s += &format!(
            "  {:<16} {:>3} agents  role {:<14} policy {}\n",
            t.name,
            n,
            role,
            t.policy.key()
        );
    }
    s
}

/// A progress bar of `len` steps drawn with `template` (hidden with --quiet).
fn progress_bar(quiet: bool, len: u64, template: &str) -> ProgressBar {
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(len)
    };
    bar.set_style(
        ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

fn cmd_reproduce(args: ReproduceArgs) -> Result<()> {
    use emergence::experiment::{self, runner};
    if args.list {
        let found = experiment::find(&args.dir);
        if found.is_empty() {
            println!("no experiments in {}", args.dir.display());
        }
        for p in found {
            match experiment::load(&p) {
                Ok(e) => {
                    let arms: Vec<&str> = e.spec.arms.iter().map(|a| a.name.as_str()).collect();
                    println!("{}", e.name);
                    println!("    {}", e.spec.claim);
                    println!("    source: {}", e.spec.source);
                    println!(
                        "    arms: {}; seeds: {}; file: {}",
                        arms.join(", "),
                        e.spec.seeds.len(),
                        p.display()
                    );
                }
                Err(err) => println!("{}\n    error: {err}", experiment::name_of(&p)),
            }
        }
        return Ok(());
    }
    let (Some(given), Some(out)) = (&args.experiment, &args.out) else {
        anyhow::bail!("give an experiment and --out, or --list");
    };
    let path = experiment::resolve(given, &args.dir)?;
    let exp = experiment::load(&path)?;
    let threads = args.threads.map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        usize::from,
    );
    let opts = runner::Options {
        out: out.clone(),
        seeds: args.seeds.map(usize::from),
        quick: args.quick,
        iterations: args.iterations,
        threads,
        stop_after: None,
    };
    let plan = runner::plan(&exp, &opts);
    let total: u64 = plan
        .runs
        .iter()
        .map(|r| u64::from(r.settings.iterations.unwrap_or(20)))
        .sum();
    println!(
        "{}: {} arms x {} seeds = {} runs, {} budget, {} at once; report in {}",
        exp.name,
        exp.spec.arms.len(),
        plan.seeds.len(),
        plan.runs.len(),
        match plan.budget {
            runner::Budget::Full => "full",
            runner::Budget::Quick => "quick",
            runner::Budget::Custom { .. } => "custom",
        },
        threads.min(plan.runs.len()).max(1),
        out.display()
    );
    let bar = progress_bar(
        args.quiet,
        total,
        "{elapsed_precise} [{bar:30}] {pos}/{len} iterations (eta {eta}) {msg}",
    );
    let finished = std::sync::atomic::AtomicUsize::new(0);
    let n_runs = plan.runs.len();
    let on_event = |e: runner::Event| match e {
        runner::Event::Started { done, .. } => bar.inc(u64::from(done)),
        runner::Event::Iteration { .. } => bar.inc(1),
        runner::Event::Evaluating { .. } => {}
        runner::Event::Finished { run, kept } => {
            let k = finished.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            let r = &plan.runs[run];
            bar.set_message(format!(
                "| {k}/{n_runs} runs done (last: {} seed {}{})",
                r.arm,
                r.seed,
                if kept { ", kept" } else { "" }
            ));
        }
    };
    let written = match experiment::reproduce(&exp, &opts, &on_event) {
        Ok(w) => w,
        Err(e) => {
            bar.abandon();
            return Err(e.into());
        }
    };
    bar.finish();
    let r = &written.report;
    println!();
    if written.outcome.kept + written.outcome.resumed > 0 {
        println!(
            "resumed: {} runs kept from before, {} continued from a checkpoint",
            written.outcome.kept, written.outcome.resumed
        );
    }
    println!("{}: {}", r.experiment, r.verdict.to_uppercase());
    println!("budget: {}", r.budget);
    for c in &r.checks {
        let v = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"));
        println!(
            "  {:<16} {}  ({} vs {}; holds on {} of {} seeds)",
            c.verdict,
            c.check,
            v(c.lhs),
            v(c.rhs),
            c.seeds_holding,
            c.seeds
        );
    }
    println!(
        "time: {:.0} s of runs; {:.0} s wall this time, {:.0} s over {} invocation(s)",
        r.timing.total_run_seconds,
        written.outcome.seconds,
        r.timing.wall_seconds,
        r.timing.invocations
    );
    if let Some(peak) = emergence::metrics::peak_memory_bytes() {
        println!("peak memory: {:.1} MiB", peak as f64 / 1048576.0);
    }
    if let Some(e) = &written.figure_error {
        eprintln!("warning: the figures could not be drawn: {e}");
    }
    for f in &written.files {
        println!("wrote {}", f.display());
    }
    Ok(())
}

fn cmd_check(path: &Path) -> Result<()> {
    if path
        .to_string_lossy()
        .ends_with(emergence::experiment::EXTENSION)
    {
        let e = emergence::experiment::load(path)?;
        println!("{}: a valid experiment", path.display());
        println!("claim     {}", e.spec.claim);
        println!("source    {}", e.spec.source);
        for (a, s) in e.spec.arms.iter().zip(&e.scenes) {
            println!(
                "arm       {:<16} scene {}",
                a.name,
                s.file
                    .as_ref()
                    .map_or("(inline)".to_string(), |f| f.display().to_string())
            );
        }
        println!("seeds     {:?}", e.spec.seeds);
        println!("checks    {}", e.spec.expect.join("; "));
        return Ok(());
    }
    let scene = load_scene(path)?;
    // The model folders the teams name load as a run would load them.
    for t in &scene.spec.teams {
        if let emergence::scene::PolicySpec::Lm(emergence::scene::LmSpec { model: Some(m) }) =
            &t.policy
        {
            let folder =
                emergence::policy::lm::ModelFolder::load(Path::new(m), &candle_core::Device::Cpu)
                    .with_context(|| {
                    format!("{}: team {:?}: lm(model: {m:?})", path.display(), t.name)
                })?;
            emergence::policy::lm::tokenizer::warn_unknown_scene_words(
                &folder.tokenizer,
                &scene,
                &Path::new(m).join("tokenizer.json"),
            );
        }
    }
    print!("{}", describe(&scene));
    println!("ok: {}", path.display());
    Ok(())
}

fn cmd_list(dir: &Path) -> Result<()> {
    if !dir.is_dir() {
        anyhow::bail!(
            "--scenes {}: not a folder; expected a folder of *.scene.ron files",
            dir.display()
        );
    }
    println!("scenes (in {}):", dir.display());
    let found = find_scenes(dir);
    if found.is_empty() {
        println!("  none found");
    }
    for p in found {
        match load_scene(&p) {
            Ok(s) => println!(
                "  {:<52} {:<15} {}",
                p.display(),
                s.spec.family.name(),
                s.spec.name
            ),
            Err(e) => println!("  {:<52} INVALID: {e}", p.display()),
        }
    }
    println!();
    println!("families:");
    println!(
        "  {:<16} repeated two-player matrix games (Prisoner's Dilemma, Stag Hunt, Chicken)",
        "Matrix"
    );
    println!(
        "  {:<16} Commons Harvest: apples regrow only near other apples; zapping beam",
        "CommonsHarvest"
    );
    println!(
        "  {:<16} Clean Up: apples grow only while the river is clean; cleaning beam",
        "CleanUp"
    );
    println!(
        "  {:<16} hide-and-seek: vision cones, boxes, ramps, locks, a preparation phase",
        "HideAndSeek"
    );
    println!(
        "  {:<16} cooperative maze: split knowledge, plates and doors, keys, talk, shared exit",
        "Maze"
    );
    println!();
    println!("policies:");
    let width = catalogue()
        .iter()
        .map(|p| p.families.join(",").len())
        .max()
        .unwrap_or(0);
    for p in catalogue() {
        println!(
            "  {:<24} {:<width$} {}",
            p.name,
            p.families.join(","),
            p.doc
        );
    }
    Ok(())
}

fn cmd_train(args: TrainArgs) -> Result<()> {
    use emergence::train::{TrainConfig, resume_config, train};
    let cfg = if let Some(run) = &args.resume {
        let mut given = args.settings.given();
        given.retain(|f| f != "--iterations");
        for (flag, set) in [
            ("--eval-against", args.eval_against.is_some()),
            ("--eval-every", args.eval_every.is_some()),
            ("SCENE", args.scene.is_some()),
        ] {
            if set {
                given.push(flag.to_string());
            }
        }
        if let Some(flag) = given.first() {
            anyhow::bail!(
                "{flag} cannot change a resumed run: it continues with the settings in {}",
                run.join("config.json").display()
            );
        }
        let mut cfg = resume_config(run, args.settings.iterations)?;
        if let Some(t) = args.threads {
            cfg.threads = Some(usize::from(t));
        }
        cfg
    } else {
        let (Some(scene_path), Some(out)) = (&args.scene, &args.out) else {
            anyhow::bail!("give a SCENE and --out, or --resume RUN");
        };
        let scene = load_scene(scene_path)?;
        let model_from = if args.settings.model.is_some() {
            "--model".to_string()
        } else {
            format!("{}: train.model", scene_path.display())
        };
        // The flags over the scene's train block; the algorithm's defaults fill the rest.
        let d = args.settings.clone().over(scene.spec.train.clone());
        let mut cfg = TrainConfig::from_settings(scene, scene_path.clone(), &d, out.clone())
            .map_err(|e| anyhow::anyhow!("{model_from} {e}"))?;
        cfg.threads = args.threads.map(usize::from);
        cfg.eval_against = args.eval_against.clone().map(|p| p.0).unwrap_or_default();
        cfg.eval_every = args
            .eval_every
            .unwrap_or(emergence::train::default_eval_every());
        cfg
    };
    let cfg = TrainConfig {
        stop_after: args.stop_after,
        ..cfg
    };
    check_outputs(
        &[("the scene", Some(&cfg.scene_path))],
        &[("--screenshot", args.screenshot.as_ref())],
        None,
    )?;
    // A resumed run keeps its own thread count: rayon's pool is bounded by it too (main
    // built it already when --threads was given).
    if args.threads.is_none()
        && let Some(n) = cfg.threads
    {
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global();
    }
    match &cfg.resume {
        Some(emergence::train::Resume::Checkpoint(dir)) => {
            println!("resuming {} from {}", cfg.out.display(), dir.display());
        }
        Some(emergence::train::Resume::FromStart) => println!(
            "resuming {} from its start: it stopped before its first checkpoint",
            cfg.out.display()
        ),
        None => {}
    }
    let bar = progress_bar(
        args.quiet,
        u64::from(cfg.iterations),
        "{elapsed_precise} [{bar:30}] {pos}/{len} iterations {msg}",
    );
    if args.gui && !cfg!(feature = "gui") {
        anyhow::bail!("{NO_GUI}");
    }
    let progress = |r: &emergence::train::IterationReport| {
        let returns: Vec<String> = r
            .team_returns
            .iter()
            .map(|(t, v)| format!("{t} {v:.3}"))
            .collect();
        bar.set_message(format!(
            "| return {} | kl {:.4} | entropy {:.3} | {:.0} agent-steps/s",
            returns.join(", "),
            r.update.approx_kl,
            r.update.entropy,
            r.agent_steps_per_sec
        ));
        bar.set_position(u64::from(r.iteration));
        if r.update.skipped > 0 {
            bar.suspend(|| {
                eprintln!(
                    "warning: iteration {}: {} gradient step(s) skipped ({}); the weights were \
                     kept",
                    r.iteration,
                    r.update.skipped,
                    r.update
                        .skip_reason
                        .as_deref()
                        .unwrap_or("a non-finite loss or gradient")
                )
            });
        }
    };
    // Whether this command makes the run folder (so a failure may leave it behind).
    let fresh_out =
        cfg.resume.is_none() && emergence::train::run_dir::is_fresh(&cfg.out).unwrap_or(false);
    let trained = if args.gui {
        train_with_window(&cfg, args.screenshot.clone(), args.frames, progress)
    } else {
        train(&cfg, progress).map_err(anyhow::Error::from)
    };
    let summary = match trained {
        Ok(s) => s,
        Err(e) => {
            bar.abandon();
            if fresh_out
                && cfg.out.join("config.json").is_file()
                && matches!(emergence::train::newest_checkpoint(&cfg.out), Ok(None))
            {
                anyhow::bail!(
                    "{e:#}\nnote: {} holds no checkpoint yet; `emergence train --resume {}` \
                     starts it again from its first iteration",
                    cfg.out.display(),
                    cfg.out.display()
                );
            }
            // Failed before writing a checkpoint of its own: the one it resumed from may
            // be at fault, so name the older ones.
            let whole = emergence::train::whole_checkpoints(&cfg.out).unwrap_or_default();
            if let Some(emergence::train::Resume::Checkpoint(from)) = &cfg.resume
                && whole
                    .last()
                    .is_some_and(|(k, p)| p == from && *k < cfg.iterations)
                && whole.len() > 1
            {
                let older: Vec<String> = whole[..whole.len() - 1]
                    .iter()
                    .map(|(k, _)| format!("iter_{k}"))
                    .collect();
                anyhow::bail!(
                    "{e:#}\nnote: if {} is at fault, the run also holds the whole checkpoints \
                     {}; to resume from the newest of them, move it aside",
                    from.display(),
                    older.join(", ")
                );
            }
            return Err(e);
        }
    };
    bar.finish();
    let (Some(first), Some(last)) = (summary.iterations.first(), summary.iterations.last()) else {
        return Ok(());
    };
    println!();
    println!("{:<28} {:>12} {:>12}", "", "first", "last");
    for (t, v) in &last.team_returns {
        println!(
            "{:<28} {:>12.3} {:>12.3}",
            format!("return {t}"),
            first.team_returns[t],
            v
        );
    }
    for (k, v) in &last.metrics {
        let f = first.metrics.get(k).copied().unwrap_or(f64::NAN);
        println!("{k:<28} {f:>12.3} {v:>12.3}");
    }
    let n = summary.iterations.len() as f64;
    println!();
    println!("{:<28} {:>12.3}", "entropy (last)", last.update.entropy);
    type Row = (
        &'static str,
        usize,
        fn(&emergence::train::IterationReport) -> f64,
    );
    let rows: [Row; 5] = [
        ("rollout s/iteration", 3, |r| r.rollout_seconds),
        ("  of which inference", 3, |r| r.inference_seconds),
        ("update s/iteration", 3, |r| r.update.update_seconds),
        ("lm tokens/s", 0, |r| r.tokens_per_sec),
        ("agent-steps/s", 0, |r| r.agent_steps_per_sec),
    ];
    for (label, digits, f) in rows {
        let mean = summary.iterations.iter().map(f).sum::<f64>() / n;
        println!("{label:<28} {mean:>12.digits$}");
    }
    if let Some(peak) = emergence::metrics::peak_memory_bytes() {
        println!(
            "{:<28} {:>12.1}",
            "peak memory (MiB)",
            peak as f64 / 1048576.0
        );
    }
    println!("run folder: {}", cfg.out.display());
    for a in &summary.set_aside {
        println!("kept a checkpoint that was not whole as {}", a.display());
    }
    for n in &summary.notes {
        println!("note: {n}");
    }
    for c in &summary.checkpoints {
        println!("checkpoint: {}", c.display());
    }
    match &summary.plots {
        Ok(files) => {
            for f in files {
                println!("plot: {}", f.display());
            }
        }
        Err(e) => eprintln!("warning: the plots could not be drawn: {e}"),
    }
    Ok(())
}

const NO_GUI: &str = "this binary was built without the window: build it with the `gui` feature \
     (`cargo run --release --features gui -- view ...`; see README.md for the system packages)";

#[cfg(not(feature = "gui"))]
fn train_with_window(
    _cfg: &emergence::train::TrainConfig,
    _screenshot: Option<PathBuf>,
    _frames: Option<u32>,
    _progress: impl FnMut(&emergence::train::IterationReport) + Send,
) -> Result<emergence::train::TrainSummary> {
    anyhow::bail!("{NO_GUI}")
}

/// Trains on a worker thread while the window (on this thread, as winit requires) draws
/// arena 0 from the run's frame feed. Closing the window does not stop training.
#[cfg(feature = "gui")]
fn train_with_window(
    cfg: &emergence::train::TrainConfig,
    screenshot: Option<PathBuf>,
    frames: Option<u32>,
    progress: impl FnMut(&emergence::train::IterationReport) + Send,
) -> Result<emergence::train::TrainSummary> {
    use emergence::gui::{ViewConfig, ViewSource, run_view};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let tap = emergence::inspect::FrameTap::default();
    let done = Arc::new(AtomicBool::new(false));
    let cfg = emergence::train::TrainConfig {
        tap: Some(tap.clone()),
        ..cfg.clone()
    };
    std::thread::scope(|s| {
        let worker = s.spawn(|| {
            let r = emergence::train::train(&cfg, progress);
            done.store(true, Ordering::Relaxed);
            r
        });
        let shown = run_view(ViewConfig {
            source: ViewSource::Tap {
                tap: tap.clone(),
                scene: cfg.scene.clone(),
                done: done.clone(),
            },
            window: [1280, 800],
            screenshot,
            frames,
            speed: 4.0,
            select: Some(0),
            arena: 0,
            hash_log: None,
            run_dir: Some(cfg.out.clone()),
        });
        tap.lock().closed = true;
        match shown {
            Ok(()) if !done.load(Ordering::Relaxed) => {
                eprintln!("the window is closed; training goes on to its last iteration")
            }
            Ok(()) => {}
            Err(e) => eprintln!("warning: {e}; training goes on"),
        }
        worker
            .join()
            .map_err(|_| anyhow::anyhow!("the training thread panicked"))?
            .map_err(anyhow::Error::from)
    })
}

#[cfg(not(feature = "gui"))]
fn cmd_view(_args: ViewArgs) -> Result<()> {
    anyhow::bail!("{NO_GUI}")
}

/// The scene as the command line asks: every team on `--policy`, episodes cut at
/// `--max-steps`.
fn apply_overrides(
    mut scene: Scene,
    policy: Option<&str>,
    max_steps: Option<u32>,
) -> Result<Scene> {
    if let Some(p) = policy {
        let info = catalogue().iter().find(|i| i.name == p).with_context(|| {
            let known: Vec<&str> = catalogue().iter().map(|i| i.name).collect();
            format!(
                "--policy {p:?} is not a policy; expected one of {}",
                known.join(", ")
            )
        })?;
        let family = scene.spec.family.name();
        if !info.plays(family) {
            anyhow::bail!("--policy {p:?} does not play {family}");
        }
        for a in &mut scene.agents {
            a.policy = p.to_string();
        }
    }
    if let Some(n) = max_steps {
        scene.spec.episode.max_steps = n;
    }
    Ok(scene)
}

#[cfg(feature = "gui")]
fn cmd_view(args: ViewArgs) -> Result<()> {
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
    check_outputs(
        &[
            ("the scene", args.scene.as_ref()),
            ("--replay", args.replay.as_ref()),
            ("--model", args.model.as_ref()),
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
        ViewSource::Replay(emergence::inspect::Replay::load(path)?)
    } else {
        let Some(path) = &args.scene else {
            anyhow::bail!("give a SCENE or --replay FILE");
        };
        let policy = args.policy.clone();
        let max_steps = args.max_steps;
        let scene = apply_overrides(load_scene(path)?, policy.as_deref(), max_steps)?;
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
                // runs/NAME/checkpoints/iter_K -> runs/NAME, for the training curves.
                run_dir = c
                    .parent()
                    .and_then(Path::parent)
                    .filter(|r| r.join("metrics.jsonl").is_file())
                    .map(Path::to_path_buf);
                Some(c.clone())
            }
            None => args.model.clone(),
        };
        let cfg = RunConfig {
            arenas: args.arenas,
            seed: args.seed,
            threads: args.threads.map(usize::from),
            record: args.record.clone(),
            record_arenas: vec![args.arena],
            model,
            device: parse_device(&args.device)?,
            ..RunConfig::new(scene)
        };
        ViewSource::Live {
            cfg,
            watch: Some(SceneWatch {
                path: path.clone(),
                prepare: Box::new(move |s| {
                    apply_overrides(s, policy.as_deref(), max_steps).map_err(|e| format!("{e:#}"))
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

fn cmd_plot(args: PlotArgs) -> Result<()> {
    let files = emergence::metrics::plot::plot_run(&args.run)?;
    for f in files {
        println!("{}", f.display());
    }
    Ok(())
}

fn parse_device(s: &str) -> Result<candle_core::Device> {
    if s == "cpu" {
        return Ok(candle_core::Device::Cpu);
    }
    let Some(n) = s
        .strip_prefix("cuda:")
        .and_then(|n| n.parse::<usize>().ok())
    else {
        anyhow::bail!("--device {s:?}: expected cpu or cuda:N");
    };
    if !candle_core::utils::cuda_is_available() {
        anyhow::bail!(
            "--device {s}: this build has no CUDA (build with --features cuda on a machine with a GPU)"
        );
    }
    candle_core::Device::new_cuda(n).with_context(|| format!("--device {s}"))
}

fn cmd_model(cmd: ModelCommand) -> Result<()> {
    use emergence::policy::lm::{ModelFolder, Preset};
    match cmd {
        ModelCommand::Init {
            out,
            preset,
            seed,
            scenes,
        } => {
            let p = Preset::parse(&preset)
                .with_context(|| format!("--preset {preset:?}: expected tiny or small"))?;
            // A tokenizer for no scene could not read any: refuse rather than find out later.
            if !scenes.is_dir() {
                anyhow::bail!(
                    "--scenes {}: not a folder; expected the folder of the scenes the model \
                     will play (their words make the tokenizer)",
                    scenes.display()
                );
            }
            let paths = find_scenes(&scenes);
            if paths.is_empty() {
                anyhow::bail!(
                    "--scenes {}: no *.scene.ron below it; expected the folder of the scenes \
                     the model will play (their words make the tokenizer)",
                    scenes.display()
                );
            }
            let found: Vec<Scene> = paths
                .iter()
                .map(|p| load_scene(p))
                .collect::<Result<_, _>>()?;
            let m = ModelFolder::init(p, seed, &found, &candle_core::Device::Cpu)?;
            m.save(&out)?;
            println!(
                "wrote {} ({} preset, {} parameters, {} tokens in the tokenizer, seed {seed})",
                out.display(),
                preset,
                m.config.parameters(),
                m.tokenizer.get_vocab_size(true)
            );
            Ok(())
        }
        ModelCommand::Info { path } => {
            let m = ModelFolder::load(&path, &candle_core::Device::Cpu)?;
            let c = &m.config;
            println!("model      {}", path.display());
            println!(
                "shape      hidden {}, {} layers, {} heads ({} key/value), intermediate {}",
                c.hidden_size,
                c.num_hidden_layers,
                c.num_attention_heads,
                c.kv_heads(),
                c.intermediate_size
            );
            println!(
                "vocabulary {} (tokenizer {})",
                c.vocab_size,
                m.tokenizer.get_vocab_size(true)
            );
            println!("parameters {}", c.parameters());
            Ok(())
        }
    }
}
