//! The colours of tiles and teams and the window's screen layout ([`Layout`]), here rather
//! than in the window so that tests can check a screenshot without the window build.

/// sRGB colour of a team (by index), shared by the window and the screenshot tests. The
/// colours are saturated and far from every tile colour.
pub fn team_colour(team: u8) -> [u8; 3] {
    const TEAMS: [[u8; 3]; 6] = [
        [230, 57, 70],
        [52, 120, 246],
        [255, 196, 0],
        [170, 70, 230],
        [0, 200, 150],
        [255, 120, 200],
    ];
    TEAMS[usize::from(team) % TEAMS.len()]
}

/// sRGB colour of a map character of `family` ([`FamilySpec::name`](crate::scene::FamilySpec::name)),
/// from the families' replay characters: the family's own colours
/// ([`Family::tile_colour`](crate::envs::family::Family::tile_colour)), then the shared
/// ones (floor, walls, apples, apple sites, river).
pub fn tile_colour(family: &str, c: char) -> [u8; 3] {
    const FLOOR: [u8; 3] = [38, 40, 46];
    const WALL: [u8; 3] = [105, 105, 115];
    let own = crate::envs::family::named(family).and_then(|f| f.tile_colour(c));
    own.unwrap_or(match c {
        '.' => FLOOR,
        '#' | 'W' => WALL,
        'A' => [70, 170, 60],
        ',' => [52, 66, 50],
        '~' => [40, 75, 120],
        _ => [20, 20, 24],
    })
}

/// Where the map sits in the window: the area left of the side panel, cells square.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Layout {
    /// Pixel column of the map's left edge.
    pub left: f32,
    /// Pixel row of the map's top edge.
    pub top: f32,
    /// Cell size in pixels.
    pub cell: f32,
}

/// Width of the window's right side panel (controls, inspector, curves), in logical pixels.
pub const PANEL_WIDTH: f32 = 420.0;
/// Height of the window's bottom strip (timeline, speech), in logical pixels.
pub const BOTTOM_HEIGHT: f32 = 150.0;

impl Layout {
    /// The layout of a `width` x `height` map in a window of `window` logical pixels, with
    /// the side panel on the right and the bottom strip below: the biggest square cells
    /// that fit, centred, with a margin.
    pub fn new(window: [f32; 2], width: usize, height: usize) -> Layout {
        let (w, h) = (width.max(1) as f32, height.max(1) as f32);
        let area = [
            (window[0] - PANEL_WIDTH).max(64.0),
            (window[1] - BOTTOM_HEIGHT).max(64.0),
        ];
        let margin = 16.0;
        let cell = ((area[0] - 2.0 * margin) / w)
            .min((area[1] - 2.0 * margin) / h)
            .floor()
            .max(2.0);
        Layout {
            left: ((area[0] - cell * w) / 2.0).floor(),
            top: ((area[1] - cell * h) / 2.0).floor(),
            cell,
        }
    }

    /// The pixel at the centre of map cell `(x, y)`.
    pub fn centre(&self, x: i32, y: i32) -> [f32; 2] {
        [
            self.left + (x as f32 + 0.5) * self.cell,
            self.top + (y as f32 + 0.5) * self.cell,
        ]
    }

    /// The map cell under pixel `p`, if any (`width` x `height` map).
    pub fn cell_at(&self, p: [f32; 2], width: usize, height: usize) -> Option<(i32, i32)> {
        let x = ((p[0] - self.left) / self.cell).floor();
        let y = ((p[1] - self.top) / self.cell).floor();
        (x >= 0.0 && y >= 0.0 && (x as usize) < width && (y as usize) < height)
            .then_some((x as i32, y as i32))
    }
}

/// The fill colour of the window's egui panels (screenshot tests look for it).
pub const PANEL_FILL: [u8; 3] = [30, 34, 44];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn team_colours_differ_from_every_tile_colour() {
        let chars: Vec<char> = ".#W A,~=bBXrRYpD/kLE?".chars().collect();
        for fam in ["CommonsHarvest", "CleanUp", "HideAndSeek", "Maze", "Matrix"] {
            for &c in &chars {
                let t = tile_colour(fam, c);
                for team in 0..6 {
                    let k = team_colour(team);
                    let d: i32 = (0..3)
                        .map(|i| (i32::from(t[i]) - i32::from(k[i])).abs())
                        .sum();
                    assert!(
                        d > 90,
                        "{fam} {c:?} is too close to team {team}: {t:?} {k:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_layout_fits_the_map_left_of_the_panel_and_finds_cells_back() {
        let l = Layout::new([1280.0, 800.0], 20, 10);
        assert!(l.cell >= 2.0);
        assert!(l.left + 20.0 * l.cell <= 1280.0 - PANEL_WIDTH);
        assert!(l.top + 10.0 * l.cell <= 800.0 - BOTTOM_HEIGHT);
        let c = l.centre(3, 7);
        assert_eq!(l.cell_at(c, 20, 10), Some((3, 7)));
        assert_eq!(l.cell_at([l.left - 1.0, c[1]], 20, 10), None);
        // 860 x 650 available, less margins: (860 - 32) / 20 = 41.4 and (650 - 32) / 10
        // = 61.8, so 41 px cells, centred: (860 - 820) / 2 = 20, (650 - 410) / 2 = 120.
        assert_eq!(l.cell, 41.0);
        assert_eq!(l.left, 20.0);
        assert_eq!(l.top, 120.0);
    }
}
