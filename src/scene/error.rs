//! Scene errors. Each carries the file, the 1-based line and column, what is wrong and what
//! was expected; `Display` prints `path:line:col: message`.

use std::path::PathBuf;
use thiserror::Error;

/// A scene that cannot be read, parsed or accepted.
#[derive(Debug, Error)]
pub enum SceneError {
    /// The file could not be read.
    #[error("{path}: cannot read the scene file: {io}")]
    Io {
        /// The scene file.
        path: PathBuf,
        /// The underlying error.
        io: std::io::Error,
    },
    /// The file is not a valid scene.
    #[error("{path}:{line}:{col}: {kind}")]
    Invalid {
        /// The scene file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column, in characters.
        col: usize,
        /// What is wrong, and what was expected.
        kind: SceneErrorKind,
    },
}

impl SceneError {
    /// The kind of a validation error (`None` for I/O errors).
    pub fn kind(&self) -> Option<&SceneErrorKind> {
        match self {
            SceneError::Io { .. } => None,
            SceneError::Invalid { kind, .. } => Some(kind),
        }
    }
    /// Line and column of a validation error.
    pub fn line_col(&self) -> Option<(usize, usize)> {
        match self {
            SceneError::Io { .. } => None,
            SceneError::Invalid { line, col, .. } => Some((*line, *col)),
        }
    }
}

/// What is wrong with a scene.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SceneErrorKind {
    /// RON syntax or type errors, as reported by the RON parser (unknown fields list the
    /// allowed ones; wrong types say what was expected).
    #[error("{0}")]
    Syntax(String),
    /// A map row whose length differs from the first row's.
    #[error("map row {row} has {len} characters; expected {expected}, like row 1")]
    RaggedRow {
        /// 1-based map row.
        row: usize,
        /// Its length.
        len: usize,
        /// The first row's length.
        expected: usize,
    },
    /// A map character with no legend entry.
    #[error(
        "map row {row}, column {col}: character {ch:?} is not in the legend; expected one of {known}"
    )]
    UnknownLegendChar {
        /// 1-based map row.
        row: usize,
        /// 1-based map column.
        col: usize,
        /// The character.
        ch: char,
        /// The legend's characters.
        known: String,
    },
    /// A team with agents but nowhere to put them.
    #[error(
        "team {team:?} has no spawn cell; expected a legend entry TeamSpawn({team:?}) or Spawn used on the map"
    )]
    NoSpawnCell {
        /// The team.
        team: String,
    },
    /// More agents than spawn cells.
    #[error(
        "{what} needs {needed} spawn cells but the map has {available}; expected at most {available} agents there"
    )]
    TooFewSpawnCells {
        /// Which team or pool.
        what: String,
        /// Agents to place.
        needed: usize,
        /// Cells available.
        available: usize,
    },
    /// A policy name the registry does not know.
    #[error("unknown policy {name:?}; expected one of: {known}")]
    UnknownPolicy {
        /// The name written.
        name: String,
        /// The known names.
        known: String,
    },
    /// A policy that does not play this family.
    #[error("policy {name:?} does not play {family}; expected one of: {known}")]
    PolicyFamily {
        /// The policy.
        name: String,
        /// The scene's family.
        family: String,
        /// Policies that do.
        known: String,
    },
    /// A parameter outside its range.
    #[error("{field} is {value}; expected {expected}")]
    OutOfRange {
        /// Dotted path of the field.
        field: String,
        /// The value written (or defaulted).
        value: String,
        /// The accepted range or form.
        expected: String,
    },
    /// Any other rule of the format.
    #[error("{what}; expected {expected}")]
    Rule {
        /// What is wrong.
        what: String,
        /// What was expected.
        expected: String,
    },
}
