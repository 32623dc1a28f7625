//! `vramscope synth`: write a realistic synthetic snapshot, for tests and
//! benchmarks (see the `vramscope-synth` crate for the model).

use std::io::BufWriter;
use std::path::PathBuf;

use anyhow::{anyhow, Context};
use vramscope_synth::{write_snapshot, StackKind, SynthOptions};

use crate::{output, CliError};

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Stacks {
    /// Python frames only (record_memory_history(stacks="python")).
    Python,
    /// C++ and Python frames (stacks="all").
    Cpp,
}

#[derive(clap::Args)]
pub struct Args {
    /// Output file.
    #[arg(short, long)]
    pub out: PathBuf,
    /// Trace entries on device 0.
    #[arg(long, default_value_t = 100_000)]
    pub entries: u64,
    #[arg(long, value_enum, default_value = "python")]
    pub stacks: Stacks,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Training iterations the entries are spread over.
    #[arg(long, default_value_t = 10)]
    pub iterations: u32,
    /// Leak this many bytes per iteration from one user site (e.g. 64MiB).
    #[arg(long, value_parser = parse_size, default_value = "0")]
    pub leak: u64,
    #[arg(long, default_value_t = 1)]
    pub devices: u32,
    /// Pickle protocol (2-5).
    #[arg(long, default_value_t = 4)]
    pub protocol: u8,
    /// End with an out-of-memory event.
    #[arg(long)]
    pub oom: bool,
    /// Use expandable segments (segment_map/segment_unmap).
    #[arg(long)]
    pub expandable_segments: bool,
    /// Omit time_us (as PyTorch ≤ 2.2 did).
    #[arg(long)]
    pub no_time: bool,
    /// Omit external_annotations.
    #[arg(long)]
    pub no_annotations: bool,
    /// Keep only the last N events, as the recorder's ring buffer does.
    #[arg(long)]
    pub window: Option<u64>,
    /// Write the odd values producers have been seen to write (frame lines
    /// 2**64-1, -1, 2**70 and None, an unknown block state, an entry with an
    /// unknown action), to check that a reader repairs rather than rejects.
    #[arg(long)]
    pub odd_values: bool,
    /// Print what the generator knows (peak, totals) as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `1536`, `1.5e9`, `64MiB`, `12GiB`, `2GB` → bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("expected a size like 512MiB or 1.5e9, found {s:?}"))?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1048576.0,
        "gib" => 1073741824.0,
        "tib" => 1099511627776.0,
        other => return Err(format!("unknown size unit {other:?} in {s:?}")),
    };
    let v = n * mult;
    if !(0.0..1.8e19).contains(&v) {
        return Err(format!("size out of range: {s:?}"));
    }
    Ok(v.round() as u64)
}

pub fn options(a: &Args) -> SynthOptions {
    SynthOptions {
        entries: a.entries,
        seed: a.seed,
        stacks: match a.stacks {
            Stacks::Python => StackKind::Python,
            Stacks::Cpp => StackKind::Cpp,
        },
        iterations: a.iterations,
        leak_bytes_per_iter: a.leak,
        devices: a.devices,
        protocol: a.protocol,
        with_time: !a.no_time,
        oom: a.oom,
        expandable_segments: a.expandable_segments,
        annotations: !a.no_annotations,
        max_entries_window: a.window,
        odd_values: a.odd_values,
    }
}

pub fn run(a: Args) -> Result<(), CliError> {
    let opts = options(&a);
    opts.validate().map_err(|e| CliError::Invalid(anyhow!(e)))?;
    let file = std::fs::File::create(&a.out)
        .with_context(|| format!("cannot create {}", a.out.display()))
        .map_err(CliError::Io)?;
    let truth = write_snapshot(&opts, BufWriter::with_capacity(1 << 20, file))
        .with_context(|| format!("writing {}", a.out.display()))
        .map_err(CliError::Io)?;
    if a.json {
        let j = serde_json::json!({
            "entries": truth.entries,
            "bytes_written": truth.bytes_written,
            "peak_allocated": truth.peak_allocated,
            "peak_event_index": truth.peak_event_index,
            "allocated_at_end": truth.allocated_at_end,
            "reserved_at_end": truth.reserved_at_end,
            "segments": truth.segments,
            "leaked_bytes": truth.leaked_bytes,
        });
        output::print(&format!("{j:#}\n"))
    } else {
        eprintln!(
            "wrote {} ({} entries, {} bytes)",
            a.out.display(),
            truth.entries,
            truth.bytes_written
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1.5e9"), Ok(1_500_000_000));
        assert_eq!(parse_size("12 GiB"), Ok(12 << 30));
        assert!(parse_size("12 parsecs").is_err());
    }
}
