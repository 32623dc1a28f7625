//! `vramscope live` against a publisher run by the test itself: a loopback
//! listener that checks the token line and sends states as the protocol
//! says (docs/live-protocol.md), a registry directory whose entry names
//! this test's own pid (so it counts as alive), and a state file.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Command, Output};

use common::{stderr, stdout, temp_dir};

const TOKEN: &str = "9f3c0aa1";

fn state(seq: u64, allocated: u64) -> String {
    let me = std::process::id();
    format!(
        concat!(
            r#"{{"version":1,"pid":{me},"host":"node1","rank":2,"local_rank":2,"world_size":4,"#,
            r#""device":"cuda:2","recorder":"cuda","time_us":{t},"seq":{seq},"iteration":7,"#,
            r#""allocated":{a},"reserved":2147483648,"peak_allocated":1879048192,"#,
            r#""peak_reserved":2147483648,"capacity":85899345920,"#,
            r#""categories":{{"parameter":1073741824,"other":{rest}}},"#,
            r#""top":[{{"site":"train.py:41 in step","bytes":1073741824,"blocks":12,"#,
            r#""stack":["train.py:41 in step","train.py:80 in <module>"]}}],"#,
            r#""iterations":[{{"n":6,"end_us":{e6},"allocated":1000000,"reserved":2000000,"peak":1500000}},"#,
            r#"{{"n":7,"end_us":{e7},"allocated":3000000,"reserved":2000000,"peak":3500000}}],"#,
            r#""ooms":[],"dumps":[],"publish_us":850,"from_a_later_version":{{"x":1}}}}"#
        ),
        me = me,
        t = 1_732_538_010_000_000 + seq * 500_000,
        seq = seq,
        a = allocated,
        rest = allocated - (1 << 30),
        e6 = 1_732_538_008_000_000u64,
        e7 = 1_732_538_009_000_000u64,
    )
}

const FIRST: u64 = 1_610_612_736; // 1.50 GiB
const SECOND: u64 = 1_879_048_192; // 1.75 GiB

/// A publisher: every client that sends the right token gets two states
/// and the connection closes; a wrong token is answered `{"error": ...}`.
fn publisher() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut s) = conn else { continue };
            let mut line = String::new();
            let Ok(read) = s.try_clone() else { continue };
            if BufReader::new(read).read_line(&mut line).is_err() {
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            if v["token"] != TOKEN {
                let _ = s.write_all(b"{\"error\": \"bad token\"}\n");
                continue;
            }
            for st in [state(1, FIRST), state(2, SECOND)] {
                let _ = s.write_all(format!("{st}\n").as_bytes());
            }
        }
    });
    addr
}

/// A registry directory with this process's entry pointing at `addr`.
fn registry(name: &str, addr: SocketAddr) -> common::TestDir {
    let d = temp_dir(name);
    let me = std::process::id();
    let entry = serde_json::json!({
        "pid": me, "address": addr.to_string(), "token": TOKEN, "host": "node1",
        "rank": 2, "argv": ["train.py", "--lr", "1e-3"], "started_us": 1_732_538_000_000_000u64,
    });
    std::fs::write(d.join(format!("{me}.json")), entry.to_string()).expect("write entry");
    d
}

fn live(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .arg("live")
        .args(args)
        .env("VRAMSCOPE_LIVE_DIR", dir)
        .output()
        .expect("run vramscope live")
}

#[test]
fn pid_once_json_prints_the_first_state_as_sent() {
    let addr = publisher();
    let dir = registry("live-pid", addr);
    let me = std::process::id().to_string();
    let o = live(&dir, &[&me, "--once", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(
        out,
        format!("{}\n", state(1, FIRST)),
        "passed through unchanged"
    );
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("JSON");
    assert_eq!(v["allocated"], FIRST);
    assert_eq!(v["seq"], 1);
    assert_eq!(v["from_a_later_version"]["x"], 1, "unknown keys are kept");

    // No target: the only live process is the same one.
    let o = live(&dir, &["--once", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().count(), 1);
}

#[test]
fn json_stream_ends_when_the_recording_stops() {
    let addr = publisher();
    let dir = registry("live-stream", addr);
    let o = live(&dir, &[&addr.to_string(), "--json"]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let lines: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON state per line"))
        .collect();
    let seen: Vec<(u64, u64)> = lines
        .iter()
        .map(|v| {
            (
                v["seq"].as_u64().unwrap_or(0),
                v["allocated"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(seen, [(1, FIRST), (2, SECOND)]);
    // This test's process is alive: the publisher closed, not the process.
    assert!(
        err.contains("connection was closed") && err.contains("recording stopped"),
        "{err}"
    );
}

#[test]
fn address_with_token_prints_a_plain_frame() {
    let addr = publisher();
    let empty = temp_dir("live-addr");
    let o = live(&empty, &[&addr.to_string(), "--token", TOKEN, "--once"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(!out.contains('\x1b'), "no escape codes: {out:?}");
    let me = std::process::id();
    assert!(
        out.contains(&format!("pid {me} on node1 · rank 2/4 · cuda:2 · cuda")),
        "{out}"
    );
    assert!(
        out.contains("allocated 1.50 GiB · reserved 2.00 GiB · capacity 80.00 GiB (2.5% reserved)"),
        "{out}"
    );
    assert!(out.contains("peak 1.75 GiB (2.00 GiB reserved)"), "{out}");
    assert!(!out.contains("q quit"), "no keys in plain output: {out}");
    // (3000000 - 1000000) bytes over one iteration.
    assert!(out.contains("growth +1.91 MiB/iteration"), "{out}");
    assert!(
        out.contains(">   1.00 GiB       12  train.py:41 in step"),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.contains('┴') && l.chars().all(|c| c == '─' || c == '┴')),
        "{out}"
    );
    for l in out.lines() {
        assert!(l.chars().count() <= 100, "{l}");
    }

    // The same address without a token, and no registry entry for it.
    let o = live(&empty, &[&addr.to_string(), "--once"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no token for") && stderr(&o).contains("--token"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn wrong_token_fails_clearly() {
    let addr = publisher();
    let empty = temp_dir("live-token");
    let o = live(
        &empty,
        &[&addr.to_string(), "--token", "guess", "--once", "--json"],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(stdout(&o).is_empty());
    assert!(
        err.contains(&format!("{addr} did not accept the token")) && err.contains("bad token"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn state_file_target() {
    let d = temp_dir("live-file");
    let f = d.join("state.json");
    std::fs::write(&f, state(5, FIRST)).expect("write state");
    let path = f.to_str().expect("utf-8 path");
    let o = live(&d, &[path, "--once", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("JSON");
    assert_eq!(
        (v["seq"].as_u64(), v["allocated"].as_u64()),
        (Some(5), Some(FIRST))
    );
    let o = live(&d, &[path, "--once"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("seq 5"), "{}", stdout(&o));

    std::fs::write(&f, "{\"version\": 1, \"allocated\": 5}").expect("write");
    let o = live(&d, &[path, "--once", "--interval", "0.05"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("expected a vramscope live state"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn no_live_process_explains_how_to_start_one() {
    let d = temp_dir("live-none");
    // A stale entry: its process does not exist.
    std::fs::write(
        d.join("999999999.json"),
        r#"{"pid": 999999999, "address": "127.0.0.1:9", "token": "t"}"#,
    )
    .expect("write");
    let o = live(&d, &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("no live vramscope process in"), "{err}");
    assert!(
        err.contains("record(live=True)") && err.contains("VRAMSCOPE_LIVE=1"),
        "{err}"
    );

    let o = live(&d, &["999999999"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("process 999999999 is not running"),
        "{}",
        stderr(&o)
    );

    let o = live(&d, &["--interval", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn several_live_processes_are_listed() {
    let addr = publisher();
    let dir = registry("live-several", addr);
    // pid 1 always exists.
    std::fs::write(
        dir.join("1.json"),
        r#"{"pid": 1, "address": "127.0.0.1:9", "token": "t", "host": "node1", "argv": ["other.py"]}"#,
    )
    .expect("write");
    let o = live(&dir, &["--once"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("2 live vramscope processes"), "{err}");
    assert!(
        err.contains("train.py --lr 1e-3") && err.contains("other.py"),
        "{err}"
    );
}
