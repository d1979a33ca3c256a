//! The hyper-parameters of an update ([`Hyper`]), with the defaults of each algorithm and
//! learner (DESIGN.md), and what each algorithm needs of the model ([`Algo`]'s methods).

use serde::{Deserialize, Serialize};

use super::Algo;

impl Algo {
    /// Whether the language model's value head is trained and used as a baseline.
    pub fn uses_value_head(self) -> bool {
        matches!(
            self,
            Algo::Reinforce | Algo::Ippo | Algo::AdvantageAlignment | Algo::Cory
        )
    }

    /// The name `--algo` takes.
    pub fn name(self) -> &'static str {
        match self {
            Algo::Reinforce => "reinforce",
            Algo::Ippo => "ippo",
            Algo::Mappo => "mappo",
            Algo::Magrpo => "magrpo",
            Algo::Cory => "cory",
            Algo::AdvantageAlignment => "advantage-alignment",
        }
    }
}

/// Hyper-parameters (DESIGN.md defaults).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hyper {
    /// AdamW learning rate at the start.
    pub lr: f64,
    /// The learning rate at the last iteration, as a fraction of `lr` (linear schedule).
    pub lr_final_frac: f64,
    /// AdamW weight decay.
    pub weight_decay: f64,
    /// Discount γ.
    pub gamma: f32,
    /// GAE λ.
    pub lambda: f32,
    /// PPO clip ε (also the value clip).
    pub clip: f64,
    /// Weight of the value loss.
    pub value_coef: f64,
    /// Weight of the entropy bonus.
    pub entropy_coef: f64,
    /// Weight of the k3 KL to the frozen initial model (0: no reference forward).
    pub kl_coef: f64,
    /// Early stopping of an update (Stable-Baselines3's `target_kl`): the update's remaining
    /// gradient steps are skipped once a step's approximate KL between the acting and the
    /// updated policy exceeds 1.5 times this (0: off). Read by every algorithm that makes
    /// several steps on a batch; absent from runs written before it (off).
    #[serde(default)]
    pub target_kl: f64,
    /// Passes over the batch per update (REINFORCE always makes one).
    pub epochs: usize,
    /// Decisions per gradient step.
    pub minibatch: usize,
    /// Gradient-norm clip.
    pub max_grad_norm: f32,
    /// Consecutive arenas that share a seed (MAGRPO's G; Advantage Alignment's
    /// leave-one-out group).
    pub group_size: u32,
    /// MAGRPO: divide group-relative advantages by the group's standard deviation.
    pub group_std: bool,
    /// Advantage Alignment's β.
    pub aa_beta: f32,
    /// CORY: updates between role swaps.
    pub swap_every: u32,
    /// LoRA rank of the adapters (`--sharing role-lora` or `agent-lora`).
    pub lora_rank: usize,
}

impl Hyper {
    /// The defaults for `algo`, where its paper's differ from the shared ones: MAGRPO and
    /// Advantage Alignment compare rollouts that share a seed (groups of 4 and 8 arenas);
    /// Advantage Alignment discounts with γ 0.9 as AdAlignLLM's Prisoner's Dilemma runs do,
    /// and makes 2 passes over each batch (the authors make one policy-gradient step per
    /// batch; on the Prisoner's Dilemma, 4 passes learned no faster per second here);
    /// CORY keeps its KL penalty to the frozen reference on (coefficient 0.4, where the
    /// paper's code starts its adaptive controller; see [`crate::train::algo::cory`]).
    pub fn for_algo(algo: Algo) -> Self {
        let base = Self::default();
        match algo {
            Algo::Magrpo => Self {
                group_size: 4,
                ..base
            },
            Algo::AdvantageAlignment => Self {
                group_size: 8,
                gamma: 0.9,
                epochs: 2,
                ..base
            },
            Algo::Cory => Self {
                kl_coef: 0.4,
                ..base
            },
            _ => base,
        }
    }
}

impl Hyper {
    /// [`Hyper::for_algo`], and for the `mlp` learner minibatches of 1024 decisions (a
    /// gradient step of the small network costs little; 64 would make an iteration of a
    /// long grid episode thousands of steps). The language model keeps 4 passes of
    /// minibatches of 64, by measurement on a grid scene (the two-way corridor of the
    /// learning test, IPPO, 128 arenas, learning rate 3e-4, 50 iterations, one thread each,
    /// 2026-12-04): 4 passes got out every time from iteration 11 (seed 3; 8.2 s an
    /// iteration, about 90 s in); 2 passes (5.5 s an iteration) learned on seed 4 by
    /// iteration 20 and lost it at 27, and not on seed 3; 1 pass (3.2 s) walked one way on
    /// seeds 3, 4 and 5 for all 50 iterations (160 s), also at learning rate 1e-3; 3 passes
    /// (2026-12-05, 40 iterations, beside 4 on seeds 3, 4 and 5) never got out on seed 3 and
    /// got out later than 4 on seed 4. Fewer passes cost less a second but bought no success
    /// within what 4 passes needed.
    pub fn for_learner(algo: Algo, learner: super::LearnerKind) -> Self {
        let base = Self::for_algo(algo);
        match learner {
            super::LearnerKind::Lm => base,
            super::LearnerKind::Mlp | super::LearnerKind::Gru => Self {
                minibatch: 1024,
                ..base
            },
        }
    }
}

impl Default for Hyper {
    fn default() -> Self {
        Self {
            lr: 1e-3,
            lr_final_frac: 0.1,
            weight_decay: 0.0,
            gamma: 0.99,
            lambda: 0.95,
            clip: 0.2,
            value_coef: 0.5,
            entropy_coef: 0.01,
            kl_coef: 0.0,
            target_kl: 0.0,
            epochs: 4,
            minibatch: 64,
            max_grad_norm: 1.0,
            group_size: 1,
            group_std: true,
            aa_beta: 0.5,
            swap_every: 2,
            lora_rank: 8,
        }
    }
}
