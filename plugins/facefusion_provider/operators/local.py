"""The local backend: each worker command runs as a subprocess of the Airflow worker, with the argv a pod would get."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.providers.standard.hooks.subprocess import SubprocessHook
from airflow.sdk import BaseOperator, Context

from facefusion_provider.hooks.storage import FaceFusionStorageHook
from facefusion_provider.operators.chunks import SwapChunkMixin
from facefusion_provider.operators.commands import (
    TERMINATION_LOG_VARIABLE,
    completed_work,
    fail_on_bad_input,
    parse_failure_report,
    raise_for_failure,
    worker_argv,
    worker_env,
)
from facefusion_provider.settings import load_settings


class LocalWorkerOperator(BaseOperator):
    """Run ``facefusion-worker <command> --job-uri URI [worker_args]`` as a subprocess.

    Work that is already done (a prepared job, an output whose marker names this job) launches no process. A worker exit
    code for bad input fails the task at once; any other failure is retried with the task's backoff.

    :param command: ``prepare``, ``swap-chunk`` or ``merge``.
    :param job_uri: the job folder, from ``validate``.
    :param worker_args: flags after ``--job-uri`` (``prepare``'s inputs and options).
    :param worker_command: the worker program; default from the ``[facefusion] worker_command`` setting.
    """

    template_fields: Sequence[str] = (*BaseOperator.template_fields, "job_uri", "worker_args")
    ui_color = "#d7ecff"

    def __init__(
        self,
        *,
        command: str,
        job_uri: str,
        worker_args: Sequence[str] = (),
        worker_command: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.command = command
        self.job_uri = job_uri
        self.worker_args = worker_args
        self.worker_command = worker_command
        self._subprocess: SubprocessHook | None = None

    @property
    def chunk_index(self) -> int | None:
        return None

    def execute(self, context: Context) -> None:
        hook = FaceFusionStorageHook()
        with fail_on_bad_input():
            reason = completed_work(hook, self.command, self.job_uri, self.chunk_index, worker_args=self.worker_args)
        if reason:
            self.log.info("Nothing to do, no worker started: %s", reason)
            return
        argv = worker_argv(self.command, self.job_uri, index=self.chunk_index, worker_args=self.worker_args)
        program = list(self.worker_command or load_settings().worker_command)
        # The AWS connection's credentials travel in the child's environment only: never argv, conf, XCom or logs.
        self._run_worker([*program, *argv], try_number=context["ti"].try_number, storage_env=hook.worker_environment())

    def _run_worker(self, command: list[str], *, try_number: int, storage_env: dict[str, str] | None = None) -> None:
        self._subprocess = SubprocessHook()
        with tempfile.TemporaryDirectory(prefix="facefusion-") as workdir:
            termination_log = Path(workdir, "termination-log")
            env = {
                **os.environ,
                **(storage_env or {}),
                **worker_env(try_number, os.environ),
                TERMINATION_LOG_VARIABLE: str(termination_log),
            }
            result = self._subprocess.run_command(command, env=env, cwd=workdir)
            report = termination_log.read_text() if termination_log.exists() else result.output
        if result.exit_code != 0:
            raise_for_failure(parse_failure_report(result.exit_code, report))

    def on_kill(self) -> None:
        if self._subprocess is not None:
            self._subprocess.send_sigterm()  # type: ignore[no-untyped-call]


class LocalSwapChunkOperator(SwapChunkMixin, LocalWorkerOperator):
    """``swap-chunk`` for one chunk of ``plan``'s list (mapped: one task per chunk). A committed chunk, or an output
    that already carries this job, succeeds at once without starting a process (never a skip: merge must run).

    :param chunk: ``{"index": 7, "start": 448, "end": 512, "label": "frames 448-511"}``.
    """

    template_fields: Sequence[str] = (*LocalWorkerOperator.template_fields, "chunk")

    def __init__(self, *, job_uri: str, chunk: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(command="swap-chunk", job_uri=job_uri, **kwargs)
        self.chunk = chunk
