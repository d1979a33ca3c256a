//! The language model's CPU backend: what makes a step fast here, apart from the model.
//!
//! | file | what |
//! |---|---|
//! | `infer` | the inference engine: prompts packed end to end (shared prefixes read once), plain buffers, one `gemm` (`policy/gemm.rs`) per product, LoRA per run of rows |
//! | `train` | the training path: the same forward keeping its activations, a hand-written backward, tied into candle's autograd |
//! | `parts` | two halves of a batch side by side, a thread each |
//! | `pool` | the training path's recycled buffers |
//! | [`kernels`] | fused operations (RMS norm, softmaxes, rotary embedding, SwiGLU, attention), forward and backward, SIMD |
//!
//! The model ([`super::model`]) holds the weights and calls in here on the CPU; elsewhere it
//! runs candle's operations.

pub(super) mod infer;
pub mod kernels;
mod parts;
mod pool;
pub(super) mod train;

pub use infer::{KvCache, RowKv};
pub use pool::release_buffers;
pub use train::{backward_passes, tape_shared_tokens};
