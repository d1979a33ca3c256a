//! emergence's environments for Python: the native half of the `emergence` package.
//!
//! [`Sim`] holds one simulation world (the scene's arenas, built by the same
//! `headless::build_app` as `emergence run`, stepped by the same `SimSchedule`) and steps it
//! the way a controller outside the app must: a step runs in two parts (`StepPart`): the
//! part that applies the actions and ends the step (`Decide` to `Record`), then the part
//! that starts the next one (`Reset` to `Encode`), with the observations read in between.
//! Concatenated, the parts are exactly the CLI's steps, so a seed gives the same hashes.
//!
//! The seats Python drives are registered as the `python` policy, which decides nothing: the
//! actions are written into the agents' `Action` before the step (checked against the mask
//! first). Every other seat keeps its scene policy (bots, `mlp`, `lm`), so Python can train
//! against emergence's own partners.
//!
//! Finished arenas wait (`Hold`) with their last state observed until the next step, which
//! resets them and ignores their actions (Gymnasium's next-step autoreset). The stepping
//! runs with the GIL released. The Python classes (`emergence.parallel_env`,
//! `emergence.vector_env`) are in `emergence/`.

use std::sync::Arc;

use bevy::app::{Main, MainScheduleOrder};
use bevy::ecs::query::QueryState;
use bevy::ecs::schedule::{InternedScheduleLabel, Schedules};
use bevy::prelude::{Entity, World};
use bevy::tasks::{ComputeTaskPool, TaskPool};
use numpy::ndarray::{Array2, Array3};
use numpy::{IntoPyArray, PyArray1, PyArray2, PyArray3, PyArrayMethods, PyReadonlyArray2};
use pyo3::exceptions::{PyKeyError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict};

use emergence::core::{
    Action, ActionMask, ArenaAgents, ArenaPhase, Arenas, CODES, CentralState, Done, EncodeFeatures,
    Encoded, EpisodeClock, EpisodeReturn, Features, GlobalStateSchedule, GlobalView, Hold,
    Observation, Reward, SimSchedule, StateHash, StepPart, Team, Utterance,
};
use emergence::envs::senses::SensesQuery;
use emergence::frames::{Frame, FrameContext};
use emergence::headless::{RunConfig, build_app, error_chain};
use emergence::observe::text::{Speaker, TextFormat};
use emergence::observe::transcript::{Transcript, chosen_text};
use emergence::policy::{Decision, Policy, PolicyFactory};
use emergence::scene::Scene;

/// The policy name of the seats Python drives.
const PYTHON: &str = "python";

/// The seats Python drives: their actions are already in place when the step runs. With a
/// teacher that is an oracle bot (`teacher=`), the families write the whole map beside the
/// seats' own view for it to read ([`Policy::teacher_is_oracle`]).
struct External {
    oracle_teacher: bool,
}

impl Policy for External {
    fn decide(&mut self, _batch: &mut [Decision<'_>]) {}
    fn teacher_is_oracle(&self) -> bool {
        self.oracle_teacher
    }
}

/// `teacher=`: a scripted policy that decides, beside Python, for every seat Python drives,
/// on the observation Python reads (its labels: imitation learning's expert actions). It
/// draws from the seat's own random stream, which nothing else draws from while Python
/// drives it, so following its labels plays the run `emergence run` plays with the teacher
/// in those seats.
struct Teacher {
    name: String,
    policy: Box<dyn Policy>,
    /// An oracle bot: it reads the whole map where the family writes it for the teacher.
    oracle: bool,
    /// This step's labels, arena-major by seat: the action (-1 in an arena waiting to
    /// reset), and in families with talk the word (0 silence, `k + 1` word `k`).
    actions: Vec<i64>,
    words: Vec<i64>,
}

/// The teacher named `name`, checked: a scripted policy of the catalogue that plays the
/// scene's family.
fn make_teacher(scene: &Scene, name: &str) -> PyResult<Teacher> {
    let family = scene.spec.family.name();
    let scripted: Vec<&str> = emergence::policy::catalogue()
        .iter()
        .filter(|p| !matches!(p.name, "lm" | "mlp" | "gru") && p.plays(family))
        .map(|p| p.name)
        .collect();
    match emergence::policy::catalogue()
        .iter()
        .find(|p| p.name == name)
    {
        Some(p) if !matches!(p.name, "lm" | "mlp" | "gru") && p.plays(family) => Ok(Teacher {
            name: name.into(),
            policy: p.make_on_cpu(),
            oracle: p.oracle,
            actions: Vec::new(),
            words: Vec::new(),
        }),
        _ => Err(PyValueError::new_err(format!(
            "teacher {name:?}: expected a scripted policy that plays {family}: {}",
            scripted.join(", ")
        ))),
    }
}

/// Reads a scene: a path to a `.scene.ron` file, or the RON text itself.
fn read_scene(scene: &str) -> PyResult<Scene> {
    let trimmed = scene.trim_start();
    let text = trimmed.starts_with('(') || trimmed.starts_with("//") || scene.contains('\n');
    let result = if text {
        emergence::load::parse_scene(scene, std::path::Path::new("<string>"))
    } else {
        emergence::load::load_scene(std::path::Path::new(scene))
    };
    result.map_err(|e| PyValueError::new_err(error_chain(&e)))
}

/// What an agent's observation, features and text read, fetched through one cached query
/// (a `World::get` by type costs a lookup of the component's id each).
type AgentView = (
    &'static Observation,
    SensesQuery,
    Option<&'static ActionMask>,
    Option<&'static Team>,
    Option<&'static emergence::core::Role>,
    Option<&'static Reward>,
);

/// One simulation world of `num_arenas` arenas of a scene.
#[pyclass(module = "emergence._native")]
pub struct Sim {
    world: World,
    scene: Scene,
    arenas: Vec<Entity>,
    /// Agents by arena, in slot order.
    agents: Vec<Vec<Entity>>,
    /// The slots Python drives, in slot order.
    seats: Vec<usize>,
    actions: Vec<String>,
    vocabulary: Vec<String>,
    format: TextFormat,
    /// The scene's `memory:` (past turns a language-model agent reads), and each seat's
    /// episode so far by arena and seat, for its text.
    memory: usize,
    transcripts: Vec<Vec<Transcript>>,
    frames: FrameContext,
    /// Arenas that finished last step and reset in this one.
    resetting: Vec<bool>,
    /// Rewards and ends of the last step, by arena and seat.
    rewards: Vec<f32>,
    terminated: Vec<bool>,
    truncated: Vec<bool>,
    hashes: Vec<u64>,
    central: bool,
    /// An illegal action becomes the first legal one (emergence's own rule for policies)
    /// instead of an error.
    first_legal: bool,
    threads: Option<usize>,
    first_arena: u32,
    /// Whether every step's state hash is kept (`step_hashes`).
    hash_steps: bool,
    /// `teacher=`: the scripted policy labelling the seats' observations.
    teacher: Option<Teacher>,
    /// The agents' observations, kept up to date with the world's archetypes by every call
    /// that changes the world ([`Sim::run_part`], [`Sim::global_state`]).
    view: QueryState<AgentView>,
    /// `Main`'s schedules that hold systems, in `Main`'s order: known after the app's first
    /// frame (which also runs the startup schedules); the part that ends a step runs these
    /// instead of `Main`, whose other schedules are empty (the same systems in the same
    /// order, without a schedule lookup and an executor run for each empty one).
    frame: Option<Vec<InternedScheduleLabel>>,
}

impl Sim {
    #[allow(clippy::too_many_arguments)]
    fn build(
        scene: Scene,
        num_arenas: u32,
        seed: u64,
        seats: Option<Vec<String>>,
        threads: Option<usize>,
        central: bool,
        first_arena: u32,
        hash_steps: bool,
        teacher: Option<String>,
    ) -> PyResult<Self> {
        let mut teacher = teacher.map(|t| make_teacher(&scene, &t)).transpose()?;
        let oracle_teacher = teacher.as_ref().is_some_and(|t| t.oracle);
        let teams: Vec<String> = scene.team_names().iter().map(|s| s.to_string()).collect();
        let driven: Vec<usize> = match &seats {
            None => (0..teams.len()).collect(),
            Some(names) => names
                .iter()
                .map(|n| {
                    teams.iter().position(|t| t == n).ok_or_else(|| {
                        PyValueError::new_err(format!(
                            "python_teams: the scene has no team {n:?} (its teams: {})",
                            teams.join(", ")
                        ))
                    })
                })
                .collect::<PyResult<_>>()?,
        };
        let mut run_scene = scene.clone();
        let mut slots = Vec::new();
        for (slot, a) in run_scene.agents.iter_mut().enumerate() {
            if driven.contains(&usize::from(a.team)) {
                a.policy = PYTHON.into();
                slots.push(slot);
            }
        }
        let mut cfg = RunConfig::new(run_scene);
        cfg.arenas = num_arenas;
        // Arena `p` of this world is arena `first_arena + p` of a run: its random streams
        // are that arena's.
        cfg.first_arena = first_arena;
        cfg.episodes = u32::MAX;
        cfg.seed = seed;
        cfg.threads = threads;
        // Hashing the state costs about a fifth of a many-arena step: only when asked.
        cfg.hash_steps = hash_steps;
        cfg.policies.push((
            PYTHON.into(),
            PolicyFactory(Arc::new(move || {
                Box::new(External { oracle_teacher }) as Box<dyn Policy>
            })),
        ));
        let mut app = build_app(&cfg).map_err(|e| PyValueError::new_err(error_chain(&e)))?;
        if central {
            app.insert_resource(CentralState);
        }
        // Each step encodes every agent's observation once; `observations` copies them.
        app.insert_resource(EncodeFeatures);
        let mut world = std::mem::take(app.world_mut());
        let arenas = world.resource::<Arenas>().entities.clone();
        let agents: Vec<Vec<Entity>> = arenas
            .iter()
            .map(|&a| {
                world
                    .get::<ArenaAgents>(a)
                    .map(|m| m.entities().to_vec())
                    .unwrap_or_default()
            })
            .collect();
        let actions = world.resource::<emergence::envs::ActionNames>().0.clone();
        let vocabulary = world
            .get_resource::<emergence::envs::Vocabulary>()
            .map(|v| v.0.clone())
            .unwrap_or_default();
        let format = TextFormat::new(&scene, &actions);
        if let Some(t) = &mut teacher {
            t.policy
                .setup(&scene, &actions)
                .map_err(|e| PyValueError::new_err(format!("teacher {:?}: {e}", t.name)))?;
        }
        let frames = FrameContext::new(&world)
            .ok_or_else(|| PyRuntimeError::new_err("the world has no scene"))?;
        world.insert_resource(StepPart::Observe);
        let n = arenas.len() * slots.len();
        let view = QueryState::new(&mut world);
        let memory = scene.spec.memory as usize;
        let transcripts = vec![vec![Transcript::default(); slots.len()]; num_arenas as usize];
        let mut sim = Self {
            world,
            scene,
            arenas,
            agents,
            seats: slots,
            actions,
            vocabulary,
            format,
            memory,
            transcripts,
            frames,
            view,
            resetting: vec![false; num_arenas as usize],
            rewards: vec![0.0; n],
            terminated: vec![false; n],
            truncated: vec![false; n],
            hashes: Vec::new(),
            central,
            first_legal: false,
            threads,
            first_arena,
            hash_steps,
            teacher,
            frame: None,
        };
        sim.run_part(StepPart::Observe);
        Ok(sim)
    }

    /// Runs one part of a step. The part that ends the step runs the app's whole frame
    /// (`Main`'s schedules: messages are updated once per step, as in a run); the part that
    /// starts the next step is the simulation schedule alone.
    fn run_part(&mut self, part: StepPart) {
        *self.world.resource_mut::<StepPart>() = part;
        match (part, &self.frame) {
            (StepPart::Observe, _) => self.world.run_schedule(SimSchedule),
            (_, Some(frame)) => {
                for &label in frame {
                    self.world.run_schedule(label);
                }
            }
            (_, None) => {
                self.world.run_schedule(Main);
                self.frame = Some(busy_main_schedules(&self.world));
            }
        }
        self.world.clear_trackers();
        self.view.update_archetypes(&self.world);
        if part == StepPart::Observe {
            self.label();
        }
    }

    /// `teacher=`: the teacher decides for every seat of every arena that is not waiting to
    /// reset, on what the seat observes now (an oracle on the whole map), as the run's
    /// policies decide (one batch, each seat's own stream); its choices become the labels
    /// and the seats' actions stay as they are.
    fn label(&mut self) {
        let Some(teacher) = self.teacher.as_mut() else {
            return;
        };
        let (na, ns) = (self.arenas.len(), self.seats.len());
        let entities: Vec<Option<Entity>> = (0..na * ns)
            .map(|i| {
                let (a, s) = (i / ns, i % ns);
                (!self.resetting[a]).then(|| self.agents[a][self.seats[s]])
            })
            .collect();
        let mut actions = vec![Action(0); na * ns];
        let mut says = vec![Utterance(None); na * ns];
        let mut traces = vec![emergence::core::DecisionTrace::default(); na * ns];
        let mut rngs: Vec<Option<emergence::core::AgentRng>> = entities
            .iter()
            .map(|e| e.and_then(|e| self.world.get::<emergence::core::AgentRng>(e).cloned()))
            .collect();
        let talk = !self.vocabulary.is_empty();
        {
            let world = &self.world;
            let views: Vec<Option<Observation>> = entities
                .iter()
                .map(|e| {
                    let e = (*e)?;
                    if !teacher.oracle {
                        return None;
                    }
                    world.get::<Observation>(e)?.as_oracle()
                })
                .collect();
            let mut batch = Vec::with_capacity(na * ns);
            for (i, ((((e, action), say), trace), rng)) in entities
                .iter()
                .zip(actions.iter_mut())
                .zip(says.iter_mut())
                .zip(traces.iter_mut())
                .zip(rngs.iter_mut())
                .enumerate()
            {
                let (Some(e), Some(rng)) = (*e, rng.as_mut()) else {
                    continue;
                };
                let Ok((obs, senses, Some(&mask), team, role, reward)) =
                    self.view.get_manual(world, e)
                else {
                    continue;
                };
                let Some(&agent) = world.get::<emergence::core::Agent>(e) else {
                    continue;
                };
                let features = world
                    .get::<Features>(e)
                    .map_or(&emergence::core::NO_FEATURES, |f| &f.0);
                let last_reward = reward.map_or(0.0, |r| r.0);
                trace.last_reward = last_reward;
                batch.push(Decision {
                    agent,
                    obs: views[i].as_ref().unwrap_or(obs),
                    senses: senses.get(),
                    features,
                    mask,
                    rng: &mut rng.0,
                    action,
                    say: talk.then_some(say),
                    team: team.map_or(0, |t| t.0),
                    role: role.map_or(0, |r| r.0),
                    last_reward,
                    trace,
                });
            }
            teacher.policy.decide(&mut batch);
        }
        teacher.actions.clear();
        teacher.words.clear();
        for (i, e) in entities.iter().enumerate() {
            let Some(e) = *e else {
                teacher.actions.push(-1);
                teacher.words.push(0);
                continue;
            };
            // The registry's own rule: an illegal choice is the first legal action.
            let mask = self
                .world
                .get::<ActionMask>(e)
                .copied()
                .unwrap_or(ActionMask(0));
            let a = if mask.allows(actions[i].0) {
                actions[i].0
            } else {
                mask.nth(0).unwrap_or(0)
            };
            teacher.actions.push(i64::from(a));
            teacher
                .words
                .push(says[i].0.map_or(0, |w| i64::from(w) + 1));
            if let (Some(rng), Some(mut slot)) = (
                rngs[i].take(),
                self.world.get_mut::<emergence::core::AgentRng>(e),
            ) {
                *slot = rng;
            }
        }
    }

    fn agent(&self, arena: usize, seat: usize) -> Entity {
        self.agents[arena][self.seats[seat]]
    }

    /// Agent `e`'s step and this step's turn as a language model with memory reads it
    /// (its observation without the scene's constant lines).
    fn turn(&self, e: Entity) -> Option<(u32, String)> {
        match self.view.get_manual(&self.world, e) {
            Ok((obs, senses, Some(&mask), team, role, reward)) => Some((
                obs.step,
                self.format.render_turn(
                    Speaker {
                        team: team.map_or(0, |t| t.0),
                        role: role.map_or(0, |r| r.0),
                    },
                    obs,
                    senses.get(),
                    mask,
                    reward.map_or(0.0, |r| r.0),
                ),
            )),
            _ => None,
        }
    }

    /// Writes `actions` (arena-major, one per seat) after checking them; arenas that reset
    /// this step ignore theirs.
    fn write_actions(&mut self, actions: &[i64], words: Option<&[i64]>) -> Result<(), String> {
        let seats = self.seats.len();
        let vocabulary = self.vocabulary.len() as i64;
        if let Some(words) = words {
            if vocabulary == 0 && words.iter().any(|&w| w != 0) {
                return Err(format!(
                    "{} has no talk: every word must be 0 (silence)",
                    self.scene.spec.family.name()
                ));
            }
            if let Some((i, &w)) = words
                .iter()
                .enumerate()
                .find(|&(_, &w)| w < 0 || w > vocabulary)
            {
                return Err(format!(
                    "arena {}, agent {}: word {w} is not 0 (silence) or 1 to {vocabulary} (the vocabulary: {})",
                    i / seats.max(1),
                    self.seat_name(i % seats.max(1)),
                    self.vocabulary.join(", ")
                ));
            }
        }
        // Every action is resolved (checked, or replaced by the first legal one) before
        // any is written, so a refused step changes nothing.
        let mut resolved = Vec::with_capacity(actions.len());
        let mut turns = Vec::new();
        for (a, chunk) in actions.chunks(seats.max(1)).enumerate() {
            if self.resetting[a] {
                continue;
            }
            for (s, &act) in chunk.iter().enumerate() {
                let e = self.agent(a, s);
                let mask = self.mask(e);
                let legal = (0..self.actions.len() as i64).contains(&act) && mask.allows(act as u8);
                if !legal && !self.first_legal {
                    let legal: Vec<&str> = (0..self.actions.len())
                        .filter(|&i| mask.allows(i as u8))
                        .map(|i| self.actions[i].as_str())
                        .collect();
                    return Err(format!(
                        "arena {a}, agent {}: action {act} is not legal now (legal: {})",
                        self.seat_name(s),
                        legal.join(", ")
                    ));
                }
                let act = if legal {
                    act as u8
                } else {
                    mask.nth(0).unwrap_or(0)
                };
                let word = words.map(|w| w[a * seats + s]);
                if self.memory > 0
                    && let Some((step, obs)) = self.turn(e)
                {
                    // The turn's words: the action, and where agents talk what was said.
                    let said = (!self.vocabulary.is_empty()).then(|| match word.unwrap_or(0) {
                        0 => "<eos>".to_string(),
                        w => self.vocabulary[(w - 1) as usize].clone(),
                    });
                    let chosen = chosen_text(&self.actions[usize::from(act)], said.as_deref());
                    turns.push((a, s, step, obs, chosen));
                }
                resolved.push((e, act, word));
            }
        }
        for (a, s, step, obs, chosen) in turns {
            self.transcripts[a][s].push(self.memory, step, &obs, &chosen);
        }
        for (e, act, word) in resolved {
            if let Some(mut slot) = self.world.get_mut::<Action>(e) {
                slot.0 = act;
            }
            if let Some(w) = word
                && let Some(mut say) = self.world.get_mut::<Utterance>(e)
            {
                say.0 = (w > 0).then(|| (w - 1) as u8);
            }
        }
        Ok(())
    }

    /// The step after the actions are written, with the GIL released by the caller.
    fn advance(&mut self) {
        // Arenas held after their last episode now reset (next-step autoreset).
        for (a, &e) in self.arenas.iter().enumerate() {
            if self.resetting[a] {
                self.world.entity_mut(e).remove::<Hold>();
            }
        }
        self.run_part(StepPart::Act);
        let seats = self.seats.len();
        for a in 0..self.arenas.len() {
            for s in 0..seats {
                let e = self.agent(a, s);
                let (r, d) = if self.resetting[a] {
                    (0.0, Done::default())
                } else {
                    (
                        self.world.get::<Reward>(e).map_or(0.0, |r| r.0),
                        self.world.get::<Done>(e).copied().unwrap_or_default(),
                    )
                };
                self.rewards[a * seats + s] = r;
                self.terminated[a * seats + s] = d.terminated;
                self.truncated[a * seats + s] = d.truncated;
            }
        }
        if let Some(h) = self.world.get_resource::<StateHash>() {
            self.hashes.push(h.last);
        }
        for (a, &e) in self.arenas.iter().enumerate() {
            // An arena that resets in this step is still waiting (it starts in the part that
            // follows); one that ended now waits for the next step.
            let ended = !self.resetting[a]
                && self
                    .world
                    .get::<EpisodeClock>(e)
                    .is_some_and(|c| c.phase == ArenaPhase::PendingReset);
            self.resetting[a] = ended;
            if ended {
                self.world.entity_mut(e).insert(Hold);
            }
        }
        self.run_part(StepPart::Observe);
    }

    fn seat_name(&self, seat: usize) -> String {
        agent_name(&self.scene, self.seats[seat])
    }

    /// Agent `e`'s observation as the network reads it, as the step encoded it
    /// ([`Features`]; an empty row for an entity without one).
    fn features(&self, e: Entity) -> &Encoded {
        self.world
            .get::<Features>(e)
            .map_or(&emergence::core::NO_FEATURES, |f| &f.0)
    }

    /// Every seat of every arena encoded into `cells` (`c` per seat) and `dense` (`d` per
    /// seat), arena-major, over the compute task pool (runs of arenas per task; what each
    /// seat writes is its own, so the result does not depend on the threads). Returns the
    /// first seat found to observe a different number of cells than `c` (and that number).
    fn encode_all(
        &self,
        c: usize,
        d: usize,
        cells: &mut [u8],
        dense: &mut [f32],
    ) -> Option<(usize, usize)> {
        let (na, ns) = (self.arenas.len(), self.seats.len());
        let pool = ComputeTaskPool::get_or_init(TaskPool::default);
        let per = na.div_ceil(4 * pool.thread_num().max(1)).max(1);
        let mismatches: Vec<Option<(usize, usize)>> = pool.scope(|scope| {
            let (mut rest_c, mut rest_d) = (cells, dense);
            for first in (0..na).step_by(per) {
                let arenas = first..(first + per).min(na);
                let (mine_c, tail_c) =
                    std::mem::take(&mut rest_c).split_at_mut(arenas.len() * ns * c);
                let (mine_d, tail_d) =
                    std::mem::take(&mut rest_d).split_at_mut(arenas.len() * ns * d);
                (rest_c, rest_d) = (tail_c, tail_d);
                scope.spawn(async move {
                    let seats = arenas.flat_map(|a| (0..ns).map(move |s| (a, s)));
                    for (i, (a, s)) in seats.enumerate() {
                        let row = self.features(self.agent(a, s));
                        if (row.cells.len(), row.dense.len()) != (c, d) {
                            return Some((s, row.cells.len()));
                        }
                        mine_c[i * c..(i + 1) * c].copy_from_slice(&row.cells);
                        mine_d[i * d..(i + 1) * d].copy_from_slice(&row.dense);
                    }
                    None
                });
            }
        });
        mismatches.into_iter().flatten().next()
    }

    /// Agent `e`'s legal actions.
    fn mask(&self, e: Entity) -> ActionMask {
        self.world
            .get::<ActionMask>(e)
            .copied()
            .unwrap_or(ActionMask(0))
    }

    /// Arena `arena`'s seats encoded as the network reads them, checked to be alike.
    fn feature_rows(&self, arena: usize) -> PyResult<Vec<Encoded>> {
        let rows: Vec<Encoded> = (0..self.seats.len())
            .map(|s| self.features(self.agent(arena, s)).clone())
            .collect();
        if let Some(first) = rows.first()
            && rows
                .iter()
                .any(|r| feature_width(r) != feature_width(first))
        {
            return Err(PyRuntimeError::new_err(
                "the seats Python drives must observe alike",
            ));
        }
        Ok(rows)
    }
}

/// `Main`'s schedules (after its first run) that hold at least one system, in its order.
fn busy_main_schedules(world: &World) -> Vec<InternedScheduleLabel> {
    let schedules = world.resource::<Schedules>();
    world
        .resource::<MainScheduleOrder>()
        .labels
        .iter()
        .copied()
        .filter(|&label| schedules.get(label).is_some_and(|s| s.systems_len() > 0))
        .collect()
}

/// The length of `row`'s feature row: its cells one-hot, then its numbers.
fn feature_width(row: &Encoded) -> usize {
    row.cells.len() * CODES + row.dense.len()
}

/// `row`'s feature row into `out` (zeros, [`feature_width`] long): one-hot cells, then the
/// numbers.
fn write_features(row: &Encoded, out: &mut [f32]) {
    let (cells, dense) = out.split_at_mut(row.cells.len() * CODES);
    for (one_hot, &c) in cells.chunks_exact_mut(CODES).zip(&row.cells) {
        if let Some(x) = one_hot.get_mut(usize::from(c)) {
            *x = 1.0;
        }
    }
    dense.copy_from_slice(&row.dense);
}

/// `mask` as 0/1 into every element of `out`, each action repeated `per_move` times (a
/// move and a word).
fn write_mask(mask: ActionMask, per_move: usize, out: &mut [i8]) {
    let per_move = per_move.max(1);
    for (i, x) in out.iter_mut().enumerate() {
        *x = i8::from(mask.allows((i / per_move) as u8));
    }
}

/// Lets `policy` (a catalogue policy of the scene's family) decide for `team`'s agents.
fn set_partner(scene: &mut Scene, team: &str, policy: &str) -> PyResult<()> {
    let family = scene.spec.family.name();
    let info = emergence::policy::catalogue()
        .iter()
        .find(|p| p.name == policy)
        .ok_or_else(|| {
            let names: Vec<&str> = emergence::policy::catalogue()
                .iter()
                .filter(|p| p.plays(family))
                .map(|p| p.name)
                .collect();
            PyValueError::new_err(format!(
                "partners: no policy {policy:?} (for {family}: {})",
                names.join(", ")
            ))
        })?;
    if !info.plays(family) {
        return Err(PyValueError::new_err(format!(
            "partners: {policy} plays {}, not {family}",
            info.family_names().join(", ")
        )));
    }
    let t = scene
        .team_names()
        .iter()
        .position(|n| *n == team)
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "partners: the scene has no team {team:?} (its teams: {})",
                scene.team_names().join(", ")
            ))
        })?;
    for a in &mut scene.agents {
        if usize::from(a.team) == t {
            a.policy = policy.into();
        }
    }
    Ok(())
}

/// The agent id of `slot`: its team's name and its index within the team.
fn agent_name(scene: &Scene, slot: usize) -> String {
    let teams = scene.team_names();
    let team = scene.agents[slot].team;
    let k = scene.agents[..slot]
        .iter()
        .filter(|a| a.team == team)
        .count();
    format!(
        "{}_{k}",
        teams.get(usize::from(team)).copied().unwrap_or("team")
    )
}

#[pymethods]
impl Sim {
    /// `scene`: a `.scene.ron` path or the RON text. `python_teams`: the teams Python drives
    /// (default: every team without a partner); the others keep their scene policies. `central_state`: let the
    /// families write the global state every step (otherwise `global_state` writes it when
    /// asked). `partners`: `(team, policy)` pairs.
    /// `first_legal`: an illegal action becomes the first legal one. `first_arena`: this
    /// world's arenas are arenas `first_arena..` of a run with the same seed. `hash_steps`:
    /// keep every step's state hash (`step_hashes`). `memory`: past turns in the text
    /// (over the scene's `memory:`). `teacher`: a scripted policy whose choice for every
    /// seat Python drives is kept each step (`teacher_actions`, `teacher_words`).
    #[new]
    #[pyo3(signature = (scene, num_arenas=1, seed=0, python_teams=None, threads=None, central_state=false, partners=None, first_legal=false, first_arena=0, hash_steps=false, memory=None, teacher=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        scene: &str,
        num_arenas: u32,
        seed: u64,
        python_teams: Option<Vec<String>>,
        threads: Option<usize>,
        central_state: bool,
        partners: Option<Vec<(String, String)>>,
        first_legal: bool,
        first_arena: u32,
        hash_steps: bool,
        memory: Option<u32>,
        teacher: Option<String>,
    ) -> PyResult<Self> {
        let mut scene = read_scene(scene)?;
        if let Some(m) = memory {
            let limit = emergence::train::limits::MEMORY;
            if !(limit.lo..=limit.hi).contains(&u64::from(m)) {
                return Err(PyValueError::new_err(format!(
                    "memory must be {} to {}, not {m}",
                    limit.lo, limit.hi
                )));
            }
            scene.spec.memory = m;
        }
        let partners = partners.unwrap_or_default();
        for (team, policy) in &partners {
            set_partner(&mut scene, team, policy)?;
        }
        // Python drives the teams it names, or every team without a partner.
        let partnered: Vec<&str> = partners.iter().map(|(t, _)| t.as_str()).collect();
        let python_teams = match python_teams {
            Some(teams) => {
                if let Some(t) = teams.iter().find(|t| partnered.contains(&t.as_str())) {
                    return Err(PyValueError::new_err(format!(
                        "team {t:?} is both driven by Python and given a partner"
                    )));
                }
                Some(teams)
            }
            None if partners.is_empty() => None,
            None => Some(
                scene
                    .team_names()
                    .iter()
                    .filter(|t| !partnered.contains(t))
                    .map(|t| t.to_string())
                    .collect(),
            ),
        };
        if num_arenas == 0 {
            return Err(PyValueError::new_err("num_arenas must be at least 1"));
        }
        if threads == Some(0) {
            return Err(PyValueError::new_err("threads must be at least 1"));
        }
        let mut sim = py.detach(|| {
            Sim::build(
                scene,
                num_arenas,
                seed,
                python_teams,
                threads,
                central_state,
                first_arena,
                hash_steps,
                teacher,
            )
        })?;
        sim.first_legal = first_legal;
        sim.threads = threads;
        Ok(sim)
    }

    /// Starts over from `seed`: a new world, exactly as a new `Sim` with that seed.
    fn reset(&mut self, py: Python<'_>, seed: u64) -> PyResult<()> {
        let seats: Vec<String> = {
            let teams = self.scene.team_names();
            let mut t: Vec<String> = Vec::new();
            for &s in &self.seats {
                let name = teams[usize::from(self.scene.agents[s].team)].to_string();
                if !t.contains(&name) {
                    t.push(name);
                }
            }
            t
        };
        let (scene, n, central) = (self.scene.clone(), self.arenas.len() as u32, self.central);
        let (threads, first_legal, first) = (self.threads, self.first_legal, self.first_arena);
        let hash_steps = self.hash_steps;
        let teacher = self.teacher.as_ref().map(|t| t.name.clone());
        *self = py.detach(|| {
            Sim::build(
                scene,
                n,
                seed,
                Some(seats),
                threads,
                central,
                first,
                hash_steps,
                teacher,
            )
        })?;
        self.first_legal = first_legal;
        self.threads = threads;
        Ok(())
    }

    /// Starts the next episode of every arena whose episode has ended, without a step (the
    /// others go on).
    fn next_episode(&mut self, py: Python<'_>) {
        py.detach(|| {
            for (a, &e) in self.arenas.iter().enumerate() {
                if self.resetting[a] {
                    self.world.entity_mut(e).remove::<Hold>();
                    self.resetting[a] = false;
                }
            }
            self.run_part(StepPart::Observe);
        });
    }

    /// One step: `actions` is an int array `[arenas, seats]` of action indices.
    #[pyo3(signature = (actions, words=None))]
    fn step(
        &mut self,
        py: Python<'_>,
        actions: PyReadonlyArray2<'_, i64>,
        words: Option<PyReadonlyArray2<'_, i64>>,
    ) -> PyResult<()> {
        let shape = actions.as_array().shape().to_vec();
        let want = [self.arenas.len(), self.seats.len()];
        if shape != want {
            return Err(PyValueError::new_err(format!(
                "actions has shape {shape:?}; expected {want:?} (arenas, agents Python drives)"
            )));
        }
        let flat: Vec<i64> = actions.as_array().iter().copied().collect();
        let words: Option<Vec<i64>> = match words {
            None => None,
            Some(w) => {
                let shape = w.as_array().shape().to_vec();
                if shape != want {
                    return Err(PyValueError::new_err(format!(
                        "words has shape {shape:?}; expected {want:?} (arenas, agents Python drives)"
                    )));
                }
                Some(w.as_array().iter().copied().collect())
            }
        };
        self.write_actions(&flat, words.as_deref())
            .map_err(PyValueError::new_err)?;
        py.detach(|| self.advance());
        if let Some(e) = self
            .world
            .get_resource::<emergence::policy::PolicyRegistry>()
            .and_then(|r| r.failure())
        {
            return Err(PyRuntimeError::new_err(e));
        }
        Ok(())
    }

    /// The agent ids of the seats Python drives (team name and index within the team).
    #[getter]
    fn agent_ids(&self) -> Vec<String> {
        (0..self.seats.len()).map(|s| self.seat_name(s)).collect()
    }

    /// The words agents may say (families with talk; empty elsewhere). In `step`'s
    /// `words`, 0 is silence and `k + 1` is word `k`.
    #[getter]
    fn vocabulary(&self) -> Vec<String> {
        self.vocabulary.clone()
    }

    /// The action words, by index.
    #[getter]
    fn action_names(&self) -> Vec<String> {
        self.actions.clone()
    }

    #[getter]
    fn num_arenas(&self) -> usize {
        self.arenas.len()
    }

    /// The scene's family (`Matrix`, `CommonsHarvest`, `CleanUp`, `HideAndSeek`, `Maze`).
    #[getter]
    fn family(&self) -> String {
        self.scene.spec.family.name().to_string()
    }

    /// The scene's name.
    #[getter]
    fn name(&self) -> String {
        self.scene.spec.name.clone()
    }

    /// Steps after which an episode is truncated.
    #[getter]
    fn max_steps(&self) -> u32 {
        self.scene.spec.episode.max_steps
    }

    /// Values a cell code takes (cells are one-hot over this many codes).
    #[getter]
    fn codes(&self) -> usize {
        CODES
    }

    /// The observations as the network reads them: cell codes `uint8 [arenas, seats, cells]`
    /// and header numbers `float32 [arenas, seats, dense]`.
    #[allow(clippy::type_complexity)]
    fn observations<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyArray3<u8>>, Bound<'py, PyArray3<f32>>)> {
        let (na, ns) = (self.arenas.len(), self.seats.len());
        let (c, d) = if na > 0 && ns > 0 {
            let row = self.features(self.agent(0, 0));
            (row.cells.len(), row.dense.len())
        } else {
            (0, 0)
        };
        let (mut cells, mut dense) = (vec![0u8; na * ns * c], vec![0f32; na * ns * d]);
        if let Some((s, found)) = py.detach(|| self.encode_all(c, d, &mut cells, &mut dense)) {
            return Err(PyRuntimeError::new_err(format!(
                "agent {} observes {found} cells where agent {} observes {c}: the seats \
                 Python drives must observe alike",
                self.seat_name(s),
                self.seat_name(0)
            )));
        }
        let cells = Array3::from_shape_vec((na, ns, c), cells)
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        let dense = Array3::from_shape_vec((na, ns, d), dense)
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        Ok((cells.into_pyarray(py), dense.into_pyarray(py)))
    }

    /// Arena `arena`'s seats as the parallel env gives them, in one call: the feature rows
    /// (`float32 [seats, 16 * cells + dense]`: cells one-hot, then the numbers), the masks
    /// (`int8 [seats, actions]`) and, when `texts`, the observation texts.
    #[pyo3(signature = (arena, texts=true))]
    #[allow(clippy::type_complexity)]
    fn arena_observations<'py>(
        &self,
        py: Python<'py>,
        arena: usize,
        texts: bool,
    ) -> PyResult<(
        Bound<'py, PyArray2<f32>>,
        Bound<'py, PyArray2<i8>>,
        Option<Vec<String>>,
    )> {
        self.check_arena(arena)?;
        let ns = self.seats.len();
        let rows = self.feature_rows(arena)?;
        let width = rows.first().map_or(0, feature_width);
        let feats = PyArray2::<f32>::zeros(py, (ns, width), false);
        // SAFETY: the array was made here and nothing else refers to its data yet.
        let data =
            unsafe { feats.as_slice_mut() }.map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        for (row, out) in rows.iter().zip(data.chunks_exact_mut(width.max(1))) {
            write_features(row, out);
        }
        let k = self.actions.len();
        let masks = PyArray2::<i8>::zeros(py, (ns, k), false);
        // SAFETY: as above.
        let data =
            unsafe { masks.as_slice_mut() }.map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        for (s, out) in data.chunks_exact_mut(k.max(1)).enumerate().take(ns) {
            write_mask(self.mask(self.agent(arena, s)), 1, out);
        }
        let texts = if texts {
            Some(self.texts(arena)?)
        } else {
            None
        };
        Ok((feats, masks, texts))
    }

    /// One step of the parallel env (arena 0): `actions` is PettingZoo's dict (agent id to
    /// action index, a move and a word together when `per_move > 1`), checked here (unknown
    /// and missing agents, non-integer and illegal actions raise); returns
    /// [`Sim::parallel_results`].
    #[allow(clippy::type_complexity)]
    fn parallel_step<'py>(
        &mut self,
        py: Python<'py>,
        actions: &Bound<'py, PyDict>,
        agents: Vec<Bound<'py, PyAny>>,
        per_move: usize,
        text: bool,
    ) -> PyResult<(
        Bound<'py, PyDict>,
        Bound<'py, PyDict>,
        Bound<'py, PyDict>,
        Bound<'py, PyDict>,
        Bound<'py, PyDict>,
        bool,
    )> {
        // One lookup per agent; the names are made only for an error.
        let mut values = Vec::with_capacity(agents.len());
        let mut missing = Vec::new();
        for agent in &agents {
            match actions.get_item(agent)? {
                Some(v) => values.push((agent, v)),
                None => missing.push(agent),
            }
        }
        let name = |a: &Bound<'py, PyAny>| a.extract::<String>().unwrap_or_default();
        if actions.len() > values.len() {
            let names: Vec<String> = agents.iter().map(name).collect();
            let mut unknown = Vec::new();
            for key in actions.keys() {
                match key.extract::<String>() {
                    Ok(k) if names.contains(&k) => {}
                    _ => unknown.push(key.repr()?.to_string()),
                }
            }
            return Err(PyKeyError::new_err(format!(
                "unknown agent id(s) [{}]; the agents are {names:?}",
                unknown.join(", ")
            )));
        }
        if !missing.is_empty() {
            let missing: Vec<String> = missing.into_iter().map(name).collect();
            return Err(PyValueError::new_err(format!("no action for {missing:?}")));
        }
        let per_move = per_move.max(1) as i64;
        let n = self.actions.len() as i64 * per_move;
        let (mut acts, mut words) = (Vec::new(), Vec::new());
        for (agent, v) in values {
            let not_int = || {
                PyTypeError::new_err(format!(
                    "{}: an action is an int index, not {}",
                    name(agent),
                    v.repr().map(|r| r.to_string()).unwrap_or_default()
                ))
            };
            if v.is_instance_of::<PyBool>() {
                return Err(not_int());
            }
            let a: i64 = v.extract().map_err(|_| not_int())?;
            if per_move > 1 && !(0..n).contains(&a) {
                return Err(PyValueError::new_err(format!(
                    "{}: action {a} is not legal now (there are {n} move-and-word actions)",
                    name(agent)
                )));
            }
            acts.push(a.div_euclid(per_move));
            words.push(a.rem_euclid(per_move));
        }
        let words = (per_move > 1).then_some(words);
        self.write_actions(&acts, words.as_deref())
            .map_err(PyValueError::new_err)?;
        py.detach(|| self.advance());
        if let Some(e) = self
            .world
            .get_resource::<emergence::policy::PolicyRegistry>()
            .and_then(|r| r.failure())
        {
            return Err(PyRuntimeError::new_err(e));
        }
        let (obs, rew, term, trunc, infos) =
            self.parallel_results(py, agents, per_move as usize, text)?;
        let seats = self.seats.len();
        let ended = self.terminated[..seats]
            .iter()
            .chain(&self.truncated[..seats])
            .any(|&d| d);
        Ok((obs, rew, term, trunc, infos, ended))
    }

    /// The parallel env's step results for arena 0, built here rather than in Python:
    /// `(obs, rewards, terminations, truncations, infos)` as PettingZoo's dicts keyed by
    /// `agents` (one per seat), each mask repeated `per_move` times (a move and a word);
    /// without `text`, the observations hold no text. Each agent's arrays are its own
    /// (numpy's memory, written in place), its mask the same array in `obs` and `infos`.
    #[allow(clippy::type_complexity)]
    #[pyo3(signature = (agents, per_move, text=true))]
    fn parallel_results<'py>(
        &self,
        py: Python<'py>,
        agents: Vec<Bound<'py, PyAny>>,
        per_move: usize,
        text: bool,
    ) -> PyResult<(
        Bound<'py, PyDict>,
        Bound<'py, PyDict>,
        Bound<'py, PyDict>,
        Bound<'py, PyDict>,
        Bound<'py, PyDict>,
    )> {
        let rows = self.feature_rows(0)?;
        let texts = if text { Some(self.texts(0)?) } else { None };
        let (obs, rew, term, trunc, infos) = (
            PyDict::new(py),
            PyDict::new(py),
            PyDict::new(py),
            PyDict::new(py),
            PyDict::new(py),
        );
        let (features_key, text_key, mask_key) = (
            intern!(py, "features"),
            intern!(py, "text"),
            intern!(py, "action_mask"),
        );
        let per_move = per_move.max(1);
        let k = self.actions.len() * per_move;
        for ((s, agent), row) in agents.iter().enumerate().zip(&rows) {
            // SAFETY: both arrays are made here, uninitialised, and every element is written
            // (the features after a `fill`; every mask element) before Python sees them;
            // nothing else refers to their data meanwhile.
            let (feats, mask) = unsafe {
                let feats = PyArray1::<f32>::new(py, feature_width(row), false);
                let mask = PyArray1::<i8>::new(py, k, false);
                let out = feats
                    .as_slice_mut()
                    .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
                out.fill(0.0);
                write_features(row, out);
                let out = mask
                    .as_slice_mut()
                    .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
                write_mask(self.mask(self.agent(0, s)), per_move, out);
                (feats, mask)
            };
            let o = PyDict::new(py);
            o.set_item(features_key, feats)?;
            if let Some(texts) = &texts {
                o.set_item(text_key, &texts[s])?;
            }
            o.set_item(mask_key, &mask)?;
            obs.set_item(agent, o)?;
            let info = PyDict::new(py);
            info.set_item(mask_key, mask)?;
            if let Some(t) = &self.teacher {
                // The teacher's move and word as one of this env's actions.
                let (a, w) = (t.actions[s], t.words[s]);
                let label = if a < 0 {
                    -1
                } else if per_move > 1 {
                    a * per_move as i64 + w
                } else {
                    a
                };
                info.set_item(intern!(py, "teacher_action"), label)?;
            }
            infos.set_item(agent, info)?;
            rew.set_item(agent, f64::from(self.rewards[s]))?;
            term.set_item(agent, self.terminated[s])?;
            trunc.set_item(agent, self.truncated[s])?;
        }
        Ok((obs, rew, term, trunc, infos))
    }

    /// `teacher=`: the teacher's action for every seat on this step's observation, `int64
    /// [arenas, seats]` (-1 in an arena waiting to reset); `None` without a teacher.
    fn teacher_actions<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyArray2<i64>>> {
        let t = self.teacher.as_ref()?;
        Some(self.grid(t.actions.clone()).into_pyarray(py))
    }

    /// `teacher=`: the word the teacher says with it, `int64 [arenas, seats]` (0: silence,
    /// `k + 1`: word `k`; all 0 in families without talk); `None` without a teacher.
    fn teacher_words<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyArray2<i64>>> {
        let t = self.teacher.as_ref()?;
        Some(self.grid(t.words.clone()).into_pyarray(py))
    }

    /// Legal actions, `int8 [arenas, seats, actions]` (1: legal).
    fn action_masks<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray3<i8>> {
        let (na, ns, k) = (self.arenas.len(), self.seats.len(), self.actions.len());
        let mut out = Array3::<i8>::zeros((na, ns, k));
        for a in 0..na {
            for s in 0..ns {
                let m = self.mask(self.agent(a, s));
                for i in 0..k {
                    out[[a, s, i]] = i8::from(m.allows(i as u8));
                }
            }
        }
        out.into_pyarray(py)
    }

    /// Rewards of the last step, `float32 [arenas, seats]`.
    fn rewards<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray2<f32>> {
        self.grid(self.rewards.clone()).into_pyarray(py)
    }

    /// Whether the rules ended each seat's episode at the last step, `bool [arenas, seats]`.
    fn terminated<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray2<bool>> {
        self.grid(self.terminated.clone()).into_pyarray(py)
    }

    /// Whether the time limit ended it, `bool [arenas, seats]`.
    fn truncated<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray2<bool>> {
        self.grid(self.truncated.clone()).into_pyarray(py)
    }

    /// Returns so far this episode, `float32 [arenas, seats]`.
    fn returns<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray2<f32>> {
        let v: Vec<f32> = (0..self.arenas.len())
            .flat_map(|a| (0..self.seats.len()).map(move |s| (a, s)))
            .map(|(a, s)| {
                self.world
                    .get::<EpisodeReturn>(self.agent(a, s))
                    .map_or(0.0, |r| r.0)
            })
            .collect();
        self.grid(v).into_pyarray(py)
    }

    /// Arenas that ended their episode at the last step and reset at the next one.
    fn resetting(&self) -> Vec<bool> {
        self.resetting.clone()
    }

    /// The step of each arena's episode.
    fn steps(&self) -> Vec<u32> {
        self.arenas
            .iter()
            .map(|&e| self.world.get::<EpisodeClock>(e).map_or(0, |c| c.step))
            .collect()
    }

    /// The observation texts of `arena`'s seats, exactly as a language-model agent reads them
    /// (with the scene's `memory:`, the whole context: the constant lines, the kept turns
    /// with what each seat chose, then this step's observation).
    fn texts(&self, arena: usize) -> PyResult<Vec<String>> {
        self.check_arena(arena)?;
        // Without memory: the constant lines and this step's observation, the whole prompt.
        Ok((0..self.seats.len())
            .map(|s| match self.turn(self.agent(arena, s)) {
                Some((step, obs)) => {
                    self.transcripts[arena][s].context(&self.format, self.memory, step, &obs)
                }
                None => String::new(),
            })
            .collect())
    }

    /// The family's global state of `arena` from seat `seat`'s side (the centralised
    /// critic's input: cell codes and numbers). Written every step with
    /// `central_state=True`; otherwise written now, when asked (`GlobalStateSchedule`: the
    /// same systems, so the same values).
    fn global_state(&mut self, arena: usize, seat: usize) -> PyResult<(Vec<u8>, Vec<f32>)> {
        self.check_arena(arena)?;
        if seat >= self.seats.len() {
            return Err(PyValueError::new_err(format!("no seat {seat}")));
        }
        if !self.central {
            self.world.run_schedule(GlobalStateSchedule);
            self.view.update_archetypes(&self.world);
        }
        let g = self
            .world
            .get::<GlobalView>(self.agent(arena, seat))
            .map(|g| g.0.clone())
            .unwrap_or_default();
        Ok((g.cells, g.dense))
    }

    /// `arena` drawn in the viewer's colours: `uint8 [height, width, 3]`.
    #[pyo3(signature = (arena=0, cell=16))]
    fn render_rgb<'py>(
        &self,
        py: Python<'py>,
        arena: usize,
        cell: usize,
    ) -> PyResult<Bound<'py, PyArray3<u8>>> {
        let frame = self.frame(arena)?;
        let family = self.scene.spec.family.name();
        let ((w, h), px) = emergence::frames::image::rgb(&frame, family, cell);
        Array3::from_shape_vec((h, w, 3), px)
            .map(|a| a.into_pyarray(py))
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// `arena` as text.
    #[pyo3(signature = (arena=0))]
    fn render_ansi(&self, arena: usize) -> PyResult<String> {
        let frame = self.frame(arena)?;
        let teams: Vec<String> = self
            .scene
            .team_names()
            .iter()
            .map(|s| s.to_string())
            .collect();
        Ok(emergence::frames::image::ansi(&frame, &teams))
    }

    /// The state hash after every step so far (the CLI's `--hash-log`, one per step); kept
    /// only with `hash_steps=True`.
    fn step_hashes(&self) -> PyResult<Vec<u64>> {
        if !self.hash_steps {
            return Err(PyRuntimeError::new_err(
                "the state hashes are kept only when the env is made with hash_steps=True",
            ));
        }
        Ok(self.hashes.clone())
    }
}

impl Sim {
    fn grid<T: Clone>(&self, v: Vec<T>) -> Array2<T> {
        Array2::from_shape_vec((self.arenas.len(), self.seats.len()), v)
            .expect("one value per arena and seat")
    }

    fn check_arena(&self, arena: usize) -> PyResult<()> {
        if arena >= self.arenas.len() {
            return Err(PyValueError::new_err(format!(
                "no arena {arena}: there are {}",
                self.arenas.len()
            )));
        }
        Ok(())
    }

    fn frame(&self, arena: usize) -> PyResult<Frame> {
        self.check_arena(arena)?;
        // Position `arena` of this world is arena `first + arena` of the run.
        let index = self.world.resource::<Arenas>().first + arena as u32;
        Frame::capture(&self.world, &self.frames, index)
            .ok_or_else(|| PyRuntimeError::new_err(format!("arena {arena} has no frame")))
    }
}

/// The scenes shipped with emergence (embedded in the module), by name: name, family, path
/// under `scenes/`, and the RON text.
#[pyfunction]
fn shipped_scenes() -> Vec<(String, String, String, String)> {
    emergence::scene::shipped()
        .into_iter()
        .filter_map(|(path, text)| {
            let scene = emergence::load::parse_scene(text, &path).ok()?;
            Some((
                scene.spec.name.clone(),
                scene.spec.family.name().to_string(),
                path.to_string_lossy().into_owned(),
                text.to_string(),
            ))
        })
        .collect()
}

/// The policies a scene may name (bots, `random`, `mlp`, `lm`), with their families.
#[pyfunction]
fn policies() -> Vec<(String, Vec<String>)> {
    emergence::policy::catalogue()
        .iter()
        .map(|p| {
            (
                p.name.to_string(),
                p.family_names().iter().map(|f| f.to_string()).collect(),
            )
        })
        .collect()
}

/// Seconds of one update of the `mlp` learner (the trainer's own, as `emergence train
/// --learner mlp` runs it) on a synthetic batch of `samples` decisions shaped like the
/// hide-and-seek quadrant's (91 view cells over 16 codes, 69 header fields, 9 actions),
/// `epochs` passes in minibatches of `minibatch`, the PPO loss with a value head, on
/// `threads` threads. The batch and the trainer are made before the clock starts.
/// `rows`: `"uniform"` (every cell's code drawn uniformly: the fused path's worst case) or
/// `"quadrant"` (the shipped quadrant scene played by random agents: what `train` updates on).
/// `python/benches/update_vs_torch.py` times PyTorch's update of the same shapes against it.
#[pyfunction]
#[pyo3(signature = (samples=51_200, epochs=4, minibatch=1024, threads=1, seed=0, rows="uniform"))]
fn bench_mlp_update(
    py: Python<'_>,
    samples: usize,
    epochs: usize,
    minibatch: usize,
    threads: usize,
    seed: u64,
    rows: &str,
) -> PyResult<f64> {
    use emergence::train::bench::{Rows, UpdateBench, time_update};
    let rows = match rows {
        "uniform" => Rows::Uniform,
        "quadrant" => Rows::Quadrant,
        other => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "rows={other:?}: expected \"uniform\" or \"quadrant\""
            )));
        }
    };
    if samples == 0 || epochs == 0 || minibatch == 0 || threads == 0 {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "samples, epochs, minibatch and threads must be positive",
        ));
    }
    // Whole episodes of 200 steps of 4 agents: `samples` rounded up to a multiple of 800.
    let spec = UpdateBench {
        arenas: samples.div_ceil(800),
        steps: 200,
        epochs,
        minibatch,
        seed,
        rows,
        ..Default::default()
    };
    py.detach(|| time_update(spec, threads))
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Sim>()?;
    m.add_function(wrap_pyfunction!(shipped_scenes, m)?)?;
    m.add_function(wrap_pyfunction!(policies, m)?)?;
    m.add_function(wrap_pyfunction!(bench_mlp_update, m)?)?;
    Ok(())
}
