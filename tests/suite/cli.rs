//! The command line as a user meets it when something goes wrong: the files a user owns are
//! never written over, and a refusal writes nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn emergence(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_emergence"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn shipped(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenes/dilemma")
        .join(name)
}

/// An output that is an input (by a hard link, where comparing names would miss it), two
/// outputs on one file, and an output that exists: each refused with the flags named,
/// nothing written; `--force` replaces an existing output and only that.
#[test]
fn outputs_never_write_over_inputs_or_each_other_and_existing_ones_need_force() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    std::fs::copy(shipped("prisoners_dilemma.scene.ron"), d.join("pd.ron")).expect("copy");
    let scene = std::fs::read(d.join("pd.ron")).expect("read");
    std::fs::hard_link(d.join("pd.ron"), d.join("linked.ron")).expect("link");
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "pd.ron", "--arenas", "2", "--quiet"];
        args.extend_from_slice(extra);
        emergence(d, &args)
    };
    for flag in ["--hash-log", "--metrics", "--record"] {
        let o = run(&[flag, "linked.ron"]);
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(
            e.contains(&format!("{flag} linked.ron would write over the scene")),
            "{e}"
        );
        assert_eq!(std::fs::read(d.join("pd.ron")).expect("read"), scene);
    }
    let o = run(&["--metrics", "out.jsonl", "--record", "./out.jsonl"]);
    assert!(stderr(&o).contains("--metrics and --record name the same file"));
    assert!(!d.join("out.jsonl").exists(), "nothing is written");

    assert!(run(&["--metrics", "m.jsonl"]).status.success());
    std::fs::write(d.join("m.jsonl"), "mine").expect("write");
    let o = run(&["--metrics", "m.jsonl"]);
    assert!(
        stderr(&o).contains("m.jsonl: exists; pass --force"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read(d.join("m.jsonl")).expect("read"), b"mine");
    assert!(run(&["--metrics", "m.jsonl", "--force"]).status.success());
    assert_ne!(std::fs::read(d.join("m.jsonl")).expect("read"), b"mine");
    // --force never reaches an input.
    let o = run(&["--hash-log", "linked.ron", "--force"]);
    assert!(!o.status.success());
    assert_eq!(std::fs::read(d.join("pd.ron")).expect("read"), scene);
}

/// A training run of the Prisoner's Dilemma with the `mlp` learner (fast), a checkpoint
/// every iteration, into `out` (relative to `dir`).
fn train_args(out: &str, iterations: u32) -> Vec<String> {
    let scene = shipped("prisoners_dilemma.scene.ron");
    [
        "train",
        &scene.to_string_lossy(),
        "--learner",
        "mlp",
        "--iterations",
        &iterations.to_string(),
        "--arenas",
        "4",
        "--seed",
        "3",
        "--checkpoint-every",
        "1",
        "--threads",
        "1",
        "--quiet",
        "--out",
        out,
    ]
    .map(String::from)
    .to_vec()
}

fn run_ok(dir: &Path, args: &[String]) -> String {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = emergence(dir, &args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The rows of a run's metrics.jsonl without their timings.
fn rows(run: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .expect("metrics")
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).expect("a whole row");
            let m = v.as_object_mut().expect("object");
            m.retain(|k, _| !k.ends_with("seconds") && !k.ends_with("per_sec"));
            v
        })
        .collect()
}

/// `strace`, which kills the process at its Nth write to a file (Debian package `strace`;
/// `.ci/run` installs it).
fn strace() -> Command {
    let probe = Command::new("strace").arg("-V").output();
    assert!(
        probe.is_ok_and(|o| o.status.success()),
        "this test kills a run at a chosen write with strace: install it (apt-get install strace)"
    );
    Command::new("strace")
}

/// Killed at its 1st, 2nd or 4th write of a metrics row (the 1st: before its first
/// checkpoint), a run resumes (from its start when it has no checkpoint) and ends with the
/// rows of a run that was never killed; leftovers of a killed checkpoint write are removed
/// and said. Rows are written in one write each, so a kill leaves whole rows.
#[test]
fn a_run_killed_at_a_metrics_write_resumes_to_the_rows_of_one_never_killed() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    run_ok(d, &train_args("whole", 5));
    let whole = rows(&d.join("whole"));
    assert_eq!(whole.len(), 5);
    for when in [1, 2, 4] {
        let name = format!("killed{when}");
        let run = d.join(&name);
        let o = strace()
            .current_dir(d)
            .args(["-f", "-qq", "-o", "/dev/null", "-e", "trace=write", "-P"])
            .arg(run.join("metrics.jsonl"))
            .args(["-e", &format!("inject=write:signal=KILL:when={when}")])
            .arg(env!("CARGO_BIN_EXE_emergence"))
            .args(train_args(&name, 5))
            .output()
            .expect("strace runs");
        assert!(
            !o.status.success(),
            "the run was not killed: {}",
            stderr(&o)
        );
        assert_eq!(rows(&run).len(), when - 1, "whole rows only");
        let leftover = run.join("checkpoints/.iter_9.partial-999999999");
        std::fs::create_dir_all(&leftover).expect("mkdir");
        let said = run_ok(
            d,
            &["train", "--resume", &name, "--quiet"].map(String::from),
        );
        if when == 1 {
            assert!(said.contains("from its start"), "{said}");
        }
        assert!(
            !leftover.exists() && said.contains(".iter_9.partial-999999999"),
            "{said}"
        );
        assert_eq!(rows(&run), whole, "killed at write {when}");
    }
    // A fresh --out into a run folder says how to continue it.
    let o = emergence(
        d,
        &train_args("killed1", 5)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert!(
        stderr(&o).contains("continue the run in it with --resume"),
        "{}",
        stderr(&o)
    );
}

/// A last row cut short (a kill inside a write, a full disk) is dropped on resume, said with
/// its line, and written again.
#[test]
fn a_metrics_row_cut_short_is_dropped_said_and_written_again() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    run_ok(d, &train_args("run", 3));
    let run = d.join("run");
    let whole = rows(&run);
    std::fs::remove_dir_all(run.join("checkpoints/iter_3")).expect("rm");
    let text = std::fs::read_to_string(run.join("metrics.jsonl")).expect("read");
    let cut = text.trim_end().len() - 40;
    std::fs::write(run.join("metrics.jsonl"), &text[..cut]).expect("cut");
    let said = run_ok(
        d,
        &["train", "--resume", "run", "--quiet"].map(String::from),
    );
    assert!(
        said.contains("metrics.jsonl:3: dropped a row cut short"),
        "{said}"
    );
    assert_eq!(rows(&run), whole);
    let csv = std::fs::read_to_string(run.join("metrics.csv")).expect("csv");
    assert_eq!(csv.lines().count(), 4, "a header and 3 rows: {csv}");
}

/// One process at a time on a run folder: a second `train --resume` (or a fresh run into it)
/// is refused naming the holder's pid and touches nothing; once the holder is gone (the
/// kernel releases its lock however it ends), the run continues, and its config.json
/// records the new total.
#[test]
fn a_run_folder_takes_one_process_at_a_time() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    run_ok(d, &train_args("run", 2));
    let run = d.join("run");
    let before = std::fs::read(run.join("metrics.jsonl")).expect("read");
    let held = emergence::train::run_dir::RunLock::acquire(&run).expect("lock");
    let o = emergence(
        d,
        &["train", "--resume", "run", "--iterations", "3", "--quiet"],
    );
    let e = stderr(&o);
    assert!(
        !o.status.success() && e.contains(&format!("in use by process {}", std::process::id())),
        "{e}"
    );
    assert_eq!(
        std::fs::read(run.join("metrics.jsonl")).expect("read"),
        before
    );
    drop(held);
    run_ok(
        d,
        &["train", "--resume", "run", "--iterations", "3", "--quiet"].map(String::from),
    );
    assert_eq!(rows(&run).len(), 3);
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("config.json")).expect("read"))
            .expect("json");
    assert_eq!(config["settings"]["iterations"], 3);
}

/// A checkpoint's files and folder reach the disk before the rename that publishes it, and
/// the rename itself after (fsync of the files, of the temporary folder, then of
/// `checkpoints/`), traced with strace.
#[test]
fn a_checkpoint_is_flushed_to_disk_before_and_after_its_rename() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let trace = d.join("trace.txt");
    let o = strace()
        .current_dir(d)
        .args([
            "-f",
            "-qq",
            "-y",
            "-e",
            "trace=fsync,rename,renameat,renameat2",
            "-o",
        ])
        .arg(&trace)
        .arg(env!("CARGO_BIN_EXE_emergence"))
        .args(train_args("run", 1))
        .output()
        .expect("strace runs");
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&trace).expect("trace");
    let lines: Vec<&str> = text.lines().collect();
    let publish = lines
        .iter()
        .position(|l| {
            l.contains("rename")
                && l.contains(".iter_1.partial-")
                && l.contains("checkpoints/iter_1\"")
        })
        .unwrap_or_else(|| panic!("no rename of the checkpoint in:\n{text}"));
    let before = &lines[..publish];
    for file in [
        "mlp.safetensors",
        "mlp.json",
        "optimizer.safetensors",
        "trainer_state.json",
    ] {
        assert!(
            before
                .iter()
                .any(|l| l.contains("fsync(") && l.contains(&format!("/{file}>"))),
            "{file} not flushed before the rename:\n{text}"
        );
    }
    // The folder itself: `.iter_1.partial-PID>` closes the descriptor's path.
    let folder_flushed = before.iter().any(|l| {
        l.contains("fsync(")
            && l.split(".iter_1.partial-").nth(1).is_some_and(|rest| {
                let digits = rest.trim_start_matches(|c: char| c.is_ascii_digit());
                digits.len() < rest.len() && digits.starts_with('>')
            })
    });
    assert!(
        folder_flushed,
        "the checkpoint's folder not flushed before the rename:\n{text}"
    );
    assert!(
        lines[publish..]
            .iter()
            .any(|l| l.contains("fsync(") && l.contains("/run/checkpoints>")),
        "checkpoints/ not flushed after the rename:\n{text}"
    );
}

/// Small inputs that used to pass silently: a byte-order mark before a scene (accepted), an
/// arena recorded twice (refused), a tokenizer with two tokens on one id or without its
/// unknown token (refused when the model loads), and a scene word the model's tokenizer
/// lacks (a warning, once per word, at `check` and when a run starts).
#[test]
fn small_inputs_are_accepted_refused_or_warned_about_as_they_should() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let text = std::fs::read_to_string(shipped("prisoners_dilemma.scene.ron")).expect("read");
    std::fs::write(d.join("bom.ron"), format!("\u{feff}{text}")).expect("write");
    let o = emergence(d, &["check", "bom.ron"]);
    assert!(o.status.success(), "{}", stderr(&o));

    let o = emergence(
        d,
        &[
            "run",
            "bom.ron",
            "--arenas",
            "2",
            "--record",
            "r.jsonl",
            "--record-arenas",
            "0,1,0",
            "--quiet",
        ],
    );
    assert!(
        stderr(&o).contains("--record-arenas names arena 0 twice"),
        "{}",
        stderr(&o)
    );
    assert!(!d.join("r.jsonl").exists());

    // A model whose tokenizer knows only the shipped Prisoner's Dilemma.
    std::fs::create_dir_all(d.join("scenes")).expect("mkdir");
    std::fs::write(d.join("scenes/pd.scene.ron"), &text).expect("write");
    let o = emergence(d, &["model", "init", "--out", "m", "--scenes", "scenes"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let zebra = text.replace(
        "(name: \"row\", policy: \"tit_for_tat\")",
        "(name: \"zebra\", policy: lm(model: \"m\"))",
    );
    assert_ne!(zebra, text);
    std::fs::write(d.join("zebra.ron"), &zebra).expect("write");
    let warning = "the scene's team name \"zebra\" is not in this tokenizer";
    for args in [
        &["check", "zebra.ron"][..],
        &["run", "zebra.ron", "--arenas", "2", "--quiet"],
    ] {
        let o = emergence(d, args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        assert_eq!(
            stderr(&o).matches(warning).count(),
            1,
            "{args:?}: {}",
            stderr(&o)
        );
    }

    let tpath = d.join("m/tokenizer.json");
    let original = std::fs::read_to_string(&tpath).expect("read");
    let mut json: serde_json::Value = serde_json::from_str(&original).expect("json");
    let id = json["model"]["vocab"]["cooperate"].clone();
    json["model"]["vocab"]["defect"] = id;
    std::fs::write(&tpath, json.to_string()).expect("write");
    let o = emergence(d, &["model", "info", "m"]);
    assert!(
        stderr(&o).contains("tokenizer.json") && stderr(&o).contains("share the id"),
        "{}",
        stderr(&o)
    );
    let mut json: serde_json::Value = serde_json::from_str(&original).expect("json");
    json["model"]["unk_token"] = "<nope>".into();
    std::fs::write(&tpath, json.to_string()).expect("write");
    let o = emergence(d, &["model", "info", "m"]);
    assert!(
        stderr(&o).contains("its unknown token \"<nope>\" is not in its vocabulary"),
        "{}",
        stderr(&o)
    );
}

/// `emergence reproduce`: every shipped experiment checks; one runs end to end at a tiny
/// budget (two iterations, one seed: a smoke test, whose verdict is not asserted) and writes
/// a report that parses, with its figures; run again on the same folder, every run is kept
/// and the report is the same (timings aside); another budget on that folder is refused;
/// a bad experiment file is refused at its line and column.
#[test]
fn reproduce_runs_a_shipped_experiment_end_to_end_and_resumes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().expect("tmp");
    let experiments = root.join("experiments");
    let list = emergence(
        dir.path(),
        &[
            "reproduce",
            "--list",
            "--dir",
            &experiments.display().to_string(),
        ],
    );
    assert!(list.status.success(), "{}", stderr(&list));
    let listed = String::from_utf8_lossy(&list.stdout).into_owned();
    for name in [
        "ipd_advantage_alignment",
        "commons_tragedy",
        "hide_and_seek_phases",
        "maze_collaboration_gap",
        "cory_vs_ppo",
    ] {
        assert!(listed.contains(name), "{listed}");
        let file = experiments.join(format!("{name}.experiment.ron"));
        let o = emergence(dir.path(), &["check", &file.display().to_string()]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
    }
    assert!(!listed.contains("error:"), "{listed}");
    let out = dir.path().join("ipd");
    let args = |extra: &[&str]| {
        let mut a = vec![
            "reproduce".to_string(),
            "ipd_advantage_alignment".into(),
            "--dir".into(),
            experiments.display().to_string(),
            "--out".into(),
            out.display().to_string(),
            "--iterations".into(),
            "2".into(),
            "--seeds".into(),
            "1".into(),
            "--threads".into(),
            "2".into(),
            "--quiet".into(),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let first = run_ok(dir.path(), &args(&[]));
    assert!(first.contains("ipd_advantage_alignment: "), "{first}");
    let read_report = || {
        let text = std::fs::read_to_string(out.join("report.json")).expect("report.json");
        let mut v: serde_json::Value = serde_json::from_str(&text).expect("parses");
        v.as_object_mut().expect("object").remove("timing");
        v
    };
    let report = read_report();
    assert_eq!(report["arms"].as_array().map(Vec::len), Some(4));
    assert_eq!(report["checks"].as_array().map(Vec::len), Some(8));
    assert!(
        report["budget"]
            .as_str()
            .is_some_and(|b| b.contains("smoke test")),
        "{report}"
    );
    let md = std::fs::read_to_string(out.join("report.md")).expect("report.md");
    assert!(md.contains("| check | left | right | verdict |"), "{md}");
    assert!(
        md.contains("emergence train scenes/adalign.scene.ron"),
        "{md}"
    );
    for f in ["curves.png", "eval.png", "eval_curves.png"] {
        let p = out.join("figures").join(f);
        let bytes = std::fs::read(&p).expect("figure");
        assert!(bytes.starts_with(b"\x89PNG"), "{}", p.display());
    }
    for arm in ["reinforce", "ippo", "adalign", "shared"] {
        let run = out.join("runs").join(arm).join("seed_3");
        assert_eq!(rows(&run).len(), 2, "{arm}");
        assert!(run.join("final_eval.json").is_file(), "{arm}");
    }
    let again = run_ok(dir.path(), &args(&[]));
    assert!(again.contains("4 runs kept from before"), "{again}");
    assert_eq!(read_report(), report);
    // Another budget in the same folder: refused, nothing touched.
    let o = emergence(
        dir.path(),
        &args(&["--quick"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("choose another --out"),
        "{}",
        stderr(&o)
    );
    assert_eq!(read_report(), report);
    // A bad experiment: its line and column.
    let bad = dir.path().join("bad.experiment.ron");
    let text = std::fs::read_to_string(experiments.join("cory_vs_ppo.experiment.ron"))
        .expect("shipped")
        .replace("\"kl(cory) <= kl(ppo)\"", "\"kl(cory) <= kl(pop)\"");
    std::fs::write(&bad, &text).expect("write");
    let o = emergence(
        dir.path(),
        &["reproduce", "bad.experiment.ron", "--out", "never"],
    );
    assert!(!o.status.success());
    let line = text
        .lines()
        .position(|l| l.contains("kl(pop)"))
        .expect("line")
        + 1;
    let col = text
        .lines()
        .nth(line - 1)
        .and_then(|l| l.find("pop"))
        .expect("col")
        + 1;
    let err = stderr(&o);
    assert!(
        err.contains(&format!(
            "bad.experiment.ron:{line}:{col}: unknown arm \"pop\""
        )),
        "{err}"
    );
    assert!(!dir.path().join("never").exists());
    // An unknown name lists the shipped ones.
    let o = emergence(
        dir.path(),
        &[
            "reproduce",
            "ipd",
            "--out",
            "never",
            "--dir",
            &experiments.display().to_string(),
        ],
    );
    assert!(
        stderr(&o).contains("ipd_advantage_alignment"),
        "{}",
        stderr(&o)
    );
}

/// From a folder with no `scenes/`: `list` shows the shipped scenes (embedded) and a user's
/// `--scenes` folder added to them; `model init` covers the shipped scenes' words; `--model
/// tiny` means the embedded preset in `run` as in `train`, and a name that is neither a
/// preset nor a folder is refused naming the flag.
#[test]
fn list_and_model_init_work_from_any_folder_and_model_means_the_same_everywhere() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let o = emergence(d, &["list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for p in emergence::scene::find_scenes(&root.join("scenes")) {
        let shown = p.strip_prefix(root).unwrap().display().to_string();
        assert!(out.contains(&shown), "{shown} not listed:\n{out}");
    }
    assert!(!out.contains("INVALID"), "{out}");
    for f in emergence::envs::family::names() {
        assert!(out.contains(f), "{f} not listed");
    }

    std::fs::create_dir_all(d.join("mine")).expect("mkdir");
    let own = std::fs::read_to_string(shipped("stag_hunt.scene.ron")).expect("read");
    let own = own.replace("(name: \"hunter_a\"", "(name: \"rowan\"");
    std::fs::write(d.join("mine/own.scene.ron"), own).expect("write");
    let o = emergence(d, &["list", "--scenes", "mine"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(out.contains("mine/own.scene.ron"), "{out}");
    let o = emergence(d, &["list", "--scenes", "nowhere"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--scenes nowhere: not a folder"),
        "{}",
        stderr(&o)
    );

    let o = emergence(d, &["model", "init", "--out", "m", "--scenes", "mine"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let vocab = std::fs::read_to_string(d.join("m/tokenizer.json")).expect("tokenizer");
    // A team name of a shipped maze scene and one of the user's scene.
    for word in ["\"solo\"", "\"rowan\""] {
        assert!(vocab.contains(word), "{word} not in the tokenizer");
    }

    let pd = shipped("prisoners_dilemma.scene.ron");
    let pd = pd.to_str().unwrap();
    let run = |model: &str| {
        emergence(
            d,
            &["run", pd, "--policy", "lm", "--model", model, "--quiet"],
        )
    };
    let o = run("tiny");
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run("m");
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run("nothing_here");
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--model \"nothing_here\": expected tiny, small or a model folder"),
        "{}",
        stderr(&o)
    );
}

/// `--device` on train, reproduce and eval: a device that is not `cpu` or `cuda:N`, or a GPU
/// this build lacks, is refused with the flag named, before anything is read or written.
#[test]
fn a_device_that_cannot_be_used_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let scene = shipped("coordination.scene.ron");
    let scene = scene.to_str().expect("utf-8");
    // A build with the `cuda` feature may open cuda:0: only the names are checked there.
    let mut refused = vec![
        ("gpu", "expected cpu or cuda:N"),
        ("cuda:x", "expected cpu or cuda:N"),
    ];
    if !cfg!(feature = "cuda") {
        refused.push(("cuda:0", "this build has no CUDA"));
    }
    for (device, why) in refused {
        for args in [
            vec![
                "train",
                scene,
                "--iterations",
                "1",
                "--arenas",
                "2",
                "--out",
                "run",
            ],
            vec![
                "reproduce",
                "maze_collaboration_gap",
                "--out",
                "rep",
                "--iterations",
                "1",
            ],
            vec!["eval", "nowhere", scene, "--against", "self"],
        ] {
            let mut args = args;
            args.extend(["--device", device]);
            let o = emergence(d, &args);
            let err = stderr(&o);
            assert!(!o.status.success(), "{args:?} ran");
            assert!(
                err.contains("--device") && err.contains(why),
                "{args:?}: {err}"
            );
            assert!(
                !d.join("run").exists() && !d.join("rep").exists(),
                "{args:?} wrote"
            );
        }
    }
}

/// candle's matrix product asks for a thread count at every call, and finds it by reading
/// `/proc/cpuinfo` unless `RAYON_NUM_THREADS` is set: the binary sets it (from `--threads`,
/// else from candle's own count, read once), so a `gru` run, with or without `--threads`,
/// reads that file a handful of times, not once per product (thousands).
#[cfg(target_os = "linux")]
#[test]
fn candle_does_not_read_cpuinfo_at_every_product() {
    let dir = tempfile::tempdir().expect("tmp");
    let scene = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenes/maze/corridor_pair.scene.ron");
    for (name, extra) in [("bounded", &["--threads", "2"][..]), ("free", &[][..])] {
        let log = dir.path().join(format!("{name}.strace"));
        let out = dir.path().join(name);
        let o = strace()
            .args(["-f", "-e", "trace=openat", "-o"])
            .arg(&log)
            .arg(env!("CARGO_BIN_EXE_emergence"))
            .args(["train"])
            .arg(&scene)
            .args(["--learner", "gru", "--iterations", "2", "--arenas", "4"])
            .args(["--seed", "1", "--quiet", "--out"])
            .arg(&out)
            .args(extra)
            .output()
            .expect("strace runs");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let text = std::fs::read_to_string(&log).expect("log");
        let reads = text.lines().filter(|l| l.contains("/proc/cpuinfo")).count();
        assert!(reads <= 4, "{name}: /proc/cpuinfo opened {reads} times");
    }
}

/// `check` reads the `mlp:DIR` folders a scene's teams name, as a run's setup would: a
/// missing folder is an error that names the file and the team; a folder that fits passes.
#[test]
fn check_reads_the_mlp_folders_the_teams_name() {
    let dir = tempfile::tempdir().expect("tmp");
    let pd =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scenes/dilemma/prisoners_dilemma.scene.ron");
    let text = std::fs::read_to_string(&pd).expect("scene");
    let with = |policy: &str, name: &str| -> PathBuf {
        let p = dir.path().join(name);
        std::fs::write(
            &p,
            text.replacen("\"tit_for_tat\"", &format!("{policy:?}"), 1),
        )
        .expect("write");
        p
    };
    let missing = with("mlp:/nonexistent/net", "missing.scene.ron");
    let o = emergence(dir.path(), &["check", &missing.display().to_string()]);
    assert!(!o.status.success(), "a missing folder passed check");
    let err = stderr(&o);
    assert!(
        err.contains("/nonexistent/net/mlp.json") && err.contains("mlp:/nonexistent/net"),
        "{err}"
    );
    // A folder for the game's two actions passes.
    let net = dir.path().join("net");
    let mut row = emergence::core::Encoded::default();
    emergence::envs::senses::encode(&Default::default(), Default::default(), &mut row);
    emergence::policy::mlp::MlpNet::new(
        row.cells.len(),
        row.dense.len(),
        2,
        1,
        &candle_core::Device::Cpu,
    )
    .expect("net")
    .save(&net)
    .expect("save");
    let good = with(&format!("mlp:{}", net.display()), "good.scene.ron");
    let o = emergence(dir.path(), &["check", &good.display().to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// `run`'s summary says what its team column is: the mean return per agent of the team.
#[test]
fn the_run_summary_says_its_returns_are_per_agent() {
    let dir = tempfile::tempdir().expect("tmp");
    let scene =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scenes/dilemma/prisoners_dilemma.scene.ron");
    let o = emergence(
        dir.path(),
        &[
            "run",
            &scene.display().to_string(),
            "--arenas",
            "2",
            "--quiet",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("mean return per agent"), "{out}");
}

/// `eval --max-steps` plays the episodes cut where asked, and a grid scene's evaluation
/// prints the family's metrics under each partner's row (and writes them to --json).
#[test]
fn eval_cuts_episodes_at_max_steps_and_prints_the_familys_metrics() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    train_small(
        d,
        "scenes/maze/memory_corridor.scene.ron",
        &["--learner", "gru", "--arenas", "4"],
    );
    for (cut, steps) in [(None, "30.000"), (Some("3"), "3.000")] {
        let json = format!("eval{steps}.json");
        let mut args = vec![
            "eval",
            "run",
            "--against",
            "self,random",
            "--arenas",
            "8",
            "--json",
        ];
        args.push(&json);
        if let Some(c) = cut {
            args.extend(["--max-steps", c]);
        }
        let o = emergence(d, &args);
        assert!(o.status.success(), "{}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        // Nobody untrained gets out within 3 steps (the shortest way is 7); few within 30.
        let lines: Vec<&str> = out.lines().filter(|l| l.contains("success")).collect();
        assert_eq!(lines.len(), 2, "a metrics line per partner: {out}");
        if cut.is_some() {
            for l in &lines {
                assert!(
                    l.contains(&format!("steps_to_exit {steps}")) && l.contains("success 0.000"),
                    "{out}"
                );
            }
        }
        let written: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(d.join(&json)).expect("json"))
                .expect("json");
        assert!(written[0]["metrics"]["success"].is_number(), "{written}");
    }
}

/// `eval --against TEAM=POLICY` gives that team the policy and the model every other team
/// (Baker et al.'s transfer tests): the scripted fort builders seated as the hiders shut the
/// doorways against the trained seekers, the trained hiders against the scripted seeker do
/// not; a team the scene lacks and `TEAM=self` are refused.
#[test]
fn eval_seats_a_partner_on_one_team() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    train_small(
        d,
        "scenes/hide_and_seek/quadrant_game.scene.ron",
        &["--learner", "mlp", "--sharing", "separate", "--arenas", "2"],
    );
    let o = emergence(
        d,
        &[
            "eval",
            "run",
            "--against",
            "seekers=seeker,hiders=fort_builder",
            "--arenas",
            "16",
            "--json",
            "eval.json",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("eval.json")).expect("json"))
            .expect("json");
    let fort = |i: usize| v[i]["metrics"]["fort_prep_end"].as_f64().expect("fort");
    assert_eq!(v[0]["partner"], "seekers=seeker");
    assert_eq!(v[1]["partner"], "hiders=fort_builder");
    assert!(fort(0) < 0.1, "untrained hiders built forts: {v}");
    assert!(fort(1) > 0.5, "the fort builders were not the hiders: {v}");
    for (bad, why) in [
        ("nobody=seeker", "the scene has no team \"nobody\""),
        ("seekers=self", "expected TEAM=POLICY"),
    ] {
        let o = emergence(d, &["eval", "run", "--against", bad]);
        assert!(
            !o.status.success() && stderr(&o).contains(why),
            "{}",
            stderr(&o)
        );
    }
}

/// One training iteration of the shipped scene `rel` into `dir/run`, with `args`.
fn train_small(dir: &Path, rel: &str, args: &[&str]) {
    let scene = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    let mut all = vec![
        "train",
        scene.to_str().expect("utf-8 path"),
        "--iterations",
        "1",
    ];
    all.extend_from_slice(args);
    all.extend(["--out", "run", "--quiet"]);
    let o = emergence(dir, &all);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// `vocabulary: []` in a maze: agents that cannot speak (a one-word vocabulary is still a
/// one-bit channel, the word or silence). Language-model agents then say nothing where with
/// one word they speak; an `mlp` trained there has no talk head; 33 words are refused at their
/// line and column with the range.
#[test]
fn an_empty_maze_vocabulary_means_the_agents_cannot_speak() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let scene = |words: &str| {
        format!(
            "(name: \"quiet\",\n family: Maze(view: 1, knowledge: Strips, vocabulary: [{words}]),\n \
             map: [\"#######\", \"#S..S.#\", \"#E....#\", \"#######\"],\n \
             legend: {{'#': Wall, '.': Floor, 'S': Spawn, 'E': Exit}},\n \
             teams: [(name: \"pair\", count: 2, policy: \"lm\")],\n episode: (max_steps: 8))"
        )
    };
    let messages = |words: &str| -> f64 {
        std::fs::write(d.join("q.scene.ron"), scene(words)).expect("scene");
        let o = emergence(d, &["run", "q.scene.ron", "--arenas", "16"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        out.lines()
            .find_map(|l| l.strip_prefix("messages"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no messages in the summary:\n{out}"))
    };
    assert_eq!(messages(""), 0.0, "agents without words spoke");
    assert!(
        messages("\"here\"") > 0.0,
        "one word and silence: they speak"
    );

    std::fs::write(d.join("q.scene.ron"), scene("")).expect("scene");
    let o = emergence(
        d,
        &[
            "train",
            "q.scene.ron",
            "--learner",
            "mlp",
            "--iterations",
            "1",
            "--arenas",
            "2",
            "--out",
            "r",
            "--quiet",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let config = std::fs::read_to_string(d.join("r/checkpoints/iter_1/mlp.json"))
        .or_else(|_| std::fs::read_to_string(d.join("r/mlp.json")))
        .expect("the mlp's config");
    let words = serde_json::from_str::<serde_json::Value>(&config).expect("json")["words"]
        .as_u64()
        .unwrap_or(0);
    assert_eq!(
        words, 0,
        "a talk head for agents that cannot speak: {config}"
    );

    let many: Vec<String> = (0..33).map(|i| format!("\"w{i}\"")).collect();
    std::fs::write(d.join("q.scene.ron"), scene(&many.join(", "))).expect("scene");
    let o = emergence(d, &["check", "q.scene.ron"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("q.scene.ron:2:55:") && stderr(&o).contains("0 to 32 words"),
        "{}",
        stderr(&o)
    );
}

/// A reader that closes the pipe early (`emergence run ... | head -1`) ends the command
/// quietly, as any Unix tool: no panic, no backtrace.
#[test]
fn a_closed_pipe_ends_a_command_without_a_panic() {
    use std::process::Stdio;
    let dir = tempfile::tempdir().expect("tmp");
    let scene = shipped("prisoners_dilemma.scene.ron");
    let mut child = Command::new(env!("CARGO_BIN_EXE_emergence"))
        .current_dir(dir.path())
        .args(["run", scene.to_str().unwrap(), "--arenas", "4"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    drop(child.stdout.take());
    let o = child.wait_with_output().expect("it ends");
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
}

/// `train --text compact --memory 2`: the run's settings keep the style and the memory
/// (config.json), and what reads the run again, `--resume`, `eval` and `view --checkpoint`
/// (`load::run_text`), reads them; without the flags the scene's own are kept; `--text` with
/// `--resume` is refused like any setting.
#[test]
fn train_text_is_kept_with_the_run() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let scene = shipped("coordination.scene.ron");
    let train = |out: &str, extra: &[&str]| {
        let mut args = vec![
            "train",
            scene.to_str().unwrap(),
            "--iterations",
            "1",
            "--arenas",
            "2",
            "--out",
            out,
            "--quiet",
        ];
        args.extend_from_slice(extra);
        let o = emergence(d, &args);
        assert!(o.status.success(), "{}", stderr(&o));
    };
    train("compact", &["--text", "compact", "--memory", "2"]);
    train("plain", &[]);
    use emergence::scene::TextStyle;
    for (run, style, memory) in [
        ("compact", TextStyle::Compact, 2),
        ("plain", TextStyle::Full, 0),
    ] {
        assert_eq!(
            emergence::load::run_text(&d.join(run)),
            (Some(style), Some(memory)),
            "{run}: as view --checkpoint reads it"
        );
        let config = std::fs::read_to_string(d.join(run).join("config.json")).expect("config");
        let saved: serde_json::Value = serde_json::from_str(&config).expect("json");
        assert_eq!(saved["settings"]["text"], format!("{style:?}"), "{config}");
        let copy = emergence::load::load_run_scene(&d.join(run).join("scene.ron")).expect("copy");
        assert_eq!(
            (copy.spec.text, copy.spec.memory),
            (style, memory),
            "{run}: the scene copy as eval reads it"
        );
        let resumed = emergence::train::resume_config(&d.join(run), None).expect("resume");
        assert_eq!(
            resumed.scene.spec.text, style,
            "{run}: as --resume reads it"
        );
    }
    assert_eq!(emergence::load::run_text(d), (None, None), "not a run");
    let o = emergence(d, &["train", "--resume", "compact", "--text", "full"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--text"), "{}", stderr(&o));
}

/// `emergence model bench`: the forward pass of a preset or a model folder timed on this
/// machine, its tokens/s and GFLOP/s, a matrix product's rate beside it and the vector
/// instructions the kernels run; bad arguments refused with what was expected.
#[test]
fn model_bench_times_the_forward_and_names_the_vector_instructions() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let o = emergence(
        d,
        &[
            "model",
            "bench",
            "--model",
            "tiny",
            "--batch",
            "2",
            "--prompt",
            "8",
            "--seconds",
            "0.1",
            "--threads",
            "1",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let field = |name: &str| -> String {
        out.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| panic!("no {name:?} in {out}"))
    };
    assert!(
        field("shape").starts_with("batch 2 x prompt 8 = 16 tokens; 1 threads"),
        "{out}"
    );
    let isa = field("vector instructions");
    assert!(
        ["AVX-512", "AVX2+FMA", "baseline"].contains(&isa.as_str()),
        "{out}"
    );
    for name in ["forward tokens/s", "forward GFLOP/s"] {
        let v: f64 = field(name).parse().expect("a number");
        assert!(v > 0.0, "{name}: {out}");
    }
    let rate = field("matmul GFLOP/s");
    assert!(
        rate.contains("(16 x 128 x 512, the MLP's first product)"),
        "{out}"
    );
    // A model folder reads as a preset does.
    let o = emergence(d, &["model", "init", "--out", "m", "--preset", "tiny"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = emergence(
        d,
        &[
            "model",
            "bench",
            "--model",
            "m",
            "--batch",
            "1",
            "--prompt",
            "4",
            "--seconds",
            "0.1",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("the folder m"));
    for (args, words) in [
        (
            &["--model", "nowhere"][..],
            "--model nowhere: expected tiny, small or a model folder",
        ),
        (
            &["--model", "tiny", "--prompt", "9000"],
            "the model reads at most 8192 positions",
        ),
        (&["--seconds", "0"], "expected seconds from 0.1 to 600"),
        (&["--batch", "0"], "--batch"),
    ] {
        let mut a = vec!["model", "bench"];
        a.extend_from_slice(args);
        let o = emergence(d, &a);
        assert!(!o.status.success(), "{args:?}");
        assert!(stderr(&o).contains(words), "{args:?}: {}", stderr(&o));
    }
}
