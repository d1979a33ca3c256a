//! Hide-and-seek, after Baker et al. 2019, "Emergent Tool Use From Multi-Agent
//! Autocurricula", scaled to a grid.
//!
//! | | |
//! |---|---|
//! | Agents | Teams whose role is `hider` or `seeker` (the role defaults to the team name); 1–3 a side in the paper, up to the spawn cells here. Agents block each other. |
//! | Map | `Wall` blocks movement and sight; `LowWall` blocks movement, not sight; `Box` (movable, blocks sight) and `Ramp` (movable, does not block sight) are objects; `Spawn` / `TeamSpawn("team")` are start cells. |
//! | Actions | `noop`, `forward`, `backward` (facing kept), `turn_left`, `turn_right`, `grab` (hold the unlocked object in front), `release`, `lock` (the object in front, for your side), `unlock` (only what your side locked). |
//! | Moving | `forward` onto a free cell steps; into an object pushes it one cell if it is unlocked, not held by someone else and the cell beyond is free floor; holding an object, `backward` pulls it into the cell you leave. Turning lets go. A lock ends any grip on the object. Actions are applied one agent at a time, in an order drawn each step from the arena's stream. |
//! | Ramps | With a ramp in front, a box or low wall right behind it and a free cell behind that, `forward` lands you on that free cell: the climb moves you three cells; ramp and box stay. Locked ramps can be climbed. A ramp you hold is pushed, never climbed. |
//! | Preparation | The first `floor(prep_fraction × max_steps)` steps (40% by default): seekers cannot act (their only legal action is `noop`, and the rules ignore anything else) and every reward is zero. |
//! | Vision | A cone of `vision_cone` degrees (135) around the facing, `vision_range` cells (6, Euclidean), line of sight on the grid: walls and boxes block it; low walls, ramps and agents do not. See [`vision`] for the ray rule. One function serves observations, rewards and the viewer. |
//! | Observation | Egocentric window, `2·range+1` wide and `range+1` deep (deeper behind for cones over 180°), row 0 farthest ahead: every cell the agent sees with its content (codes in [`view`]: locks as "ours" or "theirs"), `?` elsewhere. Also: own map position and facing, the agents it sees, whether it holds an object, the preparation steps left. Oracle bots (`fort_builder`) also get the whole map. `window` cuts the window to a smaller range than the vision's (sight, rewards and the agents seen still reach `vision_range`). |
//! | Entity list | With `entities`, Baker et al.'s object-centric observation as numbers after the header ([`rules::entity_features`]): own map position; each other agent, box and ramp with its place relative to the agent and on the map, its side or lock, zeros unless seen this step (the paper masks what is out of sight); each of the map's doorways with its place and whether it is open this episode (the paper's agents learn their map's fixed walls; a doorway's cell is that knowledge on a grid). With a small `window`, the pair stands for the paper's entities plus lidar. |
//! | Rewards | After preparation, every step: hiders +`reward` (1) if no hider is seen by any seeker, else −`reward`; seekers the opposite. Per agent, the side's reward. |
//! | Termination | None by the rules; episodes are truncated at `episode.max_steps`. |
//! | Statistics | `max_box_displacement`, `max_ramp_displacement` (largest distance any box / ramp got from its start, cells), `boxes_locked_prep_end`, `boxes_locked_end`, `ramps_locked_prep_end`, `ramps_locked_end`, `doorways_blocked_prep_end` (doorways, one-cell gaps in a wall line, holding a box the hiders locked when preparation ended; maps with doorways), `fort_prep_end` (the share of the map's rooms, the parts bounded by walls and doorways other than the largest, that cannot be entered from the outside when preparation ends except through a box the hiders locked, in a doorway or just inside it: [`HnsArena::rooms_shut`]; maps with rooms), `hider_success` (share of post-preparation steps with no hider seen), `hider_seen_steps`, `pushes`, `pulls`, `ramp_climbs`. |
//! | Doors | `door_dropout` p (0 by default): with probability p an episode walls up one of the map's doorways, drawn uniformly among those no object or spawn cell is on (Baker et al.'s `p_door_dropout`, 0.5 in their quadrant game: "the probability we don't place one of the doors"); maps with two such doorways or more. |
//! | Objects | With `scatter_objects`, every box and ramp is placed each episode on a free cell drawn uniformly from the region it starts in on the map (the room, bounded by walls and doorways, or the outside), never on a doorway or an agent: Baker et al.'s quadrant game draws its boxes' places in the room every episode (`quadrant_placement`). Otherwise objects start where the map puts them. |
//! | Parameters | `prep_fraction` 0.4, `vision_range` 6, `vision_cone` 135, `reward` 1, `door_dropout` 0, `scatter_objects` false, `window` 0 (the vision range), `entities` false. |

pub mod actions;
pub(crate) mod check;
mod codes;
pub mod family;
pub mod map;
pub mod params;
pub mod rules;
pub mod text;
pub mod vision;

pub use codes::{ACTIONS, act, view};
pub use map::{Grip, HnsArena, ObjectKind};
pub use params::HideSeekParams;

use bevy::prelude::*;

use crate::core::*;

/// The components every hide-and-seek agent carries besides the core ones.
pub fn agent_components() -> impl Bundle {
    (
        GridPos::default(),
        Facing::default(),
        Grip::default(),
        HnsSenses::default(),
    )
}

/// A hide-and-seek agent's part of its observation, written beside its [`Observation`] in
/// `SimSystems::Observe`.
#[derive(Component, Debug, Clone, Default, PartialEq)]
pub struct HnsSenses {
    /// Steps of the preparation phase left (0 once it is over).
    pub prep_left: u32,
    /// The agent holds an object (grab).
    pub holding: bool,
    /// With `entities`: the boxes and ramps seen this step, in map order.
    pub objects: Vec<SeenObject>,
    /// With `entities`: the map's doorways and whether each is open this episode.
    pub doorways: Vec<([i32; 2], bool)>,
    /// The entity list, as numbers (empty unless the scene asks for `entities`; see
    /// [`rules::entity_features`]).
    pub entities: Vec<f32>,
}

/// A box or ramp an agent sees (the entity list's objects).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeenObject {
    /// Its index among the arena's objects (map order).
    pub index: u8,
    /// Box or ramp.
    pub kind: ObjectKind,
    /// Its map position.
    pub pos: [i32; 2],
    /// Locked by the observer's side.
    pub ours: bool,
    /// Locked by the other side.
    pub theirs: bool,
    /// Held by the observer.
    pub held: bool,
}

/// The hide-and-seek family.
#[derive(Default)]
pub struct HideAndSeekPlugin;

impl Plugin for HideAndSeekPlugin {
    fn build(&self, app: &mut App) {
        add_family_systems(
            app,
            "hide_and_seek",
            (
                map::reset_hide_and_seek
                    .in_set(SimSystems::Reset)
                    .after(reset_arenas),
                rules::observe_hide_and_seek.in_set(SimSystems::Observe),
                rules::state_hide_and_seek
                    .in_set(SimSystems::Encode)
                    .run_if(resource_exists::<CentralState>),
                actions::apply_hide_and_seek.in_set(ActSystems::Apply),
                rules::reward_hide_and_seek.in_set(SimSystems::Reward),
                rules::summarize_hide_and_seek.in_set(RecordSystems::Summarize),
            ),
        );
        run_family_while::<HnsArena>(app, "hide_and_seek");
        app.add_systems(GlobalStateSchedule, rules::state_hide_and_seek);
        let world = app.world_mut();
        world
            .get_resource_or_init::<StateHashers>()
            .0
            .push(rules::hash_hide_and_seek);
        world
            .get_resource_or_init::<MapDrawers>()
            .0
            .push(rules::draw_hide_and_seek);
        world
            .get_resource_or_init::<CellMarkers>()
            .0
            .push(rules::sight_marks);
    }
}
