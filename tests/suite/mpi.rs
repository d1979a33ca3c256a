//! Data-parallel training under `mpirun -np 2 --oversubscribe` (feature `mpi`, Open MPI):
//! two ranks of A arenas give the metrics rows and the checkpoint of one process of A arenas.
//!
//! The rows must be equal but for the timings and the update's losses: the arenas, their
//! seeds and so every decision are the one-process run's, and the two ranks' gradients are
//! summed in rank order where one process takes one mean over the minibatch, so the weights
//! differ in the last bits (float addition is not associative). Tolerance: every weight and
//! optimizer moment within 1e-5 of the one-process value relative to the tensor's largest
//! entry, the losses within 1e-4 relative (explained variance: relative to 1 - EV, the ratio
//! it is computed from). These runs are 2 iterations: the weights after the
//! first update are what the second rollout samples from, so equal returns in iteration 2
//! show that the drift does not change a decision there.
//!
//! Run with `cargo test --features mpi --test suite mpi::` (`scripts/test.sh` installs Open MPI and runs
//! every test with the feature).
#![cfg(feature = "mpi")]

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_emergence");

fn out_dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("mpi")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.parent().expect("parent")).expect("mkdir");
    d
}

fn train(ranks: usize, args: &[&str], out: &Path) {
    let out = out.to_str().expect("utf-8");
    let mut all = vec!["train"];
    all.extend(args);
    all.extend(["--threads", "1", "--quiet", "--out", out]);
    emergence(ranks, &all);
}

const TIMINGS: [&str; 6] = [
    "rollout_seconds",
    "inference_seconds",
    "tokens_per_sec",
    "agent_steps_per_sec",
    "training_steps_per_sec",
    "seconds",
];
const LOSSES: [&str; 9] = [
    "policy_loss",
    "value_loss",
    "entropy",
    "approx_kl",
    "clip_frac",
    "kl_ref",
    "grad_norm",
    "explained_variance",
    "advantage_std",
];

fn rows(run: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .expect("metrics.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("row"))
        .collect()
}

fn same_rows(one: &Path, two: &Path) {
    let (a, b) = (rows(one), rows(two));
    assert_eq!(a.len(), b.len(), "rows");
    for (mut x, mut y) in a.into_iter().zip(b) {
        for r in [&mut x, &mut y] {
            let o = r.as_object_mut().expect("object");
            for k in TIMINGS {
                o.remove(k);
            }
            o.remove("update_seconds");
            o.remove("reduce_seconds");
        }
        for k in LOSSES {
            if x.get(k).is_none() && y.get(k).is_none() {
                continue; // advantage_std: absent where advantages are not normalised
            }
            let (p, q) = (x[k].as_f64().expect(k), y[k].as_f64().expect(k));
            // Explained variance is 1 - var(target - value) / var(target): its rounding is
            // that of the ratio, whose size is 1 - EV (about 1 for an untrained critic, where
            // EV itself is near 0 and a relative test of EV would ask for 1e-7 of the ratio).
            let scale = if k == "explained_variance" {
                (1.0 - p).abs().max((1.0 - q).abs())
            } else {
                p.abs().max(q.abs())
            };
            assert!(
                (p - q).abs() <= 1e-4 * scale.max(1e-3),
                "iteration {}: {k} {p} (1 process) vs {q} (2 ranks)",
                x["iteration"]
            );
            x[k] = serde_json::Value::Null;
            y[k] = serde_json::Value::Null;
        }
        // Returns, metrics, counts, learning rate: exactly.
        assert_eq!(x, y, "rows apart from timings and losses");
    }
}

/// Every tensor of `file` in both checkpoints within `tol` of each other, entry by entry.
fn same_tensors(one: &Path, two: &Path, file: &str, tol: f32) {
    let dev = candle_core::Device::Cpu;
    let a = candle_core::safetensors::load(one.join(file), &dev).expect(file);
    let b = candle_core::safetensors::load(two.join(file), &dev).expect(file);
    assert_eq!(
        a.keys().collect::<std::collections::BTreeSet<_>>(),
        b.keys().collect(),
        "{file}: the tensors"
    );
    let (mut worst, mut sum, mut count) = (0f32, 0f64, 0usize);
    for (name, x) in &a {
        let x: Vec<f32> = f32s(x);
        let y: Vec<f32> = f32s(&b[name]);
        assert_eq!(x.len(), y.len(), "{name}");
        for (p, q) in x.iter().zip(&y) {
            let d = (p - q).abs();
            worst = worst.max(d);
            sum += f64::from(d);
            count += 1;
            assert!(
                d <= tol,
                "{file}: {name}: {p} vs {q} (apart by {d:e}, allowed {tol:e})"
            );
        }
    }
    eprintln!(
        "{}/{file}: largest difference {worst:e}, mean {:e} over {count} entries (allowed {tol:e})",
        one.display(),
        sum / count.max(1) as f64
    );
}

/// The weights' tolerance: a tenth of the learning rate. AdamW divides each gradient by its
/// running root mean square, so an entry whose gradient is near zero moves by up to the
/// learning rate in a step whatever its size: a last-bit difference in such a gradient
/// shows at the scale of the learning rate, not of the weight. (A wrong sum, a rank's
/// gradient missing or counted twice, moves every entry by about the learning rate.)
fn weight_tolerance(run: &Path) -> f32 {
    rows(run)[0]["lr"].as_f64().expect("lr") as f32 * 0.1
}

fn compare(name: &str, args: &[&str]) -> (PathBuf, PathBuf) {
    let one = out_dir(&format!("{name}-1"));
    let two = out_dir(&format!("{name}-2"));
    train(1, args, &one);
    train(2, args, &two);
    same_rows(&one, &two);
    let ck = "checkpoints/iter_2";
    let tol = weight_tolerance(&one);
    let model = if args.contains(&"mlp") || args.contains(&"gru") {
        "mlp.safetensors"
    } else {
        "model.safetensors"
    };
    same_tensors(&one.join(ck), &two.join(ck), model, tol);
    if args.contains(&"mappo") {
        same_tensors(&one.join(ck), &two.join(ck), "critic.safetensors", tol);
    }
    (one, two)
}

/// The language model, PPO with minibatches that mix the ranks' arenas.
#[test]
fn two_ranks_train_the_language_model_as_one_process() {
    compare(
        "lm-ippo",
        &[
            "scenes/dilemma/coordination.scene.ron",
            "--algo",
            "ippo",
            "--iterations",
            "2",
            "--arenas",
            "4",
            "--seed",
            "3",
            "--epochs",
            "2",
            "--minibatch",
            "24",
        ],
    );
}

/// The gru: each rank runs its own arenas' whole sequences (from the states stored in
/// the rollout) through candle's autograd; the summed gradients step as one process's.
#[test]
fn two_ranks_train_the_gru_as_one_process() {
    compare(
        "gru-ippo",
        &[
            "scenes/maze/corridor_pair.scene.ron",
            "--algo",
            "ippo",
            "--learner",
            "gru",
            "--iterations",
            "2",
            "--arenas",
            "4",
            "--seed",
            "2",
            "--minibatch",
            "64",
        ],
    );
}

/// The mlp with MAPPO's centralised critic on a maze (talk, global state); then the run is
/// resumed under 2 ranks from a checkpoint one process wrote, to a third iteration, and
/// equals the uninterrupted one-process run.
#[test]
fn two_ranks_train_mappo_and_resume_a_one_process_run() {
    let args = [
        "scenes/maze/corridor_pair.scene.ron",
        "--algo",
        "mappo",
        "--learner",
        "mlp",
        "--arenas",
        "4",
        "--seed",
        "2",
        "--minibatch",
        "64",
    ];
    let with = |extra: &[&'static str]| -> Vec<&str> {
        args.iter().chain(extra.iter()).copied().collect()
    };
    compare("mlp-mappo", &with(&["--iterations", "2"]));
    // 3 iterations in one process, against: one process stopped after 2 (the schedule of
    // 3), resumed by 2 ranks for the third.
    let whole = out_dir("mlp-mappo-whole");
    train(1, &with(&["--iterations", "3"]), &whole);
    let half = out_dir("mlp-mappo-resumed");
    train(1, &with(&["--iterations", "3", "--stop-after", "2"]), &half);
    let o = Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-np", "2", BIN])
        .args(["train", "--resume"])
        .arg(&half)
        .args(["--quiet"])
        .output()
        .expect("mpirun");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    same_rows(&whole, &half);
    let ck = "checkpoints/iter_3";
    same_tensors(
        &whole.join(ck),
        &half.join(ck),
        "mlp.safetensors",
        weight_tolerance(&whole),
    );
}

/// `emergence ARGS` in one process, or under `mpirun -np ranks`; its stdout.
fn emergence(ranks: usize, args: &[&str]) -> String {
    let mut cmd = if ranks > 1 {
        let mut c = Command::new("mpirun");
        c.args(["--allow-run-as-root", "--oversubscribe", "-np"])
            .arg(ranks.to_string())
            .arg(BIN);
        c
    } else {
        Command::new(BIN)
    };
    let o = cmd
        .args(args)
        .output()
        .expect("run (is Open MPI's mpirun installed?)");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{ranks} rank(s) {args:?}: {out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// A JSON file without the given top-level keys (timings).
fn json_without(path: &Path, keys: &[&str]) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut v: serde_json::Value = serde_json::from_str(&text).expect("json");
    if let Some(o) = v.as_object_mut() {
        for k in keys {
            o.remove(*k);
        }
    }
    v
}

/// `reproduce` under two ranks runs each rank's share of the experiment's runs (each an
/// ordinary one-process run) and rank 0 writes the report of one process: the same report,
/// the same runs (their rows exactly, timings aside), the same final evaluations. Then
/// `eval` of one of those runs against three partners, spread over two ranks, prints and
/// writes what one process does.
#[test]
fn reproduce_and_eval_spread_over_ranks_give_the_one_process_results() {
    let dir = out_dir("reproduce");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let file = dir.join("small.experiment.ron");
    std::fs::write(&file, include_str!("../data/small.experiment.ron")).expect("write");
    let f = file.to_str().expect("utf-8");
    let (one, two) = (dir.join("one"), dir.join("two"));
    let run = |ranks: usize, out: &Path| {
        emergence(
            ranks,
            &[
                "reproduce",
                f,
                "--threads",
                "1",
                "--quiet",
                "--out",
                out.to_str().expect("utf-8"),
            ],
        )
    };
    run(1, &one);
    let said = run(2, &two);
    assert!(said.contains("over 2 ranks"), "{said}");
    assert_eq!(
        json_without(&one.join("report.json"), &["timing"]),
        json_without(&two.join("report.json"), &["timing"]),
        "report.json"
    );
    let mut runs = 0;
    for arm in ["ippo", "reinforce"] {
        for seed in ["seed_1", "seed_2"] {
            let (a, b) = (
                one.join("runs").join(arm).join(seed),
                two.join("runs").join(arm).join(seed),
            );
            let (x, y) = (rows(&a), rows(&b));
            assert_eq!(x.len(), 4, "{arm} {seed}: rows");
            for (mut x, mut y) in x.into_iter().zip(y) {
                for r in [&mut x, &mut y] {
                    let o = r.as_object_mut().expect("object");
                    for k in TIMINGS.iter().chain(&["update_seconds"]) {
                        o.remove(*k);
                    }
                }
                assert_eq!(x, y, "{arm} {seed}: a row");
            }
            assert_eq!(
                json_without(&a.join("final_eval.json"), &["seconds"]),
                json_without(&b.join("final_eval.json"), &["seconds"]),
                "{arm} {seed}: final_eval.json"
            );
            runs += 1;
        }
    }
    assert_eq!(runs, 4);
    // eval: three partners over two ranks (rank 0 two of them, rank 1 one).
    let model = one.join("runs/ippo/seed_1");
    let eval = |ranks: usize, json: &str| {
        let said = emergence(
            ranks,
            &[
                "eval",
                model.to_str().expect("utf-8"),
                "--against",
                "self,always_defect,tit_for_tat",
                "--arenas",
                "8",
                "--threads",
                "1",
                "--json",
                dir.join(json).to_str().expect("utf-8"),
            ],
        );
        // The table, without the first line (which says how the work was spread).
        said.lines().skip(1).collect::<Vec<_>>().join("\n")
    };
    let (t1, t2) = (eval(1, "one.json"), eval(2, "two.json"));
    assert_eq!(t1, t2, "the table");
    assert_eq!(t1.lines().count(), 4, "{t1}");
    assert_eq!(
        json_without(&dir.join("one.json"), &[]),
        json_without(&dir.join("two.json"), &[]),
        "eval --json"
    );
}

/// Commands other than train, eval and reproduce say they do not spread over ranks.
#[test]
fn other_commands_refuse_to_run_under_mpirun() {
    let o = Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-np", "2", BIN])
        .args(["run", "scenes/dilemma/coordination.scene.ron", "--quiet"])
        .output()
        .expect("mpirun");
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("only `train`, `eval` and `reproduce` spread"),
        "{err}"
    );
}

/// A tensor's entries as f32 (counters stored as integers included).
fn f32s(t: &candle_core::Tensor) -> Vec<f32> {
    t.flatten_all()
        .and_then(|t| t.to_dtype(candle_core::DType::F32))
        .and_then(|t| t.to_vec1())
        .expect("entries")
}
