//! Observations and states as networks read them: a byte per grid cell (its code, below
//! [`CODES`]) and a few numbers ([`Encoded`]). The `mlp` policy reads an agent's
//! observation this way (`envs::senses::encode`, which knows every family's part of it);
//! MAPPO's centralised critic reads each family's true global state ([`GlobalView`]), which
//! the families write only while a run asks for it ([`CentralState`]).

use bevy::prelude::*;

/// Values a cell's code may take (cell codes are below 16; maze codes keep their kind in
/// the low nibble).
pub const CODES: usize = 16;

/// The most words a scene's talk vocabulary may have (its check says so too).
pub const MAX_WORDS: usize = 32;

/// An observation as the network reads it: the code (0..16) of every view cell, then of
/// every known-map cell, and the header fields as numbers. The network's input is the
/// one-hot of each cell's code followed by `dense` (`envs::senses::encode` fills it); the first
/// layer reads the cells by adding the weight column of each cell's code (`CellSum` in
/// [`crate::policy::mlp`]),
/// which is the same sum without the zeros, and the rollout buffer keeps this compact form.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Encoded {
    /// One code per cell (`view`, then `map`), each below 16.
    pub cells: Vec<u8>,
    /// The header fields.
    pub dense: Vec<f32>,
}

/// The true global state of the agent's arena at this step, as MAPPO's centralised critic
/// reads it (Yu et al. 2022's agent-specific global state): the whole map's cells drawn
/// from this agent's side (itself, its team, the others), and every agent's position and
/// status in slot order (with its facing where the family has one) and the step (and the
/// phase in hide-and-seek). A cell is its kind's code: in the maze, which plate opens
/// which door and which key fits which lock is not in it (nor in the observation). Written by the family in
/// [`super::SimSystems::Encode`] while [`CentralState`] is present, empty otherwise.
#[derive(Component, Debug, Clone, Default, PartialEq)]
pub struct GlobalView(pub Encoded);

/// Present while a run's critic reads [`GlobalView`]s (MAPPO): the families write them.
#[derive(Resource, Debug, Clone, Copy, Default)]
pub struct CentralState;

/// An agent's observation as the network reads it, encoded once per step in
/// [`super::SimSystems::Encode`] (`envs::senses::encode_features`) while [`EncodeFeatures`]
/// is present, and left empty otherwise. Deciding (the `mlp`), recording the step for
/// training and the Python bindings all read this one copy, written into the same buffers
/// every step.
#[derive(Component, Debug, Clone, Default, PartialEq)]
pub struct Features(pub Encoded);

/// A row with nothing in it: the [`Features`] of a step that encoded none, for decisions
/// built by hand.
pub static NO_FEATURES: Encoded = Encoded {
    cells: Vec::new(),
    dense: Vec::new(),
};

/// Present while something reads [`Features`]: a policy that reads feature rows
/// (`Policy::reads_features`; `spawn_arenas` inserts it), a training run that records them,
/// the Python bindings. Absent, the simulator does not encode.
#[derive(Resource, Debug, Clone, Copy, Default)]
pub struct EncodeFeatures;

/// Appends `one_hot(k, n)` to `out`.
pub fn push_one_hot(out: &mut Vec<f32>, k: usize, n: usize) {
    out.extend((0..n).map(|i| f32::from(u8::from(i == k))));
}
