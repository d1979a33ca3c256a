//! Grid geometry shared by the grid families: positions, facing, egocentric frames and a
//! dense row-major grid.

use bevy::math::IVec2;
use bevy::prelude::Component;

/// A cell of an arena's map; `x` grows to the east, `y` to the south (row order of the map).
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GridPos(pub IVec2);

/// One of the four compass directions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Dir4 {
    /// Up the map (towards row 0).
    #[default]
    North,
    /// Right.
    East,
    /// Down.
    South,
    /// Left.
    West,
}

impl Dir4 {
    /// All four, clockwise from north.
    pub const ALL: [Dir4; 4] = [Dir4::North, Dir4::East, Dir4::South, Dir4::West];

    /// Unit step in map coordinates.
    pub fn delta(self) -> IVec2 {
        match self {
            Dir4::North => IVec2::new(0, -1),
            Dir4::East => IVec2::new(1, 0),
            Dir4::South => IVec2::new(0, 1),
            Dir4::West => IVec2::new(-1, 0),
        }
    }
    /// Quarter turn clockwise.
    pub fn right(self) -> Dir4 {
        Dir4::ALL[(self as usize + 1) % 4]
    }
    /// Quarter turn anticlockwise.
    pub fn left(self) -> Dir4 {
        Dir4::ALL[(self as usize + 3) % 4]
    }
    /// Half turn.
    pub fn back(self) -> Dir4 {
        Dir4::ALL[(self as usize + 2) % 4]
    }
    /// One letter: N, E, S, W.
    pub fn letter(self) -> char {
        ['N', 'E', 'S', 'W'][self as usize]
    }
    /// Map an egocentric offset (`right` cells to the agent's right, `ahead` cells in front)
    /// to a map offset for an agent facing `self`.
    pub fn to_world(self, right: i32, ahead: i32) -> IVec2 {
        let f = self.delta();
        let r = self.right().delta();
        f * ahead + r * right
    }
}

/// The direction an agent faces.
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Facing(pub Dir4);

/// A dense `width × height` grid stored row by row.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Grid<T> {
    width: i32,
    height: i32,
    cells: Vec<T>,
}

impl<T: Copy> Grid<T> {
    /// A grid filled with `value`.
    pub fn filled(width: usize, height: usize, value: T) -> Self {
        Self {
            width: width as i32,
            height: height as i32,
            cells: vec![value; width * height],
        }
    }
    /// Width in cells.
    pub fn width(&self) -> usize {
        self.width as usize
    }
    /// Height in cells.
    pub fn height(&self) -> usize {
        self.height as usize
    }
    /// Whether `p` lies on the grid.
    #[inline]
    pub fn contains(&self, p: IVec2) -> bool {
        p.x >= 0 && p.y >= 0 && p.x < self.width && p.y < self.height
    }
    /// Row-major index of `p` (which must lie on the grid).
    #[inline]
    pub fn index(&self, p: IVec2) -> usize {
        (p.y * self.width + p.x) as usize
    }
    /// Position of row-major index `i`.
    #[inline]
    pub fn pos(&self, i: usize) -> IVec2 {
        IVec2::new(i as i32 % self.width, i as i32 / self.width)
    }
    /// The value at `p`, or `None` off the grid.
    #[inline]
    pub fn get(&self, p: IVec2) -> Option<T> {
        self.contains(p).then(|| self.cells[self.index(p)])
    }
    /// Sets the value at `p` (ignored off the grid).
    #[inline]
    pub fn set(&mut self, p: IVec2, value: T) {
        if self.contains(p) {
            let i = self.index(p);
            self.cells[i] = value;
        }
    }
    /// All cells, row-major.
    pub fn cells(&self) -> &[T] {
        &self.cells
    }
    /// All cells, row-major, mutable.
    pub fn cells_mut(&mut self) -> &mut [T] {
        &mut self.cells
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn egocentric_offsets_rotate_with_facing() {
        assert_eq!(Dir4::North.to_world(1, 2), IVec2::new(1, -2));
        assert_eq!(Dir4::East.to_world(1, 2), IVec2::new(2, 1));
        assert_eq!(Dir4::South.to_world(1, 2), IVec2::new(-1, 2));
        assert_eq!(Dir4::West.to_world(1, 2), IVec2::new(-2, -1));
        assert_eq!(Dir4::North.left(), Dir4::West);
        assert_eq!(Dir4::West.right(), Dir4::North);
        assert_eq!(Dir4::East.back(), Dir4::West);
    }

    #[test]
    fn grid_indexing_round_trips() {
        let mut g = Grid::filled(5, 3, 0u8);
        g.set(IVec2::new(4, 2), 7);
        assert_eq!(g.get(IVec2::new(4, 2)), Some(7));
        assert_eq!(g.get(IVec2::new(5, 2)), None);
        assert_eq!(g.pos(g.index(IVec2::new(3, 1))), IVec2::new(3, 1));
    }
}
