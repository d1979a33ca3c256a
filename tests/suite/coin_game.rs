//! A family from outside the crate (issue 38): the Coin Game of `examples/coin_game/`,
//! compiled here from the example's own file, uses only emergence's public API. Registered,
//! its scenes parse with located errors, run headless (the same on any thread count), write
//! the text a language model reads, and train an `mlp` and a language model; the example
//! program itself runs.

#[path = "../../examples/coin_game/family.rs"]
#[allow(dead_code)]
mod coin;

use emergence::envs::family::{self, RegisterError, register};
use emergence::headless::{RunConfig, run};
use emergence::load::{load_scene, parse_scene};
use emergence::train::{Algo, LearnerKind, TrainConfig, TrainSettings, train};
use std::path::{Path, PathBuf};

fn scene_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/coin_game/coin_game.scene.ron")
}

fn registered() {
    register(&coin::CoinGame).expect("register the Coin Game");
}

#[test]
fn a_family_from_outside_the_crate_parses_checks_and_runs_the_same_on_any_thread_count() {
    // Before it is registered, a scene naming it is refused where the name stands.
    let src = std::fs::read_to_string(scene_path()).expect("scene");
    let err = parse_scene(&src, Path::new("coin.scene.ron")).expect_err("not registered yet");
    let msg = err.to_string();
    assert!(msg.starts_with("coin.scene.ron:8:13"), "{msg}");
    assert!(msg.contains("CoinGame") && msg.contains("Maze"), "{msg}");

    registered();
    assert!(family::names().contains(&"CoinGame"));
    // The shipped families' names are theirs.
    struct Impostor;
    impl emergence::scene::FamilyRules for Impostor {
        fn name(&self) -> &'static str {
            "Maze"
        }
        fn params(&self) -> emergence::scene::ParamsParser {
            emergence::scene::parser_of::<coin::CoinParams>
        }
    }
    impl family::Family for Impostor {
        fn about(&self) -> &'static str {
            ""
        }
        fn actions(&self, _: &emergence::scene::Scene) -> Vec<String> {
            Vec::new()
        }
        fn spawner(&self, _: &emergence::scene::Scene) -> Box<dyn family::Spawner> {
            unreachable!()
        }
    }
    assert_eq!(register(&Impostor), Err(RegisterError::Shipped("Maze")));

    let scene = load_scene(&scene_path()).expect("the example's scene");
    assert_eq!(scene.spec.family.name(), "CoinGame");
    let p = scene.spec.family.params::<coin::CoinParams>().cloned();
    assert_eq!(
        p,
        Some(coin::CoinParams {
            pick_reward: 1.0,
            penalty: 2.0
        })
    );

    // Its parameters' errors are located like the shipped families': a misspelt field (serde,
    // in the same pass) and a value out of range (the family's own check).
    for (from, to, at, words) in [
        ("penalty: 2.0", "penalti: 2.0", "8:40", "penalti"),
        ("penalty: 2.0", "penalty: -1.0", "8:49", "0 to 100"),
    ] {
        let bad = src.replace(from, to);
        let err = parse_scene(&bad, Path::new("coin.scene.ron")).expect_err(to);
        let msg = err.to_string();
        assert!(
            msg.starts_with(&format!("coin.scene.ron:{at}")),
            "{to}: {msg}"
        );
        assert!(msg.contains(words), "{to}: {msg}");
    }

    // Headless: random players take coins of either colour alike; one thread or two, the
    // same states step by step.
    let hashes = |threads| {
        let mut cfg = RunConfig::new(scene.clone());
        cfg.arenas = 16;
        cfg.episodes = 4;
        cfg.seed = 7;
        cfg.threads = Some(threads);
        cfg.hash_steps = true;
        run(&cfg, |_| {}).expect("run")
    };
    let (one, two) = (hashes(1), hashes(2));
    assert_eq!(one.episodes, 64);
    assert_eq!(one.step_hashes, two.step_hashes);
    assert!(!one.step_hashes.is_empty());
    let own = one.metrics["own_coin_rate"];
    assert!(
        (0.35..0.65).contains(&own),
        "random players' own coin rate {own}"
    );
    assert!(one.metrics["coins"] > 1.0, "{:?}", one.metrics);
}

#[test]
fn a_family_from_outside_the_crate_writes_its_text_and_trains_an_mlp_and_a_language_model() {
    registered();
    let scene = load_scene(&scene_path()).expect("scene");
    let dir = tempfile::tempdir().expect("tmp");
    // The learning tests' seed (`EMERGENCE_LEARNING_SEED`, 3 unless set).
    let seed: u64 = std::env::var("EMERGENCE_LEARNING_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let run = |learner, iterations, arenas| {
        let settings = TrainSettings {
            algo: Some(Algo::Ippo),
            learner: Some(learner),
            iterations: Some(iterations),
            arenas: Some(arenas),
            seed: Some(seed),
            checkpoint_every: Some(1_000_000),
            ..Default::default()
        };
        let out = dir.path().join(format!("{learner:?}"));
        let mut cfg = TrainConfig::from_settings(scene.clone(), scene_path(), &settings, out)
            .expect("config");
        cfg.threads = Some(2);
        train(&cfg, |_| {}).expect("train")
    };
    // The mlp learns to walk to the coins: a policy that ignores the map (the untrained
    // one, or random players) takes about 3.4 in 16 steps; after 150 iterations seeds 3 / 4 /
    // 5 took 10.8 / 11.3 / 11.8 (from 3.1 / 3.6 / 3.3 in their first iteration).
    let mlp = run(LearnerKind::Mlp, 150, 32);
    let mean = |key: &str, from: usize| {
        (from..from + 10)
            .map(|i| mlp.iterations[i].metrics[key])
            .sum::<f64>()
            / 10.0
    };
    let first = mlp.iterations[0].metrics["coins"];
    let last = mean("coins", 140);
    eprintln!(
        "coin game mlp, seed {seed}: coins {first:.2} first iteration, {last:.2} last ten; own coin rate {:.3} last ten",
        mean("own_coin_rate", 140)
    );
    assert!(first < 4.5, "the untrained mlp already collects: {first}");
    assert!(
        last > 8.0,
        "the mlp did not learn to collect: {first} -> {last}"
    );

    // The language model reads the family's own text, every word known to its tokenizer.
    let lm = run(LearnerKind::Lm, 1, 2);
    assert_eq!(lm.iterations.len(), 1);
    let vocab = emergence::policy::lm::tokenizer::default_vocabulary(std::slice::from_ref(&scene));
    let actions: Vec<String> = coin::ACTIONS.iter().map(|s| s.to_string()).collect();
    let obs = emergence::core::Observation {
        step: 3,
        view: vec![
            1, 1, 1, 1, 1, 1, 2, 0, 4, 1, 1, 0, 5, 0, 1, 1, 0, 0, 3, 1, 1, 1, 1, 1, 1,
        ],
        view_width: 5,
        view_height: 5,
        ..Default::default()
    };
    for style in [
        emergence::scene::TextStyle::Full,
        emergence::scene::TextStyle::Compact,
    ] {
        let mut s = scene.clone();
        s.spec.text = style;
        let text = emergence::observe::text::TextFormat::new(&s, &actions).render(
            emergence::observe::text::Speaker { team: 0, role: 0 },
            &obs,
            Default::default(),
            emergence::core::ActionMask::all(5),
            -2.0,
        );
        let grid = "# # # # #\n# @ . m #\n# . t . #\n# . . O #\n# # # # #\n";
        let want = match style {
            emergence::scene::TextStyle::Full => format!(
                "role red step 3 of 16\nlegend @ you O other # wall m your coin t their coin\n{grid}last reward -2\nactions stay north east south west\n"
            ),
            emergence::scene::TextStyle::Compact => format!(
                "legend @ you O other # wall m your coin t their coin\nsteps 16\nred step 3\n{grid}reward -2\nactions stay north east south west\n"
            ),
        };
        assert_eq!(text, want, "{style:?}");
        for word in text.split_whitespace().flat_map(|w| {
            // Numbers are split into digits by the tokenizer.
            if w.chars().all(|c| c.is_ascii_digit()) {
                w.chars().map(String::from).collect::<Vec<_>>()
            } else if let Some(d) = w.strip_prefix('-') {
                std::iter::once("-".to_string())
                    .chain(d.chars().map(String::from))
                    .collect()
            } else {
                vec![w.to_string()]
            }
        }) {
            assert!(
                vocab.contains(&word),
                "{word:?} is not in the default tokenizer"
            );
        }
    }
}

#[test]
fn the_coin_game_example_program_runs() {
    let bin = crate::common::example_binary("coin_game");
    let dir = tempfile::tempdir().expect("tmp");
    let out = std::process::Command::new(&bin)
        .arg("--quick")
        .arg(dir.path())
        .output()
        .expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "scene Coin Game (CoinGame family), 2 agents an arena",
        "random players: 128 episodes",
        "--- Compact text ---",
        "mlp IPPO, 10 iterations of 32 arenas",
        "lm IPPO, 1 iterations of 4 arenas",
    ] {
        assert!(stdout.contains(line), "{line:?} not in\n{stdout}");
    }
}
