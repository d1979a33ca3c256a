//! `emergence check`: validate a scene (or experiment) file and describe it.

use anyhow::{Context, Result};
use std::path::Path;

use emergence::envs::action_names;
use emergence::load::load_scene;
use emergence::scene::Scene;

pub fn describe(scene: &Scene) -> String {
    let mut s = String::new();
    let spec = &scene.spec;
    s += &format!("scene     {}\n", spec.name);
    if !spec.description.is_empty() {
        s += &format!("about     {}\n", spec.description.trim());
    }
    s += &format!("family    {}\n", spec.family.name());
    if scene.width > 0 {
        s += &format!("map       {} × {}\n", scene.width, scene.height);
    }
    s += &format!("agents    {} per arena\n", scene.agent_count());
    s += &format!("episode   {} steps at most\n", spec.episode.max_steps);
    s += &emergence::envs::family::of(scene).describe(scene);
    s += &format!("actions   {}\n", action_names(scene).join(" "));
    s += "teams\n";
    for (i, t) in spec.teams.iter().enumerate() {
        let n = scene.agents.iter().filter(|a| a.team as usize == i).count();
        let role = t.role.as_deref().unwrap_or(&t.name);
        s += &format!(
            "  {:<16} {:>3} agents  role {:<14} policy {}\n",
            t.name,
            n,
            role,
            t.policy.key()
        );
    }
    s
}

pub fn cmd_check(path: &Path) -> Result<()> {
    if path
        .to_string_lossy()
        .ends_with(emergence::experiment::EXTENSION)
    {
        let e = emergence::experiment::load(path)?;
        println!("{}: a valid experiment", path.display());
        println!("claim     {}", e.spec.claim);
        println!("source    {}", e.spec.source);
        for (a, s) in e.spec.arms.iter().zip(&e.scenes) {
            println!(
                "arm       {:<16} scene {}",
                a.name,
                s.file
                    .as_ref()
                    .map_or("(inline)".to_string(), |f| f.display().to_string())
            );
        }
        println!("seeds     {:?}", e.spec.seeds);
        println!("checks    {}", e.spec.expect.join("; "));
        for c in &e.spec.also {
            println!("also      {}: {}", c.name, c.expect.join("; "));
        }
        return Ok(());
    }
    let scene = load_scene(path)?;
    // The model folders the teams name load as a run would load them.
    for t in &scene.spec.teams {
        if let emergence::scene::PolicySpec::Lm(emergence::scene::LmSpec { model: Some(m) }) =
            &t.policy
        {
            let folder =
                emergence::policy::lm::ModelFolder::load(Path::new(m), &candle_core::Device::Cpu)
                    .with_context(|| {
                    format!("{}: team {:?}: lm(model: {m:?})", path.display(), t.name)
                })?;
            emergence::policy::lm::tokenizer::warn_unknown_scene_words(
                &folder.tokenizer,
                &scene,
                &Path::new(m).join("tokenizer.json"),
            );
        }
        // A trained `mlp`/`gru` folder (`mlp:DIR`): read and checked against the scene's
        // actions and words, as a run's setup does.
        if let emergence::scene::PolicySpec::Name(n) = &t.policy
            && let Some(dir) = n.strip_prefix("mlp:")
        {
            use emergence::policy::Policy;
            let mut p = emergence::policy::mlp::MlpPolicy::from_folder(
                dir.into(),
                candle_core::Device::Cpu,
                Default::default(),
            );
            p.setup(&scene, &emergence::envs::action_names(&scene))
                .map_err(anyhow::Error::msg)
                .with_context(|| format!("{}: team {:?}: policy {n:?}", path.display(), t.name))?;
        }
    }
    print!("{}", describe(&scene));
    println!("ok: {}", path.display());
    Ok(())
}
