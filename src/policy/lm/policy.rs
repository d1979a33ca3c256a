//! The language-model policy: every agent bound to it, across every arena, is decided in
//! ONE batched forward per step. Prompts are the observation texts ([`crate::observe::text`])
//! tokenized and right-padded (with a causal mask, real tokens never see the padding and keep
//! their positions, so a padded row gives exactly the logits it would alone). Actions are
//! words: each legal action word is scored by the sum of its tokens' log-probabilities after
//! the prompt, illegal ones are masked, and the action is sampled from the agent's own stream.
//! The trace keeps the prompt tokens, the log-probability of the choice, the entropy of the
//! masked distribution, the probabilities and the value-head estimate. In the maze what to
//! say is then chosen the same way, after the prompt, the chosen action and `say`: silence
//! (the end-of-text token `<eos>`: nothing more to say) or one of the scene's words; the
//! choice and its log-probability are kept, and training counts them as part of the
//! decision (a tokenizer without `<eos>` offers no silence, and its words are not trained).
//! On the CPU the word's pass runs only the action's and `say`'s tokens: the action's pass
//! keeps every layer's keys and values of the prompts, and the continuation reads them
//! ([`Decoder::extend_last_hidden`]; 1.6x the decisions a second on the corridor pair).
//! When the
//! model folder holds LoRA adapters for roles (`adapters/<role>/`) or for agents
//! (`adapters/agent_<slot>/`), each agent runs with its adapter, still in one batched
//! forward: the base projections run once over every prompt, each adapter's low-rank update
//! over its own prompts.
//!
//! Over 600 lines: the policy's preparation (model folder, tokenizer, action and word
//! tokens, adapters) and its batched decision (prompts, one forward, scores, talk, sampling,
//! the checks of its numbers) share one `Ready` state; the model and its passes are apart
//! (`model.rs`, `forward.rs`, `cpu/`).

use candle_core::{D, Device, Tensor, Var};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokenizers::Tokenizer;

use super::cpu::infer::KvCache;
use super::folder::ModelFolder;
use super::lora::{Adapter, AdapterOwner};
use super::model::{Decoder, Lora, Pass};
use super::tokenizer::encode;
use super::{LmConfig, LmError, Preset};
use crate::observe::text::{Speaker, TextFormat};
use crate::policy::sampling::choose;
use crate::policy::{Decision, Policy, PolicyStats};
use crate::scene::Scene;

pub mod memory;

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

impl ModelSource {
    /// Names the model in messages: `model folder PATH` or `the embedded tiny model`.
    pub fn describe(&self) -> String {
        match self {
            ModelSource::Embedded { preset, .. } => {
                format!(
                    "the embedded {} model",
                    format!("{preset:?}").to_lowercase()
                )
            }
            ModelSource::Folder(dir) => format!("model folder {}", dir.display()),
        }
    }
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
    /// Families with talk whose choices are one token each: the token of every choice
    /// (silence, `<eos>`, first, then the scene's words) and the ids of `say`.
    pub talk: Option<(Vec<u32>, Vec<u32>)>,
    /// The padding token.
    pub pad: u32,
    /// LoRA adapters being trained, one per owner (role or agent slot) in index order (empty
    /// when the whole model is trained).
    pub adapters: Vec<NamedAdapter>,
    /// What the adapters belong to.
    pub owner: AdapterOwner,
    /// Past turns each agent reads (`memory:`): with memory, the decisions of an agent's
    /// episode whose contexts continue one another are scored in one pass.
    pub memory: usize,
}

/// A LoRA adapter opened for training: `A` and `B` of every adapted module as variables that
/// the policy reads in place.
pub struct NamedAdapter {
    /// Its folder name under `adapters/`: the role's name, or `agent_<slot>`.
    pub name: String,
    /// The adapter's configuration.
    pub config: super::LoraConfig,
    /// `(module, A, B)`.
    pub vars: Vec<(String, Var, Var)>,
}

impl NamedAdapter {
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

/// What agents of a family with talk may say.
struct Talk {
    /// The token ids of each choice: silence (`<eos>`) first when the tokenizer has it,
    /// then the scene's words.
    choices: Vec<Vec<u32>>,
    /// The ids of `say`, which the talk prompt ends with.
    say: Vec<u32>,
    /// Whether the first choice is silence.
    silence: bool,
    /// Each choice as text (`<eos>` for silence): what an agent with memory's context says
    /// it chose.
    words: Vec<String>,
}

struct Ready {
    decoder: Decoder,
    tokenizer: Tokenizer,
    format: TextFormat,
    /// Token ids of each action word.
    actions: Vec<Vec<u32>>,
    /// Families with talk: what agents may say.
    words: Option<Talk>,
    pad: u32,
    /// A LoRA adapter per owner index (role or slot), from `adapters/<name>/` of the model
    /// folder or being trained.
    adapters: Vec<Option<Adapter>>,
    /// What the adapters belong to.
    owner: AdapterOwner,
    /// Past turns each agent reads (`memory:`; 0: this step's text alone).
    memory: usize,
    /// With memory: the scene's constant lines, read once at the front of each context, and
    /// their tokens.
    header: (String, Vec<u32>),
}

/// A language-model policy.
pub struct LmPolicy {
    source: ModelSource,
    device: Device,
    ready: Option<Ready>,
    stats: PolicyStats,
    /// The first failure ([`Policy::failure`]).
    failure: Option<String>,
    train: Option<TrainHandle>,
    lora: Option<(super::LoraConfig, AdapterOwner)>,
    /// With memory: each agent's episode so far ([`memory`]).
    conversations: std::collections::BTreeMap<crate::core::Agent, memory::Conversation>,
    /// While [`Policy::follow`] runs: keep the choices in the batch (a teacher's).
    follow: bool,
}

impl LmPolicy {
    /// A policy whose model comes from `source`, run on `device`.
    pub fn new(source: ModelSource, device: Device) -> Self {
        Self {
            source,
            device,
            ready: None,
            stats: PolicyStats::default(),
            failure: None,
            train: None,
            lora: None,
            conversations: Default::default(),
            follow: false,
        }
    }

    /// With a trainer: train a LoRA adapter of this shape per role or per agent over the
    /// frozen base (one whose `adapters/<name>/` exists in the model folder continues from
    /// it).
    pub fn with_lora(mut self, lora: super::LoraConfig, owner: AdapterOwner) -> Self {
        self.lora = Some((lora, owner));
        self
    }

    /// A policy whose weights a trainer updates through `handle` (filled at setup).
    pub fn with_handle(source: ModelSource, device: Device, handle: TrainHandle) -> Self {
        let mut p = Self::new(source, device);
        p.train = Some(handle);
        p
    }

    /// The `lm` policy as a registry factory: `source` on `device`, giving its weights to a
    /// trainer through `handle` when there is one.
    pub fn factory(
        source: ModelSource,
        device: Device,
        handle: Option<TrainHandle>,
    ) -> crate::policy::PolicyFactory {
        crate::policy::PolicyFactory(std::sync::Arc::new(move || {
            Box::new(match &handle {
                Some(h) => Self::with_handle(source.clone(), device.clone(), h.clone()),
                None => Self::new(source.clone(), device.clone()),
            })
        }))
    }

    /// What a command's `--model` and `--device` ask of the `lm` policy, as a name and a
    /// factory for the runner's `policies`; `None` when they ask for the catalogue's own (the
    /// embedded tiny model, seed 0, on the CPU).
    pub fn for_command(
        model: Option<ModelSource>,
        device: Device,
    ) -> Option<(String, crate::policy::PolicyFactory)> {
        let tiny = ModelSource::Embedded {
            preset: super::Preset::Tiny,
            seed: 0,
        };
        let source = model.unwrap_or(tiny.clone());
        if source == tiny && matches!(device, Device::Cpu) {
            return None;
        }
        Some(("lm".into(), Self::factory(source, device, None)))
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
        if let ModelSource::Folder(_) = &self.source {
            super::tokenizer::warn_unknown_scene_words(&folder.tokenizer, scene, &tpath);
        }
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
        let words = match crate::envs::family::of(scene).vocabulary(scene) {
            Some(vocabulary) => {
                let say = words_of(&["say".to_string()], "word")?.remove(0);
                let silence = folder.tokenizer.token_to_id("<eos>");
                let choices = silence
                    .map(|e| vec![e])
                    .into_iter()
                    .chain(words_of(&vocabulary, "vocabulary word")?)
                    .collect();
                let words = silence
                    .map(|_| "<eos>".to_string())
                    .into_iter()
                    .chain(vocabulary.iter().cloned())
                    .collect();
                Some(Talk {
                    choices,
                    say,
                    silence: silence.is_some(),
                    words,
                })
            }
            None => None,
        };
        // Training scores single-token choices after the talk prompt (the embedded
        // tokenizer's words are one token each), with silence first.
        let talk_ids = words.as_ref().and_then(|t| {
            (t.silence && t.choices.iter().all(|c| c.len() == 1))
                .then(|| (t.choices.iter().map(|c| c[0]).collect(), t.say.clone()))
        });
        let pad = folder
            .tokenizer
            .token_to_id("<pad>")
            .or_else(|| folder.tokenizer.token_to_id("<|endoftext|>"))
            .unwrap_or(0);
        let owner = match (&self.lora, &self.source) {
            (Some((_, owner)), _) => *owner,
            (None, ModelSource::Folder(dir)) => AdapterOwner::of_folder(dir),
            (None, ModelSource::Embedded { .. }) => AdapterOwner::Role,
        };
        let names = owner.names(scene);
        let adapters = match &self.source {
            ModelSource::Folder(dir) => names
                .iter()
                .map(|name| {
                    let a = dir.join("adapters").join(name);
                    a.exists()
                        .then(|| Adapter::load(&a, &folder.config, &self.device))
                        .transpose()
                })
                .collect::<Result<Vec<_>, _>>()?,
            ModelSource::Embedded { .. } => Vec::new(),
        };
        let mut adapters = adapters;
        let mut trained = Vec::new();
        if let (Some((lora, _)), Some(_)) = (&self.lora, &self.train) {
            adapters.resize(names.len(), None);
            for (i, name) in names.iter().enumerate() {
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
                let ra = NamedAdapter {
                    name: name.clone(),
                    config: a.config.clone(),
                    vars,
                };
                adapters[i] = Some(ra.detached());
                trained.push(ra);
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
                    talk: talk_ids,
                    pad,
                    adapters: trained,
                    owner,
                    memory: scene.spec.memory as usize,
                });
                decoder
            }
        };
        let format = TextFormat::new(scene, actions);
        let memory = scene.spec.memory as usize;
        let header_text = if memory > 0 {
            format.constant_lines().to_string()
        } else {
            String::new()
        };
        let header_ids =
            encode(&folder.tokenizer, &header_text).map_err(|msg| LmError::Tokenizer {
                path: tpath.clone(),
                msg: format!("cannot encode the scene's constant lines: {msg}"),
            })?;
        Ok(Ready {
            adapters,
            owner,
            decoder,
            tokenizer: folder.tokenizer,
            memory,
            header: (header_text, header_ids),
            format,
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
    lora: Lora<'_>,
    keep: Option<&mut Option<KvCache>>,
) -> Result<(Tensor, Option<Vec<f32>>), LmError> {
    let kept = match keep {
        Some(keep) => r
            .decoder
            .last_hidden_kept(prompts, lora)?
            .map(|(h, cache)| {
                *keep = Some(cache);
                h
            }),
        None => None,
    };
    let h = match kept {
        Some(h) => h,
        None => r.decoder.last_hidden(prompts, r.pad, Pass::Fast, lora)?,
    };
    let logits = r.decoder.head(&h)?;
    let values = match r.decoder.value(&h)? {
        Some(v) => Some(v.flatten_all()?.to_vec1::<f32>()?),
        None => None,
    };
    Ok((candle_nn::ops::log_softmax(&logits, D::Minus1)?, values))
}

/// Scores of `choices` (token sequences) after each prompt: the sum of their tokens'
/// log-probabilities. One forward for single-token choices; multi-token choices add a second
/// batched forward over the prompts extended by each choice. With `keep`, the first
/// forward's keys and values are kept there where the fast path ran it.
#[allow(clippy::too_many_arguments)]
fn score(
    r: &Ready,
    device: &Device,
    prompts: &[Vec<u32>],
    choices: &[Vec<u32>],
    lora: Lora<'_>,
    tokens: &mut u64,
    keep: Option<&mut Option<KvCache>>,
) -> Result<(Vec<Vec<f32>>, Option<Vec<f32>>), LmError> {
    let (lp, values) = next_logprobs(r, prompts, lora, keep)?;
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
        // Each continuation reads its prompt's adapter.
        let each: Vec<Option<&Adapter>> = match lora {
            Lora::Each(each) => each
                .iter()
                .flat_map(|&a| std::iter::repeat_n(a, multi.len()))
                .collect(),
            _ => Vec::new(),
        };
        let row_lora = match lora {
            Lora::Each(_) => Lora::Each(&each),
            other => other,
        };
        let lp = candle_nn::ops::log_softmax(
            &r.decoder.forward_with(&ids, None, Pass::Fast, row_lora)?,
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

/// [`score`] for every row in one batched forward, each row with the adapter of its owner
/// (`owners[i]`, a role or slot index; rows whose owner has none read the base model alone).
/// Rows are grouped by adapter for the forward (one low-rank update per group) and the
/// results put back in order. Also returns the forwards run. With `keep`, the forward's keys
/// and values are kept there (with the order its rows were in) where the fast path ran it.
#[allow(clippy::too_many_arguments)]
fn score_owned(
    r: &Ready,
    device: &Device,
    prompts: &[Vec<u32>],
    owners: &[usize],
    choices: &[Vec<u32>],
    tokens: &mut u64,
    keep: Option<&mut Option<Kept>>,
) -> Result<(Vec<Vec<f32>>, Vec<Option<f32>>, u64), LmError> {
    let mut cache = None;
    let want = keep.is_some();
    let adapter_of = |i: usize| r.adapters.get(owners[i]).and_then(Option::as_ref);
    let values_of = |v: Option<Vec<f32>>, n: usize| -> Vec<Option<f32>> {
        (0..n)
            .map(|i| v.as_ref().and_then(|v| v.get(i).copied()))
            .collect()
    };
    // The usual case, one adapter (or none) for every row: score the prompts as they are.
    let first = (!prompts.is_empty()).then(|| adapter_of(0)).flatten();
    let same = |a: Option<&Adapter>| match (a, first) {
        (None, None) => true,
        (Some(a), Some(b)) => std::ptr::eq(a, b),
        _ => false,
    };
    if (0..prompts.len()).all(|i| same(adapter_of(i))) {
        let kept = want.then_some(&mut cache);
        let (s, v) = score(r, device, prompts, choices, first.into(), tokens, kept)?;
        if let Some(keep) = keep {
            *keep = cache.map(|cache| Kept { cache, order: None });
        }
        return Ok((s, values_of(v, prompts.len()), 1));
    }
    let mut order: Vec<usize> = (0..prompts.len()).collect();
    order.sort_by_key(|&i| adapter_of(i).map(|_| owners[i]));
    let sorted: Vec<Vec<u32>> = order.iter().map(|&i| prompts[i].clone()).collect();
    let each: Vec<Option<&Adapter>> = order.iter().map(|&i| adapter_of(i)).collect();
    let kept = want.then_some(&mut cache);
    let (s, v) = score(r, device, &sorted, choices, Lora::Each(&each), tokens, kept)?;
    let v = values_of(v, prompts.len());
    let mut scores = vec![Vec::new(); prompts.len()];
    let mut values = vec![None; prompts.len()];
    for ((&i, row), value) in order.iter().zip(s).zip(v) {
        scores[i] = row;
        values[i] = value;
    }
    if let Some(keep) = keep {
        *keep = cache.map(|cache| Kept {
            cache,
            order: Some(order),
        });
    }
    Ok((scores, values, 1))
}

/// What the action's forward keeps for the word's: its keys and values, and the order its
/// rows were in (sorted by adapter, or as given when every row read the same one).
struct Kept {
    cache: KvCache,
    order: Option<Vec<usize>>,
}

/// The scores of single-token `choices` after each prompt of `kept` continued by `ext[i]`
/// (decision `i`'s; in the decisions' order), computing only the continuations' tokens
/// ([`Decoder::extend_last_hidden`]): what [`score_owned`] gives for the continued prompts.
/// `None` where that cannot run (a choice of several tokens; the fast path declined), where
/// the caller scores the continued prompts in full.
fn score_continued(
    r: &Ready,
    kept: &Kept,
    ext: &[Vec<u32>],
    owners: &[usize],
    choices: &[Vec<u32>],
    tokens: &mut u64,
) -> Result<Option<Vec<Vec<f32>>>, LmError> {
    if choices.iter().any(|c| c.len() != 1) {
        return Ok(None);
    }
    let adapter_of = |i: usize| r.adapters.get(owners[i]).and_then(Option::as_ref);
    let identity: Vec<usize>;
    let order: &[usize] = match &kept.order {
        Some(order) => order,
        None => {
            identity = (0..ext.len()).collect();
            &identity
        }
    };
    let rows: Vec<&[u32]> = order.iter().map(|&i| ext[i].as_slice()).collect();
    let each: Vec<Option<&Adapter>> = order.iter().map(|&i| adapter_of(i)).collect();
    // The kept pass's adapters: one per row where it sorted them, else the first row's for all.
    let lora = match &kept.order {
        Some(_) => Lora::Each(&each),
        None => each.first().copied().flatten().into(),
    };
    let Some(h) = r.decoder.extend_last_hidden(&kept.cache, &rows, lora)? else {
        return Ok(None);
    };
    *tokens += rows.iter().map(|e| e.len() as u64).sum::<u64>();
    let lp = candle_nn::ops::log_softmax(&r.decoder.head(&h)?, D::Minus1)?.to_vec2::<f32>()?;
    let mut out = vec![Vec::new(); ext.len()];
    for (&i, row) in order.iter().zip(&lp) {
        out[i] = choices.iter().map(|c| row[c[0] as usize]).collect();
    }
    Ok(Some(out))
}

impl Policy for LmPolicy {
    fn setup(&mut self, scene: &Scene, actions: &[String]) -> Result<(), String> {
        self.ready = Some(self.prepare(scene, actions).map_err(|e| e.to_string())?);
        Ok(())
    }

    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        self.decide_with_suffix(batch, &[]);
    }

    fn follow(&mut self, batch: &mut [Decision<'_>]) -> Result<(), String> {
        self.follow = true;
        self.decide_with_suffix(batch, &[]);
        self.follow = false;
        Ok(())
    }

    fn stats(&self) -> Option<PolicyStats> {
        Some(self.stats)
    }
    fn failure(&self) -> Option<String> {
        self.failure.clone()
    }
    fn adapter(&self, role: u8, slot: u16) -> Option<String> {
        let r = self.ready.as_ref()?;
        let a = r.adapters.get(r.owner.index(role, slot))?.as_ref()?;
        let per = match r.owner {
            AdapterOwner::Role => "role",
            AdapterOwner::Agent => "agent",
        };
        Some(format!(
            "LoRA rank {} per {per} on {}",
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
        if batch.is_empty() {
            return;
        }
        if r.memory > 0 {
            self.decide_with_memory(batch, suffix);
            return;
        }
        let start = Instant::now();
        // Counted from here: the thread may have run other forwards (a trainer's reference).
        super::cpu::infer::take_shared_tokens();
        let mut unencodable = 0u64;
        let mut texts: Vec<String> = batch
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let who = Speaker {
                    team: d.team,
                    role: d.role,
                };
                let mut text = r.format.render(who, d.obs, d.senses, d.mask, d.last_reward);
                if let Some(Some(extra)) = suffix.get(i) {
                    text.push_str(extra);
                }
                text
            })
            .collect();
        let mut failure = None;
        let prompts: Vec<Vec<u32>> = texts
            .iter()
            .map(|text| {
                encode(&r.tokenizer, text).unwrap_or_else(|e| {
                    unencodable += 1;
                    failure.get_or_insert_with(|| {
                        format!("the tokenizer cannot encode the observation {text:?}: {e}")
                    });
                    vec![r.pad]
                })
            })
            .collect();
        self.stats.errors += unencodable;
        let model = self.source.describe();
        if let Some(f) = failure {
            self.failure.get_or_insert(format!("{model}: {f}"));
        }
        let mut tokens = 0u64;
        let owners: Vec<usize> = batch
            .iter()
            .map(|d| r.owner.index(d.role, d.agent.slot))
            .collect();
        // With talk, the action's forward keeps its keys and values for the word's.
        let mut kept = None;
        let keep = r.words.is_some().then_some(&mut kept);
        let (scores, values, mut forwards) = match score_owned(
            r,
            &self.device,
            &prompts,
            &owners,
            &r.actions,
            &mut tokens,
            keep,
        ) {
            Ok(scored) => scored,
            Err(e) => {
                self.stats.errors += 1;
                self.failure.get_or_insert(format!("{model}: {e}"));
                return;
            }
        };
        if let Err(f) = take_actions(batch, &scores, &values, &prompts, &mut texts, self.follow) {
            self.stats.errors += 1;
            self.failure.get_or_insert(format!("{model}: {f}"));
            return;
        }
        if let Some(Talk {
            choices: words,
            say,
            silence,
            ..
        }) = &r.words
        {
            // The word after the prompt, the chosen action and `say`: the prompt's keys and
            // values are the action pass's, so only the action's and `say`'s tokens are run.
            let ext: Vec<Vec<u32>> = batch
                .iter()
                .map(|d| {
                    let mut q = r.actions[usize::from(d.action.0)].clone();
                    q.extend(say);
                    q
                })
                .collect();
            let continued = match &kept {
                Some(kept) => score_continued(r, kept, &ext, &owners, words, &mut tokens)
                    .map(|s| s.map(|s| (s, Vec::new(), 1))),
                None => Ok(None),
            };
            let talked = match continued {
                Ok(Some(scored)) => Ok(scored),
                Err(e) => Err(e),
                Ok(None) => {
                    let talk: Vec<Vec<u32>> = prompts
                        .iter()
                        .zip(&ext)
                        .map(|(p, e)| p.iter().chain(e).copied().collect())
                        .collect();
                    score_owned(r, &self.device, &talk, &owners, words, &mut tokens, None)
                }
            };
            if let Err(e) = &talked {
                self.stats.errors += 1;
                self.failure.get_or_insert(format!("{model}: {e}"));
            }
            if let Ok((scores, _, f)) = talked {
                forwards += f;
                take_words(batch, &scores, *silence, self.follow);
            }
        }
        self.stats.decisions += batch.len() as u64;
        self.stats.tokens += tokens;
        self.stats.shared_tokens += super::cpu::infer::take_shared_tokens();
        self.stats.forwards += forwards;
        self.stats.seconds += start.elapsed().as_secs_f64();
    }
}

/// Samples each decision's action from its scores (masked to the legal ones) with the
/// agent's stream, or with `follow` keeps the action in the decision (a teacher's), and
/// writes its trace (`prompts[i]` and `texts[i]`, what it read); the failure's words where
/// the scores are not a distribution (NaN weights).
fn take_actions(
    batch: &mut [Decision<'_>],
    scores: &[Vec<f32>],
    values: &[Option<f32>],
    prompts: &[Vec<u32>],
    texts: &mut [String],
    follow: bool,
) -> Result<(), String> {
    {
        if let Some((d, (i, v))) = batch.iter().zip(scores).find_map(|(d, s)| {
            let mask = d.mask;
            crate::policy::sampling::first_non_finite(s, |i| mask.allows(i as u8))
                .map(|bad| (d, bad))
        }) {
            return Err(format!(
                "its action distribution is not a distribution (score {v} for action \
                 {i} of agent {} in arena {}): its weights hold NaN or infinities; stopped",
                d.agent.slot, d.agent.arena
            ));
        }
        for (i, ((d, s), p)) in batch.iter_mut().zip(scores).zip(prompts).enumerate() {
            let mask = d.mask;
            let given = follow.then_some(usize::from(d.action.0));
            let (a, probs, logprob, entropy) = choose(s, |i| mask.allows(i as u8), d.rng, given);
            d.action.0 = a as u8;
            d.trace.tokens.clone_from(p);
            d.trace.text = std::mem::take(&mut texts[i]);
            d.trace.logprob = logprob;
            d.trace.entropy = entropy;
            d.trace.probs = probs;
            d.trace.value = values[i];
            d.trace.said = None;
            d.trace.said_logprob = 0.0;
        }
        Ok(())
    }
}

/// Samples each decision's word from its scores (silence first where `silence`) with the
/// agent's stream, or with `follow` keeps the word it says (a teacher's): what it says, and,
/// with silence among the choices, the choice and its log-probability in its trace.
fn take_words(
    batch: &mut [Decision<'_>],
    scores: &[Vec<f32>],
    silence: bool,
    follow: bool,
) -> Vec<usize> {
    let mut chosen = Vec::with_capacity(batch.len());
    for (d, s) in batch.iter_mut().zip(scores) {
        let said = d.say.as_deref().and_then(|u| u.0).map(usize::from);
        let given = follow.then(|| match said {
            Some(k) if silence => k + 1,
            Some(k) => k,
            None => 0,
        });
        let (w, _, logprob, _) = choose(s, |_| true, d.rng, given);
        chosen.push(w);
        if let Some(say) = d.say.as_deref_mut() {
            if silence {
                say.0 = w.checked_sub(1).map(|k| k as u8);
                d.trace.said = Some(w as u8);
                d.trace.said_logprob = logprob;
            } else {
                say.0 = Some(w as u8);
            }
        }
    }
    chosen
}
