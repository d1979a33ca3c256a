//! The `.scene.ron` format as serde types. Every struct denies unknown fields, so a typo is
//! an error that lists the allowed names. See `docs/scenes.md` for a commented example.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub use super::family::FamilySpec;

/// A scene file as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SceneSpec {
    /// Short title.
    pub name: String,
    /// What the scene is for.
    #[serde(default)]
    pub description: String,
    /// The environment family and its parameters.
    pub family: FamilySpec,
    /// ASCII map, one string per row, all rows the same length (grid families).
    #[serde(default)]
    pub map: Vec<String>,
    /// What each map character stands for.
    #[serde(default)]
    pub legend: BTreeMap<char, Thing>,
    /// Teams of agents.
    pub teams: Vec<TeamSpec>,
    /// Episode limits.
    #[serde(default)]
    pub episode: EpisodeSpec,
    /// What changes from episode to episode.
    #[serde(default)]
    pub randomize: RandomizeSpec,
    /// Default settings for `emergence train` on this scene; its flags override them.
    #[serde(default)]
    pub train: TrainSettings,
    /// How language-model agents read their observations ([`TextStyle`]).
    #[serde(default)]
    pub text: TextStyle,
    /// How many of its episode's past turns a language-model agent reads besides this
    /// step's observation (`memory: N`; 0, the default: this step's text alone). A turn is a
    /// step's observation text followed by the tokens the agent chose (its action, and its
    /// word where it talks); the context is the scene's constant lines once, then the turns.
    /// See [`crate::policy::lm::policy::memory`] for how turns drop off the front.
    #[serde(default)]
    pub memory: u32,
}

/// How a scene's observations are written for language models (`text: Compact` in a scene,
/// `--text compact` for `run` and `view`). The viewer shows the same text the model reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum TextStyle {
    /// Every line spelled out in each observation: role and team named, titles, the legend.
    #[default]
    Full,
    /// The scene's constant lines first (legend, titles, the episode's length, the talk
    /// vocabulary), the same in every prompt, so that a batch computes them once; then the
    /// agent's own lines in short form. About half the tokens of `Full` per decision.
    Compact,
}

/// A scene's default training settings: the `train:` block, the same type as the command's
/// flags (every field optional; the flags override them, the algorithm's defaults fill the
/// rest).
pub use super::settings::TrainSettings;

/// What a map character stands for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Thing {
    /// Open ground.
    Floor,
    /// Blocks movement and beams (the egocentric window is not occluded).
    Wall,
    /// An apple cell that starts with an apple.
    Apple,
    /// An apple cell that starts empty (Clean Up's orchard, a bare patch).
    AppleSite,
    /// Clean river (walkable; Clean Up pollutes it).
    River,
    /// Polluted river.
    Dirt,
    /// Open ground where agents of any team without spawn cells of their own may start.
    Spawn,
    /// Open ground where agents of the named team start.
    TeamSpawn(String),
    /// A movable box (hide-and-seek): blocks movement and sight; can be pushed, pulled, locked.
    Box,
    /// A movable ramp (hide-and-seek): lets an agent climb over one box or low wall behind it.
    Ramp,
    /// A low wall (hide-and-seek): blocks movement, not sight; a ramp lets agents over it.
    LowWall,
    /// A pressure plate (maze) that holds open every `Door` with the same name while an
    /// agent stands on it.
    Plate(String),
    /// A door (maze) open while an agent stands on a `Plate` with the same name.
    Door(String),
    /// A key (maze) of the named colour; stepping on it picks it up.
    Key(String),
    /// A locked door (maze) that opens for good when an agent carrying the key of its colour
    /// walks into it.
    LockedDoor(String),
    /// An exit cell (maze): the episode succeeds when every agent stands on one.
    Exit,
}

/// One team of agents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeamSpec {
    /// Team name, unique in the scene.
    pub name: String,
    /// Role of its agents (defaults to the team name).
    #[serde(default)]
    pub role: Option<String>,
    /// Number of agents (defaults to the number of the team's spawn cells, or 1 in matrix games).
    #[serde(default)]
    pub count: Option<u32>,
    /// The policy that decides for its agents: a name from `emergence list`, or
    /// `lm(model: "models/tiny")` for a language model loaded from a folder.
    pub policy: PolicySpec,
}

/// A team's policy as written: `"random"`, `"lm"`, or `lm(model: "path/to/folder")`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum PolicySpec {
    /// A policy of the catalogue, by name.
    Name(String),
    /// A language model from a folder (relative paths: from the working directory).
    Lm(LmSpec),
}

/// The fields of `lm(...)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename = "lm", deny_unknown_fields)]
pub struct LmSpec {
    /// The model folder; the embedded tiny model when left out.
    #[serde(default)]
    pub model: Option<String>,
}

impl PolicySpec {
    /// The registry key: the catalogue name, or `lm:PATH` for a model folder.
    pub fn key(&self) -> String {
        match self {
            PolicySpec::Name(n) => n.clone(),
            PolicySpec::Lm(LmSpec { model: None }) => "lm".into(),
            PolicySpec::Lm(LmSpec { model: Some(m) }) => format!("lm:{m}"),
        }
    }
}

impl From<&str> for PolicySpec {
    fn from(s: &str) -> Self {
        PolicySpec::Name(s.to_string())
    }
}

/// Episode limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EpisodeSpec {
    /// Steps after which an episode is truncated.
    pub max_steps: u32,
}

impl Default for EpisodeSpec {
    fn default() -> Self {
        Self { max_steps: 1000 }
    }
}

/// Per-episode randomisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RandomizeSpec {
    /// Shuffle which agent starts on which spawn cell.
    pub shuffle_spawns: bool,
    /// Start agents facing a random direction (otherwise north).
    pub random_facing: bool,
    /// Mazes: play the map mirrored left to right in half the episodes (a coin from the
    /// arena's stream at each reset), so which side a thing lies on is learned from what is
    /// seen, not remembered from the map (the T-maze's randomised goal side, Bakker 2002).
    pub mirror: bool,
}

impl Default for RandomizeSpec {
    fn default() -> Self {
        Self {
            shuffle_spawns: true,
            random_facing: true,
            mirror: false,
        }
    }
}

impl<'de> Deserialize<'de> for PolicySpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = PolicySpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a policy name such as \"random\", or lm(model: \"path/to/model\")")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<PolicySpec, E> {
                Ok(PolicySpec::Name(v.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<PolicySpec, A::Error> {
                let mut model = None;
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "model" => model = Some(map.next_value::<String>()?),
                        other => {
                            return Err(serde::de::Error::unknown_field(other, &["model"]));
                        }
                    }
                }
                Ok(PolicySpec::Lm(LmSpec { model }))
            }
        }
        d.deserialize_any(V)
    }
}
