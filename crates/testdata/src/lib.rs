//! The real PyTorch memory data the tests read, kept in the repository
//! (`tests/fixtures/real`, gzip-compressed, origin and licence in its
//! `SOURCES.md`) so that a fresh clone tests itself: a missing file is a
//! failure, never a skip.
//!
//! ```
//! let path = vramscope_testdata::real("magma27_cs336_windows.pickle");
//! assert!(path.ends_with("magma27_cs336_windows.pickle.gz"));
//! let counts = vramscope_testdata::reference_counts();
//! assert_eq!(counts.len(), vramscope_testdata::real_snapshots().len());
//! ```

mod hand;
mod rng;
pub use hand::{hand_trace, hand_trace_on_streams};
pub use rng::Rng;

use std::io::Read;
use std::path::{Path, PathBuf};

/// `tests/fixtures/real` of this repository.
pub fn real_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/real")
}

/// The stored file for `name`, given as PyTorch wrote it
/// (`magma27_cs336_windows.pickle`) or as stored (`….pickle.gz`).
/// Panics when it is not in the repository.
pub fn real(name: &str) -> PathBuf {
    let dir = real_dir();
    let p = [name.to_owned(), format!("{name}.gz")]
        .into_iter()
        .map(|n| dir.join(n))
        .find(|p| p.is_file());
    p.unwrap_or_else(|| panic!("fixture {name} is not in {}", dir.display()))
}

/// A snapshot this project's recorder wrote (`tests/fixtures/recorded`, see
/// its README), by name with or without `.gz`.
pub fn recorded(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/recorded");
    [name.to_owned(), format!("{name}.gz")]
        .into_iter()
        .map(|n| dir.join(n))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("fixture {name} is not in {}", dir.display()))
}

/// A recording from a real GPU with what PyTorch measured beside it
/// (`tests/fixtures/gpu`, see its README): the snapshot `name` (with or
/// without `.gz`), or its `*.json` of ground truth.
pub fn gpu(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gpu");
    [name.to_owned(), format!("{name}.gz")]
        .into_iter()
        .map(|n| dir.join(n))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("fixture {name} is not in {}", dir.display()))
}

/// The file's bytes as PyTorch wrote them (decompressed).
pub fn real_bytes(name: &str) -> Vec<u8> {
    decompressed(&real(name))
}

/// The bytes of a recorder's file ([`recorded`]), decompressed.
pub fn recorded_bytes(name: &str) -> Vec<u8> {
    decompressed(&recorded(name))
}

/// The bytes of a GPU recording ([`gpu`]), decompressed.
pub fn gpu_bytes(name: &str) -> Vec<u8> {
    decompressed(&gpu(name))
}

fn decompressed(p: &Path) -> Vec<u8> {
    let raw = std::fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    if !raw.starts_with(&[0x1f, 0x8b]) {
        return raw;
    }
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(&raw[..])
        .read_to_end(&mut out)
        .unwrap_or_else(|e| panic!("gunzip {}: {e}", p.display()));
    out
}

/// Every stored memory snapshot (`*.pickle.gz`), sorted by name. Panics
/// when there are none: the tests that iterate over them must not pass
/// vacuously.
pub fn real_snapshots() -> Vec<PathBuf> {
    let dir = real_dir();
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("list {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".pickle.gz"))
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no snapshots in {}", dir.display());
    v
}

/// The name PyTorch gave the file (`x.pickle` for the stored `x.pickle.gz`).
pub fn original_name(path: &Path) -> String {
    let n = path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    n.strip_suffix(".gz").map(str::to_owned).unwrap_or(n)
}

/// One row of SOURCES.md's reference table (device 0, computed with
/// CPython's `pickle` on the original file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReferenceCounts {
    /// The stored file name (`….pickle.gz`).
    pub file: String,
    pub segments: u64,
    pub reserved_end: u64,
    pub allocated_end: u64,
    pub trace_entries: u64,
    pub peak_allocated: u64,
}

/// The reference counts of every snapshot, from SOURCES.md.
pub fn reference_counts() -> Vec<ReferenceCounts> {
    let p = real_dir().join("SOURCES.md");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    let table = text
        .split("## Reference counts")
        .nth(1)
        .unwrap_or_else(|| panic!("{} has no reference counts table", p.display()));
    table
        .lines()
        .filter(|l| l.starts_with("| ") && l.contains(".pickle"))
        .map(|l| {
            let c: Vec<&str> = l
                .split('|')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            let n = |i: usize| -> u64 {
                c.get(i)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_else(|| panic!("column {i} of {l:?} is not a number"))
            };
            ReferenceCounts {
                file: c[0].to_owned(),
                segments: n(1),
                reserved_end: n(2),
                allocated_end: n(3),
                trace_entries: n(4),
                peak_allocated: n(5),
            }
        })
        .collect()
}

/// A fresh directory for one test under the system's temporary directory
/// (`vramscope-test-{name}-{pid}`), removed when dropped; kept when the test
/// fails (the drop runs while panicking), to look at what it wrote.
///
/// ```
/// let d = vramscope_testdata::temp_dir("doc");
/// std::fs::write(d.join("a.txt"), "x").unwrap();
/// let path = d.to_path_buf();
/// drop(d);
/// assert!(!path.exists());
/// ```
pub fn temp_dir(name: &str) -> TestDir {
    let d = std::env::temp_dir().join(format!("vramscope-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("cannot create {}: {e}", d.display()));
    TestDir(d)
}

/// See [`temp_dir`].
pub struct TestDir(PathBuf);

impl std::ops::Deref for TestDir {
    type Target = PathBuf;
    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

impl AsRef<Path> for TestDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
