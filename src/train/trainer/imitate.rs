//! Behaviour cloning (`emergence imitate`): the trainer's step on a teacher's decisions. The
//! loss is the cross-entropy of the teacher's choices under the model's masked action
//! distribution (the same distribution the policy samples from, `Trainer::heads`), with,
//! when asked (`--words`), the cross-entropy of the words it said, and the value head
//! regressed on the returns that followed (so that reinforcement learning from the clone
//! starts with a critic that knows the teacher's returns):
//!
//! ```text
//! loss = −mean_t log π(a*_t | o_t)  [ − mean_{t said} log π_w(w*_t | o_t, a*_t) ]
//!        + c_v · mean_t ((V(o_t) − G_t) / σ_G)²
//! ```
//!
//! where `a*`, `w*` are the teacher's, `G_t` the return from step `t` and `σ_G` the spread of
//! the returns (at least 1), as the reinforcement-learning update scales its value loss.
//! Minibatches are cut as the update cuts them: single decisions, or whole windows of an agent
//! with memory (a language model's turns, a `gru`'s sequences), so a memory is cloned with
//! what it remembered. Agreement is the share of decisions whose most likely legal action
//! (and word) is the teacher's.

use candle_core::Tensor;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::samples::Sample;
use super::{Trainer, return_spread};
use crate::train::loss::{chosen, clip_factor, value_loss};
use crate::train::rollout::Batch;
use crate::train::{TrainError, UpdateError};

/// What one pass of behaviour cloning measured (means over its minibatches).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ImitationStats {
    /// The loss minimised.
    pub loss: f32,
    /// Cross-entropy of the teacher's actions (nats per decision).
    pub action_loss: f32,
    /// Cross-entropy of the teacher's words, where they are learned.
    pub word_loss: f32,
    /// The value head's loss (in units of the return spread).
    pub value_loss: f32,
    /// Gradient norm before clipping.
    pub grad_norm: f32,
    /// Agreement with the teacher on the minibatches, as each was before its step.
    pub agreement: f64,
    /// Decisions.
    pub samples: usize,
    /// Gradient steps taken.
    pub steps: usize,
    /// Gradient steps skipped (a non-finite loss or gradient).
    pub skipped: usize,
    /// Learning rate.
    pub lr: f64,
}

/// How often the model's most likely choice is the teacher's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Agreement {
    /// Share of decisions whose most likely legal action is the teacher's.
    pub actions: f64,
    /// Share of the decisions with a learned word whose most likely word is the teacher's
    /// (`None`: no words learned).
    pub words: Option<f64>,
    /// Decisions.
    pub decisions: usize,
}

/// Per row, the index of the largest entry.
fn argmax_rows(t: &Tensor) -> Result<Vec<usize>, TrainError> {
    Ok(t.to_vec2::<f32>()?
        .iter()
        .map(|row| {
            row.iter()
                .enumerate()
                .fold((0, f32::NEG_INFINITY), |(bi, bv), (i, &v)| {
                    if v > bv { (i, v) } else { (bi, bv) }
                })
                .0
        })
        .collect())
}

/// How many decisions of `mb` have the teacher's action as their most likely one under
/// the action log-probabilities `alp`.
fn agreeing(alp: &Tensor, mb: &[&Sample]) -> Result<usize, TrainError> {
    Ok(argmax_rows(alp)?
        .iter()
        .zip(mb)
        .filter(|(p, x)| **p == usize::from(x.action))
        .count())
}

/// A minibatch's heads and what the teacher chose, for the loss and the agreement.
struct Scored {
    alp: Tensor,
    v: Option<Tensor>,
    wlp: Option<Tensor>,
    /// The teacher's actions one-hot `(m, actions)`.
    one_hot: Tensor,
    /// The teacher's words one-hot `(m, words)` and which rows have one `(m,)`.
    said: Option<(Tensor, Tensor, usize)>,
}

impl Trainer {
    /// The heads of minibatch `mb` and the teacher's choices as tensors; `words`: score the
    /// words too (where the model says any).
    fn scored(&self, mb: &[&Sample], words: bool) -> Result<Scored, TrainError> {
        let (m, a) = (mb.len(), self.actions);
        let dev = &self.device;
        let rows: Vec<&[bool]> = mb.iter().map(|s| s.legal).collect();
        let bias = crate::policy::sampling::illegal_bias(&rows, a, dev)?;
        let mut one_hot = vec![0f32; m * a];
        for (i, s) in mb.iter().enumerate() {
            one_hot[i * a + usize::from(s.action)] = 1.0;
        }
        let one_hot = Tensor::from_vec(one_hot, (m, a), dev)?;
        let (alp, v, wlp) = self.heads(false, mb, &bias)?.ok_or(UpdateError::NoModel)?;
        let wlp = wlp.filter(|_| words);
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
                let n = has.iter().filter(|&&h| h > 0.0).count();
                Some((
                    Tensor::from_vec(said, (m, k), dev)?,
                    Tensor::from_vec(has, m, dev)?,
                    n,
                ))
            }
            None => None,
        };
        Ok(Scored {
            alp,
            v,
            wlp,
            one_hot,
            said,
        })
    }

    /// One pass of behaviour cloning over `batch` (every decision a teacher's, see the
    /// module's header), minibatch order from `rng`; `words`: learn the words said too.
    pub fn imitate(
        &mut self,
        batch: &Batch,
        words: bool,
        rng: &mut ChaCha8Rng,
    ) -> Result<ImitationStats, TrainError> {
        self.bind_mlp()?;
        let samples = self.samples(batch)?;
        let mut stats = ImitationStats {
            samples: samples.len(),
            lr: self.opt.params.lr,
            ..Default::default()
        };
        if samples.is_empty() {
            return Err(UpdateError::NoDecisions.into());
        }
        let scale = return_spread(&samples);
        let mut units = self.units(&samples);
        units.shuffle(rng);
        let mut agreed = 0usize;
        for mb in self.minibatches(&units, &samples) {
            let s = self.scored(&mb, words)?;
            agreed += agreeing(&s.alp, &mb)?;
            let action_loss = chosen(&s.alp, &s.one_hot)?.mean_all()?.neg()?;
            let mut loss = action_loss.clone();
            let mut word_loss = 0.0;
            if let (Some(w), Some((said, has, n))) = (&s.wlp, &s.said)
                && *n > 0
            {
                // The mean over the rows that said something (a word or silence).
                let wl = ((chosen(w, said)? * has)?.sum_all()? / -(*n as f64))?;
                word_loss = wl.to_scalar::<f32>()?;
                loss = (loss + wl)?;
            }
            let mut vl_value = 0.0;
            if let Some(v) = &s.v {
                let target = Tensor::from_vec(
                    mb.iter().map(|x| x.target).collect::<Vec<f32>>(),
                    mb.len(),
                    &self.device,
                )?;
                let k = 1.0 / f64::from(scale);
                let vl = value_loss(&(v * k)?, &(v * k)?.detach(), &(target * k)?, None)?;
                vl_value = vl.to_scalar::<f32>()?;
                loss = (loss + (vl * self.hyper.value_coef)?)?;
            }
            let l = loss.to_scalar::<f32>()?;
            if !l.is_finite() {
                stats.skipped += 1;
                continue;
            }
            let grads = loss.backward()?;
            let (norm, clip) = clip_factor(&grads, &self.vars, self.hyper.max_grad_norm)?;
            if !norm.is_finite() || self.opt.step_clipped(&grads, clip)?.is_some() {
                stats.skipped += 1;
                continue;
            }
            stats.steps += 1;
            stats.loss += l;
            stats.action_loss += action_loss.to_scalar::<f32>()?;
            stats.word_loss += word_loss;
            stats.value_loss += vl_value;
            stats.grad_norm += norm;
        }
        let n = stats.steps.max(1) as f32;
        for x in [
            &mut stats.loss,
            &mut stats.action_loss,
            &mut stats.word_loss,
            &mut stats.value_loss,
            &mut stats.grad_norm,
        ] {
            *x /= n;
        }
        stats.agreement = agreed as f64 / samples.len() as f64;
        crate::policy::lm::release_buffers();
        Ok(stats)
    }

    /// The model's agreement with the teacher's decisions in `batch` (no step taken);
    /// `words`: with the words said.
    pub fn agreement(&mut self, batch: &Batch, words: bool) -> Result<Agreement, TrainError> {
        self.bind_mlp()?;
        let samples = self.samples(batch)?;
        let units = self.units(&samples);
        let (mut agreed, mut said, mut said_agreed) = (0usize, 0usize, 0usize);
        for mb in self.minibatches(&units, &samples) {
            let s = self.scored(&mb, words)?;
            agreed += agreeing(&s.alp, &mb)?;
            if let Some(w) = &s.wlp {
                let k = w.dim(1)?;
                for (p, x) in argmax_rows(w)?.iter().zip(&mb) {
                    if let Some(c) = x.said.filter(|&c| usize::from(c) < k) {
                        said += 1;
                        said_agreed += usize::from(*p == usize::from(c));
                    }
                }
            }
        }
        crate::policy::lm::release_buffers();
        let n = samples.len().max(1) as f64;
        Ok(Agreement {
            actions: agreed as f64 / n,
            words: (said > 0).then(|| said_agreed as f64 / said as f64),
            decisions: samples.len(),
        })
    }
}
