//! Behaviour cloning (`emergence imitate`, [`emergence::train::imitate`]): a clone agrees
//! with its teacher on held-out episodes and plays as well as it on fresh ones, where the
//! untrained learner does neither; a language model with memory clones a choice that needs
//! it and one without memory cannot; a network clone goes on learning with IPPO; the same
//! seed gives the same clone; bad teachers are refused.
//!
//! "Plays as well" is measured as the share of the teacher's advantage over the untrained
//! learner that the clone recovers, `(clone − untrained) / (teacher − untrained)`, on the
//! same fresh episodes: hide-and-seek returns can be negative or near zero, where a ratio of
//! returns says nothing. The tests run seed 3, or `EMERGENCE_LEARNING_SEED`; the values over
//! seeds 3, 4 and 5 are in the issue's note.

use emergence::load::load_scene;
use emergence::train::imitate::{ImitateConfig, ImitateSummary, Played, imitate};
use emergence::train::{LearnerKind, TrainSettings};
use std::path::{Path, PathBuf};

fn seed() -> u64 {
    std::env::var("EMERGENCE_LEARNING_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
}

fn scene(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// `emergence imitate`'s run with its defaults and `given` flags, `episodes` recorded,
/// `epochs` passes.
fn config(
    path: &Path,
    teacher: &str,
    learner: LearnerKind,
    given: TrainSettings,
    out: &Path,
) -> ImitateConfig {
    let s = load_scene(path).expect("scene");
    let mut cfg = ImitateConfig::new(
        s,
        path.to_path_buf(),
        teacher,
        learner,
        out.to_path_buf(),
        &TrainSettings {
            seed: Some(seed()),
            ..given
        },
    )
    .expect("config");
    cfg.train.threads = Some(2);
    cfg
}

fn run(cfg: &ImitateConfig) -> ImitateSummary {
    imitate(cfg, |_| {}).expect("imitate")
}

/// The share of the teacher's advantage over the untrained learner the clone recovers.
fn recovered(p: &Played) -> f64 {
    (p.clone - p.untrained) / (p.teacher - p.untrained)
}

fn report(what: &str, s: &ImitateSummary) -> Played {
    let r = &s.record;
    let p = r.played.expect("played");
    eprintln!(
        "{what} seed {}: held-out agreement {:.3} (untrained {:.3}), words {:?}; return clone \
         {:.3}, teacher {:.3}, untrained {:.3}: recovered {:.3}",
        r.seed,
        r.held_out_agreement,
        r.held_out_agreement_untrained,
        r.held_out_word_agreement,
        p.clone,
        p.teacher,
        p.untrained,
        recovered(&p)
    );
    p
}

#[test]
fn an_mlp_clones_the_corridor_planner_and_ippo_goes_on_from_the_clone() {
    let dir = tempfile::tempdir().unwrap();
    let path = scene("scenes/maze/corridor_pair.scene.ron");
    let mut cfg = config(
        &path,
        "maze_planner",
        LearnerKind::Mlp,
        TrainSettings::default(),
        &dir.path().join("clone"),
    );
    // The planner's episodes alone leave the clone lost where a sampled step leaves its
    // path (0.93-0.94 of the teacher's advantage); two DAgger rounds teach it the way back.
    cfg.dagger = 2;
    cfg.play_episodes = 64;
    let s = run(&cfg);
    let p = report("corridor mlp", &s);
    let r = &s.record;
    assert!(r.held_out_agreement >= 0.9, "{r:?}");
    assert!(r.held_out_agreement_untrained < 0.5, "{r:?}");
    assert!(recovered(&p) >= 0.9, "{p:?}");
    assert!(p.clone >= 0.9 * p.teacher, "{p:?}");
    assert!(p.untrained < 0.5 * p.teacher, "{p:?}");
    // The folder is the network `train --model` starts from: IPPO keeps the clone's skill
    // (from the untrained network nobody gets out in this budget).
    let model = dir.path().join("clone").join("model");
    assert!(model.join("mlp.json").is_file() && model.join("imitation.json").is_file());
    let train = |model: Option<&Path>, out: &str| -> f64 {
        let mut t = emergence::train::TrainConfig::from_settings(
            load_scene(&path).unwrap(),
            path.clone(),
            &TrainSettings {
                algo: Some(emergence::train::Algo::Ippo),
                learner: Some(LearnerKind::Mlp),
                iterations: Some(4),
                arenas: Some(16),
                seed: Some(seed()),
                model: model.map(|m| m.to_string_lossy().into_owned()),
                ..Default::default()
            },
            dir.path().join(out),
        )
        .unwrap();
        t.threads = Some(2);
        let sum = emergence::train::train(&t, |_| {}).expect("train");
        let last = &sum.iterations[sum.iterations.len() - 2..];
        last.iter().map(|i| i.metrics["success"]).sum::<f64>() / last.len() as f64
    };
    let from_clone = train(Some(&model), "ippo_clone");
    let from_scratch = train(None, "ippo_scratch");
    eprintln!(
        "IPPO success, last two of 4 iterations: from the clone {from_clone:.3}, from scratch {from_scratch:.3}"
    );
    assert!(from_clone >= 0.8, "from the clone: {from_clone}");
    assert!(from_scratch < 0.5, "from scratch: {from_scratch}");
}

#[test]
fn the_language_model_clones_the_corridor_planner_with_its_silence() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(
        &scene("scenes/maze/corridor_pair.scene.ron"),
        "maze_planner",
        LearnerKind::Lm,
        TrainSettings {
            text: Some(emergence::scene::TextStyle::Compact),
            ..Default::default()
        },
        &dir.path().join("clone"),
    );
    cfg.words = true;
    cfg.epochs = 6;
    cfg.dagger = 1;
    cfg.play_episodes = 64;
    let s = run(&cfg);
    let p = report("corridor lm", &s);
    let r = &s.record;
    assert!(r.held_out_agreement >= 0.9, "{r:?}");
    assert!(r.held_out_word_agreement.is_some_and(|w| w >= 0.9), "{r:?}");
    assert!(r.held_out_agreement_untrained < 0.5, "{r:?}");
    assert!(recovered(&p) >= 0.9, "{p:?}");
    let model = dir.path().join("clone").join("model");
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "imitation.json",
    ] {
        assert!(model.join(f).is_file(), "{f}");
    }
    assert!(dir.path().join("clone/plots/imitation.png").is_file());
}

#[test]
fn a_language_model_with_memory_clones_the_fork_and_one_without_cannot() {
    // The oracle planner sees the exit; the learner sees the cue at its first two steps only.
    let dir = tempfile::tempdir().unwrap();
    let path = scene("scenes/maze/memory_fork.scene.ron");
    let clone = |memory: u32| {
        let mut cfg = config(
            &path,
            "maze_planner",
            LearnerKind::Lm,
            TrainSettings {
                memory: Some(memory),
                arenas: Some(64),
                ..Default::default()
            },
            &dir.path().join(format!("m{memory}")),
        );
        cfg.episodes = 256;
        cfg.epochs = 8;
        cfg.play_episodes = 128;
        let s = run(&cfg);
        let p = report(&format!("memory fork, memory {memory}"), &s);
        (s.record.held_out_agreement, p)
    };
    let (with, p4) = clone(4);
    let (without, p0) = clone(0);
    assert!(with >= 0.95, "with memory: agreement {with}");
    assert!(p4.clone >= 0.9, "with memory: success {}", p4.clone);
    assert!(p0.clone <= 0.6, "without memory: success {}", p0.clone);
    assert!(p4.untrained < 0.6, "untrained: success {}", p4.untrained);
    assert!(without < with, "{without} {with}");
    // IPPO from the clone with memory, at a fine-tuning rate, keeps it (at the language
    // model's default 1e-3 the first updates undo it: the issue's note).
    let model = dir.path().join("m4").join("model");
    let mut t = emergence::train::TrainConfig::from_settings(
        load_scene(&path).unwrap(),
        path.clone(),
        &TrainSettings {
            algo: Some(emergence::train::Algo::Ippo),
            iterations: Some(3),
            arenas: Some(128),
            seed: Some(seed()),
            lr: Some(3e-5),
            memory: Some(4),
            model: Some(model.to_string_lossy().into_owned()),
            ..Default::default()
        },
        dir.path().join("ippo"),
    )
    .unwrap();
    t.threads = Some(2);
    let sum = emergence::train::train(&t, |_| {}).expect("train");
    let success: Vec<f64> = sum
        .iterations
        .iter()
        .map(|i| i.metrics["success"])
        .collect();
    eprintln!("IPPO from the memory clone: success {success:?}");
    assert!(success.iter().all(|&s| s >= 0.85), "{success:?}");
}

#[test]
fn an_mlp_clones_the_hider_of_the_chase() {
    // Hide-and-seek's open field without its preparation phase: the hider flees whoever it
    // sees and otherwise stays (its choice follows from its view; in preparation it wanders
    // at random).
    let dir = tempfile::tempdir().unwrap();
    let src = std::fs::read_to_string(scene("scenes/hide_and_seek/open_field.scene.ron")).unwrap();
    let chase = dir.path().join("chase.scene.ron");
    std::fs::write(
        &chase,
        src.replace("prep_fraction: 0.4", "prep_fraction: 0.0"),
    )
    .unwrap();
    let mut cfg = config(
        &chase,
        "hider",
        LearnerKind::Mlp,
        TrainSettings::default(),
        &dir.path().join("clone"),
    );
    cfg.episodes = 128;
    cfg.play_episodes = 128;
    let s = run(&cfg);
    let p = report("chase mlp", &s);
    let r = &s.record;
    assert!(r.held_out_agreement >= 0.9, "{r:?}");
    assert!(r.held_out_agreement_untrained < 0.5, "{r:?}");
    assert!(recovered(&p) >= 0.9, "{p:?}");
}

#[test]
fn the_same_seed_clones_the_same_network_on_any_thread_count_and_dagger_adds_labels() {
    let dir = tempfile::tempdir().unwrap();
    let path = scene("scenes/maze/corridor_pair.scene.ron");
    let clone = |threads: usize, dagger: u32, out: &str| {
        let mut cfg = config(
            &path,
            "maze_planner",
            LearnerKind::Gru,
            TrainSettings::default(),
            &dir.path().join(out),
        );
        cfg.train.threads = Some(threads);
        cfg.episodes = 32;
        cfg.epochs = 3;
        cfg.play_episodes = 0;
        cfg.dagger = dagger;
        run(&cfg)
    };
    let a = clone(1, 0, "a");
    let b = clone(2, 0, "b");
    let rows = |s: &ImitateSummary| -> Vec<String> {
        s.epochs
            .iter()
            .map(|e| format!("{} {:?} {}", e.epoch, e.stats, e.held_out_agreement))
            .collect()
    };
    assert_eq!(rows(&a), rows(&b));
    let weights =
        |out: &str| std::fs::read(dir.path().join(out).join("model/mlp.safetensors")).unwrap();
    assert_eq!(weights("a"), weights("b"));
    // DAgger: one round adds as many episodes, the clone acting, labelled by the teacher.
    let d = clone(2, 1, "d");
    assert_eq!(d.record.dagger_returns.len(), 1);
    assert!(d.record.train_decisions > a.record.train_decisions);
    assert_eq!(d.epochs.len(), 1 + 2 * 3);
    assert!(d.record.held_out_agreement >= 0.9, "{:?}", d.record);
}

#[test]
fn teachers_that_cannot_teach_and_used_folders_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let corridor = scene("scenes/maze/corridor_pair.scene.ron");
    let err = |path: &Path, teacher: &str, out: &Path| -> String {
        let cfg = config(
            path,
            teacher,
            LearnerKind::Mlp,
            TrainSettings::default(),
            out,
        );
        match imitate(&cfg, |_| {}) {
            Ok(_) => panic!("{teacher} taught"),
            Err(e) => e.to_string(),
        }
    };
    let out = dir.path().join("x");
    let e = err(&corridor, "tit_for_tat", &out);
    assert!(
        e.contains("tit_for_tat does not play Maze") && e.contains("maze_planner"),
        "{e}"
    );
    let e = err(&corridor, "lm", &out);
    assert!(e.contains("a teacher is a scripted policy"), "{e}");
    let e = err(&corridor, "no_such_bot", &out);
    assert!(e.contains("no such policy"), "{e}");
    let open = scene("scenes/hide_and_seek/open_field.scene.ron");
    let e = err(&open, "fort_builder", &out);
    assert!(
        e.contains("no seat plays fort_builder or a learning policy"),
        "{e}"
    );
    assert!(!out.exists(), "a refused run wrote {}", out.display());
    // Seats on `random` (an experiment arm's placeholders for its learner) are the learner's
    // when nothing else is; bots are never taken over.
    let placeholders = emergence::load::parse_scene(
        "(name: \"p\", family: Maze(generate: (width: 7, height: 7, plate_doors: 0, key_doors: 0)), \
         teams: [(name: \"pair\", count: 2, policy: \"random\")])",
        std::path::Path::new("p.scene.ron"),
    )
    .expect("scene");
    let seats = emergence::train::imitate::cloned_seats;
    assert_eq!(seats(&placeholders, "maze_wall_follower", "lm"), [0, 1]);
    let bots = emergence::load::load_scene(&open).expect("open field");
    assert!(seats(&bots, "fort_builder", "lm").is_empty());
    // A folder in use is never written into.
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("keep.txt"), "mine").unwrap();
    let e = err(&corridor, "maze_planner", &out);
    assert!(e.contains(&out.display().to_string()), "{e}");
    assert_eq!(
        std::fs::read_to_string(out.join("keep.txt")).unwrap(),
        "mine"
    );
}

#[test]
fn recorded_episodes_teach_and_a_recording_of_another_run_is_refused() {
    use emergence::headless::{RunConfig, run as run_scene};
    let dir = tempfile::tempdir().unwrap();
    let path = scene("scenes/maze/corridor_pair.scene.ron");
    let replays = dir.path().join("replays");
    std::fs::create_dir_all(&replays).unwrap();
    let mut rec = RunConfig::new(load_scene(&path).unwrap());
    rec.arenas = 4;
    rec.episodes = 8;
    rec.seed = 11;
    rec.record = Some(replays.join("planners.jsonl"));
    rec.record_arenas = vec![0, 2, 3];
    run_scene(&rec, |_| {}).expect("recorded");
    let from = format!("replays:{}", replays.display());
    let mut cfg = config(
        &path,
        &from,
        LearnerKind::Mlp,
        TrainSettings::default(),
        &dir.path().join("clone"),
    );
    cfg.play_episodes = 0;
    let s = run(&cfg);
    let r = &s.record;
    eprintln!("from replays: {r:?}");
    // Three recorded arenas of 8 episodes, both seats.
    assert_eq!((r.episodes, r.seats.clone()), (24, vec![0, 1]));
    assert!(r.held_out_agreement >= 0.9, "{r:?}");
    assert!((r.teacher_return_recorded - 0.89).abs() < 1e-3, "{r:?}");
    // DAgger cannot ask a recording.
    let mut d = config(
        &path,
        &from,
        LearnerKind::Mlp,
        TrainSettings::default(),
        &dir.path().join("d"),
    );
    d.dagger = 1;
    let e = imitate(&d, |_| {}).err().expect("refused").to_string();
    assert!(e.contains("--dagger 1"), "{e}");
    // A wall where the recording walked: refused where the runs part.
    let walled = dir.path().join("walled.scene.ron");
    let src = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &walled,
        src.replacen("\"#S...#....#\",", "\"#S#..#....#\",", 1),
    )
    .unwrap();
    let cfg = config(
        &walled,
        &from,
        LearnerKind::Mlp,
        TrainSettings::default(),
        &dir.path().join("w"),
    );
    let e = imitate(&cfg, |_| {}).err().expect("refused").to_string();
    assert!(
        e.contains("stands at [1, 1] played again and at [2, 1] in the recording"),
        "{e}"
    );
    assert!(!dir.path().join("w").exists());
    // An empty folder.
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let cfg = config(
        &path,
        &format!("replays:{}", empty.display()),
        LearnerKind::Mlp,
        TrainSettings::default(),
        &dir.path().join("e"),
    );
    let e = imitate(&cfg, |_| {}).err().expect("refused").to_string();
    assert!(e.contains("no replay file (*.jsonl) in it"), "{e}");
}

/// An experiment's arm with `clone:` starts each seed's run from a clone of its teacher:
/// `emergence reproduce` makes `clones/ARM/seed_S/` (the planner cloned into the `mlp`) before
/// training, the run's model is that clone's, so its first iteration (played with the clone's
/// weights) gets out where the same arm from scratch does not; the report says what was
/// cloned from what with the clone's agreement, and its rerun command makes the clone first.
/// Stopped after one iteration and run again, the run resumes and the clone is kept.
#[test]
fn an_experiment_arm_starts_from_a_clone_of_its_teacher() {
    let dir = tempfile::tempdir().unwrap();
    let corridor = scene("scenes/maze/corridor_pair.scene.ron");
    let file = dir.path().join("clone.experiment.ron");
    std::fs::write(
        &file,
        format!(
            r#"Experiment(
    claim: "A clone of the planner gets out from its first iteration.",
    source: "test",
    scene: File({corridor:?}),
    settings: (iterations: 2, arenas: 16, learner: mlp, algo: ippo, checkpoint_every: 1),
    arms: [
        (name: "scratch"),
        (name: "cloned", clone: (from: "maze_planner", episodes: 100, quick_episodes: 32, epochs: 10, dagger: 1)),
    ],
    seeds: [{seed}],
    measures: [(name: "first", from: Train(value: "metrics.success", at: First(1)))],
    expect: ["first(cloned) > first(scratch)"],
)"#,
            seed = seed()
        ),
    )
    .unwrap();
    let exp = emergence::experiment::load(&file).expect("valid");
    let out = dir.path().join("out");
    let opts = |stop_after| emergence::experiment::runner::Options {
        out: out.clone(),
        seeds: None,
        quick: true,
        iterations: None,
        threads: 2,
        stop_after,
        ranks: Default::default(),
        device: candle_core::Device::Cpu,
    };
    let cloning = std::sync::atomic::AtomicUsize::new(0);
    let count = |e: emergence::experiment::runner::Event| {
        if let emergence::experiment::runner::Event::Cloning { .. } = e {
            cloning.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    };
    let e = emergence::experiment::reproduce(&exp, &opts(Some(1)), &count).expect_err("stopped");
    assert!(e.to_string().contains("stopped early"), "{e}");
    let cdir = out.join("clones/cloned").join(format!("seed_{}", seed()));
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(cdir.join("imitation.json")).unwrap())
            .unwrap();
    assert_eq!(record["teacher"], "maze_planner");
    assert_eq!(record["episodes"], 32, "--quick takes quick_episodes");
    assert_eq!(record["dagger"], 1);
    let run = out.join("runs/cloned").join(format!("seed_{}", seed()));
    let config = std::fs::read_to_string(run.join("config.json")).unwrap();
    assert!(
        config.contains(&*cdir.join("model").to_string_lossy()),
        "the run starts from the clone: {config}"
    );
    assert!(
        !out.join("clones/scratch").exists(),
        "no clone without clone:"
    );
    let made = std::fs::metadata(cdir.join("imitation.json"))
        .unwrap()
        .modified()
        .unwrap();
    let w = emergence::experiment::reproduce(&exp, &opts(None), &count).expect("resumed");
    assert_eq!(w.outcome.resumed, 2);
    assert_eq!(
        cloning.load(std::sync::atomic::Ordering::Relaxed),
        1,
        "the clone is made once, by the first invocation"
    );
    assert_eq!(
        std::fs::metadata(cdir.join("imitation.json"))
            .unwrap()
            .modified()
            .unwrap(),
        made
    );
    let first = |arm: &str| {
        w.report
            .measures
            .iter()
            .find(|m| m.name == "first")
            .expect("measure")
            .arms[arm]
            .mean
            .expect("a value")
    };
    let (cloned, scratch) = (first("cloned"), first("scratch"));
    eprintln!("first iteration's success: cloned {cloned:.3}, scratch {scratch:.3}");
    assert!(cloned >= 0.5, "the clone gets out: {cloned}");
    assert!(scratch < 0.1, "from scratch nobody gets out: {scratch}");
    let arm = w.report.arms.iter().find(|a| a.name == "cloned").unwrap();
    assert_eq!(arm.clone_agreement.len(), 1);
    assert!(arm.clone_agreement[0] >= 0.9, "{:?}", arm.clone_agreement);
    assert!(
        arm.command.starts_with("emergence imitate ")
            && arm.command.contains("--from maze_planner")
            && arm.command.contains("&& emergence train ")
            && arm.command.contains("--model rerun/cloned-seed"),
        "{}",
        arm.command
    );
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("starts from a clone of `maze_planner`"), "{md}");
}
