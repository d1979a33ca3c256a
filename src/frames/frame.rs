//! A [`Frame`]: one arena at one step, as the viewer draws it and replays store it, captured
//! from a live world ([`Frame::capture`]).

use bevy::prelude::World;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::core::*;
use crate::envs::senses::Senses;
use crate::envs::{ActionNames, ActiveScene, Vocabulary};
use crate::observe::text::{Speaker, TextFormat};
use crate::policy::PolicyRegistry;

/// One agent in a [`Frame`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentFrame {
    /// Its slot in the arena.
    pub slot: u16,
    /// Its team (index into the scene's teams).
    pub team: u8,
    /// Its role (index into the scene's roles).
    pub role: u8,
    /// Map cell, `None` while it is out of play (zapped) or in families without a map.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pos: Option<[i32; 2]>,
    /// Facing as a letter (`N`, `E`, `S`, `W`), in families with facing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facing: Option<char>,
    /// The action word it chose this step.
    pub action: String,
    /// The index of that action.
    #[serde(default)]
    pub action_index: u8,
    /// The word it said this step (maze talk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub say: Option<String>,
    /// Reward of this step.
    pub reward: f32,
    /// Return of the episode so far.
    #[serde(rename = "return", default)]
    pub ret: f32,
    /// Out of play this step (zapped).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removed: bool,
    /// Caught this step (hide-and-seek: a hider a seeker has in sight after the preparation
    /// phase, as the team reward counts it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub seen: bool,
    /// The name of the policy that decides for it.
    #[serde(default)]
    pub policy: String,
    /// Its LoRA adapter, when its policy runs one for its role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<String>,
    /// The observation text of this step, as language-model policies read it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
    /// The probability of every action it sampled from (learned policies; empty for
    /// scripted bots).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probs: Vec<f32>,
    /// Its value estimate, when its policy has a value head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f32>,
    /// Map cells it sees (hide-and-seek vision cone), from the rules' own ray casting.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sight: Vec<[i32; 2]>,
    /// Map cells its beam crossed this step (zaps and cleaning in the grid dilemmas).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub beam: Vec<[i32; 2]>,
}

/// One arena at the end of one step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Frame {
    /// The arena's index in the run.
    pub arena: u32,
    /// Its episode.
    pub episode: u32,
    /// The step that just ran (1 for the first step of an episode).
    pub step: u32,
    /// The episode ended with this step.
    pub end: bool,
    /// Map width in cells (0 in families without a map).
    pub width: usize,
    /// Map height in cells.
    pub height: usize,
    /// The map, one character per cell, row-major (the families' replay drawing).
    pub tiles: Vec<char>,
    /// Every agent, in slot order.
    pub agents: Vec<AgentFrame>,
    /// The state hash of the whole run at the end of this step, when hashing is on.
    pub hash: Option<u64>,
    /// The family's metrics of the episode, on the frame that ends it.
    pub metrics: BTreeMap<String, f64>,
}

/// What frames need that a world does not change between steps: the scene's text format.
pub struct FrameContext {
    format: TextFormat,
}

impl FrameContext {
    /// The context of the scene the world runs.
    pub fn new(world: &World) -> Option<Self> {
        let scene = &world.get_resource::<ActiveScene>()?.0;
        let actions = &world.get_resource::<ActionNames>()?.0;
        Some(Self {
            format: TextFormat::new(scene, actions),
        })
    }
}

/// The word agent `e` said at the last step, if any.
pub fn said(world: &World, e: bevy::prelude::Entity) -> Option<String> {
    let w = world.get::<Utterance>(e)?.0?;
    world
        .get_resource::<Vocabulary>()?
        .0
        .get(usize::from(w))
        .cloned()
}

impl Frame {
    /// Arena `index` of `world` as it stands now (after the last step), or `None` when the
    /// arena does not exist.
    pub fn capture(world: &World, ctx: &FrameContext, index: u32) -> Option<Frame> {
        let entity = world.resource::<Arenas>().entity(index)?;
        let clock = world.get::<EpisodeClock>(entity)?;
        let members = world.get::<ArenaAgents>(entity)?;
        let ended = matches!(clock.phase, ArenaPhase::PendingReset | ArenaPhase::Idle);
        let episode = if ended && clock.step > 0 {
            clock.episode.saturating_sub(1)
        } else {
            clock.episode
        };
        let names = &world.resource::<ActionNames>().0;
        let registry = world.get_resource::<PolicyRegistry>();
        let markers = world
            .get_resource::<CellMarkers>()
            .map(|m| m.0.clone())
            .unwrap_or_default();
        let (width, tiles) = draw_map(world, entity).unwrap_or((0, Vec::new()));
        let height = tiles.len().checked_div(width).unwrap_or(0);
        let mut agents = Vec::with_capacity(members.entities().len());
        for &e in members.entities() {
            let (Some(agent), Some(action)) = (world.get::<Agent>(e), world.get::<Action>(e))
            else {
                continue;
            };
            let team = world.get::<Team>(e).map_or(0, |t| t.0);
            let role = world.get::<Role>(e).map_or(0, |r| r.0);
            let obs = world.get::<Observation>(e);
            let removed = obs.is_some_and(|o| o.removed)
                || world
                    .get::<crate::envs::dilemma::gridworld::Beams>(e)
                    .is_some_and(|b| b.removed_until.is_some());
            let trace = world.get::<DecisionTrace>(e);
            let handle = world.get::<PolicyHandle>(e);
            let text = match (obs, world.get::<ActionMask>(e)) {
                // A language model's own prompt (with any suffix it was given, like CORY's).
                _ if trace.is_some_and(|t| !t.text.is_empty()) && clock.step > 0 => {
                    trace.map(|t| t.text.clone()).unwrap_or_default()
                }
                (Some(o), Some(&mask)) if clock.step > 0 => ctx.format.render(
                    Speaker { team, role },
                    o,
                    world
                        .get_entity(e)
                        .map_or_else(|_| Senses::default(), Senses::of),
                    mask,
                    trace.map_or(0.0, |t| t.last_reward),
                ),
                _ => String::new(),
            };
            let mut frame = AgentFrame {
                slot: agent.slot,
                team,
                role,
                pos: world
                    .get::<GridPos>(e)
                    .filter(|_| !removed && width > 0)
                    .map(|p| [p.0.x, p.0.y]),
                facing: world.get::<Facing>(e).map(|f| f.0.letter()),
                action: names
                    .get(usize::from(action.0))
                    .cloned()
                    .unwrap_or_else(|| "?".into()),
                action_index: action.0,
                say: said(world, e),
                reward: world.get::<Reward>(e).map_or(0.0, |r| r.0),
                ret: world.get::<EpisodeReturn>(e).map_or(0.0, |r| r.0),
                removed,
                seen: false,
                policy: match (registry, handle) {
                    (Some(r), Some(&h)) => r.name(h).unwrap_or("?").to_string(),
                    _ => String::new(),
                },
                adapter: match (registry, handle) {
                    (Some(r), Some(&h)) => r.adapter(h, role, agent.slot),
                    _ => None,
                },
                text,
                probs: trace.map(|t| t.probs.clone()).unwrap_or_default(),
                value: trace.and_then(|t| t.value),
                sight: Vec::new(),
                beam: Vec::new(),
            };
            if !removed {
                for hook in &markers {
                    for (mark, p) in hook(world, entity, e) {
                        match mark {
                            CellMark::Sight => frame.sight.push([p.x, p.y]),
                            CellMark::Beam => frame.beam.push([p.x, p.y]),
                            CellMark::Caught => frame.seen = true,
                        }
                    }
                }
            }
            agents.push(frame);
        }
        Some(Frame {
            arena: index,
            episode,
            step: clock.step,
            end: ended && clock.step > 0,
            width,
            height,
            tiles,
            agents,
            hash: world
                .get_resource::<StateHash>()
                .filter(|h| h.last != 0)
                .map(|h| h.last),
            metrics: if ended && clock.step > 0 {
                world
                    .get::<EpisodeMetrics>(entity)
                    .map(|m| m.0.iter().map(|(k, v)| (k.to_string(), *v)).collect())
                    .unwrap_or_default()
            } else {
                BTreeMap::new()
            },
        })
    }

    /// The tile at map cell `(x, y)`.
    pub fn tile(&self, x: i32, y: i32) -> Option<char> {
        if x < 0 || y < 0 || x as usize >= self.width || y as usize >= self.height {
            return None;
        }
        self.tiles
            .get(y as usize * self.width + x as usize)
            .copied()
    }

    /// Mean return so far of each team's agents (`teams` entries).
    pub fn team_returns(&self, teams: usize) -> Vec<f32> {
        let mut sum = vec![0.0f32; teams];
        let mut n = vec![0u32; teams];
        for a in &self.agents {
            if let Some(s) = sum.get_mut(usize::from(a.team)) {
                *s += a.ret;
                n[usize::from(a.team)] += 1;
            }
        }
        sum.iter()
            .zip(&n)
            .map(|(s, &k)| s / k.max(1) as f32)
            .collect()
    }
}

impl Frame {
    /// The board the viewer draws: the map, or for families without one (matrix games)
    /// a row with one cell per agent.
    pub fn board_size(&self) -> (usize, usize) {
        if self.width == 0 {
            (self.agents.len().max(1), 1)
        } else {
            (self.width, self.height)
        }
    }

    /// Where the viewer draws `agent`: its map cell, or its slot's cell on a matrix game's
    /// row; `None` while it is out of play.
    pub fn board_pos(&self, agent: &AgentFrame) -> Option<[i32; 2]> {
        if self.width == 0 {
            Some([i32::from(agent.slot), 0])
        } else {
            agent.pos
        }
    }
}
