"""Fault injection for tests and benchmarks: chosen worker commands fail on chosen tries, or run slowly. None of it is
in the product: a worker process started with ``fault_env(...)`` loads this module through
``fault_site/sitecustomize.py``, which wraps the worker's functions once its package is imported.

``FACEFUSION_TEST_FAULTS`` holds a JSON list such as
``[{"command": "swap-span", "indexes": [1, 2], "tries": [1], "retryable": true}]`` (fail) or
``[{"command": "swap-span", "indexes": [1], "frame_delay": 0.05}]`` (a slow node: every frame that worker decodes
takes that many more seconds). ``indexes`` are span indexes; the try number comes from FACEFUSION_TRY_NUMBER, which
the operators set. ``merge`` fails the ``merge`` command the same way, and the merge a worker makes of a work it
leaves complete. ``{"command": "merge", "hold_while": PATH}`` holds every merge at its start while PATH exists
(``merge_held``): what follows the merge in its run waits meanwhile.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

FAULTS_VARIABLE = "FACEFUSION_TEST_FAULTS"
SITE = Path(__file__).resolve().parent / "fault_site"  # its sitecustomize.py installs the faults in a worker process
WORKER_PACKAGE = "facefusion_provider.worker"

# The package is imported inside the functions below: sitecustomize imports this module in every process of a test
# with faults, Airflow's own included, and only a worker needs it.
Item = TypeVar("Item")
Patch = Callable[[object, str, object], None]


def fault_env(faults: Sequence[dict[str, Any]]) -> dict[str, str]:
    """The variables that make a worker process started with them meet ``faults``: the list, and ``PYTHONPATH`` with
    the site that installs them before this process's own."""
    python_path = os.environ.get("PYTHONPATH", "")
    return {
        FAULTS_VARIABLE: json.dumps(list(faults)),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(SITE), python_path])),
    }


def _matching(command: str, index: int | None) -> Iterator[dict[str, Any]]:
    from facefusion_provider.contract import worker_settings

    for fault in json.loads(os.environ.get(FAULTS_VARIABLE) or "[]"):
        if fault.get("command") != command:
            continue
        if index is not None and "indexes" in fault and index not in fault["indexes"]:
            continue
        if "tries" in fault and worker_settings().try_number not in fault["tries"]:
            continue
        yield fault


def maybe_inject(command: str, index: int | None = None) -> None:
    """Raise the configured failure if this command, span index and try number are listed."""
    from facefusion_provider.contract import worker_settings
    from facefusion_provider.exceptions import InvalidMediaError, RetryableError

    for fault in _matching(command, index):
        if "frame_delay" in fault or "hold_while" in fault:  # a slow node or a held merge: not a failure
            continue
        where = f"{command}" + (f" span {index}" if index is not None else "")
        where += f" try {worker_settings().try_number}"
        if fault.get("retryable", True):
            raise RetryableError(f"injected transient failure ({where})")
        raise InvalidMediaError(f"injected permanent failure ({where})")


def maybe_hold(command: str, index: int | None = None) -> None:
    """Wait while the ``hold_while`` file of a listed fault exists, having said so (``PATH.held``)."""
    for fault in _matching(command, index):
        gate = fault.get("hold_while")
        if gate and os.path.exists(gate):
            Path(f"{gate}.held").touch()
            while os.path.exists(gate):
                time.sleep(0.05)


@contextmanager
def merge_held(gate: Path, timeout: float = 240) -> Iterator[None]:
    """The first merge to start holds (a worker process with the fault ``hold_while: gate``), and every later one,
    until the block ends; the block begins once one holds."""
    held = Path(f"{gate}.held")
    held.unlink(missing_ok=True)
    gate.touch()
    try:
        deadline = time.monotonic() + timeout
        while not held.exists():
            assert time.monotonic() < deadline, f"no merge started within {timeout} s"
            time.sleep(0.05)
        yield
    finally:
        gate.unlink(missing_ok=True)


def _delayed(items: Generator[Item, None, None], delay: float) -> Generator[Item, None, None]:
    try:
        for item in items:
            time.sleep(delay)
            yield item
    finally:
        items.close()  # the worker closes the stream it was given: the decoder behind it closes with it


_working = threading.local()  # the span index of the frame work this thread is in


def _failing(command: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def failing(*args: Any, **kwargs: Any) -> Any:
        maybe_hold(command, kwargs.get("span"))
        maybe_inject(command, kwargs.get("span"))
        return function(*args, **kwargs)

    return failing


def _spanned(frame_work: Callable[..., AbstractContextManager[Any]]) -> Callable[..., AbstractContextManager[Any]]:
    """``span.frame_work`` that remembers its span's index for the frames' stream (``span`` is its 8th argument)."""

    @contextmanager
    def spanned(*args: Any) -> Iterator[Any]:
        previous = getattr(_working, "span", None)
        _working.span = args[7]
        try:
            with frame_work(*args) as encode:
                yield encode
        finally:
            _working.span = previous

    return spanned


def _slowed(stream: Callable[[Any], Generator[Any, None, None]]) -> Callable[[Any], Generator[Any, None, None]]:
    """``SegmentFrames.stream``, each frame after the ``frame_delay`` of ``swap-span`` for the span being worked."""

    def slowed(frames: Any) -> Generator[Any, None, None]:
        span = getattr(_working, "span", None)
        delay = sum(float(f["frame_delay"]) for f in _matching("swap-span", span) if "frame_delay" in f)
        items = stream(frames)
        return _delayed(items, delay) if span is not None and delay else items

    return slowed


def install(patch: Patch = setattr) -> None:
    """Wrap the worker's functions: the ``swap-span`` and ``merge`` commands fail as listed, the listed spans' frames
    come slowly. ``patch`` is ``setattr`` in a worker process, ``monkeypatch.setattr`` in a test's own process."""
    from facefusion_provider import worker
    from facefusion_provider.worker import healing, span
    from facefusion_provider.worker.segments import SegmentFrames

    patch(worker, "swap_span", _failing("swap-span", worker.swap_span))
    patch(worker, "merge", _failing("merge", worker.merge))
    # The merge a worker makes of the work it leaves complete (a span's, a standing worker's) fails the same way.
    patch(healing, "merge", _failing("merge", healing.merge))
    patch(span, "frame_work", _spanned(span.frame_work))
    patch(SegmentFrames, "stream", _slowed(SegmentFrames.stream))


class _InstallAfter(importlib.abc.Loader):
    """The worker package's own loader, then ``install``."""

    def __init__(self, loader: importlib.abc.Loader, finder: _WorkerImport) -> None:
        self.loader, self.finder = loader, finder

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        sys.meta_path.remove(self.finder)
        install()


class _WorkerImport(importlib.abc.MetaPathFinder):
    """Finds the worker package as the other finders do, with a loader that installs the faults after it. It stays
    until the package is executed: ``python -m`` asks for the package's spec before it imports it."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if name != WORKER_PACKAGE:
            return None
        for finder in sys.meta_path:
            spec = None if finder is self else finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _InstallAfter(spec.loader, self)
                return spec
        return None


def install_when_imported() -> None:
    """``install`` once this process imports the worker package: an Airflow process beside it never does."""
    if WORKER_PACKAGE in sys.modules:
        install()
    else:
        sys.meta_path.insert(0, _WorkerImport())
