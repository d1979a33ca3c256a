//! Language-model speed on this machine. Run: `cargo bench --bench inference` (or
//! `-- forward/tiny`, `-- matmul`, `-- decide` for one part). Criterion's `elem/s` is
//! tokens/s for `forward/*`, FLOP/s for `matmul/*` (the same gemm candle's forward uses) and
//! decisions/s for `decide/*`.
//!
//! `EMERGENCE_BENCH_DEVICE=cuda:0` (a build with `--features cuda`) runs the model's parts on
//! that GPU instead (`scripts/gpu-check.sh`), each iteration waiting for the GPU to finish.
//!
//! Targets (issue 4): `tiny` at batch 64 ≥ 60k tokens/s; `small` at batch 64 ≥ 70% of the
//! matmul rate; the batched Decide step at batch 64 ≥ 10× faster per decision than 64
//! single forwards.

#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

// The binary's allocator tuning (its test runs with the binary's, not here).
#[path = "../src/cli/allocator.rs"]
#[allow(dead_code, unused_imports)]
mod allocator;

use candle_core::{DType, Device, Tensor};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use emergence::core::*;
use emergence::envs::action_names;
use emergence::envs::dilemma::matrix::MatrixSenses;
use emergence::envs::senses::Senses;
use emergence::policy::lm::model::{Pass as Fwd, init_weights};
use emergence::policy::lm::{Decoder, LmConfig, LmPolicy, ModelSource, Preset};
use emergence::policy::{Decision, Policy};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::path::Path;
use std::time::Duration;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const PROMPT: usize = 64;

/// `EMERGENCE_BENCH_DEVICE` (`cpu` when unset).
fn device() -> Device {
    let name = std::env::var("EMERGENCE_BENCH_DEVICE").unwrap_or_else(|_| "cpu".into());
    emergence::policy::lm::parse_device(&name).expect("EMERGENCE_BENCH_DEVICE")
}

fn decoder(preset: Preset) -> (LmConfig, Decoder) {
    let cfg = LmConfig::preset(preset, 160);
    let w = init_weights(&cfg, 0, &device()).expect("weights");
    let d = Decoder::new(&cfg, &w, Path::new("bench")).expect("decoder");
    (cfg, d)
}

fn forward(c: &mut Criterion) {
    allocator::keep_freed_memory();
    for (name, preset, batches) in [
        ("tiny", Preset::Tiny, &[1usize, 16, 64, 256][..]),
        ("small", Preset::Small, &[1usize, 16, 64, 256][..]),
    ] {
        // Made by the first benchmark that runs, so a filter skips the other model's setup.
        let mut model = None;
        let mut group = c.benchmark_group(format!("forward/{name}"));
        group
            .sample_size(10)
            .measurement_time(Duration::from_secs(5));
        for &b in batches {
            group.throughput(Throughput::Elements((b * PROMPT) as u64));
            group.bench_function(format!("batch{b}"), |bench| {
                let (cfg, dec) = model.get_or_insert_with(|| decoder(preset));
                let ids: Vec<u32> = (0..b * PROMPT)
                    .map(|i| (i * 31 % cfg.vocab_size) as u32)
                    .collect();
                let dev = device();
                let ids = Tensor::from_vec(ids, (b, PROMPT), &dev).expect("ids");
                bench.iter(|| {
                    let y = dec.forward(&ids, None, Fwd::Fast).expect("forward");
                    dev.synchronize().expect("sync");
                    y
                })
            });
        }
        group.finish();
    }
}

/// The machine's float32 matmul rate with candle's gemm, at the shapes of `small`'s and
/// `tiny`'s MLP at batch 64 × 64 tokens.
fn matmul(c: &mut Criterion) {
    allocator::keep_freed_memory();
    let mut group = c.benchmark_group("matmul");
    group.sample_size(10);
    let dev = device();
    for (m, k, n) in [(64 * PROMPT, 512, 2048), (64 * PROMPT, 128, 512)] {
        let a = Tensor::ones((m, k), DType::F32, &dev).expect("a");
        let b = Tensor::ones((k, n), DType::F32, &dev).expect("b");
        group.throughput(Throughput::Elements((2 * m * k * n) as u64));
        group.bench_function(format!("{m}x{k}x{n}"), |bench| {
            bench.iter(|| {
                let y = a.matmul(&b).expect("mm");
                dev.synchronize().expect("sync");
                y
            })
        });
    }
    group.finish();
}

/// The Decide step of the `lm` policy: 64 agents in one batch against 64 batches of one,
/// on prisoner's dilemma observations at one round, as a step of 32 arenas gives them: both
/// teams, 64 different histories (so no two prompts are the same; prompts of a team share
/// their first line, as in a real step).
fn decide(c: &mut Criterion) {
    allocator::keep_freed_memory();
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scenes/dilemma/prisoners_dilemma.scene.ron");
    let scene = emergence::load::load_scene(&path).expect("scene");
    let mut p = LmPolicy::new(
        ModelSource::Embedded {
            preset: Preset::Tiny,
            seed: 0,
        },
        device(),
    );
    p.setup(&scene, &action_names(&scene)).expect("setup");
    let bit = |i: u8, b: u8| (i >> b) & 1;
    let obs: Vec<(Observation, MatrixSenses)> = (0..64u8)
        .map(|i| {
            (
                Observation {
                    step: 3,
                    ..Default::default()
                },
                MatrixSenses {
                    history: vec![
                        [bit(i, 0), bit(i, 1)],
                        [bit(i, 2), bit(i, 3)],
                        [bit(i, 4), bit(i, 5)],
                    ],
                    other_counts: [u32::from(bit(i, 1) + bit(i, 3) + bit(i, 5)), 0],
                },
            )
        })
        .collect();
    let run = |p: &mut LmPolicy, chunk: usize| {
        let mut rngs: Vec<ChaCha8Rng> = (0..64).map(ChaCha8Rng::seed_from_u64).collect();
        let mut actions = [Action::default(); 64];
        let mut traces = vec![DecisionTrace::default(); 64];
        let mut all: Vec<Decision<'_>> = obs
            .iter()
            .zip(rngs.iter_mut())
            .zip(actions.iter_mut())
            .zip(traces.iter_mut())
            .enumerate()
            .map(|(i, (((o, rng), action), trace))| Decision {
                agent: Agent {
                    arena: (i / 2) as u32,
                    slot: (i % 2) as u16,
                },
                obs: &o.0,
                senses: Senses {
                    matrix: Some(&o.1),
                    ..Default::default()
                },
                features: &emergence::core::NO_FEATURES,
                mask: ActionMask::all(2),
                rng,
                action,
                say: None,
                team: (i % 2) as u8,
                role: 0,
                last_reward: 0.0,
                trace,
            })
            .collect();
        for batch in all.chunks_mut(chunk) {
            p.decide(batch);
        }
    };
    let mut group = c.benchmark_group("decide");
    group.sample_size(10);
    group.throughput(Throughput::Elements(64));
    group.bench_function("batch64", |b| b.iter(|| run(&mut p, 64)));
    group.bench_function("64_single", |b| b.iter(|| run(&mut p, 1)));
    group.finish();
}

/// Whole simulation steps of 256 arenas with every agent on the `lm` policy (the embedded
/// tiny model): the Decide step dominates. `elem/s` is decisions/s. Slow at today's speed
/// (tens of seconds per step for hide-and-seek): run it on purpose, `-- scene_step`.
fn scene_step(c: &mut Criterion) {
    allocator::keep_freed_memory();
    use emergence::headless::{RunConfig, build_app};
    for file in [
        "dilemma/commons_harvest_open.scene.ron",
        "hide_and_seek/quadrant.scene.ron",
    ] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("scenes")
            .join(file);
        let mut scene = emergence::load::load_scene(&path).expect("scene");
        for a in &mut scene.agents {
            a.policy = "lm".into();
        }
        let agents = scene.agent_count() as u64;
        let mut cfg = RunConfig::new(scene);
        cfg.arenas = 256;
        cfg.episodes = u32::MAX;
        cfg.record_arenas = vec![];
        let mut group = c.benchmark_group("scene_step");
        group.sample_size(10);
        group.throughput(Throughput::Elements(agents * 256));
        // Built inside, so that a filter that skips this benchmark skips its setup too.
        group.bench_function(file.trim_end_matches(".scene.ron"), |b| {
            let mut app = build_app(&cfg).expect("app");
            app.update();
            b.iter(|| app.update())
        });
        group.finish();
    }
}

criterion_group!(benches, forward, matmul, decide, scene_step);
criterion_main!(benches);
