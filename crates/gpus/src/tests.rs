use super::*;

/// The names PyTorch reports for common GPUs, with the total each must
/// give (bytes) and its multiprocessors.
const TORCH_NAMES: &[(&str, u64, u32)] = &[
    ("NVIDIA H100 80GB HBM3", 85_017_493_504, 132),
    ("NVIDIA H100 PCIe", 84_943_044_608, 114),
    ("NVIDIA H100 NVL", 99_954_626_396, 132),
    ("NVIDIA H200", 150_109_880_320, 132),
    ("NVIDIA H200 NVL", 150_109_880_320, 132),
    ("NVIDIA H20", 102_010_716_160, 78),
    ("NVIDIA A100-SXM4-40GB", 42_298_834_944, 108),
    ("NVIDIA A100-SXM4-80GB", 84_987_740_160, 108),
    ("NVIDIA A100-PCIE-40GB", 42_285_268_992, 108),
    ("NVIDIA A100 80GB PCIe", 84_974_239_744, 108),
    ("NVIDIA A10G", 23_826_792_448, 80),
    ("NVIDIA A10", 23_609_475_072, 72),
    ("NVIDIA L4", 23_612_293_120, 58),
    ("NVIDIA L40S", 47_803_531_264, 142),
    ("NVIDIA RTX A6000", 51_040_485_376, 84),
    ("NVIDIA GeForce RTX 3090", 25_414_860_800, 82),
    ("GeForce RTX 3090", 25_414_860_800, 82),
    ("NVIDIA GeForce RTX 4090", 25_250_627_584, 128),
    ("NVIDIA GeForce RTX 5090", 33_677_180_928, 170),
    ("Tesla V100-SXM2-16GB", 16_944_988_160, 80),
    ("Tesla V100-PCIE-16GB", 16_944_988_160, 80),
    ("Tesla V100-SXM2-32GB", 34_072_559_616, 80),
    ("Tesla V100-PCIE-32GB", 34_072_559_616, 80),
    ("Tesla T4", 15_642_329_088, 40),
    ("NVIDIA B200", 191_502_483_456, 148),
    ("AMD Instinct MI300X", 206_141_652_992, 304),
];

#[test]
fn every_name_torch_reports_gives_its_total_and_multiprocessors() {
    for (name, total, sms) in TORCH_NAMES {
        let g = find(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(g.memory(), Ok(*total), "{name}");
        assert_eq!(g.sms, *sms, "{name}");
        // No total is read from a model number: each is within 1.5% of a
        // size the box names, never a hundred times it.
        let gib = *total as f64 / (1u64 << 30) as f64;
        assert!((14.0..200.0).contains(&gib), "{name}: {gib} GiB");
    }
}

#[test]
fn names_in_the_table_are_matched_whole_in_any_spelling() {
    assert_eq!(find("h100-80gb").unwrap().name, "NVIDIA H100 80GB HBM3");
    assert_eq!(find("H100").unwrap().name, "NVIDIA H100 80GB HBM3");
    assert_eq!(find("nvidia_h200").unwrap().name, "NVIDIA H200");
    assert_eq!(find("A100-40GB").unwrap().name, "NVIDIA A100-SXM4-40GB");
    assert_eq!(find("RTX 4090").unwrap().capability, (8, 9));
    // The H100 PCIe is not the SXM: 114 multiprocessors, not 132.
    assert_eq!(find("H100 PCIe").unwrap().sms, 114);
    // A10 and A10G are different GPUs.
    assert_ne!(find("A10").unwrap().sms, find("A10G").unwrap().sms);
    // Every name and alias finds its own row, and no two rows share a key.
    let mut keys = std::collections::HashMap::new();
    for g in GPUS {
        for n in std::iter::once(&g.name).chain(g.aliases) {
            assert_eq!(find(n).unwrap().name, g.name, "{n}");
            if let Some(other) = keys.insert(key(n), g.name) {
                assert_eq!(other, g.name, "{n} is also {other}");
            }
        }
    }
}

#[test]
fn an_unknown_name_lists_the_known_ones_and_says_to_pass_bytes() {
    let e = find("NVIDIA GeForce GTX 1080").unwrap_err().to_string();
    assert!(e.contains("unknown GPU \"NVIDIA GeForce GTX 1080\""), "{e}");
    assert!(
        e.contains("NVIDIA H100 PCIe") && e.contains("Tesla T4"),
        "{e}"
    );
    assert!(e.contains("gpu=<bytes>"), "{e}");
    // A number in a name is never read as memory.
    assert!(matches!(
        find("H100 10080GB"),
        Err(GpuError::Unknown { .. })
    ));
    let mig = find("NVIDIA A100-SXM4-40GB MIG 1g.5gb").unwrap_err();
    assert!(matches!(mig, GpuError::Mig { .. }), "{mig}");
}

#[test]
fn a_family_gives_kernels_but_no_memory() {
    let a100 = find("A100").unwrap();
    assert_eq!((a100.capability, a100.sms), ((8, 0), 108));
    let e = a100.memory().unwrap_err().to_string();
    assert!(e.contains("NVIDIA A100-SXM4-80GB"), "{e}");
    assert!(find("V100").unwrap().memory().is_err());
}

#[test]
fn the_source_is_said() {
    let h100 = find("NVIDIA H100 80GB HBM3").unwrap();
    assert!(h100
        .total_from()
        .starts_with("measured on the project's H100"));
    let t4 = find("Tesla T4").unwrap();
    assert_eq!(t4.source.as_str(), "reported");
    assert!(
        t4.total_from().contains("deviceQuery"),
        "{}",
        t4.total_from()
    );
}
