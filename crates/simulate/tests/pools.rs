//! Private pools (CUDA graphs, `torch.cuda.MemPool`) in the replay, on
//! traces written by PyTorch's rules (`c10/cuda/CUDACachingAllocator.cpp`):
//! a request in a private pool is served by that pool's cached blocks or a
//! segment of its own, never the default pool's, and the default pool
//! never by the private pool's; `empty_cache()` leaves a pool's segments
//! while the pool is in use and frees them once the program released it.
//! The replay must make every recorded segment event, in order.

use vramscope_simulate::{replay, ReplaySetup, Settings};
use vramscope_snapshot::decode_bytes;

const MIB: u64 = 1 << 20;
const STREAM: u64 = 7;

/// One trace entry: (action, address, size, pool id).
type Entry = (&'static str, u64, u64, (i64, i64));

/// A snapshot of `entries`, with `pool_id` on each entry when `with_pools`
/// (PyTorch 2.15 and later), and `segments` at the dump.
fn snapshot(entries: &[Entry], with_pools: bool, segments: &str) -> vramscope_snapshot::Snapshot {
    let frames = r#"[{"filename":"train.py","line":3,"name":"step"}]"#;
    // A segment given back by the program's torch.cuda.empty_cache() has
    // its stack (context="all"), which tells it from a release for a request.
    let released = r#"[{"filename":"/usr/lib/python3/site-packages/torch/cuda/memory.py","line":222,"name":"empty_cache"},{"filename":"train.py","line":9,"name":"step"}]"#;
    let events: Vec<String> = entries
        .iter()
        .enumerate()
        .map(|(t, &(action, addr, size, (p0, p1)))| {
            let frames = if action == "segment_free" { released } else { frames };
            let pool = if with_pools {
                format!(r#","pool_id":[{p0},{p1}]"#)
            } else {
                String::new()
            };
            format!(
                r#"{{"action":"{action}","addr":{addr},"size":{size},"stream":{STREAM},"time_us":{t},"frames":{frames}{pool}}}"#
            )
        })
        .collect();
    let json = format!(
        r#"{{"segments":[{segments}],"device_traces":[[{}]]}}"#,
        events.join(",")
    );
    decode_bytes(json.as_bytes(), &Default::default()).expect("decodes")
}

const DEFAULT: (i64, i64) = (0, 0);
/// The pool of a graph captured without a pool given (`(0, n)`).
const GRAPH: (i64, i64) = (0, 1);

/// A graph capture caches a 20 MiB block in its pool; the default pool
/// then needs 20 MiB and makes a segment of its own; `empty_cache()`
/// frees the default pool's segment and leaves the graph's; the graph is
/// released and `empty_cache()` frees its segment.
fn graph_then_eager() -> Vec<Entry> {
    let (g, d, small) = (0x7f00_0000_0000, 0x7f00_4000_0000, 0x7f00_8000_0000);
    vec![
        ("segment_alloc", g, 20 * MIB, GRAPH),
        ("alloc", g, 20 * MIB, GRAPH),
        ("free_requested", g, 20 * MIB, GRAPH),
        ("free_completed", g, 20 * MIB, GRAPH),
        ("segment_alloc", d, 20 * MIB, DEFAULT),
        ("alloc", d, 20 * MIB, DEFAULT),
        ("free_requested", d, 20 * MIB, DEFAULT),
        ("free_completed", d, 20 * MIB, DEFAULT),
        // torch.cuda.empty_cache(): the graph still holds its pool.
        ("segment_free", d, 20 * MIB, DEFAULT),
        ("segment_alloc", small, 2 * MIB, DEFAULT),
        ("alloc", small, 4096, DEFAULT),
        ("free_requested", small, 4096, DEFAULT),
        ("free_completed", small, 4096, DEFAULT),
        // del graph; torch.cuda.empty_cache(): now the pool's segment goes,
        // with the default pool's cached small segment.
        ("segment_free", small, 2 * MIB, DEFAULT),
        ("segment_free", g, 20 * MIB, GRAPH),
    ]
}

#[test]
fn a_graphs_pool_and_the_default_pool_never_serve_each_other() {
    let entries = graph_then_eager();
    let snap = snapshot(&entries, true, "");
    let r = replay(&snap, 0, Settings::default(), &ReplaySetup::default());
    // Three segments made and three given back: every one, in order.
    assert_eq!(r.recorded_segment_events, 6);
    assert_eq!(
        (r.simulated_segment_events, r.matched_segment_events),
        (6, 6),
        "{r:?}"
    );
    assert_eq!(r.recorded_peak_reserved, 40 * MIB);
    assert_eq!(r.simulated_peak_reserved, 40 * MIB);
    assert_eq!(r.max_reserved_error, 0.0, "{r:?}");
    let pools = r.private_pools.as_ref().expect("the graph's pool");
    assert_eq!(
        (pools.ids.as_slice(), pools.told_by),
        (&[GRAPH][..], "trace")
    );
}

/// Without the pools the same trace replays wrongly: the default pool's
/// request takes the graph's cached block (one segment fewer) and
/// `empty_cache()` frees the graph's segment early. The pool ids are what
/// makes the difference: here they are taken away.
#[test]
fn without_pool_ids_or_private_segments_the_pools_cannot_be_told_apart() {
    let entries = graph_then_eager();
    let snap = snapshot(&entries, false, "");
    let r = replay(&snap, 0, Settings::default(), &ReplaySetup::default());
    assert!(r.matched_segment_events < 6, "{r:?}");
    assert!(r.private_pools.is_none());
    assert_eq!(r.simulated_peak_reserved, 20 * MIB);
}

/// A file of a PyTorch that writes no `pool_id` on trace entries: the
/// dump's `segment_pool_id` names the graph's segment, and the events in
/// it from its `segment_alloc` on are the pool's.
#[test]
fn the_dumps_private_segments_name_the_pool_of_older_files() {
    let mut entries = graph_then_eager();
    entries.truncate(entries.len() - 2); // no second empty_cache(): both segments are in the dump
    let (g, small) = (entries[0].1, entries[10].1);
    let segment = format!(
        r#"{{"device":0,"address":{g},"total_size":{},"allocated_size":0,"active_size":0,"requested_size":0,
            "stream":{STREAM},"segment_type":"large","segment_pool_id":[0,1],
            "blocks":[{{"address":{g},"size":{},"requested_size":0,"state":"inactive","frames":[]}}]}},
           {{"device":0,"address":{},"total_size":{},"allocated_size":0,"active_size":0,"requested_size":0,
            "stream":{STREAM},"segment_type":"small","segment_pool_id":[0,0],
            "blocks":[{{"address":{},"size":{},"requested_size":0,"state":"inactive","frames":[]}}]}}"#,
        20 * MIB,
        20 * MIB,
        small,
        2 * MIB,
        small,
        2 * MIB
    );
    let snap = snapshot(&entries, false, &segment);
    let r = replay(&snap, 0, Settings::default(), &ReplaySetup::default());
    assert_eq!(r.recorded_segment_events, 4);
    assert_eq!(
        (r.simulated_segment_events, r.matched_segment_events),
        (4, 4),
        "{r:?}"
    );
    assert_eq!(r.simulated_peak_reserved, 40 * MIB);
    assert_eq!(r.private_pools.as_ref().map(|p| p.told_by), Some("dump"));
    // The same file with the pool left out of its segments replays wrongly.
    let plain = snapshot(&entries, false, &segment.replace("[0,1]", "[0,0]"));
    let r = replay(&plain, 0, Settings::default(), &ReplaySetup::default());
    assert!(r.matched_segment_events < 4, "{r:?}");
}

/// Under `expandable_segments:True` PyTorch keeps one expandable segment
/// per stream and pool: the graph's pages and the default pool's are
/// mapped apart, so the default pool's 20 MiB maps new pages rather than
/// reusing the graph's cached ones.
#[test]
fn expandable_segments_are_kept_per_pool() {
    let entries = graph_then_eager();
    let mut settings = Settings::default();
    settings.apply("expandable_segments:True").expect("valid");
    let with = replay(
        &snapshot(&entries, true, ""),
        0,
        settings.clone(),
        &ReplaySetup::default(),
    );
    let without = replay(
        &snapshot(&entries, false, ""),
        0,
        settings,
        &ReplaySetup::default(),
    );
    assert_eq!(with.simulated_peak_reserved, 40 * MIB, "{with:?}");
    assert_eq!(without.simulated_peak_reserved, 20 * MIB, "{without:?}");
}
