//! `--from replays:DIR`: recorded episodes as the teacher. Each replay file of the folder
//! (`emergence run --record`, `view --record`, where a person may have taken control of an
//! agent) is played again: its recorded arenas, one at a time, from the replay's seed
//! (an arena's streams depend on the seed and its index alone, so arena `a` run by itself
//! is arena `a` of the recorded run), with the cloned seats acting as recorded
//! ([`ReplayTeacher`]) and the others deciding as they did. Every recorded position is checked
//! against the one played again, so a replay of another scene, seed or policies is refused at
//! the first step where it parts, not learned from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::core::Agent;
use crate::frames::Replay;
use crate::policy::{Decision, Policy};
use crate::scene::Scene;
use crate::train::TrainError;

/// One recorded choice, and where the agent stood after it.
#[derive(Debug, Clone, Copy)]
struct Move {
    action: u8,
    /// The vocabulary index of the word said (`None`: silence).
    say: Option<u8>,
    pos: Option<[i32; 2]>,
    /// The episode ended with this step.
    end: bool,
}

/// Choices by (arena, episode, frame step, slot): frame step `s` is the decision made at
/// observation step `s − 1`.
type Moves = BTreeMap<(u32, u32, u32, u16), Move>;

/// One replay file, read.
#[derive(Clone)]
pub struct Recorded {
    /// The file.
    pub path: PathBuf,
    /// The run seed it was recorded with.
    pub seed: u64,
    /// Each recorded arena with its whole episodes (from the first, consecutive).
    pub arenas: Vec<(u32, u32)>,
    moves: Arc<Moves>,
}

impl Recorded {
    /// The teacher that plays this file's recorded choices.
    pub fn teacher(&self) -> ReplayTeacher {
        ReplayTeacher {
            path: self.path.clone(),
            moves: self.moves.clone(),
            episodes: BTreeMap::new(),
            failure: None,
        }
    }
}

/// Reads every replay file (`*.jsonl`) of `dir`, checked against `scene`: its name, its
/// action words and its vocabulary.
pub fn read(dir: &Path, scene: &Scene) -> Result<Vec<Recorded>, TrainError> {
    let err = |m: String| TrainError::Config(m);
    let entries = std::fs::read_dir(dir).map_err(|io| TrainError::Io {
        path: dir.to_path_buf(),
        io,
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(err(format!(
            "--from replays:{}: no replay file (*.jsonl) in it; expected replays recorded with \
             `emergence run --record FILE` or `emergence view --record FILE`",
            dir.display()
        )));
    }
    let actions = crate::envs::action_names(scene);
    let words: Vec<String> = crate::envs::family::of(scene)
        .vocabulary(scene)
        .unwrap_or_default();
    let mut out = Vec::new();
    for path in files {
        let replay = Replay::load(&path).map_err(|e| err(e.to_string()))?;
        let h = &replay.header;
        if h.name != scene.spec.name {
            return Err(err(format!(
                "{}: recorded on the scene {:?}; expected {:?} ({})",
                path.display(),
                h.name,
                scene.spec.name,
                scene.path.display()
            )));
        }
        if h.actions != actions {
            return Err(err(format!(
                "{}: its actions are {:?}; the scene's are {:?}",
                path.display(),
                h.actions,
                actions
            )));
        }
        let mut moves = Moves::new();
        let mut ended: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for f in &replay.frames {
            if f.end {
                ended.entry(f.arena).or_default().push(f.episode);
            }
            for a in &f.agents {
                let say = match &a.say {
                    None => None,
                    Some(w) => Some(words.iter().position(|v| v == w).ok_or_else(|| {
                        err(format!(
                            "{}: arena {} episode {} step {}: agent {} says {w:?}, which is not \
                             in the scene's vocabulary {words:?}",
                            path.display(),
                            f.arena,
                            f.episode,
                            f.step,
                            a.slot
                        ))
                    })? as u8),
                };
                moves.insert(
                    (f.arena, f.episode, f.step, a.slot),
                    Move {
                        action: a.action_index,
                        say,
                        pos: a.pos,
                        end: f.end,
                    },
                );
            }
        }
        // Whole episodes from the first, consecutive: a recording cut mid-episode keeps those
        // before the cut.
        let arenas: Vec<(u32, u32)> = h
            .arenas
            .iter()
            .map(|&a| {
                let e = ended.get(&a).map_or(&[][..], Vec::as_slice);
                let n = (0..).take_while(|k| e.contains(k)).count() as u32;
                (a, n)
            })
            .filter(|&(_, n)| n > 0)
            .collect();
        if arenas.is_empty() {
            return Err(err(format!(
                "{}: no whole episode recorded (none ends)",
                path.display()
            )));
        }
        out.push(Recorded {
            path,
            seed: h.seed,
            arenas,
            moves: Arc::new(moves),
        });
    }
    Ok(out)
}

/// Plays a replay's recorded choices for the cloned seats, checking that each agent stands
/// where the recording had it.
pub struct ReplayTeacher {
    path: PathBuf,
    moves: Arc<Moves>,
    /// Each agent's episode so far and the step it last decided at.
    episodes: BTreeMap<Agent, (u32, u32)>,
    failure: Option<String>,
}

impl Policy for ReplayTeacher {
    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        if self.failure.is_some() {
            return;
        }
        for d in batch.iter_mut() {
            let step = d.obs.step;
            let (arena, slot) = (d.agent.arena, d.agent.slot);
            let episode = match self.episodes.get(&d.agent) {
                Some(&(e, last)) if step > last => e,
                Some(&(e, last)) => {
                    // A new episode: the last one must have ended where the recording's did.
                    let ended = self
                        .moves
                        .get(&(arena, e, last + 1, slot))
                        .is_some_and(|m| m.end);
                    if !ended {
                        self.failure = Some(format!(
                            "{}: arena {arena} episode {e} ended after step {} played again, \
                             and not there in the recording; expected the same run (the replay \
                             was recorded with another scene, seed or policies)",
                            self.path.display(),
                            last + 1
                        ));
                        return;
                    }
                    e + 1
                }
                None => 0,
            };
            self.episodes.insert(d.agent, (episode, step));
            let at = |s: u32| self.moves.get(&(arena, episode, s, slot));
            let Some(m) = at(step + 1) else {
                self.failure = Some(format!(
                    "{}: no recorded choice for agent {slot} of arena {arena} at step {} of \
                     episode {episode}",
                    self.path.display(),
                    step + 1
                ));
                return;
            };
            // Where the previous step left it, as recorded.
            if step > 0
                && let Some(p) = at(step).and_then(|m| m.pos)
                && p != d.obs.pos
            {
                self.failure = Some(format!(
                    "{}: arena {arena} episode {episode} step {step}: agent {slot} stands at \
                     {:?} played again and at {p:?} in the recording; expected the same run \
                     (the replay was recorded with another scene, seed or policies)",
                    self.path.display(),
                    d.obs.pos
                ));
                return;
            }
            d.action.0 = m.action;
            if let Some(u) = d.say.as_deref_mut() {
                u.0 = m.say;
            }
        }
    }
    fn failure(&self) -> Option<String> {
        self.failure.clone()
    }
}
