"""Converting thousands of rank files on a cluster with Ray Data.

The recipe `vramscope export --format parquet` follows, spread over a Ray
cluster: ``ray.data`` holds the list of files, a ``map_batches`` step loads
each snapshot with vramscope (in Rust, on the worker that got it) and turns
it into Arrow tables, and ``write_parquet`` writes them partitioned by rank.
The result has the export's schema (docs/parquet-schema.md) and, row for
row, its content::

    import ray, vramscope.scale
    ray.init()                                   # or ray.init(address="auto") on a cluster
    vramscope.scale.export_with_ray("s3://bucket/job/memory_snapshot", "s3://bucket/job/export")

Local paths work the same; remote ones need the filesystem Ray and pyarrow
already use for them (the snapshot files are read by the worker through
``pyarrow.fs`` into memory when they are not local). Then query the
directory with DuckDB (:func:`vramscope.query`), Spark or pandas.
"""

from __future__ import annotations

import json
import os
from typing import Optional, Sequence, Union

import pyarrow as pa

from . import _native
from . import load as _load

PathLike = Union[str, os.PathLike]


def _rows_of(table: str):
    """A reader of one file's ``table`` (``events`` or ``stacks``), its rows
    marked with the file's id and rank."""

    def read(row: dict) -> pa.Table:
        t = _load(row["path"]).to_arrow(table)
        n = t.num_rows
        t = t.set_column(t.schema.get_field_index("file_id"), "file_id", pa.array([row["file_id"]] * n, pa.int32()))
        return t.append_column("rank", pa.array([row["rank"]] * n, pa.int32()))

    return read


def _files(row: dict) -> pa.Table:
    snap = _load(row["path"])
    s = snap.summary(top=0)
    settings = s.get("allocator_settings")
    rows = []
    for d in s["devices"]:
        rows.append({
            "file_id": row["file_id"], "device": d["device"], "path": row["path"], "rank": row["rank"],
            "step": row["step"], "exit": row["exit"], "events": snap.event_count(d["device"]),
            "initial_allocated": d["peak"]["before_window_bytes"], "peak_allocated": d["peak"]["allocated_bytes"],
            "allocator_settings": None if settings is None else json.dumps(settings, separators=(",", ":")),
        })
    return pa.Table.from_pylist(rows, schema=FILES_SCHEMA)


FILES_SCHEMA = pa.schema([
    ("file_id", pa.int32()), ("device", pa.int32()), ("path", pa.string()), ("rank", pa.int32()),
    ("step", pa.int64()), ("exit", pa.bool_()), ("events", pa.int64()),
    ("initial_allocated", pa.uint64()), ("peak_allocated", pa.uint64()), ("allocator_settings", pa.string()),
])


def _per_file(fn):
    def run(batch: pa.Table) -> pa.Table:
        return pa.concat_tables([fn(r) for r in batch.to_pylist()])
    return run


def export_with_ray(
    inputs: Union[PathLike, Sequence[PathLike]],
    out_dir: PathLike,
    *,
    rank_from: Optional[str] = None,
    tables: Sequence[str] = ("events", "stacks", "files"),
) -> dict:
    """Export the snapshot files under `inputs` to `out_dir` with Ray Data
    (``ray.init()`` first, or Ray starts a local instance): one task per
    file, ``write_parquet`` partitioned by rank. Returns the number of files
    and rows written per table."""
    import ray.data

    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    files = _native.rank_files([os.fspath(p) for p in inputs], rank_from)
    items = [{"file_id": i, "path": p, "rank": r, "step": s, "exit": e} for i, (p, r, s, e) in enumerate(files)]
    out = os.fspath(out_dir)
    rows = {}
    for table in tables:
        ds = ray.data.from_items(items, override_num_blocks=max(1, len(items)))
        fn = _files if table == "files" else _rows_of(table)
        ds = ds.map_batches(_per_file(fn), batch_size=1, batch_format="pyarrow")
        if table == "files":
            # Small: one file, not partitioned, as the CLI writes it.
            import pyarrow.parquet as pq

            t = pa.concat_tables([FILES_SCHEMA.empty_table(), *ds.iter_batches(batch_format="pyarrow")])
            os.makedirs(os.path.join(out, "files"), exist_ok=True)
            pq.write_table(t, os.path.join(out, "files", "files.parquet"), compression="zstd")
            rows[table] = t.num_rows
        else:
            import pyarrow.dataset as pads

            ds.write_parquet(os.path.join(out, table), partition_cols=["rank"], compression="zstd")
            rows[table] = pads.dataset(os.path.join(out, table), format="parquet", partitioning="hive").count_rows()
    return {"files": len(items), "rows": rows}
