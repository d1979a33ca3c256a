//! Data-parallel training over processes: `mpirun -np N emergence train SCENE --arenas A`.
//!
//! Each rank runs a contiguous share of the `A` arenas ([`Ranks::share`]): rank `r` holds the
//! arenas a one-process run would number `r·A/N ..` (their indices, and so their seeds and
//! every stream, are the one-process run's). After each rollout:
//!
//! 1. the ranks' batches are gathered, in rank order, into the batch one process would have
//!    collected (arena then slot order, [`Ranks::gather_batch`]): every rank then takes the
//!    same advantages, normalisations and minibatch order, which are cheap;
//! 2. in every minibatch each rank runs the model forward and backward on the samples of its
//!    own arenas only (the expensive part), each loss term a sum over those samples divided by
//!    the whole minibatch's count, so that the ranks' losses add up to the one-process mean;
//! 3. the gradients (and the losses, and which variables have a gradient) are summed across
//!    ranks in rank order ([`Ranks::sum`]: every rank gathers every rank's vector and adds
//!    them `((r0 + r1) + r2) + ..`, so the sum is the same bits on every rank whatever the
//!    transport's own reduction order), clipped and applied by every rank: the models stay
//!    identical without ever being sent.
//!
//! Rank 0 alone writes the run folder (metrics of all arenas, plots, checkpoints).
//!
//! How this differs from one process: step 2 sums each rank's part of a minibatch's loss
//! separately, where one process takes one mean over the whole minibatch, so gradients
//! differ in the last bits (float addition is not associative); the weights after an update
//! agree to about 1e-6 relative, and the test (`tests/suite/mpi.rs`) states its tolerance.
//! MAPPO's centralised critic is small (an mlp over the global state) and is updated whole
//! on every rank, with the same inputs, so it needs no reduction.
//!
//! `reproduce` and `eval` spread whole jobs instead ([`Ranks::mine`]: an experiment's runs,
//! an evaluation's partners, round robin) and gather their results to rank 0
//! ([`Ranks::all_gather`]), which writes the report.
//!
//! The transport is Open MPI through the `mpi` crate (feature `mpi`,
//! `mpi_world`); the interface ([`Transport`]) is what a NCCL all-reduce would also
//! implement.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::TrainError;
use super::rollout::{Batch, Trajectory};
use crate::core::EpisodeEnded;

/// The collectives a data-parallel run needs; every rank calls each one in the same order.
pub trait Transport {
    /// This process's rank, `0..size`.
    fn rank(&self) -> usize;
    /// The number of ranks.
    fn size(&self) -> usize;
    /// Every rank's bytes, in rank order (the same on every rank).
    fn all_gather_bytes(&self, mine: &[u8]) -> Vec<Vec<u8>>;
    /// Every rank's `mine` (all of one length), concatenated in rank order.
    fn all_gather_f32(&self, mine: &[f32]) -> Vec<f32>;
    /// Ends every rank of the job with `code` (a rank that fails must not leave the others
    /// waiting in a collective).
    fn abort(&self, code: i32) -> !;
}

/// The ranks of a run: one process (the default), or a job's ranks over a [`Transport`].
#[derive(Clone, Default)]
pub struct Ranks {
    transport: Option<Arc<dyn Transport + Send + Sync>>,
    /// Nanoseconds spent in [`Ranks::sum`] and [`Ranks::gather_batch`] since the last
    /// [`Ranks::take_seconds`].
    spent: Arc<AtomicU64>,
}

impl std::fmt::Debug for Ranks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ranks({} of {})", self.rank(), self.size())
    }
}

impl Ranks {
    /// The ranks of `transport`.
    pub fn new(transport: Arc<dyn Transport + Send + Sync>) -> Self {
        Self {
            transport: Some(transport),
            spent: Arc::default(),
        }
    }

    /// This process's rank (0 alone).
    pub fn rank(&self) -> usize {
        self.transport.as_ref().map_or(0, |t| t.rank())
    }

    /// The number of ranks (1 alone).
    pub fn size(&self) -> usize {
        self.transport.as_ref().map_or(1, |t| t.size())
    }

    /// Whether this rank writes the run's files (rank 0).
    pub fn is_root(&self) -> bool {
        self.rank() == 0
    }

    /// Whether the run is spread over more than one process.
    pub fn parallel(&self) -> bool {
        self.size() > 1
    }

    /// This rank's contiguous share of `arenas`: `rank·A/N .. (rank+1)·A/N`.
    pub fn share(&self, arenas: u32) -> Range<u32> {
        let (r, n) = (self.rank() as u64, self.size() as u64);
        let a = u64::from(arenas);
        let at = |k: u64| u32::try_from(k * a / n).unwrap_or(u32::MAX);
        at(r)..at(r + 1)
    }

    /// This rank's jobs of `n` (an experiment's runs, an evaluation's partners): every
    /// `size`-th from `rank`, so that jobs listed by kind spread over the ranks.
    pub fn mine(&self, n: usize) -> Vec<usize> {
        (self.rank()..n).step_by(self.size()).collect()
    }

    /// Every rank's `mine`, in rank order (alone: `[mine]`): the results of jobs spread with
    /// [`Ranks::mine`], gathered. Errs when a rank's value does not read back.
    pub fn all_gather<T: Serialize + serde::de::DeserializeOwned>(
        &self,
        mine: T,
    ) -> Result<Vec<T>, String> {
        let Some(t) = self.transport.as_ref().filter(|t| t.size() > 1) else {
            return Ok(vec![mine]);
        };
        let bytes = postcard::to_allocvec(&mine).map_err(|e| format!("rank {}: {e}", t.rank()))?;
        t.all_gather_bytes(&bytes)
            .iter()
            .enumerate()
            .map(|(r, b)| {
                postcard::from_bytes(b)
                    .map_err(|e| format!("what rank {r} sent does not read: {e}"))
            })
            .collect()
    }

    /// Ends the job (every rank) after this rank failed; alone, nothing happens.
    pub fn abort(&self, code: i32) {
        if let Some(t) = &self.transport
            && t.size() > 1
        {
            t.abort(code);
        }
    }

    /// Replaces `buf` by the sum of every rank's `buf`, added in rank order.
    pub fn sum(&self, buf: &mut [f32]) {
        let Some(t) = self.transport.as_ref().filter(|t| t.size() > 1) else {
            return;
        };
        let start = Instant::now();
        let all = t.all_gather_f32(buf);
        sum_in_rank_order(&all, buf);
        self.spend(start);
    }

    /// Every rank's `values` (of one length) added in rank order, in f64.
    pub fn sum_f64(&self, values: &mut [f64]) {
        let Some(t) = self.transport.as_ref().filter(|t| t.size() > 1) else {
            return;
        };
        let start = Instant::now();
        let mine: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let all = t.all_gather_bytes(&mine);
        values.fill(0.0);
        for bytes in &all {
            for (v, b) in values.iter_mut().zip(bytes.chunks_exact(8)) {
                *v += f64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
            }
        }
        self.spend(start);
    }

    /// The largest of every rank's `value`.
    pub fn max_f64(&self, value: f64) -> f64 {
        let Some(t) = self.transport.as_ref().filter(|t| t.size() > 1) else {
            return value;
        };
        t.all_gather_bytes(&value.to_le_bytes())
            .iter()
            .filter_map(|b| b.as_slice().try_into().ok().map(f64::from_le_bytes))
            .fold(value, f64::max)
    }

    /// The batch of every rank's arenas, as one process would have collected it: the ranks'
    /// trajectories and episode reports in rank order (each rank's are in arena order and
    /// the ranks' arenas are consecutive, so the whole is in arena order).
    pub fn gather_batch(&self, batch: Batch) -> Result<Batch, TrainError> {
        let Some(t) = self.transport.as_ref().filter(|t| t.size() > 1) else {
            return Ok(batch);
        };
        let start = Instant::now();
        // The metric names are the scene's; every rank's episodes have them.
        let names: Vec<&'static str> = batch
            .episodes
            .iter()
            .flat_map(|e| e.metrics.keys().copied())
            .collect();
        let wire = Wire {
            trajectories: batch.trajectories,
            episodes: batch.episodes.iter().map(WireEpisode::from).collect(),
        };
        let bytes = postcard::to_allocvec(&wire)
            .map_err(|e| TrainError::Config(format!("rank {}: batch: {e}", t.rank())))?;
        let mut out = Batch {
            slots: batch.slots,
            ..Default::default()
        };
        for (r, bytes) in t.all_gather_bytes(&bytes).iter().enumerate() {
            let w: Wire = postcard::from_bytes(bytes).map_err(|e| {
                TrainError::Config(format!("the batch sent by rank {r} does not read: {e}"))
            })?;
            out.trajectories.extend(w.trajectories);
            for e in w.episodes {
                out.episodes.push(e.into_episode(&names)?);
            }
        }
        self.spend(start);
        Ok(out)
    }

    /// Seconds spent in collectives since the last call.
    pub fn take_seconds(&self) -> f64 {
        self.spent.swap(0, Ordering::Relaxed) as f64 * 1e-9
    }

    fn spend(&self, start: Instant) {
        let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.spent.fetch_add(ns, Ordering::Relaxed);
    }
}

/// `all` is `n` vectors of `out.len()` one after another; `out[i]` becomes
/// `((all_0[i] + all_1[i]) + all_2[i]) + ..`.
fn sum_in_rank_order(all: &[f32], out: &mut [f32]) {
    let len = out.len();
    out.fill(0.0);
    if len == 0 {
        return;
    }
    for part in all.chunks_exact(len) {
        for (o, v) in out.iter_mut().zip(part) {
            *o += v;
        }
    }
}

/// A rank's batch on the wire (postcard).
#[derive(Serialize, Deserialize)]
struct Wire {
    trajectories: Vec<Trajectory>,
    episodes: Vec<WireEpisode>,
}

#[derive(Serialize, Deserialize)]
struct WireEpisode {
    arena: u32,
    episode: u32,
    steps: u32,
    terminated: bool,
    agent_returns: Vec<f32>,
    team_returns: Vec<f64>,
    metrics: BTreeMap<String, f64>,
}

impl From<&EpisodeEnded> for WireEpisode {
    fn from(e: &EpisodeEnded) -> Self {
        Self {
            arena: e.arena,
            episode: e.episode,
            steps: e.steps,
            terminated: e.terminated,
            agent_returns: e.agent_returns.clone(),
            team_returns: e.team_returns.clone(),
            metrics: e
                .metrics
                .iter()
                .map(|(k, v)| ((*k).to_owned(), *v))
                .collect(),
        }
    }
}

impl WireEpisode {
    fn into_episode(self, names: &[&'static str]) -> Result<EpisodeEnded, TrainError> {
        let mut metrics = BTreeMap::new();
        for (k, v) in self.metrics {
            let Some(&name) = names.iter().find(|n| **n == k) else {
                return Err(TrainError::Config(format!(
                    "arena {}: a metric {k:?} this rank's arenas do not have (the ranks run \
                     different scenes?)",
                    self.arena
                )));
            };
            metrics.insert(name, v);
        }
        Ok(EpisodeEnded {
            arena: self.arena,
            episode: self.episode,
            steps: self.steps,
            terminated: self.terminated,
            agent_returns: self.agent_returns,
            team_returns: self.team_returns,
            metrics,
        })
    }
}

/// The job's ranks over Open MPI's world communicator. `mpi::initialize` must have been
/// called (and its universe kept) by the program.
#[cfg(feature = "mpi")]
pub fn mpi_world() -> Ranks {
    Ranks::new(Arc::new(MpiWorld))
}

#[cfg(feature = "mpi")]
struct MpiWorld;

#[cfg(feature = "mpi")]
impl Transport for MpiWorld {
    fn rank(&self) -> usize {
        use mpi::traits::Communicator;
        usize::try_from(mpi::topology::SimpleCommunicator::world().rank()).unwrap_or(0)
    }

    fn size(&self) -> usize {
        use mpi::traits::Communicator;
        usize::try_from(mpi::topology::SimpleCommunicator::world().size()).unwrap_or(1)
    }

    fn all_gather_bytes(&self, mine: &[u8]) -> Vec<Vec<u8>> {
        use mpi::datatype::PartitionMut;
        use mpi::traits::CommunicatorCollectives;
        let world = mpi::topology::SimpleCommunicator::world();
        let n = self.size();
        // One leading byte on every rank's part: Open MPI refuses an all-gather whose buffers
        // are all empty (MPI_ERR_ARG), which an empty `mine` everywhere (a barrier) would be.
        let sent: Vec<u8> = std::iter::once(0u8).chain(mine.iter().copied()).collect();
        let mine = &sent[..];
        let len = mpi::Count::try_from(mine.len()).unwrap_or(mpi::Count::MAX);
        let mut counts = vec![0 as mpi::Count; n];
        world.all_gather_into(&len, &mut counts[..]);
        let displs: Vec<mpi::Count> = counts
            .iter()
            .scan(0, |at, &c| {
                let d = *at;
                *at += c;
                Some(d)
            })
            .collect();
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        let mut buf = vec![0u8; total];
        {
            let mut part = PartitionMut::new(&mut buf[..], &counts[..], &displs[..]);
            world.all_gather_varcount_into(mine, &mut part);
        }
        counts
            .iter()
            .zip(&displs)
            .map(|(&c, &d)| buf[d as usize + 1..(d + c) as usize].to_vec())
            .collect()
    }

    fn all_gather_f32(&self, mine: &[f32]) -> Vec<f32> {
        use mpi::traits::CommunicatorCollectives;
        let world = mpi::topology::SimpleCommunicator::world();
        let mut all = vec![0f32; mine.len() * self.size()];
        world.all_gather_into(mine, &mut all[..]);
        all
    }

    fn abort(&self, code: i32) -> ! {
        use mpi::traits::Communicator;
        mpi::topology::SimpleCommunicator::world().abort(code)
    }
}

/// Rank `.0` of `.1` ranks that never talk (tests of what a rank's share is).
#[cfg(test)]
pub(crate) struct FakeRank(pub usize, pub usize);

#[cfg(test)]
impl FakeRank {
    /// Its [`Ranks`].
    pub(crate) fn ranks(rank: usize, size: usize) -> Ranks {
        Ranks::new(Arc::new(FakeRank(rank, size)))
    }
}

#[cfg(test)]
impl Transport for FakeRank {
    fn rank(&self) -> usize {
        self.0
    }
    fn size(&self) -> usize {
        self.1
    }
    fn all_gather_bytes(&self, _: &[u8]) -> Vec<Vec<u8>> {
        unreachable!("a fake rank sends nothing")
    }
    fn all_gather_f32(&self, _: &[f32]) -> Vec<f32> {
        unreachable!("a fake rank sends nothing")
    }
    fn abort(&self, _: i32) -> ! {
        unreachable!("a fake rank sends nothing")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn shares_cover_the_arenas_in_order() {
        use FakeRank as Fake;
        for (arenas, n) in [(8u32, 2usize), (6, 3), (7, 2), (5, 5)] {
            let shares: Vec<Range<u32>> = (0..n)
                .map(|r| Ranks::new(Arc::new(Fake(r, n))).share(arenas))
                .collect();
            assert_eq!(shares[0].start, 0);
            assert_eq!(shares[n - 1].end, arenas);
            for w in shares.windows(2) {
                assert_eq!(w[0].end, w[1].start);
            }
        }
        assert_eq!(Ranks::default().share(8), 0..8);
        // Jobs: each once, round robin.
        for (jobs, n) in [(7usize, 2usize), (2, 3), (9, 3)] {
            let mut all: Vec<usize> = (0..n)
                .flat_map(|r| Ranks::new(Arc::new(Fake(r, n))).mine(jobs))
                .collect();
            all.sort_unstable();
            assert_eq!(all, (0..jobs).collect::<Vec<_>>());
        }
        assert_eq!(Ranks::new(Arc::new(Fake(1, 3))).mine(8), [1, 4, 7]);
        assert_eq!(Ranks::default().mine(3), [0, 1, 2]);
    }

    #[test]
    fn the_sum_adds_in_rank_order() {
        // 1e8 + 1 - 1e8 in f32: the order decides (1e8 + 1 rounds back to 1e8).
        let all = [1e8f32, 2.0, 1.0, 3.0, -1e8, 4.0];
        let mut out = [0f32; 2];
        sum_in_rank_order(&all, &mut out);
        assert_eq!(out, [0.0, 9.0]);
    }

    /// Two "ranks" as threads over channels: the gathered batch equals the one-process
    /// batch, episodes and metric names included.
    #[test]
    fn a_gathered_batch_is_the_one_process_batch() {
        use crate::train::rollout::Step;
        struct Pair {
            rank: usize,
            inbox: Mutex<std::sync::mpsc::Receiver<Vec<u8>>>,
            outbox: std::sync::mpsc::Sender<Vec<u8>>,
        }
        impl Transport for Pair {
            fn rank(&self) -> usize {
                self.rank
            }
            fn size(&self) -> usize {
                2
            }
            fn all_gather_bytes(&self, mine: &[u8]) -> Vec<Vec<u8>> {
                self.outbox.send(mine.to_vec()).expect("send");
                let theirs = self.inbox.lock().expect("lock").recv().expect("recv");
                if self.rank == 0 {
                    vec![mine.to_vec(), theirs]
                } else {
                    vec![theirs, mine.to_vec()]
                }
            }
            fn all_gather_f32(&self, _: &[f32]) -> Vec<f32> {
                unreachable!()
            }
            fn abort(&self, _: i32) -> ! {
                unreachable!()
            }
        }
        let traj = |arena: u32| Trajectory {
            arena,
            slot: 1,
            steps: vec![Step {
                tokens: vec![arena, 7],
                encoded: Default::default(),
                global: Default::default(),
                legal: vec![true, false],
                action: 1,
                logprob: -0.1 * arena as f32,
                said: None,
                said_logprob: 0.0,
                value: 0.25,
                reward: 1.5,
                memory: vec![0.5, -1.0],
                read: None,
            }],
            terminated: arena.is_multiple_of(2),
            bootstrap: Some(0.5),
            ..Default::default()
        };
        let ep = |arena: u32| EpisodeEnded {
            arena,
            episode: 0,
            steps: 3,
            terminated: true,
            agent_returns: vec![1.0, 2.0],
            team_returns: vec![1.5],
            metrics: [("cooperation", 0.1 * f64::from(arena))]
                .into_iter()
                .collect(),
        };
        let batch = move |arenas: Range<u32>| Batch {
            trajectories: arenas.clone().map(traj).collect(),
            episodes: arenas.map(ep).collect(),
            slots: 2,
        };
        let (to1, from0) = std::sync::mpsc::channel();
        let (to0, from1) = std::sync::mpsc::channel();
        let r1 = Ranks::new(Arc::new(Pair {
            rank: 1,
            inbox: Mutex::new(from0),
            outbox: to0,
        }));
        let other = std::thread::spawn(move || r1.gather_batch(batch(2..4)).expect("rank 1"));
        let r0 = Ranks::new(Arc::new(Pair {
            rank: 0,
            inbox: Mutex::new(from1),
            outbox: to1,
        }));
        let got0 = r0.gather_batch(batch(0..2)).expect("rank 0");
        let got1 = other.join().expect("thread");
        let whole = batch(0..4);
        for got in [got0, got1] {
            assert_eq!(got.trajectories, whole.trajectories);
            assert_eq!(got.episodes.len(), 4);
            for (a, b) in got.episodes.iter().zip(&whole.episodes) {
                assert_eq!(a.arena, b.arena);
                assert_eq!(a.metrics, b.metrics);
                assert_eq!(a.agent_returns, b.agent_returns);
            }
        }
    }
}
