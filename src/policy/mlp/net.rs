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

/// Hidden width of both layers.
const HIDDEN: usize = 64;

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
/// [`CellSum`], the header fields through a matrix product. Differentiable in `w1`.
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
fn shapes(inputs: usize, actions: usize, words: usize) -> Vec<(&'static str, [usize; 2])> {
    let mut out = vec![
        ("l1.weight", [HIDDEN, inputs]),
        ("l1.bias", [HIDDEN, 1]),
        ("l2.weight", [HIDDEN, HIDDEN]),
        ("l2.bias", [HIDDEN, 1]),
        ("pi.weight", [actions, HIDDEN]),
        ("pi.bias", [actions, 1]),
        ("v.weight", [1, HIDDEN]),
        ("v.bias", [1, 1]),
    ];
    if words > 0 {
        out.push(("say.weight", [words + 1, HIDDEN]));
        out.push(("say.bias", [words + 1, 1]));
    }
    out
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
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let vars = shapes(cells * CODES + dense, actions, words)
            .into_iter()
            .map(|(name, [out, inp])| {
                let data: Vec<f32> = if name.ends_with("bias") {
                    vec![0.0; out]
                } else {
                    let small = name.starts_with("pi.") || name.starts_with("say.");
                    let gain = if small { 0.01 } else { 1.0 };
                    let bound = gain * (3.0 / inp as f32).sqrt();
                    (0..inp * out)
                        .map(|_| rng.random_range(-bound..=bound))
                        .collect()
                };
                let t = if name.ends_with("bias") {
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
    /// given it; a decision's log-probability is the sum of the two.
    pub fn heads(&self, rows: &[&Encoded]) -> candle_core::Result<Heads> {
        let w = |i: usize| self.vars[i].1.as_tensor();
        let h = first_layer(w(0), rows, self.cells, self.dense)?;
        let h = h.broadcast_add(w(1))?.tanh()?;
        let layer = |x: &Tensor, i: usize| x.matmul(&w(i).t()?)?.broadcast_add(w(i + 1));
        let h = layer(&h, 2)?.tanh()?;
        Ok(Heads {
            logits: layer(&h, 4)?,
            values: layer(&h, 6)?.squeeze(D::Minus1)?,
            words: if self.words > 0 {
                Some(layer(&h, 8)?)
            } else {
                None
            },
        })
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
        let vars = shapes(cfg.cells * CODES + cfg.dense, cfg.actions, cfg.words)
            .into_iter()
            .map(|(name, [out, inp])| {
                let want: Vec<usize> = if name.ends_with("bias") {
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
                let var = Var::from_tensor(&t)
                    .map_err(|e| format!("{}: {name}: {e}", wpath.display()))?;
                Ok((name.to_string(), var))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Self {
            vars,
            cells: cfg.cells,
            dense: cfg.dense,
            actions: cfg.actions,
            words: cfg.words,
        })
    }
}
