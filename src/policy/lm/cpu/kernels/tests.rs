use super::*;
use super::{attention::*, rms_norm::*, rope::*, softmax::*, swiglu::*};
use candle_core::{D, Device, Var};

fn random(shape: &[usize], seed: u64) -> Tensor {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.random::<f32>() * 4.0 - 2.0).collect();
    Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
}

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

/// Forward outputs and the gradients of `Σ y · r` for every input, through `f`.
fn run(
    inputs: &[Tensor],
    r: &Tensor,
    f: &dyn Fn(&[Tensor]) -> Result<Tensor>,
) -> (Tensor, Vec<Tensor>) {
    let vars: Vec<Var> = inputs
        .iter()
        .map(|t| Var::from_tensor(t).unwrap())
        .collect();
    let ts: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
    let y = f(&ts).unwrap();
    let loss = (&y * r).unwrap().sum_all().unwrap();
    let g = loss.backward().unwrap();
    let grads = ts.iter().map(|t| g.get(t).unwrap().clone()).collect();
    (y, grads)
}

fn agree(
    inputs: &[Tensor],
    fused: &dyn Fn(&[Tensor]) -> Result<Tensor>,
    composed: &dyn Fn(&[Tensor]) -> Result<Tensor>,
    tol: f32,
) {
    let probe = fused(inputs).unwrap();
    let r = random(probe.dims(), 99);
    let (ya, ga) = run(inputs, &r, fused);
    let (yb, gb) = run(inputs, &r, composed);
    assert!(
        max_diff(&ya, &yb) < tol,
        "forward differs by {}",
        max_diff(&ya, &yb)
    );
    for (i, (a, b)) in ga.iter().zip(&gb).enumerate() {
        let d = max_diff(a, b);
        assert!(d < tol, "gradient of input {i} differs by {d}");
        let scale = b.abs().unwrap().flatten_all().unwrap().max(0).unwrap();
        assert!(
            scale.to_scalar::<f32>().unwrap() > 0.0,
            "input {i}: zero gradient"
        );
    }
}

#[test]
fn rms_norm_matches_the_composed_norm_and_its_gradients() {
    let x = random(&[3, 70, 48], 1);
    let w = random(&[48], 2);
    agree(
        &[x, w],
        &|t| rms_norm(&t[0], &t[1], 1e-6),
        &|t| candle_nn::ops::rms_norm_slow(&t[0], &t[1], 1e-6),
        1e-4,
    );
}

#[test]
fn causal_softmax_matches_a_masked_softmax_and_its_gradient() {
    let t = 9;
    let s = random(&[2, 3, t, t], 3);
    let mask: Vec<f32> = (0..t * t)
        .map(|k| {
            if k % t > k / t {
                f32::NEG_INFINITY
            } else {
                0.0
            }
        })
        .collect();
    let mask = Tensor::from_vec(mask, (t, t), &Device::Cpu).unwrap();
    agree(
        &[s],
        &|x| causal_softmax(&x[0], 0.35),
        &|x| candle_nn::ops::softmax(&(&x[0] * 0.35)?.broadcast_add(&mask)?, D::Minus1),
        1e-5,
    );
}

#[test]
fn rope_matches_rope_slow_and_its_gradient() {
    let (b, t, h, d) = (2, 11, 3, 8);
    let x = random(&[b, t, h, d], 4);
    let cos = random(&[16, d / 2], 5);
    let sin = random(&[16, d / 2], 6);
    let tables = RopeTables::new(&cos, &sin).unwrap();
    let (c, s) = (cos.narrow(0, 0, t).unwrap(), sin.narrow(0, 0, t).unwrap());
    agree(
        &[x],
        &|x| rope(&x[0], &tables),
        &|x| {
            let bhtd = x[0].transpose(1, 2)?.contiguous()?;
            candle_nn::rotary_emb::rope_slow(&bhtd, &c, &s)?.transpose(1, 2)
        },
        1e-5,
    );
}

#[test]
fn prefix_softmax_matches_a_masked_softmax_and_its_gradient() {
    let (b, h, t) = (3, 2, 7);
    let lens = [7u32, 1, 4];
    let s = random(&[b, h, 1, t], 12);
    let mask: Vec<f32> = (0..b * t)
        .map(|k| {
            if k % t >= lens[k / t] as usize {
                f32::NEG_INFINITY
            } else {
                0.0
            }
        })
        .collect();
    let mask = Tensor::from_vec(mask, (b, 1, 1, t), &Device::Cpu).unwrap();
    agree(
        &[s],
        &|x| prefix_softmax(&x[0], 0.5, &lens),
        &|x| candle_nn::ops::softmax(&(&x[0] * 0.5)?.broadcast_add(&mask)?, D::Minus1),
        1e-5,
    );
}

#[test]
fn rope_at_positions_matches_rope_along_t() {
    let (b, t, h, d) = (2, 5, 3, 8);
    let x = random(&[b, t, h, d], 13);
    let tables = RopeTables::new(&random(&[16, d / 2], 14), &random(&[16, d / 2], 15)).unwrap();
    let positions: Vec<u32> = (0..b * t).map(|r| (r % t) as u32).collect();
    let rows = x.reshape((b * t, h, d)).unwrap();
    agree(
        &[rows],
        &|x| rope_at(&x[0], &tables, &positions),
        &|x| rope(&x[0].reshape((b, t, h, d))?, &tables)?.reshape((b * t, h, d)),
        1e-6,
    );
}

#[test]
fn span_attention_matches_candle_varlen_flash_attention() {
    // Packed prompts (spans of one key, several key blocks, odd and even lengths), 4
    // query heads over 2 key/value heads; head sizes with their own compiled kernel (32,
    // 64) and without (40).
    let lens = [5u32, 1, 37, 9, 16];
    let total: u32 = lens.iter().sum();
    for dim in [40, 32, 64] {
        let heads = 4;
        let q = random(&[total as usize, heads, dim], 16);
        let k = random(&[total as usize, 2, dim], 17);
        let v = random(&[total as usize, 2, dim], 18);
        let mut spans = Vec::new();
        let mut first = 0;
        for &n in &lens {
            spans.extend((1..=n).map(|i| (first, i)));
            first += n;
        }
        let ours = span_attention(&q, &k, &v, &spans, 0.3).unwrap();
        let l = Tensor::new(&lens[..], &Device::Cpu).unwrap();
        let theirs = candle_nn::attention::flash_attn_varlen_cpu(
            &q, &k, &v, None, &l, &l, 37, 37, 0.3, true, None, None,
        )
        .unwrap();
        let d = max_diff(&ours, &theirs);
        assert!(d < 1e-5, "dim {dim}: {d}");
    }
}

#[test]
fn swiglu_matches_silu_times_up_and_its_gradients() {
    let g = random(&[5000, 3], 7);
    let u = random(&[5000, 3], 8);
    agree(
        &[g, u],
        &|t| swiglu(&t[0], &t[1]),
        &|t| t[0].silu()? * &t[1],
        1e-5,
    );
}

#[test]
fn exp_is_within_4e7_of_libm() {
    let mut worst = 0f64;
    for i in -870_000..=880_000 {
        let x = i as f32 * 1e-4;
        let (a, b) = (f64::from(exp(x)), f64::from(x).exp());
        worst = worst.max(((a - b) / b).abs());
    }
    assert!(worst < 4e-7, "relative error {worst}");
    assert!(exp(f32::NEG_INFINITY) < 1e-37 && exp(f32::INFINITY).is_finite());
}

#[test]
fn the_lane_reductions_give_the_sums_the_maxima_and_the_products() {
    // Lengths below, at and past the lanes, with and without a remainder; values worked by
    // hand: 1 + 2 + ... + n = n(n + 1)/2, the largest is n, and Σ i·(n + 1 − i) =
    // n(n + 1)(n + 2)/6.
    for n in [0usize, 1, 5, 15, 16, 17, 33, 100] {
        let x: Vec<f32> = (1..=n).map(|i| i as f32).collect();
        let y: Vec<f32> = (1..=n).rev().map(|i| i as f32).collect();
        let nf = n as f32;
        assert_eq!(simd::sum(&x), nf * (nf + 1.0) / 2.0, "sum of 1..={n}");
        assert_eq!(
            simd::max(&x),
            if n == 0 { f32::NEG_INFINITY } else { nf },
            "max of 1..={n}"
        );
        assert_eq!(
            simd::dot(&x, &y),
            nf * (nf + 1.0) * (nf + 2.0) / 6.0,
            "dot, n = {n}"
        );
        // e^(x − max) in place, and its sum against f64's.
        let mut e: Vec<f32> = x.iter().map(|v| v / 10.0).collect();
        let want: f64 = e
            .iter()
            .map(|&v| (f64::from(v) - nf as f64 / 10.0).exp())
            .sum();
        let got = simd::exp_sum(&mut e, nf / 10.0);
        assert!(
            (f64::from(got) - want).abs() <= 1e-6 * want.max(1.0),
            "{got} vs {want}"
        );
        assert!((f64::from(e.iter().sum::<f32>()) - want).abs() <= 1e-5 * want.max(1.0));
    }
    // A negative maximum is found (no lane starts at zero).
    assert_eq!(simd::max(&[-3.0, -1.5, -2.0]), -1.5);
}

#[test]
fn results_are_the_same_bits_on_one_and_two_threads() {
    let x = random(&[4, 64, 32], 9);
    let w = random(&[32], 10);
    let r = random(&[4, 64, 32], 11);
    let grads = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let (y, g) = run(&[x.clone(), w.clone()], &r, &|t| {
                rms_norm(&t[0], &t[1], 1e-6)
            });
            let mut out = y.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            for t in g {
                out.extend(t.flatten_all().unwrap().to_vec1::<f32>().unwrap());
            }
            out.into_iter().map(f32::to_bits).collect::<Vec<u32>>()
        })
    };
    assert_eq!(grads(1), grads(2));
}
