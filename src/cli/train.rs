//! `emergence train`: train a scene's learning agents, headless or in a window.

use anyhow::Result;
use std::path::PathBuf;

use super::eval::{Partners, parse_partners};
use super::{NO_GUI, check_outputs, progress_bar};
use emergence::load::load_scene;
use emergence::train::limits;
use limits::parse_u32 as whole32;

#[derive(clap::Args)]
pub struct TrainArgs {
    /// The `.scene.ron` file. Teams on `lm` (on `mlp` with --learner mlp) learn (all teams
    /// when none is). Its `train:` block gives defaults that these flags override.
    #[arg(required_unless_present = "resume")]
    pub scene: Option<PathBuf>,
    /// The training settings (each also in the scene's `train:` block, which they override).
    #[command(flatten)]
    pub settings: emergence::train::TrainSettings,
    /// The run folder (must not exist or be empty): config, metrics, plots, checkpoints.
    #[arg(long, required_unless_present = "resume", conflicts_with = "resume")]
    pub out: Option<PathBuf>,
    /// Continue the run in this folder from its newest whole checkpoint, with its own
    /// settings and scene copy (only --iterations, --threads and --quiet may be given).
    #[arg(long, value_name = "RUN")]
    pub resume: Option<PathBuf>,
    /// Stop after this many iterations, as if interrupted (the learning-rate schedule stays
    /// that of --iterations); a checkpoint is written, and --resume continues the run.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub stop_after: Option<u32>,
    /// Every --eval-every iterations (and at the first and the last), the learning teams
    /// play these partners on fresh seeds without learning: comma-separated policy names
    /// (`always_defect`, `tit_for_tat`, `random`, ...), `self`, `lm(model: "DIR")` or
    /// `mlp:DIR`. The
    /// returns (and, in matrix games, the strategy) go into the metrics rows (`eval.*`) and
    /// plots/eval.png.
    #[arg(long, value_parser = parse_partners)]
    pub eval_against: Option<Partners>,
    /// Iterations between evaluations [default: 10].
    #[arg(long, value_parser = |s: &str| whole32(s, limits::CHECKPOINT_EVERY))]
    pub eval_every: Option<u32>,
    /// Threads for all the run's compute: Bevy's task pools, and the model's kernels and
    /// matrix products (rayon's pool) [default: one per core]. Several runs with a share each
    /// can run side by side.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Where the language model decides and trains: `cpu`, or `cuda:N` (built with the
    /// `cuda` feature); the environments stay on the CPU, and so does an `mlp` learner. A
    /// resumed run may change it.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Draw arena 0 live in a window while training (built with the `gui` feature).
    #[arg(long)]
    pub gui: bool,
    /// With --gui: save a PNG of the window after --frames frames and close it (training
    /// goes on); a file that exists is refused.
    #[arg(long, requires = "gui")]
    pub screenshot: Option<PathBuf>,
    /// With --gui: close the window after this many frames.
    #[arg(long, requires = "gui")]
    pub frames: Option<u32>,
}

pub fn cmd_train(mut args: TrainArgs, ranks: emergence::train::dist::Ranks) -> Result<()> {
    use emergence::train::{TrainConfig, resume_config, train};
    let device = super::parse_device(&args.device)?;
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
    let root = ranks.is_root();
    if !root {
        // Rank 0 shows the progress and the summary.
        args.quiet = true;
    }
    let cfg = TrainConfig {
        stop_after: args.stop_after,
        ranks,
        device,
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
    if cfg.ranks.parallel() && root {
        let share = cfg.ranks.share(cfg.arenas);
        println!(
            "{} ranks, {} arenas each (rank 0 writes the run folder)",
            cfg.ranks.size(),
            share.len()
        );
    }
    match &cfg.resume {
        Some(emergence::train::Resume::Checkpoint(dir)) if root => {
            println!("resuming {} from {}", cfg.out.display(), dir.display());
        }
        Some(emergence::train::Resume::FromStart) if root => println!(
            "resuming {} from its start: it stopped before its first checkpoint",
            cfg.out.display()
        ),
        _ => {}
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
            "| return {} | kl {:.4} | entropy {:.3} | {:.0} agent-steps/s training ({:.0} \
             rollout)",
            returns.join(", "),
            r.update.approx_kl,
            r.update.entropy,
            r.training_steps_per_sec,
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
    if !root {
        return Ok(());
    }
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
        ("agent-steps/s (rollout)", 0, |r| r.agent_steps_per_sec),
    ];
    for (label, digits, f) in rows {
        let mean = summary.iterations.iter().map(f).sum::<f64>() / n;
        println!("{label:<28} {mean:>12.digits$}");
    }
    // Rollout and update together, over the whole run and after the first iteration (which
    // also pays for the memory the run grows into).
    // Each iteration's steps over its training seconds (rollout plus update, or under
    // --overlap the wall time until its update was done), summed.
    let training = |its: &[emergence::train::IterationReport]| {
        let steps =
            |r: &emergence::train::IterationReport| r.agent_steps_per_sec * r.rollout_seconds;
        let total: f64 = its.iter().map(steps).sum();
        let secs: f64 = its
            .iter()
            .map(|r| steps(r) / r.training_steps_per_sec.max(1e-9))
            .sum();
        total / secs.max(1e-9)
    };
    println!(
        "{:<28} {:>12.0}",
        "training agent-steps/s",
        training(&summary.iterations)
    );
    if summary.iterations.len() > 1 {
        println!(
            "{:<28} {:>12.0}",
            "  after the first iteration",
            training(&summary.iterations[1..])
        );
    }
    if cfg.ranks.parallel() {
        let reduce = summary
            .iterations
            .iter()
            .map(|r| r.update.reduce_seconds.unwrap_or(0.0))
            .sum::<f64>();
        let whole = summary.iterations.iter().map(|r| r.seconds).sum::<f64>();
        println!("{:<28} {:>12.4}", "all-reduce s/iteration", reduce / n);
        println!(
            "{:<28} {:>11.1}%",
            "  share of the iteration",
            100.0 * reduce / whole.max(1e-9)
        );
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

#[cfg(not(feature = "gui"))]
pub fn train_with_window(
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
pub fn train_with_window(
    cfg: &emergence::train::TrainConfig,
    screenshot: Option<PathBuf>,
    frames: Option<u32>,
    progress: impl FnMut(&emergence::train::IterationReport) + Send,
) -> Result<emergence::train::TrainSummary> {
    use emergence::gui::{ViewConfig, ViewSource, run_view};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let tap = emergence::frames::FrameTap::default();
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
