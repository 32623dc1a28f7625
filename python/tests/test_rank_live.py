"""Rank-aware recording, dump_at and the live state (record(live=...)).

The distributed test runs a real two-process job on the gloo backend; the
live tests read the state from a recording running in another process,
through the socket and registry that `vramscope live` uses."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import pickle
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, Iterator, List, Tuple

import pytest

import vramscope
from vramscope._recording import rank as _rank
from vramscope._recording.live import categories as live_categories
from vramscope._recording.live import parse_threshold, top_holders

torch = pytest.importorskip("torch")


def test_paths_name_the_rank_and_a_job_writes_under_rank_dirs(monkeypatch: pytest.MonkeyPatch) -> None:
    lone = {"rank": 0, "local_rank": 0, "world_size": 1}
    job = {"rank": 3, "local_rank": 1, "world_size": 8}
    assert _rank.expand_path("/o/mem.pickle", 5, lone) == "/o/mem.pickle"
    assert _rank.expand_path("/o/mem.pickle", 5, job) == "/o/rank3/mem.pickle"
    assert _rank.expand_path("/o/{host}-{local_rank}/it{iteration}.pickle", 5, job).endswith("-1/it5.pickle")
    # A path that names the rank is taken as it is; other braces stay.
    assert _rank.expand_path("/o/r{rank}_{x}.pickle", 0, job) == "/o/r3_{x}.pickle"
    assert _rank.expand_path("/o/{pid}.pickle", 0, lone) == f"/o/{os.getpid()}.pickle"
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert _rank.rank_info() == {"rank": 2, "local_rank": 2, "world_size": 4}
    assert _rank.parse_ranks("0-2, 7") == [0, 1, 2, 7]
    with pytest.raises(ValueError, match="rank numbers"):
        _rank.parse_ranks("first")
    assert _rank.is_launcher(["/usr/bin/python", "-m", "torch.distributed.run", "--nproc-per-node=2", "t.py"])
    assert _rank.is_launcher(["/venv/bin/torchrun", "t.py"])
    assert not _rank.is_launcher(["/usr/bin/python", "train.py"])


def test_ranks_not_asked_for_run_unrecorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with vramscope.record(tmp_path / "m.pickle", ranks=[0]):
        assert not vramscope.is_recording()
        torch.ones(1000)
    assert list(tmp_path.iterdir()) == []
    with vramscope.record(tmp_path / "m{iteration}.pickle", ranks="1", every=2, keep=0):
        assert vramscope.is_recording()
        for _ in range(4):
            torch.ones(1000)
            vramscope.step()
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.pickle"))
    # {iteration} names the periodic files; the last file is the 4th iteration's.
    assert files == ["rank1/m2.pickle", "rank1/m4.pickle"]


_JOB = textwrap.dedent(
    """
    import datetime, os, sys, torch, torch.distributed as dist, vramscope
    # A file store: a port picked in advance can be taken by another
    # process before the store listens on it.
    dist.init_process_group("gloo", init_method=os.environ["STORE"], rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]), timeout=datetime.timedelta(seconds=20))
    rank = dist.get_rank()
    out = sys.argv[1]
    held = []
    try:
        with vramscope.record(os.path.join(out, "mem.pickle"), every=2, keep=0):
            model = torch.nn.Linear(64, 64)
            for step in range(4):
                x = torch.randn(32, 64)
                loss = model(x).sum()
                loss.backward()
                for p in model.parameters():
                    dist.all_reduce(p.grad)
                held.append(torch.zeros(256 * (rank + 1), 256))  # rank 1 holds twice as much
                if rank == 1 and step == 2:
                    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")
                vramscope.step()
    except Exception as err:
        print(f"rank {rank}: {type(err).__name__}", flush=True)
    """
)


def test_a_two_rank_gloo_job_writes_per_rank_and_ranks_reads_it(tmp_path: Path) -> None:
    """Rank 1 fails with an out-of-memory error at its third step while
    rank 0 waits for it in an all-reduce: rank 1's file is written at once
    (no collective), rank 0 finds its peer gone, and `vramscope ranks` reads
    the job's directory as it is."""
    script = tmp_path / "job.py"
    script.write_text(_JOB)
    out = tmp_path / "out"
    store = f"file://{tmp_path / 'store'}"
    procs = []
    for rank in (0, 1):
        env = dict(os.environ, STORE=store, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank))
        procs.append(subprocess.Popen([sys.executable, str(script), str(out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=120) for p in procs]
    assert "rank 1: OutOfMemoryError" in outs[1][0], outs[1]
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.pickle"))
    assert "rank0/mem.pickle" in files and "rank1/mem.pickle" in files, files
    assert "rank0/mem.step000002.pickle" in files and "rank1/mem.step000002.pickle" in files, files
    r1 = vramscope.load(out / "rank1" / "mem.pickle")
    assert r1.summary()["devices"][0]["peak"]["allocated_bytes"] > 0
    result = vramscope.ranks(out)
    by_rank = {r["rank"]: r for r in result["ranks"]}
    assert set(by_rank) == {0, 1}, result["ranks"]
    # Rank 1 held twice the bytes per step: it is the worst rank.
    assert result["ranks"][0]["rank"] == 1


def test_threshold_spellings() -> None:
    assert parse_threshold("50%", 1000) == 500
    assert parse_threshold("1KiB", None) == 1024
    assert parse_threshold(4096, None) == 4096
    assert parse_threshold(None, 10) is None
    with pytest.raises(ValueError, match="capacity is unknown"):
        parse_threshold("90%", None)
    with pytest.raises(ValueError, match="between 0 and 100"):
        parse_threshold("120%", 10)


def _mib_allocs(path: Path) -> list:
    with open(path, "rb") as f:
        snap = pickle.load(f)  # our own file
    trace = snap["device_traces"][0]
    return [e["time_us"] for e in trace if e["action"] == "alloc" and e["size"] == 2**20], trace[0]["time_us"]


def test_dump_at_keeps_the_growth_that_the_final_snapshot_lost(tmp_path: Path) -> None:
    """A run that grows 1 MiB per step past a 6 MiB threshold, recorded
    with a buffer too small to keep the whole run: the early snapshot
    (written the moment the threshold was crossed) still holds the first
    iterations' growth, which the final snapshot's trace lost."""
    path = tmp_path / "grow.pickle"
    # In a process of its own: the threshold counts everything the process
    # holds, and a test process holds whatever earlier tests kept.
    code = textwrap.dedent(
        f"""
        import json, sys, torch, vramscope
        held = []
        with vramscope.record({str(path)!r}, dump_at="6MiB", max_entries=200, backend="dispatch"):
            for _ in range(30):
                held.append(torch.zeros(256 * 1024))  # 1 MiB
                for _ in range(5):
                    torch.ones(16).add_(1)  # churn that fills the trace
                vramscope.step()
            state = vramscope.live_state()
        print(json.dumps([d["reason"] for d in state["dumps"]]))
        """
    )
    from conftest import run_python

    proc = run_python(["-c", code], cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    early = tmp_path / "grow.dump_at.pickle"
    assert early.exists()
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == ["dump_at"]
    es, fs = vramscope.load(early).summary()["devices"][0], vramscope.load(path).summary()["devices"][0]
    # The early file ends just past the threshold; the final one 30 MiB in.
    assert 6 * 2**20 <= es["end"]["allocated_bytes"] < 8 * 2**20, es["end"]
    assert fs["end"]["allocated_bytes"] >= 30 * 2**20
    early_allocs, _ = _mib_allocs(early)
    final_allocs, final_start = _mib_allocs(path)
    # The growth from the first MiB on is in the early file, and gone from
    # the final file's trace, which begins later.
    assert len(early_allocs) >= 6
    assert all(t < final_start for t in early_allocs[:6])
    assert len(final_allocs) < 30


def test_top_holders_merge_equal_stacks() -> None:
    a = [{"filename": "/x/train.py", "line": 3, "name": "f"}]
    b = [{"filename": "/x/train.py", "line": 3, "name": "f"}]  # equal, another list
    lib = [{"filename": "/v/site-packages/torch/nn/linear.py", "line": 9, "name": "forward"}, {"filename": "/x/m.py", "line": 7, "name": "g"}]
    deeper = a + [{"filename": "/x/run.py", "line": 1, "name": "main"}]  # the same site, called from elsewhere
    top = top_holders([(1, 100, a), (2, 50, b), (3, 500, lib), (4, 200, deeper)])
    assert [(t["site"], t["bytes"], t["blocks"]) for t in top] == [("m.py:7 in g", 500, 1), ("train.py:3 in f", 350, 3)]
    assert top[1]["stack"] == ["/x/train.py:3 in f", "/x/run.py:1 in main"]  # the site's largest share


_LIVE = textwrap.dedent(
    """
    import json, sys, time, torch, vramscope
    held = []
    with vramscope.record(sys.argv[1], live=True, live_interval=0.1, backend="dispatch"):
        for i in range(3):
            held.append(torch.zeros(256 * 1024))  # 1 MiB
            vramscope.step()
        time.sleep(0.3)  # a publication after the last step
        st = vramscope.live_state()
        print(json.dumps({k: st[k] for k in ("allocated", "iteration", "top")}), flush=True)
        sys.stdin.readline()  # until the test has read the state
    """
)


@contextlib.contextmanager
def _live_process(tmp_path: Path, registry: Path) -> Iterator[Tuple[subprocess.Popen, Dict[str, str]]]:
    """The _LIVE script recording with live=True, its registry in
    ``registry``; it holds still until the block ends."""
    script = tmp_path / "live.py"
    script.write_text(_LIVE)
    env = dict(os.environ, VRAMSCOPE_LIVE_DIR=str(registry))
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "live.pickle")], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        yield proc, env
    finally:
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.wait(timeout=60)


def test_live_state_on_the_loopback_socket_matches_the_recording(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    with _live_process(tmp_path, registry) as (proc, _env):
        expected = json.loads(proc.stdout.readline())
        entry = json.loads((registry / f"{proc.pid}.json").read_text())
        assert oct((registry / f"{proc.pid}.json").stat().st_mode & 0o777) == "0o600"
        host, port = entry["address"].rsplit(":", 1)
        # A wrong token gets nothing but the refusal.
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(b'{"token": "guess"}\n')
            assert b"bad token" in s.recv(1000)
        with socket.create_connection((host, int(port)), timeout=30) as s:
            s.sendall(json.dumps({"token": entry["token"]}).encode() + b"\n")
            lines = s.makefile()
            state = json.loads(lines.readline())
            # The state sent first is the last published; on a busy machine
            # the publisher may have backed off (a slow publication stretches
            # its interval) and not published since the last step: the next
            # ones follow.
            while state["iteration"] < 3:
                state = json.loads(lines.readline())
        assert state["version"] == 1 and state["pid"] == proc.pid
        assert (state["allocated"], state["iteration"]) == (expected["allocated"], expected["iteration"]) == (state["allocated"], 3)
        assert state["allocated"] >= 3 * 2**20
        assert state["top"][0] == expected["top"][0] and state["top"][0]["bytes"] == 3 * 2**20
        line = _LIVE.splitlines().index(next(x for x in _LIVE.splitlines() if "held.append" in x)) + 1
        assert state["top"][0]["site"] == f"live.py:{line} in <module>"
        assert [it["n"] for it in state["iterations"]] == [1, 2, 3]
        assert state["iterations"][1]["allocated"] - state["iterations"][0]["allocated"] == 2**20
    assert not (registry / f"{proc.pid}.json").exists(), "the registry entry goes with the recording"


_TORCHRUN_SCRIPT = textwrap.dedent(
    """
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.Linear(32, 32)
    held = []
    for _ in range(3):
        held.append(torch.zeros(1024 * (rank + 1)))
        model(torch.randn(4, 32)).sum().backward()
        dist.all_reduce(model.weight.grad)
    """
)


def test_vramscope_record_under_torchrun_records_each_rank_not_the_launcher(tmp_path: Path) -> None:
    """``VRAMSCOPE_RECORD=... torchrun`` with no change to the script: the
    launcher starts the ranks as its children and records nothing; each
    rank writes its own file under rank{rank}/."""
    script = tmp_path / "train.py"
    script.write_text(_TORCHRUN_SCRIPT)
    env = dict(os.environ, VRAMSCOPE_RECORD=str(tmp_path / "out" / "mem.pickle"))
    proc = subprocess.run(
        # --standalone: the launcher's store listens on a port it is given
        # by the system, not one picked before (which another process may take).
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*.pickle"))
    assert files == ["rank0/mem.pickle", "rank1/mem.pickle"]
    ends = {r["rank"]: r for r in vramscope.ranks(tmp_path / "out")["ranks"]}
    assert set(ends) == {0, 1}


def test_cuda_live_state_dump_at_and_oom_from_the_allocators_counters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA the state comes from memory_stats() and memory_snapshot()
    (the blocks, without the history), dump_at="90%" is of the device's
    total memory, and the OOM observer's request is in the state."""
    from test_record import FakeCuda

    cuda = FakeCuda(monkeypatch)
    cuda.initialized = True
    stats = {"allocated_bytes.all.current": 0, "reserved_bytes.all.current": 0}
    frames = [{"filename": "/x/train.py", "line": 12, "name": "step"}, {"filename": "/x/train.py", "line": 40, "name": "<module>"}]
    blocks: List[Dict[str, Any]] = []
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda *a, **k: dict(stats))
    calls: List[Dict[str, Any]] = []

    def memory_snapshot(mempool_id: Any = None, include_traces: bool = True) -> List[Dict[str, Any]]:
        calls.append({"include_traces": include_traces})
        return [{"blocks": list(blocks)}]

    monkeypatch.setattr(torch.cuda.memory, "memory_snapshot", memory_snapshot)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(total_memory=10 * 2**30))
    out = tmp_path / "gpu.pickle"
    with vramscope.record(out, dump_at="90%", backend="cuda"):
        for i in range(3):
            stats["allocated_bytes.all.current"] += 2 * 2**30
            stats["reserved_bytes.all.current"] += 3 * 2**30  # 3, 6, 9 GiB reserved: 90% at the third
            blocks.append({"state": "active_allocated", "address": i, "size": 2 * 2**30, "requested_size": 2 * 2**30, "frames": frames})
            blocks.append({"state": "inactive", "address": 100 + i, "size": 2**30, "frames": []})
            cuda.allocate(2 * 2**30)
            vramscope.step()
        cuda.observers[0](0, 5 * 2**30, 0, 10**9)  # the allocator reports an OOM
        state = vramscope.live_state()
    assert state["device"] == "cuda:0" and state["capacity"] == 10 * 2**30
    assert state["device_free"] == 559_022_080  # mem_get_info's free: what lies outside PyTorch follows from it
    assert (state["allocated"], state["reserved"]) == (6 * 2**30, 9 * 2**30)
    assert state["top"] == [{"site": "train.py:12 in step", "bytes": 6 * 2**30, "blocks": 3, "stack": ["/x/train.py:12 in step", "/x/train.py:40 in <module>"]}]
    assert [it["reserved"] for it in state["iterations"]] == [3 * 2**30, 6 * 2**30, 9 * 2**30]
    assert [(o["requested"], o["device_free"]) for o in state["ooms"]] == [(5 * 2**30, 10**9)]
    assert [d["reason"] for d in state["dumps"]] == ["dump_at", "oom"]
    assert (tmp_path / "gpu.dump_at.pickle").exists()
    # The blocks, never the allocator's history (PyTorch 2.10+ builds the
    # whole history unless told not to).
    assert calls and all(c == {"include_traces": False} for c in calls), calls


def test_publishing_backs_off_to_one_percent_of_the_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A state that costs 5 ms to take is published every 0.5 s at most,
    whatever interval was asked for, and the state says so."""
    import vramscope._recording.live as live

    monkeypatch.setattr(live, "state", lambda session, seq=0, on_watcher=False: {"seq": seq, "publish_us": 5000})
    watcher = live.Watcher(SimpleNamespace(owner=None), f"file:{tmp_path / 'state.json'}", interval=0.01, dump_at=None)
    try:
        st = watcher.publish()
        assert watcher.effective_interval == pytest.approx(0.5)
        assert st["publish_interval_us"] == 500_000
        monkeypatch.setattr(live, "state", lambda session, seq=0, on_watcher=False: {"seq": seq, "publish_us": 20})
        assert watcher.publish()["publish_interval_us"] == 10_000  # cheap again: the interval asked for
    finally:
        watcher.halt()


def test_live_categories_count_what_was_alive_before_the_recording(tmp_path: Path) -> None:
    """Parameters made before recording started are adopted without a
    stack: they are in the categories and the top holders, and peaks of
    reserved equal those of allocated where nothing caches."""
    torch.manual_seed(0)
    model = torch.nn.Linear(512, 512)  # 1 MiB of weight, before the recording
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    rec = vramscope.record(tmp_path / "c.pickle", rank=5)
    assert not rec.recording
    with rec:
        assert rec.recording
        for _ in range(2):
            model(torch.randn(8, 512)).sum().backward()
            opt.step()
            vramscope.step()
        state = vramscope.live_state()
        # Gradients set to None free their storage; new tensors that the
        # allocator puts at the same addresses are not gradients.
        grad_addr = model.weight.grad.untyped_storage().data_ptr()
        opt.zero_grad(set_to_none=True)
        held = [torch.empty(512, 512) for _ in range(8)]
        vramscope.step()
        after = vramscope.live_state()
        # A block at the old gradient's address (the allocator may hand it out again at once).
        session = importlib.import_module("vramscope.record").current_session()
        reused = live_categories(session, [(grad_addr, 2**20, [])], 2**20)
    weight = 512 * 512 * 4
    assert state["categories"]["parameter"] >= weight + 512 * 4
    assert state["categories"]["optimizer_state"] >= weight  # momentum buffers, made while recording
    assert state["categories"]["gradient"] >= weight
    assert sum(state["categories"].values()) == state["allocated"]
    assert any(t["site"] == "(allocated before the recording)" and t["bytes"] >= weight for t in state["top"])
    assert state["peak_reserved"] == state["peak_allocated"] >= state["allocated"]
    assert len(held) == 8 and after["categories"]["other"] >= 8 * weight
    assert after["categories"].get("gradient", 0) == 0, after["categories"]
    assert reused == {"other": 2**20}
    # rank= names the files: a job of at least 6 ranks, this one the 6th.
    assert state["rank"] == 5 and rec.written == str(tmp_path / "rank5" / "c.pickle")
    assert Path(rec.written).exists()


def test_live_categories_name_an_emas_copy(tmp_path: Path) -> None:
    """An EMA's copy (AveragedModel, made before the recording, evaluated
    with a forward: its weights seen as a module's) is ``ema`` in the live
    state, as in the snapshot; the model's own weights stay parameters."""
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    torch.manual_seed(0)
    model = torch.nn.Linear(512, 512)
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with vramscope.record(tmp_path / "e.pickle"):
        for _ in range(2):
            model(torch.randn(8, 512)).sum().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            ema.update_parameters(model)
            with torch.no_grad():
                ema(torch.randn(8, 512))
            vramscope.step()
        state = vramscope.live_state()
    weight = (512 * 512 + 512) * 4
    assert state["categories"]["ema"] == weight + 8, state["categories"]  # and AveragedModel's count
    assert state["categories"]["parameter"] == weight, state["categories"]


def test_vramscope_live_once_json_reads_the_running_recording(tmp_path: Path) -> None:
    """`vramscope live PID --once --json` (the Rust viewer, found through the
    registry) gets the state the recorder has at that moment."""
    with _live_process(tmp_path, tmp_path / "registry") as (proc, env):
        expected = json.loads(proc.stdout.readline())  # the recorder's figures, now steady
        viewer = subprocess.run(
            [sys.executable, "-m", "vramscope", "live", str(proc.pid), "--once", "--json"], env=env, capture_output=True, text=True, timeout=60
        )
        assert viewer.returncode == 0, viewer.stderr
        state = json.loads(viewer.stdout.splitlines()[0])
        assert (state["pid"], state["allocated"], state["iteration"]) == (proc.pid, expected["allocated"], 3)
        assert state["top"][0] == expected["top"][0]
        # The same through the terminal frame: the holder's site and the figures.
        frame = subprocess.run(
            [sys.executable, "-m", "vramscope", "live", str(proc.pid), "--once"], env=env, capture_output=True, text=True, timeout=60
        )
        assert frame.returncode == 0, frame.stderr
        assert "live.py:" in frame.stdout and f"pid {proc.pid}" in frame.stdout and "\x1b[" not in frame.stdout


_STRESS = textwrap.dedent(
    """
    import json, sys, time, torch, vramscope
    import vramscope._recording.live
    vramscope._recording.live.MAX_PUBLISH_SHARE = 1.0  # no back-off: a state every 2 ms, as stressful as it gets
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
    opt = torch.optim.Adam(model.parameters())
    with vramscope.record(sys.argv[1], live="file:" + sys.argv[2], live_interval=0.002, dump_at=1):
        # 400 steps, and a second at least: the states published follow the
        # loop's length (a loaded machine once counted 48 over 400 steps).
        t0, steps = time.perf_counter(), 0
        while steps < 400 or time.perf_counter() - t0 < 1.0:
            model(torch.randn(16, 64)).sum().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            vramscope.step()
            steps += 1
    print(json.load(open(sys.argv[2]))["seq"])
    """
)


def test_publishing_while_the_program_frees_gradients_never_crashes(tmp_path: Path) -> None:
    """The watcher's thread publishes every 2 ms while the program's thread
    creates and frees gradients: the watcher never reads a tensor (reading
    one while zero_grad frees it crashed the process), so the run ends
    normally with hundreds of states published and the dump_at file written."""
    script = tmp_path / "stress.py"
    script.write_text(_STRESS)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "s.pickle"), str(tmp_path / "state.json")],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert int(proc.stdout.split()[-1]) >= 50
    assert (tmp_path / "s.dump_at.pickle").exists()


def test_a_cuda_step_reads_the_allocators_counters_once_without_flattening(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``vramscope.step()`` on CUDA reads allocated and reserved bytes in one
    call of ``memory_stats_as_nested_dict`` (one C++ call), never
    ``memory_stats()``, which flattens and sorts every statistic in Python
    (0.25 ms a call on an H200; two calls a step before)."""
    from test_record import FakeCuda

    cuda = FakeCuda(monkeypatch)
    cuda.initialized = True
    nested_calls: List[int] = []
    now = {"allocated": 0, "reserved": 0}

    def nested(device: Any = None) -> Dict[str, Any]:
        nested_calls.append(1)
        return {"allocated_bytes": {"all": {"current": now["allocated"]}}, "reserved_bytes": {"all": {"current": now["reserved"]}}}

    def flat(*a: Any, **k: Any) -> Dict[str, Any]:
        raise AssertionError("memory_stats() called at a step")

    monkeypatch.setattr(torch.cuda, "memory_stats_as_nested_dict", nested)
    monkeypatch.setattr(torch.cuda, "memory_stats", flat)
    with vramscope.record(tmp_path / "gpu.pickle", backend="cuda"):
        for i in range(1, 4):
            now["allocated"], now["reserved"] = i * 2**20, i * 3 * 2**20
            cuda.allocate(2**20)
            before = len(nested_calls)
            vramscope.step()
            assert len(nested_calls) - before == 1
        state = vramscope.live_state()
    assert [(it["allocated"], it["reserved"]) for it in state["iterations"]] == [(i * 2**20, i * 3 * 2**20) for i in range(1, 4)]
