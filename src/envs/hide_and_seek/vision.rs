//! Vision: a cone around the facing, a range, and line of sight on the grid. One table,
//! [`Vision`], serves observations ([`Vision::cast`]), rewards ([`Vision::sees`]) and the
//! viewer's cones, so what an agent is shown, what scores and what is drawn agree.
//!
//! The rule, for a viewer at cell `v` facing `f` and a target cell `t`:
//! - **cone**: the angle between `f` and `t − v` (cell centres) is at most half the cone
//!   angle (135° by default, so 67.5° either side);
//! - **range**: `|t − v|` (Euclidean, centre to centre) is at most the range;
//! - **line of sight**: every cell of the digital ray from `t` back to `v`, ends excluded, is
//!   transparent (not a wall, not a box; low walls, ramps and agents do not block). The ray
//!   is defined recursively: the cell before `t` is the cell nearest the straight segment
//!   one Chebyshev step closer to `v` (`round(t·(n−1)/n)` with `n` the Chebyshev distance,
//!   in egocentric coordinates), and so on down to `v`. Each cell thus has one parent, so the
//!   whole window is lit in a single pass in order of distance.

use bevy::math::IVec2;

use crate::core::Dir4;

/// One cell of the egocentric window.
#[derive(Debug, Clone, Copy)]
struct Cell {
    /// Offset (right, ahead) from the viewer.
    ego: IVec2,
    /// Index of the parent cell on the ray back to the viewer (itself for the viewer).
    parent: u16,
    /// Inside the cone and within range.
    in_view: bool,
    /// Index of the cell in the row-major observation window.
    window: u16,
}

/// Precomputed visibility tables for one cone angle and range.
#[derive(Debug, Clone)]
pub struct Vision {
    range: i32,
    behind: i32,
    /// Cells ordered by Chebyshev distance (parents first); entry 0 is the viewer.
    cells: Vec<Cell>,
    /// For each facing, the map offset of every entry of `cells`.
    world: [Vec<IVec2>; 4],
    /// Index into `cells` of every window position, row-major.
    by_window: Vec<u16>,
}

/// A smaller observation window inside a [`Vision`]'s (see [`Vision::crop`]).
#[derive(Debug, Clone)]
pub struct Crop {
    /// Width of the smaller window.
    pub width: usize,
    /// Its height.
    pub height: usize,
    /// The viewer's column and row in it.
    pub viewer: (u8, u8),
    /// For each cell of the full window, its index in the smaller one (`u16::MAX`: outside).
    pub index: Vec<u16>,
}

/// `round(a / b)` for `b > 0`, halves away from zero.
fn round_div(a: i32, b: i32) -> i32 {
    if a >= 0 {
        (2 * a + b) / (2 * b)
    } else {
        -((-2 * a + b) / (2 * b))
    }
}

impl Vision {
    /// Tables for a cone of `cone_deg` degrees and a range of `range` cells.
    pub fn new(cone_deg: f32, range: u8) -> Self {
        let range = i32::from(range);
        // Cells behind the viewer are only needed for cones wider than a half-plane.
        let behind = if cone_deg > 180.0 { range } else { 0 };
        let half = (cone_deg.min(360.0) / 2.0).to_radians();
        let cos_half = half.cos();
        let width = 2 * range + 1;
        let mut ego: Vec<IVec2> = Vec::new();
        for ahead in (-behind..=range).rev() {
            for right in -range..=range {
                ego.push(IVec2::new(right, ahead));
            }
        }
        let window_of = |e: IVec2| ((range - e.y) * width + (e.x + range)) as u16;
        let mut order: Vec<IVec2> = ego.clone();
        order.sort_by_key(|e| (e.x.abs().max(e.y.abs()), window_of(*e)));
        let index_of = |order: &[IVec2], e: IVec2| order.iter().position(|&o| o == e);
        let cells: Vec<Cell> = order
            .iter()
            .map(|&e| {
                let n = e.x.abs().max(e.y.abs());
                let parent = if n == 0 {
                    e
                } else {
                    IVec2::new(round_div(e.x * (n - 1), n), round_div(e.y * (n - 1), n))
                };
                let d2 = (e.x * e.x + e.y * e.y) as f32;
                let in_cone = n == 0 || {
                    let cos = e.y as f32 / d2.sqrt();
                    half >= std::f32::consts::PI || cos >= cos_half - 1e-6
                };
                Cell {
                    ego: e,
                    parent: index_of(&order, parent).unwrap_or(0) as u16,
                    in_view: n > 0 && in_cone && d2 <= (range * range) as f32 + 1e-6,
                    window: window_of(e),
                }
            })
            .collect();
        let world = Dir4::ALL.map(|f| cells.iter().map(|c| f.to_world(c.ego.x, c.ego.y)).collect());
        let mut by_window = vec![0u16; cells.len()];
        for (i, c) in cells.iter().enumerate() {
            by_window[usize::from(c.window)] = i as u16;
        }
        Self {
            range,
            behind,
            cells,
            world,
            by_window,
        }
    }

    /// Width and height of the observation window; the viewer sits at column
    /// `range`, row `range` (rows run from farthest ahead to nearest, then behind).
    pub fn window(&self) -> (usize, usize, (u8, u8)) {
        let w = (2 * self.range + 1) as usize;
        let h = (self.range + 1 + self.behind) as usize;
        (w, h, (self.range as u8, self.range as u8))
    }

    /// A smaller window of range `small` (at most this one's) inside this one: its width,
    /// height and the viewer's column and row, and for every cell of this window its index
    /// in the smaller one (`u16::MAX` outside it). Cells behind the viewer are kept as deep
    /// as the smaller range where this window has them.
    pub fn crop(&self, small: u8) -> Crop {
        let small = i32::from(small).min(self.range);
        let behind = self.behind.min(small);
        let (w, sw) = (2 * self.range + 1, 2 * small + 1);
        let (_, h, _) = self.window();
        let index = (0..w * h as i32)
            .map(|i| {
                let (right, ahead) = (i % w - self.range, self.range - i / w);
                if right.abs() <= small && ahead <= small && ahead >= -behind {
                    ((small - ahead) * sw + right + small) as u16
                } else {
                    u16::MAX
                }
            })
            .collect();
        Crop {
            width: sw as usize,
            height: (small + 1 + behind) as usize,
            viewer: (small as u8, small as u8),
            index,
        }
    }

    /// Lights the window of a viewer at `from` facing `facing`: calls `visit(window index,
    /// map cell)` for every cell the viewer sees, its own cell first. `blocks(p)` says whether
    /// map cell `p` stops sight (cells off the map must block). `clear` is scratch.
    pub fn cast(
        &self,
        from: IVec2,
        facing: Dir4,
        blocks: impl Fn(IVec2) -> bool,
        mut visit: impl FnMut(usize, IVec2),
        clear: &mut Vec<bool>,
    ) {
        let n = self.cells.len();
        clear.clear();
        clear.resize(n, false);
        let offsets = &self.world[facing as usize];
        clear[0] = true;
        visit(usize::from(self.cells[0].window), from);
        for i in 1..n {
            let c = self.cells[i];
            if !clear[usize::from(c.parent)] {
                continue;
            }
            let p = from + offsets[i];
            clear[i] = !blocks(p);
            if c.in_view {
                visit(usize::from(c.window), p);
            }
        }
    }

    /// Whether a viewer at `from` facing `facing` sees cell `to`.
    pub fn sees(
        &self,
        from: IVec2,
        facing: Dir4,
        to: IVec2,
        blocks: impl Fn(IVec2) -> bool,
    ) -> bool {
        let d = to - from;
        // Egocentric offset: ahead along the facing, right along its right.
        let (f, r) = (facing.delta(), facing.right().delta());
        let ego = IVec2::new(d.dot(r), d.dot(f));
        if ego.x.abs() > self.range || ego.y > self.range || ego.y < -self.behind {
            return false;
        }
        let width = 2 * self.range + 1;
        let w = ((self.range - ego.y) * width + (ego.x + self.range)) as usize;
        let mut i = usize::from(self.by_window[w]);
        if !self.cells[i].in_view {
            return false;
        }
        let offsets = &self.world[facing as usize];
        i = usize::from(self.cells[i].parent);
        while i != 0 {
            if blocks(from + offsets[i]) {
                return false;
            }
            i = usize::from(self.cells[i].parent);
        }
        true
    }

    /// Every map offset the viewer facing `facing` could see on an empty map (the cone),
    /// for drawing.
    pub fn cone(&self, facing: Dir4) -> impl Iterator<Item = IVec2> + '_ {
        self.cells
            .iter()
            .zip(&self.world[facing as usize])
            .filter(|(c, _)| c.in_view)
            .map(|(_, &o)| o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crop_keeps_the_cells_near_the_viewer_in_their_places() {
        let v = Vision::new(135.0, 6);
        let c = v.crop(2);
        assert_eq!((c.width, c.height, c.viewer), (5, 3, (2, 2)));
        let (w, h, _) = v.window();
        assert_eq!(c.index.len(), w * h);
        // The viewer (row 6, column 6 of the 13 x 7 window) is row 2, column 2 of 5 x 3.
        assert_eq!(c.index[6 * 13 + 6], 2 * 5 + 2);
        // Two ahead and two to the left: row 4, column 4 -> row 0, column 0.
        assert_eq!(c.index[4 * 13 + 4], 0);
        // Three ahead is outside.
        assert_eq!(c.index[3 * 13 + 6], u16::MAX);
        let kept = c.index.iter().filter(|&&k| k != u16::MAX).count();
        assert_eq!(kept, 15);
        // Wide cones keep cells behind, as deep as the smaller range.
        let wide = Vision::new(360.0, 4).crop(1);
        assert_eq!((wide.width, wide.height, wide.viewer), (3, 3, (1, 1)));
    }

    #[test]
    fn parents_step_towards_the_viewer() {
        let v = Vision::new(135.0, 6);
        for c in &v.cells[1..] {
            let p = v.cells[usize::from(c.parent)].ego;
            let n = c.ego.x.abs().max(c.ego.y.abs());
            assert_eq!(p.x.abs().max(p.y.abs()), n - 1, "{:?} -> {:?}", c.ego, p);
            assert!((p - c.ego).abs().max_element() <= 1);
        }
    }

    #[test]
    fn cone_of_135_degrees() {
        let v = Vision::new(135.0, 6);
        let empty = |_: IVec2| false;
        let o = IVec2::ZERO;
        // Facing north (towards -y): straight ahead and 45° off are in, 90° is out.
        assert!(v.sees(o, Dir4::North, IVec2::new(0, -5), empty));
        assert!(v.sees(o, Dir4::North, IVec2::new(3, -3), empty));
        assert!(v.sees(o, Dir4::North, IVec2::new(-2, -5), empty));
        assert!(!v.sees(o, Dir4::North, IVec2::new(3, 0), empty));
        assert!(!v.sees(o, Dir4::North, IVec2::new(0, 2), empty));
        // 63.4° is inside 67.5°, 71.6° is not.
        assert!(v.sees(o, Dir4::North, IVec2::new(2, -1), empty));
        assert!(!v.sees(o, Dir4::North, IVec2::new(3, -1), empty));
        // Range 6: (0, -6) in, (4, -5) out (6.4).
        assert!(v.sees(o, Dir4::North, IVec2::new(0, -6), empty));
        assert!(!v.sees(o, Dir4::North, IVec2::new(4, -5), empty));
        // The same, rotated east.
        assert!(v.sees(o, Dir4::East, IVec2::new(5, 0), empty));
        assert!(!v.sees(o, Dir4::East, IVec2::new(-1, 0), empty));
    }

    #[test]
    fn cast_agrees_with_sees() {
        let v = Vision::new(135.0, 5);
        let wall = |p: IVec2| p == IVec2::new(1, -2) || p == IVec2::new(-1, -1);
        let mut clear = Vec::new();
        let (w, h, (sc, sr)) = v.window();
        for facing in Dir4::ALL {
            let mut vis = vec![false; w * h];
            v.cast(IVec2::ZERO, facing, wall, |i, _| vis[i] = true, &mut clear);
            for (i, &seen) in vis.iter().enumerate() {
                let (col, row) = ((i % w) as i32, (i / w) as i32);
                let ego = IVec2::new(col - i32::from(sc), i32::from(sr) - row);
                let to = facing.to_world(ego.x, ego.y);
                if ego != IVec2::ZERO {
                    assert_eq!(
                        seen,
                        v.sees(IVec2::ZERO, facing, to, wall),
                        "{facing:?} {ego:?}"
                    );
                }
            }
        }
    }
}
