//! Replays, written and read here: every step of chosen arenas as JSON lines. The first
//! line is a header ([`ReplayHeader`]: scene, seed, arenas, map size, action words, teams,
//! roles); then one line per recorded arena per step: a [`Frame`] with every agent's
//! position, facing, action, spoken word, reward and return, its observation text, action
//! distribution and value (what the viewer's inspector shows), the cells it lights, the map
//! cells that changed (the whole map on an episode's first step) and the run's state hash
//! after the step. Same seed, same bytes. [`Recorder`] writes (in `RecordSystems::Write`),
//! [`Replay::load`] reads back, checking every line.

use bevy::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::{AgentFrame, Frame, FrameContext};
use crate::core::*;
use crate::envs::{ActionNames, ActiveScene};

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

/// Writes the replay of the chosen arenas.
#[derive(Resource)]
pub struct Recorder {
    out: BufWriter<File>,
    arenas: Vec<u32>,
    last_tiles: BTreeMap<u32, Vec<char>>,
    idle: BTreeSet<u32>,
    ctx: Option<FrameContext>,
    /// The first write error, reported at the end of the run.
    pub error: Option<std::io::Error>,
}

/// The header of a replay of `arenas` of the run in `world`.
pub fn replay_header(world: &World, arenas: &[u32]) -> ReplayHeader {
    let scene = &world.resource::<ActiveScene>().0;
    ReplayHeader {
        replay: 2,
        scene: scene.path.display().to_string(),
        name: scene.spec.name.clone(),
        family: scene.spec.family.name().to_string(),
        seed: world.resource::<Arenas>().seed,
        arenas: arenas.to_vec(),
        width: scene.width,
        height: scene.height,
        actions: world.resource::<ActionNames>().0.clone(),
        teams: scene.team_names().iter().map(|s| s.to_string()).collect(),
        roles: scene.roles.clone(),
        agent_teams: scene.agents.iter().map(|a| a.team).collect(),
    }
}

impl Recorder {
    /// Creates the file and writes the header.
    pub fn create(path: &Path, arenas: Vec<u32>, world: &World) -> std::io::Result<Self> {
        let mut out = BufWriter::new(File::create(path)?);
        serde_json::to_writer(&mut out, &replay_header(world, &arenas))
            .map_err(std::io::Error::other)?;
        out.write_all(b"\n")?;
        Ok(Self {
            out,
            arenas,
            last_tiles: BTreeMap::new(),
            idle: BTreeSet::new(),
            ctx: FrameContext::new(world),
            error: None,
        })
    }
    /// Flushes buffered lines; reports the first error of the run (a failed write or the
    /// flush), taking it.
    pub fn flush(&mut self) -> std::io::Result<()> {
        let flushed = self.out.flush();
        self.error.take().map(Err).unwrap_or(flushed)
    }
}

/// Appends this step of every recorded arena (after the step's state hash).
pub fn record_replay(world: &mut World) {
    world.resource_scope(|world, mut rec: Mut<Recorder>| {
        let rec = &mut *rec;
        if rec.ctx.is_none() {
            rec.ctx = FrameContext::new(world);
        }
        for i in 0..rec.arenas.len() {
            let index = rec.arenas[i];
            if let Err(err) = record_arena(world, rec, index)
                && rec.error.is_none()
            {
                rec.error = Some(err);
            }
        }
    });
}

fn record_arena(world: &World, rec: &mut Recorder, index: u32) -> std::io::Result<()> {
    let Some(entity) = world.resource::<Arenas>().entity(index) else {
        return Ok(());
    };
    let Some(clock) = world.get::<EpisodeClock>(entity) else {
        return Ok(());
    };
    // Only steps that ran: a live arena, or one whose episode just ended.
    if clock.step == 0 {
        return Ok(());
    }
    // An idle arena's last step is recorded once.
    if clock.phase == ArenaPhase::Idle && !rec.idle.insert(index) {
        return Ok(());
    }
    let Some(ctx) = rec.ctx.as_ref() else {
        return Ok(());
    };
    let Some(frame) = Frame::capture(world, ctx, index) else {
        return Ok(());
    };
    let mut line = StepLine {
        arena: index,
        episode: frame.episode,
        step: frame.step,
        agents: frame.agents,
        map: None,
        changes: Vec::new(),
        end: frame.end,
        hash: frame.hash.map(|h| format!("{h:016x}")),
        metrics: frame.metrics,
    };
    let (w, tiles) = (frame.width, frame.tiles);
    if w > 0 {
        match rec.last_tiles.get_mut(&index) {
            Some(last) if clock.step > 1 && last.len() == tiles.len() => {
                for (i, (&now, old)) in tiles.iter().zip(last.iter_mut()).enumerate() {
                    if now != *old {
                        line.changes.push(((i % w) as i32, (i / w) as i32, now));
                        *old = now;
                    }
                }
            }
            _ => {
                line.map = Some(tiles.chunks(w).map(|r| r.iter().collect()).collect());
                rec.last_tiles.insert(index, tiles);
            }
        }
        if frame.end {
            rec.last_tiles.remove(&index);
        }
    }
    serde_json::to_writer(&mut rec.out, &line).map_err(std::io::Error::other)?;
    rec.out.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    use super::*;

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
