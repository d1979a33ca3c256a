//! The SIMD helpers the kernels share: an `exp` that vectorises, and `pulp`'s run-time dispatch.

/// `e^x` without a libm call, so that loops over it vectorise: `2^n · e^f` with
/// `n = round(x log₂e)`, `f = x − n ln 2` (Cody-Waite: `ln 2` in two parts, so `f` is exact
/// enough for large `x`) and `e^f` (`|f| ≤ ½ ln 2`) from its degree-7 Taylor polynomial.
/// Relative error below 4e-7 on `[-87, 88]` (tested); `x` is clamped to that range, so
/// `e^-∞` gives about 1e-38, not 0 (the kernels never exponentiate masked scores).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 = LN2_HI + LN2_LO, LN2_HI with few enough bits that n · LN2_HI is exact.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding and subtracting 1.5 · 2²³ rounds to the nearest integer in any SIMD width.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let t = x * LOG2E + ROUND;
    let n = t - ROUND;
    let f = (x - n * LN2_HI) - n * LN2_LO;
    let mut p = 1.0 / 5040.0;
    for c in [
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ] {
        p = p * f + c;
    }
    // 2^n from n's bits in `t` (its low mantissa bits hold n once ROUND's are taken away):
    // integer operations that vectorise, where `n as i32` (a saturating conversion) does
    // not.
    let n_bits = t.to_bits().wrapping_sub(ROUND.to_bits());
    p * f32::from_bits(n_bits.wrapping_add(127) << 23)
}

/// The widest vector instructions the kernels run here, as their run-time dispatch chooses
/// them: `AVX-512`, `AVX2+FMA`, or `baseline` (SSE2 on x86; the only choice elsewhere). A
/// build without the `avx512` feature stops at `AVX2+FMA` on any CPU.
pub fn instructions() -> &'static str {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        #[allow(unreachable_patterns)]
        match pulp::Arch::new() {
            pulp::Arch::Scalar => "baseline",
            pulp::Arch::V3(_) => "AVX2+FMA",
            _ => "AVX-512",
        }
    }
    #[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
    {
        "baseline"
    }
}

/// Runs `f` compiled for the widest vector instructions this CPU has (AVX-512, AVX2+FMA,
/// or none), chosen at run time, so the kernels' loops vectorise beyond the SSE2 baseline.
#[inline(always)]
pub(crate) fn vectorised<R>(f: impl FnOnce() -> R) -> R {
    pulp::Arch::new().dispatch(f)
}

/// Partial results per lane of [`sum`], [`max`] and [`dot`]: element `i` goes to lane
/// `i % LANES`, and the lanes are combined pairwise at the end. A single running total is a
/// chain of dependent additions that the compiler may not reorder (one element per addition's
/// latency, about 4 cycles); independent lanes vectorise, in an order fixed by the length
/// alone, so the result is the same bits on any thread count and either instruction set.
const LANES: usize = 16;

/// Combines the lanes pairwise: lane `j` with lane `j + w`, for `w` = 8, 4, 2, 1.
#[inline(always)]
fn fold(mut acc: [f32; LANES], op: impl Fn(f32, f32) -> f32) -> f32 {
    let mut w = LANES;
    while w > 1 {
        w /= 2;
        for j in 0..w {
            acc[j] = op(acc[j], acc[j + w]);
        }
    }
    acc[0]
}

/// `Σ x`, in [`LANES`] partial sums (call inside [`vectorised`]).
#[inline(always)]
pub(crate) fn sum(x: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for j in 0..LANES {
            acc[j] += c[j];
        }
    }
    for (a, &v) in acc.iter_mut().zip(rest) {
        *a += v;
    }
    fold(acc, |a, b| a + b)
}

/// `max x` (−∞ for none), in [`LANES`] partial maxima (call inside [`vectorised`]).
#[inline(always)]
pub(crate) fn max(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for j in 0..LANES {
            acc[j] = acc[j].max(c[j]);
        }
    }
    for (a, &v) in acc.iter_mut().zip(rest) {
        *a = a.max(v);
    }
    fold(acc, f32::max)
}

/// `Σ a·b` over the shorter of the two, in [`LANES`] partial sums (call inside
/// [`vectorised`]).
#[inline(always)]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for j in 0..LANES {
            acc[j] += x[j] * y[j];
        }
    }
    for ((s, &x), &y) in acc.iter_mut().zip(ra).zip(rb) {
        *s += x * y;
    }
    fold(acc, |a, b| a + b)
}

/// Writes `e^(x − shift)` over `x` and returns their sum, in [`LANES`] partial sums (call
/// inside [`vectorised`]).
#[inline(always)]
pub(crate) fn exp_sum(x: &mut [f32], shift: f32) -> f32 {
    let mut acc = [0f32; LANES];
    let mut chunks = x.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for j in 0..LANES {
            c[j] = exp(c[j] - shift);
            acc[j] += c[j];
        }
    }
    for (a, v) in acc.iter_mut().zip(chunks.into_remainder()) {
        *v = exp(*v - shift);
        *a += *v;
    }
    fold(acc, |a, b| a + b)
}
