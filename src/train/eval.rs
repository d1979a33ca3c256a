//! Evaluation without learning: a trained model plays fixed partners on fresh seeds, and
//! what it earned and how it played are measured. A learning test, `train --eval-against`
//! and `emergence eval` all go through [`evaluate`].
//!
//! The evaluated model is a model folder or a checkpoint (`checkpoints/iter_K`; one model,
//! or a `team_NAME/` folder per team of a `--sharing separate` run). Against a partner
//! `P`, each team that learned takes the model in turn while every other team plays `P`; the
//! figures are the means over those seats. Against `self` every learning team plays the
//! model at once. Partners: any policy a scene may name (`always_defect`, `tit_for_tat`,
//! `random`, ...), `lm(model: "DIR")` or `lm:DIR` for another model folder, `mlp:DIR` for a
//! trained `mlp`, and `self`. A checkpoint of an `mlp` run (`mlp.json`) is seated as `mlp`.

use bevy::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::TrainError;
use crate::core::{ArenaAgents, ArenaPhase, EpisodeClock, RecordSystems, SimSchedule};
use crate::envs::dilemma::matrix::{MatrixGame, StrategyCounts};
use crate::headless::{RunConfig, build_app};
use crate::metrics::EpisodeLog;
use crate::policy::PolicyRegistry;
use crate::scene::Scene;

/// The partner that plays the model itself.
pub const SELF: &str = "self";

/// What to evaluate.
#[derive(Debug, Clone)]
pub struct EvalSpec {
    /// The scene (its teams on `lm` are the ones that learned).
    pub scene: Scene,
    /// The model folder or checkpoint.
    pub model: PathBuf,
    /// Arenas side by side.
    pub arenas: u32,
    /// Episodes per arena.
    pub episodes: u32,
    /// Seed of the evaluation's arenas (choose one training never used).
    pub seed: u64,
    /// Bevy worker threads.
    pub threads: Option<usize>,
    /// Where the language models play (`--device`); the CPU by default.
    pub device: candle_core::Device,
}

/// How the model did against one partner.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EvalResult {
    /// The partner's name as given.
    pub partner: String,
    /// Mean episode return of the model's agents.
    pub model_return: f64,
    /// The same per step of the episode (per round in a matrix game).
    pub model_return_per_step: f64,
    /// Mean episode return of the partner's agents (`None` against `self`).
    pub partner_return: Option<f64>,
    /// Matrix games: the model's agents' strategy (`first_cooperation`, `coop_after_coop`,
    /// `coop_after_defect`).
    pub strategy: BTreeMap<String, f64>,
    /// The family's episode metrics (`success`, `hider_success`, ...), the mean per episode
    /// (over the seatings, as the returns).
    #[serde(default)]
    pub metrics: BTreeMap<String, f64>,
    /// Episodes played.
    pub episodes: u64,
}

/// A partner for one team, `TEAM=POLICY` (`seekers=seeker`): the team and the policy, when
/// `partner` has that form (the team a plain name before the first `=`).
pub fn team_partner(partner: &str) -> Option<(&str, &str)> {
    let (team, policy) = partner.split_once('=')?;
    let plain = !team.is_empty()
        && team
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-');
    plain.then_some((team, policy))
}

/// The partners of a comma-separated list (`always_defect,tit_for_tat,self`), each checked:
/// a policy of the catalogue, `self`, a model folder as `lm(model: "DIR")` or `lm:DIR`, or
/// one of those for one team only, `TEAM=POLICY` (`seekers=seeker`: the model plays the
/// other teams against it, as Baker et al.'s transfer tests do; not `self`).
pub fn parse_partners(list: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for raw in split_partners(list) {
        let p = raw.trim();
        if p.is_empty() {
            return Err(format!("{list:?}: an empty partner name"));
        }
        if let Some((team, policy)) = team_partner(p) {
            let inner = parse_partners(policy)?;
            match inner.as_slice() {
                [one] if one != SELF => out.push(format!("{team}={one}")),
                _ => {
                    return Err(format!(
                        "{p:?}: expected TEAM=POLICY with one policy (not self), e.g. seekers=seeker"
                    ));
                }
            }
            continue;
        }
        let key = if p == SELF {
            SELF.to_string()
        } else if let Some(dir) = p.strip_prefix("lm:") {
            format!("lm:{dir}")
        } else if let Some(dir) = p.strip_prefix("mlp:") {
            if !Path::new(dir)
                .join(crate::policy::mlp::CONFIG_FILE)
                .is_file()
            {
                return Err(format!(
                    "{p:?}: {dir} is not an mlp model folder (no {})",
                    crate::policy::mlp::CONFIG_FILE
                ));
            }
            format!("mlp:{dir}")
        } else if p.starts_with("lm(") {
            let spec: crate::scene::PolicySpec =
                ron::from_str(p).map_err(|e| format!("{p:?}: {e}; expected lm(model: \"DIR\")"))?;
            spec.key()
        } else if crate::policy::catalogue().iter().any(|c| c.name == p) {
            p.to_string()
        } else {
            let names: Vec<&str> = crate::policy::catalogue()
                .iter()
                .map(|c| c.name)
                .filter(|n| *n != "lm")
                .collect();
            return Err(format!(
                "{p:?} is not a partner: expected self, lm(model: \"DIR\"), mlp:DIR or one of {}",
                names.join(", ")
            ));
        };
        if let Some(dir) = key.strip_prefix("lm:")
            && !Path::new(dir).is_dir()
        {
            return Err(format!("{p:?}: {dir} is not a model folder"));
        }
        if key == "lm" {
            return Err(format!(
                "{p:?}: name the partner's model folder, lm(model: \"DIR\"), or use self"
            ));
        }
        out.push(key);
    }
    Ok(out)
}

/// A partner's short name for metric keys: the policy's name, `self`, or `lm_FOLDER`
/// (`mlp_FOLDER`) for a model folder (its last path component).
pub fn label(partner: &str) -> String {
    if let Some((team, policy)) = team_partner(partner) {
        return format!("{team}={}", label(policy));
    }
    let folder = |kind: &str, dir: &str| {
        format!(
            "{kind}_{}",
            Path::new(dir)
                .file_name()
                .map_or_else(|| dir.to_string(), |f| f.to_string_lossy().into_owned())
        )
    };
    match (partner.strip_prefix("lm:"), partner.strip_prefix("mlp:")) {
        (Some(dir), _) => folder("lm", dir),
        (_, Some(dir)) => folder("mlp", dir),
        _ => partner.to_string(),
    }
}

/// Splits at commas outside parentheses and quotes.
fn split_partners(list: &str) -> Vec<&str> {
    let (mut depth, mut quoted, mut start) = (0i32, false, 0);
    let mut out = Vec::new();
    for (i, c) in list.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted => depth -= 1,
            ',' if !quoted && depth == 0 => {
                out.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&list[start..]);
    out
}

/// The teams that learn in a training run of `scene` whose learning policy is `learner`
/// (`lm` or `mlp`): those on it, or every team when none is (as [`super::train`] decides).
pub fn learning_teams(scene: &Scene, learner: &str) -> Vec<u8> {
    let on_lm: Vec<u8> = scene
        .agents
        .iter()
        .filter(|a| a.policy == learner)
        .map(|a| a.team)
        .collect();
    let mut teams: Vec<u8> = if on_lm.is_empty() {
        scene.agents.iter().map(|a| a.team).collect()
    } else {
        on_lm
    };
    teams.sort_unstable();
    teams.dedup();
    teams
}

/// The learning policy of a model folder or checkpoint: `mlp` when it (or a `team_NAME/` in
/// it) holds an `mlp.json`, else `lm`.
pub fn learner_of(model: &Path) -> &'static str {
    let mlp = |d: &Path| d.join(crate::policy::mlp::CONFIG_FILE).is_file();
    let in_team = std::fs::read_dir(model).ok().is_some_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("team_") && mlp(&e.path()))
    });
    if mlp(model) || in_team { "mlp" } else { "lm" }
}

/// The model folder that team `team` plays, as a registry key: the folder itself, or its
/// `team_NAME/`, as `lm:DIR` or `mlp:DIR`.
fn model_of_team(spec: &EvalSpec, team: u8) -> Result<String, TrainError> {
    let key = |dir: &Path| -> Option<String> {
        if dir.join(crate::policy::mlp::CONFIG_FILE).is_file() {
            Some(format!("mlp:{}", dir.display()))
        } else if dir.join("config.json").is_file() {
            Some(format!("lm:{}", dir.display()))
        } else {
            None
        }
    };
    if let Some(k) = key(&spec.model) {
        return Ok(k);
    }
    let name = spec
        .scene
        .team_names()
        .get(usize::from(team))
        .map(|s| s.to_string())
        .unwrap_or_default();
    let sub = spec.model.join(format!("team_{name}"));
    if let Some(k) = key(&sub) {
        return Ok(k);
    }
    if spec.model.join("agent_0").is_dir() {
        return Err(TrainError::Config(format!(
            "{}: a CORY checkpoint (agent_0/, agent_1/): its copies decide as a pioneer and an \
             observer together and cannot be seated alone; evaluate agent_0 or agent_1 as a \
             model folder",
            spec.model.display()
        )));
    }
    Err(TrainError::Config(format!(
        "{}: expected a model folder (config.json, or mlp.json for an mlp) or a checkpoint \
         with team_{name}/",
        spec.model.display()
    )))
}

/// Per slot, the strategy counts of finished matrix games.
#[derive(Resource, Default)]
struct SlotStrategies(Vec<StrategyCounts>);

fn tally_strategies(
    mut tally: ResMut<SlotStrategies>,
    arenas: Query<(&EpisodeClock, &MatrixGame, &ArenaAgents)>,
) {
    for (clock, game, members) in &arenas {
        if clock.phase != ArenaPhase::Ending {
            continue;
        }
        let n = members.entities().len().min(2);
        if tally.0.len() < n {
            tally.0.resize(n, StrategyCounts::default());
        }
        for slot in 0..n {
            let c = StrategyCounts::of(&game.history, slot);
            tally.0[slot].add(&c);
        }
    }
}

/// Checks partners ([`parse_partners`]' keys) against `scene` before a run spends anything:
/// each plays the scene's family, each model folder exists, and no two share a metric label.
pub fn check_partners(scene: &Scene, partners: &[String]) -> Result<(), String> {
    let family = scene.spec.family.name();
    let mut labels: Vec<String> = Vec::new();
    for whole in partners {
        let partner = match team_partner(whole) {
            Some((team, policy)) => {
                if !scene.team_names().contains(&team) {
                    return Err(format!(
                        "partner {whole}: the scene has no team {team:?} (its teams: {})",
                        scene.team_names().join(", ")
                    ));
                }
                policy
            }
            None => whole.as_str(),
        };
        if let Some(info) = crate::policy::catalogue()
            .iter()
            .find(|c| c.name == partner)
            && !info.plays(family)
        {
            return Err(format!(
                "partner {partner} does not play {family} (it plays {})",
                info.family_names().join(", ")
            ));
        }
        if let Some(dir) = partner
            .strip_prefix("lm:")
            .or_else(|| partner.strip_prefix("mlp:"))
            && !Path::new(dir).is_dir()
        {
            return Err(format!("partner {partner}: {dir} is not a model folder"));
        }
        let l = label(whole);
        if labels.contains(&l) {
            return Err(format!(
                "two partners are both named {l} in the metrics; give each model folder a \
                 different last name"
            ));
        }
        labels.push(l);
    }
    Ok(())
}

/// Plays `spec`'s model against `partner` ([`parse_partners`]) without learning.
pub fn evaluate(spec: &EvalSpec, partner: &str) -> Result<EvalResult, TrainError> {
    check_partners(&spec.scene, std::slice::from_ref(&partner.to_string()))
        .map_err(TrainError::Config)?;
    let learner = learner_of(&spec.model);
    let learners = learning_teams(&spec.scene, learner);
    // `TEAM=POLICY`: that team plays the policy, the model every other learning team.
    let fixed: Option<(u8, &str)> = team_partner(partner).and_then(|(team, policy)| {
        let t = spec.scene.team_names().iter().position(|n| *n == team)?;
        Some((t as u8, policy))
    });
    // Each seating: the scene's slot policies and which slots are the model's.
    let seatings: Vec<Vec<u8>> = if partner == SELF {
        vec![learners.clone()]
    } else if let Some((t, _)) = fixed {
        vec![learners.iter().copied().filter(|&x| x != t).collect()]
    } else {
        learners.iter().map(|&t| vec![t]).collect()
    };
    if seatings.iter().any(|s| s.is_empty()) {
        return Err(TrainError::Config(format!(
            "partner {partner}: the model plays no team then (its teams: the learning ones)"
        )));
    }
    let (mut model_sum, mut per_step_sum, mut partner_sum) = (0.0, 0.0, 0.0);
    let mut counts = StrategyCounts::default();
    let mut matrix = false;
    let mut episodes = 0u64;
    let mut metrics: BTreeMap<String, f64> = BTreeMap::new();
    for seated in &seatings {
        let mut scene = spec.scene.clone();
        for a in &mut scene.agents {
            if seated.contains(&a.team) {
                a.policy = model_of_team(spec, a.team)?;
            } else if let Some((t, policy)) = fixed {
                if a.team == t {
                    a.policy = policy.to_string();
                }
            } else if partner != SELF {
                a.policy = partner.to_string();
            } else if a.policy == learner {
                a.policy = model_of_team(spec, a.team)?;
            }
        }
        let mut run = RunConfig::new(scene.clone());
        run.arenas = spec.arenas;
        run.episodes = spec.episodes;
        run.seed = spec.seed;
        run.threads = spec.threads;
        run.device = spec.device.clone();
        let mut app = build_app(&run)?;
        app.insert_resource(SlotStrategies::default());
        app.add_systems(
            SimSchedule,
            tally_strategies.in_set(RecordSystems::Summarize),
        );
        app.world_mut().resource_mut::<EpisodeLog>().keep = usize::MAX;
        loop {
            app.update();
            if let Some(e) = app.world().resource::<PolicyRegistry>().failure() {
                return Err(crate::headless::RunError::Policy(e).into());
            }
            let p = app.world().resource::<crate::core::RunProgress>();
            if p.idle_arenas >= spec.arenas {
                break;
            }
        }
        let model_slots: Vec<usize> = scene
            .agents
            .iter()
            .enumerate()
            .filter(|(_, a)| seated.contains(&a.team))
            .map(|(i, _)| i)
            .collect();
        let log = app.world().resource::<EpisodeLog>();
        let n = log.episodes.len().max(1) as f64;
        let mean = |slots: &[usize], e: &crate::core::EpisodeEnded| -> f64 {
            let s: f64 = slots
                .iter()
                .filter_map(|&i| e.agent_returns.get(i))
                .map(|&r| f64::from(r))
                .sum();
            s / slots.len().max(1) as f64
        };
        let others: Vec<usize> = (0..scene.agents.len())
            .filter(|i| !model_slots.contains(i))
            .collect();
        model_sum += log
            .episodes
            .iter()
            .map(|e| mean(&model_slots, e))
            .sum::<f64>()
            / n;
        per_step_sum += log
            .episodes
            .iter()
            .map(|e| mean(&model_slots, e) / f64::from(e.steps.max(1)))
            .sum::<f64>()
            / n;
        partner_sum += log.episodes.iter().map(|e| mean(&others, e)).sum::<f64>() / n;
        episodes += log.episodes.len() as u64;
        for e in &log.episodes {
            for (k, v) in &e.metrics {
                *metrics.entry((*k).to_string()).or_default() += v / n;
            }
        }
        let tally = &app.world().resource::<SlotStrategies>().0;
        if !tally.is_empty() {
            matrix = true;
            for &s in &model_slots {
                if let Some(c) = tally.get(s) {
                    counts.add(c);
                }
            }
        }
    }
    let k = seatings.len().max(1) as f64;
    Ok(EvalResult {
        partner: partner.to_string(),
        model_return: model_sum / k,
        model_return_per_step: per_step_sum / k,
        partner_return: (partner != SELF).then_some(partner_sum / k),
        strategy: if matrix {
            counts
                .metrics()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect()
        } else {
            BTreeMap::new()
        },
        metrics: metrics.into_iter().map(|(name, v)| (name, v / k)).collect(),
        episodes,
    })
}

/// One arena's map at the end of a step, as the replay draws it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MapFrame {
    /// The step (1 for the first).
    pub step: u32,
    /// One character per cell, row-major.
    pub tiles: String,
    /// Every agent still on the map: `[x, y, team]`.
    pub agents: Vec<[i32; 3]>,
}

/// Maps of a model in self-play: [`play_maps`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PlayedMaps {
    /// Map width.
    pub width: usize,
    /// Map height.
    pub height: usize,
    /// The family (for the tile colours).
    pub family: String,
    /// Every arena's map when its episode ended.
    pub end: Vec<String>,
    /// Arena 0 at the steps asked for (those its episode reached).
    pub frames: Vec<MapFrame>,
    /// Words said (families with talk), over every arena and step.
    #[serde(default)]
    pub words: BTreeMap<String, u64>,
}

/// Plays `spec`'s model against itself (every learning team on it) for one episode of each
/// arena, and keeps every arena's last map and arena 0's map at `steps`.
pub fn play_maps(spec: &EvalSpec, steps: &[u32]) -> Result<PlayedMaps, TrainError> {
    use crate::frames::{Frame, FrameContext};
    let learner = learner_of(&spec.model);
    let learners = learning_teams(&spec.scene, learner);
    let mut scene = spec.scene.clone();
    for a in &mut scene.agents {
        if learners.contains(&a.team) {
            a.policy = model_of_team(spec, a.team)?;
        }
    }
    let mut run = RunConfig::new(scene.clone());
    run.arenas = spec.arenas;
    run.episodes = 1;
    run.seed = spec.seed;
    run.threads = spec.threads;
    run.device = spec.device.clone();
    let mut app = build_app(&run)?;
    let ctx = FrameContext::new(app.world())
        .ok_or_else(|| TrainError::Config("the scene's world has no text format".into()))?;
    let mut end: Vec<Option<String>> = vec![None; spec.arenas as usize];
    let mut frames = Vec::new();
    let mut words: BTreeMap<String, u64> = BTreeMap::new();
    let (mut width, mut height) = (0, 0);
    loop {
        app.update();
        if let Some(e) = app.world().resource::<PolicyRegistry>().failure() {
            return Err(crate::headless::RunError::Policy(e).into());
        }
        let world = app.world();
        let entities = &world.resource::<crate::core::Arenas>().entities;
        for (a, slot) in end.iter_mut().enumerate() {
            let (Some(&entity), None) = (entities.get(a), &slot) else {
                continue;
            };
            let (Some(clock), Some(members)) = (
                world.get::<EpisodeClock>(entity),
                world.get::<ArenaAgents>(entity),
            ) else {
                continue;
            };
            for &e in members.entities() {
                if let Some(w) = crate::frames::said(world, e) {
                    *words.entry(w).or_default() += 1;
                }
            }
            // A whole frame (map, agents, their prompts and sight) only where one is kept.
            let ended = matches!(clock.phase, ArenaPhase::PendingReset | ArenaPhase::Idle)
                && clock.step > 0;
            let framed = a == 0
                && steps.contains(&clock.step)
                && frames
                    .last()
                    .is_none_or(|l: &MapFrame| l.step != clock.step);
            if !ended && !framed {
                continue;
            }
            let Some(f) = Frame::capture(world, &ctx, a as u32) else {
                continue;
            };
            (width, height) = (f.width, f.height);
            let lite = MapFrame {
                step: f.step,
                tiles: f.tiles.iter().collect(),
                agents: f
                    .agents
                    .iter()
                    .filter(|x| !x.removed)
                    .filter_map(|x| x.pos.map(|p| [p[0], p[1], i32::from(x.team)]))
                    .collect(),
            };
            if ended {
                *slot = Some(lite.tiles.clone());
            }
            if framed {
                frames.push(lite);
            }
        }
        let p = app.world().resource::<crate::core::RunProgress>();
        if p.idle_arenas >= spec.arenas {
            break;
        }
    }
    Ok(PlayedMaps {
        width,
        height,
        family: scene.spec.family.name().to_string(),
        end: end.into_iter().flatten().collect(),
        frames,
        words,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partners_are_split_outside_parentheses_and_checked() {
        assert_eq!(
            parse_partners("always_defect, tit_for_tat,self").expect("ok"),
            vec!["always_defect", "tit_for_tat", "self"]
        );
        let dir = tempfile::tempdir().expect("tmp");
        let d = dir.path().display().to_string();
        let list = format!("lm(model: \"{d}\"),random");
        assert_eq!(
            parse_partners(&list).expect("ok"),
            vec![format!("lm:{d}"), "random".to_string()]
        );
        let err = parse_partners("always_defekt").unwrap_err();
        assert!(err.contains("always_defect, "), "{err}");
        assert!(parse_partners("lm:/no/such/folder").is_err());
        assert!(parse_partners("a,,b").is_err());
        assert!(parse_partners("lm").is_err());
    }
}
