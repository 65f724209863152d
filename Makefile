# Two commands for a fresh clone: `make demo` and `make test`. Both build the virtual environment from uv.lock first.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
UV := $(PYTHON) -m uv
EXTRAS := --extra airflow --extra worker --extra samples --extra dev

.PHONY: venv demo test lint typecheck layers unit bench gpu-wheels clean

venv: $(VENV)/.synced

# Bytecode compiled once here: every worker, Airflow task and test process would otherwise compile what it imports
# (0.5 s of CPU per worker start where the environment says PYTHONDONTWRITEBYTECODE).
$(VENV)/.synced: pyproject.toml uv.lock
	@$(UV) --version >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet "uv>=0.5"
	UV_COMPILE_BYTECODE=1 $(UV) sync --frozen --python $(PYTHON) $(EXTRAS)
	$(BIN)/python -m compileall -q plugins dags tests/support bench >/dev/null
	@touch $@

demo: venv
	PYTHONPATH=tests/support $(BIN)/python -m demo_airflow --out out

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: venv
	$(BIN)/mypy

layers: venv
	PYTHONPATH=. $(BIN)/lint-imports

# Test files side by side (a module's servers stay in one process): the integration tests mostly wait on Airflow.
PYTEST_WORKERS ?= 2

unit: venv
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadfile

test: lint typecheck layers unit

bench: venv
	$(BIN)/python bench/bench_media.py

# The wheels bench/gpu_check.sh installs on a GPU machine without the venv or a network (carry .whl there).
gpu-wheels:
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
		-d .whl -r bench/gpu-wheels.txt

clean:
	rm -rf $(VENV) out .mypy_cache .ruff_cache .pytest_cache
