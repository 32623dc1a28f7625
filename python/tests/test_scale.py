"""Ray Data in local mode converts a rank directory with
vramscope.scale.export_with_ray; the result equals the CLI's export row for
row."""

from __future__ import annotations

from pathlib import Path

import pytest

import vramscope

ray = pytest.importorskip("ray")
pa_ds = pytest.importorskip("pyarrow.dataset")


@pytest.fixture(scope="module")
def ray_local():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def table(root: Path, name: str):
    if name == "files":
        import pyarrow.parquet as pq

        return pq.read_table(root / "files" / "files.parquet")
    t = pa_ds.dataset(root / name, format="parquet", partitioning="hive").to_table()
    return t


def test_ray_export_equals_the_cli_export(tmp_path: Path, ray_local):
    job = tmp_path / "job"
    for rank in range(3):
        f = job / "step_000000000006" / f"{rank:06d}_step_6.pickle"
        f.parent.mkdir(parents=True, exist_ok=True)
        args = ["synth", "-o", str(f), "--entries", "8000", "--seed", "3", "--iterations", "4"]
        if rank == 1:
            args += ["--leak", "64MiB"]
        assert vramscope.cli(args) == 0
    cli_out, ray_out = tmp_path / "cli", tmp_path / "ray"
    assert vramscope.cli(["export", str(job), "-o", str(cli_out), "-q"]) == 0
    from vramscope.scale import export_with_ray

    done = export_with_ray(job, ray_out)
    assert done["files"] == 3
    for name in ("events", "stacks", "files"):
        a, b = table(cli_out, name), table(ray_out, name)
        key = [c for c in ("file_id", "device", "index", "stack") if c in a.column_names]
        a = a.sort_by([(k, "ascending") for k in key])
        b = b.select(a.column_names).sort_by([(k, "ascending") for k in key])
        assert a.num_rows == b.num_rows == done["rows"][name], name
        for col in a.column_names:
            assert a.column(col).to_pylist() == b.column(col).to_pylist(), (name, col)
