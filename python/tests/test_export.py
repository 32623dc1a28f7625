"""`vramscope export --format parquet`: a job's rank files as Parquet
tables, read back with DuckDB, pyarrow and pandas, against the summary."""

from __future__ import annotations

from pathlib import Path

import pytest

import vramscope

duckdb = pytest.importorskip("duckdb")
pa_ds = pytest.importorskip("pyarrow.dataset")
pd = pytest.importorskip("pandas")


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> tuple[Path, Path]:
    """Four ranks in torchtitan's older layout (rank 2 keeps an extra tensor
    each iteration), exported."""
    root = tmp_path_factory.mktemp("job")
    for rank in range(4):
        f = root / "iteration_6" / f"rank{rank}_memory_snapshot.pickle"
        f.parent.mkdir(parents=True, exist_ok=True)
        args = ["synth", "-o", str(f), "--entries", "15000", "--seed", "4", "--iterations", "6"]
        if rank == 2:
            args += ["--leak", "128MiB"]
        assert vramscope.cli(args) == 0
    out = tmp_path_factory.mktemp("export")
    assert vramscope.cli(["export", str(root), "-o", str(out), "-q"]) == 0
    return root, out


def test_duckdb_replays_each_files_peak_with_a_window_sum(job):
    root, out = job
    con = duckdb.connect()
    rows = con.sql(f"""
        WITH e AS (SELECT * FROM read_parquet('{out}/events/*/*.parquet', hive_partitioning = true)),
             f AS (SELECT * FROM read_parquet('{out}/files/files.parquet')),
             run AS (SELECT e.file_id, e.rank,
                            f.initial_allocated + SUM(e.delta) OVER (PARTITION BY e.file_id ORDER BY e.index) AS allocated
                     FROM e JOIN f USING (file_id, device))
        SELECT run.rank, f.path, max(run.allocated) AS peak
        FROM run JOIN f USING (file_id) GROUP BY run.rank, f.path ORDER BY run.rank
    """).fetchall()
    assert [r[0] for r in rows] == [0, 1, 2, 3]
    for rank, path, peak in rows:
        s = vramscope.load(path).summary()["devices"][0]
        assert peak == s["peak"]["allocated_bytes"], (rank, path)
    assert max(rows, key=lambda r: r[2])[0] == 2


def test_bytes_per_site_at_the_end_match_the_summary(job):
    root, out = job
    con = duckdb.connect()
    rows = con.sql(f"""
        WITH e AS (SELECT * FROM read_parquet('{out}/events/*/*.parquet', hive_partitioning = true)),
             a AS (SELECT file_id, rank, index, address, size, stack FROM e WHERE action = 'alloc'),
             fr AS (SELECT file_id, index, address FROM e WHERE action = 'free_completed'),
             alive AS (SELECT a.* FROM a WHERE NOT EXISTS (
                 SELECT 1 FROM fr WHERE fr.file_id = a.file_id AND fr.address = a.address AND fr.index > a.index)),
             s AS (SELECT * FROM read_parquet('{out}/stacks/*/*.parquet', hive_partitioning = true))
        SELECT alive.rank, coalesce(s.site, '<no stack recorded>') AS site, sum(alive.size) AS bytes
        FROM alive LEFT JOIN s ON s.file_id = alive.file_id AND s.stack = alive.stack
        GROUP BY alive.rank, site
    """).fetchall()
    by_rank: dict = {}
    for rank, site, b in rows:
        by_rank.setdefault(rank, {})[site] = int(b)
    for rank in range(4):
        path = root / "iteration_6" / f"rank{rank}_memory_snapshot.pickle"
        s = vramscope.load(path).summary(top=1000)["devices"][0]
        want = {x["site"]: x["bytes"] for x in s["end_top_sites"]}
        assert by_rank[rank] == want, rank


def test_pyarrow_and_pandas_read_the_dataset(job):
    _, out = job
    t = pa_ds.dataset(out / "events", format="parquet", partitioning="hive").to_table()
    assert t.schema.field("size").type == "uint64"
    assert t.schema.metadata[b"vramscope.schema"] == b"1"
    files = pd.read_parquet(out / "files" / "files.parquet")
    assert sorted(files["rank"]) == [0, 1, 2, 3]
    assert t.num_rows == int(files["events"].sum())
    stacks = pa_ds.dataset(out / "stacks", format="parquet", partitioning="hive").to_table().to_pandas()
    assert stacks["frames"].map(len).max() > 1
    blocks = pd.read_parquet(out / "blocks")
    assert set(blocks["state"]) <= {"active_allocated", "active_pending_free", "inactive", "unknown"}


def test_query_names_the_tables(job):
    _, out = job
    rel = vramscope.query(
        "SELECT files.rank, count(*) AS n FROM events JOIN files USING (file_id, device) "
        "WHERE action = 'alloc' GROUP BY files.rank ORDER BY files.rank", out)
    rows = rel.fetchall()
    assert [r[0] for r in rows] == [0, 1, 2, 3] and all(r[1] > 0 for r in rows)
    df = vramscope.query("SELECT * FROM stacks WHERE site LIKE '%accumulate_history%'", out).df()
    assert set(df["rank"]) == {2}
    with pytest.raises(FileNotFoundError):
        vramscope.query("SELECT 1", out / "events")


def test_to_arrow_has_the_exports_rows(job):
    root, out = job
    path = root / "iteration_6" / "rank2_memory_snapshot.pickle"
    snap = vramscope.load(path)
    tables = snap.to_arrow()
    assert set(tables) == {"events", "blocks", "segments", "stacks"}
    ev = tables["events"]
    assert ev.num_rows == snap.event_count(0)
    exported = pa_ds.dataset(out / "events" / "rank=2", format="parquet").to_table()
    # The same rows as the export's file for this rank (file_id aside).
    assert ev.drop_columns(["file_id"]).equals(exported.drop_columns(["file_id"]))
    with pytest.raises(ValueError, match="expected events"):
        snap.to_arrow("nope")
