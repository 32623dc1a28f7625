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
    trace_json(
        entries
            .iter()
            .map(|&(a, addr, size, frames)| (a, addr, size, 0, frames)),
    )
}

/// [`hand_trace`] with each entry on a stream of its own choosing:
/// (action, address, size, stream), every entry with the same `frames`.
///
/// ```
/// let json = vramscope_testdata::hand_trace_on_streams(&[("alloc", 4096, 512, 7)], "[]");
/// assert!(json.contains(r#""size":512,"stream":7"#));
/// ```
pub fn hand_trace_on_streams(entries: &[(&str, u64, u64, u64)], frames: &str) -> String {
    trace_json(
        entries
            .iter()
            .map(|&(a, addr, size, stream)| (a, addr, size, stream, frames)),
    )
}

fn trace_json<'a>(entries: impl Iterator<Item = (&'a str, u64, u64, u64, &'a str)>) -> String {
    let ev: Vec<String> = entries
        .enumerate()
        .map(|(t, (action, addr, size, stream, frames))| {
            format!(
                r#"{{"action":"{action}","addr":{addr},"size":{size},"stream":{stream},"time_us":{t},"frames":{frames}}}"#
            )
        })
        .collect();
    format!(r#"{{"segments":[],"device_traces":[[{}]]}}"#, ev.join(","))
}
