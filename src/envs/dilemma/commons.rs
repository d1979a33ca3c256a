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
use std::sync::Arc;

use super::codes::view;
use super::gridworld::DilemmaMap;
use super::params::HarvestParams;
use crate::core::*;

/// Commons Harvest's regrowth rule for one arena.
#[derive(Component, Debug, Clone)]
pub struct HarvestRegrowth {
    /// Probability by number of live apples nearby (0, 1, 2, ≥3).
    pub probs: [f32; 4],
    /// For the `i`-th apple site, the cell indices of the other apple sites within the
    /// radius: `neighbours[starts[i]..starts[i + 1]]` (apples only grow on sites).
    neighbours: Arc<(Vec<u32>, Vec<u32>)>,
}

impl HarvestRegrowth {
    /// The rule from scene parameters, for the sites of `map`.
    pub fn new(p: &HarvestParams, map: &DilemmaMap) -> Self {
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
        let mut starts = vec![0u32];
        let mut neighbours = Vec::new();
        for &site in map.apple_sites.iter() {
            let at = map.tiles.pos(site as usize);
            for &o in &offsets {
                let q = at + o;
                if map.tiles.contains(q) {
                    let qi = map.tiles.index(q) as u32;
                    if map.apple_sites.binary_search(&qi).is_ok() {
                        neighbours.push(qi);
                    }
                }
            }
            starts.push(neighbours.len() as u32);
        }
        Self {
            probs: [g(0), g(1), g(2), g(3)],
            neighbours: Arc::new((starts, neighbours)),
        }
    }

    /// Live apples near the `k`-th apple site (capped at 3).
    #[inline]
    fn nearby_site_apples(&self, tiles: &[u8], k: usize) -> usize {
        let (starts, list) = &*self.neighbours;
        let mut n = 0;
        for &q in &list[starts[k] as usize..starts[k + 1] as usize] {
            if tiles[q as usize] == view::APPLE {
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
            for (k, &i) in map.apple_sites.iter().enumerate() {
                let i = i as usize;
                if map.tiles.cells()[i] != view::APPLE_SITE || map.occ.cells()[i] != 0 {
                    continue;
                }
                let p = rule.probs[rule.nearby_site_apples(map.tiles.cells(), k)];
                if p > 0.0 && rng.0.random::<f32>() < p {
                    grown.push(i);
                }
            }
            for &i in grown.iter() {
                map.tiles.cells_mut()[i] = view::APPLE;
            }
        });
}
