//! Replays: every step of chosen arenas as JSON lines. The first line is a header
//! ([`ReplayHeader`]: scene, seed, arenas, map size, action words, teams, roles); then one
//! line per recorded arena per step: a [`Frame`] with every agent's
//! position, facing, action, spoken word, reward and return, its observation text, action
//! distribution and value (what the viewer's inspector shows), the cells it lights, the map
//! cells that changed (the whole map on an episode's first step) and the run's state hash
//! after the step. Same seed, same bytes. [`Replay::load`](crate::inspect::Replay::load)
//! reads it back.

use bevy::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use crate::core::*;
use crate::envs::{ActionNames, ActiveScene};
use crate::inspect::{Frame, FrameContext, ReplayHeader, StepLine};

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
    let Some(&entity) = world.resource::<Arenas>().entities.get(index as usize) else {
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
