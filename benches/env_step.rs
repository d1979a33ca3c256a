//! Agent-steps per second of each social dilemma and maze scene with 256 arenas and the
//! random policy, and of the maze scenes with their own scripted bots (`…/bots`).
//! Run: `cargo bench --bench env_step` (`-- maze` for the maze only). Criterion reports throughput in agent-steps/s
//! ("elem/s"). Targets on a 2-core machine: ≥5M for matrix games, ≥2M for Commons Harvest.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use emergence::headless::{RunConfig, build_app};
use emergence::scene::load_scene;
use std::path::Path;

const ARENAS: u32 = 256;

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
    let name = file.trim_end_matches(".scene.ron").replace('/', "_");
    let name = if keep_bots {
        format!("{name}/bots")
    } else {
        name
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
        "maze/corridor_pair.scene.ron",
        "maze/split_view.scene.ron",
        "maze/generated.scene.ron",
    ] {
        bench_scene(c, file, false);
        bench_scene(c, file, true);
    }
}

criterion_group!(benches, env_step);
criterion_main!(benches);
