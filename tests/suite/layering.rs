//! The layering is a test: every `crate::` path in `src/` is read, and a module may name
//! only the modules of the layers below its own. The layers, lowest first:
//!
//! | layer | modules | may import |
//! |---|---|---|
//! | 0 | `core` | nothing of the crate |
//! | 1 | `scene`, `metrics`, `outputs` | `core` |
//! | 2 | `envs` | the above: no policy, train, gui |
//! | 2.5 | `observe` | the above |
//! | 3 | `policy` | the above: no train, gui |
//! | 4 | `load`, `frames` | the above |
//! | 5 | `sim` | the above |
//! | 6 | `headless` | the above |
//! | 7 | `train` | the above: no gui |
//! | 8 | `experiment` | the above |
//! | 9 | `gui` | the above |
//!
//! So core imports no family, no policy, no train and no gui; scene imports only core; the
//! families import no policy, train or gui; policies import no train or gui; training
//! imports no gui. `lib.rs` (the crate's front: plugin groups, prelude) and the binary
//! (`main.rs`, `cli/`, which reach the library as `emergence::`) sit above every layer.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Lowest first; a module may import the modules of lower layers only.
const LAYERS: &[&[&str]] = &[
    &["core"],
    &["scene", "metrics", "outputs"],
    &["envs"],
    &["observe"],
    &["policy"],
    &["load", "frames"],
    &["sim"],
    &["headless"],
    &["train"],
    &["experiment"],
    &["gui"],
];

/// Files that are the crate's front or the binary, above every layer.
const FRONT: &[&str] = &["lib", "main", "cli"];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// The source without its comments (line comments, doc comments, block comments); string
/// literals are kept (a path in a string is not an import, and none of ours holds one).
fn strip_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let b = src.as_bytes();
    let mut i = 0;
    let mut depth = 0usize;
    while i < b.len() {
        if depth > 0 {
            if b[i..].starts_with(b"*/") {
                depth -= 1;
                i += 2;
            } else if b[i..].starts_with(b"/*") {
                depth += 1;
                i += 2;
            } else {
                i += 1;
            }
        } else if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            depth = 1;
            i += 2;
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// The crate's top modules a source names: `crate::m...` and each top name of a
/// `crate::{a, b::{..}}` group.
fn imported_modules(src: &str) -> BTreeSet<String> {
    let text = strip_comments(src);
    let mut out = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut rest = text.as_str();
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        // `$crate::` in a macro and `xcrate::` are not this crate's paths.
        if before.is_some_and(|c| c == '$' || c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                if depth == 0 || (c == ',' && depth == 1) {
                    let name = ident(&item);
                    if !name.is_empty() {
                        out.insert(name);
                    }
                    item.clear();
                    if depth == 0 {
                        break;
                    }
                } else {
                    item.push(c);
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

/// The top module of a file under `src/`: its first folder, or its stem for a root file.
fn module_of(rel: &Path) -> String {
    let mut parts = rel.components();
    let first = parts
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy()
        .into_owned();
    match parts.next() {
        Some(_) => first,
        None => first.trim_end_matches(".rs").to_string(),
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every import that breaks the layering, as `file: module imports other`.
fn violations(files: &[(String, String)]) -> Vec<String> {
    let mut bad = Vec::new();
    for (rel, src) in files {
        let module = module_of(Path::new(rel));
        if FRONT.contains(&module.as_str()) {
            continue;
        }
        let Some(mine) = layer_of(&module) else {
            bad.push(format!(
                "{rel}: module `{module}` is in no layer of tests/suite/layering.rs"
            ));
            continue;
        };
        for other in imported_modules(src) {
            if other == module || other == "self" || other == "super" {
                continue;
            }
            match layer_of(&other) {
                Some(l) if l < mine => {}
                Some(_) => bad.push(format!(
                    "{rel}: `{module}` (layer {mine}) imports `{other}` (layer {}), which is not below it",
                    layer_of(&other).unwrap()
                )),
                None if FRONT.contains(&other.as_str()) => {
                    bad.push(format!("{rel}: `{module}` imports the crate's front `{other}`"))
                }
                // Items defined in lib.rs itself (`crate::SimPlugins`) are the front too.
                None => bad.push(format!("{rel}: `{module}` imports `crate::{other}`, which is no layer")),
            }
        }
    }
    bad
}

#[test]
fn every_import_in_src_goes_down_the_layers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    rust_files(&root, &mut paths);
    paths.sort();
    let files: Vec<(String, String)> = paths
        .iter()
        .map(|p| {
            let rel = p
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (rel, std::fs::read_to_string(p).unwrap())
        })
        .collect();
    assert!(files.len() > 50, "read {} files under src/", files.len());
    let bad = violations(&files);
    assert!(
        bad.is_empty(),
        "imports that break the layering:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_check_sees_grouped_nested_and_inline_imports_and_ignores_comments() {
    let file = |rel: &str, src: &str| vec![(rel.to_string(), src.to_string())];
    // Each of these breaks the layering once.
    for (rel, src) in [
        ("scene/schema.rs", "pub use crate::train::TrainSettings;"),
        (
            "scene/mod.rs",
            "use crate::{core::Arena, envs::{maze, dilemma}};",
        ),
        (
            "core/agent.rs",
            "fn f() { let _ = crate::policy::catalogue(); }",
        ),
        (
            "envs/mod.rs",
            "use crate::{\n    core::*,\n    policy::PolicyRegistry,\n};",
        ),
        ("policy/lm/tokenizer.rs", "use crate::train::Algo;"),
        ("train/mod.rs", "use crate::gui::ViewerPlugin;"),
        ("load.rs", "use crate::SimPlugins;"),
        ("newthing/mod.rs", "use crate::core::Arena;"),
    ] {
        let v = violations(&file(rel, src));
        assert_eq!(v.len(), 1, "{rel}: {src:?} gave {v:?}");
    }
    // These do not.
    for (rel, src) in [
        (
            "scene/schema.rs",
            "// use crate::train::TrainSettings;\nuse crate::core::Grid;",
        ),
        (
            "scene/schema.rs",
            "/* crate::policy */ use super::params::*;",
        ),
        ("envs/maze/check.rs", "use crate::scene::{Ctx, FAM};"),
        (
            "train/mod.rs",
            "use crate::{core::Arenas, policy::lm::LmPolicy, scene::Scene};",
        ),
        ("core/mod.rs", "macro_rules! m { () => { $crate::gui::X } }"),
    ] {
        assert!(violations(&file(rel, src)).is_empty(), "{rel}: {src:?}");
    }
}
