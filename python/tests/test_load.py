"""The Rust core from Python: vramscope.load and friends, the console command."""

from __future__ import annotations

import gzip
import os
import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import vramscope

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "tests" / "fixtures" / "real"  # in the repository: never skipped


def reference_rows():
    text = (REAL / "SOURCES.md").read_text()
    table = text.split("## Reference counts per snapshot")[1]
    rows = {}
    for line in table.splitlines():
        if line.startswith("| ") and ".pickle" in line:
            c = [x.strip() for x in line.split("|")]
            rows[c[1]] = {"reserved": int(c[3]), "allocated": int(c[4]), "peak": int(c[6])}
    return rows


def test_load_matches_reference_counts():
    rows = reference_rows()
    assert len(rows) >= 7
    for name, ref in rows.items():
        snap = vramscope.load(REAL / name)
        d = snap.summary()["devices"][0]
        assert d["end"]["reserved_bytes"] == ref["reserved"], name
        assert d["end"]["allocated_bytes"] == ref["allocated"], name
        assert abs(d["peak"]["allocated_bytes"] - ref["peak"]) <= ref["peak"] * 0.01, name
        assert snap.devices == [0]


def test_loads_bytes_text_and_report(tmp_path):
    src = REAL / "magma27_cs336_windows.pickle.gz"
    snap = vramscope.loads(gzip.decompress(src.read_bytes()))
    assert snap.event_count(0) == 5163
    text = snap.summary_text()
    assert "Peak allocated" in text and "Device 0" in text
    out = vramscope.load(src).report(tmp_path / "r.html")
    html = out.read_text()
    assert html.startswith("<!doctype html>") and "default-src 'none'" in html
    assert not (tmp_path / "r.html.tmp").exists()
    # Default report path: beside the snapshot.
    copy = tmp_path / "run.pickle"
    copy.write_bytes(src.read_bytes())
    assert vramscope.load(copy).report() == tmp_path / "run.html"
    frame = vramscope.load(src)._repr_html_()
    assert frame.startswith("<iframe sandbox=") and "<script" not in frame  # escaped into srcdoc


def test_errors_map_to_python_exceptions(tmp_path):
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(b"\x80\x04\xff\xff")
    with pytest.raises(vramscope.SnapshotError, match="byte 2"):
        vramscope.load(bad)
    assert issubclass(vramscope.SnapshotError, ValueError)
    with pytest.raises(FileNotFoundError):
        vramscope.load(tmp_path / "missing.pickle")


def test_malicious_pickle_is_not_executed(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    data = pickle.dumps({"segments": [], "device_traces": [[{"action": "alloc", "addr": 512, "size": 1024,
                                                            "stream": 0, "user_metadata": Evil()}]]}, protocol=4)
    snap = vramscope.loads(data)
    s = snap.summary()
    assert any("system" in x for x in s["source"]["skipped"]), s["source"]
    assert not marker.exists()


def test_gil_is_released_while_loading(tmp_path):
    # A big synthetic snapshot, then count how far a pure-Python thread gets
    # while the main thread is inside load(): with the GIL held it would
    # not advance at all.
    path = tmp_path / "big.pickle"
    assert vramscope.cli(["synth", "-o", str(path), "--entries", "300000"]) == 0
    ticks = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.05)
    before = ticks[0]
    snap = vramscope.load(path)
    s = snap.summary()
    during = ticks[0] - before
    stop.set()
    t.join()
    assert s["devices"][0]["events"]["total"] > 290_000
    assert during > 1000, f"the other thread advanced only {during} times"


def test_console_command_is_the_rust_cli(tmp_path):
    src = str(REAL / "magma27_cs336_windows.pickle.gz")
    py = subprocess.run([sys.executable, "-m", "vramscope", "summary", src], capture_output=True, text=True)
    assert py.returncode == 0, py.stderr
    binary = ROOT / "target" / "release" / "vramscope"
    if binary.exists():
        rs = subprocess.run([str(binary), "summary", src], capture_output=True, text=True)
        assert py.stdout == rs.stdout
    bad = tmp_path / "x.pickle"
    bad.write_bytes(b"garbage")
    r = subprocess.run([sys.executable, "-m", "vramscope", "summary", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "vramscope: error:" in r.stderr
    h = subprocess.run([sys.executable, "-m", "vramscope", "--help"], capture_output=True, text=True)
    assert h.returncode == 0 and "report" in h.stdout


def test_device_rule_is_the_cli_rule(tmp_path):
    """One rule for a device the file lacks: an error naming the devices
    present, the same sentence from Python and from the command line; an
    empty file has no device to fall back on (it never silently means 0)."""
    name = "magma27_cs336_windows.pickle.gz"
    snap = vramscope.load(REAL / name)
    assert snap.devices == [0]
    with pytest.raises(vramscope.SnapshotError) as e:
        snap.leaks(device=3)
    assert str(e.value) == "device 3 has no segments or events in the file; devices present: [0]"
    cli = subprocess.run([sys.executable, "-m", "vramscope", "leaks", str(REAL / name), "--device", "3", "-q"],
                         capture_output=True, text=True)
    assert cli.returncode == 2, cli.stderr
    assert str(e.value) in cli.stderr
    empty = tmp_path / "empty.pickle"
    empty.write_bytes(pickle.dumps({"segments": [], "device_traces": []}))
    with pytest.raises(vramscope.SnapshotError, match="no segments or events on any device"):
        vramscope.load(empty).leaks()
