//! `config.json` of a model folder: the Hugging Face Qwen2 fields this decoder uses. Other
//! fields of a real Hugging Face config (architectures, torch_dtype, token ids, ...) are
//! accepted and ignored.

use serde::{Deserialize, Serialize};

/// The decoder's shape, as in a Hugging Face Qwen2 `config.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LmConfig {
    /// Rows of the embedding and of the output layer.
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the MLP's hidden layer.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (grouped-query attention); defaults to `num_attention_heads`.
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// Longest sequence the rotary table covers.
    #[serde(default = "default_max_pos")]
    pub max_position_embeddings: usize,
    /// Rotary embedding base.
    #[serde(default = "default_rope_theta")]
    pub rope_theta: f64,
    /// RMS norm epsilon.
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    /// Whether the output layer reuses the embedding (no `lm_head.weight` tensor).
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// The MLP activation; only `silu` is supported.
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// A value head (`value_head.weight` (1, hidden) and `value_head.bias` (1)) on the final
    /// hidden state, for actor-critic training. Not a Hugging Face field: other tools ignore
    /// it and the tensors.
    #[serde(default)]
    pub value_head: bool,
    /// Written for Hugging Face tools: `["Qwen2ForCausalLM"]`.
    #[serde(default)]
    pub architectures: Vec<String>,
    /// Written for Hugging Face tools: `"qwen2"`.
    #[serde(default)]
    pub model_type: String,
}

fn default_max_pos() -> usize {
    2048
}
fn default_rope_theta() -> f64 {
    10_000.0
}
fn default_eps() -> f64 {
    1e-6
}
fn default_act() -> String {
    "silu".into()
}

/// The model sizes `emergence model init` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// Hidden 128, 4 layers, 4 heads, intermediate 512 (about 1M parameters).
    Tiny,
    /// Hidden 512, 8 layers, 8 heads, intermediate 2048, vocabulary 4096 (about 38M).
    Small,
}

impl Preset {
    /// The preset named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "tiny" => Some(Self::Tiny),
            "small" => Some(Self::Small),
            _ => None,
        }
    }
}

impl LmConfig {
    /// The configuration of `preset` for a tokenizer of `vocab` entries.
    pub fn preset(preset: Preset, vocab: usize) -> Self {
        let (hidden, layers, heads, inter, vocab_size, tie) = match preset {
            Preset::Tiny => (128, 4, 4, 512, vocab, true),
            Preset::Small => (512, 8, 8, 2048, vocab.max(4096), false),
        };
        Self {
            vocab_size,
            hidden_size: hidden,
            intermediate_size: inter,
            num_hidden_layers: layers,
            num_attention_heads: heads,
            num_key_value_heads: Some(heads),
            max_position_embeddings: 8192,
            rope_theta: 10_000.0,
            rms_norm_eps: 1e-6,
            tie_word_embeddings: tie,
            hidden_act: "silu".into(),
            value_head: true,
            architectures: vec!["Qwen2ForCausalLM".into()],
            model_type: "qwen2".into(),
        }
    }

    /// Key/value heads.
    pub fn kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads.max(1)
    }

    /// The first field that cannot work, with what it should be.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let nonzero = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.kv_heads()),
            ("max_position_embeddings", self.max_position_embeddings),
        ];
        for (name, v) in nonzero {
            if v == 0 {
                return Err((name, "a positive integer".into()));
            }
        }
        if !self.hidden_size.is_multiple_of(self.num_attention_heads)
            || !self.head_dim().is_multiple_of(2)
        {
            return Err((
                "num_attention_heads",
                format!(
                    "a divisor of hidden_size {} leaving an even head width",
                    self.hidden_size
                ),
            ));
        }
        if !self.num_attention_heads.is_multiple_of(self.kv_heads()) {
            return Err((
                "num_key_value_heads",
                format!(
                    "a divisor of num_attention_heads {}",
                    self.num_attention_heads
                ),
            ));
        }
        if self.hidden_act != "silu" {
            return Err(("hidden_act", "\"silu\"".into()));
        }
        if !(self.rms_norm_eps > 0.0 && self.rms_norm_eps.is_finite()) {
            return Err(("rms_norm_eps", "a small positive number".into()));
        }
        if !(self.rope_theta > 0.0 && self.rope_theta.is_finite()) {
            return Err(("rope_theta", "a positive number".into()));
        }
        Ok(())
    }

    /// Trainable parameters.
    pub fn parameters(&self) -> usize {
        let (h, i, v) = (self.hidden_size, self.intermediate_size, self.vocab_size);
        let kv = self.kv_heads() * self.head_dim();
        let attn = h * h + h + 2 * (h * kv + kv) + h * h;
        let layer = attn + 3 * h * i + 2 * h;
        let head = if self.tie_word_embeddings { 0 } else { v * h };
        let value = if self.value_head { h + 1 } else { 0 };
        v * h + self.num_hidden_layers * layer + h + head + value
    }
}
