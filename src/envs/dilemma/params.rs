//! The social dilemmas' parameters, as scenes write them (`family: Matrix(...)`,
//! `CommonsHarvest(...)`, `CleanUp(...)`), read by the scene's serde pass through each
//! family's [`crate::scene::FamilyRules::params`].

use serde::{Deserialize, Serialize};

/// Parameters of a repeated matrix game.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MatrixParams {
    /// Row player's payoff: `payoffs[mine][theirs]`, action 0 is the cooperative one.
    pub payoffs: Vec<Vec<f32>>,
    /// The two action words, cooperative first.
    pub actions: Vec<String>,
    /// Rounds per episode.
    pub rounds: u32,
    /// How many recent rounds a player observes.
    pub history: u32,
}

impl Default for MatrixParams {
    fn default() -> Self {
        Self {
            payoffs: vec![vec![3.0, 0.0], vec![5.0, 1.0]],
            actions: vec!["cooperate".into(), "defect".into()],
            rounds: 10,
            history: 3,
        }
    }
}

/// The egocentric observation window of grid families.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ViewSpec {
    /// Rows visible ahead of the agent.
    pub ahead: u8,
    /// Rows visible behind it.
    pub behind: u8,
    /// Columns visible on each side.
    pub side: u8,
}

impl Default for ViewSpec {
    fn default() -> Self {
        Self {
            ahead: 5,
            behind: 1,
            side: 3,
        }
    }
}

/// The zapping beam of the social dilemmas.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ZapSpec {
    /// Cells the beam reaches in front of the agent (walls stop it).
    pub length: u8,
    /// Steps after firing before the agent may fire again.
    pub cooldown: u16,
    /// Steps a zapped agent is removed from play.
    pub timeout: u16,
    /// Reward added to the zapper when it fires (usually 0 or negative).
    pub cost: f32,
}

impl Default for ZapSpec {
    fn default() -> Self {
        Self {
            length: 3,
            cooldown: 4,
            timeout: 25,
            cost: 0.0,
        }
    }
}

/// Parameters of Commons Harvest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HarvestParams {
    /// Regrowth probability of an empty apple cell with 0, 1, 2 and ≥3 live apples nearby.
    pub regrowth: Vec<f32>,
    /// Radius (L2, in cells) of "nearby".
    pub regrowth_radius: f32,
    /// Reward for eating an apple.
    pub apple_reward: f32,
    /// Observation window.
    pub view: ViewSpec,
    /// Zapping beam.
    pub zap: ZapSpec,
}

impl Default for HarvestParams {
    fn default() -> Self {
        Self {
            regrowth: vec![0.0, 0.0025, 0.005, 0.025],
            regrowth_radius: 2.0,
            apple_reward: 1.0,
            view: ViewSpec::default(),
            zap: ZapSpec::default(),
        }
    }
}

/// Parameters of Clean Up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CleanUpParams {
    /// Each step from `pollution_start` on, one clean river cell turns dirty with this probability.
    pub pollution_prob: f32,
    /// First step on which pollution happens.
    pub pollution_start: u32,
    /// Growth probability of an empty orchard cell while the river is clean.
    pub apple_prob: f32,
    /// Dirty fraction of the river at which apples stop growing.
    pub depletion_threshold: f32,
    /// Cells the cleaning beam reaches.
    pub clean_length: u8,
    /// Reward for eating an apple.
    pub apple_reward: f32,
    /// Observation window.
    pub view: ViewSpec,
    /// Zapping beam.
    pub zap: ZapSpec,
}

impl Default for CleanUpParams {
    fn default() -> Self {
        Self {
            pollution_prob: 0.5,
            pollution_start: 50,
            apple_prob: 0.05,
            depletion_threshold: 0.4,
            clean_length: 3,
            apple_reward: 1.0,
            view: ViewSpec::default(),
            zap: ZapSpec::default(),
        }
    }
}
