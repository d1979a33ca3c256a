//! `emergence imitate`: clone a scripted teacher into a language model, an `mlp` or a `gru`
//! (behaviour cloning; [`emergence::train::imitate`]).

use anyhow::Result;
use std::path::PathBuf;

use super::progress_bar;
use emergence::load::load_scene;
use emergence::train::imitate::{ImitateConfig, ImitateProgress, imitate};
use emergence::train::limits;
use emergence::train::{LearnerKind, TrainSettings};

#[derive(clap::Args)]
pub struct ImitateArgs {
    /// The `.scene.ron` file. The teacher plays the seats the scene gives it (or, when none,
    /// those on the learner's policy, or on any `lm`, `mlp` or `gru`); the other seats keep
    /// their policies.
    pub scene: PathBuf,
    /// The teacher: a scripted policy that plays the scene's family (`emergence list`), or
    /// `replays:DIR`: the episodes recorded in DIR's replay files (`run --record`, `view
    /// --record`, a person's control included), played again from their seed and checked
    /// step by step against the recording.
    #[arg(long, value_name = "TEACHER")]
    pub from: String,
    /// What learns: the language model, the `mlp` or the `gru`.
    #[arg(long, value_enum, default_value = "lm")]
    pub learner: LearnerKind,
    /// Episodes recorded (rounded up to a multiple of --arenas; from replays: every whole
    /// episode they hold).
    #[arg(long, default_value_t = 64, value_parser = |s: &str| limits::parse_u32(s, limits::ITERATIONS))]
    pub episodes: u32,
    /// Passes over the recorded decisions.
    #[arg(long, default_value_t = 10, value_parser = |s: &str| limits::parse_u32(s, limits::ITERATIONS))]
    pub epochs: u32,
    /// Arenas recorded side by side.
    #[arg(long, default_value_t = 16, value_parser = |s: &str| limits::parse_u32(s, limits::ARENAS))]
    pub arenas: u32,
    /// Share of the episodes held out (never trained on) to measure the agreement on.
    #[arg(long, default_value_t = 0.1)]
    pub held_out: f64,
    /// Learn the words the teacher says too (families with talk; a silent teacher's
    /// silence). Without it the clone's words stay as they were, which its teammates hear.
    #[arg(long)]
    pub words: bool,
    /// DAgger's rounds after the first cloning: each plays --episodes more with the clone
    /// acting and the teacher labelling the states it reaches, adds them to the training
    /// decisions and trains --epochs more (Ross et al. 2011; the remedy for a clone that
    /// drifts from its teacher's states).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub dagger: u32,
    /// Learning rate (AdamW), decayed linearly to --lr-final-frac of it over the epochs
    /// [default: 1e-3 for lm, 3e-3 for mlp and gru].
    #[arg(long, value_parser = |s: &str| limits::parse_real(s, limits::LR))]
    pub lr: Option<f64>,
    /// The learning rate at the last epoch as a share of --lr [default: 0.1].
    #[arg(long, value_parser = |s: &str| limits::parse_real(s, limits::LR_FINAL_FRAC))]
    pub lr_final_frac: Option<f64>,
    /// Decisions per gradient step (an agent's window of turns or a `gru` sequence stays
    /// whole) [default: 64].
    #[arg(long, value_parser = |s: &str| limits::parse_usize(s, limits::MINIBATCH))]
    pub minibatch: Option<usize>,
    /// The language model to start from: `tiny`, `small` or a model folder [default: tiny].
    #[arg(long)]
    pub model: Option<String>,
    /// How the language model reads observations (`full`, `compact`) [default: the
    /// scene's].
    #[arg(long, value_enum, hide_possible_values = true)]
    pub text: Option<emergence::scene::TextStyle>,
    /// Past turns a language model reads (0 to 64) [default: the scene's].
    #[arg(long, value_parser = |s: &str| limits::parse_u32(s, limits::MEMORY))]
    pub memory: Option<u32>,
    /// Seed of the recording, the learner's starting weights and the minibatch order.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Fresh episodes played at the end by each of the teacher, the clone and the untrained
    /// learner (0: none).
    #[arg(long, default_value_t = 32, value_parser = |s: &str| limits::parse_u32(s, limits::ARENAS))]
    pub play_episodes: u32,
    /// The output folder (must not exist or be empty): the clone in `model/`,
    /// `imitation.json`, `imitation.jsonl`, `plots/imitation.png`.
    #[arg(long)]
    pub out: PathBuf,
    /// Threads for all the run's compute [default: one per core].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Where the language model runs: `cpu`, or `cuda:N` (built with the `cuda` feature).
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

pub fn cmd_imitate(args: ImitateArgs) -> Result<()> {
    if !(0.0..=0.5).contains(&args.held_out) {
        anyhow::bail!(
            "--held-out {}: expected a share of the episodes from 0 to 0.5",
            args.held_out
        );
    }
    let device = super::parse_device(&args.device)?;
    let scene = load_scene(&args.scene)?;
    let given = TrainSettings {
        arenas: Some(args.arenas),
        seed: Some(args.seed),
        model: args.model.clone(),
        lr: args.lr,
        lr_final_frac: args.lr_final_frac,
        minibatch: args.minibatch,
        text: args.text,
        memory: args.memory,
        ..Default::default()
    };
    let mut cfg = ImitateConfig::new(
        scene,
        args.scene.clone(),
        &args.from,
        args.learner,
        args.out.clone(),
        &given,
    )
    .map_err(|e| anyhow::anyhow!("--model {e}"))?;
    cfg.train.threads = args.threads.map(usize::from);
    cfg.train.device = device;
    cfg.episodes = args.episodes;
    cfg.epochs = args.epochs;
    cfg.held_out = args.held_out;
    cfg.words = args.words;
    cfg.play_episodes = args.play_episodes;
    cfg.dagger = args.dagger;
    if !args.words
        && emergence::envs::family::of(&cfg.train.scene)
            .vocabulary(&cfg.train.scene)
            .is_some_and(|w| !w.is_empty())
    {
        eprintln!(
            "note: {}'s agents talk and --words is not given: the clone's words are not \
             trained (its teammates will hear what the untrained learner says)",
            args.scene.display()
        );
    }
    let bar = progress_bar(
        args.quiet,
        u64::from(args.episodes.div_ceil(args.arenas.max(1)) * args.arenas.max(1)),
        "{elapsed_precise} [{bar:30}] {pos}/{len} {msg}",
    );
    bar.set_message("episodes recorded");
    let mut cloning = false;
    let summary = imitate(&cfg, |p| match p {
        // DAgger's episodes, between epochs: the bar stays on the epochs.
        ImitateProgress::Recorded(done, total) if cloning => {
            bar.set_message(format!("DAgger: {done}/{total} episodes recorded"));
        }
        ImitateProgress::Recorded(done, total) => {
            bar.set_length(u64::from(total));
            bar.set_position(u64::from(done));
        }
        ImitateProgress::Epoch(r) => {
            cloning = true;
            if r.epoch == 0 {
                bar.set_length(u64::from(cfg.epochs * (1 + cfg.dagger)));
                bar.set_position(0);
            } else {
                bar.set_position(u64::from(r.epoch));
            }
            let words = r
                .held_out_word_agreement
                .map(|w| format!(", words {w:.3}"))
                .unwrap_or_default();
            bar.set_message(format!(
                "epochs | held-out agreement {:.3}{words} | cross-entropy {:.3}",
                r.held_out_agreement, r.stats.action_loss
            ));
        }
        ImitateProgress::Playing(who) => {
            bar.set_message(format!("playing fresh episodes: the {who}"));
        }
    })?;
    bar.finish_and_clear();
    let r = &summary.record;
    let dagger = match r.dagger {
        0 => String::new(),
        k => format!(
            " after each of {} rounds (DAgger: {k} of the clone's, its return in each {:?})",
            k + 1,
            r.dagger_returns
                .iter()
                .map(|x| (x * 1000.0).round() / 1000.0)
                .collect::<Vec<_>>()
        ),
    };
    println!(
        "cloned {} into {} ({}) on {}: {} episodes recorded ({} held out), {} decisions trained \
         on, {} held out; {} epochs{dagger}",
        r.teacher,
        r.learner,
        r.model.as_deref().unwrap_or("a fresh network"),
        r.scene.display(),
        r.episodes,
        r.held_out_episodes,
        r.train_decisions,
        r.held_out_decisions,
        r.epochs
    );
    println!();
    println!("{:<36} {:>10} {:>10}", "", "untrained", "clone");
    println!(
        "{:<36} {:>10.3} {:>10.3}",
        "held-out agreement with the teacher", r.held_out_agreement_untrained, r.held_out_agreement
    );
    if let Some(w) = r.held_out_word_agreement {
        let w0 = summary
            .epochs
            .first()
            .and_then(|e| e.held_out_word_agreement)
            .unwrap_or(0.0);
        println!("{:<36} {:>10.3} {:>10.3}", "held-out words", w0, w);
    }
    if let Some(p) = &r.played {
        println!(
            "{:<36} {:>10.3} {:>10.3}   (teacher {:.3}; {:.3} while recording)",
            format!("return on {} fresh episodes", p.episodes),
            p.untrained,
            p.clone,
            p.teacher,
            r.teacher_return_recorded
        );
    }
    println!();
    println!(
        "recording {:.1} s, cloning {:.1} s",
        r.record_seconds, r.clone_seconds
    );
    println!("clone: {}", cfg.train.out.join("model").display());
    match &summary.plots {
        Ok(files) => {
            for f in files {
                println!("plot: {}", f.display());
            }
        }
        Err(e) => eprintln!("warning: the plot was not drawn: {e}"),
    }
    Ok(())
}
