//! The one masked action distribution: a softmax over the scores of the legal actions, the
//! illegal ones at probability 0. [`sample`] draws from it with the agent's own stream (the
//! model-backed policies, when they decide), [`masked_log_softmax`] is the same distribution
//! as tensors (the trainer's losses, which must score the choices as they were drawn; a test
//! checks that the two agree).

use candle_core::{D, Tensor};
use rand::Rng;

/// The first score an allowed choice has that is not a finite number (a model with broken
/// weights gives NaN everywhere): its index and value.
pub fn first_non_finite(scores: &[f32], allowed: impl Fn(usize) -> bool) -> Option<(usize, f32)> {
    scores
        .iter()
        .enumerate()
        .find(|&(i, s)| allowed(i) && !s.is_finite())
        .map(|(i, &s)| (i, s))
}

/// The first entry of `t` that is not finite: its index in the flattened tensor and its
/// value (`Ok(None)` when every entry is finite).
pub fn first_non_finite_entry(
    t: &candle_core::Tensor,
) -> candle_core::Result<Option<(usize, f32)>> {
    let v = t
        .flatten_all()?
        .to_dtype(candle_core::DType::F32)?
        .to_vec1::<f32>()?;
    Ok(v.iter().position(|x| !x.is_finite()).map(|i| (i, v[i])))
}

/// `Err` naming tensor `name`'s first entry that is not finite ("tensor NAME holds NaN at
/// flat index I (of N); expected finite numbers"), or the error reading it.
pub fn check_finite(name: &str, t: &candle_core::Tensor) -> Result<(), String> {
    match first_non_finite_entry(t) {
        Ok(None) => Ok(()),
        Ok(Some((i, v))) => Err(format!(
            "tensor {name} holds {v} at flat index {i} (of {}); expected finite numbers",
            t.elem_count()
        )),
        Err(e) => Err(format!("tensor {name}: {e}")),
    }
}

/// The masked softmax of `scores` (entries where `allowed` is false get probability 0) and
/// one draw from it: (choice, probabilities, log-probability of the choice, entropy).
pub fn sample(
    scores: &[f32],
    allowed: impl Fn(usize) -> bool,
    rng: &mut impl Rng,
) -> (usize, Vec<f32>, f32, f32) {
    choose(scores, allowed, rng, None)
}

/// [`sample`], or where `given` names a choice (a teacher's, which imitation records as the
/// policy's own: [`crate::policy::Policy::follow`]) that choice, with its log-probability
/// under the same distribution and no draw from `rng`.
pub fn choose(
    scores: &[f32],
    allowed: impl Fn(usize) -> bool,
    rng: &mut impl Rng,
    given: Option<usize>,
) -> (usize, Vec<f32>, f32, f32) {
    let max = scores
        .iter()
        .enumerate()
        .filter(|&(i, _)| allowed(i))
        .map(|(_, &s)| s)
        .fold(f32::NEG_INFINITY, f32::max);
    let mut probs: Vec<f32> = scores
        .iter()
        .enumerate()
        .map(|(i, &s)| if allowed(i) { (s - max).exp() } else { 0.0 })
        .collect();
    let z: f32 = probs.iter().sum();
    if z > 0.0 && z.is_finite() {
        probs.iter_mut().for_each(|p| *p /= z);
    }
    let entropy = -probs
        .iter()
        .filter(|&&p| p > 0.0)
        .map(|&p| p * p.ln())
        .sum::<f32>();
    let pick = match given {
        Some(g) if g < probs.len() => g,
        _ => {
            let u: f32 = rng.random();
            let mut acc = 0.0;
            let mut pick = probs.iter().rposition(|&p| p > 0.0).unwrap_or(0);
            for (i, &p) in probs.iter().enumerate() {
                acc += p;
                if p > 0.0 && u < acc {
                    pick = i;
                    break;
                }
            }
            pick
        }
    };
    let logprob = probs[pick].max(f32::MIN_POSITIVE).ln();
    (pick, probs, logprob, entropy)
}

/// The score added to an illegal action before the softmax of [`masked_log_softmax`]: its
/// probability underflows to exactly 0, as in [`sample`].
pub const ILLEGAL: f32 = -1e9;

/// The additive bias `(rows, actions)` of [`masked_log_softmax`]: 0 where `legal[r][a]`,
/// [`ILLEGAL`] elsewhere (actions past a row's end count as illegal).
pub fn illegal_bias(
    legal: &[&[bool]],
    actions: usize,
    device: &candle_core::Device,
) -> candle_core::Result<Tensor> {
    let mut bias = vec![0f32; legal.len() * actions];
    for (r, row) in legal.iter().enumerate() {
        for a in 0..actions {
            if !row.get(a).copied().unwrap_or(false) {
                bias[r * actions + a] = ILLEGAL;
            }
        }
    }
    Tensor::from_vec(bias, (legal.len(), actions), device)
}

/// Log-probabilities `(n, actions)` of the masked distribution of each row of `scores`
/// `(n, actions)`: `log_softmax(scores + illegal_bias)` ([`illegal_bias`]).
pub fn masked_log_softmax(scores: &Tensor, illegal_bias: &Tensor) -> candle_core::Result<Tensor> {
    candle_nn::ops::log_softmax(&(scores + illegal_bias)?, D::Minus1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn a_given_choice_is_kept_with_its_log_probability_and_draws_nothing() {
        // Scores ln 1, ln 2, ln 5 (the middle one illegal): probabilities 1/6, 0, 5/6.
        let scores = [0f32, 2f32.ln(), 5f32.ln()];
        let legal = |i: usize| i != 1;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let before = rng.clone();
        let (pick, probs, logprob, _) = choose(&scores, legal, &mut rng, Some(0));
        assert_eq!(pick, 0);
        assert!(
            (probs[0] - 1.0 / 6.0).abs() < 1e-6 && probs[1] == 0.0,
            "{probs:?}"
        );
        assert!((logprob - (1.0f32 / 6.0).ln()).abs() < 1e-5, "{logprob}");
        assert_eq!(rng, before, "a given choice must not draw from the stream");
        // Without one, the same draw as `sample`.
        let mut a = rand_chacha::ChaCha8Rng::seed_from_u64(2);
        let mut b = a.clone();
        assert_eq!(
            choose(&scores, legal, &mut a, None),
            sample(&scores, legal, &mut b)
        );
    }

    #[test]
    fn the_sampled_distribution_and_the_losses_distribution_are_one() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        for case in 0..200 {
            let n = 2 + case % 7;
            let scores: Vec<f32> = (0..n).map(|_| rng.random::<f32>() * 20.0 - 10.0).collect();
            let mut legal: Vec<bool> = (0..n).map(|_| rng.random::<f32>() < 0.6).collect();
            legal[case % n] = true;
            let (_, probs, _, _) = sample(&scores, |i| legal[i], &mut rng);
            let dev = candle_core::Device::Cpu;
            let s = Tensor::from_vec(scores.clone(), (1, n), &dev).unwrap();
            let bias = illegal_bias(&[&legal], n, &dev).unwrap();
            let lp = masked_log_softmax(&s, &bias).unwrap();
            let p: Vec<f32> = lp.exp().unwrap().flatten_all().unwrap().to_vec1().unwrap();
            for i in 0..n {
                assert!(
                    (p[i] - probs[i]).abs() < 1e-6,
                    "case {case}: action {i}: {} vs {}",
                    p[i],
                    probs[i]
                );
                if !legal[i] {
                    assert_eq!((p[i], probs[i]), (0.0, 0.0));
                }
            }
        }
    }
}
