//! The `mlp`'s network: feature rows (one-hot view cells plus header fields), a two-layer
//! tanh trunk with a policy head, a value head and (families with talk) a word head, its
//! seeded weights, and its folder (`mlp.json`, `mlp.safetensors`).

use candle_core::{D, Device, Tensor, Var};
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use crate::core::Observation;
use crate::core::{CODES, Encoded};
use crate::envs::senses::{Senses, encode};

/// Hidden width of both layers (and of the GRU core's state).
pub const HIDDEN: usize = 64;

/// The feature row of an observation, written out: one-hot view cells, then one-hot
/// known-map cells, then header fields ([`Encoded`]). Its length depends only on the scene.
pub fn features(obs: &Observation, senses: Senses<'_>, out: &mut Vec<f32>) {
    let mut e = Encoded::default();
    encode(obs, senses, &mut e);
    out.clear();
    for &c in &e.cells {
        out.extend((0..CODES).map(|i| f32::from(u8::from(i == usize::from(c)))));
    }
    out.extend_from_slice(&e.dense);
}

/// The one-hot cells' part of the first layer: for each row, the sum of the weight columns
/// its cells' codes select (`columns`, `rows × cells` indices into `l1.weight`'s columns),
/// which is `l1.weight · x` over the one-hot inputs without multiplying their zeros. Its
/// gradient adds each row's output gradient into the columns it read. (Written as a custom
/// op: candle's gather, sum over the middle axis and scatter-add made this layer the
/// slowest part of an update.)
struct CellSum {
    columns: Arc<Vec<u32>>,
    rows: usize,
}

impl CellSum {
    /// The weight `(hidden, inputs)` as a contiguous slice, or an error.
    fn weight<'a>(
        storage: &'a candle_core::CpuStorage,
        layout: &candle_core::Layout,
    ) -> candle_core::Result<(&'a [f32], usize, usize)> {
        let (h, n) = layout.shape().dims2()?;
        let data = storage.as_slice::<f32>()?;
        match layout.contiguous_offsets() {
            Some((start, end)) => Ok((&data[start..end], h, n)),
            None => candle_core::bail!("mlp: l1.weight is not contiguous"),
        }
    }
}

impl candle_core::CustomOp1 for CellSum {
    fn name(&self) -> &'static str {
        "mlp-cell-sum"
    }

    fn cpu_fwd(
        &self,
        storage: &candle_core::CpuStorage,
        layout: &candle_core::Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
        let (w, h, n) = Self::weight(storage, layout)?;
        // The weight transposed, so that each column read is contiguous.
        let mut wt = vec![0f32; n * h];
        for (j, row) in w.chunks_exact(n).enumerate() {
            for (col, &x) in row.iter().enumerate() {
                wt[col * h + j] = x;
            }
        }
        let per = self.columns.len() / self.rows.max(1);
        let mut out = vec![0f32; self.rows * h];
        for (o, cols) in out
            .chunks_exact_mut(h)
            .zip(self.columns.chunks_exact(per.max(1)))
        {
            for &col in cols {
                let col = col as usize;
                if col >= n {
                    candle_core::bail!("mlp: cell column {col} past the weight's {n}");
                }
                for (y, &x) in o.iter_mut().zip(&wt[col * h..col * h + h]) {
                    *y += x;
                }
            }
        }
        Ok((
            candle_core::CpuStorage::F32(out),
            candle_core::Shape::from((self.rows, h)),
        ))
    }

    fn bwd(
        &self,
        arg: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        let (h, n) = arg.dims2()?;
        let g: Vec<f32> = grad.contiguous()?.flatten_all()?.to_vec1()?;
        let per = self.columns.len() / self.rows.max(1);
        let mut gt = vec![0f32; n * h];
        for (gr, cols) in g.chunks_exact(h).zip(self.columns.chunks_exact(per.max(1))) {
            for &col in cols {
                let col = col as usize;
                for (y, &x) in gt[col * h..col * h + h].iter_mut().zip(gr) {
                    *y += x;
                }
            }
        }
        let mut gw = vec![0f32; h * n];
        for (col, row) in gt.chunks_exact(h).enumerate() {
            for (j, &x) in row.iter().enumerate() {
                gw[j * n + col] = x;
            }
        }
        Ok(Some(Tensor::from_vec(gw, (h, n), arg.device())?))
    }
}

/// `w1 · x` for the written-out rows of `rows` (`cells` cells and `dense` header fields each;
/// `w1` is `(hidden, cells·16 + dense)`), without writing them out: the cells through
/// `CellSum`, the header fields through a matrix product. Differentiable in `w1`.
pub fn first_layer(
    w1: &Tensor,
    rows: &[&Encoded],
    cells: usize,
    dense: usize,
) -> candle_core::Result<Tensor> {
    if let Some(r) = rows
        .iter()
        .find(|r| r.cells.len() != cells || r.dense.len() != dense)
    {
        candle_core::bail!(
            "a row of {} cells and {} header fields for a layer of {cells} and {dense}",
            r.cells.len(),
            r.dense.len()
        );
    }
    let b = rows.len();
    let dev = w1.device();
    let values: Vec<f32> = rows.iter().flat_map(|r| r.dense.iter().copied()).collect();
    let mut h = Tensor::from_vec(values, (b, dense), dev)?
        .matmul(&w1.narrow(1, cells * CODES, dense)?.t()?)?;
    if cells > 0 {
        let columns: Vec<u32> = rows
            .iter()
            .flat_map(|r| {
                r.cells
                    .iter()
                    .enumerate()
                    .map(|(k, &code)| (k * CODES + usize::from(code & 0x0f)) as u32)
            })
            .collect();
        h = (h + w1.apply_op1(CellSum {
            columns: Arc::new(columns),
            rows: b,
        })?)?;
    }
    Ok(h)
}

/// The network's variables, by name and shape, for `inputs` features, `actions` actions and
/// (families with talk) `words` vocabulary words, whose head has one more choice: silence.
/// With `memory` the second layer is a GRU cell (PyTorch's names and gate order: reset,
/// update, new) whose state the heads read.
fn shapes(
    inputs: usize,
    actions: usize,
    words: usize,
    memory: bool,
) -> Vec<(&'static str, [usize; 2])> {
    let mut out = vec![("l1.weight", [HIDDEN, inputs]), ("l1.bias", [HIDDEN, 1])];
    if memory {
        out.extend([
            ("gru.weight_ih", [3 * HIDDEN, HIDDEN]),
            ("gru.bias_ih", [3 * HIDDEN, 1]),
            ("gru.weight_hh", [3 * HIDDEN, HIDDEN]),
            ("gru.bias_hh", [3 * HIDDEN, 1]),
        ]);
    } else {
        out.extend([("l2.weight", [HIDDEN, HIDDEN]), ("l2.bias", [HIDDEN, 1])]);
    }
    out.extend([
        ("pi.weight", [actions, HIDDEN]),
        ("pi.bias", [actions, 1]),
        ("v.weight", [1, HIDDEN]),
        ("v.bias", [1, 1]),
    ]);
    if words > 0 {
        out.push(("say.weight", [words + 1, HIDDEN]));
        out.push(("say.bias", [words + 1, 1]));
    }
    out
}

/// Whether variable `name` is a bias (a vector).
fn is_bias(name: &str) -> bool {
    name.ends_with("bias") || name.starts_with("gru.bias")
}

/// The file of the weights in a model folder, and of its sizes.
pub const WEIGHTS_FILE: &str = "mlp.safetensors";
/// The sizes of a saved network (`{"cells": C, "dense": D, "actions": A, "hidden": H,
/// "words": W}`; `words` 0 or absent without talk).
pub const CONFIG_FILE: &str = "mlp.json";

/// What `mlp.json` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MlpConfig {
    /// Cells per observation ([`Encoded::cells`]).
    pub cells: usize,
    /// Header fields per observation ([`Encoded::dense`]).
    pub dense: usize,
    /// Actions of the family.
    pub actions: usize,
    /// Hidden width.
    pub hidden: usize,
    /// Vocabulary words of the family's talk (0: no talk head).
    #[serde(default)]
    pub words: usize,
    /// A GRU core instead of the second tanh layer (the `gru` learner); absent: false.
    #[serde(default)]
    pub memory: bool,
}

/// The network: two tanh layers, a policy head and a value head, over named variables
/// (a clone shares them: the trainer's optimizer steps are seen by every clone at once).
#[derive(Clone)]
pub struct MlpNet {
    vars: Vec<(String, Var)>,
    /// Cells per observation.
    pub cells: usize,
    /// Header fields per observation.
    pub dense: usize,
    /// Actions.
    pub actions: usize,
    /// Vocabulary words (families with talk; its head has `words + 1` choices, the first
    /// one silence), or 0.
    pub words: usize,
    /// Whether the second layer is a GRU cell with a state carried from step to step
    /// ([`MlpNet::step`], [`MlpNet::sequences`]) rather than a tanh layer.
    pub memory: bool,
}

/// What the network computes for a batch of rows.
pub struct Heads {
    /// Action logits `(b, actions)`.
    pub logits: Tensor,
    /// Values `(b,)`.
    pub values: Tensor,
    /// Families with talk: word logits `(b, words + 1)`, silence first.
    pub words: Option<Tensor>,
}

impl MlpNet {
    /// A fresh network without a talk head ([`MlpNet::with_words`]).
    pub fn new(
        cells: usize,
        dense: usize,
        actions: usize,
        seed: u64,
        dev: &Device,
    ) -> candle_core::Result<Self> {
        Self::with_words(cells, dense, actions, 0, seed, dev)
    }

    /// A fresh network whose weights come from `seed`: uniform(±gain·√(3/fan_in)), gain 1
    /// except 0.01 on the policy and talk heads (a near-uniform first policy), biases zero.
    /// With `words` > 0 it also has a talk head: what to say, silence or one of the words.
    pub fn with_words(
        cells: usize,
        dense: usize,
        actions: usize,
        words: usize,
        seed: u64,
        dev: &Device,
    ) -> candle_core::Result<Self> {
        Self::with_core(cells, dense, actions, words, false, seed, dev)
    }

    /// [`MlpNet::with_words`], with a GRU core when `memory` (its weights uniform(±1/√H), as
    /// PyTorch's `nn.GRU`, its biases zero).
    pub fn with_core(
        cells: usize,
        dense: usize,
        actions: usize,
        words: usize,
        memory: bool,
        seed: u64,
        dev: &Device,
    ) -> candle_core::Result<Self> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let vars = shapes(cells * CODES + dense, actions, words, memory)
            .into_iter()
            .map(|(name, [out, inp])| {
                let data: Vec<f32> = if is_bias(name) {
                    vec![0.0; out]
                } else {
                    let small = name.starts_with("pi.") || name.starts_with("say.");
                    let gain = if small { 0.01 } else { 1.0 };
                    let bound = if name.starts_with("gru.") {
                        1.0 / (HIDDEN as f32).sqrt()
                    } else {
                        gain * (3.0 / inp as f32).sqrt()
                    };
                    (0..inp * out)
                        .map(|_| rng.random_range(-bound..=bound))
                        .collect()
                };
                let t = if is_bias(name) {
                    Tensor::from_vec(data, out, dev)?
                } else {
                    Tensor::from_vec(data, (out, inp), dev)?
                };
                Ok((name.to_string(), Var::from_tensor(&t)?))
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(Self {
            vars,
            cells,
            dense,
            actions,
            words,
            memory,
        })
    }

    /// Inputs of the first layer (the one-hot cells and the header fields).
    pub fn inputs(&self) -> usize {
        self.cells * CODES + self.dense
    }

    /// Whether `e` has this network's sizes.
    pub fn fits(&self, e: &Encoded) -> bool {
        e.cells.len() == self.cells && e.dense.len() == self.dense
    }

    /// The variables, by name (`l1.weight`, ..., `v.bias`).
    pub fn vars(&self) -> &[(String, Var)] {
        &self.vars
    }

    /// A copy that shares nothing with this one (a frozen reference).
    pub fn frozen_copy(&self) -> candle_core::Result<Self> {
        Ok(Self {
            vars: self
                .vars
                .iter()
                .map(|(n, v)| Ok((n.clone(), Var::from_tensor(&v.as_tensor().copy()?)?)))
                .collect::<candle_core::Result<_>>()?,
            cells: self.cells,
            dense: self.dense,
            actions: self.actions,
            words: self.words,
            memory: self.memory,
        })
    }

    /// Action logits `(b, actions)` and values `(b,)` of `rows` (each fitting this network),
    /// differentiable in the variables.
    pub fn forward(&self, rows: &[&Encoded]) -> candle_core::Result<(Tensor, Tensor)> {
        let h = self.heads(rows)?;
        Ok((h.logits, h.values))
    }

    /// Every head of `rows`: actions, value and (with talk) words, differentiable in the
    /// variables. The word is chosen from the same hidden state as the action, independently
    /// given it; a decision's log-probability is the sum of the two. A network with memory
    /// reads a state as well: [`MlpNet::step`] or [`MlpNet::sequences`].
    pub fn heads(&self, rows: &[&Encoded]) -> candle_core::Result<Heads> {
        if self.memory {
            candle_core::bail!("the network has a GRU core: its heads read a state too");
        }
        let h = self.embed(rows)?;
        let h = self.linear(&h, "l2")?.tanh()?;
        self.read(&h)
    }

    /// The variable `name`.
    fn var(&self, name: &str) -> candle_core::Result<&Tensor> {
        match self.vars.iter().find(|(n, _)| n == name) {
            Some((_, v)) => Ok(v.as_tensor()),
            None => candle_core::bail!("the network has no variable {name}"),
        }
    }

    /// `x · layer.weightᵀ + layer.bias`.
    fn linear(&self, x: &Tensor, layer: &str) -> candle_core::Result<Tensor> {
        let w = self.var(&format!("{layer}.weight"))?;
        x.matmul(&w.t()?)?
            .broadcast_add(self.var(&format!("{layer}.bias"))?)
    }

    /// The first layer: `tanh(l1 · x + b1)` of every row, `(b, H)`.
    pub fn embed(&self, rows: &[&Encoded]) -> candle_core::Result<Tensor> {
        let h = first_layer(self.var("l1.weight")?, rows, self.cells, self.dense)?;
        h.broadcast_add(self.var("l1.bias")?)?.tanh()
    }

    /// The heads read from the last hidden layer `h` `(b, H)`.
    pub fn read(&self, h: &Tensor) -> candle_core::Result<Heads> {
        Ok(Heads {
            logits: self.linear(h, "pi")?,
            values: self.linear(h, "v")?.squeeze(D::Minus1)?,
            words: if self.words > 0 {
                Some(self.linear(h, "say")?)
            } else {
                None
            },
        })
    }

    /// The GRU cell (Cho et al. 2014, in PyTorch's `nn.GRUCell` form): from input `x` and
    /// state `h` (both `(b, H)`), `r = σ(W_ir x + b_ir + W_hr h + b_hr)`,
    /// `z = σ(W_iz x + b_iz + W_hz h + b_hz)`, `n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))`
    /// and the next state `(1 − z) ⊙ n + z ⊙ h`.
    pub fn cell(&self, x: &Tensor, h: &Tensor) -> candle_core::Result<Tensor> {
        let gi = x
            .matmul(&self.var("gru.weight_ih")?.t()?)?
            .broadcast_add(self.var("gru.bias_ih")?)?;
        let gh = h
            .matmul(&self.var("gru.weight_hh")?.t()?)?
            .broadcast_add(self.var("gru.bias_hh")?)?;
        let part = |t: &Tensor, k: usize| t.narrow(1, k * HIDDEN, HIDDEN);
        let sigmoid =
            |t: Tensor| -> candle_core::Result<Tensor> { (t.neg()?.exp()? + 1.0)?.recip() };
        let r = sigmoid((part(&gi, 0)? + part(&gh, 0)?)?)?;
        let z = sigmoid((part(&gi, 1)? + part(&gh, 1)?)?)?;
        let n = (part(&gi, 2)? + (r * part(&gh, 2)?)?)?.tanh()?;
        // (1 − z) ⊙ n + z ⊙ h = n + z ⊙ (h − n)
        &n + (z * (h - &n)?)?
    }

    /// One step of a network with memory: the heads of `rows` from states `h` `(b, H)`
    /// (zeros at an episode's start), and the states after it.
    pub fn step(&self, rows: &[&Encoded], h: &Tensor) -> candle_core::Result<(Heads, Tensor)> {
        if !self.memory {
            candle_core::bail!("the network has no GRU core");
        }
        let next = self.cell(&self.embed(rows)?, h)?;
        Ok((self.read(&next)?, next))
    }

    /// The heads of sequences laid end to end in `rows` (a sequence starts at each index of
    /// `starts`, the first of them 0, and runs to the next start): each starts from its row
    /// of `h0` `(sequences, H)`, the state its first step was decided from, and carries its
    /// state through its steps (truncated backpropagation through time over each sequence,
    /// as recurrent PPO trains on chunks with the rollout's stored states). The heads come
    /// out in `rows`' order. Sequences run side by side, the longest first, one cell per
    /// time step for all the sequences that long.
    pub fn sequences(
        &self,
        rows: &[&Encoded],
        starts: &[usize],
        h0: &Tensor,
    ) -> candle_core::Result<Heads> {
        if !self.memory {
            candle_core::bail!("the network has no GRU core");
        }
        if starts.first() != Some(&0) || starts.windows(2).any(|w| w[0] >= w[1]) {
            candle_core::bail!("sequence starts {starts:?}: expected 0 first, increasing");
        }
        if starts.last().is_some_and(|&s| s >= rows.len()) {
            candle_core::bail!("a sequence starts past the {} rows", rows.len());
        }
        let dev = h0.device();
        let spans: Vec<(usize, usize)> = starts
            .iter()
            .enumerate()
            .map(|(k, &s)| (s, starts.get(k + 1).copied().unwrap_or(rows.len()) - s))
            .collect();
        // The longest first (a stable sort: ties keep their order), so that at each time
        // step the sequences still running are a prefix of the state.
        let mut order: Vec<usize> = (0..spans.len()).collect();
        order.sort_by_key(|&k| std::cmp::Reverse(spans[k].1));
        let ids = |v: Vec<u32>| Tensor::from_vec(v.clone(), v.len(), dev);
        let mut h = h0.index_select(&ids(order.iter().map(|&k| k as u32).collect())?, 0)?;
        let x = self.embed(rows)?;
        let longest = spans[order[0]].1;
        let mut outs = Vec::with_capacity(longest);
        // Where each row's state lands in the outputs laid end to end.
        let mut at = vec![0u32; rows.len()];
        let mut filled = 0u32;
        for t in 0..longest {
            let running = order.iter().take_while(|&&k| spans[k].1 > t).count();
            let idx: Vec<u32> = order[..running]
                .iter()
                .map(|&k| (spans[k].0 + t) as u32)
                .collect();
            for (j, &i) in idx.iter().enumerate() {
                at[i as usize] = filled + j as u32;
            }
            filled += running as u32;
            let xt = x.index_select(&ids(idx)?, 0)?;
            h = self.cell(&xt, &h.narrow(0, 0, running)?)?;
            outs.push(h.clone());
        }
        let all = Tensor::cat(&outs, 0)?;
        self.read(&all.index_select(&ids(at)?, 0)?)
    }

    /// Writes `mlp.safetensors` and `mlp.json` into `dir` (created if missing).
    pub fn save(&self, dir: &Path) -> Result<(), String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let map: HashMap<String, Tensor> = self
            .vars
            .iter()
            .map(|(n, v)| (n.clone(), v.as_tensor().detach()))
            .collect();
        let wpath = dir.join(WEIGHTS_FILE);
        candle_core::safetensors::save(&map, &wpath)
            .map_err(|e| format!("{}: {e}", wpath.display()))?;
        let cpath = dir.join(CONFIG_FILE);
        let cfg = MlpConfig {
            cells: self.cells,
            dense: self.dense,
            actions: self.actions,
            hidden: HIDDEN,
            words: self.words,
            memory: self.memory,
        };
        let json = serde_json::to_string_pretty(&cfg).map_err(|e| e.to_string())?;
        std::fs::write(&cpath, json).map_err(|e| format!("{}: {e}", cpath.display()))
    }

    /// Reads a network saved by [`MlpNet::save`]; every tensor is checked for its name,
    /// shape and finite values, and the error names the file and what was expected.
    pub fn load(dir: &Path, dev: &Device) -> Result<Self, String> {
        let cpath = dir.join(CONFIG_FILE);
        let text = std::fs::read_to_string(&cpath).map_err(|e| {
            format!(
                "{}: {e} (an mlp model folder holds {CONFIG_FILE} and {WEIGHTS_FILE})",
                cpath.display()
            )
        })?;
        let cfg: MlpConfig = serde_json::from_str(&text).map_err(|e| {
            format!(
                "{}:{}:{}: {e}; expected {{\"cells\": C, \"dense\": D, \"actions\": A, \"hidden\": {HIDDEN}}}",
                cpath.display(),
                e.line(),
                e.column()
            )
        })?;
        if cfg.hidden != HIDDEN {
            return Err(format!(
                "{}: hidden = {}: expected {HIDDEN} (the width this build's mlp has)",
                cpath.display(),
                cfg.hidden
            ));
        }
        let wpath = dir.join(WEIGHTS_FILE);
        let mut tensors = candle_core::safetensors::load(&wpath, dev)
            .map_err(|e| format!("{}: {e}", wpath.display()))?;
        let vars = shapes(
            cfg.cells * CODES + cfg.dense,
            cfg.actions,
            cfg.words,
            cfg.memory,
        )
        .into_iter()
        .map(|(name, [out, inp])| {
            let want: Vec<usize> = if is_bias(name) {
                vec![out]
            } else {
                vec![out, inp]
            };
            let t = tensors
                .remove(name)
                .ok_or_else(|| format!("{}: no tensor {name}", wpath.display()))?;
            if t.dims() != want.as_slice() {
                return Err(format!(
                    "{}: {name} has shape {:?}; expected {want:?} ({CONFIG_FILE} says {} \
                         cells, {} header fields and {} actions)",
                    wpath.display(),
                    t.dims(),
                    cfg.cells,
                    cfg.dense,
                    cfg.actions
                ));
            }
            let t = t
                .to_dtype(candle_core::DType::F32)
                .map_err(|e| format!("{}: {name}: {e}", wpath.display()))?;
            crate::policy::sampling::check_finite(name, &t).map_err(|e| {
                format!(
                    "{}: {e} (the file is damaged, or was saved from a diverged run)",
                    wpath.display()
                )
            })?;
            let var =
                Var::from_tensor(&t).map_err(|e| format!("{}: {name}: {e}", wpath.display()))?;
            Ok((name.to_string(), var))
        })
        .collect::<Result<Vec<_>, String>>()?;
        Ok(Self {
            vars,
            cells: cfg.cells,
            dense: cfg.dense,
            actions: cfg.actions,
            words: cfg.words,
            memory: cfg.memory,
        })
    }
}
