//! `emergence reproduce`: run a named experiment (or an experiment file) and write its report.

use anyhow::Result;
use std::path::PathBuf;

use super::progress_bar;

#[derive(clap::Args)]
pub struct ReproduceArgs {
    /// A shipped experiment's name (see --list) or an `.experiment.ron` file.
    #[arg(required_unless_present = "list")]
    pub experiment: Option<String>,
    /// List the shipped experiments.
    #[arg(long)]
    pub list: bool,
    /// The report folder (runs, report.md, report.json, figures/); run again on the same
    /// folder to resume.
    #[arg(long, required_unless_present = "list")]
    pub out: Option<PathBuf>,
    /// Seeds: the file's first N, then the numbers after its last, 1 to 1,000.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub seeds: Option<u16>,
    /// The smaller budget (about 10 minutes on two cores); the report says so.
    #[arg(long)]
    pub quick: bool,
    /// Every run's iterations: a smoke test of the pipeline, not a result, 1 to 1,000,000.
    /// A cloned arm's clone shrinks with it: the quick budget's episodes, at most this many
    /// epochs.
    #[arg(long, value_parser = |s: &str| emergence::train::limits::parse_u32(s, emergence::train::limits::ITERATIONS))]
    pub iterations: Option<u32>,
    /// Threads for the whole experiment: that many runs side by side, one thread each
    /// [default: one per core].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
    /// Where shipped experiments are looked for.
    #[arg(long, default_value = "experiments")]
    pub dir: PathBuf,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Where the runs' language models train and play: `cpu`, or `cuda:N` (built with the
    /// `cuda` feature); the environments stay on the CPU.
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

/// Under mpirun (`ranks`) every rank runs its share of the runs and rank 0 writes the report.
pub fn cmd_reproduce(args: ReproduceArgs, ranks: emergence::train::dist::Ranks) -> Result<()> {
    use emergence::experiment::{self, runner};
    if args.list && !ranks.is_root() {
        return Ok(());
    }
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
    let device = super::parse_device(&args.device)?;
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
        ranks: ranks.clone(),
        device,
    };
    if !ranks.is_root() {
        // Rank 0 shows the progress and reports; the runs' failures are its to report too.
        return match runner::run(&exp, &opts, &|_| {}) {
            Ok(_) | Err(runner::ReproduceError::Runs { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        };
    }
    let plan = runner::plan(&exp, &opts);
    // This rank's runs (all of them in one process).
    let total: u64 = ranks
        .mine(plan.runs.len())
        .iter()
        .map(|&i| u64::from(plan.runs[i].settings.iterations.unwrap_or(20)))
        .sum();
    let at_once = threads.min(plan.runs.len()).max(1);
    println!(
        "{}: {} arms x {} seeds = {} runs, {} budget, {}; report in {}",
        exp.name,
        exp.spec.arms.len(),
        plan.seeds.len(),
        plan.runs.len(),
        match plan.budget {
            runner::Budget::Full => "full",
            runner::Budget::Quick => "quick",
            runner::Budget::Custom { .. } => "custom",
        },
        if ranks.parallel() {
            format!(
                "over {} ranks, {} at once on each (the progress is rank 0's runs)",
                ranks.size(),
                at_once.min(plan.runs.len().div_ceil(ranks.size()))
            )
        } else {
            format!("{at_once} at once")
        },
        out.display()
    );
    let bar = progress_bar(
        args.quiet,
        total,
        "{elapsed_precise} [{bar:30}] {pos}/{len} iterations (eta {eta}) {msg}",
    );
    let finished = std::sync::atomic::AtomicUsize::new(0);
    let n_runs = ranks.mine(plan.runs.len()).len();
    let on_event = |e: runner::Event| match e {
        runner::Event::Started { done, .. } => bar.inc(u64::from(done)),
        runner::Event::Iteration { .. } => bar.inc(1),
        runner::Event::Evaluating { .. } => {}
        runner::Event::Cloning { run } => {
            let r = &plan.runs[run];
            bar.set_message(format!(
                "| cloning {} for {} seed {}",
                r.clone.as_ref().map_or("", |c| c.from.as_str()),
                r.arm,
                r.seed
            ));
        }
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
    print_checks(&r.checks);
    for c in &r.also {
        println!("also {}: {}", c.name, c.verdict.to_uppercase());
        print_checks(&c.checks);
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

/// One line per check: its verdict, the check, both sides and the seeds where it holds.
fn print_checks(checks: &[emergence::experiment::report::CheckReport]) {
    let v = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"));
    for c in checks {
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
}
