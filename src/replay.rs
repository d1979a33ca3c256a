//! Replays: every step of chosen arenas as JSON lines. The first line is a header (scene,
//! seed, arenas, map size, action words, teams); then one line per recorded arena per step:
//! episode, step, every agent's position, facing, action, spoken word, reward and state,
//! and the map cells that changed (the whole map on an episode's first step), as the
//! families draw them ([`MapDrawers`]). Same seed, same bytes.

use bevy::prelude::*;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use crate::core::*;
use crate::envs::dilemma::gridworld::Beams;
use crate::envs::{ActionNames, ActiveScene, Vocabulary};

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
    #[serde(skip_serializing_if = "Option::is_none")]
    say: Option<&'a str>,
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
    last_tiles: BTreeMap<u32, Vec<char>>,
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
pub fn record_replay(world: &mut World) {
    world.resource_scope(|world, mut rec: Mut<Recorder>| {
        let rec = &mut *rec;
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
    let names = &world.resource::<ActionNames>().0;
    let words = world.get_resource::<Vocabulary>().map(|v| &v.0[..]);
    let Some(&entity) = world.resource::<Arenas>().entities.get(index as usize) else {
        return Ok(());
    };
    let (Some(clock), Some(members)) = (
        world.get::<EpisodeClock>(entity),
        world.get::<ArenaAgents>(entity),
    ) else {
        return Ok(());
    };
    // Only steps that ran: a live arena, or one whose episode just ended.
    if clock.step == 0 {
        return Ok(());
    }
    let ended = matches!(clock.phase, ArenaPhase::PendingReset | ArenaPhase::Idle);
    // An idle arena's last step is recorded once.
    if clock.phase == ArenaPhase::Idle && !rec.idle.insert(index) {
        return Ok(());
    }
    let episode = if ended {
        clock.episode - 1
    } else {
        clock.episode
    };
    let mut agent_lines = Vec::with_capacity(members.entities().len());
    for &e in members.entities() {
        let Some(action) = world.get::<Action>(e) else {
            continue;
        };
        let removed = world
            .get::<Beams>(e)
            .is_some_and(|b| b.removed_until.is_some());
        let say = world
            .get::<Utterance>(e)
            .and_then(|u| u.0)
            .and_then(|w| words.and_then(|v| v.get(usize::from(w))))
            .map(String::as_str);
        agent_lines.push(AgentLine {
            pos: world
                .get::<GridPos>(e)
                .filter(|_| !removed)
                .map(|p| [p.0.x, p.0.y]),
            facing: world.get::<Facing>(e).map(|f| f.0.letter()),
            action: names.get(action.0 as usize).map_or("?", String::as_str),
            say,
            reward: world.get::<Reward>(e).map_or(0.0, |r| r.0),
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
    if let Some((w, tiles)) = draw_map(world, entity) {
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
        if ended {
            rec.last_tiles.remove(&index);
        }
    }
    serde_json::to_writer(&mut rec.out, &line).map_err(std::io::Error::other)?;
    rec.out.write_all(b"\n")
}
