"""Victim processes for the SIGKILL test.

Each child records with ``every=1, keep=3`` and steps forever, so at any
moment it is training, converting a profiler window, writing a file or
deleting an old one. Importing torch takes seconds, so this script imports it
once, starts the profiler once (its first start initialises Kineto, ~1 s)
and forks a fresh child per trial.

Protocol (line based): for each ``OUT.pickle`` read on stdin, fork a child
that records to it. Its lines on stdout are ``PID ready``, ``PID dumping
PATH`` and ``PID dumped PATH`` around every file write (so that the parent can
aim its SIGKILL into a write); once the child is dead this script prints
``PID exited STATUS``. End of stdin ends the script.
"""

from __future__ import annotations

import importlib
import os
import sys

import torch

vr = importlib.import_module("vramscope.record")
session_module = importlib.import_module("vramscope._recording.session")


def say(*words: object) -> None:
    print(os.getpid(), *words, flush=True)


def victim(out: str) -> None:
    write = session_module.write_atomic

    def traced_write(path: str, obj: object) -> None:
        say("dumping", path)
        write(path, obj)
        say("dumped", path)

    session_module.write_atomic = traced_write  # the session looks the writer up at call time
    keep = [torch.zeros(1024) for _ in range(64)]  # alive across steps
    with vr.record(out, every=1, keep=3):
        say("ready")
        while True:
            # Short-lived tensors: each dump grows by ~150 kB of trace.
            for i in range(100):
                t = torch.ones(256 + i % 7)
                keep[i % 64] = t * 2
            vr.step()


def main() -> None:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True):
        torch.ones(8)
    for line in sys.stdin:
        out = line.strip()
        if not out:
            continue
        pid = os.fork()
        if pid == 0:
            try:
                victim(out)
            finally:
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        print(pid, "exited", status, flush=True)


if __name__ == "__main__":
    main()
