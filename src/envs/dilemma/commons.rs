//! Commons Harvest (Melting Pot; Perolat et al. 2017).
//!
//! | | |
//! |---|---|
//! | agents | any number, each facing N/E/S/W |
//! | actions | `noop forward backward step_left step_right turn_left turn_right zap` (moves are egocentric; `clean` is masked) |
//! | observation | egocentric window `view.ahead` rows ahead, `view.behind` behind, `view.side` each side, rotated so forward is up |
//! | reward | `apple_reward` (+1) for stepping onto an apple; `zap.cost` for firing |
//! | dynamics | an empty apple cell regrows with probability `regrowth[k]` where k = live apples within L2 radius `regrowth_radius` (capped at 3): 0 / 0.0025 / 0.005 / 0.025, so an emptied patch is gone for good |
//! | zapping | beam of `zap.length` cells ahead, stopped by walls; the first agent hit is removed for `zap.timeout` steps, then respawns on a free spawn cell; `zap.cooldown` steps between shots |
//! | termination | none; truncation at `episode.max_steps` |
//! | metrics | efficiency, equality, sustainability, peace; apples eaten and left, zaps |

use bevy::math::IVec2;
use bevy::prelude::*;
use rand::Rng;

use super::codes::view;
use super::gridworld::DilemmaMap;
use crate::core::*;
use crate::scene::HarvestParams;

/// Commons Harvest's regrowth rule for one arena.
#[derive(Component, Debug, Clone)]
pub struct HarvestRegrowth {
    /// Probability by number of live apples nearby (0, 1, 2, ≥3).
    pub probs: [f32; 4],
    /// Offsets within the radius, excluding the cell itself.
    pub offsets: Vec<IVec2>,
}

impl HarvestRegrowth {
    /// The rule from scene parameters.
    pub fn new(p: &HarvestParams) -> Self {
        let r = p.regrowth_radius;
        let ri = r.floor() as i32;
        let mut offsets = Vec::new();
        for dy in -ri..=ri {
            for dx in -ri..=ri {
                if (dx, dy) != (0, 0) && ((dx * dx + dy * dy) as f32) <= r * r {
                    offsets.push(IVec2::new(dx, dy));
                }
            }
        }
        let g = |i: usize| p.regrowth.get(i).copied().unwrap_or(0.0);
        Self {
            probs: [g(0), g(1), g(2), g(3)],
            offsets,
        }
    }

    /// Live apples within the radius of `p` (capped at 3).
    pub fn nearby_apples(&self, tiles: &Grid<u8>, p: IVec2) -> usize {
        let mut n = 0;
        for &o in &self.offsets {
            if tiles.get(p + o) == Some(view::APPLE) {
                n += 1;
                if n == 3 {
                    break;
                }
            }
        }
        n
    }
}

/// Empty apple cells regrow by the number of live apples around them (counted before any
/// cell of this step regrows). A cell with an agent on it does not regrow.
pub fn regrow_apples(
    mut arenas: Query<
        (
            &EpisodeClock,
            &mut DilemmaMap,
            &HarvestRegrowth,
            &mut ArenaRng,
        ),
        Without<Idle>,
    >,
) {
    arenas
        .par_iter_mut()
        .for_each_init(Vec::new, |grown, (clock, mut map, rule, mut rng)| {
            if !clock.is_live() {
                return;
            }
            grown.clear();
            for &i in map.apple_sites.iter() {
                let i = i as usize;
                if map.tiles.cells()[i] != view::APPLE_SITE || map.occ.cells()[i] != 0 {
                    continue;
                }
                let p = rule.probs[rule.nearby_apples(&map.tiles, map.tiles.pos(i))];
                if p > 0.0 && rng.0.random::<f32>() < p {
                    grown.push(i);
                }
            }
            for &i in grown.iter() {
                map.tiles.cells_mut()[i] = view::APPLE;
            }
        });
}
