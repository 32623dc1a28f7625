//! The tables' Parquet schemas, version [`SCHEMA_VERSION`] (documented in
//! `docs/parquet-schema.md`; a change of a column's meaning or type bumps
//! it). Unsigned 64-bit values (addresses, sizes, streams) are annotated
//! `INTEGER(64,false)`, so DuckDB reads them as UBIGINT and pyarrow as
//! uint64.

/// Written into every file's key-value metadata as `vramscope.schema`.
pub const SCHEMA_VERSION: u32 = 1;

pub const EVENTS: &str = "message events {
  REQUIRED INT32 file_id;
  REQUIRED INT32 device;
  OPTIONAL INT32 iteration;
  REQUIRED INT64 index;
  OPTIONAL INT64 time_us;
  REQUIRED BYTE_ARRAY action (STRING);
  REQUIRED INT64 address (INTEGER(64,false));
  REQUIRED INT64 size (INTEGER(64,false));
  REQUIRED INT64 stream (INTEGER(64,false));
  OPTIONAL INT32 stack;
  OPTIONAL BYTE_ARRAY category (STRING);
  REQUIRED INT64 delta;
}";

pub const BLOCKS: &str = "message blocks {
  REQUIRED INT32 file_id;
  REQUIRED INT32 device;
  REQUIRED INT64 segment_address (INTEGER(64,false));
  REQUIRED INT64 address (INTEGER(64,false));
  REQUIRED INT64 size (INTEGER(64,false));
  REQUIRED INT64 requested_size (INTEGER(64,false));
  REQUIRED BYTE_ARRAY state (STRING);
  OPTIONAL INT32 stack;
}";

pub const SEGMENTS: &str = "message segments {
  REQUIRED INT32 file_id;
  REQUIRED INT32 device;
  REQUIRED INT64 address (INTEGER(64,false));
  REQUIRED INT64 total_size (INTEGER(64,false));
  REQUIRED INT64 allocated_size (INTEGER(64,false));
  REQUIRED INT64 active_size (INTEGER(64,false));
  REQUIRED INT64 requested_size (INTEGER(64,false));
  REQUIRED INT64 stream (INTEGER(64,false));
  REQUIRED BYTE_ARRAY segment_type (STRING);
  REQUIRED BOOLEAN is_expandable;
}";

pub const STACKS: &str = "message stacks {
  REQUIRED INT32 file_id;
  REQUIRED INT32 stack;
  OPTIONAL BYTE_ARRAY site (STRING);
  REQUIRED group frames (LIST) {
    REPEATED group list {
      REQUIRED BYTE_ARRAY element (STRING);
    }
  }
}";

pub const FILES: &str = "message files {
  REQUIRED INT32 file_id;
  REQUIRED INT32 device;
  REQUIRED BYTE_ARRAY path (STRING);
  REQUIRED INT32 rank;
  OPTIONAL INT64 step;
  REQUIRED BOOLEAN exit;
  REQUIRED INT64 events;
  REQUIRED INT64 initial_allocated (INTEGER(64,false));
  REQUIRED INT64 peak_allocated (INTEGER(64,false));
  OPTIONAL BYTE_ARRAY allocator_settings (STRING);
}";
