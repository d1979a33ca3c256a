use super::super::pool::{POOL, release_buffers};
use super::*;
use crate::policy::lm::model::{Pass, init_weights};
use crate::policy::lm::{Decoder, LmConfig, Lora, Preset, Weights};
use candle_core::{Device, Var};

/// Held by the tests that use the pool, which is global: another test's steps would
/// change what it holds.
static TAPE_TESTS: Mutex<()> = Mutex::new(());

/// The elements the pool holds.
fn pooled() -> usize {
    POOL.lock().map_or(0, |p| p.iter().map(Vec::capacity).sum())
}

/// A batch splits into two runs of prompts with about half the rows each (the first
/// run ends at the prompt that reaches half), and a single prompt stays whole.
#[test]
fn a_batch_splits_at_the_prompt_that_reaches_half_its_rows() {
    let split = |lens: &[usize]| {
        let prompts: Vec<Vec<u32>> = lens.iter().map(|&n| vec![0; n]).collect();
        let refs: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
        parts(&refs)
    };
    assert_eq!(split(&[5, 5]), vec![0..1, 1..2]);
    assert_eq!(split(&[4, 4, 4, 4]), vec![0..2, 2..4]);
    assert_eq!(split(&[10, 1, 1]), vec![0..1, 1..3]);
    assert_eq!(split(&[1, 1, 10]), vec![0..2, 2..3]);
    assert_eq!(split(&[3, 4, 2]), vec![0..2, 2..3]);
    assert_eq!(split(&[7]), vec![0..1]);
    assert_eq!(split(&[]), vec![0..0]);
}

/// A training step's hidden states and every gradient are the same bits whether rayon
/// has one thread (the parts one after the other) or two (side by side).
#[test]
fn a_training_step_gives_the_same_bits_on_one_and_two_threads() {
    let mut cfg = LmConfig::preset(Preset::Tiny, 64);
    cfg.num_hidden_layers = 2;
    let init = init_weights(&cfg, 3, &Device::Cpu).expect("init");
    let prompts: Vec<Vec<u32>> = (0..5u32)
        .map(|i| (0..9 + 4 * i).map(|j| (i * 5 + j * 11) % 64).collect())
        .collect();
    let step = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build();
        pool.expect("pool").install(|| {
            let vars: Vec<Var> = init
                .values()
                .map(|t| Var::from_tensor(t).expect("var"))
                .collect();
            let views = vars.iter().map(|v| v.as_tensor().clone());
            let weights: Weights = init.keys().cloned().zip(views).collect();
            let dec = Decoder::new(&cfg, &weights, std::path::Path::new("bits"));
            let dec = dec.expect("decoder");
            let h = dec.last_hidden(&prompts, 0, Pass::Train, Lora::Base);
            let h = h.expect("forward");
            let loss = h.sqr().and_then(|x| x.sum_all()).expect("loss");
            let grads = loss.backward().expect("backward");
            let hv = h.flatten_all().and_then(|t| t.to_vec1::<f32>()).expect("h");
            let mut bits: Vec<u32> = hv.iter().map(|x| x.to_bits()).collect();
            // Every weight the hidden states read (not the output and value heads).
            let mut with = 0;
            for g in vars.iter().filter_map(|v| grads.get(v.as_tensor())) {
                let g = g.flatten_all().and_then(|t| t.to_vec1::<f32>()).expect("g");
                bits.extend(g.iter().map(|x| x.to_bits()));
                with += 1;
            }
            assert!(with >= 2 + 2 * 12, "{with} tensors had a gradient");
            bits
        })
    };
    let _alone = TAPE_TESTS.lock();
    assert_eq!(step(1), step(2));
}

/// A training step (forward and backward) hands back to the pool what it took from
/// it, so the pool, and the process with it, does not grow from step to step (it did,
/// by one attention output per layer, when that came from outside the pool).
#[test]
fn training_steps_do_not_grow_the_pool() {
    let mut cfg = LmConfig::preset(Preset::Tiny, 64);
    cfg.num_hidden_layers = 2;
    let init = init_weights(&cfg, 1, &Device::Cpu).expect("init");
    let vars: Vec<Var> = init
        .values()
        .map(|t| Var::from_tensor(t).expect("var"))
        .collect();
    let views = vars.iter().map(|v| v.as_tensor().clone());
    let weights: Weights = init.keys().cloned().zip(views).collect();
    let dec = Decoder::new(&cfg, &weights, std::path::Path::new("mem")).expect("decoder");
    let prompts: Vec<Vec<u32>> = (0..6u32)
        .map(|i| (0..20 + i).map(|j| (i * 7 + j * 3) % 64).collect())
        .collect();
    let _alone = TAPE_TESTS.lock();
    // On one thread, so that which buffer each request gets does not depend on timing.
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build();
    let one = one.expect("pool");
    let mut sizes = Vec::new();
    release_buffers();
    for _ in 0..4 {
        let h = one.install(|| dec.last_hidden(&prompts, 0, Pass::Train, Lora::Base));
        let h = h.expect("forward");
        let loss = h.sqr().and_then(|x| x.sum_all());
        let grads = one.install(|| loss.and_then(|l| l.backward()));
        let grads = grads.expect("backward");
        assert!(grads.get(vars[0].as_tensor()).is_some());
        drop((h, grads));
        sizes.push(pooled());
    }
    assert!(sizes[0] > 0, "the tape took nothing from the pool");
    assert_eq!(sizes[1], sizes[3], "the pool grew: {sizes:?}");
}
