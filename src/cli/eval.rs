//! `emergence eval`: play a trained model against fixed partners, without learning.

use anyhow::{Context, Result};
use std::io::Write;
use std::path::PathBuf;

use super::check_outputs;
use emergence::load::load_scene;
use emergence::train::limits;
use limits::parse_u32 as whole32;

#[derive(clap::Args)]
pub struct EvalArgs {
    /// A run folder (its newest whole checkpoint plays), a checkpoint
    /// (`RUN/checkpoints/iter_K`) or a model folder (a language model's, or an `mlp`'s with
    /// its mlp.json).
    pub model: PathBuf,
    /// The scene [default: a run's own scene copy]. Its teams on `lm` (on `mlp`, for an
    /// `mlp` model) are the model's seats (every team when none is).
    pub scene: Option<PathBuf>,
    /// Partners, comma-separated: policy names (`always_defect`, `tit_for_tat`, `random`,
    /// ...), `self`, `lm(model: "DIR")`, or `mlp:DIR` for a trained `mlp`; `TEAM=POLICY`
    /// gives one team the policy and the model every other team (`seekers=seeker`).
    #[arg(long, value_parser = parse_partners, required = true)]
    pub against: Vec<Partners>,
    /// Arenas per partner (one episode each unless --episodes).
    #[arg(long, default_value_t = 64, value_parser = |s: &str| whole32(s, limits::ARENAS))]
    pub arenas: u32,
    /// Episodes per arena.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub episodes: u32,
    /// Seed of the evaluation's arenas.
    #[arg(long, default_value_t = 1_000_003)]
    pub seed: u64,
    /// Truncate episodes after this many steps, overriding the scene's `episode.max_steps`
    /// (e.g. the shortest way out, to see which policies take it).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub max_steps: Option<u32>,
    /// Threads for all the run's compute: Bevy's task pools, and the model's kernels and
    /// matrix products (rayon's pool) [default: one per core]. Several runs with a share each
    /// can run side by side.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
    /// Also write the results as JSON to this file (a file that exists is refused unless
    /// --force).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Replace the --json file if it exists (never an input: the scene or the model's files).
    #[arg(long)]
    pub force: bool,
    /// Where language models play: `cpu`, or `cuda:N` (built with the `cuda` feature).
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

/// A comma-separated list of partners, checked.
#[derive(Debug, Clone)]
pub struct Partners(pub Vec<String>);

pub fn parse_partners(s: &str) -> Result<Partners, String> {
    emergence::train::eval::parse_partners(s).map(Partners)
}

/// Under mpirun (`ranks`) the partners are spread over the ranks (every N-th to each) and
/// rank 0 prints and writes every result, in the order given.
pub fn cmd_eval(args: EvalArgs, ranks: emergence::train::dist::Ranks) -> Result<()> {
    use emergence::train::eval::{EvalSpec, evaluate};
    let device = super::parse_device(&args.device)?;
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
    let scene = super::apply_overrides(scene, None, args.max_steps, (None, None))?;
    let spec = EvalSpec {
        scene,
        model: model.clone(),
        arenas: args.arenas,
        episodes: args.episodes,
        seed: args.seed,
        threads: args.threads.map(usize::from),
        device,
    };
    let partners: Vec<&String> = args.against.iter().flat_map(|p| &p.0).collect();
    if ranks.is_root() {
        println!(
            "{} on {} ({} arenas x {} episodes per seat, seed {}{})",
            model.display(),
            scene_path.display(),
            args.arenas,
            args.episodes,
            args.seed,
            if ranks.parallel() {
                format!("; {} partners over {} ranks", partners.len(), ranks.size())
            } else {
                String::new()
            }
        );
        println!(
            "{:<24} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "partner", "return", "per step", "partner", "first C", "C|C", "C|D"
        );
    }
    // Alone, each row is printed as soon as it is known.
    let mut mine = Vec::new();
    for i in ranks.mine(partners.len()) {
        let r = evaluate(&spec, partners[i])?;
        if !ranks.parallel() {
            print_row(&r);
        }
        mine.push((i, r));
    }
    let results: Vec<_> = if ranks.parallel() {
        let mut all: Vec<(usize, _)> = ranks
            .all_gather(mine)
            .map_err(anyhow::Error::msg)?
            .into_iter()
            .flatten()
            .collect();
        all.sort_by_key(|(i, _)| *i);
        let all: Vec<_> = all.into_iter().map(|(_, r)| r).collect();
        if !ranks.is_root() {
            return Ok(());
        }
        all.iter().for_each(print_row);
        all
    } else {
        mine.into_iter().map(|(_, r)| r).collect()
    };
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

fn print_row(r: &emergence::train::eval::EvalResult) {
    let f = |k: &str| {
        r.strategy
            .get(k)
            .map_or("-".to_string(), |v| format!("{v:.3}"))
    };
    println!(
        "{:<24} {:>10.3} {:>10.3} {:>10} {:>10} {:>10} {:>10}",
        emergence::train::eval::label(&r.partner),
        r.model_return,
        r.model_return_per_step,
        r.partner_return
            .map_or("-".to_string(), |p| format!("{p:.3}")),
        f("first_cooperation"),
        f("coop_after_coop"),
        f("coop_after_defect"),
    );
    // The family's metrics under the row (a matrix game's are its strategy, above).
    if r.strategy.is_empty() && !r.metrics.is_empty() {
        let m: Vec<String> = r
            .metrics
            .iter()
            .map(|(k, v)| format!("{k} {v:.3}"))
            .collect();
        println!("{:<24} {}", "", m.join(", "));
    }
}
