"""vramscope: find where PyTorch GPU memory went, and why.

Read a snapshot::

    import vramscope
    snap = vramscope.load("snapshot.pickle")
    print(snap.summary()["devices"][0]["peak"]["allocated_bytes"])
    snap.report("snapshot.html")

Record one (on CUDA and XPU through PyTorch's allocator history, on the CPU,
Apple MPS and elsewhere at the dispatcher, every tensor with its exact stack;
the same file format either way)::

    with vramscope.record("run.pickle"):
        for batch in loader:
            train_step(batch)
            vramscope.step()
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from . import _native
from vramscope._recording.files import write_text_atomic
from ._native import SnapshotError

__version__ = _native.__version__
__all__ = [
    "load",
    "loads",
    "Snapshot",
    "SnapshotError",
    "record",
    "start",
    "stop",
    "dump",
    "step",
    "mark",
    "live_state",
    "is_recording",
    "cli",
    "ranks",
    "query",
    "limits",
    "MemoryLimitExceeded",
    "cycles",
    "warn_tensor_cycles",
    "estimate",
    "Estimate",
]

# The recorder imports torch only when recording starts, so importing it
# here keeps `import vramscope` light. Importing the names (not just the
# submodule) binds `vramscope.record` to the class, not the module.
from .record import dump, is_recording, live_state, mark, record, start, step, stop  # noqa: E402
from .testing import MemoryLimitExceeded, limits  # noqa: E402
from . import cycles  # noqa: E402
from .cycles import warn_tensor_cycles  # noqa: E402
from vramscope._estimate.trace import Estimate, estimate  # noqa: E402


class Snapshot:
    """A loaded memory snapshot. Parsing and analysis run in Rust with the
    GIL released."""

    def __init__(self, native: "_native.Snapshot"):
        self._n = native

    @property
    def path(self) -> str:
        return self._n.path

    @property
    def devices(self) -> list:
        """Devices that have segments or events."""
        return list(self._n.devices)

    def event_count(self, device: int = 0) -> int:
        return self._n.event_count(device)

    def summary(self, device: Optional[int] = None, top: int = 10) -> dict:
        """The summary as a dict (the `vramscope summary --json` schema)."""
        return json.loads(self._n.summary_json(device, top))

    def summary_text(self, device: Optional[int] = None, top: int = 10) -> str:
        """The summary as terminal text."""
        return self._n.summary_text(device, top)

    def categories(self, device: Optional[int] = None) -> list:
        """What the memory is, one dict per device (the `vramscope categories
        --json` schema): bytes per category at the peak, at the end and at
        their highest, the rules behind the peak's labels and, for files that
        came labelled (profiler runs), how inference alone compares."""
        return json.loads(self._n.categories_json(device))

    def categories_text(self, device: Optional[int] = None) -> str:
        """What the memory is, as terminal text."""
        return self._n.categories_text(device)

    def leaks(
        self,
        device: Optional[int] = None,
        min_growth: Union[int, str, None] = None,
        source_roots: Sequence[Union[str, os.PathLike]] = (),
    ) -> dict:
        """The leak analysis as a dict (the `vramscope leaks --json` schema):
        iterations, findings with explanation, fix and evidence."""
        roots = [os.fspath(r) for r in source_roots]
        return json.loads(self._n.leaks_json(device, _size(min_growth), roots))

    def leaks_text(self, device: Optional[int] = None, source_roots: Sequence[Union[str, os.PathLike]] = ()) -> str:
        """The leak analysis as terminal text."""
        return self._n.leaks_text(device, None, [os.fspath(r) for r in source_roots])

    def check(
        self,
        max_peak: Union[int, str, None] = None,
        *,
        max_reserved: Union[int, str, None] = None,
        no_leaks: bool = False,
        max_growth: Union[int, str, None] = None,
        device: Optional[int] = None,
        source_roots: Sequence[Union[str, os.PathLike]] = (),
    ) -> dict:
        """Memory limits (`vramscope check --json`): each limit, its measured
        value and whether it passed; `result["passed"]` is the verdict.
        Sizes are bytes or strings such as ``"12GiB"`` and ``"1MiB/iter"``."""
        roots = [os.fspath(r) for r in source_roots]
        return json.loads(
            self._n.check_json(device, _size(max_peak), _size(max_reserved), bool(no_leaks), _size(max_growth), roots)
        )

    def simulate(
        self,
        settings: Sequence[str] = (),
        *,
        sweep: bool = False,
        capacity: Union[int, str, None] = None,
        drop: Sequence[str] = (),
        free_early: Sequence[str] = (),
        scale: Union[Sequence[str], dict] = (),
        device: Optional[int] = None,
        text: bool = False,
        fraction: Optional[float] = None,
    ):
        """Replay the trace through a model of the CUDA caching allocator
        (`vramscope simulate --json`): under the recorded settings, each of
        `settings` (``"expandable_segments:True"``,
        ``"max_split_size_mb:128,roundup_power2_divisions:4"``), the common
        ones with ``sweep=True``, on a device of `capacity` bytes (default:
        from the file's OOM), with program changes: sites whose allocations
        are never made (`drop`), freed at the end of their phase
        (`free_early`) or scaled (`scale`, ``{"model.py:42": 0.5}``). Returns
        a dict whose ``answer`` says which setting or change makes it fit;
        ``text=True`` returns the terminal table instead. A setting or site
        that cannot be applied raises ValueError. `fraction`: the memory
        fraction the program set (``torch.cuda.set_per_process_memory_fraction``)
        where the file does not record it."""
        if isinstance(scale, dict):
            scale = [f"{site}={factor}" for site, factor in scale.items()]
        out = self._n.simulate(
            device, list(settings), bool(sweep), _size(capacity), list(drop), list(free_early), list(scale), bool(text), fraction
        )
        return out if text else json.loads(out)

    def advise(
        self,
        *,
        capacity: Union[int, str, None] = None,
        gpu: Optional[str] = None,
        device: Optional[int] = None,
        text: bool = False,
        fraction: Optional[float] = None,
        ranks: Optional[int] = None,
    ):
        """What to change so the run fits, or peaks lower (`vramscope advise
        --json`): allocator settings, what pins the segments at an OOM,
        leaks freed, half the micro-batch, 8-bit or sharded optimizer state,
        ``foreach=False``, the outputs deleted after each step, bf16
        weights, activation checkpointing, FSDP; mixed precision as a
        bound (``method`` ``"bound"``: the least the peak can be, never a
        fit), each
        replayed through the allocator model and ranked by its peak reserved
        (a CPU recording, without a caching allocator: by its peak
        allocated, ``caching_allocator`` false). Returns a dict: ``answer``
        (one sentence), ``baseline`` (the program as recorded, replayed),
        ``advice`` (best first; each with ``change``, ``code``,
        ``peak_reserved``, ``saving``, ``fits``, ``method`` and ``how``),
        ``no_gain`` (tried, lowering no peak here) and ``not_offered``
        (with why). `capacity` (bytes or ``"40GiB"``) or
        `gpu` (``"H100-80GB"``) says what must be fitted; by default the
        file's OOM does. `ranks` (default 2): the ranks the sharding rows
        (ZeRO-1, FSDP) divide over. ``text=True`` returns the terminal
        listing."""
        out = self._n.advise(device, _size(capacity), gpu, bool(text), fraction, ranks)
        return out if text else json.loads(out)

    def fit(self, total: Union[int, str], *, outside: Any = None, settings: Optional[str] = None, device: Optional[int] = None) -> dict:
        """Will an estimate's trace (`vramscope.estimate(device="cuda")`)
        fit on a GPU of `total` bytes? Replayed through the allocator model
        without a limit (under `settings`, ``PYTORCH_CUDA_ALLOC_CONF``
        syntax), its peak reserved against `total` less `outside`: memory
        the process holds outside the caching allocator, in bytes
        (``"900MiB"``), or a recording of the program on a GPU (a path or a
        `Snapshot`) whose device ledger measured it (NVML); default 768 MiB.
        Returns a dict: ``verdict`` ("fits", "too_close", "does_not_fit"),
        ``peak_reserved``, ``usable``, ``outside``, ``margin``,
        ``sentence``."""
        from vramscope._estimate.fit import outside_from

        value, how = outside_from(outside)
        return json.loads(self._n.fit(_size(total), value, settings, device, how))

    def to_arrow(self, table: Optional[str] = None):
        """The snapshot as pyarrow tables, the columns of `vramscope export
        --format parquet` (docs/parquet-schema.md): ``table`` is "events",
        "blocks", "segments" or "stacks"; without it, a dict of all four.
        Written as Parquet in Rust and read by pyarrow (one copy)."""
        import io

        import pyarrow.parquet as pq

        if table is None:
            return {t: self.to_arrow(t) for t in ("events", "blocks", "segments", "stacks")}
        return pq.read_table(io.BytesIO(self._n.parquet(table)))

    def report_html(self, device: Optional[int] = None, title: Optional[str] = None) -> str:
        """The self-contained interactive HTML report."""
        return self._n.report_html(device, title)

    def report(
        self,
        path: Union[str, os.PathLike, None] = None,
        device: Optional[int] = None,
        title: Optional[str] = None,
    ) -> Path:
        """Write the HTML report (default: beside the snapshot, `.html`) and return its path."""
        out = Path(path) if path is not None else _default_report_path(self.path)
        text = self.report_html(device, title or Path(self.path).name)
        write_text_atomic(str(out), text)
        return out

    def _repr_html_(self) -> str:
        # A sandboxed iframe keeps the report's script and its CSP isolated
        # from the notebook page.
        doc = html.escape(self.report_html(title=Path(self.path).name), quote=True)
        return (
            '<iframe sandbox="allow-scripts" style="width:100%;height:760px;border:1px solid #ddd" '
            f'srcdoc="{doc}"></iframe>'
        )

    def __repr__(self) -> str:
        return f"<vramscope.Snapshot {self.path!r} devices={self.devices}>"


def _size(v: Union[int, str, None]) -> Optional[int]:
    """Bytes from an int or a string such as "12GiB" or "1MiB/iter"."""
    if v is None or isinstance(v, int):
        return v
    return _native.parse_bytes(str(v))


def _default_report_path(snapshot_path: str) -> Path:
    p = Path(snapshot_path)
    name = p.name
    for suffix in (".gz", ".zst", ".pickle", ".pkl", ".json", ".pt"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return p.with_name((name or "snapshot") + ".html")


def load(path: Union[str, os.PathLike], threads: Optional[int] = None) -> Snapshot:
    """Read a snapshot file: pickle protocol 0-5, JSON, gzip or zstd, a
    `torch.save` archive. Nothing in the file is ever executed.

    Raises `SnapshotError` (a ValueError) for invalid content and OSError
    when the file cannot be read."""
    return Snapshot(_native.load(os.fspath(path), threads))


def loads(data: bytes) -> Snapshot:
    """Read a snapshot from bytes."""
    return Snapshot(_native.loads(bytes(data)))


def ranks(
    paths: Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]],
    *,
    rank_from: Optional[str] = None,
    jobs: int = 0,
    max_peak: Union[int, str, None] = None,
    max_imbalance: Optional[float] = None,
    text: bool = False,
):
    """The rank files of one job side by side (`vramscope ranks --json`):
    files and directories, ranks and steps from the names frameworks give
    (or `rank_from`, a pattern whose first group is the rank), read on all
    cores a few at a time. Returns a dict: ranks (most urgent first),
    imbalance, outliers, the worst rank's sites against the median rank's,
    drift, and the limits' verdict in ``passed``; ``text=True`` returns the
    terminal table."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out = _native.ranks([os.fspath(p) for p in paths], rank_from, int(jobs), _size(max_peak), max_imbalance, bool(text))
    return out if text else json.loads(out)


def query(sql: str, export_dir: Union[str, os.PathLike], con=None):
    """Run SQL over a Parquet export (`vramscope export --format parquet`)
    with DuckDB (the `duckdb` wheel, embedded: no server). The tables are
    views named ``files``, ``events``, ``blocks``, ``segments`` and
    ``stacks`` (schema: docs/parquet-schema.md), with the ``rank`` column
    from the partitions. Returns DuckDB's relation: ``.df()`` for pandas,
    ``.arrow()`` for pyarrow, ``.fetchall()`` for tuples. Pass `con` to
    reuse a connection."""
    import duckdb

    root = Path(export_dir)
    if not (root / "files" / "files.parquet").exists():
        raise FileNotFoundError(f"{root} is not a vramscope Parquet export (no files/files.parquet)")
    con = con or duckdb.connect()
    for table in ("events", "blocks", "segments", "stacks"):
        glob = (root / table / "*" / "*.parquet").as_posix().replace("'", "''")
        con.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT * FROM read_parquet('{glob}', hive_partitioning = true)")
    files = (root / "files" / "files.parquet").as_posix().replace("'", "''")
    con.execute(f"CREATE OR REPLACE VIEW files AS SELECT * FROM read_parquet('{files}')")
    return con.sql(sql)


def cli(args: list) -> int:
    """Run the vramscope command line (same implementation as the binary)."""
    return _native.cli([str(a) for a in args])
