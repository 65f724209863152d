"""On a fresh machine the README's ``make test`` never errors for a missing Debian package: every test reaches for a
system program through ``tests/support/system_binaries.py``, which skips naming the package. A scan of tests/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import system_binaries
from system_binaries import find_binary, missing, require_binary

TESTS = Path(__file__).resolve().parents[1]
HELPER = Path(system_binaries.__file__).resolve()
GUARDS = frozenset({"require_binary", "find_binary", "needs_binary"})
RUNNERS = frozenset(
    {"subprocess.run", "subprocess.Popen", "subprocess.call", "subprocess.check_call", "subprocess.check_output"}
)
SYSTEM_FOLDERS = ("/bin/", "/sbin/", "/usr/bin/", "/usr/sbin/", "/usr/lib/", "/usr/libexec/", "/usr/local/bin/")


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


def _is_system_path(value: object) -> bool:
    """A program's path in a system folder (``/usr/bin/prometheus``), not prose that mentions one."""
    if not isinstance(value, str) or any(character.isspace() for character in value):
        return False
    return any(value.startswith(folder) and len(value) > len(folder) for folder in SYSTEM_FOLDERS)


def unguarded(source: str) -> list[tuple[int, str]]:
    """Where ``source`` reaches for a system program without the helper: (line, what)."""
    tree = ast.parse(source)
    guarded = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _dotted(node.func).rsplit(".", 1)[-1] in GUARDS
        for inner in ast.walk(node)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _dotted(node.func) in ("shutil.which", "which"):
            found.append((node.lineno, "shutil.which: use find_binary or require_binary"))
        elif isinstance(node, ast.Call) and _dotted(node.func) in RUNNERS and node.args:
            argv = node.args[0]
            program = argv.elts[0] if isinstance(argv, (ast.List, ast.Tuple)) and argv.elts else argv
            if isinstance(program, ast.Constant) and isinstance(program.value, str):
                found.append((node.lineno, f"runs {program.value!r} by name: use require_binary"))
        elif isinstance(node, ast.Constant) and _is_system_path(node.value) and id(node) not in guarded:
            found.append((node.lineno, f"names {node.value}: use require_binary"))
    return sorted(found)


def test_every_test_reaches_for_a_system_program_through_the_helper() -> None:
    scanned = [path for path in sorted(TESTS.rglob("*.py")) if path.resolve() != HELPER]
    places = [
        f"{path.relative_to(TESTS)}:{line}: {what}" for path in scanned for line, what in unguarded(path.read_text())
    ]

    assert len(scanned) > 100 and TESTS / "integration" / "browser" / "conftest.py" in scanned
    assert places == [], "\n".join(places)


def test_the_scan_finds_a_program_reached_for_without_the_helper() -> None:
    source = (
        "import shutil, subprocess\n"
        "from pathlib import Path\n"
        "PROMETHEUS = Path('/usr/bin/prometheus')\n"
        "promtool = shutil.which('promtool')\n"
        "subprocess.run(['podman', 'info'], check=False)\n"
        "subprocess.Popen('chromium --headless')\n"
        "pg_ctl = require_binary('pg_ctl', package='postgresql', also=['/usr/lib/postgresql/*/bin/pg_ctl'])\n"
        "subprocess.run([pg_ctl, 'start'], check=True)\n"
        'assert \'ENTRYPOINT ["/usr/bin/tini", "--"]\' in dockerfile\n'
    )

    assert [line for line, _ in unguarded(source)] == [3, 4, 5, 6]


def test_a_missing_program_skips_naming_its_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    program = tmp_path / "prometheus"

    with pytest.raises(pytest.skip.Exception, match="apt-get install prometheus"):
        require_binary("prometheus", package="prometheus")
    assert missing("pg_ctl", "postgresql") == "needs pg_ctl: apt-get install postgresql (.ci/run does it as root)"

    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    assert require_binary("prometheus", package="prometheus") == str(program)
    for version in ("9", "15"):
        folder = tmp_path / "lib" / version / "bin"
        folder.mkdir(parents=True)
        (folder / "pg_ctl").write_text("#!/bin/sh\n")
        (folder / "pg_ctl").chmod(0o755)
    assert find_binary("pg_ctl", also=[str(tmp_path / "lib" / "*" / "bin" / "pg_ctl")]) == str(
        tmp_path / "lib" / "15" / "bin" / "pg_ctl"
    )  # the newest, by number
