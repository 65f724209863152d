"""The local backend: each worker command runs as a subprocess of the Airflow worker, with the argv a pod would get."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator, Context

from facefusion_provider.hooks.storage import FaceFusionStorageHook
from facefusion_provider.operators.commands import (
    TERMINATION_LOG_VARIABLE,
    completed_work,
    fail_on_bad_input,
    parse_failure_report,
    raise_for_failure,
    task_worker_env,
    worker_argv,
)
from facefusion_provider.operators.links import OUTPUT_LINKS
from facefusion_provider.operators.spans import SwapSpanMixin
from facefusion_provider.settings import load_settings


class LocalWorkerOperator(BaseOperator):
    """Run ``facefusion-worker <command> --work-uri URI [worker_args]`` as a subprocess.

    Work that is already done (this run's output carries this work's marker, a prepared work) launches no process. A
    worker exit code for bad input fails the task at once; any other failure is retried with the task's backoff.

    :param command: ``prepare``, ``swap-span`` or ``merge``.
    :param work_uri: the shared work folder, from ``validate``.
    :param output_uri: this run's output, from ``validate``: when it is done, nothing is left to do.
    :param worker_args: flags after ``--work-uri`` (``prepare``'s inputs and options, ``merge``'s target and output).
    :param worker_command: the worker program; default from the ``[facefusion] worker_command`` setting.
    """

    template_fields: Sequence[str] = (*BaseOperator.template_fields, "work_uri", "output_uri", "worker_args")
    ui_color = "#d7ecff"
    operator_extra_links = OUTPUT_LINKS

    def __init__(
        self,
        *,
        command: str,
        work_uri: str,
        output_uri: str,
        worker_args: Sequence[str] = (),
        worker_command: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.command = command
        self.work_uri = work_uri
        self.output_uri = output_uri
        self.worker_args = worker_args
        self.worker_command = worker_command
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def span_or_none(self) -> dict[str, Any] | None:
        return None

    def worker_arguments(self) -> list[str]:
        return [str(arg) for arg in self.worker_args]

    def before_launch(self, hook: FaceFusionStorageHook, work_uri: str, context: Mapping[str, Any]) -> None:
        """Called just before the worker starts (a span logs where it resumes)."""

    def on_worker_line(self, context: Mapping[str, Any], line: str) -> None:
        """Called with every line the worker writes (a span records its progress)."""

    def execute(self, context: Context) -> None:
        hook = FaceFusionStorageHook()
        with fail_on_bad_input(context):
            reason = completed_work(hook, self.command, self.work_uri, self.output_uri, self.span_or_none)
            if not reason:
                self.before_launch(hook, self.work_uri, context)
        if reason:
            self.log.info("Nothing to do, no worker started: %s", reason)
            return
        argv = worker_argv(self.command, self.work_uri, self.worker_arguments())
        program = list(self.worker_command or load_settings().worker_command)
        env = task_worker_env(context, os.environ, self.work_uri)
        # The AWS connection's credentials travel in the child's environment only: never argv, conf, XCom or logs.
        self._run_worker([*program, *argv], context, {**env, **hook.worker_environment()})

    def _run_worker(self, command: list[str], context: Context, env: Mapping[str, str]) -> None:
        with tempfile.TemporaryDirectory(prefix="facefusion-") as workdir:
            termination_log = Path(workdir, "termination-log")
            full_env = {**os.environ, **env, TERMINATION_LOG_VARIABLE: str(termination_log)}
            self.log.info("Running command: %s", command)
            last_line = ""
            self._process = subprocess.Popen(
                command, env=full_env, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
            assert self._process.stdout is not None
            for raw in iter(self._process.stdout.readline, b""):
                last_line = raw.decode(errors="backslashreplace").rstrip()
                self.log.info("%s", last_line)
                self.on_worker_line(context, last_line)
            exit_code = self._process.wait()
            self.log.info("Command exited with return code %s", exit_code)
            report = termination_log.read_text() if termination_log.exists() else last_line
        if exit_code != 0:
            raise_for_failure(parse_failure_report(exit_code, report), context)

    def on_kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)  # the worker unwinds: uploads aborted, temporary files removed


class LocalSwapSpanOperator(SwapSpanMixin, LocalWorkerOperator):
    """``swap-span`` for one span of ``plan``'s list (mapped: one task per span). A span whose segments are all
    committed, or an output that already carries this work, succeeds at once without starting a process (never a
    skip: merge must run).

    :param target_uri: this run's target (its own path to the work's content).
    :param span: one item of ``plan``'s list.
    """

    template_fields: Sequence[str] = (*LocalWorkerOperator.template_fields, "target_uri", "span")

    def __init__(self, *, work_uri: str, output_uri: str, target_uri: str, span: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(command="swap-span", work_uri=work_uri, output_uri=output_uri, **kwargs)
        self.target_uri = target_uri
        self.span = span

    @property
    def span_or_none(self) -> dict[str, Any] | None:
        return self.span
