//! Frames: one arena at one step, as the viewer draws it and replays store it.
//!
//! A [`Frame`] holds the arena's map as one character per cell (the families' own drawing,
//! [`draw_map`]), and for every agent what the viewer's inspector shows: where it stands and
//! faces, what it did and said, its reward and return, the observation text exactly as its
//! policy reads it, the action distribution it sampled from, its value estimate, and the
//! cells it lights (vision cones, beams, catches: the families' [`CellMarkers`] hooks).
//! Frames come from a live world
//! ([`Frame::capture`]) or from a replay file ([`Replay::load`]); the window draws both the
//! same way, so a replay can be inspected like a live run.
//!
//! The colours of tiles and teams live here too ([`tile_colour`], [`team_colour`]) with the
//! screen layout ([`Layout`]), so that tests can check a screenshot without the window build.

use bevy::prelude::{Mut, Resource, World};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::core::*;
use crate::envs::{ActionNames, ActiveScene, Vocabulary};
use crate::policy::PolicyRegistry;
use crate::policy::text::{Speaker, TextFormat};

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
        let entity = *world.resource::<Arenas>().entities.get(index as usize)?;
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

/// The first line of a replay file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayHeader {
    /// Format version (2: frames with inspector fields and state hashes).
    pub replay: u32,
    /// The scene file the run was built from.
    pub scene: String,
    /// The scene's name.
    pub name: String,
    /// Its family.
    pub family: String,
    /// Run seed.
    pub seed: u64,
    /// Recorded arenas.
    pub arenas: Vec<u32>,
    /// Map width.
    pub width: usize,
    /// Map height.
    pub height: usize,
    /// Action words, by index.
    pub actions: Vec<String>,
    /// Team names.
    pub teams: Vec<String>,
    /// Role names.
    #[serde(default)]
    pub roles: Vec<String>,
    /// Team of each agent slot.
    pub agent_teams: Vec<u8>,
}

/// One step line of a replay file: a [`Frame`] with its map as a whole (first step of an
/// episode) or as the cells that changed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct StepLine {
    pub arena: u32,
    pub episode: u32,
    pub step: u32,
    pub agents: Vec<AgentFrame>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<(i32, i32, char)>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub end: bool,
    /// The state hash, as 16 hex digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    /// The family's metrics, on an episode's last step.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metrics: BTreeMap<String, f64>,
}

/// A replay file read back: its header and every recorded frame, in file order.
#[derive(Debug, Clone)]
pub struct Replay {
    /// The file.
    pub path: PathBuf,
    /// The header.
    pub header: ReplayHeader,
    /// Every frame.
    pub frames: Vec<Frame>,
}

/// A replay file that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The file cannot be opened or read.
    #[error("{path}: {io}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        io: std::io::Error,
    },
    /// A line is not what a replay holds.
    #[error("{path}:{line}:{column}: {message}")]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What was expected.
        message: String,
    },
}

impl Replay {
    /// Reads a replay written by `emergence run --record` (or `view --record`).
    pub fn load(path: &Path) -> Result<Replay, ReplayError> {
        let text = std::fs::read_to_string(path).map_err(|io| ReplayError::Io {
            path: path.to_path_buf(),
            io,
        })?;
        Self::parse(path, &text)
    }

    /// Parses replay text; `path` names it in errors.
    pub fn parse(path: &Path, text: &str) -> Result<Replay, ReplayError> {
        let bad = |line: usize, column: usize, message: String| ReplayError::Line {
            path: path.to_path_buf(),
            line,
            column,
            message,
        };
        let json = |line: usize, e: serde_json::Error, what: &str| {
            bad(line, e.column().max(1), format!("expected {what}: {e}"))
        };
        let mut lines = text.lines().enumerate();
        let header: ReplayHeader = match lines.next() {
            Some((_, l)) => serde_json::from_str(l).map_err(|e| json(1, e, "a replay header"))?,
            None => {
                return Err(bad(
                    1,
                    1,
                    "the file is empty; expected a replay header".into(),
                ));
            }
        };
        if header.replay != 2 {
            return Err(bad(
                1,
                1,
                format!(
                    "replay format {} is not supported; expected 2 (record it again with this version)",
                    header.replay
                ),
            ));
        }
        let mut last: BTreeMap<u32, Vec<char>> = BTreeMap::new();
        let mut frames = Vec::new();
        for (i, l) in lines {
            if l.trim().is_empty() {
                continue;
            }
            let n = i + 1;
            let s: StepLine = serde_json::from_str(l).map_err(|e| json(n, e, "a step line"))?;
            if !header.arenas.contains(&s.arena) {
                return Err(bad(
                    n,
                    1,
                    format!(
                        "arena {} is not one the header lists as recorded ({:?})",
                        s.arena, header.arenas
                    ),
                ));
            }
            if s.map.is_none() && !s.changes.is_empty() && !last.contains_key(&s.arena) {
                return Err(bad(
                    n,
                    1,
                    format!(
                        "map changes of arena {} before any whole map; expected a `map` on an \
                         episode's first step",
                        s.arena
                    ),
                ));
            }
            let tiles = match &s.map {
                Some(rows) => {
                    let t: Vec<char> = rows.iter().flat_map(|r| r.chars()).collect();
                    if rows.len() != header.height
                        || rows.iter().any(|r| r.chars().count() != header.width)
                    {
                        return Err(bad(
                            n,
                            1,
                            format!(
                                "the map must be {} rows of {} cells",
                                header.height, header.width
                            ),
                        ));
                    }
                    t
                }
                None => last.get(&s.arena).cloned().unwrap_or_default(),
            };
            let mut tiles = tiles;
            for &(x, y, c) in &s.changes {
                if x < 0 || y < 0 || x as usize >= header.width || y as usize >= header.height {
                    return Err(bad(
                        n,
                        1,
                        format!(
                            "change at ({x}, {y}) is outside the {}x{} map",
                            header.width, header.height
                        ),
                    ));
                }
                if let Some(t) = tiles.get_mut(y as usize * header.width + x as usize) {
                    *t = c;
                }
            }
            last.insert(s.arena, tiles.clone());
            let hash = match &s.hash {
                Some(h) if h.len() != 16 => {
                    return Err(bad(n, 1, format!("hash {h:?} is not 16 hex digits")));
                }
                Some(h) => Some(
                    u64::from_str_radix(h, 16)
                        .map_err(|_| bad(n, 1, format!("hash {h:?} is not 16 hex digits")))?,
                ),
                None => None,
            };
            let (width, height) = if tiles.is_empty() {
                (0, 0)
            } else {
                (header.width, header.height)
            };
            frames.push(Frame {
                arena: s.arena,
                episode: s.episode,
                step: s.step,
                end: s.end,
                width,
                height,
                tiles,
                agents: s.agents,
                hash,
                metrics: s.metrics,
            });
        }
        Ok(Replay {
            path: path.to_path_buf(),
            header,
            frames,
        })
    }

    /// The frames of one arena, in order.
    pub fn arena_frames(&self, arena: u32) -> Vec<&Frame> {
        self.frames.iter().filter(|f| f.arena == arena).collect()
    }
}

/// sRGB colour of a team (by index), shared by the window and the screenshot tests. The
/// colours are saturated and far from every tile colour.
pub fn team_colour(team: u8) -> [u8; 3] {
    const TEAMS: [[u8; 3]; 6] = [
        [230, 57, 70],
        [52, 120, 246],
        [255, 196, 0],
        [170, 70, 230],
        [0, 200, 150],
        [255, 120, 200],
    ];
    TEAMS[usize::from(team) % TEAMS.len()]
}

/// sRGB colour of a map character of `family` ([`FamilySpec::name`](crate::scene::FamilySpec::name)), from the families' replay characters.
pub fn tile_colour(family: &str, c: char) -> [u8; 3] {
    const FLOOR: [u8; 3] = [38, 40, 46];
    const WALL: [u8; 3] = [105, 105, 115];
    match (family, c) {
        (_, '.') => FLOOR,
        (_, '#') if family != "CleanUp" && family != "CommonsHarvest" => WALL,
        (_, 'W') => WALL,
        // Grid dilemmas: apples, apple sites, river and dirt.
        (_, 'A') => [70, 170, 60],
        (_, ',') => [52, 66, 50],
        (_, '~') => [40, 75, 120],
        ("CleanUp", '#') => [110, 85, 45],
        // Hide-and-seek: low walls, boxes and ramps, locked or not.
        ("HideAndSeek", '=') => [80, 80, 90],
        ("HideAndSeek", 'b') => [160, 110, 60],
        ("HideAndSeek", 'B' | 'X') => [120, 80, 40],
        ("HideAndSeek", 'r') => [120, 140, 150],
        ("HideAndSeek", 'R' | 'Y') => [85, 100, 110],
        // Maze: plates, doors, keys, locks, exits.
        ("Maze", 'p') => [120, 100, 150],
        ("Maze", 'D') => [150, 60, 40],
        ("Maze", '/') => [90, 65, 50],
        ("Maze", 'k') => [220, 200, 90],
        ("Maze", 'L') => [140, 120, 40],
        ("Maze", 'E') => [60, 160, 120],
        _ => [20, 20, 24],
    }
}

/// Where the map sits in the window: the area left of the side panel, cells square.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Layout {
    /// Pixel column of the map's left edge.
    pub left: f32,
    /// Pixel row of the map's top edge.
    pub top: f32,
    /// Cell size in pixels.
    pub cell: f32,
}

/// Width of the window's right side panel (controls, inspector, curves), in logical pixels.
pub const PANEL_WIDTH: f32 = 420.0;
/// Height of the window's bottom strip (timeline, speech), in logical pixels.
pub const BOTTOM_HEIGHT: f32 = 150.0;

impl Layout {
    /// The layout of a `width` x `height` map in a window of `window` logical pixels, with
    /// the side panel on the right and the bottom strip below: the biggest square cells
    /// that fit, centred, with a margin.
    pub fn new(window: [f32; 2], width: usize, height: usize) -> Layout {
        let (w, h) = (width.max(1) as f32, height.max(1) as f32);
        let area = [
            (window[0] - PANEL_WIDTH).max(64.0),
            (window[1] - BOTTOM_HEIGHT).max(64.0),
        ];
        let margin = 16.0;
        let cell = ((area[0] - 2.0 * margin) / w)
            .min((area[1] - 2.0 * margin) / h)
            .floor()
            .max(2.0);
        Layout {
            left: ((area[0] - cell * w) / 2.0).floor(),
            top: ((area[1] - cell * h) / 2.0).floor(),
            cell,
        }
    }

    /// The pixel at the centre of map cell `(x, y)`.
    pub fn centre(&self, x: i32, y: i32) -> [f32; 2] {
        [
            self.left + (x as f32 + 0.5) * self.cell,
            self.top + (y as f32 + 0.5) * self.cell,
        ]
    }

    /// The map cell under pixel `p`, if any (`width` x `height` map).
    pub fn cell_at(&self, p: [f32; 2], width: usize, height: usize) -> Option<(i32, i32)> {
        let x = ((p[0] - self.left) / self.cell).floor();
        let y = ((p[1] - self.top) / self.cell).floor();
        (x >= 0.0 && y >= 0.0 && (x as usize) < width && (y as usize) < height)
            .then_some((x as i32, y as i32))
    }
}

/// The fill colour of the window's egui panels (screenshot tests look for it).
pub const PANEL_FILL: [u8; 3] = [30, 34, 44];

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

/// A live feed of one arena's frames from a run on another thread (`train --gui`): the run
/// pushes every step's frame, the window reads the newest.
#[derive(Clone, Default)]
pub struct FrameTap(pub std::sync::Arc<std::sync::Mutex<TapFeed>>);

impl std::fmt::Debug for FrameTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FrameTap")
    }
}

/// What a [`FrameTap`] holds.
#[derive(Debug, Default)]
pub struct TapFeed {
    /// The frames of the current episode of the tapped arena, in order.
    pub frames: Vec<Frame>,
    /// Bumped with every frame pushed.
    pub version: u64,
    /// Training iteration (episode) being run.
    pub episode: u32,
    /// The window is gone: the run stops capturing frames.
    pub closed: bool,
}

impl FrameTap {
    /// Locks the feed (a poisoned lock still gives its data: frames are plain values).
    pub fn lock(&self) -> std::sync::MutexGuard<'_, TapFeed> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The run side of a [`FrameTap`]: a resource that [`tap_frames`] fills with arena 0.
#[derive(Resource)]
pub struct TapSink {
    tap: FrameTap,
    ctx: Option<FrameContext>,
}

impl TapSink {
    /// A sink feeding `tap`.
    pub fn new(tap: FrameTap) -> Self {
        Self { tap, ctx: None }
    }
}

/// Pushes arena 0's frame of this step into the [`TapSink`]'s feed.
pub fn tap_frames(world: &mut World) {
    world.resource_scope(|world, mut sink: Mut<TapSink>| {
        if sink.ctx.is_none() {
            sink.ctx = FrameContext::new(world);
        }
        if sink.tap.lock().closed {
            return;
        }
        let Some(ctx) = sink.ctx.as_ref() else {
            return;
        };
        let Some(frame) = Frame::capture(world, ctx, 0) else {
            return;
        };
        if frame.step == 0 {
            return;
        }
        let mut feed = sink.tap.lock();
        // An arena held between iterations shows the same step while the others finish.
        if let Some(l) = feed.frames.last() {
            if (l.episode, l.step) == (frame.episode, frame.step) {
                return;
            }
            if l.episode != frame.episode || l.step > frame.step {
                feed.frames.clear();
            }
        }
        feed.episode = frame.episode;
        feed.frames.push(frame);
        feed.version += 1;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn team_colours_differ_from_every_tile_colour() {
        let chars: Vec<char> = ".#W A,~=bBXrRYpD/kLE?".chars().collect();
        for fam in ["CommonsHarvest", "CleanUp", "HideAndSeek", "Maze", "Matrix"] {
            for &c in &chars {
                let t = tile_colour(fam, c);
                for team in 0..6 {
                    let k = team_colour(team);
                    let d: i32 = (0..3)
                        .map(|i| (i32::from(t[i]) - i32::from(k[i])).abs())
                        .sum();
                    assert!(
                        d > 90,
                        "{fam} {c:?} is too close to team {team}: {t:?} {k:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_layout_fits_the_map_left_of_the_panel_and_finds_cells_back() {
        let l = Layout::new([1280.0, 800.0], 20, 10);
        assert!(l.cell >= 2.0);
        assert!(l.left + 20.0 * l.cell <= 1280.0 - PANEL_WIDTH);
        assert!(l.top + 10.0 * l.cell <= 800.0 - BOTTOM_HEIGHT);
        let c = l.centre(3, 7);
        assert_eq!(l.cell_at(c, 20, 10), Some((3, 7)));
        assert_eq!(l.cell_at([l.left - 1.0, c[1]], 20, 10), None);
        // 860 x 650 available, less margins: (860 - 32) / 20 = 41.4 and (650 - 32) / 10
        // = 61.8, so 41 px cells, centred: (860 - 820) / 2 = 20, (650 - 410) / 2 = 120.
        assert_eq!(l.cell, 41.0);
        assert_eq!(l.left, 20.0);
        assert_eq!(l.top, 120.0);
    }

    #[test]
    fn a_replay_line_with_a_bad_hash_or_a_map_of_the_wrong_size_is_located() {
        let header = r#"{"replay":2,"scene":"s","name":"n","family":"Maze","seed":1,"arenas":[0],"width":2,"height":1,"actions":["noop"],"teams":["a"],"agent_teams":[0]}"#;
        let good = format!(
            "{header}\n{}\n",
            r#"{"arena":0,"episode":0,"step":1,"agents":[],"map":[".#"],"hash":"00000000000000ff"}"#
        );
        let r = Replay::parse(Path::new("r.jsonl"), &good).expect("good replay");
        assert_eq!(r.frames[0].tiles, vec!['.', '#']);
        assert_eq!(r.frames[0].hash, Some(255));
        let wrong_map = format!(
            "{header}\n{}\n",
            r#"{"arena":0,"episode":0,"step":1,"agents":[],"map":["..."]}"#
        );
        let e = Replay::parse(Path::new("r.jsonl"), &wrong_map).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("r.jsonl:2:1: the map must be 1 rows of 2"),
            "{e}"
        );
        let bad_hash = format!(
            "{header}\n\n{}\n",
            r#"{"arena":0,"episode":0,"step":1,"agents":[],"hash":"zz"}"#
        );
        let e = Replay::parse(Path::new("r.jsonl"), &bad_hash).unwrap_err();
        assert!(e.to_string().starts_with("r.jsonl:3:1: hash \"zz\""), "{e}");
        let other_arena = format!(
            "{header}\n{}\n",
            r#"{"arena":1,"episode":0,"step":1,"agents":[],"map":[".#"]}"#
        );
        let e = Replay::parse(Path::new("r.jsonl"), &other_arena).unwrap_err();
        assert!(
            e.to_string()
                .contains("arena 1 is not one the header lists"),
            "{e}"
        );
        let changes_first = format!(
            "{header}\n{}\n",
            r##"{"arena":0,"episode":0,"step":2,"agents":[],"changes":[[0,0,"#"]]}"##
        );
        let e = Replay::parse(Path::new("r.jsonl"), &changes_first).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("r.jsonl:2:1: map changes of arena 0 before"),
            "{e}"
        );
        let short_hash = good.replace("00000000000000ff", "ff");
        let e = Replay::parse(Path::new("r.jsonl"), &short_hash).unwrap_err();
        assert!(e.to_string().contains("is not 16 hex digits"), "{e}");
        let e = Replay::parse(Path::new("r.jsonl"), "{\"replay\":2}").unwrap_err();
        assert!(e.to_string().starts_with("r.jsonl:1:"), "{e}");
        assert!(e.to_string().contains("expected a replay header"), "{e}");
    }
}
