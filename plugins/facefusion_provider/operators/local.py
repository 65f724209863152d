"""The worker-command operator of the local backend: the command runs as a subprocess of the Airflow worker, with
the argv a pod would get, started by a launcher (``SubprocessLauncher``; tests plug in their own)."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from airflow.sdk import BaseOperator, Context

from facefusion_provider.contract import TERMINATION_LOG_VARIABLE, parse_failure_report
from facefusion_provider.hooks.storage import FaceFusionStorageHook
from facefusion_provider.links.output import OUTPUT_LINKS
from facefusion_provider.operators.commands import WorkerCall, raise_for_failure, task_worker_env, worker_call_of
from facefusion_provider.operators.spans import nothing_to_do, record_line_progress
from facefusion_provider.settings import load_settings


class WorkerLauncher(Protocol):
    """Starts a worker command and waits for it: returns its exit code and its failure report (or last line)."""

    def run(self, argv: Sequence[str], env: Mapping[str, str], on_line: Callable[[str], None]) -> tuple[int, str]: ...

    def stop(self) -> None: ...


class SubprocessLauncher:
    """``program argv`` as a child process in a temporary folder, with ``env`` over this process's environment."""

    def __init__(self, program: Sequence[str]) -> None:
        self.program = list(program)
        self._process: subprocess.Popen[bytes] | None = None

    def run(self, argv: Sequence[str], env: Mapping[str, str], on_line: Callable[[str], None]) -> tuple[int, str]:
        with tempfile.TemporaryDirectory(prefix="facefusion-") as workdir:
            termination_log = Path(workdir, "termination-log")
            full_env = {**os.environ, **env, TERMINATION_LOG_VARIABLE: str(termination_log)}
            last_line = ""
            self._process = subprocess.Popen(
                [*self.program, *argv], env=full_env, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
            assert self._process.stdout is not None
            for raw in iter(self._process.stdout.readline, b""):
                last_line = raw.decode(errors="backslashreplace").rstrip()
                on_line(last_line)
            exit_code = self._process.wait()
            report = termination_log.read_text() if termination_log.exists() else last_line
        return exit_code, report

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)  # the worker unwinds: uploads aborted, temporary files removed


class FaceFusionWorkerOperator(BaseOperator):
    """Run ``facefusion-worker <command> --work-uri URI [flags]`` through a launcher (a subprocess by default).

    Work that is already done (this run's output carries this work's marker, a prepared work, a span whose segments
    are all committed) launches nothing and succeeds (never a skip: merge must run). A worker exit code for bad input
    fails the task at once; any other failure is retried with the task's backoff. A span's progress lines are kept in
    the task state store.

    :param command: ``prepare``, ``swap-span`` or ``merge``.
    :param work_uri: the shared work folder, from ``validate``.
    :param output_uri: this run's output, from ``validate``.
    :param output_done: whether ``validate`` found the output done already (decided once per run): nothing to do.
    :param run_key: this run's lease key, from ``validate``; the worker gets it as ``FACEFUSION_RUN_KEY``.
    :param run_lease: the lease ``validate`` wrote under ``run_key``: held again as the task starts.
    :param worker_args: flags after ``--work-uri`` (``prepare``'s inputs and options, ``merge``'s target and output).
    :param target_uri: ``swap-span``: this run's target (its own path to the work's content).
    :param span: ``swap-span``: one item of ``plan``'s list (mapped: one task per span).
    :param launcher: what starts the worker; default a subprocess of ``[facefusion] worker_command``.
    """

    template_fields: Sequence[str] = (
        *BaseOperator.template_fields,
        "work_uri",
        "output_uri",
        "output_done",
        "run_key",
        "run_lease",
        "worker_args",
        "target_uri",
        "span",
    )
    ui_color = "#d7ecff"
    operator_extra_links = OUTPUT_LINKS

    def __init__(
        self,
        *,
        command: str,
        work_uri: str,
        output_uri: str,
        output_done: bool = False,
        run_key: str = "",
        run_lease: dict[str, Any] | None = None,
        worker_args: Sequence[str] = (),
        target_uri: str | None = None,
        span: dict[str, Any] | None = None,
        launcher: WorkerLauncher | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.command = command
        self.work_uri = work_uri
        self.output_uri = output_uri
        self.output_done = output_done
        self.run_key = run_key
        self.run_lease = run_lease
        self.worker_args = worker_args
        self.target_uri = target_uri
        self.span = span
        self.launcher = launcher

    def call(self) -> WorkerCall:
        return worker_call_of(self)

    def execute(self, context: Context) -> None:
        call = self.call()
        hook = FaceFusionStorageHook()
        reason = nothing_to_do(hook, call, context)
        if reason:
            self.log.info("Nothing to do, no worker started: %s", reason)
            return
        self.launcher = self.launcher or SubprocessLauncher(load_settings().worker_command)
        # The AWS connection's credentials travel in the child's environment only: never argv, conf, XCom or logs.
        env = {**task_worker_env(context, os.environ, call), **hook.worker_environment()}
        argv = call.argv()
        self.log.info("Running worker: %s", argv)

        def on_line(line: str) -> None:
            self.log.info("%s", line)
            record_line_progress(context, line)

        exit_code, report = self.launcher.run(argv, env, on_line)
        self.log.info("Worker exited with return code %s", exit_code)
        if exit_code != 0:
            raise_for_failure(parse_failure_report(exit_code, report), context)

    def on_kill(self) -> None:
        if self.launcher is not None:
            self.launcher.stop()
