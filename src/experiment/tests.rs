//! The experiment parser's errors (one per class, each at its line and column), the
//! aggregation on hand-made run folders, and resuming an interrupted experiment.

use super::report::{Stat, aggregate, onset};
use super::runner::{self, Options};
use super::*;
use crate::scene::locate::line_col;

/// A small experiment: the `mlp` learner on a 4-round Prisoner's Dilemma written inline
/// (shared with the integration test that trains it, `tests/suite/train.rs`).
pub(crate) const SMALL: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/small.experiment.ron"
));

fn path() -> PathBuf {
    PathBuf::from("test.experiment.ron")
}

/// The error of `src` with `from` replaced by `to`, and the line and column of the first
/// occurrence of `at` in the changed text (plus `shift` characters).
fn error_at(
    from: &str,
    to: &str,
    at: &str,
    shift: usize,
) -> (String, (usize, usize), (usize, usize)) {
    assert!(SMALL.contains(from), "{from}");
    let src = SMALL.replacen(from, to, 1);
    let e = parse(&src, &path()).expect_err("an error");
    let got = match &e {
        ExperimentError::Invalid { line, col, .. } => (*line, *col),
        ExperimentError::Scene(s) => s.line_col().expect("located"),
        other => panic!("unlocated: {other}"),
    };
    let off = src
        .find(at)
        .unwrap_or_else(|| panic!("{at} not in the text"));
    let (line, col) = line_col(&src, off);
    (e.to_string(), got, (line, col + shift))
}

#[test]
fn the_small_experiment_parses() {
    let e = parse(SMALL, &path()).expect("valid");
    assert_eq!(e.name, "test");
    assert_eq!(e.scenes.len(), 2);
    assert!(e.scenes[0].file.is_none());
    assert!(e.scenes[0].text.contains("payoffs"));
    // The written inline scene is a valid scene on its own.
    crate::load::parse_scene(&e.scenes[0].text, Path::new("x.scene.ron")).expect("scene");
    assert_eq!(e.partners, ["self", "always_defect"]);
    assert_eq!(e.checks.len(), 2);
}

#[test]
fn each_error_names_its_line_and_column() {
    // (replace, with, where the error is expected, characters after it, words in the message)
    let cases: &[(&str, &str, &str, usize, &str)] = &[
        // RON syntax / unknown field.
        (
            "    seeds: [1, 2],",
            "    seedz: [1, 2],",
            "seedz",
            0,
            "seedz",
        ),
        // Settings out of range, in an arm.
        ("(algo: ippo)", "(algo: ippo, lr: 7.0)", "7.0", 0, "lr"),
        // A seed in settings.
        (
            "learner: mlp,",
            "learner: mlp, seed: 3,",
            "seed: 3",
            0,
            "seeds",
        ),
        // Arm names.
        (
            "(name: \"ippo\",",
            "(name: \"Ippo!\",",
            "\"Ippo!\"",
            0,
            "lowercase",
        ),
        (
            "(name: \"reinforce\",",
            "(name: \"ippo\",",
            "\"ippo\", settings: (algo: reinforce",
            0,
            "second arm",
        ),
        // A clone's teacher must play the arm's scene, and record something.
        (
            "(algo: ippo))",
            "(algo: ippo), clone: (from: \"maze_planner\"))",
            "(from: \"maze_planner\")",
            0,
            "does not play",
        ),
        (
            "(algo: ippo))",
            "(algo: ippo), clone: (from: \"tit_for_tat\", epochs: 0))",
            "(from: \"tit_for_tat\"",
            0,
            "at least 1",
        ),
        // Seeds.
        ("seeds: [1, 2],", "seeds: [1, 1],", "1],", 0, "twice"),
        ("seeds: [1, 2],", "seeds: [],", "[],", 0, "no seeds"),
        // The inline scene's own errors, at their place in the experiment file.
        (
            "rounds: 4,",
            "rounds: 0,",
            "0,\n            history",
            0,
            "rounds",
        ),
        (
            "(name: \"column\", policy: \"random\")",
            "(name: \"column\", policy: \"randm\")",
            "\"randm\"",
            0,
            "unknown policy",
        ),
        // Partners.
        (
            "\"always_defect\"]",
            "\"always_defekt\"]",
            "\"always_defekt\"",
            0,
            "always_defect",
        ),
        // Measures.
        (
            "Eval(partner: \"self\",",
            "Eval(partner: \"tit_for_tat\",",
            "\"tit_for_tat\"",
            0,
            "not one of",
        ),
        (
            "value: \"return_per_step\"",
            "value: \"return_per_stp\"",
            "\"return_per_stp\"",
            0,
            "return_per_step",
        ),
        (
            "value: \"return_per_step\"",
            "value: \"metrics.\"",
            "\"metrics.\"",
            0,
            "expected metrics.NAME",
        ),
        (
            "Train(value: \"return\", at: Last(2))",
            "Train(value: \"retrun\", at: Last(2))",
            "\"retrun\"",
            0,
            "metrics.NAME",
        ),
        (
            "Onset(value: \"return\", stays: Above(5.0), hold: 2)",
            "Onset(value: \"return\", stays: Abov(5.0), hold: 2)",
            "Abov",
            0,
            "Abov",
        ),
        // Expected outcome: inside the string.
        (
            "\"self_play(ippo) >= 0\"",
            "\"self_play(ipo) >= 0\"",
            "ipo)",
            0,
            "unknown arm",
        ),
        (
            "\"self_play(ippo) >= 0\"",
            "\"self_play(ippo) = 0\"",
            "= 0\"",
            0,
            "comparison",
        ),
        (
            "\"self_play(ippo) >= 0\"",
            "\"selfplay(ippo) >= 0\"",
            "selfplay",
            0,
            "unknown measure",
        ),
    ];
    // A further claim: a check naming an unknown arm, at that arm's name in the string; a
    // claim with no checks; a bad claim name.
    const ALSO: &str = "expect: [\"self_play(ippo) >= 0\", \"late(ippo) > early(ippo) + 100\"],";
    let also_cases: &[(&str, &str, usize, &str)] = &[
        (
            "also: [(name: \"lm\", claim: \"C.\", expect: [\"late(ippo) > early(ppo)\"])],",
            "ppo)\"])",
            0,
            "ppo",
        ),
        (
            "also: [(name: \"lm\", claim: \"C.\", expect: [])],",
            "[])",
            0,
            "no checks",
        ),
        (
            "also: [(name: \"L M\", claim: \"C.\", expect: [\"late(ippo) > 0\"])],",
            "\"L M\"",
            0,
            "claim name",
        ),
    ];
    for (extra, at, shift, words) in also_cases {
        let (msg, got, want) = error_at(ALSO, &format!("{ALSO}\n    {extra}"), at, *shift);
        assert_eq!(got, want, "{extra}: {msg}");
        assert!(msg.contains(words), "{extra}: {msg}");
    }
    for (from, to, at, shift, words) in cases {
        let (msg, got, want) = error_at(from, to, at, *shift);
        assert_eq!(got, want, "{to}: {msg}");
        assert!(msg.contains(words), "{to}: {msg}");
        assert!(msg.starts_with("test.experiment.ron:"), "{msg}");
    }
}

#[test]
fn a_missing_scene_file_is_named_at_the_scene_field() {
    let src = SMALL.replacen(
        "scene: Inline(",
        "scene: File(\"nowhere.scene.ron\"),\n    unused: Inline(",
        1,
    );
    // Cut the inline scene out: the file reference alone.
    let start = src.find("    unused: Inline(").expect("marker");
    let end = src.find("    settings:").expect("settings");
    let src = format!("{}{}", &src[..start], &src[end..]);
    let e = parse(&src, &path()).expect_err("missing file");
    let msg = e.to_string();
    assert!(msg.contains("nowhere.scene.ron does not exist"), "{msg}");
    let at = line_col(&src, src.find("File(").expect("file"));
    assert!(
        msg.starts_with(&format!("test.experiment.ron:{}:{}:", at.0, at.1)),
        "{msg}"
    );
}

#[test]
fn stats_are_the_mean_and_the_sample_deviation() {
    let s = Stat::of(vec![Some(1.0), Some(2.0), Some(3.0), None]);
    assert_eq!(s.mean, Some(2.0));
    assert_eq!(s.std, Some(1.0));
    let s = Stat::of(vec![Some(4.0)]);
    assert_eq!((s.mean, s.std), (Some(4.0), Some(0.0)));
    assert_eq!(Stat::of(vec![None]).mean, None);
    let pts = [
        (1.0, 0.0),
        (2.0, 6.0),
        (3.0, 1.0),
        (4.0, 6.0),
        (5.0, 7.0),
        (6.0, 8.0),
    ];
    assert_eq!(onset(&pts, Threshold::Above(5.0), 2), Some(4.0));
    assert_eq!(onset(&pts, Threshold::Above(5.0), 1), Some(2.0));
    assert_eq!(onset(&pts, Threshold::Below(0.5), 1), Some(1.0));
    assert_eq!(onset(&pts, Threshold::Above(9.0), 1), None);
}

/// The full budget's options for a report folder `out`, one thread.
fn options(out: &Path) -> Options {
    Options {
        out: out.to_path_buf(),
        seeds: None,
        quick: false,
        iterations: None,
        threads: 1,
        stop_after: None,
        ranks: Default::default(),
        device: candle_core::Device::Cpu,
    }
}

/// Writes a run folder by hand: returns per iteration and a final evaluation.
fn fake_run(dir: &Path, returns: &[f64], self_play: f64) {
    std::fs::create_dir_all(dir).expect("dir");
    let mut rows = String::new();
    for (i, r) in returns.iter().enumerate() {
        rows += &format!(
            "{{\"iteration\":{},\"team_returns\":{{\"row\":{r},\"column\":{}}},\"metrics\":{{}},\"seconds\":1.5,\"samples\":10}}\n",
            i + 1,
            r + 2.0
        );
    }
    std::fs::write(dir.join("metrics.jsonl"), rows).expect("rows");
    let fe = runner::FinalEval {
        iteration: returns.len() as u32,
        partners: [
            (
                "self".to_string(),
                [("return_per_step".to_string(), self_play)].into(),
            ),
            (
                "always_defect".to_string(),
                [("return_per_step".to_string(), 0.5)].into(),
            ),
        ]
        .into(),
        arenas: 16,
        seconds: 0.5,
    };
    std::fs::write(
        dir.join(runner::FINAL_EVAL),
        serde_json::to_string(&fe).expect("json"),
    )
    .expect("eval");
}

#[test]
fn the_report_aggregates_hand_made_runs_and_judges_each_check() {
    let tmp = tempfile::tempdir().expect("tmp");
    let exp = parse(SMALL, &path()).expect("valid");
    let opts = options(tmp.path());
    let plan = runner::plan(&exp, &opts);
    assert_eq!(plan.runs.len(), 4);
    // Mean return (over the two teams) is r + 1.
    let data: [(&str, u64, [f64; 4], f64); 4] = [
        ("ippo", 1, [0.0, 2.0, 200.0, 300.0], 2.0),
        ("ippo", 2, [1.0, 3.0, 5.0, 7.0], 3.0),
        ("reinforce", 1, [4.0, 4.0, 4.0, 4.0], -1.0),
        ("reinforce", 2, [4.0, 4.0, 4.0, 4.0], 1.0),
    ];
    for (arm, seed, ret, sp) in &data {
        let r = plan
            .runs
            .iter()
            .find(|r| r.arm == *arm && r.seed == *seed)
            .expect("run");
        fake_run(&tmp.path().join(&r.dir), ret, *sp);
    }
    let rep = aggregate(&exp, &plan, tmp.path(), 9.0).expect("report");
    let m = |name: &str, arm: &str| {
        rep.measures
            .iter()
            .find(|m| m.name == name)
            .and_then(|m| m.arms.get(arm))
            .cloned()
            .expect("measure")
    };
    // self_play: ippo 2 and 3 -> 2.5 ± 0.7071; reinforce -1 and 1 -> 0 ± 1.4142.
    let sp = m("self_play", "ippo");
    assert_eq!(sp.mean, Some(2.5));
    assert!((sp.std.expect("std") - 0.5f64.sqrt()).abs() < 1e-12);
    assert_eq!(
        m("self_play", "reinforce").per_seed,
        [Some(-1.0), Some(1.0)]
    );
    // late (last 2 of r + 1): seed 1 (201 + 301) / 2 = 251, seed 2 (6 + 8) / 2 = 7.
    assert_eq!(m("late", "ippo").per_seed, [Some(251.0), Some(7.0)]);
    assert_eq!(m("early", "ippo").per_seed, [Some(2.0), Some(3.0)]);
    // rise: above 5 for 2 iterations: seed 1 from iteration 3; seed 2 (2, 4, 6, 8) from 3.
    assert_eq!(m("rise", "ippo").per_seed, [Some(3.0), Some(3.0)]);
    assert_eq!(m("rise", "reinforce").per_seed, [None, None]);
    // Checks on the means: self_play(ippo) 2.5 >= 0 holds on both seeds; late - early:
    // 129 > 2.5 + 100 holds on the means, on seed 1 only (251 > 102; 7 < 103).
    assert_eq!(rep.checks[0].verdict, "reproduced");
    assert_eq!((rep.checks[0].seeds_holding, rep.checks[0].seeds), (2, 2));
    assert_eq!(rep.checks[1].lhs, Some(129.0));
    assert_eq!(rep.checks[1].rhs, Some(102.5));
    assert_eq!(rep.checks[1].verdict, "reproduced");
    assert_eq!(rep.checks[1].seeds_holding, 1);
    assert_eq!(rep.verdict, "reproduced");
    // Timing: 4 rows of 1.5 s plus 0.5 s of evaluation per run.
    assert_eq!(rep.timing.total_run_seconds, 4.0 * 6.5);
    let md = report::markdown(&rep, &["curves.png".into()]);
    assert!(
        md.contains("| self_play | 2.500 ± 0.707 | 0.000 ± 1.414 |"),
        "{md}"
    );
    assert!(
        md.contains(
            "| `late(ippo) > early(ippo) + 100` | 129.000 | 102.500 | reproduced | 1 of 2 |"
        ),
        "{md}"
    );
    assert!(md.contains("--algo ippo"), "{md}");
    // A check that fails on the means is not reproduced.
    std::fs::remove_file(tmp.path().join(&plan.runs[0].dir).join(runner::FINAL_EVAL)).expect("rm");
    fake_run(&tmp.path().join(&plan.runs[0].dir), &[0.0; 4], -10.0);
    let rep = aggregate(&exp, &plan, tmp.path(), 9.0).expect("report");
    assert_eq!(rep.checks[0].verdict, "not reproduced");
    assert_eq!(rep.checks[1].verdict, "not reproduced");
    assert_eq!(rep.verdict, "not reproduced");
    // A measure missing from every seed gives no verdict, and the report says so.
    let mut exp2 = exp.clone();
    exp2.checks =
        vec![expect::parse("rise(reinforce) > 1", &["rise"], &["reinforce"]).expect("check")];
    let rep = aggregate(&exp2, &plan, tmp.path(), 9.0).expect("report");
    assert_eq!(rep.checks[0].verdict, "no value");
    assert_eq!(rep.verdict, "not reproduced");
}

/// A further claim (`also:`) is judged on its own checks and gets its own verdict, which
/// does not change the headline's; the scale table gives each arm's experience a seed.
#[test]
fn a_further_claim_is_judged_apart_from_the_headline() {
    let tmp = tempfile::tempdir().expect("tmp");
    let src = SMALL.replacen(
        "expect: [",
        "paper_scale: \"10 episodes\",\n    also: [(name: \"reinforce_rises\", claim: \"REINFORCE \
         rises too.\", expect: [\"rise(reinforce) > 1\", \"late(reinforce) >= 5\"])],\n    expect: [",
        1,
    );
    let exp = parse(&src, &path()).expect("valid");
    assert_eq!(
        (exp.checks.len(), exp.also.len(), exp.also[0].len()),
        (2, 1, 2)
    );
    let opts = options(tmp.path());
    let plan = runner::plan(&exp, &opts);
    for r in &plan.runs {
        let ret = if r.arm == "ippo" {
            [1.0, 2.0, 300.0, 400.0]
        } else {
            [4.0; 4]
        };
        fake_run(&tmp.path().join(&r.dir), &ret, 1.0);
    }
    let rep = aggregate(&exp, &plan, tmp.path(), 9.0).expect("report");
    // The headline: both of `expect`'s checks hold.
    assert_eq!(rep.verdict, "reproduced");
    // The further claim: REINFORCE's return (4 + 1 = 5, flat) never rises above 5 (no onset,
    // no value) though its late return is 5: not reproduced, apart from the headline.
    let also = &rep.also[0];
    assert_eq!(also.name, "reinforce_rises");
    assert_eq!(also.checks[0].verdict, "no value");
    assert_eq!(also.checks[1].verdict, "reproduced");
    assert_eq!(also.checks[1].lhs, Some(5.0));
    assert_eq!(also.verdict, "not reproduced");
    // Four iterations of 8 arenas, 10 decisions an iteration.
    assert_eq!(rep.scale.len(), 2);
    assert_eq!(
        (
            rep.scale[0].arm.as_str(),
            rep.scale[0].iterations,
            rep.scale[0].episodes
        ),
        ("ippo", 4.0, 32.0)
    );
    assert_eq!(rep.scale[1].agent_steps, 40.0);
    let md = report::markdown(&rep, &[]);
    assert!(md.starts_with("# test: REPRODUCED"), "{md}");
    assert!(
        md.contains("## Also: reinforce_rises: NOT REPRODUCED\n\n**Claim.** REINFORCE rises too."),
        "{md}"
    );
    assert!(
        md.contains("| `late(reinforce) >= 5` | 5.000 | 5.000 | reproduced | 2 of 2 |"),
        "{md}"
    );
    assert!(md.contains("| ippo | 4 | 32 | 40 |"), "{md}");
    assert!(md.contains("The paper: 10 episodes"), "{md}");
    // An arm's rerun command gives every setting as its flag takes it (`--text compact`).
    let settings = crate::train::TrainSettings {
        text: Some(crate::scene::TextStyle::Compact),
        learner: Some(crate::train::LearnerKind::Lm),
        ..Default::default()
    };
    let cmd = report::command(Path::new("a.scene.ron"), Path::new("out"), &settings);
    assert!(cmd.ends_with("--learner lm --text compact"), "{cmd}");
}

#[test]
fn the_documented_example_is_a_valid_experiment() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/experiments.md")).expect("doc");
    let start = doc.find("```ron\n").expect("a ron block") + "```ron\n".len();
    let end = start + doc[start..].find("```").expect("its end");
    let path = root.join("experiments/ipd_study.experiment.ron");
    let e = parse(&doc[start..end], &path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(e.spec.arms.len(), 3);
    assert_eq!((e.spec.also.len(), e.also[0].len()), (1, 1));
    assert!(!e.spec.paper_scale.is_empty());
    assert_eq!(e.spec.figures.len(), 3);
    // The error shown in the doc is the one a misspelt arm gives.
    let bad = doc[start..end].replacen("self_play(adalign) >= 2.5", "self_play(adalgn) >= 2.5", 1);
    let msg = parse(&bad, &path).expect_err("bad").to_string();
    assert!(msg.contains("ipd_study.experiment.ron:84:20: "), "{msg}");
    assert!(
        msg.contains("unknown arm \"adalgn\"; expected one of: naive, adalign, adalign_mlp"),
        "{msg}"
    );
}

#[test]
fn a_clone_shrinks_with_the_budget() {
    let c = CloneSpec {
        from: "maze_wall_follower".into(),
        episodes: 128,
        quick_episodes: Some(32),
        epochs: 8,
        dagger: 3,
        words: false,
        lr: None,
    };
    let full = c.for_budget(false, None);
    assert_eq!((full.episodes, full.epochs, full.dagger), (128, 8, 3));
    let quick = c.for_budget(true, None);
    assert_eq!((quick.episodes, quick.epochs, quick.dagger), (32, 8, 3));
    // A smoke test (--iterations 2), with or without --quick: the quick episodes, two passes.
    for q in [false, true] {
        let smoke = c.for_budget(q, Some(2));
        assert_eq!((smoke.episodes, smoke.epochs, smoke.dagger), (32, 2, 2));
    }
    // Larger smoke budgets never grow a clone; no quick_episodes keeps the episodes.
    let plain = CloneSpec {
        quick_episodes: None,
        ..c.clone()
    };
    let big = plain.for_budget(false, Some(50));
    assert_eq!((big.episodes, big.epochs, big.dagger), (128, 8, 3));
}
