//! The egui panels: controls, the agent inspector and curves on the right; the timeline,
//! messages and scene errors at the bottom; speech bubbles and agent numbers over the board.

use bevy::prelude::*;
use bevy::window::PrimaryWindow;
use bevy_egui::{EguiContexts, egui};
use egui_plot::{Legend, Line, Plot, PlotPoints};

use super::{Feed, Viewer};
use crate::frames::{AgentFrame, BOTTOM_HEIGHT, Layout, PANEL_FILL, PANEL_WIDTH, team_colour};

fn c32(c: [u8; 3]) -> egui::Color32 {
    egui::Color32::from_rgb(c[0], c[1], c[2])
}

/// Draws every panel of the frame.
pub(crate) fn panels(
    mut contexts: EguiContexts,
    mut viewer: ResMut<Viewer>,
    window: Single<&Window, With<PrimaryWindow>>,
    mut styled: Local<bool>,
) -> Result {
    let ctx = contexts.ctx_mut()?.clone();
    if !*styled {
        // Once: a style change makes egui ask for another frame.
        ctx.set_visuals(egui::Visuals::dark());
        ctx.all_styles_mut(|s| {
            s.visuals.panel_fill = c32(PANEL_FILL);
        });
        *styled = true;
    }
    let mut root = egui::Ui::new(
        ctx.clone(),
        "root".into(),
        egui::UiBuilder::new()
            .layer_id(egui::LayerId::background())
            .max_rect(ctx.viewport_rect()),
    );
    let v = &mut *viewer;
    egui::Panel::right("side")
        .exact_size(PANEL_WIDTH)
        .resizable(false)
        .show(&mut root, |ui| {
            egui::ScrollArea::vertical()
                .auto_shrink([false; 2])
                .show(ui, |ui| {
                    header(ui, v);
                    ui.separator();
                    controls(ui, v);
                    ui.separator();
                    inspector(ui, v);
                    ui.separator();
                    curves(ui, v);
                    ui.separator();
                    ui.label(
                        egui::RichText::new(
                            "keys: space pause · right arrow step · left arrow back · 1-9 pick agent · C control \
                             (then arrows, enter) · R restart · +/- speed · click an agent",
                        )
                        .small(),
                    );
                });
        });
    egui::Panel::bottom("timeline")
        .exact_size(BOTTOM_HEIGHT)
        .resizable(false)
        .show(&mut root, |ui| timeline(ui, v));
    bubbles(&ctx, v, [window.width(), window.height()]);
    Ok(())
}

fn header(ui: &mut egui::Ui, v: &Viewer) {
    ui.heading(&v.info.name);
    let source = match &v.feed {
        Feed::Live { cfg, .. } => format!("live · {}", cfg.scene.path.display()),
        Feed::Replay(r) => format!("replay · {}", r.path.display()),
        Feed::Tap { .. } => "training (arena 0, live)".to_string(),
    };
    ui.label(format!("{} · {source}", v.info.family));
    if let Some(f) = v.shown() {
        ui.label(format!(
            "arena {} · episode {} · step {}{} · seed {}",
            f.arena,
            f.episode,
            f.step,
            if f.end { " (ended)" } else { "" },
            v.seed
        ));
        let returns = f.team_returns(v.info.teams.len());
        ui.horizontal_wrapped(|ui| {
            for (t, (name, r)) in v.info.teams.iter().zip(&returns).enumerate() {
                ui.colored_label(c32(team_colour(t as u8)), format!("■ {name} {r:.2}"));
            }
        });
    }
}

fn controls(ui: &mut egui::Ui, v: &mut Viewer) {
    ui.horizontal(|ui| {
        let label = if v.paused { "▶ play" } else { "⏸ pause" };
        if ui.button(label).clicked() {
            v.paused = !v.paused;
        }
        if ui.button("step ▶|").clicked() {
            v.paused = true;
            v.step_requests += 1;
        }
        if matches!(v.feed, Feed::Live { .. }) && ui.button("⟲ restart").clicked() {
            v.restart(None);
        }
        if matches!(v.feed, Feed::Replay(_)) && ui.button("⏮ start").clicked() {
            v.cursor = 0;
        }
    });
    ui.add(
        egui::Slider::new(&mut v.speed, 0.25..=960.0)
            .logarithmic(true)
            .text("steps/s"),
    );
    if matches!(v.feed, Feed::Live { .. }) {
        ui.horizontal(|ui| {
            ui.label("seed");
            ui.add(egui::DragValue::new(&mut v.seed_edit));
            if ui.button("apply").clicked() {
                v.restart(None);
            }
        });
    }
    if v.arena_list.len() > 1 {
        let mut a = v.arena;
        egui::ComboBox::from_label("arena")
            .selected_text(a.to_string())
            .show_ui(ui, |ui| {
                for &i in &v.arena_list {
                    ui.selectable_value(&mut a, i, i.to_string());
                }
            });
        v.pick_arena(a);
    }
}

fn inspector(ui: &mut egui::Ui, v: &mut Viewer) {
    ui.strong("Agent inspector");
    let Some(frame) = v.shown() else {
        ui.label("no frame yet");
        return;
    };
    let slots: Vec<(u16, u8)> = frame.agents.iter().map(|a| (a.slot, a.team)).collect();
    let chosen = v
        .selected
        .and_then(|s| frame.agents.iter().find(|a| a.slot == s))
        .cloned();
    ui.horizontal_wrapped(|ui| {
        for (slot, team) in slots {
            let text = egui::RichText::new(format!("{slot}")).color(c32(team_colour(team)));
            if ui
                .selectable_label(v.selected == Some(slot), text)
                .clicked()
            {
                v.selected = Some(slot);
            }
        }
    });
    let Some(a) = chosen else {
        ui.label("click an agent, or press its number");
        return;
    };
    let team = v
        .info
        .teams
        .get(usize::from(a.team))
        .cloned()
        .unwrap_or_default();
    let role = v
        .info
        .roles
        .get(usize::from(a.role))
        .cloned()
        .unwrap_or_default();
    ui.label(format!(
        "agent {} · team {team} · role {role}\npolicy {} · adapter {}",
        a.slot,
        if a.policy.is_empty() { "?" } else { &a.policy },
        a.adapter.as_deref().unwrap_or("none")
    ));
    ui.label(format!(
        "chose {}{} · reward {:+.2} · return {:.2} · value {}",
        a.action,
        a.say
            .as_deref()
            .map(|w| format!(" and said {w:?}"))
            .unwrap_or_default(),
        a.reward,
        a.ret,
        a.value.map_or("-".to_string(), |x| format!("{x:.3}"))
    ));
    distribution(ui, &a, &v.info.actions);
    control(ui, v, &a);
    // With memory the text is the whole context, the newest turn last: kept in view.
    ui.label("observation text, as the policy read it (with memory: its whole context):");
    egui::ScrollArea::vertical()
        .id_salt("obs")
        .max_height(220.0)
        .stick_to_bottom(true)
        .show(ui, |ui| {
            let text = if a.text.is_empty() {
                "(none at step 0)"
            } else {
                a.text.as_str()
            };
            ui.label(egui::RichText::new(text).monospace().size(11.0));
        });
}

/// The action distribution as bars, the sampled action marked.
fn distribution(ui: &mut egui::Ui, a: &AgentFrame, actions: &[String]) {
    if a.probs.is_empty() {
        ui.label(format!(
            "scripted policy: no distribution (took {})",
            a.action
        ));
        return;
    }
    for (i, p) in a.probs.iter().enumerate() {
        let name = actions.get(i).map_or("?", String::as_str);
        let chosen = i == usize::from(a.action_index);
        ui.horizontal(|ui| {
            let label = egui::RichText::new(format!("{name:>11}"))
                .monospace()
                .size(11.0);
            ui.label(if chosen { label.strong() } else { label });
            let fill = if chosen {
                egui::Color32::from_rgb(240, 180, 40)
            } else {
                egui::Color32::from_rgb(90, 120, 170)
            };
            ui.add(
                egui::ProgressBar::new(*p)
                    .desired_width(200.0)
                    .fill(fill)
                    .text(format!("{p:.3}{}", if chosen { "  ◀ sampled" } else { "" })),
            );
        });
    }
}

fn control(ui: &mut egui::Ui, v: &mut Viewer, a: &AgentFrame) {
    if !matches!(v.feed, Feed::Live { .. }) {
        return;
    }
    let label = if v.control {
        "release control (C)"
    } else {
        "take control (C)"
    };
    if ui.button(label).clicked() {
        v.control = !v.control;
        v.manual = None;
    }
    if v.control {
        ui.label(format!("you play agent {}: pick its next action", a.slot));
        ui.horizontal_wrapped(|ui| {
            for (i, name) in v.info.actions.clone().iter().enumerate() {
                if ui.button(name).clicked() {
                    v.manual = Some(i as u8);
                }
            }
        });
        if v.refused {
            ui.colored_label(
                egui::Color32::from_rgb(240, 120, 80),
                "that action was not legal; the policy's choice was kept",
            );
        }
    }
}

/// A fixed (no zoom or drag) plot of `lines`: (name, colour, points).
fn plot(
    ui: &mut egui::Ui,
    id: &str,
    height: f32,
    lines: Vec<(String, Option<[u8; 3]>, Vec<[f64; 2]>)>,
) {
    Plot::new(id)
        .height(height)
        .legend(Legend::default())
        .allow_zoom(false)
        .allow_drag(false)
        .allow_scroll(false)
        .show(ui, |p| {
            for (name, colour, pts) in lines {
                let line = Line::new(name, PlotPoints::from(pts));
                p.line(match colour {
                    Some(c) => line.color(c32(c)),
                    None => line,
                });
            }
        });
}

fn curves(ui: &mut egui::Ui, v: &Viewer) {
    let teams = v.info.teams.len();
    // One line per team in its colour, from (x, team returns) points.
    let per_team = |points: Vec<(f64, Vec<f32>)>| -> Vec<(String, Option<[u8; 3]>, Vec<[f64; 2]>)> {
        (0..teams)
            .map(|t| {
                let pts = points
                    .iter()
                    .map(|(x, r)| [*x, f64::from(r.get(t).copied().unwrap_or(0.0))])
                    .collect();
                (v.info.teams[t].clone(), Some(team_colour(t as u8)), pts)
            })
            .collect()
    };
    ui.strong("Team returns this episode");
    let episode = v.shown().map(|f| f.episode);
    let this: Vec<(f64, Vec<f32>)> = v
        .frames
        .iter()
        .filter(|f| Some(f.episode) == episode)
        .map(|f| (f64::from(f.step), f.team_returns(teams)))
        .collect();
    plot(ui, "episode_returns", 120.0, per_team(this));
    if !v.episodes.is_empty() {
        ui.strong("Returns of finished episodes");
        let past = v
            .episodes
            .iter()
            .map(|e| (f64::from(e.episode), e.team_returns.clone()))
            .collect();
        plot(ui, "past_returns", 100.0, per_team(past));
        let mut names: Vec<&String> = v.episodes.iter().flat_map(|e| e.metrics.keys()).collect();
        names.sort();
        names.dedup();
        if !names.is_empty() {
            ui.strong(format!("{} metrics of finished episodes", v.info.family));
            let lines = names
                .into_iter()
                .map(|n| {
                    let pts = v
                        .episodes
                        .iter()
                        .filter_map(|e| e.metrics.get(n).map(|y| [f64::from(e.episode), *y]))
                        .collect();
                    (n.clone(), None, pts)
                })
                .collect();
            plot(ui, "family_metrics", 120.0, lines);
        }
    }
    if !v.training.is_empty() {
        ui.strong("Training curves (metrics.jsonl)");
        let lines = v
            .training
            .iter()
            .map(|(n, pts)| (n.clone(), None, pts.clone()))
            .collect();
        plot(ui, "training", 140.0, lines);
    }
}

fn timeline(ui: &mut egui::Ui, v: &mut Viewer) {
    if let Some(e) = &v.reload_error {
        ui.colored_label(
            egui::Color32::from_rgb(255, 110, 90),
            format!("scene error (the last good scene keeps running):\n{e}"),
        );
    } else if let Some(m) = &v.message {
        ui.label(m);
    }
    if v.frames.is_empty() {
        ui.label("waiting for the first step…");
        return;
    }
    let last = v.frames.len() - 1;
    let mut at = v.cursor.min(last);
    ui.horizontal(|ui| {
        if ui.button("◀").clicked() && at > 0 {
            at -= 1;
            v.paused = true;
        }
        if ui.button("▶").clicked() && at < last {
            at += 1;
        }
        let slider = ui.add(
            egui::Slider::new(&mut at, 0..=last)
                .text(format!("of {} frames", last + 1))
                .integer(),
        );
        if slider.changed() {
            v.paused = true;
        }
        if !matches!(v.feed, Feed::Replay(_)) && ui.button("follow").clicked() {
            at = last;
            v.follow = true;
        }
    });
    if at != v.cursor {
        v.cursor = at;
        v.follow = at == last && !matches!(v.feed, Feed::Replay(_));
    }
    if let Some(f) = v.frames.get(v.cursor) {
        let said: Vec<String> = f
            .agents
            .iter()
            .filter_map(|a| a.say.as_ref().map(|w| format!("{}: {w}", a.slot)))
            .collect();
        let acted: Vec<String> = f
            .agents
            .iter()
            .map(|a| format!("{}:{}", a.slot, a.action))
            .collect();
        ui.label(format!(
            "episode {} step {} · actions {}",
            f.episode,
            f.step,
            acted.join(" ")
        ));
        if !said.is_empty() {
            ui.label(format!("said: {}", said.join(" · ")));
        }
    }
}

/// Speech bubbles and agent numbers over the board (egui draws text; Bevy draws the board).
fn bubbles(ctx: &egui::Context, v: &Viewer, window: [f32; 2]) {
    let Some(frame) = v.shown() else {
        return;
    };
    let (w, h) = frame.board_size();
    let layout = Layout::new(window, w, h);
    let painter = ctx.layer_painter(egui::LayerId::new(
        egui::Order::Foreground,
        egui::Id::new("board_text"),
    ));
    let c = layout.cell;
    for a in &frame.agents {
        let Some(p) = frame.board_pos(a) else {
            continue;
        };
        let centre = layout.centre(p[0], p[1]);
        if c >= 14.0 {
            painter.text(
                egui::pos2(centre[0] - c * 0.5 + 2.0, centre[1] - c * 0.5 + 1.0),
                egui::Align2::LEFT_TOP,
                a.slot.to_string(),
                egui::FontId::proportional((c * 0.28).clamp(8.0, 13.0)),
                egui::Color32::WHITE,
            );
        }
        let word = a
            .say
            .clone()
            .or_else(|| (frame.width == 0).then(|| a.action.clone()));
        if let Some(word) = word {
            let anchor = egui::pos2(centre[0] + c * 0.3, centre[1] - c * 0.3);
            let galley = painter.layout_no_wrap(
                word,
                egui::FontId::proportional(13.0),
                egui::Color32::BLACK,
            );
            let size = galley.size() + egui::vec2(10.0, 6.0);
            let rect = egui::Rect::from_min_size(anchor - egui::vec2(0.0, size.y), size);
            painter.rect_filled(rect, 6.0, egui::Color32::from_rgb(250, 250, 235));
            painter.galley(
                rect.min + egui::vec2(5.0, 3.0),
                galley,
                egui::Color32::BLACK,
            );
        }
    }
}
