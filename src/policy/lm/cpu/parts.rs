//! Two halves of a batch side by side, a thread each: the training path's parts (each a
//! forward and backward of its own) and the fast path's halves of a layer's rows. On two
//! cores a thread per half, its products on one thread, beat threading each operation: no
//! wake-ups between operations, and one-thread products of half the rows run faster than
//! two-thread products of all of them.

/// Two pools of one thread each, for the two parts of a batch.
fn part_pools() -> Option<&'static [rayon::ThreadPool; 2]> {
    static POOLS: std::sync::OnceLock<Option<[rayon::ThreadPool; 2]>> = std::sync::OnceLock::new();
    POOLS
        .get_or_init(|| {
            let one = || rayon::ThreadPoolBuilder::new().num_threads(1).build().ok();
            Some([one()?, one()?])
        })
        .as_ref()
}

/// `f` over each part's input, side by side on a thread each where rayon has more than one
/// thread (a pool each, so that neither part's operations interleave with the other's),
/// else one after the other. Either way each part runs on one thread, so its result does
/// not depend on which.
pub(super) fn each_part<T: Send, R: Send>(
    inputs: Vec<T>,
    f: impl Fn(usize, T) -> R + Sync,
) -> Vec<R> {
    let pools = part_pools();
    if inputs.len() == 2
        && let Some([a, b]) = pools
        && rayon::current_num_threads() > 1
    {
        let mut it = inputs.into_iter();
        let (x, y) = (it.next(), it.next());
        let (x, y) = rayon::join(
            || x.map(|x| a.install(|| f(0, x))),
            || y.map(|y| b.install(|| f(1, y))),
        );
        return x.into_iter().chain(y).collect();
    }
    inputs
        .into_iter()
        .enumerate()
        .map(|(i, x)| match pools {
            Some([a, _]) => a.install(|| f(i, x)),
            None => f(i, x),
        })
        .collect()
}
