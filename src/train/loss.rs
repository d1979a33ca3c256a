//! Losses over candle tensors, differentiable where training needs them. Every one is a pure
//! function checked against numbers worked by hand (tests below).
//!
//! Shapes: one entry per decision, `(n,)`, unless noted.

use candle_core::{D, DType, Result, Tensor};

/// Log-probabilities `(n, actions)` of the action words under the masked distribution the
/// policies sample from ([`crate::policy::sampling`]): the next-token log-probabilities
/// `(n, vocab)` at each action word's token, illegal actions pushed to −1e9, renormalised over
/// the legal ones.
pub fn masked_action_logprobs(
    token_logprobs: &Tensor,
    action_tokens: &Tensor,
    illegal_bias: &Tensor,
) -> Result<Tensor> {
    let scores = token_logprobs.index_select(action_tokens, 1)?;
    crate::policy::sampling::masked_log_softmax(&scores, illegal_bias)
}

/// The log-probability `(n,)` of each row's chosen action, from `(n, actions)` log-probs and
/// a one-hot `(n, actions)` of the choices.
pub fn chosen(logprobs: &Tensor, one_hot: &Tensor) -> Result<Tensor> {
    (logprobs * one_hot)?.sum(D::Minus1)
}

/// Entropy `(n,)` of each row's masked distribution (`legal` is 1 for legal actions, 0 else).
pub fn entropy(logprobs: &Tensor, legal: &Tensor) -> Result<Tensor> {
    let p = logprobs.exp()?;
    ((p * logprobs)? * legal)?.sum(D::Minus1)?.neg()
}

/// REINFORCE: `−mean(log π(a|s) · A)`.
pub fn reinforce(logp: &Tensor, adv: &Tensor) -> Result<Tensor> {
    (logp * adv)?.mean_all()?.neg()
}

/// What the PPO objective reports besides the loss.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PpoStats {
    /// Share of decisions whose ratio left `[1 − ε, 1 + ε]`.
    pub clip_frac: f32,
    /// Approximate KL(old ‖ new), mean of `(r − 1) − ln r`.
    pub approx_kl: f32,
}

/// PPO's clipped surrogate: `−mean(min(r A, clip(r, 1 − ε, 1 + ε) A))` with
/// `r = exp(log π − log π_old)`.
pub fn ppo_clip(logp: &Tensor, old: &Tensor, adv: &Tensor, eps: f64) -> Result<(Tensor, PpoStats)> {
    let log_ratio = (logp - old)?;
    let ratio = log_ratio.exp()?;
    let unclipped = (&ratio * adv)?;
    let clipped = (ratio.clamp(1.0 - eps, 1.0 + eps)? * adv)?;
    let loss = unclipped.minimum(&clipped)?.mean_all()?.neg()?;
    let r: Vec<f32> = ratio.to_vec1()?;
    let lr: Vec<f32> = log_ratio.to_vec1()?;
    let n = r.len().max(1) as f32;
    let stats = PpoStats {
        clip_frac: r.iter().filter(|&&x| (x - 1.0).abs() as f64 > eps).count() as f32 / n,
        approx_kl: r.iter().zip(&lr).map(|(x, l)| (x - 1.0) - l).sum::<f32>() / n,
    };
    Ok((loss, stats))
}

/// Value loss `0.5 mean(max((V − R)², (V_clip − R)²))` with
/// `V_clip = V_old + clip(V − V_old, −ε, ε)`; unclipped (`0.5 mean((V − R)²)`) when `eps` is
/// `None`.
pub fn value_loss(v: &Tensor, old: &Tensor, target: &Tensor, eps: Option<f64>) -> Result<Tensor> {
    let plain = (v - target)?.sqr()?;
    let worst = match eps {
        Some(e) => {
            let vc = (old + (v - old)?.clamp(-e, e)?)?;
            plain.maximum(&(vc - target)?.sqr()?)?
        }
        None => plain,
    };
    worst.mean_all()? * 0.5
}

/// The k3 estimator of KL(π ‖ π_ref) from log-probs of the sampled actions:
/// `mean(exp(q) − q − 1)` with `q = log π_ref − log π` (non-negative, unbiased).
pub fn k3_kl(logp: &Tensor, logp_ref: &Tensor) -> Result<Tensor> {
    let q = (logp_ref - logp)?;
    ((q.exp()? - &q)? - 1.0)?.mean_all()
}

/// The global L2 norm of gradients.
pub fn grad_norm(grads: &[Tensor]) -> Result<f32> {
    let mut sum = 0f64;
    for g in grads {
        sum += tensor_sum_squares(g)?;
    }
    Ok(sum.sqrt() as f32)
}

/// The squares of `g`'s values summed in f64 as candle's `to_dtype(F64)`, `sqr` and
/// `sum_all` sum them (each value widened and squared exactly, added one after the other
/// from zero: the same bits), read in place where `g` is a contiguous f32 tensor on the CPU
/// (two 8-byte-a-value tensors fewer, and no third pass); through those operations
/// elsewhere.
fn tensor_sum_squares(g: &Tensor) -> Result<f64> {
    if let Some(data) = crate::policy::lm::lock(g) {
        let mut acc = 0f64;
        for &x in data.data() {
            let x = f64::from(x);
            acc += x * x;
        }
        return Ok(acc);
    }
    g.to_dtype(DType::F64)?.sqr()?.sum_all()?.to_scalar::<f64>()
}

/// The squares of `g` summed in f64, as [`grad_norm`] sums them, in eight running sums (one
/// chain of dependent additions had taken 20 µs of every 100,000-value step of the fused
/// path). The order differs from candle's reduction in the last bits of the f64 sum only.
pub fn sum_squares(g: &[f32]) -> f64 {
    let mut acc = [0f64; 8];
    let mut chunks = g.chunks_exact(8);
    for c in &mut chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += f64::from(x) * f64::from(x);
        }
    }
    let tail: f64 = chunks
        .remainder()
        .iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum();
    acc.iter().sum::<f64>() + tail
}

/// Gradient-norm clipping: the global norm of `vars`' gradients in `grads`, which are scaled
/// down to `max_norm` when the norm is finite and above it. Returns the norm before
/// clipping (a non-finite norm leaves the gradients as they are, for the caller to skip).
pub fn clip_grad_norm(
    grads: &mut candle_core::backprop::GradStore,
    vars: &[candle_core::Var],
    max_norm: f32,
) -> Result<f32> {
    let (norm, clip) = clip_factor(grads, vars, max_norm)?;
    if let Some(by) = clip {
        for v in vars {
            if let Some(g) = grads.remove(v.as_tensor()) {
                grads.insert(v.as_tensor(), clip_by(&g, by)?);
            }
        }
    }
    Ok(norm)
}

/// The global norm of `vars`' gradients in `grads` and the factor [`clip_grad_norm`] would
/// scale them by (`None` where the norm is not finite or not above `max_norm`), leaving them
/// as they are: for an optimizer step that applies the factor as it reads each gradient.
pub fn clip_factor(
    grads: &candle_core::backprop::GradStore,
    vars: &[candle_core::Var],
    max_norm: f32,
) -> Result<(f32, Option<f32>)> {
    let gs: Vec<Tensor> = vars
        .iter()
        .filter_map(|v| grads.get(v.as_tensor()).cloned())
        .collect();
    let norm = grad_norm(&gs)?;
    let clip = (norm.is_finite() && norm > max_norm).then(|| max_norm / norm);
    Ok((norm, clip))
}

/// `g` scaled by a clip factor `by` as [`clip_grad_norm`] scales it: candle's `g * by`, an
/// affine map in f32, `x · by + 0`.
pub fn clip_by(g: &Tensor, by: f32) -> Result<Tensor> {
    (g * f64::from(by))?.to_dtype(DType::F32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn t(v: &[f32]) -> Tensor {
        Tensor::new(v, &Device::Cpu).expect("tensor")
    }
    fn s(x: &Tensor) -> f32 {
        x.to_scalar::<f32>().expect("scalar")
    }

    /// The eight running sums give the squares' sum of every length's tail, worked by hand.
    #[test]
    fn sum_squares_is_the_sum_of_squares() {
        assert_eq!(sum_squares(&[]), 0.0);
        assert_eq!(sum_squares(&[3.0]), 9.0);
        // 1..=11: 11 * 12 * 23 / 6 = 506, eight in the running sums and three in the tail.
        let g: Vec<f32> = (1..=11).map(|x| x as f32).collect();
        assert_eq!(sum_squares(&g), 506.0);
        let g = [0.5f32; 17];
        assert_eq!(sum_squares(&g), 4.25);
    }

    #[test]
    fn ppo_by_hand() {
        // ratios e^0 = 1, e^ln1.5 = 1.5, e^ln0.5 = 0.5; advantages 1, 2, −1; ε 0.2.
        // min(1·1, 1·1) = 1; min(1.5·2, 1.2·2) = 2.4; min(0.5·−1, 0.8·−1) = −0.8.
        // loss = −(1 + 2.4 − 0.8)/3 = −0.866667; two of three ratios clipped.
        let old = t(&[0.0, 0.0, 0.0]);
        let new = t(&[0.0, 1.5f32.ln(), 0.5f32.ln()]);
        let (loss, st) = ppo_clip(&new, &old, &t(&[1.0, 2.0, -1.0]), 0.2).expect("ppo");
        assert!((s(&loss) + 0.866667).abs() < 1e-5, "{}", s(&loss));
        assert!((st.clip_frac - 2.0 / 3.0).abs() < 1e-6);
        // approx KL: (0 + (0.5 − ln1.5) + (−0.5 − ln0.5)) / 3 = (0.094535 + 0.193147)/3.
        assert!((st.approx_kl - 0.095894).abs() < 1e-5, "{}", st.approx_kl);
    }

    #[test]
    fn reinforce_value_kl_by_hand() {
        // −mean([−1·2, −0.5·−4]) = −mean([−2, 2]) = 0; −mean([−1·2]) = 2.
        assert!(s(&reinforce(&t(&[-1.0, -0.5]), &t(&[2.0, -4.0])).expect("r")).abs() < 1e-6);
        assert!((s(&reinforce(&t(&[-1.0]), &t(&[2.0])).expect("r")) - 2.0).abs() < 1e-6);
        // V = [1, 3], R = [0, 0]: 0.5 mean(1, 9) = 2.5. Clipped around V_old = [1, 1] with
        // ε 0.5: V_clip = [1, 1.5], max((1)², (1)²) = 1, max(9, 2.25) = 9: still 2.5. With
        // V_old = [1, 5]: V_clip = [1, 4.5]: max(9, 20.25): 0.5 mean(1, 20.25) = 5.3125.
        let v = t(&[1.0, 3.0]);
        let r = t(&[0.0, 0.0]);
        assert!((s(&value_loss(&v, &v, &r, None).expect("v")) - 2.5).abs() < 1e-6);
        let o = t(&[1.0, 1.0]);
        assert!((s(&value_loss(&v, &o, &r, Some(0.5)).expect("v")) - 2.5).abs() < 1e-6);
        let o = t(&[1.0, 5.0]);
        assert!((s(&value_loss(&v, &o, &r, Some(0.5)).expect("v")) - 5.3125).abs() < 1e-6);
        // k3 with q = ln2: 2 − ln2 − 1 = 0.306853; equal policies give 0.
        let kl = k3_kl(&t(&[0.5f32.ln()]), &t(&[0.0])).expect("kl");
        assert!((s(&kl) - 0.306853).abs() < 1e-5);
        assert!(s(&k3_kl(&t(&[-0.3]), &t(&[-0.3])).expect("kl")).abs() < 1e-7);
        assert!((grad_norm(&[t(&[3.0]), t(&[4.0, 0.0])]).expect("n") - 5.0).abs() < 1e-6);
    }

    #[test]
    fn masked_action_distribution_by_hand() {
        // Vocabulary of 4; actions are tokens 1 and 3; token log-probs ln(0.2), ln(0.6).
        // Both legal: 0.25 / 0.75. Action 1 illegal: 1 / 0.
        let lp = Tensor::new(
            &[[0.1f32.ln(), 0.2f32.ln(), 0.1f32.ln(), 0.6f32.ln()]],
            &Device::Cpu,
        )
        .expect("lp");
        let ids = Tensor::new(&[1u32, 3], &Device::Cpu).expect("ids");
        let free = Tensor::new(&[[0f32, 0.0]], &Device::Cpu).expect("mask");
        let a = masked_action_logprobs(&lp, &ids, &free)
            .expect("a")
            .exp()
            .expect("exp");
        let a: Vec<Vec<f32>> = a.to_vec2().expect("vec");
        assert!((a[0][0] - 0.25).abs() < 1e-6 && (a[0][1] - 0.75).abs() < 1e-6);
        let one_bad = Tensor::new(&[[0f32, -1e9]], &Device::Cpu).expect("mask");
        let alp = masked_action_logprobs(&lp, &ids, &one_bad).expect("a");
        let legal = Tensor::new(&[[1f32, 0.0]], &Device::Cpu).expect("legal");
        assert!(s(&entropy(&alp, &legal).expect("h").squeeze(0).expect("sq")).abs() < 1e-6);
        let one_hot = Tensor::new(&[[1f32, 0.0]], &Device::Cpu).expect("one hot");
        let c = chosen(&alp, &one_hot).expect("c").squeeze(0).expect("sq");
        assert!(s(&c).abs() < 1e-6);
        // Entropy of (0.25, 0.75): −(0.25 ln 0.25 + 0.75 ln 0.75) = 0.562335.
        let alp = masked_action_logprobs(&lp, &ids, &free).expect("a");
        let both = Tensor::new(&[[1f32, 1.0]], &Device::Cpu).expect("legal");
        let h = entropy(&alp, &both).expect("h").squeeze(0).expect("sq");
        assert!((s(&h) - 0.562335).abs() < 1e-5);
    }
}
