//! `emergence list`: the shipped scenes, the families and the policies.

use anyhow::Result;
use std::path::Path;

use emergence::load::load_scene;
use emergence::policy::catalogue;
use emergence::scene::find_scenes;

pub fn cmd_list(dir: &Path) -> Result<()> {
    if !dir.is_dir() {
        anyhow::bail!(
            "--scenes {}: not a folder; expected a folder of *.scene.ron files",
            dir.display()
        );
    }
    println!("scenes (in {}):", dir.display());
    let found = find_scenes(dir);
    if found.is_empty() {
        println!("  none found");
    }
    for p in found {
        match load_scene(&p) {
            Ok(s) => println!(
                "  {:<52} {:<15} {}",
                p.display(),
                s.spec.family.name(),
                s.spec.name
            ),
            Err(e) => println!("  {:<52} INVALID: {e}", p.display()),
        }
    }
    println!();
    println!("families:");
    for f in emergence::envs::family::FAMILIES {
        println!("  {:<16} {}", f.name(), f.about());
    }
    println!();
    println!("policies:");
    let width = catalogue()
        .iter()
        .map(|p| p.families.join(",").len())
        .max()
        .unwrap_or(0);
    for p in catalogue() {
        println!(
            "  {:<24} {:<width$} {}",
            p.name,
            p.families.join(","),
            p.doc
        );
    }
    Ok(())
}
