//! The update between episodes, in the order CleanRL's `ppo.py` takes it ([`Trainer::update`]
//! on one screen): every decision's advantage and value target from a [`Batch`] (the
//! algorithm's estimator, `algo/`), normalised; then epochs of shuffled minibatches, each the
//! critic's step (MAPPO), the policy's loss (`step.rs`: REINFORCE's or PPO's clipped
//! surrogate, the clipped value loss, the entropy bonus, the KL to the reference), its gradient
//! clipped and an AdamW step on the policy's own variables, so the next decision already uses
//! the new weights. One `Trainer` serves both learners: the language model's training path
//! (the differentiable decoder) and the `mlp`'s network (candle's autograd, or its fused step);
//! both read the same rollout buffer and take the same losses.
//!
//! The parts: this file (the trainer, its models and the update's order), `samples.rs` (the
//! decisions with their advantages and targets), `step.rs` (a minibatch's loss and step, on
//! each path). The maths is in `loss.rs`, `advantage.rs`, `algo/` and `optim.rs`.

mod imitate;
mod samples;
mod step;

use candle_core::{Device, Tensor, Var};
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::ops::Range;
use std::time::Instant;

use super::advantage::explained_variance;
use super::critic::Critic;
use super::optim::{AdamParams, AdamW};
use super::rollout::Batch;
use super::{Algo, Hyper, TrainError, UpdateError};
use crate::policy::lm::{Decoder, TrainHandle, Weights};
use crate::policy::mlp::{Fused, MlpHandle, MlpNet};
pub use imitate::{Agreement, ImitationStats};
pub use samples::SEQUENCE;
use samples::Sample;

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
    /// The standard deviation of the batch's advantages before they were normalised (in
    /// reward units; absent where the algorithm does not normalise them: MAGRPO, Advantage
    /// Alignment). Near 0 once every episode ends alike: normalising then scales the
    /// critic's errors up to unit advantages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advantage_std: Option<f32>,
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
    /// Early stopping (`target_kl`): the pass over the batch (from 1) in which a step's
    /// approximate KL passed 1.5 times the target and the update stopped; absent when it
    /// made every step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kl_stop_epoch: Option<usize>,
}

impl UpdateStats {
    /// An update's statistics before its first step: the batch's size, the learning rate
    /// and how much of the targets' variance the values the decisions were taken with
    /// explain.
    fn starting(samples: &[Sample], lr: f64) -> UpdateStats {
        let preds: Vec<f32> = samples.iter().map(|s| s.value).collect();
        let targets: Vec<f32> = samples.iter().map(|s| s.target).collect();
        UpdateStats {
            samples: samples.len(),
            lr,
            explained_variance: explained_variance(&preds, &targets).unwrap_or(0.0),
            ..Default::default()
        }
    }

    /// The sums of the steps' losses and statistics as their means.
    fn finish(&mut self) {
        let n = self.steps.max(1) as f32;
        for x in [
            &mut self.policy_loss,
            &mut self.value_loss,
            &mut self.entropy,
            &mut self.approx_kl,
            &mut self.clip_frac,
            &mut self.kl_ref,
            &mut self.grad_norm,
        ] {
            *x /= n;
        }
    }

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
            advantage_std: {
                let spreads: Vec<f32> = parts.iter().filter_map(|s| s.advantage_std).collect();
                (!spreads.is_empty()).then(|| spreads.iter().sum::<f32>() / spreads.len() as f32)
            },
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
            kl_stop_epoch: parts.iter().filter_map(|s| s.kl_stop_epoch).min(),
        }
    }
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
    /// Agents with memory: an agent's decisions from one context read afresh to the next (a
    /// window, [`crate::core::ContextRead`]) are shuffled as one unit and scored in one pass.
    memory: bool,
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
    /// An `mlp` started from a network folder (`--model DIR`, [`Trainer::start_from`]):
    /// its KL reference is read from there rather than built from the seed.
    start: Option<std::path::PathBuf>,
    /// Gradient steps skipped one after another (across updates), and why the last was.
    skipped_in_a_row: u32,
    skip_reason: Option<String>,
    /// The step just refused was past `target_kl` ([`Trainer::update`] stops there).
    kl_stopped: bool,
    /// The last batch's advantage spread before normalisation (`samples.rs`), for its row.
    advantage_spread: Option<f32>,
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
                return Err(UpdateError::MultiTokenAction {
                    action: i,
                    tokens: ids.len(),
                }
                .into());
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
                    memory: t.memory > 0,
                })),
                vars,
                opt,
                hyper: hyper.clone(),
                device: device.clone(),
                critic: None,
                seed: 0,
                start: None,
                skipped_in_a_row: 0,
                skip_reason: None,
                kl_stopped: false,
                advantage_spread: None,
                ranks: Default::default(),
                share: 0..u32::MAX,
            })
        });
        built.unwrap_or_else(|| Err(UpdateError::NotSetUp.into()))
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
            start: None,
            skipped_in_a_row: 0,
            skip_reason: None,
            kl_stopped: false,
            advantage_spread: None,
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
        if let (true, Some(dir)) = (self.hyper.kl_coef > 0.0, &self.start) {
            // Started from a network folder: the reference is that network.
            m.reference = Some(MlpNet::load(dir, &self.device).map_err(TrainError::Config)?);
        } else if self.hyper.kl_coef > 0.0 {
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

    /// An `mlp` that started from the network folder `dir` (`--model DIR`): its KL
    /// reference is that network.
    pub fn start_from(&mut self, dir: &std::path::Path) -> Result<(), TrainError> {
        self.start = Some(dir.to_path_buf());
        if let (Model::Mlp(m), true) = (&mut self.model, self.hyper.kl_coef > 0.0)
            && m.net.is_some()
        {
            m.reference = Some(MlpNet::load(dir, &self.device).map_err(TrainError::Config)?);
        }
        Ok(())
    }

    /// Whether the model is a network with memory (the `gru`), trained on sequences.
    fn has_memory(&self) -> bool {
        match &self.model {
            Model::Mlp(m) => m.net.as_ref().is_some_and(|n| n.memory),
            Model::Lm(m) => m.memory,
        }
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
}

impl Trainer {
    /// One update on `batch`; minibatch order from `rng`. A non-finite loss or gradient skips
    /// that step (counted in `skipped`) and leaves the weights as they were.
    pub fn update(
        &mut self,
        batch: &Batch,
        rng: &mut ChaCha8Rng,
    ) -> Result<UpdateStats, TrainError> {
        let start = Instant::now();
        self.bind_mlp()?;
        self.check_network_fits(batch)?;
        // 1. Every decision with its advantage and value target, normalised where the
        //    algorithm normalises them (`samples.rs`).
        let samples = self.samples(batch)?;
        let mut stats = UpdateStats::starting(&samples, self.opt.params.lr);
        stats.advantage_std = self.advantage_spread.take();
        // 2. The value loss is taken in units of the batch's return spread, so that large
        //    returns do not drown the policy gradient in the shared trunk.
        let value_scale = return_spread(&samples);
        // 3. Epochs of shuffled minibatches: the critic's step (MAPPO), then the policy's
        //    loss, its gradient clipped and the optimizer's step (`step.rs`).
        //    With `target_kl`, the update stops at the first step whose approximate KL (the
        //    minibatch's, before its step; summed over ranks, so every rank stops alike)
        //    passes 1.5 times the target, that step not taken, as Stable-Baselines3's PPO
        //    does (MAPPO's critic has made that minibatch's step by then).
        let mut units = self.units(&samples);
        'epochs: for epoch in 0..self.epochs() {
            units.shuffle(rng);
            for mb in self.minibatches(&units, &samples) {
                let critic_loss = self.critic_step(&mb, value_scale)?;
                let step = self.step(&mb, value_scale)?;
                if std::mem::take(&mut self.kl_stopped) {
                    stats.kl_stop_epoch = Some(epoch + 1);
                    break 'epochs;
                }
                self.count(&mut stats, step, critic_loss)?;
            }
        }
        // 4. Means over the steps taken; the rollouts until the next update can reuse the
        //    training path's buffers.
        stats.finish();
        crate::policy::lm::release_buffers();
        stats.update_seconds = start.elapsed().as_secs_f64();
        Ok(stats)
    }

    /// An `mlp`'s batch must be of the shape its network reads.
    fn check_network_fits(&self, batch: &Batch) -> Result<(), TrainError> {
        let Model::Mlp(m) = &self.model else {
            return Ok(());
        };
        let Some(net) = &m.net else {
            return Err(UpdateError::NoDecisions.into());
        };
        if let Some(bad) = batch
            .trajectories
            .iter()
            .flat_map(|t| &t.steps)
            .find(|s| !net.fits(&s.encoded))
        {
            return Err(UpdateError::Shape {
                cells: bad.encoded.cells.len(),
                dense: bad.encoded.dense.len(),
                net_cells: net.cells,
                net_dense: net.dense,
            }
            .into());
        }
        Ok(())
    }

    /// Passes over the batch: one for REINFORCE (on-policy), the setting's for the rest.
    fn epochs(&self) -> usize {
        match self.algo {
            Algo::Reinforce => 1,
            _ => self.hyper.epochs.max(1),
        }
    }

    /// The units shuffled into minibatches: single decisions, or whole sequences for a
    /// network with memory (a language model's: its windows).
    fn units(&self, samples: &[Sample]) -> Vec<Range<usize>> {
        if self.has_memory() {
            let starts: Vec<usize> = (0..samples.len())
                .filter(|&i| i == 0 || samples[i].start)
                .collect();
            (0..starts.len())
                .map(|k| starts[k]..starts.get(k + 1).copied().unwrap_or(samples.len()))
                .collect()
        } else {
            (0..samples.len()).map(|i| i..i + 1).collect()
        }
    }

    /// `units` in their order, cut into minibatches: each takes units until it holds
    /// `minibatch` decisions (under LoRA sorted by the adapter's owner, for one forward with
    /// each owner's run of rows). A language model with memory takes two windows at least:
    /// its training pass runs a minibatch's windows in two halves side by side, a thread
    /// each, and a window can be a whole episode.
    fn minibatches<'s, 'b>(
        &self,
        units: &[Range<usize>],
        samples: &'s [Sample<'b>],
    ) -> Vec<Vec<&'s Sample<'b>>> {
        let size = self.hyper.minibatch.max(1);
        let lora = matches!(&self.model, Model::Lm(m) if !m.adapters.is_empty());
        let least = if matches!(&self.model, Model::Lm(m) if m.memory) {
            2
        } else {
            1
        };
        let mut out = Vec::new();
        let mut next = 0;
        while next < units.len() {
            let mut mb: Vec<&Sample> = Vec::with_capacity(size);
            let mut taken = 0;
            while next < units.len() && (mb.len() < size || taken < least) {
                mb.extend(units[next].clone().map(|i| &samples[i]));
                next += 1;
                taken += 1;
            }
            if lora {
                mb.sort_by_key(|s| s.owner);
            }
            out.push(mb);
        }
        out
    }

    /// MAPPO: the centralised critic's step on the minibatch (its value loss).
    fn critic_step(&mut self, mb: &[&Sample], value_scale: f32) -> Result<Option<f32>, TrainError> {
        match &mut self.critic {
            Some(c) if self.algo == Algo::Mappo => Ok(c.step(
                &mb.iter().map(|s| &s.global).collect::<Vec<_>>(),
                &mb.iter().map(|s| s.value).collect::<Vec<_>>(),
                &mb.iter().map(|s| s.target).collect::<Vec<_>>(),
                Some(self.hyper.clip),
                value_scale,
                self.hyper.max_grad_norm,
            )?),
            _ => Ok(None),
        }
    }

    /// Adds a step's statistics to `stats`, or counts it skipped; too many skipped in a row
    /// stop the run.
    fn count(
        &mut self,
        stats: &mut UpdateStats,
        step: Option<UpdateStats>,
        critic_loss: Option<f32>,
    ) -> Result<(), TrainError> {
        match step {
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
                    let reason = self.skip_reason.as_deref().unwrap_or("a non-finite loss");
                    return Err(UpdateError::Stopped {
                        count: MAX_SKIPPED_IN_A_ROW,
                        reason: reason.to_string(),
                    }
                    .into());
                }
            }
        }
        Ok(())
    }
}

/// The spread of the batch's value targets (at least 1): the value loss's unit.
fn return_spread(samples: &[Sample]) -> f32 {
    let n = samples.len().max(1) as f32;
    let m = samples.iter().map(|s| s.target).sum::<f32>() / n;
    (samples.iter().map(|s| (s.target - m).powi(2)).sum::<f32>() / n)
        .sqrt()
        .max(1.0)
}
