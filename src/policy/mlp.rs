//! `mlp`: the classic-MARL baseline. The same observations as the language model, as
//! feature rows (one-hot view cells plus header fields), through a small two-layer tanh
//! network in candle with a policy head and a value head; all its agents, across all arenas,
//! in one batched forward per step. Weights come from a seeded stream. It is the fast path
//! for long CPU runs, and an `mlp` agent can share an arena with a language-model agent.
//!
//! It learns with the same trainer as the language model (`train --learner mlp`): the
//! network lives behind an [`MlpHandle`] that the policy and the trainer share, so an
//! update is seen by the next decision. A trained network is a folder of `mlp.json` (its
//! sizes) and `mlp.safetensors`; a scene or `--eval-against` names it `mlp:DIR`.

use candle_core::{D, Device, Tensor, Var};
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::sampling::sample;
use super::{Decision, Policy, PolicyStats};
use crate::core::Observation;
pub use crate::core::{CODES, Encoded, encode};

/// Hidden width of both layers.
const HIDDEN: usize = 64;

/// The feature row of an observation, written out: one-hot view cells, then one-hot
/// known-map cells, then header fields ([`Encoded`]). Its length depends only on the scene.
pub fn features(obs: &Observation, out: &mut Vec<f32>) {
    let mut e = Encoded::default();
    encode(obs, &mut e);
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
                super::sampling::check_finite(name, &t).map_err(|e| {
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

/// The network shared by an [`MlpPolicy`] and its trainer: empty until the policy meets its
/// first observation (the feature count depends on the scene), or filled from a folder.
#[derive(Clone, Default)]
pub struct MlpHandle(Arc<Mutex<Option<MlpNet>>>);

impl std::fmt::Debug for MlpHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MlpHandle")
    }
}

impl MlpHandle {
    /// The network, once there is one (a clone sharing its variables).
    pub fn net(&self) -> Option<MlpNet> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Puts `net` in.
    pub fn set(&self, net: MlpNet) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(net);
    }
}

/// The `mlp` policy.
pub struct MlpPolicy {
    seed: u64,
    actions: usize,
    /// The scene's talk vocabulary (0 without talk).
    words: usize,
    device: Device,
    handle: MlpHandle,
    /// Read the network from this folder at setup.
    folder: Option<PathBuf>,
    stats: PolicyStats,
    failure: Option<String>,
}

impl MlpPolicy {
    /// A policy whose weights come from `seed`.
    pub fn new(seed: u64, device: Device) -> Self {
        Self::with_handle(seed, device, MlpHandle::default())
    }

    /// A policy whose network is shared through `handle` (a trainer holds the other end);
    /// a network already in the handle is kept.
    pub fn with_handle(seed: u64, device: Device, handle: MlpHandle) -> Self {
        Self {
            seed,
            actions: 0,
            words: 0,
            device,
            handle,
            folder: None,
            stats: PolicyStats::default(),
            failure: None,
        }
    }

    /// A policy that reads its network from a model folder (`mlp.json`, `mlp.safetensors`)
    /// when it is set up.
    pub fn from_folder(dir: PathBuf, device: Device, handle: MlpHandle) -> Self {
        Self {
            folder: Some(dir),
            ..Self::with_handle(0, device, handle)
        }
    }

    /// The network, built from the seed for observations like `e` if there is none yet.
    fn net(&mut self, e: &Encoded) -> Result<MlpNet, String> {
        if let Some(net) = self.handle.net() {
            if !net.fits(e) {
                return Err(format!(
                    "the network reads {} cells and {} header fields; this scene's \
                     observations have {} and {} (it was trained on another scene or map size)",
                    net.cells,
                    net.dense,
                    e.cells.len(),
                    e.dense.len()
                ));
            }
            return Ok(net);
        }
        let net = MlpNet::with_words(
            e.cells.len(),
            e.dense.len(),
            self.actions,
            self.words,
            self.seed,
            &self.device,
        )
        .map_err(|e| format!("cannot build the network: {e}"))?;
        self.handle.set(net.clone());
        Ok(net)
    }
}

impl Policy for MlpPolicy {
    fn setup(&mut self, scene: &crate::scene::Scene, actions: &[String]) -> Result<(), String> {
        self.actions = actions.len();
        self.words = crate::envs::family::of(scene)
            .vocabulary(scene)
            .map_or(0, |w| w.len());
        if let Some(dir) = &self.folder {
            let net = MlpNet::load(dir, &self.device)?;
            if net.actions != self.actions || net.words != self.words {
                return Err(format!(
                    "{}: the network has {} actions and {} words to say; this scene has {} \
                     and {}",
                    dir.join(CONFIG_FILE).display(),
                    net.actions,
                    net.words,
                    self.actions,
                    self.words
                ));
            }
            self.handle.set(net);
        }
        Ok(())
    }

    fn failure(&self) -> Option<String> {
        self.failure.clone()
    }

    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        if batch.is_empty() || self.actions == 0 || self.failure.is_some() {
            return;
        }
        let start = Instant::now();
        let rows: Vec<Encoded> = batch
            .iter()
            .map(|d| {
                let mut e = Encoded::default();
                encode(d.obs, &mut e);
                e
            })
            .collect();
        let net = match self.net(&rows[0]) {
            Ok(net) => net,
            Err(e) => {
                self.stats.errors += 1;
                self.failure.get_or_insert(e);
                return;
            }
        };
        if rows.iter().any(|r| !net.fits(r)) {
            self.stats.errors += 1;
            self.failure
                .get_or_insert("observations of different sizes in one scene".into());
            return;
        }
        let refs: Vec<&Encoded> = rows.iter().collect();
        let out = net.heads(&refs).and_then(|h| {
            Ok((
                h.logits.to_vec2::<f32>()?,
                h.values.to_vec1::<f32>()?,
                h.words.map(|w| w.to_vec2::<f32>()).transpose()?,
            ))
        });
        let (logits, values, words) = match out {
            Ok(out) => out,
            Err(e) => {
                self.stats.errors += 1;
                self.failure.get_or_insert(format!("forward pass: {e}"));
                return;
            }
        };
        if let Some((d, (i, v))) = batch.iter().zip(&logits).find_map(|(d, l)| {
            let mask = d.mask;
            super::sampling::first_non_finite(l, |i| mask.allows(i as u8)).map(|bad| (d, bad))
        }) {
            self.stats.errors += 1;
            self.failure.get_or_insert(format!(
                "its action distribution is not a distribution (score {v} for action {i} of \
                 agent {} in arena {}): its weights hold NaN or infinities; stopped",
                d.agent.slot, d.agent.arena
            ));
            return;
        }
        for ((d, l), v) in batch.iter_mut().zip(&logits).zip(&values) {
            let mask = d.mask;
            let (pick, probs, logprob, entropy) = sample(l, |i| mask.allows(i as u8), d.rng);
            d.action.0 = pick as u8;
            d.trace.tokens.clear();
            d.trace.logprob = logprob;
            d.trace.entropy = entropy;
            d.trace.probs = probs;
            d.trace.value = Some(*v);
            d.trace.said = None;
            d.trace.said_logprob = 0.0;
        }
        // Then what to say: silence (choice 0) or word k (choice k + 1), from its own head.
        if let Some(words) = &words {
            for (d, w) in batch.iter_mut().zip(words) {
                let Some(say) = d.say.as_deref_mut() else {
                    continue;
                };
                let (pick, _, logprob, _) = sample(w, |_| true, d.rng);
                say.0 = pick.checked_sub(1).map(|k| k as u8);
                d.trace.said = Some(pick as u8);
                d.trace.said_logprob = logprob;
            }
        }
        self.stats.decisions += batch.len() as u64;
        self.stats.forwards += 1;
        self.stats.seconds += start.elapsed().as_secs_f64();
    }

    fn stats(&self) -> Option<PolicyStats> {
        Some(self.stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two observations of 5 cells and the header fields, as a grid family would give.
    fn rows() -> Vec<Encoded> {
        let mut out = Vec::new();
        for (k, cells) in [[1u8, 0, 3, 15, 2], [2, 2, 0, 1, 9]]
            .into_iter()
            .enumerate()
        {
            let obs = Observation {
                view: cells.to_vec(),
                step: 7 * k as u32,
                facing: k as u8,
                team: 1,
                ..Default::default()
            };
            let mut e = Encoded::default();
            encode(&obs, &mut e);
            out.push(e);
        }
        out
    }

    fn net(e: &Encoded) -> MlpNet {
        let net = MlpNet::new(e.cells.len(), e.dense.len(), 4, 11, &Device::Cpu).expect("net");
        // A policy head as large as the others, so that its gradients are not tiny.
        let pi = net.vars()[4].1.clone();
        pi.set(&(pi.as_tensor() * 100.0).expect("scale"))
            .expect("set");
        net
    }

    /// The first layer's column sums are the product of the written-out one-hot row.
    #[test]
    fn the_cell_sum_equals_the_one_hot_product() {
        let rows = rows();
        let net = net(&rows[0]);
        let refs: Vec<&Encoded> = rows.iter().collect();
        let (logits, values) = net.forward(&refs).expect("forward");
        // By hand: x · W1ᵀ + b1 → tanh → ... over `features`' dense rows.
        let x: Vec<f32> = rows
            .iter()
            .flat_map(|e| {
                let mut f: Vec<f32> = Vec::new();
                for &c in &e.cells {
                    f.extend((0..CODES).map(|i| f32::from(u8::from(i == usize::from(c)))));
                }
                f.extend_from_slice(&e.dense);
                f
            })
            .collect();
        let x = Tensor::from_vec(x, (2, net.inputs()), &Device::Cpu).expect("x");
        let w = |i: usize| net.vars()[i].1.as_tensor().clone();
        let layer = |x: &Tensor, i: usize| {
            x.matmul(&w(i).t().expect("t"))
                .and_then(|y| y.broadcast_add(&w(i + 1)))
                .expect("layer")
        };
        let h = layer(&x, 0).tanh().expect("tanh");
        let h = layer(&h, 2).tanh().expect("tanh");
        let want_l: Vec<Vec<f32>> = layer(&h, 4).to_vec2().expect("l");
        let want_v: Vec<f32> = layer(&h, 6).squeeze(1).expect("v").to_vec1().expect("v");
        let got_l: Vec<Vec<f32>> = logits.to_vec2().expect("l");
        let got_v: Vec<f32> = values.to_vec1().expect("v");
        for (a, b) in got_l.iter().flatten().zip(want_l.iter().flatten()) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
        for (a, b) in got_v.iter().zip(&want_v) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
        // And `features` writes the same row out.
        let mut f = Vec::new();
        features(
            &Observation {
                view: vec![1, 0, 3, 15, 2],
                team: 1,
                ..Default::default()
            },
            &mut f,
        );
        assert_eq!(f.len(), net.inputs());
        assert_eq!(f[1], 1.0);
        assert_eq!(f[CODES], 1.0);
    }

    /// Every variable gets a gradient, and each agrees with central finite differences (f32,
    /// so steps of 1e-2 and a tolerance of 2% of the largest derivative).
    #[test]
    fn gradients_reach_every_variable_and_match_finite_differences() {
        let rows = rows();
        let net = net(&rows[0]);
        let refs: Vec<&Encoded> = rows.iter().collect();
        let coef = Tensor::new(
            &[[0.3f32, -1.0, 0.7, 0.2], [-0.5, 0.4, 1.1, -0.9]],
            &Device::Cpu,
        )
        .expect("coef");
        let loss = |net: &MlpNet| -> Tensor {
            let (l, v) = net.forward(&refs).expect("forward");
            let a = (l * &coef).and_then(|x| x.sum_all()).expect("a");
            let b = v.sqr().and_then(|x| x.sum_all()).expect("b");
            (a + b).expect("loss")
        };
        let grads = loss(&net).backward().expect("backward");
        for (name, var) in net.vars() {
            let g = grads.get(var.as_tensor()).expect(name);
            let g: Vec<f32> = g.flatten_all().and_then(|g| g.to_vec1()).expect("g");
            let top = g.iter().fold(0f32, |m, x| m.max(x.abs()));
            assert!(top > 0.0, "{name}: no gradient");
            // Check the entries with the largest derivatives and a few others.
            let mut picks: Vec<usize> = (0..g.len()).step_by((g.len() / 5).max(1)).collect();
            picks.extend(
                g.iter()
                    .enumerate()
                    .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
                    .map(|(i, _)| i),
            );
            for i in picks {
                let flat = var.as_tensor().flatten_all().expect("flat");
                let mut w: Vec<f32> = flat.to_vec1().expect("w");
                let at = |w: &[f32]| -> f32 {
                    let t = Tensor::from_vec(w.to_vec(), var.as_tensor().shape(), &Device::Cpu)
                        .expect("t");
                    var.set(&t).expect("set");
                    loss(&net).to_scalar::<f32>().expect("loss")
                };
                let x0 = w[i];
                let eps = 1e-2;
                w[i] = x0 + eps;
                let up = at(&w);
                w[i] = x0 - eps;
                let down = at(&w);
                w[i] = x0;
                at(&w);
                let fd = (up - down) / (2.0 * eps);
                assert!(
                    (fd - g[i]).abs() <= 0.02 * top.max(1e-3),
                    "{name}[{i}]: backward {} vs finite difference {fd}",
                    g[i]
                );
            }
        }
    }

    /// A saved network reads back to the same outputs; a broken folder is named with what
    /// was expected.
    #[test]
    fn a_saved_network_loads_back_and_bad_files_are_named() {
        let rows = rows();
        let net = net(&rows[0]);
        let refs: Vec<&Encoded> = rows.iter().collect();
        let dir = tempfile::tempdir().expect("tmp");
        net.save(dir.path()).expect("save");
        let back = MlpNet::load(dir.path(), &Device::Cpu).expect("load");
        let a: Vec<Vec<f32>> = net.forward(&refs).expect("a").0.to_vec2().expect("a");
        let b: Vec<Vec<f32>> = back.forward(&refs).expect("b").0.to_vec2().expect("b");
        assert_eq!(a, b);
        // A clone shares the variables; a frozen copy does not.
        let frozen = net.frozen_copy().expect("copy");
        let shared = net.clone();
        let w = &net.vars()[0].1;
        w.set(&w.as_tensor().zeros_like().expect("z")).expect("set");
        let sum = |n: &MlpNet| {
            n.vars()[0]
                .1
                .as_tensor()
                .abs()
                .and_then(|x| x.sum_all())
                .and_then(|x| x.to_scalar::<f32>())
                .expect("sum")
        };
        assert_eq!(sum(&shared), 0.0);
        assert!(sum(&frozen) > 0.0);

        let cfg = dir.path().join(CONFIG_FILE);
        std::fs::write(&cfg, "{\n  \"cells\": 5,\n  \"dense\": x\n}").expect("write");
        let err = MlpNet::load(dir.path(), &Device::Cpu)
            .err()
            .expect("bad json");
        assert!(err.contains("mlp.json:3:"), "{err}");
        // One cell more than the weights hold.
        let sizes = format!(
            r#"{{"cells": 6, "dense": {}, "actions": 4, "hidden": 64}}"#,
            net.dense
        );
        std::fs::write(&cfg, sizes).expect("write");
        let err = MlpNet::load(dir.path(), &Device::Cpu)
            .err()
            .expect("bad shape");
        assert!(
            err.contains("l1.weight has shape") && err.contains("6 cells"),
            "{err}"
        );
        back.save(dir.path()).expect("save");
        let mut map = candle_core::safetensors::load(dir.path().join(WEIGHTS_FILE), &Device::Cpu)
            .expect("load");
        map.insert(
            "v.bias".into(),
            Tensor::new(&[f32::NAN], &Device::Cpu).expect("nan"),
        );
        candle_core::safetensors::save(&map, dir.path().join(WEIGHTS_FILE)).expect("save");
        let err = MlpNet::load(dir.path(), &Device::Cpu).err().expect("nan");
        assert!(err.contains("v.bias holds NaN"), "{err}");
    }
}
