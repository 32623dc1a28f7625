//! `cargo run --release -p vramscope-synth --example synth_snapshot -- OUT [ENTRIES] [python|cpp] [OPTION...]`
//!
//! Writes a synthetic snapshot and prints its truth, the time taken and the
//! size. Options: `leak=BYTES`, `devices=N`, `protocol=P`, `window=N`,
//! `seed=N`, `iterations=N`, `oom`, `expandable`, `notime`, `noannotations`.

use std::io::BufWriter;
use std::time::Instant;
use vramscope_synth::{write_snapshot, StackKind, SynthOptions};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: synth_snapshot OUT [ENTRIES] [python|cpp] [OPTION...]");
        std::process::exit(2);
    };
    let mut opts = SynthOptions::default();
    for arg in &args[1..] {
        let (key, value) = arg.split_once('=').unwrap_or((arg, ""));
        let num = || {
            value
                .parse::<u64>()
                .unwrap_or_else(|_| panic!("{key} needs a number, found {value:?}"))
        };
        match key {
            "python" => opts.stacks = StackKind::Python,
            "cpp" => opts.stacks = StackKind::Cpp,
            "leak" => opts.leak_bytes_per_iter = num(),
            "devices" => opts.devices = num() as u32,
            "protocol" => opts.protocol = num() as u8,
            "window" => opts.max_entries_window = Some(num()),
            "seed" => opts.seed = num(),
            "iterations" => opts.iterations = num() as u32,
            "oom" => opts.oom = true,
            "expandable" => opts.expandable_segments = true,
            "notime" => opts.with_time = false,
            "noannotations" => opts.annotations = false,
            n if n.bytes().all(|b| b.is_ascii_digit()) => {
                opts.entries = n.parse().unwrap_or(u64::MAX)
            }
            other => panic!("unknown option {other:?}"),
        }
    }
    let file = std::fs::File::create(path).unwrap_or_else(|e| panic!("cannot create {path}: {e}"));
    let started = Instant::now();
    match write_snapshot(&opts, BufWriter::with_capacity(1 << 20, file)) {
        Ok(truth) => {
            let secs = started.elapsed().as_secs_f64();
            println!("{truth:#?}");
            println!(
                "{} entries, {:.1} MB in {secs:.2} s ({:.0} bytes/entry)",
                truth.entries,
                truth.bytes_written as f64 / 1e6,
                truth.bytes_written as f64 / truth.entries.max(1) as f64
            );
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
