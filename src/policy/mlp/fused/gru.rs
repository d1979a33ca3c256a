//! The `gru`'s core on the fused path: the GRU cell over a part's rows, which lie as whole
//! sequences one after another, and its backward pass through time. The same equations as
//! [`crate::policy::mlp::MlpNet::cell`] (PyTorch's `GRUCell`; gates in the order reset,
//! update, new):
//!
//! ```text
//! gi = W_ih x + b_ih,   gh = W_hh h⁻ + b_hh            (x: the row's h1; h⁻: the state before)
//! r = σ(gi_r + gh_r),   z = σ(gi_z + gh_z),   n = tanh(gi_n + r ⊙ gh_n)
//! h = n + z ⊙ (h⁻ − n)
//! ```
//!
//! `h⁻` is the row's stored state where a sequence starts, else the previous row's `h`.
//! Backward, row by row from the last, with `dh` the heads' gradient plus what the next row
//! of the sequence sends back:
//!
//! ```text
//! da_n = dh ⊙ (1 − z) ⊙ (1 − n²),   da_z = dh ⊙ (h⁻ − n) ⊙ z (1 − z),   da_r = da_n ⊙ gh_n ⊙ r (1 − r)
//! dgi = [da_r, da_z, da_n],   dgh = [da_r, da_z, da_n ⊙ r]
//! dh⁻ = dh ⊙ z + W_hhᵀ dgh       (sent to the previous row; dropped at a sequence's start)
//! ```
//!
//! The weights' gradients are then products over all the part's rows at once
//! (`dgiᵀ x`, `dghᵀ h⁻`), and `dx = dgi W_ih` goes on into the first layer. The recurrence
//! itself runs a row at a time (a row's `W_hh h⁻` as 64 vector updates of its 192 gate
//! pre-activations), the products over rows on the part's thread.

use super::{H, exp, tanh, vectorised};

/// Where a row's state comes from.
#[derive(Debug, Clone, Copy)]
pub struct Mem<'a> {
    /// The state the decision was made from (stored in the rollout), `H` values; read where
    /// a sequence starts.
    pub state: &'a [f32],
    /// Whether a sequence starts at this row (else its state is the previous row's).
    pub start: bool,
}

/// A part's buffers for the core.
#[derive(Default)]
pub(super) struct Bufs {
    /// `W_ih x + b_ih`, `m × 3H`.
    pub gi: Vec<f32>,
    /// `W_hh h⁻ + b_hh`, `m × 3H`.
    pub gh: Vec<f32>,
    /// `r, z, n` of each row, `m × 3H`.
    pub gates: Vec<f32>,
    /// Each row's state before its step, `m × H`.
    pub hprev: Vec<f32>,
    /// The gradients into `gi` and `gh`, `m × 3H`.
    pub dgi: Vec<f32>,
    pub dgh: Vec<f32>,
}

#[inline(always)]
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// The recurrence over `m` rows whose `gi` is computed: each row's `h⁻`, `gh`, gates and
/// state `h` (into `out`, `m × H`). `whh_t` is `W_hhᵀ` `(H, 3H)`.
pub(super) fn forward(b: &mut Bufs, out: &mut [f32], whh_t: &[f32], bhh: &[f32], mem: &[Mem<'_>]) {
    let m = mem.len();
    let g3 = 3 * H;
    super::sized(&mut b.gh, m * g3);
    super::sized(&mut b.gates, m * g3);
    super::sized(&mut b.hprev, m * H);
    let (gi, gh, gates, hprev) = (&b.gi, &mut b.gh, &mut b.gates, &mut b.hprev);
    vectorised(
        #[inline(always)]
        || {
            for (i, me) in mem.iter().enumerate() {
                let hp = &mut hprev[i * H..(i + 1) * H];
                if me.start || i == 0 {
                    hp.copy_from_slice(&me.state[..H]);
                } else {
                    hp.copy_from_slice(&out[(i - 1) * H..i * H]);
                }
                let g = &mut gh[i * g3..(i + 1) * g3];
                g.copy_from_slice(bhh);
                for (k, &x) in hp.iter().enumerate() {
                    for (y, &w) in g.iter_mut().zip(&whh_t[k * g3..(k + 1) * g3]) {
                        *y += x * w;
                    }
                }
                let gir = &gi[i * g3..(i + 1) * g3];
                let (gr, rest) = gates[i * g3..(i + 1) * g3].split_at_mut(H);
                let (gz, gn) = rest.split_at_mut(H);
                let h = &mut out[i * H..(i + 1) * H];
                for j in 0..H {
                    let r = sigmoid(gir[j] + g[j]);
                    let z = sigmoid(gir[H + j] + g[H + j]);
                    let n = tanh(gir[2 * H + j] + r * g[2 * H + j]);
                    gr[j] = r;
                    gz[j] = z;
                    gn[j] = n;
                    h[j] = n + z * (hp[j] - n);
                }
            }
        },
    );
}

/// The backward pass through time from `dh2` (the heads' gradient into each row's state,
/// `m × H`) into `dgi` and `dgh`. `whh` is `W_hh` `(3H, H)`.
pub(super) fn backward(b: &mut Bufs, dh2: &[f32], whh: &[f32], mem: &[Mem<'_>]) {
    let m = mem.len();
    let g3 = 3 * H;
    super::sized(&mut b.dgi, m * g3);
    super::sized(&mut b.dgh, m * g3);
    let (gh, gates, hprev, dgi, dgh) = (&b.gh, &b.gates, &b.hprev, &mut b.dgi, &mut b.dgh);
    vectorised(
        #[inline(always)]
        || {
            let mut carry = [0f32; H];
            let mut dh = [0f32; H];
            for i in (0..m).rev() {
                for ((d, &a), &c) in dh.iter_mut().zip(&dh2[i * H..(i + 1) * H]).zip(&carry) {
                    *d = a + c;
                }
                let g = &gates[i * g3..(i + 1) * g3];
                let (r, z, n) = (&g[..H], &g[H..2 * H], &g[2 * H..]);
                let hp = &hprev[i * H..(i + 1) * H];
                let ghn = &gh[i * g3 + 2 * H..(i + 1) * g3];
                let di = &mut dgi[i * g3..(i + 1) * g3];
                let dg = &mut dgh[i * g3..(i + 1) * g3];
                for j in 0..H {
                    let da_n = dh[j] * (1.0 - z[j]) * (1.0 - n[j] * n[j]);
                    let da_z = dh[j] * (hp[j] - n[j]) * z[j] * (1.0 - z[j]);
                    let da_r = da_n * ghn[j] * r[j] * (1.0 - r[j]);
                    di[j] = da_r;
                    di[H + j] = da_z;
                    di[2 * H + j] = da_n;
                    dg[j] = da_r;
                    dg[H + j] = da_z;
                    dg[2 * H + j] = da_n * r[j];
                }
                if mem[i].start || i == 0 {
                    carry = [0.0; H];
                    continue;
                }
                for ((c, &d), &zz) in carry.iter_mut().zip(&dh).zip(z) {
                    *c = d * zz;
                }
                for (j, &x) in dg.iter().enumerate() {
                    for (c, &w) in carry.iter_mut().zip(&whh[j * H..(j + 1) * H]) {
                        *c += x * w;
                    }
                }
            }
        },
    );
}
