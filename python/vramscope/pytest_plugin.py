"""pytest plugin: ``@pytest.mark.vramscope(...)`` records a test's memory and
fails the test when a limit is exceeded.

::

    @pytest.mark.vramscope(max_peak="512MiB", no_leaks=True, max_growth="1MiB/iter")
    def test_train_loop():
        for _ in range(10):
            train_step()
            vramscope.step()

The marker takes the arguments of :class:`vramscope.limits`. Snapshots of
failing tests are kept in ``--vramscope-dir`` (default ``.vramscope``), named
after the test, for ``vramscope report``/``vramscope leaks``. Installed with
the package (entry point ``pytest11``); ``-p no:vramscope`` turns it off.
"""

from __future__ import annotations

import os
import re
from typing import Any, Generator

import pytest

MARKER = "vramscope"


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("vramscope")
    group.addoption(
        "--vramscope-dir",
        default=".vramscope",
        help="where snapshots of tests that exceed a @pytest.mark.vramscope limit are kept (default: .vramscope)",
    )


def pytest_configure(config: Any) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(max_peak=None, max_reserved=None, no_leaks=False, max_growth=None, **record_options): "
        "record the test's memory with vramscope and fail it when a limit is exceeded",
    )


def snapshot_path(item: Any) -> str:
    """Where the snapshot of ``item`` goes."""
    directory = item.config.getoption("--vramscope-dir")
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", item.nodeid).strip("_")[:180]
    return os.path.join(str(item.config.rootpath), directory, name + ".pickle")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: Any) -> Generator[None, None, Any]:
    marker = item.get_closest_marker(MARKER)
    if marker is None:
        return (yield)
    if marker.args:
        raise pytest.UsageError(f"@pytest.mark.{MARKER} takes keyword arguments only (max_peak=..., no_leaks=...)")
    from .testing import limits

    path = snapshot_path(item)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    lim = limits(path=path, **marker.kwargs)
    lim.__enter__()
    try:
        result = yield
    except BaseException as e:
        lim._recording.__exit__(type(e), e, e.__traceback__)
        raise
    lim.__exit__(None, None, None)  # raises MemoryLimitExceeded: the test fails
    item.user_properties.append(("vramscope", lim.result))
    return result
