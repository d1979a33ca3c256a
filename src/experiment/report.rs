//! An experiment's report: every measure per arm (mean ± sample standard deviation over
//! seeds, and each seed's value), the verdict of each expected check, the setup and the
//! commands to rerun one arm; written as `report.md` and `report.json` (the same content;
//! its `timing` object holds everything that differs between two invocations).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::runner::{Budget, FinalEval, Plan, read_final_eval};
use super::{Experiment, Source, Threshold, Window};
use crate::train::eval;

/// Mean, spread and per-seed values of one measure for one arm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stat {
    /// Mean over the seeds that have a value (`None`: none has).
    pub mean: Option<f64>,
    /// Sample standard deviation (n - 1; 0 for one seed).
    pub std: Option<f64>,
    /// Per seed, in the plan's seed order.
    pub per_seed: Vec<Option<f64>>,
}

impl Stat {
    /// From per-seed values.
    pub fn of(per_seed: Vec<Option<f64>>) -> Stat {
        let v: Vec<f64> = per_seed.iter().flatten().copied().collect();
        let ms = mean_sd(&v);
        Stat {
            mean: ms.map(|m| m.0),
            std: ms.map(|m| m.1),
            per_seed,
        }
    }
}

/// The mean and the sample standard deviation (n - 1; 0 for one value) of `v`, `None` if
/// it is empty.
pub fn mean_sd(v: &[f64]) -> Option<(f64, f64)> {
    if v.is_empty() {
        return None;
    }
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    let sd = if v.len() < 2 {
        0.0
    } else {
        (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    };
    Some((m, sd))
}

/// One measure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasureReport {
    /// Its name.
    pub name: String,
    /// What it is.
    pub about: String,
    /// Where it comes from, in words.
    pub source: String,
    /// Per arm.
    pub arms: BTreeMap<String, Stat>,
}

/// One expected check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckReport {
    /// As written.
    pub check: String,
    /// Left side's value on the means.
    pub lhs: Option<f64>,
    /// Right side's value on the means.
    pub rhs: Option<f64>,
    /// `reproduced`, `not reproduced`, or `no value` (a measure was missing).
    pub verdict: String,
    /// Seeds on which the check holds (judged on that seed's values alone).
    pub seeds_holding: usize,
    /// Seeds judged.
    pub seeds: usize,
}

/// A further claim's checks and verdict (`also:` in the experiment file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimReport {
    /// Its name.
    pub name: String,
    /// The claim.
    pub claim: String,
    /// Its checks.
    pub checks: Vec<CheckReport>,
    /// `reproduced` when every one of its checks is, else `not reproduced`.
    pub verdict: String,
}

/// How much experience one arm's runs saw: means over its seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScaleReport {
    /// The arm.
    pub arm: String,
    /// Iterations (updates) a seed.
    pub iterations: f64,
    /// Episodes a seed (iterations x arenas).
    pub episodes: f64,
    /// Agent-steps a seed: the learning agents' decisions the updates read.
    pub agent_steps: f64,
}

/// One arm's setup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArmReport {
    /// Name.
    pub name: String,
    /// What it is.
    pub about: String,
    /// The settings its runs trained with (as given; the algorithm's defaults fill the rest,
    /// see each run's `config.json`).
    pub settings: crate::train::TrainSettings,
    /// The command that reruns its first seed alone, from the report folder.
    pub command: String,
    /// The clone its runs started from (absent: the model's initial weights).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clone: Option<super::CloneSpec>,
    /// Per seed, the clone's agreement with its teacher on held-out decisions (from
    /// `clones/ARM/seed_S/imitation.json`; empty without a clone).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clone_agreement: Vec<f64>,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The experiment's name.
    pub experiment: String,
    /// The claim.
    pub claim: String,
    /// Its source.
    pub source: String,
    /// Notes on the setup.
    pub notes: String,
    /// The budget, in words.
    pub budget: String,
    /// Whether this is the full budget.
    pub full_budget: bool,
    /// The seeds.
    pub seeds: Vec<u64>,
    /// The partners (labels).
    pub partners: Vec<String>,
    /// The arms.
    pub arms: Vec<ArmReport>,
    /// Every measure.
    pub measures: Vec<MeasureReport>,
    /// Every expected check.
    pub checks: Vec<CheckReport>,
    /// `reproduced` when every check is, else `not reproduced`.
    pub verdict: String,
    /// Further claims, each with its own checks and verdict.
    #[serde(default)]
    pub also: Vec<ClaimReport>,
    /// Each arm's experience a seed, in arm order.
    #[serde(default)]
    pub scale: Vec<ScaleReport>,
    /// The paper's own experience a seed, in words (empty: not given).
    #[serde(default)]
    pub paper_scale: String,
    /// Timings (what differs between two invocations).
    pub timing: Timing,
}

/// Timings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Per run (`ARM/seed_S`), training and final evaluation seconds.
    pub run_seconds: BTreeMap<String, f64>,
    /// Their sum: the experiment's cost run one at a time.
    pub total_run_seconds: f64,
    /// Wall seconds of the invocations that ran something (`OUT/wall.json`).
    pub wall_seconds: f64,
    /// How many invocations those were (more than one: the experiment was resumed).
    pub invocations: usize,
}

/// A run's `metrics.jsonl` rows.
pub fn read_rows(dir: &Path) -> Result<Vec<Map<String, Value>>, String> {
    crate::metrics::plot::read_rows(&dir.join("metrics.jsonl")).map_err(|e| e.to_string())
}

/// A training series' value in one row (see [`Source::Train`]); `None` where the row has
/// none (evaluations are in some rows only).
pub fn series(row: &Map<String, Value>, name: &str) -> Option<f64> {
    let num = |v: Option<&Value>| v.and_then(Value::as_f64);
    if name == "return" {
        let m = row.get("team_returns")?.as_object()?;
        let v: Vec<f64> = m.values().filter_map(Value::as_f64).collect();
        return (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    }
    if let Some(t) = name.strip_prefix("return.") {
        return num(row.get("team_returns")?.get(t));
    }
    if let Some(m) = name.strip_prefix("metrics.") {
        return num(row.get("metrics")?.get(m));
    }
    if let Some(e) = name.strip_prefix("eval.") {
        return num(row.get("eval")?.get(e));
    }
    num(row.get(name))
}

/// The `(iteration, value)` points of a series in a run's rows.
pub fn points(rows: &[Map<String, Value>], name: &str) -> Vec<(f64, f64)> {
    rows.iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let x = r
                .get("iteration")
                .and_then(Value::as_f64)
                .unwrap_or((i + 1) as f64);
            series(r, name).map(|y| (x, y))
        })
        .collect()
}

/// Where a measure comes from, in words.
fn describe(source: &Source) -> String {
    match source {
        Source::Eval { partner, value } => {
            format!("final checkpoint against {partner}: {value}")
        }
        Source::Onset { value, stays, hold } => {
            let (side, x) = match stays {
                Threshold::Above(x) => ("above", x),
                Threshold::Below(x) => ("below", x),
            };
            format!("training: first iteration from which {value} stays {side} {x} for {hold}")
        }
        Source::Train { value, at } => match at {
            Window::First(n) => format!("training: {value}, mean of the first {n} iterations"),
            Window::Last(n) => format!("training: {value}, mean of the last {n} iterations"),
        },
    }
}

/// One measure of one run: its rows and its final evaluation (`dir` names it in errors).
pub fn measure_in(
    rows: &[Map<String, Value>],
    final_eval: Option<&FinalEval>,
    dir: &Path,
    source: &Source,
) -> Result<Option<f64>, String> {
    match source {
        Source::Eval { partner, value } => {
            let fe = final_eval
                .ok_or_else(|| format!("{}: no {}", dir.display(), super::runner::FINAL_EVAL))?;
            let label = eval::parse_partners(partner)
                .ok()
                .and_then(|k| k.first().map(|k| eval::label(k)))
                .unwrap_or_else(|| partner.clone());
            Ok(fe.partners.get(&label).and_then(|v| v.get(value)).copied())
        }
        Source::Onset { value, stays, hold } => Ok(onset(&points(rows, value), *stays, *hold)),
        Source::Train { value, at } => {
            let v: Vec<f64> = points(rows, value).into_iter().map(|p| p.1).collect();
            let w: &[f64] = match at {
                Window::First(n) => &v[..v.len().min(*n as usize)],
                Window::Last(n) => &v[v.len().saturating_sub(*n as usize)..],
            };
            Ok((!w.is_empty()).then(|| w.iter().sum::<f64>() / w.len() as f64))
        }
    }
}

/// The first `x` from which `pts` stay past `stays` for `hold` points in a row.
pub fn onset(pts: &[(f64, f64)], stays: Threshold, hold: u32) -> Option<f64> {
    let hold = hold.max(1) as usize;
    let mut run = 0;
    for (i, &(_, y)) in pts.iter().enumerate() {
        if stays.passed_by(y) {
            run += 1;
            if run == hold {
                return Some(pts[i + 1 - hold].0);
            }
        } else {
            run = 0;
        }
    }
    None
}

/// The rerun command of one run, as `emergence train` flags.
pub fn command(scene: &Path, out: &Path, settings: &crate::train::TrainSettings) -> String {
    let mut parts = vec![
        "emergence train".to_string(),
        scene.display().to_string(),
        format!("--out {}", out.display()),
    ];
    parts.extend(flags(settings));
    parts.join(" ")
}

/// The flags that give `settings` (`--name value` for each one set).
fn flags(settings: &crate::train::TrainSettings) -> Vec<String> {
    let v = serde_json::to_value(settings).unwrap_or_default();
    settings
        .given()
        .into_iter()
        .filter_map(|flag| {
            let field = flag.trim_start_matches("--").replace('-', "_");
            let value = match v.get(&field)? {
                Value::String(s) => clap_value(&field, s),
                x => x.to_string(),
            };
            Some(format!("{flag} {value}"))
        })
        .collect()
}

/// `emergence imitate`'s command that makes clone `c` of a run with `settings` into `out`:
/// the run's seed, learner, model, text and memory, and the clone's own flags.
pub fn imitate_command(
    scene: &Path,
    out: &Path,
    c: &super::CloneSpec,
    settings: &crate::train::TrainSettings,
) -> String {
    let mut parts = vec![
        "emergence imitate".to_string(),
        scene.display().to_string(),
        format!("--from {}", c.from),
        format!("--out {}", out.display()),
    ];
    parts.extend(flags(&crate::train::TrainSettings {
        seed: settings.seed,
        model: settings.model.clone(),
        learner: Some(settings.learner.unwrap_or_default()),
        text: settings.text,
        memory: settings.memory,
        lr: c.lr,
        epochs: Some(c.epochs as usize),
        ..Default::default()
    }));
    parts.push(format!("--episodes {}", c.episodes));
    if c.dagger > 0 {
        parts.push(format!("--dagger {}", c.dagger));
    }
    if c.words {
        parts.push("--words".into());
    }
    parts.push("--play-episodes 0".into());
    parts.join(" ")
}

/// A clone's `imitation.json`, where it was made.
fn clone_record(dir: &Path) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(dir.join("imitation.json")).ok()?).ok()
}

/// A serde name of an enum setting as its flag's value.
fn clap_value(field: &str, serde_name: &str) -> String {
    let flag = match field {
        "algo" => flag_name::<crate::train::Algo>(serde_name),
        "learner" => flag_name::<crate::train::LearnerKind>(serde_name),
        "sharing" => flag_name::<crate::train::Sharing>(serde_name),
        "text" => flag_name::<crate::scene::TextStyle>(serde_name),
        _ => None,
    };
    flag.unwrap_or_else(|| serde_name.to_string())
}

/// The flag value of the variant of `T` whose serde name is `serde_name`.
fn flag_name<T: clap::ValueEnum + Serialize>(serde_name: &str) -> Option<String> {
    T::value_variants()
        .iter()
        .find(|v| json_name(*v) == serde_name)
        .and_then(|v| v.to_possible_value())
        .map(|p| p.get_name().to_string())
}

fn json_name<T: Serialize>(x: &T) -> String {
    match serde_json::to_value(x) {
        Ok(Value::String(s)) => s,
        _ => String::new(),
    }
}

/// Aggregates the runs of `plan` in `out` into a report.
pub fn aggregate(
    exp: &Experiment,
    plan: &Plan,
    out: &Path,
    wall_seconds: f64,
) -> Result<Report, String> {
    let spec = &exp.spec;
    // Each run's rows and final evaluation, read once.
    let mut runs = Vec::new();
    for r in &plan.runs {
        let dir = out.join(&r.dir);
        runs.push((read_rows(&dir)?, read_final_eval(&dir).ok(), dir));
    }
    let mut measures = Vec::new();
    for m in &spec.measures {
        let mut arms = BTreeMap::new();
        for arm in &spec.arms {
            let mut per_seed = Vec::new();
            for &seed in &plan.seeds {
                let Some(i) = plan
                    .runs
                    .iter()
                    .position(|r| r.arm == arm.name && r.seed == seed)
                else {
                    per_seed.push(None);
                    continue;
                };
                let (rows, fe, dir) = &runs[i];
                let v = if matches!(m.from, Source::Eval { .. }) && !plan.runs[i].evaluated {
                    None
                } else {
                    measure_in(rows, fe.as_ref(), dir, &m.from)?
                };
                per_seed.push(v.filter(|x| x.is_finite()));
            }
            arms.insert(arm.name.clone(), Stat::of(per_seed));
        }
        measures.push(MeasureReport {
            name: m.name.clone(),
            about: m.about.clone(),
            source: describe(&m.from),
            arms,
        });
    }
    let value_of = |seed: Option<usize>| {
        let measures = &measures;
        move |measure: &str, arm: &str| -> Option<f64> {
            let s = measures.iter().find(|m| m.name == measure)?.arms.get(arm)?;
            match seed {
                None => s.mean,
                Some(i) => s.per_seed.get(i).copied().flatten(),
            }
        }
    };
    let judge = |list: &[super::expect::Check]| -> Vec<CheckReport> {
        list.iter()
            .map(|c| {
                let on_means = c.judge(&value_of(None));
                let seeds_holding = (0..plan.seeds.len())
                    .filter(|&i| c.judge(&value_of(Some(i))).is_some_and(|(_, _, h)| h))
                    .count();
                CheckReport {
                    check: c.text.clone(),
                    lhs: on_means.map(|x| x.0),
                    rhs: on_means.map(|x| x.1),
                    verdict: match on_means {
                        Some((_, _, true)) => "reproduced",
                        Some((_, _, false)) => "not reproduced",
                        None => "no value",
                    }
                    .to_string(),
                    seeds_holding,
                    seeds: plan.seeds.len(),
                }
            })
            .collect()
    };
    let checks = judge(&exp.checks);
    let verdict = verdict_of(&checks);
    let also = spec
        .also
        .iter()
        .zip(&exp.also)
        .map(|(claim, list)| {
            let checks = judge(list);
            ClaimReport {
                name: claim.name.clone(),
                claim: claim.claim.clone(),
                verdict: verdict_of(&checks),
                checks,
            }
        })
        .collect();
    let scale = scale_of(exp, plan, &runs);
    let mut arms = Vec::new();
    for arm in &spec.arms {
        let Some(r) = plan.runs.iter().find(|r| r.arm == arm.name) else {
            continue;
        };
        let mut shown = r.settings.clone();
        shown.seed = None;
        let rerun = Path::new("rerun").join(format!("{}-seed{}", r.arm, r.seed));
        let command = match &r.clone {
            None => command(&r.scene, &rerun, &r.settings),
            Some(c) => {
                let cdir = Path::new("rerun").join(format!("{}-seed{}-clone", r.arm, r.seed));
                let mut settings = r.settings.clone();
                settings.model = Some(cdir.join("model").display().to_string());
                format!(
                    "{} && {}",
                    imitate_command(&r.scene, &cdir, c, &r.settings),
                    command(&r.scene, &rerun, &settings)
                )
            }
        };
        let clone_agreement = plan
            .runs
            .iter()
            .filter(|x| x.arm == arm.name && x.clone.is_some())
            .filter_map(|x| {
                clone_record(&out.join(x.clone_dir()))?
                    .get("held_out_agreement")?
                    .as_f64()
            })
            .collect();
        arms.push(ArmReport {
            name: arm.name.clone(),
            about: arm.about.clone(),
            settings: shown,
            command,
            clone: r.clone.clone(),
            clone_agreement,
        });
    }
    let mut run_seconds = BTreeMap::new();
    for (r, (rows, fe, _)) in plan.runs.iter().zip(&runs) {
        let train: f64 = rows
            .iter()
            .filter_map(|row| row.get("seconds").and_then(Value::as_f64))
            .sum();
        let ev = fe.as_ref().map_or(0.0, |f| f.seconds);
        // A clone's recording and cloning belong to its run.
        let cloning = clone_record(&out.join(r.clone_dir())).map_or(0.0, |c| {
            ["record_seconds", "clone_seconds"]
                .iter()
                .filter_map(|k| c.get(*k).and_then(Value::as_f64))
                .sum()
        });
        run_seconds.insert(format!("{}/seed_{}", r.arm, r.seed), train + ev + cloning);
    }
    Ok(Report {
        experiment: exp.name.clone(),
        claim: spec.claim.clone(),
        source: spec.source.clone(),
        notes: spec.notes.clone(),
        budget: plan.budget.describe(),
        full_budget: plan.budget == Budget::Full,
        seeds: plan.seeds.clone(),
        partners: plan.partners.iter().map(|p| eval::label(p)).collect(),
        arms,
        measures,
        checks,
        verdict,
        also,
        scale,
        paper_scale: spec.paper_scale.clone(),
        timing: Timing {
            total_run_seconds: run_seconds.values().sum(),
            run_seconds,
            wall_seconds,
            invocations: 1,
        },
    })
}

/// `reproduced` when every check is, else `not reproduced`.
fn verdict_of(checks: &[CheckReport]) -> String {
    if checks.iter().all(|c| c.verdict == "reproduced") {
        "reproduced"
    } else {
        "not reproduced"
    }
    .to_string()
}

/// Each arm's experience a seed, from its runs' rows (iterations, the decisions each update
/// read) and `config.json` (the arenas), as means over the seeds that have rows.
fn scale_of(
    exp: &Experiment,
    plan: &Plan,
    runs: &[(
        Vec<Map<String, Value>>,
        Option<FinalEval>,
        std::path::PathBuf,
    )],
) -> Vec<ScaleReport> {
    let mut out = Vec::new();
    for arm in &exp.spec.arms {
        let mut seeds = Vec::new();
        for (r, (rows, _, dir)) in plan.runs.iter().zip(runs) {
            if r.arm != arm.name || rows.is_empty() {
                continue;
            }
            let arenas = std::fs::read_to_string(dir.join("config.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .and_then(|v| v["settings"]["arenas"].as_f64())
                .or(r.settings.arenas.map(f64::from))
                .unwrap_or(0.0);
            let steps: f64 = rows
                .iter()
                .filter_map(|row| row.get("samples").and_then(Value::as_f64))
                .sum();
            seeds.push((rows.len() as f64, rows.len() as f64 * arenas, steps));
        }
        if seeds.is_empty() {
            continue;
        }
        let n = seeds.len() as f64;
        let mean = |f: fn(&(f64, f64, f64)) -> f64| seeds.iter().map(f).sum::<f64>() / n;
        out.push(ScaleReport {
            arm: arm.name.clone(),
            iterations: mean(|x| x.0),
            episodes: mean(|x| x.1),
            agent_steps: mean(|x| x.2),
        });
    }
    out
}

/// The checks' table, in Markdown.
fn checks_table(s: &mut String, checks: &[CheckReport]) {
    let _ = writeln!(
        s,
        "| check | left | right | verdict | seeds where it holds |"
    );
    let _ = writeln!(s, "|---|---:|---:|---|---:|");
    for c in checks {
        let _ = writeln!(
            s,
            "| `{}` | {} | {} | {} | {} of {} |",
            c.check,
            fmt(c.lhs),
            fmt(c.rhs),
            c.verdict,
            c.seeds_holding,
            c.seeds
        );
    }
}

fn fmt(x: Option<f64>) -> String {
    x.map_or_else(|| "–".to_string(), |v| format!("{v:.3}"))
}

/// The report as Markdown; `figures` are file names under `figures/`.
pub fn markdown(r: &Report, figures: &[String]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# {}: {}\n", r.experiment, r.verdict.to_uppercase());
    let _ = writeln!(s, "**Claim.** {}\n", r.claim);
    let _ = writeln!(s, "**Source.** {}\n", r.source);
    if !r.notes.is_empty() {
        let _ = writeln!(s, "{}\n", r.notes.trim());
    }
    let _ = writeln!(s, "**Budget.** {}.\n", r.budget);
    let seeds: Vec<String> = r.seeds.iter().map(u64::to_string).collect();
    let _ = writeln!(
        s,
        "**Seeds.** {} ({}). **Partners.** {}.\n",
        r.seeds.len(),
        seeds.join(", "),
        if r.partners.is_empty() {
            "none".to_string()
        } else {
            r.partners.join(", ")
        }
    );
    let _ = writeln!(s, "## Expected outcome\n");
    checks_table(&mut s, &r.checks);
    let _ = writeln!(
        s,
        "\nEach check is judged on the means over seeds; the last column judges it on each \
         seed's values alone.\n"
    );
    for c in &r.also {
        let _ = writeln!(s, "## Also: {}: {}\n", c.name, c.verdict.to_uppercase());
        let _ = writeln!(s, "**Claim.** {}\n", c.claim);
        checks_table(&mut s, &c.checks);
        s.push('\n');
    }
    if !r.scale.is_empty() {
        let _ = writeln!(s, "## Scale (a seed's experience, mean over seeds)\n");
        let _ = writeln!(s, "| arm | iterations | episodes | agent-steps |");
        let _ = writeln!(s, "|---|---:|---:|---:|");
        for a in &r.scale {
            let _ = writeln!(
                s,
                "| {} | {:.0} | {:.0} | {:.0} |",
                a.arm, a.iterations, a.episodes, a.agent_steps
            );
        }
        let paper = if r.paper_scale.is_empty() {
            "not given in the experiment file"
        } else {
            r.paper_scale.as_str()
        };
        let _ = writeln!(
            s,
            "\nAgent-steps are the learning agents' decisions the updates read. The paper: \
             {paper}\n"
        );
    }
    let _ = writeln!(s, "## Measures (mean ± standard deviation over seeds)\n");
    let mut head = "| measure |".to_string();
    let mut rule = "|---|".to_string();
    for a in &r.arms {
        let _ = write!(head, " {} |", a.name);
        rule.push_str("---:|");
    }
    let _ = writeln!(s, "{head}\n{rule}");
    for m in &r.measures {
        let _ = write!(s, "| {} |", m.name);
        for a in &r.arms {
            match m.arms.get(&a.name) {
                Some(Stat {
                    mean: Some(mu),
                    std: Some(sd),
                    ..
                }) => {
                    let _ = write!(s, " {mu:.3} ± {sd:.3} |");
                }
                _ => s.push_str(" – |"),
            }
        }
        s.push('\n');
    }
    let _ = writeln!(s, "\nPer seed ({}):\n", seeds.join(", "));
    let _ = writeln!(s, "| measure | arm | per seed | from |");
    let _ = writeln!(s, "|---|---|---|---|");
    for m in &r.measures {
        for a in &r.arms {
            let v: Vec<String> = m
                .arms
                .get(&a.name)
                .map(|st| st.per_seed.iter().map(|x| fmt(*x)).collect())
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                m.name,
                a.name,
                v.join(", "),
                m.source
            );
        }
    }
    let described: Vec<&MeasureReport> =
        r.measures.iter().filter(|m| !m.about.is_empty()).collect();
    if !described.is_empty() {
        s.push('\n');
        for m in described {
            let _ = writeln!(s, "- `{}`: {}", m.name, m.about);
        }
    }
    if !figures.is_empty() {
        let _ = writeln!(s, "\n## Figures\n");
        for f in figures {
            let _ = writeln!(s, "![{f}](figures/{f})\n");
        }
    }
    let _ = writeln!(s, "## Arms\n");
    for a in &r.arms {
        let about = if a.about.is_empty() {
            String::new()
        } else {
            format!(": {}", a.about)
        };
        let _ = writeln!(s, "- **{}**{about}", a.name);
        if let Some(c) = &a.clone {
            let agreement: Vec<String> = a
                .clone_agreement
                .iter()
                .map(|x| format!("{x:.3}"))
                .collect();
            let _ = writeln!(
                s,
                "  - starts from a clone of `{}` (`emergence imitate`: {} episodes, {} epochs{}{}), one a seed; held-out agreement with the teacher {} (seeds in order)",
                c.from,
                c.episodes,
                c.epochs,
                if c.dagger > 0 {
                    format!(", {} DAgger rounds", c.dagger)
                } else {
                    String::new()
                },
                if c.words {
                    ", words too"
                } else {
                    ", not its words"
                },
                if agreement.is_empty() {
                    "not read".to_string()
                } else {
                    agreement.join(" / ")
                }
            );
        }
        let _ = writeln!(s, "  - rerun one seed (from this folder): `{}`", a.command);
    }
    let _ = writeln!(s, "\n## Time\n");
    let _ = writeln!(
        s,
        "Runs: {:.0} s in all (one after another); wall time: {:.0} s ({} invocation{} that \
         ran something).\n",
        r.timing.total_run_seconds,
        r.timing.wall_seconds,
        r.timing.invocations,
        if r.timing.invocations == 1 { "" } else { "s" }
    );
    let _ = writeln!(s, "| run | seconds |");
    let _ = writeln!(s, "|---|---:|");
    for (k, v) in &r.timing.run_seconds {
        let _ = writeln!(s, "| {k} | {v:.1} |");
    }
    s
}
