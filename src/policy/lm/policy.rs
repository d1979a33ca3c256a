//! The language-model policy: every agent bound to it, across every arena, is decided in
//! ONE batched forward per step. Prompts are the observation texts ([`crate::policy::text`])
//! tokenized and right-padded (with a causal mask, real tokens never see the padding and keep
//! their positions, so a padded row gives exactly the logits it would alone). Actions are
//! words: each legal action word is scored by the sum of its tokens' log-probabilities after
//! the prompt, illegal ones are masked, and the action is sampled from the agent's own stream.
//! The trace keeps the prompt tokens, the log-probability of the choice, the entropy of the
//! masked distribution, the probabilities and the value-head estimate. In the maze a word to
//! say is then chosen the same way, after the prompt, the chosen action and `say`. When the
//! model folder holds LoRA adapters for roles (`adapters/<role>/`), each role's agents run
//! with their adapter: one batched forward per adapter group.

use candle_core::{D, Device, Tensor, Var};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokenizers::Tokenizer;

use super::folder::ModelFolder;
use super::lora::Adapter;
use super::model::{Decoder, Path};
use super::tokenizer::encode;
use super::{LmConfig, LmError, Preset};
use crate::policy::sampling::sample;
use crate::policy::text::{Speaker, TextFormat};
use crate::policy::{Decision, Policy, PolicyStats};
use crate::scene::{FamilySpec, Scene};

/// Where the model comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelSource {
    /// Built in memory from a preset and a seed, with the default tokenizer for the scene.
    Embedded {
        /// Size.
        preset: Preset,
        /// Weight seed.
        seed: u64,
    },
    /// A model folder on disk (`config.json`, `model.safetensors`, `tokenizer.json`).
    Folder(PathBuf),
}

/// The model of an [`LmPolicy`] opened for training: its weights as variables that the policy
/// reads in place (an optimizer step is seen by the next decision), plus what a trainer
/// needs to score actions and write checkpoints.
pub struct Trainable {
    /// The model's configuration.
    pub config: LmConfig,
    /// Every weight, by Hugging Face name.
    pub vars: Vec<(String, Var)>,
    /// The tokenizer (written into checkpoints).
    pub tokenizer: Tokenizer,
    /// Token ids of each action word.
    pub actions: Vec<Vec<u32>>,
    /// The padding token.
    pub pad: u32,
    /// LoRA adapters being trained, one per role in the scene's role order (empty when the
    /// whole model is trained).
    pub adapters: Vec<RoleAdapter>,
}

/// A role's LoRA adapter opened for training: `A` and `B` of every adapted module as
/// variables that the policy reads in place.
pub struct RoleAdapter {
    /// The role's name (its folder is `adapters/<role>/`).
    pub role: String,
    /// The adapter's configuration.
    pub config: super::LoraConfig,
    /// `(module, A, B)`.
    pub vars: Vec<(String, Var, Var)>,
}

impl RoleAdapter {
    /// The adapter over the variables themselves (for the differentiable path).
    pub fn adapter(&self) -> Adapter {
        self.view(|v| v.as_tensor().clone())
    }

    /// The adapter over detached views of the variables (for inference and saving).
    pub fn detached(&self) -> Adapter {
        self.view(|v| v.as_tensor().detach())
    }

    fn view(&self, f: impl Fn(&Var) -> candle_core::Tensor) -> Adapter {
        Adapter {
            config: self.config.clone(),
            weights: self
                .vars
                .iter()
                .map(|(n, a, b)| (n.clone(), (f(a), f(b))))
                .collect(),
        }
    }
}

/// A slot shared by an [`LmPolicy`] and its trainer, filled when the policy is set up for a
/// scene.
#[derive(Clone, Default)]
pub struct TrainHandle(Arc<Mutex<Option<Trainable>>>);

impl std::fmt::Debug for TrainHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TrainHandle")
    }
}

impl TrainHandle {
    /// Runs `f` on the trainable model, once the policy has been set up.
    pub fn with<R>(&self, f: impl FnOnce(&Trainable) -> R) -> Option<R> {
        let guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().map(f)
    }
}

struct Ready {
    decoder: Decoder,
    tokenizer: Tokenizer,
    format: TextFormat,
    /// Token ids of each action word.
    actions: Vec<Vec<u32>>,
    /// Token ids of each word agents may say, and of `say` (families with talk).
    words: Option<(Vec<Vec<u32>>, Vec<u32>)>,
    pad: u32,
    /// A LoRA adapter per role (by the scene's role index), from `adapters/<role>/` of the
    /// model folder.
    adapters: Vec<Option<Adapter>>,
}

/// A language-model policy.
pub struct LmPolicy {
    source: ModelSource,
    device: Device,
    ready: Option<Ready>,
    stats: PolicyStats,
    train: Option<TrainHandle>,
    lora: Option<super::LoraConfig>,
}

impl LmPolicy {
    /// A policy whose model comes from `source`, run on `device`.
    pub fn new(source: ModelSource, device: Device) -> Self {
        Self {
            source,
            device,
            ready: None,
            stats: PolicyStats::default(),
            train: None,
            lora: None,
        }
    }

    /// With a trainer: train a LoRA adapter of this shape per role over the frozen base
    /// (a role whose `adapters/<role>/` exists in the model folder continues from it).
    pub fn with_lora(mut self, lora: super::LoraConfig) -> Self {
        self.lora = Some(lora);
        self
    }

    /// A policy whose weights a trainer updates through `handle` (filled at setup).
    pub fn with_handle(source: ModelSource, device: Device, handle: TrainHandle) -> Self {
        let mut p = Self::new(source, device);
        p.train = Some(handle);
        p
    }

    fn prepare(&mut self, scene: &Scene, actions: &[String]) -> Result<Ready, LmError> {
        let (folder, tpath) = match &self.source {
            ModelSource::Embedded { preset, seed } => (
                ModelFolder::init(*preset, *seed, std::slice::from_ref(scene), &self.device)?,
                PathBuf::from("the embedded tokenizer"),
            ),
            ModelSource::Folder(dir) => (
                ModelFolder::load(dir, &self.device)?,
                dir.join("tokenizer.json"),
            ),
        };
        let unk = folder.tokenizer.token_to_id("<unk>");
        let words_of = |list: &[String], what: &str| -> Result<Vec<Vec<u32>>, LmError> {
            list.iter()
                .map(|w| {
                    let ids = encode(&folder.tokenizer, w).map_err(|msg| LmError::Tokenizer {
                        path: tpath.clone(),
                        msg,
                    })?;
                    if ids.is_empty() || unk.is_some_and(|u| ids.contains(&u)) {
                        return Err(LmError::Tokenizer {
                            path: tpath.clone(),
                            msg: format!("cannot encode the {what} {w:?} (unknown token)"),
                        });
                    }
                    Ok(ids)
                })
                .collect()
        };
        let action_ids = words_of(actions, "action word")?;
        let words = match &scene.spec.family {
            FamilySpec::Maze(m) => {
                let say = words_of(&["say".to_string()], "word")?.remove(0);
                Some((words_of(&m.vocabulary, "vocabulary word")?, say))
            }
            _ => None,
        };
        let pad = folder
            .tokenizer
            .token_to_id("<pad>")
            .or_else(|| folder.tokenizer.token_to_id("<|endoftext|>"))
            .unwrap_or(0);
        let adapters = match &self.source {
            ModelSource::Folder(dir) => scene
                .roles
                .iter()
                .map(|role| {
                    let a = dir.join("adapters").join(role);
                    a.exists()
                        .then(|| Adapter::load(&a, &folder.config, &self.device))
                        .transpose()
                })
                .collect::<Result<Vec<_>, _>>()?,
            ModelSource::Embedded { .. } => Vec::new(),
        };
        let mut adapters = adapters;
        let mut role_adapters = Vec::new();
        if let (Some(lora), Some(_)) = (&self.lora, &self.train) {
            adapters.resize(scene.roles.len(), None);
            for (i, role) in scene.roles.iter().enumerate() {
                let a = match adapters[i].take() {
                    Some(a) => a,
                    None => Adapter::init(
                        &folder.config,
                        lora.clone(),
                        0x4c6f_5241 ^ i as u64,
                        &self.device,
                    )?,
                };
                let mut vars = Vec::with_capacity(a.weights.len());
                for (name, (wa, wb)) in &a.weights {
                    vars.push((name.clone(), Var::from_tensor(wa)?, Var::from_tensor(wb)?));
                }
                let ra = RoleAdapter {
                    role: role.clone(),
                    config: a.config.clone(),
                    vars,
                };
                adapters[i] = Some(ra.detached());
                role_adapters.push(ra);
            }
        }
        let decoder = match &self.train {
            None => folder.decoder()?,
            Some(handle) => {
                // Variables for the trainer; the policy reads detached views of the same
                // storage, so optimizer steps reach it without copies and without graphs.
                let mut vars = Vec::with_capacity(folder.weights.len());
                let mut views = super::Weights::new();
                for (name, t) in &folder.weights {
                    let v = Var::from_tensor(t)?;
                    views.insert(name.clone(), v.as_tensor().detach());
                    vars.push((name.clone(), v));
                }
                let decoder = Decoder::new(
                    &folder.config,
                    &views,
                    &folder.dir.join("model.safetensors"),
                )?;
                *handle.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(Trainable {
                    config: folder.config.clone(),
                    vars,
                    tokenizer: folder.tokenizer.clone(),
                    actions: action_ids.clone(),
                    pad,
                    adapters: role_adapters,
                });
                decoder
            }
        };
        Ok(Ready {
            adapters,
            decoder,
            tokenizer: folder.tokenizer,
            format: TextFormat::new(scene, actions),
            actions: action_ids,
            words,
            pad,
        })
    }
}

/// Log-probabilities `(rows, vocab)` of the token after each prompt, and the value head's
/// estimate at each prompt's last token when the model has one.
fn next_logprobs(
    r: &Ready,
    prompts: &[Vec<u32>],
    adapter: Option<&Adapter>,
) -> Result<(Tensor, Option<Vec<f32>>), LmError> {
    let h = r.decoder.last_hidden(prompts, r.pad, Path::Fast, adapter)?;
    let logits = r.decoder.head(&h)?;
    let values = match r.decoder.value(&h)? {
        Some(v) => Some(v.flatten_all()?.to_vec1::<f32>()?),
        None => None,
    };
    Ok((candle_nn::ops::log_softmax(&logits, D::Minus1)?, values))
}

/// Scores of `choices` (token sequences) after each prompt: the sum of their tokens'
/// log-probabilities. One forward for single-token choices; multi-token choices add a second
/// batched forward over the prompts extended by each choice.
fn score(
    r: &Ready,
    device: &Device,
    prompts: &[Vec<u32>],
    choices: &[Vec<u32>],
    adapter: Option<&Adapter>,
    tokens: &mut u64,
) -> Result<(Vec<Vec<f32>>, Option<Vec<f32>>), LmError> {
    let (lp, values) = next_logprobs(r, prompts, adapter)?;
    let lp = lp.to_vec2::<f32>()?;
    *tokens += prompts.iter().map(|p| p.len() as u64).sum::<u64>();
    let mut out: Vec<Vec<f32>> = lp
        .iter()
        .map(|row| choices.iter().map(|c| row[c[0] as usize]).collect())
        .collect();
    let multi: Vec<usize> = (0..choices.len())
        .filter(|&c| choices[c].len() > 1)
        .collect();
    if !multi.is_empty() {
        // Every (prompt, choice) continuation in one batch; position k scores token k + 1.
        let mut rows = Vec::new();
        for p in prompts {
            for &c in &multi {
                rows.push(
                    p.iter()
                        .chain(&choices[c][..choices[c].len() - 1])
                        .copied()
                        .collect::<Vec<u32>>(),
                );
            }
        }
        let t = rows.iter().map(Vec::len).max().unwrap_or(1);
        let mut flat = Vec::new();
        for row in &rows {
            flat.extend_from_slice(row);
            flat.extend(std::iter::repeat_n(r.pad, t - row.len()));
        }
        *tokens += rows.iter().map(|p| p.len() as u64).sum::<u64>();
        let ids = Tensor::from_vec(flat, (rows.len(), t), device)?;
        let lp = candle_nn::ops::log_softmax(
            &r.decoder.forward_with(&ids, None, Path::Fast, adapter)?,
            D::Minus1,
        )?;
        let lp = lp.to_vec3::<f32>()?;
        for (i, p) in prompts.iter().enumerate() {
            for (j, &c) in multi.iter().enumerate() {
                let row = &lp[i * multi.len() + j];
                let extra: f32 = choices[c][1..]
                    .iter()
                    .enumerate()
                    .map(|(k, &tok)| row[p.len() + k][tok as usize])
                    .sum();
                out[i][c] += extra;
            }
        }
    }
    Ok((out, values))
}

/// [`score`] for every row, one batched forward per adapter group: rows whose role has an
/// adapter run with it, the others on the base model. Also returns the forwards run.
fn score_grouped(
    r: &Ready,
    device: &Device,
    prompts: &[Vec<u32>],
    roles: &[u8],
    choices: &[Vec<u32>],
    tokens: &mut u64,
) -> Result<(Vec<Vec<f32>>, Vec<Option<f32>>, u64), LmError> {
    let mut groups: std::collections::BTreeMap<Option<u8>, Vec<usize>> = Default::default();
    for (i, &role) in roles.iter().enumerate() {
        let key = r
            .adapters
            .get(usize::from(role))
            .and_then(|a| a.as_ref())
            .map(|_| role);
        groups.entry(key).or_default().push(i);
    }
    let adapter_of = |key: Option<u8>| key.and_then(|k| r.adapters[usize::from(k)].as_ref());
    // The usual case, one group: score the prompts as they are, without regrouping copies.
    if groups.len() == 1
        && let Some((&key, _)) = groups.first_key_value()
    {
        let (s, v) = score(r, device, prompts, choices, adapter_of(key), tokens)?;
        let values = (0..prompts.len())
            .map(|i| v.as_ref().and_then(|v| v.get(i).copied()))
            .collect();
        return Ok((s, values, 1));
    }
    let mut scores = vec![Vec::new(); prompts.len()];
    let mut values = vec![None; prompts.len()];
    for (&key, rows) in &groups {
        let sub: Vec<Vec<u32>> = rows.iter().map(|&i| prompts[i].clone()).collect();
        let (s, v) = score(r, device, &sub, choices, adapter_of(key), tokens)?;
        for ((j, &i), row) in rows.iter().enumerate().zip(s) {
            scores[i] = row;
            values[i] = v.as_ref().and_then(|v| v.get(j).copied());
        }
    }
    Ok((scores, values, groups.len() as u64))
}

impl Policy for LmPolicy {
    fn setup(&mut self, scene: &Scene, actions: &[String]) -> Result<(), String> {
        self.ready = Some(self.prepare(scene, actions).map_err(|e| e.to_string())?);
        Ok(())
    }

    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        self.decide_with_suffix(batch, &[]);
    }

    fn stats(&self) -> Option<PolicyStats> {
        Some(self.stats)
    }
    fn adapter(&self, role: u8) -> Option<String> {
        let a = self
            .ready
            .as_ref()?
            .adapters
            .get(usize::from(role))?
            .as_ref()?;
        Some(format!(
            "LoRA rank {} on {}",
            a.config.r,
            a.config.target_modules.join(", ")
        ))
    }
}

impl LmPolicy {
    /// Decides like [`Policy::decide`], with `suffix[i]` (when given) appended to decision
    /// `i`'s observation text: what the model reads, and what its trace records.
    pub fn decide_with_suffix(&mut self, batch: &mut [Decision<'_>], suffix: &[Option<String>]) {
        let Some(r) = &self.ready else {
            return;
        };
        let start = Instant::now();
        let mut unencodable = 0u64;
        let mut texts: Vec<String> = batch
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let who = Speaker {
                    team: d.team,
                    role: d.role,
                };
                let mut text = r.format.render(who, d.obs, d.mask, d.last_reward);
                if let Some(Some(extra)) = suffix.get(i) {
                    text.push_str(extra);
                }
                text
            })
            .collect();
        let prompts: Vec<Vec<u32>> = texts
            .iter()
            .map(|text| {
                encode(&r.tokenizer, text).unwrap_or_else(|_| {
                    unencodable += 1;
                    vec![r.pad]
                })
            })
            .collect();
        self.stats.errors += unencodable;
        let mut tokens = 0u64;
        let roles: Vec<u8> = batch.iter().map(|d| d.role).collect();
        let Ok((scores, values, mut forwards)) =
            score_grouped(r, &self.device, &prompts, &roles, &r.actions, &mut tokens)
        else {
            self.stats.errors += 1;
            return;
        };
        for (i, ((d, s), p)) in batch.iter_mut().zip(&scores).zip(&prompts).enumerate() {
            let mask = d.mask;
            let (a, probs, logprob, entropy) = sample(s, |i| mask.allows(i as u8), d.rng);
            d.action.0 = a as u8;
            d.trace.tokens.clone_from(p);
            d.trace.text = std::mem::take(&mut texts[i]);
            d.trace.logprob = logprob;
            d.trace.entropy = entropy;
            d.trace.probs = probs;
            d.trace.value = values[i];
        }
        if let Some((words, say)) = &r.words {
            let talk: Vec<Vec<u32>> = batch
                .iter()
                .zip(&prompts)
                .map(|(d, p)| {
                    let mut q = p.clone();
                    q.extend(&r.actions[usize::from(d.action.0)]);
                    q.extend(say);
                    q
                })
                .collect();
            let talked = score_grouped(r, &self.device, &talk, &roles, words, &mut tokens);
            if talked.is_err() {
                self.stats.errors += 1;
            }
            if let Ok((scores, _, f)) = talked {
                forwards += f;
                for (d, s) in batch.iter_mut().zip(&scores) {
                    let (w, ..) = sample(s, |_| true, d.rng);
                    if let Some(say) = d.say.as_deref_mut() {
                        say.0 = Some(w as u8);
                    }
                }
            }
        }
        self.stats.decisions += batch.len() as u64;
        self.stats.tokens += tokens;
        self.stats.forwards += forwards;
        self.stats.seconds += start.elapsed().as_secs_f64();
    }
}
