//! Sampling an action from scores under a mask, with the agent's own stream: shared by the
//! model-backed policies so that they record log-probabilities and entropies the same way.

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
    let logprob = probs[pick].max(f32::MIN_POSITIVE).ln();
    (pick, probs, logprob, entropy)
}
