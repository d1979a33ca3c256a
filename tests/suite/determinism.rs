//! Same seed, same trajectory: the per-step state hash compared at EVERY step between two
//! runs of each shipped scene, and, through the binary, between 1 and 2 worker threads
//! (replay files byte for byte and every step's hash).

use emergence::headless::{RunConfig, run};
use emergence::load::load_scene;
use emergence::scene::find_scenes;
use std::path::{Path, PathBuf};
use std::process::Command;

fn shipped() -> Vec<PathBuf> {
    let s = find_scenes(&Path::new(env!("CARGO_MANIFEST_DIR")).join("scenes"));
    assert!(s.len() >= 5);
    s
}

/// Steps a run of `episodes` episodes of `path` must have hashed at least (up to `most`): a
/// check that the scene ran, for scenes of short episodes too (the memory fork's 4 steps).
fn at_least(path: &Path, episodes: u32, most: usize) -> usize {
    let steps = load_scene(path).expect("scene").spec.episode.max_steps;
    ((steps * episodes) as usize).min(most)
}

fn hashes(path: &Path, seed: u64) -> Vec<u64> {
    let mut cfg = RunConfig::new(load_scene(path).expect("scene"));
    cfg.arenas = 6;
    cfg.episodes = 2;
    cfg.seed = seed;
    cfg.hash_steps = true;
    run(&cfg, |_| {}).expect("run").step_hashes
}

#[test]
fn same_seed_same_hash_at_every_step() {
    for path in shipped() {
        let a = hashes(&path, 11);
        let b = hashes(&path, 11);
        assert!(
            a.len() >= at_least(&path, 2, 11),
            "{}: {} steps",
            path.display(),
            a.len()
        );
        assert_eq!(a.len(), b.len(), "{}", path.display());
        for (t, (x, y)) in a.iter().zip(&b).enumerate() {
            assert_eq!(x, y, "{}: step {t} differs", path.display());
        }
        let c = hashes(&path, 12);
        assert_ne!(
            a,
            c,
            "{}: another seed gave the same trajectory",
            path.display()
        );
    }
}

fn run_binary(scene: &Path, threads: u32, dir: &Path) -> (Vec<u8>, String) {
    let replay = dir.join(format!("replay-{threads}.jsonl"));
    let hashes = dir.join(format!("hashes-{threads}.txt"));
    let out = Command::new(env!("CARGO_BIN_EXE_emergence"))
        .args([
            "run",
            &scene.to_string_lossy(),
            "--arenas",
            "48",
            "--episodes",
            "1",
            "--seed",
            "5",
            "--quiet",
        ])
        .args([
            "--threads",
            &threads.to_string(),
            "--record-arenas",
            "0,7,47",
        ])
        .arg("--record")
        .arg(&replay)
        .arg("--hash-log")
        .arg(&hashes)
        // Each scene writes over the previous scene's files.
        .arg("--force")
        .output()
        .expect("binary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        std::fs::read(&replay).expect("replay"),
        std::fs::read_to_string(&hashes).expect("hashes"),
    )
}

#[test]
fn one_and_two_threads_give_identical_replays_and_hashes() {
    let dir = tempfile::tempdir().expect("tempdir");
    for path in shipped() {
        let (r1, h1) = run_binary(&path, 1, dir.path());
        let (r2, h2) = run_binary(&path, 2, dir.path());
        assert!(
            h1.lines().count() >= at_least(&path, 1, 6),
            "{}",
            path.display()
        );
        for (t, (a, b)) in h1.lines().zip(h2.lines()).enumerate() {
            assert_eq!(
                a,
                b,
                "{}: step {t} differs between 1 and 2 threads",
                path.display()
            );
        }
        assert_eq!(h1.lines().count(), h2.lines().count());
        assert!(r1.len() > 100);
        assert!(
            r1 == r2,
            "{}: replays differ between 1 and 2 threads",
            path.display()
        );
        // And run twice with the same thread count.
        let (r3, _) = run_binary(&path, 2, dir.path());
        assert!(
            r2 == r3,
            "{}: replays differ between two runs",
            path.display()
        );
    }
}

/// The order of the step's systems is the schedule's, not the executor's: ambiguity
/// detection is on as an error, every plugin of the simulation builds without one, and a
/// system added with a conflicting, unordered access is refused (so the check is live).
#[test]
fn the_step_schedule_has_no_ambiguous_systems() {
    use bevy::prelude::*;
    use emergence::core::{Observation, SimSchedule, SimSystems};
    let build = |extra: bool| {
        let mut app = App::new();
        app.add_plugins(emergence::SimPlugins);
        if extra {
            // Writes observations in Observe, beside the families' systems, unordered.
            app.add_systems(
                SimSchedule,
                (|mut q: Query<&mut Observation>| {
                    for mut o in &mut q {
                        o.step += 0;
                    }
                })
                .in_set(SimSystems::Observe),
            );
        }
        let world = app.world_mut();
        world.schedule_scope(SimSchedule, |world, schedule| {
            schedule
                .initialize(world)
                .map(|_| ())
                .map_err(|e| e.to_string(schedule.graph(), world))
        })
    };
    if let Err(e) = build(false) {
        panic!("the simulation's systems are ambiguous:\n{e}");
    }
    let e = build(true).expect_err("an unordered writer of Observation must be refused");
    assert!(e.to_lowercase().contains("ambigu"), "{e}");
}
