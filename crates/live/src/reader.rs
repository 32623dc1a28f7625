//! Reading the states of a [`Source`], one after the other.
//!
//! A socket sends one JSON state per line after the token line; a state
//! file is polled and re-read when it changes (the publisher replaces it
//! by renaming a new one over it, so a read never sees half a state).
//! Every error is terminal: the caller stops reading and says why.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use crate::{pid_alive, LiveError, Source, State};

/// A state line longer than this is not a state (a state is a few tens
/// of kB): stop rather than buffer without end.
pub const MAX_LINE: u64 = 64 << 20;

/// Reads of a state file that fail to parse before giving up: a writer
/// that does not rename its file in may be caught mid-write once or twice.
const FILE_RETRIES: u32 = 3;

#[derive(Debug, Clone)]
pub struct ReaderOptions {
    /// How long to wait for the next state before giving up (the
    /// publisher sends one every 0.5 s by default).
    pub timeout: Duration,
    /// How often a state file is checked for a new state.
    pub poll: Duration,
    pub connect_timeout: Duration,
}

impl Default for ReaderOptions {
    fn default() -> Self {
        ReaderOptions {
            timeout: Duration::from_secs(15),
            poll: Duration::from_millis(500),
            connect_timeout: Duration::from_secs(3),
        }
    }
}

/// One state as received: `raw` is its JSON text exactly as sent (for
/// `--json`, so scripts also see keys this reader does not know).
#[derive(Debug, Clone)]
pub struct Sample {
    pub raw: String,
    pub state: State,
}

pub struct Reader {
    inner: Inner,
    origin: String,
    opts: ReaderOptions,
    received: u64,
    /// The publisher's pid: from the registry, else from its states.
    pid: Option<u32>,
}

enum Inner {
    Socket {
        stream: BufReader<TcpStream>,
        addr: SocketAddr,
    },
    File {
        path: PathBuf,
        last: Option<FileKey>,
        failures: u32,
        last_host: String,
        unchanged_since: Instant,
    },
}

/// What changes when a state file is replaced.
#[derive(PartialEq, Eq, Clone, Copy)]
struct FileKey {
    modified: Option<SystemTime>,
    len: u64,
    ino: u64,
}

impl Reader {
    /// Connect (and send the token) or check the file exists.
    pub fn open(source: &Source, opts: &ReaderOptions) -> Result<Reader, LiveError> {
        let origin = source.to_string();
        let (inner, pid) = match source {
            Source::Socket { addr, token, pid } => {
                let connect_err = |e| LiveError::Connect {
                    addr: origin.clone(),
                    cause: e,
                };
                let mut stream =
                    TcpStream::connect_timeout(addr, opts.connect_timeout).map_err(connect_err)?;
                stream
                    .set_read_timeout(Some(opts.timeout))
                    .map_err(connect_err)?;
                let line = format!("{}\n", serde_json::json!({ "token": token }));
                stream.write_all(line.as_bytes()).map_err(connect_err)?;
                let stream = BufReader::new(stream);
                (
                    Inner::Socket {
                        stream,
                        addr: *addr,
                    },
                    *pid,
                )
            }
            Source::File(path) => {
                std::fs::metadata(path).map_err(|e| LiveError::Io {
                    what: "reading state file",
                    origin: origin.clone(),
                    cause: e,
                })?;
                let inner = Inner::File {
                    path: path.clone(),
                    last: None,
                    failures: 0,
                    last_host: String::new(),
                    unchanged_since: Instant::now(),
                };
                (inner, None)
            }
        };
        Ok(Reader {
            inner,
            origin,
            opts: opts.clone(),
            received: 0,
            pid,
        })
    }

    /// Where the states come from, for messages.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Block until the next state.
    pub fn next_state(&mut self) -> Result<Sample, LiveError> {
        let sample = match &mut self.inner {
            Inner::Socket { .. } => self.next_from_socket()?,
            Inner::File { .. } => self.next_from_file()?,
        };
        self.received += 1;
        if sample.state.pid != 0 {
            self.pid.get_or_insert(sample.state.pid);
        }
        Ok(sample)
    }

    fn next_from_socket(&mut self) -> Result<Sample, LiveError> {
        loop {
            let Inner::Socket { stream, addr } = &mut self.inner else {
                unreachable!("called for sockets only")
            };
            let addr = *addr;
            let mut buf = Vec::new();
            let n = stream
                .by_ref()
                .take(MAX_LINE + 1)
                .read_until(b'\n', &mut buf);
            match n {
                Ok(_) if buf.len() as u64 > MAX_LINE => {
                    return Err(LiveError::BadState {
                        origin: self.origin.clone(),
                        message: format!("a line longer than {MAX_LINE} bytes"),
                    })
                }
                // End of stream, or a last line cut off by it.
                Ok(_) if buf.last() != Some(&b'\n') => return Err(self.closed(addr)),
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(LiveError::Timeout {
                        origin: self.origin.clone(),
                        secs: self.opts.timeout.as_secs_f64().ceil() as u64,
                    })
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
                    ) =>
                {
                    return Err(self.closed(addr))
                }
                Err(e) => {
                    return Err(LiveError::Io {
                        what: "reading from",
                        origin: self.origin.clone(),
                        cause: e,
                    })
                }
            }
            let text = String::from_utf8(buf).map_err(|e| LiveError::BadState {
                origin: self.origin.clone(),
                message: format!("bytes that are not UTF-8 ({e})"),
            })?;
            let raw = text.trim();
            if raw.is_empty() {
                continue; // a blank line keeps nothing from the protocol
            }
            let state = match State::parse(raw, &self.origin) {
                Ok(s) => s,
                Err(e) => return Err(self.answered(addr, raw).unwrap_or(e)),
            };
            return Ok(Sample {
                raw: raw.to_string(),
                state,
            });
        }
    }

    /// A line that is not a state but the publisher's `{"error": ...}`
    /// (it sends one, then closes, when the token is wrong).
    fn answered(&self, addr: SocketAddr, raw: &str) -> Option<LiveError> {
        let v: serde_json::Value = serde_json::from_str(raw).ok()?;
        let msg = v.get("error")?;
        let msg = msg
            .as_str()
            .map_or_else(|| msg.to_string(), |m| format!("{m:?}"));
        Some(if self.received == 0 {
            LiveError::Rejected {
                addr: addr.to_string(),
                reason: format!("it answered {msg}"),
            }
        } else {
            LiveError::Publisher {
                origin: self.origin.clone(),
                message: msg,
            }
        })
    }

    /// The socket was closed: say whether the process ended, had its
    /// recording stopped, or refused the token.
    fn closed(&self, addr: SocketAddr) -> LiveError {
        let alive = self.pid.map(settled_alive);
        match (self.received, self.pid, alive) {
            (_, Some(pid), Some(false)) => LiveError::Ended {
                pid,
                how: format!("{addr} closed the connection"),
            },
            (0, pid, _) => LiveError::Rejected {
                addr: addr.to_string(),
                reason: format!(
                    "it closed the connection before sending a state{}",
                    pid.map_or(" (or its recording stopped)".into(), |p| format!(
                        " (process {p} is running)"
                    ))
                ),
            },
            (_, pid, _) => LiveError::Closed {
                origin: self.origin.clone(),
                pid_note: pid.map_or(String::new(), |p| {
                    format!(" (process {p} is still running: its recording stopped)")
                }),
            },
        }
    }

    fn next_from_file(&mut self) -> Result<Sample, LiveError> {
        let Inner::File {
            path,
            last,
            failures,
            last_host,
            unchanged_since,
        } = &mut self.inner
        else {
            unreachable!("called for files only")
        };
        loop {
            let io = |e| LiveError::Io {
                what: "reading state file",
                origin: path.display().to_string(),
                cause: e,
            };
            let meta = match std::fs::metadata(&*path) {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && self.received > 0 => {
                    return Err(match self.pid {
                        Some(pid) if !settled_alive(pid) => LiveError::Ended {
                            pid,
                            how: format!("its state file {} was removed", path.display()),
                        },
                        _ => io(e),
                    });
                }
                Err(e) => return Err(io(e)),
            };
            let key = file_key(&meta);
            if Some(key) != *last {
                let text = std::fs::read_to_string(&*path).map_err(io)?;
                match State::parse(&text, &path.display().to_string()) {
                    Ok(state) => {
                        *last = Some(key);
                        *failures = 0;
                        *unchanged_since = Instant::now();
                        last_host.clone_from(&state.host);
                        return Ok(Sample {
                            raw: one_line(&text),
                            state,
                        });
                    }
                    Err(e) if *failures + 1 >= FILE_RETRIES => return Err(e),
                    Err(_) => *failures += 1,
                }
            } else if unchanged_since.elapsed() > self.opts.timeout {
                // A file outlives its process; only a process of this
                // machine can be checked.
                if let Some(pid) = self.pid {
                    if *last_host == hostname() && !pid_alive(pid) {
                        return Err(LiveError::Ended {
                            pid,
                            how: format!("its last state is in {}", path.display()),
                        });
                    }
                }
            }
            std::thread::sleep(self.opts.poll);
        }
    }
}

/// A pid that was just seen closing its socket may take a moment to exit
/// and be reaped; ask for up to half a second before calling it alive.
fn settled_alive(pid: u32) -> bool {
    for _ in 0..10 {
        if !pid_alive(pid) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

fn file_key(m: &std::fs::Metadata) -> FileKey {
    #[cfg(unix)]
    let ino = std::os::unix::fs::MetadataExt::ino(m);
    #[cfg(not(unix))]
    let ino = 0;
    FileKey {
        modified: m.modified().ok(),
        len: m.len(),
        ino,
    }
}

/// `--json` prints one state per line: a state file written with
/// indentation is made one line again (keys and values unchanged).
fn one_line(text: &str) -> String {
    let t = text.trim();
    if !t.contains('\n') {
        return t.to_string();
    }
    serde_json::from_str::<serde_json::Value>(t)
        .map_or_else(|_| t.replace('\n', " "), |v| v.to_string())
}

/// This machine's name, as the publisher writes `host`.
pub fn hostname() -> String {
    #[cfg(unix)]
    {
        let mut buf = [0u8; 256];
        // SAFETY: the buffer and its length are valid; the result is
        // NUL-terminated within it on success.
        let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
        if r == 0 {
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            return String::from_utf8_lossy(&buf[..end]).into_owned();
        }
    }
    std::env::var("HOSTNAME").unwrap_or_default()
}
