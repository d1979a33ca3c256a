//! Hide-and-seek's parameters, as scenes write them (`family: HideAndSeek(...)`).

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
