//! The training settings, written out once: the command's flags (`emergence train --lr ...`,
//! through clap), a scene's `train:` block (through serde, checked at its line and column)
//! and the library's callers all fill this one type, whose fields are all optional; a
//! given field wins over the layer below it (flags over the scene's block over the
//! defaults of the algorithm and the learner, [`TrainSettings::over`]). Each field's range
//! is in [`super::limits`], which the flags' parsers, the scene's check and
//! [`super::train`] all read. A run's resolved settings are saved in its `config.json`.

use serde::{Deserialize, Serialize};

use super::limits::{self, parse_f32, parse_u32, parse_usize};
use super::{Algo, Hyper, LearnerKind, Sharing};

/// Every training setting, each optional (unset: the layer below decides).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, default)]
pub struct TrainSettings {
    /// The algorithm [default: ippo].
    #[arg(long, value_enum)]
    pub algo: Option<Algo>,
    /// Updates to make: one per episode of every arena, 1 to 1,000,000 [default: 20]. With
    /// --resume: the new total.
    #[arg(long, value_parser = |s: &str| parse_u32(s, limits::ITERATIONS))]
    pub iterations: Option<u32>,
    /// Arenas run side by side (episodes per update), 1 to 100,000 [default: 16].
    #[arg(long, value_parser = |s: &str| parse_u32(s, limits::ARENAS))]
    pub arenas: Option<u32>,
    /// Run seed: the same seed gives the same run [default: 0].
    #[arg(long)]
    pub seed: Option<u64>,
    /// The starting language model: `tiny`, `small` (fresh, seeded by --seed) or a model
    /// folder [default: tiny].
    #[arg(long)]
    pub model: Option<String>,
    /// The policy that learns: the language model, or `mlp`, the classic-MARL baseline (a
    /// two-layer network on the observation's features, weights from --seed; every algorithm
    /// but cory; --minibatch 1024 unless given). The scene's agents on it learn (every agent
    /// when none is) [default: lm].
    #[arg(long, value_enum)]
    pub learner: Option<LearnerKind>,
    /// AdamW learning rate, decaying linearly to a tenth over the run, in [0, 1]
    /// [default: 0.001].
    #[arg(long, value_parser = |s: &str| limits::parse_real(s, limits::LR))]
    pub lr: Option<f64>,
    /// The learning rate at the last iteration, as a fraction of --lr (the schedule is
    /// linear), in [0, 1] [default: 0.1].
    #[arg(long, value_parser = |s: &str| limits::parse_real(s, limits::LR_FINAL_FRAC))]
    pub lr_final_frac: Option<f64>,
    /// AdamW weight decay, in [0, 1] [default: 0].
    #[arg(long, value_parser = |s: &str| limits::parse_real(s, limits::WEIGHT_DECAY))]
    pub weight_decay: Option<f64>,
    /// PPO's clip range for the probability ratio (and the value), in [0, 10] [default: 0.2].
    #[arg(long, value_parser = |s: &str| limits::parse_real(s, limits::CLIP))]
    pub clip: Option<f64>,
    /// Weight of the value loss, in [0, 1e6] [default: 0.5].
    #[arg(long, value_parser = |s: &str| limits::parse_real(s, limits::VALUE_COEF))]
    pub value_coef: Option<f64>,
    /// Gradients are scaled down to this global norm, in [1e-6, 1e6] [default: 1].
    #[arg(long, value_parser = |s: &str| parse_f32(s, limits::MAX_GRAD_NORM))]
    pub max_grad_norm: Option<f32>,
    /// MAGRPO: divide the group-relative advantages by the group's standard deviation
    /// (`true` or `false`) [default: true].
    #[arg(long)]
    pub group_std: Option<bool>,
    /// Weight of the k3 KL to the frozen starting model, in [0, 1e6] (0: none) [default: 0;
    /// cory: 0.4].
    #[arg(long, value_parser = |s: &str| limits::parse_real(s, limits::KL_COEF))]
    pub kl_coef: Option<f64>,
    /// Weight of the entropy bonus, in [0, 1e6] [default: 0.01].
    #[arg(long, value_parser = |s: &str| limits::parse_real(s, limits::ENTROPY_COEF))]
    pub entropy_coef: Option<f64>,
    /// Discount, in [0, 1] [default: 0.99; advantage-alignment: 0.9].
    #[arg(long, value_parser = |s: &str| parse_f32(s, limits::GAMMA))]
    pub gamma: Option<f32>,
    /// GAE lambda, in [0, 1] [default: 0.95].
    #[arg(long, value_parser = |s: &str| parse_f32(s, limits::LAMBDA))]
    pub lambda: Option<f32>,
    /// PPO passes over each batch, 1 to 1,000 [default: 4; advantage-alignment: 2].
    #[arg(long, value_parser = |s: &str| parse_usize(s, limits::EPOCHS))]
    pub epochs: Option<usize>,
    /// Decisions per gradient step, 1 to 1,000,000 [default: 64; --learner mlp: 1024].
    #[arg(long, value_parser = |s: &str| parse_usize(s, limits::MINIBATCH))]
    pub minibatch: Option<usize>,
    /// Consecutive arenas that share a seed, 1 to 100,000, dividing --arenas: MAGRPO's group,
    /// Advantage Alignment's leave-one-out group (2 or more) [default: 1; magrpo: 4;
    /// advantage-alignment: 8].
    #[arg(long, value_parser = |s: &str| parse_u32(s, limits::GROUP_SIZE))]
    pub group_size: Option<u32>,
    /// Advantage Alignment's beta, in [0, 1e6] [default: 0.5].
    #[arg(long, value_parser = |s: &str| parse_f32(s, limits::AA_BETA))]
    pub aa_beta: Option<f32>,
    /// CORY: updates between pioneer/observer role swaps, 1 to 1,000,000 [default: 2].
    #[arg(long, value_parser = |s: &str| parse_u32(s, limits::SWAP_EVERY))]
    pub swap_every: Option<u32>,
    /// One model for every learning agent, a LoRA adapter per role or per agent over a
    /// frozen base, or a model per learning team [default: shared].
    #[arg(long, value_enum)]
    pub sharing: Option<Sharing>,
    /// Rank of the LoRA adapters (`--sharing role-lora` or `agent-lora`), 1 to 1,024
    /// [default: 8].
    #[arg(long, value_parser = |s: &str| parse_usize(s, limits::LORA_RANK))]
    pub lora_rank: Option<usize>,
    /// Write a checkpoint every this many iterations (and after the last), 1 to 1,000,000
    /// [default: 10].
    #[arg(long, value_parser = |s: &str| parse_u32(s, limits::CHECKPOINT_EVERY))]
    pub checkpoint_every: Option<u32>,
}

/// Each given field of `$a`, else `$b`'s.
macro_rules! over {
    ($a:expr, $b:expr, $($f:ident),*) => {
        TrainSettings { $($f: $a.$f.or($b.$f),)* }
    };
}

impl TrainSettings {
    /// These settings over `base`: each field given here wins, the others come from `base`.
    pub fn over(self, base: TrainSettings) -> TrainSettings {
        over!(
            self,
            base,
            algo,
            iterations,
            arenas,
            seed,
            model,
            learner,
            lr,
            lr_final_frac,
            weight_decay,
            clip,
            value_coef,
            max_grad_norm,
            group_std,
            kl_coef,
            entropy_coef,
            gamma,
            lambda,
            epochs,
            minibatch,
            group_size,
            aa_beta,
            swap_every,
            sharing,
            lora_rank,
            checkpoint_every
        )
    }

    /// The flags (`--lr`, ...) of the fields given, in field order.
    pub fn given(&self) -> Vec<String> {
        let v = serde_json::to_value(self).unwrap_or_default();
        let fields = [
            "algo",
            "iterations",
            "arenas",
            "seed",
            "model",
            "learner",
            "lr",
            "lr_final_frac",
            "weight_decay",
            "clip",
            "value_coef",
            "max_grad_norm",
            "group_std",
            "kl_coef",
            "entropy_coef",
            "gamma",
            "lambda",
            "epochs",
            "minibatch",
            "group_size",
            "aa_beta",
            "swap_every",
            "sharing",
            "lora_rank",
            "checkpoint_every",
        ];
        fields
            .iter()
            .filter(|f| v.get(**f).is_some_and(|x| !x.is_null()))
            .map(|f| format!("--{}", f.replace('_', "-")))
            .collect()
    }

    /// The algorithm, learner and hyper-parameters these settings give, the algorithm's
    /// and the learner's defaults ([`Hyper::for_learner`]) filling the fields not given.
    pub fn resolve(&self) -> (Algo, LearnerKind, Hyper) {
        let algo = self.algo.unwrap_or(Algo::Ippo);
        let learner = self.learner.unwrap_or_default();
        let base = Hyper::for_learner(algo, learner);
        let hyper = Hyper {
            lr: self.lr.unwrap_or(base.lr),
            lr_final_frac: self.lr_final_frac.unwrap_or(base.lr_final_frac),
            weight_decay: self.weight_decay.unwrap_or(base.weight_decay),
            clip: self.clip.unwrap_or(base.clip),
            value_coef: self.value_coef.unwrap_or(base.value_coef),
            max_grad_norm: self.max_grad_norm.unwrap_or(base.max_grad_norm),
            group_std: self.group_std.unwrap_or(base.group_std),
            kl_coef: self.kl_coef.unwrap_or(base.kl_coef),
            entropy_coef: self.entropy_coef.unwrap_or(base.entropy_coef),
            gamma: self.gamma.unwrap_or(base.gamma),
            lambda: self.lambda.unwrap_or(base.lambda),
            epochs: self.epochs.unwrap_or(base.epochs),
            minibatch: self.minibatch.unwrap_or(base.minibatch),
            group_size: self.group_size.unwrap_or(base.group_size),
            aa_beta: self.aa_beta.unwrap_or(base.aa_beta),
            swap_every: self.swap_every.unwrap_or(base.swap_every),
            lora_rank: self.lora_rank.unwrap_or(base.lora_rank),
        };
        (algo, learner, hyper)
    }

    /// A run's settings, every field given (what its limits are checked against).
    pub fn of_run(cfg: &super::TrainConfig) -> TrainSettings {
        let h = &cfg.hyper;
        TrainSettings {
            algo: Some(cfg.algo),
            iterations: Some(cfg.iterations),
            arenas: Some(cfg.arenas),
            seed: Some(cfg.seed),
            model: Some(cfg.model.name()),
            learner: Some(cfg.learner),
            lr: Some(h.lr),
            lr_final_frac: Some(h.lr_final_frac),
            weight_decay: Some(h.weight_decay),
            clip: Some(h.clip),
            value_coef: Some(h.value_coef),
            max_grad_norm: Some(h.max_grad_norm),
            group_std: Some(h.group_std),
            kl_coef: Some(h.kl_coef),
            entropy_coef: Some(h.entropy_coef),
            gamma: Some(h.gamma),
            lambda: Some(h.lambda),
            epochs: Some(h.epochs),
            minibatch: Some(h.minibatch),
            group_size: Some(h.group_size),
            aa_beta: Some(h.aa_beta),
            swap_every: Some(h.swap_every),
            sharing: Some(cfg.sharing),
            lora_rank: Some(h.lora_rank),
            checkpoint_every: Some(cfg.checkpoint_every),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_over_the_scene_and_defaults_fill_the_rest() {
        let scene = TrainSettings {
            algo: Some(Algo::Magrpo),
            lr: Some(0.01),
            epochs: Some(2),
            ..Default::default()
        };
        let flags = TrainSettings {
            lr: Some(0.5),
            learner: Some(LearnerKind::Mlp),
            ..Default::default()
        };
        let s = flags.over(scene);
        assert_eq!(s.given(), ["--algo", "--learner", "--lr", "--epochs"]);
        let (algo, learner, h) = s.resolve();
        assert_eq!((algo, learner), (Algo::Magrpo, LearnerKind::Mlp));
        assert_eq!(
            (h.lr, h.epochs, h.group_size, h.minibatch),
            (0.5, 2, 4, 1024)
        );
        assert!(TrainSettings::default().given().is_empty());
    }
}
