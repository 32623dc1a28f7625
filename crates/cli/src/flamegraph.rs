//! `vramscope flamegraph` (being written).

use crate::CliError;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_a: Args) -> Result<(), CliError> {
    Err(CliError::Invalid(anyhow::anyhow!("flamegraph is not available yet")))
}
