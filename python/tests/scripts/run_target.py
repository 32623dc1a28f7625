"""A script for ``vramscope run`` tests: allocates two 1 MiB tensors that stay
alive, then ends as argv[1] says:

* ``ok``: writes ``{"name", "argv", "path0"}`` to ``seen.json`` in the cwd,
  then changes to the parent directory (the snapshot must not follow)
* ``raise``: ``ValueError("boom from the script")``
* ``exit3``: ``sys.exit(3)``
* ``oom``: ``torch.OutOfMemoryError`` as the CUDA allocator would raise it
"""

from __future__ import annotations

import json
import os
import sys

import torch

held = [torch.ones(256, 1024) for _ in range(2)]  # 2 x 1 MiB, alive to the end


def fail(mode: str) -> None:
    if mode == "raise":
        raise ValueError("boom from the script")
    if mode == "exit3":
        sys.exit(3)
    if mode == "oom":
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")


mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
if mode == "ok":
    with open("seen.json", "w") as f:
        json.dump({"name": __name__, "argv": sys.argv, "path0": sys.path[0]}, f)
    os.chdir("..")
else:
    fail(mode)
