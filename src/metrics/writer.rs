//! Episode logs: every [`EpisodeEnded`] kept in memory for the run summary and, when asked,
//! written as one JSON line each.

use bevy::prelude::*;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::core::EpisodeEnded;

/// One JSON line of `--metrics`.
#[derive(Serialize)]
struct EpisodeLine<'a> {
    arena: u32,
    episode: u32,
    steps: u32,
    terminated: bool,
    team_returns: BTreeMap<&'a str, f64>,
    agent_returns: &'a [f32],
    metrics: &'a BTreeMap<&'static str, f64>,
}

/// Running totals of every finished episode, and the first `keep` episodes themselves
/// (memory stays flat however long the run).
#[derive(Resource, Debug)]
pub struct EpisodeLog {
    /// The first `keep` episodes, in the order they ended.
    pub episodes: Vec<EpisodeEnded>,
    /// How many episodes to keep in `episodes`.
    pub keep: usize,
    /// Episodes finished.
    pub count: u64,
    /// Sum of each team's mean return over all episodes.
    pub team_return_sums: Vec<f64>,
    /// Sum and count of each metric over the episodes that report it.
    pub metric_sums: BTreeMap<&'static str, (f64, u64)>,
}

impl Default for EpisodeLog {
    fn default() -> Self {
        Self {
            episodes: Vec::new(),
            keep: 4096,
            count: 0,
            team_return_sums: Vec::new(),
            metric_sums: BTreeMap::new(),
        }
    }
}

impl EpisodeLog {
    /// Adds one episode to the totals (and keeps it if there is room).
    pub fn add(&mut self, e: &EpisodeEnded) {
        self.count += 1;
        if self.team_return_sums.len() < e.team_returns.len() {
            self.team_return_sums.resize(e.team_returns.len(), 0.0);
        }
        for (s, r) in self.team_return_sums.iter_mut().zip(&e.team_returns) {
            *s += r;
        }
        for (k, v) in &e.metrics {
            match self.metric_sums.get_mut(k) {
                Some(s) => {
                    s.0 += v;
                    s.1 += 1;
                }
                None => {
                    self.metric_sums.insert(k, (*v, 1));
                }
            }
        }
        if self.episodes.len() < self.keep {
            self.episodes.push(e.clone());
        }
    }
    /// Mean return per team over all episodes.
    pub fn team_means(&self) -> Vec<f64> {
        let n = self.count.max(1) as f64;
        self.team_return_sums.iter().map(|s| s / n).collect()
    }
    /// Mean of each metric over the episodes that report it.
    pub fn metric_means(&self) -> BTreeMap<String, f64> {
        self.metric_sums
            .iter()
            .map(|(k, (s, c))| (k.to_string(), s / *c as f64))
            .collect()
    }
}

/// Writes `--metrics FILE.jsonl`.
#[derive(Resource)]
pub struct MetricsWriter {
    path: PathBuf,
    out: BufWriter<File>,
    teams: Vec<String>,
    /// The first write error, reported at the end of the run.
    pub error: Option<std::io::Error>,
}

impl MetricsWriter {
    /// Creates (truncates) the file.
    pub fn create(path: &Path, teams: Vec<String>) -> std::io::Result<Self> {
        Ok(Self {
            path: path.to_path_buf(),
            out: BufWriter::new(File::create(path)?),
            teams,
            error: None,
        })
    }
    /// The file written.
    pub fn path(&self) -> &Path {
        &self.path
    }
    fn write(&mut self, e: &EpisodeEnded) {
        let line = EpisodeLine {
            arena: e.arena,
            episode: e.episode,
            steps: e.steps,
            terminated: e.terminated,
            team_returns: self
                .teams
                .iter()
                .map(String::as_str)
                .zip(e.team_returns.iter().copied())
                .collect(),
            agent_returns: &e.agent_returns,
            metrics: &e.metrics,
        };
        let res = serde_json::to_writer(&mut self.out, &line)
            .map_err(std::io::Error::other)
            .and_then(|_| self.out.write_all(b"\n"));
        if let Err(err) = res
            && self.error.is_none()
        {
            self.error = Some(err);
        }
    }
    /// Flushes buffered lines.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// Keeps every finished episode and writes it to the metrics file if there is one.
pub fn log_episodes(
    mut ended: MessageReader<EpisodeEnded>,
    mut log: ResMut<EpisodeLog>,
    mut writer: Option<ResMut<MetricsWriter>>,
) {
    for e in ended.read() {
        if let Some(w) = writer.as_mut() {
            w.write(e);
        }
        log.add(e);
    }
}

/// Peak resident memory of this process (Linux `VmHWM`), if known.
pub fn peak_memory_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
