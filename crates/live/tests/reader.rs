//! The reader against a publisher written here: a socket that checks the
//! token and sends states, and a state file replaced by rename.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::time::Duration;

use vramscope_live::{LiveError, Reader, ReaderOptions, Source};

fn state_line(seq: u64, allocated: u64, pid: u32) -> String {
    format!(
        r#"{{"version": 1, "pid": {pid}, "host": "h", "seq": {seq}, "time_us": {}, "allocated": {allocated}, "reserved": {}, "newer_key": [1]}}"#,
        1_000_000 * seq,
        allocated * 2
    )
}

fn opts() -> ReaderOptions {
    ReaderOptions {
        timeout: Duration::from_millis(800),
        poll: Duration::from_millis(20),
        connect_timeout: Duration::from_secs(2),
    }
}

/// Accept one client, check its token line, send `lines`, then close.
/// A wrong token is answered `{"error": "bad token"}` (as the Python
/// publisher does) when `answer` is set, else the connection just closes.
fn publisher_with(
    token: &'static str,
    lines: Vec<String>,
    hold_open: Duration,
    answer: bool,
) -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut first = String::new();
        r.read_line(&mut first).unwrap();
        let v: serde_json::Value = serde_json::from_str(&first).unwrap();
        let mut s = s;
        if v["token"] != token {
            if answer {
                s.write_all(b"{\"error\": \"bad token\"}\n").unwrap();
            }
            return;
        }
        for line in lines {
            s.write_all(line.as_bytes()).unwrap();
            s.write_all(b"\n").unwrap();
        }
        std::thread::sleep(hold_open);
    });
    addr
}

fn publisher(token: &'static str, lines: Vec<String>, hold_open: Duration) -> std::net::SocketAddr {
    publisher_with(token, lines, hold_open, false)
}

#[test]
fn reads_states_then_reports_the_close() {
    let me = std::process::id();
    let addr = publisher(
        "secret",
        vec![
            state_line(1, 100, me),
            String::new(),
            state_line(2, 300, me),
        ],
        Duration::ZERO,
    );
    let src = Source::Socket {
        addr,
        token: "secret".into(),
        pid: None,
    };
    let mut r = Reader::open(&src, &opts()).unwrap();
    let a = r.next_state().unwrap();
    assert_eq!(
        (a.state.seq, a.state.allocated, a.state.reserved),
        (1, 100, 200)
    );
    assert!(
        a.raw.contains("newer_key"),
        "the raw line is kept: {}",
        a.raw
    );
    let b = r.next_state().unwrap();
    assert_eq!((b.state.seq, b.state.allocated), (2, 300));
    // This process is alive, so it is the recording that stopped.
    let e = r.next_state().unwrap_err();
    assert!(matches!(e, LiveError::Closed { .. }), "{e}");
    assert!(e.is_end());
    assert!(
        e.to_string()
            .contains(&format!("process {me} is still running")),
        "{e}"
    );
}

/// What reading the first state from the socket at `addr` fails with.
fn first_error(addr: std::net::SocketAddr, token: &str) -> LiveError {
    let src = Source::Socket {
        addr,
        token: token.into(),
        pid: None,
    };
    Reader::open(&src, &opts())
        .unwrap()
        .next_state()
        .unwrap_err()
}

#[test]
fn wrong_token_is_refused_clearly() {
    for answer in [false, true] {
        let addr = publisher_with("secret", vec![state_line(1, 1, 1)], Duration::ZERO, answer);
        let e = first_error(addr, "guess");
        let m = e.to_string();
        assert!(matches!(e, LiveError::Rejected { .. }), "{m}");
        assert!(
            m.starts_with(&format!("{addr} did not accept the token: ")),
            "{m}"
        );
        let why = if answer {
            "it answered \"bad token\""
        } else {
            "closed the connection before sending a state"
        };
        assert!(m.contains(why), "{m}");
    }
}

#[test]
fn ended_process_is_named() {
    // A pid that cannot exist: the process behind the socket is gone.
    let addr = publisher("t", vec![state_line(1, 1, 999_999_999)], Duration::ZERO);
    let src = Source::Socket {
        addr,
        token: "t".into(),
        pid: None,
    };
    let mut r = Reader::open(&src, &opts()).unwrap();
    r.next_state().unwrap();
    let e = r.next_state().unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("process 999999999 ended ({addr} closed the connection)")
    );
}

#[test]
fn silence_times_out_and_garbage_is_named() {
    let addr = publisher("t", vec![], Duration::from_secs(3));
    let e = first_error(addr, "t");
    assert!(matches!(e, LiveError::Timeout { .. }), "{e}");

    let addr = publisher(
        "t",
        vec!["{\"version\": 1, \"allocated\": \"lots\"}".into()],
        Duration::ZERO,
    );
    let e = first_error(addr, "t");
    let m = e.to_string();
    assert!(
        m.contains(&addr.to_string()) && m.contains("expected a vramscope live state"),
        "{m}"
    );
    assert!(e.is_invalid_input());
}

#[test]
fn nothing_listening_is_a_connect_error() {
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let src = Source::Socket {
        addr,
        token: "t".into(),
        pid: None,
    };
    let e = Reader::open(&src, &opts())
        .err()
        .expect("connection refused");
    assert!(
        e.to_string()
            .starts_with(&format!("cannot connect to {addr}")),
        "{e}"
    );
}

fn temp(name: &str) -> vramscope_testdata::TestDir {
    vramscope_testdata::temp_dir(&format!("live-reader-{name}"))
}

fn replace(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn state_file_is_reread_when_replaced() {
    let d = temp("file");
    let f = d.join("state.json");
    // Indented, as a person or another writer might: --json gets one line.
    let pretty = serde_json::to_string_pretty(
        &serde_json::from_str::<serde_json::Value>(&state_line(1, 10, 1)).unwrap(),
    )
    .unwrap();
    replace(&f, &pretty);
    let mut r = Reader::open(&Source::File(f.clone()), &opts()).unwrap();
    let a = r.next_state().unwrap();
    assert_eq!(a.state.allocated, 10);
    assert!(
        !a.raw.contains('\n') && a.raw.contains("newer_key"),
        "{}",
        a.raw
    );

    let writer = {
        let f = f.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            replace(&f, &state_line(2, 20, 1));
        })
    };
    let b = r.next_state().unwrap();
    assert_eq!((b.state.seq, b.state.allocated), (2, 20));
    writer.join().unwrap();

    std::fs::remove_file(&f).unwrap();
    let e = Reader::open(&Source::File(f.clone()), &opts())
        .err()
        .expect("missing file");
    assert!(e.to_string().contains("state.json"), "{e}");
}
