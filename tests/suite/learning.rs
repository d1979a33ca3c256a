//! Learning tests: each trains the embedded tiny model with one algorithm, then plays the
//! trained agents against fixed partners without learning ([`emergence::train::eval`]) and
//! asserts the strategy the algorithm's paper claims, on a game where that strategy is not
//! the trivial outcome. Each threshold fails for the untrained model (random play: 2.25 per
//! round at even odds, 2.0 for this model's 40% lean to cooperate; P(C | C) and P(C | D)
//! about equal) and for the wrong strategy
//! (an unconditional cooperator is exploited by always_defect; a defector earns 1 in
//! self-play). The values measured over several seeds are in the issue notes and README's
//! Training section; the tests run seed 3, or `EMERGENCE_LEARNING_SEED` when set (that is
//! how the other seeds were measured: `EMERGENCE_LEARNING_SEED=4 cargo test --test suite learning::
//! -- --nocapture` prints every test's values).
//!
//! The grid test trains the `mlp` learner (the classic-MARL baseline) on the corridor maze,
//! where nobody gets out alone.
//!
//! MAGRPO's test trains the `mlp` on the Stag Hunt: with the language model it ends where
//! its start's basin lies (hare-hare from the seeds whose untrained model hunts the stag
//! less than about 30% of the time, measured in the issue's note); the `mlp` starts even.
//!
//! CORY's test plays its trained copies against each other and reads the distribution the
//! observer samples from after each word of the pioneer.
//!
//! Not here (measured, see the issue's note): a maze pair that talks beating one that is
//! muted; tests/suite/train.rs holds the shorter proof that the word said is learned.

use emergence::load::load_scene;
use emergence::policy::lm::Preset;
use emergence::train::eval::{EvalResult, EvalSpec, evaluate};
use emergence::train::{
    Algo, Hyper, LearnerKind, ModelChoice, Sharing, TrainConfig, TrainSummary, train,
};
use std::path::{Path, PathBuf};

fn scene_path(name: &str) -> PathBuf {
    let family = if name.starts_with("corridor") || name.starts_with("memory") {
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
        overlap: false,
        threads: Some(2),
        checkpoint_every: 1_000_000,
        resume: None,
        stop_after: None,
        tap: None,
        eval_against: Vec::new(),
        eval_every: 10,
        ranks: Default::default(),
        device: candle_core::Device::Cpu,
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
        device: candle_core::Device::Cpu,
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
/// IPPO 0.59 / 0.46 / 0.67, MAPPO 0.52 / 0.48 / 0.51 per agent (the fused path). A failed
/// episode returns −1 per agent (the step cost of 100 steps) and a successful one at most +1,
/// so a mean return of −0.2 or more means that at least 40% of the episodes got both out.
/// The untrained network never does (−1.0),
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

/// Memory in a scene (scenes/maze/memory_corridor.scene.ron, a T-maze whose exit side is shown
/// by a pocket beside the start and never again; the map mirrored in half the episodes).
/// IPPO trains a `gru` and an `mlp` on it with the scene's 30 steps; each then plays with the
/// episode cut at the shortest way's 7 steps. On time, an agent stands at the junction at
/// step 4 seeing the same on both sides, and one wasted step makes it late: so a memoryless
/// policy gets out on time in at most half the episodes, whatever it learned, and the `mlp`
/// must stay at or under 0.6; the `gru` must get out on time in 90% of them, and the untrained
/// `gru` does not (≤ 0.1).
#[test]
fn the_gru_remembers_the_exit_side_of_the_memory_corridor_the_mlp_cannot() {
    let mut success = Vec::new();
    for learner in [LearnerKind::Gru, LearnerKind::Mlp] {
        let dir = tempfile::tempdir().expect("tmp");
        let mut cfg = config(
            "memory_corridor.scene.ron",
            Algo::Ippo,
            60,
            256,
            seed(),
            &dir.path().join("run"),
        );
        cfg.learner = learner;
        cfg.hyper = Hyper::for_learner(Algo::Ippo, learner);
        let summary = train(&cfg, |_| {}).expect("train");
        let mut on_time = cfg.clone();
        on_time.scene.spec.episode.max_steps = 7;
        let trained = eval(&on_time, &summary, "self").metrics["success"];
        let untrained = match learner {
            LearnerKind::Gru => untrained_mlp(&on_time, &summary, dir.path()).metrics["success"],
            _ => f64::NAN,
        };
        eprintln!(
            "{learner:?}, memory corridor: success within 7 steps {trained:.3} trained, \
             {untrained:.3} untrained"
        );
        success.push((trained, untrained));
    }
    let [(gru, gru_untrained), (mlp, _)] = success[..] else {
        unreachable!()
    };
    assert!(
        gru_untrained <= 0.1,
        "the untrained gru gets out on time: {gru_untrained}"
    );
    assert!(
        gru >= 0.9,
        "the gru did not learn to remember the side: {gru}"
    );
    assert!(mlp <= 0.6, "the mlp got out on time without memory: {mlp}");
}

/// Iterations of MAPPO in the maze test.
const MAPPO_MAZE_ITERATIONS: u32 = 60;

/// The `mlp` (or `gru`) of `summary`'s run before training (its sizes and kind from the last
/// checkpoint, its weights from the run seed, as the run's first decision built them) in
/// self-play, on the arenas [`eval`] uses.
fn untrained_mlp(cfg: &TrainConfig, summary: &TrainSummary, scratch: &Path) -> EvalResult {
    let saved = summary.checkpoints.last().expect("checkpoint");
    let sizes: emergence::policy::mlp::MlpConfig =
        serde_json::from_str(&std::fs::read_to_string(saved.join("mlp.json")).expect("mlp.json"))
            .expect("sizes");
    let fresh = emergence::policy::mlp::MlpNet::with_core(
        sizes.cells,
        sizes.dense,
        sizes.actions,
        sizes.words,
        sizes.memory,
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
            device: candle_core::Device::Cpu,
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

/// CORY (Ma et al. 2024): the observer reads the pioneer's choice of the same step. On an
/// anti-coordination game (the pair earns only when the two choose differently, like two
/// drivers picking lanes), what the observer should do depends only on what the pioneer
/// chose: the other word. One round per episode, as the paper's tasks are one response each
/// (with ten rounds the credit of one answer drowns in the next nine: 24 updates of 16
/// arenas moved the observer only part of the way). Measured on the distribution the
/// observer samples from in self-play of the trained copies (each copy as the observer in
/// turn, 128 fresh arenas): its mean probability of the other word given that the pioneer
/// said `left`, and given that it said `right`. Both must be at least 0.65. An observer
/// that ignores the pioneer fails (saying `right` with probability q whatever it read gives
/// q and 1 − q), so does one that copies it, and so does the untrained model, which leans to
/// repeat the word it has just read (0.24 to 0.47). Measured, seeds 3 / 4 / 5, the lower of
/// the two per copy: 0.91, 0.86 / 0.79, 0.91 / 0.73, 0.91; CORY's KL to the starting model
/// keeps the pioneer saying both words (left 0.42 to 0.79 of the time), so the observer
/// learns to answer each rather than the pair settling on one convention.
#[test]
fn the_cory_observer_learns_to_answer_the_pioneer() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("anti_coordination.scene.ron");
    std::fs::write(
        &path,
        r#"(
    name: "Anti-coordination",
    family: Matrix(payoffs: [[0, 1], [1, 0]], actions: ["left", "right"], rounds: 1, history: 1),
    teams: [(name: "player_a", policy: "lm"), (name: "player_b", policy: "lm")],
)"#,
    )
    .expect("scene");
    let mut cfg = config(
        "coordination.scene.ron",
        Algo::Cory,
        CORY_ITERATIONS,
        128,
        seed(),
        &dir.path().join("run"),
    );
    cfg.scene = load_scene(&path).expect("scene");
    cfg.scene_path = path;
    let t0 = std::time::Instant::now();
    let summary = train(&cfg, |_| {}).expect("train");
    let secs = t0.elapsed().as_secs_f64();
    let ckpt = summary.checkpoints.last().expect("checkpoint");
    let trained =
        || ["agent_0", "agent_1"].map(|c| emergence::policy::lm::ModelSource::Folder(ckpt.join(c)));
    let untrained = || {
        [0, 1].map(|_| emergence::policy::lm::ModelSource::Embedded {
            preset: Preset::Tiny,
            seed: cfg.seed,
        })
    };
    let returns: Vec<f64> = summary
        .iterations
        .iter()
        .map(|r| r.team_returns.values().sum::<f64>() / r.team_returns.len() as f64)
        .collect();
    eprintln!("cory: {CORY_ITERATIONS} updates in {secs:.0} s; returns {returns:?}");
    for pioneer in [0, 1] {
        let (before, _) = observer_answers(&cfg.scene, untrained(), pioneer);
        let (after, lead) = observer_answers(&cfg.scene, trained(), pioneer);
        eprintln!(
            "cory, copy {} observes: P(other word | pioneer said left, right) = {:.3}, {:.3} \
             (untrained {:.3}, {:.3}); the pioneer says left {:.2} of the time",
            1 - pioneer,
            after[0],
            after[1],
            before[0],
            before[1],
            lead
        );
        assert!(
            before[0].min(before[1]) < 0.5,
            "the untrained observer already answers: {before:?}"
        );
        assert!(
            after[0].min(after[1]) >= CORY_ANSWER,
            "copy {} does not answer the pioneer's word: {after:?} (untrained {before:?})",
            1 - pioneer
        );
    }
}

/// Iterations of the CORY test (128 arenas each).
const CORY_ITERATIONS: u32 = 40;

/// The least probability of answering the pioneer with the other word, after either word.
const CORY_ANSWER: f64 = 0.65;

/// The observer's mean probability of the word the pioneer did not say, after the pioneer
/// said `left` and after it said `right` (NaN where it never did), in one self-play episode
/// of `copies` on 128 arenas with copy `pioneer` leading; and the pioneer's mean
/// probability of `left`.
fn observer_answers(
    scene: &emergence::scene::Scene,
    copies: [emergence::policy::lm::ModelSource; 2],
    pioneer: usize,
) -> ([f64; 2], f64) {
    use emergence::core::{Agent, DecisionTrace};
    use emergence::headless::{RunConfig, build_app};
    use emergence::policy::PolicyFactory;
    use emergence::policy::lm::LmPolicy;
    use emergence::train::cory::CoryPolicy;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    let mut run = RunConfig::new(scene.clone());
    run.arenas = 128;
    run.seed = 1_000_003;
    run.threads = Some(2);
    let copies = Arc::new(copies);
    run.policies.push((
        "lm".into(),
        PolicyFactory(Arc::new(move || {
            let copy = |c: usize| LmPolicy::new(copies[c].clone(), candle_core::Device::Cpu);
            Box::new(CoryPolicy::new(
                [copy(0), copy(1)],
                Arc::new(AtomicUsize::new(pioneer)),
            ))
        })),
    ));
    let mut app = build_app(&run).expect("app");
    let (mut sum, mut n) = ([0.0f64; 2], [0u32; 2]);
    let mut lead_left = 0.0;
    let rounds = scene
        .spec
        .family
        .params::<emergence::envs::dilemma::MatrixParams>()
        .expect("a matrix game")
        .rounds;
    for _ in 0..rounds {
        app.update();
        let world = app.world_mut();
        let mut q = world.query::<(&Agent, &emergence::core::Action, &DecisionTrace)>();
        let rows: Vec<(Agent, u8, Vec<f32>)> = q
            .iter(world)
            .map(|(a, act, t)| (*a, act.0, t.probs.clone()))
            .collect();
        for lead in rows.iter().filter(|r| usize::from(r.0.slot) == pioneer) {
            let follow = rows
                .iter()
                .find(|r| r.0.arena == lead.0.arena && usize::from(r.0.slot) != pioneer)
                .expect("observer");
            let said = usize::from(lead.1);
            lead_left += f64::from(lead.2[0]);
            sum[said] += f64::from(follow.2[1 - said]);
            n[said] += 1;
        }
    }
    (
        [sum[0] / f64::from(n[0]), sum[1] / f64::from(n[1])],
        lead_left / f64::from(n[0] + n[1]),
    )
}

/// One iteration of the recall task for `net`: `episodes` episodes of `len` steps; the first
/// step shows a cue (one of two header fields), the others show nothing but, at the last
/// step, that it is the last; the last action pays 1 when it names the cue. A `gru` carries
/// its state through the episode (recorded in each step); an `mlp` decides from the step's
/// row alone. Returns the batch and the share of episodes whose last action named the cue.
fn recall_rollout(
    net: &emergence::policy::mlp::MlpNet,
    episodes: usize,
    len: usize,
    rng: &mut rand_chacha::ChaCha8Rng,
) -> (emergence::train::Batch, f64) {
    use candle_core::{Device, Tensor};
    use emergence::policy::mlp::{Encoded, HIDDEN};
    use emergence::train::{Batch, Step, Trajectory};
    use rand::Rng;
    let cues: Vec<usize> = (0..episodes).map(|_| rng.random_range(0..2)).collect();
    let mut trajectories: Vec<Trajectory> = (0..episodes)
        .map(|e| Trajectory {
            arena: e as u32,
            terminated: true,
            ..Default::default()
        })
        .collect();
    let mut h =
        Tensor::zeros((episodes, HIDDEN), candle_core::DType::F32, &Device::Cpu).expect("state");
    let mut right = 0;
    for t in 0..len {
        let rows: Vec<Encoded> = cues
            .iter()
            .map(|&c| Encoded {
                cells: Vec::new(),
                dense: vec![
                    f32::from(u8::from(t == 0 && c == 0)),
                    f32::from(u8::from(t == 0 && c == 1)),
                    f32::from(u8::from(t + 1 == len)),
                ],
            })
            .collect();
        let refs: Vec<&Encoded> = rows.iter().collect();
        let (heads, next) = if net.memory {
            let (heads, next) = net.step(&refs, &h).expect("step");
            (heads, Some(next))
        } else {
            (net.heads(&refs).expect("heads"), None)
        };
        let logits: Vec<Vec<f32>> = heads.logits.to_vec2().expect("logits");
        let values: Vec<f32> = heads.values.to_vec1().expect("values");
        let states: Vec<Vec<f32>> = if net.memory {
            h.to_vec2().expect("h")
        } else {
            vec![Vec::new(); episodes]
        };
        for (e, row) in rows.into_iter().enumerate() {
            let l = &logits[e];
            let top = l[0].max(l[1]);
            let z = ((l[0] - top).exp() + (l[1] - top).exp()).ln() + top;
            let p0 = (l[0] - z).exp();
            let action = usize::from(rng.random::<f32>() >= p0);
            let reward = if t + 1 == len {
                right += usize::from(action == cues[e]);
                f32::from(u8::from(action == cues[e]))
            } else {
                0.0
            };
            trajectories[e].steps.push(Step {
                tokens: Vec::new(),
                encoded: row,
                global: Default::default(),
                legal: vec![true, true],
                action: action as u8,
                logprob: l[action] - z,
                said: None,
                said_logprob: 0.0,
                value: values[e],
                reward,
                memory: states[e].clone(),
                read: None,
            });
        }
        if let Some(next) = next {
            h = next;
        }
    }
    let batch = Batch {
        trajectories,
        slots: 1,
        ..Default::default()
    };
    (batch, right as f64 / episodes as f64)
}

/// Memory: the cue is shown at the first of 6 steps and must be named at the last. The
/// `gru` learner (IPPO on sequences from the stored states) learns to recall it; the `mlp`,
/// which sees only the step it is at, cannot do better than a coin, however it trains; and
/// the untrained `gru` is a coin too. (Trainer-level: the rollout is written here, the update
/// is `train`'s.)
#[test]
fn the_gru_learns_to_recall_a_cue_the_mlp_cannot() {
    use candle_core::Device;
    use emergence::policy::mlp::{MlpHandle, MlpNet};
    use emergence::train::Trainer;
    use rand::SeedableRng;
    let seed = seed();
    let (episodes, len, iterations) = (128, 6, 60);
    let mut results = Vec::new();
    for memory in [true, false] {
        let net = MlpNet::with_core(0, 3, 2, 0, memory, seed, &Device::Cpu).expect("net");
        let handle = MlpHandle::default();
        handle.set(net.clone());
        let hyper = Hyper {
            lr: 3e-3,
            minibatch: 256,
            ..Hyper::for_learner(Algo::Ippo, LearnerKind::Gru)
        };
        let mut trainer =
            Trainer::new_mlp(&handle, 2, Algo::Ippo, hyper, seed, &Device::Cpu).expect("trainer");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let (_, untrained) = recall_rollout(&net, 512, len, &mut rng);
        for _ in 0..iterations {
            let (batch, _) = recall_rollout(&net, episodes, len, &mut rng);
            trainer.update(&batch, &mut rng).expect("update");
        }
        let (_, trained) = recall_rollout(&net, 512, len, &mut rng);
        println!(
            "recall, {}: untrained {untrained:.3}, trained {trained:.3} ({iterations} updates \
             of {episodes} episodes of {len} steps)",
            if memory { "gru" } else { "mlp" }
        );
        results.push((untrained, trained));
    }
    let [(gru_untrained, gru), (_, mlp)] = results[..] else {
        unreachable!()
    };
    assert!(
        gru_untrained < 0.6,
        "the untrained gru recalls: {gru_untrained}"
    );
    assert!(gru >= 0.9, "the gru did not learn to recall: {gru}");
    assert!(mlp <= 0.6, "the mlp recalled a cue it cannot see: {mlp}");
}

/// A two-way corridor for a language-model agent: the exit three cells west of the start
/// and a blind end one cell east, the map mirrored in half the episodes (so the exit is as
/// often east), the whole map known and read as compact text, no talk. Five steps an
/// episode: the exit is reached only by walking three times towards the side the map shows
/// it on.
const FORK: &str = r#"(
    name: "lm fork",
    text: Compact,
    family: Maze(view: 3, knowledge: Full, vocabulary: [], success_reward: 1.0, step_cost: 0.0),
    map: [
        "WWWWWWW",
        "WE..S.W",
        "WWWWWWW",
    ],
    legend: {'W': Wall, '.': Floor, 'S': Spawn, 'E': Exit},
    teams: [(name: "walker", policy: "lm")],
    episode: (max_steps: 5),
    randomize: (mirror: true),
)"#;

/// The fork test's IPPO: iterations, arenas an iteration and a learning rate decaying
/// linearly to 0, without the entropy bonus. Found by measurement (`emergence train` on the
/// scene, success per iteration): at the default 1e-3, 64 arenas left seed 4 walking one way
/// for 100 iterations and 128 arenas let seed 3 learn and unlearn (0.91, then 0.64); at a
/// constant 3e-4 with 128 arenas seeds 3 to 6 all reached 1.0 by iteration 20-30 and stayed
/// on an AVX-512 machine (2026-12-04), but on an AVX2 one (2026-12-07, other float rounding,
/// another trajectory) seed 3 reached 1.00 at iteration 12 and fell to 0.45 at 14 for good,
/// seed 6 the same at 15-18 (with `target_kl` 0.02 too): once nearly every episode gets
/// out, the entropy bonus and the noise of near-zero advantages at full learning rate walk
/// the policy off. Decaying to 0 without the bonus, seed 3 got out from iteration 13 to 40
/// and seed 6 fell at 22 and came back at 37, and this test measured 1.000 / 0.535 / 0.535
/// for seeds 3 / 4 / 5 (4 and 5 walk one way). The scene then had a vocabulary (`["here"]`):
/// a word that earns nothing in a one-agent scene but enters PPO's ratio with the move. Without
/// it (the scene above), on seeds 6 / 7 / 8 (chosen there) the runs got out in 1.00 of the
/// episodes from iterations 14 / 13 to 40, and 0.84 at 14 then 0.5 for good; this test
/// measured 0.996 / 0.996 / 0.535 for seeds 3 / 4 / 5 (2026-12-07, AVX2). So about two
/// seeds in three: each collapse follows an update whose mean approximate KL is 0.07-0.26
/// (0.002-0.02 otherwise); `target_kl` 0.03 and minibatches of 256 kept seed 8 walking one
/// way from the start. The language model's IPPO on this scene is not yet robust.
const FORK_ITERATIONS: u32 = 40;
const FORK_ARENAS: u32 = 128;
const FORK_LR: f64 = 3e-4;

/// A language-model agent learns on a grid scene (issue 37): IPPO trains the `tiny` model on
/// the two-way corridor ([`FORK`]) from its compact text, and it must then read the map: a
/// policy that walks one way whatever it reads gets out in half the episodes at most, so
/// the trained model must get out in 80% of 256 fresh episodes, and the untrained one (the
/// same run's model after one iteration at learning rate 0) in fewer than half.
#[test]
fn a_language_model_learns_to_walk_to_the_exit_the_map_shows() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("fork.scene.ron");
    std::fs::write(&path, FORK).expect("scene");
    let run = |iterations: u32, lr: f64, out: &str| {
        let mut cfg = config(
            "corridor_pair.scene.ron",
            Algo::Ippo,
            iterations,
            FORK_ARENAS,
            seed(),
            &dir.path().join(out),
        );
        cfg.scene = load_scene(&path).expect("fork scene");
        cfg.scene_path = path.clone();
        cfg.hyper.lr = lr;
        cfg.hyper.lr_final_frac = 0.0;
        cfg.hyper.entropy_coef = 0.0;
        let summary = train(&cfg, |_| {}).expect("train");
        eval(&cfg, &summary, "self").metrics["success"]
    };
    let untrained = run(1, 0.0, "untrained");
    let trained = run(FORK_ITERATIONS, FORK_LR, "trained");
    eprintln!(
        "lm ippo, fork: success {trained:.3} trained ({FORK_ITERATIONS} iterations of \
         {FORK_ARENAS} arenas), {untrained:.3} untrained"
    );
    assert!(
        untrained < 0.5,
        "the untrained model already gets out: {untrained}"
    );
    assert!(
        trained >= 0.8,
        "the model did not learn to read the exit's side: {trained}"
    );
}
