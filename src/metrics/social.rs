//! Social-outcome metrics (Perolat et al. 2017, "A multi-agent reinforcement learning model
//! of common-pool resource appropriation"), as pure functions over one episode:
//!
//! | metric | definition here |
//! |---|---|
//! | efficiency | mean per-capita return, Σᵢ Rᵢ / N |
//! | equality | 1 − Gini(R) = 1 − Σᵢ Σⱼ \|Rᵢ − Rⱼ\| / (2 N Σᵢ \|Rᵢ\|); 1 when every return is 0 |
//! | sustainability | mean over agents with some reward of the mean step index of their rewarded steps (left out when no agent was rewarded) |
//! | peace | share of agent-steps not spent removed (zapped): 1 − Σᵢ removedᵢ / (N T) |
//!
//! The Gini coefficient is normalised by the sum of the returns' magnitudes (Raffinetti,
//! Siletti & Vernizzi 2015, "On the Gini coefficient normalization when attributes with
//! negative values are considered", Statistical Methods & Applications 24: 507-521): the
//! same as the usual Gini when no return is negative, and still in [0, 1] when some are (a
//! scene with a zap cost), where dividing by the plain sum leaves [0, 1] and even changes
//! sign.

use std::collections::BTreeMap;

use crate::core::AgentStats;

/// Gini coefficient of `values`, normalised by the sum of their magnitudes (see the module
/// header): in [0, 1] for any signs; 0 when all are equal, for an empty or an all-zero slice.
pub fn gini(values: &[f32]) -> f64 {
    let n = values.len() as f64;
    let total: f64 = values.iter().map(|&v| f64::from(v).abs()).sum();
    if values.is_empty() || total == 0.0 {
        return 0.0;
    }
    let mut diff = 0.0;
    for &a in values {
        for &b in values {
            diff += (f64::from(a) - f64::from(b)).abs();
        }
    }
    diff / (2.0 * n * total)
}

/// The four social outcomes of an episode of `steps` steps.
pub fn social_outcomes(
    returns: &[f32],
    stats: &[AgentStats],
    steps: u32,
) -> BTreeMap<&'static str, f64> {
    let n = returns.len().max(1) as f64;
    let mut m = BTreeMap::new();
    m.insert(
        "efficiency",
        returns.iter().map(|&r| f64::from(r)).sum::<f64>() / n,
    );
    m.insert("equality", 1.0 - gini(returns));
    let rewarded: Vec<f64> = stats
        .iter()
        .filter(|s| s.rewarded_steps > 0)
        .map(|s| s.rewarded_time_sum as f64 / f64::from(s.rewarded_steps))
        .collect();
    if !rewarded.is_empty() {
        m.insert(
            "sustainability",
            rewarded.iter().sum::<f64>() / rewarded.len() as f64,
        );
    }
    let agent_steps = stats.len() as f64 * f64::from(steps.max(1));
    let removed: f64 = stats.iter().map(|s| f64::from(s.removed_steps)).sum();
    m.insert("peace", 1.0 - removed / agent_steps);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gini_of_known_returns() {
        assert_eq!(gini(&[1.0, 1.0, 1.0, 1.0]), 0.0);
        // One agent has everything: (N-1)/N.
        assert!((gini(&[0.0, 0.0, 0.0, 8.0]) - 0.75).abs() < 1e-12);
        // [1, 2, 3]: Σ|diff| = 2·(1+2+1) = 8; 8 / (2·3·6) = 2/9.
        assert!((gini(&[1.0, 2.0, 3.0]) - 2.0 / 9.0).abs() < 1e-12);
        assert_eq!(gini(&[]), 0.0);
        assert_eq!(gini(&[0.0, 0.0]), 0.0);
    }

    #[test]
    fn gini_stays_in_its_range_for_negative_returns() {
        // A zap cost: −2.4 and 2.6. Σ|diff| = 2·5 = 10; Σ|R| = 5; 10 / (2·2·5) = 0.5 (the
        // plain sum, 0.2, gave 12.5 and an equality of −11.5).
        assert!((gini(&[-2.4, 2.6]) - 0.5).abs() < 1e-6);
        // All negative and equal: perfectly equal.
        assert_eq!(gini(&[-1.0, -1.0, -1.0]), 0.0);
        // [−1, 0, 1]: Σ|diff| = 2·(1 + 2 + 1) = 8; 8 / (2·3·2) = 2/3.
        assert!((gini(&[-1.0, 0.0, 1.0]) - 2.0 / 3.0).abs() < 1e-12);
        // Sums to zero, unequal: still in range (the plain sum divides by zero).
        assert!((0.0..=1.0).contains(&gini(&[-3.0, 1.0, 2.0])));
        let m = social_outcomes(&[-2.4, 2.6], &[AgentStats::default(); 2], 5);
        assert!((m["equality"] - 0.5).abs() < 1e-6);
    }

    #[test]
    fn outcomes_of_a_hand_built_episode() {
        // Two agents over 10 steps: A eats at steps 2 and 4 (return 2), B at step 9
        // (return 1) and spends 5 steps zapped.
        let a = AgentStats {
            rewarded_steps: 2,
            rewarded_time_sum: 6,
            removed_steps: 0,
        };
        let b = AgentStats {
            rewarded_steps: 1,
            rewarded_time_sum: 9,
            removed_steps: 5,
        };
        let m = social_outcomes(&[2.0, 1.0], &[a, b], 10);
        assert!((m["efficiency"] - 1.5).abs() < 1e-12);
        // Gini: 2·1 / (2·2·3) = 1/6.
        assert!((m["equality"] - (1.0 - 1.0 / 6.0)).abs() < 1e-12);
        // Mean rewarded time: A 3, B 9; mean 6.
        assert!((m["sustainability"] - 6.0).abs() < 1e-12);
        assert!((m["peace"] - 0.75).abs() < 1e-12);
    }

    #[test]
    fn sustainability_left_out_without_rewards() {
        let m = social_outcomes(&[0.0, 0.0], &[AgentStats::default(); 2], 5);
        assert!(!m.contains_key("sustainability"));
        assert_eq!(m["equality"], 1.0);
        assert_eq!(m["peace"], 1.0);
    }
}
