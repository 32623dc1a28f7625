//! `cargo run --release -p vramscope-snapshot --example inspect FILE...`:
//! load snapshots and print what the model holds (a debugging aid).
fn main() {
    for path in std::env::args().skip(1) {
        let t = std::time::Instant::now();
        match vramscope_snapshot::load(path.as_ref(), &Default::default()) {
            Ok(s) => {
                let events: usize = s.traces.iter().map(|t| t.len()).sum();
                println!(
                    "{path}: {:?} {:?} {:?} in {:?}: {} segments, {} blocks, {events} events, {} strings, {} frames, {} stacks, warnings {:?}",
                    s.source.encoding, s.source.compression, s.source.layout, t.elapsed(),
                    s.segments.len(), s.blocks.len(), s.strings.len(), s.frames.len(), s.stacks.len(),
                    s.source.warnings
                );
            }
            Err(e) => println!("{path}: error: {e}"),
        }
    }
}
