//! PyTorch profiler outputs read as snapshots.
//!
//! Two kinds of file carry memory without being a memory snapshot:
//!
//! * a profiler trace (Kineto's Chrome trace, `{"traceEvents": [...]}`,
//!   written by `torch.profiler.profile(profile_memory=True)`), whose
//!   `[memory]` instant events record every allocation and free with the
//!   allocator's totals (`parse`, `visit`, `stacks`, `kineto`, `curves`);
//! * the Memory Profiler's timeline (`export_memory_timeline`), as raw rows
//!   `[t_ns, action, bytes, category]` or as the plot's `[times, sizes]`
//!   (`timeline`).
//!
//! Both become the same [`Snapshot`] model a memory snapshot decodes to, so
//! every command reads them. The format is recognised from the content
//! (after decompression), never from the file name: a top-level dict with a
//! `traceEvents` key is a trace; a top-level list whose first element is a
//! list is a timeline. Anything else goes on to the snapshot decoder, which
//! costs a snapshot nothing: the trace parser stops at the first snapshot
//! key (`segments`, `device_traces`), which is where PyTorch starts its dict.

mod curves;
mod emit;
mod kineto;
mod parse;
mod stacks;
mod timeline;
mod timeline_json;
mod values;
mod visit;

use crate::decode::Decoded;
use crate::error::SnapshotError;
use crate::model::{Compression, Encoding, Snapshot, SourceFormat, SourceInfo};
use crate::options::LoadOptions;

/// A profiler file decoded into the snapshot model.
pub(crate) struct Profiled {
    pub decoded: Decoded,
    pub format: SourceFormat,
    /// Where and why the file ended early, when it did.
    pub truncated: Option<String>,
}

/// Decode `data` if it is a profiler trace or a memory timeline; `None`
/// when it is neither (a snapshot, or something the snapshot decoder will
/// reject with its own message).
pub(crate) fn decode(
    data: &[u8],
    opts: &LoadOptions,
    map: Option<&memmap2::Mmap>,
) -> Result<Option<Profiled>, SnapshotError> {
    let mut it = data.iter().copied().filter(|b| !b.is_ascii_whitespace());
    match (it.next(), it.next()) {
        (Some(b'{'), _) => match parse::parse_trace(data, opts, map)? {
            Some(parsed) => {
                let truncated = parsed.truncated.clone();
                let decoded = kineto::to_snapshot(parsed)?;
                Ok(Some(Profiled {
                    decoded,
                    format: SourceFormat::KinetoTrace,
                    truncated,
                }))
            }
            None => Ok(None),
        },
        // A segment list starts `[{`; a timeline starts `[[`.
        (Some(b'['), Some(b'[')) => {
            let (decoded, format) = timeline::decode(data)?;
            Ok(Some(Profiled {
                decoded,
                format,
                truncated: None,
            }))
        }
        _ => Ok(None),
    }
}

impl Profiled {
    /// The snapshot, with where it came from.
    pub(crate) fn into_snapshot(
        self,
        file_bytes: u64,
        decoded_bytes: u64,
        compression: Compression,
    ) -> Snapshot {
        let mut d = self.decoded;
        let mut warnings = std::mem::take(&mut d.warnings);
        if let Some(t) = &self.truncated {
            warnings.insert(
                0,
                format!("the file is truncated ({t}); showing what was recovered"),
            );
        }
        warnings.extend(d.repairs.iter().map(|r| r.message()));
        let source = SourceInfo {
            file_bytes,
            decoded_bytes,
            encoding: Encoding::Json,
            format: self.format,
            compression,
            layout: d.layout,
            legacy_blocks: false,
            skipped: Vec::new(),
            skipped_count: 0,
            warnings,
            repairs: std::mem::take(&mut d.repairs),
            truncated: self.truncated.is_some(),
            recorder: None,
        };
        d.into_snapshot(source)
    }
}
