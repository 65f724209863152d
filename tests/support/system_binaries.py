"""The system programs tests run (Debian packages; ``.ci/run`` installs them as root on a fresh machine): found here,
or the test skips naming the package. Every test reaches for a system program through this module
(``tests/unit/test_system_binaries.py`` checks it), so a machine without one skips instead of erroring."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest


def find_binary(name: str, *, also: Sequence[str] = ()) -> str | None:
    """``name`` on PATH, else the newest match of the glob patterns ``also`` (Debian keeps some programs off PATH),
    else None."""
    found = shutil.which(name)
    if found:
        return found
    for pattern in also:
        for path in sorted(glob.glob(pattern), key=_version_order, reverse=True):
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
    return None


def require_binary(name: str, *, package: str, also: Sequence[str] = ()) -> str:
    """The path of ``name``, or a skip naming the Debian package that has it."""
    found = find_binary(name, also=also)
    if found is None:
        pytest.skip(missing(name, package))
    return found


def needs_binary(name: str, *, package: str, also: Sequence[str] = ()) -> pytest.MarkDecorator:
    """A mark that skips a test (or a module, as ``pytestmark``) on a machine without ``name``."""
    return pytest.mark.skipif(find_binary(name, also=also) is None, reason=missing(name, package))


Promtool = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def promtool() -> Promtool:
    """Debian's promtool (the prometheus package), run on its arguments; a skip without it."""
    program = require_binary("promtool", package="prometheus")

    def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([program, *map(str, args)], capture_output=True, text=True, check=False, timeout=60)

    return run


def missing(name: str, package: str) -> str:
    return f"needs {name}: apt-get install {package} (.ci/run does it as root)"


def _version_order(path: str) -> list[tuple[int, int | str]]:
    """``/usr/lib/postgresql/15/bin`` after ``.../9/bin``: numbers compare as numbers."""
    return [(1, int(part)) if part.isdigit() else (0, part) for part in re.split(r"(\d+)", path)]
