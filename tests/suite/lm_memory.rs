//! Language-model agents with memory (an episode is one conversation): the passes it rests
//! on against scoring each context alone (one causal pass over a window gives every
//! decision's state and gradients; each agent's keys and values continued from step to step
//! give the state of its whole context) and against the step-by-step pass with the oldest
//! turns leaving the keys and values (one banded pass gives each state and the gradients of
//! candle's operations), the context a policy reads (the constant lines, the last turns in
//! order), and the trainer scoring what the policy sampled.

use crate::lm::{each_alone, max_abs_diff, trainable};
use candle_core::{Device, Tensor, Var};
use emergence::policy::lm::model::{Pass as Fwd, init_weights};
use emergence::policy::lm::{Adapter, Band, Decoder, LmConfig, Lora, LoraConfig, RowKv};
use std::path::Path;

fn small_config() -> LmConfig {
    LmConfig {
        vocab_size: 61,
        hidden_size: 32,
        intermediate_size: 48,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: Some(2),
        max_position_embeddings: 128,
        rope_theta: 10_000.0,
        rms_norm_eps: 1e-6,
        tie_word_embeddings: false,
        hidden_act: "silu".into(),
        value_head: true,
        architectures: vec![],
        model_type: "qwen2".into(),
    }
}

/// An adapter whose `B` is not zero (a fresh one changes nothing), over variables.
fn adapter(cfg: &LmConfig, seed: u64) -> (Vec<(String, Var, Var)>, Adapter) {
    let fresh = Adapter::init(cfg, LoraConfig::all(2), seed, &Device::Cpu).expect("adapter");
    let vars: Vec<(String, Var, Var)> = fresh
        .weights
        .iter()
        .map(|(k, (a, b))| {
            let b = (b + 0.05).expect("nudge");
            (
                k.clone(),
                Var::from_tensor(a).expect("a"),
                Var::from_tensor(&b).expect("b"),
            )
        })
        .collect();
    let read = Adapter {
        config: fresh.config.clone(),
        weights: vars
            .iter()
            .map(|(k, a, b)| (k.clone(), (a.as_tensor().clone(), b.as_tensor().clone())))
            .collect(),
    };
    (vars, read)
}

/// Three agents' windows: a header every one begins with, then turns (an observation and a
/// chosen token); each decision's context is a beginning of its window.
fn windows() -> (Vec<Vec<u32>>, Vec<Vec<usize>>) {
    let header: Vec<u32> = (0..6).map(|j| (j * 7 + 3) as u32 % 61).collect();
    let mut seqs = Vec::new();
    let mut at = Vec::new();
    for (agent, turns) in [3usize, 1, 4].into_iter().enumerate() {
        let mut seq = header.clone();
        let mut pos = Vec::new();
        for t in 0..turns {
            let obs = 3 + (agent + t) % 3;
            seq.extend((0..obs).map(|j| ((agent * 13 + t * 5 + j * 3 + 1) % 61) as u32));
            pos.push(seq.len() - 1);
            seq.push(((agent + t) % 4 + 50) as u32);
        }
        // The last decision's context ends the window (its choice not yet read).
        seq.pop();
        seqs.push(seq);
        at.push(pos);
    }
    (seqs, at)
}

/// One causal pass over each window gives every decision's state as its context alone gives
/// it, on the training path (the hand-written tape) and on the composed one, with the
/// header shared by the windows of a part and with an adapter per window; and the
/// gradients of a loss on those states are those of the same loss on each context alone,
/// reaching every trainable tensor (adapters included).
#[test]
fn one_pass_over_a_window_gives_each_decision_as_its_context_alone() {
    let cfg = small_config();
    let init = init_weights(&cfg, 21, &Device::Cpu).expect("init");
    let (vars, weights) = trainable(&init);
    let dec = Decoder::new(&cfg, &weights, Path::new("mem")).expect("decoder");
    let (avars, a) = adapter(&cfg, 5);
    let (seqs, at) = windows();
    let contexts: Vec<Vec<u32>> = seqs
        .iter()
        .zip(&at)
        .flat_map(|(s, pos)| pos.iter().map(|&p| s[..=p].to_vec()))
        .collect();
    for per_window in [vec![None, None, None], vec![Some(&a), None, Some(&a)]] {
        let per_context: Vec<Option<&Adapter>> = at
            .iter()
            .zip(&per_window)
            .flat_map(|(pos, &w)| std::iter::repeat_n(w, pos.len()))
            .collect();
        let alone = each_alone(&dec, &contexts, &per_context);
        // What a training step reads from the states: the head's log-probabilities and the
        // value (weighted so that no gradient cancels).
        let loss_of = |h: &Tensor| {
            let weighted = |x: &Tensor| {
                let w = Tensor::arange(0f32, x.elem_count() as f32, &Device::Cpu)
                    .and_then(|w| w.reshape(x.shape()))
                    .and_then(|w| (w * 0.01)?.sin())
                    .expect("weights");
                (x * w).and_then(|x| x.sum_all()).expect("sum")
            };
            let lp = candle_nn::ops::log_softmax(&dec.head(h).expect("head"), 1).expect("lp");
            let v = dec.value(h).expect("value").expect("a value head");
            ((weighted(&lp) + weighted(&v)).expect("sum") + weighted(h)).expect("loss")
        };
        let want = loss_of(&alone).backward().expect("backward");
        for path in [Fwd::Train, Fwd::Composed] {
            let h = dec
                .hidden_at(&seqs, &at, 0, path, Lora::Each(&per_window))
                .expect("one pass");
            assert_eq!(h.dims(), &[contexts.len(), cfg.hidden_size]);
            let d = max_abs_diff(&h, &alone);
            assert!(d < 1e-5, "{path:?}: the window's states differ by {d}");
            let got = loss_of(&h).backward().expect("backward");
            let named = vars.iter().map(|(n, v)| (n.clone(), v.clone()));
            let adapters = avars.iter().flat_map(|(n, va, vb)| {
                [
                    (format!("{n}.A"), va.clone()),
                    (format!("{n}.B"), vb.clone()),
                ]
            });
            let with_adapter = per_window.iter().any(Option::is_some);
            for (name, v) in named.chain(adapters.filter(|_| with_adapter)) {
                let (g, w) = (got.get(&v), want.get(&v));
                let (Some(g), Some(w)) = (g, w) else {
                    panic!(
                        "{path:?}: {name} has no gradient ({} / {})",
                        g.is_some(),
                        w.is_some()
                    );
                };
                let scale = w
                    .abs()
                    .and_then(|x| x.max_all())
                    .and_then(|x| x.to_scalar::<f32>());
                let scale = scale.expect("scale");
                assert!(scale > 0.0, "{name}: a zero gradient");
                let d = max_abs_diff(g, w);
                assert!(
                    d <= 1e-4 * scale.max(1.0),
                    "{path:?}: {name}'s gradient differs by {d} (largest {scale})"
                );
            }
        }
    }
    // Positions outside a sequence are refused.
    let bad = dec.hidden_at(
        &seqs,
        &[vec![0], vec![999], vec![1]],
        0,
        Fwd::Train,
        Lora::Base,
    );
    assert!(bad.is_err());
}

/// Each agent's keys and values continued from step to step give the state of its whole
/// context, as that context alone gives it: three steps of three agents (each step adds the
/// previous choice's and the new observation's tokens), one agent's context re-read from
/// position 0 at the third (its oldest turns dropped), with and without an adapter per
/// agent; where the cached pass declines (an empty continuation) the caches are left alone.
#[test]
fn keys_and_values_kept_from_step_to_step_give_each_whole_context() {
    let cfg = small_config();
    let w = init_weights(&cfg, 4, &Device::Cpu).expect("init");
    let dec = Decoder::new(&cfg, &w, Path::new("mem")).expect("decoder");
    let (_, a) = adapter(&cfg, 8);
    let header: Vec<u32> = (0..7).map(|j| (j * 5 + 2) as u32 % 61).collect();
    let turn = |agent: usize, t: usize| -> Vec<u32> {
        (0..3 + (agent + t) % 2)
            .map(|j| ((agent * 17 + t * 7 + j * 5 + 9) % 61) as u32)
            .collect()
    };
    for each in [vec![None; 3], vec![Some(&a), None, Some(&a)]] {
        let mut rows = vec![RowKv::default(); 3];
        let mut contexts: Vec<Vec<u32>> = vec![header.clone(); 3];
        for step in 0..3 {
            let mut ext = Vec::new();
            for (agent, c) in contexts.iter_mut().enumerate() {
                if step == 2 && agent == 1 {
                    // Its oldest turns dropped: the context from the header again.
                    *c = header.clone();
                    rows[agent].clear();
                }
                if step > 0 {
                    c.push(50 + agent as u32);
                }
                c.extend(turn(agent, step));
                ext.push(c[rows[agent].len()..].to_vec());
            }
            let refs: Vec<&[u32]> = ext.iter().map(Vec::as_slice).collect();
            let h = dec
                .continue_rows(&mut rows, &refs, Lora::Each(&each))
                .expect("continued")
                .expect("the cached pass runs on the CPU");
            let d = max_abs_diff(&h, &each_alone(&dec, &contexts, &each));
            assert!(d < 1e-5, "step {step}: {d}");
            for (r, c) in rows.iter().zip(&contexts) {
                assert_eq!(r.len(), c.len());
            }
        }
        let before: Vec<usize> = rows.iter().map(RowKv::len).collect();
        let declined = dec.continue_rows(&mut rows, &[&[1], &[], &[2]], Lora::Each(&each));
        assert!(matches!(declined, Ok(None)), "{declined:?}");
        assert_eq!(rows.iter().map(RowKv::len).collect::<Vec<_>>(), before);
    }
}

/// A sliding window: each agent's keys and values continued step by step while its oldest
/// turn leaves them once it has more than two (the other tokens keeping their positions)
/// give, at every step, what one banded pass over its whole episode gives
/// ([`Decoder::hidden_banded`]: each token sees the constant lines and the turns kept when it
/// was computed), on the training path and on candle's operations (an additive mask); and
/// the training path's gradients are candle's, reaching every weight.
#[test]
fn one_banded_pass_gives_the_sliding_windows_step_by_step_states() {
    let cfg = small_config();
    let init = init_weights(&cfg, 9, &Device::Cpu).expect("init");
    let (vars, weights) = trainable(&init);
    let dec = Decoder::new(&cfg, &weights, Path::new("band")).expect("decoder");
    let header: Vec<u32> = (0..5).map(|j| (j * 11 + 4) as u32 % 61).collect();
    let turn = |agent: usize, t: usize| -> Vec<u32> {
        (0..2 + (agent + t) % 3)
            .map(|j| ((agent * 19 + t * 3 + j * 7 + 2) % 61) as u32)
            .collect()
    };
    // Episodes past one attention block (64 rows), so that later blocks read the header
    // and their window apart.
    let (agents, steps, memory) = (3usize, 24usize, 2usize);
    let mut rows = vec![RowKv::default(); agents];
    // Per agent: the kept turns' token counts, the whole sequence, each row's window start,
    // and each decision's position in the sequence.
    let mut kept: Vec<Vec<usize>> = vec![Vec::new(); agents];
    let mut seqs: Vec<Vec<u32>> = vec![header.clone(); agents];
    let mut los: Vec<Vec<u32>> = vec![vec![0; header.len()]; agents];
    let mut at: Vec<Vec<usize>> = vec![Vec::new(); agents];
    let mut stepwise = Vec::new();
    for step in 0..steps {
        let mut ext = Vec::new();
        for a in 0..agents {
            // The previous choice ends the last turn; then the oldest turns leave.
            let mut new = Vec::new();
            if step > 0 {
                new.push(50 + (a + step) as u32 % 4);
                *kept[a].last_mut().expect("a turn") += 1;
            }
            while kept[a].len() > memory {
                let n = kept[a].remove(0);
                rows[a].evict(header.len(), n);
            }
            let obs = turn(a, step);
            new.extend(&obs);
            kept[a].push(obs.len());
            // Rows computed now see the header and what the cache keeps: the sequence's last
            // tokens past the header.
            let window = seqs[a].len() - rows[a].len().saturating_sub(header.len());
            seqs[a].extend(&new);
            los[a].extend(std::iter::repeat_n(window as u32, new.len()));
            at[a].push(seqs[a].len() - 1);
            ext.push(if step == 0 { seqs[a].clone() } else { new });
        }
        let refs: Vec<&[u32]> = ext.iter().map(Vec::as_slice).collect();
        let h = dec
            .continue_rows(&mut rows, &refs, Lora::Base)
            .expect("continued")
            .expect("the cached pass runs on the CPU");
        stepwise.push(h);
    }
    // Agent by agent, decision by decision, as `hidden_banded` gives them.
    let want = Tensor::stack(&stepwise, 1)
        .and_then(|t| t.reshape((agents * steps, cfg.hidden_size)))
        .expect("stack");
    let bands: Vec<Band<'_>> = los
        .iter()
        .map(|lo| Band {
            header: header.len(),
            lo,
        })
        .collect();
    // What a training step reads from the states: the head's log-probabilities and the
    // value (weighted so that no gradient cancels).
    let loss_of = |h: &Tensor| {
        let weighted = |x: &Tensor| {
            let w = Tensor::arange(0f32, x.elem_count() as f32, &Device::Cpu)
                .and_then(|w| w.reshape(x.shape()))
                .and_then(|w| (w * 0.013)?.cos())
                .expect("weights");
            (x * w).and_then(|x| x.sum_all()).expect("sum")
        };
        let lp = candle_nn::ops::log_softmax(&dec.head(h).expect("head"), 1).expect("lp");
        let v = dec.value(h).expect("value").expect("a value head");
        ((weighted(&lp) + weighted(&v)).expect("sum") + weighted(h)).expect("loss")
    };
    let mut grads = Vec::new();
    for path in [Fwd::Train, Fwd::Composed] {
        let h = dec
            .hidden_banded(&seqs, &at, &bands, 0, path, Lora::Base)
            .expect("one pass");
        let d = max_abs_diff(&h, &want);
        assert!(
            d < 1e-5,
            "{path:?}: the banded pass differs by {d} from the steps"
        );
        grads.push(loss_of(&h).backward().expect("backward"));
    }
    // The window matters: read causally, the late decisions differ.
    let causal = dec
        .hidden_at(&seqs, &at, 0, Fwd::Train, Lora::Base)
        .expect("causal");
    assert!(
        max_abs_diff(&causal, &want) > 1e-3,
        "the band changed nothing"
    );
    for (name, v) in &vars {
        let (Some(g), Some(w)) = (grads[0].get(v), grads[1].get(v)) else {
            panic!("{name} has no gradient");
        };
        let scale = w
            .abs()
            .and_then(|x| x.max_all())
            .and_then(|x| x.to_scalar::<f32>())
            .expect("scale");
        let d = max_abs_diff(g, w);
        assert!(
            d <= 1e-4 * scale.max(1.0),
            "{name}'s gradient differs by {d}"
        );
    }
    // A band that lets a token see past itself is refused.
    let mut bad = los[0].clone();
    bad[header.len() + 1] = 999;
    let refused = dec.hidden_banded(
        &seqs[..1],
        &at[..1],
        &[Band {
            header: header.len(),
            lo: &bad,
        }],
        0,
        Fwd::Train,
        Lora::Base,
    );
    assert!(refused.is_err());
}

/// The contexts agent 0 of arena 0 read, decision by decision, in a run of `scene` (every
/// team on the embedded language model, compact text) with `memory`: each with the action
/// it chose and its word (`<eos>` for silence, where it talks).
fn contexts(scene: &str, memory: u32, steps: u32) -> (Vec<(String, String)>, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(scene);
    let mut s = emergence::load::load_scene(&path).expect("scene");
    for a in &mut s.agents {
        a.policy = "lm".into();
    }
    s.spec.text = emergence::scene::TextStyle::Compact;
    s.spec.episode.max_steps = steps;
    s.spec.memory = memory;
    let header = emergence::observe::text::TextFormat::new(&s, &emergence::envs::action_names(&s))
        .constant_lines()
        .to_string();
    let talks = emergence::envs::family::of(&s).vocabulary(&s).is_some();
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = emergence::headless::RunConfig::new(s);
    cfg.seed = 11;
    cfg.record = Some(dir.path().join("replay.jsonl"));
    cfg.record_arenas = vec![0];
    emergence::headless::run(&cfg, |_| {}).expect("run");
    let replay =
        emergence::frames::replay::Replay::load(&dir.path().join("replay.jsonl")).expect("replay");
    let read = replay
        .arena_frames(0)
        .into_iter()
        .filter(|f| f.step > 0)
        .map(|f| {
            let a = &f.agents[0];
            let mut chosen = a.action.clone();
            if talks {
                chosen.push_str(" say ");
                chosen.push_str(a.say.as_deref().unwrap_or("<eos>"));
            }
            (a.text.clone(), chosen)
        })
        .collect();
    (read, header)
}

/// The context is the turns in order, for every family: the scene's constant lines once,
/// then each turn (its observation, then what the agent chose), the last `memory` of them.
/// Memory 2: decisions 0-2 read 0-2 past turns, each later one the last two. The first
/// decision reads what an agent without memory reads.
#[test]
fn the_context_is_the_constant_lines_then_the_turns_in_order() {
    for scene in [
        "scenes/dilemma/prisoners_dilemma.scene.ron",
        "scenes/dilemma/commons_harvest_open.scene.ron",
        "scenes/hide_and_seek/quadrant.scene.ron",
        "scenes/maze/split_view.scene.ron",
    ] {
        let (with, header) = contexts(scene, 2, 6);
        let (without, _) = contexts(scene, 0, 6);
        assert_eq!(with.len(), 6, "{scene}");
        assert_eq!(with[0].0, without[0].0, "{scene}: the first decision");
        assert!(with[0].0.starts_with(&header), "{scene}");
        // The turns: what each decision read after the constant lines (and the earlier turns).
        let mut turns: Vec<String> = Vec::new();
        for t in 0..6 {
            let (ctx, _) = &with[t];
            let kept: Vec<usize> = (t.saturating_sub(2)..t).collect();
            let mut before = header.clone();
            for &k in &kept {
                before.push_str(&turns[k]);
                before.push_str(&with[k].1);
                before.push('\n');
            }
            let Some(obs) = ctx.strip_prefix(&before) else {
                panic!(
                    "{scene}, decision {t}: expected the context to begin with\n{before}\n---- it is\n{ctx}"
                );
            };
            assert!(
                !obs.is_empty() && obs.ends_with('\n'),
                "{scene}, decision {t}: {obs:?}"
            );
            assert!(
                !obs.contains(&header) || header.is_empty(),
                "{scene}: the constant lines twice"
            );
            turns.push(obs.to_string());
        }
        // Without memory each decision reads its observation alone: the same turns.
        for (t, turn) in turns.iter().enumerate().skip(1) {
            assert_ne!(
                turn,
                &turns[t - 1],
                "{scene}: decision {t} read the same turn again"
            );
        }
    }
}

/// The trainer scores each decision as the policy sampled it: one iteration at learning
/// rate 0 (one pass, the whole batch in minibatches of windows) moves no log-probability,
/// so PPO's ratio is 1 everywhere (approx KL under 1e-6, nothing clipped): for a talking
/// pair in the maze (the word after the action and `say`, in the same window), the
/// Prisoner's Dilemma with an adapter per agent, and hide-and-seek's seekers, who wait
/// through the preparation; with turns dropped along the way.
#[test]
fn the_trainer_scores_each_window_as_the_policy_sampled_it() {
    use emergence::train::{Algo, Hyper, LearnerKind, ModelChoice, Sharing, TrainConfig, train};
    for (scene, sharing, memory) in [
        ("scenes/maze/split_view.scene.ron", Sharing::Shared, 2),
        (
            "scenes/dilemma/prisoners_dilemma.scene.ron",
            Sharing::AgentLora,
            3,
        ),
        (
            "scenes/hide_and_seek/quadrant.scene.ron",
            Sharing::Shared,
            4,
        ),
    ] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(scene);
        let mut s = emergence::load::load_scene(&path).expect("scene");
        for a in &mut s.agents {
            a.policy = "lm".into();
        }
        s.spec.text = emergence::scene::TextStyle::Compact;
        s.spec.episode.max_steps = s.spec.episode.max_steps.min(12);
        s.spec.memory = memory;
        let dir = tempfile::tempdir().expect("tmp");
        let cfg = TrainConfig {
            scene: s,
            scene_path: path,
            algo: Algo::Ippo,
            iterations: 1,
            arenas: 4,
            seed: 5,
            out: dir.path().join("run"),
            model: ModelChoice::Preset(emergence::policy::lm::Preset::Tiny),
            hyper: Hyper {
                lr: 0.0,
                weight_decay: 0.0,
                epochs: 1,
                minibatch: 16,
                ..Hyper::for_algo(Algo::Ippo)
            },
            sharing,
            learner: LearnerKind::Lm,
            overlap: false,
            threads: Some(2),
            checkpoint_every: 1000,
            resume: None,
            stop_after: None,
            tap: None,
            eval_against: Vec::new(),
            eval_every: 10,
            ranks: Default::default(),
            device: Device::Cpu,
        };
        let summary = train(&cfg, |_| {}).expect("train");
        let u = &summary.iterations[0].update;
        assert!(u.samples > 0 && u.steps > 0, "{scene}: nothing trained");
        assert!(
            u.approx_kl.abs() < 1e-6 && u.clip_frac == 0.0,
            "{scene}: the trainer's log-probabilities are not the policy's (approx KL {}, clipped {})",
            u.approx_kl,
            u.clip_frac
        );
    }
}
