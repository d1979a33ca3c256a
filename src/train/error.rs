//! The typed errors of a training run besides its settings' ([`super::SettingsError`]): an
//! update that cannot go on ([`UpdateError`]) and a run's or checkpoint's file that is not
//! what it should be ([`RunFileError`]), each naming the file or field and what was expected.

use std::path::PathBuf;
use thiserror::Error;

/// Why an update cannot be taken.
#[derive(Debug, Error)]
pub enum UpdateError {
    /// No agent uses the language model, so it was never set up.
    #[error("the language-model policy was never set up (no agent uses it)")]
    NotSetUp,
    /// An action word that the tokenizer splits.
    #[error(
        "action {action} is {tokens} tokens for this tokenizer; training scores single-token \
         action words (the embedded tokenizer has one token per action)"
    )]
    MultiTokenAction {
        /// The action's index.
        action: usize,
        /// Its tokens.
        tokens: usize,
    },
    /// No agent on the `mlp` played, so it never made its network.
    #[error("the mlp never decided (no agent on it played), so there is no network to train")]
    NoDecisions,
    /// The trainer was asked for the `mlp`'s network before it had one.
    #[error("the mlp has no network yet")]
    NoNetwork,
    /// Nothing to train.
    #[error("no model to train")]
    NoModel,
    /// A language model with memory: a decision whose recorded read does not continue the
    /// window before it.
    #[error(
        "a decision of the language model with memory does not continue its window ({window} \
         tokens so far; its context of {tokens} tokens read as {read}): the rollout was not \
         recorded by this policy"
    )]
    Window {
        /// The window's tokens before the decision.
        window: usize,
        /// The decision's context's tokens.
        tokens: usize,
        /// How the policy said it read them.
        read: String,
    },
    /// A decision whose observation is not of the network's shape.
    #[error(
        "a decision of {cells} cells and {dense} header fields for a network of {net_cells} and \
         {net_dense}"
    )]
    Shape {
        /// The decision's cells.
        cells: usize,
        /// Its header fields.
        dense: usize,
        /// The network's cells.
        net_cells: usize,
        /// Its header fields.
        net_dense: usize,
    },
    /// A `gru` decision recorded without the state it was made from.
    #[error(
        "a decision of the gru without its state ({got} values where {expected} were \
         expected): the rollout was not recorded from a gru"
    )]
    GruState {
        /// Values recorded.
        got: usize,
        /// Values the sequences' starts need.
        expected: usize,
    },
    /// MAPPO: a decision without the family's global state.
    #[error("no global state for arena {arena} slot {slot} (its family wrote none)")]
    NoGlobalState {
        /// The arena.
        arena: u32,
        /// The agent's slot.
        slot: u16,
    },
    /// MAPPO: a global state of another shape than the critic's.
    #[error(
        "the critic reads {cells} cells and {dense} header fields; this batch has a global \
         state of {got_cells} and {got_dense} (another scene or map size)"
    )]
    CriticShape {
        /// The critic's cells.
        cells: usize,
        /// Its header fields.
        dense: usize,
        /// The batch's cells.
        got_cells: usize,
        /// Its header fields.
        got_dense: usize,
    },
    /// Advantage Alignment: an arena with fewer than two learners.
    #[error(
        "advantage alignment shapes each learner by the others' advantages: arena {arena} has \
         {agents} learning agent(s), and it needs 2 or more on `lm`"
    )]
    OneLearner {
        /// The arena.
        arena: u32,
        /// Its learning agents.
        agents: usize,
    },
    /// The `mlp`'s fused step refused its input.
    #[error("{0}")]
    Fused(String),
    /// Too many gradient steps in a row were skipped.
    #[error(
        "stopped: {count} gradient steps in a row were skipped ({reason}); the weights were \
         kept, and the last checkpoint is whole"
    )]
    Stopped {
        /// Steps skipped in a row.
        count: u32,
        /// Why the last one was.
        reason: String,
    },
}

/// A run's folder that cannot be used as asked (nothing in it is touched).
#[derive(Debug, Error)]
pub enum RunFolderError {
    /// Another process holds the folder's lock.
    #[error(
        "{}: in use by {who} (an `emergence train` or `reproduce` on the same run folder); wait \
         for it to end or stop it, then run again (nothing was touched)",
        path.display()
    )]
    InUse {
        /// The run's folder.
        path: PathBuf,
        /// The process holding it.
        who: String,
    },
    /// A fresh run's folder that holds something.
    #[error(
        "{}: the folder exists and is not empty; choose another --out, or {how} (nothing in it \
         was touched)",
        path.display()
    )]
    NotEmpty {
        /// The folder.
        path: PathBuf,
        /// How to continue what is there.
        how: String,
    },
    /// A resumed run with no iteration left.
    #[error(
        "{}: the run has done {done} of {iterations} iterations already; pass a larger \
         --iterations to continue it",
        path.display()
    )]
    Done {
        /// The run's folder.
        path: PathBuf,
        /// Iterations done.
        done: u32,
        /// Iterations asked.
        iterations: u32,
    },
}

/// A file of a run's folder or checkpoint that is not what it should be.
#[derive(Debug, Error)]
pub enum RunFileError {
    /// JSON that does not parse, at its line and column.
    #[error("{}:{line}:{column}: {message}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// Its line.
        line: usize,
        /// Its column.
        column: usize,
        /// What serde said.
        message: String,
    },
    /// A setting a run's `config.json` must give.
    #[error("{}: settings.{field} is missing (a run's config.json gives every setting)", path.display())]
    MissingSetting {
        /// The file.
        path: PathBuf,
        /// The setting.
        field: &'static str,
    },
    /// A setting of a run's `config.json` that does not read.
    #[error("{}: settings.{field} {message}", path.display())]
    BadSetting {
        /// The file.
        path: PathBuf,
        /// The setting.
        field: &'static str,
        /// Why.
        message: String,
    },
    /// A file the checkpoint needs and does not have.
    #[error("{}: missing; the run's {what} is needed to continue it", path.display())]
    Missing {
        /// The file.
        path: PathBuf,
        /// What it holds.
        what: String,
    },
    /// A tensor file (weights, optimizer moments, critic) that could not be written or read.
    #[error("{}: {message}", path.display())]
    Tensors {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// A checkpoint's `trainer_state.json` without a model's optimizer step count.
    #[error("{}: no optimizer step count for model {model}", path.display())]
    NoStepCount {
        /// The file.
        path: PathBuf,
        /// The model's index.
        model: usize,
    },
    /// A row of `metrics.jsonl` that does not read.
    #[error("{}:{line}: {message}", path.display())]
    MetricsRow {
        /// The file.
        path: PathBuf,
        /// The row's line.
        line: usize,
        /// Why.
        message: String,
    },
    /// The run's own copy of its scene.
    #[error("the run's scene copy: {0}")]
    Scene(String),
}

impl RunFileError {
    /// A JSON error of `path`, at its line and column.
    pub fn json(path: &std::path::Path, e: &serde_json::Error) -> RunFileError {
        RunFileError::Json {
            path: path.to_path_buf(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        }
    }
    /// A tensor file's error.
    pub fn tensors(path: &std::path::Path, e: impl std::fmt::Display) -> RunFileError {
        RunFileError::Tensors {
            path: path.to_path_buf(),
            message: e.to_string(),
        }
    }
}
