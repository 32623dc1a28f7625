//! The registry directory: where each live recording says how to reach
//! it (docs/live-protocol.md), one `<pid>.json` per process, so that a
//! bare PID, or no argument at all, finds a socket and its token.
//!
//! Entries whose process is gone are stale and skipped, not deleted: a
//! reader has no business removing what another program wrote.

use std::ffi::OsString;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::{pid_alive, LiveError, Source};

/// A registry file `<pid>.json`. Only `pid` and a way in (`address` and
/// `token`, or `file`) are needed; the rest describes the process.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RegistryEntry {
    pub pid: u32,
    #[serde(default)]
    pub address: Option<String>,
    #[serde(default)]
    pub token: Option<String>,
    /// The state file, for a recording that publishes to one
    /// (`live="file:..."`) rather than to a socket.
    #[serde(default)]
    pub file: Option<PathBuf>,
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub rank: u32,
    #[serde(default)]
    pub argv: Vec<String>,
    #[serde(default)]
    pub started_us: i64,
}

/// The registry directory: `$VRAMSCOPE_LIVE_DIR`, else
/// `$XDG_RUNTIME_DIR/vramscope-live` when that directory exists, else
/// `<tmp>/vramscope-live-<uid>` (`<tmp>` being `$TMPDIR` or `/tmp`, as
/// Python's `tempfile` finds it).
pub fn registry_dir() -> PathBuf {
    registry_dir_from(|k| std::env::var_os(k))
}

fn registry_dir_from(env: impl Fn(&str) -> Option<OsString>) -> PathBuf {
    // An empty variable counts as unset, as shells often export them so.
    let var = |k: &str| env(k).filter(|v| !v.is_empty());
    if let Some(d) = var("VRAMSCOPE_LIVE_DIR") {
        return PathBuf::from(d);
    }
    // A variable left over from another session may name a directory
    // that is gone; the publisher then falls back to <tmp>, so must we.
    if let Some(d) = var("XDG_RUNTIME_DIR").filter(|d| Path::new(d).is_dir()) {
        return PathBuf::from(d).join("vramscope-live");
    }
    let tmp = var("TMPDIR").map_or_else(std::env::temp_dir, PathBuf::from);
    tmp.join(format!("vramscope-live-{}", uid()))
}

fn uid() -> String {
    #[cfg(unix)]
    {
        // SAFETY: getuid cannot fail and has no side effects.
        unsafe { libc::getuid() }.to_string()
    }
    #[cfg(not(unix))]
    {
        std::env::var("USERNAME").unwrap_or_else(|_| "user".into())
    }
}

impl RegistryEntry {
    /// Read and parse one registry file.
    pub fn read(path: &Path) -> Result<RegistryEntry, LiveError> {
        let text = std::fs::read_to_string(path).map_err(|e| LiveError::Io {
            what: "reading registry entry",
            origin: path.display().to_string(),
            cause: e,
        })?;
        serde_json::from_str(&text).map_err(|e| LiveError::Registry {
            path: path.to_path_buf(),
            expected: "a JSON object with pid, address and token".into(),
            found: e.to_string(),
        })
    }

    /// The source this entry points at; `token` (from `--token`) wins over
    /// the entry's own.
    pub fn source(&self, path: &Path, token: Option<&str>) -> Result<Source, LiveError> {
        let bad = |expected: &str, found: String| LiveError::Registry {
            path: path.to_path_buf(),
            expected: expected.into(),
            found,
        };
        match (&self.address, &self.file) {
            (Some(a), _) => {
                let addr = socket_addrs(a)
                    .into_iter()
                    .next()
                    .ok_or_else(|| bad("an address HOST:PORT", format!("{a:?}")))?;
                let token = token
                    .map(str::to_string)
                    .or_else(|| self.token.clone())
                    .ok_or_else(|| bad("a token", "none".into()))?;
                Ok(Source::Socket {
                    addr,
                    token,
                    pid: Some(self.pid),
                })
            }
            (None, Some(f)) => Ok(Source::File(f.clone())),
            (None, None) => Err(bad("an address or a file", "neither".into())),
        }
    }

    /// One line for a list of processes to choose from.
    pub fn describe(&self) -> String {
        let mut s = format!("{:>8}  {}  rank {}", self.pid, self.host, self.rank);
        if !self.argv.is_empty() {
            s.push_str("  ");
            s.push_str(&self.argv.join(" "));
        }
        if let Some(a) = &self.address {
            s.push_str(&format!("  ({a})"));
        }
        s
    }
}

/// The live entries of `dir`, by pid: files named `<pid>.json` that parse
/// and whose process exists. A file that does not parse is skipped: it
/// may be one being written by a publisher that does not rename it in.
pub fn live_entries(dir: &Path) -> Vec<(PathBuf, RegistryEntry)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(PathBuf, RegistryEntry)> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| file_pid(p).is_some())
        .filter_map(|p| RegistryEntry::read(&p).ok().map(|e| (p, e)))
        .filter(|(_, e)| pid_alive(e.pid))
        .collect();
    out.sort_by_key(|(_, e)| e.pid);
    out
}

/// The addresses `HOST:PORT` names, IPv4 first: a publisher told
/// `localhost` listens on 127.0.0.1, while the name may resolve to ::1
/// first. Empty when it names none.
pub fn socket_addrs(text: &str) -> Vec<SocketAddr> {
    let mut v: Vec<SocketAddr> = text
        .to_socket_addrs()
        .map_or_else(|_| Vec::new(), Iterator::collect);
    v.sort_by_key(|a| a.is_ipv6());
    v
}

fn file_pid(p: &Path) -> Option<u32> {
    let name = p.file_name()?.to_str()?;
    let stem = name.strip_suffix(".json")?;
    if stem.is_empty() || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_dir_precedence() {
        fn env<'a>(vals: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
            move |k: &str| {
                vals.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| OsString::from(v))
            }
        }
        let run = std::env::temp_dir();
        let run = run.to_str().unwrap();
        let both = [("VRAMSCOPE_LIVE_DIR", "/a"), ("XDG_RUNTIME_DIR", run)];
        assert_eq!(registry_dir_from(env(&both)), PathBuf::from("/a"));
        let xdg = [("VRAMSCOPE_LIVE_DIR", ""), ("XDG_RUNTIME_DIR", run)];
        assert_eq!(
            registry_dir_from(env(&xdg)),
            Path::new(run).join("vramscope-live")
        );
        // A runtime directory that does not exist is not used.
        let gone = [
            ("XDG_RUNTIME_DIR", "/nonexistent/run/7"),
            ("TMPDIR", "/scratch"),
        ];
        assert!(registry_dir_from(env(&gone)).starts_with("/scratch"));
        let tmp = registry_dir_from(env(&[("TMPDIR", "/scratch")]));
        assert!(tmp.starts_with("/scratch"), "{}", tmp.display());
        assert!(
            tmp.to_string_lossy().contains("vramscope-live-"),
            "{}",
            tmp.display()
        );
    }

    #[test]
    fn live_entries_skip_stale_and_foreign_files() {
        let d = vramscope_testdata::temp_dir("live-reg");
        let me = std::process::id();
        let write = |name: String, body: String| std::fs::write(d.join(name), body).unwrap();
        write(
            format!("{me}.json"),
            format!(
                r#"{{"pid": {me}, "address": "127.0.0.1:1", "token": "t", "argv": ["a.py", "-x"]}}"#
            ),
        );
        write(
            "999999999.json".into(),
            r#"{"pid": 999999999, "address": "127.0.0.1:2", "token": "t"}"#.into(),
        );
        write("1.json".into(), "{ half written".into());
        write("notes.json".into(), format!(r#"{{"pid": {me}}}"#));
        let live = live_entries(&d);
        assert_eq!(live.len(), 1, "{live:?}");
        assert_eq!(live[0].1.pid, me);
        assert!(
            live[0].1.describe().contains("a.py -x  (127.0.0.1:1)"),
            "{}",
            live[0].1.describe()
        );
        // No token anywhere: the entry says what it lacks.
        let e = RegistryEntry {
            token: None,
            ..live[0].1.clone()
        }
        .source(&live[0].0, None)
        .unwrap_err();
        assert!(
            e.to_string().contains("expected a token, found none"),
            "{e}"
        );
    }
}
