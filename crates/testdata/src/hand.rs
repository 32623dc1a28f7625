//! Traces written by hand, for what no recording or generator makes.

/// A one-device snapshot in the JSON form `vramscope_snapshot` reads, its
/// trace the `entries` in order: (action, address, size, frames as a JSON
/// array), each at a microsecond of its own, on stream 0, no segments
/// dumped.
///
/// ```
/// let json = vramscope_testdata::hand_trace(&[("alloc", 4096, 512, "[]")]);
/// assert!(json.contains(r#""action":"alloc","addr":4096,"size":512"#));
/// ```
pub fn hand_trace(entries: &[(&str, u64, u64, &str)]) -> String {
    let ev: Vec<String> = entries
        .iter()
        .enumerate()
        .map(|(t, (action, addr, size, frames))| {
            format!(
                r#"{{"action":"{action}","addr":{addr},"size":{size},"stream":0,"time_us":{t},"frames":{frames}}}"#
            )
        })
        .collect();
    format!(r#"{{"segments":[],"device_traces":[[{}]]}}"#, ev.join(","))
}
