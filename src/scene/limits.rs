//! What each training setting accepts, in one table read by the command's flags, a scene's
//! `train:` block (checked with the scene, at its line and column) and `train::train`
//! itself (a resumed run's `config.json`, a library caller).

/// A whole-number setting's range, both ends included.
#[derive(Debug, Clone, Copy)]
pub struct Int {
    /// The setting's name in a scene's `train:` block and in `config.json`.
    pub name: &'static str,
    /// Smallest accepted value.
    pub lo: u64,
    /// Largest accepted value.
    pub hi: u64,
}

impl Int {
    const fn new(name: &'static str, lo: u64, hi: u64) -> Self {
        Self { name, lo, hi }
    }
    /// What is expected, for messages.
    pub fn expected(&self) -> String {
        format!("an integer in [{}, {}]", self.lo, self.hi)
    }
    /// `Err(expected)` when `v` is out of range.
    pub fn check(&self, v: u64) -> Result<(), String> {
        if (self.lo..=self.hi).contains(&v) {
            Ok(())
        } else {
            Err(self.expected())
        }
    }
}

/// A real-valued setting's range: finite, in `[lo, hi]`.
#[derive(Debug, Clone, Copy)]
pub struct Real {
    /// The setting's name in a scene's `train:` block and in `config.json`.
    pub name: &'static str,
    /// Lower end (included).
    pub lo: f64,
    /// Upper end (included).
    pub hi: f64,
}

impl Real {
    /// `[lo, hi]`.
    const fn closed(name: &'static str, lo: f64, hi: f64) -> Self {
        Self { name, lo, hi }
    }
    /// What is expected, for messages.
    pub fn expected(&self) -> String {
        format!("a finite number in [{}, {}]", self.lo, self.hi)
    }
    /// `Err(expected)` when `v` is not finite or out of range.
    pub fn check(&self, v: f64) -> Result<(), String> {
        if v.is_finite() && v >= self.lo && v <= self.hi {
            Ok(())
        } else {
            Err(self.expected())
        }
    }
}

/// Updates.
pub const ITERATIONS: Int = Int::new("iterations", 1, 1_000_000);
/// Arenas side by side.
pub const ARENAS: Int = Int::new("arenas", 1, 100_000);
/// Passes over each batch.
pub const EPOCHS: Int = Int::new("epochs", 1, 1_000);
/// Decisions per gradient step.
pub const MINIBATCH: Int = Int::new("minibatch", 1, 1_000_000);
/// Arenas that share a seed.
pub const GROUP_SIZE: Int = Int::new("group_size", 1, 100_000);
/// CORY's updates between role swaps.
pub const SWAP_EVERY: Int = Int::new("swap_every", 1, 1_000_000);
/// LoRA rank.
pub const LORA_RANK: Int = Int::new("lora_rank", 1, 1_024);
/// Past turns a language-model agent reads (`memory`).
pub const MEMORY: Int = Int::new("memory", 0, 64);
/// Iterations between checkpoints.
pub const CHECKPOINT_EVERY: Int = Int::new("checkpoint_every", 1, 1_000_000);
/// AdamW's learning rate (0: a run that does not learn, a baseline).
pub const LR: Real = Real::closed("lr", 0.0, 1.0);
/// The last iteration's learning rate as a fraction of the first's.
pub const LR_FINAL_FRAC: Real = Real::closed("lr_final_frac", 0.0, 1.0);
/// AdamW's weight decay.
pub const WEIGHT_DECAY: Real = Real::closed("weight_decay", 0.0, 1.0);
/// PPO's clip range.
pub const CLIP: Real = Real::closed("clip", 0.0, 10.0);
/// Weight of the value loss.
pub const VALUE_COEF: Real = Real::closed("value_coef", 0.0, 1e6);
/// The global gradient norm gradients are scaled down to.
pub const MAX_GRAD_NORM: Real = Real::closed("max_grad_norm", 1e-6, 1e6);
/// Weight of the KL to the starting model.
pub const KL_COEF: Real = Real::closed("kl_coef", 0.0, 1e6);
/// The approximate KL that stops an update early (0: never).
pub const TARGET_KL: Real = Real::closed("target_kl", 0.0, 1e6);
/// Weight of the entropy bonus.
pub const ENTROPY_COEF: Real = Real::closed("entropy_coef", 0.0, 1e6);
/// Discount.
pub const GAMMA: Real = Real::closed("gamma", 0.0, 1.0);
/// GAE λ.
pub const LAMBDA: Real = Real::closed("lambda", 0.0, 1.0);
/// Advantage Alignment's β.
pub const AA_BETA: Real = Real::closed("aa_beta", 0.0, 1e6);

/// A setting out of its range: its name, its value and what was expected.
#[derive(Debug, Clone, PartialEq)]
pub struct OutOfRange {
    /// The setting's name (as in a scene's `train:` block and `config.json`).
    pub name: &'static str,
    /// Its value.
    pub value: String,
    /// What is expected.
    pub expected: String,
}

/// Checks every setting `t` gives (a scene's `train:` block, or a run's whole settings with
/// every field given) against its limit: the first out of range.
pub fn check_settings(t: &super::settings::TrainSettings) -> Result<(), OutOfRange> {
    let out = |name, value, expected| OutOfRange {
        name,
        value,
        expected,
    };
    let ints = [
        (ITERATIONS, t.iterations.map(u64::from)),
        (ARENAS, t.arenas.map(u64::from)),
        (EPOCHS, t.epochs.map(|v| v as u64)),
        (MINIBATCH, t.minibatch.map(|v| v as u64)),
        (GROUP_SIZE, t.group_size.map(u64::from)),
        (SWAP_EVERY, t.swap_every.map(u64::from)),
        (LORA_RANK, t.lora_rank.map(|v| v as u64)),
        (CHECKPOINT_EVERY, t.checkpoint_every.map(u64::from)),
        (MEMORY, t.memory.map(u64::from)),
    ];
    for (limit, v) in ints {
        if let Some(v) = v {
            limit
                .check(v)
                .map_err(|e| out(limit.name, v.to_string(), e))?;
        }
    }
    let reals = [
        (LR, t.lr),
        (LR_FINAL_FRAC, t.lr_final_frac),
        (WEIGHT_DECAY, t.weight_decay),
        (CLIP, t.clip),
        (VALUE_COEF, t.value_coef),
        (MAX_GRAD_NORM, t.max_grad_norm.map(f64::from)),
        (KL_COEF, t.kl_coef),
        (TARGET_KL, t.target_kl),
        (ENTROPY_COEF, t.entropy_coef),
        (GAMMA, t.gamma.map(f64::from)),
        (LAMBDA, t.lambda.map(f64::from)),
        (AA_BETA, t.aa_beta.map(f64::from)),
    ];
    for (limit, v) in reals {
        if let Some(v) = v {
            limit
                .check(v)
                .map_err(|e| out(limit.name, v.to_string(), e))?;
        }
    }
    Ok(())
}

/// A flag's number checked against `limit`, as `f32` (for clap's `value_parser`).
pub fn parse_f32(s: &str, limit: Real) -> Result<f32, String> {
    parse_real(s, limit).map(|v| v as f32)
}

/// A flag's whole number checked against `limit`, as `u32` (for clap's `value_parser`).
pub fn parse_u32(s: &str, limit: Int) -> Result<u32, String> {
    let v = parse_int(s, limit)?;
    u32::try_from(v).map_err(|_| format!("{v}: expected {}", limit.expected()))
}

/// A flag's whole number checked against `limit`, as `usize` (for clap's `value_parser`).
pub fn parse_usize(s: &str, limit: Int) -> Result<usize, String> {
    parse_int(s, limit).map(|v| v as usize)
}

/// Parses a flag's number and checks it against `limit` (for clap's `value_parser`).
pub fn parse_real(s: &str, limit: Real) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number; expected {}", limit.expected()))?;
    limit.check(v).map_err(|e| format!("{v}: expected {e}"))?;
    Ok(v)
}

/// Parses a flag's whole number and checks it against `limit` (for clap's `value_parser`).
pub fn parse_int(s: &str, limit: Int) -> Result<u64, String> {
    let v: u64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a whole number; expected {}", limit.expected()))?;
    limit.check(v).map_err(|e| format!("{v}: expected {e}"))?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_take_their_ends_and_refuse_what_lies_outside() {
        assert!(LR.check(1e-3).is_ok() && LR.check(1.0).is_ok());
        assert!(LR.check(0.0).is_ok());
        for bad in [-1e-3, 1.5, f64::NAN, f64::INFINITY] {
            assert_eq!(
                LR.check(bad),
                Err("a finite number in [0, 1]".into()),
                "{bad}"
            );
        }
        assert!(GAMMA.check(0.0).is_ok() && GAMMA.check(1.0).is_ok());
        assert!(GAMMA.check(1.01).is_err() && GAMMA.check(-0.01).is_err());
        assert!(KL_COEF.check(0.0).is_ok() && KL_COEF.check(f64::NAN).is_err());
        assert!(EPOCHS.check(1).is_ok() && EPOCHS.check(1000).is_ok());
        assert_eq!(EPOCHS.check(0), Err("an integer in [1, 1000]".into()));
        assert!(LORA_RANK.check(1025).is_err());
        assert_eq!(parse_real("0.5", LAMBDA), Ok(0.5));
        assert_eq!(
            parse_real("nan", LR),
            Err("NaN: expected a finite number in [0, 1]".into())
        );
        assert!(parse_real("fast", LR).is_err_and(|e| e.contains("\"fast\" is not a number")));
        assert_eq!(parse_int("4", EPOCHS), Ok(4));
        assert!(parse_int("-1", EPOCHS).is_err() && parse_int("0", EPOCHS).is_err());
    }
}
