"""One recording's machinery: the backend that observes allocations, the
iteration and mark ranges, the figures for the live state and ``dump_at``,
and writing files atomically. ``vramscope.record`` (the public API) owns
one of these while it records."""

from __future__ import annotations

import array
import bisect
import collections
import gc
import os
import sys
import threading
import time
import weakref
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence

from vramscope._recording.backend import choose_backend
from vramscope._recording.compile import skip_frames
from vramscope._recording.recorders.base import Recorder
from vramscope._recording.recorders.base import make as make_recorder
from vramscope._recording.recorders.cuda import attach_oom_observer
from vramscope._recording.files import is_native_trace, periodic_path, write_atomic
from vramscope._annotate.generated import GeneratedStacks, source_map
from vramscope._annotate.holders import Sampler, find_holders
from vramscope._annotate.hooks import compiles
from vramscope._recording.rank import expand_path
from vramscope._recording.warn_place import program_location

# Name of the annotation around a cycle collection in which the trace has events.
GC_ANNOTATION = "gc.collect"
# Each `torch.load` while recording (`_patch_load`).
LOAD_ANNOTATION = "vramscope.load"
# Each call of one of the model's repeated blocks: `vramscope.block#layers.3`.
BLOCK_ANNOTATION = "vramscope.block"
# Each block's backward: `vramscope.backward#layers.3`.
BACKWARD_ANNOTATION = "vramscope.backward"
# Each outermost forward call, by its grad mode: `vramscope.forward#no_grad`.
FORWARD_ANNOTATION = "vramscope.forward"
GC_SPANS_KEPT = 10_000
_GC_LABELS = ("gen0", "gen1", "gen2")
# Events kept for the live state.
OOMS_KEPT = 100
DUMPS_KEPT = 1000


class Span:
    """A ``record_function`` range: an iteration or a mark."""

    __slots__ = ("name", "kind", "start_us", "end_us", "_rf")

    def __init__(self, name: str, kind: str) -> None:
        self.name, self.kind = name, kind
        self.start_us, self.end_us = _now_us(), None
        self._rf: Any = None
        self.enter()

    def enter(self) -> None:
        from torch.autograd.profiler import record_function

        self._rf = record_function(self.name)
        self._rf.__enter__()

    def exit(self) -> None:
        rf, self._rf = self._rf, None
        if rf is not None:
            rf.__exit__(None, None, None)

    def close(self) -> None:
        self.exit()
        self.end_us = _now_us()


# One dump_at snapshot, whichever thread sees the threshold first.
_THRESHOLD_LOCK = threading.Lock()

def _trace_times(snap: Dict[str, Any]) -> Sequence[int]:
    """Every trace entry's time, sorted (a native trace gives its events')."""
    traces = snap.get("device_traces", [])
    native = [t for t in traces if is_native_trace(t)]
    if native:
        out = array.array("q")
        for t in native:
            out.frombytes(t.times())
        return out if len(native) == 1 else sorted(out)
    return sorted(e["time_us"] for t in traces for e in t if "time_us" in e)


class Session:
    """One recording: the backend, iteration and mark ranges, file output."""

    def __init__(self, owner: Any, oom_observer: Callable[[int, int, int, int], None]) -> None:
        import torch

        self.owner = self.settings = owner
        # Attached to CUDA's allocator (once per process: it cannot be detached).
        self.oom_observer = oom_observer
        self.pid = os.getpid()
        self.from_env = False
        # What records, behind one protocol (recorders/base.py): nothing
        # below asks which backend it is.
        self.backend: Recorder = make_recorder(choose_backend(owner.backend, owner.device), owner)
        self.steps = 0
        # Iteration boundaries (µs) at the lead module's calls, while the
        # program calls no step() and no optimizer has stepped (see
        # _module_called; an optimizer's steps: _optimizer_stepped).
        self.auto_bounds: List[int] = []
        # Each optimizer's step times (µs), in the order they first stepped,
        # and its place there (weakly: the optimizer may be gone when the
        # snapshot is written); the iterations are cut at one of them
        # (_lead_steps).
        self.optimizer_steps: List[List[int]] = []
        self.optimizer_index: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()
        self.start_us = _now_us()
        self.lead_module: Optional[Any] = None
        self.auto_source: Optional[str] = None
        self.spans: List[Span] = []
        self.step_span: Optional[Span] = None
        self.mark_span: Optional[Span] = None
        self.periodic: Deque[str] = collections.deque()
        self.lock = threading.RLock()
        # Every collection: (start µs, end µs, label); kept at the dump where
        # the trace has an event inside.
        self.gc_spans: Deque[tuple] = collections.deque(maxlen=GC_SPANS_KEPT)
        self._gc_start = 0
        # Each checkpoint load (`torch.load`): (start µs, end µs, the line
        # that called it: `train.py:40 in main`); what the
        # analysis tells a checkpoint's copy from a model's own weights by
        # (the storages torch.load makes carry no Python stack on the CPU).
        self.load_spans: Deque[tuple] = collections.deque(maxlen=GC_SPANS_KEPT)
        self._unpatch_load: Optional[Callable[[], None]] = None
        self._probing = False
        self.unfinished: Optional[str] = None
        from vramscope._annotate.tags import Tagger

        self.tagger = Tagger(self.cuda)
        self.tagger.sampler = Sampler(level=self._allocated_now)
        self.tagger.on_step = self._optimizer_stepped
        self.tagger.on_call = self._module_called
        # For the live state: finished iterations, OOMs, files written.
        self.iterations: Deque[Dict[str, int]] = collections.deque(maxlen=200)
        self.ooms: Deque[Dict[str, Any]] = collections.deque(maxlen=OOMS_KEPT)
        self.dumps: Deque[Dict[str, Any]] = collections.deque(maxlen=DUMPS_KEPT)
        self._peaks = [0, 0]  # allocated, reserved: highest read
        self.watcher: Any = None
        # For the live state: address -> category, as of the last step.
        self.category_map: Dict[tuple, str] = {}
        self.category_map_at = 0.0
        self.end_reason = "exit"
        self.compiles_at_start = 0
        self.dump_at: Optional[int] = None
        self._threshold_taken = False
        if (owner.live or owner.dump_at is not None) and not self.has_totals():
            raise ValueError(f"live= and dump_at= need running totals, which backend={self.kind!r} does not keep")

    @property
    def kind(self) -> str:
        """The backend that records (``backend.choose_backend``)."""
        return self.backend.kind

    @property
    def cuda(self) -> bool:
        return self.backend.cuda

    def path(self) -> str:
        """The snapshot's path now: placeholders filled in with this rank
        and iteration."""
        return expand_path(self.settings.path_template, self.steps, self.owner.rank_info())

    # ----- figures, for the live state and dump_at -----

    def has_totals(self) -> bool:
        return self.backend.keeps_totals

    def _allocated_now(self) -> Optional[int]:
        """The bytes allocated now, for the holder sampler's growth test
        (one counter read, only when a pass is due)."""
        return self.counters()[0] if self.has_totals() else None

    def counters(self) -> tuple:
        """``(allocated, reserved)`` bytes now; equal where nothing caches."""
        return self.backend.counters()

    def figures(self) -> tuple:
        """``(allocated, reserved, peak allocated, peak reserved)``."""
        allocated, reserved = self.counters()
        self._peaks = self.backend.peaks(allocated, reserved, self._peaks)
        return allocated, reserved, self._peaks[0], self._peaks[1]

    def capacity(self) -> Optional[int]:
        """The device's memory in bytes, where known (the CPU's: physical)."""
        return self.backend.capacity()

    def device_name(self) -> str:
        return self.backend.device_name()

    def recorder_name(self) -> str:
        return self.backend.name()

    def _end_iteration(self, n: int) -> tuple:
        """Note iteration ``n``'s figures; returns ``(allocated, reserved)``
        now. One read of the totals where they are the counters."""
        allocated, reserved, peak = self.backend.iteration_end()
        self.iterations.append({"n": n, "end_us": _now_us(), "allocated": allocated, "reserved": reserved, "peak": peak})
        return allocated, reserved

    def _refresh_categories(self) -> None:
        """Which addresses are parameters, gradients, optimizer state, for
        the live state: read here, on the program's thread at a step,
        because reading a tensor from another thread while the program
        frees it (``zero_grad``) can crash the process. At most once per
        publication interval (a few µs per parameter)."""
        watcher = self.watcher
        if watcher is None or not watcher.publishing:
            return
        now = time.monotonic()
        if now - self.category_map_at < self.settings.live_interval:
            return
        self.category_map_at = now
        try:
            self.category_map = self.tagger.current()
        except RuntimeError:  # a weak set changed while read: the next step
            pass

    def dump_threshold(self, allocated: int, reserved: int, on_watcher: bool = False) -> None:
        """``dump_at`` was reached: the early snapshot (from a step, or from
        the watcher's thread: then no tensor is touched, see ``snapshot``).
        Once: the step and the watcher can both see the threshold crossed."""
        with _THRESHOLD_LOCK:
            if self._threshold_taken:
                return
            self._threshold_taken = True
        self.dump_at = None
        root, ext = os.path.splitext(self.path())
        path = f"{root}.dump_at{ext}"
        try:
            self.dump(path, reason="dump_at", tag=not on_watcher)
        except RuntimeError:  # tried again at the watcher's next poll
            self._threshold_taken = False
            raise
        print(
            f"vramscope: {max(allocated, reserved):,} bytes in use reached dump_at ({self.settings.dump_at}); snapshot written to {path}",
            file=sys.stderr,
        )

    def _on_gc(self, phase: str, info: Dict[str, Any]) -> None:
        # Runs inside every collection: two clock reads and, rarely, an append.
        if self._probing:
            return
        # Every collection, not only those that report objects collected:
        # a loop through a suspended generator is broken by the collector
        # closing it (its finalizer), and what it held dies by reference
        # counting inside the collection, counted in no `collected`. Spans
        # in which the trace has no event are dropped at the dump.
        if phase == "start":
            self._gc_start = _now_us()
        else:
            g = info.get("generation", -1)
            self.gc_spans.append((self._gc_start, _now_us(), _GC_LABELS[g] if 0 <= g < 3 else f"gen{g}"))

    def _collect_cycles(self) -> None:
        """One full collection inside the recorded window, marked, so that
        tensors held only by garbage reference cycles show as freed by it."""
        if not self.settings.collect_cycles:
            return
        self._probing = True
        start = _now_us()
        try:
            gc.collect()  # marked even at 0 collected: see `_on_gc`
        finally:
            self._probing = False
        self.gc_spans.append((start, _now_us(), "vramscope"))

    def begin(self) -> None:
        skip_frames(Session._on_gc)
        self.warnings = program_location()
        self.warnings.__enter__()
        self.backend.start()
        bracket = self.backend.bracket()
        if bracket is not None:
            self.tagger.bracket = bracket
            # Compiled code allocates outside the function mode that gives
            # stacks: its buffers get the generated line's stack.
            self.tagger.generated = GeneratedStacks(*bracket)
        self.tagger.install()
        self._unpatch_load = _patch_load(self.load_spans)
        self.compiles_at_start = compiles()
        gc.callbacks.append(self._on_gc)
        if self.cuda and self.settings.on_oom:
            attach_oom_observer(self.oom_observer)
        self._open_step()
        live, dump_at = self.settings.live, self.settings.dump_at
        if live or dump_at is not None:
            from vramscope._recording.live import Watcher, parse_threshold

            try:
                self.dump_at = parse_threshold(dump_at, self.capacity())
                self.watcher = Watcher(self, live, self.settings.live_interval, self.dump_at)
            except BaseException:
                self.finish(write=False)
                raise

    def _open_step(self) -> None:
        self.step_span = Span(f"ProfilerStep#{self.steps + 1}", "step")
        self.spans.append(self.step_span)

    def _optimizer_stepped(self, opt: Any) -> None:
        """Iterations for a program that never calls ``vramscope.step()``:
        one ends with each step of the optimizer that steps last in the
        loop (every step of several would cut one iteration in two): the one
        that steps least often, of those the one that first stepped last. A
        GAN's loop (the discriminator's step, then the generator's) ends
        with the generator's step, and its iterations are the loop's, as a
        WGAN's with five critic steps to one; the first optimizer's steps
        cut a GAN's loop in the middle, and the generator's gradients, kept
        from one loop into the next until `netG.zero_grad()`, were never
        another iteration's. Only times are kept here; the ranges are
        written with the snapshot, and only if the program never called
        ``step()`` (its own iterations win)."""
        if self.steps:
            return
        with self.lock:
            self.auto_source = "optimizer"  # a training loop: its optimizer cuts it, not module calls
            try:
                k = self.optimizer_index.get(opt)
                if k is None:
                    k = self.optimizer_index[opt] = len(self.optimizer_steps)
                    self.optimizer_steps.append([])
            except TypeError:  # an optimizer no weak reference can name
                return
            self.optimizer_steps[k].append(_now_us())

    def _lead_steps(self) -> List[int]:
        """The step times of the optimizer that cuts the iterations: the
        fewest steps; of those, the latest to start. One that stepped once
        (a warm-up, a one-off fit) cuts nothing while others step."""
        counts = [len(t) for t in self.optimizer_steps]
        if not counts:
            return []
        cands = [i for i, n in enumerate(counts) if n >= 2] or list(range(len(counts)))
        return self.optimizer_steps[min(cands, key=lambda i: (counts[i], -i))]

    def _module_called(self, module: Any) -> None:
        """Iterations of a loop with no optimizer (evaluation, generation, a
        rollout) when the program calls no ``vramscope.step()``: one begins
        with each outermost call of the first module called that way."""
        if self.steps or self.auto_source == "optimizer":
            return
        with self.lock:
            self.auto_source = "module"
            lead = self.lead_module() if self.lead_module is not None else None
            if lead is None:
                try:
                    self.lead_module = weakref.ref(module)
                except TypeError:
                    return
            elif lead is not module:
                return
            self.auto_bounds.append(_now_us())

    def _auto_spans(self, now: int) -> List[Dict[str, Any]]:
        """``ProfilerStep#N`` ranges between the automatic boundaries: the
        last one is left open (cut short), as the program's own last range."""
        device = self.backend.device()
        with self.lock:
            bounds = list(self._lead_steps() if self.auto_source == "optimizer" else self.auto_bounds)
        if self.auto_source == "module" and bounds:
            bounds = bounds[1:]  # iterations begin at the calls; before the first is setup
        out: List[Dict[str, Any]] = []
        start = self.start_us
        for n, end in enumerate(bounds + [now], start=1):
            out.append({"name": f"ProfilerStep#{n}", "stage": "START", "device": device, "time_us": start})
            if end != now:
                out.append({"name": f"ProfilerStep#{n}", "stage": "END", "device": device, "time_us": end})
            start = end
        return out if bounds else []

    def _close_open(self) -> None:
        """End the mark, then the iteration (ranges must nest)."""
        if self.mark_span is not None:
            self.end_mark(self.mark_span)
        if self.step_span is not None:
            self.step_span.close()
            self.step_span = None

    def step(self) -> int:
        with self.lock:
            self.backend.at_step()
            self.tagger.at_step()
            self._close_open()
            self.steps += 1
            n = self.steps
            if self.has_totals():
                allocated, reserved = self._end_iteration(n)
                self._refresh_categories()
                if self.dump_at is not None and max(allocated, reserved) >= self.dump_at:
                    self.dump_threshold(allocated, reserved)
            if self.settings.every and n % self.settings.every == 0:
                self._write_periodic(n)
            self._open_step()
        if self.cuda and self.settings.on_oom:
            attach_oom_observer(self.oom_observer)  # CUDA may have been initialised since
        return n

    def mark(self, name: str) -> Span:
        with self.lock:
            if self.mark_span is not None:
                self.end_mark(self.mark_span)
            span = self.mark_span = Span(name, "mark")
            self.spans.append(span)
            self.backend.set_label(name)
            return span

    def end_mark(self, span: Span) -> None:
        with self.lock:
            if span is self.mark_span:
                span.close()
                self.mark_span = None
                self.backend.set_label("")

    def _write_periodic(self, n: int) -> None:
        template = self.settings.path_template
        # A path that names the iteration is its own periodic name.
        path = expand_path(template, n, self.owner.rank_info()) if "{iteration}" in template else periodic_path(self.path(), n)
        self.dump(path, collect=True, reason="periodic")
        self.periodic.append(path)
        while self.settings.keep and len(self.periodic) > self.settings.keep:
            try:
                os.unlink(self.periodic.popleft())
            except FileNotFoundError:
                pass

    def snapshot(self, final: bool = False, collect: bool = False, tag: bool = True) -> Dict[str, Any]:
        """The snapshot as PyTorch would pickle it, with our annotations."""
        with self.lock:
            if collect:
                self._collect_cycles()
            optimizers: List[Dict[str, Any]] = []

            def unrecorded() -> None:
                # (The tagger's walks allocate nothing; on the profiler's
                # recorder they run between two windows, unseen by its
                # Python tracer.)
                if tag:  # (not from another thread: tensors are read only on the program's)
                    self.tagger.tag_all()
                optimizers.extend(self.tagger.optimizers(refresh=tag))

            open_spans = [s for s in (self.step_span, self.mark_span) if s is not None]
            snap = self.backend.take_snapshot(self._marks, final, open_spans, unrecorded)
            snap["external_annotations"] = self._annotations(snap)
            tags = self.tagger.columns()
            if tags is not None:
                snap["vramscope_tags"] = tags
            snap["vramscope"] = {
                "recorder": self.backend.name(),
                "steps": self.steps,
                "torch": _torch_version(),
                # Compilations torch.compile ran while recording (what the
                # dispatcher cannot see inside them, the summary says).
                "compilations": compiles() - self.compiles_at_start,
                # What each optimizer keeps (its class, settings and state):
                # the analysis names the real rule from it.
                "optimizers": optimizers,
            }
            generated = source_map()
            if generated:
                # The source lines torch.compile's generated code computes:
                # what names a compiled model's memory by its model lines.
                snap["vramscope"]["generated"] = generated
            modules = self.tagger.module_map.rows()
            if modules:
                # Which module's code each frame of a stack is: the part of
                # the model that made memory its stack shows as `forward`.
                snap["vramscope"]["modules"] = modules
            mm = self.tagger.module_map
            params = mm.parameters() if tag else mm.last_parameters
            if params:
                # Each module's parameters, and those that train: what a
                # sharding rule gathers by block where some are frozen.
                snap["vramscope"]["parameters"] = params
            if self.tagger.autocast:
                # Which dtype the forward computed in: what tells advice that
                # halves activations (bf16 weights) from advice that would
                # count a 16-bit forward twice.
                snap["vramscope"]["autocast"] = sorted(self.tagger.autocast)
            history = self.backend.history()
            if history is not None:
                # How much of the run the trace holds: what tells a wrapped
                # history (and how to raise it) from a short run.
                snap["vramscope"]["history"] = history
            if self.ooms:
                snap["vramscope"]["ooms"] = list(self.ooms)
            children = _children_noted()
            if children:
                # Children that trained or used a GPU unrecorded (mp.spawn's
                # ranks): this file is not the whole program, every command says.
                snap["vramscope"]["children"] = children
            if final:
                # What holds each tensor alive at the end, by name (leaks
                # are fixed where they are kept, not where allocated), and
                # what held them while the program ran.
                end = find_holders()
                end["time_us"] = time.time_ns() // 1000
                snap["vramscope"]["holders"] = end
                snap["vramscope"]["holder_samples"] = list(self.tagger.sampler.samples) if self.tagger.sampler else []
            # The recorder's own: the device's facts (CUDA), the device type
            # and counters (dispatch), what failed (the profiler).
            snap["vramscope"].update(self.backend.meta())
            return snap

    def _marks(self) -> List[tuple]:
        """(name, start µs, end µs) of each mark range, open ones to now."""
        return [(s.name, s.start_us, s.end_us or _now_us()) for s in self.spans if s.kind == "mark"]

    def _annotations(self, snap: Dict[str, Any]) -> List[Dict[str, Any]]:
        """Native annotations plus ours where PyTorch recorded none, without
        iterations in which nothing was allocated or freed (the one opened by
        the last ``step()`` before the end, typically), and without any when
        ``step()`` was never called."""
        now = _now_us()
        times = _trace_times(snap)
        if times:  # ranges that ended before the oldest event kept can never show again
            self.spans = [s for s in self.spans if s.end_us is None or s.end_us >= times[0]]

        def in_trace(start: int, end: int) -> bool:
            i = bisect.bisect_left(times, start)
            return i < len(times) and times[i] <= end

        def busy(s: Span) -> bool:
            return in_trace(s.start_us, s.end_us if s.end_us is not None else now)

        # Without a single step() there are no iterations to show.
        spans = [s for s in self.spans if s.kind != "step" or (self.steps and (not times or busy(s)))]
        dropped = {s.name for s in self.spans} - {s.name for s in spans}
        native = [
            a
            for a in snap.get("external_annotations") or []
            if a.get("name") not in dropped and not (a.get("name") == self.unfinished and a.get("stage") == "END")
        ]
        have = {a.get("name") for a in native}
        device = self.backend.device()
        ours = []
        for s in spans:
            end = s.end_us if s.end_us is not None else now
            if s.name not in have:
                ours.append({"name": s.name, "stage": "START", "device": device, "time_us": s.start_us})
            if (s.name not in have or s.end_us is None) and s.name != self.unfinished:
                ours.append({"name": s.name, "stage": "END", "device": device, "time_us": end})
        if not self.steps:
            ours.extend(self._auto_spans(now))
        first = times[0] if times else 0
        # The model's repeated blocks, each call (`_tags.Tagger.block_spans`).
        for start, end, label in list(self.tagger.block_spans):
            if end >= first:
                name = f"{BLOCK_ANNOTATION}#{label}"
                ours.extend(_pair(name, device, start, end))
        # Each block's backward (`_tags.Tagger.backward_spans`), the one
        # still running (an OOM in backward) up to now.
        spans = list(self.tagger.backward_spans)
        if self.tagger._open_backward is not None:
            spans.append((self.tagger._open_backward[1], now, self.tagger._open_backward[0]))
        for start, end, label in spans:
            if end >= first:
                name = f"{BACKWARD_ANNOTATION}#{label}"
                ours.extend(_pair(name, device, start, end))
        # Each outermost forward's grad mode (`_forward_spans.ForwardSpans`).
        for start, end, mode in self.tagger.forward_spans_now(now):
            if end >= first:
                name = f"{FORWARD_ANNOTATION}#{mode}"
                ours.extend(_pair(name, device, start, end))
        for start, end, site in list(self.load_spans):
            if end >= first:
                name = f"{LOAD_ANNOTATION}#{site}"
                ours.extend(_pair(name, device, start, end))
        # A copy: a collection during this loop (it allocates) appends to gc_spans.
        for start, end, label in list(self.gc_spans):
            if end >= first and in_trace(start, end):
                name = f"{GC_ANNOTATION}#{label}"
                ours.extend(_pair(name, device, start, end))
        return sorted(native + ours, key=lambda a: a.get("time_us", 0))

    def dump(self, path: str, collect: bool = False, reason: str = "manual", tag: bool = True) -> str:
        """Write the snapshot; ``collect``: run the marked cycle collection
        first (only at safe points in the user's code, never from inside the
        allocator's OOM observer)."""
        write_atomic(path, self.snapshot(collect=collect, tag=tag))
        self.dumps.append({"time_us": _now_us(), "path": path, "reason": reason})
        self.owner.written = path
        return path

    def note_oom(
        self, requested: Optional[int], device_free: Optional[int], device: Optional[int] = None, limit: Optional[int] = None
    ) -> None:
        """``limit``: what the allocator may reserve, as its OOM observer
        reports it (the device's total memory, or the memory fraction's
        maximum when one is set)."""
        oom: Dict[str, Any] = {"time_us": _now_us(), "requested": requested, "device_free": device_free}
        if device is not None:
            oom["device"] = device
        if limit is not None:
            oom["limit"] = limit
        self.ooms.append(oom)

    def finish(self, write: bool = True, collect: bool = False) -> Optional[str]:
        """End the recording, writing the snapshot first if ``write``;
        ``collect`` as in :meth:`dump` (not while an exception propagates:
        the snapshot must show what the failure left alive)."""
        with self.lock:
            # What ran after the last step() is not a whole iteration (the
            # end of the loop, teardown): its range gets no END, so readers
            # treat it as cut short.
            if self.step_span is not None:
                self.unfinished = self.step_span.name
            self._close_open()
            watcher, self.watcher = self.watcher, None
            if watcher is not None:
                watcher.halt()
            try:
                if write:
                    path = self.path()
                    write_atomic(path, self.snapshot(final=True, collect=collect))
                    self.dumps.append({"time_us": _now_us(), "path": path, "reason": self.end_reason})
                    self.owner.written = path
                    return path
                return None
            finally:
                if watcher is not None:
                    watcher.close()
                self.backend.stop()
                self.warnings.__exit__(None, None, None)
                self.tagger.uninstall()
                if self._unpatch_load is not None:
                    self._unpatch_load()
                    self._unpatch_load = None
                if self.tagger.generated is not None:
                    self.tagger.generated.restore()
                try:
                    gc.callbacks.remove(self._on_gc)
                except ValueError:
                    pass


def is_oom(exc: BaseException) -> bool:
    """An out-of-memory error of any device: ``torch.OutOfMemoryError``,
    Python's ``MemoryError``, or the CPU allocator's ``RuntimeError``."""
    if isinstance(exc, MemoryError) or "OutOfMemory" in type(exc).__name__:
        return True
    text = str(exc)[:500].lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "not enough memory" in text)


def _now_us() -> int:
    # Wall clock in µs since the epoch: the clock of trace entries' time_us.
    return time.time_ns() // 1000


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


def _children_noted() -> List[Dict[str, Any]]:
    """The notes this process's unrecorded children left (none where it is
    not the process recording from the environment)."""
    from vramscope._recording.env import OWNER_VAR

    if os.environ.get(OWNER_VAR) != str(os.getpid()):
        return []
    from vramscope._recording.children import collect

    return collect(str(os.getpid()))


def _patch_load(spans: "Deque[tuple]") -> Optional[Callable[[], None]]:
    """Note each ``torch.load`` as a (start µs, end µs, caller) span while the
    recording runs; returns what puts the original back (``None`` where
    torch is not imported yet or has no ``load``)."""
    torch = sys.modules.get("torch")
    original = getattr(torch, "load", None) if torch is not None else None
    if original is None or getattr(original, "_vramscope_load", False):
        return None

    import functools

    @functools.wraps(original)
    def load(*args: Any, **kwargs: Any) -> Any:
        start = _now_us()
        # The line that loads: the CPU recorders give the storages no stack.
        caller = sys._getframe(1)
        site = f"{caller.f_code.co_filename}:{caller.f_lineno} in {caller.f_code.co_name}"
        try:
            return original(*args, **kwargs)
        finally:
            spans.append((start, _now_us(), site))

    load._vramscope_load = True  # type: ignore[attr-defined]
    torch.load = load

    def restore() -> None:
        if torch.load is load:
            torch.load = original

    return restore


def _pair(name: str, device: int, start: int, end: int) -> List[Dict[str, Any]]:
    """A range as PyTorch's annotations write it: its START and END."""
    return [
        {"name": name, "stage": "START", "device": device, "time_us": start},
        {"name": name, "stage": "END", "device": device, "time_us": end},
    ]
