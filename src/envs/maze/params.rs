//! The maze's parameters, as scenes write them (`family: Maze(...)`).

use serde::{Deserialize, Serialize};

/// Which part of the maze each agent knows beyond its local window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Knowledge {
    /// Only the local window.
    Local,
    /// The whole map.
    Full,
    /// The map is cut into one vertical strip per agent of the arena; agent `k` knows
    /// strip `k` (a split view: together they know everything).
    #[default]
    Strips,
    /// Every cell is known to one agent drawn at random each episode (a scattered split).
    Scattered,
}

/// A procedurally generated maze (always solvable; see `envs::maze::generate`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GenerateSpec {
    /// Width in cells, walls included (odd, 7 to 63).
    pub width: u16,
    /// Height in cells, walls included (odd, 7 to 63).
    pub height: u16,
    /// Doors on the way to the exit that a teammate must hold open from a pressure plate
    /// (each gets one plate before it and one after it; needs two or more agents).
    pub plate_doors: u8,
    /// Locked doors on the way to the exit, each with its key placed before it.
    pub key_doors: u8,
    /// Fixed layout seed; `None` draws a new maze every episode from the arena's stream.
    pub seed: Option<u64>,
}

impl Default for GenerateSpec {
    fn default() -> Self {
        Self {
            width: 15,
            height: 15,
            plate_doors: 1,
            key_doors: 1,
            seed: None,
        }
    }
}

/// Parameters of the cooperative maze.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MazeParams {
    /// Radius of the local window every agent sees around itself (Chebyshev).
    pub view: u8,
    /// What each agent knows of the map beyond its window.
    pub knowledge: Knowledge,
    /// Words agents may say, one per step; teammates hear them on the next step.
    pub vocabulary: Vec<String>,
    /// Reward to every agent when all agents stand on exit cells (ends the episode).
    pub success_reward: f32,
    /// Cost per step to every agent (subtracted) until success.
    pub step_cost: f32,
    /// Generate the maze instead of reading `map`.
    pub generate: Option<GenerateSpec>,
}

impl Default for MazeParams {
    fn default() -> Self {
        Self {
            view: 2,
            knowledge: Knowledge::Strips,
            vocabulary: [
                "north", "south", "east", "west", "plate", "door", "key", "here", "wait", "exit",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            success_reward: 1.0,
            step_cost: 0.01,
            generate: None,
        }
    }
}
