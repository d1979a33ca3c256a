//! The files a command writes, checked before anything is written, so that a refusal leaves
//! the disk as it was: an output is never one of the command's inputs (the scene, a model
//! folder's files, a replay), two outputs never share one file (one stream would be lost),
//! and an output that already exists is refused unless the user passed `--force`, as
//! `cp -n`-style tools and most writers of experiment logs do. Files are compared by identity
//! (device and inode on Unix, the canonical path elsewhere), so another spelling of a path,
//! a symbolic link and a hard link are all caught.

use std::path::{Path, PathBuf};

/// A file named on the command line: what names it (`--metrics`, `the scene`) and its path.
#[derive(Debug, Clone)]
pub struct Named {
    /// The flag or argument, for messages.
    pub what: String,
    /// The path as given.
    pub path: PathBuf,
}

impl Named {
    /// `what` names `path`.
    pub fn new(what: impl Into<String>, path: impl Into<PathBuf>) -> Self {
        Self {
            what: what.into(),
            path: path.into(),
        }
    }
}

/// Which file a path names: an existing file by its identity, one still to be written by
/// its canonical folder and its name.
#[derive(Debug, Clone, PartialEq, Eq)]
enum FileId {
    Existing(u64, u64),
    ToBe(PathBuf),
}

fn file_id(path: &Path) -> Option<FileId> {
    if let Ok(meta) = std::fs::metadata(path) {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            return Some(FileId::Existing(meta.dev(), meta.ino()));
        }
        #[cfg(not(unix))]
        {
            drop(meta);
            return path.canonicalize().ok().map(FileId::ToBe);
        }
    }
    let name = path.file_name()?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Some(FileId::ToBe(parent.canonicalize().ok()?.join(name)))
}

/// Every file an input holds: the file itself, or a folder's files (three levels down, as
/// deep as a run's checkpoints go).
fn input_files(input: &Named, depth: u32, out: &mut Vec<(Named, FileId)>) {
    if input.path.is_dir() {
        if depth == 0 {
            return;
        }
        let Ok(entries) = std::fs::read_dir(&input.path) else {
            return;
        };
        for e in entries.flatten() {
            input_files(&Named::new(input.what.clone(), e.path()), depth - 1, out);
        }
    } else if let Some(id) = file_id(&input.path) {
        out.push((input.clone(), id));
    }
}

/// Checks `outputs` against `inputs` and each other (see the module header); `Err` says
/// which flags and files, and that nothing was written. `force`: the command's `--force`
/// (`None` for a command without one, which never replaces a file).
pub fn check(inputs: &[Named], outputs: &[Named], force: Option<bool>) -> Result<(), String> {
    let mut ins = Vec::new();
    for i in inputs {
        input_files(i, 3, &mut ins);
    }
    let mut seen: Vec<(&Named, FileId)> = Vec::new();
    for o in outputs {
        if o.path.is_dir() {
            return Err(format!(
                "{} {}: is a folder; expected a file path (nothing was written)",
                o.what,
                o.path.display()
            ));
        }
        let Some(id) = file_id(&o.path) else {
            return Err(format!(
                "{} {}: its folder does not exist (nothing was written)",
                o.what,
                o.path.display()
            ));
        };
        if let Some((i, _)) = ins.iter().find(|(_, i)| *i == id) {
            return Err(format!(
                "{} {} would write over {} {} (the same file); choose another path (nothing \
                 was written)",
                o.what,
                o.path.display(),
                i.what,
                i.path.display()
            ));
        }
        if let Some((first, _)) = seen.iter().find(|(_, s)| *s == id) {
            return Err(format!(
                "{} and {} name the same file ({}); give each its own path (nothing was \
                 written)",
                first.what,
                o.what,
                o.path.display()
            ));
        }
        if force != Some(true) && o.path.exists() {
            let hint = if force.is_some() {
                "pass --force to replace it, or choose another path"
            } else {
                "choose another path"
            };
            return Err(format!(
                "{} {}: exists; {hint} (nothing was written)",
                o.what,
                o.path.display()
            ));
        }
        seen.push((o, id));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_links_and_shared_outputs_are_refused_and_force_replaces_only_outputs() {
        let dir = tempfile::tempdir().expect("tmp");
        let d = dir.path();
        let scene = d.join("a.scene.ron");
        std::fs::write(&scene, "(...)").expect("write");
        let model = d.join("model");
        std::fs::create_dir_all(&model).expect("mkdir");
        std::fs::write(model.join("model.safetensors"), "w").expect("write");
        let ins = [
            Named::new("the scene", &scene),
            Named::new("--model", &model),
        ];
        let out = |what: &str, p: PathBuf| Named::new(what, p);
        // Fresh, distinct outputs pass.
        check(
            &ins,
            &[
                out("--metrics", d.join("m.jsonl")),
                out("--record", d.join("r.bin")),
            ],
            Some(false),
        )
        .expect("fine");
        // The scene, by another spelling, by a hard link and by a symbolic link.
        let hard = d.join("hard.ron");
        std::fs::hard_link(&scene, &hard).expect("link");
        #[cfg(unix)]
        std::os::unix::fs::symlink(&scene, d.join("soft.ron")).expect("symlink");
        for p in [d.join(".").join("a.scene.ron"), hard, d.join("soft.ron")] {
            let e = check(&ins, &[out("--hash-log", p)], Some(true)).expect_err("input");
            assert!(e.contains("--hash-log") && e.contains("the scene"), "{e}");
        }
        // A file inside an input folder.
        let e = check(
            &ins,
            &[out("--record", model.join("model.safetensors"))],
            Some(true),
        )
        .expect_err("model file");
        assert!(e.contains("--model"), "{e}");
        // Two outputs on one file, even before it exists.
        let e = check(
            &ins,
            &[
                out("--metrics", d.join("x.jsonl")),
                out("--record", d.join("./x.jsonl")),
            ],
            Some(false),
        )
        .expect_err("shared");
        assert!(e.contains("--metrics and --record"), "{e}");
        // An existing output: refused, unless forced.
        std::fs::write(d.join("old.jsonl"), "kept").expect("write");
        let e =
            check(&ins, &[out("--metrics", d.join("old.jsonl"))], Some(false)).expect_err("exists");
        assert!(e.contains("exists; pass --force"), "{e}");
        check(&ins, &[out("--metrics", d.join("old.jsonl"))], Some(true)).expect("forced");
        let e = check(&ins, &[out("--screenshot", d.join("old.jsonl"))], None).expect_err("no");
        assert!(e.contains("exists; choose another path"), "{e}");
        // A folder, and a path whose folder is missing.
        assert!(check(&ins, &[out("--json", d.to_path_buf())], Some(true)).is_err());
        assert!(check(&ins, &[out("--json", d.join("no/such/x.json"))], Some(true)).is_err());
    }
}
