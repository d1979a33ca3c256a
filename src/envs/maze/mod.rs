//! Cooperative maze (after the collaborative maze-solving benchmark): two or more agents,
//! each knowing a different part of the maze, get everyone to the exit through doors held
//! open from pressure plates and doors locked with keys, and may talk one word per step.
//!
//! | | |
//! |---|---|
//! | **Agents** | 1 to 32 per arena, any teams; all agents of an arena play together. Agents do not block each other: several may share a cell. |
//! | **Actions** | allocentric, no facing: `noop`, `north`, `east`, `south`, `west` ([`act`]). Moves into walls, closed doors, or locked doors without their key are illegal (masked); `noop` is always legal. Each step an agent may also say one word of the scene's vocabulary ([`Utterance`]). |
//! | **Observation** | `pos`; `view`: the window of radius `view` centred on the agent (`(2r+1)²` codes, `view_self = (r, r)`, off the map shown as wall, teammates `T`, self `@`); `map`: the map as the agent knows it (full size, unknown cells [`view::UNKNOWN`], known cells in their current state: doors open/shut, keys there or taken); `others`: every teammate's slot, team and position; `heard`: the words the others said on the previous step (never the same step); `keys`: own keys, one bit per colour. Codes carry a link (plate/door name, key colour) in their high nibble ([`view::link`]). |
//! | **Knowledge** | `Local`: the window only. `Full`: the whole map. `Strips`: agent `k` of `n` knows columns `[k·W/n, (k+1)·W/n)`. `Scattered`: each cell is known to one agent drawn from the arena's stream each episode. The window is always known; oracle bots (`maze_planner`) always see the whole map. |
//! | **Rules** | Walls block. A `Door(name)` is open while any agent stands on any `Plate(name)`, and never shuts on an agent standing in it; door states are settled after all moves of a step (moves see the state at the step's start). Stepping on a `Key(colour)` picks it up. Moving into a `LockedDoor(colour)` with that colour's key opens it for good (it becomes floor; the key is kept). Moves are applied in an order shuffled each step from the arena's stream (it decides who gets a key two agents reach at once). |
//! | **Rewards** | Every agent: `−step_cost` each step; `+success_reward` on the step that ends with every agent on an exit cell. |
//! | **Termination** | Success (every agent on an exit at the end of a step) terminates; `episode.max_steps` truncates. |
//! | **Parameters** | `view` (window radius, 0–7), `knowledge`, `vocabulary` (0–32 words; `[]`: the agents cannot speak, not even choose silence; the talking bots need the default ten first: north, south, east, west, plate, door, key, here, wait, exit), `success_reward`, `step_cost`, `generate: (width, height, plate_doors, key_doors, seed)` for a procedural maze instead of `map` ([`generate`]). |
//! | **Metrics** | `success` (1/0), `steps_to_exit` (steps on success, else `max_steps`), `messages` (words said), `keys_picked`, `doors_unlocked`, `plate_steps` (agent-steps on plates). |
//!
//! Words said are recorded: counted in `messages`, delivered to the others' `heard` on the
//! next step, and written to replays. [`MazePlugin`] adds every system; each runs only on
//! arenas that carry a [`MazeArena`].

pub(crate) mod check;
mod codes;
pub mod family;
pub mod generate;
mod layout;
mod map;
pub mod params;
mod rules;
pub mod text;

pub use codes::{ACTIONS, act, talk, view};
pub use layout::Layout;
pub use map::{MazeArena, MazeCounters, MazeRules, draw_maze, hash_maze, reset_mazes};
pub use params::{GenerateSpec, Knowledge, MazeParams};
pub use rules::{
    apply_maze_actions, observe_mazes, reward_maze_agents, summarize_mazes, update_maze_doors,
};

use bevy::prelude::*;

use crate::core::*;

/// A maze agent's part of its observation, written beside its [`Observation`] in
/// `SimSystems::Observe`.
#[derive(Component, Debug, Clone, Default, PartialEq)]
pub struct MazeSenses {
    /// Keys carried, one bit per key colour of the scene.
    pub keys: u32,
    /// Words teammates said on the previous step, in slot order.
    pub heard: Vec<Heard>,
}

/// A word heard from a teammate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heard {
    /// The speaker's slot.
    pub from: u16,
    /// Index of the word in the scene's vocabulary.
    pub word: u8,
}

/// The components every maze agent carries besides the core ones.
pub fn agent_components() -> impl Bundle {
    (
        GridPos::default(),
        Utterance::default(),
        MazeSenses::default(),
    )
}

/// The maze family.
#[derive(Default)]
pub struct MazePlugin;

impl Plugin for MazePlugin {
    fn build(&self, app: &mut App) {
        add_family_systems(
            app,
            "maze",
            (
                reset_mazes.in_set(SimSystems::Reset).after(reset_arenas),
                observe_mazes.in_set(SimSystems::Observe),
                rules::state_mazes
                    .in_set(SimSystems::Encode)
                    .run_if(resource_exists::<CentralState>),
                apply_maze_actions.in_set(ActSystems::Apply),
                update_maze_doors.in_set(SimSystems::Rules),
                reward_maze_agents.in_set(SimSystems::Reward),
                summarize_mazes.in_set(RecordSystems::Summarize),
            ),
        );
        run_family_while::<MazeArena>(app, "maze");
        app.add_systems(GlobalStateSchedule, rules::state_mazes);
        let mut hashers = app.world_mut().get_resource_or_init::<StateHashers>();
        hashers.0.push(hash_maze);
        let mut drawers = app.world_mut().get_resource_or_init::<MapDrawers>();
        drawers.0.push(draw_maze);
    }
}
