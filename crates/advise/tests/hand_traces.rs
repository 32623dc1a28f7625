//! The advice on small traces written by hand: the program's own
//! `torch.cuda.empty_cache()` calls.

use vramscope_snapshot::decode_bytes;

const MIB: u64 = 1 << 20;

const EMPTY_CACHE: &str = r#"[{"filename":"/usr/lib/python3/site-packages/torch/cuda/memory.py","line":222,"name":"empty_cache"},{"filename":"train.py","line":9,"name":"main"}]"#;
const TRAIN: &str = r#"[{"filename":"train.py","line":8,"name":"main"}]"#;

fn trace(entries: &[(&str, u64, u64, &str)]) -> vramscope_snapshot::Snapshot {
    let json = vramscope_testdata::hand_trace(entries);
    decode_bytes(json.as_bytes(), &Default::default()).expect("decodes")
}

/// A program that calls torch.cuda.empty_cache() after each step: the
/// advice lists removing the calls among the changes that lower no peak
/// (a kept cache only holds more), with what the calls cost in device
/// calls: one cudaMalloc for the whole run instead of one a step.
#[test]
fn the_programs_empty_cache_calls_are_priced_in_device_calls() {
    let a = 1 << 32;
    let mut entries = Vec::new();
    for _ in 0..3 {
        entries.extend([
            ("segment_alloc", a, 30 * MIB, TRAIN),
            ("alloc", a, 30 * MIB, TRAIN),
            ("free_requested", a, 30 * MIB, TRAIN),
            ("free_completed", a, 30 * MIB, TRAIN),
            ("segment_free", a, 30 * MIB, EMPTY_CACHE),
        ]);
    }
    let snap = trace(&entries);
    let advice = vramscope_advise::advise(&snap, &Default::default()).expect("advice");
    let row = advice
        .no_gain
        .iter()
        .chain(&advice.advice)
        .find(|r| r.change.contains("empty_cache"))
        .expect("an empty_cache row");
    assert!(
        advice.no_gain.iter().any(|r| std::ptr::eq(r, row)),
        "lowers no peak: {row:?}"
    );
    assert_eq!(row.peak_reserved, 30 * MIB);
    assert!(
        row.change
            .contains("3 torch.cuda.empty_cache() calls (train.py:9 in main)"),
        "{}",
        row.change
    );
    assert!(
        row.how
            .contains("1 cudaMalloc and 0 cudaFree calls in the allocator model against 3 and 3"),
        "{}",
        row.how
    );
}

/// `--gpu NAME` holds the run against the GPU's total less what this
/// program held outside PyTorch: measured (NVML, in the recording's device
/// ledger) where the recording has it, else the CUDA context as measured
/// on the H100 and H200. Other processes on the recording's GPU are not
/// subtracted: they do not follow the program to another GPU.
#[test]
fn a_named_gpu_leaves_out_what_this_program_held_outside_pytorch() {
    let a = 1 << 32;
    let entries = [
        ("segment_alloc", a, 20 * MIB, TRAIN),
        ("alloc", a, 20 * MIB, TRAIN),
        ("free_requested", a, 20 * MIB, TRAIN),
        ("free_completed", a, 20 * MIB, TRAIN),
    ];
    let h100 = 85_017_493_504u64;
    let opts = vramscope_advise::AdviseOptions {
        gpu: Some("NVIDIA H100 80GB HBM3".into()),
        ..Default::default()
    };
    let plain = vramscope_advise::advise(&trace(&entries), &opts).expect("advice");
    assert_eq!(plain.capacity, Some(h100 - 768 * MIB));
    assert!(plain
        .capacity_from
        .as_deref()
        .is_some_and(|f| f.contains("768.00 MiB for the CUDA context")));
    // Recorded with NVML: 1.5 GiB of this process outside PyTorch (its
    // context and a CuPy buffer), 30 GiB of another process.
    let mine = 1536 * MIB;
    let json = vramscope_testdata::hand_trace(&entries).replacen(
        r#"{"segments""#,
        &format!(
            r#"{{"vramscope":{{"recorder":"cuda-allocator-history","device":{{"type":"cuda","index":0,
                "total_memory":{h100},"free_at_dump":{},"reserved_at_dump":{},
                "nvml":{{"process_used":{},"device_used":{},"processes":2}}}}}},"segments""#,
            // The file's segments (none at the dump) are PyTorch's part.
            h100 - mine - 30 * 1024 * MIB,
            0,
            mine,
            mine + 30 * 1024 * MIB
        ),
        1,
    );
    let snap = decode_bytes(json.as_bytes(), &Default::default()).expect("decodes");
    let measured = vramscope_advise::advise(&snap, &opts).expect("advice");
    assert_eq!(measured.capacity, Some(h100 - mine));
    assert!(
        measured.capacity_from.as_deref().is_some_and(|f| f
            .contains("less the 1.50 GiB this program held outside PyTorch when recorded (NVML)")),
        "{:?}",
        measured.capacity_from
    );
}
