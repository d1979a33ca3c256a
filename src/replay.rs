//! Replays: every step of chosen arenas as JSON lines. The first line is a header (scene,
//! seed, arenas, map size, action words, teams); then one line per recorded arena per step:
//! episode, step, every agent's position, facing, action, reward and state, and the map
//! cells that changed (the whole map on an episode's first step). Same seed, same bytes.

use bevy::prelude::*;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use crate::core::*;
use crate::envs::dilemma::gridworld::{Beams, DilemmaMap};
use crate::envs::dilemma::view;
use crate::envs::{ActionNames, ActiveScene};

#[derive(Serialize)]
struct Header<'a> {
    replay: u32,
    scene: String,
    name: &'a str,
    family: &'a str,
    seed: u64,
    arenas: &'a [u32],
    width: usize,
    height: usize,
    actions: &'a [String],
    teams: Vec<&'a str>,
    agent_teams: Vec<u8>,
}

#[derive(Serialize)]
struct AgentLine<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pos: Option<[i32; 2]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    facing: Option<char>,
    action: &'a str,
    reward: f32,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    removed: bool,
}

#[derive(Serialize)]
struct StepLine<'a> {
    arena: u32,
    episode: u32,
    step: u32,
    agents: Vec<AgentLine<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    map: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    changes: Vec<(i32, i32, char)>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    end: bool,
}

/// Writes the replay of the chosen arenas.
#[derive(Resource)]
pub struct Recorder {
    out: BufWriter<File>,
    arenas: Vec<u32>,
    last_tiles: BTreeMap<u32, Vec<u8>>,
    idle: BTreeSet<u32>,
    /// The first write error, reported at the end of the run.
    pub error: Option<std::io::Error>,
}

impl Recorder {
    /// Creates the file and writes the header.
    pub fn create(path: &Path, arenas: Vec<u32>, world: &World) -> std::io::Result<Self> {
        let mut out = BufWriter::new(File::create(path)?);
        let scene = &world.resource::<ActiveScene>().0;
        let header = Header {
            replay: 1,
            scene: scene.path.display().to_string(),
            name: &scene.spec.name,
            family: scene.spec.family.name(),
            seed: world.resource::<Arenas>().seed,
            arenas: &arenas,
            width: scene.width,
            height: scene.height,
            actions: &world.resource::<ActionNames>().0,
            teams: scene.team_names(),
            agent_teams: scene.agents.iter().map(|a| a.team).collect(),
        };
        serde_json::to_writer(&mut out, &header).map_err(std::io::Error::other)?;
        out.write_all(b"\n")?;
        Ok(Self {
            out,
            arenas,
            last_tiles: BTreeMap::new(),
            idle: BTreeSet::new(),
            error: None,
        })
    }
    /// Flushes buffered lines.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// Appends this step of every recorded arena.
pub fn record_replay(
    mut rec: ResMut<Recorder>,
    names: Res<ActionNames>,
    arenas_res: Res<Arenas>,
    arenas: Query<(&EpisodeClock, &ArenaAgents, Option<&DilemmaMap>)>,
    agents: Query<(
        &Action,
        &Reward,
        Option<&GridPos>,
        Option<&Facing>,
        Option<&Beams>,
    )>,
) {
    let rec = &mut *rec;
    for &index in &rec.arenas {
        let Some(&entity) = arenas_res.entities.get(index as usize) else {
            continue;
        };
        let Ok((clock, members, map)) = arenas.get(entity) else {
            continue;
        };
        // Only steps that ran: a live arena, or one whose episode just ended.
        if clock.step == 0 {
            continue;
        }
        let ended = matches!(clock.phase, ArenaPhase::PendingReset | ArenaPhase::Idle);
        // An idle arena's last step is recorded once.
        if clock.phase == ArenaPhase::Idle && !rec.idle.insert(index) {
            continue;
        }
        let episode = if ended {
            clock.episode - 1
        } else {
            clock.episode
        };
        let mut agent_lines = Vec::with_capacity(members.entities().len());
        for &e in members.entities() {
            let Ok((action, reward, pos, facing, beams)) = agents.get(e) else {
                continue;
            };
            let removed = beams.is_some_and(|b| b.removed_until.is_some());
            agent_lines.push(AgentLine {
                pos: pos.filter(|_| !removed).map(|p| [p.0.x, p.0.y]),
                facing: facing.map(|f| f.0.letter()),
                action: names.0.get(action.0 as usize).map_or("?", String::as_str),
                reward: reward.0,
                removed,
            });
        }
        let mut line = StepLine {
            arena: index,
            episode,
            step: clock.step,
            agents: agent_lines,
            map: None,
            changes: Vec::new(),
            end: ended,
        };
        if let Some(map) = map {
            let tiles = map.tiles.cells();
            let w = map.tiles.width();
            match rec.last_tiles.get_mut(&index) {
                Some(last) if clock.step > 1 => {
                    for (i, (&now, old)) in tiles.iter().zip(last.iter_mut()).enumerate() {
                        if now != *old {
                            line.changes.push((
                                (i % w) as i32,
                                (i / w) as i32,
                                view::CHARS[now as usize],
                            ));
                            *old = now;
                        }
                    }
                }
                _ => {
                    line.map = Some(
                        tiles
                            .chunks(w)
                            .map(|r| r.iter().map(|&c| view::CHARS[c as usize]).collect())
                            .collect(),
                    );
                    rec.last_tiles.insert(index, tiles.to_vec());
                }
            }
            if ended {
                rec.last_tiles.remove(&index);
            }
        }
        let res = serde_json::to_writer(&mut rec.out, &line)
            .map_err(std::io::Error::other)
            .and_then(|_| rec.out.write_all(b"\n"));
        if let Err(err) = res
            && rec.error.is_none()
        {
            rec.error = Some(err);
        }
    }
}
