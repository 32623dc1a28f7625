"""Which rank of a distributed job this process is, and the file names
that follow from it.

The rank comes from ``torch.distributed`` once the process group exists,
else from the variables every launcher sets (``torchrun``, SLURM through
``srun`` with the usual exports, Accelerate, DeepSpeed, Lightning):
``RANK``/``LOCAL_RANK``/``WORLD_SIZE``. Asking is local: no collective runs,
so a rank that dumps at an out-of-memory error while the others wait in an
all-reduce never blocks on them.

Snapshot paths may name them: ``{rank}``, ``{local_rank}``,
``{world_size}``, ``{iteration}`` (``vramscope.step()`` calls so far),
``{pid}`` and ``{host}``. A job of more than one rank whose path names no
rank writes under ``rank{rank}/`` beside the file name, so that ranks never
overwrite each other and ``vramscope ranks <dir>`` reads the job's output
as it is.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Dict, Iterable, List, Optional

__all__ = ["rank_info", "expand_path", "is_launcher", "parse_ranks"]

PLACEHOLDERS = ("{rank}", "{local_rank}", "{world_size}", "{iteration}", "{pid}", "{host}")


def _env_int(name: str) -> Optional[int]:
    raw = os.environ.get(name, "").strip()
    try:
        return int(raw) if raw else None
    except ValueError:
        return None


def rank_info() -> Dict[str, int]:
    """``{"rank", "local_rank", "world_size"}``: 0, 0, 1 for a lone process."""
    rank = _env_int("RANK")
    world = _env_int("WORLD_SIZE")
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            rank, world = dist.get_rank(), dist.get_world_size()
    except Exception:  # noqa: BLE001 - a half-torn-down group: the environment's word
        pass
    local = _env_int("LOCAL_RANK")
    return {
        "rank": rank or 0,
        # Without LOCAL_RANK: one node, where the two are the same.
        "local_rank": local if local is not None else (rank or 0),
        "world_size": max(world or 1, 1),
    }


def host() -> str:
    try:
        return socket.gethostname().split(".")[0] or "localhost"
    except OSError:
        return "localhost"


def names_rank(template: str) -> bool:
    return "{rank}" in template or "{local_rank}" in template


def expand_path(template: str, iteration: int = 0, info: Optional[Dict[str, int]] = None) -> str:
    """The path ``template`` means now. Only the placeholders above are
    replaced (a literal ``{`` elsewhere stays as it is)."""
    info = info or rank_info()
    path = template
    if info["world_size"] > 1 and not names_rank(template):
        head, tail = os.path.split(template)
        path = os.path.join(head, "rank{rank}", tail)
    values = {
        "{rank}": str(info["rank"]),
        "{local_rank}": str(info["local_rank"]),
        "{world_size}": str(info["world_size"]),
        "{iteration}": str(iteration),
        "{pid}": str(os.getpid()),
        "{host}": host(),
    }
    for key, value in values.items():
        path = path.replace(key, value)
    return path


def is_launcher(argv: Optional[List[str]] = None) -> bool:
    """Whether this interpreter is a job launcher (``torchrun``,
    ``python -m torch.distributed.run``/``launch``): it starts the ranks and
    allocates nothing worth recording."""
    args = list(argv if argv is not None else getattr(sys, "orig_argv", None) or sys.argv)
    if args and os.path.basename(args[0]) == "torchrun":
        return True
    for i, a in enumerate(args[:-1]):
        if a == "-m" and args[i + 1] in ("torch.distributed.run", "torch.distributed.launch"):
            return True
    return any(os.path.basename(a) == "torchrun" for a in args[:2])


def parse_ranks(value: Optional[Iterable[int] | str]) -> Optional[List[int]]:
    """``[0, 3]``, ``"0,3"`` or ``"0-3,8"`` -> sorted ranks; None for all."""
    if value is None:
        return None
    if isinstance(value, str):
        out: List[int] = []
        for part in value.replace(" ", "").split(","):
            if not part:
                continue
            lo, sep, hi = part.partition("-")
            try:
                out += list(range(int(lo), int(hi) + 1)) if sep else [int(lo)]
            except ValueError:
                raise ValueError(f"ranks={value!r}: expected rank numbers like '0,3' or '0-7'") from None
        return sorted(set(out))
    ranks = sorted({int(r) for r in value})
    if any(r < 0 for r in ranks):
        raise ValueError(f"ranks={value!r}: ranks are 0 or more")
    return ranks
