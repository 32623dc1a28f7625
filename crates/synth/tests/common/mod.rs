//! Running `python3` from tests; checks are skipped when it is missing.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `script` with `args`; `None` when python3 is not installed. Panics
/// with Python's output when the script fails.
pub fn python(script: &str, args: &[&str]) -> Option<String> {
    let out = match Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
    {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("python3 not found: skipping the CPython check");
            return None;
        }
        Err(e) => panic!("cannot run python3: {e}"),
    };
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "python check failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(stdout)
}

/// A scratch file unique to this test process and `name`, removed on drop.
pub struct Scratch(pub PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        std::fs::remove_file(&self.0).ok();
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

pub fn scratch(name: &str) -> Scratch {
    let file = format!("vramscope-synth-{}-{name}", std::process::id());
    Scratch(std::env::temp_dir().join(file))
}

pub fn path_str(path: &Path) -> &str {
    path.to_str().expect("temp paths are UTF-8")
}
