//! Model folders in the Hugging Face layout: `config.json`, `model.safetensors`,
//! `tokenizer.json`. Folders are written to a temporary sibling and renamed into place, so
//! a crash never leaves half a model, and an existing folder is never overwritten.

use candle_core::{Device, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tokenizers::Tokenizer;

use super::LmError;
use super::config::{LmConfig, Preset};
use super::model::{Decoder, Weights, init_weights, weight_shapes};
use super::tokenizer::{build_tokenizer, default_vocabulary};
use crate::scene::Scene;

/// A model folder, loaded.
pub struct ModelFolder {
    /// Where it was read from.
    pub dir: PathBuf,
    /// `config.json`.
    pub config: LmConfig,
    /// `model.safetensors`.
    pub weights: Weights,
    /// `tokenizer.json`.
    pub tokenizer: Tokenizer,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LmError + '_ {
    move |e| LmError::Io {
        path: path.to_path_buf(),
        io: e,
    }
}

/// Reads a JSON file into `T`; syntax and shape errors carry the file's line and column.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, LmError> {
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    serde_json::from_str(&text).map_err(|e| LmError::ConfigSyntax {
        path: path.to_path_buf(),
        line: e.line(),
        col: e.column(),
        msg: e
            .to_string()
            .split(" at line")
            .next()
            .unwrap_or_default()
            .to_string(),
    })
}

/// Reads and checks `config.json`.
pub fn read_config(path: &Path) -> Result<LmConfig, LmError> {
    let cfg: LmConfig = read_json(path)?;
    cfg.check()
        .map_err(|(field, expected)| LmError::ConfigField {
            path: path.to_path_buf(),
            field: field.to_string(),
            expected,
        })?;
    Ok(cfg)
}

/// Refuses weights holding NaN or an infinity, naming the first such tensor (in name order)
/// and entry.
pub fn check_finite<'a>(
    weights: impl IntoIterator<Item = (&'a String, &'a candle_core::Tensor)>,
    path: &Path,
) -> Result<(), LmError> {
    let mut all: Vec<_> = weights.into_iter().collect();
    all.sort_by(|a, b| a.0.cmp(b.0));
    for (name, t) in all {
        if let Some((index, value)) = crate::policy::sampling::first_non_finite_entry(t)? {
            return Err(LmError::NonFinite {
                path: path.to_path_buf(),
                name: name.clone(),
                index,
                value,
                len: t.elem_count(),
            });
        }
    }
    Ok(())
}

impl ModelFolder {
    /// Loads `dir`: config, weights (every tensor checked against the config) and tokenizer.
    pub fn load(dir: &Path, device: &Device) -> Result<Self, LmError> {
        let config = read_config(&dir.join("config.json"))?;
        let wpath = dir.join("model.safetensors");
        if !wpath.exists() {
            return Err(LmError::Io {
                path: wpath,
                io: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
            });
        }
        let loaded =
            candle_core::safetensors::load(&wpath, device).map_err(|e| LmError::WeightsFile {
                path: wpath.clone(),
                msg: e.to_string(),
            })?;
        let weights: Weights = loaded.into_iter().collect();
        // Build once to check every name and shape against the config.
        Decoder::new(&config, &weights, &wpath)?;
        check_finite(&weights, &wpath)?;
        let tpath = dir.join("tokenizer.json");
        let tokenizer = Tokenizer::from_file(&tpath).map_err(|e| LmError::Tokenizer {
            path: tpath.clone(),
            msg: e.to_string(),
        })?;
        super::tokenizer::check_tokenizer(&tokenizer).map_err(|msg| LmError::Tokenizer {
            path: tpath.clone(),
            msg,
        })?;
        let n = tokenizer.get_vocab_size(true);
        if n > config.vocab_size {
            return Err(LmError::Tokenizer {
                path: tpath,
                msg: format!(
                    "{n} tokens, more than the model's vocab_size {}",
                    config.vocab_size
                ),
            });
        }
        // Ids index the embedding: one past its rows would fail at the first forward.
        let vocab = tokenizer.get_vocab(true);
        if let Some((token, &id)) = vocab.iter().max_by_key(|(_, id)| **id)
            && id as usize >= config.vocab_size
        {
            return Err(LmError::Tokenizer {
                path: tpath,
                msg: format!(
                    "token {token:?} has id {id}; expected ids below the model's vocab_size {} \
                     (config.json)",
                    config.vocab_size
                ),
            });
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            config,
            weights,
            tokenizer,
        })
    }

    /// A fresh model of `preset` with the default tokenizer for `scenes`, weights from `seed`.
    pub fn init(
        preset: Preset,
        seed: u64,
        scenes: &[Scene],
        device: &Device,
    ) -> Result<Self, LmError> {
        let vocab = default_vocabulary(scenes);
        let tokenizer = build_tokenizer(&vocab).map_err(|msg| LmError::Tokenizer {
            path: PathBuf::from("tokenizer.json"),
            msg,
        })?;
        let config = LmConfig::preset(preset, vocab.len());
        let weights = init_weights(&config, seed, device)?;
        Ok(Self {
            dir: PathBuf::new(),
            config,
            weights,
            tokenizer,
        })
    }

    /// The decoder over these weights.
    pub fn decoder(&self) -> Result<Decoder, LmError> {
        Decoder::new(
            &self.config,
            &self.weights,
            &self.dir.join("model.safetensors"),
        )
    }

    /// Writes the folder to `dir`, which must not exist yet.
    pub fn save(&self, dir: &Path) -> Result<(), LmError> {
        if dir.exists() {
            return Err(LmError::Exists {
                path: dir.to_path_buf(),
            });
        }
        let parent = match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&parent).map_err(io(&parent))?;
        let name = dir
            .file_name()
            .map_or("model".into(), |n| n.to_string_lossy().to_string());
        let tmp = parent.join(format!(".{name}.tmp-{}", std::process::id()));
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
        }
        std::fs::create_dir(&tmp).map_err(io(&tmp))?;
        let cpath = tmp.join("config.json");
        let json = serde_json::to_string_pretty(&self.config).map_err(|e| LmError::Io {
            path: cpath.clone(),
            io: std::io::Error::other(e),
        })?;
        std::fs::write(&cpath, json).map_err(io(&cpath))?;
        let wpath = tmp.join("model.safetensors");
        let map: HashMap<String, Tensor> = weight_shapes(&self.config)
            .into_iter()
            .filter_map(|(n, _)| self.weights.get(&n).map(|t| (n, t.clone())))
            .collect();
        candle_core::safetensors::save(&map, &wpath).map_err(|e| LmError::WeightsFile {
            path: wpath.clone(),
            msg: e.to_string(),
        })?;
        let tpath = tmp.join("tokenizer.json");
        self.tokenizer
            .save(&tpath, true)
            .map_err(|e| LmError::Tokenizer {
                path: tpath.clone(),
                msg: e.to_string(),
            })?;
        std::fs::rename(&tmp, dir).map_err(io(dir))
    }
}
