//! The buffer pool of the training path: the buffers a step takes come back for the next
//! step instead of being allocated, zero-filled and faulted in again.

use std::sync::Mutex;

/// Buffers recycled between training steps. A step allocates the same buffers each time:
/// fresh ones cost a zero fill or the kernel's clearing of new pages (measured with `perf`
/// on `benches/update.rs`: 15% of a `tiny` step), recycled ones neither. With the two parts
/// of a batch side by side, which buffer a request gets depends on timing, so the pool can
/// hold a few more than one step's peak, never more than both parts' peaks together.
pub(super) static POOL: Mutex<Vec<Vec<f32>>> = Mutex::new(Vec::new());

/// The most buffers [`POOL`] keeps, and the most elements in all (4 GiB; `small` needs about
/// 1.5 GiB at 64 prompts of 64 tokens). What a step hands back is what it took, so the
/// pool stays at a step's peak of live buffers; these bounds only guard against a bug.
const POOL_MAX: usize = 256;
const POOL_MAX_FLOATS: usize = 1 << 30;

/// Frees the buffers the training path keeps between steps (for other work, such as the
/// rollouts between updates, to reuse).
pub fn release_buffers() {
    if let Ok(mut pool) = POOL.lock() {
        pool.clear();
    }
}

/// A buffer of `n` elements with unspecified contents (a recycled buffer's old values), for
/// outputs that are written in full. Debug builds fill it with NaN, so that a result that
/// read an element it did not write shows in the tests.
pub(super) fn buffer(n: usize) -> Vec<f32> {
    let found = POOL.lock().ok().and_then(|mut pool| {
        let fits = |v: &Vec<f32>| v.capacity() >= n && v.capacity() <= 2 * n.max(1024);
        let best = (0..pool.len())
            .filter(|&i| fits(&pool[i]))
            .min_by_key(|&i| pool[i].capacity())?;
        Some(pool.swap_remove(best))
    });
    let mut v = found.unwrap_or_default();
    v.resize(n, 0.0);
    if cfg!(debug_assertions) {
        v.fill(f32::NAN);
    }
    v
}

/// A buffer of `n` zeros.
pub(super) fn zeros(n: usize) -> Vec<f32> {
    let mut v = buffer(n);
    v.fill(0.0);
    v
}

/// A pooled buffer holding a copy of `v`.
pub(super) fn copy(v: &[f32]) -> Vec<f32> {
    let mut out = buffer(v.len());
    out.copy_from_slice(v);
    out
}

/// Gives `v`, which must come from [`buffer`] (or [`zeros`], [`copy`]), back to the pool: a
/// buffer from elsewhere would add to the pool on every step.
pub(super) fn recycle(v: Vec<f32>) {
    if let Ok(mut pool) = POOL.lock()
        && pool.len() < POOL_MAX
        && pool.iter().map(Vec::capacity).sum::<usize>() + v.capacity() <= POOL_MAX_FLOATS
    {
        pool.push(v);
    }
}
