"""Cost of the recorder's tags: training step time of the small CNN and
Transformer (python/tests/scripts/models.py) on CPU with vramscope's tag
hooks installed against without, alternating runs (ABBA) so drift cancels.

    .venv/bin/python bench/bench_tags.py [--steps 200] [--rounds 6]

The tags are global hooks: a module forward pre/post hook on every module
call and an optimizer step pre/post hook; each tensor is named once per
allocation. Prints the median step time of each configuration and their
ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python" / "tests" / "scripts"))
sys.path.insert(0, str(REPO / "python"))

import torch  # noqa: E402

from models import build, train_step  # noqa: E402
from vramscope._annotate.tags import Tagger  # noqa: E402


def median_step(model, opt, batch, steps: int) -> float:
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        train_step(model, opt, batch)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=6)
    a = ap.parse_args()
    torch.set_num_threads(1)
    for kind in ("cnn", "transformer"):
        model, opt, batch = build(kind)
        median_step(model, opt, batch, 20)  # warm-up
        plain, tagged = [], []
        for r in range(a.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            for with_tags in order:
                tagger = Tagger(cuda=False)
                if with_tags:
                    tagger.install()
                try:
                    m = median_step(model, opt, batch, a.steps)
                finally:
                    tagger.uninstall()
                (tagged if with_tags else plain).append(m)
        p, t = statistics.median(plain), statistics.median(tagged)
        print(f"{kind:12s} without tags {p * 1e3:7.3f} ms/step   with tags {t * 1e3:7.3f} ms/step   ratio {t / p:.3f}")


if __name__ == "__main__":
    main()
