//! `emergence list`: the shipped scenes, the families and the policies.

use anyhow::Result;
use std::path::Path;

use emergence::load::{load_scene, parse_scene};
use emergence::policy::catalogue;
use emergence::scene::{Scene, SceneError, find_scenes, shipped};

/// One line of the scene list: path, family, name (or why it does not load).
fn print_scene(p: &Path, s: Result<Scene, SceneError>) {
    match s {
        Ok(s) => println!(
            "  {:<52} {:<15} {}",
            p.display(),
            s.spec.family.name(),
            s.spec.name
        ),
        Err(e) => println!("  {:<52} INVALID: {e}", p.display()),
    }
}

pub fn cmd_list(dir: Option<&Path>) -> Result<()> {
    println!("shipped scenes (embedded in this binary; the files are in the source tree):");
    for (p, text) in shipped() {
        print_scene(&p, parse_scene(text, &p));
    }
    if let Some(dir) = dir {
        if !dir.is_dir() {
            anyhow::bail!(
                "--scenes {}: not a folder; expected a folder of *.scene.ron files",
                dir.display()
            );
        }
        println!();
        println!("scenes in {}:", dir.display());
        let found = find_scenes(dir);
        if found.is_empty() {
            println!("  none found");
        }
        for p in found {
            print_scene(&p, load_scene(&p));
        }
    }
    println!();
    println!("families:");
    for f in emergence::envs::family::all() {
        println!("  {:<16} {}", f.name(), f.about());
    }
    println!();
    println!("policies:");
    let width = catalogue()
        .iter()
        .map(|p| p.family_names().join(",").len())
        .max()
        .unwrap_or(0);
    for p in catalogue() {
        println!(
            "  {:<24} {:<width$} {}",
            p.name,
            p.family_names().join(","),
            p.doc
        );
    }
    Ok(())
}
