//! `emergence run`: run a scene headless, many arenas and episodes, then a summary table.

use anyhow::{Context, Result};
use std::io::Write;
use std::path::PathBuf;

use super::{apply_overrides, check_outputs, model_source, parse_device, progress_bar};
use emergence::headless::{RunConfig, RunReport, run};
use emergence::load::load_scene;
use emergence::policy::lm::LmPolicy;

#[derive(clap::Args)]
pub struct RunArgs {
    /// The `.scene.ron` file.
    pub scene: PathBuf,
    /// Number of arenas run side by side.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub arenas: u32,
    /// Episodes each arena runs.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub episodes: u32,
    /// Run seed: the same seed gives the same trajectories.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Threads for all the run's compute: Bevy's task pools, and the model's kernels and
    /// matrix products (rayon's pool) [default: one per core].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
    /// Write one JSON line per finished episode per arena to this file (a file that exists
    /// is refused unless --force).
    #[arg(long)]
    pub metrics: Option<PathBuf>,
    /// Write a replay of every step of the recorded arenas to this file (a file that exists
    /// is refused unless --force).
    #[arg(long)]
    pub record: Option<PathBuf>,
    /// Arenas to record, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    pub record_arenas: Vec<u32>,
    /// Write every step's state hash (hex, one per line) to this file (a file that exists is
    /// refused unless --force).
    #[arg(long)]
    pub hash_log: Option<PathBuf>,
    /// Replace output files that exist (never an input: the scene or the model's files).
    #[arg(long)]
    pub force: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Let this policy decide for every team (e.g. `lm`), whatever the scene says.
    #[arg(long)]
    pub policy: Option<String>,
    /// The `lm` policy's model: `tiny` or `small` (embedded, weights from seed 0) or a model
    /// folder (config.json, model.safetensors, tokenizer.json) [default: tiny].
    #[arg(long)]
    pub model: Option<String>,
    /// Where language models run: `cpu`, or `cuda:N` (built with the `cuda` feature).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Truncate episodes after this many steps, overriding the scene's
    /// `episode.max_steps` (a short look at a slow policy).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub max_steps: Option<u32>,
    /// How language-model agents read their observations, overriding the scene's `text:`:
    /// `full`, or `compact` (the scene's constant lines first, shared by every prompt, then
    /// the agent's own in short form).
    #[arg(long, value_enum, hide_possible_values = true)]
    pub text: Option<emergence::scene::TextStyle>,
    /// How many past turns of its episode a language-model agent reads besides this step's
    /// observation, overriding the scene's `memory:` (0 to 64; docs/language-models.md).
    #[arg(long, value_parser = |s: &str| emergence::train::limits::parse_u32(s, emergence::train::limits::MEMORY))]
    pub memory: Option<u32>,
}

pub fn cmd_run(args: RunArgs) -> Result<()> {
    let scene = apply_overrides(
        load_scene(&args.scene)?,
        args.policy.as_deref(),
        args.max_steps,
        (args.text, args.memory),
    )?;
    let device = parse_device(&args.device)?;
    let model = model_source(args.model.as_deref())?;
    let folder = model.as_ref().and_then(|(_, f)| f.clone());
    check_outputs(
        &[
            ("the scene", Some(&args.scene)),
            ("--model", folder.as_ref()),
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
        policies: LmPolicy::for_command(model.map(|(s, _)| s), device.clone())
            .into_iter()
            .collect(),
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

pub fn print_report(cfg: &RunConfig, r: &RunReport) {
    println!(
        "{} — {} arenas × {} episodes, seed {}",
        cfg.scene.spec.name, cfg.arenas, cfg.episodes, cfg.seed
    );
    println!();
    println!("{:<28} {:>22}", "team", "mean return per agent");
    for (t, v) in r.teams.iter().zip(&r.team_returns) {
        println!("{t:<28} {v:>22.3}");
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
            let per = |t: u64| t as f64 / p.decisions.max(1) as f64;
            println!(
                "{:<28} {:>14.1}",
                format!("{name} tokens per decision"),
                per(p.tokens)
            );
            println!(
                "{:<28} {:>14.1}",
                "  of which computed",
                per(p.tokens.saturating_sub(p.shared_tokens))
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
