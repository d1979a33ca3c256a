//! A minibatch's gradient step: the loss ([`Trainer::loss`]: REINFORCE's score-function
//! term or PPO's clipped surrogate, the clipped value loss in units of the return spread, the
//! entropy bonus, the k3 KL to the reference model), its gradient clipped by its global norm
//! and AdamW's step; on the `mlp`'s fused path the same maths over plain buffers, and under
//! mpirun each rank's share summed over the ranks. A non-finite loss, gradient or new weight
//! skips the step and says why.

use candle_core::Tensor;

use super::samples::Sample;
use super::{Model, Trainer, UpdateStats};
use crate::policy::lm::{Band, Lora, Pass};
use crate::policy::mlp::{Encoded, Fused, LossSpec, Row, StepStats, ValueSpec};
use crate::train::loss::{
    chosen, clip_factor, entropy, k3_kl, masked_action_logprobs, ppo_clip, reinforce, value_loss,
};
use crate::train::{Algo, TrainError, UpdateError};

impl Trainer {
    /// Action log-probabilities `(m, actions)` and values `(m,)` of a minibatch, on the
    /// trained model or (`reference`) on the frozen starting one; `None` when there is no
    /// reference.
    pub(super) fn heads(
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
                    Some((choices, _)) if m.memory => {
                        let (h, said) = windows_hidden(m, decoder, mb, path, lora)?;
                        (h, said.map(|h| (h, choices)))
                    }
                    None if m.memory => (windows_hidden(m, decoder, mb, path, lora)?.0, None),
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
                        return Err(UpdateError::NoNetwork.into());
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
                        return Err(UpdateError::GruState {
                            got: h0.len(),
                            expected: starts.len() * crate::policy::mlp::HIDDEN,
                        }
                        .into());
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

    /// One gradient step on `mb` (`None`: skipped, `skip_reason` says why).
    pub(super) fn step(
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
        if self.past_target_kl(out.approx_kl) {
            return Ok(None);
        }
        let mut grads = loss.backward()?;
        self.apply(&mut grads, out)
    }

    /// Early stopping (`target_kl`): whether the approximate KL `kl` of the step about to be
    /// taken passes 1.5 times the target, so that neither it nor the update's remaining steps
    /// are taken (Stable-Baselines3's rule: the minibatch's KL is measured before its step).
    /// Sets the trainer's `kl_stopped`, which the update reads.
    fn past_target_kl(&mut self, kl: f32) -> bool {
        let past = past_target(self.hyper.target_kl, kl);
        self.kl_stopped |= past;
        past
    }

    /// An `mlp`'s step on the fused path ([`Fused`]: the forward, the loss and the backward
    /// over plain buffers, the same maths as [`Trainer::loss`] and its candle backward,
    /// checked against them in `fused_tests.rs`), then the same clipping and optimizer step.
    /// `None` where it does not apply: a language model, or a KL term to the reference (the
    /// candle path computes those). Data-parallel: each rank's own arenas' decisions, each
    /// term divided by the whole minibatch's count, the gradients and statistics summed over
    /// the ranks in rank order ([`crate::train::dist`]), then the step every rank takes alike.
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
            .map_err(UpdateError::Fused)?;
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
        // `past_target_kl`'s rule, inline: `fused` still borrows the model here.
        if past_target(self.hyper.target_kl, st.approx_kl) {
            self.kl_stopped = true;
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
            .map(|g| crate::train::loss::sum_squares(g))
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

    /// The gradients' norm and the optimizer's step with the norm clip's factor applied as it
    /// reads them (or no step, saying why); `grads` are left as they are.
    pub(super) fn apply(
        &mut self,
        grads: &mut candle_core::backprop::GradStore,
        mut out: UpdateStats,
    ) -> Result<Option<UpdateStats>, TrainError> {
        // The clip's factor goes into the optimizer's step, which reads each gradient once.
        let (norm, clip) = clip_factor(grads, &self.vars, self.hyper.max_grad_norm)?;
        out.grad_norm = norm;
        if !norm.is_finite() {
            self.skip_reason = Some(format!("the gradient's norm is {norm}"));
            return Ok(None);
        }
        if let Some(name) = self.opt.step_clipped(grads, clip)? {
            self.skip_reason = Some(format!(
                "the step would leave NaN or an infinity in {name} or its optimizer moments"
            ));
            return Ok(None);
        }
        Ok(Some(out))
    }

    /// A data-parallel step ([`crate::train::dist`]): this rank's part of the minibatch's loss (its
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
        if self.past_target_kl(out.approx_kl) {
            return Ok(None);
        }
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

        let (alp, v, wlp) = self.heads(false, mb, &bias)?.ok_or(UpdateError::NoModel)?;
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

/// A language model with memory: the final hidden states of a minibatch's decisions, and
/// where the word is trained its word's, from one pass over each window of an agent's turns
/// (consecutive decisions from one whose `start` is set: its context read afresh from
/// position 0). A window's sequence is its first decision's context, then each later
/// decision's tokens that the previous one did not read ([`crate::core::ContextRead`]),
/// continued by the last action and `say` where words are scored: the tokens the policy's
/// kept keys and values held, at the positions they had. Each token sees the constant lines
/// and what was kept when it was computed (a [`Band`]: the oldest turns leave as new ones
/// come), so each decision reads its context's last position with the state the policy
/// computed for it, and its word the position of `say`'s last token after its action
/// (tested against the policy's step-by-step pass).
fn windows_hidden(
    m: &super::LmModel,
    decoder: &crate::policy::lm::Decoder,
    mb: &[&Sample],
    path: Pass,
    lora: Lora<'_>,
) -> Result<(Tensor, Option<Tensor>), TrainError> {
    let say = m
        .talk
        .as_ref()
        .filter(|_| mb.iter().any(|s| s.said.is_some()))
        .map(|(_, say)| say);
    let pad = [m.pad];
    fn context<'a>(s: &'a Sample, pad: &'a [u32]) -> &'a [u32] {
        if s.tokens.is_empty() { pad } else { s.tokens }
    }
    // Each window's first and last decision.
    let mut windows: Vec<(usize, usize)> = Vec::new();
    for (i, s) in mb.iter().enumerate() {
        match windows.last_mut() {
            Some((_, last)) if !s.start => *last = i,
            _ => windows.push((i, i)),
        }
    }
    let mut seqs = Vec::with_capacity(windows.len());
    let mut los = Vec::with_capacity(windows.len());
    let mut headers = Vec::with_capacity(windows.len());
    let mut at = Vec::with_capacity(windows.len());
    for &(first, last) in &windows {
        let head = mb[first].read.map_or(0, |r| r.header as usize);
        let mut seq: Vec<u32> = context(mb[first], &pad).to_vec();
        // Read afresh: causally.
        let mut lo: Vec<u32> = vec![0; seq.len()];
        // Where the kept tokens began when the previous decision was computed.
        let mut kept_from = head as u32;
        let mut pos = Vec::new();
        for (k, s) in mb[first..=last].iter().enumerate() {
            let tokens = context(s, &pad);
            if k > 0 {
                let read = s.read.unwrap_or_default();
                let (new, computed) = (read.new_from as usize, read.computed_from as usize);
                // The kept tokens past the constant lines, now: the tail of the window.
                let from = (seq.len() + head)
                    .checked_sub(new)
                    .filter(|_| new <= computed && computed <= tokens.len() && head <= new);
                let Some(from) = from else {
                    return Err(TrainError::Update(UpdateError::Window {
                        window: seq.len(),
                        tokens: tokens.len(),
                        read: format!("{read:?}"),
                    }));
                };
                seq.extend_from_slice(&tokens[new..]);
                lo.extend(std::iter::repeat_n(kept_from, computed - new));
                kept_from = from as u32;
                lo.extend(std::iter::repeat_n(kept_from, tokens.len() - computed));
            }
            pos.push(seq.len() - 1);
            if let Some(say) = say {
                pos.push(seq.len() + say.len());
            }
        }
        if let Some(say) = say {
            let n = seq.len();
            seq.extend(m.action_ids.get(usize::from(mb[last].action)));
            seq.extend(say);
            lo.extend(std::iter::repeat_n(kept_from, seq.len() - n));
        }
        seqs.push(seq);
        los.push(lo);
        headers.push(head);
        at.push(pos);
    }
    let bands: Vec<Band<'_>> = headers
        .iter()
        .zip(&los)
        .map(|(&header, lo)| Band { header, lo })
        .collect();
    // A window reads its agent's adapter (the first decision's).
    let each: Vec<Option<&crate::policy::lm::Adapter>> = match lora {
        Lora::Each(e) => windows.iter().map(|&(first, _)| e[first]).collect(),
        _ => Vec::new(),
    };
    let lora = match lora {
        Lora::Each(_) => Lora::Each(&each),
        other => other,
    };
    let h = decoder.hidden_banded(&seqs, &at, &bands, m.pad, path, lora)?;
    if say.is_none() {
        return Ok((h, None));
    }
    // Rows alternate: each decision's action state, then its word's.
    let n = mb.len() as u32;
    let actions = Tensor::from_vec((0..n).map(|i| 2 * i).collect(), mb.len(), h.device())?;
    let words = Tensor::from_vec((0..n).map(|i| 2 * i + 1).collect(), mb.len(), h.device())?;
    Ok((
        h.index_select(&actions, 0)?,
        Some(h.index_select(&words, 0)?),
    ))
}

/// `target_kl`'s rule: a step whose approximate KL `kl` is above 1.5 times the target (0: no
/// target) is not taken.
fn past_target(target_kl: f64, kl: f32) -> bool {
    target_kl > 0.0 && f64::from(kl) > 1.5 * target_kl
}
