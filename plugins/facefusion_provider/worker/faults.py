"""Fault injection for tests only: makes chosen worker commands fail on chosen tries, or run slowly.

Enabled only when FACEFUSION_TEST_FAULTS holds a JSON list such as
``[{"command": "swap-span", "indexes": [1, 2], "tries": [1], "retryable": true}]`` (fail) or
``[{"command": "swap-span", "indexes": [1], "frame_delay": 0.05}]`` (a slow node: every frame that worker decodes
takes that many more seconds). ``indexes`` are span indexes; the try number comes from FACEFUSION_TRY_NUMBER, which
the operators set. Production deployments never set either variable.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any, TypeVar

from facefusion_provider.contract import worker_settings
from facefusion_provider.exceptions import InvalidMediaError, RetryableError

Item = TypeVar("Item")


def _matching(command: str, index: int | None) -> Iterator[dict[str, Any]]:
    settings = worker_settings()
    if not settings.test_faults:
        return
    for fault in json.loads(settings.test_faults):
        if fault.get("command") != command:
            continue
        if index is not None and "indexes" in fault and index not in fault["indexes"]:
            continue
        if "tries" in fault and settings.try_number not in fault["tries"]:
            continue
        yield fault


def maybe_inject(command: str, index: int | None = None) -> None:
    """Raise the configured failure if this command, span index and try number are listed."""
    for fault in _matching(command, index):
        if "frame_delay" in fault:
            continue
        where = f"{command}" + (f" span {index}" if index is not None else "")
        where += f" try {worker_settings().try_number}"
        if fault.get("retryable", True):
            raise RetryableError(f"injected transient failure ({where})")
        raise InvalidMediaError(f"injected permanent failure ({where})")


def slowed(items: Iterator[Item], index: int) -> Iterator[Item]:
    """``items``, each after the configured ``frame_delay`` of ``swap-span`` for span ``index`` (if any)."""
    delay = sum(float(fault["frame_delay"]) for fault in _matching("swap-span", index) if "frame_delay" in fault)
    if not delay:
        return items
    return _delayed(items, delay)


def _delayed(items: Iterator[Item], delay: float) -> Iterator[Item]:
    for item in items:
        time.sleep(delay)
        yield item
