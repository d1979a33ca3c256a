//! Training proofs on CPU with the embedded tiny model: learning moves the weights and the
//! policy, lifts a coordination game to the optimum, reproduces the defection of naive
//! independent learners in the Prisoner's Dilemma, reproduces itself from a seed, and never
//! writes into a run folder that holds something.

use candle_core::{D, Device, Tensor};
use emergence::policy::lm::model::Path as Fwd;
use emergence::policy::lm::tokenizer::encode;
use emergence::policy::lm::{ModelFolder, Preset};
use emergence::scene::load_scene;
use emergence::train::{Algo, Hyper, ModelChoice, TrainConfig, TrainSummary, train};
use std::path::{Path, PathBuf};

fn scene(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenes/dilemma")
        .join(name)
}

fn config(name: &str, algo: Algo, iterations: u32, arenas: u32, out: &Path) -> TrainConfig {
    TrainConfig {
        scene: load_scene(&scene(name)).expect("scene"),
        scene_path: scene(name),
        algo,
        iterations,
        arenas,
        seed: 3,
        out: out.to_path_buf(),
        model: ModelChoice::Preset(Preset::Tiny),
        hyper: Hyper::default(),
        threads: Some(1),
        checkpoint_every: 1000,
    }
}

fn last_return(s: &TrainSummary) -> f64 {
    let last = s.iterations.last().expect("iterations");
    last.team_returns.values().sum::<f64>() / last.team_returns.len() as f64
}

/// P(first action) for a prompt under a model folder's weights, masked to the two actions.
fn p_first(folder: &ModelFolder, prompt: &str, actions: [&str; 2]) -> f32 {
    let dec = folder.decoder().expect("decoder");
    let ids = encode(&folder.tokenizer, prompt).expect("encode");
    let n = ids.len();
    let ids = Tensor::from_vec(ids, (1, n), &Device::Cpu).expect("ids");
    let logits = dec.forward(&ids, None, Fwd::Fast).expect("forward");
    let lp = candle_nn::ops::log_softmax(
        &logits.get(0).expect("row").get(n - 1).expect("last"),
        D::Minus1,
    )
    .expect("lp")
    .to_vec1::<f32>()
    .expect("vec");
    let a: Vec<f32> = actions
        .iter()
        .map(|w| lp[encode(&folder.tokenizer, w).expect("word")[0] as usize])
        .collect();
    1.0 / (1.0 + (a[1] - a[0]).exp())
}

#[test]
fn reinforce_learns_to_coordinate_and_moves_the_policy() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let cfg = config("coordination.scene.ron", Algo::Reinforce, 12, 16, &out);
    let summary = train(&cfg, |_| {}).expect("train");
    let first = &summary.iterations[0];
    let first_return = first.team_returns.values().sum::<f64>() / 2.0;
    // Random play averages 5 of an optimum of 20 (both on "left" every round).
    assert!(first_return < 10.0, "starts near random: {first_return}");
    assert!(
        last_return(&summary) >= 18.0,
        "reaches 90% of the optimum: {:?}",
        summary
            .iterations
            .iter()
            .map(last_return_of)
            .collect::<Vec<_>>()
    );
    // The weights moved, and the policy differs on an observation it never trained on.
    let trained = ModelFolder::load(&summary.checkpoints[0], &Device::Cpu).expect("checkpoint");
    let scene = load_scene(&scene("coordination.scene.ron")).expect("scene");
    let initial = ModelFolder::init(Preset::Tiny, 3, &[scene], &Device::Cpu).expect("init");
    let moved: usize = initial
        .weights
        .iter()
        .filter(|(name, w)| {
            let t = &trained.weights[*name];
            let d = (*w - t)
                .and_then(|d| d.abs())
                .and_then(|d| d.max_all())
                .and_then(|d| d.to_scalar::<f32>())
                .expect("diff");
            d > 0.0
        })
        .count();
    assert!(
        moved >= initial.weights.len() / 2,
        "only {moved} of {} tensors moved",
        initial.weights.len()
    );
    // Held out: a history no episode of this run can have (round 9 after three "right"s,
    // with a reward the game cannot pay).
    let prompt = "role player_a team player_a round 9 of 10\n\
                  you right other right you got 7\n\
                  you right other right you got 7\n\
                  you right other right you got 7\n\
                  other so far left 0 right 8\n\
                  actions left right\n";
    let before = p_first(&initial, prompt, ["left", "right"]);
    let after = p_first(&trained, prompt, ["left", "right"]);
    assert!(
        (after - before).abs() > 0.1,
        "P(left) {before} before, {after} after"
    );
}

fn last_return_of(r: &emergence::train::IterationReport) -> f64 {
    r.team_returns.values().sum::<f64>() / r.team_returns.len() as f64
}

#[test]
fn naive_learners_defect_in_the_prisoners_dilemma() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = config(
        "prisoners_dilemma.scene.ron",
        Algo::Reinforce,
        12,
        16,
        &dir.path().join("run"),
    );
    let summary = train(&cfg, |_| {}).expect("train");
    let first = summary.iterations[0].metrics["cooperation_rate"];
    let last = summary.iterations.last().expect("last").metrics["cooperation_rate"];
    assert!(first > 0.15, "starts mixed: {first}");
    assert!(1.0 - last > 0.8, "defection rate {} at the end", 1.0 - last);
}

#[test]
fn the_same_seed_trains_the_same_model_and_full_run_folders_are_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let run = |name: &str| {
        let out = dir.path().join(name);
        let mut cfg = config("coordination.scene.ron", Algo::Ippo, 2, 4, &out);
        cfg.hyper.epochs = 2;
        let s = train(&cfg, |_| {}).expect("train");
        let weights = std::fs::read(s.checkpoints[0].join("model.safetensors")).expect("read");
        let losses: Vec<(f32, f32, f32)> = s
            .iterations
            .iter()
            .map(|r| (r.update.policy_loss, r.update.value_loss, r.update.entropy))
            .collect();
        (weights, losses, out)
    };
    let (w1, l1, out) = run("a");
    let (w2, l2, _) = run("b");
    assert_eq!(l1, l2);
    assert!(w1 == w2, "checkpoints differ");
    // A second run into the same folder is refused and leaves it as it was.
    let before = std::fs::read(out.join("metrics.jsonl")).expect("metrics");
    let mut cfg = config("coordination.scene.ron", Algo::Ippo, 1, 1, &out);
    cfg.hyper.epochs = 1;
    let err = train(&cfg, |_| {}).expect_err("refused").to_string();
    assert!(err.contains("not empty"), "{err}");
    assert_eq!(
        std::fs::read(out.join("metrics.jsonl")).expect("metrics"),
        before
    );
}
