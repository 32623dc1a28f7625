//! The recording process's children that were not recorded but trained or
//! used a GPU (the `children` key of the recorder's `vramscope` dict).
//!
//! A recording from `vramscope run` or `VRAMSCOPE_RECORD` is the first
//! process's: `mp.spawn`'s ranks (PyTorch's DDP tutorial starts them
//! without `RANK`) and Hogwild's workers are not in the file, which then
//! reads as a program that used almost no memory. Each such child leaves a
//! note at its exit (`python/vramscope/_recording/children.py`): its pid,
//! its optimizer steps, and per CUDA device its peak allocated and
//! reserved bytes.

/// One child's note.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChildProcess {
    pub pid: u64,
    /// Optimizer steps it took (counted from when `torch.optim` loaded).
    pub steps: u64,
    /// Optimizers alive at its exit that held state.
    pub optimizers: u64,
    /// `(device, peak allocated, peak reserved)` of each CUDA device its
    /// allocator reserved memory on (`cuda:0`).
    pub devices: Vec<(String, u64, u64)>,
}

/// The notes in `v` (the `children` key); malformed rows are skipped.
pub(crate) fn children(v: Option<&serde_json::Value>) -> Vec<ChildProcess> {
    let Some(rows) = v.and_then(|c| c.as_array()) else {
        return Vec::new();
    };
    rows.iter()
        .filter_map(|r| {
            let num = |k: &str| r.get(k).and_then(|n| n.as_u64());
            Some(ChildProcess {
                pid: num("pid")?,
                steps: num("steps").unwrap_or(0),
                optimizers: num("optimizers_stepped").unwrap_or(0),
                devices: r
                    .get("devices")
                    .and_then(|d| d.as_array())
                    .map(|ds| {
                        ds.iter()
                            .filter_map(|d| {
                                Some((
                                    d.get("device")?.as_str()?.to_owned(),
                                    d.get("peak_allocated")?.as_u64()?,
                                    d.get("peak_reserved")?.as_u64()?,
                                ))
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_read_and_malformed_rows_skipped() {
        let v = serde_json::json!([
            {"pid": 41, "steps": 3, "optimizers_stepped": 0, "devices": []},
            {"pid": 42, "steps": 0, "devices": [{"device": "cuda:0", "peak_allocated": 1024, "peak_reserved": 2048}, {"device": "cuda:1"}]},
            {"steps": 5},
            "not a note"
        ]);
        let c = children(Some(&v));
        assert_eq!(c.len(), 2);
        assert_eq!((c[0].pid, c[0].steps, c[0].devices.len()), (41, 3, 0));
        assert_eq!(c[1].devices, vec![("cuda:0".to_owned(), 1024, 2048)]);
        assert!(children(None).is_empty());
    }
}
