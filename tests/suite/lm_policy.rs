//! The language-model policy: a padded batch decides exactly as each agent alone would,
//! illegal actions get no probability, and runs are reproducible from their seed.

use crate::common;

use common::*;
use emergence::core::*;
use emergence::envs::action_names;
use emergence::envs::dilemma::matrix::MatrixSenses;
use emergence::envs::senses::Senses;
use emergence::headless::{RunConfig, run};
use emergence::policy::lm::{LmPolicy, ModelSource, Preset};
use emergence::policy::{Decision, Policy};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const PD: &str = r#"(name: "pd", family: Matrix(rounds: 6, history: 3),
    teams: [(name: "a", role: "player", policy: "lm"), (name: "b", role: "player", policy: "lm")])"#;

fn policy(scene: &emergence::scene::Scene) -> LmPolicy {
    let mut p = LmPolicy::new(
        ModelSource::Embedded {
            preset: Preset::Tiny,
            seed: 0,
        },
        candle_core::Device::Cpu,
    );
    p.setup(scene, &action_names(scene)).expect("setup");
    p
}

/// Decides for `obs` (with `masks`) in one batch; returns the traces and actions.
fn decide(
    p: &mut LmPolicy,
    obs: &[(Observation, MatrixSenses)],
    masks: &[ActionMask],
) -> Vec<(DecisionTrace, u8)> {
    let mut rngs: Vec<ChaCha8Rng> = (0..obs.len())
        .map(|i| ChaCha8Rng::seed_from_u64(i as u64))
        .collect();
    let mut actions = vec![Action::default(); obs.len()];
    let mut traces = vec![DecisionTrace::default(); obs.len()];
    let mut batch: Vec<Decision<'_>> = obs
        .iter()
        .zip(masks)
        .zip(rngs.iter_mut())
        .zip(actions.iter_mut())
        .zip(traces.iter_mut())
        .enumerate()
        .map(|(i, ((((o, m), rng), action), trace))| Decision {
            agent: Agent {
                arena: i as u32,
                slot: 0,
            },
            obs: &o.0,
            senses: Senses {
                matrix: Some(&o.1),
                ..Default::default()
            },
            features: &emergence::core::NO_FEATURES,
            mask: *m,
            rng,
            action,
            say: None,
            team: 0,
            role: 0,
            last_reward: 0.0,
            trace,
        })
        .collect();
    p.decide(&mut batch);
    drop(batch);
    traces
        .into_iter()
        .zip(actions.iter().map(|a| a.0))
        .collect()
}

fn history(rounds: &[[u8; 2]]) -> (Observation, MatrixSenses) {
    (
        Observation {
            step: rounds.len() as u32,
            ..Default::default()
        },
        MatrixSenses {
            history: rounds.to_vec(),
            other_counts: [
                rounds.iter().filter(|r| r[1] == 0).count() as u32,
                rounds.iter().filter(|r| r[1] == 1).count() as u32,
            ],
        },
    )
}

#[test]
fn a_padded_batch_decides_as_each_agent_alone() {
    let scene = scene(PD);
    let mut p = policy(&scene);
    // Prompts of different lengths: 0 to 3 rounds of history.
    let obs = vec![
        history(&[]),
        history(&[[0, 1]]),
        history(&[[1, 1], [0, 0], [1, 0]]),
        history(&[[0, 0], [1, 1]]),
    ];
    let masks = vec![ActionMask::all(2); obs.len()];
    let together = decide(&mut p, &obs, &masks);
    let lens: Vec<usize> = together.iter().map(|(t, _)| t.tokens.len()).collect();
    assert!(
        lens.windows(2).any(|w| w[0] != w[1]),
        "prompts should differ in length: {lens:?}"
    );
    for (i, o) in obs.iter().enumerate() {
        // Alone, with the same stream as in the batch.
        let mut rng = ChaCha8Rng::seed_from_u64(i as u64);
        let mut action = Action::default();
        let mut trace = DecisionTrace::default();
        let mut one = vec![Decision {
            agent: Agent {
                arena: i as u32,
                slot: 0,
            },
            obs: &o.0,
            senses: Senses {
                matrix: Some(&o.1),
                ..Default::default()
            },
            features: &emergence::core::NO_FEATURES,
            mask: masks[i],
            rng: &mut rng,
            action: &mut action,
            say: None,
            team: 0,
            role: 0,
            last_reward: 0.0,
            trace: &mut trace,
        }];
        p.decide(&mut one);
        drop(one);
        let (batched, a) = &together[i];
        assert_eq!(trace.tokens, batched.tokens);
        for (x, y) in trace.probs.iter().zip(&batched.probs) {
            assert!(
                (x - y).abs() < 1e-5,
                "agent {i}: {:?} vs {:?}",
                trace.probs,
                batched.probs
            );
        }
        assert_eq!(action.0, *a);
        assert!((trace.probs.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        assert!(trace.entropy > 0.0 && trace.entropy <= 2f32.ln() + 1e-5);
        assert!((trace.logprob - trace.probs[usize::from(*a)].ln()).abs() < 1e-5);
    }
    let stats = p.stats().expect("stats");
    assert_eq!(stats.decisions, 8);
    assert_eq!(stats.forwards, 5, "one forward per decide call");
}

#[test]
fn illegal_actions_get_no_probability() {
    let scene = scene(PD);
    let mut p = policy(&scene);
    let out = decide(&mut p, &[history(&[[0, 1]])], &[ActionMask::only(1)]);
    let (t, a) = &out[0];
    assert_eq!(*a, 1);
    assert_eq!(t.probs, vec![0.0, 1.0]);
    assert_eq!((t.logprob, t.entropy), (0.0, 0.0));
}

#[test]
fn language_model_runs_are_reproducible() {
    let hashes = |seed| {
        let mut cfg = RunConfig::new(scene(PD));
        cfg.arenas = 6;
        cfg.episodes = 2;
        cfg.seed = seed;
        cfg.hash_steps = true;
        cfg.record_arenas = vec![];
        let r = run(&cfg, |_| {}).expect("run");
        assert_eq!(r.policies.len(), 1);
        assert_eq!(r.policies[0].1.decisions, 6 * 2 * 6 * 2);
        r.step_hashes
    };
    let a = hashes(4);
    assert_eq!(a, hashes(4));
    assert_ne!(a, hashes(5));
}

#[test]
fn a_team_can_name_its_model_folder() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("m");
    let pd = scene(PD);
    emergence::policy::lm::ModelFolder::init(Preset::Tiny, 9, &[pd], &candle_core::Device::Cpu)
        .expect("init")
        .save(&dir)
        .expect("save");
    let src = format!(
        r#"(name: "pd", family: Matrix(rounds: 3),
    teams: [(name: "a", policy: lm(model: "{}")), (name: "b", policy: "random")])"#,
        dir.display()
    );
    let mut cfg = RunConfig::new(scene(&src));
    cfg.arenas = 3;
    cfg.record_arenas = vec![];
    let r = run(&cfg, |_| {}).expect("run");
    let key = format!("lm:{}", dir.display());
    assert_eq!(r.policies.len(), 1);
    assert_eq!(r.policies[0].0, key);
    assert_eq!(r.policies[0].1.decisions, 3 * 3);
    // A folder that is not there stops the run with the file's name.
    let missing = src.replace(&dir.display().to_string(), "/nonexistent/model");
    let cfg = RunConfig::new(scene(&missing));
    let e = match run(&cfg, |_| {}) {
        Ok(_) => panic!("ran without a model"),
        Err(e) => e,
    };
    let text = format!("{}", std::error::Error::source(&e).expect("source"));
    assert!(text.contains("/nonexistent/model/config.json"), "{text}");
    // A model whose positions are too few for the prompts stops the run at its first
    // decision, naming the folder, rather than going on with actions it did not choose.
    let config = dir.join("config.json");
    let text = std::fs::read_to_string(&config).expect("config");
    let mut json: serde_json::Value = serde_json::from_str(&text).expect("json");
    json["max_position_embeddings"] = serde_json::json!(4);
    std::fs::write(&config, json.to_string()).expect("write");
    let mut cfg = RunConfig::new(scene(&src));
    cfg.record_arenas = vec![];
    let e = match run(&cfg, |p| assert_eq!(p.steps, 0, "went on after a failure")) {
        Ok(_) => panic!("ran a model that cannot read its prompts"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains(&format!("model folder {}", dir.display()))
            && e.contains("longer than max_position_embeddings 4")
            && e.contains("the run stopped"),
        "{e}"
    );
    // A misspelt field is a scene error at its place.
    let bad = src.replace("lm(model:", "lm(modle:");
    let e =
        emergence::load::parse_scene(&bad, std::path::Path::new("t.scene.ron")).expect_err("bad");
    assert!(
        e.to_string().contains("modle") && e.to_string().contains("`model`"),
        "{e}"
    );
}

#[test]
fn an_mlp_agent_and_a_language_model_agent_share_an_arena() {
    let src = r#"(name: "pd", family: Matrix(rounds: 4),
    teams: [(name: "a", policy: "lm"), (name: "b", policy: "mlp")])"#;
    let mut app = test_app(src, 3, 1, 2);
    step(&mut app, 3);
    let [lm, mlp] = [0, 1].map(|s| {
        app.world()
            .get::<DecisionTrace>(agents(&app, 1)[s])
            .expect("trace")
            .clone()
    });
    assert!(!lm.tokens.is_empty() && lm.value.is_some_and(f32::is_finite));
    assert!(mlp.tokens.is_empty() && mlp.value.is_some_and(f32::is_finite));
    for t in [&lm, &mlp] {
        assert_eq!(t.probs.len(), 2);
        assert!((t.probs.iter().sum::<f32>() - 1.0).abs() < 1e-5);
    }
    let reg = app.world().resource::<emergence::policy::PolicyRegistry>();
    let stats = reg.stats();
    let names: Vec<&str> = stats.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["lm", "mlp"]);
    // Three steps of three arenas, one agent each.
    assert!(
        stats
            .iter()
            .all(|(_, s)| s.decisions == 9 && s.forwards == 3),
        "{stats:?}"
    );
}

#[test]
fn roles_with_adapters_decide_with_them() {
    use emergence::policy::lm::{Adapter, LoraConfig, ModelFolder};
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("m");
    let pd = scene(PD);
    let folder =
        ModelFolder::init(Preset::Tiny, 3, &[pd], &candle_core::Device::Cpu).expect("init");
    folder.save(&dir).expect("save");
    let src = format!(
        r#"(name: "pd", family: Matrix(rounds: 3),
    teams: [(name: "a", policy: lm(model: "{d}")), (name: "b", policy: lm(model: "{d}"))])"#,
        d = dir.display()
    );
    let probs = |app: &bevy::app::App| -> Vec<Vec<f32>> {
        (0..2)
            .map(|s| {
                app.world()
                    .get::<DecisionTrace>(agents(app, 0)[s])
                    .expect("trace")
                    .probs
                    .clone()
            })
            .collect()
    };
    let mut base = test_app(&src, 2, 1, 0);
    step(&mut base, 1);
    let before = probs(&base);
    // An adapter for role "a" whose B is not zero.
    let mut ad = Adapter::init(
        &folder.config,
        LoraConfig::all(2),
        1,
        &candle_core::Device::Cpu,
    )
    .expect("adapter");
    for (_, (_, b)) in ad.weights.iter_mut() {
        *b = (&*b + 0.05).expect("nudge");
    }
    ad.save(&dir.join("adapters/a")).expect("save adapter");
    let mut app = test_app(&src, 2, 1, 0);
    step(&mut app, 1);
    let after = probs(&app);
    assert_ne!(before[0], after[0], "role a should decide with its adapter");
    assert_eq!(before[1], after[1], "role b has no adapter");
    let reg = app.world().resource::<emergence::policy::PolicyRegistry>();
    let stats = reg.stats();
    assert_eq!(
        stats[0].1.forwards, 1,
        "one forward for every adapter group: {stats:?}"
    );
    // Per agent: an adapter for slot 1 alone (`adapters/agent_1/`) replaces the roles'.
    std::fs::remove_dir_all(dir.join("adapters/a")).expect("rm");
    for (_, (_, b)) in ad.weights.iter_mut() {
        *b = (&*b * -2.0).expect("flip");
    }
    ad.save(&dir.join("adapters/agent_1"))
        .expect("save adapter");
    // Agent 0 has no adapter of its own; a folder `agent_0` marks per-agent adapters.
    Adapter::init(
        &folder.config,
        LoraConfig::all(2),
        2,
        &candle_core::Device::Cpu,
    )
    .expect("adapter")
    .save(&dir.join("adapters/agent_0"))
    .expect("save neutral adapter");
    let mut app = test_app(&src, 2, 1, 0);
    step(&mut app, 1);
    let per_agent = probs(&app);
    assert_eq!(
        before[0], per_agent[0],
        "agent 0's adapter is neutral (B = 0)"
    );
    assert_ne!(before[1], per_agent[1], "agent 1 decides with its adapter");
    assert_ne!(after[1], per_agent[1]);
    let reg = app.world().resource::<emergence::policy::PolicyRegistry>();
    assert_eq!(reg.stats()[0].1.forwards, 1);
}
