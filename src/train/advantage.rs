//! Advantage estimators, as pure functions over one trajectory or one group of rollouts
//! (the "Training" part of DESIGN.md). Every one is checked against numbers worked by hand.

/// Discounted returns-to-go of one trajectory: `G_t = r_t + γ G_{t+1}`, `G_T = 0`.
pub fn returns_to_go(rewards: &[f32], gamma: f32) -> Vec<f32> {
    let mut out = vec![0.0; rewards.len()];
    let mut g = 0.0;
    for t in (0..rewards.len()).rev() {
        g = rewards[t] + gamma * g;
        out[t] = g;
    }
    out
}

/// Generalised advantage estimation over one trajectory of `rewards` and `values`, with
/// `last_value` the value after the final step (0 when the episode terminated):
/// `δ_t = r_t + γ V_{t+1} − V_t`, `A_t = δ_t + γλ A_{t+1}`. Returns (advantages,
/// value targets `A_t + V_t`).
pub fn gae(
    rewards: &[f32],
    values: &[f32],
    last_value: f32,
    gamma: f32,
    lambda: f32,
) -> (Vec<f32>, Vec<f32>) {
    assert_eq!(rewards.len(), values.len(), "one value per reward");
    let n = rewards.len();
    let mut adv = vec![0.0; n];
    let mut next_adv = 0.0;
    for t in (0..n).rev() {
        let next_v = if t + 1 < n { values[t + 1] } else { last_value };
        let delta = rewards[t] + gamma * next_v - values[t];
        next_adv = delta + gamma * lambda * next_adv;
        adv[t] = next_adv;
    }
    let targets = adv.iter().zip(values).map(|(a, v)| a + v).collect();
    (adv, targets)
}

/// Group-relative advantages (GRPO/MAGRPO): each rollout's return minus the mean of its
/// group, divided by the group's standard deviation (population, plus `eps`) when
/// `normalise`.
pub fn group_relative(returns: &[f32], normalise: bool, eps: f32) -> Vec<f32> {
    if returns.is_empty() {
        return Vec::new();
    }
    let n = returns.len() as f32;
    let mean = returns.iter().sum::<f32>() / n;
    let std = (returns.iter().map(|r| (r - mean).powi(2)).sum::<f32>() / n).sqrt();
    returns
        .iter()
        .map(|r| {
            if normalise {
                (r - mean) / (std + eps)
            } else {
                r - mean
            }
        })
        .collect()
}

/// Leave-one-out advantages: each rollout's return minus the mean of the others in its
/// group (0 for a group of one).
pub fn leave_one_out(returns: &[f32]) -> Vec<f32> {
    let n = returns.len();
    if n < 2 {
        return vec![0.0; n];
    }
    let sum: f32 = returns.iter().sum();
    returns
        .iter()
        .map(|r| r - (sum - r) / (n - 1) as f32)
        .collect()
}

/// Mean and standard deviation normalisation (`(x − mean) / (std + 1e-8)`), in place.
/// Returns the standard deviation it divided by (0 for fewer than 2 values, left as they are).
pub fn normalise(xs: &mut [f32]) -> f32 {
    if xs.len() < 2 {
        return 0.0;
    }
    let n = xs.len() as f32;
    let mean = xs.iter().sum::<f32>() / n;
    let std = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / n).sqrt();
    xs.iter_mut().for_each(|x| *x = (*x - mean) / (std + 1e-8));
    std
}

/// `1 − Var(targets − predictions) / Var(targets)`: 1 for a perfect critic, 0 for one
/// that predicts the mean, negative for worse. `None` when the targets do not vary.
pub fn explained_variance(predictions: &[f32], targets: &[f32]) -> Option<f32> {
    let n = targets.len() as f32;
    if targets.len() < 2 {
        return None;
    }
    let var = |xs: &mut dyn Iterator<Item = f32>| {
        let v: Vec<f32> = xs.collect();
        let m = v.iter().sum::<f32>() / n;
        v.iter().map(|x| (x - m).powi(2)).sum::<f32>() / n
    };
    let vt = var(&mut targets.iter().copied());
    if vt <= 1e-12 {
        return None;
    }
    let vr = var(&mut targets.iter().zip(predictions).map(|(t, p)| t - p));
    Some(1.0 - vr / vt)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-5, "{a:?} != {b:?}");
        }
    }

    #[test]
    fn returns_by_hand() {
        // G_2 = 3; G_1 = 2 + 0.5*3 = 3.5; G_0 = 1 + 0.5*3.5 = 2.75.
        close(&returns_to_go(&[1.0, 2.0, 3.0], 0.5), &[2.75, 3.5, 3.0]);
    }

    #[test]
    fn gae_by_hand() {
        // r = [1, 0], V = [0.5, 1], last 0, γ 0.9, λ 0.8.
        // δ_1 = 0 + 0.9*0 − 1 = −1;      A_1 = −1
        // δ_0 = 1 + 0.9*1 − 0.5 = 1.4;   A_0 = 1.4 + 0.72*(−1) = 0.68
        let (a, t) = gae(&[1.0, 0.0], &[0.5, 1.0], 0.0, 0.9, 0.8);
        close(&a, &[0.68, -1.0]);
        close(&t, &[1.18, 0.0]);
        // λ = 1 gives returns minus values.
        let (a, _) = gae(&[1.0, 2.0, 3.0], &[0.0; 3], 0.0, 0.5, 1.0);
        close(&a, &[2.75, 3.5, 3.0]);
        // A bootstrap value counts after the last step: δ = 0 + 0.9*2 − 0 = 1.8.
        close(&gae(&[0.0], &[0.0], 2.0, 0.9, 0.95).0, &[1.8]);
    }

    #[test]
    fn group_and_leave_one_out_by_hand() {
        // Mean 2; deviations −1, 0, 1; population std sqrt(2/3) = 0.816497.
        close(
            &group_relative(&[1.0, 2.0, 3.0], false, 0.0),
            &[-1.0, 0.0, 1.0],
        );
        close(
            &group_relative(&[1.0, 2.0, 3.0], true, 0.0),
            &[-1.224745, 0.0, 1.224745],
        );
        // 1 − (2+3)/2 = −1.5; 2 − 2 = 0; 3 − 1.5 = 1.5.
        close(&leave_one_out(&[1.0, 2.0, 3.0]), &[-1.5, 0.0, 1.5]);
        close(&leave_one_out(&[4.0]), &[0.0]);
    }

    #[test]
    fn explained_variance_by_hand() {
        assert_eq!(
            explained_variance(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0]),
            Some(1.0)
        );
        assert_eq!(
            explained_variance(&[2.0, 2.0, 2.0], &[1.0, 2.0, 3.0]),
            Some(0.0)
        );
        assert_eq!(explained_variance(&[0.0, 0.0], &[1.0, 1.0]), None);
        let mut x = [1.0, 3.0];
        assert_eq!(normalise(&mut x), 1.0, "the spread divided by");
        close(&x, &[-1.0, 1.0]);
        let mut one = [5.0];
        assert_eq!(normalise(&mut one), 0.0, "one value is left alone");
        assert_eq!(one, [5.0]);
    }
}
