//! Agent-steps per second of every family with 256 arenas, and the cost of vision.
//! Run: `cargo bench --bench env_step` (`-- hide_and_seek`, `-- maze`, `-- vision` for one
//! part). Criterion reports throughput in agent-steps/s ("elem/s"). Social dilemmas run the
//! random policy; hide-and-seek runs the scenes' own scripted bots (fort builders are
//! oracles and plan with breadth-first searches); maze scenes run both the random policy and
//! their own bots (`…/bots`). Targets on a 2-core machine: ≥5M for matrix games, ≥2M for
//! Commons Harvest, ≥1M for hide-and-seek.

#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use bevy::math::IVec2;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use emergence::core::Dir4;
use emergence::envs::hide_and_seek::{HideSeekParams, HnsArena};
use emergence::headless::{RunConfig, build_app};
use emergence::load::load_scene;
use std::hint::black_box;
use std::path::Path;

const ARENAS: u32 = 256;

/// Steps 256 arenas of `file` (under `scenes/`), with the scene's bots or all `random`.
fn bench_scene(c: &mut Criterion, file: &str, keep_bots: bool) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenes")
        .join(file);
    let mut scene = load_scene(&path).expect("shipped scene");
    if !keep_bots {
        for a in &mut scene.agents {
            a.policy = "random".into();
        }
    }
    let agents = scene.agent_count() as u64;
    let mut cfg = RunConfig::new(scene);
    cfg.arenas = ARENAS;
    cfg.episodes = u32::MAX;
    cfg.record_arenas = vec![];
    let mut app = build_app(&cfg).expect("app");
    // Warm up past the first reset.
    for _ in 0..10 {
        app.update();
    }
    let mut group = c.benchmark_group("env_step");
    group.throughput(Throughput::Elements(agents * u64::from(ARENAS)));
    let name = file.trim_end_matches(".scene.ron");
    let name = if keep_bots {
        format!("{name}/bots")
    } else {
        name.to_string()
    };
    group.bench_function(name, |b| b.iter(|| app.update()));
    group.finish();
}

fn env_step(c: &mut Criterion) {
    for file in [
        "dilemma/prisoners_dilemma.scene.ron",
        "dilemma/stag_hunt.scene.ron",
        "dilemma/chicken.scene.ron",
        "dilemma/commons_harvest_open.scene.ron",
        "dilemma/clean_up.scene.ron",
    ] {
        bench_scene(c, file, false);
    }
    for file in [
        "hide_and_seek/open_field.scene.ron",
        "hide_and_seek/two_rooms.scene.ron",
        "hide_and_seek/quadrant.scene.ron",
    ] {
        bench_scene(c, file, true);
    }
    for file in [
        "maze/corridor_pair.scene.ron",
        "maze/split_view.scene.ron",
        "maze/generated.scene.ron",
    ] {
        bench_scene(c, file, false);
        bench_scene(c, file, true);
    }
}

/// One agent's vision: lighting its whole window, and one seeker-hider check.
fn vision(c: &mut Criterion) {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scenes/hide_and_seek/quadrant.scene.ron");
    let scene = load_scene(&path).expect("shipped scene");
    let Some(p) = scene.spec.family.params::<HideSeekParams>() else {
        panic!("quadrant is a hide-and-seek scene");
    };
    let arena = HnsArena::from_scene(&scene, p);
    let from = IVec2::new(10, 5);
    let mut clear = Vec::new();
    let mut group = c.benchmark_group("vision");
    group.throughput(Throughput::Elements(1));
    group.bench_function("cast_window_range6", |b| {
        b.iter(|| {
            let mut seen = 0u32;
            arena.vision.cast(
                black_box(from),
                Dir4::South,
                |q| arena.blocks_sight(q),
                |_, _| seen += 1,
                &mut clear,
            );
            seen
        })
    });
    group.bench_function("sees_one_pair", |b| {
        b.iter(|| arena.sees(black_box(from), Dir4::South, black_box(IVec2::new(6, 12))))
    });
    group.finish();
}

criterion_group!(benches, env_step, vision);
criterion_main!(benches);
