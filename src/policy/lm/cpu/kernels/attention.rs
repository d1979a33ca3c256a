//! Attention for inference: each query row over a span of packed key rows, SIMD blocks of keys.

use candle_core::{Result, Tensor, bail};
use rayon::prelude::*;

use super::{exp, with_data3};
use crate::policy::gemm::transpose;

/// Attention for inference over packed rows, no backward: query row `r` of `q`
/// (`(rows, heads, dim)`) attends to the key/value rows `spans[r].0 .. spans[r].0 +
/// spans[r].1` of `k` and `v` (`(rows_k, kv_heads, dim)`, query head `h` reading key/value
/// head `h / (heads / kv_heads)`). Causal attention over packed prompts gives each row the
/// span from its prompt's first token to itself; a prompt's last token alone sees its whole
/// prompt. Scores, softmax (with [`exp`]) and the weighted sum stay in registers and a
/// `span`-long buffer, one thread per block of query rows.
pub fn span_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    spans: &[(u32, u32)],
    scale: f32,
) -> Result<Tensor> {
    const OP: &str = "span-attention";
    let (rows, heads, dim) = q.dims3()?;
    let (rows_k, kv_heads, dim_k) = k.dims3()?;
    if v.dims() != k.dims() || dim_k != dim || kv_heads == 0 || heads % kv_heads != 0 {
        bail!(
            "{OP}: q {:?}, k {:?}, v {:?}",
            q.shape(),
            k.shape(),
            v.shape()
        );
    }
    if spans.len() != rows
        || spans
            .iter()
            .any(|&(o, n)| n == 0 || (o + n) as usize > rows_k)
    {
        bail!(
            "{OP}: {} spans for {rows} rows over {rows_k} keys",
            spans.len()
        );
    }
    let segments: Vec<Segments> = spans.iter().map(|&own| [(0, 0), own]).collect();
    let out = with_data3((q, k, v), OP, |q, k, v| {
        Ok(attend(q, k, v, &segments, (heads, kv_heads, dim), scale))
    })?;
    Tensor::from_vec(out, (rows, heads, dim), q.device())
}

/// The key rows a query row attends to: two runs `(first, len)`, a shared prefix (possibly
/// empty) and the row's own prompt up to itself, in that order.
pub type Segments = [(u32, u32); 2];

/// [`span_attention`] over plain rows, each query row attending to the key rows of its
/// [`Segments`] (a prompt whose first tokens are another prompt's reads that prompt's rows
/// for them): `q` `(segments.len(), heads, dim)`, `k` and `v` `(rows_k, kv_heads, dim)`,
/// every segment within the key rows, at least one key per row, and `heads` a multiple of
/// `kv_heads` (the caller checks); returns `(segments.len(), heads, dim)`.
pub fn attend(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    segments: &[Segments],
    sizes: (usize, usize, usize),
    scale: f32,
) -> Vec<f32> {
    let mut out = vec![0f32; segments.len() * sizes.0 * sizes.2];
    attend_into(&mut out, q, k, v, segments, sizes, scale);
    out
}

/// [`attend`] into `out` (`(segments.len(), heads, dim)`; every element is written).
pub fn attend_into(
    out: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    segments: &[Segments],
    (heads, kv_heads, dim): (usize, usize, usize),
    scale: f32,
) {
    let rows_k = k.len() / (kv_heads * dim).max(1);
    // Keys transposed to `(kv_heads, dim, stride)`: a query's scores are then `dim`
    // multiply-adds over contiguous runs of keys, no sums across lanes. Each run is padded
    // with zeros to whole blocks of `KEYS`, so the score loop has no remainder.
    let stride = rows_k + KEYS;
    // `k` is `(rows_k, kv_heads · dim)` row-major; its transpose is built in tiles, 16
    // columns (key widths) to a task: element by element down each column, every read was
    // in another cache line (5% of `small`'s forward at 64 x 64 tokens, `perf`).
    let width_kv = kv_heads * dim;
    let mut kt = vec![0f32; width_kv * stride];
    kt.par_chunks_mut(stride * TILE)
        .enumerate()
        .for_each(|(i, cols)| {
            let c0 = i * TILE;
            let n = TILE.min(width_kv - c0);
            transpose(cols, stride, &k[c0.min(k.len())..], width_kv, (rows_k, n));
        });
    let kv = [OwnKv { kt: &kt, stride, v }];
    let from = vec![0u32; segments.len()];
    attend_groups(
        out,
        q,
        (&kv, &from),
        segments,
        (heads, kv_heads, dim),
        scale,
    );
}

/// One prompt's own keys and values for [`attend_own_into`]: its keys transposed, `kt`
/// `(kv_heads · dim, stride)` (key row `r` of width column `c` at `c · stride + r`), with
/// `stride` at least its key rows rounded up to whole blocks of `KEYS` (16) (the score loop
/// reads whole blocks; what it reads past the last key is masked), and its values `v`
/// `(rows, kv_heads · dim)` row-major.
#[derive(Clone, Copy)]
pub struct OwnKv<'a> {
    /// The keys, transposed.
    pub kt: &'a [f32],
    /// `kt`'s row length.
    pub stride: usize,
    /// The values, row-major.
    pub v: &'a [f32],
}

/// [`attend_into`] where each query row reads the keys and values of its own source:
/// `own[from[r]]` for row `r`, whose [`Segments`] index that source's rows. Nothing is
/// copied or transposed per call: an agent with memory keeps its keys transposed from step
/// to step ([`crate::policy::lm::cpu::infer::RowKv`]), where packing every agent's context
/// into one buffer and transposing it again each layer took a quarter of a step.
pub fn attend_own_into(
    out: &mut [f32],
    q: &[f32],
    (own, from): (&[OwnKv<'_>], &[u32]),
    segments: &[Segments],
    sizes: (usize, usize, usize),
    scale: f32,
) {
    attend_groups(out, q, (own, from), segments, sizes, scale);
}

/// The query rows of `segments` in runs sharing a source and their segments' start, each
/// run dispatched to the kernel for its head size.
fn attend_groups(
    out: &mut [f32],
    q: &[f32],
    (own, from): (&[OwnKv<'_>], &[u32]),
    segments: &[Segments],
    (heads, kv_heads, dim): (usize, usize, usize),
    scale: f32,
) {
    let rows = segments.len();
    let group = heads / kv_heads.max(1);
    let width = heads * dim;
    let out = &mut out[..rows * width];
    // Runs of up to GROUP consecutive rows of one prompt (the same shared prefix, the same
    // first own row, one more key each) are computed together where a grouped kernel is
    // compiled (head sizes 32 and 64): each key and value row is loaded once for all of them.
    let most = if matches!(dim, 32 | 64) { GROUP } else { 1 };
    let mut groups: Vec<(usize, usize)> = Vec::new();
    let mut r = 0;
    while r < rows {
        let [pre, (first, len)] = segments[r];
        let mut n = 1;
        while n < most
            && r + n < rows
            && from[r + n] == from[r]
            && segments[r + n] == [pre, (first, len + n as u32)]
        {
            n += 1;
        }
        groups.push((r, n));
        r += n;
    }
    let mut parts: Vec<&mut [f32]> = Vec::with_capacity(groups.len());
    let mut rest = &mut out[..];
    for &(_, n) in &groups {
        let (part, tail) = rest.split_at_mut(n * width);
        parts.push(part);
        rest = tail;
    }
    parts
        .into_par_iter()
        .zip(groups.par_iter())
        .with_min_len(2)
        .for_each(|(out, &(r, n))| {
            let kv = own[from[r] as usize];
            let row = AttendRow {
                out,
                q: &q[r * width..(r + n) * width],
                k: kv.kt,
                v: kv.v,
                segs: segments[r].map(|(f, n)| (f as usize, n as usize)),
                stride: kv.stride,
                heads,
                group,
                kv_heads,
                dim,
                scale,
            };
            let arch = pulp::Arch::new();
            match (dim, n) {
                (32, 1) => arch.dispatch(Attend::<32>(row)),
                (64, 1) => arch.dispatch(Attend::<64>(row)),
                (128, _) => arch.dispatch(Attend::<128>(row)),
                (32, _) => arch.dispatch(AttendGroup::<32>(row, n)),
                (64, _) => arch.dispatch(AttendGroup::<64>(row, n)),
                _ => arch.dispatch(row),
            }
        });
}

/// Key columns per task of the keys' transpose.
const TILE: usize = 16;

/// Keys per block of [`span_attention`]'s score loop (one AVX-512 register).
pub(crate) const KEYS: usize = 16;

/// Query rows computed together by [`AttendGroup`].
pub(super) const GROUP: usize = 4;

/// One query row of [`span_attention`], every head. A `pulp` operation rather than a
/// closure, so that it is compiled inside the dispatcher's AVX-512/AVX2 function.
pub(super) struct AttendRow<'a> {
    out: &'a mut [f32],
    q: &'a [f32],
    /// Keys transposed, `(kv_heads, dim, stride)`, zero past the last key row.
    k: &'a [f32],
    v: &'a [f32],
    /// The key rows read, as `(first, len)` runs.
    segs: [(usize, usize); 2],
    stride: usize,
    heads: usize,
    group: usize,
    kv_heads: usize,
    dim: usize,
    scale: f32,
}

/// Any head size.
impl pulp::WithSimd for AttendRow<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let (stride, dim, scale) = (self.stride, self.dim, self.scale);
        let (group, kv_heads, segs) = (self.group, self.kv_heads, self.segs);
        let Self { out, q, k, v, .. } = self;
        let total: usize = segs.iter().map(|s| s.1).sum();
        let mut p = vec![0f32; total];
        for h in 0..self.heads {
            let kvh = h / group;
            let qh = &q[h * dim..(h + 1) * dim];
            p.fill(0.0);
            let mut off = 0;
            for &(first, len) in &segs {
                let ps = &mut p[off..off + len];
                for (d, &qd) in qh.iter().enumerate() {
                    let at = (kvh * dim + d) * stride + first;
                    let qd = qd * scale;
                    for (pj, &kj) in ps.iter_mut().zip(&k[at..at + len]) {
                        *pj += qd * kj;
                    }
                }
                off += len;
            }
            let max = p.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            for pj in p.iter_mut() {
                *pj = exp(*pj - max);
            }
            let inv = 1.0 / p.iter().sum::<f32>();
            let oh = &mut out[h * dim..(h + 1) * dim];
            oh.fill(0.0);
            let rows = segs.iter().flat_map(|&(first, len)| first..first + len);
            for (r, &pj) in rows.zip(&p) {
                let at = (r * kv_heads + kvh) * dim;
                let w = pj * inv;
                for (o, &x) in oh.iter_mut().zip(&v[at..at + dim]) {
                    *o += w * x;
                }
            }
        }
    }
}

/// Softmax in place of the scores `p` (whole blocks of [`KEYS`]) but its `pads` (left at
/// zero), returning `1 / Σ e^(s - max)`. The maximum and the sum are taken lane by lane over
/// the blocks, then across the lanes, so both vectorise (a running scalar maximum or sum
/// does not).
#[inline(always)]
pub(super) fn softmax_blocks(p: &mut [f32], pads: &[std::ops::Range<usize>]) -> f32 {
    for r in pads {
        p[r.clone()].fill(f32::NEG_INFINITY);
    }
    let mut lanes = [f32::NEG_INFINITY; KEYS];
    for block in p.chunks_exact(KEYS) {
        for (m, &x) in lanes.iter_mut().zip(block) {
            *m = if x > *m { x } else { *m };
        }
    }
    let max = lanes.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    for x in p.iter_mut() {
        *x = exp(*x - max);
    }
    for r in pads {
        p[r.clone()].fill(0.0);
    }
    let mut sums = [0f32; KEYS];
    for block in p.chunks_exact(KEYS) {
        for (s, &x) in sums.iter_mut().zip(block) {
            *s += x;
        }
    }
    1.0 / sums.iter().sum::<f32>()
}

/// [`AttendRow`] for a head size known at compile time: scores a block of [`KEYS`] keys at a
/// time with four independent sums over the head dimension, and the weighted sum of values
/// in two register-held accumulators (even and odd keys), so neither loop waits on one
/// chain of multiply-adds.
pub(super) struct Attend<'a, const D: usize>(AttendRow<'a>);

impl<const D: usize> pulp::WithSimd for Attend<'_, D> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let AttendRow {
            out,
            q,
            k,
            v,
            segs,
            stride,
            heads,
            group,
            kv_heads,
            scale,
            ..
        } = self.0;
        // Each segment's scores in whole blocks: [segment 0 | segment 1].
        let blocks = segs.map(|(_, len)| len.div_ceil(KEYS));
        let offs = [0, blocks[0] * KEYS];
        let pads = [
            segs[0].1..offs[1],
            offs[1] + segs[1].1..(blocks[0] + blocks[1]) * KEYS,
        ];
        let mut p = vec![0f32; (blocks[0] + blocks[1]) * KEYS];
        // Fixed-size views, so that the loops unroll and the sums stay in registers.
        let block = |s: &[f32], at: usize| -> [f32; KEYS] {
            let mut b = [0f32; KEYS];
            b.copy_from_slice(&s[at..at + KEYS]);
            b
        };
        for h in 0..heads {
            let kvh = h / group;
            let mut qh = [0f32; D];
            qh.copy_from_slice(&q[h * D..(h + 1) * D]);
            let kh = &k[kvh * D * stride..(kvh + 1) * D * stride];
            for (s, &(first, _)) in segs.iter().enumerate() {
                let ps = &mut p[offs[s]..offs[s] + blocks[s] * KEYS];
                for (b, pb) in ps.chunks_exact_mut(KEYS).enumerate() {
                    let at = first + b * KEYS;
                    let mut acc = [[0f32; KEYS]; 4];
                    for d in (0..D).step_by(4) {
                        for (u, a) in acc.iter_mut().enumerate() {
                            let qd = qh[d + u];
                            let row = block(kh, (d + u) * stride + at);
                            for l in 0..KEYS {
                                a[l] = qd.mul_add(row[l], a[l]);
                            }
                        }
                    }
                    for (l, x) in pb.iter_mut().enumerate() {
                        *x = ((acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l])) * scale;
                    }
                }
            }
            let inv = softmax_blocks(&mut p, &pads);
            // The weighted sum of values, one block of KEYS output lanes at a time over every
            // key, so that its two accumulators stay in registers (all D lanes at once
            // spilled them: 16 ymm registers hold 128 lanes on AVX2). Each lane adds the same
            // products in the same order as it would all at once.
            const {
                assert!(
                    D.is_multiple_of(KEYS),
                    "head sizes with a kernel are whole blocks"
                )
            };
            let vblock = |r: usize, c: usize| block(v, (r * kv_heads + kvh) * D + c);
            for c in (0..D).step_by(KEYS) {
                let mut even = [0f32; KEYS];
                let mut odd = [0f32; KEYS];
                for (s, &(first, len)) in segs.iter().enumerate() {
                    let ps = &p[offs[s]..offs[s] + len];
                    let mut j = 0;
                    while j + 1 < len {
                        let (w0, w1) = (ps[j], ps[j + 1]);
                        let (x0, x1) = (vblock(first + j, c), vblock(first + j + 1, c));
                        for l in 0..KEYS {
                            even[l] = w0.mul_add(x0[l], even[l]);
                            odd[l] = w1.mul_add(x1[l], odd[l]);
                        }
                        j += 2;
                    }
                    if j < len {
                        let (w, x) = (ps[j], vblock(first + j, c));
                        for l in 0..KEYS {
                            even[l] = w.mul_add(x[l], even[l]);
                        }
                    }
                }
                let o = &mut out[h * D + c..h * D + c + KEYS];
                for ((o, &e), &d) in o.iter_mut().zip(&even).zip(&odd) {
                    *o = (e + d) * inv;
                }
            }
        }
    }
}

/// [`Attend`] for `n` (at most [`GROUP`]) consecutive query rows of one prompt: row `i`
/// reads the segments of the first row with `i` more own keys. Scores and weighted sums run
/// over the last row's keys for all rows at once (each key block and value row loaded once,
/// one independent sum per row); a row's keys past its own are masked in its softmax.
pub(super) struct AttendGroup<'a, const D: usize>(AttendRow<'a>, usize);

impl<const D: usize> pulp::WithSimd for AttendGroup<'_, D> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let AttendGroup(row, n) = self;
        let (k, v, stride, scale) = (row.k, row.v, row.stride, row.scale);
        let (heads, group, kv_heads) = (row.heads, row.group, row.kv_heads);
        let (out, q, segs) = (row.out, row.q, row.segs);
        let n = n.min(GROUP);
        let lens: [usize; GROUP] = std::array::from_fn(|i| segs[1].1 + i.min(n - 1));
        // The last row's segments, each in whole blocks: [segment 0 | segment 1].
        let segs = [segs[0], (segs[1].0, lens[n - 1])];
        let blocks = segs.map(|(_, len)| len.div_ceil(KEYS));
        let offs = [0, blocks[0] * KEYS];
        let width = (blocks[0] + blocks[1]) * KEYS;
        let mut p = vec![0f32; GROUP * width];
        let block = |s: &[f32], at: usize| -> [f32; KEYS] {
            let mut b = [0f32; KEYS];
            b.copy_from_slice(&s[at..at + KEYS]);
            b
        };
        for h in 0..heads {
            let kvh = h / group;
            let mut qs = [[0f32; D]; GROUP];
            for (i, qi) in qs.iter_mut().enumerate().take(n) {
                qi.copy_from_slice(&q[(i * heads + h) * D..(i * heads + h + 1) * D]);
            }
            let kh = &k[kvh * D * stride..(kvh + 1) * D * stride];
            for (s, &(first, _)) in segs.iter().enumerate() {
                for b in 0..blocks[s] {
                    let at = first + b * KEYS;
                    let mut acc = [[0f32; KEYS]; GROUP];
                    for d in 0..D {
                        let row = block(kh, d * stride + at);
                        for (a, qi) in acc.iter_mut().zip(&qs) {
                            let qd = qi[d];
                            for l in 0..KEYS {
                                a[l] = qd.mul_add(row[l], a[l]);
                            }
                        }
                    }
                    for (i, a) in acc.iter().enumerate().take(n) {
                        let at = i * width + offs[s] + b * KEYS;
                        for (x, &y) in p[at..at + KEYS].iter_mut().zip(a) {
                            *x = y * scale;
                        }
                    }
                }
            }
            let mut inv = [0f32; GROUP];
            for (i, w) in inv.iter_mut().enumerate().take(n) {
                let pads = [segs[0].1..offs[1], offs[1] + lens[i]..width];
                *w = softmax_blocks(&mut p[i * width..(i + 1) * width], &pads);
            }
            // The weighted sums of values, one block of KEYS output lanes at a time (see
            // `Attend`): GROUP accumulators of one block stay in registers.
            const {
                assert!(
                    D.is_multiple_of(KEYS),
                    "head sizes with a kernel are whole blocks"
                )
            };
            for c in (0..D).step_by(KEYS) {
                let mut acc = [[0f32; KEYS]; GROUP];
                for (s, &(first, len)) in segs.iter().enumerate() {
                    for j in 0..len {
                        let x = block(v, ((first + j) * kv_heads + kvh) * D + c);
                        for (i, a) in acc.iter_mut().enumerate() {
                            let w = p[i * width + offs[s] + j];
                            for l in 0..KEYS {
                                a[l] = w.mul_add(x[l], a[l]);
                            }
                        }
                    }
                }
                for (i, a) in acc.iter().enumerate().take(n) {
                    let at = (i * heads + h) * D + c;
                    for (o, &x) in out[at..at + KEYS].iter_mut().zip(a) {
                        *o = x * inv[i];
                    }
                }
            }
        }
    }
}
