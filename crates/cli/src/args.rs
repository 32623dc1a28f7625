//! Arguments that most commands take, declared once so that their names,
//! short forms and help read the same everywhere. A command flattens the
//! struct that says what its `--device` means: one device, or a filter over
//! all of them.

/// `--device` and `--quiet` of a command that answers for one device.
#[derive(clap::Args)]
pub struct OneDevice {
    /// Device (default: the first with segments or events); a device the
    /// file does not have is an error that names the ones it has.
    #[arg(long)]
    pub device: Option<u32>,
    /// No progress bar, and no "wrote FILE" line.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `--device` and `--quiet` of a command that answers for every device.
#[derive(clap::Args)]
pub struct EveryDevice {
    /// Only this device (default: every device with segments or events); a
    /// device the file does not have is an error that names the ones it has.
    #[arg(long)]
    pub device: Option<u32>,
    /// No progress bar, and no "wrote FILE" line.
    #[arg(long, short)]
    pub quiet: bool,
}
