//! Where states come from, and which process the user means by
//! `vramscope live [TARGET]`: a PID, `HOST:PORT`, a state file, or (no
//! argument) the only live process of the registry directory.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::registry::{live_entries, socket_addrs, RegistryEntry};
use crate::{pid_alive, LiveError};

/// Where the states of one live recording are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The loopback socket of the process; `pid` when known (from its
    /// registry entry), to say "process 4242 ended" rather than "the
    /// connection was closed".
    Socket {
        addr: SocketAddr,
        token: String,
        pid: Option<u32>,
    },
    /// A state file replaced atomically at every publication.
    File(PathBuf),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Source::Socket { addr, .. } => write!(f, "{addr}"),
            Source::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// Resolve `vramscope live [TARGET] [--token T]` against the registry
/// directory `dir`: no target is the only live process; digits are a
/// PID; an existing path is a state file; `HOST:PORT` is a socket, its
/// token from `token` or from the registry entry with that address.
pub fn resolve(target: Option<&str>, token: Option<&str>, dir: &Path) -> Result<Source, LiveError> {
    let Some(target) = target else {
        let mut live = live_entries(dir);
        return match live.len() {
            0 => Err(LiveError::NoneRunning {
                dir: dir.to_path_buf(),
            }),
            1 => {
                let (path, entry) = live.remove(0);
                entry.source(&path, token)
            }
            _ => Err(LiveError::Several {
                dir: dir.to_path_buf(),
                pids: live.iter().map(|(_, e)| e.pid).collect(),
                listing: live
                    .iter()
                    .map(|(_, e)| e.describe())
                    .collect::<Vec<_>>()
                    .join("\n"),
            }),
        };
    };
    if !target.is_empty() && target.bytes().all(|b| b.is_ascii_digit()) {
        return by_pid(target, token, dir);
    }
    // A path first: a file the user names is what they mean, even with a
    // colon in its name.
    let path = Path::new(target);
    if path.is_file() {
        return Ok(Source::File(path.to_path_buf()));
    }
    if let Some((host, port)) = target.rsplit_once(':') {
        if !host.is_empty() && port.parse::<u16>().is_ok() {
            return by_address(target, token, dir);
        }
    }
    let why = if path.exists() {
        " (a directory)"
    } else {
        " (no such file)"
    };
    Err(LiveError::BadTarget {
        target: target.into(),
        why: why.into(),
    })
}

fn by_pid(target: &str, token: Option<&str>, dir: &Path) -> Result<Source, LiveError> {
    let pid: u32 = target.parse().map_err(|_| LiveError::BadTarget {
        target: target.into(),
        why: " (not a process id)".into(),
    })?;
    let path = dir.join(format!("{pid}.json"));
    let not_running = |found: String| LiveError::NotRunning {
        pid,
        path: path.clone(),
        found,
    };
    if !path.exists() {
        let live: Vec<String> = live_entries(dir)
            .iter()
            .map(|(_, e)| e.pid.to_string())
            .collect();
        return Err(not_running(if live.is_empty() {
            "no such file, and no live process in that directory \
             (start one with vramscope.record(live=True) or VRAMSCOPE_LIVE=1)"
                .into()
        } else {
            format!("no such file (live processes: {})", live.join(", "))
        }));
    }
    let entry = RegistryEntry::read(&path)?;
    if !pid_alive(entry.pid) {
        return Err(not_running(format!(
            "a stale entry: process {} is not running",
            entry.pid
        )));
    }
    entry.source(&path, token)
}

fn by_address(target: &str, token: Option<&str>, dir: &Path) -> Result<Source, LiveError> {
    let addrs = socket_addrs(target);
    if addrs.is_empty() {
        return Err(LiveError::BadTarget {
            target: target.into(),
            why: " (names no address)".into(),
        });
    }
    // The entry publishing on one of the addresses the target names
    // (either side may have been written as a name, e.g. `localhost`).
    let entry = live_entries(dir).into_iter().find(|(_, e)| {
        e.address
            .as_deref()
            .is_some_and(|a| socket_addrs(a).iter().any(|x| addrs.contains(x)))
    });
    match (entry, token) {
        (Some((path, e)), t) => e.source(&path, t),
        (None, Some(t)) => Ok(Source::Socket {
            addr: addrs[0],
            token: t.to_string(),
            pid: None,
        }),
        (None, None) => Err(LiveError::NoToken {
            addr: target.into(),
            dir: dir.to_path_buf(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> vramscope_testdata::TestDir {
        vramscope_testdata::temp_dir(&format!("live-unit-{name}"))
    }

    fn entry(d: &Path, pid: u32, address: &str) {
        let body = format!(
            r#"{{"pid": {pid}, "address": "{address}", "token": "t{pid}", "host": "h",
                "rank": 0, "argv": ["train.py"], "started_us": 1, "extra": true}}"#
        );
        std::fs::write(d.join(format!("{pid}.json")), body).unwrap();
    }

    const DEAD: u32 = 999_999_999; // above any pid_max

    #[test]
    fn no_target_finds_the_only_live_process() {
        let d = dir("only");
        let me = std::process::id();
        entry(&d, me, "127.0.0.1:40123");
        entry(&d, DEAD, "127.0.0.1:40124");
        std::fs::write(d.join("notes.json"), "{}").unwrap();
        std::fs::write(d.join("77.json.tmp"), "{").unwrap();
        let s = resolve(None, None, &d).unwrap();
        let want: SocketAddr = "127.0.0.1:40123".parse().unwrap();
        assert_eq!(
            s,
            Source::Socket {
                addr: want,
                token: format!("t{me}"),
                pid: Some(me)
            }
        );

        // Another live one (pid 1 always exists): the user must choose.
        entry(&d, 1, "127.0.0.1:40125");
        let e = resolve(None, None, &d).unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("2 live") && m.contains("40125") && m.contains(&me.to_string()),
            "{m}"
        );
        assert!(e.is_invalid_input());
    }

    #[test]
    fn none_running_explains_how_to_start_one() {
        let d = dir("none");
        entry(&d, DEAD, "127.0.0.1:40124");
        let m = resolve(None, None, &d).unwrap_err().to_string();
        assert!(
            m.contains("record(live=True)") && m.contains("VRAMSCOPE_LIVE=1"),
            "{m}"
        );
        let m = resolve(Some(&DEAD.to_string()), None, &d)
            .unwrap_err()
            .to_string();
        assert!(m.contains("stale") && m.contains("not running"), "{m}");
        let m = resolve(Some("4"), None, &d).unwrap_err().to_string();
        assert!(m.contains("4.json") && m.contains("no such file"), "{m}");
    }

    #[test]
    fn address_takes_its_token_from_the_registry() {
        let d = dir("addr");
        let me = std::process::id();
        entry(&d, me, "127.0.0.1:40123");
        let s = resolve(Some("127.0.0.1:40123"), None, &d).unwrap();
        assert!(
            matches!(s, Source::Socket { ref token, pid: Some(p), .. } if *token == format!("t{me}") && p == me)
        );
        let s = resolve(Some("127.0.0.1:40123"), Some("given"), &d).unwrap();
        assert!(matches!(s, Source::Socket { ref token, .. } if token == "given"));
        let e = resolve(Some("127.0.0.1:50000"), None, &d).unwrap_err();
        assert!(matches!(e, LiveError::NoToken { .. }), "{e}");
        assert!(e.to_string().contains("--token"), "{e}");
        let s = resolve(Some("127.0.0.1:50000"), Some("x"), &d).unwrap();
        assert!(matches!(s, Source::Socket { pid: None, .. }));

        // Registered as `localhost`, asked for as 127.0.0.1 (and back).
        let d = dir("localhost");
        entry(&d, me, "localhost:40999");
        let s = resolve(Some("127.0.0.1:40999"), None, &d).unwrap();
        let want: SocketAddr = "127.0.0.1:40999".parse().unwrap();
        assert!(
            matches!(s, Source::Socket { addr, pid: Some(_), .. } if addr == want),
            "{s:?}"
        );
        let s = resolve(Some("localhost:40999"), None, &d).unwrap();
        assert!(
            matches!(s, Source::Socket { addr, .. } if addr == want),
            "{s:?}"
        );
    }

    #[test]
    fn files_and_bad_targets() {
        let d = dir("files");
        let f = d.join("state.json");
        std::fs::write(&f, "{}").unwrap();
        let s = resolve(Some(f.to_str().unwrap()), None, &d).unwrap();
        assert_eq!(s, Source::File(f));
        let e = resolve(Some("nonsense"), None, &d).unwrap_err();
        assert!(
            e.to_string().contains("no such file") && e.is_invalid_input(),
            "{e}"
        );
        // A file-publishing entry points at its file.
        let me = std::process::id();
        std::fs::write(
            d.join(format!("{me}.json")),
            format!(r#"{{"pid": {me}, "file": "/x/s.json"}}"#),
        )
        .unwrap();
        let s = resolve(Some(&me.to_string()), None, &d).unwrap();
        assert_eq!(s, Source::File("/x/s.json".into()));
    }
}
