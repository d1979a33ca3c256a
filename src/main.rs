//! The `emergence` command line: parse the arguments, bound the threads, dispatch to the
//! command's file under `cli/`.

mod cli;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

use cli::{check, eval, imitate, list, model, plot, reproduce, run, train, view};

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
    Run(run::RunArgs),
    /// Train the scene's `lm` agents with a multi-agent RL algorithm between episodes.
    Train(train::TrainArgs),
    /// Clone a scripted teacher into a language model, an `mlp` or a `gru` (behaviour
    /// cloning): a model folder that `train --model` and scenes start from.
    Imitate(imitate::ImitateArgs),
    /// Play a trained model (a run, a checkpoint or a model folder) against fixed partners
    /// without learning, and print its returns and, in matrix games, its strategy.
    Eval(eval::EvalArgs),
    /// Redraw a training run's plots (RUN/plots/*.png) from its metrics.jsonl.
    Plot(plot::PlotArgs),
    /// Watch an arena in a window (built with the `gui` feature): live, or a replay.
    View(view::ViewArgs),
    /// Run a named experiment (or an experiment file): train every arm on every seed,
    /// evaluate, and write a report that says whether the paper's result reproduced.
    Reproduce(reproduce::ReproduceArgs),
    /// Validate a scene file (or an experiment file) and print a summary of it.
    Check {
        /// The `.scene.ron` (or `.experiment.ron`) file.
        scene: PathBuf,
    },
    /// Create or inspect language-model folders.
    #[command(subcommand)]
    Model(model::ModelCommand),
    /// List the shipped scenes (embedded in the binary), the families and the policies.
    List {
        /// Also list the scenes under this folder.
        #[arg(long)]
        scenes: Option<PathBuf>,
    },
}

/// Tensors come and go every step; mimalloc keeps their pages for reuse where glibc hands
/// large blocks back to the kernel and pays a page fault per page the next step.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The number of processes mpirun started this one among (Open MPI's, or a PMI launcher's).
fn launched_ranks() -> Option<usize> {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse().ok())
}

/// Why a process that mpirun started (`launched`: the number of processes, when over one)
/// must not run its command.
#[derive(Debug, PartialEq)]
enum Refusal {
    /// Built without the `mpi` feature: every process would run the whole job. Each says so.
    NoMpi(String),
    /// The command does not spread over ranks. Rank 0 says so.
    OneProcessOnly(String),
}

/// The refusal, if any, of a command under mpirun. A function of the build (`with_mpi`) so that
/// the unit tests check both builds' answers; tests/suite/mpi.rs runs the real thing in the
/// build with the feature.
fn launch_refusal(launched: Option<usize>, with_mpi: bool, spreads: bool) -> Option<Refusal> {
    let n = launched?;
    if !with_mpi {
        return Some(Refusal::NoMpi(format!(
            "mpirun started {n} processes, and this emergence was built without the `mpi` \
             feature: each would run the whole job; build it with \
             `cargo build --release --features mpi` (docs/building.md)"
        )));
    }
    (!spreads).then(|| {
        Refusal::OneProcessOnly(
            "under mpirun only `train`, `eval` and `reproduce` spread their work over the \
             ranks; run this command in one process"
                .to_string(),
        )
    })
}

/// candle 0.11 runs its element-wise operations on a pool of its own, sized by
/// `CANDLE_NUM_THREADS` (else `RAYON_NUM_THREADS`, else every core) when it is first used,
/// whose workers spin for a while after each operation: with `--threads 1` on two cores a
/// spinning worker took a tenth of a training run's CPU time. `--threads` sizes it too.
///
/// candle's CPU matrix product also asks for a thread count at every call, from
/// `RAYON_NUM_THREADS`, else by parsing `/proc/cpuinfo` (its physical cores): a sixth of a
/// `gru` training run went to reading that file. So `RAYON_NUM_THREADS` is set too: to
/// `--threads` (rayon's global pool has that many threads anyway), else, when unset, to
/// the count candle would find (read once here), which rayon's global pool then takes too.
fn bound_candle_threads(n: Option<u16>) {
    let rayon = std::env::var("RAYON_NUM_THREADS").ok();
    let count = match n {
        Some(n) => Some(n.max(1).to_string()),
        None if rayon.is_none() => Some(candle_core::utils::get_num_threads().to_string()),
        None => None,
    };
    // SAFETY: called first thing in `main`, before any other thread exists (MPI's, Bevy's,
    // rayon's, candle's), so nothing reads the environment while it changes.
    #[allow(unsafe_code)]
    unsafe {
        if let Some(n) = n {
            std::env::set_var("CANDLE_NUM_THREADS", n.max(1).to_string());
        }
        if let Some(c) = count {
            std::env::set_var("RAYON_NUM_THREADS", c);
        }
    }
}

fn main() -> ExitCode {
    // A reader that closes the pipe (`emergence list | head -1`) ends the process as it ends
    // any Unix tool; Rust's runtime ignores SIGPIPE, so each print would panic instead.
    #[cfg(unix)]
    #[allow(unsafe_code)]
    // SAFETY: before any thread starts; sets the signal's disposition to the default.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    cli::allocator::keep_freed_memory();
    let cli = Cli::parse();
    let threads = match &cli.command {
        Command::Run(a) => a.threads,
        Command::Train(a) => a.threads,
        Command::Imitate(a) => a.threads,
        Command::Eval(a) => a.threads,
        Command::View(a) => a.threads,
        Command::Reproduce(a) => a.threads,
        Command::Model(model::ModelCommand::Bench { threads, .. }) => *threads,
        _ => None,
    };
    bound_candle_threads(threads);
    // Under mpirun: MPI stays initialised while `_universe` lives (to the end of main).
    let launched = launched_ranks().filter(|&n| n > 1);
    #[cfg(feature = "mpi")]
    let (_universe, ranks) = match launched {
        Some(_) => match mpi::initialize() {
            Some(u) => (Some(u), emergence::train::dist::mpi_world()),
            None => {
                eprintln!("error: mpirun started this process, and MPI could not be initialised");
                return ExitCode::FAILURE;
            }
        },
        None => (None, emergence::train::dist::Ranks::default()),
    };
    #[cfg(not(feature = "mpi"))]
    let ranks = emergence::train::dist::Ranks::default();
    let spreads = matches!(
        cli.command,
        Command::Train(_) | Command::Eval(_) | Command::Reproduce(_)
    );
    match launch_refusal(launched, cfg!(feature = "mpi"), spreads) {
        None => {}
        Some(Refusal::NoMpi(msg)) => {
            eprintln!("error: {msg}");
            return ExitCode::FAILURE;
        }
        Some(Refusal::OneProcessOnly(msg)) => {
            if ranks.is_root() {
                eprintln!("error: {msg}");
            }
            return ExitCode::FAILURE;
        }
    }
    // --threads bounds all the compute: Bevy's pools (through the run's settings), candle's
    // own pool (above) and rayon's global pool, which the model's kernels and candle's gemm
    // run on.
    if let Some(n) = threads
        && let Err(e) = rayon::ThreadPoolBuilder::new()
            .num_threads(usize::from(n))
            .build_global()
    {
        eprintln!("error: --threads {n}: {e}");
        return ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::Run(args) => run::cmd_run(args),
        Command::Train(args) => train::cmd_train(args, ranks.clone()),
        Command::Imitate(args) => imitate::cmd_imitate(args),
        Command::Eval(args) => eval::cmd_eval(args, ranks.clone()),
        Command::Plot(args) => plot::cmd_plot(args),
        Command::View(args) => view::cmd_view(args),
        Command::Reproduce(args) => reproduce::cmd_reproduce(args, ranks.clone()),
        Command::Check { scene } => check::cmd_check(&scene),
        Command::List { scenes } => list::cmd_list(scenes.as_deref()),
        Command::Model(m) => model::cmd_model(m),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if ranks.parallel() => {
            eprintln!("error: rank {} of {}: {e:#}", ranks.rank(), ranks.size());
            // The other ranks would wait for this one in their next collective.
            ranks.abort(1);
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Refusal, launch_refusal};

    #[test]
    fn a_build_without_mpi_refuses_every_command_under_mpirun() {
        for spreads in [true, false] {
            let Some(Refusal::NoMpi(msg)) = launch_refusal(Some(2), false, spreads) else {
                panic!("a build without mpi ran under mpirun (spreads: {spreads})");
            };
            assert!(msg.contains("mpirun started 2 processes"), "{msg}");
            assert!(msg.contains("built without the `mpi` feature"), "{msg}");
        }
    }

    #[test]
    fn a_build_with_mpi_runs_only_the_commands_that_spread() {
        assert_eq!(launch_refusal(Some(4), true, true), None);
        let Some(Refusal::OneProcessOnly(msg)) = launch_refusal(Some(4), true, false) else {
            panic!("`run` under mpirun was not refused");
        };
        assert!(
            msg.contains("only `train`, `eval` and `reproduce` spread"),
            "{msg}"
        );
    }

    #[test]
    fn one_process_is_never_refused() {
        for (with_mpi, spreads) in [(false, false), (false, true), (true, false), (true, true)] {
            assert_eq!(launch_refusal(None, with_mpi, spreads), None);
        }
    }
}
