//! `emergence plot`: redraw a training run's plots from its metrics.

use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct PlotArgs {
    /// The run folder (`emergence train --out`).
    pub run: PathBuf,
}

pub fn cmd_plot(args: PlotArgs) -> Result<()> {
    let files = emergence::metrics::plot::plot_run(&args.run)?;
    for f in files {
        println!("{}", f.display());
    }
    Ok(())
}
