//! Running `python3` from tests; checks are skipped when it is missing.

use std::path::Path;
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

/// A scratch file path unique to this test process and `name`.
pub fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("vramscope-synth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir.join(name)
}

pub fn path_str(path: &Path) -> &str {
    path.to_str().expect("temp paths are UTF-8")
}
