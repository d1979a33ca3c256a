//! One training step on this machine: forward on the differentiable path, backward, AdamW,
//! for a batch of 64 decisions with 64-token prompts (a REINFORCE loss on the action
//! token's log-prob plus a value loss), with the trainer's own AdamW. Run:
//! `cargo bench --bench update` (or `-- tiny`).
//! Criterion's `elem/s` is decisions (samples) per second.
//!
//! Targets (issue 5): `tiny` ≤ 150 ms and `small` ≤ 3.7 s per step.

#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use candle_core::{D, Device, Tensor, Var};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use emergence::policy::lm::model::{Path as Fwd, init_weights};
use emergence::policy::lm::{Decoder, LmConfig, Lora, Preset, Weights};
use emergence::train::optim::{AdamParams, AdamW};
use std::path::Path;
use std::time::Duration;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const BATCH: usize = 64;
const PROMPT: usize = 64;

fn update(c: &mut Criterion) {
    emergence::alloc::keep_freed_memory();
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
    dec: Decoder,
    opt: AdamW,
    prompts: Vec<Vec<u32>>,
    action: Tensor,
    adv: Tensor,
}

impl Step {
    fn new(preset: Preset) -> Self {
        let cfg = LmConfig::preset(preset, 160);
        let w = init_weights(&cfg, 0, &Device::Cpu).expect("weights");
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
        let action = Tensor::new(&[5u32], &Device::Cpu).expect("action");
        let adv: Vec<f32> = (0..BATCH)
            .map(|i| if i % 2 == 0 { 1.0 } else { -1.0 })
            .collect();
        let adv = Tensor::from_vec(adv, BATCH, &Device::Cpu).expect("adv");
        Self {
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
    }
}

criterion_group!(benches, update);
criterion_main!(benches);
