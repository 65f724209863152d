"""The contract's ``WorkerSettings`` is the only reader of the worker's ``FACEFUSION_*`` variables: a scan of every
worker-side module (all but the Airflow side that pyproject's import-linter contract names) for reads of the
environment. Standard variables (``XDG_CACHE_HOME``, ``OTEL_*``, ``AWS_*``) are not ours and may be read where used."""

from __future__ import annotations

import ast
import importlib
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from facefusion_provider import contract

PACKAGE = Path(contract.__file__).parent
PYPROJECT = PACKAGE.parents[1] / "pyproject.toml"
OURS = "FACEFUSION_"
_READING_METHODS = frozenset({"get", "pop", "setdefault", "__getitem__", "__contains__"})

Namespace = Callable[[], dict[str, Any]]


def airflow_side() -> tuple[str, ...]:
    """The modules that run in Airflow's processes, as the import-linter contract names them."""
    contracts = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    (airflow,) = [c for c in contracts if c["name"].startswith("The Airflow side never imports")]
    return tuple(airflow["source_modules"])


def worker_side_modules() -> Iterator[tuple[str, Path]]:
    airflow = airflow_side()
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if module == contract.__name__ or any(module == a or module.startswith(a + ".") for a in airflow):
            continue
        yield module, path


def _is_environment(node: ast.expr) -> bool:
    """``os.environ``, or a mapping named ``environ`` (``from os import environ``, a parameter handed it)."""
    if isinstance(node, ast.Attribute):
        return node.attr == "environ" and isinstance(node.value, ast.Name) and node.value.id == "os"
    return isinstance(node, ast.Name) and node.id == "environ"


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _strings(value: object) -> set[str] | None:
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        value = value.values()
    if isinstance(value, (tuple, list, frozenset, set, type({}.values()))):
        items = list(value)
        if items and all(isinstance(item, str) for item in items):
            return set(items)
    return None


def _evaluate(expression: ast.expr, namespace: Namespace) -> set[str] | None:
    """The strings a constant, a module-level name or an attribute of an imported module stands for."""
    if isinstance(expression, ast.Constant):
        return _strings(expression.value)
    if isinstance(expression, ast.Call) and isinstance(expression.func, ast.Attribute) and not expression.args:
        return _evaluate(expression.func.value, namespace) if expression.func.attr == "values" else None
    dotted = _dotted(expression)
    if dotted is None:
        return None
    value: Any = namespace()
    for index, name in enumerate(dotted.split(".")):
        value = value.get(name) if index == 0 else getattr(value, name, None)
        if value is None:
            return None
    return _strings(value)


def _loop_sources(tree: ast.AST) -> dict[int, dict[str, ast.expr]]:
    """For every node inside a ``for`` loop or a comprehension: the loop variables and what they iterate."""
    sources: dict[int, dict[str, ast.expr]] = {}

    def visit(node: ast.AST, bound: dict[str, ast.expr]) -> None:
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name):
            bound = {**bound, node.target.id: node.iter}
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            for generator in node.generators:
                if isinstance(generator.target, ast.Name):
                    bound = {**bound, generator.target.id: generator.iter}
        sources[id(node)] = bound
        for child in ast.iter_child_nodes(node):
            visit(child, bound)

    visit(tree, {})
    return sources


def environment_reads(tree: ast.AST, namespace: Namespace) -> list[tuple[int, str]]:
    """Reads of one of our variables from any mapping, and reads of the environment with a key not known to be
    someone else's: (line, what)."""
    loops = _loop_sources(tree)
    found: list[tuple[int, str]] = []

    def keys(key: ast.expr, at: ast.AST) -> set[str] | None:
        if isinstance(key, ast.Name) and key.id in loops[id(at)]:
            return _evaluate(loops[id(at)][key.id], namespace)
        return _evaluate(key, namespace)

    def judge(receiver: ast.expr | None, key: ast.expr, at: ast.expr) -> None:
        known = keys(key, at)
        environment = receiver is None or _is_environment(receiver)
        if known is None and environment:
            found.append((at.lineno, f"reads the environment with {ast.unparse(key)}, not a known variable"))
        ours = sorted(name for name in known or () if name.startswith(OURS))
        if ours:
            found.append((at.lineno, f"reads {', '.join(ours)} itself"))

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            function = node.func
            if _dotted(function) in ("os.getenv", "getenv"):
                judge(None, node.args[0], node)
            elif isinstance(function, ast.Attribute) and function.attr in _READING_METHODS:
                judge(function.value, node.args[0], node)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            judge(node.value, node.slice, node)
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            judge(node.comparators[0], node.left, node)
    return sorted(found)


def _imported(module: str) -> Namespace:
    """The module's globals, imported on first need (never a ``__main__``: importing it runs the program)."""
    loaded: list[ModuleType] = []

    def namespace() -> dict[str, Any]:
        if module.endswith(".__main__"):
            return {}
        if not loaded:
            loaded.append(importlib.import_module(module))
        return vars(loaded[0])

    return namespace


def _scan(source: str) -> list[tuple[int, str]]:
    namespace: dict[str, Any] = {}
    exec(compile(source, "<scanned>", "exec"), namespace)  # the test's own snippet
    return environment_reads(ast.parse(source), lambda: namespace)


def test_no_worker_side_module_reads_our_variables_from_the_environment() -> None:
    modules = dict(worker_side_modules())
    readers = [
        f"{path.relative_to(PACKAGE)}:{line}: {what}"
        for module, path in modules.items()
        for line, what in environment_reads(ast.parse(path.read_text()), _imported(module))
    ]

    assert {"facefusion_provider.storage.filesystems", "facefusion_provider.telemetry.metrics"} <= modules.keys()
    assert "facefusion_provider.operators.local" not in modules  # the Airflow side forwards the scheduler's
    assert readers == [], "\n".join(readers)


def test_the_scan_finds_every_way_of_reading_our_variables() -> None:
    readers = _scan(
        "import os\n"
        "from facefusion_provider.contract import GPU_MODEL_VARIABLE\n"
        "OURS = ('FACEFUSION_METRIC_DAG_ID', 'NODE_NAME')\n"
        "def literal(): return os.environ.get('FACEFUSION_MERGE_PREFETCH')\n"
        "def named(variable): return os.environ.get(variable, '')\n"
        "def handed(environ): return environ.get(GPU_MODEL_VARIABLE)\n"
        "def looped(environ): return [environ[name] for name in OURS]\n"
        "def getenv(): return os.getenv('FACEFUSION_TRY_NUMBER')\n"
        "def contains(): return 'FACEFUSION_TASK_KEY' in os.environ\n"
    )

    assert [line for line, _ in readers] == [4, 5, 6, 7, 8, 9]
    assert readers[2] == (6, "reads FACEFUSION_GPU_MODEL itself")


def test_the_scan_leaves_standard_variables_and_the_contract_alone() -> None:
    assert (
        _scan(
            "import os\n"
            "from facefusion_provider.contract import WorkerSettings\n"
            "GPUS = ('CUDA_VISIBLE_DEVICES', 'NVIDIA_VISIBLE_DEVICES')\n"
            "def cache(): return os.environ.get('XDG_CACHE_HOME')\n"
            "def gpus(environ): return [environ.get(name) for name in GPUS]\n"
            "def settings(): return WorkerSettings.from_environ(os.environ)\n"
        )
        == []
    )
