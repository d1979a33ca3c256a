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
    println!(
        "  {:<16} repeated two-player matrix games (Prisoner's Dilemma, Stag Hunt, Chicken)",
        "Matrix"
    );
    println!(
        "  {:<16} Commons Harvest: apples regrow only near other apples; zapping beam",
        "CommonsHarvest"
    );
    println!(
        "  {:<16} Clean Up: apples grow only while the river is clean; cleaning beam",
        "CleanUp"
    );
    println!(
        "  {:<16} hide-and-seek: vision cones, boxes, ramps, locks, a preparation phase",
        "HideAndSeek"
    );
    println!(
        "  {:<16} cooperative maze: split knowledge, plates and doors, keys, talk, shared exit",
        "Maze"
    );
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
