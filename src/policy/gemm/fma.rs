//! `gemm`'s AVX2+FMA product, the same arithmetic in a tighter loop.
//!
//! Where `gemm` 0.19 runs its AVX2+FMA kernels (no AVX-512, or a build without the `avx512`
//! feature), its blocked product computes each output as one fused multiply-add chain per
//! block of `kc` terms of the inner dimension, in order from zero, then writes `scale · acc`
//! (the first block, not adding) or `fma(scale, acc, dst)` (every other case): the
//! `gemm-common` crate's `gemm_basic_generic` and micro-kernel epilogue. Its micro-kernel
//! (16 outputs by 6 rows, twelve accumulators) reads the rows it broadcasts through run-time
//! strides, one address addition per broadcast, and packs the weights it loads; on the
//! language model's shapes it ran at 84-91% of OpenBLAS's sgemm (docs/language-models.md).
//!
//! This module computes the same chains with the same `kc` (taken from `gemm-common`'s own
//! [`kernel_params`]), so every output is the same bits as `gemm`'s (tested against it on
//! every shape class, adding or not, scaled or not): the tile is the same 16 × 6 of twelve
//! accumulators, but the six rows are read in place through one shared index (no packing,
//! no address arithmetic in the loop) and the weights are packed once per call (a transpose
//! with 8 × 8 register transposes, row-major weights by copies) into panels whose loads are
//! constant offsets. It takes only products `gemm` computes with that blocked kernel on
//! AVX2 ([`takes`]): its lane-summing kernel (at most 256 outputs), matrix-vector kernels
//! (one row or one output) and two-term sums stay `gemm`'s, so which code computes a
//! product never changes its bits. Each thread keeps its largest packed weights (at most
//! `k · n` values of one product) for the next call.
//!
//! Why by hand: `gemm` is the well-kept crate for this and stays the product everywhere
//! else (AVX-512, other architectures, strided rows); issue 37 asks the AVX2 forward to
//! reach 85% of numpy's sgemm, and `gemm`'s AVX2 kernel alone was below that
//! (`emergence model bench` prints the forward with both, side by side: 1.02-1.06x on one
//! thread; the target is still not reached, docs/language-models.md).

#![allow(unsafe_code)]

use super::{Mat, MatMut, Threads};
use gemm_common::cache::{KernelParams, kernel_params};
use std::sync::atomic::{AtomicBool, Ordering};

/// Outputs per tile: two 8-lane vectors.
const NR: usize = 16;
/// Rows per tile (each broadcast against both vectors).
const MR: usize = 6;
/// `gemm`'s tile for its AVX2+FMA `f32` kernel (outputs by rows, after its transpose):
/// what its block sizes are computed for.
const GEMM_MR: usize = 16;
const GEMM_NR: usize = 6;
/// Bytes of a block of rows kept in the L2 cache while every panel of weights passes.
const ROW_BLOCK_BYTES: usize = 256 * 1024;

/// Off: every product is `gemm`'s (`emergence model bench` times the forward both ways).
static ON: AtomicBool = AtomicBool::new(true);

/// Turns this module's products on or off for the process (the bench's side-by-side
/// reference; the outputs are the same bits either way).
pub(crate) fn set_enabled(on: bool) {
    ON.store(on, Ordering::Relaxed);
}

/// Whether this module computes products here: [`available`] and not turned off.
pub(crate) fn enabled() -> bool {
    ON.load(Ordering::Relaxed) && available()
}

/// Whether this CPU has the instructions of this module's loops (AVX2 and FMA).
pub(crate) fn supported() -> bool {
    std::arch::is_x86_feature_detected!("fma") && std::arch::is_x86_feature_detected!("avx2")
}

/// Whether `gemm` runs its AVX2+FMA kernels on this CPU and in this build, which is when
/// this module's products are its products.
pub(crate) fn available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        // `gemm`'s own dispatch (`gemm-common`'s `gemm_def!`): AVX-512 where its `x86-v4`
        // feature is on and the CPU has `avx512f`, else FMA.
        let avx512 = cfg!(feature = "avx512") && std::arch::is_x86_feature_detected!("avx512f");
        !avx512 && supported()
    })
}

/// Whether [`gemm`] computes `dst (m × n) = a (m × k) · b (k × n)` here: `gemm` would take
/// its blocked kernel (more than 256 outputs, at least 2 rows and 2 outputs, at least 3
/// terms), `a`'s rows are contiguous, `b` is row-major or a transpose of a row-major
/// matrix, and `dst`'s rows are no closer than its width.
pub(super) fn takes(dst: &MatMut<'_>, a: &Mat<'_>, b: &Mat<'_>) -> bool {
    enabled() && fits(dst, a, b)
}

/// The shapes [`takes`] takes, whatever the CPU.
fn fits(dst: &MatMut<'_>, a: &Mat<'_>, b: &Mat<'_>) -> bool {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    m >= 2
        && n >= 2
        && m * n > 256
        && k >= 3
        && a.cs == 1
        && a.rs >= k
        && dst.rs >= n
        && ((b.rs == 1 && b.cs >= k) || (b.cs == 1 && b.rs >= n))
}

/// `gemm`'s block of the inner dimension for this product: its transpose makes the outputs
/// its rows (`n`) and the rows its columns (`m`).
fn block(m: usize, n: usize, k: usize) -> usize {
    if n <= 64 && m <= 64 {
        k.min(512)
    } else {
        let KernelParams { kc, .. } = kernel_params(n, m, k, GEMM_MR, GEMM_NR, 4);
        kc
    }
}

/// `dst = [dst +] scale · a · b` as `gemm` computes it with its AVX2+FMA kernel, for the
/// shapes [`takes`] takes. Panics on a CPU without AVX2 and FMA.
pub(super) fn gemm(
    dst: MatMut<'_>,
    a: Mat<'_>,
    b: Mat<'_>,
    add: bool,
    scale: f32,
    threads: Threads,
) {
    super::check(&dst, &a, &b);
    assert!(
        supported() && fits(&dst, &a, &b),
        "fma::gemm: not this product"
    );
    let (m, k, n) = (a.rows, a.cols, b.cols);
    let kc = block(m, n, k);
    let panels = n.div_ceil(NR);
    PACKED.with(|cell| {
        // Not cleared: `pack` writes every value a kept output reads (the lanes past `n` of
        // the last panel are computed from what was there and never written out).
        let mut packed = cell.take();
        packed.resize(k * panels * NR, 0.0);
        // SAFETY: asserted above: the CPU has AVX2 and FMA; `pack` writes `packed`'s
        // `k · panels · NR` elements and reads `b` inside its view (the `reach` checks).
        unsafe { pack(&mut packed, b, kc) };
        let rows_per_block = (ROW_BLOCK_BYTES / (kc * 4)).clamp(MR, 480) / MR * MR;
        let parts = match threads {
            Threads::Pool => rayon::current_num_threads().clamp(1, m.div_ceil(MR)),
            Threads::One => 1,
        };
        let job = |rows: std::ops::Range<usize>, out: &mut [f32]| {
            let mut start = rows.start;
            while start < rows.end {
                let end = (start + rows_per_block).min(rows.end);
                // SAFETY: as above; `out` holds rows `rows` of `dst` from its first.
                unsafe {
                    row_block(
                        (out, dst.rs, rows.start),
                        (a, start..end),
                        (&packed, n, kc),
                        (add, scale),
                    )
                };
                start = end;
            }
        };
        if parts == 1 {
            job(0..m, dst.data);
        } else {
            // Each part a whole number of tiles of rows; the sums do not depend on the cut.
            let per = m.div_ceil(MR).div_ceil(parts) * MR;
            let mut chunks = Vec::with_capacity(parts);
            let mut rest = &mut *dst.data;
            let mut start = 0;
            while start < m {
                let end = (start + per).min(m);
                let take = if end == m {
                    rest.len()
                } else {
                    (end - start) * dst.rs
                };
                let (head, tail) = rest.split_at_mut(take.min(rest.len()));
                chunks.push((start..end, head));
                rest = tail;
                start = end;
            }
            use rayon::prelude::*;
            chunks
                .into_par_iter()
                .for_each(|(rows, out)| job(rows, out));
        }
        cell.set(packed);
    });
}

thread_local! {
    /// The packed weights of this thread's last product, kept so that a step's many
    /// products reuse one allocation.
    static PACKED: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Packs `b` (k × n) into panels of `NR` outputs: block by block of `kc` terms, panel by
/// panel, term by term, the panel's `NR` values (past `n`, what the buffer held).
#[target_feature(enable = "avx2,fma")]
unsafe fn pack(packed: &mut [f32], b: Mat<'_>, kc: usize) {
    // SAFETY: the caller guarantees AVX2 and FMA and that every pointer is in bounds.
    unsafe {
        use std::arch::x86_64::*;
        let (k, n) = (b.rows, b.cols);
        let panels = n.div_ceil(NR);
        let mut pc = 0;
        while pc < k {
            let len = kc.min(k - pc);
            for jp in 0..panels {
                let out = &mut packed[pc * panels * NR + jp * len * NR..][..len * NR];
                let j0 = jp * NR;
                let width = NR.min(n - j0);
                if b.cs == 1 {
                    // Row-major: each term's outputs are contiguous.
                    for p in 0..len {
                        let src = &b.data[(pc + p) * b.rs + j0..][..width];
                        out[p * NR..p * NR + width].copy_from_slice(src);
                    }
                } else {
                    // A transpose: each output's terms are contiguous (a weight's row), so
                    // blocks of 8 outputs by 8 terms are transposed in registers.
                    let full = width == NR;
                    let mut p = 0;
                    if full {
                        while p + 8 <= len {
                            for half in 0..2 {
                                let base = b.data.as_ptr().add((j0 + half * 8) * b.cs + pc + p);
                                let r: [__m256; 8] =
                                    std::array::from_fn(|i| _mm256_loadu_ps(base.add(i * b.cs)));
                                let t = transpose8(r);
                                for (i, v) in t.iter().enumerate() {
                                    _mm256_storeu_ps(
                                        out.as_mut_ptr().add((p + i) * NR + half * 8),
                                        *v,
                                    );
                                }
                            }
                            p += 8;
                        }
                    }
                    for p in p..len {
                        for jj in 0..width {
                            out[p * NR + jj] = b.data[(j0 + jj) * b.cs + pc + p];
                        }
                    }
                }
            }
            pc += len;
        }
    }
}

/// The transpose of 8 rows of 8 lanes.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn transpose8(r: [std::arch::x86_64::__m256; 8]) -> [std::arch::x86_64::__m256; 8] {
    use std::arch::x86_64::*;
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let s0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let s1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let s2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let s3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let s4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let s5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let s6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let s7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(s0, s4),
        _mm256_permute2f128_ps::<0x20>(s1, s5),
        _mm256_permute2f128_ps::<0x20>(s2, s6),
        _mm256_permute2f128_ps::<0x20>(s3, s7),
        _mm256_permute2f128_ps::<0x31>(s0, s4),
        _mm256_permute2f128_ps::<0x31>(s1, s5),
        _mm256_permute2f128_ps::<0x31>(s2, s6),
        _mm256_permute2f128_ps::<0x31>(s3, s7),
    ]
}

/// Rows `rows` of the product (of `a`'s rows, `n` outputs) into `out`, whose first row is
/// row `first`: every block of terms, every panel, every tile of `MR` rows, so that a panel
/// stays in the L1 cache while the block's rows pass.
#[target_feature(enable = "avx2,fma")]
unsafe fn row_block(
    (out, rs, first): (&mut [f32], usize, usize),
    (a, rows): (Mat<'_>, std::ops::Range<usize>),
    (packed, n, kc): (&[f32], usize, usize),
    (add, scale): (bool, f32),
) {
    // SAFETY: the caller guarantees AVX2 and FMA and that every pointer is in bounds.
    unsafe {
        let k = a.cols;
        let panels = n.div_ceil(NR);
        let mut pc = 0;
        while pc < k {
            let len = kc.min(k - pc);
            // The first block writes `scale · acc` where the product does not add.
            let overwrite = pc == 0 && !add;
            for jp in 0..panels {
                let panel = packed.as_ptr().add(pc * panels * NR + jp * len * NR);
                let w = NR.min(n - jp * NR);
                let mut i = rows.start;
                while i < rows.end {
                    let h = MR.min(rows.end - i);
                    // Past the last row the tile reads the last row again and writes nothing.
                    let src: [*const f32; MR] = std::array::from_fn(|r| {
                        a.data.as_ptr().add((i + r.min(h - 1)) * a.rs + pc)
                    });
                    let dst = out.as_mut_ptr().add((i - first) * rs + jp * NR);
                    if h == MR && w == NR {
                        tile(len, src, panel, (dst, rs), overwrite, scale);
                    } else {
                        let mut tmp = [0f32; MR * NR];
                        if !overwrite {
                            for r in 0..h {
                                for j in 0..w {
                                    tmp[r * NR + j] = *dst.add(r * rs + j);
                                }
                            }
                        }
                        tile(len, src, panel, (tmp.as_mut_ptr(), NR), overwrite, scale);
                        for r in 0..h {
                            for j in 0..w {
                                *dst.add(r * rs + j) = tmp[r * NR + j];
                            }
                        }
                    }
                    i += MR;
                }
            }
            pc += len;
        }
    }
}

/// One tile: `MR` rows (`src`, each from this block's first term) by `NR` outputs (`panel`,
/// term by term), `len` terms, each output one fused multiply-add chain from zero; then
/// `dst = scale · acc` (`overwrite`) or `dst = fma(scale, acc, dst)`, as `gemm` writes.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn tile(
    len: usize,
    src: [*const f32; MR],
    panel: *const f32,
    (dst, rs): (*mut f32, usize),
    overwrite: bool,
    scale: f32,
) {
    // SAFETY: the caller guarantees AVX2 and FMA and that every pointer is in bounds.
    unsafe {
        use std::arch::x86_64::*;
        let mut acc = [[_mm256_setzero_ps(); 2]; MR];
        let mut b = panel;
        for p in 0..len {
            let b0 = _mm256_loadu_ps(b);
            let b1 = _mm256_loadu_ps(b.add(8));
            for r in 0..MR {
                let x = _mm256_broadcast_ss(&*src[r].add(p));
                acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
            }
            b = b.add(NR);
        }
        let s = _mm256_set1_ps(scale);
        for (r, acc) in acc.iter().enumerate() {
            let d = dst.add(r * rs);
            for (v, acc) in acc.iter().enumerate() {
                let d = d.add(v * 8);
                let value = if overwrite {
                    _mm256_mul_ps(s, *acc)
                } else {
                    _mm256_fmadd_ps(s, *acc, _mm256_loadu_ps(d))
                };
                _mm256_storeu_ps(d, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Mat, MatMut, Threads, gemm_crate};
    use super::*;

    fn values(len: usize, seed: u32) -> Vec<f32> {
        // Values of every magnitude and sign, so a changed order of additions shows.
        (0..len)
            .map(|i| {
                let x = (i as u32)
                    .wrapping_mul(2_654_435_761)
                    .wrapping_add(seed.wrapping_mul(97));
                ((x >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * (1.0 + (x % 7) as f32)
            })
            .collect()
    }

    /// The shapes of the tests: rows from 2 to past a block of rows, outputs past a panel
    /// and not a multiple of it, inner dimensions below, at and past `gemm`'s blocks (one
    /// block, two blocks, blocks of unequal length, 512-term blocks for small products).
    const SHAPES: [(usize, usize, usize); 9] = [
        (2, 3, 129),
        (7, 100, 40),
        (13, 512, 20),
        (64, 513, 64),
        (65, 64, 300),
        (100, 1100, 33),
        (300, 2048, 48),
        (45, 2048, 512),
        (130, 128, 2048),
    ];

    /// One product of the tests: `dst (starting as start, rows every rs) = [dst +] scale · a · b`.
    struct Case<'a> {
        a: Mat<'a>,
        b: Mat<'a>,
        start: Vec<f32>,
        rs: usize,
        add: bool,
        scale: f32,
    }

    /// Runs `check` on every shape, with the weights as a transpose and row-major, padded
    /// rows, adding or not, scaled or not; returns the count.
    fn each_case(mut check: impl FnMut(&Case<'_>)) -> usize {
        let mut cases = 0;
        for &(m, k, n) in &SHAPES {
            for transposed in [true, false] {
                for (add, scale) in [(false, 1.0), (true, 1.0), (false, 0.37), (true, -1.5)] {
                    let pad = 3;
                    let a_data = values(m * (k + pad), 1);
                    let b_data = values((k + pad) * (n + pad), 2);
                    check(&Case {
                        a: Mat::strided(&a_data, m, k, k + pad),
                        b: if transposed {
                            Mat::strided(&b_data, n, k, k + pad).t()
                        } else {
                            Mat::strided(&b_data, k, n, n + pad)
                        },
                        start: values(m * (n + pad), 3),
                        rs: n + pad,
                        add,
                        scale,
                    });
                    cases += 1;
                }
            }
        }
        cases
    }

    /// `gemm`'s arithmetic written out: per output, per block of `block`'s terms, one fused
    /// multiply-add chain from zero, then `scale · acc` (the first block, not adding) or
    /// `fma(scale, acc, dst)`.
    fn by_hand(c: &Case<'_>) -> Vec<f32> {
        let (a, b) = (c.a, c.b);
        let (m, k, n) = (a.rows, a.cols, b.cols);
        let kc = block(m, n, k);
        let mut out = c.start.clone();
        for i in 0..m {
            for j in 0..n {
                let d = &mut out[i * c.rs + j];
                for (blk, pc) in (0..k).step_by(kc).enumerate() {
                    let mut acc = 0f32;
                    for p in pc..(pc + kc).min(k) {
                        let (x, y) = (a.data[i * a.rs + p * a.cs], b.data[p * b.rs + j * b.cs]);
                        acc = x.mul_add(y, acc);
                    }
                    *d = if blk == 0 && !c.add {
                        c.scale * acc
                    } else {
                        c.scale.mul_add(acc, *d)
                    };
                }
            }
        }
        out
    }

    /// A pool of three threads, which cuts the rows in three parts whatever the cores.
    fn three_threads() -> &'static rayon::ThreadPool {
        static POOL: std::sync::OnceLock<rayon::ThreadPool> = std::sync::OnceLock::new();
        POOL.get_or_init(|| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(3)
                .build()
                .expect("a pool")
        })
    }

    /// Runs this module's product of `c` on one thread and on three, and asserts `other`'s
    /// bits, and that the padding between rows is left alone.
    fn same_bits(c: &Case<'_>, other: &[f32]) {
        let (m, n, rs) = (c.a.rows, c.b.cols, c.rs);
        for threads in [Threads::One, Threads::Pool] {
            let mut ours = c.start.clone();
            let dst = MatMut::strided(&mut ours, m, n, rs);
            assert!(fits(&dst, &c.a, &c.b));
            three_threads().install(|| gemm(dst, c.a, c.b, c.add, c.scale, threads));
            let differ = ours
                .iter()
                .zip(other)
                .filter(|(x, y)| x.to_bits() != y.to_bits())
                .count();
            let what = format!(
                "{m}x{}x{n} rs {rs} b strides {} {} add {} scale {}",
                c.a.cols, c.b.rs, c.b.cs, c.add, c.scale
            );
            assert_eq!(differ, 0, "{what}");
            for r in 0..m {
                assert_eq!(
                    ours[r * rs + n..r * rs + rs],
                    c.start[r * rs + n..r * rs + rs],
                    "{what}"
                );
            }
        }
    }

    /// The tile computes `gemm`'s arithmetic to the bit (written out in [`by_hand`]), on
    /// every CPU with AVX2 and FMA.
    #[test]
    fn its_products_are_gemms_sums_worked_by_hand() {
        if !supported() {
            eprintln!("no AVX2 and FMA here: nothing to run");
            return;
        }
        let cases = each_case(|c| same_bits(c, &by_hand(c)));
        assert_eq!(cases, SHAPES.len() * 8);
    }

    /// Where `gemm` runs its AVX2+FMA kernels (a CPU without AVX-512, or a build without the
    /// `avx512` feature: `cargo test --no-default-features --lib fma`), every product this
    /// module takes is `gemm`'s bits.
    #[test]
    fn its_products_are_gemms_bits() {
        if !available() {
            eprintln!("gemm runs AVX-512 (or no FMA) here: run with --no-default-features");
            return;
        }
        let cases = each_case(|c| {
            let theirs = [Threads::One, Threads::Pool].map(|threads| {
                let mut out = c.start.clone();
                let dst = MatMut::strided(&mut out, c.a.rows, c.b.cols, c.rs);
                gemm_crate(dst, c.a, c.b, c.add, c.scale, threads);
                out
            });
            assert_eq!(theirs[0], theirs[1]);
            same_bits(c, &theirs[0]);
        });
        assert_eq!(cases, SHAPES.len() * 8);
    }

    /// The products `gemm` computes with another kernel stay `gemm`'s.
    #[test]
    fn it_leaves_gemms_other_kernels_alone() {
        let data = vec![1.0f32; 4096];
        let mut out = vec![0.0f32; 4096];
        let take = |out: &mut [f32], m: usize, k: usize, n: usize| {
            let dst = MatMut::new(out, m, n);
            fits(&dst, &Mat::new(&data, m, k), &Mat::new(&data, k, n))
        };
        // At most 256 outputs (the lane-summing kernel), one row or one output
        // (matrix-vector), two terms.
        assert!(!take(&mut out, 16, 8, 16));
        assert!(!take(&mut out, 1, 64, 512));
        assert!(!take(&mut out, 512, 64, 1));
        assert!(!take(&mut out, 64, 2, 64));
        // Rows read with a stride (a transpose of the activations): `gemm`'s.
        let dst = MatMut::new(&mut out, 32, 32);
        assert!(!fits(
            &dst,
            &Mat::new(&data, 64, 32).t(),
            &Mat::new(&data, 64, 32)
        ));
        assert!(take(&mut out, 16, 8, 17));
    }
}
