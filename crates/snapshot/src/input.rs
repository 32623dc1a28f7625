//! From a path or bytes to a decoded [`Snapshot`]: memory mapping,
//! decompression (gzip and zstd, detected by magic bytes), `torch.save` zip
//! archives, and the choice between pickle, JSON and the profiler's outputs.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::decode::Decoder;
use crate::error::SnapshotError;
use crate::model::{Compression, Encoding, Snapshot, SourceFormat, SourceInfo};
use crate::options::{LoadOptions, LoadProgress};
use crate::{json, profiler, zip};

/// Read a snapshot file (any supported layout, encoding and compression).
pub fn load(path: &Path, opts: &LoadOptions) -> Result<Snapshot, SnapshotError> {
    let io = |source| SnapshotError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    if len == 0 {
        return Err(SnapshotError::NotASnapshot(format!(
            "{} is empty",
            path.display()
        )));
    }
    // SAFETY: the map is read-only and private; a file truncated underneath
    // us would fault, which is the documented limitation of mapping files.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
    #[cfg(unix)]
    let _ = map.advise(memmap2::Advice::Sequential);
    decode_mapped(&map, opts)
}

/// Decode a snapshot held in memory.
pub fn decode_bytes(bytes: &[u8], opts: &LoadOptions) -> Result<Snapshot, SnapshotError> {
    decode_inner(bytes, opts, None)
}

fn decode_mapped(map: &memmap2::Mmap, opts: &LoadOptions) -> Result<Snapshot, SnapshotError> {
    decode_inner(map, opts, Some(map))
}

fn decode_inner(
    bytes: &[u8],
    opts: &LoadOptions,
    map: Option<&memmap2::Mmap>,
) -> Result<Snapshot, SnapshotError> {
    let file_bytes = bytes.len() as u64;
    let limit = opts
        .max_decompressed_bytes
        .unwrap_or_else(|| (1u64 << 30).max(file_bytes.saturating_mul(2000)));
    let (compression, owned) = decompress(bytes, limit)?;
    // Pages of the map are only needed once; dropping them as the parser
    // moves on keeps resident memory near the size of the decoded model.
    let map = if owned.is_some() { None } else { map };
    let data: &[u8] = owned.as_deref().unwrap_or(bytes);
    if let Some(p) = profiler::decode(data, opts, map)? {
        return Ok(p.into_snapshot(file_bytes, data.len() as u64, compression));
    }
    let (doc, encoding) = parse_document(data, opts, map)?;
    let decoded_bytes = data.len() as u64;
    drop(owned);
    if let Some(p) = &opts.progress {
        p(LoadProgress {
            stage: "decoding",
            done: 0,
            total: 1,
        });
    }
    let threads = opts.threads.unwrap_or_else(crate::decode::default_threads);
    let mut d = Decoder::new(&doc, threads).decode()?;
    let mut warnings = std::mem::take(&mut d.warnings);
    if let Some(t) = &doc.truncated {
        warnings.insert(
            0,
            format!(
                "the file is truncated (ends at byte {}: {}); showing what was recovered",
                t.offset, t.reason
            ),
        );
    }
    let skipped: Vec<String> = doc
        .skipped
        .iter()
        .map(|s| format!("{} at byte {} (not executed)", s.what, s.offset))
        .collect();
    warnings.extend(d.repairs.iter().map(|r| r.message()));
    if doc.skipped_count > 0 {
        warnings.push(format!(
            "{} construct(s) that would execute code when loaded with pickle.load were skipped",
            doc.skipped_count
        ));
    }
    if let Some(line) = d.recorder.as_ref().and_then(recorder_note) {
        warnings.push(line);
    }
    warnings.extend(d.traces.iter().filter_map(crate::consistency::warning));
    let source = SourceInfo {
        file_bytes,
        decoded_bytes,
        encoding,
        format: SourceFormat::Snapshot,
        compression,
        layout: d.layout,
        legacy_blocks: d.legacy_blocks,
        skipped,
        skipped_count: doc.skipped_count,
        warnings,
        repairs: std::mem::take(&mut d.repairs),
        truncated: doc.truncated.is_some(),
        recorder: d.recorder.take(),
    };
    drop_aside(doc);
    let mut snap = d.into_snapshot(source);
    crate::uncached::expand(&mut snap);
    crate::generated::expand(&mut snap);
    Ok(snap)
}

/// Documents from this size on are freed on another thread.
const DROP_ASIDE_BYTES: usize = 64 << 20;

/// Free a large decoded document on another thread: returning a few hundred
/// MB of arenas to the kernel takes tens of milliseconds that the caller,
/// who has the model now, need not wait for.
fn drop_aside(doc: vramscope_pickle::Document) {
    if doc.heap_bytes() >= DROP_ASIDE_BYTES {
        // A failed spawn drops the closure, and the document with it, here.
        let _ = std::thread::Builder::new()
            .name("vramscope-free".into())
            .spawn(move || drop(doc));
    }
}

/// What a reader must know about how the file was recorded, if anything.
fn recorder_note(r: &crate::RecorderInfo) -> Option<String> {
    if let Some(first) = r.profiler_failures.first() {
        return Some(format!(
            "PyTorch's memory profiler failed to analyse {} of the recording's windows ({first}): their \
             allocations are not in this file (backend='allocator' records them on Linux's CPU)",
            r.profiler_failures.len()
        ));
    }
    if r.kind() != crate::RecorderKind::Dispatch {
        return None;
    }
    let mut line = format!(
        "recorded at PyTorch's dispatcher ({} tensors): every tensor storage with its stack; memory that kernels \
         allocate without a tensor (oneDNN and cuDNN workspaces, MPS scratch) is not in this file, nor tensors \
         made on other Python threads",
        r.device_type.as_deref().unwrap_or("cpu")
    );
    if let Some(n) = r.compilations.filter(|&n| n > 0) {
        // Inductor's generated code allocates its buffers in C++, past the
        // dispatcher (the eager and aot_eager backends run ATen operators,
        // which it sees).
        line.push_str(&format!(
            "; torch.compile ran {n} compilation(s) during the recording, and the buffers that Inductor's compiled \
             code allocates never reach the dispatcher: they are missing too (on Linux's CPU, backend='allocator' \
             records them)"
        ));
    }
    Some(line)
}

fn decompress(bytes: &[u8], limit: u64) -> Result<(Compression, Option<Vec<u8>>), SnapshotError> {
    let too_big = |fmt: &str| SnapshotError::Limit {
        what: format!("{fmt} data decompresses to more than the limit"),
        limit,
    };
    if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        let dec = flate2::read::MultiGzDecoder::new(bytes);
        dec.take(limit + 1)
            .read_to_end(&mut out)
            .map_err(|e| SnapshotError::Decompress {
                format: "gzip",
                message: e.to_string(),
            })?;
        if out.len() as u64 > limit {
            return Err(too_big("gzip"));
        }
        return Ok((Compression::Gzip, Some(out)));
    }
    if bytes.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        let mut out = Vec::new();
        let dec = ruzstd::decoding::StreamingDecoder::new(bytes).map_err(|e| {
            SnapshotError::Decompress {
                format: "zstd",
                message: e.to_string(),
            }
        })?;
        dec.take(limit + 1)
            .read_to_end(&mut out)
            .map_err(|e| SnapshotError::Decompress {
                format: "zstd",
                message: e.to_string(),
            })?;
        if out.len() as u64 > limit {
            return Err(too_big("zstd"));
        }
        return Ok((Compression::Zstd, Some(out)));
    }
    Ok((Compression::None, None))
}

fn parse_document(
    data: &[u8],
    opts: &LoadOptions,
    map: Option<&memmap2::Mmap>,
) -> Result<(vramscope_pickle::Document, Encoding), SnapshotError> {
    if data.starts_with(b"PK\x03\x04") {
        let inner = zip::find_data_pkl(data)?;
        let doc = parse_pickle(inner, opts, None)?;
        let protocol = doc.protocol;
        return Ok((doc, Encoding::TorchSave { protocol }));
    }
    let first = data.iter().find(|b| !b.is_ascii_whitespace()).copied();
    if matches!(first, Some(b'{') | Some(b'[')) && !data.starts_with(b"(") {
        // '[' is not a pickle opcode a snapshot starts with; '{' neither.
        return Ok((json::parse_json(data)?, Encoding::Json));
    }
    if let Some(start) = looks_like_text(data) {
        return Err(SnapshotError::NotASnapshot(format!(
            "the file is text, not a pickled snapshot or a JSON trace (it starts with \"{start}\")"
        )));
    }
    let doc = parse_pickle(data, opts, map)?;
    let protocol = doc.protocol;
    Ok((doc, Encoding::Pickle { protocol }))
}

/// The first words of `data` when it reads as prose or code rather than a
/// pickle: printable text whose first line has a space. Pickles of protocol
/// 2 and later start with a binary PROTO opcode; protocol 0 and 1 start with
/// an opcode letter and a name, without spaces.
fn looks_like_text(data: &[u8]) -> Option<String> {
    let head = &data[..data.len().min(64)];
    if head.is_empty() || head[0] == 0x80 || head[0] == b'(' {
        return None;
    }
    let text = std::str::from_utf8(head).ok()?;
    let printable = text
        .chars()
        .all(|c| !c.is_control() || c == '\n' || c == '\r' || c == '\t');
    let first_line = text.lines().next().unwrap_or("");
    (printable && first_line.contains(' ')).then(|| first_line.chars().take(40).collect())
}

fn parse_pickle(
    data: &[u8],
    opts: &LoadOptions,
    map: Option<&memmap2::Mmap>,
) -> Result<vramscope_pickle::Document, SnapshotError> {
    let total = data.len() as u64;
    let mut dropped_to = 0usize;
    let mut on_progress = |pos: u64| {
        if let Some(p) = &opts.progress {
            p(LoadProgress {
                stage: "parsing",
                done: pos,
                total,
            });
        }
        #[cfg(unix)]
        if let Some(m) = map {
            let upto = (pos as usize).saturating_sub(1 << 20) & !0xffff;
            if upto > dropped_to {
                // SAFETY: the map is private and read-only and the parser
                // copies everything it keeps; pages behind the cursor are
                // never read again, and would simply be re-read from the
                // file if they were.
                let _ = unsafe {
                    m.unchecked_advise_range(
                        memmap2::UncheckedAdvice::DontNeed,
                        dropped_to,
                        upto - dropped_to,
                    )
                };
                dropped_to = upto;
            }
        }
    };
    let mut popts = vramscope_pickle::ParseOptions {
        recover_truncated: opts.recover_truncated,
        progress: Some(&mut on_progress),
        ..Default::default()
    };
    Ok(vramscope_pickle::parse_with(data, &mut popts)?)
}

#[cfg(test)]
mod tests {
    use super::recorder_note;
    use crate::RecorderInfo;

    fn info(v: serde_json::Value) -> RecorderInfo {
        RecorderInfo::from_json(&v).expect("a recorder name")
    }

    #[test]
    fn dispatch_recordings_say_what_compiled_code_hides() {
        let plain = info(serde_json::json!({"recorder": "dispatch", "device_type": "cpu"}));
        let note = recorder_note(&plain).expect("the dispatcher's note");
        assert!(
            note.contains("(cpu tensors)") && !note.contains("torch.compile"),
            "{note}"
        );
        let compiled = info(serde_json::json!({"recorder": "dispatch", "compilations": 3}));
        assert_eq!(compiled.compilations, Some(3));
        let note = recorder_note(&compiled).expect("the dispatcher's note");
        assert!(
            note.contains("ran 3 compilation(s)") && note.contains("Inductor"),
            "{note}"
        );
        // The allocator hooks see compiled code's buffers: nothing to say.
        let hooked = info(serde_json::json!({"recorder": "cpu-allocator", "compilations": 3}));
        assert_eq!(recorder_note(&hooked), None);
    }

    #[test]
    fn failed_profiler_windows_are_named() {
        let r = info(serde_json::json!({
            "recorder": "cpu-profiler",
            "profiler_failures": ["AssertionError: version mismatch", "AssertionError: again"],
        }));
        let note = recorder_note(&r).expect("a note");
        assert!(
            note.contains("2 of the recording's windows") && note.contains("version mismatch"),
            "{note}"
        );
        assert_eq!(
            recorder_note(&info(serde_json::json!({"recorder": "cpu-profiler"}))),
            None
        );
    }
}
