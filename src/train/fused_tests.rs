//! The `mlp`'s fused training step ([`crate::policy::mlp::Fused`]) against the candle path
//! it replaces (the loss of `trainer/step.rs`, written out here with the same functions of
//! [`super::loss`]) on the same minibatch: the same loss and gradients to 1e-5, the same
//! variables with a gradient; and against finite differences.
use crate::core::{CODES, Encoded};
use crate::policy::mlp::{Fused, HIDDEN, LossSpec, MlpNet, Row, ValueSpec};
use crate::policy::sampling::{illegal_bias, masked_log_softmax};
use crate::train::loss::{chosen, entropy, ppo_clip, reinforce, value_loss};
use candle_core::{Device, Tensor, Var};
use rand::{Rng, SeedableRng};

/// A minibatch of `m` decisions for `net`: random cells, header fields, legal sets (the
/// action always legal, sometimes every action), advantages, old log-probs near today's,
/// values and targets; words said on about half the rows when the net talks. A network with
/// memory: sequences of 1 to 9 rows, each from a random state, every row's stored state the
/// one the network reaches there (as a rollout records them).
fn batch(net: &MlpNet, m: usize, seed: u64) -> (Vec<Encoded>, Vec<Vec<bool>>, Vec<RowData>) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut enc = Vec::new();
    let mut legal = Vec::new();
    let mut data = Vec::new();
    for i in 0..m {
        enc.push(Encoded {
            cells: (0..net.cells)
                .map(|_| rng.random_range(0..CODES as u8))
                .collect(),
            dense: (0..net.dense)
                .map(|_| rng.random_range(-1.0f32..1.0))
                .collect(),
        });
        let action = rng.random_range(0..net.actions as u8);
        let mut l: Vec<bool> = (0..net.actions)
            .map(|_| i % 3 == 0 || rng.random::<bool>())
            .collect();
        l[usize::from(action)] = true;
        legal.push(l);
        let said =
            (net.words > 0 && rng.random::<bool>()).then(|| rng.random_range(0..=net.words as u8));
        data.push(RowData {
            action,
            said,
            adv: rng.random_range(-2.0f32..2.0),
            old_shift: rng.random_range(-0.4f32..0.4),
            old_value: rng.random_range(-1.0f32..1.0),
            target: rng.random_range(-3.0f32..3.0),
            memory: Vec::new(),
            start: false,
        });
    }
    if net.memory {
        let mut left = 0;
        let mut h = Tensor::zeros((1, HIDDEN), candle_core::DType::F32, &Device::Cpu).unwrap();
        for (e, d) in enc.iter().zip(&mut data) {
            if left == 0 {
                left = rng.random_range(1..=9);
                d.start = true;
                let h0: Vec<f32> = (0..HIDDEN).map(|_| rng.random_range(-0.9..0.9)).collect();
                h = Tensor::from_vec(h0, (1, HIDDEN), &Device::Cpu).unwrap();
            }
            left -= 1;
            d.memory = h.flatten_all().unwrap().to_vec1().unwrap();
            h = net.step(&[e], &h).unwrap().1;
        }
    }
    (enc, legal, data)
}

/// `net`'s weights multiplied by `k` (larger than the initial ones, so that every term of the
/// loss matters).
fn scale(net: &MlpNet, k: f64) {
    for (_, v) in net.vars() {
        v.set(&(v.as_tensor() * k).unwrap()).unwrap();
    }
}

/// Old log-probabilities: today's plus `k` times each row's shift.
fn old_near(now: &[f32], data: &[RowData], k: f32) -> Vec<f32> {
    now.iter()
        .zip(data)
        .map(|(l, d)| l + k * d.old_shift)
        .collect()
}

struct RowData {
    action: u8,
    said: Option<u8>,
    adv: f32,
    /// The old log-prob is today's plus this (ratios inside and outside PPO's range).
    old_shift: f32,
    old_value: f32,
    target: f32,
    /// A network with memory: the state the row was decided from, and whether a sequence
    /// starts there.
    memory: Vec<f32>,
    start: bool,
}

/// The candle path's loss of `trainer/step.rs` for this minibatch, and its gradients.
fn reference(
    net: &MlpNet,
    enc: &[Encoded],
    legal: &[Vec<bool>],
    data: &[RowData],
    old: &[f32],
    spec: LossSpec,
) -> (f32, Vec<Option<Vec<f32>>>) {
    let dev = Device::Cpu;
    let (m, a) = (enc.len(), net.actions);
    let rows: Vec<&Encoded> = enc.iter().collect();
    let h = if net.memory {
        let starts: Vec<usize> = (0..m).filter(|&i| i == 0 || data[i].start).collect();
        let h0: Vec<f32> = starts
            .iter()
            .flat_map(|&i| data[i].memory.clone())
            .collect();
        let h0 = Tensor::from_vec(h0, (starts.len(), HIDDEN), &dev).unwrap();
        net.sequences(&rows, &starts, &h0).unwrap()
    } else {
        net.heads(&rows).unwrap()
    };
    let lr: Vec<&[bool]> = legal.iter().map(|l| l.as_slice()).collect();
    let bias = illegal_bias(&lr, a, &dev).unwrap();
    let alp = masked_log_softmax(&h.logits, &bias).unwrap();
    let mut one_hot = vec![0f32; m * a];
    let mut legal_f = vec![0f32; m * a];
    for (i, d) in data.iter().enumerate() {
        one_hot[i * a + usize::from(d.action)] = 1.0;
        for j in 0..a {
            legal_f[i * a + j] = f32::from(u8::from(legal[i][j]));
        }
    }
    let one_hot = Tensor::from_vec(one_hot, (m, a), &dev).unwrap();
    let legal_t = Tensor::from_vec(legal_f, (m, a), &dev).unwrap();
    let mut logp = chosen(&alp, &one_hot).unwrap();
    let mut ent = entropy(&alp, &legal_t).unwrap();
    if let Some(w) = &h.words {
        let wlp = candle_nn::ops::log_softmax(w, 1).unwrap();
        let k = net.words + 1;
        let mut said = vec![0f32; m * k];
        let mut has = vec![0f32; m];
        for (i, d) in data.iter().enumerate() {
            if let Some(c) = d.said {
                said[i * k + usize::from(c)] = 1.0;
                has[i] = 1.0;
            }
        }
        let said = Tensor::from_vec(said, (m, k), &dev).unwrap();
        let has = Tensor::from_vec(has, (m, 1), &dev)
            .unwrap()
            .broadcast_as((m, k))
            .unwrap();
        logp = (logp + chosen(&wlp, &said).unwrap()).unwrap();
        ent = (ent + entropy(&wlp, &has).unwrap()).unwrap();
    }
    let ent = ent.mean_all().unwrap();
    let col = |v: Vec<f32>| Tensor::from_vec(v, m, &dev).unwrap();
    let adv = col(data.iter().map(|d| d.adv).collect());
    let mut loss = match spec.ppo_clip {
        None => reinforce(&logp, &adv).unwrap(),
        Some(e) => {
            ppo_clip(&logp, &col(old.to_vec()), &adv, f64::from(e))
                .unwrap()
                .0
        }
    };
    if let Some(vs) = spec.value {
        let k = 1.0 / f64::from(vs.scale);
        let old_v = col(data.iter().map(|d| d.old_value).collect());
        let target = col(data.iter().map(|d| d.target).collect());
        let vl = value_loss(
            &(&h.values * k).unwrap(),
            &(old_v * k).unwrap(),
            &(target * k).unwrap(),
            vs.clip.map(f64::from),
        )
        .unwrap();
        loss = (loss + (vl * f64::from(vs.coef)).unwrap()).unwrap();
    }
    loss = (loss - (ent * f64::from(spec.entropy_coef)).unwrap()).unwrap();
    let grads = loss.backward().unwrap();
    let g = net
        .vars()
        .iter()
        .map(|(_, v)| {
            grads
                .get(v.as_tensor())
                .map(|g| g.flatten_all().unwrap().to_vec1::<f32>().unwrap())
        })
        .collect();
    (loss.to_scalar::<f32>().unwrap(), g)
}

/// Today's log-probability of each row's decision (so that old log-probs can sit near).
fn today(net: &MlpNet, enc: &[Encoded], legal: &[Vec<bool>], data: &[RowData]) -> Vec<f32> {
    let mut f = Fused::new(net);
    let rows = rows(enc, legal, data, &vec![0.0; enc.len()]);
    let spec = LossSpec {
        ppo_clip: None,
        value: None,
        entropy_coef: 0.0,
    };
    // With A = 1 for one row at a time the REINFORCE loss is −log π / m.
    rows.iter()
        .map(|r| {
            let one = [Row {
                adv: 1.0,
                start: true,
                ..*r
            }];
            -f.step(net, &one, spec).unwrap().policy_loss
        })
        .collect()
}

fn rows<'a>(
    enc: &'a [Encoded],
    legal: &'a [Vec<bool>],
    data: &'a [RowData],
    old: &[f32],
) -> Vec<Row<'a>> {
    enc.iter()
        .zip(legal)
        .zip(data)
        .zip(old)
        .map(|(((e, l), d), &o)| Row {
            encoded: e,
            legal: l,
            action: d.action,
            said: d.said,
            adv: d.adv,
            old_logprob: o,
            old_value: d.old_value,
            target: d.target,
            memory: &d.memory,
            start: d.start,
        })
        .collect()
}

fn specs() -> Vec<LossSpec> {
    let value = |clip| {
        Some(ValueSpec {
            coef: 0.5,
            clip,
            scale: 1.7,
        })
    };
    vec![
        // REINFORCE with its unclipped value loss.
        LossSpec {
            ppo_clip: None,
            value: value(None),
            entropy_coef: 0.3,
        },
        // IPPO: clipped policy and value.
        LossSpec {
            ppo_clip: Some(0.2),
            value: value(Some(0.2)),
            entropy_coef: 0.2,
        },
        // MAPPO / MAGRPO: no value head in the loss.
        LossSpec {
            ppo_clip: Some(0.2),
            value: None,
            entropy_coef: 0.5,
        },
    ]
}

#[test]
fn the_fused_step_equals_the_candle_path_loss_and_gradients() {
    for (words, seed, memory) in [(0, 1, false), (3, 2, false), (0, 1, true), (3, 2, true)] {
        let net = MlpNet::with_core(6, 5, 7, words, memory, seed, &Device::Cpu).unwrap();
        // Larger weights than the initial ones, so that every term matters.
        for (_, v) in net.vars() {
            let t = (v.as_tensor() * 3.0).unwrap();
            let t = (t.clone() + t.ones_like().unwrap().affine(0.05, 0.0).unwrap()).unwrap();
            v.set(&t).unwrap();
        }
        let (enc, legal, data) = batch(&net, 37, seed + 10);
        matches_candle(
            &net,
            (&enc, &legal, &data),
            &specs(),
            &format!("words {words}, memory {memory}"),
        );
    }
}

/// For each of `specs`, a fresh fused step on the batch (old log-probabilities near today's)
/// against the candle path's loss and gradients ([`agrees`]).
fn matches_candle(
    net: &MlpNet,
    (enc, legal, data): (&[Encoded], &[Vec<bool>], &[RowData]),
    specs: &[LossSpec],
    what: &str,
) {
    let now = today(net, enc, legal, data);
    let old = old_near(&now, data, 1.0);
    for &spec in specs {
        let (want_loss, want) = reference(net, enc, legal, data, &old, spec);
        let mut f = Fused::new(net);
        let got = f.step(net, &rows(enc, legal, data, &old), spec).unwrap();
        let grads: Vec<Option<&[f32]>> = f.grads().collect();
        agrees(
            net,
            (got.loss, &grads),
            (want_loss, &want),
            &format!("{what} {spec:?}"),
        );
    }
}

/// A fused step's loss and gradients (`got`) against the candle path's (`want`): the loss to
/// 1e-5 of itself, each gradient entry to 1e-5 of its variable's largest, a gradient on both
/// paths or on neither, and none that is zero throughout.
fn agrees(
    net: &MlpNet,
    got: (f32, &[Option<&[f32]>]),
    want: (f32, &[Option<Vec<f32>>]),
    what: &str,
) {
    assert!(
        (got.0 - want.0).abs() <= 1e-5 * want.0.abs().max(1.0),
        "{what}: loss {} against {}",
        got.0,
        want.0
    );
    for (((name, _), g), w) in net.vars().iter().zip(got.1).zip(want.1) {
        match (g, w) {
            (None, None) => {}
            (Some(g), Some(w)) => {
                let scale = w.iter().fold(0f32, |m, x| m.max(x.abs()));
                assert!(scale > 0.0, "{what}: {name}'s gradient is zero");
                for (i, (x, y)) in g.iter().zip(w).enumerate() {
                    assert!(
                        (x - y).abs() <= 1e-5 * scale,
                        "{what}: {name}[{i}] {x} against {y}"
                    );
                }
            }
            _ => panic!("{what}: {name} has a gradient on one path only"),
        }
    }
}

#[test]
fn the_fused_gradients_match_finite_differences() {
    for memory in [false, true] {
        fused_gradients_match_finite_differences(memory);
    }
}

fn fused_gradients_match_finite_differences(memory: bool) {
    let net = MlpNet::with_core(4, 3, 5, 2, memory, 7, &Device::Cpu).unwrap();
    scale(&net, if memory { 2.0 } else { 4.0 });
    let (enc, legal, data) = batch(&net, 11, 3);
    let now = today(&net, &enc, &legal, &data);
    // Ratios inside PPO's range, so that the loss is smooth around the point.
    let old = old_near(&now, &data, 0.1);
    let spec = LossSpec {
        ppo_clip: Some(0.2),
        value: Some(ValueSpec {
            coef: 0.5,
            clip: None,
            scale: 1.0,
        }),
        entropy_coef: 0.5,
    };
    let rows = rows(&enc, &legal, &data, &old);
    let mut f = Fused::new(&net);
    f.step(&net, &rows, spec).unwrap();
    let grads: Vec<Vec<f32>> = f.grads().map(|g| g.unwrap().to_vec()).collect();
    let loss_at = |var: &Var, i: usize, x: f32| {
        let mut vals = var
            .as_tensor()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let keep = vals[i];
        vals[i] = x;
        var.set(&Tensor::from_vec(vals.clone(), var.shape(), &Device::Cpu).unwrap())
            .unwrap();
        let l = Fused::new(&net).step(&net, &rows, spec).unwrap().loss;
        vals[i] = keep;
        var.set(&Tensor::from_vec(vals, var.shape(), &Device::Cpu).unwrap())
            .unwrap();
        l
    };
    let eps = 1e-2f32;
    for ((name, var), g) in net.vars().iter().zip(&grads) {
        assert!(g.iter().any(|&x| x != 0.0), "{name} got no gradient");
        let vals = var
            .as_tensor()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let top = g.iter().fold(0f32, |m, x| m.max(x.abs()));
        // Every entry of the small ones, a spread of the first layer's.
        let step = (vals.len() / 40).max(1);
        for i in (0..vals.len()).step_by(step) {
            let fd =
                (loss_at(var, i, vals[i] + eps) - loss_at(var, i, vals[i] - eps)) / (2.0 * eps);
            assert!(
                (fd - g[i]).abs() <= 0.005 * top + 1e-4,
                "memory {memory}: {name}[{i}]: finite difference {fd} against {}",
                g[i]
            );
        }
    }
}

/// A minibatch of several parts (the step cuts 600 rows into 3 of 200, summed in order):
/// the candle path's loss and gradients still, and the same bits on one thread and on
/// three.
#[test]
fn a_minibatch_in_parts_equals_the_candle_path_on_any_thread_count() {
    for memory in [false, true] {
        in_parts(memory);
    }
}

/// The parts test for a network with or without memory (with memory the parts are cut
/// where sequences start, and each sequence's state is carried within its part).
fn in_parts(memory: bool) {
    let net = MlpNet::with_core(9, 4, 6, 2, memory, 5, &Device::Cpu).unwrap();
    scale(&net, if memory { 2.0 } else { 3.0 });
    let (enc, legal, data) = batch(&net, 600, 21);
    let now = today(&net, &enc, &legal, &data);
    let old = old_near(&now, &data, 1.0);
    let spec = specs()[1];
    let rows = rows(&enc, &legal, &data, &old);
    let on = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut f = Fused::new(&net);
            let st = f.step(&net, &rows, spec).unwrap();
            let g: Vec<Vec<f32>> = f.grads().map(|g| g.unwrap().to_vec()).collect();
            (st, g)
        })
    };
    let (one, g1) = on(1);
    let (three, g3) = on(3);
    assert_eq!(
        one, three,
        "the step's statistics differ between thread counts"
    );
    for (((name, _), a), b) in net.vars().iter().zip(&g1).zip(&g3) {
        let same = a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(same, "{name}'s gradient differs between 1 and 3 threads");
    }
    let (want_loss, want) = reference(&net, &enc, &legal, &data, &old, spec);
    let grads: Vec<Option<&[f32]>> = g1.iter().map(|g| Some(g.as_slice())).collect();
    agrees(
        &net,
        (one.loss, &grads),
        (want_loss, &want),
        &format!("600 rows, memory {memory}"),
    );
}

/// A decision of a network with memory on the fused path: from its state, the logits, value,
/// word logits and next state of the network's own step (candle), each row of a batch from
/// its own state.
#[test]
fn a_gru_decision_is_the_networks_step_from_its_state() {
    let net = MlpNet::with_core(12, 5, 6, 3, true, 4, &Device::Cpu).unwrap();
    scale(&net, 2.0);
    let (enc, _, _) = batch(&net, 300, 41);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let states: Vec<Vec<f32>> = (0..enc.len())
        .map(|_| (0..HIDDEN).map(|_| rng.random_range(-0.9..0.9)).collect())
        .collect();
    let refs: Vec<&Encoded> = enc.iter().collect();
    let from: Vec<&[f32]> = states.iter().map(|s| s.as_slice()).collect();
    let mut f = Fused::new(&net);
    f.infer_from(&net, &refs, &from).unwrap();
    let h = Tensor::from_vec(states.concat(), (enc.len(), HIDDEN), &Device::Cpu).unwrap();
    let (heads, next) = net.step(&refs, &h).unwrap();
    let logits: Vec<Vec<f32>> = heads.logits.to_vec2().unwrap();
    let values: Vec<f32> = heads.values.to_vec1().unwrap();
    let words: Vec<Vec<f32>> = heads.words.unwrap().to_vec2().unwrap();
    let next: Vec<Vec<f32>> = next.to_vec2().unwrap();
    let close = |a: &[f32], b: &[f32], what: &str| {
        for (x, y) in a.iter().zip(b) {
            assert!(
                (x - y).abs() <= 1e-5 * y.abs().max(1.0),
                "{what}: {x} against {y}"
            );
        }
    };
    for i in 0..enc.len() {
        close(f.logits(i), &logits[i], "logits");
        close(&[f.value(i)], &[values[i]], "value");
        close(f.words(i).unwrap(), &words[i], "words");
        close(f.state(i), &next[i], "state");
    }
    // A state of the wrong size is refused.
    let short = vec![&states[0][..3]; enc.len()];
    assert!(f.infer_from(&net, &refs, &short).is_err());
}

/// Observations like hide-and-seek's, where most cells hold one code (each cell's base code,
/// which the fused path measures the others from): the candle path's loss and gradients,
/// the base columns' included, with talk and without.
#[test]
fn cells_mostly_at_one_code_give_the_candle_paths_gradients() {
    for words in [0, 2] {
        let net = MlpNet::with_words(12, 3, 5, words, 8, &Device::Cpu).unwrap();
        scale(&net, 3.0);
        let (mut enc, legal, data) = batch(&net, 300, 31);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        for e in &mut enc {
            for (k, c) in e.cells.iter_mut().enumerate() {
                // Cell k's common code is k % 3; one cell in five holds another.
                if rng.random::<f32>() < 0.8 {
                    *c = (k % 3) as u8;
                }
            }
        }
        matches_candle(
            &net,
            (&enc, &legal, &data),
            &specs()[..1],
            &format!("skewed, words {words}"),
        );
    }
}

/// A decision's logits, value and word logits are the same bits whatever the other rows of
/// its batch hold (a batch of 300 in three parts, the others random or mostly at one code):
/// decisions measure every cell from code 0, not from the batch's commonest codes. (The
/// batch's size still matters to the last bits: the products' kernels depend on the rows a
/// part has. Data-parallel ranks cut equal shares into parts of the one-process sizes.)
#[test]
fn a_decision_does_not_depend_on_what_the_rest_of_its_batch_holds() {
    let net = MlpNet::with_words(12, 5, 6, 3, 4, &Device::Cpu).unwrap();
    scale(&net, 2.0);
    let (random, _, _) = batch(&net, 300, 41);
    let mut skewed = random.clone();
    for e in &mut skewed[1..] {
        e.cells.fill(7);
    }
    let run = |rows: &[Encoded]| {
        let refs: Vec<&Encoded> = rows.iter().collect();
        let mut f = Fused::new(&net);
        f.infer(&net, &refs).unwrap();
        let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        (
            bits(f.logits(0)),
            f.value(0).to_bits(),
            bits(f.words(0).unwrap()),
        )
    };
    assert_eq!(run(&random), run(&skewed));
}

/// A policy's [`Fused`] keeps its tables between decisions while the weights stay as they
/// were, and must notice any change however it was made: a weight set through its variable
/// (as an optimizer's step or a copy of trained weights sets them), a training step on the
/// same buffers (which measures cells from its batch's codes, not from code 0), the last
/// variable alone. After each, its decision is a fresh [`Fused`]'s to the bit.
#[test]
fn a_decision_reads_the_weights_as_they_are_now() {
    for memory in [false, true] {
        let net = MlpNet::with_core(12, 5, 6, 3, memory, 4, &Device::Cpu).unwrap();
        scale(&net, 2.0);
        let (enc, legal, data) = batch(&net, 40, 43);
        let refs: Vec<&Encoded> = enc.iter().collect();
        let states: Vec<&[f32]> = data.iter().map(|d| d.memory.as_slice()).collect();
        let states = if memory { states } else { Vec::new() };
        let bits = |f: &Fused| -> Vec<u32> {
            (0..refs.len())
                .flat_map(|i| {
                    f.logits(i)
                        .iter()
                        .chain(f.words(i).unwrap())
                        .map(|v| v.to_bits())
                        .chain([f.value(i).to_bits()])
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        let fresh = || {
            let mut f = Fused::new(&net);
            f.infer_from(&net, &refs, &states).unwrap();
            bits(&f)
        };
        let mut kept = Fused::new(&net);
        kept.infer_from(&net, &refs, &states).unwrap();
        let before = bits(&kept);
        kept.infer_from(&net, &refs, &states).unwrap();
        assert_eq!(bits(&kept), before, "memory {memory}: unchanged weights");
        // One cell's column of the first layer, then the talk head's last bias.
        let vars = net.vars();
        let nudge = |k: usize, at: usize| {
            let v = &vars[k].1;
            let mut x: Vec<f32> = v.as_tensor().flatten_all().unwrap().to_vec1().unwrap();
            x[at] += 0.25;
            let t = Tensor::from_vec(x, v.shape(), &Device::Cpu).unwrap();
            v.set(&t).unwrap();
        };
        nudge(0, 3 * CODES + usize::from(enc[0].cells[3]));
        kept.infer_from(&net, &refs, &states).unwrap();
        let after = bits(&kept);
        assert_ne!(
            after, before,
            "memory {memory}: the nudge changes decisions"
        );
        assert_eq!(
            after,
            fresh(),
            "memory {memory}: a weight set through its variable"
        );
        nudge(vars.len() - 1, 1);
        kept.infer_from(&net, &refs, &states).unwrap();
        assert_eq!(bits(&kept), fresh(), "memory {memory}: the last variable");
        // A training step on the same buffers, weights unchanged.
        let old = vec![-1.0f32; enc.len()];
        kept.step(&net, &rows(&enc, &legal, &data, &old), specs()[1])
            .unwrap();
        kept.infer_from(&net, &refs, &states).unwrap();
        assert_eq!(
            bits(&kept),
            fresh(),
            "memory {memory}: after a training step"
        );
    }
}
