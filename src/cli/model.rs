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
    /// Time the model's forward pass on this machine: tokens/s and GFLOP/s of a batch of
    /// prompts (logits at every position, as `forward/*` in `cargo bench --bench inference`),
    /// beside the rate of one matrix product of the model's MLP shape, and the vector
    /// instructions the kernels run (python/benches/forward_vs_torch.py runs it beside
    /// PyTorch and numpy).
    Bench {
        /// A preset (`tiny`, `small`) with seeded weights, or a model folder.
        #[arg(long, default_value = "small")]
        model: String,
        /// Prompts per forward, 1 to 4,096.
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
        batch: u32,
        /// Tokens per prompt, 1 to 32,768 (and at most the model's positions).
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=32768))]
        prompt: u32,
        /// Seconds to time each of the two, 0.1 to 600.
        #[arg(long, default_value_t = 3.0, value_parser = parse_seconds)]
        seconds: f64,
        /// Threads for the model's kernels and matrix products [default: one per core].
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
        threads: Option<u16>,
    },
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if (0.1..=600.0).contains(&x) => Ok(x),
        _ => Err(format!("{s:?}: expected seconds from 0.1 to 600")),
    }
}

/// Runs `f` until `seconds` have passed (at least three times, after one untimed run) and
/// returns the median seconds of one run.
fn median_seconds(seconds: f64, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let start = std::time::Instant::now();
    let mut times = Vec::new();
    while times.len() < 3 || start.elapsed().as_secs_f64() < seconds {
        let t = std::time::Instant::now();
        f()?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// `emergence model bench`.
fn bench(model: &str, batch: u32, prompt: u32, seconds: f64) -> Result<()> {
    use candle_core::{DType, Device, Tensor};
    use emergence::policy::lm::model::init_weights;
    use emergence::policy::lm::{Decoder, LmConfig, ModelFolder, Pass, Preset};
    let dev = Device::Cpu;
    let (cfg, weights, what) = match Preset::parse(model) {
        Some(p) => {
            let cfg = LmConfig::preset(p, 160);
            let w = init_weights(&cfg, 0, &dev)?;
            (cfg, w, format!("the {model} preset, seeded weights"))
        }
        None => {
            let m = ModelFolder::load(std::path::Path::new(model), &dev).with_context(|| {
                format!("--model {model}: expected tiny, small or a model folder")
            })?;
            (m.config, m.weights, format!("the folder {model}"))
        }
    };
    let (b, t) = (batch as usize, prompt as usize);
    if t > cfg.max_position_embeddings {
        anyhow::bail!(
            "--prompt {t}: the model reads at most {} positions; expected 1 to {}",
            cfg.max_position_embeddings,
            cfg.max_position_embeddings
        );
    }
    let dec = Decoder::new(&cfg, &weights, std::path::Path::new(model))?;
    let ids: Vec<u32> = (0..b * t)
        .map(|i| (i * 31 % cfg.vocab_size) as u32)
        .collect();
    let ids = Tensor::from_vec(ids, (b, t), &dev)?;
    let forward = median_seconds(seconds, || {
        dec.forward(&ids, None, Pass::Fast)?;
        Ok(())
    })?;
    // FLOPs of the forward: every projection, the causal attention's two products (half of
    // each square) and the head, two per multiply-add.
    let (h, i, l, v) = (
        cfg.hidden_size as f64,
        cfg.intermediate_size as f64,
        cfg.num_hidden_layers as f64,
        cfg.vocab_size as f64,
    );
    let kv = (cfg.kv_heads() * cfg.head_dim()) as f64;
    let n = (b * t) as f64;
    let flops = 2.0 * n * (l * (2.0 * h * h + 2.0 * h * kv + 3.0 * h * i) + h * v)
        + l * 2.0 * b as f64 * (t * t) as f64 * h;
    let a = Tensor::ones((b * t, cfg.hidden_size), DType::F32, &dev)?;
    let w = Tensor::ones((cfg.hidden_size, cfg.intermediate_size), DType::F32, &dev)?;
    let product = median_seconds(seconds, || {
        a.matmul(&w)?;
        Ok(())
    })?;
    let product_flops = 2.0 * n * h * i;
    let threads = rayon::current_num_threads();
    println!(
        "model                 {what} ({} parameters)",
        cfg.parameters()
    );
    println!(
        "shape                 batch {b} x prompt {t} = {} tokens; {threads} threads",
        b * t
    );
    println!(
        "vector instructions   {}",
        emergence::policy::lm::cpu::kernels::instructions()
    );
    println!("forward seconds       {forward:.6}");
    println!("forward tokens/s      {:.0}", n / forward);
    println!("forward GFLOP/s       {:.1}", flops / forward / 1e9);
    println!(
        "matmul GFLOP/s        {:.1}  ({} x {} x {}, the MLP's first product)",
        product_flops / product / 1e9,
        b * t,
        cfg.hidden_size,
        cfg.intermediate_size
    );
    Ok(())
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
        ModelCommand::Bench {
            model,
            batch,
            prompt,
            seconds,
            threads: _,
        } => bench(&model, batch, prompt, seconds),
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
