//! The update between episodes: advantages from a [`Batch`], then minibatch gradient steps
//! on the policy's own variables, so the next decision already uses the new weights: the
//! language model's training path (the differentiable decoder), or the `mlp`'s network
//! (candle's autograd). Both read the same rollout buffer and take the same losses.
//!
//! Over 600 lines: one `Trainer` for both learners (the language model and the `mlp`), whose
//! update (samples, advantages, minibatch steps, the losses, clipping, the optimizer, the
//! statistics) is one sequence the checkpoints and the learning tests pin; the maths is in
//! `loss.rs`, `advantage.rs`, `algo/` and `optim.rs`.

use candle_core::{Device, Tensor, Var};
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::time::Instant;

use super::advantage::{explained_variance, normalise};
use super::algo;
use super::critic::Critic;
use super::loss::{
    chosen, clip_grad_norm, entropy, k3_kl, masked_action_logprobs, ppo_clip, reinforce, value_loss,
};
use super::optim::{AdamParams, AdamW};
use super::rollout::Batch;
use super::{Algo, Hyper, TrainError};
use crate::policy::lm::Pass;
use crate::policy::lm::{Decoder, Lora, TrainHandle, Weights};
use crate::policy::mlp::{Encoded, Fused, LossSpec, MlpHandle, MlpNet, Row, StepStats, ValueSpec};

/// What one update measured (means over its gradient steps).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct UpdateStats {
    /// Policy loss.
    pub policy_loss: f32,
    /// Value loss.
    pub value_loss: f32,
    /// Entropy of the masked action distribution.
    pub entropy: f32,
    /// Approximate KL between the acting and the updated policy.
    pub approx_kl: f32,
    /// Share of clipped ratios (PPO).
    pub clip_frac: f32,
    /// k3 KL to the reference model (when `kl_coef` > 0).
    pub kl_ref: f32,
    /// Gradient norm before clipping.
    pub grad_norm: f32,
    /// Explained variance of the value head on the batch.
    pub explained_variance: f32,
    /// Decisions in the batch.
    pub samples: usize,
    /// Gradient steps taken.
    pub steps: usize,
    /// Gradient steps skipped for a non-finite loss, gradient, new weight or moment.
    pub skipped: usize,
    /// Why the first skipped step was skipped.
    #[serde(skip)]
    pub skip_reason: Option<String>,
    /// Seconds spent updating.
    pub update_seconds: f64,
    /// Of which: seconds in the collectives of a data-parallel run (the gradients' sum and
    /// the batch's gathering); absent alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reduce_seconds: Option<f64>,
    /// Learning rate used.
    pub lr: f64,
}

impl UpdateStats {
    /// Several models' updates of one iteration as one row: means of the losses and
    /// statistics, sums of the counts and seconds.
    pub fn combine(parts: &[UpdateStats]) -> UpdateStats {
        let n = parts.len().max(1) as f32;
        let mean = |f: fn(&UpdateStats) -> f32| parts.iter().map(f).sum::<f32>() / n;
        UpdateStats {
            policy_loss: mean(|s| s.policy_loss),
            value_loss: mean(|s| s.value_loss),
            entropy: mean(|s| s.entropy),
            approx_kl: mean(|s| s.approx_kl),
            clip_frac: mean(|s| s.clip_frac),
            kl_ref: mean(|s| s.kl_ref),
            grad_norm: mean(|s| s.grad_norm),
            explained_variance: mean(|s| s.explained_variance),
            samples: parts.iter().map(|s| s.samples).sum(),
            steps: parts.iter().map(|s| s.steps).sum(),
            skipped: parts.iter().map(|s| s.skipped).sum(),
            skip_reason: parts.iter().find_map(|s| s.skip_reason.clone()),
            update_seconds: parts.iter().map(|s| s.update_seconds).sum(),
            reduce_seconds: parts
                .iter()
                .filter_map(|s| s.reduce_seconds)
                .reduce(|a, b| a + b),
            lr: parts.first().map_or(0.0, |s| s.lr),
        }
    }
}

/// One decision as the update reads it: the rollout's own rows borrowed, not copied (an
/// update of 51,200 decisions had spent 12 ms of its 180 copying them).
struct Sample<'b> {
    /// The arena it was taken in (which rank computes its gradient).
    arena: u32,
    /// MAPPO: the critic's input (global state and the agent's one-hot slot).
    global: Encoded,
    /// An `mlp`'s input.
    encoded: &'b Encoded,
    /// The owner of the agent's adapter under LoRA (its role or slot index).
    owner: usize,
    tokens: &'b [u32],
    legal: &'b [bool],
    action: u8,
    /// The word choice that went with the action (families with talk).
    said: Option<u8>,
    /// The decision's log-probability when taken: the action's and the word's.
    logprob: f32,
    value: f32,
    adv: f32,
    target: f32,
    /// A network with memory: the state the decision was made from.
    memory: &'b [f32],
    /// Whether a training sequence starts here (every [`SEQUENCE`]-th step of an episode).
    start: bool,
}

/// Steps per training sequence of a network with memory (`gru`): each episode is cut into
/// sequences of this many steps, each started from the state its first decision was made
/// from (stored in the rollout) and run through the GRU with backpropagation through its
/// steps; minibatches are whole sequences, shuffled as units (Sample Factory's and
/// CleanRL's recurrent PPO train on chunks the same way; 32 is Sample Factory's default
/// recurrence).
pub const SEQUENCE: usize = 32;

/// MAPPO's critic input: a global state and the valued agent's one-hot slot.
fn with_slot(state: &Encoded, slot: u16, slots: usize) -> Encoded {
    let mut row = state.clone();
    crate::core::push_one_hot(&mut row.dense, usize::from(slot), slots);
    row
}

/// A language model being trained.
struct LmModel {
    decoder: Decoder,
    reference: Option<Decoder>,
    action_tokens: Tensor,
    /// Each action's token (to write the talk prompt after the chosen action).
    action_ids: Vec<u32>,
    /// Families with talk: the token of each choice (silence first) and the ids of `say`.
    talk: Option<(Tensor, Vec<u32>)>,
    pad: u32,
    /// LoRA per role or per agent: each owner's adapter over the variables (empty: no
    /// adapters).
    adapters: Vec<crate::policy::lm::Adapter>,
    /// What the adapters belong to.
    owner: crate::policy::lm::AdapterOwner,
}

/// An `mlp` being trained: its network appears in the handle when the policy meets its
/// first observation (or is read from a checkpoint), and the trainer takes it then.
struct MlpModel {
    handle: MlpHandle,
    net: Option<MlpNet>,
    /// The starting network (the same seed), for the KL term.
    reference: Option<MlpNet>,
    /// The fused training step's buffers ([`Fused`]), made at the first step it takes.
    fused: Option<Box<Fused>>,
}

/// What a trainer updates.
enum Model {
    Lm(Box<LmModel>),
    Mlp(MlpModel),
}

/// The trainer of one policy's model (a language model or an `mlp`).
pub struct Trainer {
    algo: Algo,
    hyper: Hyper,
    model: Model,
    vars: Vec<Var>,
    opt: AdamW,
    actions: usize,
    device: Device,
    critic: Option<Critic>,
    /// Seeds the centralised critic's weights and an `mlp`'s reference (set to the run
    /// seed, which is also the `mlp`'s).
    pub seed: u64,
    /// Gradient steps skipped one after another (across updates), and why the last was.
    skipped_in_a_row: u32,
    skip_reason: Option<String>,
    /// The ranks of a data-parallel run and this rank's arenas ([`super::dist`]): each
    /// minibatch's forward and backward run on this rank's samples, the gradients are
    /// summed across ranks.
    pub ranks: super::dist::Ranks,
    /// This rank's arenas (all of them alone).
    pub share: std::ops::Range<u32>,
}

/// Gradient steps skipped in a row after which a run stops: its weights or moments are
/// broken, and no step can mend them.
pub const MAX_SKIPPED_IN_A_ROW: u32 = 20;

impl Trainer {
    /// A trainer for the model behind `handle` (the policy must have been set up).
    pub fn new(
        handle: &TrainHandle,
        algo: Algo,
        hyper: Hyper,
        device: &Device,
    ) -> Result<Self, TrainError> {
        let built = handle.with(|t| -> Result<Self, TrainError> {
            if let Some((i, ids)) = t.actions.iter().enumerate().find(|(_, ids)| ids.len() != 1) {
                return Err(TrainError::Config(format!(
                    "action {i} is {} tokens for this tokenizer; training scores single-token \
                     action words (the embedded tokenizer has one token per action)",
                    ids.len()
                )));
            }
            // LoRA: the adapters and the value head learn, the base is frozen (read
            // through detached views, so no gradient is computed for it).
            let lora = !t.adapters.is_empty();
            let learns = |name: &str| !lora || name.starts_with("value_head");
            let weights: Weights = t
                .vars
                .iter()
                .map(|(n, v)| {
                    let w = if learns(n) {
                        v.as_tensor().clone()
                    } else {
                        v.as_tensor().detach()
                    };
                    (n.clone(), w)
                })
                .collect();
            let decoder = Decoder::new(&t.config, &weights, std::path::Path::new("weights"))?;
            let mut named: Vec<(String, Var)> = t
                .vars
                .iter()
                .filter(|(n, _)| learns(n))
                .map(|(n, v)| (n.clone(), v.clone()))
                .collect();
            for ra in &t.adapters {
                for (module, a, b) in &ra.vars {
                    named.push((format!("adapters.{}.{module}.lora_A", ra.name), a.clone()));
                    named.push((format!("adapters.{}.{module}.lora_B", ra.name), b.clone()));
                }
            }
            let adapters = t.adapters.iter().map(|ra| ra.adapter()).collect();
            let owner = t.owner;
            let reference = if hyper.kl_coef > 0.0 {
                let frozen: Weights = t
                    .vars
                    .iter()
                    .map(|(n, v)| Ok((n.clone(), v.as_tensor().detach().copy()?)))
                    .collect::<Result<_, candle_core::Error>>()?;
                Some(Decoder::new(
                    &t.config,
                    &frozen,
                    std::path::Path::new("reference"),
                )?)
            } else {
                None
            };
            let vars: Vec<Var> = named.iter().map(|(_, v)| v.clone()).collect();
            let opt = AdamW::new(
                named,
                AdamParams {
                    lr: hyper.lr,
                    weight_decay: hyper.weight_decay,
                    ..Default::default()
                },
            )?;
            let ids: Vec<u32> = t.actions.iter().map(|a| a[0]).collect();
            Ok(Self {
                algo,
                actions: ids.len(),
                model: Model::Lm(Box::new(LmModel {
                    action_tokens: Tensor::new(ids.as_slice(), device)?,
                    action_ids: ids.clone(),
                    talk: match &t.talk {
                        Some((choices, say)) => {
                            Some((Tensor::new(choices.as_slice(), device)?, say.clone()))
                        }
                        None => None,
                    },
                    pad: t.pad,
                    decoder,
                    reference,
                    adapters,
                    owner,
                })),
                vars,
                opt,
                hyper: hyper.clone(),
                device: device.clone(),
                critic: None,
                seed: 0,
                skipped_in_a_row: 0,
                skip_reason: None,
                ranks: Default::default(),
                share: 0..u32::MAX,
            })
        });
        built.unwrap_or_else(|| {
            Err(TrainError::Config(
                "the language-model policy was never set up (no agent uses it)".into(),
            ))
        })
    }

    /// A trainer for the `mlp` behind `handle`, whose decisions have `actions` choices and
    /// whose starting weights came from `seed`. Its network is taken from the handle now if
    /// it is there (a resumed run), else at the first update.
    pub fn new_mlp(
        handle: &MlpHandle,
        actions: usize,
        algo: Algo,
        hyper: Hyper,
        seed: u64,
        device: &Device,
    ) -> Result<Self, TrainError> {
        if algo == Algo::Cory {
            return Err(super::SettingsError::CoryNeedsLm.into());
        }
        let mut t = Self {
            algo,
            actions,
            model: Model::Mlp(MlpModel {
                handle: handle.clone(),
                net: None,
                reference: None,
                fused: None,
            }),
            vars: Vec::new(),
            opt: AdamW::new(
                Vec::new(),
                AdamParams {
                    lr: hyper.lr,
                    weight_decay: hyper.weight_decay,
                    ..Default::default()
                },
            )?,
            hyper,
            device: device.clone(),
            critic: None,
            seed,
            skipped_in_a_row: 0,
            skip_reason: None,
            ranks: Default::default(),
            share: 0..u32::MAX,
        };
        t.bind_mlp()?;
        Ok(t)
    }

    /// An `mlp` trainer takes the network from its handle once there is one: its variables,
    /// an optimizer over them (the settings kept) and, with a KL term, the starting network.
    fn bind_mlp(&mut self) -> Result<(), TrainError> {
        let Model::Mlp(m) = &mut self.model else {
            return Ok(());
        };
        if m.net.is_some() {
            return Ok(());
        }
        let Some(net) = m.handle.net() else {
            return Ok(());
        };
        if self.hyper.kl_coef > 0.0 {
            m.reference = Some(MlpNet::with_core(
                net.cells,
                net.dense,
                net.actions,
                net.words,
                net.memory,
                self.seed,
                &self.device,
            )?);
        }
        self.vars = net.vars().iter().map(|(_, v)| v.clone()).collect();
        self.opt = AdamW::new(net.vars().to_vec(), self.opt.params)?;
        m.net = Some(net);
        Ok(())
    }

    /// Whether the model is a network with memory (the `gru`), trained on sequences.
    fn has_memory(&self) -> bool {
        matches!(&self.model, Model::Mlp(m) if m.net.as_ref().is_some_and(|n| n.memory))
    }

    /// The trained variables.
    pub fn vars(&self) -> &[Var] {
        &self.vars
    }

    /// Sets the learning rate for training progress `frac` in [0, 1] (linear schedule).
    pub fn schedule(&mut self, frac: f64) {
        let f = 1.0 - frac.clamp(0.0, 1.0) * (1.0 - self.hyper.lr_final_frac);
        self.opt.params.lr = self.hyper.lr * f;
        if let Some(c) = &mut self.critic {
            c.set_lr(self.hyper.lr * f);
        }
    }

    /// MAPPO's critic, once the first batch has sized it.
    pub fn critic(&self) -> Option<&Critic> {
        self.critic.as_ref()
    }

    /// Restores MAPPO's critic (a resumed run).
    pub fn set_critic(&mut self, critic: Critic) {
        self.critic = Some(critic);
    }

    /// Sets the frozen reference model of the KL term (a resumed run's starting model).
    pub fn set_reference(&mut self, reference: Decoder) {
        if let (true, Model::Lm(m)) = (self.hyper.kl_coef > 0.0, &mut self.model) {
            m.reference = Some(reference);
        }
    }

    /// The optimizer (its state goes into checkpoints).
    pub fn optimizer(&self) -> &AdamW {
        &self.opt
    }

    /// The optimizer, to restore its state.
    pub fn optimizer_mut(&mut self) -> &mut AdamW {
        &mut self.opt
    }

    /// Per trajectory of `batch` (in its order): advantages and value targets.
    fn advantages(
        &self,
        batch: &Batch,
        critic_values: Option<&(Vec<Vec<f32>>, Vec<Option<f32>>)>,
    ) -> Result<Vec<(Vec<f32>, Vec<f32>)>, TrainError> {
        let h = &self.hyper;
        Ok(match (self.algo, critic_values) {
            (Algo::Reinforce, _) => algo::reinforce::advantages(batch, h),
            (Algo::Mappo, Some((c, after))) => algo::mappo::advantages(batch, h, c, after),
            (Algo::Ippo | Algo::Mappo | Algo::Cory, _) => algo::ippo::advantages(batch, h),
            (Algo::Magrpo, _) => algo::magrpo::advantages(batch, h),
            (Algo::AdvantageAlignment, _) => algo::advantage_alignment::advantages(batch, h)?,
        })
    }

    /// MAPPO: every trajectory's critic inputs, step by step.
    fn globals(&self, batch: &Batch) -> Result<Vec<Vec<Encoded>>, TrainError> {
        batch
            .trajectories
            .iter()
            .map(|tr| {
                tr.steps
                    .iter()
                    .map(|s| {
                        if s.global.cells.is_empty() && s.global.dense.is_empty() {
                            return Err(TrainError::Config(format!(
                                "no global state for arena {} slot {} (its family wrote none)",
                                tr.arena, tr.slot
                            )));
                        }
                        Ok(with_slot(&s.global, tr.slot, batch.slots))
                    })
                    .collect()
            })
            .collect()
    }

    fn samples<'b>(&mut self, batch: &'b Batch) -> Result<Vec<Sample<'b>>, TrainError> {
        let globals = if self.algo == Algo::Mappo {
            let g = self.globals(batch)?;
            let Some(first) = g.iter().flatten().next() else {
                // Nothing to learn from (a model whose agents made no decision this time).
                return Ok(Vec::new());
            };
            let (cells, dense) = (first.cells.len(), first.dense.len());
            if self.critic.is_none() {
                self.critic = Some(Critic::new(
                    cells,
                    dense,
                    self.seed,
                    self.opt.params.lr,
                    &self.device,
                )?);
            }
            if let Some(c) = &self.critic
                && let Some(bad) = g.iter().flatten().find(|r| !c.fits(r))
            {
                let (cc, cd) = c.sizes();
                return Err(TrainError::Config(format!(
                    "the critic reads {cc} cells and {cd} header fields; this batch has a \
                     global state of {} and {} (another scene or map size)",
                    bad.cells.len(),
                    bad.dense.len()
                )));
            }
            Some(g)
        } else {
            None
        };
        let critic_values: Option<(Vec<Vec<f32>>, Vec<Option<f32>>)> =
            match (&globals, &self.critic) {
                (Some(g), Some(c)) => {
                    let values = g
                        .iter()
                        .map(|rows| c.values(&rows.iter().collect::<Vec<_>>()))
                        .collect::<Result<Vec<_>, _>>()?;
                    // A truncated episode: the critic's value of the state after its last step.
                    let after = batch
                        .trajectories
                        .iter()
                        .map(|tr| {
                            if tr.terminated {
                                return Ok(None);
                            }
                            let Some(state) = &tr.final_global else {
                                return Ok(None);
                            };
                            let row = with_slot(state, tr.slot, batch.slots);
                            if !c.fits(&row) {
                                return Ok(None);
                            }
                            Ok(c.values(&[&row])?.first().copied())
                        })
                        .collect::<Result<Vec<_>, TrainError>>()?;
                    Some((values, after))
                }
                _ => None,
            };
        let advantages = self.advantages(batch, critic_values.as_ref())?;
        // Whether this model learns what its agents say (and so rates decisions by both).
        let trains_words = match &self.model {
            Model::Lm(m) => m.talk.is_some(),
            Model::Mlp(m) => m.net.as_ref().is_some_and(|n| n.words > 0),
        };
        let mut out = Vec::with_capacity(batch.trajectories.iter().map(|t| t.steps.len()).sum());
        for (i, (traj, (adv, targets))) in batch.trajectories.iter().zip(advantages).enumerate() {
            for (t, ((s, a), target)) in traj.steps.iter().zip(adv).zip(targets).enumerate() {
                out.push(Sample {
                    arena: traj.arena,
                    global: globals
                        .as_ref()
                        .map(|g| g[i][t].clone())
                        .unwrap_or_default(),
                    encoded: &s.encoded,
                    owner: match &self.model {
                        Model::Lm(m) => m.owner.index(traj.role, traj.slot),
                        Model::Mlp(_) => 0,
                    },
                    tokens: &s.tokens,
                    legal: &s.legal,
                    action: s.action,
                    said: s.said.filter(|_| trains_words),
                    logprob: s.logprob + if trains_words { s.said_logprob } else { 0.0 },
                    value: critic_values.as_ref().map_or(s.value, |c| c.0[i][t]),
                    adv: a,
                    target,
                    memory: &s.memory,
                    start: t % SEQUENCE == 0,
                });
            }
        }
        // MAGRPO's advantages are already in units of their group's spread, Advantage
        // Alignment's credits in units of the batch's advantage spread (normalised before the
        // product, as its paper's code does, and not again after it).
        if !matches!(self.algo, Algo::Magrpo | Algo::AdvantageAlignment) {
            let mut adv: Vec<f32> = out.iter().map(|s| s.adv).collect();
            normalise(&mut adv);
            for (s, a) in out.iter_mut().zip(adv) {
                s.adv = a;
            }
        }
        Ok(out)
    }

    /// One update on `batch`; minibatch order from `rng`. A non-finite loss or gradient skips
    /// that step (counted in `skipped`) and leaves the weights as they were.
    pub fn update(
        &mut self,
        batch: &Batch,
        rng: &mut ChaCha8Rng,
    ) -> Result<UpdateStats, TrainError> {
        let start = Instant::now();
        self.bind_mlp()?;
        if let Model::Mlp(m) = &self.model {
            let Some(net) = &m.net else {
                return Err(TrainError::Config(
                    "the mlp never decided (no agent on it played), so there is no network \
                     to train"
                        .into(),
                ));
            };
            if let Some(bad) = batch
                .trajectories
                .iter()
                .flat_map(|t| &t.steps)
                .find(|s| !net.fits(&s.encoded))
            {
                return Err(TrainError::Config(format!(
                    "a decision of {} cells and {} header fields for a network of {} and {}",
                    bad.encoded.cells.len(),
                    bad.encoded.dense.len(),
                    net.cells,
                    net.dense
                )));
            }
        }
        let samples = self.samples(batch)?;
        let mut stats = UpdateStats {
            samples: samples.len(),
            lr: self.opt.params.lr,
            ..Default::default()
        };
        let preds: Vec<f32> = samples.iter().map(|s| s.value).collect();
        let targets: Vec<f32> = samples.iter().map(|s| s.target).collect();
        stats.explained_variance = explained_variance(&preds, &targets).unwrap_or(0.0);
        // The value loss is taken in units of the batch's return spread, so that large
        // returns do not drown the policy gradient in the shared trunk.
        let value_scale = {
            let n = targets.len().max(1) as f32;
            let m = targets.iter().sum::<f32>() / n;
            (targets.iter().map(|t| (t - m).powi(2)).sum::<f32>() / n)
                .sqrt()
                .max(1.0)
        };
        let epochs = match self.algo {
            Algo::Reinforce => 1,
            _ => self.hyper.epochs.max(1),
        };
        // The units shuffled into minibatches: single decisions, or whole sequences for a
        // network with memory (a minibatch takes units until it holds `minibatch` decisions).
        let mut units: Vec<std::ops::Range<usize>> = if self.has_memory() {
            let starts: Vec<usize> = (0..samples.len())
                .filter(|&i| i == 0 || samples[i].start)
                .collect();
            (0..starts.len())
                .map(|k| starts[k]..starts.get(k + 1).copied().unwrap_or(samples.len()))
                .collect()
        } else {
            (0..samples.len()).map(|i| i..i + 1).collect()
        };
        let size = self.hyper.minibatch.max(1);
        for _ in 0..epochs {
            units.shuffle(rng);
            let mut next = 0;
            while next < units.len() {
                let mut mb: Vec<&Sample> = Vec::with_capacity(size);
                while next < units.len() && mb.len() < size {
                    mb.extend(units[next].clone().map(|i| &samples[i]));
                    next += 1;
                }
                if matches!(&self.model, Model::Lm(m) if !m.adapters.is_empty()) {
                    mb.sort_by_key(|s| s.owner);
                }
                let critic_loss = match &mut self.critic {
                    Some(c) if self.algo == Algo::Mappo => c.step(
                        &mb.iter().map(|s| &s.global).collect::<Vec<_>>(),
                        &mb.iter().map(|s| s.value).collect::<Vec<_>>(),
                        &mb.iter().map(|s| s.target).collect::<Vec<_>>(),
                        Some(self.hyper.clip),
                        value_scale,
                        self.hyper.max_grad_norm,
                    )?,
                    _ => None,
                };
                match self.step(&mb, value_scale)? {
                    Some(s) => {
                        stats.steps += 1;
                        self.skipped_in_a_row = 0;
                        stats.policy_loss += s.policy_loss;
                        stats.value_loss += critic_loss.unwrap_or(s.value_loss);
                        stats.entropy += s.entropy;
                        stats.approx_kl += s.approx_kl;
                        stats.clip_frac += s.clip_frac;
                        stats.kl_ref += s.kl_ref;
                        stats.grad_norm += s.grad_norm;
                    }
                    None => {
                        stats.skipped += 1;
                        self.skipped_in_a_row += 1;
                        if stats.skip_reason.is_none() {
                            stats.skip_reason = self.skip_reason.clone();
                        }
                        if self.skipped_in_a_row >= MAX_SKIPPED_IN_A_ROW {
                            return Err(TrainError::Config(format!(
                                "stopped: {MAX_SKIPPED_IN_A_ROW} gradient steps in a row were \
                                 skipped ({}); the weights were kept, and the last checkpoint \
                                 is whole",
                                self.skip_reason.as_deref().unwrap_or("a non-finite loss")
                            )));
                        }
                    }
                }
            }
        }
        let n = stats.steps.max(1) as f32;
        for x in [
            &mut stats.policy_loss,
            &mut stats.value_loss,
            &mut stats.entropy,
            &mut stats.approx_kl,
            &mut stats.clip_frac,
            &mut stats.kl_ref,
            &mut stats.grad_norm,
        ] {
            *x /= n;
        }
        // The rollouts until the next update can reuse the training path's buffers.
        crate::policy::lm::release_buffers();
        stats.update_seconds = start.elapsed().as_secs_f64();
        Ok(stats)
    }

    /// Action log-probabilities `(m, actions)` and values `(m,)` of a minibatch, on the
    /// trained model or (`reference`) on the frozen starting one; `None` when there is no
    /// reference.
    fn heads(
        &self,
        reference: bool,
        mb: &[&Sample],
        bias: &Tensor,
    ) -> Result<Option<(Tensor, Option<Tensor>, Option<Tensor>)>, TrainError> {
        match &self.model {
            Model::Lm(m) => {
                let (decoder, path) = match (reference, &m.reference) {
                    (false, _) => (&m.decoder, Pass::Train),
                    (true, Some(r)) => (r, Pass::Fast),
                    (true, None) => return Ok(None),
                };
                // Under LoRA the minibatch is sorted by owner: one forward, each owner's run
                // of rows with its adapter (the reference model reads the base alone).
                let prompts: Vec<&[u32]> = mb.iter().map(|s| s.tokens).collect();
                let each: Vec<Option<&crate::policy::lm::Adapter>> = if reference {
                    Vec::new()
                } else {
                    mb.iter().map(|s| m.adapters.get(s.owner)).collect()
                };
                let lora = if m.adapters.is_empty() || reference {
                    Lora::Base
                } else {
                    Lora::Each(&each)
                };
                // Families with talk: what was said, after the prompt, the chosen action and
                // `say`, as the policy scored it. One pass over those longer prompts gives the
                // action's state too (at each prompt's last token: an inner position), where
                // the decoder can (the training path on the CPU), else a pass each.
                let (h, said) = match &m.talk {
                    Some((choices, say)) if mb.iter().any(|s| s.said.is_some()) => {
                        // An empty prompt reads one padding token, as `last_hidden` reads it.
                        let pad = [m.pad];
                        let (talk, inner): (Vec<Vec<u32>>, Vec<usize>) = prompts
                            .iter()
                            .zip(mb)
                            .map(|(&p, s)| {
                                let p = if p.is_empty() { &pad[..] } else { p };
                                let mut t = p.to_vec();
                                t.extend(m.action_ids.get(usize::from(s.action)));
                                t.extend(say);
                                (t, p.len() - 1)
                            })
                            .unzip();
                        // The same adapters, row by row, for both.
                        let (said, h) =
                            decoder.last_and_inner_hidden(&talk, &inner, m.pad, path, lora)?;
                        (h, Some((said, choices)))
                    }
                    _ => (decoder.last_hidden(&prompts, m.pad, path, lora)?, None),
                };
                let tlp = candle_nn::ops::log_softmax(&decoder.head(&h)?, 1)?;
                let alp = masked_action_logprobs(&tlp, &m.action_tokens, bias)?;
                let v = decoder.value(&h)?.map(|v| v.squeeze(1)).transpose()?;
                let wlp = match said {
                    Some((h, choices)) => {
                        let tlp = candle_nn::ops::log_softmax(&decoder.head(&h)?, 1)?;
                        Some(candle_nn::ops::log_softmax(
                            &tlp.index_select(choices, 1)?,
                            1,
                        )?)
                    }
                    None => None,
                };
                Ok(Some((alp, v, wlp)))
            }
            Model::Mlp(m) => {
                let net = match (reference, &m.net, &m.reference) {
                    (false, Some(n), _) => n,
                    (true, _, Some(r)) => r,
                    (true, _, None) => return Ok(None),
                    (false, None, _) => {
                        return Err(TrainError::Config("the mlp has no network yet".into()));
                    }
                };
                let rows: Vec<&Encoded> = mb.iter().map(|s| s.encoded).collect();
                let h = if net.memory {
                    // Each sequence from the state its first decision was made from.
                    let starts: Vec<usize> =
                        (0..mb.len()).filter(|&i| i == 0 || mb[i].start).collect();
                    let h0: Vec<f32> = starts
                        .iter()
                        .flat_map(|&i| mb[i].memory.iter().copied())
                        .collect();
                    if h0.len() != starts.len() * crate::policy::mlp::HIDDEN {
                        return Err(TrainError::Config(format!(
                            "a decision of the gru without its state ({} values where {} \
                             were expected): the rollout was not recorded from a gru",
                            h0.len(),
                            starts.len() * crate::policy::mlp::HIDDEN
                        )));
                    }
                    let h0 = Tensor::from_vec(
                        h0,
                        (starts.len(), crate::policy::mlp::HIDDEN),
                        &self.device,
                    )?;
                    net.sequences(&rows, &starts, &h0)?
                } else {
                    net.heads(&rows)?
                };
                let alp = crate::policy::sampling::masked_log_softmax(&h.logits, bias)?;
                let wlp = h
                    .words
                    .map(|w| candle_nn::ops::log_softmax(&w, 1))
                    .transpose()?;
                Ok(Some((alp, Some(h.values), wlp)))
            }
        }
    }

    fn step(
        &mut self,
        mb: &[&Sample],
        value_scale: f32,
    ) -> Result<Option<UpdateStats>, TrainError> {
        if let Some(done) = self.fused_step(mb, value_scale)? {
            return Ok(done);
        }
        if self.ranks.parallel() {
            return self.parallel_step(mb, value_scale);
        }
        let (loss, out) = self.loss(mb, value_scale)?;
        let l = loss.to_scalar::<f32>()?;
        if !l.is_finite() {
            self.skip_reason = Some(format!("the loss is {l}"));
            return Ok(None);
        }
        let mut grads = loss.backward()?;
        self.apply(&mut grads, out)
    }

    /// An `mlp`'s step on the fused path ([`Fused`]: the forward, the loss and the backward
    /// over plain buffers, the same maths as [`Trainer::loss`] and its candle backward,
    /// checked against them in `fused_tests.rs`), then the same clipping and optimizer step.
    /// `None` where it does not apply: a language model, or a KL term to the reference (the
    /// candle path computes those). Data-parallel: each rank's own arenas' decisions, each
    /// term divided by the whole minibatch's count, the gradients and statistics summed over
    /// the ranks in rank order ([`super::dist`]), then the step every rank takes alike.
    fn fused_step(
        &mut self,
        mb: &[&Sample],
        value_scale: f32,
    ) -> Result<Option<Option<UpdateStats>>, TrainError> {
        let Model::Mlp(m) = &mut self.model else {
            return Ok(None);
        };
        let Some(net) = &m.net else {
            return Ok(None);
        };
        if !Fused::supports(self.hyper.kl_coef) {
            return Ok(None);
        }
        let fused = match &mut m.fused {
            Some(f) if f.fits(net) => f,
            slot => slot.insert(Box::new(Fused::new(net))),
        };
        let parallel = self.ranks.parallel();
        let mine: Vec<&Sample> = if parallel {
            mb.iter()
                .copied()
                .filter(|s| self.share.contains(&s.arena))
                .collect()
        } else {
            mb.to_vec()
        };
        let rows: Vec<Row<'_>> = mine
            .iter()
            .map(|s| Row {
                encoded: s.encoded,
                legal: s.legal,
                action: s.action,
                said: s.said,
                adv: s.adv,
                old_logprob: s.logprob,
                old_value: s.value,
                target: s.target,
                memory: s.memory,
                start: s.start,
            })
            .collect();
        let ppo = self.algo != Algo::Reinforce;
        let clip = ppo.then_some(self.hyper.clip as f32);
        let spec = LossSpec {
            ppo_clip: clip,
            value: self.algo.uses_value_head().then_some(ValueSpec {
                coef: self.hyper.value_coef as f32,
                clip,
                scale: value_scale,
            }),
            entropy_coef: self.hyper.entropy_coef as f32,
        };
        let mut st = fused
            .step_share(net, &rows, spec, mb.len())
            .map_err(TrainError::Config)?;
        // Data-parallel: the gradients and the statistics, summed over the ranks. Every rank
        // gives the same variables a gradient (the fused step's set does not depend on the
        // rows), so only those travel.
        let summed = if parallel {
            let mut buf: Vec<f32> = fused.grads().flatten().flatten().copied().collect();
            buf.extend(st.to_array());
            self.ranks.sum(&mut buf);
            let t = buf.len() - 6;
            st = StepStats::from_array(buf[t..].try_into().expect("six statistics"));
            buf.truncate(t);
            Some(buf)
        } else {
            None
        };
        if !st.loss.is_finite() {
            self.skip_reason = Some(format!("the loss is {}", st.loss));
            return Ok(Some(None));
        }
        let out = UpdateStats {
            policy_loss: st.policy_loss,
            value_loss: st.value_loss,
            entropy: st.entropy,
            approx_kl: st.approx_kl,
            clip_frac: if ppo { st.clip_frac } else { 0.0 },
            ..Default::default()
        };
        // The gradients' norm and its clip as `clip_grad_norm` takes them (the squares summed
        // in f64), and the optimizer's step on the buffers: no tensor in between.
        let grads: Vec<Option<&[f32]>> = match &summed {
            None => fused.grads().collect(),
            Some(buf) => {
                let mut at = 0;
                fused
                    .grads()
                    .map(|g| {
                        g.map(|g| {
                            at += g.len();
                            &buf[at - g.len()..at]
                        })
                    })
                    .collect()
            }
        };
        let norm = grads
            .iter()
            .flatten()
            .map(|g| super::loss::sum_squares(g))
            .sum::<f64>()
            .sqrt() as f32;
        let max = self.hyper.max_grad_norm;
        if !norm.is_finite() {
            self.skip_reason = Some(format!("the gradient's norm is {norm}"));
            return Ok(Some(None));
        }
        let scale = if norm > max { max / norm } else { 1.0 };
        if let Some(name) = self.opt.step_host(&grads, scale)? {
            self.skip_reason = Some(format!(
                "the step would leave NaN or an infinity in {name} or its optimizer moments"
            ));
            return Ok(Some(None));
        }
        Ok(Some(Some(UpdateStats {
            grad_norm: norm,
            ..out
        })))
    }

    /// Clips `grads` and takes the optimizer's step (or skips it, saying why).
    fn apply(
        &mut self,
        grads: &mut candle_core::backprop::GradStore,
        mut out: UpdateStats,
    ) -> Result<Option<UpdateStats>, TrainError> {
        let norm = clip_grad_norm(grads, &self.vars, self.hyper.max_grad_norm)?;
        out.grad_norm = norm;
        if !norm.is_finite() {
            self.skip_reason = Some(format!("the gradient's norm is {norm}"));
            return Ok(None);
        }
        if let Some(name) = self.opt.step(grads)? {
            self.skip_reason = Some(format!(
                "the step would leave NaN or an infinity in {name} or its optimizer moments"
            ));
            return Ok(None);
        }
        Ok(Some(out))
    }

    /// A data-parallel step ([`super::dist`]): this rank's part of the minibatch's loss (its
    /// own arenas' samples, each term divided by the whole minibatch's count), its gradient,
    /// summed with the other ranks' in rank order with the losses and which variables have a
    /// gradient; then the step every rank takes alike.
    fn parallel_step(
        &mut self,
        mb: &[&Sample],
        value_scale: f32,
    ) -> Result<Option<UpdateStats>, TrainError> {
        let mine: Vec<&Sample> = mb
            .iter()
            .copied()
            .filter(|s| self.share.contains(&s.arena))
            .collect();
        let sizes: Vec<usize> = self.vars.iter().map(|v| v.elem_count()).collect();
        let n = self.vars.len();
        const STATS: usize = 7;
        let mut buf = vec![0f32; n + sizes.iter().sum::<usize>() + STATS];
        if !mine.is_empty() {
            let w = mine.len() as f64 / mb.len().max(1) as f64;
            let (loss, out) = self.loss(&mine, value_scale)?;
            let loss = (loss * w)?;
            let stats = [
                loss.to_scalar::<f32>()?,
                out.policy_loss,
                out.value_loss,
                out.entropy,
                out.approx_kl,
                out.clip_frac,
                out.kl_ref,
            ];
            let tail = buf.len() - STATS;
            buf[tail] = stats[0];
            for (b, s) in buf[tail + 1..].iter_mut().zip(&stats[1..]) {
                *b = (f64::from(*s) * w) as f32;
            }
            let grads = loss.backward()?;
            let mut at = n;
            for (i, (v, &size)) in self.vars.iter().zip(&sizes).enumerate() {
                if let Some(g) = grads.get(v.as_tensor()) {
                    buf[i] = 1.0;
                    let g: Vec<f32> = g
                        .flatten_all()?
                        .to_dtype(candle_core::DType::F32)?
                        .to_vec1()?;
                    buf[at..at + size].copy_from_slice(&g);
                }
                at += size;
            }
        }
        self.ranks.sum(&mut buf);
        let tail = buf.len() - STATS;
        let l = buf[tail];
        if !l.is_finite() {
            self.skip_reason = Some(format!("the loss is {l}"));
            return Ok(None);
        }
        let out = UpdateStats {
            policy_loss: buf[tail + 1],
            value_loss: buf[tail + 2],
            entropy: buf[tail + 3],
            approx_kl: buf[tail + 4],
            clip_frac: buf[tail + 5],
            kl_ref: buf[tail + 6],
            ..Default::default()
        };
        let mut grads = candle_core::backprop::GradStore::default();
        let mut at = n;
        for (i, (v, &size)) in self.vars.iter().zip(&sizes).enumerate() {
            if buf[i] > 0.0 {
                let g = Tensor::from_slice(&buf[at..at + size], v.shape(), v.device())?
                    .to_dtype(v.dtype())?;
                grads.insert(v.as_tensor(), g);
            }
            at += size;
        }
        self.apply(&mut grads, out)
    }

    /// The loss of minibatch `mb` (a mean over its samples) and its statistics.
    fn loss(
        &mut self,
        mb: &[&Sample],
        value_scale: f32,
    ) -> Result<(Tensor, UpdateStats), TrainError> {
        let m = mb.len();
        let a = self.actions;
        let mut legal = vec![0f32; m * a];
        let mut one_hot = vec![0f32; m * a];
        for (i, s) in mb.iter().enumerate() {
            for j in 0..a {
                let ok = s.legal.get(j).copied().unwrap_or(false);
                legal[i * a + j] = if ok { 1.0 } else { 0.0 };
            }
            one_hot[i * a + usize::from(s.action)] = 1.0;
        }
        let dev = &self.device;
        let rows: Vec<&[bool]> = mb.iter().map(|s| s.legal).collect();
        let bias = crate::policy::sampling::illegal_bias(&rows, a, dev)?;
        let legal = Tensor::from_vec(legal, (m, a), dev)?;
        let one_hot = Tensor::from_vec(one_hot, (m, a), dev)?;
        let col =
            |f: fn(&Sample) -> f32| Tensor::from_vec(mb.iter().map(|s| f(s)).collect(), m, dev);
        let adv = col(|s| s.adv)?;
        let old = col(|s| s.logprob)?;
        let old_v = col(|s| s.value)?;
        let target = col(|s| s.target)?;

        let (alp, v, wlp) = self
            .heads(false, mb, &bias)?
            .ok_or_else(|| TrainError::Config("no model to train".into()))?;
        // Families with talk: the word said is part of the decision, its log-probability
        // added to the action's (rows without a learned word add nothing).
        let said = match &wlp {
            Some(w) => {
                let k = w.dim(1)?;
                let mut said = vec![0f32; m * k];
                let mut has = vec![0f32; m];
                for (i, s) in mb.iter().enumerate() {
                    if let Some(c) = s.said.filter(|&c| usize::from(c) < k) {
                        said[i * k + usize::from(c)] = 1.0;
                        has[i] = 1.0;
                    }
                }
                Some((
                    Tensor::from_vec(said, (m, k), dev)?,
                    Tensor::from_vec(has, (m, 1), dev)?.broadcast_as((m, k))?,
                ))
            }
            None => None,
        };
        let decision = |alp: &Tensor, wlp: &Option<Tensor>| -> Result<Tensor, TrainError> {
            let mut lp = chosen(alp, &one_hot)?;
            if let (Some(w), Some((said, _))) = (wlp, &said) {
                lp = (lp + chosen(w, said)?)?;
            }
            Ok(lp)
        };
        let logp = decision(&alp, &wlp)?;
        let mut ent = entropy(&alp, &legal)?;
        if let (Some(w), Some((_, has))) = (&wlp, &said) {
            ent = (ent + entropy(w, has)?)?;
        }
        let ent = ent.mean_all()?;
        let mut out = UpdateStats::default();
        let mut loss = match self.algo {
            Algo::Reinforce => reinforce(&logp, &adv)?,
            _ => {
                let (l, st) = ppo_clip(&logp, &old, &adv, self.hyper.clip)?;
                out.clip_frac = st.clip_frac;
                out.approx_kl = st.approx_kl;
                l
            }
        };
        out.policy_loss = loss.to_scalar::<f32>()?;
        if let (Some(v), true) = (&v, self.algo.uses_value_head()) {
            let clip = (self.algo != Algo::Reinforce).then_some(self.hyper.clip);
            let k = 1.0 / f64::from(value_scale);
            let vl = value_loss(&(v * k)?, &(&old_v * k)?, &(&target * k)?, clip)?;
            out.value_loss = vl.to_scalar::<f32>()?;
            loss = (loss + (vl * self.hyper.value_coef)?)?;
        }
        out.entropy = ent.to_scalar::<f32>()?;
        loss = (loss - (ent * self.hyper.entropy_coef)?)?;
        if let Some((ralp, _, rwlp)) = self.heads(true, mb, &bias)? {
            let rlogp = decision(&ralp, &rwlp)?.detach();
            let kl = k3_kl(&logp, &rlogp)?;
            out.kl_ref = kl.to_scalar::<f32>()?;
            loss = (loss + (kl * self.hyper.kl_coef)?)?;
        }
        if matches!(self.algo, Algo::Reinforce) {
            // The ratio to the acting policy, for the report only.
            let lr: Vec<f32> = (&logp - &old)?.to_vec1()?;
            out.approx_kl =
                lr.iter().map(|l| l.exp() - 1.0 - l).sum::<f32>() / lr.len().max(1) as f32;
        }
        Ok((loss, out))
    }
}
