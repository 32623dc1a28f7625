//! Snapshots as tables for the engines teams already run: Parquet files
//! (zstd), hive-partitioned by rank, one file per snapshot and table, so
//! DuckDB, pandas/pyarrow, Spark and Ray read a whole job as one dataset.
//!
//! ```text
//! DIR/files/files.parquet                 one row per (file, device)
//! DIR/events/rank=K/file-00003.parquet    one row per trace entry
//! DIR/blocks/rank=K/file-00003.parquet    blocks at the dump
//! DIR/segments/rank=K/file-00003.parquet  segments at the dump
//! DIR/stacks/rank=K/file-00003.parquet    stack id → site and frames
//! ```
//!
//! Files are written one snapshot at a time, the events in row groups of
//! [`ROW_GROUP`] rows, so memory stays one snapshot's worth. The schema is
//! in [`schema`] and `docs/parquet-schema.md`.
//!
//! ```no_run
//! use vramscope_export::{export_parquet, ExportOptions};
//! let out = export_parquet(&["ranks/".into()], "export".as_ref(), &ExportOptions::default())?;
//! println!("{} files, {} events", out.files, out.events);
//! # Ok::<(), vramscope_export::ExportError>(())
//! ```

mod columns;
pub mod perfetto;
pub mod schema;
mod tables;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use serde::Serialize;
use vramscope_snapshot::{load, LoadOptions};

use crate::columns::{write_row_group, Col};

/// Rows per row group of the events table.
pub const ROW_GROUP: usize = 1 << 20;

/// Options of [`export_parquet`]. `Default`: ranks from the path names.
#[derive(Clone, Debug, Default)]
pub struct ExportOptions {
    /// A pattern whose first group is the rank (as `vramscope ranks`).
    pub rank_from: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Input(#[from] vramscope_ranks::RanksError),
    #[error("{path}: {message}")]
    Read { path: PathBuf, message: String },
    #[error("writing {path}: {message}")]
    Write { path: PathBuf, message: String },
}

/// What was written.
#[derive(Clone, Debug, Serialize)]
pub struct Exported {
    pub dir: PathBuf,
    pub files: usize,
    pub events: u64,
    pub schema_version: u32,
}

fn write_err(path: &Path) -> impl Fn(parquet::errors::ParquetError) -> ExportError + '_ {
    move |e| ExportError::Write {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// Write `groups` (row groups of columns) to `path` with `schema`.
fn write_table(path: &Path, schema: &str, groups: &[Vec<Col>]) -> Result<(), ExportError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| ExportError::Write {
            path: dir.to_path_buf(),
            message: e.to_string(),
        })?;
    }
    let f = std::fs::File::create(path).map_err(|e| ExportError::Write {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    write_to(std::io::BufWriter::new(f), path, schema, groups)
}

/// Write `groups` as one Parquet file into `out` (`path` names it in errors).
fn write_to<W: std::io::Write + Send>(
    out: W,
    path: &Path,
    schema: &str,
    groups: &[Vec<Col>],
) -> Result<(), ExportError> {
    let err = write_err(path);
    let schema = Arc::new(parse_message_type(schema).map_err(&err)?);
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).map_err(&err)?))
        .set_key_value_metadata(Some(vec![KeyValue::new(
            "vramscope.schema".to_owned(),
            schema::SCHEMA_VERSION.to_string(),
        )]))
        .build();
    let mut w = SerializedFileWriter::new(out, schema, Arc::new(props)).map_err(&err)?;
    for g in groups {
        if g.first().is_some_and(|c| c.is_empty()) && groups.len() > 1 {
            continue;
        }
        let mut rg = w.next_row_group().map_err(&err)?;
        write_row_group(&mut rg, g).map_err(&err)?;
        rg.close().map_err(&err)?;
    }
    w.close().map_err(&err)?;
    Ok(())
}

/// Export the snapshot files under `inputs` as one Perfetto trace at
/// `out`: a process per rank ([`perfetto`]).
pub fn export_perfetto(
    inputs: &[PathBuf],
    out: &Path,
    opts: &ExportOptions,
) -> Result<Exported, ExportError> {
    let files = vramscope_ranks::rank_files(inputs, opts.rank_from.as_deref())?;
    let werr = |e: std::io::Error| ExportError::Write {
        path: out.to_path_buf(),
        message: e.to_string(),
    };
    let f = std::fs::File::create(out).map_err(werr)?;
    let mut w = perfetto::PerfettoWriter::new(std::io::BufWriter::new(f));
    let mut processes: std::collections::BTreeMap<u32, u64> = std::collections::BTreeMap::new();
    let mut events = 0u64;
    for f in &files {
        let snap = load(&f.path, &LoadOptions::default()).map_err(|e| ExportError::Read {
            path: f.path.clone(),
            message: e.to_string(),
        })?;
        let process = match processes.get(&f.rank) {
            Some(&p) => p,
            None => {
                let p = w
                    .process(f.rank, &format!("rank {}", f.rank))
                    .map_err(werr)?;
                processes.insert(f.rank, p);
                p
            }
        };
        let name = f.path.file_name().map_or_else(
            || f.path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let name = match f.step {
            Some(s) => format!("step {s} {name}"),
            None => name,
        };
        w.snapshot(
            &perfetto::Source {
                snap: &snap,
                rank: f.rank,
                name,
            },
            process,
        )
        .map_err(werr)?;
        events += snap
            .devices()
            .iter()
            .filter_map(|&d| snap.trace(d))
            .map(|t| t.len() as u64)
            .sum::<u64>();
    }
    w.finish().map_err(werr)?;
    Ok(Exported {
        dir: out.to_path_buf(),
        files: files.len(),
        events,
        schema_version: schema::SCHEMA_VERSION,
    })
}

/// One row of the files table.
struct FileRow {
    id: i32,
    device: i32,
    path: String,
    rank: i32,
    step: Option<i64>,
    exit: bool,
    events: i64,
    initial: i64,
    peak: i64,
    settings: Option<String>,
}

/// Export the snapshot files under `inputs` to `dir`.
pub fn export_parquet(
    inputs: &[PathBuf],
    dir: &Path,
    opts: &ExportOptions,
) -> Result<Exported, ExportError> {
    let files = vramscope_ranks::rank_files(inputs, opts.rank_from.as_deref())?;
    let mut rows: Vec<FileRow> = Vec::new();
    let mut events = 0u64;
    for (id, f) in files.iter().enumerate() {
        let id = id as i32;
        let snap = load(&f.path, &LoadOptions::default()).map_err(|e| ExportError::Read {
            path: f.path.clone(),
            message: e.to_string(),
        })?;
        let part = |table: &str| {
            dir.join(table)
                .join(format!("rank={}", f.rank))
                .join(format!("file-{id:05}.parquet"))
        };
        let mut groups = Vec::new();
        let settings = snap
            .allocator_settings
            .as_ref()
            .and_then(|m| serde_json::to_string(m).ok());
        let devices = snap.devices();
        for &d in if devices.is_empty() {
            &[0][..]
        } else {
            &devices[..]
        } {
            let (g, initial, peak) = tables::events(&snap, id, d, ROW_GROUP);
            let n = snap.trace(d).map_or(0, |t| t.len());
            events += n as u64;
            groups.extend(g);
            rows.push(FileRow {
                id,
                device: d as i32,
                path: f.path.display().to_string(),
                rank: f.rank as i32,
                step: f.step.map(|s| s as i64),
                exit: f.exit,
                events: n as i64,
                initial: initial as i64,
                peak: peak as i64,
                settings: settings.clone(),
            });
        }
        if groups.is_empty() {
            groups.push(empty_events());
        }
        write_table(&part("events"), schema::EVENTS, &groups)?;
        write_table(
            &part("blocks"),
            schema::BLOCKS,
            &[tables::blocks(&snap, id)],
        )?;
        write_table(
            &part("segments"),
            schema::SEGMENTS,
            &[tables::segments(&snap, id)],
        )?;
        write_table(
            &part("stacks"),
            schema::STACKS,
            &[tables::stacks(&snap, id)],
        )?;
    }
    let cols = vec![
        Col::I32(rows.iter().map(|r| r.id).collect()),
        Col::I32(rows.iter().map(|r| r.device).collect()),
        Col::Str(rows.iter().map(|r| r.path.clone()).collect()),
        Col::I32(rows.iter().map(|r| r.rank).collect()),
        Col::OptI64(rows.iter().map(|r| r.step).collect()),
        Col::Bool(rows.iter().map(|r| r.exit).collect()),
        Col::I64(rows.iter().map(|r| r.events).collect()),
        Col::I64(rows.iter().map(|r| r.initial).collect()),
        Col::I64(rows.iter().map(|r| r.peak).collect()),
        Col::OptStr(rows.iter().map(|r| r.settings.clone()).collect()),
    ];
    write_table(
        &dir.join("files").join("files.parquet"),
        schema::FILES,
        &[cols],
    )?;
    Ok(Exported {
        dir: dir.to_path_buf(),
        files: files.len(),
        events,
        schema_version: schema::SCHEMA_VERSION,
    })
}

/// The tables of one snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    Events,
    Blocks,
    Segments,
    Stacks,
}

impl Table {
    pub fn parse(s: &str) -> Option<Table> {
        Some(match s {
            "events" => Table::Events,
            "blocks" => Table::Blocks,
            "segments" => Table::Segments,
            "stacks" => Table::Stacks,
            _ => return None,
        })
    }
}

/// One table of one loaded snapshot as Parquet bytes in memory (every
/// device's events; `file_id` 0), for readers such as pyarrow.
pub fn table_bytes(
    snap: &vramscope_snapshot::Snapshot,
    table: Table,
) -> Result<Vec<u8>, ExportError> {
    let (schema, groups) = match table {
        Table::Events => {
            let mut groups = Vec::new();
            for d in snap.devices() {
                groups.extend(tables::events(snap, 0, d, ROW_GROUP).0);
            }
            if groups.is_empty() {
                groups.push(empty_events());
            }
            (schema::EVENTS, groups)
        }
        Table::Blocks => (schema::BLOCKS, vec![tables::blocks(snap, 0)]),
        Table::Segments => (schema::SEGMENTS, vec![tables::segments(snap, 0)]),
        Table::Stacks => (schema::STACKS, vec![tables::stacks(snap, 0)]),
    };
    let mut out = Vec::new();
    write_to(&mut out, Path::new("<memory>"), schema, &groups)?;
    Ok(out)
}

fn empty_events() -> Vec<Col> {
    vec![
        Col::I32(vec![]),
        Col::I32(vec![]),
        Col::OptI32(vec![]),
        Col::I64(vec![]),
        Col::OptI64(vec![]),
        Col::Str(vec![]),
        Col::I64(vec![]),
        Col::I64(vec![]),
        Col::I64(vec![]),
        Col::OptI32(vec![]),
        Col::OptStr(vec![]),
        Col::I64(vec![]),
    ]
}
