//! Training proofs on CPU with the embedded tiny model: learning moves the weights and the
//! policy, lifts a coordination game to the optimum, reproduces the defection of naive
//! independent learners in the Prisoner's Dilemma, reproduces itself from a seed, and never
//! writes into a run folder that holds something.

use candle_core::{D, Device, Tensor};
use emergence::experiment::{self, runner};
use emergence::load::load_scene;
use emergence::policy::lm::model::Pass as Fwd;
use emergence::policy::lm::tokenizer::encode;
use emergence::policy::lm::{ModelFolder, Preset};
use emergence::train::{
    Algo, Hyper, LearnerKind, ModelChoice, Sharing, TrainConfig, TrainSummary, newest_checkpoint,
    resume_config, train,
};
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
        sharing: Sharing::Shared,
        learner: LearnerKind::Lm,
        overlap: false,
        threads: Some(1),
        checkpoint_every: 1000,
        resume: None,
        stop_after: None,
        tap: None,
        eval_against: Vec::new(),
        eval_every: 10,
        ranks: Default::default(),
        device: Device::Cpu,
    }
}

/// How many of the starting model's tensors differ in `checkpoint`.
fn tensors_moved(checkpoint: &Path, scene_name: &str) -> (usize, usize) {
    let trained = ModelFolder::load(checkpoint, &Device::Cpu).expect("checkpoint");
    let scene = load_scene(&scene(scene_name)).expect("scene");
    let initial = ModelFolder::init(Preset::Tiny, 3, &[scene], &Device::Cpu).expect("init");
    let moved = initial
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
    (moved, initial.weights.len())
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
    let passes = emergence::policy::lm::backward_passes();
    let summary = train(&cfg, |_| {}).expect("train");
    // Every gradient step ran the training path's own backward pass (no silent fallback).
    let steps: usize = summary.iterations.iter().map(|r| r.update.steps).sum();
    assert!(steps > 0);
    assert_eq!(
        emergence::policy::lm::backward_passes() - passes,
        steps as u64,
        "gradient steps that did not go through the tape"
    );
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
    let (moved, total) = tensors_moved(&summary.checkpoints[0], "coordination.scene.ron");
    assert!(moved >= total / 2, "only {moved} of {total} tensors moved");
    let trained = ModelFolder::load(&summary.checkpoints[0], &Device::Cpu).expect("checkpoint");
    let scene = load_scene(&scene("coordination.scene.ron")).expect("scene");
    let initial = ModelFolder::init(Preset::Tiny, 3, &[scene], &Device::Cpu).expect("init");
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

/// The update statistics of every row of a run's metrics.jsonl (timings left out).
fn losses(run: &Path) -> Vec<String> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .expect("metrics")
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("json");
            [
                "iteration",
                "policy_loss",
                "value_loss",
                "entropy",
                "approx_kl",
                "grad_norm",
                "team_returns",
            ]
            .iter()
            .map(|k| v[k].to_string())
            .collect::<Vec<_>>()
            .join(" ")
        })
        .collect()
}

/// 4 iterations in one go and 2 + resume + 2 give the same bytes: with MAPPO (its critic
/// and both optimizers in the checkpoint), with CORY (two models, roles swapping every
/// update, so the resumed run must pick up the right pioneer), with a separate model per
/// team, with a LoRA adapter per role and per agent over a frozen base, and with language
/// models that remember (the resumed run reads its memory from its config.json).
#[test]
fn four_iterations_equal_two_then_resume_then_two_to_the_bit() {
    for (algo, sharing, learner, memory) in [
        (Algo::Mappo, Sharing::Shared, LearnerKind::Lm, 0),
        (Algo::Cory, Sharing::Shared, LearnerKind::Lm, 0),
        (Algo::Ippo, Sharing::Separate, LearnerKind::Lm, 0),
        (Algo::Reinforce, Sharing::RoleLora, LearnerKind::Lm, 0),
        (Algo::Reinforce, Sharing::AgentLora, LearnerKind::Lm, 0),
        // Language models with memory: windows of turns, re-read every other step.
        (Algo::Ippo, Sharing::Shared, LearnerKind::Lm, 3),
        (Algo::Reinforce, Sharing::AgentLora, LearnerKind::Lm, 2),
        (Algo::Mappo, Sharing::Shared, LearnerKind::Mlp, 0),
        (Algo::Ippo, Sharing::Separate, LearnerKind::Mlp, 0),
        (Algo::Mappo, Sharing::Shared, LearnerKind::Gru, 0),
    ] {
        let dir = tempfile::tempdir().expect("tmp");
        let base = |name: &str, threads: usize| {
            let mut cfg = config("coordination.scene.ron", algo, 4, 4, &dir.path().join(name));
            cfg.scene.spec.memory = memory;
            cfg.sharing = sharing;
            cfg.learner = learner;
            cfg.hyper.epochs = 1;
            cfg.hyper.swap_every = 1;
            cfg.checkpoint_every = 2;
            cfg.threads = Some(threads);
            cfg
        };
        let whole = base("whole", 1);
        train(&whole, |_| {}).expect("train");
        // Interrupted after 2 (on another thread count), then resumed.
        let mut first = base("split", 2);
        first.stop_after = Some(2);
        let s1 = train(&first, |_| {}).expect("first half");
        assert_eq!(s1.iterations.len(), 2);
        let split = dir.path().join("split");
        // An interrupted save and a folder without its state are not whole checkpoints.
        std::fs::create_dir_all(split.join("checkpoints/.iter_4.partial-999999")).expect("mkdir");
        std::fs::create_dir_all(split.join("checkpoints/iter_3")).expect("mkdir");
        // One stands where iteration 4's will go: it is kept aside, not written over.
        let stale = split.join("checkpoints/iter_4");
        std::fs::create_dir_all(&stale).expect("mkdir");
        std::fs::write(stale.join("model.safetensors"), b"left by a kill").expect("write");
        let newest = newest_checkpoint(&split).expect("read").expect("one");
        assert_eq!(newest.0, 2);
        let resumed = resume_config(&split, None).expect("resume config");
        assert_eq!(resumed.iterations, 4);
        let s2 = train(&resumed, |_| {}).expect("second half");
        assert_eq!(
            s2.iterations
                .iter()
                .map(|r| r.iteration)
                .collect::<Vec<_>>(),
            vec![3, 4]
        );
        let aside = split.join("checkpoints/iter_4.incomplete-1");
        assert_eq!(s2.set_aside, vec![aside.clone()]);
        let kept = std::fs::read(aside.join("model.safetensors")).expect("kept");
        assert_eq!(kept, b"left by a kill");
        let files: &[&str] = match (algo, sharing) {
            _ if learner.classic() && sharing == Sharing::Separate => &[
                "team_player_a/mlp.safetensors",
                "team_player_a/optimizer.safetensors",
                "team_player_b/mlp.safetensors",
                "team_player_b/optimizer.safetensors",
            ],
            _ if learner.classic() => &[
                "mlp.safetensors",
                "mlp.json",
                "optimizer.safetensors",
                "critic.safetensors",
            ],
            (Algo::Cory, _) => &[
                "agent_0/model.safetensors",
                "agent_0/optimizer.safetensors",
                "agent_1/model.safetensors",
                "agent_1/optimizer.safetensors",
            ],
            (_, Sharing::RoleLora) => &[
                "adapters/player_a/adapter_model.safetensors",
                "optimizer.safetensors",
                "adapters/player_b/adapter_model.safetensors",
                "model.safetensors",
            ],
            (_, Sharing::AgentLora) => &[
                "adapters/agent_0/adapter_model.safetensors",
                "optimizer.safetensors",
                "adapters/agent_1/adapter_model.safetensors",
                "model.safetensors",
            ],
            (Algo::Ippo, Sharing::Shared) => &["model.safetensors", "optimizer.safetensors"],
            (_, Sharing::Separate) => &[
                "team_player_a/model.safetensors",
                "team_player_a/optimizer.safetensors",
                "team_player_b/model.safetensors",
                "team_player_b/optimizer.safetensors",
            ],
            _ => &[
                "model.safetensors",
                "optimizer.safetensors",
                "critic.safetensors",
            ],
        };
        for file in files {
            let a = std::fs::read(whole.out.join("checkpoints/iter_4").join(file)).expect("a");
            let b = std::fs::read(split.join("checkpoints/iter_4").join(file)).expect("b");
            assert!(a == b, "{algo:?}: {file} differs");
        }
        assert_eq!(losses(&whole.out), losses(&split), "{algo:?}");
        assert!(split.join("plots/returns.png").is_file());
        if matches!(sharing, Sharing::RoleLora | Sharing::AgentLora) {
            // The base stayed frozen (only the value head, shared by the adapters, learned).
            let trained = ModelFolder::load(&split.join("checkpoints/iter_4"), &Device::Cpu)
                .expect("checkpoint");
            let sc = load_scene(&scene("coordination.scene.ron")).expect("scene");
            let initial = ModelFolder::init(Preset::Tiny, 3, &[sc], &Device::Cpu).expect("init");
            for (name, w) in &initial.weights {
                let same = (w - &trained.weights[name])
                    .and_then(|d| d.abs())
                    .and_then(|d| d.max_all())
                    .and_then(|d| d.to_scalar::<f32>())
                    .expect("diff")
                    == 0.0;
                assert_eq!(same, !name.starts_with("value_head"), "{name}");
            }
        }
        if files.len() == 4 && files[1].contains('/') {
            // The two models learned apart.
            let a = std::fs::read(split.join("checkpoints/iter_4").join(files[0]));
            let b = std::fs::read(split.join("checkpoints/iter_4").join(files[2]));
            assert!(
                a.expect("a") != b.expect("b"),
                "the two models are identical"
            );
            if sharing == Sharing::RoleLora {
                // A checkpoint without one of its adapters is not resumed from.
                std::fs::remove_dir_all(split.join("checkpoints/iter_4/adapters/player_b"))
                    .expect("rm");
                let more = resume_config(&split, Some(5)).expect("config");
                let err = train(&more, |_| {}).expect_err("no adapter").to_string();
                assert!(
                    err.contains("adapters/player_b/adapter_model.safetensors: missing"),
                    "{err}"
                );
            }
            continue;
        }
        // A finished run is not resumed past its end, and a full folder is not reused;
        // neither touches what is there.
        let before = std::fs::read(split.join("metrics.jsonl")).expect("metrics");
        let done = resume_config(&split, None).expect("config");
        let err = train(&done, |_| {}).expect_err("finished").to_string();
        assert!(err.contains("4 of 4"), "{err}");
        let err = train(&base("split", 1), |_| {})
            .expect_err("refused")
            .to_string();
        assert!(err.contains("not empty"), "{err}");
        assert_eq!(
            std::fs::read(split.join("metrics.jsonl")).expect("metrics"),
            before
        );
    }
}

/// CORY's observer reads the pioneer's choice of the same step; the pioneer reads none.
#[test]
fn the_cory_observer_reads_the_pioneers_action() {
    use emergence::core::{Action, Agent, DecisionTrace};
    use emergence::headless::{RunConfig, build_app};
    use emergence::policy::PolicyFactory;
    use emergence::policy::lm::{LmPolicy, ModelSource};
    use emergence::train::cory::CoryPolicy;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let sc = load_scene(&scene("coordination.scene.ron")).expect("scene");
    let pioneer = Arc::new(AtomicUsize::new(1));
    let p = pioneer.clone();
    let mut run = RunConfig::new(sc.clone());
    run.arenas = 3;
    run.policies.push((
        "lm".into(),
        PolicyFactory(Arc::new(move || {
            let copy = || {
                LmPolicy::new(
                    ModelSource::Embedded {
                        preset: Preset::Tiny,
                        seed: 3,
                    },
                    Device::Cpu,
                )
            };
            Box::new(CoryPolicy::new([copy(), copy()], p.clone()))
        })),
    ));
    let mut app = build_app(&run).expect("app");
    let folder = ModelFolder::init(Preset::Tiny, 3, &[sc], &Device::Cpu).expect("init");
    let words = ["left", "right"];
    for pioneer_slot in [1u16, 0] {
        pioneer.store(usize::from(pioneer_slot), Ordering::Relaxed);
        app.update();
        let world = app.world_mut();
        let mut q = world.query::<(&Agent, &Action, &DecisionTrace)>();
        let rows: Vec<(Agent, u8, Vec<u32>)> = q
            .iter(world)
            .map(|(a, act, t)| (*a, act.0, t.tokens.clone()))
            .collect();
        for arena in 0..3 {
            let get = |slot: u16| {
                rows.iter()
                    .find(|r| r.0.arena == arena && r.0.slot == slot)
                    .expect("agent")
            };
            let (pio, obs) = (get(pioneer_slot), get(1 - pioneer_slot));
            let tail = encode(
                &folder.tokenizer,
                &format!("ally said {}", words[usize::from(pio.1)]),
            )
            .expect("encode");
            assert!(obs.2.ends_with(&tail), "observer reads {:?}", obs.2);
            let said = encode(&folder.tokenizer, "said").expect("said")[0];
            assert!(!pio.2.contains(&said), "the pioneer reads no one");
        }
    }
}

#[test]
fn a_scene_carries_training_defaults_and_a_typo_in_them_is_located() {
    use emergence::load::parse_scene;
    let text = std::fs::read_to_string(scene("prisoners_dilemma.scene.ron")).expect("scene");
    let with = text.replacen(
        "    teams:",
        "    train: (algo: magrpo, group_size: 4, lr: 0.002, sharing: role_lora),\n    teams:",
        1,
    );
    let parsed = parse_scene(&with, Path::new("pd.scene.ron")).expect("parses");
    assert_eq!(parsed.spec.train.algo, Some(Algo::Magrpo));
    assert_eq!(parsed.spec.train.group_size, Some(4));
    assert_eq!(parsed.spec.train.lr, Some(0.002));
    assert_eq!(parsed.spec.train.sharing, Some(Sharing::RoleLora));
    let bad = text.replacen(
        "    teams:",
        "    train: (algo: magrpo, grup_size: 4),\n    teams:",
        1,
    );
    let err = parse_scene(&bad, Path::new("pd.scene.ron"))
        .expect_err("typo")
        .to_string();
    assert!(
        err.contains("pd.scene.ron:") && err.contains("grup_size"),
        "{err}"
    );
}

/// The tiny language model (seed 3) set up for the coordination scene, and the handle a
/// [`emergence::train::Trainer`] trains it through (the app keeps the policy alive).
fn tiny_lm_handle() -> (emergence::policy::lm::TrainHandle, impl Sized) {
    use emergence::policy::lm::{ModelSource, TrainHandle};
    let handle = TrainHandle::default();
    let mut run = emergence::headless::RunConfig::new(
        load_scene(&scene("coordination.scene.ron")).expect("scene"),
    );
    run.policies.push((
        "lm".into(),
        emergence::policy::lm::LmPolicy::factory(
            ModelSource::Embedded {
                preset: Preset::Tiny,
                seed: 3,
            },
            candle_core::Device::Cpu,
            Some(handle.clone()),
        ),
    ));
    let app = emergence::headless::build_app(&run).expect("app sets the policy up");
    (handle, app)
}

/// A decision between two legal actions that chose the first with log-probability
/// `logprob`, and got `reward`.
fn two_action_step(logprob: f32, reward: f32) -> emergence::train::Step {
    emergence::train::Step {
        tokens: vec![5, 6, 7],
        encoded: Default::default(),
        global: Default::default(),
        legal: vec![true, true],
        action: 0,
        logprob,
        said: None,
        said_logprob: 0.0,
        value: 0.0,
        reward,
        memory: Vec::new(),
        read: None,
    }
}

/// Every trainable tensor's values.
fn weights(t: &emergence::train::Trainer) -> Vec<Vec<f32>> {
    t.vars()
        .iter()
        .map(|v| {
            v.as_tensor()
                .flatten_all()
                .and_then(|x| x.to_vec1())
                .expect("weights")
        })
        .collect()
}

/// A non-finite loss skips its gradient step (counted) and leaves every weight as it was.
#[test]
fn a_non_finite_loss_skips_the_step_and_keeps_the_weights() {
    use emergence::train::{Batch, Trainer, Trajectory};
    use rand::SeedableRng;

    let (handle, _app) = tiny_lm_handle();
    let mut trainer =
        Trainer::new(&handle, Algo::Reinforce, Hyper::default(), &Device::Cpu).expect("trainer");
    let before = weights(&trainer);
    let step = |reward: f32| two_action_step(-0.7, reward);
    let batch = Batch {
        trajectories: vec![Trajectory {
            steps: vec![step(f32::NAN), step(1.0)],
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let stats = trainer.update(&batch, &mut rng).expect("update");
    assert_eq!((stats.steps, stats.skipped), (0, 1));
    assert!(weights(&trainer) == before, "weights changed");
    // The same batch with a finite reward does step.
    let batch = Batch {
        trajectories: vec![Trajectory {
            steps: vec![step(0.0), step(1.0)],
            ..Default::default()
        }],
        ..Default::default()
    };
    let stats = trainer.update(&batch, &mut rng).expect("update");
    assert_eq!((stats.steps, stats.skipped), (1, 0));
    assert!(weights(&trainer) != before, "weights did not move");
    // Skipped steps one after another stop the run, saying why.
    let broken = Batch {
        trajectories: vec![Trajectory {
            steps: vec![step(f32::NAN)],
            ..Default::default()
        }],
        ..Default::default()
    };
    for _ in 1..emergence::train::trainer::MAX_SKIPPED_IN_A_ROW {
        let stats = trainer
            .update(&broken, &mut rng)
            .expect("skipped, not stopped");
        assert_eq!(stats.skip_reason.as_deref(), Some("the loss is NaN"));
    }
    let err = trainer.update(&broken, &mut rng).expect_err("stopped");
    assert!(
        matches!(
            &err,
            emergence::train::TrainError::Update(emergence::train::UpdateError::Stopped {
                count: emergence::train::trainer::MAX_SKIPPED_IN_A_ROW,
                reason,
            }) if reason == "the loss is NaN"
        ),
        "{err:?}"
    );
    let err = err.to_string();
    assert!(
        err.contains("gradient steps in a row were skipped (the loss is NaN)"),
        "{err}"
    );
}

/// `target_kl` (Stable-Baselines3's early stopping): a step whose minibatch's approximate KL
/// between the acting and the current policy passes 1.5 times the target is not taken, nor
/// any after it in that update; without a target every pass makes every step.
#[test]
fn an_update_stops_at_the_first_step_past_the_target_kl() {
    use emergence::train::{Batch, Trainer, Trajectory};
    use rand::SeedableRng;

    let (handle, _app) = tiny_lm_handle();
    // The acting policy gave each chosen action probability e^-3; the tiny model's is about
    // 1/2, so the first minibatch's approximate KL is far from 0.
    let step = |reward: f32| two_action_step(-3.0, reward);
    let batch = Batch {
        trajectories: (0..4)
            .map(|k| Trajectory {
                steps: vec![step(k as f32), step(1.0)],
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let hyper = |target_kl: f64| Hyper {
        minibatch: 2,
        epochs: 3,
        target_kl,
        ..Hyper::for_algo(Algo::Ippo)
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    // Off: 3 passes of 4 minibatches of 2 decisions.
    let mut t = Trainer::new(&handle, Algo::Ippo, hyper(0.0), &Device::Cpu).expect("trainer");
    let stats = t.update(&batch, &mut rng).expect("update");
    assert_eq!((stats.steps, stats.kl_stop_epoch), (12, None));
    // A target the first minibatch already passes: no step at all, the weights as they were.
    let mut t = Trainer::new(&handle, Algo::Ippo, hyper(1e-3), &Device::Cpu).expect("trainer");
    let before = weights(&t);
    let stats = t.update(&batch, &mut rng).expect("update");
    assert_eq!(
        (stats.steps, stats.skipped, stats.kl_stop_epoch),
        (0, 0, Some(1))
    );
    assert!(weights(&t) == before, "a step past the target was taken");
    let row = serde_json::to_value(&stats).expect("json");
    assert_eq!(row["kl_stop_epoch"], 1, "{row}");
    // A target this batch never reaches: every step, as without one.
    let mut t = Trainer::new(&handle, Algo::Ippo, hyper(1e6), &Device::Cpu).expect("trainer");
    let stats = t.update(&batch, &mut rng).expect("update");
    assert_eq!((stats.steps, stats.kl_stop_epoch), (12, None));
}

/// Weights holding NaN are refused where they load, naming the file, the tensor and the
/// entry: a model folder, an mlp, a checkpoint's optimizer moments (so a resume cannot
/// write an all-NaN model). Weights that go bad during a run stop it at the next decision,
/// naming the model, instead of playing action 0 for ever.
#[test]
fn weights_that_are_not_numbers_are_refused_where_they_load_and_stop_a_run() {
    use emergence::headless::{RunConfig, run};
    use emergence::policy::PolicyFactory;
    use emergence::policy::mlp::{MlpHandle, MlpNet, MlpPolicy};
    use std::sync::Arc;
    let dir = tempfile::tempdir().expect("tmp");
    let sc = load_scene(&scene("coordination.scene.ron")).expect("scene");
    // A model folder with one NaN.
    let folder =
        ModelFolder::init(Preset::Tiny, 3, std::slice::from_ref(&sc), &Device::Cpu).expect("init");
    let model = dir.path().join("model");
    folder.save(&model).expect("save");
    let wpath = model.join("model.safetensors");
    let mut map = candle_core::safetensors::load(&wpath, &Device::Cpu).expect("load");
    let name = "model.layers.0.mlp.up_proj.weight";
    let mut w: Vec<f32> = map[name]
        .flatten_all()
        .and_then(|t| t.to_vec1())
        .expect("w");
    w[5] = f32::NAN;
    let shape = map[name].shape().clone();
    map.insert(
        name.into(),
        Tensor::from_vec(w, shape, &Device::Cpu).expect("t"),
    );
    candle_core::safetensors::save(&map, &wpath).expect("save");
    let err = ModelFolder::load(&model, &Device::Cpu)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains("model.safetensors: tensor `model.layers.0.mlp.up_proj.weight` holds NaN at flat index 5"),
        "{err}"
    );

    // An mlp whose weights went bad mid-run: the run stops at its next decision.
    let pd = load_scene(&scene("prisoners_dilemma.scene.ron")).expect("scene");
    let handle = MlpHandle::default();
    let mut cfg = RunConfig::new(pd.clone());
    for a in &mut cfg.scene.agents {
        a.policy = "mlp".into();
    }
    let h = handle.clone();
    cfg.policies.push((
        "mlp".into(),
        PolicyFactory(Arc::new(move || {
            Box::new(MlpPolicy::with_handle(0, Device::Cpu, h.clone()))
        })),
    ));
    run(&cfg, |_| {}).expect("a sound network plays");
    let net: MlpNet = handle.net().expect("the network it built");
    for (_, v) in net.vars() {
        v.set(&(v.as_tensor() * f64::NAN).expect("nan"))
            .expect("set");
    }
    let err = run(&cfg, |_| {}).expect_err("stopped").to_string();
    assert!(
        err.contains("not a distribution") && err.contains("NaN"),
        "{err}"
    );

    // A checkpoint whose optimizer moments hold NaN is not resumed.
    let mut tc = config(
        "prisoners_dilemma.scene.ron",
        Algo::Ippo,
        2,
        4,
        &dir.path().join("run"),
    );
    tc.learner = LearnerKind::Mlp;
    tc.hyper = Hyper::for_learner(Algo::Ippo, LearnerKind::Mlp);
    tc.checkpoint_every = 1;
    train(&tc, |_| {}).expect("train");
    let opath = dir
        .path()
        .join("run/checkpoints/iter_2/optimizer.safetensors");
    let mut moments = candle_core::safetensors::load(&opath, &Device::Cpu).expect("load");
    let key = moments
        .keys()
        .find(|k| k.starts_with("exp_avg_sq."))
        .expect("a moment")
        .clone();
    let bad = (&moments[&key] * f64::NAN).expect("nan");
    moments.insert(key.clone(), bad);
    candle_core::safetensors::save(&moments, &opath).expect("save");
    let resumed = resume_config(&dir.path().join("run"), Some(3)).expect("config");
    let err = train(&resumed, |_| {}).expect_err("refused").to_string();
    assert!(
        err.contains(&format!("tensor {key} holds NaN at flat index 0")),
        "{err}"
    );
}

/// A policy that values every state at its step number (and moves nowhere), so a test can
/// tell which state a value belongs to.
struct ValueIsStep;

impl emergence::policy::Policy for ValueIsStep {
    fn decide(&mut self, batch: &mut [emergence::policy::Decision<'_>]) {
        for d in batch.iter_mut() {
            d.action.0 = 0;
            d.trace.value = Some(d.obs.step as f32);
        }
    }
}

/// A truncated episode's trajectory carries the value of the state after its last step,
/// observed while its arena waits for the update (not the value before the last step); a
/// terminated one carries none.
#[test]
fn a_truncated_trajectory_carries_the_value_after_its_last_step() {
    use emergence::core::Arenas;
    use emergence::headless::{RunConfig, build_app_with};
    use emergence::train::{Rollouts, TrainPlugin};

    for (scene_name, truncated) in [
        ("commons_harvest_open.scene.ron", true),
        ("prisoners_dilemma.scene.ron", false),
    ] {
        let mut sc = load_scene(&scene(scene_name)).expect("scene");
        if truncated {
            sc.spec.episode.max_steps = 4;
        }
        for a in &mut sc.agents {
            a.policy = "probe".into();
        }
        let mut run = RunConfig::new(sc);
        run.arenas = 2;
        run.episodes = 2;
        run.policies.push((
            "probe".into(),
            emergence::policy::PolicyFactory(std::sync::Arc::new(|| Box::new(ValueIsStep))),
        ));
        let mut app = build_app_with(&run, |app| {
            app.add_plugins(TrainPlugin {
                learner: "probe".into(),
                global: false,
                features: false,
            });
        })
        .expect("app");
        app.world_mut().resource_mut::<Arenas>().gate = Some(1);
        assert!(app.world().resource::<Rollouts>().policy.is_some());
        while !app.world().resource::<Rollouts>().complete(0, 0..2) {
            app.update();
        }
        assert_eq!(
            app.world().resource::<Rollouts>().missing_bootstrap(0),
            truncated,
            "{scene_name}"
        );
        app.update();
        let batch = app.world_mut().resource_mut::<Rollouts>().take(0);
        assert!(!batch.trajectories.is_empty());
        for tr in &batch.trajectories {
            let last = tr.steps.last().expect("steps").value;
            if truncated {
                assert_eq!(tr.steps.len(), 4, "{scene_name}");
                assert!(!tr.terminated);
                // Decided at steps 0..3; the state after the last step is step 4.
                assert_eq!((last, tr.bootstrap), (3.0, Some(4.0)), "{scene_name}");
            } else {
                assert!(tr.terminated, "{scene_name}");
                assert_eq!(tr.bootstrap, None, "{scene_name}");
            }
        }
    }
}

/// Settings that cannot work are refused before any episode is played, with the reason.
#[test]
fn impossible_training_settings_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().expect("tmp");
    let pd = "prisoners_dilemma.scene.ron";
    let refused = |cfg: TrainConfig| train(&cfg, |_| {}).expect_err("refused").to_string();
    // A leave-one-out baseline needs another rollout of the same start.
    let cfg = config(pd, Algo::AdvantageAlignment, 2, 4, &dir.path().join("a"));
    assert!(refused(cfg).contains("at least 2 arenas"));
    // Each learner is shaped by the others in its arena: they must share an update.
    let mut cfg = config(pd, Algo::AdvantageAlignment, 2, 4, &dir.path().join("b"));
    cfg.hyper.group_size = 2;
    cfg.sharing = Sharing::Separate;
    assert!(refused(cfg).contains("--sharing separate"));
    // A partner that does not play the family, and two partners with one label.
    let mut cfg = config(pd, Algo::Reinforce, 2, 4, &dir.path().join("c"));
    cfg.eval_against = vec!["seeker".into()];
    assert!(refused(cfg).contains("does not play Matrix"));
    let (m1, m2) = (dir.path().join("x/m"), dir.path().join("y/m"));
    std::fs::create_dir_all(&m1).expect("m1");
    std::fs::create_dir_all(&m2).expect("m2");
    let mut cfg = config(pd, Algo::Reinforce, 2, 4, &dir.path().join("d"));
    cfg.eval_against = vec![
        format!("lm:{}", m1.display()),
        format!("lm:{}", m2.display()),
    ];
    assert!(refused(cfg).contains("both named lm_m"));
    // CORY's copies decide as a pair.
    let mut cfg = config(
        "coordination.scene.ron",
        Algo::Cory,
        2,
        4,
        &dir.path().join("e"),
    );
    cfg.eval_against = vec!["always_defect".into()];
    assert!(refused(cfg).contains("cory's copies"));
    // A language model decides and trains on the same buffers: no overlap.
    let mut cfg = config(pd, Algo::Ippo, 2, 4, &dir.path().join("o"));
    cfg.overlap = true;
    assert!(refused(cfg).contains("use --learner mlp or gru"));
    // The mlp has no prompt for cory's observer and no layers for LoRA.
    let mut cfg = config(pd, Algo::Cory, 2, 4, &dir.path().join("f"));
    cfg.learner = LearnerKind::Mlp;
    assert!(refused(cfg).contains("--learner lm"));
    let mut cfg = config(pd, Algo::Ippo, 2, 4, &dir.path().join("g"));
    cfg.learner = LearnerKind::Mlp;
    cfg.sharing = Sharing::RoleLora;
    assert!(refused(cfg).contains("LoRA adapters adapt a language model"));
    // Nothing was written for any of them.
    for d in ["a", "b", "c", "d", "e", "f", "g"] {
        assert!(!dir.path().join(d).exists(), "{d}");
    }
}

/// MAPPO's critic reads each family's true global state ([`GlobalView`]), written only while
/// a run asks for it: the whole map with every agent on it, whatever the agents themselves
/// can see, and the same shared numbers for every agent of an arena.
#[test]
fn each_family_writes_its_true_global_state_for_the_critic() {
    use emergence::core::{Agent, CentralState, GlobalView, Observation};
    use emergence::headless::{RunConfig, build_app};
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // (scene, map cells, code of the agent itself, codes of every other agent)
    let hns = (
        emergence::envs::hide_and_seek::view::SELF,
        vec![
            emergence::envs::hide_and_seek::view::TEAMMATE,
            emergence::envs::hide_and_seek::view::OPPONENT,
        ],
    );
    let grid = (
        emergence::envs::dilemma::view::SELF,
        vec![
            emergence::envs::dilemma::view::TEAMMATE,
            emergence::envs::dilemma::view::OTHER,
        ],
    );
    let maze = (
        emergence::envs::maze::view::SELF,
        vec![emergence::envs::maze::view::TEAMMATE],
    );
    for (path, (me, others)) in [
        ("scenes/hide_and_seek/open_field.scene.ron", hns),
        ("scenes/dilemma/commons_harvest_open.scene.ron", grid),
        ("scenes/maze/split_view.scene.ron", maze),
        ("scenes/dilemma/prisoners_dilemma.scene.ron", (0, vec![])),
    ] {
        let sc = load_scene(&root.join(path)).expect("scene");
        let cells = (sc.width * sc.height) as usize;
        let mut run = RunConfig::new(sc.clone());
        run.arenas = 2;
        run.seed = 5;
        let mut off = build_app(&run).expect("app");
        let mut app = build_app(&run).expect("app");
        app.insert_resource(CentralState);
        for _ in 0..3 {
            app.update();
            off.update();
        }
        let world = off.world_mut();
        let mut q = world.query::<&GlobalView>();
        assert!(
            q.iter(world)
                .all(|g| g.0.cells.is_empty() && g.0.dense.is_empty()),
            "{path}: written without a critic"
        );
        let world = app.world_mut();
        let mut q = world.query::<(
            &Agent,
            &GlobalView,
            &Observation,
            Option<&emergence::envs::dilemma::matrix::MatrixSenses>,
        )>();
        let mut rows: Vec<(Agent, GlobalView, Observation, Option<_>)> = q
            .iter(world)
            .map(|(a, g, o, m)| (*a, g.clone(), o.clone(), m.cloned()))
            .collect();
        rows.sort_by_key(|(a, ..)| (a.arena, a.slot));
        let n = sc.agents.len();
        assert_eq!(rows.len(), 2 * n, "{path}");
        for (agent, g, obs, matrix) in &rows {
            assert!(!g.0.dense.is_empty(), "{path}: no state for {agent:?}");
            if others.is_empty() {
                // Perfect information: the state is the player's own observation (both
                // players' rounds, from its side).
                let mut e = emergence::core::Encoded::default();
                let senses = emergence::envs::senses::Senses {
                    matrix: matrix.as_ref(),
                    ..Default::default()
                };
                emergence::envs::senses::encode(obs, senses, &mut e);
                assert_eq!(g.0, e, "{path}");
                continue;
            }
            // Every arena-mate's row shares the numbers (positions, step, phase).
            let first = &rows[agent.arena as usize * n].1;
            assert_eq!(g.0.dense, first.0.dense, "{path}: {agent:?}");
            assert_eq!(g.0.cells.len(), cells, "{path}: the whole map");
            assert_eq!(
                g.0.cells.iter().filter(|&&c| c == me).count(),
                1,
                "{path}: {agent:?} drawn once"
            );
            let drawn = g.0.cells.iter().filter(|c| others.contains(c)).count();
            assert_eq!(drawn, n - 1, "{path}: {agent:?} sees every other agent");
        }
        if path.contains("split_view") {
            // Each agent knows half the maze; the state holds all of it, exit included.
            let exit = emergence::envs::maze::view::EXIT;
            for (agent, g, obs, _) in &rows {
                assert!(g.0.cells.contains(&exit), "{agent:?}");
                assert!(obs.map.iter().filter(|&&c| c & 0x0f == 0).count() > 0);
            }
        }
    }
}

/// In a family with talk the word said is part of the decision: an update credits it with
/// the decision's advantage, so the word that went with good outcomes becomes likelier
/// (silence too), while the action's probabilities follow their own credit.
#[test]
fn the_word_said_is_part_of_the_decision_and_learns() {
    use emergence::core::Encoded;
    use emergence::policy::mlp::{MlpHandle, MlpNet};
    use emergence::train::{Batch, Step, Trainer, Trajectory};
    use rand::SeedableRng;
    let row = Encoded {
        cells: vec![1, 2, 3],
        dense: vec![0.5, -0.5],
    };
    let net = MlpNet::with_words(3, 2, 5, 4, 9, &Device::Cpu).expect("net");
    let handle = MlpHandle::default();
    handle.set(net.clone());
    let hyper = Hyper {
        lr: 0.01,
        entropy_coef: 0.0,
        ..Hyper::default()
    };
    let mut trainer =
        Trainer::new_mlp(&handle, 5, Algo::Reinforce, hyper, 9, &Device::Cpu).expect("trainer");
    let probs = |net: &MlpNet| -> (Vec<f32>, Vec<f32>) {
        let h = net.heads(&[&row]).expect("heads");
        let p = |t: Tensor| -> Vec<f32> {
            candle_nn::ops::softmax(&t, D::Minus1)
                .and_then(|p| p.squeeze(0))
                .and_then(|p| p.to_vec1())
                .expect("p")
        };
        (p(h.logits), p(h.words.expect("a talk head")))
    };
    let (a0, w0) = probs(&net);
    assert_eq!(w0.len(), 5, "silence and four words");
    // Action 1 with word 3 (choice 4) paid; action 1 with silence (choice 0) cost.
    let step = |said: u8, reward: f32| Step {
        tokens: vec![],
        encoded: row.clone(),
        global: Default::default(),
        legal: vec![true; 5],
        action: 1,
        logprob: a0[1].ln(),
        said: Some(said),
        said_logprob: w0[usize::from(said)].ln(),
        value: 0.0,
        reward,
        memory: Vec::new(),
        read: None,
    };
    let trajectories = (0..8)
        .map(|k| Trajectory {
            arena: k,
            steps: vec![if k % 2 == 0 {
                step(4, 1.0)
            } else {
                step(0, -1.0)
            }],
            terminated: true,
            ..Default::default()
        })
        .collect();
    let batch = Batch {
        trajectories,
        slots: 1,
        ..Default::default()
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    for _ in 0..5 {
        trainer.update(&batch, &mut rng).expect("update");
    }
    let (a1, w1) = probs(&net);
    assert!(
        w1[4] > w0[4] + 0.05,
        "the paid word: {} -> {}",
        w0[4],
        w1[4]
    );
    assert!(
        w1[0] < w0[0] - 0.05,
        "the costly silence: {} -> {}",
        w0[0],
        w1[0]
    );
    // The action was taken with both words, one good and one bad: its credit cancels.
    assert!((a1[1] - a0[1]).abs() < 0.05, "{} -> {}", a0[1], a1[1]);
}

/// The language model's word is part of its decision too: after its action it says
/// silence (`<eos>`) or a word, and an update moves that choice by the decision's credit
/// (scored after the prompt, the action and `say`, as the policy samples it).
#[test]
fn the_language_models_word_is_part_of_its_decision_and_learns() {
    use emergence::core::{DecisionTrace, Utterance};
    use emergence::headless::{RunConfig, build_app};
    use emergence::policy::lm::{Decoder, Lora, ModelSource, TrainHandle};
    use emergence::train::{Batch, Step, Trainer, Trajectory};
    use rand::SeedableRng;

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sc = load_scene(&root.join("scenes/maze/corridor_pair.scene.ron")).expect("scene");
    for a in &mut sc.agents {
        a.policy = "lm".into();
    }
    let handle = TrainHandle::default();
    let mut run = RunConfig::new(sc);
    run.arenas = 2;
    run.policies.push((
        "lm".into(),
        emergence::policy::lm::LmPolicy::factory(
            ModelSource::Embedded {
                preset: Preset::Tiny,
                seed: 3,
            },
            candle_core::Device::Cpu,
            Some(handle.clone()),
        ),
    ));
    let mut app = build_app(&run).expect("app");
    app.update();
    // A real decision: its prompt, its action, what it said.
    let world = app.world_mut();
    let mut q = world.query::<(&DecisionTrace, &emergence::core::Action, &Utterance)>();
    let (trace, action, said) = q
        .iter(world)
        .map(|(t, a, u)| (t.clone(), a.0, *u))
        .next()
        .expect("an agent");
    let choice = trace.said.expect("the word is recorded as a choice");
    assert_eq!(said.0, choice.checked_sub(1), "choice 0 is silence");
    let (choices, say, action_ids, cfg) = handle
        .with(|t| {
            (
                t.talk.clone().expect("single-token words with silence"),
                t.talk.clone().expect("talk").1,
                t.actions.clone(),
                t.config.clone(),
            )
        })
        .expect("set up");
    let (choices, _) = choices;
    let probs = || -> Vec<f32> {
        let weights = handle
            .with(|t| {
                t.vars
                    .iter()
                    .map(|(n, v)| (n.clone(), v.as_tensor().detach()))
                    .collect()
            })
            .expect("weights");
        let dec = Decoder::new(&cfg, &weights, Path::new("mem")).expect("decoder");
        let mut p = trace.tokens.clone();
        p.extend(&action_ids[usize::from(action)]);
        p.extend(&say);
        let h = dec.last_hidden(&[p], 0, Fwd::Fast, Lora::Base).expect("h");
        let lp = candle_nn::ops::log_softmax(&dec.head(&h).expect("head"), 1).expect("lp");
        let ids = Tensor::new(choices.as_slice(), &Device::Cpu).expect("ids");
        candle_nn::ops::softmax(&lp.index_select(&ids, 1).expect("pick"), 1)
            .and_then(|p| p.squeeze(0))
            .and_then(|p| p.to_vec1())
            .expect("p")
    };
    let before = probs();
    let word = 3u8;
    let hyper = Hyper {
        lr: 3e-3,
        entropy_coef: 0.0,
        ..Hyper::default()
    };
    let mut trainer = Trainer::new(&handle, Algo::Reinforce, hyper, &Device::Cpu).expect("t");
    let step = |said: u8, reward: f32| Step {
        tokens: trace.tokens.clone(),
        encoded: Default::default(),
        global: Default::default(),
        legal: vec![true; action_ids.len()],
        action,
        logprob: trace.logprob,
        said: Some(said),
        said_logprob: before[usize::from(said)].ln(),
        value: 0.0,
        reward,
        memory: Vec::new(),
        read: None,
    };
    let batch = Batch {
        trajectories: (0..8)
            .map(|k| Trajectory {
                arena: k,
                steps: vec![if k % 2 == 0 {
                    step(word, 1.0)
                } else {
                    step(0, -1.0)
                }],
                terminated: true,
                ..Default::default()
            })
            .collect(),
        slots: 1,
        ..Default::default()
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    for _ in 0..3 {
        trainer.update(&batch, &mut rng).expect("update");
    }
    let after = probs();
    let w = usize::from(word);
    assert!(
        after[w] > before[w] + 0.02,
        "the paid word: {} -> {}",
        before[w],
        after[w]
    );
    assert!(
        after[0] < before[0] - 0.02,
        "the costly silence: {} -> {}",
        before[0],
        after[0]
    );
}

/// A run's config.json holds every setting in the one settings type (the flags', the scene
/// block's), the resumed run reads back exactly the hyper-parameters it started with, and a
/// resume that extends the run records its new total; a config.json written before the
/// settings had one type still resumes.
#[test]
fn config_json_holds_every_setting_and_follows_a_resume() {
    use emergence::train::{RunFile, RunFileError, TrainError, TrainSettings};
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("run");
    let mut cfg = config("prisoners_dilemma.scene.ron", Algo::Ippo, 2, 4, &out);
    cfg.learner = LearnerKind::Mlp;
    cfg.hyper = Hyper {
        clip: 0.3,
        value_coef: 0.25,
        max_grad_norm: 0.5,
        weight_decay: 0.01,
        lr_final_frac: 0.5,
        group_std: false,
        ..Hyper::for_learner(Algo::Ippo, LearnerKind::Mlp)
    };
    cfg.checkpoint_every = 1;
    train(&cfg, |_| {}).expect("train");
    let read = |p: &Path| -> RunFile {
        serde_json::from_str(&std::fs::read_to_string(p.join("config.json")).expect("read"))
            .expect("config.json is a RunFile")
    };
    let file = read(&out);
    assert_eq!(file.settings, TrainSettings::of_run(&cfg));
    assert!(
        serde_json::to_value(&file.settings)
            .expect("json")
            .as_object()
            .expect("object")
            .values()
            .all(|v| !v.is_null()),
        "every setting is given: {:?}",
        file.settings
    );
    assert_eq!(file.settings.model.as_deref(), Some("tiny"));
    let resumed = resume_config(&out, Some(3)).expect("resume");
    assert_eq!(resumed.hyper, cfg.hyper);
    assert_eq!(
        (resumed.algo, resumed.learner, resumed.arenas, resumed.seed),
        (cfg.algo, cfg.learner, cfg.arenas, cfg.seed)
    );
    train(&resumed, |_| {}).expect("resumed");
    assert_eq!(read(&out).settings.iterations, Some(3));
    let again = resume_config(&out, None).expect("config");
    let err = train(&again, |_| {}).expect_err("done");
    assert!(
        matches!(
            &err,
            TrainError::Folder(emergence::train::RunFolderError::Done {
                done: 3,
                iterations: 3,
                ..
            })
        ),
        "{err:?}"
    );
    let err = err.to_string();
    assert!(err.contains("done 3 of 3"), "{err}");

    // The format before: TrainConfig's own fields with a `hyper` block.
    let legacy = serde_json::json!({
        "scene_path": cfg.scene_path,
        "algo": "ippo",
        "iterations": 5,
        "arenas": 4,
        "seed": 3,
        "out": out,
        "model": {"Preset": "tiny"},
        "hyper": cfg.hyper,
        "sharing": "shared",
        "learner": "mlp",
        "threads": 1,
        "checkpoint_every": 1,
        "eval_every": 10
    });
    std::fs::write(out.join("config.json"), legacy.to_string()).expect("write");
    let old = resume_config(&out, None).expect("a legacy config.json resumes");
    assert_eq!((old.iterations, old.hyper.clone()), (5, cfg.hyper.clone()));

    // A setting left out, and a file cut short: typed errors naming the file and the field,
    // or the line and column.
    let mut value = serde_json::to_value(&file).expect("json");
    value["settings"]
        .as_object_mut()
        .expect("settings")
        .remove("iterations");
    std::fs::write(out.join("config.json"), value.to_string()).expect("write");
    let err = resume_config(&out, None).expect_err("a setting is missing");
    assert!(
        matches!(
            &err,
            TrainError::File(RunFileError::MissingSetting { path, field: "iterations" })
                if path.ends_with("config.json")
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("settings.iterations is missing"),
        "{err}"
    );
    std::fs::write(out.join("config.json"), "{\n  \"settings\": {").expect("write");
    let err = resume_config(&out, None).expect_err("cut short");
    assert!(
        matches!(&err, TrainError::File(RunFileError::Json { line: 2, .. })),
        "{err:?}"
    );
}

/// The experiment `emergence reproduce` tests run (the `mlp` learner on a 4-round
/// Prisoner's Dilemma written inline; the library's parser tests read it too).
const SMALL_EXPERIMENT: &str = include_str!("../data/small.experiment.ron");

/// An experiment's `report.json` without its timings.
fn experiment_report(out: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(out.join("report.json")).expect("report.json");
    let mut v: serde_json::Value = serde_json::from_str(&text).expect("json");
    v.as_object_mut().expect("object").remove("timing");
    v
}

/// `emergence reproduce` stopped after 2 of 4 iterations of every run, then run again, gives
/// the report of an uninterrupted invocation (timings aside); edited checks are recomputed
/// from the runs there; another scene, budget or seed count, or a foreign folder, is refused.
#[test]
fn an_interrupted_experiment_resumes_to_the_same_report_experiment_resumes_to_the_same_report() {
    let tmp = tempfile::tempdir().expect("tmp");
    let file = tmp.path().join("small.experiment.ron");
    std::fs::write(&file, SMALL_EXPERIMENT).expect("write");
    let exp = experiment::load(&file).expect("valid");
    let opts = |out: &str, stop_after| runner::Options {
        out: tmp.path().join(out),
        seeds: None,
        quick: false,
        iterations: None,
        threads: 2,
        stop_after,
        ranks: Default::default(),
        device: candle_core::Device::Cpu,
    };
    let whole = experiment::reproduce(&exp, &opts("whole", None), &|_| {}).expect("whole");
    assert_eq!(whole.outcome.kept, 0);
    for f in [
        "report.md",
        "report.json",
        "figures/curves.png",
        "figures/eval.png",
    ] {
        assert!(tmp.path().join("whole").join(f).is_file(), "{f}");
    }
    // Killed after 2 of 4 iterations of every run: no report yet.
    let e = experiment::reproduce(&exp, &opts("cut", Some(2)), &|_| {}).expect_err("stopped");
    assert!(e.to_string().contains("stopped early"), "{e}");
    assert!(!tmp.path().join("cut/report.json").exists());
    // Again: every run resumes from its checkpoint at iteration 2.
    let started = std::sync::Mutex::new(Vec::new());
    let resumed = experiment::reproduce(&exp, &opts("cut", None), &|e| {
        if let runner::Event::Started { done, .. } = e {
            started.lock().expect("lock").push(done);
        }
    })
    .expect("resumed");
    assert_eq!(resumed.outcome.resumed, 4);
    assert_eq!(started.into_inner().expect("lock"), [2, 2, 2, 2]);
    assert_eq!(
        experiment_report(&tmp.path().join("whole")),
        experiment_report(&tmp.path().join("cut"))
    );
    // Once more: every run is kept, the report is the same.
    let again = experiment::reproduce(&exp, &opts("cut", None), &|_| {}).expect("again");
    assert_eq!(again.outcome.kept, 4);
    assert_eq!(
        experiment_report(&tmp.path().join("whole")),
        experiment_report(&tmp.path().join("cut"))
    );
    // Edited checks: the report is recomputed from the runs there, none trained again.
    let edited = SMALL_EXPERIMENT.replace("\"self_play(ippo) >= 0\"", "\"self_play(ippo) >= 100\"");
    std::fs::write(&file, &edited).expect("write");
    let exp2 = experiment::load(&file).expect("valid");
    let redone = experiment::reproduce(&exp2, &opts("cut", None), &|_| {}).expect("edited checks");
    assert_eq!(redone.outcome.kept, 4);
    assert_eq!(redone.report.checks[0].verdict, "not reproduced");
    // Another scene is another set of runs: refused.
    let other_scene = SMALL_EXPERIMENT.replace("rounds: 4,", "rounds: 5,");
    std::fs::write(&file, &other_scene).expect("write");
    let exp3 = experiment::load(&file).expect("valid");
    let e = experiment::reproduce(&exp3, &opts("cut", None), &|_| {}).expect_err("other scene");
    assert!(e.to_string().contains("other scenes"), "{e}");
    // Another budget or another experiment in the same folder is refused, untouched.
    let mut other = opts("cut", None);
    other.quick = true;
    let e = experiment::reproduce(&exp, &other, &|_| {}).expect_err("other budget");
    assert!(e.to_string().contains("full budget"), "{e}");
    let mut other = opts("cut", None);
    other.seeds = Some(3);
    let e = experiment::reproduce(&exp, &other, &|_| {}).expect_err("other seeds");
    assert!(e.to_string().contains("seeds [1, 2]"), "{e}");
    // A folder that is not an experiment's is refused.
    std::fs::create_dir_all(tmp.path().join("busy")).expect("dir");
    std::fs::write(tmp.path().join("busy/notes.txt"), "mine").expect("file");
    let e = experiment::reproduce(&exp, &opts("busy", None), &|_| {}).expect_err("busy");
    assert!(e.to_string().contains("holds no plan.json"), "{e}");
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("busy/notes.txt")).expect("kept"),
        "mine"
    );
}

/// The names of the threads `emergence ARGS` ran, sampled every 10 ms from
/// `/proc/PID/task` until it ended (it must succeed).
#[cfg(target_os = "linux")]
fn thread_names(args: &[&str]) -> std::collections::BTreeSet<String> {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_emergence"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the binary runs");
    let tasks = PathBuf::from(format!("/proc/{}/task", child.id()));
    let mut names = std::collections::BTreeSet::new();
    loop {
        if let Ok(entries) = std::fs::read_dir(&tasks) {
            for e in entries.flatten() {
                if let Ok(name) = std::fs::read_to_string(e.path().join("comm")) {
                    names.insert(name.trim().to_string());
                }
            }
        }
        if let Some(status) = child.try_wait().expect("wait") {
            assert!(status.success(), "emergence {args:?} failed");
            return names;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// `--threads` bounds candle's own element-wise pool too (its workers, `candle-bp-*`, spin
/// between operations): none with `--threads 1`, while the same run without the flag starts
/// them where candle counts several cores (so the probe sees them when they are there).
#[cfg(target_os = "linux")]
#[test]
fn threads_bounds_candles_own_pool() {
    let dir = tempfile::tempdir().expect("tmp");
    let scene = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenes/dilemma/coordination.scene.ron");
    let run = |name: &str, extra: &[&str]| {
        let out = dir.path().join(name);
        let mut args = vec![
            "train",
            scene.to_str().expect("utf-8"),
            "--algo",
            "reinforce",
            "--iterations",
            "3",
            "--arenas",
            "16",
            "--seed",
            "3",
            "--out",
            out.to_str().expect("utf-8"),
        ];
        args.extend(extra);
        thread_names(&args)
    };
    let candle = |names: &std::collections::BTreeSet<String>| {
        names.iter().filter(|n| n.starts_with("candle-bp")).count()
    };
    let bounded = run("one", &["--threads", "1"]);
    assert_eq!(candle(&bounded), 0, "--threads 1 ran {bounded:?}");
    // candle sizes its pool by the cores it counts (physical ones, or an affinity mask), one
    // worker fewer than them: on a machine where it counts one, there is nothing to see.
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() && candle_core::utils::get_num_threads() > 1
    {
        let free = run("all", &[]);
        assert!(
            candle(&free) > 0,
            "no candle worker seen without --threads: {free:?}"
        );
    }
}

#[test]
fn each_step_encodes_the_observations_once_where_a_policy_reads_them() {
    use emergence::core::{Features, Idle, Observation};
    use emergence::envs::senses::{Senses, encode};
    use emergence::headless::{RunConfig, build_app};
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for path in [
        "scenes/hide_and_seek/quadrant.scene.ron",
        "scenes/dilemma/commons_harvest_open.scene.ron",
        "scenes/maze/split_view.scene.ron",
        "scenes/dilemma/prisoners_dilemma.scene.ron",
    ] {
        let sc = load_scene(&root.join(path)).expect("scene");
        for reads in [true, false] {
            let mut sc = sc.clone();
            for a in &mut sc.agents {
                a.policy = if reads { "mlp" } else { "random" }.into();
            }
            let mut run = RunConfig::new(sc);
            run.arenas = 3;
            run.seed = 5;
            let mut app = build_app(&run).expect("app");
            for _ in 0..4 {
                app.update();
            }
            let world = app.world_mut();
            let mut q = world.query_filtered::<(bevy::prelude::Entity, &Observation, &Features), bevy::prelude::Without<Idle>>();
            let rows: Vec<_> = q
                .iter(world)
                .map(|(e, o, f)| (e, o.clone(), f.0.clone()))
                .collect();
            assert_eq!(rows.len(), 3 * app_agents(path));
            for (e, obs, features) in rows {
                if reads {
                    let mut want = emergence::core::Encoded::default();
                    encode(&obs, Senses::of(world.entity(e)), &mut want);
                    assert!(!want.dense.is_empty());
                    assert_eq!(
                        features, want,
                        "{path}: the step's features are this step's observation"
                    );
                } else {
                    // Scripted and random players alone: nothing is encoded.
                    assert_eq!(features, emergence::core::Encoded::default(), "{path}");
                }
            }
        }
    }
}

/// Agents per arena of the shipped scene `path`.
fn app_agents(path: &str) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    load_scene(&root.join(path)).expect("scene").agents.len()
}

/// A run that trains one kind of classic network refuses a folder of the other, saying which
/// it holds; `mlp:DIR` takes what the folder holds.
#[test]
fn a_folder_of_the_other_classic_kind_is_refused() {
    use emergence::core::{Encoded, Observation};
    use emergence::policy::Policy;
    use emergence::policy::mlp::{MlpHandle, MlpNet, MlpPolicy};
    let dir = tempfile::tempdir().expect("tmp");
    let scene = load_scene(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("scenes/dilemma/prisoners_dilemma.scene.ron"),
    )
    .expect("scene");
    // A gru folder for the scene's two actions.
    let mut row = Encoded::default();
    emergence::envs::senses::encode(&Observation::default(), Default::default(), &mut row);
    MlpNet::with_core(
        row.cells.len(),
        row.dense.len(),
        2,
        0,
        true,
        1,
        &Device::Cpu,
    )
    .expect("net")
    .save(dir.path())
    .expect("save");
    let actions = emergence::envs::action_names(&scene);
    let mut wants_mlp =
        MlpPolicy::from_folder(dir.path().into(), Device::Cpu, MlpHandle::default())
            .with_memory(false);
    let err = wants_mlp.setup(&scene, &actions).expect_err("wrong kind");
    assert!(
        err.contains("mlp.json") && err.contains("a GRU core (gru)") && err.contains("no memory"),
        "{err}"
    );
    let mut any = MlpPolicy::from_folder(dir.path().into(), Device::Cpu, MlpHandle::default());
    any.setup(&scene, &actions)
        .expect("mlp:DIR takes what the folder holds");
}

/// `--overlap` (the arenas play iteration k + 1 with the weights before update k while it
/// runs): the same seed gives the same run on one thread and on two; a run stopped after 2
/// iterations and resumed ends with the bytes of the whole one (its checkpoint holds the
/// weights the policy plays the next iteration with, `behaviour/`); its first update is the
/// plain run's (the same rollout from the same weights), and the later ones are not (the
/// policy lags one update), for the mlp and the gru.
#[test]
fn overlapped_rollouts_give_the_same_run_on_any_thread_count_and_resume_to_the_bit() {
    for learner in [LearnerKind::Mlp, LearnerKind::Gru] {
        let dir = tempfile::tempdir().expect("tmp");
        let base = |name: &str, threads: usize, overlap: bool| {
            let mut cfg = config(
                "prisoners_dilemma.scene.ron",
                Algo::Ippo,
                4,
                8,
                &dir.path().join(name),
            );
            cfg.learner = learner;
            cfg.hyper = Hyper {
                minibatch: 64,
                ..Hyper::for_learner(Algo::Ippo, learner)
            };
            cfg.overlap = overlap;
            cfg.checkpoint_every = 2;
            cfg.threads = Some(threads);
            cfg
        };
        let whole = base("whole", 1, true);
        train(&whole, |_| {}).expect("train");
        let two = base("two", 2, true);
        train(&two, |_| {}).expect("train");
        let mut first = base("split", 2, true);
        first.stop_after = Some(2);
        train(&first, |_| {}).expect("first half");
        let split = dir.path().join("split");
        let resumed = resume_config(&split, None).expect("resume config");
        assert!(resumed.overlap, "the run's setting is kept");
        train(&resumed, |_| {}).expect("second half");
        let plain = base("plain", 1, false);
        train(&plain, |_| {}).expect("train");
        for file in [
            "mlp.safetensors",
            "mlp.json",
            "optimizer.safetensors",
            "behaviour/mlp.safetensors",
        ] {
            let a = std::fs::read(whole.out.join("checkpoints/iter_4").join(file)).expect("a");
            for other in [&two.out, &split] {
                let b = std::fs::read(other.join("checkpoints/iter_4").join(file)).expect("b");
                assert!(a == b, "{learner:?}: {file} differs in {}", other.display());
            }
        }
        assert!(
            !plain.out.join("checkpoints/iter_4/behaviour").exists(),
            "a plain run has no behaviour network"
        );
        let (w, p) = (losses(&whole.out), losses(&plain.out));
        assert_eq!(losses(&two.out), w, "{learner:?}: 1 and 2 threads");
        assert_eq!(losses(&split), w, "{learner:?}: resumed");
        assert_eq!(
            w[0], p[0],
            "{learner:?}: the first update is the plain run's"
        );
        assert_ne!(w[1..], p[1..], "{learner:?}: the policy did not lag");
    }
}
