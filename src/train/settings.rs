//! How a scene's `train:` block and the command's flags ([`TrainSettings`], data kept with
//! the scene) resolve into a run's algorithm, learner and hyper-parameters.

use super::{Algo, Hyper, LearnerKind};
pub use crate::scene::settings::TrainSettings;

impl TrainSettings {
    /// The algorithm, learner and hyper-parameters these settings give, the algorithm's
    /// and the learner's defaults ([`Hyper::for_learner`]) filling the fields not given.
    pub fn resolve(&self) -> (Algo, LearnerKind, Hyper) {
        let algo = self.algo.unwrap_or(Algo::Ippo);
        let learner = self.learner.unwrap_or_default();
        let base = Hyper::for_learner(algo, learner);
        let hyper = Hyper {
            lr: self.lr.unwrap_or(base.lr),
            lr_final_frac: self.lr_final_frac.unwrap_or(base.lr_final_frac),
            weight_decay: self.weight_decay.unwrap_or(base.weight_decay),
            clip: self.clip.unwrap_or(base.clip),
            value_coef: self.value_coef.unwrap_or(base.value_coef),
            max_grad_norm: self.max_grad_norm.unwrap_or(base.max_grad_norm),
            group_std: self.group_std.unwrap_or(base.group_std),
            kl_coef: self.kl_coef.unwrap_or(base.kl_coef),
            target_kl: self.target_kl.unwrap_or(base.target_kl),
            entropy_coef: self.entropy_coef.unwrap_or(base.entropy_coef),
            gamma: self.gamma.unwrap_or(base.gamma),
            lambda: self.lambda.unwrap_or(base.lambda),
            epochs: self.epochs.unwrap_or(base.epochs),
            minibatch: self.minibatch.unwrap_or(base.minibatch),
            group_size: self.group_size.unwrap_or(base.group_size),
            aa_beta: self.aa_beta.unwrap_or(base.aa_beta),
            swap_every: self.swap_every.unwrap_or(base.swap_every),
            lora_rank: self.lora_rank.unwrap_or(base.lora_rank),
        };
        (algo, learner, hyper)
    }

    /// A run's settings, every field given (what its limits are checked against).
    pub fn of_run(cfg: &super::TrainConfig) -> TrainSettings {
        let h = &cfg.hyper;
        TrainSettings {
            algo: Some(cfg.algo),
            iterations: Some(cfg.iterations),
            arenas: Some(cfg.arenas),
            seed: Some(cfg.seed),
            model: Some(cfg.model.name()),
            learner: Some(cfg.learner),
            lr: Some(h.lr),
            lr_final_frac: Some(h.lr_final_frac),
            weight_decay: Some(h.weight_decay),
            clip: Some(h.clip),
            value_coef: Some(h.value_coef),
            max_grad_norm: Some(h.max_grad_norm),
            group_std: Some(h.group_std),
            kl_coef: Some(h.kl_coef),
            target_kl: Some(h.target_kl),
            entropy_coef: Some(h.entropy_coef),
            gamma: Some(h.gamma),
            lambda: Some(h.lambda),
            epochs: Some(h.epochs),
            minibatch: Some(h.minibatch),
            group_size: Some(h.group_size),
            aa_beta: Some(h.aa_beta),
            swap_every: Some(h.swap_every),
            sharing: Some(cfg.sharing),
            lora_rank: Some(h.lora_rank),
            checkpoint_every: Some(cfg.checkpoint_every),
            overlap: Some(cfg.overlap),
            text: Some(cfg.scene.spec.text),
            memory: Some(cfg.scene.spec.memory),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_over_the_scene_and_defaults_fill_the_rest() {
        let scene = TrainSettings {
            algo: Some(Algo::Magrpo),
            lr: Some(0.01),
            epochs: Some(2),
            ..Default::default()
        };
        let flags = TrainSettings {
            lr: Some(0.5),
            learner: Some(LearnerKind::Mlp),
            ..Default::default()
        };
        let s = flags.over(scene);
        assert_eq!(s.given(), ["--algo", "--learner", "--lr", "--epochs"]);
        let (algo, learner, h) = s.resolve();
        assert_eq!((algo, learner), (Algo::Magrpo, LearnerKind::Mlp));
        assert_eq!(
            (h.lr, h.epochs, h.group_size, h.minibatch),
            (0.5, 2, 4, 1024)
        );
        assert!(TrainSettings::default().given().is_empty());
    }
}
