"""Acceptance scenarios on a real multi-process Airflow (scheduler, dag-processor, API server and triggerer as separate
processes, LocalExecutor, Postgres) with the shared work and the outputs on S3: moto's server behind a recording proxy,
reached only through an Airflow AWS connection (the cluster has no AWS variables), so every exclusive create (work.json,
claims, segment markers) is a real conditional PUT (``If-None-Match: *``).

One cluster for the module:

- two runs over one input at once, each to its own output: both outputs right, each segment computed once;
- a second run triggered while the first is finishing (its merge held): both outputs right, nothing computed again,
  and the first run's cleanup keeps the work for the second;
- an output in a bucket that does not exist fails at ``validate``, naming the field, without retries;
- a store that ignores ``If-None-Match`` is refused by the span workers with a clear error, before any segment is
  computed (it would let two workers commit one segment).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from airflow_harness import SWAP_TASKS, conf, frame_md5s, make_clip, make_image
from faults import fault_env, merge_held
from multiprocess_harness import AirflowCluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "s3"))  # the S3 servers of tests/integration/s3
from s3_servers import REGION, FaultyProxy, MotoServer

pytestmark = pytest.mark.slow

CONN_ID = "facefusion_s3"
# Distinct credentials (moto takes any): the metadata database is searched for them after the runs.
ACCESS_KEY_ID, SECRET_ACCESS_KEY = "AKIAFACEFUSIONTEST42", "facefusion-secret-never-stored-42"
SEGMENT_FRAMES = 4
CLIP_FRAMES = 6 * SEGMENT_FRAMES
BUCKETS = ("videos", "work")


@dataclass(frozen=True)
class S3Cluster:
    cluster: AirflowCluster
    moto: MotoServer
    proxy: FaultyProxy
    media: Path

    @property
    def merge_gate(self) -> Path:
        """While this file exists a merge holds at its start (``faults.merge_held``)."""
        return self.media / "merge-gate"

    def client(self) -> Any:
        return self.moto.client()

    def upload(self, local: Path, key: str) -> str:
        self.client().upload_file(str(local), "videos", key)
        return f"s3://videos/{key}"

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))

    def frames(self, uri: str, folder: Path) -> list[str]:
        """Per-frame md5 of an object, downloaded straight from moto."""
        key = uri.removeprefix("s3://videos/")
        local = folder / key.replace("/", "_")
        self.client().download_file("videos", key, str(local))
        return frame_md5s(local)

    def pass_through(self, target: str, output: str) -> dict[str, Any]:
        """No processors and a lossless encode: an output must show exactly its input's frames."""
        return conf(
            ["s3://videos/in/face.png"],
            target,
            output,
            segment_size=SEGMENT_FRAMES,
            processors=[],
            output_video_quality=100,
        )


@pytest.fixture(scope="module")
def s3_cluster(
    airflow_cluster_factory: Callable[..., AirflowCluster], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[S3Cluster]:
    moto = MotoServer()  # the module's own: its proxy plays a store without conditional writes in one test
    proxy = FaultyProxy(moto.port)
    try:
        for bucket in BUCKETS:
            moto.client().create_bucket(Bucket=bucket)
        media = tmp_path_factory.mktemp("s3_media")
        make_image(media / "face.png")
        moto.client().upload_file(str(media / "face.png"), "videos", "in/face.png")
        for seed in range(3):
            make_clip(media / f"clip{seed}.mp4", CLIP_FRAMES, seed=10 + seed)
            moto.client().upload_file(str(media / f"clip{seed}.mp4"), "videos", f"in/clip{seed}.mp4")
        connection = {
            "conn_type": "aws",
            "login": ACCESS_KEY_ID,
            "password": SECRET_ACCESS_KEY,
            "extra": {"endpoint_url": proxy.url, "region_name": REGION},
        }
        settings = {"work_root": "s3://work/airflow", "aws_conn_id": CONN_ID, "span_wave": "2"}  # two spans a run
        env = {
            f"AIRFLOW_CONN_{CONN_ID.upper()}": json.dumps(connection),
            **fault_env([{"command": "merge", "hold_while": str(media / "merge-gate")}]),
        }
        cluster = airflow_cluster_factory(settings, env, drop_env=("AWS_", "FACEFUSION_"))
        yield S3Cluster(cluster, moto, proxy, media)
    finally:
        proxy.stop()
        moto.stop()


def span_summaries(cluster: AirflowCluster, run_id: str) -> list[dict[str, Any]]:
    """The JSON summary of every span worker of the run, every try (a span with nothing to do starts none)."""
    summaries = []
    for (task, index), (_, tries) in cluster.task_states(run_id).items():
        if task == SWAP_TASKS.swap:
            for number in range(1, tries + 1):
                summary = cluster.worker_summary(run_id, task, number, map_index=index)
                if summary is not None:
                    summaries.append(summary)
    return summaries


def computed(cluster: AirflowCluster, *run_ids: str) -> tuple[int, int, int]:
    """(segments committed, frames encoded, segment results discarded) by the span workers of these runs."""
    summaries = [summary for run_id in run_ids for summary in span_summaries(cluster, run_id)]
    return tuple(sum(int(s[key]) for s in summaries) for key in ("committed", "frames", "discarded"))  # type: ignore[return-value]


def test_two_runs_over_one_input_compute_each_segment_once(s3_cluster: S3Cluster, tmp_path: Path) -> None:
    s3, cluster = s3_cluster, s3_cluster.cluster
    target = "s3://videos/in/clip0.mp4"
    outputs = ["s3://videos/out/two/a.mp4", "s3://videos/out/two/b.mp4"]
    s3.proxy.forget_exchanges()

    runs = [cluster.trigger(s3.pass_through(target, output)) for output in outputs]

    assert [cluster.wait(run_id) for run_id in runs] == ["success", "success"], [cluster.task_states(r) for r in runs]
    expected = frame_md5s(s3.media / "clip0.mp4")
    assert [s3.frames(output, tmp_path) for output in outputs] == [expected, expected]
    assert computed(cluster, *runs) == (CLIP_FRAMES // SEGMENT_FRAMES, CLIP_FRAMES, 0)
    marker_puts = [
        e for e in s3.proxy.exchanges() if e.method == "PUT" and "/segments/0" in e.path and ".json" in e.path
    ]
    assert marker_puts and all(e.headers.get("if-none-match") == "*" for e in marker_puts), marker_puts
    assert s3.keys("work", "airflow/work/") == []  # the last cleanup removed the shared work


def test_a_run_triggered_while_another_finishes_reuses_its_segments(s3_cluster: S3Cluster, tmp_path: Path) -> None:
    s3, cluster = s3_cluster, s3_cluster.cluster
    target = "s3://videos/in/clip1.mp4"
    first_output, second_output = "s3://videos/out/again/first.mp4", "s3://videos/out/again/second.mp4"
    first = cluster.trigger(s3.pass_through(target, first_output))

    with merge_held(s3.merge_gate):  # the first run is finishing: its merge has begun
        second = cluster.trigger(s3.pass_through(target, second_output))
        deadline = time.monotonic() + 120
        while cluster.task_states(second).get((SWAP_TASKS.validate, -1), (None,))[0] != "success":
            assert time.monotonic() < deadline, cluster.task_states(second)
            time.sleep(0.5)

    assert [cluster.wait(first), cluster.wait(second)] == ["success", "success"]
    expected = frame_md5s(s3.media / "clip1.mp4")
    assert [s3.frames(first_output, tmp_path), s3.frames(second_output, tmp_path)] == [expected, expected]
    assert computed(cluster, first, second) == (CLIP_FRAMES // SEGMENT_FRAMES, CLIP_FRAMES, 0)
    assert span_summaries(cluster, second) == []  # every span of the second run found its segments committed
    kept = cluster.task_log_lines(first, SWAP_TASKS.cleanup, 1)
    assert any("still use it" in line for line in kept), kept
    assert s3.keys("work", "airflow/work/") == []


def test_an_output_in_a_missing_bucket_fails_at_validate(s3_cluster: S3Cluster) -> None:
    s3, cluster = s3_cluster, s3_cluster.cluster
    run_id = cluster.trigger(s3.pass_through("s3://videos/in/clip2.mp4", "s3://no-such-bucket/out.mp4"))

    assert cluster.wait(run_id) == "failed"
    states = cluster.task_states(run_id)
    assert states[(SWAP_TASKS.validate, -1)] == ("failed", 1), states
    failure = cluster.xcom(run_id, SWAP_TASKS.validate, "failure")
    assert failure["message"].startswith("output_uri: cannot write there"), failure
    assert "no-such-bucket" in failure["message"], failure
    assert "no-such-bucket" not in [bucket["Name"] for bucket in s3.client().list_buckets()["Buckets"]]


def test_a_store_that_ignores_conditional_writes_is_refused(s3_cluster: S3Cluster) -> None:
    s3, cluster = s3_cluster, s3_cluster.cluster
    s3.proxy.ignore_conditional_writes()  # a create S3 refuses (412) is answered 200, as such a store would
    try:
        run_id = cluster.trigger(s3.pass_through("s3://videos/in/clip2.mp4", "s3://videos/out/unconditional.mp4"))
        assert cluster.wait(run_id) == "failed", cluster.task_states(run_id)
    finally:
        s3.proxy.clear()

    states = cluster.task_states(run_id)
    spans = {index: state for (task, index), state in states.items() if task == SWAP_TASKS.swap}
    assert spans and set(spans.values()) == {("failed", 1)}, states  # bad configuration: no retries
    for index in spans:
        failure = cluster.xcom(run_id, SWAP_TASKS.swap, "failure", map_index=index)
        assert failure["failure_class"] == "storage_denied", failure
        assert "this store ignores conditional writes (If-None-Match: *)" in failure["message"], failure
    assert [key for key in s3.keys("work", "airflow/work/") if "/segments/" in key] == []  # nothing computed
    assert "out/unconditional.mp4" not in s3.keys("videos", "out/")


def test_no_credential_is_stored_in_the_metadata_database(s3_cluster: S3Cluster) -> None:
    """After the module's runs on S3 (their tasks' XComs, extra links, logs' metadata, notes): every row of every
    table of Airflow's database holds neither the connection's access key id nor its secret, except the connection
    itself, which lives in the environment here (``AIRFLOW_CONN_...``), not in a table."""
    import psycopg2

    url = s3_cluster.cluster.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].replace(
        "postgresql+psycopg2://", "postgresql://"
    )
    found: dict[str, int] = {}
    connection = psycopg2.connect(url)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            tables = [row[0] for row in cursor.fetchall()]
            for table in tables:
                cursor.execute(f'SELECT * FROM "{table}"')  # names from the catalogue
                for row in cursor.fetchall():
                    text = " ".join(
                        bytes(value).decode("latin-1") if isinstance(value, memoryview) else str(value) for value in row
                    )
                    if ACCESS_KEY_ID in text or SECRET_ACCESS_KEY in text:
                        found[table] = found.get(table, 0) + 1
    finally:
        connection.close()
    assert len(tables) > 20 and "xcom" in tables
    assert found == {}, f"credentials in the metadata database: {found}"
