//! Keyboard and mouse.

use bevy::prelude::*;
use bevy::window::PrimaryWindow;

use super::{Feed, Viewer};

/// Keyboard and mouse: space pauses, the right arrow steps, digits pick agents, `C` takes
/// control of the selected agent (then arrows and the action buttons play it), `R`
/// restarts, `+`/`-` change the speed, a click on an agent selects it.
pub(crate) fn input(
    keys: Res<ButtonInput<KeyCode>>,
    mouse: Res<ButtonInput<MouseButton>>,
    window: Single<&Window, With<PrimaryWindow>>,
    wants: Option<Res<bevy_egui::input::EguiWantsInput>>,
    mut viewer: ResMut<Viewer>,
) {
    let typing = wants.as_ref().is_some_and(|w| w.wants_any_keyboard_input());
    let v = &mut *viewer;
    if !typing {
        if v.control {
            let pick = |words: &[&str]| {
                words
                    .iter()
                    .find_map(|w| v.info.actions.iter().position(|a| a == w))
                    .map(|i| i as u8)
            };
            let chosen = if keys.just_pressed(KeyCode::ArrowUp) {
                pick(&["forward", "north", "left"])
            } else if keys.just_pressed(KeyCode::ArrowDown) {
                pick(&["backward", "south", "right"])
            } else if keys.just_pressed(KeyCode::ArrowLeft) {
                pick(&["turn_left", "west", "step_left"])
            } else if keys.just_pressed(KeyCode::ArrowRight) {
                pick(&["turn_right", "east", "step_right"])
            } else if keys.just_pressed(KeyCode::Enter) {
                pick(&["noop", "cooperate", "stay"])
            } else {
                None
            };
            if chosen.is_some() {
                v.manual = chosen;
            }
        } else if keys.just_pressed(KeyCode::ArrowRight) {
            v.paused = true;
            v.step_requests += 1;
        } else if keys.just_pressed(KeyCode::ArrowLeft) && v.cursor > 0 {
            v.follow = false;
            v.paused = true;
            v.cursor -= 1;
        }
        if keys.just_pressed(KeyCode::Space) {
            v.paused = !v.paused;
        }
        if keys.just_pressed(KeyCode::KeyC)
            && v.selected.is_some()
            && matches!(v.feed, Feed::Live { .. })
        {
            v.control = !v.control;
            v.manual = None;
        }
        if keys.just_pressed(KeyCode::KeyR) {
            v.restart(None);
        }
        if keys.just_pressed(KeyCode::Equal) || keys.just_pressed(KeyCode::NumpadAdd) {
            v.speed = (v.speed * 2.0).min(960.0);
        }
        if keys.just_pressed(KeyCode::Minus) || keys.just_pressed(KeyCode::NumpadSubtract) {
            v.speed = (v.speed / 2.0).max(0.25);
        }
        const DIGITS: [KeyCode; 10] = [
            KeyCode::Digit1,
            KeyCode::Digit2,
            KeyCode::Digit3,
            KeyCode::Digit4,
            KeyCode::Digit5,
            KeyCode::Digit6,
            KeyCode::Digit7,
            KeyCode::Digit8,
            KeyCode::Digit9,
            KeyCode::Digit0,
        ];
        for (i, k) in DIGITS.iter().enumerate() {
            if keys.just_pressed(*k) {
                let n = v.shown().map_or(0, |f| f.agents.len());
                if i < n {
                    v.selected = Some(i as u16);
                }
            }
        }
    }
    let over_panel = window.cursor_position().is_some_and(|p| {
        p.x > window.width() - crate::frames::PANEL_WIDTH
            || p.y > window.height() - crate::frames::BOTTOM_HEIGHT
    });
    if mouse.just_pressed(MouseButton::Left)
        && !over_panel
        && let Some(p) = window.cursor_position()
        && let Some(frame) = v.shown()
    {
        let (w, h) = frame.board_size();
        let layout = crate::frames::Layout::new([window.width(), window.height()], w, h);
        if let Some((x, y)) = layout.cell_at([p.x, p.y], w, h) {
            let hit = frame
                .agents
                .iter()
                .find(|a| frame.board_pos(a) == Some([x, y]))
                .map(|a| a.slot);
            if hit.is_some() {
                v.selected = hit;
            }
        }
    }
}
