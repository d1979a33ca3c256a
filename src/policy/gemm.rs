//! Matrix views over plain `f32` slices (any row and column stride, so a transpose or a
//! block of columns is a view, not a copy) and one checked call of the `gemm` candle's
//! matmul uses, writing into a view. The language model's packed decoders (`lm/cpu/infer.rs`
//! and `lm/cpu/train/`) and the `mlp`'s fused update (`mlp/fused.rs`) do all their products
//! through [`gemm`].

/// A read-only matrix: element `(i, j)` at `data[i · rs + j · cs]`.
#[derive(Clone, Copy)]
pub(crate) struct Mat<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
}

impl<'a> Mat<'a> {
    /// `rows × cols`, row-major and dense.
    pub(crate) fn new(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self::strided(data, rows, cols, cols)
    }

    /// `rows × cols` whose rows start every `rs` elements (a block of columns of a wider
    /// row-major matrix, `data` starting at the block's first element).
    pub(crate) fn strided(data: &'a [f32], rows: usize, cols: usize, rs: usize) -> Self {
        Self {
            data,
            rows,
            cols,
            rs,
            cs: 1,
        }
    }

    /// Columns `start .. start + len`, as a view.
    fn cols(self, start: usize, len: usize) -> Self {
        Self {
            data: &self.data[(start * self.cs).min(self.data.len())..],
            cols: len,
            ..self
        }
    }

    /// Rows `start .. start + len`, as a view.
    fn rows(self, start: usize, len: usize) -> Self {
        Self {
            data: &self.data[(start * self.rs).min(self.data.len())..],
            rows: len,
            ..self
        }
    }

    /// The transpose, as a view.
    pub(crate) fn t(self) -> Self {
        Self {
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }
}

/// A matrix written by [`gemm`]: element `(i, j)` at `data[i · rs + j]`.
pub(crate) struct MatMut<'a> {
    data: &'a mut [f32],
    rows: usize,
    cols: usize,
    rs: usize,
}

impl<'a> MatMut<'a> {
    /// `rows × cols`, row-major and dense.
    pub(crate) fn new(data: &'a mut [f32], rows: usize, cols: usize) -> Self {
        Self::strided(data, rows, cols, cols)
    }

    /// `rows × cols` whose rows start every `rs` elements.
    pub(crate) fn strided(data: &'a mut [f32], rows: usize, cols: usize, rs: usize) -> Self {
        Self {
            data,
            rows,
            cols,
            rs,
        }
    }
}

/// The elements a `rows × cols` view with strides `rs`, `cs` reaches: one past the last.
fn reach(rows: usize, cols: usize, rs: usize, cs: usize) -> usize {
    if rows == 0 || cols == 0 {
        0
    } else {
        (rows - 1) * rs + (cols - 1) * cs + 1
    }
}

/// How a product may use threads.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Threads {
    /// Rayon's pool (`gemm` splits the output, never the sum, so the result does not depend
    /// on the thread count).
    Pool,
    /// This thread only (inside a task that is already one of many).
    One,
}

/// `dst = [dst +] scale · a · b`. Panics when the shapes disagree or a view reaches past
/// its slice (a bug in the caller, not bad input).
#[allow(unsafe_code)]
pub(crate) fn gemm(
    dst: MatMut<'_>,
    a: Mat<'_>,
    b: Mat<'_>,
    add: bool,
    scale: f32,
    threads: Threads,
) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert!(
        dst.rows == m
            && dst.cols == n
            && b.rows == k
            && reach(m, n, dst.rs, 1) <= dst.data.len()
            && reach(m, k, a.rs, a.cs) <= a.data.len()
            && reach(k, n, b.rs, b.cs) <= b.data.len(),
        "gemm: {m}x{k} by {}x{n} into {}x{}",
        b.rows,
        dst.rows,
        dst.cols
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !add {
            for row in dst.data.chunks_mut(dst.rs.max(1)).take(m) {
                row[..n].fill(0.0);
            }
        }
        return;
    }
    let parallelism = match threads {
        Threads::Pool if rayon::current_num_threads() > 1 => {
            gemm::Parallelism::Rayon(rayon::current_num_threads())
        }
        _ => gemm::Parallelism::None,
    };
    // SAFETY: the assertion above keeps every element gemm reads or writes inside the
    // slices (`reach` is one past the furthest element of each view), and `dst` is borrowed
    // mutably, so it aliases neither input.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.data.as_mut_ptr(),
            1,
            dst.rs as isize,
            add,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr(),
            b.cs as isize,
            b.rs as isize,
            if add { 1.0 } else { 0.0 },
            scale,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// Outputs at most this large take [`gemm_long`]'s split.
const SPLIT_MAX: usize = 512 * 512;

/// `dst (m × n, dense) = [dst +] scale · a · b` for a long inner dimension and a small
/// output (weight gradients: a sum over every row of a batch). `gemm`'s threads split the
/// output, which is too small to split well (measured: 140 against 248 GFLOP/s for
/// 128 × 4096 × 128 on two threads); here the sum is split instead, in two fixed halves
/// computed side by side on one thread each (one after the other where rayon has one
/// thread, which still beats one long sum) and added in order, so the result does not
/// depend on the thread count either.
pub(crate) fn gemm_long(dst: &mut [f32], a: Mat<'_>, b: Mat<'_>, add: bool, scale: f32) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    let half = k / 2;
    if half == 0 || m * n > SPLIT_MAX {
        gemm(MatMut::new(dst, m, n), a, b, add, scale, Threads::Pool);
        return;
    }
    let mut other = vec![0f32; m * n];
    let (first, second) = (
        (a.cols(0, half), b.rows(0, half)),
        (a.cols(half, k - half), b.rows(half, k - half)),
    );
    rayon::join(
        || {
            gemm(
                MatMut::new(dst, m, n),
                first.0,
                first.1,
                add,
                scale,
                Threads::One,
            )
        },
        || {
            gemm(
                MatMut::new(&mut other, m, n),
                second.0,
                second.1,
                false,
                scale,
                Threads::One,
            )
        },
    );
    for (d, o) in dst.iter_mut().zip(&other) {
        *d += o;
    }
}

/// `dst (m × n) = [dst +] scale · a (m × k) · wᵀ` with `w` an `(n, k)` weight (Hugging
/// Face layout), all row-major.
pub(crate) fn matmul_wt(
    dst: &mut [f32],
    a: &[f32],
    w: &[f32],
    (m, k, n): (usize, usize, usize),
    add: bool,
    scale: f32,
) {
    gemm(
        MatMut::new(dst, m, n),
        Mat::new(a, m, k),
        Mat::new(w, n, k).t(),
        add,
        scale,
        Threads::Pool,
    );
}

/// `dst[c · dst_stride + r] = src[r · src_stride + c]` for `r < rows`, `c < cols`, a tile of
/// 16 × 16 at a time, so that the reads and the writes of a tile stay in a few cache lines
/// (element by element, the writes of a 64-wide transpose each touched another line).
pub(crate) fn transpose(
    dst: &mut [f32],
    dst_stride: usize,
    src: &[f32],
    src_stride: usize,
    (rows, cols): (usize, usize),
) {
    const T: usize = 16;
    for r0 in (0..rows).step_by(T) {
        for c0 in (0..cols).step_by(T) {
            let c1 = (c0 + T).min(cols);
            if r0 + T <= rows && c1 - c0 == T {
                // A whole tile through a local copy: sixteen reads of a line each, then
                // sixteen writes of a line each, without a bound check between.
                let mut tile = [[0f32; T]; T];
                for (i, t) in tile.iter_mut().enumerate() {
                    let at = (r0 + i) * src_stride + c0;
                    t.copy_from_slice(&src[at..at + T]);
                }
                for j in 0..T {
                    let at = (c0 + j) * dst_stride + r0;
                    let out: &mut [f32; T] = (&mut dst[at..at + T]).try_into().expect("a tile");
                    for (i, o) in out.iter_mut().enumerate() {
                        *o = tile[i][j];
                    }
                }
                continue;
            }
            for r in r0..(r0 + T).min(rows) {
                let line = &src[r * src_stride + c0..r * src_stride + c1];
                for (c, &x) in (c0..c1).zip(line) {
                    dst[c * dst_stride + r] = x;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tiled_transpose_is_the_transpose() {
        // Sizes that are and are not multiples of the tile, strides wider than the rows.
        for (rows, cols, ss, ds) in [(64, 1456, 1525, 64), (192, 64, 64, 192), (17, 33, 40, 20)] {
            let src: Vec<f32> = (0..rows * ss).map(|i| i as f32).collect();
            let mut dst = vec![-1.0; cols * ds];
            transpose(&mut dst, ds, &src, ss, (rows, cols));
            for r in 0..rows {
                for c in 0..cols {
                    assert_eq!(dst[c * ds + r], src[r * ss + c]);
                }
                for c in 0..cols {
                    for gap in rows..ds {
                        assert_eq!(dst[c * ds + gap], -1.0, "wrote outside the rows");
                    }
                }
            }
        }
    }

    /// A 2×3 by 3×2 product worked by hand, then the same through transposed views and a
    /// block of columns, and added to the destination.
    #[test]
    fn products_through_views_match_the_hand_worked_ones() {
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]; // [[1 2 3] [4 5 6]]
        let b = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0]; // [[1 0] [0 1] [1 1]]
        let mut c = [0f32; 4];
        gemm(
            MatMut::new(&mut c, 2, 2),
            Mat::new(&a, 2, 3),
            Mat::new(&b, 3, 2),
            false,
            1.0,
            Threads::Pool,
        );
        assert_eq!(c, [4.0, 5.0, 10.0, 11.0]);
        // bᵀ stored as (2, 3): the weight layout of `matmul_wt`; scaled and added.
        let bt = [1.0, 0.0, 1.0, 0.0, 1.0, 1.0];
        matmul_wt(&mut c, &a, &bt, (2, 3, 2), true, 0.5);
        assert_eq!(c, [6.0, 7.5, 15.0, 16.5]);
        // aᵀ · a's first two columns, read as a block of a wider matrix.
        let mut d = [9f32; 6]; // 2x2 written into the first two columns of rows of 3
        gemm(
            MatMut::strided(&mut d, 2, 2, 3),
            Mat::strided(&a, 2, 2, 3).t(),
            Mat::strided(&a, 2, 2, 3),
            false,
            1.0,
            Threads::One,
        );
        assert_eq!(d, [17.0, 22.0, 9.0, 22.0, 29.0, 9.0]);
    }

    /// The split sum gives the plain product (up to rounding), with an odd inner dimension
    /// and added to the destination.
    #[test]
    fn the_split_sum_is_the_product() {
        let (m, k, n) = (3, 7, 2);
        let a: Vec<f32> = (0..k * m).map(|i| i as f32 * 0.5 - 3.0).collect(); // stored k × m
        let b: Vec<f32> = (0..k * n).map(|i| 1.0 - i as f32 * 0.25).collect();
        let mut want = [1f32; 6];
        for (i, w) in want.iter_mut().enumerate() {
            let (r, c) = (i / n, i % n);
            *w += 2.0 * (0..k).map(|j| a[j * m + r] * b[j * n + c]).sum::<f32>();
        }
        let mut got = [1f32; 6];
        gemm_long(
            &mut got,
            Mat::new(&a, k, m).t(),
            Mat::new(&b, k, n),
            true,
            2.0,
        );
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-4, "{got:?} against {want:?}");
        }
    }

    #[test]
    #[should_panic(expected = "gemm")]
    fn a_view_past_its_slice_is_refused() {
        let a = [1f32; 5];
        let mut c = [0f32; 4];
        gemm(
            MatMut::new(&mut c, 2, 2),
            Mat::new(&a, 2, 3),
            Mat::new(&a, 3, 2),
            false,
            1.0,
            Threads::One,
        );
    }
}
