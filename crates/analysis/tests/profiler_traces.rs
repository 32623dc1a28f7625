//! Profiler outputs walked like snapshots give back what the profiler
//! recorded: the allocated and reserved curves of a Kineto trace equal its
//! `Total Allocated` and `Total Reserved` after every `[memory]` event, an
//! old trace's curve is the running sum of its `Bytes`, and a memory
//! timeline's bytes per category at the peak and the end are the sums of its
//! rows. The expected values are read from the files here with serde_json,
//! independently of the reader under test.

use std::collections::BTreeMap;

use serde_json::Value;
use vramscope_analysis::liveness::{allocated_series, reserved_after, Liveness};
use vramscope_analysis::{summarize, SummaryOptions};
use vramscope_snapshot::{load, Action, Snapshot, SourceFormat};

fn json_of(name: &str) -> Value {
    serde_json::from_slice(&vramscope_testdata::real_bytes(name)).expect("fixture is JSON")
}

fn load_real(name: &str) -> Snapshot {
    load(&vramscope_testdata::real(name), &Default::default()).expect("fixture decodes")
}

fn int(v: &Value) -> i64 {
    v.as_i64()
        .unwrap_or_else(|| panic!("expected an integer, found {v}"))
}

/// The trace's CUDA `[memory]` events as (ts, args), in time order (ties
/// in file order).
fn cuda_memory_events(trace: &Value) -> Vec<(i64, &Value)> {
    let mut ev: Vec<(i64, &Value)> = trace["traceEvents"]
        .as_array()
        .expect("traceEvents")
        .iter()
        .filter(|e| e["name"] == "[memory]" && e["args"]["Device Type"] == 1)
        .map(|e| (int(&e["ts"]), &e["args"]))
        .collect();
    ev.sort_by_key(|e| e.0);
    ev
}

/// Indices of the trace's `alloc` and `free_completed` entries.
fn alloc_free_entries(snap: &Snapshot, device: u32) -> Vec<usize> {
    let t = snap.trace(device).expect("trace");
    (0..t.len())
        .filter(|&i| matches!(t.action[i], Action::Alloc | Action::FreeCompleted))
        .collect()
}

#[test]
fn kineto_trace_curves_equal_its_totals_after_every_memory_event() {
    let name = "hta_df_index_resolver_kineto_trace.json.gz";
    let trace = json_of(name);
    let events = cuda_memory_events(&trace);
    assert_eq!(events.len(), 26_770, "CUDA [memory] events in the file");
    let device = int(&events[0].1["Device Id"]) as u32;
    assert_eq!(device, 1, "rank 1 allocates on cuda:1");

    let snap = load_real(name);
    assert_eq!(snap.source.format, SourceFormat::KinetoTrace);
    assert_eq!(snap.source.encoding_name(), "kineto_trace");
    assert_eq!(snap.devices(), vec![1], "host memory is left out");
    let t = snap.trace(device).expect("device 1");
    let liveness = Liveness::new(&snap, device);
    let allocated = allocated_series(&liveness, t);
    let reserved = reserved_after(&snap, device);

    // One entry per recorded event, same address, size and direction: the
    // file's totals follow from its Bytes, so nothing had to be added.
    let entries = alloc_free_entries(&snap, device);
    assert_eq!(entries.len(), events.len());
    for (k, (&i, (ts, a))) in entries.iter().zip(&events).enumerate() {
        let bytes = int(&a["Bytes"]);
        assert_eq!(t.addr[i], int(&a["Addr"]) as u64, "event {k}: address");
        assert_eq!(t.size[i], bytes.unsigned_abs(), "event {k}: size");
        let want = if bytes > 0 {
            Action::Alloc
        } else {
            Action::FreeCompleted
        };
        assert_eq!(t.action[i], want, "event {k}: direction");
        assert_eq!(t.time_us[i], *ts, "event {k}: time (µs)");
        assert_eq!(
            allocated[i],
            int(&a["Total Allocated"]) as u64,
            "event {k} (entry {i}): allocated"
        );
        assert_eq!(
            reserved[i],
            int(&a["Total Reserved"]) as u64,
            "event {k} (entry {i}): reserved"
        );
    }
    let max_total = events.iter().map(|e| int(&e.1["Total Allocated"])).max();
    assert_eq!(Some(liveness.peak_bytes as i64), max_total);
    // 4,096,614,400 bytes were allocated before the trace and are never
    // freed in it: alive from the start.
    let first = events[0].1;
    let before = int(&first["Total Allocated"]) - int(&first["Bytes"]);
    assert_eq!(liveness.initial_bytes as i64, before);
    assert_eq!(before, 4_096_614_400);
}

#[test]
fn old_trace_without_addresses_curve_is_the_running_sum_of_bytes() {
    let name = "kineto_resnet50_v100_profile_memory.pt.trace.json.gz";
    let trace = json_of(name);
    let events = cuda_memory_events(&trace);
    assert_eq!(events.len(), 8_220);
    assert!(events.iter().all(|e| e.1.get("Addr").is_none()));

    let snap = load_real(name);
    let t = snap.trace(0).expect("device 0");
    let liveness = Liveness::new(&snap, 0);
    let allocated = allocated_series(&liveness, t);
    let entries = alloc_free_entries(&snap, 0);
    assert_eq!(entries.len(), events.len());
    // Every free in this trace ends an allocation made in it.
    assert_eq!(liveness.initial_bytes, 0);
    let mut sum = 0i64;
    for (k, (&i, (_, a))) in entries.iter().zip(&events).enumerate() {
        sum += int(&a["Bytes"]);
        assert_eq!(allocated[i] as i64, sum, "event {k} (entry {i})");
    }
    assert_eq!(sum, 0, "everything allocated is freed by the end");
    assert_eq!(liveness.peak_bytes, 2_791_636_480);
}

/// Bytes per category name after each raw row, and the total.
fn category_sums(rows: &[Value]) -> Vec<(BTreeMap<&'static str, i64>, i64)> {
    const NAMES: [&str; 8] = [
        "parameter",
        "optimizer_state",
        "input",
        "temporary",
        "activation",
        "gradient",
        "autograd_detail",
        "unknown",
    ];
    let mut cur = [0i64; vramscope_analysis::categories::CATEGORIES];
    rows.iter()
        .map(|r| {
            cur[int(&r[3]) as usize] += int(&r[2]);
            let m = (0..8)
                .filter(|&c| cur[c] != 0)
                .map(|c| (NAMES[c], cur[c]))
                .collect();
            (m, cur.iter().sum())
        })
        .collect()
}

#[test]
fn memory_timeline_categories_at_the_peak_and_end_equal_its_rows() {
    let name = "hta_memory_timeline.raw.gz";
    let rows_json = json_of(name);
    let rows = rows_json.as_array().expect("rows");
    assert_eq!(rows.len(), 16_845);
    let sums = category_sums(rows);
    let (peak_row, peak_total) = sums
        .iter()
        .enumerate()
        .map(|(r, s)| (r, s.1))
        .fold((0, i64::MIN), |best, x| if x.1 > best.1 { x } else { best });
    let (end_cats, end_total) = sums.last().cloned().expect("rows");

    let snap = load_real(name);
    assert_eq!(snap.source.format, SourceFormat::MemoryTimeline);
    let s = summarize(&snap, &SummaryOptions::default());
    let d = &s.devices[0];
    assert_eq!(d.peak.allocated_bytes as i64, peak_total);
    assert_eq!(d.end.allocated_bytes as i64, end_total);
    let as_map = |v: &[vramscope_analysis::CategoryTotal]| -> BTreeMap<&'static str, i64> {
        v.iter()
            .map(|c| (c.category.as_str(), c.bytes as i64))
            .collect()
    };
    assert_eq!(
        as_map(&d.peak.by_category),
        sums[peak_row].0,
        "at the peak (row {peak_row})"
    );
    assert_eq!(as_map(&d.end_by_category), end_cats, "at the end");
    // Every label is the profiler's own.
    for c in d.peak.by_category.iter().chain(&d.end_by_category) {
        assert_eq!(
            c.source,
            Some(vramscope_analysis::categories::Source::Profiler)
        );
    }
    // The walked total after every entry never exceeds the rows' peak,
    // and it ends where the rows end.
    let t = snap.trace(0).expect("device 0");
    let liveness = Liveness::new(&snap, 0);
    let series = allocated_series(&liveness, t);
    assert_eq!(series.iter().max().map(|&x| x as i64), Some(peak_total));
    assert_eq!(series.last().map(|&x| x as i64), Some(end_total));
}

/// Bytes per category after each entry: the walk's blocks, labelled.
fn category_series(snap: &Snapshot) -> Vec<[i64; vramscope_analysis::categories::CATEGORIES]> {
    use vramscope_analysis::categories::categorize;
    use vramscope_analysis::lifetimes::{Lifetimes, BEFORE_WINDOW, NO_BLOCK};
    let l = Lifetimes::new(snap, 0);
    let c = categorize(snap, 0, &l);
    let t = snap.trace(0).expect("device 0");
    let mut cur = [0i64; vramscope_analysis::categories::CATEGORIES];
    for b in 0..l.len() {
        if l.birth[b] == BEFORE_WINDOW {
            cur[c.category[b] as usize] += l.size[b] as i64;
        }
    }
    (0..t.len())
        .map(|i| {
            let b = l.event_block[i];
            if b != NO_BLOCK {
                let sign = if t.action[i] == Action::Alloc { 1 } else { -1 };
                cur[c.category[b as usize] as usize] += sign * t.size[i] as i64;
            }
            cur
        })
        .collect()
}

#[test]
fn memory_timeline_categories_equal_its_rows_at_every_instant() {
    use vramscope_analysis::Category;
    let name = "hta_memory_timeline.raw.gz";
    let rows_json = json_of(name);
    let rows = rows_json.as_array().expect("rows");
    let sums = category_sums(rows);
    let snap = load_real(name);
    let t = snap.trace(0).expect("device 0");
    let series = category_series(&snap);
    // The last row of each µs, and the last entry of that µs.
    let mut last_row: BTreeMap<i64, usize> = BTreeMap::new();
    for (r, row) in rows.iter().enumerate() {
        let ns = int(&row[0]);
        if ns >= 0 {
            last_row.insert(ns / 1000, r);
        }
    }
    let mut last_entry: BTreeMap<i64, usize> = BTreeMap::new();
    for i in 0..t.len() {
        last_entry.insert(t.time_us[i], i);
    }
    let mut checked = 0;
    for (us, &i) in &last_entry {
        let r = *last_row
            .get(us)
            .unwrap_or_else(|| panic!("no row at {us} µs"));
        for cat in Category::ALL {
            let want = sums[r].0.get(cat.as_str()).copied().unwrap_or(0);
            assert_eq!(
                series[i][cat as usize],
                want,
                "{} at {us} µs (row {r}, entry {i})",
                cat.as_str()
            );
        }
        checked += 1;
    }
    assert!(checked > 3000, "{checked} instants checked");
}

/// A hand-made trace with what the real ones lack: reserved memory that
/// grows and shrinks, totals that do not follow from Bytes, a free of
/// memory from before the trace, two threads allocating in the same µs
/// written in the wrong order, host events in between, and times relative
/// to `baseTimeNanoseconds`.
#[test]
fn made_up_trace_curves_equal_its_totals_after_every_event() {
    use serde_json::json;
    // (ts µs, tid, addr, bytes, Total Allocated, Total Reserved)
    let cuda: [(f64, u64, u64, i64, i64, i64); 9] = [
        (1.5, 1, 0x1000, 100, 1100, 2048),
        (2.0, 1, 0x2000, 3000, 4100, 6144),
        (3.0, 1, 0x500, -400, 3700, 6144),
        (4.0, 1, 0x3000, 50, 3800, 6144),
        (5.0, 1, 0x1000, -100, 3600, 6144),
        (6.0, 2, 0x4000, 10, 3620, 6144),
        (6.0, 1, 0x5000, 10, 3610, 6144),
        (7.0, 1, 0x2000, -3000, 620, 1024),
        (8.25, 2, 0x6000, 8192, 8812, 9216),
    ];
    let mem = |ts: f64, tid: u64, ty: i64, id: i64, addr: u64, bytes: i64, a: i64, r: i64| {
        json!({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",
               "pid": 7, "tid": tid, "ts": ts,
               "args": {"Device Type": ty, "Device Id": id, "Addr": addr, "Bytes": bytes,
                        "Total Allocated": a, "Total Reserved": r}})
    };
    let mut events: Vec<Value> = cuda
        .iter()
        .map(|&(ts, tid, addr, b, a, r)| mem(ts, tid, 1, 0, addr, b, a, r))
        .collect();
    events.insert(2, mem(2.5, 1, 0, -1, 0x9, 64, 64, 0));
    let base: i64 = 1_700_000_000_000_000_000;
    let doc = json!({"schemaVersion": 1, "traceEvents": events, "baseTimeNanoseconds": base});
    let bytes = serde_json::to_vec(&doc).expect("json");
    let snap = vramscope_snapshot::decode_bytes(&bytes, &Default::default()).expect("decodes");
    assert_eq!(snap.devices(), vec![0]);
    let t = snap.trace(0).expect("device 0");
    let liveness = Liveness::new(&snap, 0);
    let allocated = allocated_series(&liveness, t);
    let reserved = reserved_after(&snap, 0);

    // The same-µs pair is walked in the order its totals say.
    let mut expected = cuda.to_vec();
    expected.swap(5, 6);
    // Each recorded event's entry: after its segment entries, before any
    // entries that correct the total.
    let mut from = 0;
    let entry_of: Vec<usize> = expected
        .iter()
        .map(|e| {
            let want = if e.3 > 0 {
                Action::Alloc
            } else {
                Action::FreeCompleted
            };
            let i = (from..t.len())
                .find(|&i| {
                    t.addr[i] == e.2 && t.size[i] == e.3.unsigned_abs() && t.action[i] == want
                })
                .unwrap_or_else(|| panic!("no entry for {e:?} from entry {from}"));
            from = i + 1;
            i
        })
        .collect();
    for (k, e) in expected.iter().enumerate() {
        // Up to the next event's segment entries, which precede it.
        let mut upto = entry_of.get(k + 1).map_or(t.len(), |&n| n) - 1;
        while entry_of.get(k + 1).is_some()
            && matches!(t.action[upto], Action::SegmentAlloc | Action::SegmentFree)
        {
            upto -= 1;
        }
        assert_eq!(
            allocated[upto] as i64, e.4,
            "allocated after event {k} {e:?}"
        );
        assert_eq!(reserved[upto] as i64, e.5, "reserved after event {k} {e:?}");
        // Times: base + ts, in µs.
        let want_us = (base + (e.0 * 1000.0) as i64) / 1000;
        assert_eq!(t.time_us[entry_of[k]], want_us);
    }
    assert_eq!(
        liveness.initial_bytes, 1000,
        "allocated before the first event"
    );
    assert_eq!(liveness.peak_bytes, 8812);
    let end = vramscope_analysis::memory_state(&snap, 0);
    assert_eq!((end.allocated_bytes, end.reserved_bytes), (8812, 9216));
    assert!(
        snap.source
            .warnings
            .iter()
            .any(|w| w.contains("1 [memory] events of CPU memory were left out")),
        "{:?}",
        snap.source.warnings
    );
}
