//! Metrics: the social-outcome metrics of Perolat et al. (2017), per-episode JSON lines,
//! run summaries and the process's peak memory.

pub mod plot;
mod social;
mod writer;

pub use social::{gini, social_outcomes};
pub use writer::{EpisodeLog, MetricsWriter, log_episodes, peak_memory_bytes};
