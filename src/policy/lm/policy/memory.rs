//! Memory: an episode is one conversation (`memory: N`, `--memory N`). An agent's context is
//! the scene's constant lines once ([`crate::observe::text::TextFormat::constant_lines`]), then its episode's turns,
//! oldest first, then this step's observation; a turn is a step's observation text
//! ([`crate::observe::text::TextFormat::render_turn`]) followed by the tokens the agent chose after it (its action
//! word, and where it talks `say` and its word, `<eos>` for silence). Its text is what the
//! trace, the window's inspector and the training batch hold.
//!
//! **Which turns are kept.** The last `N` past turns: when a step would make `N + 1`, the
//! oldest drops; more drop if the context would not fit the model's positions with room for
//! the choice. `N` at least the episode's length keeps every turn.
//!
//! **Keys and values, and positions: a sliding window.** Each agent keeps its context's keys
//! and values from step to step ([`RowKv`]): a step computes only the tokens after those (the
//! previous choice's and this observation's), every agent of the batch in one forward
//! ([`crate::policy::lm::Decoder::continue_rows`]), and a talking agent's word reads the
//! same cache continued by its action and `say`. A dropped turn's keys and values leave the
//! cache and every other token keeps its position (rotary positions count on through the
//! episode), as in Mistral's sliding-window attention with the constant lines kept in front
//! as StreamingLLM keeps its first tokens: a token sees the constant lines and the turns kept
//! when it was computed. So a step costs one turn's tokens, whatever `N`. Its state still
//! carries, through the layers, what dropped turns said (the window of a layer's input is
//! the previous layer's): the context's text is what the model attends to, not all it
//! was told. When the next positions would pass the model's, the context (the constant
//! lines and the kept turns) is read afresh from position 0, and a new window begins.
//!
//! Training rebuilds each window from the decisions' [`crate::core::ContextRead`]s and
//! scores all its decisions in one pass where each token sees what it saw when computed
//! ([`crate::policy::lm::Decoder::hidden_banded`]), the states the policy computed (tested
//! against the step-by-step pass). Where the cached pass cannot run (another device,
//! actions of several tokens), each step reads its whole context afresh, a window of one
//! decision: exact too, with more tokens and no state from dropped turns.
//!
//! A new episode (an observation at step 0, or at a step no later than the last one read)
//! starts a new conversation.

use std::time::Instant;

use super::{LmPolicy, Ready, Talk, score_owned, take_actions, take_words};
use crate::core::ContextRead;
use crate::observe::text::Speaker;
use crate::observe::transcript::chosen_text;
use crate::policy::Decision;
use crate::policy::lm::cpu::infer::RowKv;
use crate::policy::lm::tokenizer::encode;
use crate::policy::lm::{Adapter, Lora};

/// One agent's episode so far.
pub(in crate::policy::lm) struct Conversation {
    /// The context: the constant lines, then the kept turns, as tokens and as text.
    tokens: Vec<u32>,
    text: String,
    /// Where each kept turn begins, in `tokens` and in `text`.
    turns: Vec<(usize, usize)>,
    /// The step of the observation read last.
    step: u32,
    /// The keys and values of the context's first `kv.len()` tokens.
    kv: RowKv,
    /// The length of the context the previous decision read, less the tokens dropped
    /// since: where the tokens it did not read begin.
    prev_end: usize,
}

impl Conversation {
    fn new((text, tokens): &(String, Vec<u32>)) -> Self {
        Self {
            tokens: tokens.clone(),
            text: text.clone(),
            turns: Vec::new(),
            step: 0,
            kv: RowKv::default(),
            prev_end: 0,
        }
    }

    /// Drops the oldest turns so that `keep` remain, and their keys and values (every later
    /// token keeps its position); where those did not cover them, the context is read again
    /// from its first token.
    fn keep_last(&mut self, (h_text, h_tokens): &(String, Vec<u32>), keep: usize) {
        let drop = self.turns.len().saturating_sub(keep);
        if drop == 0 {
            return;
        }
        let (t0, c0) = match self.turns.get(drop) {
            Some(&at) => at,
            None => (self.tokens.len(), self.text.len()),
        };
        let (ht, hc) = (h_tokens.len(), h_text.len());
        self.tokens.drain(ht..t0);
        self.text.drain(hc..c0);
        self.turns.drain(..drop);
        for t in &mut self.turns {
            t.0 -= t0 - ht;
            t.1 -= c0 - hc;
        }
        if self.kv.len() >= t0 {
            self.kv.evict(ht, t0 - ht);
        } else {
            self.kv.clear();
        }
        self.prev_end = self.prev_end.saturating_sub(t0 - ht);
    }
}

use crate::observe::transcript::turns_kept;

impl LmPolicy {
    /// [`LmPolicy::decide_with_suffix`] for agents with memory: each reads its context (see
    /// the module's header), computing only what its kept keys and values do not cover.
    pub(super) fn decide_with_memory(
        &mut self,
        batch: &mut [Decision<'_>],
        suffix: &[Option<String>],
    ) {
        let Some(r) = &self.ready else {
            return;
        };
        let start = Instant::now();
        crate::policy::lm::cpu::infer::take_shared_tokens();
        let model = self.source.describe();
        let max = r.decoder.config().max_position_embeddings;
        // Room after a context for the longest choice: an action, then `say` and a word.
        let longest = |c: &[Vec<u32>]| c.iter().map(Vec::len).max().unwrap_or(0);
        let room = longest(&r.actions)
            + r.words
                .as_ref()
                .map_or(0, |t| t.say.len() + longest(&t.choices));
        let mut prompts = Vec::with_capacity(batch.len());
        let mut texts = Vec::with_capacity(batch.len());
        for (i, d) in batch.iter().enumerate() {
            let who = Speaker {
                team: d.team,
                role: d.role,
            };
            let mut text = r
                .format
                .render_turn(who, d.obs, d.senses, d.mask, d.last_reward);
            if let Some(Some(extra)) = suffix.get(i) {
                text.push_str(extra);
            }
            let ids = match encode(&r.tokenizer, &text) {
                Ok(ids) => ids,
                Err(e) => {
                    self.stats.errors += 1;
                    self.failure.get_or_insert(format!(
                        "{model}: the tokenizer cannot encode the observation {text:?}: {e}"
                    ));
                    vec![r.pad]
                }
            };
            let conv = self
                .conversations
                .entry(d.agent)
                .or_insert_with(|| Conversation::new(&r.header));
            if d.obs.step == 0 || d.obs.step <= conv.step {
                *conv = Conversation::new(&r.header);
            }
            conv.keep_last(&r.header, turns_kept(conv.turns.len(), r.memory));
            while !conv.turns.is_empty() && conv.tokens.len() + ids.len() + room > max {
                conv.keep_last(&r.header, conv.turns.len() - 1);
            }
            conv.turns.push((conv.tokens.len(), conv.text.len()));
            conv.tokens.extend_from_slice(&ids);
            conv.text.push_str(&text);
            conv.step = d.obs.step;
            prompts.push(conv.tokens.clone());
            texts.push(conv.text.clone());
        }
        let owners: Vec<usize> = batch
            .iter()
            .map(|d| r.owner.index(d.role, d.agent.slot))
            .collect();
        let mut rows: Vec<RowKv> = batch
            .iter()
            .map(|d| {
                self.conversations
                    .get_mut(&d.agent)
                    .map(|c| std::mem::take(&mut c.kv))
                    .unwrap_or_default()
            })
            .collect();
        // A context whose next positions would pass the model's is read again from its
        // first token (at position 0).
        for (kv, p) in rows.iter_mut().zip(&prompts) {
            if kv.next_position() + p.len() - kv.len() + room > max {
                kv.clear();
            }
        }
        let mut tokens: u64 = prompts.iter().map(|p| p.len() as u64).sum();
        let kept: u64 = rows.iter().map(|k| k.len() as u64).sum();
        // Where each context's tokens computed at this step begin (0: read whole).
        let mut computed: Vec<usize> = rows.iter().map(RowKv::len).collect();
        let mut forwards = 1;
        // The cached pass, where every choice is a single token (the fast path scores the
        // first token of each); else every context read whole.
        let single = r.actions.iter().all(|a| a.len() == 1)
            && r.words
                .as_ref()
                .is_none_or(|t| t.choices.iter().all(|c| c.len() == 1));
        let cached = if single {
            let ext: Vec<&[u32]> = prompts
                .iter()
                .zip(&rows)
                .map(|(p, k)| &p[k.len()..])
                .collect();
            continued(r, &mut rows, &ext, &owners, &r.actions)
        } else {
            Ok(None)
        };
        // Tokens read from kept keys and values, not computed again (none on the fallback).
        let mut shared = 0;
        let scored = match cached {
            Ok(Some(s)) => {
                shared = kept;
                Ok(s)
            }
            Err(e) => Err(e),
            Ok(None) => {
                rows.iter_mut().for_each(RowKv::clear);
                computed.fill(0);
                score_owned(r, &self.device, &prompts, &owners, &r.actions, &mut 0, None)
                    .map(|(s, v, _)| (s, v))
            }
        };
        let (scores, values) = match scored {
            Ok(s) => s,
            Err(e) => {
                self.stats.errors += 1;
                self.failure.get_or_insert(format!("{model}: {e}"));
                self.put_back(batch, rows);
                return;
            }
        };
        let mut texts = texts;
        if let Err(f) = take_actions(batch, &scores, &values, &prompts, &mut texts, self.follow) {
            self.stats.errors += 1;
            self.failure.get_or_insert(format!("{model}: {f}"));
            self.put_back(batch, rows);
            return;
        }
        // What each agent chose, as tokens and as text, to end its turn.
        let mut chosen: Vec<(Vec<u32>, String)> = batch
            .iter()
            .map(|d| {
                let a = usize::from(d.action.0);
                (
                    r.actions[a].clone(),
                    r.format.actions().get(a).cloned().unwrap_or_default(),
                )
            })
            .collect();
        if let Some(Talk {
            choices,
            say,
            silence,
            words,
        }) = &r.words
        {
            let ext: Vec<Vec<u32>> = chosen
                .iter()
                .map(|(a, _)| a.iter().chain(say).copied().collect())
                .collect();
            tokens += ext.iter().map(|e| e.len() as u64).sum::<u64>();
            forwards += 1;
            let warm = rows.iter().all(|k| !k.is_empty());
            let talked = if warm {
                let refs: Vec<&[u32]> = ext.iter().map(Vec::as_slice).collect();
                continued(r, &mut rows, &refs, &owners, choices)
            } else {
                Ok(None)
            };
            let talked = match talked {
                Ok(Some((s, _))) => Ok(s),
                Err(e) => Err(e),
                Ok(None) => {
                    rows.iter_mut().for_each(RowKv::clear);
                    let talk: Vec<Vec<u32>> = prompts
                        .iter()
                        .zip(&ext)
                        .map(|(p, e)| p.iter().chain(e).copied().collect())
                        .collect();
                    score_owned(r, &self.device, &talk, &owners, choices, &mut 0, None)
                        .map(|(s, _, _)| s)
                }
            };
            match talked {
                Ok(scores) => {
                    let said = take_words(batch, &scores, *silence, self.follow);
                    for ((tokens, text), w) in chosen.iter_mut().zip(said) {
                        tokens.extend(say);
                        tokens.extend(&choices[w]);
                        *text = chosen_text(text, Some(&words[w]));
                    }
                }
                Err(e) => {
                    self.stats.errors += 1;
                    self.failure.get_or_insert(format!("{model}: {e}"));
                }
            }
        }
        let header = r.header.1.len() as u32;
        for ((d, (ids, text)), &from) in batch.iter_mut().zip(&chosen).zip(&computed) {
            if let Some(conv) = self.conversations.get_mut(&d.agent) {
                d.trace.read = Some(ContextRead {
                    header,
                    new_from: conv.prev_end as u32,
                    computed_from: from as u32,
                });
                conv.prev_end = conv.tokens.len();
                conv.tokens.extend_from_slice(ids);
                conv.text.push_str(text);
                conv.text.push('\n');
            }
        }
        self.put_back(batch, rows);
        self.stats.decisions += batch.len() as u64;
        self.stats.tokens += tokens;
        self.stats.shared_tokens += shared + crate::policy::lm::cpu::infer::take_shared_tokens();
        self.stats.forwards += forwards;
        self.stats.seconds += start.elapsed().as_secs_f64();
    }

    /// Gives each agent of `batch` its keys and values back.
    fn put_back(&mut self, batch: &[Decision<'_>], rows: Vec<RowKv>) {
        for (d, kv) in batch.iter().zip(rows) {
            if let Some(conv) = self.conversations.get_mut(&d.agent) {
                conv.kv = kv;
            }
        }
    }
}

/// The scores of single-token `choices` after each agent's kept keys and values continued by
/// `ext[i]` (appended to `rows[i]`), and the value head's estimates: `None` where the cached
/// pass cannot run.
fn continued(
    r: &Ready,
    rows: &mut [RowKv],
    ext: &[&[u32]],
    owners: &[usize],
    choices: &[Vec<u32>],
) -> Result<Option<(Vec<Vec<f32>>, Vec<Option<f32>>)>, crate::policy::lm::LmError> {
    let each: Vec<Option<&Adapter>> = owners
        .iter()
        .map(|&o| r.adapters.get(o).and_then(Option::as_ref))
        .collect();
    let first = each.first().copied().flatten();
    let same = each.iter().all(|a| match (a, first) {
        (None, None) => true,
        (Some(a), Some(b)) => std::ptr::eq(*a, b),
        _ => false,
    });
    let lora = if same {
        first.into()
    } else {
        Lora::Each(&each)
    };
    let Some(h) = r.decoder.continue_rows(rows, ext, lora)? else {
        return Ok(None);
    };
    let lp = candle_nn::ops::log_softmax(&r.decoder.head(&h)?, candle_core::D::Minus1)?
        .to_vec2::<f32>()?;
    let values = match r.decoder.value(&h)? {
        Some(v) => v
            .flatten_all()?
            .to_vec1::<f32>()?
            .into_iter()
            .map(Some)
            .collect(),
        None => vec![None; ext.len()],
    };
    let scores = lp
        .iter()
        .map(|row| choices.iter().map(|c| row[c[0] as usize]).collect())
        .collect();
    Ok(Some((scores, values)))
}
