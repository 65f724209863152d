"""The gauge KEDA scales on leaves the triggerer: a span wait's trigger, run as the triggerer runs it (a process forked
from one that imported the triggerer, ``[metrics] otel_on``), pushes ``airflow.facefusion.segments.waiting`` with
the run's labels to a real OTLP endpoint while it waits, and 0 once the span is committed.

The triggerer initialises Airflow core's copy of the stats module itself; the Task SDK's copy, which the provider's
helpers use, is initialised when ``airflow.sdk.serde`` is imported, which the triggerer does. Were that to change, the
figure would silently stay in the triggerer: this test is what says so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from otlp_receiver import OtlpReceiver, child_environment

from facefusion_provider import metric_names as names

SUPPORT = Path(__file__).resolve().parents[2] / "support"

TRIGGERER = """
import asyncio, os, sys, time
sys.path.insert(0, sys.argv[1])
import airflow.jobs.triggerer_job_runner  # what `airflow triggerer` imports before it forks its trigger runner
from pathlib import Path
from written import commit_segment, write_work
from facefusion_provider.triggers.span_committed import SpanCommittedTrigger

work = write_work(Path(sys.argv[2]), Path(sys.argv[2]) / "out.mp4", frames=40, segment_size=8)
commit_segment(work, 0)
pid = os.fork()
if pid == 0:  # the trigger runner
    trigger = SpanCommittedTrigger(work.work_uri, 0, 5, poll_seconds=0.1, dag_id="facefusion_swap", run_id="manual__k")

    async def wait() -> None:
        events = trigger.run()
        first = asyncio.ensure_future(anext(events))
        await asyncio.sleep(float(sys.argv[3]))  # a few exports of the waiting count
        for index in range(1, 5):
            commit_segment(work, index)
        print((await asyncio.wait_for(first, 20)).payload, flush=True)
        await events.aclose()
        await asyncio.sleep(float(sys.argv[3]))  # the long-lived process exports the 0 on its schedule

    asyncio.run(wait())
    os._exit(0)  # as a forked child ends: no atexit flush, only the periodic exports count
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_the_triggerer_pushes_the_waiting_segments_then_zero(otlp_receiver: OtlpReceiver, tmp_path: Path) -> None:
    env = child_environment(
        AIRFLOW_HOME=str(tmp_path / "airflow"),
        AIRFLOW__METRICS__OTEL_ON="True",
        OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=otlp_receiver.endpoint,
        OTEL_METRIC_EXPORT_INTERVAL="300",
    )
    result = subprocess.run(
        [sys.executable, "-c", TRIGGERER, str(SUPPORT), str(tmp_path / "root"), "2"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "'status': 'committed'" in result.stdout

    run = {"dag_id": "facefusion_swap", "run_id": "manual__k"}
    values = [
        point.value
        for point in otlp_receiver.points()
        if point.name == names.SEGMENTS_WAITING.name and all(point.attributes.get(k) == v for k, v in run.items())
    ]
    assert 4 in values  # 4 of the span's 5 segments waited while no worker had committed them
    assert values[-1] == 0
