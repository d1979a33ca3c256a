//! Observations and states as networks read them: a byte per grid cell (its code, below
//! [`CODES`]) and a few numbers. The `mlp` policy reads an agent's [`Observation`] this way
//! ([`encode`]); MAPPO's centralised critic reads each family's true global state
//! ([`GlobalView`]), which the families write only while a run asks for it
//! ([`CentralState`]).

use bevy::prelude::*;

use super::Observation;

/// Values a cell's code may take (cell codes are below 16; maze codes keep their kind in
/// the low nibble).
pub const CODES: usize = 16;

/// The most words a scene's talk vocabulary may have (its check says so too).
pub const MAX_WORDS: usize = 32;

/// An observation as the network reads it: the code (0..16) of every view cell, then of
/// every known-map cell, and the header fields as numbers. The network's input is the
/// one-hot of each cell's code followed by `dense` ([`features`] writes it out); the first
/// layer reads the cells by adding the weight column of each cell's code (`CellSum` in
/// [`crate::policy::mlp`]),
/// which is the same sum without the zeros, and the rollout buffer keeps this compact form.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Encoded {
    /// One code per cell (`view`, then `map`), each below 16.
    pub cells: Vec<u8>,
    /// The header fields.
    pub dense: Vec<f32>,
}

/// Fills `out` with `obs`'s cells and header fields. The lengths depend only on the scene.
pub fn encode(obs: &Observation, out: &mut Encoded) {
    out.cells.clear();
    out.cells
        .extend(obs.view.iter().chain(&obs.map).map(|&c| c & 0x0f));
    let d = &mut out.dense;
    d.clear();
    d.push(obs.step as f32 / 1000.0);
    d.push(f32::from(obs.cooldown) / 10.0);
    d.push(f32::from(u8::from(obs.removed)));
    d.push(obs.prep_left as f32 / 100.0);
    d.push(f32::from(u8::from(obs.holding)));
    push_one_hot(d, usize::from(obs.facing), 4);
    d.extend((0..8).map(|k| ((obs.keys >> k) & 1) as f32));
    push_one_hot(d, usize::from(obs.team).min(3), 4);
    d.push(obs.others.len() as f32 / 4.0);
    d.push(obs.heard.len() as f32 / 4.0);
    // Talk: which vocabulary words were heard this step (a scene has at most 32).
    d.extend(
        (0..MAX_WORDS)
            .map(|k| f32::from(u8::from(obs.heard.iter().any(|h| usize::from(h.word) == k)))),
    );
    // Repeated games: the last three rounds, one-hot, newest first, and the other's counts.
    for k in 0..3 {
        match obs.history.iter().rev().nth(k) {
            Some(h) => d.extend(
                [h[0] == 0, h[0] == 1, h[1] == 0, h[1] == 1].map(|b| f32::from(u8::from(b))),
            ),
            None => d.extend([0.0; 4]),
        }
    }
    let total = (obs.other_counts[0] + obs.other_counts[1]).max(1) as f32;
    d.extend(obs.other_counts.map(|c| c as f32 / total));
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

/// Appends `one_hot(k, n)` to `out`.
pub fn push_one_hot(out: &mut Vec<f32>, k: usize, n: usize) {
    out.extend((0..n).map(|i| f32::from(u8::from(i == k))));
}
