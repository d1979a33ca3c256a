//! `emergence model`: create or inspect language-model folders.

use anyhow::{Context, Result};
use clap::Subcommand;
use std::path::PathBuf;

use emergence::load::{load_scene, parse_scene};
use emergence::scene::{Scene, find_scenes, shipped};

#[derive(Subcommand)]
pub enum ModelCommand {
    /// Write a fresh, seeded model folder in the Hugging Face layout.
    Init {
        /// The folder to create (must not exist).
        #[arg(long)]
        out: PathBuf,
        /// Size: `tiny` (about 1M parameters) or `small` (about 38M).
        #[arg(long, default_value = "tiny")]
        preset: String,
        /// Weight seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// More scenes whose words the tokenizer must cover (every `*.scene.ron` below), on
        /// top of the shipped ones (embedded in the binary).
        #[arg(long)]
        scenes: Option<PathBuf>,
    },
    /// Load a model folder and print its shape.
    Info {
        /// The model folder.
        path: PathBuf,
    },
}

pub fn cmd_model(cmd: ModelCommand) -> Result<()> {
    use emergence::policy::lm::{ModelFolder, Preset};
    match cmd {
        ModelCommand::Init {
            out,
            preset,
            seed,
            scenes,
        } => {
            let p = Preset::parse(&preset)
                .with_context(|| format!("--preset {preset:?}: expected tiny or small"))?;
            let mut found: Vec<Scene> = shipped()
                .into_iter()
                .map(|(path, text)| parse_scene(text, &path))
                .collect::<Result<_, _>>()?;
            if let Some(scenes) = &scenes {
                if !scenes.is_dir() {
                    anyhow::bail!(
                        "--scenes {}: not a folder; expected a folder of the scenes the model \
                         will play (their words join the shipped scenes' in the tokenizer)",
                        scenes.display()
                    );
                }
                let paths = find_scenes(scenes);
                if paths.is_empty() {
                    anyhow::bail!(
                        "--scenes {}: no *.scene.ron below it; expected a folder of the scenes \
                         the model will play (their words join the shipped scenes' in the \
                         tokenizer)",
                        scenes.display()
                    );
                }
                for p in paths {
                    found.push(load_scene(&p)?);
                }
            }
            let m = ModelFolder::init(p, seed, &found, &candle_core::Device::Cpu)?;
            m.save(&out)?;
            println!(
                "wrote {} ({} preset, {} parameters, {} tokens in the tokenizer, seed {seed})",
                out.display(),
                preset,
                m.config.parameters(),
                m.tokenizer.get_vocab_size(true)
            );
            Ok(())
        }
        ModelCommand::Info { path } => {
            let m = ModelFolder::load(&path, &candle_core::Device::Cpu)?;
            let c = &m.config;
            println!("model      {}", path.display());
            println!(
                "shape      hidden {}, {} layers, {} heads ({} key/value), intermediate {}",
                c.hidden_size,
                c.num_hidden_layers,
                c.num_attention_heads,
                c.kv_heads(),
                c.intermediate_size
            );
            println!(
                "vocabulary {} (tokenizer {})",
                c.vocab_size,
                m.tokenizer.get_vocab_size(true)
            );
            println!("parameters {}", c.parameters());
            Ok(())
        }
    }
}
