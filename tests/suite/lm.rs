//! The language-model decoder: both forward paths against candle-transformers' qwen2 on the
//! same weights, gradients to every tensor, Hugging Face folders written and loaded, errors
//! that name the file and the tensor or field, and the default tokenizer on every scene.

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, IndexOp, Tensor, Var};
use candle_nn::{Linear, Module, VarBuilder};
use emergence::policy::lm::model::{Pass as Fwd, Weights, init_weights, weight_shapes};
use emergence::policy::lm::tokenizer::{build_tokenizer, default_vocabulary, encode};
use emergence::policy::lm::{Decoder, LmConfig, LmError, Lora, ModelFolder, Preset};
use std::collections::HashMap;
use std::path::Path;

fn small_config(tied: bool) -> LmConfig {
    LmConfig {
        vocab_size: 61,
        hidden_size: 32,
        intermediate_size: 64,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: Some(2),
        max_position_embeddings: 64,
        rope_theta: 10_000.0,
        rms_norm_eps: 1e-6,
        tie_word_embeddings: tied,
        hidden_act: "silu".into(),
        value_head: false,
        architectures: vec![],
        model_type: "qwen2".into(),
    }
}

fn qwen2_config(c: &LmConfig) -> candle_transformers::models::qwen2::Config {
    candle_transformers::models::qwen2::Config {
        vocab_size: c.vocab_size,
        hidden_size: c.hidden_size,
        intermediate_size: c.intermediate_size,
        num_hidden_layers: c.num_hidden_layers,
        num_attention_heads: c.num_attention_heads,
        num_key_value_heads: c.kv_heads(),
        max_position_embeddings: c.max_position_embeddings,
        sliding_window: c.max_position_embeddings,
        max_window_layers: c.num_hidden_layers,
        tie_word_embeddings: c.tie_word_embeddings,
        rope_theta: c.rope_theta,
        rms_norm_eps: c.rms_norm_eps,
        use_sliding_window: false,
        hidden_act: candle_nn::Activation::Silu,
    }
}

/// Full-sequence logits of candle-transformers' qwen2 over `weights`.
fn reference_logits(cfg: &LmConfig, weights: &Weights, ids: &Tensor) -> Tensor {
    let map: HashMap<String, Tensor> = weights.clone().into_iter().collect();
    let vb = VarBuilder::from_tensors(map, DType::F32, &Device::Cpu);
    let mut model = candle_transformers::models::qwen2::Model::new(&qwen2_config(cfg), vb.clone())
        .expect("qwen2");
    let hidden = model.forward(ids, 0, None).expect("forward");
    let head = if cfg.tie_word_embeddings {
        "model.embed_tokens.weight"
    } else {
        "lm_head.weight"
    };
    let w = vb
        .get((cfg.vocab_size, cfg.hidden_size), head)
        .expect("head");
    Linear::new(w, None).forward(&hidden).expect("logits")
}

pub(crate) fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .expect("same shape")
        .abs()
        .expect("abs")
        .flatten_all()
        .expect("flat")
        .max(0)
        .expect("max")
        .to_scalar::<f32>()
        .expect("scalar")
}

/// The fused training path's gradient `a` equals the composed path's `b` to float
/// rounding: within 1e-4 of `b`'s largest magnitude.
fn assert_gradients_agree(name: &str, a: &Tensor, b: &Tensor) {
    assert_gradients_within(name, a, b, 1e-4);
}

/// `a` within `tol` of `b`, relative to `b`'s largest element (at least 1e-3). The two
/// paths round differently: measured up to 8e-5 on the base weights.
fn assert_gradients_within(name: &str, a: &Tensor, b: &Tensor, tol: f32) {
    let zero = b.zeros_like().expect("zeros");
    let scale = max_abs_diff(b, &zero);
    let d = max_abs_diff(a, b);
    assert!(
        d <= tol * scale.max(1e-3),
        "{name}: fused and composed gradients differ by {d} (largest {scale})"
    );
}

fn ids(cfg: &LmConfig) -> Tensor {
    let data: Vec<u32> = (0..2 * 9)
        .map(|i| (i * 7 + 3) as u32 % cfg.vocab_size as u32)
        .collect();
    Tensor::from_vec(data, (2, 9), &Device::Cpu).expect("ids")
}

#[test]
fn both_paths_match_candle_transformers_qwen2() {
    for tied in [false, true] {
        let cfg = small_config(tied);
        let weights = init_weights(&cfg, 7, &Device::Cpu).expect("init");
        let dec = Decoder::new(&cfg, &weights, Path::new("mem")).expect("decoder");
        let ids = ids(&cfg);
        let reference = reference_logits(&cfg, &weights, &ids);
        let fast = dec.forward(&ids, None, Fwd::Fast).expect("fast");
        let train = dec.forward(&ids, None, Fwd::Train).expect("train");
        let composed = dec.forward(&ids, None, Fwd::Composed).expect("composed");
        assert_eq!(fast.dims(), &[2, 9, cfg.vocab_size]);
        let (df, dt, dc) = (
            max_abs_diff(&fast, &reference),
            max_abs_diff(&train, &reference),
            max_abs_diff(&composed, &reference),
        );
        assert!(
            df < 1e-5 && dt < 1e-5 && dc < 1e-5,
            "tied {tied}: fast {df}, train {dt}, composed {dc}"
        );
        // And the logits are not trivially equal: another seed differs.
        let other = init_weights(&cfg, 8, &Device::Cpu).expect("init");
        let other = Decoder::new(&cfg, &other, Path::new("mem")).expect("decoder");
        let o = other.forward(&ids, None, Fwd::Fast).expect("fast");
        assert!(max_abs_diff(&o, &fast) > 1e-3);
    }
}

/// `last_hidden` over prompts of different lengths (packed on the fast path, padded with
/// the last layer pruned on the training path) gives, per prompt, what the full forward of
/// that prompt alone gives at its last token, on every path; and the training path's
/// gradients through it equal the composed path's.
#[test]
fn last_hidden_of_mixed_lengths_matches_each_prompt_alone() {
    let cfg = small_config(false);
    let init = init_weights(&cfg, 11, &Device::Cpu).expect("init");
    let (vars, weights) = trainable(&init);
    let dec = Decoder::new(&cfg, &weights, Path::new("mem")).expect("decoder");
    let prompts: Vec<Vec<u32>> = [9usize, 1, 17, 4, 17]
        .iter()
        .enumerate()
        .map(|(i, &n)| (0..n).map(|j| ((i * 13 + j * 7) % 61) as u32).collect())
        .collect();
    let alone = each_alone(&dec, &prompts, &vec![None; prompts.len()]);
    let mut grads = Vec::new();
    for path in [Fwd::Fast, Fwd::Train, Fwd::Composed] {
        let h = dec
            .last_hidden(&prompts, 0, path, Lora::Base)
            .expect("last hidden");
        let d = max_abs_diff(&h, &alone);
        assert!(d < 1e-5, "{path:?}: {d}");
        if path != Fwd::Fast {
            let loss = (&h * &alone).and_then(|x| x.sum_all()).expect("loss");
            grads.push(loss.backward().expect("backward"));
        }
    }
    all_gradients_agree(&vars, &grads[0], &grads[1]);
}

/// Prompts that all begin alike (a compact scene's preamble): the training path computes
/// that beginning once per part of the batch and adds every prompt's gradient into it, and
/// each prompt still gets what it gives alone, with the composed path's gradients. Checked
/// with the beginning shared (13 tokens, one prompt only one token longer) and where one
/// prompt differs at its first token (nothing shared), and that sharing happened.
#[test]
fn prompts_that_begin_alike_share_their_beginning_on_the_training_path() {
    let cfg = small_config(false);
    let init = init_weights(&cfg, 5, &Device::Cpu).expect("init");
    let (vars, weights) = trainable(&init);
    let dec = Decoder::new(&cfg, &weights, Path::new("mem")).expect("decoder");
    let beginning: Vec<u32> = (0..13).map(|j| ((j * 5 + 2) % 61) as u32).collect();
    for differ in [false, true] {
        let mut prompts: Vec<Vec<u32>> = [6usize, 1, 11, 3, 9, 2]
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let tail = (0..n).map(|j| ((i * 17 + j * 3 + 1) % 61) as u32);
                beginning.iter().copied().chain(tail).collect()
            })
            .collect();
        if differ {
            prompts[4][0] = 60;
        }
        let alone = each_alone(&dec, &prompts, &vec![None; prompts.len()]);
        let shared_before = emergence::policy::lm::tape_shared_tokens();
        let mut grads = Vec::new();
        for path in [Fwd::Train, Fwd::Composed] {
            let h = dec
                .last_hidden(&prompts, 0, path, Lora::Base)
                .expect("last hidden");
            let d = max_abs_diff(&h, &alone);
            assert!(d < 1e-5, "differ {differ}, {path:?}: {d}");
            let loss = (&h * &alone).and_then(|x| x.sum_all()).expect("loss");
            grads.push(loss.backward().expect("backward"));
        }
        let shared = emergence::policy::lm::tape_shared_tokens() - shared_before;
        // Two parts of three prompts: 13 shared tokens read twice more in each part (the
        // part with the differing prompt shares nothing).
        assert_eq!(shared, if differ { 26 } else { 52 }, "differ {differ}");
        all_gradients_agree(&vars, &grads[0], &grads[1]);
    }
}

/// The state at each prompt's last token and at an inner position of it (an action's, in
/// the prompt that goes on to the word said): one pass on the training path gives what two
/// passes give (the prompts cut after the inner position), with the composed path's
/// gradients; with a shared beginning, an inner position inside it and without.
#[test]
fn one_training_pass_gives_the_last_and_an_inner_state() {
    let cfg = small_config(false);
    let init = init_weights(&cfg, 9, &Device::Cpu).expect("init");
    let (vars, weights) = trainable(&init);
    let dec = Decoder::new(&cfg, &weights, Path::new("mem")).expect("decoder");
    for shared in [0usize, 7] {
        let prompts: Vec<Vec<u32>> = [5usize, 2, 9, 4]
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let begin = (0..shared).map(|j| ((j * 3 + 5) % 61) as u32);
                let tail = (0..n).map(|j| ((i * 11 + j * 7 + 1) % 61) as u32);
                begin.chain(tail).collect()
            })
            .collect();
        let inner: Vec<usize> = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| if i == 2 && shared > 0 { 3 } else { p.len() - 2 })
            .collect();
        let mut grads = Vec::new();
        let mut states = Vec::new();
        for path in [Fwd::Train, Fwd::Composed] {
            let (last, at) = dec
                .last_and_inner_hidden(&prompts, &inner, 0, path, Lora::Base)
                .expect("hidden");
            let loss = (last.sqr().and_then(|x| x.sum_all()))
                .and_then(|a| at.sum_all().and_then(|b| a + b))
                .expect("loss");
            grads.push(loss.backward().expect("backward"));
            states.push((last, at));
        }
        let (a, b) = (&states[0], &states[1]);
        let (d_last, d_inner) = (max_abs_diff(&a.0, &b.0), max_abs_diff(&a.1, &b.1));
        assert!(
            d_last < 1e-5 && d_inner < 1e-5,
            "shared {shared}: {d_last} {d_inner}"
        );
        // Not the same state twice.
        assert!(max_abs_diff(&a.0, &a.1) > 1e-3);
        all_gradients_agree(&vars, &grads[0], &grads[1]);
    }
}

/// Every variable's gradient in `a` agrees with its gradient in `b`
/// ([`assert_gradients_agree`]), and one has a gradient where the other has.
fn all_gradients_agree(vars: &[(String, Var)], a: &GradStore, b: &GradStore) {
    for (name, v) in vars {
        match (a.get(v), b.get(v)) {
            (Some(a), Some(b)) => assert_gradients_agree(name, a, b),
            (a, b) => assert_eq!(
                a.is_some(),
                b.is_some(),
                "{name}: gradient on one path only"
            ),
        }
    }
}

/// Every weight as a variable, and the weights the decoder reads from those variables.
pub(crate) fn trainable(init: &Weights) -> (Vec<(String, Var)>, Weights) {
    let vars: Vec<(String, Var)> = init
        .iter()
        .map(|(k, t)| (k.clone(), Var::from_tensor(t).expect("var")))
        .collect();
    let weights = vars
        .iter()
        .map(|(k, v)| (k.clone(), v.as_tensor().clone()))
        .collect();
    (vars, weights)
}

#[test]
fn training_path_gives_every_tensor_a_gradient() {
    let cfg = small_config(false);
    let init = init_weights(&cfg, 3, &Device::Cpu).expect("init");
    let (vars, weights) = trainable(&init);
    let dec = Decoder::new(&cfg, &weights, Path::new("mem")).expect("decoder");
    let ids = ids(&cfg);
    let loss = |path| {
        let logits = dec.forward(&ids, None, path).expect("forward");
        let lp = candle_nn::ops::log_softmax(&logits, candle_core::D::Minus1).expect("lsm");
        // Mean log-probability of token 5 at every position: touches every weight.
        lp.i((.., .., 5)).expect("pick").mean_all().expect("mean")
    };
    let grads = loss(Fwd::Train).backward().expect("backward");
    let missing: Vec<&str> = vars
        .iter()
        .filter(|(_, v)| {
            grads.get(v).is_none_or(|g| {
                g.abs()
                    .and_then(|a| a.sum_all())
                    .and_then(|s| s.to_scalar::<f32>())
                    .map_or(true, |s| s == 0.0)
            })
        })
        .map(|(k, _)| k.as_str())
        .collect();
    assert!(missing.is_empty(), "no gradient reached: {missing:?}");
    assert_eq!(vars.len(), weight_shapes(&cfg).len());
    // The fused kernels' backward passes give the gradients of candle's own compositions.
    let composed = loss(Fwd::Composed).backward().expect("backward");
    for (name, v) in &vars {
        let (a, b) = (
            grads.get(v).expect("train gradient"),
            composed.get(v).expect("composed gradient"),
        );
        assert_gradients_agree(name, a, b);
    }
    // The fused path cuts the graph silently: that is why the training path exists.
    let fast = loss(Fwd::Fast).backward().expect("backward");
    let embed = &vars
        .iter()
        .find(|(k, _)| k == "model.embed_tokens.weight")
        .expect("embed")
        .1;
    assert!(
        fast.get(embed).is_none(),
        "the fused path now records a backward pass"
    );
}

/// Writes a folder the way Hugging Face lays out a Qwen2 checkpoint.
fn write_hf_folder(dir: &Path, cfg: &LmConfig, weights: &Weights) {
    std::fs::create_dir_all(dir).expect("dir");
    let config = serde_json::json!({
        "architectures": ["Qwen2ForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 2,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": cfg.hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": cfg.intermediate_size,
        "max_position_embeddings": cfg.max_position_embeddings,
        "max_window_layers": cfg.num_hidden_layers,
        "model_type": "qwen2",
        "num_attention_heads": cfg.num_attention_heads,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_key_value_heads": cfg.kv_heads(),
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_theta,
        "sliding_window": null,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "torch_dtype": "float32",
        "transformers_version": "4.45.0",
        "use_cache": true,
        "use_sliding_window": false,
        "vocab_size": cfg.vocab_size
    });
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_string_pretty(&config).expect("json"),
    )
    .expect("config");
    let map: HashMap<String, Tensor> = weights.clone().into_iter().collect();
    candle_core::safetensors::save(&map, dir.join("model.safetensors")).expect("weights");
    // Words without digits (the pre-tokenizer splits digits off): "xaa", "xba", ...
    let word = |i: usize| {
        format!(
            "x{}{}",
            (b'a' + (i % 26) as u8) as char,
            (b'a' + (i / 26) as u8) as char
        )
    };
    let vocab: Vec<String> = (0..cfg.vocab_size - 5).map(word).collect();
    let mut vocab = vocab;
    vocab.splice(0..0, ["<pad>", "<unk>", "<eos>"].map(String::from));
    build_tokenizer(&vocab)
        .expect("tokenizer")
        .save(dir.join("tokenizer.json"), true)
        .expect("save tokenizer");
}

#[test]
fn a_hugging_face_qwen2_folder_loads_and_matches() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("qwen2");
    let cfg = small_config(false);
    let weights = init_weights(&cfg, 11, &Device::Cpu).expect("init");
    write_hf_folder(&dir, &cfg, &weights);
    let folder = ModelFolder::load(&dir, &Device::Cpu).expect("load");
    assert_eq!(folder.config.kv_heads(), 2);
    let dec = folder.decoder().expect("decoder");
    let ids = ids(&cfg);
    let d = max_abs_diff(
        &dec.forward(&ids, None, Fwd::Fast).expect("fast"),
        &reference_logits(&cfg, &weights, &ids),
    );
    assert!(d < 1e-5, "{d}");
    // Ids 3.. are the words in order; unknown words are <unk> (1).
    assert_eq!(
        encode(&folder.tokenizer, "xda xka nonsense").expect("encode"),
        vec![6, 13, 1]
    );
}

fn load_err(dir: &Path) -> String {
    match ModelFolder::load(dir, &Device::Cpu) {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_folders_name_the_file_and_the_tensor_or_field() {
    let tmp = tempfile::tempdir().expect("tmp");
    let cfg = small_config(false);
    let weights = init_weights(&cfg, 1, &Device::Cpu).expect("init");
    // A missing tensor.
    let dir = tmp.path().join("missing");
    let mut w = weights.clone();
    w.remove("model.layers.1.mlp.up_proj.weight");
    write_hf_folder(&dir, &cfg, &w);
    let e = load_err(&dir);
    assert!(
        e.contains("model.safetensors")
            && e.contains("`model.layers.1.mlp.up_proj.weight` is missing")
            && e.contains("[64, 32]"),
        "{e}"
    );
    // A wrong shape.
    let dir = tmp.path().join("shape");
    let mut w = weights.clone();
    w.insert(
        "model.norm.weight".into(),
        Tensor::ones(7, DType::F32, &Device::Cpu).expect("t"),
    );
    write_hf_folder(&dir, &cfg, &w);
    let e = load_err(&dir);
    assert!(
        e.contains("`model.norm.weight` has shape [7]; expected [32]"),
        "{e}"
    );
    // A bad config field and bad JSON.
    let dir = tmp.path().join("field");
    write_hf_folder(&dir, &cfg, &weights);
    let c = std::fs::read_to_string(dir.join("config.json")).expect("read");
    std::fs::write(dir.join("config.json"), c.replace("\"silu\"", "\"gelu\"")).expect("write");
    let e = load_err(&dir);
    assert!(
        e.contains("config.json: field `hidden_act`") && e.contains("\"silu\""),
        "{e}"
    );
    std::fs::write(
        dir.join("config.json"),
        "{\n  \"hidden_size\": 32,\n  \"vocab_size\": ,\n}",
    )
    .expect("write");
    let e = load_err(&dir);
    assert!(e.contains("config.json:3:17"), "{e}");
    // A tokenizer that is not one.
    let dir = tmp.path().join("tok");
    write_hf_folder(&dir, &cfg, &weights);
    std::fs::write(dir.join("tokenizer.json"), "{}").expect("write");
    let e = load_err(&dir);
    assert!(e.contains("tokenizer.json"), "{e}");
    // A tokenizer with a token id past the embedding's rows (as many tokens as before).
    let dir = tmp.path().join("tok_id");
    write_hf_folder(&dir, &cfg, &weights);
    let t = std::fs::read_to_string(dir.join("tokenizer.json")).expect("read");
    let mut json: serde_json::Value = serde_json::from_str(&t).expect("json");
    json["model"]["vocab"]["xaa"] = serde_json::json!(5000);
    std::fs::write(dir.join("tokenizer.json"), json.to_string()).expect("write");
    let e = load_err(&dir);
    assert!(
        e.contains("tokenizer.json")
            && e.contains("\"xaa\" has id 5000")
            && e.contains(&format!("below the model's vocab_size {}", cfg.vocab_size)),
        "{e}"
    );
    // A missing folder.
    let e = load_err(&tmp.path().join("nowhere"));
    assert!(e.contains("nowhere") && e.contains("config.json"), "{e}");
}

#[test]
fn init_writes_a_loadable_folder_and_never_overwrites() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("models").join("tiny");
    let scenes: Vec<_> =
        emergence::scene::find_scenes(&Path::new(env!("CARGO_MANIFEST_DIR")).join("scenes"))
            .iter()
            .map(|p| emergence::load::load_scene(p).expect("scene"))
            .collect();
    let m = ModelFolder::init(Preset::Tiny, 5, &scenes, &Device::Cpu).expect("init");
    let params = m.config.parameters();
    assert!((900_000..1_300_000).contains(&params), "{params}");
    m.save(&dir).expect("save");
    let e = m.save(&dir).expect_err("second save");
    assert!(matches!(e, LmError::Exists { .. }), "{e}");
    let back = ModelFolder::load(&dir, &Device::Cpu).expect("load");
    assert_eq!(back.config, m.config);
    let ids = Tensor::new(&[[1u32, 5, 9, 2]], &Device::Cpu).expect("ids");
    let a = m
        .decoder()
        .expect("d")
        .forward(&ids, None, Fwd::Fast)
        .expect("f");
    let b = back
        .decoder()
        .expect("d")
        .forward(&ids, None, Fwd::Fast)
        .expect("f");
    assert_eq!(max_abs_diff(&a, &b), 0.0);
    // Same seed, same bytes.
    let again = ModelFolder::init(Preset::Tiny, 5, &scenes, &Device::Cpu).expect("init");
    again.save(&tmp.path().join("again")).expect("save");
    assert_eq!(
        std::fs::read(dir.join("model.safetensors")).expect("a"),
        std::fs::read(tmp.path().join("again/model.safetensors")).expect("b")
    );
    // The small preset's size, without building it.
    let small = LmConfig::preset(Preset::Small, m.config.vocab_size);
    assert!(
        (35_000_000..40_000_000).contains(&small.parameters()),
        "{}",
        small.parameters()
    );
}

#[test]
fn the_default_tokenizer_covers_every_scene_text() {
    use emergence::envs::action_names;
    use emergence::observe::text::{Speaker, TextFormat};
    let paths =
        emergence::scene::find_scenes(&Path::new(env!("CARGO_MANIFEST_DIR")).join("scenes"));
    let scenes: Vec<_> = paths
        .iter()
        .map(|p| emergence::load::load_scene(p).expect("scene"))
        .collect();
    let tok = build_tokenizer(&default_vocabulary(&scenes)).expect("tokenizer");
    for scene in &scenes {
        let mut cfg = emergence::headless::RunConfig::new(scene.clone());
        cfg.record_arenas = vec![];
        let mut app = emergence::headless::build_app(&cfg).expect("app");
        let fmt = TextFormat::new(scene, &action_names(scene));
        for _ in 0..5 {
            app.update();
            let w = app.world_mut();
            let mut q = w.query::<(
                &emergence::core::Team,
                &emergence::core::Role,
                &emergence::core::Observation,
                &emergence::core::ActionMask,
                emergence::envs::senses::SensesQuery,
            )>();
            for (team, role, obs, mask, senses) in q.iter(w) {
                let text = fmt.render(
                    Speaker {
                        team: team.0,
                        role: role.0,
                    },
                    obs,
                    senses.get(),
                    *mask,
                    -0.25,
                );
                let ids = encode(&tok, &text).expect("encode");
                let unknown: Vec<&str> = text
                    .split_whitespace()
                    .filter(|w| encode(&tok, w).expect("encode").contains(&1))
                    .collect();
                assert!(
                    !ids.contains(&1),
                    "{}: unknown words {unknown:?} in\n{text}",
                    scene.path.display()
                );
            }
        }
    }
}

#[test]
fn lora_adapters_start_neutral_train_and_round_trip() {
    use emergence::policy::lm::{Adapter, LoraConfig};
    let cfg = small_config(false);
    let base = init_weights(&cfg, 2, &Device::Cpu).expect("init");
    let dec = Decoder::new(&cfg, &base, Path::new("mem")).expect("decoder");
    let ids = ids(&cfg);
    // The base model on the path adapters take (the plain fast path is a different
    // implementation, equal to float rounding; tested elsewhere).
    let none = vec![None; ids.dim(0).expect("rows")];
    let plain = dec
        .forward_with(&ids, None, Fwd::Fast, Lora::Each(&none))
        .expect("base");
    assert!(max_abs_diff(&plain, &dec.forward(&ids, None, Fwd::Fast).expect("fast")) < 1e-5);
    let fresh = Adapter::init(&cfg, LoraConfig::all(4), 1, &Device::Cpu).expect("adapter");
    assert_eq!(fresh.weights.len(), 7 * cfg.num_hidden_layers);
    // B = 0: the adapter changes nothing.
    let same = dec
        .forward_with(&ids, None, Fwd::Fast, Lora::All(&fresh))
        .expect("lora");
    assert_eq!(max_abs_diff(&plain, &same), 0.0);
    // Gradients reach every A and B through the training path (B first, A once B moved).
    let (vars, trained) = as_variables(&fresh, 0.01);
    let logits = dec
        .forward_with(&ids, None, Fwd::Train, Lora::All(&trained))
        .expect("train");
    let lp = candle_nn::ops::log_softmax(&logits, candle_core::D::Minus1).expect("lsm");
    let loss = lp.i((.., .., 7)).expect("pick").mean_all().expect("mean");
    let grads = loss.backward().expect("backward");
    let missing = without_gradient(&grads, &vars);
    assert!(
        missing.is_empty(),
        "no gradient reached the adapter of {missing:?}"
    );
    let moved = dec
        .forward_with(&ids, None, Fwd::Fast, Lora::All(&trained))
        .expect("lora");
    assert!(max_abs_diff(&plain, &moved) > 1e-4);
    // Saved and loaded in the PEFT layout, the same logits.
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("adapters/role_a");
    trained.save(&dir).expect("save");
    let back = Adapter::load(&dir, &cfg, &Device::Cpu).expect("load");
    let again = dec
        .forward_with(&ids, None, Fwd::Fast, Lora::All(&back))
        .expect("lora");
    assert_eq!(max_abs_diff(&moved, &again), 0.0);
    // A missing tensor names the file and the tensor.
    let small = LmConfig {
        num_hidden_layers: 3,
        ..cfg.clone()
    };
    let e = Adapter::load(&dir, &small, &Device::Cpu).expect_err("a layer short");
    let e = e.to_string();
    assert!(
        e.contains("adapter_model.safetensors")
            && e.contains("base_model.model.model.layers.2.self_attn.q_proj.lora_A.weight"),
        "{e}"
    );
}

#[test]
fn the_value_head_trains_and_hugging_face_folders_do_without_it() {
    let cfg = LmConfig {
        value_head: true,
        ..small_config(true)
    };
    let init = init_weights(&cfg, 4, &Device::Cpu).expect("init");
    assert!(init.contains_key("value_head.weight") && init.contains_key("value_head.bias"));
    let (vars, weights) = trainable(&init);
    let dec = Decoder::new(&cfg, &weights, Path::new("mem")).expect("decoder");
    let h = dec.hidden(&ids(&cfg), None, Fwd::Train).expect("hidden");
    let v = dec.value(&h).expect("value").expect("a value head");
    assert_eq!(v.dims(), &[2, 9, 1]);
    let grads = v
        .sqr()
        .expect("sq")
        .mean_all()
        .expect("mean")
        .backward()
        .expect("backward");
    for name in [
        "value_head.weight",
        "value_head.bias",
        "model.layers.0.mlp.up_proj.weight",
    ] {
        let var = &vars.iter().find(|(k, _)| k == name).expect("var").1;
        assert!(grads.get(var).is_some(), "no gradient to {name}");
    }
    // The HF layout has no value head: loading such a folder gives a model without one.
    let plain = init_weights(&small_config(true), 4, &Device::Cpu).expect("init");
    let dec = Decoder::new(&small_config(true), &plain, Path::new("mem")).expect("decoder");
    let h = dec.hidden(&ids(&cfg), None, Fwd::Fast).expect("hidden");
    assert!(dec.value(&h).expect("value").is_none());
}

/// LoRA per prompt in one forward (`Lora::Each`: per role or per agent): every prompt's final
/// hidden state equals what its own adapter (or the base model) gives it alone, on every path,
/// with the prompts' adapters interleaved; the training path's gradient reaches both
/// adapters' `A` and `B` in every module and equals the composed path's; and a wrong count of adapters is an error.
#[test]
fn one_forward_with_an_adapter_per_prompt_matches_each_adapter_alone() {
    use emergence::policy::lm::{Adapter, LoraConfig};
    let cfg = small_config(false);
    let base = init_weights(&cfg, 5, &Device::Cpu).expect("init");
    let dec = Decoder::new(&cfg, &base, Path::new("mem")).expect("decoder");
    // Two adapters with B moved off zero (a fresh one changes nothing), as variables.
    let adapter = |seed: u64| {
        let fresh = Adapter::init(&cfg, LoraConfig::all(4), seed, &Device::Cpu).expect("init");
        as_variables(&fresh, 0.02 * seed as f64)
    };
    let (va, a) = adapter(1);
    let (vb, b) = adapter(2);
    let prompts: Vec<Vec<u32>> = [9usize, 3, 17, 4, 12, 6]
        .iter()
        .enumerate()
        .map(|(i, &n)| (0..n).map(|j| ((i * 11 + j * 5) % 61) as u32).collect())
        .collect();
    let each = [Some(&a), Some(&b), None, Some(&a), Some(&b), Some(&b)];
    let alone = each_alone(&dec, &prompts, &each);
    // Not trivially equal: the adapters change the result.
    let plain = dec
        .last_hidden(&prompts, 0, Fwd::Fast, Lora::Base)
        .expect("base");
    assert!(max_abs_diff(&plain, &alone) > 1e-4);
    for path in [Fwd::Fast, Fwd::Train, Fwd::Composed] {
        let h = dec
            .last_hidden(&prompts, 0, path, Lora::Each(&each))
            .expect("mixed");
        let d = max_abs_diff(&h, &alone);
        assert!(d < 1e-5, "{path:?}: {d}");
    }
    // The full forward over padded rows reads the same per-row adapters.
    let t = 17;
    let flat: Vec<u32> = prompts
        .iter()
        .flat_map(|p| p.iter().copied().chain(std::iter::repeat_n(0, t - p.len())))
        .collect();
    let ids = Tensor::from_vec(flat, (prompts.len(), t), &Device::Cpu).expect("ids");
    let full = dec
        .hidden_with(&ids, None, Fwd::Fast, Lora::Each(&each))
        .expect("forward");
    let lasts: Vec<Tensor> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| full.i((i, p.len() - 1)).expect("last"))
        .collect();
    let d = max_abs_diff(&Tensor::stack(&lasts, 0).expect("stack"), &alone);
    assert!(d < 1e-5, "padded forward: {d}");
    // Gradients reach every A and B of both adapters through one training forward.
    let h = dec
        .last_hidden(&prompts, 0, Fwd::Train, Lora::Each(&each))
        .expect("train");
    let loss = (&h * &alone).and_then(|x| x.sum_all()).expect("loss");
    let grads = loss.backward().expect("backward");
    for (who, vars) in [("a", &va), ("b", &vb)] {
        let missing = without_gradient(&grads, vars);
        assert!(
            missing.is_empty(),
            "adapter {who}: no gradient for {missing:?}"
        );
    }
    // ... and it is the composed path's gradient, matrix by matrix.
    let h = dec
        .last_hidden(&prompts, 0, Fwd::Composed, Lora::Each(&each))
        .expect("composed");
    let loss = (&h * &alone).and_then(|x| x.sum_all()).expect("loss");
    let composed = loss.backward().expect("backward");
    for (who, vars) in [("a", &va), ("b", &vb)] {
        for (name, wa, wb) in vars {
            for (m, w) in [("A", wa), ("B", wb)] {
                let (t, c) = (grads.get(w), composed.get(w));
                let label = format!("adapter {who} {name} {m}");
                // Through two low-rank products: measured up to 1.3e-4.
                let (t, c) = (t.expect("train"), c.expect("composed"));
                assert_gradients_within(&label, t, c, 3e-4);
            }
        }
    }
    let e = dec
        .last_hidden(&prompts, 0, Fwd::Fast, Lora::Each(&each[..2]))
        .expect_err("two adapters for six prompts");
    assert!(e.to_string().contains("2 adapters for 6 prompts"), "{e}");
}

/// `adapter` with `nudge` added to every `B` (a fresh adapter's `B` is zero, which would
/// leave `A` without a gradient), as variables and the adapter that reads them.
fn as_variables(
    adapter: &emergence::policy::lm::Adapter,
    nudge: f64,
) -> (Vec<(String, Var, Var)>, emergence::policy::lm::Adapter) {
    let vars: Vec<(String, Var, Var)> = adapter
        .weights
        .iter()
        .map(|(k, (a, b))| {
            let b = (b + nudge).expect("nudge");
            (
                k.clone(),
                Var::from_tensor(a).expect("a"),
                Var::from_tensor(&b).expect("b"),
            )
        })
        .collect();
    let read = emergence::policy::lm::Adapter {
        config: adapter.config.clone(),
        weights: vars
            .iter()
            .map(|(k, a, b)| (k.clone(), (a.as_tensor().clone(), b.as_tensor().clone())))
            .collect(),
    };
    (vars, read)
}

/// The fast path reads weights in place when they are contiguous f32 tensors
/// (`cpu/infer.rs`); strided ones (here transposed views of transposed copies, same values)
/// take candle's operations instead. Both give the same hidden states and logits, with and
/// without adapters.
#[test]
fn fast_path_with_strided_weights_matches_contiguous_ones() {
    use emergence::policy::lm::{Adapter, LoraConfig};
    let cfg = small_config(false);
    let w = init_weights(&cfg, 9, &Device::Cpu).expect("init");
    let strided: Weights = w
        .iter()
        .map(|(k, t)| {
            // (candle's embedding lookup needs a contiguous table)
            let t = if t.rank() == 2 && !k.contains("embed_tokens") {
                t.t()
                    .and_then(|x| x.contiguous())
                    .and_then(|x| x.t())
                    .expect("view")
            } else {
                t.clone()
            };
            (k.clone(), t)
        })
        .collect();
    assert!(!strided["model.layers.0.mlp.up_proj.weight"].is_contiguous());
    let a = Decoder::new(&cfg, &w, Path::new("mem")).expect("decoder");
    let b = Decoder::new(&cfg, &strided, Path::new("mem")).expect("decoder");
    let (_, adapter) = as_variables(
        &Adapter::init(&cfg, LoraConfig::all(2), 4, &Device::Cpu).expect("adapter"),
        0.03,
    );
    let prompts: Vec<Vec<u32>> = [7usize, 2, 12]
        .iter()
        .map(|&n| (0..n).map(|j| (j * 5 % 61) as u32).collect())
        .collect();
    let each = [Some(&adapter), None, Some(&adapter)];
    for lora in [Lora::Base, Lora::Each(&each)] {
        let ha = a.last_hidden(&prompts, 0, Fwd::Fast, lora).expect("a");
        let hb = b.last_hidden(&prompts, 0, Fwd::Fast, lora).expect("b");
        assert!(max_abs_diff(&ha, &hb) < 1e-5, "{}", max_abs_diff(&ha, &hb));
        let ids = ids(&cfg);
        let n = ids.dim(0).expect("rows");
        let rows = vec![Some(&adapter); n];
        let lora = match lora {
            Lora::Base => Lora::Base,
            _ => Lora::Each(&rows),
        };
        let la = a.forward_with(&ids, None, Fwd::Fast, lora).expect("a");
        let lb = b.forward_with(&ids, None, Fwd::Fast, lora).expect("b");
        assert!(max_abs_diff(&la, &lb) < 1e-5, "{}", max_abs_diff(&la, &lb));
    }
}

/// Prompts that begin alike (the same header, as agents of one team at one step have) share
/// those tokens' rows in the fast path's packed batch: identical prompts, one the beginning
/// of another, prompts that part after a few tokens, and the same tokens under different
/// adapters (which must not share). Each still gets what it gets alone.
#[test]
fn prompts_that_begin_alike_match_each_prompt_alone() {
    use emergence::policy::lm::{Adapter, LoraConfig};
    let cfg = small_config(false);
    let w = init_weights(&cfg, 12, &Device::Cpu).expect("init");
    let dec = Decoder::new(&cfg, &w, Path::new("mem")).expect("decoder");
    let (_, adapter) = as_variables(
        &Adapter::init(&cfg, LoraConfig::all(2), 6, &Device::Cpu).expect("adapter"),
        0.05,
    );
    let header: Vec<u32> = (0..9).map(|j| (j * 7 % 61) as u32).collect();
    let with = |tail: &[u32]| -> Vec<u32> { header.iter().chain(tail).copied().collect() };
    let prompts: Vec<Vec<u32>> = vec![
        with(&[
            3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
        ]),
        with(&[3, 4, 5]),
        with(&[
            3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
        ]),
        header[..5].to_vec(),
        with(&[30, 31]),
        with(&[3, 4, 5, 40]),
        with(&[30, 31]),
        (0..6).map(|j| (50 + j) as u32).collect(),
    ];
    for each in [
        vec![None; prompts.len()],
        vec![
            None,
            Some(&adapter),
            None,
            Some(&adapter),
            None,
            None,
            Some(&adapter),
            None,
        ],
    ] {
        let alone = each_alone(&dec, &prompts, &each);
        let h = dec
            .last_hidden(&prompts, 0, Fwd::Fast, Lora::Each(&each))
            .expect("fast");
        let d = max_abs_diff(&h, &alone);
        assert!(d < 1e-5, "{d}");
    }
}

/// A talking agent's word is scored after its prompt, its action and `say`: the policy runs
/// the prompts once keeping their keys and values (`Decoder::last_hidden_kept`), then only
/// each continuation's tokens (`Decoder::extend_last_hidden`). Both give what each prompt,
/// and each continued prompt, gives alone, with shared beginnings (identical prompts, one the
/// beginning of another) and an adapter per prompt; continuations that cannot be run so
/// (another adapter than the kept pass's, an empty one) are declined, not run wrong.
#[test]
fn continuing_kept_prompts_matches_the_continued_prompts_alone() {
    use emergence::policy::lm::{Adapter, LoraConfig};
    let cfg = small_config(false);
    let w = init_weights(&cfg, 14, &Device::Cpu).expect("init");
    let dec = Decoder::new(&cfg, &w, Path::new("mem")).expect("decoder");
    let (_, adapter) = as_variables(
        &Adapter::init(&cfg, LoraConfig::all(2), 8, &Device::Cpu).expect("adapter"),
        0.05,
    );
    let header: Vec<u32> = (0..9).map(|j| (j * 5 % 59) as u32).collect();
    let with = |tail: &[u32]| -> Vec<u32> { header.iter().chain(tail).copied().collect() };
    let prompts: Vec<Vec<u32>> = vec![
        with(&[3, 4, 5, 6, 7, 8, 9, 10, 11, 12]),
        with(&[3, 4, 5]),
        with(&[3, 4, 5, 6, 7, 8, 9, 10, 11, 12]),
        header[..6].to_vec(),
        with(&[30, 31]),
        (0..5).map(|j| (50 + j) as u32).collect(),
    ];
    let ext: Vec<Vec<u32>> = vec![
        vec![7, 2],
        vec![8],
        vec![9, 2],
        vec![1, 2, 3],
        vec![60, 2],
        vec![4],
    ];
    let continued: Vec<Vec<u32>> = prompts
        .iter()
        .zip(&ext)
        .map(|(p, e)| p.iter().chain(e).copied().collect())
        .collect();
    let rows: Vec<&[u32]> = ext.iter().map(Vec::as_slice).collect();
    // The policy puts prompts of one adapter next to each other.
    for each in [
        vec![None; prompts.len()],
        vec![
            None,
            None,
            None,
            Some(&adapter),
            Some(&adapter),
            Some(&adapter),
        ],
    ] {
        let (h, cache) = dec
            .last_hidden_kept(&prompts, Lora::Each(&each))
            .expect("kept")
            .expect("the fast path runs on the CPU");
        let d = max_abs_diff(&h, &each_alone(&dec, &prompts, &each));
        assert!(d < 1e-5, "the kept pass: {d}");
        let he = dec
            .extend_last_hidden(&cache, &rows, Lora::Each(&each))
            .expect("continued")
            .expect("the continuation runs");
        let d = max_abs_diff(&he, &each_alone(&dec, &continued, &each));
        assert!(d < 1e-5, "the continuation: {d}");
    }
    let (_, cache) = dec
        .last_hidden_kept(&prompts, Lora::Base)
        .expect("kept")
        .expect("fast");
    let other = dec.extend_last_hidden(&cache, &rows, Lora::All(&adapter));
    assert!(matches!(other, Ok(None)), "another adapter: {other:?}");
    let mut short = rows.clone();
    short[2] = &[];
    let empty = dec.extend_last_hidden(&cache, &short, Lora::Base);
    assert!(
        matches!(empty, Ok(None)),
        "an empty continuation: {empty:?}"
    );
}

/// The final hidden state at each prompt's last token, each prompt run alone on the composed
/// path with its adapter.
pub(crate) fn each_alone(
    dec: &Decoder,
    prompts: &[Vec<u32>],
    adapters: &[Option<&emergence::policy::lm::Adapter>],
) -> Tensor {
    let alone: Vec<Tensor> = prompts
        .iter()
        .zip(adapters)
        .map(|(p, &a)| {
            let ids = Tensor::from_vec(p.clone(), (1, p.len()), &Device::Cpu).expect("ids");
            let h = dec
                .hidden_with(&ids, None, Fwd::Composed, a.into())
                .expect("hidden");
            h.i((0, p.len() - 1)).expect("last")
        })
        .collect();
    Tensor::stack(&alone, 0).expect("stack")
}

/// The modules of an adapter (as [`as_variables`] opens it) whose `A` or `B` received no
/// non-zero gradient.
fn without_gradient<'a>(
    grads: &candle_core::backprop::GradStore,
    vars: &'a [(String, Var, Var)],
) -> Vec<&'a str> {
    let nonzero = |v: &Var| {
        grads.get(v).is_some_and(|g| {
            g.abs()
                .and_then(|a| a.sum_all())
                .and_then(|s| s.to_scalar::<f32>())
                .is_ok_and(|s| s > 0.0)
        })
    };
    vars.iter()
        .filter(|(_, a, b)| !nonzero(a) || !nonzero(b))
        .map(|(k, _, _)| k.as_str())
        .collect()
}

/// The training path's hand-written backward pass (`cpu/train/`) against central finite
/// differences, independently of candle's autograd: the loss is the training step's own
/// composition (the last hidden state of packed prompts of different lengths, the head's
/// log-softmax at an action token, the value head, with and without tied embeddings and
/// LoRA adapters on every projection), summed in f64 from the f32 outputs. For every
/// trainable tensor (so every operation: the embedding gather or its tie to the head,
/// RMSNorm, the q/k/v/o products with rotary positions and causal attention, SwiGLU, the
/// value head, each adapter's A and B) the entry with the largest derivative and three
/// others are moved by ±1e-2, on a decoder rebuilt from the moved weights; each derivative
/// is within 0.3% of its tensor's largest (plus 6e-5, the noise of f32 forwards) of the
/// backward pass's. Measured: at most 0.14% (plus 3e-5 on the smallest tensors). A 10%
/// error in one term of SwiGLU's backward fails it.
#[test]
fn training_path_gradients_match_finite_differences() {
    use emergence::policy::lm::{Adapter, LoraConfig};
    let prompts: Vec<Vec<u32>> = [5usize, 9, 3]
        .iter()
        .enumerate()
        .map(|(i, &n)| (0..n).map(|j| ((i * 13 + j * 7 + 1) % 61) as u32).collect())
        .collect();
    for (tied, lora) in [(true, false), (false, true)] {
        let mut cfg = small_config(tied);
        cfg.value_head = true;
        let init = init_weights(&cfg, 11, &Device::Cpu).expect("init");
        let (vars, weights) = trainable(&init);
        let fresh = Adapter::init(&cfg, LoraConfig::all(2), 4, &Device::Cpu).expect("lora");
        let (avars, adapter) = as_variables(&fresh, 0.05);
        // The loss of weights `w` and adapter `a`, as an f32 tensor (for backward) and in f64.
        let loss = |w: &Weights, a: &Adapter| -> (Tensor, f64) {
            let dec = Decoder::new(&cfg, w, Path::new("mem")).expect("decoder");
            let each: Vec<Option<&Adapter>> = prompts.iter().map(|_| Some(a)).collect();
            let mode = if lora { Lora::Each(&each) } else { Lora::Base };
            let h = dec
                .last_hidden(&prompts, 0, Fwd::Train, mode)
                .expect("hidden");
            let lp = candle_nn::ops::log_softmax(&dec.head(&h).expect("head"), 1).expect("lsm");
            let picked = lp.i((.., 7)).expect("token 7");
            let v = dec.value(&h).expect("value").expect("value head");
            let coef = Tensor::new(&[1.0f32, -0.6, 0.3], &Device::Cpu).expect("coef");
            let l = ((picked * &coef).and_then(|x| x.sum_all()).expect("lp")
                + v.sqr().and_then(|x| x.sum_all()).expect("v"))
            .expect("loss");
            let l64 = {
                let p: Vec<f64> = lp
                    .i((.., 7))
                    .and_then(|x| x.to_dtype(DType::F64))
                    .and_then(|x| x.to_vec1())
                    .expect("p");
                let v: Vec<f64> = v
                    .flatten_all()
                    .and_then(|x| x.to_dtype(DType::F64))
                    .and_then(|x| x.to_vec1())
                    .expect("v");
                p.iter()
                    .zip([1.0, -0.6, 0.3])
                    .map(|(a, c)| a * c)
                    .sum::<f64>()
                    + v.iter().map(|x| x * x).sum::<f64>()
            };
            (l, l64)
        };
        let grads = loss(&weights, &adapter).0.backward().expect("backward");
        // Every tensor the step trains: the weights, and with LoRA every A and B.
        let mut tensors: Vec<(String, Tensor)> = vars
            .iter()
            .map(|(k, v)| (k.clone(), v.as_tensor().clone()))
            .collect();
        if lora {
            for (k, a, b) in &avars {
                tensors.push((format!("lora {k} A"), a.as_tensor().clone()));
                tensors.push((format!("lora {k} B"), b.as_tensor().clone()));
            }
        }
        for (name, t) in &tensors {
            let g: Vec<f32> = grads
                .get(t)
                .unwrap_or_else(|| panic!("{name}: no gradient"))
                .flatten_all()
                .and_then(|g| g.to_vec1())
                .expect("g");
            let top = g.iter().fold(0f32, |m, x| m.max(x.abs()));
            assert!(top > 0.0, "{name}: a zero gradient");
            let n = g.len();
            let mut picks: Vec<usize> = (0..8).map(|k| (k * 2654435761usize + 17) % n).collect();
            picks.extend(
                g.iter()
                    .enumerate()
                    .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
                    .map(|(i, _)| i),
            );
            let flat: Vec<f32> = t.flatten_all().and_then(|x| x.to_vec1()).expect("w");
            for i in picks {
                let eps = 1e-2f32;
                let at = |delta: f32| -> f64 {
                    let mut moved = flat.clone();
                    moved[i] += delta;
                    let moved = Tensor::from_vec(moved, t.shape(), &Device::Cpu).expect("t");
                    let mut w = weights.clone();
                    let mut a = adapter.clone();
                    if let Some(slot) = w.get_mut(name) {
                        *slot = moved;
                    } else {
                        let (module, which) = name
                            .trim_start_matches("lora ")
                            .rsplit_once(' ')
                            .expect("lora name");
                        let pair = a.weights.get_mut(module).expect("module");
                        if which == "A" {
                            pair.0 = moved;
                        } else {
                            pair.1 = moved;
                        }
                    }
                    loss(&w, &a).1
                };
                let fd = (at(eps) - at(-eps)) / (2.0 * f64::from(eps));
                let err = (fd - f64::from(g[i])).abs();
                if std::env::var("FD_PRINT").is_ok() {
                    eprintln!(
                        "{name} {i}: rel {:.2e} abs {:.2e}",
                        err / f64::from(top),
                        err
                    );
                }
                assert!(
                    err <= 3e-3 * f64::from(top) + 6e-5,
                    "tied {tied}, lora {lora}: {name}[{i}]: backward {} vs finite difference {fd} \
                     (largest {top})",
                    g[i]
                );
            }
        }
    }
}
