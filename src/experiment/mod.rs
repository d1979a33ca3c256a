//! Experiments: a paper's claim as a RON file (`experiments/*.experiment.ron`) that
//! `emergence reproduce` runs end to end. A file names the claim and its source, the scene
//! (a file, or one written inline), the arms (an algorithm and its [`TrainSettings`] each),
//! the seeds, the partners the trained models are evaluated against, the measures read
//! from the runs, and the expected outcome as checks on the measures
//! (`self_play(adalign) >= 2.5`). [`load`] reads and checks one, every error at the file's
//! `line:col` (an inline scene's errors too, at their place in the experiment file);
//! [`runner`] trains every arm × seed (resuming where a previous invocation stopped),
//! [`report`] aggregates the runs into `report.md` and `report.json`, and [`figures`] draws
//! the PNGs. The format is documented in `docs/experiments.md`.

pub mod expect;
pub mod figures;
mod parse;
pub mod report;
pub mod runner;
mod spec;

pub use parse::{find, load, name_of, parse, resolve};
pub use spec::*;

use std::path::{Path, PathBuf};

use crate::scene::Scene;
use crate::train::TrainSettings;

/// What [`reproduce`] wrote.
#[derive(Debug, Clone)]
pub struct Written {
    /// The report.
    pub report: report::Report,
    /// `report.md`, `report.json` and the figures.
    pub files: Vec<PathBuf>,
    /// What the runs did.
    pub outcome: runner::Outcome,
    /// Why figures are missing, if drawing failed (the report is written anyway).
    pub figure_error: Option<String>,
}

/// Runs `exp` under `opts` ([`runner::run`]) and writes its report and figures.
pub fn reproduce(
    exp: &Experiment,
    opts: &runner::Options,
    on_event: &(dyn Fn(runner::Event) + Sync),
) -> Result<Written, runner::ReproduceError> {
    let outcome = runner::run(exp, opts, on_event)?;
    if outcome.stopped > 0 {
        return Err(runner::ReproduceError::Folder(format!(
            "{}: {} runs stopped early (stop_after); run again to finish them",
            opts.out.display(),
            outcome.stopped
        )));
    }
    let (report, files, figure_error) = write_report(
        exp,
        &outcome.plan,
        &opts.out,
        outcome.wall_seconds,
        outcome.invocations,
    )
    .map_err(runner::ReproduceError::Folder)?;
    Ok(Written {
        report,
        files,
        outcome,
        figure_error,
    })
}

/// Aggregates the runs of `plan` in `out` and writes `report.md`, `report.json` and
/// `figures/*.png`; returns the report, the files and why figures failed (if they did).
pub fn write_report(
    exp: &Experiment,
    plan: &runner::Plan,
    out: &Path,
    wall_seconds: f64,
    invocations: usize,
) -> Result<(report::Report, Vec<PathBuf>, Option<String>), String> {
    let mut rep = report::aggregate(exp, plan, out, wall_seconds)?;
    rep.timing.invocations = invocations;
    let (figs, figure_error) = match figures::draw_all(exp, plan, &rep, out) {
        Ok(f) => (f, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    let names: Vec<String> = figs
        .iter()
        .filter_map(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
        .collect();
    let md = out.join("report.md");
    let json = out.join("report.json");
    let text = serde_json::to_string_pretty(&rep).map_err(|e| e.to_string())?;
    crate::train::run_dir::write_atomic(&json, text.as_bytes()).map_err(|e| e.to_string())?;
    crate::train::run_dir::write_atomic(&md, report::markdown(&rep, &names).as_bytes())
        .map_err(|e| e.to_string())?;
    let mut files = vec![md, json];
    files.extend(figs);
    Ok((rep, files, figure_error))
}

/// An arm's settings: with `quick`, its quick settings over the experiment's quick
/// settings over its settings over the experiment's over the scene's `train:` block.
pub fn arm_settings(
    spec: &ExperimentSpec,
    arm: &ArmSpec,
    scene: &Scene,
    quick: bool,
) -> TrainSettings {
    let base = arm
        .settings
        .clone()
        .over(spec.settings.clone())
        .over(scene.spec.train.clone());
    if quick {
        arm.quick.clone().over(spec.quick.clone()).over(base)
    } else {
        base
    }
}

#[cfg(test)]
mod tests;
