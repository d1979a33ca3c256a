//! Language-model policies: a Qwen2-style decoder with Hugging Face weight names
//! ([`model`]), its `config.json` ([`config`]), the default word-level tokenizer
//! ([`tokenizer`]) and model folders on disk ([`folder`]).

pub mod config;
pub mod cpu;
pub(crate) use cpu::infer::lock;
pub mod folder;
mod forward;
pub mod lora;
pub mod model;
pub mod policy;
pub use cpu::{KvCache, RowKv, backward_passes, release_buffers, tape_shared_tokens};
pub mod tokenizer;

use std::path::PathBuf;
use thiserror::Error;

pub use config::{LmConfig, Preset};
pub use folder::ModelFolder;
pub use forward::Band;
pub use lora::{Adapter, AdapterOwner, LoraConfig};
pub use model::{Decoder, Lora, Pass, Weights};
pub use policy::{LmPolicy, ModelSource, NamedAdapter, TrainHandle, Trainable};

/// The device named `cpu` or `cuda:N` (the N-th GPU; a build with the `cuda` feature). Errs
/// with what was expected, or why the GPU cannot be opened.
pub fn parse_device(name: &str) -> Result<candle_core::Device, String> {
    if name == "cpu" {
        return Ok(candle_core::Device::Cpu);
    }
    let Some(n) = name
        .strip_prefix("cuda:")
        .and_then(|n| n.parse::<usize>().ok())
    else {
        return Err(format!("{name:?}: expected cpu or cuda:N"));
    };
    if !candle_core::utils::cuda_is_available() {
        return Err(format!(
            "{name}: this build has no CUDA (build with --features cuda on a machine with the \
             CUDA toolkit)"
        ));
    }
    candle_core::Device::new_cuda(n).map_err(|mut e| {
        // The cause, not candle's backtrace (printed with the error when RUST_BACKTRACE is set).
        while let candle_core::Error::WithBacktrace { inner, .. } = e {
            e = *inner;
        }
        format!("{name}: the GPU cannot be opened: {e}")
    })
}

/// What can go wrong with a model, its folder or its tokenizer.
#[derive(Debug, Error)]
pub enum LmError {
    /// A file could not be read or written.
    #[error("{path}: {io}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        io: std::io::Error,
    },
    /// `config.json` is not valid JSON of the expected shape.
    #[error("{path}:{line}:{col}: {msg}")]
    ConfigSyntax {
        /// The file.
        path: PathBuf,
        /// Line (1-based).
        line: usize,
        /// Column (1-based).
        col: usize,
        /// What is wrong.
        msg: String,
    },
    /// A `config.json` field has a value the decoder cannot use.
    #[error("{path}: field `{field}` cannot be used; expected {expected}")]
    ConfigField {
        /// The file.
        path: PathBuf,
        /// The field.
        field: String,
        /// What it should be.
        expected: String,
    },
    /// The weights file cannot be read as safetensors.
    #[error("{path}: cannot read the weights: {msg}")]
    WeightsFile {
        /// The safetensors file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// The output folder exists already.
    #[error("{path}: already exists; choose another folder or remove it first")]
    Exists {
        /// The folder.
        path: PathBuf,
    },
    /// A weight the configuration needs is not in the file.
    #[error("{path}: tensor `{name}` is missing; expected shape {shape:?}")]
    MissingTensor {
        /// The safetensors file.
        path: PathBuf,
        /// The tensor's name.
        name: String,
        /// Its expected shape.
        shape: Vec<usize>,
    },
    /// A weight has the wrong shape.
    #[error("{path}: tensor `{name}` has shape {found:?}; expected {expected:?}")]
    TensorShape {
        /// The safetensors file.
        path: PathBuf,
        /// The tensor's name.
        name: String,
        /// Its shape in the file.
        found: Vec<usize>,
        /// The shape the configuration implies.
        expected: Vec<usize>,
    },
    /// A weight holds NaN or an infinity.
    #[error(
        "{path}: tensor `{name}` holds {value} at flat index {index} (of {len}); expected \
         finite numbers (the file is damaged, or was saved from a diverged run)"
    )]
    NonFinite {
        /// The safetensors file.
        path: PathBuf,
        /// The tensor's name.
        name: String,
        /// The first bad entry's index in the flattened tensor.
        index: usize,
        /// Its value (NaN, inf or -inf).
        value: f32,
        /// The tensor's number of entries.
        len: usize,
    },
    /// The tokenizer cannot be read or does not fit the model or the scene.
    #[error("{path}: {msg}")]
    Tokenizer {
        /// The tokenizer file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// A sequence longer than the rotary table.
    #[error("a prompt of {tokens} tokens is longer than max_position_embeddings {max}")]
    TooLong {
        /// Tokens in the prompt.
        tokens: usize,
        /// The model's limit.
        max: usize,
    },
    /// A tensor operation failed.
    #[error("tensor error: {0}")]
    Candle(candle_core::Error),
}

/// By hand rather than `#[from]`: the message already holds the error, which as a source too
/// would be printed twice in a chain (`{:#}`).
impl From<candle_core::Error> for LmError {
    fn from(e: candle_core::Error) -> Self {
        LmError::Candle(e)
    }
}
