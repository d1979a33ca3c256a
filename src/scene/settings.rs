//! The training settings, written out once: the command's flags (`emergence train --lr ...`,
//! through clap), a scene's `train:` block (through serde, checked at its line and column)
//! and the library's callers all fill this one type, whose fields are all optional; a
//! given field wins over the layer below it (flags over the scene's block over the
//! defaults of the algorithm and the learner, [`TrainSettings::over`]). Each field's range
//! is in [`super::limits`], which the flags' parsers, the scene's check and
//! `train::train` all read. A run's resolved settings are saved in its `config.json`.
//!
//! The block is data: it lives with the scene, and the trainer reads it (`train` re-exports
//! these types and adds how they resolve into hyper-parameters).

use serde::{Deserialize, Serialize};

use super::limits::{self, parse_f32, parse_u32, parse_usize};

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
    /// The starting model: `tiny`, `small` (a fresh language model, seeded by --seed) or a
    /// model folder (a language model's; with --learner mlp or gru, a network's: `mlp.json`,
    /// as `emergence imitate` writes) [default: tiny; a fresh network for mlp and gru].
    #[arg(long)]
    pub model: Option<String>,
    /// The policy that learns: the language model, `mlp`, the classic-MARL baseline (a
    /// two-layer network on the observation's features, weights from --seed; every algorithm
    /// but cory; --minibatch 1024 unless given), or `gru`, the `mlp` with memory (a GRU cell
    /// whose state each agent carries through its episode). The scene's agents on it learn
    /// (every agent when none is) [default: lm].
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
    /// Stops an update's gradient steps early once a step's approximate KL between the
    /// acting and the updated policy exceeds 1.5 times this, in [0, 1e6] (0: never; as
    /// Stable-Baselines3's target_kl) [default: 0].
    #[arg(long, value_parser = |s: &str| limits::parse_real(s, limits::TARGET_KL))]
    pub target_kl: Option<f64>,
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
    /// `mlp` and `gru` learners in one process: the arenas play the next iteration's
    /// episodes with the weights before each update while it runs (the behaviour policy lags
    /// one update; PPO's ratio is to the log-probabilities it recorded). `--overlap` alone
    /// means true [default: false].
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub overlap: Option<bool>,
    /// How the language model reads its observations in this run, over the scene's `text:`:
    /// `full` or `compact` (docs/scenes.md). Kept with the run's settings, so that `--resume`
    /// and `eval` of the run read the same style [default: the scene's].
    #[arg(long, value_enum, hide_possible_values = true)]
    pub text: Option<super::schema::TextStyle>,
    /// How many past turns of its episode a language-model agent reads besides this step's
    /// observation, over the scene's `memory:`: 0 to 64 (docs/language-models.md, Memory).
    /// Kept with the run's settings, like `--text` [default: the scene's].
    #[arg(long, value_parser = |s: &str| parse_u32(s, limits::MEMORY))]
    pub memory: Option<u32>,
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
            target_kl,
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
            checkpoint_every,
            overlap,
            text,
            memory
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
            "target_kl",
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
            "overlap",
            "text",
            "memory",
        ];
        fields
            .iter()
            .filter(|f| v.get(**f).is_some_and(|x| !x.is_null()))
            .map(|f| format!("--{}", f.replace('_', "-")))
            .collect()
    }
}

/// The algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Algo {
    /// REINFORCE with a learned baseline (the value head) and one pass over the batch.
    Reinforce,
    /// Independent PPO: GAE advantages, clipped surrogate, clipped value loss, several epochs.
    Ippo,
    /// MAPPO: PPO whose advantages come from a centralised critic that reads the global state
    /// (the family's true state: the whole map, every agent's position and status).
    Mappo,
    /// Multi-agent GRPO: the arenas of a group share their seed; every agent is credited with
    /// the arena's shared (summed) return-to-go minus its group's mean (over its std); no
    /// critic; clipped surrogate.
    Magrpo,
    /// CORY: the model duplicated into a pioneer and an observer that reads the pioneer's
    /// choice; both learn (PPO, GAE) from the summed reward; roles swap every
    /// `swap_every` updates.
    Cory,
    /// Advantage Alignment (social dilemmas): each learner's credit adds the others'
    /// advantages weighted by its own past advantages (normalised, so β does not depend on
    /// the reward's scale); leave-one-out baselines over the group (2 or more arenas that
    /// share a seed); clipped surrogate.
    #[value(name = "advantage-alignment", alias = "adalign")]
    #[serde(rename = "advantage_alignment", alias = "adalign")]
    AdvantageAlignment,
}

/// Which policy learns: the scene's agents on it are trained (every agent, when none is).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LearnerKind {
    /// The language model (`--model` or an embedded preset).
    #[default]
    Lm,
    /// The classic-MARL baseline: a two-layer network on the observation's features,
    /// weights from the run seed (REINFORCE, IPPO, MAPPO, MAGRPO, Advantage Alignment).
    Mlp,
    /// The `mlp` with memory: its second layer a GRU cell whose state each agent carries
    /// through its episode, trained on sequences of the rollout from their stored states.
    Gru,
}

impl LearnerKind {
    /// The policy name its agents have in the scene.
    pub fn policy(self) -> &'static str {
        match self {
            LearnerKind::Lm => "lm",
            LearnerKind::Mlp => "mlp",
            LearnerKind::Gru => "gru",
        }
    }

    /// Whether it is one of the classic networks (`mlp`, `gru`), which run on the CPU,
    /// share one trainer path and save as an `mlp` folder.
    pub fn classic(self) -> bool {
        matches!(self, LearnerKind::Mlp | LearnerKind::Gru)
    }
}

/// How the learning agents share parameters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Sharing {
    /// One model for every learning agent.
    #[default]
    Shared,
    /// A LoRA adapter per role (rank `--lora-rank`) over one frozen base model; the value
    /// head is shared and learns too. Checkpoints hold `adapters/<role>/` in the PEFT layout.
    #[value(name = "role-lora")]
    #[serde(rename = "role_lora")]
    RoleLora,
    /// A LoRA adapter per agent slot (rank `--lora-rank`) over one frozen base model, the
    /// agent in that slot of every arena reading it; the value head is shared and learns
    /// too. Still one forward per step for all agents. Checkpoints hold
    /// `adapters/agent_<slot>/` in the PEFT layout.
    #[value(name = "agent-lora")]
    #[serde(rename = "agent_lora")]
    AgentLora,
    /// A model per learning team (all start from the same weights).
    Separate,
}
