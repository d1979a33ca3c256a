//! Per-step timings of the training step (scratch).
use candle_core::{D, Device, Tensor, Var};
use emergence::policy::lm::model::{Path as Fwd, init_weights};
use emergence::policy::lm::{Decoder, LmConfig, Preset, Weights};
use emergence::train::optim::{AdamParams, AdamW};
use std::path::Path;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const BATCH: usize = 64;
const PROMPT: usize = 64;

fn main() {
    emergence::alloc::keep_freed_memory();
    let small = std::env::args().any(|a| a == "small");
    let mut step = Step::new(if small { Preset::Small } else { Preset::Tiny });
    for i in 0..20 {
        let t = std::time::Instant::now();
        step.run();
        println!("step {i}: {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
    }
}

/// One model with its optimizer and a fixed batch.
struct Step {
    dec: Decoder,
    opt: AdamW,
    ids: Tensor,
    last: Tensor,
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
        let ids = Tensor::from_vec(ids, (BATCH, PROMPT), &Device::Cpu).expect("ids");
        let last: Vec<u32> = (0..BATCH)
            .map(|i| (i * PROMPT + PROMPT - 1) as u32)
            .collect();
        let last = Tensor::from_vec(last, BATCH, &Device::Cpu).expect("last");
        let action = Tensor::new(&[5u32], &Device::Cpu).expect("action");
        let adv: Vec<f32> = (0..BATCH)
            .map(|i| if i % 2 == 0 { 1.0 } else { -1.0 })
            .collect();
        let adv = Tensor::from_vec(adv, BATCH, &Device::Cpu).expect("adv");
        Self {
            dec,
            opt,
            ids,
            last,
            action,
            adv,
        }
    }

    fn run(&mut self) {
        let dec = &self.dec;
        let h = dec.hidden(&self.ids, None, Fwd::Train).expect("hidden");
        let h = h
            .reshape((BATCH * PROMPT, ()))
            .and_then(|h| h.index_select(&self.last, 0))
            .expect("last");
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
