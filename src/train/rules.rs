//! The rules a training run's settings follow, in one place: every setting in its range
//! ([`limits`]), and the settings that go together (a group size that divides the arenas,
//! MAGRPO's and Advantage Alignment's groups, what the `mlp` learner cannot do, what
//! Advantage Alignment needs of the scene). [`check`] runs them all before anything is
//! built or written; each refusal is a [`SettingsError`] that names the setting, where it can
//! be given, and what was expected.

use thiserror::Error;

use super::{Algo, Sharing, TrainConfig, TrainSettings, limits};
use crate::scene::Scene;

/// A training run's settings that cannot be used, each naming the setting and what it
/// needs.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SettingsError {
    /// A setting outside its range ([`limits`]).
    #[error(
        "{name} = {value}: expected {expected} (--{flag}, or {name} in the scene's train block or in a resumed run's config.json)"
    )]
    OutOfRange {
        /// The setting's name in a scene's `train:` block (`lr`, `group_size`).
        name: &'static str,
        /// Its value, as given.
        value: String,
        /// Its range.
        expected: String,
        /// The flag that gives it (`lr`, `group-size`).
        flag: String,
    },
    /// Arenas are played in groups that share their seeds.
    #[error(
        "the group size {group} (--group-size, or group_size in the scene's train block) must divide the arenas {arenas} (--arenas, or arenas there)"
    )]
    GroupDividesArenas {
        /// `group_size`.
        group: u32,
        /// `arenas`.
        arenas: u32,
    },
    /// MAGRPO's advantage is relative to a group of rollouts of one start.
    #[error(
        "magrpo compares rollouts that share a seed: give --group-size 2 or more (or group_size in the scene's train block)"
    )]
    MagrpoGroup,
    /// Advantage Alignment's baseline leaves one rollout of a group out.
    #[error(
        "advantage alignment compares each rollout with the others that share its seed (a leave-one-out baseline), so a group needs at least 2 arenas; got group_size {0} (--group-size, or group_size in the scene's train block)"
    )]
    AdvantageAlignmentGroup(u32),
    /// LoRA adapters are a language model's.
    #[error(
        "LoRA adapters adapt a language model's layers; the mlp learner shares one network (--sharing shared) or has one per team (--sharing separate)"
    )]
    LoraNeedsLm,
    /// Only the classic learners play with the weights before an update while it runs.
    #[error(
        "--overlap plays the next episodes with the weights before the update while it runs, which the mlp and gru learners do (a language model decides and trains on the same buffers); use --learner mlp or gru, or leave --overlap out"
    )]
    OverlapNeedsClassic,
    /// The overlapped update's thread cannot join the ranks' gradient sum.
    #[error(
        "--overlap runs the update on a thread beside the rollout, and under mpirun the ranks sum their gradients from the main thread: run it in one process, or leave --overlap out"
    )]
    OverlapUnderMpi,
    /// CORY's two copies are a language model's.
    #[error(
        "cory trains a language model's pioneer and observer copies (the observer reads the pioneer's choice in its prompt); use --learner lm"
    )]
    CoryNeedsLm,
    /// A partner cannot take one of CORY's two seats.
    #[error(
        "--eval-against does not play cory's copies yet: they decide as a pioneer and an observer together, and a partner cannot take one of the two seats"
    )]
    EvalAgainstCory,
    /// Advantage Alignment updates the learners of an arena together.
    #[error(
        "advantage alignment shapes each learner by the other learners' advantages in its arena, so they must be updated together: --sharing separate gives each team its own model and update (use shared, role-lora or agent-lora)"
    )]
    AdvantageAlignmentSeparate,
    /// Advantage Alignment needs two learners an arena.
    #[error(
        "advantage alignment shapes each learner by the others' advantages: the scene has {learners} agent(s) on `{learner}` per arena, and it needs 2 or more"
    )]
    AdvantageAlignmentLearners {
        /// Learning agents an arena.
        learners: usize,
        /// The learner's policy name.
        learner: &'static str,
    },
    /// Under mpirun every rank needs arenas, whole groups of them.
    #[error(
        "{ranks} ranks share {arenas} arenas: every rank needs one or more, and with --group-size {group} a multiple of {group} (rank {rank} would get {share}); give --arenas a multiple of {whole}"
    )]
    RanksShareArenas {
        /// Ranks.
        ranks: usize,
        /// `arenas`.
        arenas: u32,
        /// `group_size`.
        group: u32,
        /// The rank that would get too few.
        rank: usize,
        /// Its arenas.
        share: usize,
        /// What `arenas` should be a multiple of.
        whole: usize,
    },
    /// The window shows one process's arenas.
    #[error("--gui shows one process's arenas; it does not run under mpirun")]
    GuiUnderMpi,
    /// A partner of `--eval-against` that the scene cannot seat.
    #[error("--eval-against: {0}")]
    EvalAgainst(String),
    /// CORY's two copies need two learning agents.
    #[error("cory needs exactly two agents on `lm` in the scene (pioneer and observer)")]
    CoryTwoAgents,
}

/// Every rule of `cfg`'s settings, with `scene` the run's scene once its learning teams are
/// set (the learner's agents on the learner's policy).
pub fn check(cfg: &TrainConfig, scene: &Scene) -> Result<(), SettingsError> {
    ranges(cfg)?;
    ranks(cfg)?;
    let g = cfg.hyper.group_size;
    if !cfg.arenas.is_multiple_of(g) {
        return Err(SettingsError::GroupDividesArenas {
            group: g,
            arenas: cfg.arenas,
        });
    }
    match cfg.algo {
        Algo::AdvantageAlignment if g < 2 => {
            return Err(SettingsError::AdvantageAlignmentGroup(g));
        }
        Algo::Magrpo if g < 2 => return Err(SettingsError::MagrpoGroup),
        _ => {}
    }
    let classic = cfg.learner.classic();
    if classic && matches!(cfg.sharing, Sharing::RoleLora | Sharing::AgentLora) {
        return Err(SettingsError::LoraNeedsLm);
    }
    if cfg.overlap && !classic {
        return Err(SettingsError::OverlapNeedsClassic);
    }
    if cfg.overlap && cfg.ranks.parallel() {
        return Err(SettingsError::OverlapUnderMpi);
    }
    if classic && cfg.algo == Algo::Cory {
        return Err(SettingsError::CoryNeedsLm);
    }
    if !cfg.eval_against.is_empty() && cfg.algo == Algo::Cory {
        return Err(SettingsError::EvalAgainstCory);
    }
    if cfg.algo == Algo::AdvantageAlignment {
        if cfg.sharing == Sharing::Separate {
            return Err(SettingsError::AdvantageAlignmentSeparate);
        }
        let learner = cfg.learner.policy();
        let learners = scene.agents.iter().filter(|a| a.policy == learner).count();
        if learners < 2 {
            return Err(SettingsError::AdvantageAlignmentLearners { learners, learner });
        }
    }
    Ok(())
}

/// Under mpirun: every rank gets arenas, whole groups of them, and no window.
fn ranks(cfg: &TrainConfig) -> Result<(), SettingsError> {
    let ranks = &cfg.ranks;
    let share = ranks.share(cfg.arenas);
    if !ranks.parallel() {
        return Ok(());
    }
    let (n, g) = (ranks.size(), cfg.hyper.group_size);
    if share.is_empty() || !share.len().is_multiple_of(g as usize) {
        return Err(SettingsError::RanksShareArenas {
            ranks: n,
            arenas: cfg.arenas,
            group: g,
            rank: ranks.rank(),
            share: share.len(),
            whole: n * g as usize,
        });
    }
    if cfg.tap.is_some() {
        return Err(SettingsError::GuiUnderMpi);
    }
    Ok(())
}

/// Every setting against [`limits`].
fn ranges(cfg: &TrainConfig) -> Result<(), SettingsError> {
    limits::check_settings(&TrainSettings::of_run(cfg)).map_err(|bad| SettingsError::OutOfRange {
        name: bad.name,
        value: bad.value,
        expected: bad.expected,
        flag: bad.name.replace('_', "-"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::LearnerKind;
    use std::path::{Path, PathBuf};

    /// A run of the Prisoner's Dilemma (two teams) with `s`; `lm_teams` of its teams on `lm`
    /// (the others on tit-for-tat).
    fn check_with(s: TrainSettings, lm_teams: usize) -> Result<(), SettingsError> {
        let path = Path::new("pd.scene.ron");
        let src = include_str!("../../scenes/dilemma/prisoners_dilemma.scene.ron");
        let mut scene = crate::load::parse_scene(src, path).expect("scene");
        for (i, a) in scene.agents.iter_mut().enumerate() {
            a.policy = if i < lm_teams { "lm" } else { "tit_for_tat" }.into();
        }
        let cfg = TrainConfig::from_settings(scene.clone(), path.into(), &s, PathBuf::new())
            .expect("config");
        check(&cfg, &scene)
    }

    fn with(algo: Algo) -> TrainSettings {
        TrainSettings {
            algo: Some(algo),
            arenas: Some(16),
            ..Default::default()
        }
    }

    /// Under mpirun each rank plays whole groups of arenas.
    #[test]
    fn ranks_that_would_split_a_group_are_refused() {
        let path = Path::new("pd.scene.ron");
        let src = include_str!("../../scenes/dilemma/prisoners_dilemma.scene.ron");
        let scene = crate::load::parse_scene(src, path).expect("scene");
        let s = TrainSettings {
            group_size: Some(4),
            ..with(Algo::Magrpo)
        };
        let mut cfg = TrainConfig::from_settings(scene.clone(), path.into(), &s, PathBuf::new())
            .expect("config");
        check(&cfg, &scene).expect("one process plays every group");
        cfg.ranks = crate::train::dist::FakeRank::ranks(0, 2);
        check(&cfg, &scene).expect("two ranks of two groups each");
        cfg.ranks = crate::train::dist::FakeRank::ranks(1, 3);
        let err = check(&cfg, &scene).expect_err("three ranks split a group");
        assert!(
            matches!(
                err,
                SettingsError::RanksShareArenas {
                    ranks: 3,
                    arenas: 16,
                    group: 4,
                    whole: 12,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("give --arenas a multiple of 12"),
            "{err}"
        );
    }

    #[test]
    fn each_rule_refuses_its_combination_and_names_what_it_needs() {
        use SettingsError as E;
        let ok = |s, n| check_with(s, n).expect("a usable run");
        ok(with(Algo::Ippo), 2);
        ok(
            TrainSettings {
                group_size: Some(2),
                ..with(Algo::AdvantageAlignment)
            },
            2,
        );
        let cases = [
            (
                TrainSettings {
                    group_size: Some(3),
                    ..with(Algo::Ippo)
                },
                2,
                E::GroupDividesArenas {
                    group: 3,
                    arenas: 16,
                },
            ),
            (
                TrainSettings {
                    group_size: Some(1),
                    ..with(Algo::Magrpo)
                },
                2,
                E::MagrpoGroup,
            ),
            (
                TrainSettings {
                    group_size: Some(1),
                    ..with(Algo::AdvantageAlignment)
                },
                2,
                E::AdvantageAlignmentGroup(1),
            ),
            (
                TrainSettings {
                    learner: Some(LearnerKind::Mlp),
                    sharing: Some(Sharing::RoleLora),
                    ..with(Algo::Ippo)
                },
                2,
                E::LoraNeedsLm,
            ),
            (
                TrainSettings {
                    overlap: Some(true),
                    ..with(Algo::Ippo)
                },
                2,
                E::OverlapNeedsClassic,
            ),
            (
                TrainSettings {
                    learner: Some(LearnerKind::Gru),
                    ..with(Algo::Cory)
                },
                2,
                E::CoryNeedsLm,
            ),
            (
                TrainSettings {
                    group_size: Some(2),
                    sharing: Some(Sharing::Separate),
                    ..with(Algo::AdvantageAlignment)
                },
                2,
                E::AdvantageAlignmentSeparate,
            ),
            (
                TrainSettings {
                    group_size: Some(2),
                    ..with(Algo::AdvantageAlignment)
                },
                1,
                E::AdvantageAlignmentLearners {
                    learners: 1,
                    learner: "lm",
                },
            ),
        ];
        for (s, lm_teams, want) in cases {
            assert_eq!(check_with(s, lm_teams), Err(want));
        }
        // Out of range: named, with its flag and where else it can be given.
        let err = check_with(
            TrainSettings {
                epochs: Some(0),
                ..with(Algo::Ippo)
            },
            2,
        )
        .unwrap_err();
        assert!(
            matches!(&err, E::OutOfRange { name: "epochs", .. }),
            "{err:?}"
        );
        assert!(
            err.to_string().starts_with("epochs = 0: expected "),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("(--epochs, or epochs in the scene's train block"),
            "{err}"
        );
        assert_eq!(
            E::GroupDividesArenas {
                group: 3,
                arenas: 16
            }
            .to_string(),
            "the group size 3 (--group-size, or group_size in the scene's train block) must \
             divide the arenas 16 (--arenas, or arenas there)"
        );
    }
}
