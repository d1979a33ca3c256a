//! Parameters of the hide-and-seek and maze families, as written in scenes.

use serde::{Deserialize, Serialize};

/// Parameters of hide-and-seek (after Baker et al. 2019).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HideSeekParams {
    /// Share of the episode, from its start, that is preparation: seekers cannot act and
    /// every reward is zero.
    pub prep_fraction: f32,
    /// How far an agent sees, in cells (Euclidean, centre to centre).
    pub vision_range: u8,
    /// Full angle of the vision cone, in degrees, centred on the facing.
    pub vision_cone: f32,
    /// Size of the per-step team reward (hiders +r when no hider is seen, else −r).
    pub reward: f32,
    /// Probability that one of the map's doorways, drawn at random, is walled up for an
    /// episode (Baker et al.'s `p_door_dropout`, 0.5 in their quadrant game: half the
    /// episodes have one door fewer). Maps with two doorways or more.
    pub door_dropout: f32,
    /// Place every box and ramp, each episode, on a free cell drawn uniformly from the
    /// region it starts in (the room, bounded by walls and doorways, or the outside), never
    /// on a doorway: Baker et al.'s quadrant game draws its boxes' places in the room and its
    /// ramp's outside every episode. Otherwise objects start where the map puts them.
    pub scatter_objects: bool,
    /// Range of the observation's window, in cells, when smaller than `vision_range` (0:
    /// the vision range). Sight still reaches `vision_range`: the agents and objects seen
    /// beyond the window are in the entity list (`entities`), and rewards count them.
    pub window: u8,
    /// The observation carries Baker et al.'s entity list: own position; each other agent,
    /// box and ramp (masked unless seen) with its place relative to the agent and on the
    /// map and its lock; each of the map's doorways. See `envs::hide_and_seek`.
    pub entities: bool,
}

impl Default for HideSeekParams {
    fn default() -> Self {
        Self {
            prep_fraction: 0.4,
            vision_range: 6,
            vision_cone: 135.0,
            reward: 1.0,
            door_dropout: 0.0,
            scatter_objects: false,
            window: 0,
            entities: false,
        }
    }
}

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
