//! Fuzz the snapshot decoder (decompression, pickle/JSON detection, the
//! snapshot model): any input must decode or fail with an error.

#![no_main]

use libfuzzer_sys::fuzz_target;
use vramscope_snapshot::LoadOptions;

fuzz_target!(|data: &[u8]| {
    let mut opts = LoadOptions::default();
    // Keep decompression bombs small while fuzzing.
    opts.max_decompressed_bytes = Some(64 << 20);
    if let Ok(snap) = vramscope_snapshot::decode_bytes(data, &opts) {
        std::hint::black_box((
            snap.devices(),
            snap.segments.len(),
            snap.blocks.len(),
            snap.traces.len(),
        ));
    }
});
