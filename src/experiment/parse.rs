//! Finding, reading and checking experiment files: every error at the file's `line:col`, an
//! inline scene's too (the scene parser runs on the experiment's text with all but the scene
//! blanked, so its offsets are the file's).

use std::path::{Path, PathBuf};

use crate::scene::SceneError;
use crate::scene::locate::{Seg, line_col, locate, locate_value, value_span};
use crate::train::TrainSettings;
use crate::train::eval;

use super::spec::*;
use super::{arm_settings, expect};

/// Errors located in one experiment file.
struct Ctx<'a> {
    path: &'a Path,
    src: &'a str,
}

impl Ctx<'_> {
    fn at(&self, at: usize, message: String) -> ExperimentError {
        let (line, col) = line_col(self.src, at);
        ExperimentError::Invalid {
            path: self.path.to_path_buf(),
            line,
            col,
            message,
        }
    }
    /// At the value of `path` or its nearest written ancestor.
    fn value(&self, path: &[Seg<'_>], message: String) -> ExperimentError {
        for n in (0..=path.len()).rev() {
            if let Some(at) = locate_value(self.src, &path[..n]) {
                return self.at(at, message);
            }
        }
        self.at(0, message)
    }
    /// At the name of the field at `path` or its nearest written ancestor.
    fn field(&self, path: &[Seg<'_>], message: String) -> ExperimentError {
        for n in (0..=path.len()).rev() {
            if let Some(at) = locate(self.src, &path[..n]) {
                return self.at(at, message);
            }
        }
        self.at(0, message)
    }
}

/// The name of an experiment file (`ipd.experiment.ron` is `ipd`).
pub fn name_of(path: &Path) -> String {
    let f = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    f.strip_suffix(EXTENSION)
        .or_else(|| f.strip_suffix(".ron"))
        .unwrap_or(&f)
        .to_string()
}

/// The experiments in `dir` (every `*.experiment.ron`), sorted by name.
pub fn find(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().ends_with(EXTENSION))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// An experiment given as a file path or as the name of one in `dir`.
pub fn resolve(given: &str, dir: &Path) -> Result<PathBuf, ExperimentError> {
    let p = Path::new(given);
    if p.is_file() {
        return Ok(p.to_path_buf());
    }
    let named = dir.join(format!("{given}{EXTENSION}"));
    if named.is_file() {
        return Ok(named);
    }
    let known: Vec<String> = find(dir).iter().map(|p| name_of(p)).collect();
    Err(ExperimentError::Unknown(format!(
        "{given:?} is neither an experiment file nor a shipped experiment; expected a path to \
         a .experiment.ron file or one of: {} (in {})",
        if known.is_empty() {
            "(none found)".to_string()
        } else {
            known.join(", ")
        },
        dir.display()
    )))
}

/// Reads and checks an experiment file.
pub fn load(path: &Path) -> Result<Experiment, ExperimentError> {
    let src = crate::scene::read_text(path).map_err(|e| match e {
        SceneError::Io { io, .. } => ExperimentError::Io {
            path: path.to_path_buf(),
            io,
        },
        other => ExperimentError::Scene(other),
    })?;
    parse(&src, path)
}

/// Parses and checks an experiment from its text; `path` is used in errors and to find the
/// scene files it names (relative to its folder).
pub fn parse(src: &str, path: &Path) -> Result<Experiment, ExperimentError> {
    let src = src.strip_prefix('\u{feff}').unwrap_or(src);
    let cx = Ctx { path, src };
    let spec: ExperimentSpec =
        crate::scene::ron_options()
            .from_str(src)
            .map_err(|e| ExperimentError::Invalid {
                path: path.to_path_buf(),
                line: e.span.start.line.max(1),
                col: e.span.start.col.max(1),
                message: e.code.to_string(),
            })?;
    let ident = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    };
    // Settings: each layer's ranges.
    let layers: Vec<(Vec<Seg<'_>>, &TrainSettings)> = {
        let mut v = vec![
            (vec![Seg::Field("settings")], &spec.settings),
            (vec![Seg::Field("quick")], &spec.quick),
        ];
        for (i, a) in spec.arms.iter().enumerate() {
            v.push((
                vec![Seg::Field("arms"), Seg::Index(i), Seg::Field("settings")],
                &a.settings,
            ));
            v.push((
                vec![Seg::Field("arms"), Seg::Index(i), Seg::Field("quick")],
                &a.quick,
            ));
        }
        v
    };
    for (at, s) in &layers {
        if let Err(bad) = crate::train::limits::check_settings(s) {
            let mut p = at.clone();
            p.push(Seg::Field(bad.name));
            return Err(cx.value(
                &p,
                format!("{} is {}; expected {}", bad.name, bad.value, bad.expected),
            ));
        }
        if s.seed.is_some() {
            let mut p = at.clone();
            p.push(Seg::Field("seed"));
            return Err(cx.field(
                &p,
                "a seed in an experiment's settings; expected the seeds in `seeds: [...]`, \
                 which every arm runs"
                    .into(),
            ));
        }
    }
    if spec.arms.is_empty() {
        return Err(cx.value(
            &[Seg::Field("arms")],
            "no arms; expected at least one arm (name, settings)".into(),
        ));
    }
    for (i, a) in spec.arms.iter().enumerate() {
        let at = [Seg::Field("arms"), Seg::Index(i), Seg::Field("name")];
        if !ident(&a.name) {
            return Err(cx.value(
                &at,
                format!(
                    "arm name {:?}; expected lowercase letters, digits and _",
                    a.name
                ),
            ));
        }
        if spec.arms[..i].iter().any(|b| b.name == a.name) {
            return Err(cx.value(
                &at,
                format!("a second arm named {:?}; expected distinct names", a.name),
            ));
        }
    }
    if spec.seeds.is_empty() {
        return Err(cx.value(
            &[Seg::Field("seeds")],
            "no seeds; expected at least one (three or more to report a spread)".into(),
        ));
    }
    for (i, s) in spec.seeds.iter().enumerate() {
        if spec.seeds[..i].contains(s) {
            return Err(cx.value(
                &[Seg::Field("seeds"), Seg::Index(i)],
                format!("seed {s} twice; expected distinct seeds"),
            ));
        }
    }
    if spec.eval.arenas == 0 || spec.eval.every == 0 {
        let f = if spec.eval.arenas == 0 {
            "arenas"
        } else {
            "every"
        };
        return Err(cx.value(
            &[Seg::Field("eval"), Seg::Field(f)],
            format!("eval.{f} is 0; expected 1 or more"),
        ));
    }
    // Scenes.
    let main_scene = scene_of(&cx, &spec.scene, &[Seg::Field("scene")])?;
    let mut scenes = Vec::new();
    for (i, a) in spec.arms.iter().enumerate() {
        scenes.push(match &a.scene {
            Some(r) => scene_of(
                &cx,
                r,
                &[Seg::Field("arms"), Seg::Index(i), Seg::Field("scene")],
            )?,
            None => main_scene.clone(),
        });
    }
    // Partners, checked against every arm's scene that is evaluated.
    let mut partners = Vec::new();
    for (i, p) in spec.partners.iter().enumerate() {
        let at = [Seg::Field("partners"), Seg::Index(i)];
        let mut keys = eval::parse_partners(p).map_err(|e| cx.value(&at, e))?;
        if keys.len() != 1 {
            return Err(cx.value(&at, format!("{p:?}: expected one partner per string")));
        }
        let key = keys.remove(0);
        if partners.contains(&key) {
            return Err(cx.value(&at, format!("partner {p:?} twice")));
        }
        partners.push(key);
    }
    // The resolved settings of every arm (at both budgets) must make a run.
    for (i, a) in spec.arms.iter().enumerate() {
        for quick in [false, true] {
            let s = arm_settings(&spec, a, &scenes[i].scene, quick);
            let at = [Seg::Field("arms"), Seg::Index(i), Seg::Field("settings")];
            let budget = if quick { " with --quick" } else { "" };
            if let Err(bad) = crate::train::limits::check_settings(&s) {
                return Err(cx.value(
                    &at,
                    format!(
                        "arm {:?}{budget}: {} is {}; expected {}",
                        a.name, bad.name, bad.value, bad.expected
                    ),
                ));
            }
            if let (Some(g), Some(n)) = (s.group_size, s.arenas)
                && !n.is_multiple_of(g)
            {
                return Err(cx.value(
                    &at,
                    format!(
                        "arm {:?}{budget}: group_size {g} does not divide arenas {n}; expected \
                         a group size that divides the arenas",
                        a.name
                    ),
                ));
            }
            if let Some(m) = &s.model {
                crate::train::ModelChoice::parse(m)
                    .map_err(|e| cx.value(&at, format!("arm {:?}: model {e}", a.name)))?;
            }
        }
        if let Some(c) = &a.clone {
            let at = [Seg::Field("arms"), Seg::Index(i), Seg::Field("clone")];
            crate::train::imitate::check_teacher(&scenes[i].scene, &c.from)
                .map_err(|e| cx.value(&at, format!("arm {:?}: clone: {e}", a.name)))?;
            if c.episodes == 0 || c.epochs == 0 || c.quick_episodes == Some(0) {
                return Err(cx.value(
                    &at,
                    format!(
                        "arm {:?}: clone: episodes, quick_episodes and epochs must be at least 1",
                        a.name
                    ),
                ));
            }
        }
        if !a.skip_eval && !partners.is_empty() {
            let s = arm_settings(&spec, a, &scenes[i].scene, false);
            let learner = s.learner.unwrap_or_default().policy();
            let mut scene = scenes[i].scene.clone();
            if !scene.agents.iter().any(|x| x.policy == learner) {
                for x in &mut scene.agents {
                    x.policy = learner.into();
                }
            }
            eval::check_partners(&scene, &partners).map_err(|e| {
                cx.value(&[Seg::Field("partners")], format!("arm {:?}: {e}", a.name))
            })?;
        }
    }
    // Measures.
    for (i, m) in spec.measures.iter().enumerate() {
        let base = [Seg::Field("measures"), Seg::Index(i)];
        if !ident(&m.name) {
            return Err(cx.value(
                &[base[0], base[1], Seg::Field("name")],
                format!(
                    "measure name {:?}; expected lowercase letters, digits and _",
                    m.name
                ),
            ));
        }
        if spec.measures[..i].iter().any(|x| x.name == m.name) {
            return Err(cx.value(
                &[base[0], base[1], Seg::Field("name")],
                format!("a second measure named {:?}", m.name),
            ));
        }
        let from = [base[0], base[1], Seg::Field("from")];
        match &m.from {
            Source::Eval { partner, value } => {
                let key = eval::parse_partners(partner)
                    .ok()
                    .and_then(|mut k| (k.len() == 1).then(|| k.remove(0)));
                if key.as_ref().is_none_or(|k| !partners.contains(k)) {
                    return Err(cx.value(
                        &[from[0], from[1], from[2], Seg::Field("partner")],
                        format!(
                            "partner {partner:?} is not one of the experiment's partners; \
                             expected one of: {}",
                            spec.partners.join(", ")
                        ),
                    ));
                }
                let metric = value
                    .strip_prefix("metrics.")
                    .is_some_and(|t| !t.is_empty());
                if !metric && !EVAL_VALUES.contains(&value.as_str()) {
                    return Err(cx.value(
                        &[from[0], from[1], from[2], Seg::Field("value")],
                        format!(
                            "evaluation value {value:?}; expected metrics.NAME (the family's \
                             episode metrics) or one of: {}",
                            EVAL_VALUES.join(", ")
                        ),
                    ));
                }
                if value == "partner_return" && key.as_deref() == Some(eval::SELF) {
                    return Err(cx.value(
                        &[from[0], from[1], from[2], Seg::Field("value")],
                        "partner_return against self; expected return (self-play has no \
                         partner)"
                            .into(),
                    ));
                }
            }
            Source::Onset { value, hold, .. } => {
                check_series(
                    &cx,
                    value,
                    &[from[0], from[1], from[2], Seg::Field("value")],
                )?;
                if *hold == 0 {
                    return Err(cx.value(
                        &[from[0], from[1], from[2], Seg::Field("hold")],
                        "hold is 0; expected 1 or more iterations".into(),
                    ));
                }
            }
            Source::Train { value, at } => {
                check_series(
                    &cx,
                    value,
                    &[from[0], from[1], from[2], Seg::Field("value")],
                )?;
                let n = match at {
                    Window::First(n) | Window::Last(n) => *n,
                };
                if n == 0 {
                    return Err(cx.value(
                        &[from[0], from[1], from[2], Seg::Field("at")],
                        "a window of 0 iterations; expected 1 or more".into(),
                    ));
                }
            }
        }
    }
    for (i, f) in spec.figures.iter().enumerate() {
        let at = [Seg::Field("figures"), Seg::Index(i)];
        let (name, values): (&str, Vec<&String>) = match f {
            FigureSpec::Curves { name, values, .. } => (name, values.iter().collect()),
            FigureSpec::Phases {
                name,
                values,
                onsets,
                ..
            } => {
                for o in onsets {
                    let ok = spec
                        .measures
                        .iter()
                        .any(|m| &m.name == o && matches!(m.from, Source::Onset { .. }));
                    if !ok {
                        return Err(cx.value(
                            &at,
                            format!("{o:?} is not an Onset measure of the experiment"),
                        ));
                    }
                }
                (name, values.iter().collect())
            }
            FigureSpec::Tradeoff { name, x, y, .. } => (name, vec![x, y]),
        };
        if !ident(name) {
            return Err(cx.value(
                &at,
                format!("figure name {name:?}; expected lowercase letters, digits and _"),
            ));
        }
        for v in values {
            check_series(&cx, v, &at)?;
        }
    }
    if let Some(m) = &spec.maps {
        if m.arenas == 0 || m.arenas > 1024 {
            return Err(cx.value(
                &[Seg::Field("maps"), Seg::Field("arenas")],
                format!("maps.arenas is {}; expected 1 to 1024", m.arenas),
            ));
        }
        if m.steps.len() > 8 || m.steps.contains(&0) {
            return Err(cx.value(
                &[Seg::Field("maps"), Seg::Field("steps")],
                "maps.steps; expected 1 to 8 steps, each 1 or more".into(),
            ));
        }
        if spec
            .arms
            .iter()
            .any(|a| a.settings.algo == Some(crate::train::Algo::Cory))
        {
            return Err(cx.value(
                &[Seg::Field("maps")],
                "maps of a cory arm: its copies cannot be seated alone; expected no maps".into(),
            ));
        }
    }
    // The expected outcome.
    if spec.expect.is_empty() {
        return Err(cx.value(
            &[Seg::Field("expect")],
            "no expected outcome; expected checks such as \"self_play(adalign) >= 2.5\"".into(),
        ));
    }
    let checks = parse_checks(&cx, &spec, &spec.expect, &[Seg::Field("expect")])?;
    let mut also = Vec::new();
    for (k, claim) in spec.also.iter().enumerate() {
        let base = [Seg::Field("also"), Seg::Index(k)];
        if !ident(&claim.name) {
            return Err(cx.value(
                &[base[0], base[1], Seg::Field("name")],
                format!(
                    "claim name {:?}; expected lowercase letters, digits and _",
                    claim.name
                ),
            ));
        }
        if spec.also[..k].iter().any(|c| c.name == claim.name) {
            return Err(cx.value(
                &[base[0], base[1], Seg::Field("name")],
                format!(
                    "a second claim named {:?}; expected distinct names",
                    claim.name
                ),
            ));
        }
        if claim.expect.is_empty() {
            return Err(cx.value(
                &[base[0], base[1], Seg::Field("expect")],
                format!(
                    "claim {:?} has no checks; expected at least one",
                    claim.name
                ),
            ));
        }
        let at = [base[0], base[1], Seg::Field("expect")];
        also.push(parse_checks(&cx, &spec, &claim.expect, &at)?);
    }
    Ok(Experiment {
        path: path.to_path_buf(),
        name: name_of(path),
        spec,
        scenes,
        partners,
        checks,
        also,
    })
}

/// Parses the checks `texts` (found at `at` in the file: `expect`, or a further claim's),
/// each naming measures and arms of `spec`; an error points into the check's string.
fn parse_checks(
    cx: &Ctx<'_>,
    spec: &ExperimentSpec,
    texts: &[String],
    at: &[Seg<'_>],
) -> Result<Vec<expect::Check>, ExperimentError> {
    let src = cx.src;
    let arms: Vec<&str> = spec.arms.iter().map(|a| a.name.as_str()).collect();
    let measures: Vec<&str> = spec.measures.iter().map(|m| m.name.as_str()).collect();
    let mut checks = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        let mut path = at.to_vec();
        path.push(Seg::Index(i));
        let check = expect::parse(text, &measures, &arms).map_err(|(off, msg)| {
            let at = locate_value(src, &path).unwrap_or(0);
            // Inside the string: one past its opening quote (exact when it has no escapes).
            let inner = if src[at..].starts_with('"') {
                at + 1 + text.char_indices().nth(off).map_or(text.len(), |(b, _)| b)
            } else {
                at
            };
            cx.at(inner.min(src.len()), msg)
        })?;
        for (arm, measure) in check.uses() {
            let ai = arms.iter().position(|a| *a == arm).unwrap_or(0);
            let m = &spec.measures[measures.iter().position(|x| *x == measure).unwrap_or(0)];
            if matches!(m.from, Source::Eval { .. }) && spec.arms[ai].skip_eval {
                return Err(cx.value(
                    &path,
                    format!(
                        "{measure}({arm}) reads an evaluation, and arm {arm:?} has skip_eval; \
                         expected a training measure for it"
                    ),
                ));
            }
        }
        checks.push(check);
    }
    Ok(checks)
}

/// Checks the form of a training series name.
fn check_series(cx: &Ctx<'_>, value: &str, at: &[Seg<'_>]) -> Result<(), ExperimentError> {
    let ok = value == "return"
        || value.strip_prefix("return.").is_some_and(|t| !t.is_empty())
        || value
            .strip_prefix("metrics.")
            .is_some_and(|t| !t.is_empty())
        || value.strip_prefix("eval.").is_some_and(|t| t.contains('.'))
        || crate::metrics::plot::row_series().any(|s| s == value);
    if ok {
        Ok(())
    } else {
        Err(cx.value(
            at,
            format!(
                "series {value:?}; expected return, return.TEAM, metrics.NAME, \
                 eval.PARTNER.VALUE or one of {}",
                crate::metrics::plot::row_series()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ))
    }
}

/// Reads and checks a scene reference; an inline scene's errors are located in the
/// experiment file.
fn scene_of(cx: &Ctx<'_>, r: &SceneRef, at: &[Seg<'_>]) -> Result<ArmScene, ExperimentError> {
    match r {
        SceneRef::File(f) => {
            let p = cx.path.parent().unwrap_or(Path::new("")).join(f);
            if !p.is_file() {
                return Err(cx.value(
                    at,
                    format!(
                        "scene file {} does not exist; expected a path relative to the \
                         experiment's folder",
                        p.display()
                    ),
                ));
            }
            let text = crate::scene::read_text(&p)?;
            let scene = crate::load::parse_scene(&text, &p)?;
            Ok(ArmScene {
                scene,
                file: Some(p),
                text,
            })
        }
        SceneRef::Inline(_) => {
            let (start, end) = value_span(cx.src, at)
                .ok_or_else(|| cx.value(at, "cannot find the inline scene".into()))?;
            let body = &cx.src[start..end];
            // `Inline(name: ..., ...)`: the parentheses hold the scene's fields.
            let keep_from = body.find('(').map_or(start, |o| start + o);
            let keep_to = body.rfind(')').map_or(end, |c| start + c + 1);
            // The experiment's text with all but the scene blanked, newlines kept: the
            // scene parser's lines and columns are the experiment file's.
            let padded: String = cx
                .src
                .char_indices()
                .map(|(i, c)| {
                    if (keep_from..keep_to).contains(&i) || c == '\n' {
                        c
                    } else if c == '\t' {
                        '\t'
                    } else {
                        ' '
                    }
                })
                .collect();
            let scene = crate::load::parse_scene(&padded, cx.path)?;
            Ok(ArmScene {
                scene,
                file: None,
                text: format!(
                    "// Written by emergence reproduce from the inline scene of {}.\n{}\n",
                    cx.path.display(),
                    &cx.src[keep_from..keep_to]
                ),
            })
        }
    }
}
