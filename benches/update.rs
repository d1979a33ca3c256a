//! One training step on this machine: forward on the differentiable path, backward, AdamW,
//! for a batch of 64 decisions with 64-token prompts (a REINFORCE loss on the action
//! token's log-prob plus a value loss), with the trainer's own AdamW. Run:
//! `cargo bench --bench update` (or `-- tiny`).
//! Criterion's `elem/s` is decisions (samples) per second.
//!
//! `EMERGENCE_BENCH_DEVICE=cuda:0` (a build with `--features cuda`) runs the language
//! model's step on that GPU (`scripts/gpu-check.sh`); the `mlp` step stays on the CPU.
//!
//! Targets (issue 5): `tiny` ≤ 150 ms and `small` ≤ 3.7 s per step.
//!
//! `update/mlp`: one gradient step of the `mlp` learner on a minibatch of 1024 decisions
//! shaped like hide-and-seek's (91 cells, 69 header fields, 9 actions): forward, the PPO
//! loss with a value loss, backward, AdamW, on the candle path and on the fused one. An IPPO
//! iteration of 64 hide-and-seek arenas (51,200 decisions, 4 passes) makes 200 of them:
//! `update/mlp/iteration51200x4` times that whole update through the trainer;
//! `emergence train --learner mlp` prints each iteration's time and training agent-steps/s.

#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

// The binary's allocator tuning (its test runs with the binary's, not here).
#[path = "../src/cli/allocator.rs"]
#[allow(dead_code, unused_imports)]
mod allocator;

use candle_core::{D, Device, Tensor, Var};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use emergence::policy::lm::model::{Pass as Fwd, init_weights};
use emergence::policy::lm::{Decoder, LmConfig, Lora, Preset, Weights};
use emergence::train::optim::{AdamParams, AdamW};
use std::path::Path;
use std::time::Duration;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const BATCH: usize = 64;
const PROMPT: usize = 64;

/// `EMERGENCE_BENCH_DEVICE` (`cpu` when unset).
fn device() -> Device {
    let name = std::env::var("EMERGENCE_BENCH_DEVICE").unwrap_or_else(|_| "cpu".into());
    emergence::policy::lm::parse_device(&name).expect("EMERGENCE_BENCH_DEVICE")
}

fn update(c: &mut Criterion) {
    allocator::keep_freed_memory();
    for (name, preset) in [("tiny", Preset::Tiny), ("small", Preset::Small)] {
        let mut group = c.benchmark_group(format!("update/{name}"));
        group
            .sample_size(10)
            .measurement_time(Duration::from_secs(if name == "tiny" { 10 } else { 60 }));
        group.throughput(Throughput::Elements(BATCH as u64));
        // Set up inside the benchmark, so a filter (`-- tiny`) skips the other model's setup.
        group.bench_function("batch64x64", |b| {
            let mut step = Step::new(preset);
            b.iter(|| step.run())
        });
        group.finish();
    }
}

/// One model with its optimizer and a fixed batch.
struct Step {
    dev: Device,
    dec: Decoder,
    opt: AdamW,
    prompts: Vec<Vec<u32>>,
    action: Tensor,
    adv: Tensor,
}

impl Step {
    fn new(preset: Preset) -> Self {
        let cfg = LmConfig::preset(preset, 160);
        let dev = device();
        let w = init_weights(&cfg, 0, &dev).expect("weights");
        let vars: Vec<Var> = w
            .values()
            .map(|t| Var::from_tensor(t).expect("var"))
            .collect();
        let views: Weights = w
            .keys()
            .cloned()
            .zip(vars.iter().map(|v| v.as_tensor().clone()))
            .collect();
        let dec = Decoder::new(&cfg, &views, Path::new("bench")).expect("decoder");
        let named: Vec<(String, Var)> = w.keys().cloned().zip(vars.iter().cloned()).collect();
        let opt = AdamW::new(named, AdamParams::default()).expect("adamw");
        let ids: Vec<u32> = (0..BATCH * PROMPT)
            .map(|i| (i * 31 % cfg.vocab_size) as u32)
            .collect();
        let prompts = ids.chunks(PROMPT).map(<[u32]>::to_vec).collect();
        let action = Tensor::new(&[5u32], &dev).expect("action");
        let adv: Vec<f32> = (0..BATCH)
            .map(|i| if i % 2 == 0 { 1.0 } else { -1.0 })
            .collect();
        let adv = Tensor::from_vec(adv, BATCH, &dev).expect("adv");
        Self {
            dev,
            dec,
            opt,
            prompts,
            action,
            adv,
        }
    }

    fn run(&mut self) {
        let dec = &self.dec;
        // As the trainer reads it: the final hidden state at each prompt's last token.
        let h = dec
            .last_hidden(&self.prompts, 0, Fwd::Train, Lora::Base)
            .expect("hidden");
        let lp = candle_nn::ops::log_softmax(&dec.head(&h).expect("head"), D::Minus1)
            .and_then(|lp| lp.index_select(&self.action, 1))
            .and_then(|lp| lp.squeeze(1))
            .expect("lp");
        let pl = (lp * &self.adv)
            .and_then(|x| x.mean_all())
            .and_then(|x| x.neg())
            .expect("pl");
        let v = dec.value(&h).expect("value").expect("value head");
        let vl = v.sqr().and_then(|x| x.mean_all()).expect("vl");
        let loss = (pl + vl).expect("loss");
        let grads = loss.backward().expect("backward");
        self.opt.step(&grads).expect("step");
        self.dev.synchronize().expect("sync");
    }
}

/// `n` feature rows of the hide-and-seek quadrant's sizes (91 view cells, 69 header fields).
fn hide_and_seek_rows(n: usize) -> Vec<emergence::policy::mlp::Encoded> {
    (0..n)
        .map(|i| emergence::policy::mlp::Encoded {
            cells: (0..91).map(|k| ((i * 7 + k * 3) % 16) as u8).collect(),
            dense: (0..69).map(|k| ((i + k) % 5) as f32 / 5.0).collect(),
        })
        .collect()
}

fn update_mlp(c: &mut Criterion) {
    use emergence::policy::mlp::{Encoded, MlpNet};
    use emergence::train::loss::{chosen, ppo_clip, value_loss};
    const ROWS: usize = 1024;
    let mut group = c.benchmark_group("update/mlp");
    group.sample_size(20);
    group.throughput(Throughput::Elements(ROWS as u64));
    group.bench_function("hide_and_seek1024", |b| {
        let dev = Device::Cpu;
        let rows = hide_and_seek_rows(ROWS);
        let refs: Vec<&Encoded> = rows.iter().collect();
        let net = MlpNet::new(91, 69, 9, 0, &dev).expect("net");
        let mut opt = AdamW::new(net.vars().to_vec(), AdamParams::default()).expect("adamw");
        let one_hot: Vec<f32> = (0..ROWS * 9)
            .map(|j| f32::from(u8::from(j % 9 == (j / 9) % 9)))
            .collect();
        let one_hot = Tensor::from_vec(one_hot, (ROWS, 9), &dev).expect("one hot");
        let col = |f: fn(usize) -> f32| {
            Tensor::from_vec((0..ROWS).map(f).collect::<Vec<f32>>(), ROWS, &dev).expect("col")
        };
        let adv = col(|i| if i % 2 == 0 { 1.0 } else { -1.0 });
        let old = col(|_| -(9f32).ln());
        let target = col(|i| (i % 3) as f32);
        b.iter(|| {
            let (logits, v) = net.forward(&refs).expect("forward");
            let alp = candle_nn::ops::log_softmax(&logits, D::Minus1).expect("lp");
            let logp = chosen(&alp, &one_hot).expect("chosen");
            let (pl, _) = ppo_clip(&logp, &old, &adv, 0.2).expect("ppo");
            let vl = value_loss(&v, &v.detach(), &target, Some(0.2)).expect("vl");
            let grads = (pl + vl).and_then(|l| l.backward()).expect("backward");
            opt.step(&grads).expect("step");
        })
    });
    // The same minibatch on the fused path the trainer takes for an `mlp`
    // (`policy::mlp::Fused`: forward, the whole trainer loss with masks and the entropy bonus,
    // backward into plain buffers), then the same optimizer step over the gradients.
    group.bench_function("hide_and_seek1024_fused", |b| {
        use emergence::policy::mlp::{Fused, LossSpec, Row, ValueSpec};
        let dev = Device::Cpu;
        let rows = hide_and_seek_rows(ROWS);
        let legal = vec![true; 9];
        let batch: Vec<Row<'_>> = rows
            .iter()
            .enumerate()
            .map(|(i, e)| Row {
                encoded: e,
                legal: &legal,
                action: (i % 9) as u8,
                said: None,
                adv: if i % 2 == 0 { 1.0 } else { -1.0 },
                old_logprob: -(9f32).ln(),
                old_value: 0.0,
                target: (i % 3) as f32,
                memory: &[],
                start: false,
            })
            .collect();
        let net = MlpNet::new(91, 69, 9, 0, &dev).expect("net");
        let mut opt = AdamW::new(net.vars().to_vec(), AdamParams::default()).expect("adamw");
        let mut fused = Fused::new(&net);
        let spec = LossSpec {
            ppo_clip: Some(0.2),
            value: Some(ValueSpec {
                coef: 0.5,
                clip: Some(0.2),
                scale: 1.0,
            }),
            entropy_coef: 0.01,
        };
        b.iter(|| {
            fused.step(&net, &batch, spec).expect("fused step");
            let grads: Vec<Option<&[f32]>> = fused.grads().collect();
            opt.step_host(&grads, 1.0).expect("step");
        })
    });
    group.finish();
    // A whole IPPO update of a 64-arena quadrant iteration (51,200 decisions, 4 passes of
    // minibatches of 1024: 200 steps) through the trainer, on rayon's threads
    // (`RAYON_NUM_THREADS=1` for one). `python/benches/update_vs_torch.py` times the same
    // update against PyTorch's.
    let mut group = c.benchmark_group("update/mlp");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Elements(51_200 * 4));
    group.bench_function("iteration51200x4", |b| {
        use emergence::train::bench::{MlpUpdate, UpdateBench};
        let mut u = MlpUpdate::new(UpdateBench::default()).expect("batch");
        b.iter(|| u.run().expect("update"))
    });
    group.finish();
}

criterion_group!(benches, update, update_mlp);
criterion_main!(benches);
