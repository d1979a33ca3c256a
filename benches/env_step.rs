//! Agent-steps per second of each social dilemma with 256 arenas and the random policy.
//! Run: `cargo bench --bench env_step`. Criterion reports throughput in agent-steps/s
//! ("elem/s"). Targets on a 2-core machine: ≥5M for matrix games, ≥2M for Commons Harvest.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use emergence::headless::{RunConfig, build_app};
use emergence::scene::load_scene;
use std::path::Path;

const ARENAS: u32 = 256;

fn bench_scene(c: &mut Criterion, file: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenes/dilemma")
        .join(file);
    let mut scene = load_scene(&path).expect("shipped scene");
    for a in &mut scene.agents {
        a.policy = "random".into();
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
    group.bench_function(file.trim_end_matches(".scene.ron"), |b| {
        b.iter(|| app.update())
    });
    group.finish();
}

fn env_step(c: &mut Criterion) {
    for file in [
        "prisoners_dilemma.scene.ron",
        "stag_hunt.scene.ron",
        "chicken.scene.ron",
        "commons_harvest_open.scene.ron",
        "clean_up.scene.ron",
    ] {
        bench_scene(c, file);
    }
}

criterion_group!(benches, env_step);
criterion_main!(benches);
