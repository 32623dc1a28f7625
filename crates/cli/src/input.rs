//! Reading the snapshot a command is given: progress bar, one error
//! context, and the device checks every command shares.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use anyhow::anyhow;
use vramscope_snapshot::Snapshot;

use crate::output::say;
use crate::{progress, CliError};

/// Files read by earlier commands of this process, by path, with the
/// modification time and length they had: `Some` once [`keep_loaded`] is
/// on (a server answers many questions about one file).
type Kept = HashMap<PathBuf, (Option<SystemTime>, u64, Arc<Snapshot>)>;
static KEPT: Mutex<Option<Kept>> = Mutex::new(None);

/// Keep each file read, for the next command about it, until it changes on
/// disk (`true`), or read every file afresh and forget the kept ones.
pub fn keep_loaded(on: bool) {
    if let Ok(mut k) = KEPT.lock() {
        *k = on.then(HashMap::new);
    }
}

/// Load `file` with a progress bar for large files; invalid input is exit 2.
/// A file kept by [`keep_loaded`] and unchanged since is not read again.
pub(crate) fn load(file: &Path, quiet: bool) -> Result<Arc<Snapshot>, CliError> {
    // Read once: the stamp of a kept file and the checks before reading.
    let meta = std::fs::metadata(file);
    let stamp = meta.as_ref().ok().map(|m| (m.modified().ok(), m.len()));
    let key = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    let kept = KEPT.lock().ok().and_then(|kept| {
        let (t, l, snap) = kept.as_ref()?.get(&key)?;
        (Some((*t, *l)) == stamp).then(|| Arc::clone(snap))
    });
    let snap = match kept {
        Some(snap) => snap,
        None => {
            let snap = Arc::new(read(file, meta, quiet)?);
            if let (Ok(mut kept), Some((time, len))) = (KEPT.lock(), stamp) {
                if let Some(k) = kept.as_mut() {
                    k.insert(key, (time, len, Arc::clone(&snap)));
                }
            }
            snap
        }
    };
    // Every command says so, not only `summary`: what it prints covers
    // only what was recovered.
    if let Some(note) = vramscope_analysis::summary::damage(&snap) {
        say(&format!("vramscope: warning: {}: {note}", file.display()));
    }
    if !quiet {
        if let Some(note) = vramscope_analysis::summary::history(&snap) {
            say(&format!("vramscope: note: {}: {note}", file.display()));
        }
        if let Some(note) = vramscope_analysis::summary::unrecorded_children(&snap) {
            say(&format!("vramscope: note: {}: {note}", file.display()));
        }
    }
    Ok(snap)
}

fn read(
    file: &Path,
    meta: std::io::Result<std::fs::Metadata>,
    quiet: bool,
) -> Result<Snapshot, CliError> {
    if meta.as_ref().is_ok_and(|m| m.is_dir()) {
        return Err(CliError::Io(anyhow!(
            "{} is a directory; give a snapshot file in it (vramscope ranks reads a directory of rank files)",
            file.display()
        )));
    }
    if meta.as_ref().is_ok_and(|m| m.is_file() && m.len() == 0) {
        return Err(CliError::Invalid(anyhow!(
            "{} is empty (0 bytes): not a snapshot",
            file.display()
        )));
    }
    let len = meta.map(|m| m.len()).unwrap_or(0);
    let (mut opts, bar) = progress::load_options(len, quiet);
    if std::env::var_os("VRAMSCOPE_TIMING").is_some() {
        progress::time_stages(&mut opts);
    }
    let snap = vramscope_snapshot::load(file, &opts);
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if let Ok(s) = &snap {
        // A file cut before its first whole segment or event holds nothing
        // to show: saying "no device" with exit 0 would pass for an answer.
        if s.source.truncated && s.devices().is_empty() && s.annotations.is_empty() {
            return Err(CliError::Invalid(anyhow!(
                "{} is cut short before anything usable: {}",
                file.display(),
                s.source.warnings.join("; ")
            )));
        }
    }
    snap.map_err(|e| match CliError::from(e) {
        CliError::Io(e) => CliError::Io(e),
        CliError::Invalid(e) => {
            CliError::Invalid(e.context(format!("{} is not a readable snapshot", file.display())))
        }
    })
}

/// The requested device, or the first one present (the library's rule,
/// with the file named).
pub(crate) fn pick_device(
    snap: &Snapshot,
    file: &Path,
    device: Option<u32>,
) -> Result<u32, CliError> {
    let picked = snap
        .pick_device(device)
        .map_err(|e| CliError::Invalid(anyhow!("{}: {e}", file.display())))?;
    let present = snap.devices();
    if device.is_none() && present.len() > 1 {
        let others: Vec<String> = present
            .iter()
            .filter(|&&d| d != picked)
            .map(|d| d.to_string())
            .collect();
        let why = if snap.has_activity(picked) {
            "the first with allocations"
        } else {
            "none has allocations"
        };
        say(&format!(
            "vramscope: {}: device {picked} ({why}; the file also has device {}: --device picks one)",
            file.display(),
            others.join(", ")
        ));
    }
    Ok(picked)
}

/// `--device` of a one-device command checked against the file, or the
/// device the library's rule picks (said on stderr where the file has
/// several).
pub(crate) fn chosen_device(
    snap: &Snapshot,
    file: &Path,
    device: Option<u32>,
) -> Result<Option<u32>, CliError> {
    pick_device(snap, file, device).map(Some)
}

/// The file's name for titles.
pub(crate) fn display_name(file: &Path) -> String {
    file.file_name().map_or_else(
        || file.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Check an explicitly requested device (`None` means all devices).
pub(crate) fn check_device(
    snap: &Snapshot,
    file: &Path,
    device: Option<u32>,
) -> Result<(), CliError> {
    match device {
        Some(_) => pick_device(snap, file, device).map(|_| ()),
        None => Ok(()),
    }
}
