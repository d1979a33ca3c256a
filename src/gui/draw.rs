//! The board: tiles, vision cones, beams and agents as sprites from a pool, facing,
//! selection, catches and box locks as gizmos. Positions come from
//! [`Layout`](crate::frames::Layout), in window pixels, so the screenshot tests can find
//! every agent's cell.

use bevy::prelude::*;
use bevy::window::PrimaryWindow;

use super::Viewer;
use crate::frames::{Layout, team_colour, tile_colour};

/// Sprites reused frame after frame (tiles, cones, beams, agents).
#[derive(Resource, Default)]
pub(crate) struct SpritePool(Vec<Entity>);

/// Marks the pool's sprites.
#[derive(Component)]
pub(crate) struct BoardSprite;

/// The one camera: 2D, one world unit per window pixel (egui draws on it too).
pub(crate) fn spawn_camera(mut commands: Commands) {
    commands.spawn(Camera2d);
}

fn rgb(c: [u8; 3]) -> Color {
    Color::srgb_u8(c[0], c[1], c[2])
}

fn rgba(c: [u8; 3], a: f32) -> Color {
    Color::srgba_u8(c[0], c[1], c[2], (a * 255.0) as u8)
}

/// One filled square to draw this frame: centre in window pixels, side, colour, depth.
struct Quad {
    at: [f32; 2],
    size: f32,
    colour: Color,
    z: f32,
}

/// Draws the shown frame.
pub(crate) fn draw_board(
    mut commands: Commands,
    viewer: Res<Viewer>,
    window: Single<&Window, With<PrimaryWindow>>,
    mut pool: ResMut<SpritePool>,
    mut sprites: Query<(&mut Sprite, &mut Transform, &mut Visibility), With<BoardSprite>>,
    mut gizmos: Gizmos,
) {
    let (ww, wh) = (window.width(), window.height());
    // Window pixels (origin top left, y down) to world units (origin centre, y up).
    let world = |p: [f32; 2]| Vec2::new(p[0] - ww / 2.0, wh / 2.0 - p[1]);
    let mut quads: Vec<Quad> = Vec::new();
    if let Some(frame) = viewer.shown() {
        let (w, h) = frame.board_size();
        let layout = Layout::new([ww, wh], w, h);
        let c = layout.cell;
        let family = viewer.info.family.as_str();
        for y in 0..h as i32 {
            for x in 0..w as i32 {
                let t = frame.tile(x, y).unwrap_or('.');
                quads.push(Quad {
                    at: layout.centre(x, y),
                    size: c,
                    colour: rgb(tile_colour(family, t)),
                    z: 0.0,
                });
                // Locked boxes and ramps: an outline in white (hiders' lock) or black
                // (seekers' lock).
                let lock = match t {
                    'B' | 'R' => Some(Color::WHITE),
                    'X' | 'Y' => Some(Color::BLACK),
                    _ => None,
                };
                if let Some(col) = lock {
                    gizmos.rect_2d(world(layout.centre(x, y)), Vec2::splat(c * 0.8), col);
                }
            }
        }
        for a in &frame.agents {
            let selected = viewer.selected == Some(a.slot);
            let alpha = if selected { 0.30 } else { 0.13 };
            for s in &a.sight {
                quads.push(Quad {
                    at: layout.centre(s[0], s[1]),
                    size: c,
                    colour: rgba(team_colour(a.team), alpha),
                    z: 1.0,
                });
            }
            for b in &a.beam {
                quads.push(Quad {
                    at: layout.centre(b[0], b[1]),
                    size: c * 0.5,
                    colour: rgba([255, 240, 120], 0.7),
                    z: 2.0,
                });
            }
        }
        for a in &frame.agents {
            let Some(p) = frame.board_pos(a) else {
                continue;
            };
            let centre = layout.centre(p[0], p[1]);
            quads.push(Quad {
                at: centre,
                size: c * 0.7,
                colour: rgb(team_colour(a.team)),
                z: 3.0,
            });
            // Facing: a short bar from near the centre to the front edge (the centre pixel
            // keeps the team colour).
            if let Some(dir) = a.facing.and_then(facing_vector) {
                let from = world(centre) + dir * (c * 0.18);
                let to = world(centre) + dir * (c * 0.48);
                gizmos.line_2d(from, to, Color::srgb(0.05, 0.05, 0.05));
                gizmos.line_2d(
                    from + dir.perp() * 1.0,
                    to + dir.perp() * 1.0,
                    Color::srgb(0.05, 0.05, 0.05),
                );
            }
            // Rings outside the agent's square, capped for the big cells of matrix games.
            let ring = (c * 0.55).min(c * 0.35 + 12.0);
            if viewer.selected == Some(a.slot) {
                gizmos.circle_2d(world(centre), ring, Color::WHITE);
            }
            if a.seen {
                gizmos.circle_2d(world(centre), ring + 4.0, Color::srgb(1.0, 0.15, 0.1));
            }
        }
    }
    // Sync the pool: grow it, fill it, hide what is left.
    while pool.0.len() < quads.len() {
        let e = commands
            .spawn((
                BoardSprite,
                Sprite::from_color(Color::NONE, Vec2::ONE),
                Transform::default(),
                Visibility::Hidden,
            ))
            .id();
        pool.0.push(e);
    }
    for (i, &e) in pool.0.iter().enumerate() {
        let Ok((mut sprite, mut tf, mut vis)) = sprites.get_mut(e) else {
            continue;
        };
        match quads.get(i) {
            Some(q) => {
                sprite.color = q.colour;
                sprite.custom_size = Some(Vec2::splat(q.size));
                let p = world(q.at);
                tf.translation = Vec3::new(p.x, p.y, q.z);
                *vis = Visibility::Visible;
            }
            None => *vis = Visibility::Hidden,
        }
    }
}

/// The unit vector of a facing letter, in world axes (y up).
fn facing_vector(f: char) -> Option<Vec2> {
    match f {
        'N' => Some(Vec2::Y),
        'E' => Some(Vec2::X),
        'S' => Some(Vec2::NEG_Y),
        'W' => Some(Vec2::NEG_X),
        _ => None,
    }
}
