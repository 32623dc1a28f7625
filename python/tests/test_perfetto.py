"""`vramscope export --format perfetto`: the trace parses with Perfetto's own
protos (from the `perfetto` package) and its counters say what the summary
says. (Perfetto's trace_processor downloads its shell binary on first use,
which machines without internet access cannot; the protos are the format it
reads.)"""

from __future__ import annotations

from pathlib import Path

import pytest

import vramscope

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")

COUNTER, BEGIN, END, INSTANT = 4, 1, 2, 3


def parse(path: Path):
    t = pb.Trace()
    t.ParseFromString(path.read_bytes())
    return t


def test_a_job_is_one_process_per_rank_with_byte_counters(tmp_path: Path):
    job = tmp_path / "job"
    for rank in range(3):
        f = job / f"snapshot_{rank}.pickle"
        f.parent.mkdir(parents=True, exist_ok=True)
        args = ["synth", "-o", str(f), "--entries", "10000", "--seed", "2", "--iterations", "4"]
        if rank == 2:
            args += ["--leak", "64MiB", "--oom"]
        assert vramscope.cli(args) == 0
    out = tmp_path / "memory.pftrace"
    assert vramscope.cli(["export", str(job), "--format", "perfetto", "-o", str(out), "-q"]) == 0
    t = parse(out)
    tracks = {p.track_descriptor.uuid: p.track_descriptor for p in t.packet if p.HasField("track_descriptor")}
    processes = {u: d.process for u, d in tracks.items() if d.HasField("process")}
    assert sorted(p.process_name for p in processes.values()) == ["rank 0", "rank 1", "rank 2"]
    assert sorted(p.pid for p in processes.values()) == [1, 2, 3]
    events = [p for p in t.packet if p.HasField("track_event")]
    for rank in range(3):
        name = f"snapshot_{rank}.pickle cuda:0 allocated"
        (uuid,) = [u for u, d in tracks.items() if d.name == name]
        assert tracks[uuid].counter.unit == 3  # UNIT_SIZE_BYTES
        peak = max(e.track_event.counter_value for e in events
                   if e.track_event.track_uuid == uuid and e.track_event.type == COUNTER)
        s = vramscope.load(job / f"snapshot_{rank}.pickle").summary()["devices"][0]
        assert peak == s["peak"]["allocated_bytes"], rank
    # The OOM of rank 2 is an instant on its events track.
    ooms = [e for e in events if e.track_event.type == INSTANT and e.track_event.name.startswith("OOM")]
    assert len(ooms) == 1
    assert tracks[ooms[0].track_event.track_uuid].parent_uuid in processes
    # Allocations are slices with interned names and callstacks; every
    # slice that begins on a lane ends there or is still open at the end.
    begins = [e for e in events if e.track_event.type == BEGIN]
    assert begins and all(e.track_event.name_iid > 0 and e.track_event.callstack_iid > 0 for e in begins)
    names = {n.name for e in t.packet if e.HasField("interned_data") for n in e.interned_data.event_names}
    assert any(n.endswith("train.py:74 in accumulate_history") for n in names)
    open_per_lane: dict = {}
    for e in events:
        if e.track_event.type == BEGIN:
            assert not open_per_lane.get(e.track_event.track_uuid), "two open slices on one lane"
            open_per_lane[e.track_event.track_uuid] = True
        elif e.track_event.type == END:
            assert open_per_lane.get(e.track_event.track_uuid)
            open_per_lane[e.track_event.track_uuid] = False


@pytest.mark.parametrize(
    "recorder, expected",
    [
        ({"recorder": "xpu-allocator-history"}, "xpu:0"),
        ({"recorder": "dispatch", "device_type": "mps"}, "mps:0"),
        ({"recorder": "cuda-allocator-history"}, "cuda:0"),
    ],
)
def test_the_export_names_the_device_as_the_summary_does(tmp_path: Path, recorder, expected) -> None:
    """One rule names the device of a recording (the recorder's kind, read
    once): the summary and the Perfetto tracks say the same."""
    import pickle

    src = tmp_path / "plain.pickle"
    assert vramscope.cli(["synth", "-o", str(src), "--entries", "2000", "--seed", "3"]) == 0
    snap = pickle.loads(src.read_bytes())
    snap["vramscope"] = dict(recorder)
    f = tmp_path / "rec.pickle"
    f.write_bytes(pickle.dumps(snap))
    assert vramscope.load(f).summary()["devices"][0]["name"] == expected
    out = tmp_path / "rec.pftrace"
    assert vramscope.cli(["export", str(f), "--format", "perfetto", "-o", str(out), "-q"]) == 0
    names = {p.track_descriptor.name for p in parse(out).packet if p.HasField("track_descriptor")}
    assert f"rec.pickle {expected} allocated" in names, names
