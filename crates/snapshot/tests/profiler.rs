//! Profiler traces decode into the snapshot model: stacks rebuilt from the
//! spans around each allocation, annotations from `record_function` spans,
//! odd events counted rather than fatal, and the real traces of
//! tests/fixtures/real.

use serde_json::{json, Value};
use vramscope_snapshot::{
    decode_bytes, load, Action, AnnotationStage, Snapshot, SnapshotError, SourceFormat, StackId,
};

fn decode(doc: &Value) -> Snapshot {
    let bytes = serde_json::to_vec(doc).expect("json");
    decode_bytes(&bytes, &Default::default()).expect("decodes")
}

fn span(cat: &str, name: &str, tid: Value, ts: f64, dur: f64) -> Value {
    json!({"ph": "X", "cat": cat, "name": name, "pid": 9, "tid": tid, "ts": ts, "dur": dur,
           "args": {"External id": 1}})
}

fn mem(tid: u64, ts: f64, addr: u64, bytes: i64, total: i64) -> Value {
    json!({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 9,
           "tid": tid, "ts": ts,
           "args": {"Device Type": 1, "Device Id": 0, "Addr": addr, "Bytes": bytes,
                    "Total Allocated": total, "Total Reserved": 1 << 20}})
}

/// `file:line name` of each frame, innermost first.
fn frames(s: &Snapshot, id: StackId) -> Vec<String> {
    s.stacks
        .get(id)
        .iter()
        .map(|&f| {
            let f = s.frames.get(f);
            format!("{}:{} {}", s.str(f.filename), f.line, s.str(f.name))
        })
        .collect()
}

#[test]
fn stacks_are_the_enclosing_spans_of_the_allocating_thread() {
    let py = |name: &str, ts, dur| span("python_function", name, json!(1), ts, dur);
    let op1 = |name: &str, ts, dur| span("cpu_op", name, json!(1), ts, dur);
    // Thread 2 names its spans' tid as a string, as some traces do.
    let op2 = |name: &str, ts, dur| span("cpu_op", name, json!("2"), ts, dur);
    // Kineto writes a span when it ends: children before their parents.
    let events = vec![
        op1("aten::empty", 30.0, 2.0),
        op1("aten::addmm", 25.0, 20.0),
        op1("aten::linear", 20.0, 30.0),
        py("nn.Module: Linear_0", 15.0, 40.0),
        py("/work/model.py(20): forward", 10.0, 50.0),
        py("/work/train.py(10): main", 0.0, 100.0),
        op2("aten::mm", 50.0, 10.0),
        op2("MmBackward0", 41.0, 48.0),
        op2(
            "autograd::engine::evaluate_function: MmBackward0",
            40.0,
            50.0,
        ),
        mem(1, 30.0, 0x100, 512, 512),
        mem(1, 47.0, 0x200, 512, 1024),
        mem(2, 55.0, 0x300, 1024, 1536),
        mem(1, 54.0, 0x100, -512, 512),
        mem(1, 60.0, 0x200, -512, 1024),
        mem(2, 95.0, 0x300, -1024, 0),
    ];
    let s = decode(&json!({"traceEvents": events}));
    assert_eq!(s.source.format, SourceFormat::KinetoTrace);
    let t = s.trace(0).expect("device 0");
    let got: Vec<Vec<String>> = (0..t.len()).map(|i| frames(&s, t.stack[i])).collect();
    let main = "/work/train.py:10 main";
    let forward = "/work/model.py:20 forward";
    let module = ":0 nn.Module: Linear_0";
    let backward = [
        ":0 aten::mm",
        ":0 MmBackward0",
        ":0 autograd::engine::evaluate_function: MmBackward0",
    ];
    assert_eq!(
        got,
        vec![
            vec![
                ":0 aten::empty",
                ":0 aten::addmm",
                ":0 aten::linear",
                module,
                forward,
                main
            ],
            vec![":0 aten::linear", module, forward, main],
            vec![module, forward, main],
            backward.to_vec(),
            // `forward` spans [10, 60): 60 is outside it.
            vec![main],
            // The backward spans ended at 90.
            vec![],
        ]
    );
    assert_eq!(t.action[0], Action::Alloc);
    assert_eq!(t.action[2], Action::FreeCompleted);
    assert_eq!(t.time_us, vec![30, 47, 54, 55, 60, 95]);
}

#[test]
fn an_operators_call_stack_continues_the_chain() {
    // Older traces: `Operator` spans with the Python stack as an arg.
    let mut outer = span("Operator", "aten::conv2d", json!("5"), 0.0, 10.0);
    outer["args"]["Call stack"] = json!("/w/net.py(7): forward;/w/run.py(3): <module>");
    let inner = span("Operator", "aten::empty", json!("5"), 2.0, 1.0);
    let mut m = mem(5, 2.0, 0, 64, 64);
    m["args"].as_object_mut().expect("args").remove("Addr");
    let s = decode(&json!({"traceEvents": [outer, inner, m]}));
    let t = s.trace(0).expect("device 0");
    assert_eq!(
        frames(&s, t.stack[0]),
        [
            ":0 aten::empty",
            ":0 aten::conv2d",
            "/w/net.py:7 forward",
            "/w/run.py:3 <module>"
        ]
    );
    // No address recorded: a made-up one, said so.
    assert!(t.addr[0] >= 0xF000_0000_0000_0000);
    assert!(s
        .source
        .warnings
        .iter()
        .any(|w| w.contains("record no address")));
}

#[test]
fn record_function_spans_are_annotations_in_time_order() {
    let base: i64 = 1_690_000_000_000_000_000;
    let events = vec![
        span("user_annotation", "ProfilerStep#2", json!(1), 100.0, 100.0),
        span("user_annotation", "ProfilerStep#1", json!(1), 0.0, 100.0),
        span(
            "user_annotation",
            "Optimizer.step#SGD.step",
            json!(1),
            150.0,
            20.5,
        ),
        mem(1, 10.0, 0x10, 8, 8),
    ];
    let s = decode(&json!({"traceEvents": events, "baseTimeNanoseconds": base}));
    let got: Vec<(String, AnnotationStage, i64)> = s
        .annotations
        .iter()
        .map(|a| (s.str(a.name).to_owned(), a.stage, a.time_us - base / 1000))
        .collect();
    let step1 = "ProfilerStep#1".to_owned();
    let step2 = "ProfilerStep#2".to_owned();
    let opt = "Optimizer.step#SGD.step".to_owned();
    use AnnotationStage::{End, Start};
    assert_eq!(
        got,
        vec![
            (step1.clone(), Start, 0),
            (step1, End, 100),
            (step2.clone(), Start, 100),
            (opt.clone(), Start, 150),
            (opt, End, 170),
            (step2, End, 200),
        ]
    );
    assert!(s.annotations.iter().all(|a| a.device == -1));
    assert_eq!(
        s.trace(0).expect("device 0").time_us,
        vec![base / 1000 + 10]
    );
}

#[test]
fn a_trace_without_memory_events_says_how_to_record_one() {
    let doc = json!({"traceEvents": [span("cpu_op", "aten::mm", json!(1), 0.0, 1.0)]});
    let bytes = serde_json::to_vec(&doc).expect("json");
    let e = decode_bytes(&bytes, &Default::default()).expect_err("no memory");
    assert!(matches!(e, SnapshotError::NotASnapshot(_)));
    let msg = e.to_string();
    assert!(msg.contains("no [memory] events"), "{msg}");
    assert!(msg.contains("profile_memory=True"), "{msg}");
}

#[test]
fn a_trace_cut_short_keeps_the_events_before_the_cut() {
    let events: Vec<Value> = (0..10)
        .map(|i| mem(1, i as f64, 0x1000 + i, 16, 16 * (i as i64 + 1)))
        .collect();
    let text = serde_json::to_string(&json!({"traceEvents": events})).expect("json");
    let cut = text.find("\"ts\":7").expect("8th event");
    let s = decode_bytes(&text.as_bytes()[..cut], &Default::default()).expect("recovered");
    assert!(s.source.truncated);
    assert_eq!(s.trace(0).expect("device 0").len(), 7);
    assert!(
        s.source.warnings[0].starts_with("the file is truncated"),
        "{:?}",
        s.source.warnings
    );
}

#[test]
fn a_snapshot_dict_is_still_a_snapshot() {
    let doc = json!({"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": 4,
        "stream": 0, "frames": []}]], "traceEvents_note": 1});
    let s = decode(&doc);
    assert_eq!(s.source.format, SourceFormat::Snapshot);
    assert_eq!(s.source.encoding_name(), "json");
    assert_eq!(s.trace(0).expect("device 0").len(), 1);
}

#[test]
fn memory_events_without_a_usable_size_or_time_are_counted_and_left_out() {
    let mut no_size = mem(1, 2.0, 0x20, 0, 0);
    no_size["args"]["Bytes"] = json!("lots");
    let mut no_time = mem(1, 3.0, 0x30, 16, 16);
    no_time.as_object_mut().expect("event").remove("ts");
    let events = vec![
        mem(1, 1.0, 0x10, 16, 16),
        no_size,
        no_time,
        mem(1, 4.0, 0x10, -16, 0),
    ];
    let s = decode(&json!({"traceEvents": events}));
    assert_eq!(s.trace(0).expect("device 0").len(), 2);
    let got: Vec<(String, u64, String)> = s
        .source
        .repairs
        .iter()
        .map(|r| (r.field.clone(), r.count, r.example.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "traceEvents[*].args.Bytes".to_owned(),
                1,
                "traceEvents[1].args.Bytes: expected a number, found a string".to_owned()
            ),
            (
                "traceEvents[*].ts".to_owned(),
                1,
                "traceEvents[2].ts: expected a number, found nothing".to_owned()
            ),
        ]
    );
    assert!(s
        .source
        .warnings
        .iter()
        .any(|w| w.starts_with("repaired 1 value of traceEvents[*].args.Bytes")));
}

#[test]
fn the_real_traces_decode() {
    let s = load(
        &vramscope_testdata::real("hta_df_index_resolver_kineto_trace.json.gz"),
        &Default::default(),
    )
    .expect("decodes");
    assert_eq!(s.devices(), vec![1]);
    let t = s.trace(1).expect("device 1");
    assert_eq!(t.len(), 26_770);
    // All but 15 events happen inside an operator; those 15 are inside
    // nothing but a ProfilerStep span.
    assert_eq!(t.stack.iter().filter(|st| st.is_none()).count(), 15);
    let steps = s
        .annotations
        .iter()
        .filter(|a| a.stage == AnnotationStage::Start && s.str(a.name).starts_with("ProfilerStep#"))
        .count();
    assert_eq!(steps, 5);
    assert_eq!(s.segments.len(), 1);
    assert_eq!(
        s.segments[0].total_size, 12_782_141_440,
        "Total Reserved at the end"
    );

    let s = load(
        &vramscope_testdata::real("kineto_resnet50_v100_profile_memory.pt.trace.json.gz"),
        &Default::default(),
    )
    .expect("decodes");
    let t = s.trace(0).expect("device 0");
    assert_eq!(t.len(), 8_220);
    // The operators' `Call stack` reaches the lines of the script that
    // allocate on the GPU.
    let user: std::collections::BTreeSet<String> = (0..t.len())
        .flat_map(|i| frames(&s, t.stack[i]))
        .filter(|f| f.starts_with("resnet50_profiler_api.py:"))
        .collect();
    assert_eq!(
        user.into_iter().collect::<Vec<_>>(),
        [44, 46, 47, 50].map(|l| format!("resnet50_profiler_api.py:{l} <module>"))
    );
}
