//! Streams in the replay, on traces written by PyTorch's rules
//! (`c10/cuda/CUDACachingAllocator.cpp`):
//!
//! * a cached block serves only requests on the stream it was made on
//!   (`BlockComparatorSize` orders a pool's free blocks by stream first, and
//!   `get_free_block` gives up at the first block of another stream);
//! * a block used on another stream (`Tensor.record_stream`) is not free
//!   when the program frees it: `free()` records an event on each stream
//!   that used it (`insert_events`; during a graph capture
//!   `insert_events_deferred_until_no_capture`) and the trace says
//!   `free_requested`; the block goes back to the pool only when
//!   `process_events()`, at the start of a later `malloc`, finds the events
//!   done, and the trace says `free_completed` then. In between, a request
//!   of the same size needs other memory.
//!
//! The replay must make every recorded segment event, in order.

use vramscope_simulate::{replay, ReplaySetup, Settings};
use vramscope_snapshot::decode_bytes;

const MIB: u64 = 1 << 20;
const COMPUTE: u64 = 0x5555_0000;
const COPY: u64 = 0x6666_0000;

/// One trace entry: (action, address, size, stream).
type Entry = (&'static str, u64, u64, u64);

fn snapshot(entries: &[Entry]) -> vramscope_snapshot::Snapshot {
    let frames = r#"[{"filename":"train.py","line":3,"name":"step"}]"#;
    let json = vramscope_testdata::hand_trace_on_streams(entries, frames);
    decode_bytes(json.as_bytes(), &Default::default()).expect("decodes")
}

/// A prefetch buffer used on a copy stream (`record_stream`): freed by
/// the program while the copy still runs, the next buffer of the same
/// size needs a segment of its own; once the copy's event completes both
/// blocks are cached and the third buffer takes the lower address
/// (`BlockComparatorSize`: stream, size, then address).
fn record_stream_trace() -> Vec<Entry> {
    let (a, b) = (0x7f00_0000_0000u64, 0x7f00_4000_0000u64);
    vec![
        ("segment_alloc", a, 20 * MIB, COMPUTE),
        ("alloc", a, 20 * MIB, COMPUTE),
        // del buf: the copy stream's event is pending.
        ("free_requested", a, 20 * MIB, COMPUTE),
        ("segment_alloc", b, 20 * MIB, COMPUTE),
        ("alloc", b, 20 * MIB, COMPUTE),
        ("free_requested", b, 20 * MIB, COMPUTE),
        ("free_completed", b, 20 * MIB, COMPUTE),
        // process_events() at the next malloc: the copy is done.
        ("free_completed", a, 20 * MIB, COMPUTE),
        ("alloc", a, 20 * MIB, COMPUTE),
    ]
}

#[test]
fn a_block_used_on_another_stream_is_reused_only_after_its_free_completes() {
    let snap = snapshot(&record_stream_trace());
    let r = replay(&snap, 0, Settings::default(), &ReplaySetup::default());
    assert_eq!(r.recorded_segment_events, 2);
    assert_eq!(
        (r.simulated_segment_events, r.matched_segment_events),
        (2, 2),
        "{r:?}"
    );
    assert_eq!(r.simulated_peak_reserved, 40 * MIB);
    assert_eq!(r.recorded_peak_reserved, 40 * MIB);
    assert_eq!(r.max_reserved_error, 0.0, "{r:?}");
}

/// The same program with each free completed where it was requested (no
/// `record_stream`): the second buffer takes the first's block, one
/// segment of 20 MiB. The delay is what made the second segment; a replay
/// that freed at `free_requested` would fail the test above.
#[test]
fn without_the_pending_event_the_same_sizes_share_one_segment() {
    let early: Vec<Entry> = record_stream_trace()
        .into_iter()
        .filter(|e| e.0 != "free_completed" && e.0 != "segment_alloc")
        .map(|(action, addr, size, s)| {
            let action = if action == "free_requested" {
                "free_completed"
            } else {
                action
            };
            (action, addr, size, s)
        })
        .collect();
    let r = replay(
        &snapshot(&early),
        0,
        Settings::default(),
        &ReplaySetup::default(),
    );
    assert_eq!(r.simulated_segment_events, 1, "{r:?}");
    assert_eq!(r.simulated_peak_reserved, 20 * MIB, "{r:?}");
}

/// A block cached on the compute stream does not serve the copy stream's
/// request of the same size: a segment on each stream; each stream's next
/// request reuses its own.
#[test]
fn a_cached_block_serves_only_its_own_stream() {
    let (a, b) = (0x7f00_0000_0000u64, 0x7f00_4000_0000u64);
    let snap = snapshot(&[
        ("segment_alloc", a, 20 * MIB, COMPUTE),
        ("alloc", a, 20 * MIB, COMPUTE),
        ("free_requested", a, 20 * MIB, COMPUTE),
        ("free_completed", a, 20 * MIB, COMPUTE),
        ("segment_alloc", b, 20 * MIB, COPY),
        ("alloc", b, 20 * MIB, COPY),
        ("free_requested", b, 20 * MIB, COPY),
        ("free_completed", b, 20 * MIB, COPY),
        ("alloc", a, 20 * MIB, COMPUTE),
        ("alloc", b, 20 * MIB, COPY),
    ]);
    let r = replay(&snap, 0, Settings::default(), &ReplaySetup::default());
    assert_eq!(
        (
            r.recorded_segment_events,
            r.simulated_segment_events,
            r.matched_segment_events
        ),
        (2, 2, 2),
        "{r:?}"
    );
    assert_eq!(r.simulated_peak_reserved, 40 * MIB);
    // Under expandable segments each stream maps its own pages too.
    let mut s = Settings::default();
    s.apply("expandable_segments:True").expect("a setting");
    let r = replay(&snap, 0, s, &ReplaySetup::default());
    assert_eq!(r.simulated_peak_reserved, 40 * MIB, "{r:?}");
}
