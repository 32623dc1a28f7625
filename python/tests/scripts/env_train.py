"""A training script recorded through the environment only.

It does what the installed ``.pth`` hook does at interpreter start
(``vramscope._recording.env.activate_from_env()``; a no-op if the hook is installed and
already did it), says whether this process records, and then trains the small CNN for
``STEPS`` steps (argv[1], default 4), calling ``vramscope.record.step()``
after each (a no-op when nothing records). With ``--child`` it then runs a
child Python that calls the hook too and prints whether it recorded
(children of a recording process must not).
"""

from __future__ import annotations

import subprocess
import sys

from vramscope._recording import env as _env
from vramscope.record import is_recording, step

_env.activate_from_env()
print("recording", is_recording(), flush=True)

from models import build, train_step  # noqa: E402

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 4
model, opt, batch = build("cnn")
for _ in range(steps):
    train_step(model, opt, batch)
    step()

if "--child" in sys.argv:
    code = (
        "from vramscope._recording import env as _env; from vramscope.record import is_recording; "
        "_env.activate_from_env(); print('child recording', is_recording())"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
