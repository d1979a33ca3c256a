//! Behaviour cloning: `emergence imitate SCENE --from TEACHER --learner lm|mlp|gru`.
//!
//! 1. **Record.** The scene's arenas run headless with the teacher (a scripted policy of the
//!    catalogue) deciding for the cloned seats, and the learner reading every one of those
//!    decisions as its own ([`Demonstrator`], [`crate::policy::Policy::follow`]): the rollout
//!    buffer files each with exactly the observation the learner reads (its text, with its
//!    memory of the episode, or its feature row and `gru` state) and the teacher's action and
//!    word. The cloned seats are those the scene gives the teacher's policy, or, when none,
//!    those it gives the learner's (or any learning policy's).
//! 2. **Split.** Whole episodes are held out (`--held-out`, spread evenly over the recording);
//!    the model never trains on them.
//! 3. **Clone.** Epochs of shuffled minibatches of the cross-entropy of the teacher's choices
//!    ([`super::Trainer::imitate`]); after each, the agreement on the held-out episodes. The epochs'
//!    rows go to `imitation.jsonl`, drawn in `plots/imitation.png`.
//! 4. **Play.** Fresh episodes (seeds the recording never used) with the teacher, the clone
//!    and the untrained learner in the cloned seats: their returns, side by side.
//!
//! The clone is `OUT/model/`, a model folder (a language model's Hugging Face layout, or an
//! `mlp`'s `mlp.json` and `mlp.safetensors`), so `train --model OUT/model`, a scene's
//! `lm(model: "OUT/model")` and `mlp:OUT/model` start from it; `imitation.json` beside the
//! weights (and in `OUT`) says what was cloned from what, with the figures.
//!
//! **What each reads.** The teacher reads what it reads in a scene: an oracle bot (one that
//! families show the whole map, `maze_planner`, `fort_builder`) the whole map, which the
//! family writes beside the learner's own view for those seats
//! ([`crate::core::OracleTeacher`]); the learner records its own view. Such a clone cannot
//! always know what its teacher knew (the agreement says how often that mattered).

use rand::SeedableRng;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

use super::trainer::{Agreement, ImitationStats};
use super::{Algo, Batch, Rollouts, TrainConfig, TrainError, TrainPlugin, Trajectory};
use crate::core::Arenas;
use crate::headless::{RunConfig, build_app_with};
use crate::policy::{Decision, Policy, PolicyFactory, PolicyStats, catalogue};

mod replays;
use crate::scene::Scene;

/// An imitation run.
#[derive(Debug, Clone)]
pub struct ImitateConfig {
    /// The learner, its model, the scene (with its text style and memory), the arenas, the
    /// seed, the learning rate and minibatch, the output folder. Its `iterations` are unused
    /// and its algorithm is REINFORCE's sample layout (no critic).
    pub train: TrainConfig,
    /// The teacher: a policy of the catalogue that plays the scene's family.
    pub teacher: String,
    /// Episodes recorded (rounded up to a multiple of the arenas).
    pub episodes: u32,
    /// Passes over the recorded decisions.
    pub epochs: u32,
    /// Share of the episodes held out (never trained on), in [0, 0.5].
    pub held_out: f64,
    /// Learn the words said too (families with talk).
    pub words: bool,
    /// Fresh episodes played by each of teacher, clone and untrained learner at the end (0:
    /// none).
    pub play_episodes: u32,
    /// DAgger's rounds after the first cloning (0: none): each records as many episodes
    /// again with the clone acting and the teacher labelling its states, adds them to the
    /// training decisions and trains `epochs` more.
    pub dagger: u32,
}

impl ImitateConfig {
    /// `emergence imitate`'s run of `scene` (from `scene_path`) into `out`: `teacher` cloned
    /// into `learner`, with the flags `given` (the learning rate, its final share, the
    /// minibatch, the arenas, the seed, the model, the text style and memory; each unset one
    /// from its default: 1e-3 for `lm` and 3e-3 for `mlp` and `gru`, 0.1, 64 decisions, 16
    /// arenas, seed 0, and the scene's `train:` block's model, text and memory), 64 episodes,
    /// 10 epochs, a tenth held out, no words, 32 episodes played, no DAgger.
    pub fn new(
        scene: Scene,
        scene_path: PathBuf,
        teacher: &str,
        learner: super::LearnerKind,
        out: PathBuf,
        given: &super::TrainSettings,
    ) -> Result<Self, String> {
        let classic = learner.classic();
        let settings = super::TrainSettings {
            algo: Some(Algo::Reinforce),
            learner: Some(learner),
            arenas: Some(given.arenas.unwrap_or(16)),
            seed: Some(given.seed.unwrap_or(0)),
            model: given.model.clone().or(scene.spec.train.model.clone()),
            lr: Some(given.lr.unwrap_or(if classic { 3e-3 } else { 1e-3 })),
            lr_final_frac: Some(given.lr_final_frac.unwrap_or(0.1)),
            minibatch: Some(given.minibatch.unwrap_or(64)),
            text: given.text.or(scene.spec.train.text),
            memory: given.memory.or(scene.spec.train.memory),
            ..Default::default()
        };
        let train = TrainConfig::from_settings(scene, scene_path, &settings, out)?;
        Ok(Self {
            train,
            teacher: teacher.into(),
            episodes: 64,
            epochs: 10,
            held_out: 0.1,
            words: false,
            play_episodes: 32,
            dagger: 0,
        })
    }
}

/// One epoch's row of `imitation.jsonl` (epoch 0: the untrained learner).
#[derive(Debug, Clone, Serialize)]
pub struct EpochReport {
    /// Epoch, from 1 (0: before training).
    pub epoch: u32,
    /// DAgger's round (0: the teacher's episodes alone).
    pub round: u32,
    /// The pass over the training decisions (absent at epoch 0).
    #[serde(flatten)]
    pub stats: ImitationStats,
    /// Agreement with the teacher on the held-out episodes.
    pub held_out_agreement: f64,
    /// Agreement on the held-out words (families with talk, `--words`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_out_word_agreement: Option<f64>,
    /// Wall seconds of the epoch.
    pub seconds: f64,
}

/// Mean returns of the cloned seats' teams on fresh episodes.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Played {
    /// The teacher, as the scene plays it (an oracle with the whole map); a recording's, the
    /// mean of its recorded episodes.
    pub teacher: f64,
    /// The clone.
    pub clone: f64,
    /// The untrained learner (the catalogue's, seed 0).
    pub untrained: f64,
    /// Episodes each played.
    pub episodes: u32,
}

/// `imitation.json`: what was cloned from what, and how well.
#[derive(Debug, Clone, Serialize)]
pub struct ImitationRecord {
    /// The teacher.
    pub teacher: String,
    /// The learner (`lm`, `mlp`, `gru`).
    pub learner: String,
    /// The language model it started from (`tiny`, `small`, a folder); absent for a network.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The scene file, and the cloned seats (slots of an arena).
    pub scene: PathBuf,
    /// The cloned seats.
    pub seats: Vec<u16>,
    /// Text style and memory the learner read (language models).
    pub text: String,
    /// Past turns kept.
    pub memory: u32,
    /// Whether the words were learned.
    pub words: bool,
    /// Seed, arenas, episodes recorded and held out, decisions trained on and held out.
    pub seed: u64,
    /// Arenas recorded side by side.
    pub arenas: u32,
    /// Episodes recorded.
    pub episodes: u32,
    /// Of which, held out.
    pub held_out_episodes: u32,
    /// Decisions trained on (the teacher's, and DAgger's labelled ones).
    pub train_decisions: usize,
    /// Decisions held out.
    pub held_out_decisions: usize,
    /// Epochs (per DAgger round), learning rate, minibatch.
    pub epochs: u32,
    /// DAgger's rounds.
    pub dagger: u32,
    /// The clone's mean return in each DAgger round's episodes (it acted).
    pub dagger_returns: Vec<f64>,
    /// Learning rate.
    pub lr: f64,
    /// Minibatch (decisions).
    pub minibatch: usize,
    /// The teacher's mean return while recording (deciding from the learner's observation).
    pub teacher_return_recorded: f64,
    /// Agreement with the teacher on the held-out episodes before training and after.
    pub held_out_agreement_untrained: f64,
    /// After the last epoch.
    pub held_out_agreement: f64,
    /// The words', where learned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_out_word_agreement: Option<f64>,
    /// Returns on fresh episodes (absent with `--play-episodes 0`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub played: Option<Played>,
    /// Seconds recording and cloning.
    pub record_seconds: f64,
    /// Seconds cloning.
    pub clone_seconds: f64,
}

/// The end of an imitation run.
#[derive(Debug, Clone)]
pub struct ImitateSummary {
    /// What `imitation.json` holds.
    pub record: ImitationRecord,
    /// Every epoch's row.
    pub epochs: Vec<EpochReport>,
    /// The plot drawn (a drawing failure does not fail the run).
    pub plots: Result<Vec<PathBuf>, String>,
}

/// What a run reports while it goes: the recording's episodes, then each epoch.
pub enum ImitateProgress<'a> {
    /// Episodes recorded of the total.
    Recorded(u32, u32),
    /// An epoch done.
    Epoch(&'a EpochReport),
    /// Playing fresh episodes (who plays).
    Playing(&'static str),
}

/// The teacher decides; the learner reads each decision as its own
/// ([`Policy::follow`]). Registered under the learner's name for the cloned seats.
pub struct Demonstrator {
    teacher: Box<dyn Policy>,
    learner: Box<dyn Policy>,
    /// Whether the teacher is an oracle bot (it reads the whole map, the learner its view).
    oracle: bool,
    /// DAgger's rounds (set between episodes by the run): the learner acts, the teacher
    /// labels.
    dagger: std::sync::Arc<std::sync::atomic::AtomicBool>,
    failure: Option<String>,
}

impl Demonstrator {
    /// `teacher` deciding (an oracle bot when `oracle`), `learner` following; while `dagger`
    /// is set, the learner acts and the teacher labels its states.
    pub fn new(
        teacher: Box<dyn Policy>,
        learner: Box<dyn Policy>,
        oracle: bool,
        dagger: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> Self {
        Self {
            teacher,
            learner,
            oracle,
            dagger,
            failure: None,
        }
    }

    /// DAgger (Ross et al. 2011): the learner decides and its choice is played; the teacher
    /// says what it would have chosen in that state, which the trace carries as the label
    /// ([`crate::core::DecisionTrace::label`], and the word where the learner says one).
    fn learner_acts(&mut self, batch: &mut [Decision<'_>]) {
        self.learner.decide(batch);
        let played: Vec<(u8, Option<Option<u8>>)> = batch
            .iter()
            .map(|d| (d.action.0, d.say.as_deref().map(|u| u.0)))
            .collect();
        self.teach(batch);
        for (d, (action, said)) in batch.iter_mut().zip(played) {
            let label = if d.mask.allows(d.action.0) {
                d.action.0
            } else {
                d.mask.nth(0).unwrap_or(0)
            };
            d.trace.label = Some(label);
            if let (Some(_), Some(u)) = (d.trace.said, d.say.as_deref()) {
                d.trace.said = Some(u.0.map_or(0, |k| k + 1));
            }
            d.action.0 = action;
            if let (Some(u), Some(s)) = (d.say.as_deref_mut(), said) {
                u.0 = s;
            }
        }
    }

    /// The teacher's decisions: an oracle reads the whole map where the family wrote it
    /// ([`crate::core::Observation::oracle_map`]), the rest of each observation as is.
    fn teach(&mut self, batch: &mut [Decision<'_>]) {
        let views: Vec<Option<crate::core::Observation>> = if self.oracle {
            batch.iter().map(|d| d.obs.as_oracle()).collect()
        } else {
            Vec::new()
        };
        if views.iter().all(Option::is_none) {
            self.teacher.decide(batch);
            return;
        }
        let mut seen: Vec<Decision<'_>> = batch
            .iter_mut()
            .zip(&views)
            .map(|(d, v)| Decision {
                agent: d.agent,
                obs: v.as_ref().unwrap_or(d.obs),
                senses: d.senses,
                features: d.features,
                mask: d.mask,
                rng: &mut *d.rng,
                action: &mut *d.action,
                say: d.say.as_deref_mut(),
                team: d.team,
                role: d.role,
                last_reward: d.last_reward,
                trace: &mut *d.trace,
            })
            .collect();
        self.teacher.decide(&mut seen);
    }
}

impl Policy for Demonstrator {
    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        for d in batch.iter_mut() {
            d.trace.label = None;
        }
        if self.dagger.load(std::sync::atomic::Ordering::Relaxed) {
            self.learner_acts(batch);
            return;
        }
        self.teach(batch);
        // The registry's own rule: an illegal choice is the first legal action.
        for d in batch.iter_mut() {
            if !d.mask.allows(d.action.0) {
                d.action.0 = d.mask.nth(0).unwrap_or(0);
            }
        }
        if let Err(e) = self.learner.follow(batch) {
            self.failure.get_or_insert(format!("the learner: {e}"));
        }
    }
    fn setup(&mut self, scene: &Scene, actions: &[String]) -> Result<(), String> {
        self.teacher
            .setup(scene, actions)
            .map_err(|e| format!("the teacher: {e}"))?;
        self.learner
            .setup(scene, actions)
            .map_err(|e| format!("the learner: {e}"))
    }
    fn stats(&self) -> Option<PolicyStats> {
        self.learner.stats()
    }
    fn failure(&self) -> Option<String> {
        self.failure
            .clone()
            .or_else(|| self.teacher.failure().map(|e| format!("the teacher: {e}")))
            .or_else(|| self.learner.failure())
    }
    fn reads_features(&self) -> bool {
        self.teacher.reads_features() || self.learner.reads_features()
    }
    fn teacher_is_oracle(&self) -> bool {
        self.oracle
    }
}

/// The seats the teacher plays: those the scene gives it, else those on `learner`, else those
/// on any learning policy (`lm`, `mlp`, `gru`, a model folder of either), else those on
/// `random` (the placeholder an experiment's arm scenes give the seats its learner takes,
/// which `train` then trains: every team, when none is on the learner).
pub fn cloned_seats(scene: &Scene, teacher: &str, learner: &str) -> Vec<u16> {
    let on = |pick: &dyn Fn(&str) -> bool| -> Vec<u16> {
        (0..scene.agents.len() as u16)
            .filter(|&s| pick(&scene.agents[usize::from(s)].policy))
            .collect()
    };
    let learning = |p: &str| {
        matches!(p, "lm" | "mlp" | "gru") || p.starts_with("lm:") || p.starts_with("mlp:")
    };
    [
        on(&|p| p == teacher),
        on(&|p| p == learner),
        on(&learning),
        on(&|p| p == "random"),
    ]
    .into_iter()
    .find(|s| !s.is_empty())
    .unwrap_or_default()
}

/// The teacher's entry in the catalogue, checked against the scene: a scripted policy (not a
/// learner) that plays the scene's family.
pub(crate) fn check_teacher(
    scene: &Scene,
    teacher: &str,
) -> Result<&'static crate::policy::PolicyInfo, TrainError> {
    let family = scene.spec.family.name();
    let scripted: Vec<&str> = catalogue()
        .iter()
        .filter(|p| !matches!(p.name, "lm" | "mlp" | "gru") && p.plays(family))
        .map(|p| p.name)
        .collect();
    match catalogue().iter().find(|p| p.name == teacher) {
        Some(p) if matches!(p.name, "lm" | "mlp" | "gru") => Err(TrainError::Config(format!(
            "--from {teacher}: a teacher is a scripted policy (a learner is what imitates); \
             {family} has: {}",
            scripted.join(", ")
        ))),
        Some(p) if p.plays(family) => Ok(p),
        Some(_) => Err(TrainError::Config(format!(
            "--from {teacher}: {teacher} does not play {family} (the family of {}); its \
             scripted policies are: {}",
            scene.path.display(),
            scripted.join(", ")
        ))),
        None => Err(TrainError::Config(format!(
            "--from {teacher}: no such policy; {family}'s scripted policies are: {} \
             (`emergence list`)",
            scripted.join(", ")
        ))),
    }
}

/// Runs `cfg`; `on_progress` hears of the recording and of every epoch.
pub fn imitate(
    cfg: &ImitateConfig,
    mut on_progress: impl FnMut(ImitateProgress<'_>),
) -> Result<ImitateSummary, TrainError> {
    let t = &cfg.train;
    let learner = t.learner.policy();
    let mlp = t.learner.classic();
    if !(0.0..=0.5).contains(&cfg.held_out) {
        return Err(TrainError::Config(format!(
            "--held-out {}: expected a share of the episodes from 0 to 0.5",
            cfg.held_out
        )));
    }
    if cfg.episodes == 0 || cfg.epochs == 0 {
        return Err(TrainError::Config(
            "--episodes and --epochs must be at least 1".into(),
        ));
    }
    // The teacher: recorded episodes, or a scripted policy.
    let recorded = match cfg.teacher.strip_prefix("replays:") {
        Some(dir) => Some(replays::read(std::path::Path::new(dir), &t.scene)?),
        None => None,
    };
    let info = match &recorded {
        Some(_) => None,
        None => Some(check_teacher(&t.scene, &cfg.teacher)?),
    };
    if recorded.is_some() && cfg.dagger > 0 {
        return Err(TrainError::Config(format!(
            "--dagger {}: DAgger asks the teacher about the clone's own states, which a \
             recording cannot answer; use a scripted teacher, or leave --dagger out",
            cfg.dagger
        )));
    }
    let mut seats = cloned_seats(&t.scene, &cfg.teacher, learner);
    if recorded.is_some() && seats.is_empty() {
        // A recording: every seat, unless the scene puts some on the learner.
        seats = (0..t.scene.agents.len() as u16).collect();
    }
    if seats.is_empty() {
        return Err(TrainError::Config(format!(
            "{}: no seat plays {} or a learning policy: the teacher plays the seats the \
             scene gives it (or, when none, those it gives the learner, or any `lm`, `mlp` or \
             `gru`, or `random`)",
            t.scene.path.display(),
            cfg.teacher
        )));
    }
    super::refuse_used_folder(&t.out)?;
    let mut scene = t.scene.clone();
    for &s in &seats {
        scene.agents[usize::from(s)].policy = learner.into();
    }
    let mut tcfg = t.clone();
    tcfg.algo = Algo::Reinforce;
    tcfg.scene = scene.clone();
    let arenas = t.arenas.clamp(1, cfg.episodes);
    tcfg.arenas = arenas;
    let per_arena = cfg.episodes.div_ceil(arenas);
    tcfg.iterations = per_arena * (1 + cfg.dagger);
    let episodes = match &recorded {
        Some(r) => r
            .iter()
            .flat_map(|f| f.arenas.iter().map(|&(_, n)| n))
            .sum(),
        None => per_arena * arenas,
    };
    let initial = match &t.model {
        super::ModelChoice::Preset(p) => crate::policy::lm::ModelSource::Embedded {
            preset: *p,
            seed: t.seed,
        },
        super::ModelChoice::Folder(dir) => crate::policy::lm::ModelSource::Folder(dir.clone()),
    };
    let models = super::models::wire(&tcfg, &scene, learner, mlp, None, &initial, 0)?;
    let (name, factory) = models.policy.clone();
    let device = if mlp {
        candle_core::Device::Cpu
    } else {
        t.device.clone()
    };
    let dagger = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The policy of the cloned seats: the teacher (`teacher()` makes it) with the learner
    // following.
    let demonstrator =
        |teacher: std::sync::Arc<dyn Fn() -> (Box<dyn Policy>, bool) + Send + Sync>| {
            let (factory, flag) = (factory.clone(), dagger.clone());
            PolicyFactory(std::sync::Arc::new(move || {
                let (t, oracle) = teacher();
                Box::new(Demonstrator::new(t, (factory.0)(), oracle, flag.clone()))
            }))
        };
    let build = |c: &TrainConfig, share: &std::ops::Range<u32>, policy: PolicyFactory| {
        let run = super::run_config(c, &scene, share, 0, (name.clone(), policy));
        let mut app = build_app_with(&run, |app| {
            app.add_plugins(TrainPlugin {
                learner: learner.to_string(),
                global: false,
                features: mlp,
            });
        })?;
        app.world_mut().resource_mut::<Arenas>().gate = Some(1);
        Ok::<_, TrainError>(app)
    };

    // 1. Record the teacher's episodes.
    let started = Instant::now();
    let mut train = Batch::default();
    let mut held = Batch::default();
    let mut teacher_returns = Vec::new();
    let mut clone_returns = Vec::new();
    let total = episodes * (1 + cfg.dagger);
    let mut done = 0;
    on_progress(ImitateProgress::Recorded(0, total));
    // Every episode with its index in the recording (the held-out ones are spread by it).
    let mut taught: Vec<(u32, Vec<Trajectory>)> = Vec::new();
    let share = 0..arenas;
    let (mut app, actions) = match (&recorded, info) {
        (None, Some(info)) => {
            let (make, oracle) = (info.make, info.oracle);
            let dev = device.clone();
            let mut app = build(
                &tcfg,
                &share,
                demonstrator(std::sync::Arc::new(move || (make(&dev), oracle))),
            )?;
            let actions = app.world().resource::<Rollouts>().actions;
            let (trs, slots) = record(
                &mut app,
                0..per_arena,
                &share,
                (&mut done, total),
                &mut on_progress,
            )?;
            train.slots = slots;
            for tr in trs {
                let i = tr.episode * arenas + tr.arena;
                match taught.iter_mut().find(|(k, _)| *k == i) {
                    Some((_, v)) => v.push(tr),
                    None => taught.push((i, vec![tr])),
                }
            }
            (Some(app), actions)
        }
        (Some(files), _) => {
            let mut actions = 0;
            for f in files {
                for &(a, n) in &f.arenas {
                    let mut c = tcfg.clone();
                    c.seed = f.seed;
                    c.iterations = n;
                    let one = f.clone();
                    let mut app = build(
                        &c,
                        &(a..a + 1),
                        demonstrator(std::sync::Arc::new(move || {
                            (Box::new(one.teacher()) as Box<dyn Policy>, false)
                        })),
                    )?;
                    actions = app.world().resource::<Rollouts>().actions;
                    let (trs, slots) = record(
                        &mut app,
                        0..n,
                        &(a..a + 1),
                        (&mut done, total),
                        &mut on_progress,
                    )?;
                    train.slots = slots;
                    for e in 0..n {
                        let i = taught.len() as u32;
                        taught.push((i, trs.iter().filter(|t| t.episode == e).cloned().collect()));
                    }
                }
            }
            (None, actions)
        }
        (None, None) => unreachable!("a teacher is a policy or a recording"),
    };
    held.slots = train.slots;
    taught.sort_by_key(|(i, _)| *i);
    for (i, trs) in taught {
        teacher_returns.extend(episode_returns(&trs));
        let i = f64::from(i);
        // Held out: episode i when the running count of held-out episodes steps up at it.
        if ((i + 1.0) * cfg.held_out).floor() > (i * cfg.held_out).floor() {
            held.trajectories.extend(trs);
        } else {
            train.trajectories.extend(trs);
        }
    }
    let mut record_seconds = started.elapsed().as_secs_f64();
    let decisions = |b: &Batch| b.trajectories.iter().map(|t| t.steps.len()).sum::<usize>();
    if decisions(&train) == 0 {
        return Err(TrainError::Config(format!(
            "the teacher made no decision in the seats {seats:?} of {episodes} episodes"
        )));
    }
    let held_out_episodes = {
        let mut e: Vec<(u32, u32)> = held
            .trajectories
            .iter()
            .map(|t| (t.arena, t.episode))
            .collect();
        e.dedup();
        e.len() as u32
    };

    // 2-3. Clone: epochs on the teacher's episodes, then for each DAgger round the learner's
    //    own episodes labelled by the teacher, added to them, and as many epochs again.
    let trainers = super::Trainers {
        mlp,
        actions,
        device: &device,
        share: &share,
    };
    let mut learners = trainers.learners(
        &tcfg,
        models.names.clone(),
        &models.handles,
        &models.mlp_handles,
        &[],
    )?;
    let Some(l) = learners.first_mut() else {
        return Err(TrainError::Config("no learner".into()));
    };
    let clone_start = Instant::now();
    std::fs::create_dir_all(&t.out).map_err(super::io_err(&t.out))?;
    let mut reports: Vec<EpochReport> = Vec::new();
    let measure = |l: &mut super::Learner, b: &Batch| -> Result<Agreement, TrainError> {
        if b.trajectories.is_empty() {
            Ok(Agreement::default())
        } else {
            l.trainer.agreement(b, cfg.words)
        }
    };
    let e0 = Instant::now();
    let a0 = measure(l, &held)?;
    let mut out_rows = Rows {
        path: t.out.join("imitation.jsonl"),
        text: String::new(),
    };
    out_rows.push(
        EpochReport {
            epoch: 0,
            round: 0,
            stats: ImitationStats::default(),
            held_out_agreement: a0.actions,
            held_out_word_agreement: a0.words,
            seconds: e0.elapsed().as_secs_f64(),
        },
        &mut reports,
        &mut on_progress,
    )?;
    let all = cfg.epochs * (1 + cfg.dagger);
    let mut e = 0;
    for round in 0..=cfg.dagger {
        if round > 0 {
            let r_start = Instant::now();
            dagger.store(true, std::sync::atomic::Ordering::Relaxed);
            let from = round * per_arena;
            let Some(app) = app.as_mut() else {
                return Err(TrainError::Config("DAgger needs a scripted teacher".into()));
            };
            let (own, _) = record(
                app,
                from..from + per_arena,
                &share,
                (&mut done, total),
                &mut on_progress,
            )?;
            clone_returns.push(mean(&episode_returns(&own)));
            train.trajectories.extend(own);
            record_seconds += r_start.elapsed().as_secs_f64();
        }
        for _ in 0..cfg.epochs {
            e += 1;
            let e_start = Instant::now();
            l.trainer
                .schedule(f64::from(e - 1) / f64::from(all.saturating_sub(1).max(1)));
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(
                t.seed ^ 0x696d_6974_0000_0000 ^ u64::from(e),
            );
            let stats = l.trainer.imitate(&train, cfg.words, &mut rng)?;
            let a = measure(l, &held)?;
            out_rows.push(
                EpochReport {
                    epoch: e,
                    round,
                    stats,
                    held_out_agreement: a.actions,
                    held_out_word_agreement: a.words,
                    seconds: e_start.elapsed().as_secs_f64(),
                },
                &mut reports,
                &mut on_progress,
            )?;
        }
    }
    drop(app);
    let clone_seconds = clone_start.elapsed().as_secs_f64();
    let model_dir = t.out.join("model");
    super::checkpoint::write_model(&learners[0], &model_dir)?;
    let plots = crate::metrics::plot::plot_imitation(&t.out).map_err(|e| e.to_string());

    // 4. Play.
    let played = if cfg.play_episodes > 0 {
        let clone_policy = if mlp {
            format!("mlp:{}", model_dir.display())
        } else {
            format!("lm:{}", model_dir.display())
        };
        let mut play = |who: &'static str, policy: &str| -> Result<f64, TrainError> {
            on_progress(ImitateProgress::Playing(who));
            play_seats(cfg, &t.scene, &seats, policy)
        };
        Some(Played {
            // A recording's teacher is not played again: its recorded episodes' return.
            teacher: match &recorded {
                Some(_) => mean(&teacher_returns),
                None => play("teacher", &cfg.teacher)?,
            },
            clone: play("clone", &clone_policy)?,
            untrained: play("untrained", learner)?,
            episodes: cfg.play_episodes,
        })
    } else {
        None
    };
    let last = reports.last().cloned();
    let record = ImitationRecord {
        teacher: cfg.teacher.clone(),
        learner: learner.into(),
        model: (!mlp).then(|| t.model.name()),
        scene: t.scene_path.clone(),
        seats,
        text: format!("{:?}", t.scene.spec.text),
        memory: t.scene.spec.memory,
        words: cfg.words,
        seed: t.seed,
        arenas,
        episodes,
        held_out_episodes,
        train_decisions: decisions(&train),
        held_out_decisions: decisions(&held),
        epochs: cfg.epochs,
        dagger: cfg.dagger,
        dagger_returns: clone_returns,
        lr: t.hyper.lr,
        minibatch: t.hyper.minibatch,
        teacher_return_recorded: mean(&teacher_returns),
        held_out_agreement_untrained: a0.actions,
        held_out_agreement: last.as_ref().map_or(0.0, |r| r.held_out_agreement),
        held_out_word_agreement: last.and_then(|r| r.held_out_word_agreement),
        played,
        record_seconds,
        clone_seconds,
    };
    let path = t.out.join("imitation.json");
    let json =
        serde_json::to_string_pretty(&record).map_err(|e| TrainError::Config(e.to_string()))?;
    super::run_dir::write_atomic(&path, json.as_bytes())?;
    super::run_dir::write_atomic(&model_dir.join("imitation.json"), json.as_bytes())?;
    let scene_copy = std::fs::read(&t.scene_path).map_err(super::io_err(&t.scene_path))?;
    super::run_dir::write_atomic(&t.out.join("scene.ron"), &scene_copy)?;
    Ok(ImitateSummary {
        record,
        epochs: reports,
        plots,
    })
}

/// Episodes `k` of every arena of `share`, for `k` in `ks` (the arenas gated one episode at a
/// time, as training gates them), and the agents per arena.
fn record(
    app: &mut bevy::app::App,
    ks: std::ops::Range<u32>,
    share: &std::ops::Range<u32>,
    (done, total): (&mut u32, u32),
    on_progress: &mut impl FnMut(ImitateProgress<'_>),
) -> Result<(Vec<Trajectory>, usize), TrainError> {
    let mut out = Vec::new();
    let mut slots = 0;
    for k in ks {
        super::collect(app, k, share)?;
        let batch = app.world_mut().resource_mut::<Rollouts>().take(k);
        app.world_mut().resource_mut::<Arenas>().gate = Some(k + 2);
        slots = batch.slots;
        out.extend(batch.trajectories);
        *done += share.len() as u32;
        on_progress(ImitateProgress::Recorded(*done, total));
    }
    Ok((out, slots))
}

/// `imitation.jsonl`, written whole after each epoch.
struct Rows {
    path: PathBuf,
    text: String,
}

impl Rows {
    /// Appends `r` to the file and to `reports`, and tells `on_progress`.
    fn push(
        &mut self,
        r: EpochReport,
        reports: &mut Vec<EpochReport>,
        on_progress: &mut impl FnMut(ImitateProgress<'_>),
    ) -> Result<(), TrainError> {
        let line = serde_json::to_string(&r).map_err(|e| TrainError::Config(e.to_string()))?;
        self.text.push_str(&line);
        self.text.push('\n');
        super::run_dir::write_atomic(&self.path, self.text.as_bytes())?;
        on_progress(ImitateProgress::Epoch(&r));
        reports.push(r);
        Ok(())
    }
}

/// The mean of `v` (0 when empty).
fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// Each recorded episode's return of the cloned seats (their rewards summed, then the mean
/// over the seats of the episode).
fn episode_returns(trajectories: &[Trajectory]) -> Vec<f64> {
    let mut by: std::collections::BTreeMap<(u32, u32), (f64, u32)> = Default::default();
    for tr in trajectories {
        let r: f64 = tr.steps.iter().map(|s| f64::from(s.reward)).sum();
        let e = by.entry((tr.arena, tr.episode)).or_default();
        e.0 += r;
        e.1 += 1;
    }
    by.values().map(|(r, n)| r / f64::from(*n)).collect()
}

/// The mean return of the cloned seats on `play_episodes` fresh episodes (one per arena, on
/// seeds the recording never used) with `policy` in them.
fn play_seats(
    cfg: &ImitateConfig,
    scene: &Scene,
    seats: &[u16],
    policy: &str,
) -> Result<f64, TrainError> {
    let t = &cfg.train;
    let mut scene = scene.clone();
    for &s in seats {
        scene.agents[usize::from(s)].policy = policy.into();
    }
    let mut run = RunConfig::new(scene.clone());
    run.arenas = cfg.play_episodes;
    run.episodes = 1;
    run.seed = t.seed ^ 0x706c_6179_0000_0000;
    run.threads = t.threads;
    run.device = t.device.clone();
    let report = crate::headless::run(&run, |_| {})?;
    // The teams of the cloned seats, each weighed by its seats.
    let (mut sum, mut n) = (0.0, 0.0);
    for &s in seats {
        let team = usize::from(scene.agents[usize::from(s)].team);
        if let Some(r) = report.team_returns.get(team) {
            sum += r;
            n += 1.0;
        }
    }
    Ok(if n > 0.0 { sum / n } else { 0.0 })
}
