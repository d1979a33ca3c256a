//! A per-step hash of the whole simulated state, for determinism tests and replays.
//! Families add their arena state; the core adds clocks and agents. xxh3 is stable across
//! platforms and releases, so hashes can be stored and compared later.

use bevy::prelude::Resource;
use xxhash_rust::xxh3::Xxh3;

/// When present, the state hash is recomputed at the end of every step.
#[derive(Resource, Default)]
pub struct StateHash {
    hasher: Option<Xxh3>,
    /// Hash of the state at the end of the last step.
    pub last: u64,
    /// Every step's hash, in order, when `keep_history` is set.
    pub history: Vec<u64>,
    /// Keep every step's hash in `history`.
    pub keep_history: bool,
}

impl StateHash {
    /// A hash resource that keeps every step's hash.
    pub fn with_history() -> Self {
        Self {
            keep_history: true,
            ..Self::default()
        }
    }
    /// Starts a step's hash.
    pub fn begin(&mut self) {
        self.hasher = Some(Xxh3::new());
    }
    /// Adds bytes to the step's hash.
    pub fn write(&mut self, bytes: &[u8]) {
        if let Some(h) = self.hasher.as_mut() {
            h.update(bytes);
        }
    }
    /// Ends the step's hash.
    pub fn finish(&mut self) {
        if let Some(h) = self.hasher.take() {
            self.last = h.digest();
            if self.keep_history {
                self.history.push(self.last);
            }
        }
    }
}
