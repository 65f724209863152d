"""Fault injection for tests only: makes chosen worker commands fail on chosen tries.

Enabled only when FACEFUSION_TEST_FAULTS holds a JSON list such as
``[{"command": "swap-chunk", "indexes": [1, 2], "tries": [1], "retryable": true}]``; the try number comes from
FACEFUSION_TRY_NUMBER, which the operators set. Production deployments never set either variable.
"""

from __future__ import annotations

import json
import os

from facefusion_provider.exceptions import InvalidMediaError, RetryableError

FAULTS_VARIABLE = "FACEFUSION_TEST_FAULTS"
TRY_NUMBER_VARIABLE = "FACEFUSION_TRY_NUMBER"


def maybe_inject(command: str, index: int | None = None) -> None:
    """Raise the configured failure if this command, chunk index and try number are listed."""
    spec = os.environ.get(FAULTS_VARIABLE)
    if not spec:
        return
    try_number = int(os.environ.get(TRY_NUMBER_VARIABLE, "1"))
    for fault in json.loads(spec):
        if fault.get("command") != command:
            continue
        if index is not None and "indexes" in fault and index not in fault["indexes"]:
            continue
        if "tries" in fault and try_number not in fault["tries"]:
            continue
        where = f"{command}" + (f" chunk {index}" if index is not None else "") + f" try {try_number}"
        if fault.get("retryable", True):
            raise RetryableError(f"injected transient failure ({where})")
        raise InvalidMediaError(f"injected permanent failure ({where})")
