//! LoRA adapters over a frozen base decoder: for each chosen projection `W` (attention
//! `q/k/v/o_proj`, MLP `gate/up/down_proj`), `W x + (alpha / r) · B (A x)` with `A` (r × in)
//! and `B` (out × r). `B` starts at zero, so a fresh adapter leaves the model unchanged.
//! Adapters are saved in the PEFT layout: `adapter_config.json` and
//! `adapter_model.safetensors` with names `base_model.model.<module>.lora_A.weight` and
//! `...lora_B.weight`, one folder per role or per agent.

use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use super::LmError;
use super::config::LmConfig;
use crate::scene::Scene;

/// What each LoRA adapter of a model belongs to: a role (every agent of the role reads it)
/// or an agent (the agent in that slot of every arena).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AdapterOwner {
    /// One adapter per role, in the scene's role order, in `adapters/<role>/`.
    #[default]
    Role,
    /// One adapter per agent slot, in `adapters/agent_<slot>/`.
    Agent,
}

impl AdapterOwner {
    /// The adapters' folder names under `adapters/`, by owner index.
    pub fn names(self, scene: &Scene) -> Vec<String> {
        match self {
            Self::Role => scene.roles.clone(),
            Self::Agent => (0..scene.agent_count())
                .map(|s| format!("agent_{s}"))
                .collect(),
        }
    }

    /// The owner index of the agent in `slot`, whose role is `role`.
    pub fn index(self, role: u8, slot: u16) -> usize {
        match self {
            Self::Role => usize::from(role),
            Self::Agent => usize::from(slot),
        }
    }

    /// What a folder holds: per-agent adapters when `adapters/agent_0/` exists, else
    /// per-role ones.
    pub fn of_folder(dir: &Path) -> Self {
        if dir.join("adapters").join("agent_0").is_dir() {
            Self::Agent
        } else {
            Self::Role
        }
    }
}

/// The projections an adapter may target.
pub const TARGETS: [&str; 7] = [
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
];

/// `adapter_config.json` (the PEFT field names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoraConfig {
    /// Rank `r`.
    pub r: usize,
    /// Scale numerator: the update is multiplied by `lora_alpha / r`.
    pub lora_alpha: f32,
    /// Projections adapted, from [`TARGETS`].
    pub target_modules: Vec<String>,
    /// Written for PEFT tools: `"LORA"`.
    #[serde(default)]
    pub peft_type: String,
}

impl LoraConfig {
    /// Rank `r` on every attention and MLP projection, alpha = 2r.
    pub fn all(r: usize) -> Self {
        Self {
            r,
            lora_alpha: 2.0 * r as f32,
            target_modules: TARGETS.iter().map(|s| s.to_string()).collect(),
            peft_type: "LORA".into(),
        }
    }
}

/// A LoRA adapter: `A` and `B` of every adapted module, by module name
/// (`model.layers.{i}.self_attn.q_proj`, ...).
#[derive(Debug, Clone)]
pub struct Adapter {
    /// Its configuration.
    pub config: LoraConfig,
    /// `(A, B)` by module.
    pub weights: BTreeMap<String, (Tensor, Tensor)>,
}

/// Every adapted module of `cfg` under `lora`, with its (in, out) sizes.
pub fn modules(cfg: &LmConfig, lora: &LoraConfig) -> Vec<(String, usize, usize)> {
    let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
    let kv = cfg.kv_heads() * cfg.head_dim();
    let mut out = Vec::new();
    for l in 0..cfg.num_hidden_layers {
        for (t, group, inp, outp) in [
            ("q_proj", "self_attn", h, h),
            ("k_proj", "self_attn", h, kv),
            ("v_proj", "self_attn", h, kv),
            ("o_proj", "self_attn", h, h),
            ("gate_proj", "mlp", h, i),
            ("up_proj", "mlp", h, i),
            ("down_proj", "mlp", i, h),
        ] {
            if lora.target_modules.iter().any(|m| m == t) {
                out.push((format!("model.layers.{l}.{group}.{t}"), inp, outp));
            }
        }
    }
    out
}

const PREFIX: &str = "base_model.model.";

impl Adapter {
    /// A fresh adapter: `A` uniform in ±1/sqrt(in) from `seed`, `B` zero.
    pub fn init(
        cfg: &LmConfig,
        lora: LoraConfig,
        seed: u64,
        device: &Device,
    ) -> Result<Self, LmError> {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut weights = BTreeMap::new();
        for (name, inp, out) in modules(cfg, &lora) {
            let bound = 1.0 / (inp as f32).sqrt();
            let a: Vec<f32> = (0..lora.r * inp)
                .map(|_| rng.random_range(-bound..=bound))
                .collect();
            let a = Tensor::from_vec(a, (lora.r, inp), device)?;
            let b = Tensor::zeros((out, lora.r), candle_core::DType::F32, device)?;
            weights.insert(name, (a, b));
        }
        Ok(Self {
            config: lora,
            weights,
        })
    }

    /// `(alpha / r) · B (A x)` for module `name`, if adapted.
    pub fn delta(&self, name: &str, x: &Tensor) -> Result<Option<Tensor>, LmError> {
        let Some((a, b)) = self.weights.get(name) else {
            return Ok(None);
        };
        let scale = f64::from(self.config.lora_alpha) / self.config.r.max(1) as f64;
        let ax = x.broadcast_matmul(&a.t()?)?;
        Ok(Some((ax.broadcast_matmul(&b.t()?)? * scale)?))
    }

    /// Writes `adapter_config.json` and `adapter_model.safetensors` into `dir` (created).
    pub fn save(&self, dir: &Path) -> Result<(), LmError> {
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |e| LmError::Io { path: p, io: e }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let cpath = dir.join("adapter_config.json");
        let json = serde_json::to_string_pretty(&self.config).map_err(|e| LmError::Io {
            path: cpath.clone(),
            io: std::io::Error::other(e),
        })?;
        std::fs::write(&cpath, json).map_err(io(&cpath))?;
        let mut map: HashMap<String, Tensor> = HashMap::new();
        for (name, (a, b)) in &self.weights {
            map.insert(format!("{PREFIX}{name}.lora_A.weight"), a.clone());
            map.insert(format!("{PREFIX}{name}.lora_B.weight"), b.clone());
        }
        let wpath = dir.join("adapter_model.safetensors");
        candle_core::safetensors::save(&map, &wpath).map_err(|e| LmError::WeightsFile {
            path: wpath,
            msg: e.to_string(),
        })
    }

    /// Reads an adapter of a model shaped `cfg` from `dir`, checking every tensor.
    pub fn load(dir: &Path, cfg: &LmConfig, device: &Device) -> Result<Self, LmError> {
        let cpath = dir.join("adapter_config.json");
        let config: LoraConfig = super::folder::read_json(&cpath)?;
        if config.r == 0 {
            return Err(LmError::ConfigField {
                path: cpath,
                field: "r".into(),
                expected: "a positive rank".into(),
            });
        }
        if let Some(bad) = config
            .target_modules
            .iter()
            .find(|m| !TARGETS.contains(&m.as_str()))
        {
            return Err(LmError::ConfigField {
                path: cpath,
                field: "target_modules".into(),
                expected: format!("names from {TARGETS:?}, not {bad:?}"),
            });
        }
        let wpath = dir.join("adapter_model.safetensors");
        let loaded =
            candle_core::safetensors::load(&wpath, device).map_err(|e| LmError::WeightsFile {
                path: wpath.clone(),
                msg: e.to_string(),
            })?;
        let mut weights = BTreeMap::new();
        for (name, inp, out) in modules(cfg, &config) {
            let get = |suffix: &str, shape: [usize; 2]| -> Result<Tensor, LmError> {
                let key = format!("{PREFIX}{name}.{suffix}");
                let t = loaded.get(&key).ok_or_else(|| LmError::MissingTensor {
                    path: wpath.clone(),
                    name: key.clone(),
                    shape: shape.to_vec(),
                })?;
                if t.dims() != shape {
                    return Err(LmError::TensorShape {
                        path: wpath.clone(),
                        name: key,
                        found: t.dims().to_vec(),
                        expected: shape.to_vec(),
                    });
                }
                Ok(t.to_dtype(candle_core::DType::F32)?)
            };
            let a = get("lora_A.weight", [config.r, inp])?;
            let b = get("lora_B.weight", [out, config.r])?;
            super::folder::check_finite(
                [
                    (&format!("{PREFIX}{name}.lora_A.weight"), &a),
                    (&format!("{PREFIX}{name}.lora_B.weight"), &b),
                ],
                &wpath,
            )?;
            weights.insert(name, (a, b));
        }
        Ok(Self { config, weights })
    }
}
