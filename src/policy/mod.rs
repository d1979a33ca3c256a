//! Policies: who decides for an agent. Each agent entity holds a [`PolicyHandle`]; the
//! [`PolicyRegistry`] maps it to a [`Policy`]. In [`SimSystems::Decide`] every policy gets
//! ALL its agents across all arenas in one call (the batched interface language models
//! use), and writes the same [`Action`] component whoever it is.

pub mod bots;
mod check;
pub(crate) mod gemm;
pub mod lm;
pub mod mlp;
pub mod sampling;

use bevy::prelude::*;
use rand_chacha::ChaCha8Rng;

use crate::core::*;
use crate::envs::senses::{Senses, SensesQuery};

pub use bots::{
    AlwaysCooperate, AlwaysDefect, Cleaner, FortBuilder, FreeRider, GreedyHarvester, GrimTrigger,
    Hider, MazeExplorer, MazeFollower, MazePlanner, MazeTalker, MazeWallFollower, RandomPolicy,
    Seeker, SustainableHarvester, TitForTat,
};
pub use check::check_scene;

/// One agent's decision request: what it sees, what it may do, its own random stream, and
/// the action to fill in.
pub struct Decision<'a> {
    /// Which agent: its arena index and slot (policies that keep per-agent memory key it
    /// by this; memory must be reset when `obs.step` is 0).
    pub agent: Agent,
    /// What the agent perceives this step.
    pub obs: &'a Observation,
    /// Its family's part of the observation.
    pub senses: Senses<'a>,
    /// The observation as a network reads it, encoded once this step ([`Features`]; empty
    /// unless a policy of the run [reads features](Policy::reads_features) or a training
    /// run records them).
    pub features: &'a Encoded,
    /// Which actions are legal.
    pub mask: ActionMask,
    /// The agent's own random stream (the only source of randomness a policy may use).
    pub rng: &'a mut ChaCha8Rng,
    /// The chosen action; policies must leave a legal one here.
    pub action: &'a mut Action,
    /// What the agent says, in families with talk (`None` elsewhere).
    pub say: Option<&'a mut Utterance>,
    /// The agent's team and role (indices into the scene's teams and roles).
    pub team: u8,
    /// See `team`.
    pub role: u8,
    /// The reward the agent got on the previous step.
    pub last_reward: f32,
    /// Where learned policies record their decision.
    pub trace: &'a mut DecisionTrace,
}

/// A decision maker for a batch of agents.
pub trait Policy: Send + Sync + 'static {
    /// Chooses an action for every agent of the batch (agents of many arenas).
    fn decide(&mut self, batch: &mut [Decision<'_>]);
    /// Called once when a scene's arenas are spawned, with the scene and its action words;
    /// policies that need them (language models: the text format, the action tokens) set
    /// up here. An error stops the run with its message.
    fn setup(&mut self, _scene: &crate::scene::Scene, _actions: &[String]) -> Result<(), String> {
        Ok(())
    }
    /// Counters of the work done so far (language models), for the run summary.
    fn stats(&self) -> Option<PolicyStats> {
        None
    }
    /// Why the policy could not decide (a failed forward pass, an observation its tokenizer
    /// cannot encode), the first time it happened: runs stop with it rather than go on with
    /// actions the policy did not choose.
    fn failure(&self) -> Option<String> {
        None
    }
    /// The adapter this policy runs for the agent in `slot`, whose role is `role`, described
    /// for the viewer (`None`: no adapter).
    fn adapter(&self, _role: u8, _slot: u16) -> Option<String> {
        None
    }
    /// Whether the policy reads [`Decision::features`] (the `mlp`): while one in the run
    /// does, every step encodes each agent's observation once, before Decide.
    fn reads_features(&self) -> bool {
        false
    }
    /// Imitation (`emergence imitate`, [`crate::train::imitate`]): the actions (and words)
    /// already in `batch` are a teacher's. Reads each observation as [`Policy::decide`] would
    /// and records those choices as its own, leaving them in place: its trace (what it read,
    /// their log-probabilities under its distribution), and with memory its context goes on
    /// with them. Draws nothing from the agents' streams. A policy that cannot learn from a
    /// teacher (the scripted bots) says so.
    fn follow(&mut self, _batch: &mut [Decision<'_>]) -> Result<(), String> {
        Err("it does not learn from demonstrations (only `lm`, `mlp` and `gru` do)".into())
    }
    /// Whether an oracle teacher decides for this policy's agents (imitation): their seats
    /// get [`OracleTeacher`], and the teacher reads the whole map
    /// ([`Observation::oracle_map`]) while the learner reads its own view.
    fn teacher_is_oracle(&self) -> bool {
        false
    }
}

/// Makes a policy for a run (a training run puts its own policies in the registry this
/// way, before the arenas are spawned and the policies set up).
#[derive(Clone)]
pub struct PolicyFactory(pub std::sync::Arc<dyn Fn() -> Box<dyn Policy> + Send + Sync>);

impl std::fmt::Debug for PolicyFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PolicyFactory")
    }
}

/// What a model-backed policy has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PolicyStats {
    /// Decisions made (agent-steps decided).
    pub decisions: u64,
    /// Prompt tokens run through the model.
    pub tokens: u64,
    /// Of those, tokens a prompt shared with another of its batch (the same beginning: read
    /// from the other's rows, computed once for both).
    pub shared_tokens: u64,
    /// Batched forward passes.
    pub forwards: u64,
    /// Seconds spent deciding.
    pub seconds: f64,
    /// Failures: batches whose forward failed and prompts the tokenizer could not encode
    /// (the first is the policy's [`Policy::failure`], which stops a run).
    pub errors: u64,
}

impl std::ops::AddAssign for PolicyStats {
    /// Counters of several models answering as one policy.
    fn add_assign(&mut self, o: Self) {
        self.decisions += o.decisions;
        self.tokens += o.tokens;
        self.shared_tokens += o.shared_tokens;
        self.forwards += o.forwards;
        self.seconds += o.seconds;
        self.errors += o.errors;
    }
}

/// A named policy that scenes may ask for.
pub struct PolicyInfo {
    /// Name used in scenes.
    pub name: &'static str,
    /// One line for `emergence list`.
    pub doc: &'static str,
    /// Families it plays (by `FamilySpec::name`); none named: every family, shipped and
    /// registered (it reads only what every family's observation holds).
    pub families: &'static [&'static str],
    /// An upper-bound bot that families show the whole map ([`Oracle`]).
    pub oracle: bool,
    /// Makes a fresh instance; a language model runs on the device given (the registry's),
    /// everything else on the CPU.
    pub make: fn(&candle_core::Device) -> Box<dyn Policy>,
}

impl PolicyInfo {
    /// Whether it plays `family` (a policy of every family plays those registered from
    /// outside the crate too, `envs::family::register`).
    pub fn plays(&self, family: &str) -> bool {
        self.families.contains(&family)
            || (self.plays_every_family() && crate::envs::family::named(family).is_some())
    }
    /// A fresh instance on the CPU (a scripted policy's only device).
    pub fn make_on_cpu(&self) -> Box<dyn Policy> {
        (self.make)(&candle_core::Device::Cpu)
    }
    /// Whether it plays every family, shipped and registered.
    pub fn plays_every_family(&self) -> bool {
        self.families.is_empty()
    }
    /// The names of the families it plays (every family's, for a policy of them all).
    pub fn family_names(&self) -> Vec<&'static str> {
        if self.plays_every_family() {
            crate::envs::family::names()
        } else {
            self.families.to_vec()
        }
    }
}

/// Every family: no family named.
const ALL: &[&str] = &[];
const HNS: &[&str] = &["HideAndSeek"];
const MAZE: &[&str] = &["Maze"];
const MATRIX: &[&str] = &["Matrix"];
const GRID: &[&str] = &["CommonsHarvest", "CleanUp"];
const CLEANUP: &[&str] = &["CleanUp"];

static CATALOGUE: &[PolicyInfo] = &[
    PolicyInfo {
        name: "random",
        doc: "uniformly random legal action",
        families: ALL,
        oracle: false,
        make: |_| Box::new(RandomPolicy),
    },
    PolicyInfo {
        name: "always_cooperate",
        doc: "always plays action 0",
        families: MATRIX,
        oracle: false,
        make: |_| Box::new(AlwaysCooperate),
    },
    PolicyInfo {
        name: "always_defect",
        doc: "always plays action 1",
        families: MATRIX,
        oracle: false,
        make: |_| Box::new(AlwaysDefect),
    },
    PolicyInfo {
        name: "tit_for_tat",
        doc: "cooperates first, then copies the other's last move",
        families: MATRIX,
        oracle: false,
        make: |_| Box::new(TitForTat),
    },
    PolicyInfo {
        name: "grim_trigger",
        doc: "cooperates until the other defects once, then defects forever",
        families: MATRIX,
        oracle: false,
        make: |_| Box::new(GrimTrigger),
    },
    PolicyInfo {
        name: "greedy_harvester",
        doc: "walks to the nearest visible apple and eats it; wanders otherwise",
        families: GRID,
        oracle: false,
        make: |_| Box::new(GreedyHarvester),
    },
    PolicyInfo {
        name: "sustainable_harvester",
        doc: "like greedy, but never eats the last apple of a patch",
        families: GRID,
        oracle: false,
        make: |_| Box::new(SustainableHarvester),
    },
    PolicyInfo {
        name: "cleaner",
        doc: "cleans visible river dirt with its beam; harvests when the river looks clean",
        families: CLEANUP,
        oracle: false,
        make: |_| Box::new(Cleaner),
    },
    PolicyInfo {
        name: "free_rider",
        doc: "harvests greedily and never cleans",
        families: CLEANUP,
        oracle: false,
        make: |_| Box::new(FreeRider),
    },
    PolicyInfo {
        name: "seeker",
        doc: "chases the last hider it saw, explores otherwise",
        families: HNS,
        oracle: false,
        make: |_| Box::new(Seeker::default()),
    },
    PolicyInfo {
        name: "hider",
        doc: "flees the seekers it sees, wanders during preparation",
        families: HNS,
        oracle: false,
        make: |_| Box::new(Hider),
    },
    PolicyInfo {
        name: "fort_builder",
        doc: "oracle (reads the whole map): during preparation pushes boxes into its room's doorways and locks them",
        families: HNS,
        oracle: true,
        make: |_| Box::new(FortBuilder::default()),
    },
    PolicyInfo {
        name: "maze_planner",
        doc: "sees the whole map and every teammate (oracle); a team of up to three planners follows a shortest joint plan from a search over all their moves together (every generated maze solved; tested with up to 8 plate doors); larger or mixed teams use a joint rule shared by all planners: hold plates, fetch keys, walk to the exit (upper bound)",
        families: MAZE,
        oracle: true,
        make: |_| Box::new(MazePlanner::default()),
    },
    PolicyInfo {
        name: "maze_explorer",
        doc: "to the exit if it knows the way, else to a known key, else to the nearest unknown edge; ignores talk",
        families: MAZE,
        oracle: false,
        make: |_| Box::new(MazeExplorer),
    },
    PolicyInfo {
        name: "maze_wall_follower",
        doc: "keeps a wall on its right hand (its heading is its last move), steps onto a neighbouring exit and stays; reads only the cells around it: the teacher a small learner with memory can clone; ignores talk",
        families: MAZE,
        oracle: false,
        make: |_| Box::new(MazeWallFollower::default()),
    },
    PolicyInfo {
        name: "maze_talker",
        doc: "explores to the exit and tells its first teammate each step which way to go",
        families: MAZE,
        oracle: false,
        make: |_| Box::new(MazeTalker),
    },
    PolicyInfo {
        name: "maze_follower",
        doc: "picks up a known key if it has none, else does what it heard when legal, else explores",
        families: MAZE,
        oracle: false,
        make: |_| Box::new(MazeFollower),
    },
    PolicyInfo {
        name: "lm",
        doc: "language model (the embedded tiny model; `lm(model: \"DIR\")` for a folder): one batched forward per step, action words scored by their tokens' log-probabilities",
        families: ALL,
        oracle: false,
        make: |device| {
            Box::new(lm::LmPolicy::new(
                lm::ModelSource::Embedded {
                    preset: lm::Preset::Tiny,
                    seed: 0,
                },
                device.clone(),
            ))
        },
    },
    PolicyInfo {
        name: "mlp",
        doc: "two-layer network on the observation's features with a value head (seed 0), batched",
        families: ALL,
        oracle: false,
        make: |_| Box::new(mlp::MlpPolicy::new(0, candle_core::Device::Cpu)),
    },
    PolicyInfo {
        name: "gru",
        doc: "the `mlp` with memory: its second layer a GRU cell whose state each agent carries through its episode (seed 0), batched",
        families: ALL,
        oracle: false,
        make: |_| Box::new(mlp::MlpPolicy::new(0, candle_core::Device::Cpu).with_memory(true)),
    },
];

/// Every policy a scene may name.
pub fn catalogue() -> &'static [PolicyInfo] {
    CATALOGUE
}

/// The policies of a run, indexed by [`PolicyHandle`].
#[derive(Resource)]
pub struct PolicyRegistry {
    entries: Vec<(String, Box<dyn Policy>)>,
    /// Where the language models it creates by name run (`lm`, `lm:PATH`); the CPU by
    /// default. The `mlp` and the scripted bots always run on the CPU.
    pub device: candle_core::Device,
}

impl Default for PolicyRegistry {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            device: candle_core::Device::Cpu,
        }
    }
}

impl PolicyRegistry {
    /// The handle of policy `name`, creating it from the catalogue on first use (`lm:PATH`:
    /// a language model loaded from the folder PATH; `mlp:PATH`: a trained `mlp`).
    pub fn handle(&mut self, name: &str) -> Option<PolicyHandle> {
        if let Some(i) = self.entries.iter().position(|(n, _)| n == name) {
            return Some(PolicyHandle(i as u16));
        }
        let policy: Box<dyn Policy> = match catalogue().iter().find(|p| p.name == name) {
            Some(info) => (info.make)(&self.device),
            None => match name.strip_prefix("mlp:") {
                Some(dir) => Box::new(mlp::MlpPolicy::from_folder(
                    dir.into(),
                    candle_core::Device::Cpu,
                    mlp::MlpHandle::default(),
                )),
                None => {
                    let dir = name.strip_prefix("lm:")?;
                    Box::new(lm::LmPolicy::new(
                        lm::ModelSource::Folder(dir.into()),
                        self.device.clone(),
                    ))
                }
            },
        };
        self.entries.push((name.to_string(), policy));
        Some(PolicyHandle((self.entries.len() - 1) as u16))
    }
    /// Registers a custom policy under `name` (replacing one of that name).
    pub fn insert(&mut self, name: &str, policy: Box<dyn Policy>) -> PolicyHandle {
        if let Some(i) = self.entries.iter().position(|(n, _)| n == name) {
            self.entries[i].1 = policy;
            return PolicyHandle(i as u16);
        }
        self.entries.push((name.to_string(), policy));
        PolicyHandle((self.entries.len() - 1) as u16)
    }
    /// The counters of every policy that keeps them, by name.
    pub fn stats(&self) -> Vec<(String, PolicyStats)> {
        self.entries
            .iter()
            .filter_map(|(n, p)| p.stats().map(|s| (n.clone(), s)))
            .collect()
    }
    /// Whether any registered policy reads feature rows ([`Policy::reads_features`]).
    pub fn reads_features(&self) -> bool {
        self.entries.iter().any(|(_, p)| p.reads_features())
    }
    /// Runs every registered policy's [`Policy::setup`] for `scene`.
    pub fn setup(&mut self, scene: &crate::scene::Scene, actions: &[String]) -> Result<(), String> {
        for (name, p) in &mut self.entries {
            p.setup(scene, actions)
                .map_err(|e| format!("policy {name:?}: {e}"))?;
        }
        Ok(())
    }
    /// The first failure of a registered policy ([`Policy::failure`]), with its name.
    pub fn failure(&self) -> Option<String> {
        self.entries
            .iter()
            .find_map(|(name, p)| p.failure().map(|e| format!("policy {name:?}: {e}")))
    }
    /// The adapter the policy behind `h` runs for the agent in `slot` of role `role`
    /// ([`Policy::adapter`]).
    pub fn adapter(&self, h: PolicyHandle, role: u8, slot: u16) -> Option<String> {
        self.entries.get(h.0 as usize)?.1.adapter(role, slot)
    }
    /// Whether the policy behind `h` has an oracle teacher ([`Policy::teacher_is_oracle`]).
    pub fn teacher_is_oracle(&self, h: PolicyHandle) -> bool {
        self.entries
            .get(h.0 as usize)
            .is_some_and(|(_, p)| p.teacher_is_oracle())
    }
    /// The name behind a handle.
    pub fn name(&self, h: PolicyHandle) -> Option<&str> {
        self.entries.get(h.0 as usize).map(|(n, _)| n.as_str())
    }
    /// Number of registered policies.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// Whether none is registered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Groups every live agent by policy and lets each policy decide for its whole group.
pub fn decide_actions(
    mut registry: ResMut<PolicyRegistry>,
    mut agents: Query<
        (
            &Agent,
            &PolicyHandle,
            (&Observation, &Features),
            SensesQuery,
            &ActionMask,
            &mut AgentRng,
            &mut Action,
            Option<&mut Utterance>,
            (&Team, &Role, &Reward, &mut DecisionTrace),
        ),
        Without<Idle>,
    >,
    handles: Query<&PolicyHandle, Without<Idle>>,
) {
    let n = registry.entries.len();
    // Each group sized first: a decision is a few hundred bytes, and growing the vectors
    // would copy them over and over.
    let mut sizes = vec![0usize; n];
    for handle in &handles {
        if let Some(k) = sizes.get_mut(handle.0 as usize) {
            *k += 1;
        }
    }
    let mut groups: Vec<Vec<Decision<'_>>> = sizes.iter().map(|&k| Vec::with_capacity(k)).collect();
    for (
        agent,
        handle,
        (obs, features),
        senses,
        mask,
        rng,
        action,
        say,
        (team, role, reward, trace),
    ) in agents.iter_mut()
    {
        if let Some(g) = groups.get_mut(handle.0 as usize) {
            let trace = trace.into_inner();
            trace.last_reward = reward.0;
            g.push(Decision {
                agent: *agent,
                obs,
                senses: senses.get(),
                features: &features.0,
                mask: *mask,
                rng: &mut rng.into_inner().0,
                action: action.into_inner(),
                say: say.map(|s| s.into_inner()),
                team: team.0,
                role: role.0,
                last_reward: reward.0,
                trace,
            });
        }
    }
    for (group, (_, policy)) in groups.iter_mut().zip(registry.entries.iter_mut()) {
        if !group.is_empty() {
            policy.decide(group);
        }
    }
    // A policy must leave a legal action; fall back to the first legal one if it did not.
    for group in &mut groups {
        for d in group.iter_mut() {
            if !d.mask.allows(d.action.0) {
                d.action.0 = d.mask.nth(0).unwrap_or(0);
            }
        }
    }
}

/// Adds the Decide step.
#[derive(Default)]
pub struct PolicyPlugin;

impl Plugin for PolicyPlugin {
    fn build(&self, app: &mut App) {
        use bevy::ecs::schedule::common_conditions::resource_exists;
        app.init_resource::<PolicyRegistry>().add_systems(
            SimSchedule,
            (
                crate::envs::senses::encode_features
                    .in_set(SimSystems::Encode)
                    .run_if(resource_exists::<EncodeFeatures>),
                decide_actions.in_set(SimSystems::Decide),
            ),
        );
    }
}

/// Spawns the arenas `indices` of `scene` with its policies: registers each team's policy in the
/// [`PolicyRegistry`] (set up for the scene), then the arenas and agents
/// ([`crate::envs::spawn_agents`]). Each arena runs `episodes` episodes (forever if `None`)
/// with streams derived from `seed`.
pub fn spawn_arenas(
    world: &mut World,
    scene: &crate::scene::Scene,
    indices: std::ops::Range<u32>,
    seed: u64,
    episodes: Option<u32>,
) -> Result<(), crate::envs::SpawnError> {
    use crate::envs::{Deciders, SpawnError, action_names, spawn_agents};
    let mut handles = Vec::with_capacity(scene.agents.len());
    {
        let mut registry = world.get_resource_or_init::<PolicyRegistry>();
        for a in &scene.agents {
            handles.push(
                registry
                    .handle(&a.policy)
                    .ok_or_else(|| SpawnError(format!("unknown policy {:?}", a.policy)))?,
            );
        }
    }
    let names = action_names(scene);
    world
        .resource_mut::<PolicyRegistry>()
        .setup(scene, &names)
        .map_err(SpawnError)?;
    if world.resource::<PolicyRegistry>().reads_features() {
        world.insert_resource(EncodeFeatures);
    }
    let oracle: Vec<bool> = scene
        .agents
        .iter()
        .map(|a| catalogue().iter().any(|p| p.name == a.policy && p.oracle))
        .collect();
    let oracle_teacher: Vec<bool> = {
        let registry = world.resource::<PolicyRegistry>();
        handles
            .iter()
            .map(|&h| registry.teacher_is_oracle(h))
            .collect()
    };
    spawn_agents(
        world,
        scene,
        Deciders {
            handles: &handles,
            oracle: &oracle,
            oracle_teacher: &oracle_teacher,
        },
        indices,
        seed,
        episodes,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_of_every_family_plays_each_and_every_family_a_policy_names_exists() {
        // A policy of every family plays each, the tests' `envs::payday` too.
        for f in crate::envs::family::names() {
            assert!(catalogue()[0].plays(f), "random does not play {f}");
        }
        assert!(catalogue()[0].plays(crate::envs::payday::NAME));
        assert!(!catalogue()[0].plays("NoSuchFamily"));
        for p in catalogue() {
            for f in p.families {
                assert!(
                    crate::envs::family::named(f).is_some(),
                    "{} plays {f}, which is no family",
                    p.name
                );
            }
        }
    }
}
