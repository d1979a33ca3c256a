//! Procedural mazes that are always solvable, and the breadth-first solver that checks it.
//!
//! [`generate`] carves a perfect maze (recursive backtracker on the odd grid), starts the
//! agents around a random cell, puts the exit on the cell farthest from it, and places the
//! doors on passages of the unique start → exit path, at least four steps apart. A locked
//! door's key lies before it (off the main path when possible); a plate door gets one plate
//! before it and one after it, so two agents can take turns holding it. A carving whose path
//! is too short for the doors asked is carved again (up to [`ATTEMPTS`] times, from the same
//! stream, so the same seed gives the same maze); [`check_capacity`], run when a scene is
//! checked, refuses sizes where sample layouts still fall short, so what `check` prints is
//! what is built.

use rand::Rng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;

use super::codes::view;
use super::layout::Layout;
use super::params::GenerateSpec;

/// The kind of door placed on the main path.
#[derive(Clone, Copy, PartialEq, Eq)]
enum DoorKind {
    Plate,
    Locked,
}

/// Breadth-first distances from `start` over non-wall cells (`u32::MAX`: unreachable), and
/// each reached cell's parent.
fn distances(l: &Layout, start: usize) -> (Vec<u32>, Vec<usize>) {
    let mut dist = vec![u32::MAX; l.tiles.len()];
    let mut parent = vec![usize::MAX; l.tiles.len()];
    let mut q = VecDeque::from([start]);
    dist[start] = 0;
    while let Some(i) = q.pop_front() {
        for n in l.neighbours(i) {
            if dist[n] == u32::MAX && l.tiles[n] != view::WALL {
                dist[n] = dist[i] + 1;
                parent[n] = i;
                q.push_back(n);
            }
        }
    }
    (dist, parent)
}

/// Carves a perfect maze on a `w × h` grid (odd sizes; cells at odd coordinates).
fn carve(w: usize, h: usize, rng: &mut ChaCha8Rng) -> Vec<u8> {
    let mut tiles = vec![view::WALL; w * h];
    let (cw, ch) = ((w - 1) / 2, (h - 1) / 2);
    let mut visited = vec![false; cw * ch];
    let at = |cx: usize, cy: usize| (2 * cy + 1) * w + 2 * cx + 1;
    let first = (rng.random_range(0..cw), rng.random_range(0..ch));
    visited[first.1 * cw + first.0] = true;
    tiles[at(first.0, first.1)] = view::FLOOR;
    let mut stack = vec![first];
    while let Some(&(cx, cy)) = stack.last() {
        let mut next = [(0usize, 0usize); 4];
        let mut n = 0;
        for (dx, dy) in [(0i32, -1i32), (1, 0), (0, 1), (-1, 0)] {
            let (nx, ny) = (cx as i32 + dx, cy as i32 + dy);
            if nx >= 0 && ny >= 0 && (nx as usize) < cw && (ny as usize) < ch {
                let (nx, ny) = (nx as usize, ny as usize);
                if !visited[ny * cw + nx] {
                    next[n] = (nx, ny);
                    n += 1;
                }
            }
        }
        if n == 0 {
            stack.pop();
            continue;
        }
        let (nx, ny) = next[rng.random_range(0..n)];
        visited[ny * cw + nx] = true;
        tiles[at(nx, ny)] = view::FLOOR;
        tiles[(cy + ny + 1) * w + cx + nx + 1] = view::FLOOR;
        stack.push((nx, ny));
    }
    tiles
}

/// Carvings tried for one maze before the one with the most doors is kept.
pub const ATTEMPTS: usize = 64;

/// Sample layouts [`check_capacity`] generates (with every seed when the scene fixes none).
const SAMPLES: u64 = 16;

/// Generates a maze for `n_agents` agents from `rng`, with every door asked for (carving
/// again while one does not fit; after [`ATTEMPTS`] carvings, the one with the most doors).
pub fn generate(spec: &GenerateSpec, n_agents: usize, rng: &mut ChaCha8Rng) -> Layout {
    let wanted = usize::from(spec.plate_doors) + usize::from(spec.key_doors);
    let mut best: Option<Layout> = None;
    for _ in 0..ATTEMPTS {
        let l = generate_once(spec, n_agents, rng);
        let placed = doors_of(&l);
        if placed >= wanted {
            return l;
        }
        if best.as_ref().is_none_or(|b| doors_of(b) < placed) {
            best = Some(l);
        }
    }
    best.unwrap_or_else(|| generate_once(spec, n_agents, rng))
}

/// Plate doors and locked doors of a generated layout.
fn doors_of(l: &Layout) -> usize {
    l.doors.len() + l.keys.len()
}

/// `Err` (what fits, for the message) when sample layouts of `spec` (its fixed seed, or
/// `SAMPLES` seeds) do not all get every door asked for.
pub fn check_capacity(spec: &GenerateSpec, n_agents: usize) -> Result<(), String> {
    use rand::SeedableRng;
    let wanted = (spec.plate_doors, spec.key_doors);
    let seeds: Vec<u64> = match spec.seed {
        Some(s) => vec![s],
        None => (0..SAMPLES).collect(),
    };
    for seed in seeds {
        let l = generate(spec, n_agents, &mut ChaCha8Rng::seed_from_u64(seed));
        let got = (l.doors.len(), l.keys.len());
        if got.0 < usize::from(wanted.0) || got.1 < usize::from(wanted.1) {
            return Err(format!(
                "a {}×{} maze has room for {} plate doors and {} key doors (layout seed \
                 {seed}), not the {} and {} asked",
                spec.width, spec.height, got.0, got.1, wanted.0, wanted.1
            ));
        }
    }
    Ok(())
}

/// One carving and its doors (some may not fit).
fn generate_once(spec: &GenerateSpec, n_agents: usize, rng: &mut ChaCha8Rng) -> Layout {
    let w = usize::from(spec.width.max(5)) | 1;
    let h = usize::from(spec.height.max(5)) | 1;
    let tiles = carve(w, h, rng);
    let mut l = Layout::new(w, h, tiles, Vec::new(), Vec::new());
    let (cw, ch) = ((w - 1) / 2, (h - 1) / 2);
    let start = (2 * rng.random_range(0..ch) + 1) * w + 2 * rng.random_range(0..cw) + 1;
    let (dist, parent) = distances(&l, start);
    let mut exit = start;
    for (i, &d) in dist.iter().enumerate() {
        if d != u32::MAX && d > dist[exit] {
            exit = i;
        }
    }
    let mut path = vec![exit];
    while let Some(&p) = path.last()
        && p != start
    {
        path.push(parent[p]);
    }
    path.reverse();
    let on_path = {
        let mut v = vec![false; l.tiles.len()];
        path.iter().for_each(|&i| v[i] = true);
        v
    };

    // The start area: cells within two steps of the start, nearest first.
    let mut area: Vec<usize> = (0..l.tiles.len()).filter(|&i| dist[i] <= 2).collect();
    area.sort_by_key(|&i| (dist[i], i));
    area.truncate(n_agents.max(1));
    l.shared = area.iter().map(|&i| i as u32).collect();

    // Door positions: passages of the path, past the start area, before the exit's cell.
    let mut cands: Vec<usize> = (3..path.len().saturating_sub(2)).step_by(2).collect();
    cands.shuffle(rng);
    let wanted = usize::from(spec.plate_doors) + usize::from(spec.key_doors);
    let mut chosen: Vec<usize> = Vec::new();
    for c in cands {
        if chosen.len() < wanted && chosen.iter().all(|&k| k.abs_diff(c) >= 4) {
            chosen.push(c);
        }
    }
    chosen.sort_unstable();
    let mut kinds: Vec<DoorKind> = std::iter::repeat_n(DoorKind::Plate, spec.plate_doors.into())
        .chain(std::iter::repeat_n(DoorKind::Locked, spec.key_doors.into()))
        .collect();
    kinds.shuffle(rng);
    kinds.truncate(chosen.len());

    // Segments: the parts of the tree between consecutive doors, numbered along the path.
    let is_door = |i: usize| chosen.iter().any(|&k| path[k] == i);
    let mut seg = vec![u8::MAX; l.tiles.len()];
    let seeds = std::iter::once(start).chain(chosen.iter().map(|&k| path[k + 1]));
    for (s, seed) in seeds.enumerate() {
        let r = l.reach(&[seed as u32], |i| l.tiles[i] != view::WALL && !is_door(i));
        for (i, &yes) in r.iter().enumerate() {
            if yes {
                seg[i] = s as u8;
            }
        }
    }
    let mut taken = vec![false; l.tiles.len()];
    for &i in &area {
        taken[i] = true;
    }
    taken[exit] = true;
    let pick = |s: usize, taken: &mut Vec<bool>, rng: &mut ChaCha8Rng| -> Option<usize> {
        let free = |off: bool| -> Vec<usize> {
            (0..seg.len())
                .filter(|&i| usize::from(seg[i]) == s && !taken[i] && on_path[i] != off)
                .collect()
        };
        let mut c = free(true);
        if c.is_empty() {
            c = free(false);
        }
        let i = *c.get(rng.random_range(0..c.len().max(1)))?;
        taken[i] = true;
        Some(i)
    };
    let (mut groups, mut colours) = (0u8, 0u8);
    for (k, (&pi, kind)) in chosen.iter().zip(kinds).enumerate() {
        let door = path[pi];
        match kind {
            DoorKind::Locked => {
                if let Some(key) = pick(k, &mut taken, rng) {
                    l.tiles[key] = view::with_link(view::KEY, colours);
                    l.tiles[door] = view::with_link(view::LOCKED, colours);
                    colours += 1;
                }
            }
            DoorKind::Plate => {
                let Some(near) = pick(k, &mut taken, rng) else {
                    continue;
                };
                let Some(far) = pick(k + 1, &mut taken, rng) else {
                    taken[near] = false;
                    continue;
                };
                l.tiles[near] = view::with_link(view::PLATE, groups);
                l.tiles[far] = view::with_link(view::PLATE, groups);
                l.tiles[door] = view::with_link(view::DOOR_CLOSED, groups);
                groups += 1;
            }
        }
    }
    l.tiles[exit] = view::EXIT;
    Layout::new(w, h, l.tiles, Vec::new(), l.shared)
}

/// Whether `n_agents` agents starting on `layout`'s spawn cells can all reach an exit, by
/// breadth-first search to a fixpoint: a locked door opens once a key of its colour is
/// reachable; a plate door opens when there are two or more agents, one of its plates is
/// reachable, and another is reachable from the door's far side without going through it
/// (one agent holds the near plate while the other crosses, then they swap). Assumes every
/// agent starts in one connected region, as generated mazes do.
pub fn solvable(layout: &Layout, n_agents: usize) -> bool {
    let l = layout;
    let starts = l.start_cells();
    let mut open = vec![false; l.tiles.len()];
    let pass = |open: &[bool], i: usize| -> bool {
        match view::kind(l.tiles[i]) {
            view::WALL => false,
            view::DOOR_CLOSED | view::DOOR_OPEN | view::LOCKED => open[i],
            _ => true,
        }
    };
    loop {
        let reach = l.reach(&starts, |i| pass(&open, i));
        if l.exits.iter().any(|&e| reach[e as usize]) {
            return true;
        }
        let mut changed = false;
        for i in 0..l.tiles.len() {
            let (kind, link) = (view::kind(l.tiles[i]), usize::from(view::link(l.tiles[i])));
            if open[i] || !l.neighbours(i).any(|n| reach[n]) {
                continue;
            }
            let opens = match kind {
                view::LOCKED => l
                    .keys
                    .get(link)
                    .is_some_and(|k| k.iter().any(|&c| reach[c as usize])),
                view::DOOR_CLOSED | view::DOOR_OPEN if n_agents >= 2 => {
                    let plates = l.plates.get(link).map_or(&[][..], |p| &p[..]);
                    let near = plates.iter().any(|&p| reach[p as usize]);
                    let far_starts: Vec<u32> = l
                        .neighbours(i)
                        .filter(|&n| !reach[n] && pass(&open, n))
                        .map(|n| n as u32)
                        .collect();
                    let far = l.reach(&far_starts, |c| c != i && pass(&open, c));
                    near && plates
                        .iter()
                        .any(|&p| far[p as usize] && !reach[p as usize])
                }
                _ => false,
            };
            if opens {
                open[i] = true;
                changed = true;
            }
        }
        if !changed {
            return false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn spec(w: u16, h: u16, plates: u8, keys: u8) -> GenerateSpec {
        GenerateSpec {
            width: w,
            height: h,
            plate_doors: plates,
            key_doors: keys,
            seed: None,
        }
    }

    #[test]
    fn same_seed_same_maze_and_doors_are_placed() {
        let s = spec(15, 15, 1, 1);
        let a = generate(&s, 2, &mut ChaCha8Rng::seed_from_u64(3));
        let b = generate(&s, 2, &mut ChaCha8Rng::seed_from_u64(3));
        assert_eq!(a, b);
        assert_eq!(a.exits.len(), 1);
        assert_eq!(a.shared.len(), 2);
        let doors = (0..40)
            .map(|seed| generate(&s, 2, &mut ChaCha8Rng::seed_from_u64(seed)))
            .filter(|l| l.doors.len() == 1 && l.keys.len() == 1)
            .count();
        assert!(doors >= 30, "{doors} of 40 mazes got both doors");
    }

    /// Every layout gets the doors asked for, and a size that cannot hold them is refused
    /// by the check that `emergence check` runs.
    #[test]
    fn every_door_asked_for_is_built_or_the_size_is_refused() {
        for (w, plates, keys) in [(15, 2, 0), (15, 1, 1), (21, 3, 2), (31, 8, 0)] {
            let s = spec(w, w, plates, keys);
            check_capacity(&s, 2).expect("fits");
            for seed in 100..140 {
                let l = generate(&s, 2, &mut ChaCha8Rng::seed_from_u64(seed));
                assert_eq!(
                    (l.doors.len(), l.keys.len()),
                    (usize::from(plates), usize::from(keys)),
                    "{w}×{w}, seed {seed}"
                );
            }
        }
        let err = check_capacity(&spec(7, 7, 8, 8), 2).expect_err("too small");
        assert!(err.contains("a 7×7 maze has room for"), "{err}");
    }

    #[test]
    fn removing_the_key_or_a_plate_makes_it_unsolvable() {
        let s = spec(15, 15, 0, 1);
        let l = (0..100)
            .map(|seed| generate(&s, 2, &mut ChaCha8Rng::seed_from_u64(seed)))
            .find(|l| l.keys.len() == 1)
            .expect("a maze with a key");
        assert!(solvable(&l, 2));
        let key = l.keys[0][0] as usize;
        let mut t = l.tiles.clone();
        t[key] = view::FLOOR;
        let no_key = Layout::new(l.width, l.height, t, Vec::new(), l.shared.clone());
        assert!(!solvable(&no_key, 2));

        let s = spec(15, 15, 1, 0);
        let l = (0..100)
            .map(|seed| generate(&s, 2, &mut ChaCha8Rng::seed_from_u64(seed)))
            .find(|l| l.doors.len() == 1)
            .expect("a maze with a plate door");
        assert!(solvable(&l, 2));
        assert!(!solvable(&l, 1), "one agent cannot pass a plate door");
        for p in &l.plates[0] {
            let mut t = l.tiles.clone();
            t[*p as usize] = view::FLOOR;
            let one_plate = Layout::new(l.width, l.height, t, Vec::new(), l.shared.clone());
            assert!(
                !solvable(&one_plate, 2),
                "a plate door needs a plate on each side"
            );
        }
    }
}
