//! The maps of a report: frames of early and late checkpoints, a heat map of where agents
//! stood, and the words they said.

use super::*;

/// One map into `area`: tiles in the replay's colours (with `heat`, the share of maps in
/// which each open cell holds the heat character, from the floor's colour to the heat's),
/// agents as discs in their team colours.
fn draw_map(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    caption: &str,
    family: &str,
    size: (usize, usize),
    tiles: &str,
    agents: &[[i32; 3]],
    heat: Option<(&[f64], [u8; 3])>,
) -> Result<(), String> {
    use crate::frames::{team_colour, tile_colour};
    let (w, h) = size;
    let (pw, ph) = area.dim_in_pixel();
    let top = 22i32;
    let cell = ((pw as usize).min(((ph as i32 - top).max(1)) as usize * w / h.max(1)) / w.max(1))
        .max(1) as i32;
    let x0 = (pw as i32 - cell * w as i32) / 2;
    area.draw(&Text::new(
        caption.to_string(),
        (4, 2),
        (FONT, 13).into_font().color(&BLACK),
    ))
    .map_err(|e| e.to_string())?;
    let floor = tile_colour(family, '.');
    for (i, c) in tiles.chars().enumerate() {
        let (x, y) = ((i % w) as i32, (i / w) as i32);
        let base = tile_colour(family, c);
        let rgb = match heat {
            Some((share, to))
                if base != tile_colour(family, 'W') && base != tile_colour(family, '#') =>
            {
                let t = share.get(i).copied().unwrap_or(0.0).clamp(0.0, 1.0);
                let mix = |a: u8, b: u8| (f64::from(a) + (f64::from(b) - f64::from(a)) * t) as u8;
                [
                    mix(floor[0], to[0]),
                    mix(floor[1], to[1]),
                    mix(floor[2], to[2]),
                ]
            }
            _ => base,
        };
        let (px, py) = (x0 + x * cell, top + y * cell);
        area.draw(&Rectangle::new(
            [(px, py), (px + cell, py + cell)],
            RGBColor(rgb[0], rgb[1], rgb[2]).filled(),
        ))
        .map_err(|e| e.to_string())?;
    }
    for a in agents {
        let c = team_colour(a[2] as u8);
        let (px, py) = (x0 + a[0] * cell + cell / 2, top + a[1] * cell + cell / 2);
        area.draw(&Circle::new(
            (px, py),
            (cell * 2 / 5).max(2),
            RGBColor(c[0], c[1], c[2]).filled(),
        ))
        .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Bars: per word, each arm's share of the words its trained models said.
fn draw_word_use(
    path: &Path,
    words: &[(String, BTreeMap<String, u64>)],
    vocab: &[String],
) -> Result<(), String> {
    let series: Vec<(String, Vec<Option<(f64, f64)>>)> = words
        .iter()
        .map(|(arm, w)| {
            let total = w.values().sum::<u64>().max(1) as f64;
            let shares = vocab
                .iter()
                .map(|word| Some((w.get(word).copied().unwrap_or(0) as f64 / total, 0.0)))
                .collect();
            (arm.clone(), shares)
        })
        .collect();
    draw_grouped_bars(
        path,
        "Words the trained agents say (share of words said, last checkpoint, all seeds)",
        "share",
        vocab,
        &series,
        (0.0, 1.15),
        false,
    )
}

/// `maps_frames.png` (each arm's first seed, early and late checkpoint, at the chosen
/// steps) and, with a heat character, `maps_heat.png` (its share of the episodes' last maps,
/// over every seed and arena).
pub(super) fn draw_maps(
    exp: &Experiment,
    plan: &Plan,
    out: &Path,
    dir: &Path,
) -> Result<Vec<PathBuf>, String> {
    let Some(spec) = &exp.spec.maps else {
        return Ok(Vec::new());
    };
    let mut by_arm = Vec::new();
    for arm in &exp.spec.arms {
        let mut seeds = Vec::new();
        for r in plan.runs.iter().filter(|r| r.arm == arm.name) {
            seeds.push(crate::experiment::runner::read_maps(&out.join(&r.dir))?);
        }
        by_arm.push((arm.name.clone(), seeds));
    }
    let Some(sample) = by_arm
        .iter()
        .flat_map(|a| a.1.iter())
        .flat_map(|m| m.values())
        .next()
        .map(|m| m.maps.clone())
    else {
        return Ok(Vec::new());
    };
    let (w, h, family) = (sample.width, sample.height, sample.family.clone());
    if w == 0 || h == 0 {
        return Ok(Vec::new());
    }
    let mut files = Vec::new();
    let panel = 260u32;
    // Frames.
    let cols = spec.steps.len().max(1);
    let rows = by_arm.len() * 2;
    let p = dir.join("maps_frames.png");
    {
        let root = BitMapBackend::new(&p, (panel * cols as u32, panel * rows as u32 + 36))
            .into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&p, e))?;
        let root = root
            .titled(
                "Episodes of the trained models (first seed): early and late checkpoint",
                (FONT, 18),
            )
            .map_err(|e| err(&p, e))?;
        let areas = root.split_evenly((rows, cols));
        for (ai, (arm, seeds)) in by_arm.iter().enumerate() {
            for (k, label) in ["early", "late"].iter().enumerate() {
                let Some(m) = seeds.first().and_then(|s| s.get(*label)) else {
                    continue;
                };
                for (si, step) in spec.steps.iter().enumerate() {
                    let area = &areas[(ai * 2 + k) * cols + si];
                    if let Some(f) = m.maps.frames.iter().find(|f| f.step == *step) {
                        let caption = format!("{arm}, iteration {}, step {step}", m.iteration);
                        draw_map(area, &caption, &family, (w, h), &f.tiles, &f.agents, None)
                            .map_err(|e| err(&p, e))?;
                    }
                }
            }
        }
        root.present().map_err(|e| err(&p, e))?;
    }
    files.push(p);
    // Words said, late in training, per arm (families with talk).
    let words: Vec<(String, BTreeMap<String, u64>)> = by_arm
        .iter()
        .map(|(arm, seeds)| {
            let mut w: BTreeMap<String, u64> = BTreeMap::new();
            for m in seeds.iter().filter_map(|s| s.get("late")) {
                for (k, v) in &m.maps.words {
                    *w.entry(k.clone()).or_default() += v;
                }
            }
            (arm.clone(), w)
        })
        .collect();
    let vocab: Vec<String> = {
        let mut v: Vec<String> = words.iter().flat_map(|(_, w)| w.keys().cloned()).collect();
        v.sort();
        v.dedup();
        v
    };
    if !vocab.is_empty() {
        let p = dir.join("maps_words.png");
        draw_word_use(&p, &words, &vocab).map_err(|e| err(&p, e))?;
        files.push(p);
    }
    // Heat.
    if let Some(ch) = spec.heat {
        let to = crate::frames::tile_colour(&family, ch);
        let p = dir.join("maps_heat.png");
        let root = BitMapBackend::new(&p, (panel * by_arm.len() as u32 + 20, panel * 2 + 36))
            .into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&p, e))?;
        let what = if spec.heat_label.is_empty() {
            format!("'{ch}'")
        } else {
            spec.heat_label.clone()
        };
        let root = root
            .titled(
                &format!("Where {what} at the end of an episode (share of episodes, all seeds)"),
                (FONT, 18),
            )
            .map_err(|e| err(&p, e))?;
        let areas = root.split_evenly((2, by_arm.len()));
        // Every panel's shares first: the colour scale runs from none to the largest share
        // of any cell in any panel (named in each caption), so faint patterns show.
        let mut panels = Vec::new();
        for (ai, (arm, seeds)) in by_arm.iter().enumerate() {
            for (k, label) in ["early", "late"].iter().enumerate() {
                let maps: Vec<&crate::experiment::runner::RunMaps> =
                    seeds.iter().filter_map(|s| s.get(*label)).collect();
                let ends: Vec<&String> = maps.iter().flat_map(|m| m.maps.end.iter()).collect();
                let Some(first) = ends.first() else { continue };
                let mut share = vec![0.0; w * h];
                for e in &ends {
                    for (i, c) in e.chars().enumerate() {
                        if c == ch && i < share.len() {
                            share[i] += 1.0 / ends.len() as f64;
                        }
                    }
                }
                let it = maps.first().map_or(0, |m| m.iteration);
                let caption = format!("{arm}, {label} (iteration {it})");
                panels.push((k * by_arm.len() + ai, caption, (*first).clone(), share));
            }
        }
        let top = panels
            .iter()
            .flat_map(|p| p.3.iter().copied())
            .fold(0.0f64, f64::max)
            .max(1e-9);
        for (at, caption, first, share) in panels {
            let scaled: Vec<f64> = share.iter().map(|x| x / top).collect();
            let caption = format!("{caption}: full = {:.0}%", top * 100.0);
            draw_map(
                &areas[at],
                &caption,
                &family,
                (w, h),
                &first,
                &[],
                Some((&scaled, to)),
            )
            .map_err(|e| err(&p, e))?;
        }
        root.present().map_err(|e| err(&p, e))?;
        files.push(p.clone());
    }
    Ok(files)
}
