//! A pickle's memo lets one value be referenced any number of times: a file
//! of a few kB can stand for a tree of more values than any machine holds
//! (a list that holds the list before it a hundred times, ten deep). Fields
//! the reader converts whole (the recorder's `vramscope` dict, the
//! `allocator_settings`) are read up to the size of the file, with a
//! warning, instead of expanding without end: a damaged 1.8 MB file found
//! by mutating a test file took 14 GB before it was stopped.

use std::sync::mpsc;
use std::time::Duration;

use vramscope_pickle::writer::PickleWriter;
use vramscope_snapshot::{decode_bytes, Snapshot};

/// One value: a list of lists, the first holding `width` ints, each next
/// one holding the one before it `width` times (by memo reference), so the
/// last stands for `width^(depth+1)` values.
fn bomb(w: &mut PickleWriter<Vec<u8>>, width: usize, depth: usize) {
    w.begin_list();
    let mut last = w.begin_list();
    for i in 0..width {
        w.int(i as i64);
    }
    w.end_list();
    for _ in 0..depth {
        let id = w.begin_list();
        for _ in 0..width {
            w.get(last);
        }
        w.end_list();
        last = id;
    }
    w.end_list();
}

/// A CPU recorder's snapshot (one allocation) whose `key` (inside the
/// `vramscope` dict, or `allocator_settings`) is a bomb.
fn snapshot_with_bomb(in_recorder: bool) -> Vec<u8> {
    let mut w = PickleWriter::new(Vec::new(), 4).unwrap();
    w.begin_dict();
    w.str("segments");
    w.begin_list();
    w.end_list();
    w.str("device_traces");
    w.begin_list();
    w.begin_list();
    w.begin_dict();
    w.str("action");
    w.str("alloc");
    for (k, v) in [("addr", 4096), ("size", 512), ("stream", 0), ("time_us", 1)] {
        w.str(k);
        w.int(v);
    }
    w.str("frames");
    w.begin_list();
    w.end_list();
    w.end_dict();
    w.end_list();
    w.end_list();
    if in_recorder {
        w.str("vramscope");
        w.begin_dict();
        w.str("recorder");
        w.str("cpu-allocator");
        w.str("iterations");
        bomb(&mut w, 100, 9);
        w.end_dict();
    } else {
        w.str("allocator_settings");
        w.begin_dict();
        w.str("max_split_size");
        bomb(&mut w, 100, 14);
        w.end_dict();
    }
    w.end_dict();
    w.finish().unwrap()
}

/// Decoded on another thread: a regression expands the bomb for ever, and
/// the test fails after a minute instead of hanging.
fn decode_within_a_minute(bytes: Vec<u8>) -> Snapshot {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(decode_bytes(&bytes, &Default::default()));
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the reader expanded shared references without end")
        .expect("the file reads")
}

fn cut_warning(snap: &Snapshot, key: &str) -> bool {
    snap.source.warnings.iter().any(|w| {
        w.starts_with(&format!(
            "`{key}` refers to more values than the whole file holds"
        ))
    })
}

#[test]
fn a_recorder_dict_of_repeated_references_is_read_up_to_the_files_size() {
    let bytes = snapshot_with_bomb(true);
    assert!(
        bytes.len() < 10_000,
        "the bomb is small: {} bytes",
        bytes.len()
    );
    let snap = decode_within_a_minute(bytes);
    assert!(
        cut_warning(&snap, "vramscope"),
        "{:?}",
        snap.source.warnings
    );
    // The rest of the file is read as it is.
    assert_eq!(snap.traces.iter().map(|t| t.len()).sum::<usize>(), 1);
    assert_eq!(
        snap.source.recorder.as_ref().map(|r| r.name.as_str()),
        Some("cpu-allocator")
    );
}

#[test]
fn allocator_settings_of_repeated_references_are_read_up_to_the_files_size() {
    let snap = decode_within_a_minute(snapshot_with_bomb(false));
    assert!(
        cut_warning(&snap, "allocator_settings"),
        "{:?}",
        snap.source.warnings
    );
    assert_eq!(snap.traces.iter().map(|t| t.len()).sum::<usize>(), 1);
}

#[test]
fn real_and_recorded_files_are_never_cut() {
    use vramscope_testdata::{gpu, real, recorded};
    let files = [
        real("wedsonlin_medium_1024_training_memory_snapshot.pickle"),
        real("decomfl_opt_zo_fl_memory.pickle"),
        // The largest `vramscope` dict of the test files (8,822 values).
        gpu("advise_baseline.pickle"),
        gpu("vramscope_record.pickle"),
        recorded("mlp_adam_cpu.pickle"),
        recorded("corpus_accelerate_traceback_kept.pickle"),
    ];
    for path in files {
        let snap = vramscope_snapshot::load(&path, &Default::default()).expect("the file reads");
        assert!(
            !snap
                .source
                .warnings
                .iter()
                .any(|w| w.contains("refers to more values")),
            "{}: {:?}",
            path.display(),
            snap.source.warnings
        );
    }
}
