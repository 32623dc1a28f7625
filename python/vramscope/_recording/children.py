"""Child processes that trained, or used a GPU, without being recorded.

A recording started from the environment (``vramscope run``,
``VRAMSCOPE_RECORD``) is the first process's only: its children inherit the
variable but do not record (they would overwrite its file), unless the path
holds ``{pid}`` or they are the ranks of a distributed job (``RANK`` set by
``torchrun``). Yet the work is often in the children: ``mp.spawn(train,
nprocs=world_size)``, PyTorch's own DDP tutorial, starts the ranks without
``RANK``, and pytorch/examples' Hogwild trains in ``mp.Process`` children.
Their parent's file then holds almost nothing, and a summary of it reads as
if the program used no memory.

So a child that does not record leaves a note at its exit, where it
trained (an optimizer in it holds state: a spawned child starts with none)
or its CUDA allocator reserved memory: its pid, each device's peak
allocated and reserved bytes, and how many optimizers stepped. The
recording process reads the notes at each dump into the snapshot
(``vramscope.children``), and every command says which processes were
left out and how to record them. Nothing is imported at a child's start
(``torch`` only if the child imported it), and a child that trained
nothing leaves no note: a data loader's workers never step an optimizer.

Children started by ``fork`` (Linux's default for ``multiprocessing``) run
no interpreter start and skip exit handlers; a forked child cannot use CUDA
once its parent has, so the GPU's children are spawned and are seen.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import tempfile
from typing import Any, Dict, List

# Notes older than this many are not read: a directory left by a process
# whose pid was reused.
_MAX_NOTES = 4096


def notes_dir(owner: str) -> str:
    """Where the children of the recording process ``owner`` (its pid)
    leave their notes."""
    return os.path.join(tempfile.gettempdir(), f"vramscope-children-{owner}")


# Optimizer steps this process took (counted once torch.optim is loaded),
# and whether the count's hook is in (or could not be put in).
_steps = [0]
_hooked = [False]


def watch(owner: str) -> None:
    """In a child that does not record: leave a note at exit if it trained
    or used a GPU."""
    atexit.register(_note_at_exit, owner)
    # Its optimizers are usually gone by exit (locals of the function the
    # child ran): their steps are counted as they happen, by a global step
    # hook put in once torch.optim is loaded. Nothing imports torch for it:
    # the interpreter's import events say when it has been.
    try:
        sys.addaudithook(_on_audit)
    except Exception:  # noqa: BLE001 - no audit hooks: optimizers alive at exit only
        pass


def _on_audit(event: str, args: Any) -> None:
    if event != "import" or _hooked[0]:
        return
    mod = sys.modules.get("torch.optim.optimizer")
    register = getattr(mod, "register_optimizer_step_post_hook", None) if mod is not None else None
    if register is None:
        return
    _hooked[0] = True  # (an audit hook cannot be removed: it stands down)
    try:
        register(_count_step)
    except Exception:  # noqa: BLE001 - a partly loaded module: never again
        pass


def _count_step(*_: Any) -> None:
    _steps[0] += 1


def _note_at_exit(owner: str) -> None:
    try:
        note = _what_it_did()
        if note is None:
            return
        note["pid"] = os.getpid()
        d = notes_dir(owner)
        os.makedirs(d, exist_ok=True)
        tmp = os.path.join(d, f".{os.getpid()}.json")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(note, f)
        os.replace(tmp, os.path.join(d, f"{os.getpid()}.json"))
    except Exception:  # noqa: BLE001 - an exit handler must not fail the child
        pass


def _what_it_did() -> "Dict[str, Any] | None":
    """This process's CUDA peaks and stepped optimizers, or ``None`` where
    it used no GPU and stepped none (or never imported torch)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    devices: List[Dict[str, Any]] = []
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is not None and cuda.is_initialized():
            for i in range(cuda.device_count()):
                reserved = int(cuda.max_memory_reserved(i))
                if reserved > 0:
                    devices.append({"device": f"cuda:{i}", "peak_allocated": int(cuda.max_memory_allocated(i)), "peak_reserved": reserved})
    except Exception:  # noqa: BLE001 - a broken CUDA state says nothing
        devices = []
    # The steps are counted once torch.optim loads; the optimizers alive
    # are looked for (a walk of every object) only where they could not be.
    counted = _hooked[0] or "torch.optim" not in sys.modules
    optimizers = 0 if counted else _stepped_optimizers(torch)
    steps = _steps[0]
    if not devices and optimizers == 0 and steps == 0:
        return None
    return {"devices": devices, "optimizers_stepped": optimizers, "steps": steps}


def _stepped_optimizers(torch: Any) -> int:
    """Optimizers alive at exit that hold state: each stepped in this
    process (a spawned child starts with none)."""
    import gc

    optim = getattr(torch, "optim", None)
    base = getattr(optim, "Optimizer", None) if optim is not None else None
    if base is None:
        return 0
    n = 0
    # By type, not isinstance: that reads `__class__`, which a deprecated
    # alias answers with a warning (`torch.distributed.reduce_op`).
    for o in gc.get_objects():
        try:
            if issubclass(type(o), base) and len(o.state) > 0:
                n += 1
        except Exception:  # noqa: BLE001 - an optimizer without its state
            continue
    return n


def collect(owner: str) -> List[Dict[str, Any]]:
    """The notes the recording process's children have left so far, by
    pid; malformed ones are skipped."""
    d = notes_dir(owner)
    try:
        names = sorted(n for n in os.listdir(d) if n.endswith(".json") and not n.startswith("."))[:_MAX_NOTES]
    except OSError:
        return []
    out: List[Dict[str, Any]] = []
    for name in names:
        try:
            with open(os.path.join(d, name), encoding="utf-8") as f:
                note = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(note, dict) and isinstance(note.get("pid"), int):
            out.append(note)
    out.sort(key=lambda n: n["pid"])
    return out


def clear(owner: str) -> None:
    """Remove the notes directory (the recording process, at its exit)."""
    shutil.rmtree(notes_dir(owner), ignore_errors=True)
