//! The commands, one file each; this module holds what several share (output checks,
//! progress bars, the `--policy`/`--max-steps` overrides, devices).

pub mod allocator;
pub mod check;
pub mod eval;
pub mod imitate;
pub mod list;
pub mod model;
pub mod plot;
pub mod reproduce;
pub mod run;
pub mod train;
pub mod view;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;

use emergence::policy::catalogue;
use emergence::scene::Scene;

/// Refuses outputs that would write over an input, share a file, or replace an existing
/// file without `--force` ([`emergence::outputs::check`]); nothing is written on refusal.
pub fn check_outputs(
    inputs: &[(&str, Option<&PathBuf>)],
    outputs: &[(&str, Option<&PathBuf>)],
    force: Option<bool>,
) -> Result<()> {
    use emergence::outputs::{Named, check};
    let named = |list: &[(&str, Option<&PathBuf>)]| -> Vec<Named> {
        list.iter()
            .filter_map(|(w, p)| p.map(|p| Named::new(*w, p.clone())))
            .collect()
    };
    check(&named(inputs), &named(outputs), force).map_err(|e| anyhow::anyhow!(e))
}

/// A progress bar of `len` steps drawn with `template` (hidden with --quiet).
pub fn progress_bar(quiet: bool, len: u64, template: &str) -> ProgressBar {
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(len)
    };
    bar.set_style(
        ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

pub const NO_GUI: &str = "this binary was built without the window: build it with the `gui` feature \
     (`cargo run --release --features gui -- view ...`; see docs/building.md for the system packages)";

/// The scene as the command line asks: every team on `--policy`, episodes cut at
/// `--max-steps`, observations written for language models in `--text`'s style, with
/// `--memory` past turns.
pub fn apply_overrides(
    mut scene: Scene,
    policy: Option<&str>,
    max_steps: Option<u32>,
    (text, memory): (Option<emergence::scene::TextStyle>, Option<u32>),
) -> Result<Scene> {
    if let Some(t) = text {
        scene.spec.text = t;
    }
    if let Some(m) = memory {
        scene.spec.memory = m;
    }
    if let Some(p) = policy {
        let info = catalogue().iter().find(|i| i.name == p).with_context(|| {
            let known: Vec<&str> = catalogue().iter().map(|i| i.name).collect();
            format!(
                "--policy {p:?} is not a policy; expected one of {}",
                known.join(", ")
            )
        })?;
        let family = scene.spec.family.name();
        if !info.plays(family) {
            anyhow::bail!("--policy {p:?} does not play {family}");
        }
        for a in &mut scene.agents {
            a.policy = p.to_string();
        }
    }
    if let Some(n) = max_steps {
        scene.spec.episode.max_steps = n;
    }
    Ok(scene)
}

pub fn parse_device(s: &str) -> Result<candle_core::Device> {
    emergence::policy::lm::parse_device(s).map_err(|e| anyhow::anyhow!("--device {e}"))
}

/// `--model tiny|small|DIR`, read the same way by every command: an embedded preset (weights
/// from seed 0) or a model folder; with the folder, for the output checks.
pub fn model_source(
    model: Option<&str>,
) -> Result<Option<(emergence::policy::lm::ModelSource, Option<PathBuf>)>> {
    use emergence::policy::lm::ModelSource;
    use emergence::train::ModelChoice;
    let Some(name) = model else {
        return Ok(None);
    };
    let choice = ModelChoice::parse(name).map_err(|e| anyhow::anyhow!("--model {e}"))?;
    Ok(Some(match choice {
        ModelChoice::Preset(preset) => (ModelSource::Embedded { preset, seed: 0 }, None),
        ModelChoice::Folder(dir) => (ModelSource::Folder(dir.clone()), Some(dir)),
    }))
}
