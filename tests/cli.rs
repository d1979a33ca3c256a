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
