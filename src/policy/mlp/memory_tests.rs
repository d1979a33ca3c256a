//! The `gru` network and policy: the cell against its equations computed apart, sequences
//! against stepping one decision at a time, gradients against finite differences, the
//! policy's states (carried, reset at an episode's start, recorded), and its folder.

use super::*;
use crate::core::{Action, ActionMask, Agent, DecisionTrace, NO_FEATURES, Observation};
use candle_core::Tensor;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// `n` rows of 3 cells and 4 header fields, drawn from `seed`.
fn rows(n: usize, seed: u64) -> Vec<Encoded> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|_| Encoded {
            cells: (0..3).map(|_| rng.random_range(0..CODES as u8)).collect(),
            dense: (0..4).map(|_| rng.random_range(-1.0..1.0)).collect(),
        })
        .collect()
}

fn gru(seed: u64) -> MlpNet {
    let net = MlpNet::with_core(3, 4, 5, 2, true, seed, &Device::Cpu).expect("net");
    // Heads as large as the rest, so that their gradients are not tiny.
    for (name, v) in net.vars() {
        if name.starts_with("pi.") || name.starts_with("say.") {
            v.set(&(v.as_tensor() * 100.0).expect("scale"))
                .expect("set");
        }
    }
    net
}

fn vec2(t: &Tensor) -> Vec<Vec<f32>> {
    t.to_vec2().expect("vec2")
}

fn states(n: usize, seed: u64) -> Tensor {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let h: Vec<f32> = (0..n * HIDDEN)
        .map(|_| rng.random_range(-0.9..0.9))
        .collect();
    Tensor::from_vec(h, (n, HIDDEN), &Device::Cpu).expect("h")
}

fn close(a: &[Vec<f32>], b: &[Vec<f32>], tol: f32, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (x, y) in a.iter().flatten().zip(b.iter().flatten()) {
        assert!((x - y).abs() <= tol, "{what}: {x} vs {y}");
    }
}

/// The cell's next state, computed from its weights with plain loops and libm (PyTorch's
/// `GRUCell` equations), equals [`MlpNet::cell`]'s.
#[test]
fn the_cell_is_the_gru_equations() {
    let net = gru(5);
    let x = states(3, 1);
    let h = states(3, 2);
    let got = vec2(&net.cell(&x, &h).expect("cell"));
    let var = |name: &str| -> Vec<f32> {
        let (_, v) = net.vars().iter().find(|(n, _)| n == name).expect(name);
        v.as_tensor()
            .flatten_all()
            .and_then(|t| t.to_vec1())
            .expect("w")
    };
    let (wi, bi, wh, bh) = (
        var("gru.weight_ih"),
        var("gru.bias_ih"),
        var("gru.weight_hh"),
        var("gru.bias_hh"),
    );
    let (x, h) = (vec2(&x), vec2(&h));
    let sig = |v: f32| 1.0 / (1.0 + (-v).exp());
    for b in 0..3 {
        let dot = |w: &[f32], row: usize, v: &[f32]| -> f32 {
            (0..HIDDEN).map(|k| w[row * HIDDEN + k] * v[k]).sum()
        };
        for j in 0..HIDDEN {
            let gi = |g: usize| dot(&wi, g * HIDDEN + j, &x[b]) + bi[g * HIDDEN + j];
            let gh = |g: usize| dot(&wh, g * HIDDEN + j, &h[b]) + bh[g * HIDDEN + j];
            let r = sig(gi(0) + gh(0));
            let z = sig(gi(1) + gh(1));
            let n = (gi(2) + r * gh(2)).tanh();
            let want = (1.0 - z) * n + z * h[b][j];
            assert!(
                (got[b][j] - want).abs() < 1e-5,
                "row {b} unit {j}: {} vs {want}",
                got[b][j]
            );
        }
    }
}

/// Sequences of 4, 1 and 3 steps laid end to end give, row for row, what stepping each one
/// decision at a time from its starting state gives.
#[test]
fn sequences_equal_stepping_one_decision_at_a_time() {
    let net = gru(7);
    let all = rows(8, 3);
    let refs: Vec<&Encoded> = all.iter().collect();
    let starts = [0usize, 4, 5];
    let h0 = states(3, 4);
    let heads = net.sequences(&refs, &starts, &h0).expect("sequences");
    let (mut logits, mut values, mut words) = (Vec::new(), Vec::new(), Vec::new());
    for (k, &s) in starts.iter().enumerate() {
        let end = starts.get(k + 1).copied().unwrap_or(all.len());
        let mut h = h0.narrow(0, k, 1).expect("h");
        for r in &refs[s..end] {
            let (out, next) = net.step(&[*r], &h).expect("step");
            logits.extend(vec2(&out.logits));
            values.extend(out.values.to_vec1::<f32>().expect("v"));
            words.extend(vec2(out.words.as_ref().expect("words")));
            h = next;
        }
    }
    close(&vec2(&heads.logits), &logits, 1e-5, "logits");
    close(
        &[heads.values.to_vec1::<f32>().expect("v")],
        &[values],
        1e-5,
        "values",
    );
    close(
        &vec2(heads.words.as_ref().expect("words")),
        &words,
        1e-5,
        "words",
    );
    // A state is carried: the second step of the first sequence depends on the first's
    // input, and a sequence depends on its starting state.
    let mut other = all.clone();
    other[0].dense[0] += 1.0;
    let refs2: Vec<&Encoded> = other.iter().collect();
    let moved = net.sequences(&refs2, &starts, &h0).expect("sequences");
    let (a, b) = (vec2(&heads.logits), vec2(&moved.logits));
    assert_ne!(a[1], b[1], "the second step did not read the first's state");
    assert_eq!(a[4], b[4], "another sequence read this one's input");
    // Malformed starts are refused.
    assert!(net.sequences(&refs, &[1, 4], &h0).is_err());
    assert!(net.sequences(&refs, &[0, 4, 4], &h0).is_err());
    assert!(net.heads(&refs).is_err(), "a gru's heads need a state");
}

/// Every variable gets a gradient through the sequences (backpropagation through time), and
/// each agrees with central finite differences.
#[test]
fn gradients_through_time_reach_every_variable_and_match_finite_differences() {
    let net = gru(9);
    let all = rows(6, 5);
    let refs: Vec<&Encoded> = all.iter().collect();
    let starts = [0usize, 4];
    let h0 = states(2, 6);
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let coef: Vec<f32> = (0..6 * 5).map(|_| rng.random_range(-1.0..1.0)).collect();
    let coef = Tensor::from_vec(coef, (6, 5), &Device::Cpu).expect("coef");
    let loss = |net: &MlpNet| -> Tensor {
        let h = net.sequences(&refs, &starts, &h0).expect("forward");
        let a = (h.logits * &coef).and_then(|x| x.sum_all()).expect("a");
        let b = h.values.sqr().and_then(|x| x.sum_all()).expect("b");
        let w = h
            .words
            .expect("words")
            .sqr()
            .and_then(|x| x.sum_all())
            .expect("w");
        ((a + b).expect("ab") + w).expect("loss")
    };
    super::tests::check_gradients(&net, &|n| loss(n));
}

/// The policy carries each agent's state from decision to decision, starts it from zeros at
/// an episode's first step, and records the state it decided from in the trace.
#[test]
fn the_policy_carries_each_agents_state_and_resets_it_at_an_episodes_start() {
    let handle = MlpHandle::default();
    let mut policy = MlpPolicy::with_handle(3, Device::Cpu, handle.clone()).with_memory(true);
    policy.actions = 5;
    let obs = |step: u32, cell: u8| Observation {
        view: vec![cell, 1, 2],
        step,
        ..Default::default()
    };
    // Two agents; `decide` runs one step for both and returns their traces.
    let decide = |policy: &mut MlpPolicy, steps: [u32; 2]| -> Vec<DecisionTrace> {
        let observations = [obs(steps[0], 3), obs(steps[1], 9)];
        let mut rngs = [ChaCha8Rng::seed_from_u64(1), ChaCha8Rng::seed_from_u64(2)];
        let mut actions = [Action::default(), Action::default()];
        let mut traces = [DecisionTrace::default(), DecisionTrace::default()];
        let mut batch: Vec<Decision<'_>> = observations
            .iter()
            .zip(rngs.iter_mut())
            .zip(actions.iter_mut())
            .zip(traces.iter_mut())
            .enumerate()
            .map(|(i, (((o, rng), action), trace))| Decision {
                agent: Agent {
                    arena: 0,
                    slot: i as u16,
                },
                obs: o,
                senses: Default::default(),
                features: &NO_FEATURES,
                mask: ActionMask::all(5),
                rng,
                action,
                say: None,
                team: 0,
                role: 0,
                last_reward: 0.0,
                trace,
            })
            .collect();
        policy.decide(&mut batch);
        drop(batch);
        assert!(policy.failure().is_none(), "{:?}", policy.failure());
        traces.to_vec()
    };
    let first = decide(&mut policy, [0, 0]);
    let net = handle.net().expect("built at the first decision");
    assert!(net.memory);
    assert!(first.iter().all(|t| t.memory == vec![0.0; HIDDEN]));
    let second = decide(&mut policy, [1, 1]);
    // The state the second step decided from is the first step's next state.
    let mut row = Encoded::default();
    crate::envs::senses::encode(&obs(0, 3), Default::default(), &mut row);
    let zeros = Tensor::zeros((1, HIDDEN), candle_core::DType::F32, &Device::Cpu).expect("0");
    let (_, next) = net.step(&[&row], &zeros).expect("step");
    close(
        &[second[0].memory.clone()],
        &vec2(&next),
        1e-6,
        "carried state",
    );
    assert_ne!(second[0].memory, second[1].memory, "agents share a state");
    // A new episode for agent 0 only: its state starts from zeros, agent 1's goes on.
    let third = decide(&mut policy, [0, 2]);
    assert_eq!(third[0].memory, vec![0.0; HIDDEN]);
    assert!(third[1].memory.iter().any(|&x| x != 0.0));
    assert_ne!(third[1].memory, second[1].memory);
}

/// A network with memory saves and loads back as one.
#[test]
fn a_gru_folder_loads_back() {
    let net = gru(4);
    let dir = tempfile::tempdir().expect("tmp");
    net.save(dir.path()).expect("save");
    let back = MlpNet::load(dir.path(), &Device::Cpu).expect("load");
    assert!(back.memory);
    let all = rows(3, 2);
    let refs: Vec<&Encoded> = all.iter().collect();
    let h0 = states(1, 3);
    let a = net.sequences(&refs, &[0], &h0).expect("a");
    let b = back.sequences(&refs, &[0], &h0).expect("b");
    assert_eq!(vec2(&a.logits), vec2(&b.logits));
    // The refusal of a folder of the other kind: tests/suite/train.rs (it needs a scene).
}
