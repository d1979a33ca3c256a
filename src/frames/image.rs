//! A frame as a picture without the window: an RGB array in the viewer's colours (what
//! Gymnasium's `render_mode="rgb_array"` returns) and as plain text (`"ansi"`).

use super::{Frame, team_colour, tile_colour};

/// `frame` drawn with `cell` pixels per map cell, row-major RGB (`height * width * 3`
/// bytes), with its size `(width, height)`: tiles in the viewer's colours, each agent a
/// square of its team's colour inset in its cell (a removed agent is not drawn). Families
/// without a map (matrix games) draw one cell per agent, as the viewer does, its lower half
/// showing the last action (green for action 0, the cooperative one; red otherwise).
pub fn rgb(frame: &Frame, family: &str, cell: usize) -> ((usize, usize), Vec<u8>) {
    let cell = cell.max(2);
    let (w, h) = frame.board_size();
    let (pw, ph) = (w * cell, h * cell);
    let mut px = vec![0u8; pw * ph * 3];
    let mut fill = |x0: usize, y0: usize, x1: usize, y1: usize, c: [u8; 3]| {
        for y in y0..y1.min(ph) {
            for x in x0..x1.min(pw) {
                px[(y * pw + x) * 3..(y * pw + x) * 3 + 3].copy_from_slice(&c);
            }
        }
    };
    if frame.width > 0 {
        for y in 0..h {
            for x in 0..w {
                let t = frame.tile(x as i32, y as i32).unwrap_or(' ');
                let c = tile_colour(family, t);
                fill(x * cell, y * cell, (x + 1) * cell, (y + 1) * cell, c);
            }
        }
    }
    let inset = cell / 5;
    for a in &frame.agents {
        if a.removed {
            continue;
        }
        let Some([x, y]) = frame.board_pos(a) else {
            continue;
        };
        if x < 0 || y < 0 || x as usize >= w || y as usize >= h {
            continue;
        }
        let (x, y) = (x as usize * cell, y as usize * cell);
        fill(
            x + inset,
            y + inset,
            x + cell - inset,
            y + cell - inset,
            team_colour(a.team),
        );
        if frame.width == 0 {
            let act = if a.action_index == 0 {
                [70, 170, 60]
            } else {
                [200, 50, 50]
            };
            fill(
                x + inset,
                y + cell / 2,
                x + cell - inset,
                y + cell - inset,
                act,
            );
        }
    }
    ((pw, ph), px)
}

/// `frame` as text: the step, the map with each agent drawn as its slot number (0-9, then
/// letters), and one line per agent (team, action, reward, return).
pub fn ansi(frame: &Frame, teams: &[String]) -> String {
    let mut s = format!(
        "arena {} episode {} step {}{}\n",
        frame.arena,
        frame.episode,
        frame.step,
        if frame.end { " (ended)" } else { "" }
    );
    if frame.width > 0 {
        let mut tiles = frame.tiles.clone();
        for a in &frame.agents {
            if let (false, Some([x, y])) = (a.removed, a.pos)
                && x >= 0
                && y >= 0
                && (x as usize) < frame.width
                && (y as usize) < frame.height
            {
                tiles[y as usize * frame.width + x as usize] =
                    char::from_digit(u32::from(a.slot) % 36, 36).unwrap_or('?');
            }
        }
        for row in tiles.chunks(frame.width) {
            s.extend(row);
            s.push('\n');
        }
    }
    for a in &frame.agents {
        let team = teams.get(usize::from(a.team)).map_or("?", String::as_str);
        s.push_str(&format!(
            "agent {} team {team} action {} reward {} return {}{}\n",
            a.slot,
            a.action,
            a.reward,
            a.ret,
            if a.removed { " (removed)" } else { "" }
        ));
    }
    s
}
