//! The models a run trains and the policy its learners decide with: one model shared by
//! every learner (`--sharing shared`, or LoRA adapters per role or agent over one base with
//! `role-lora`/`agent-lora`); one per learning team (`separate`, checkpoint subfolders
//! `team_NAME`); CORY's two copies (`agent_0`, `agent_1`), which swap the pioneer's seat.
//! The policy shares its weights with the learners through the handles returned here.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use super::algo::cory;
use super::{Algo, Sharing, TrainConfig, TrainError, sharing};
use crate::policy::PolicyFactory;
use crate::policy::lm::{LmPolicy, ModelSource, TrainHandle};
use crate::policy::mlp::{MlpHandle, MlpPolicy};
use crate::scene::Scene;

/// The subfolder of an `--overlap` checkpoint's model folder that holds the network its
/// policy decides the next iteration with (the weights before the last update).
pub(super) const BEHAVIOUR: &str = "behaviour";

/// What [`wire`] sets up.
pub(super) struct Models {
    /// Each model's checkpoint subfolder (`None`: the run's folder itself).
    pub names: Vec<Option<String>>,
    /// Which model decides for each slot (empty when one model decides for all).
    pub model_of_slot: Vec<Option<usize>>,
    /// Whether decisions are routed between several models (separate models, CORY).
    pub routed: bool,
    /// Each language model's weights, shared by the policy and its learner.
    pub handles: Vec<TrainHandle>,
    /// Each mlp's network, shared alike.
    pub mlp_handles: Vec<MlpHandle>,
    /// `--overlap`: the network each mlp's policy decides with, apart from the trained one
    /// (the loop copies the trained weights into it between rollouts); empty otherwise.
    pub behaviour: Vec<MlpHandle>,
    /// Which of CORY's copies is the pioneer now (the loop swaps it).
    pub pioneer: Arc<AtomicUsize>,
    /// The learners' policy, by the name their seats use.
    pub policy: (String, PolicyFactory),
}

/// The models of `cfg` on `scene` (whose learning seats are on `learner`), starting at
/// iteration `start`, from the checkpoint folder `resumed` or else from `initial`.
pub(super) fn wire(
    cfg: &TrainConfig,
    scene: &Scene,
    learner: &str,
    mlp: bool,
    resumed: Option<&Path>,
    initial: &ModelSource,
    start: u32,
) -> Result<Models, TrainError> {
    let policy: Option<(String, PolicyFactory)>;
    let cory = cfg.algo == Algo::Cory;
    if cory && cfg.hyper.swap_every == 0 {
        return Err(TrainError::Config("--swap-every must be at least 1".into()));
    }
    // One model; CORY's two copies (checkpoint subfolders agent_0 and agent_1); or a model
    // per learning team (team_NAME).
    let (model_of_slot, names): (Vec<Option<usize>>, Vec<Option<String>>) = if cory {
        let of = cory::copies_of_slots(scene).ok_or(super::SettingsError::CoryTwoAgents)?;
        (of, (0..2).map(|m| Some(format!("agent_{m}"))).collect())
    } else if cfg.sharing == Sharing::Separate {
        let (of, n) = sharing::models_of_slots(scene, learner);
        let team_names = scene.team_names();
        let mut names = vec![None; n];
        for (slot, m) in of.iter().enumerate() {
            if let Some(m) = *m {
                let team = usize::from(scene.agents[slot].team);
                names[m] = Some(format!(
                    "team_{}",
                    team_names.get(team).copied().unwrap_or("")
                ));
            }
        }
        (of, names)
    } else {
        (Vec::new(), vec![None])
    };
    let routed = names.len() > 1 || cory;
    let handles: Vec<TrainHandle> = names.iter().map(|_| TrainHandle::default()).collect();
    let mlp_handles: Vec<MlpHandle> = names.iter().map(|_| MlpHandle::default()).collect();
    let sources: Vec<ModelSource> = names
        .iter()
        .map(|n| match (&resumed, n) {
            (Some(dir), Some(n)) => ModelSource::Folder(dir.join(n)),
            (Some(dir), None) => ModelSource::Folder(dir.to_path_buf()),
            (None, _) => initial.clone(),
        })
        .collect();
    // The language models decide where they train (`--device`); an mlp on the CPU.
    let device = cfg.device.clone();
    let pioneer = Arc::new(AtomicUsize::new(
        (start / cfg.hyper.swap_every.max(1)) as usize % 2,
    ));
    let mut behaviour = Vec::new();
    if mlp {
        // A fresh run builds each network from the run seed at its first decision, or reads
        // it from `--model DIR` (a network folder: an `imitate` clone, another run's
        // checkpoint); a resumed one reads it from the checkpoint.
        let start = match &cfg.model {
            super::ModelChoice::Folder(dir) => Some(dir.clone()),
            super::ModelChoice::Preset(_) => None,
        };
        let mut folders: Vec<Option<PathBuf>> = names
            .iter()
            .map(|n| match resumed {
                Some(dir) => Some(match n {
                    Some(n) => dir.join(n),
                    None => dir.to_path_buf(),
                }),
                None => start.clone(),
            })
            .collect();
        let mut h = mlp_handles.clone();
        if cfg.overlap {
            // The policy decides with networks of its own: on resume, the weights it played
            // the next iteration with (`behaviour/`), the trained ones read here.
            behaviour = names.iter().map(|_| MlpHandle::default()).collect();
            for (f, t) in folders.iter_mut().zip(&mlp_handles) {
                if let Some(dir) = f {
                    let net = crate::policy::mlp::MlpNet::load(dir, &candle_core::Device::Cpu)
                        .map_err(TrainError::Config)?;
                    t.set(net);
                    *dir = dir.join(BEHAVIOUR);
                }
            }
            h = behaviour.clone();
        }
        let (of, seed) = (model_of_slot.clone(), cfg.seed);
        let memory = cfg.learner == crate::train::LearnerKind::Gru;
        policy = Some((
            learner.into(),
            PolicyFactory(Arc::new(move || {
                let make = |m: usize| -> Box<dyn crate::policy::Policy> {
                    let dev = candle_core::Device::Cpu;
                    Box::new(
                        match &folders[m] {
                            Some(dir) => MlpPolicy::from_folder(dir.clone(), dev, h[m].clone()),
                            None => MlpPolicy::with_handle(seed, dev, h[m].clone()),
                        }
                        .with_memory(memory),
                    )
                };
                if routed {
                    Box::new(sharing::RoutedPolicy::new(
                        (0..h.len()).map(make).collect(),
                        of.clone(),
                    ))
                } else {
                    make(0)
                }
            })),
        ));
    } else if cory {
        let (s, h, p) = (sources.clone(), handles.clone(), pioneer.clone());
        policy = Some((
            "lm".into(),
            PolicyFactory(Arc::new(move || {
                let copy =
                    |m: usize| LmPolicy::with_handle(s[m].clone(), device.clone(), h[m].clone());
                Box::new(cory::CoryPolicy::new([copy(0), copy(1)], p.clone()))
            })),
        ));
    } else if routed {
        let (s, h, of) = (sources.clone(), handles.clone(), model_of_slot.clone());
        policy = Some((
            "lm".into(),
            PolicyFactory(Arc::new(move || {
                let models = (0..s.len())
                    .map(|m| -> Box<dyn crate::policy::Policy> {
                        Box::new(LmPolicy::with_handle(
                            s[m].clone(),
                            device.clone(),
                            h[m].clone(),
                        ))
                    })
                    .collect();
                Box::new(sharing::RoutedPolicy::new(models, of.clone()))
            })),
        ));
    } else if matches!(cfg.sharing, Sharing::RoleLora | Sharing::AgentLora) {
        if cfg.hyper.lora_rank == 0 {
            return Err(TrainError::Config("--lora-rank must be at least 1".into()));
        }
        let (s, h) = (sources[0].clone(), handles[0].clone());
        let lora = crate::policy::lm::LoraConfig::all(cfg.hyper.lora_rank);
        let owner = match cfg.sharing {
            Sharing::AgentLora => crate::policy::lm::AdapterOwner::Agent,
            _ => crate::policy::lm::AdapterOwner::Role,
        };
        policy = Some((
            "lm".into(),
            PolicyFactory(Arc::new(move || {
                Box::new(
                    LmPolicy::with_handle(s.clone(), device.clone(), h.clone())
                        .with_lora(lora.clone(), owner),
                )
            })),
        ));
    } else {
        policy = Some((
            "lm".into(),
            LmPolicy::factory(sources[0].clone(), device, Some(handles[0].clone())),
        ));
    }
    Ok(Models {
        names,
        model_of_slot,
        routed,
        handles,
        mlp_handles,
        behaviour,
        pioneer,
        policy: policy.expect("every branch sets the policy"),
    })
}
