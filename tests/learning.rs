//! Learning tests: each trains the embedded tiny model with one algorithm, then plays the
//! trained agents against fixed partners without learning ([`emergence::train::eval`]) and
//! asserts the strategy the algorithm's paper claims, on a game where that strategy is not
//! the trivial outcome. Each threshold fails for the untrained model (random play: 2.25 per
//! round at even odds, 2.0 for this model's 40% lean to cooperate; P(C | C) and P(C | D)
//! about equal) and for the wrong strategy
//! (an unconditional cooperator is exploited by always_defect; a defector earns 1 in
//! self-play). The values measured over several seeds are in the issue notes and README's
//! Training section; the tests run seed 3, or `EMERGENCE_LEARNING_SEED` when set (that is
//! how the other seeds were measured: `EMERGENCE_LEARNING_SEED=4 cargo test --test learning
//! -- --nocapture` prints every test's values).
//!
//! The grid test trains the `mlp` learner (the classic-MARL baseline) on the corridor maze,
//! where nobody gets out alone.
//!
//! MAGRPO's test trains the `mlp` on the Stag Hunt: with the language model it ends where
//! its start's basin lies (hare-hare from the seeds whose untrained model hunts the stag
//! less than about 30% of the time, measured in the note); the `mlp` starts even.
//!
//! Not here yet (measured, see the note): CORY with its KL penalty moves the observer only part of the
//! way within a CI budget; the maze's talk is not yet a learned choice.

use emergence::policy::lm::Preset;
use emergence::scene::load_scene;
use emergence::train::eval::{EvalResult, EvalSpec, evaluate};
use emergence::train::{
    Algo, Hyper, LearnerKind, ModelChoice, Sharing, TrainConfig, TrainSummary, train,
};
use std::path::{Path, PathBuf};

fn scene_path(name: &str) -> PathBuf {
    let family = if name.starts_with("corridor") {
        "scenes/maze"
    } else {
        "scenes/dilemma"
    };
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(family)
        .join(name)
}

/// The training seed: 3, or `EMERGENCE_LEARNING_SEED`.
fn seed() -> u64 {
    std::env::var("EMERGENCE_LEARNING_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
}

/// A training run of `scene` with `algo` and its paper's defaults.
fn config(
    scene: &str,
    algo: Algo,
    iterations: u32,
    arenas: u32,
    seed: u64,
    out: &Path,
) -> TrainConfig {
    TrainConfig {
        scene: load_scene(&scene_path(scene)).expect("scene"),
        scene_path: scene_path(scene),
        algo,
        iterations,
        arenas,
        seed,
        out: out.to_path_buf(),
        model: ModelChoice::Preset(Preset::Tiny),
        hyper: Hyper::for_algo(algo),
        sharing: Sharing::Shared,
        learner: Default::default(),
        threads: Some(2),
        checkpoint_every: 1_000_000,
        resume: None,
        stop_after: None,
        tap: None,
        eval_against: Vec::new(),
        eval_every: 10,
    }
}

/// The last checkpoint of `summary` against `partner`, on 256 fresh arenas (64 leave about
/// ±0.1 per round of sampling noise on a self-play return).
fn eval(cfg: &TrainConfig, summary: &TrainSummary, partner: &str) -> EvalResult {
    let spec = EvalSpec {
        scene: cfg.scene.clone(),
        model: summary.checkpoints.last().expect("a checkpoint").clone(),
        arenas: 256,
        episodes: 1,
        seed: 1_000_003,
        threads: Some(2),
    };
    evaluate(&spec, partner).expect("evaluate")
}

fn strategy(r: &EvalResult, k: &str) -> f64 {
    r.strategy.get(k).copied().unwrap_or(f64::NAN)
}

/// Naive independent learners (REINFORCE, IPPO) drift to mutual defection in the iterated
/// Prisoner's Dilemma (Foerster et al. 2018): self-play earns ≤ 1.2 per round (random play
/// earns 2.25, mutual cooperation 3).
#[test]
fn naive_learners_defect_in_self_play() {
    for algo in [Algo::Reinforce, Algo::Ippo] {
        let dir = tempfile::tempdir().expect("tmp");
        let cfg = config(
            "prisoners_dilemma.scene.ron",
            algo,
            12,
            16,
            seed(),
            &dir.path().join("run"),
        );
        let summary = train(&cfg, |_| {}).expect("train");
        let own = eval(&cfg, &summary, "self");
        let vs_tft = eval(&cfg, &summary, "tit_for_tat");
        eprintln!(
            "{algo:?}: self-play {:.3}/round, vs tit_for_tat {:.3}, strategy {:?}",
            own.model_return_per_step, vs_tft.model_return_per_step, own.strategy
        );
        assert!(
            own.model_return_per_step <= 1.2,
            "{algo:?}: self-play {} per round",
            own.model_return_per_step
        );
        // It defects against a reciprocator too: no cooperation to keep up.
        assert!(
            strategy(&vs_tft, "coop_after_coop") < 0.3,
            "{:?}",
            vs_tft.strategy
        );
    }
}

/// Advantage Alignment with its defaults learns reciprocity that is not exploited (Duque et
/// al. 2024; arXiv 2511.19405): it cooperates after the other cooperated and defects after
/// it defected, earns about 3 per round in self-play, and always_defect cannot exploit it.
#[test]
fn advantage_alignment_learns_reciprocity_that_is_not_exploited() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = config(
        "prisoners_dilemma.scene.ron",
        Algo::AdvantageAlignment,
        AA_ITERATIONS,
        32,
        seed(),
        &dir.path().join("run"),
    );
    let summary = train(&cfg, |_| {}).expect("train");
    let own = eval(&cfg, &summary, "self");
    let vs_ad = eval(&cfg, &summary, "always_defect");
    let vs_tft = eval(&cfg, &summary, "tit_for_tat");
    eprintln!(
        "advantage alignment: self-play {:.3}/round {:?}; vs always_defect {:.3}/round {:?}; \
         vs tit_for_tat {:.3}/round {:?}",
        own.model_return_per_step,
        own.strategy,
        vs_ad.model_return_per_step,
        vs_ad.strategy,
        vs_tft.model_return_per_step,
        vs_tft.strategy
    );
    // Reciprocity, measured against a partner that does both (tit_for_tat answers the
    // learner's own moves, so both conditions occur), pooled with self-play.
    assert!(
        strategy(&vs_tft, "coop_after_coop") >= 0.8,
        "{:?}",
        vs_tft.strategy
    );
    assert!(
        strategy(&vs_ad, "coop_after_defect") <= 0.25,
        "{:?}",
        vs_ad.strategy
    );
    assert!(
        vs_ad.model_return_per_step >= 0.8,
        "exploited by always_defect: {} per round",
        vs_ad.model_return_per_step
    );
    assert!(
        own.model_return_per_step >= 2.5,
        "self-play {} per round",
        own.model_return_per_step
    );
}

/// Iterations of the Advantage Alignment test.
const AA_ITERATIONS: u32 = 50;

/// IPPO (100 updates) and MAPPO (60) train the `mlp` learner to get both agents through the
/// corridor maze, which needs two: one holds the door open from a plate while the other
/// crosses, then the one across holds it from the far plate. Measured, seeds 3 / 4 / 5:
/// IPPO 0.55 / 0.37 / 0.66, MAPPO 0.55 / 0.52 / 0.52 per agent. A failed episode returns −1 per agent (the step
/// cost of 100 steps) and a successful one at most +1, so a mean return of −0.2 or more means
/// that at least 40% of the episodes got both out. The untrained network never does (−1.0),
/// and neither does a policy that only walks to the exit or only sits on a plate.
#[test]
fn ippo_and_mappo_teach_the_mlp_pair_to_hold_the_door_for_each_other() {
    for (algo, iterations) in [(Algo::Ippo, 100), (Algo::Mappo, MAPPO_MAZE_ITERATIONS)] {
        let dir = tempfile::tempdir().expect("tmp");
        let mut cfg = config(
            "corridor_pair.scene.ron",
            algo,
            iterations,
            16,
            seed(),
            &dir.path().join("run"),
        );
        cfg.learner = LearnerKind::Mlp;
        cfg.hyper = Hyper::for_learner(algo, LearnerKind::Mlp);
        let summary = train(&cfg, |_| {}).expect("train");
        let trained = eval(&cfg, &summary, "self");
        let untrained = untrained_mlp(&cfg, &summary, dir.path());
        eprintln!(
            "{algo:?} mlp, corridor pair: return per agent {:.3} trained, {:.3} untrained",
            trained.model_return, untrained.model_return
        );
        assert!(
            untrained.model_return <= -0.9,
            "the untrained pair already gets out: {}",
            untrained.model_return
        );
        assert!(
            trained.model_return >= -0.2,
            "{algo:?}: return {} per agent (both out in fewer than 40% of episodes)",
            trained.model_return
        );
    }
}

/// Iterations of MAPPO in the maze test.
const MAPPO_MAZE_ITERATIONS: u32 = 60;

/// The `mlp` of `summary`'s run before training (its sizes from the last checkpoint, its
/// weights from the run seed, as the run's first decision built them) in self-play, on the
/// arenas [`eval`] uses.
fn untrained_mlp(cfg: &TrainConfig, summary: &TrainSummary, scratch: &Path) -> EvalResult {
    let saved = summary.checkpoints.last().expect("checkpoint");
    let sizes: emergence::policy::mlp::MlpConfig =
        serde_json::from_str(&std::fs::read_to_string(saved.join("mlp.json")).expect("mlp.json"))
            .expect("sizes");
    let fresh = emergence::policy::mlp::MlpNet::with_words(
        sizes.cells,
        sizes.dense,
        sizes.actions,
        sizes.words,
        cfg.seed,
        &candle_core::Device::Cpu,
    )
    .expect("net");
    let dir = scratch.join("untrained");
    fresh.save(&dir).expect("save");
    evaluate(
        &EvalSpec {
            scene: cfg.scene.clone(),
            model: dir,
            arenas: 256,
            episodes: 1,
            seed: 1_000_003,
            threads: Some(2),
        },
        "self",
    )
    .expect("evaluate")
}

/// MAGRPO's shared reward makes the Stag Hunt's payoff-dominant equilibrium the learners'
/// goal (Liu et al. 2025's cooperative setting): from an even start (the untrained `mlp`
/// hunts the stag half the time, so both hunt it in a quarter of the rounds, 2.0 per round)
/// the pair ends hunting the stag together from the first round (4 per round). Not the
/// trivial outcome: the hare is risk-dominant, and independent learners on their own rewards
/// from the same start end at the hare for some seeds (IPPO, 20 × 16: 1.83, 3.49 and 3.06
/// per round for seeds 3, 4, 5). Hare-hare earns 2.0 and fails the test, as does the
/// untrained pair.
#[test]
fn magrpo_with_the_shared_reward_reaches_stag_stag_from_an_even_start() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(
        "stag_hunt.scene.ron",
        Algo::Magrpo,
        20,
        16,
        seed(),
        &dir.path().join("run"),
    );
    cfg.learner = LearnerKind::Mlp;
    cfg.hyper = Hyper::for_learner(Algo::Magrpo, LearnerKind::Mlp);
    let summary = train(&cfg, |_| {}).expect("train");
    let own = eval(&cfg, &summary, "self");
    let untrained = untrained_mlp(&cfg, &summary, dir.path());
    eprintln!(
        "magrpo mlp, stag hunt: self-play {:.3}/round {:?}; untrained {:.3}/round {:?}",
        own.model_return_per_step,
        own.strategy,
        untrained.model_return_per_step,
        untrained.strategy
    );
    assert!(
        untrained.model_return_per_step < 2.5,
        "the untrained pair already hunts the stag: {} per round",
        untrained.model_return_per_step
    );
    assert!(
        own.model_return_per_step >= 3.5,
        "self-play {} per round",
        own.model_return_per_step
    );
    assert!(
        strategy(&own, "first_cooperation") >= 0.9,
        "{:?}",
        own.strategy
    );
}
