//! `vramscope segments` (being written).

use crate::CliError;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_a: Args) -> Result<(), CliError> {
    Err(CliError::Invalid(anyhow::anyhow!("segments is not available yet")))
}
