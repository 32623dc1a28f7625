//! `cargo run --release -p vramscope-snapshot --example synth_kineto OUT [MEM_EVENTS]`:
//! write a Kineto-style profiler trace for measuring how fast traces load.
//!
//! Shaped like a `with_stack=True` trace of a training loop: per allocation,
//! a `python_function` span around a `cpu_op` span on one of two threads,
//! the `[memory]` event inside them (allocations, then their frees, in
//! bursts), and one `kernel` event with its own `args` that the reader must
//! skip. `MEM_EVENTS` defaults to 1,000,000 (2,000,000 op spans).

use std::io::{BufWriter, Write};

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let out = args.next().unwrap_or_else(|| "synth_trace.json".into());
    let n: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(&out)?);
    write!(
        w,
        "{{\"schemaVersion\": 1, \"deviceProperties\": [{{\"id\": 0, \"name\": \"GPU\"}}], \
         \"profile_memory\": 1, \"traceEvents\": ["
    )?;
    let ops = [
        "aten::mm",
        "aten::addmm",
        "aten::empty",
        "aten::add",
        "aten::gelu",
    ];
    let funcs = [
        "model.py(41): forward",
        "torch/nn/modules/linear.py(125): forward",
        "train.py(88): step",
    ];
    let base_addr: u64 = 0x7f00_0000_0000;
    let (mut allocated, reserved): (i64, i64) = (1 << 30, 8 << 30);
    let mut live: Vec<(u64, i64)> = Vec::new();
    let mut ts = 1_000.0f64;
    let mut first = true;
    let mut sep = |w: &mut BufWriter<std::fs::File>| -> std::io::Result<()> {
        if !std::mem::take(&mut first) {
            w.write_all(b",\n")?;
        }
        Ok(())
    };
    for i in 0..n {
        let tid = 100 + (i / 64) % 2;
        // Bursts of 32 allocations, then their frees.
        let (addr, bytes) = if (i / 32) % 2 == 0 {
            let size = 512 * (1 + (i * 7919) % 4096) as i64;
            let addr = base_addr + (i % 100_000) * (4 << 20);
            live.push((addr, size));
            (addr, size)
        } else {
            match live.pop() {
                Some((a, s)) => (a, -s),
                None => (base_addr, 512),
            }
        };
        allocated += bytes;
        sep(&mut w)?;
        write!(
            w,
            "{{\"ph\": \"X\", \"cat\": \"python_function\", \"name\": \"{}\", \"pid\": 1, \"tid\": {tid}, \
             \"ts\": {ts:.3}, \"dur\": 9.500, \"args\": {{\"Python parent id\": {i}, \"Python id\": {}, \
             \"Ev Idx\": {i}}}}}",
            funcs[(i % 3) as usize],
            i + 1
        )?;
        sep(&mut w)?;
        write!(
            w,
            "{{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"{}\", \"pid\": 1, \"tid\": {tid}, \
             \"ts\": {:.3}, \"dur\": 6.250, \"args\": {{\"External id\": {i}, \"Record function id\": 0, \
             \"Sequence number\": {i}, \"Fwd thread id\": 0, \"Ev Idx\": {i}}}}}",
            ops[(i % 5) as usize],
            ts + 1.0
        )?;
        sep(&mut w)?;
        write!(
            w,
            "{{\"ph\": \"i\", \"cat\": \"cpu_instant_event\", \"s\": \"t\", \"name\": \"[memory]\", \
             \"pid\": 1, \"tid\": {tid}, \"ts\": {:.3}, \"args\": {{\"Total Reserved\": {reserved}, \
             \"Total Allocated\": {allocated}, \"Bytes\": {bytes}, \"Addr\": {addr}, \
             \"Device Id\": 0, \"Device Type\": 1, \"Ev Idx\": {i}}}}}",
            ts + 2.0
        )?;
        if i % 4 == 0 {
            sep(&mut w)?;
            write!(
                w,
                "{{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"ampere_sgemm_128x64_nn\", \"pid\": 0, \
                 \"tid\": 7, \"ts\": {:.3}, \"dur\": 3.1, \"args\": {{\"queued\": 0, \"device\": 0, \
                 \"context\": 1, \"stream\": 7, \"correlation\": {i}, \"registers per thread\": 128, \
                 \"shared memory\": 16384, \"blocks per SM\": 1.5, \"grid\": [8, 16, 1], \
                 \"block\": [256, 1, 1], \"est. achieved occupancy %\": 25}}}}",
                ts + 3.0
            )?;
        }
        ts += 10.0;
    }
    write!(
        w,
        "], \"traceName\": \"synthetic\", \"displayTimeUnit\": \"ms\", \
         \"baseTimeNanoseconds\": 1700000000000000000}}"
    )?;
    w.flush()
}
