//! A family defined outside emergence, end to end: the Coin Game ([`family`]) registered
//! from this program, its RON scene loaded and checked, run headless, its text shown as a
//! language model reads it, an `mlp` trained on it with IPPO and a language model with one
//! IPPO iteration. Nothing in emergence's `src/` knows the family.
//!
//! `cargo run --release --example coin_game [-- --quick] [-- OUT_DIR]` (the training runs go
//! to a fresh folder under OUT_DIR, by default the system's temporary folder). With the
//! window (`--features gui`): `-- --view` opens the scene in the viewer instead, and
//! `-- --screenshot FILE` saves one frame of it and exits.

mod family;

use anyhow::{Context, Result};
use emergence::envs::family::register;
use emergence::envs::senses::Senses;
use emergence::headless::{RunConfig, run};
use emergence::load::load_scene;
use emergence::observe::text::{Speaker, TextFormat};
use emergence::prelude::{ActionMask, Observation};
use emergence::scene::TextStyle;
use emergence::train::{Algo, LearnerKind, TrainConfig, TrainSettings, train};
use std::path::{Path, PathBuf};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let screenshot = args
        .iter()
        .position(|a| a == "--screenshot")
        .map(|i| {
            args.get(i + 1)
                .map(PathBuf::from)
                .context("--screenshot FILE")
        })
        .transpose()?;
    let view = screenshot.is_some() || args.iter().any(|a| a == "--view");
    let out = args
        .iter()
        .filter(|a| screenshot.as_ref().is_none_or(|s| Path::new(a) != s))
        .find(|a| !a.starts_with("--"))
        .map_or_else(std::env::temp_dir, PathBuf::from)
        .join(format!("coin_game-{}", std::process::id()));

    // 1. The family joins the ones scenes may name, before any scene is read.
    register(&family::CoinGame)?;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/coin_game/coin_game.scene.ron");
    let scene = load_scene(&path).map_err(|e| anyhow::anyhow!("{e}"))?;
    println!(
        "scene {} ({} family), {} agents an arena",
        scene.spec.name,
        scene.spec.family.name(),
        scene.agent_count()
    );
    if view {
        return open_window(scene, screenshot);
    }

    // 2. Headless, the scene's random players.
    let mut cfg = RunConfig::new(scene.clone());
    cfg.arenas = 64;
    cfg.episodes = if quick { 2 } else { 16 };
    cfg.seed = 1;
    cfg.threads = Some(2);
    let report = run(&cfg, |_| {})?;
    println!(
        "random players: {} episodes, coins {:.2} an episode, own coin rate {:.3}, {:.0} agent-steps/s",
        report.episodes,
        report.metrics.get("coins").copied().unwrap_or(0.0),
        report
            .metrics
            .get("own_coin_rate")
            .copied()
            .unwrap_or(f64::NAN),
        report.agent_steps_per_sec()
    );

    // 3. What a language model reads, in both styles (a fresh observation by hand).
    let actions: Vec<String> = family::ACTIONS.iter().map(|s| s.to_string()).collect();
    let obs = Observation {
        step: 3,
        view: vec![
            1, 1, 1, 1, 1, 1, 2, 0, 4, 1, 1, 0, 5, 0, 1, 1, 0, 0, 3, 1, 1, 1, 1, 1, 1,
        ],
        view_width: 5,
        view_height: 5,
        ..Default::default()
    };
    for style in [TextStyle::Full, TextStyle::Compact] {
        let mut s = scene.clone();
        s.spec.text = style;
        let text = TextFormat::new(&s, &actions).render(
            Speaker { team: 0, role: 0 },
            &obs,
            Senses::default(),
            ActionMask::all(actions.len()),
            -2.0,
        );
        println!("--- {style:?} text ---\n{text}");
    }

    // 4. An mlp trained with IPPO, then 5. a language model's IPPO iteration.
    let runs = [
        ("mlp", LearnerKind::Mlp, if quick { 10 } else { 150 }, 32),
        ("lm", LearnerKind::Lm, 1, 4),
    ];
    for (name, learner, iterations, arenas) in runs {
        let settings = TrainSettings {
            algo: Some(Algo::Ippo),
            learner: Some(learner),
            iterations: Some(iterations),
            arenas: Some(arenas),
            seed: Some(3),
            checkpoint_every: Some(1_000_000),
            ..Default::default()
        };
        let dir = out.join(name);
        let mut cfg =
            TrainConfig::from_settings(scene.clone(), path.clone(), &settings, dir.clone())
                .map_err(|e| anyhow::anyhow!(e))?;
        cfg.threads = Some(2);
        let summary = train(&cfg, |_| {}).with_context(|| format!("training the {name}"))?;
        let first = &summary.iterations[0];
        let last = summary.iterations.last().context("no iteration")?;
        println!(
            "{name} IPPO, {iterations} iterations of {arenas} arenas: coins {:.2} -> {:.2} an episode, own coin rate {:.3} -> {:.3}; run in {}",
            first.metrics.get("coins").copied().unwrap_or(0.0),
            last.metrics.get("coins").copied().unwrap_or(0.0),
            first
                .metrics
                .get("own_coin_rate")
                .copied()
                .unwrap_or(f64::NAN),
            last.metrics
                .get("own_coin_rate")
                .copied()
                .unwrap_or(f64::NAN),
            dir.display()
        );
    }
    Ok(())
}

/// The scene in the viewer, live; with `screenshot`, one frame saved there and the window
/// closed.
#[cfg(feature = "gui")]
fn open_window(scene: emergence::scene::Scene, screenshot: Option<PathBuf>) -> Result<()> {
    use emergence::gui::{ViewConfig, ViewSource, run_view};
    let mut cfg = RunConfig::new(scene);
    cfg.arenas = 4;
    cfg.seed = 1;
    let frames = screenshot.as_ref().map(|_| 6);
    run_view(ViewConfig {
        source: ViewSource::Live { cfg, watch: None },
        window: [1280, 800],
        screenshot,
        frames,
        speed: 4.0,
        select: None,
        arena: 0,
        hash_log: None,
        run_dir: None,
    })?;
    Ok(())
}

#[cfg(not(feature = "gui"))]
fn open_window(_scene: emergence::scene::Scene, _screenshot: Option<PathBuf>) -> Result<()> {
    anyhow::bail!(
        "the window needs a build with --features gui (cargo run --features gui --example coin_game -- --view)"
    )
}
