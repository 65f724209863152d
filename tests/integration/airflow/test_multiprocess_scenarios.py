"""Acceptance scenarios on a real multi-process Airflow (scheduler, dag-processor, API server and triggerer as separate
processes, LocalExecutor, Postgres), local backend, shared work on the local disk, driven over REST.

One cluster for the module, one span per run (``span_wave`` 1), allow-lists on, and the worker's fault switch slowing
the first try of every span (so a test can kill it in the middle):

- ``kill -9`` of a span's worker mid-span (issue 13): the retry resumes at the first uncommitted segment, committed
  segment files are never rewritten, the killed worker's temporary folder is gone, and the output equals an
  uninterrupted run's, frame for frame;
- clearing a succeeded span (with what follows it) in a finished run: the run ends ``success`` again, no worker starts,
  the output is untouched;
- bad input fails at ``validate`` without retries, naming the field, writing nothing at the output; an execution
  provider this machine lacks fails in the span's worker (``prepare`` computes the identity on the CPU, as it may
  run off the GPU pool), also without retries.

- ``kill -9`` of the scheduler mid-run, restarted as a supervisor would: the run ends with its output frame for frame;
- after ``stop`` no process of the cluster is left.

(Two outputs over one input, a re-trigger while a run finishes, a missing bucket and a store without conditional
writes: ``test_multiprocess_s3.py``.)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import onnxruntime
import pytest
from airflow_harness import SWAP_TASKS, conf, frame_md5s, keyframes, make_clip, make_image
from faults import fault_env, merge_held
from multiprocess_harness import AirflowCluster
from people import people

from facefusion_provider.media.images import encode_image
from facefusion_provider.operators.params import titled_reason
from facefusion_provider.worker import run as run_uninterrupted

pytestmark = pytest.mark.slow

SEGMENT_FRAMES = 4
RESUME_SEGMENTS = 12
KILL_AFTER_SEGMENTS = 3  # committed before the kill: enough that a retry starting over would break the decode bound
FRAME_DELAY = 0.1  # seconds per frame on a span's first try: 48 frames take about 5 s, time to kill it mid-span
FAULTS = [{"command": SWAP_TASKS.swap_command, "indexes": [0], "tries": [1], "frame_delay": FRAME_DELAY}]


@dataclass(frozen=True)
class Setup:
    cluster: AirflowCluster
    media: Path  # inputs (the allowed input prefix)
    out: Path  # outputs (the allowed output prefix)
    elsewhere: Path  # a writable folder outside both allow-lists
    tmp: Path  # the TMPDIR of every cluster process, worker subprocesses included

    @property
    def face(self) -> Path:
        return self.media / "face.png"

    def scratch_folders(self) -> list[Path]:
        """The worker's temporary folders under the cluster's TMPDIR (``storage/scratch.py``)."""
        return sorted((self.tmp / "facefusion-worker").glob("*-*"))


@pytest.fixture(scope="module")
def setup(airflow_cluster_factory: Callable[..., AirflowCluster], tmp_path_factory: pytest.TempPathFactory) -> Setup:
    media, tmp = tmp_path_factory.mktemp("media"), tmp_path_factory.mktemp("tmpdir")
    out, elsewhere = media / "out", tmp_path_factory.mktemp("elsewhere")
    out.mkdir()
    make_image(media / "face.png")
    make_clip(media / "resume.mp4", RESUME_SEGMENTS * SEGMENT_FRAMES, seed=1, gop=5)  # short pre-roll at any frame
    make_clip(media / "clear.mp4", 3 * SEGMENT_FRAMES, seed=2)
    make_clip(media / "cuda.mp4", 2 * SEGMENT_FRAMES, seed=3)
    make_clip(media / "scheduler.mp4", 12 * SEGMENT_FRAMES, seed=4)
    (media / "person.png").write_bytes(encode_image(people()["astronaut"], "png"))
    settings = {
        "work_root": tmp_path_factory.mktemp("work").as_uri(),
        "span_wave": "1",
        "allowed_input_prefixes": f"{media}/",
        # /proc/ is allowed so that the unwritable output is refused by the write probe, not by the allow-list.
        "allowed_output_prefixes": f"{out}/, /proc/",
    }
    extra_env = {
        "TMPDIR": str(tmp),
        **fault_env([*FAULTS, {"command": "merge", "hold_while": str(tmp / "merge-gate")}]),
    }
    return Setup(airflow_cluster_factory(settings, extra_env), media, out, elsewhere, tmp)


def pass_through(setup: Setup, target: Path, output: Path | str, **options: Any) -> dict[str, Any]:
    return conf([setup.face], target, output, segment_size=SEGMENT_FRAMES, processors=[], **options)


def wait_for_xcom(cluster: AirflowCluster, run_id: str, task_id: str, key: str, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while (cluster.task_states(run_id).get((task_id, -1)) or (None,))[0] != "success":
        assert time.monotonic() < deadline and cluster.run_state(run_id) != "failed", cluster.task_states(run_id)
        time.sleep(0.3)
    return cluster.xcom(run_id, task_id, key)


def markers(segments: Path) -> dict[int, bytes]:
    """The committed segments: marker bytes by segment index."""
    return {int(path.name.split(".")[0]): path.read_bytes() for path in segments.glob("[0-9]*.json")}


def committed_files(segments: Path) -> dict[int, tuple[bytes, str, int]]:
    """Each committed segment: its marker, and the sha256 and modification time (ns) of the file the marker names."""
    found = {}
    for index, marker in markers(segments).items():
        path = segments / json.loads(marker)["file"]
        found[index] = (marker, hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
    return found


def wait_for_markers(segments: Path, count: int, cluster: AirflowCluster, run_id: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while len(markers(segments)) < count:
        assert time.monotonic() < deadline, (markers(segments).keys(), cluster.task_states(run_id))
        time.sleep(0.05)


def preroll(clip: Path, frame: int) -> int:
    """Frames a seek to ``frame`` decodes before it: back to the keyframe at or before it."""
    return frame - max(number for number in keyframes(clip) if number <= frame)


def test_a_worker_killed_mid_span_resumes_at_the_first_uncommitted_segment(setup: Setup, tmp_path: Path) -> None:
    cluster, target = setup.cluster, setup.media / "resume.mp4"
    output = setup.out / "resume.mp4"
    # Lossless, so the comparison below is of pixels, not of the encoder's choices (x264's threads may differ on a
    # loaded machine: once in a full suite run one lossy segment came out other than the uninterrupted run's).
    run_id = cluster.trigger(pass_through(setup, target, output, output_video_quality=100))
    segments = Path(urlparse(wait_for_xcom(cluster, run_id, SWAP_TASKS.validate, "work_uri")).path) / "segments"

    worker = cluster.wait_for_worker(SWAP_TASKS.swap_command, target.as_uri())
    wait_for_markers(segments, KILL_AFTER_SEGMENTS, cluster, run_id)
    scratch = setup.scratch_folders()
    os.kill(worker.pid, signal.SIGKILL)
    before = committed_files(segments)  # after the kill: a dead worker commits nothing more
    assert KILL_AFTER_SEGMENTS <= len(before) < RESUME_SEGMENTS, sorted(before)
    assert len(scratch) == 1 and (scratch[0] / ".lock").exists(), scratch  # the killed worker's, never removed by it

    # The merge (the retry's worker makes it, leaving the work complete) holds the run and its cleanup while the
    # committed files are compared.
    with merge_held(setup.tmp / "merge-gate"):
        after = committed_files(segments)
        assert sorted(after) == list(range(RESUME_SEGMENTS))
        assert {index: after[index] for index in before} == before  # same marker, same bytes, same mtime
        assert not scratch[0].exists(), setup.scratch_folders()  # the retry, the next worker here, removed it
    assert cluster.wait(run_id) == "success", cluster.task_states(run_id)

    assert cluster.task_states(run_id)[(SWAP_TASKS.swap, 0)] == ("success", 2)
    retry = cluster.worker_summary(run_id, SWAP_TASKS.swap, 2, map_index=0)
    assert retry is not None
    frames_left = (RESUME_SEGMENTS - len(before)) * SEGMENT_FRAMES
    first_left = len(before) * SEGMENT_FRAMES  # one worker commits in order: the committed ones are a prefix
    bound = frames_left + SEGMENT_FRAMES + preroll(target, first_left)
    assert (retry["reused"], retry["committed"], retry["frames"]) == (
        len(before),
        RESUME_SEGMENTS - len(before),
        frames_left,
    ), retry
    assert retry["decoded_frames"] <= bound, (retry, bound)

    baseline = tmp_path / "uninterrupted.mp4"
    run_uninterrupted(
        [str(setup.face)],
        str(target),
        str(baseline),
        str(tmp_path / "work"),
        processors=[],
        segment_size=SEGMENT_FRAMES,
        output_video_quality=100,
    )
    assert frame_md5s(output) == frame_md5s(baseline) == frame_md5s(target)


def test_clearing_a_succeeded_span_of_a_finished_run_ends_in_success_again(setup: Setup) -> None:
    cluster, target = setup.cluster, setup.media / "clear.mp4"
    output = setup.out / "clear.mp4"
    run_id = cluster.trigger(pass_through(setup, target, output))
    assert cluster.wait(run_id) == "success", cluster.task_states(run_id)
    published = (output.read_bytes(), output.stat().st_mtime_ns)

    cleared = cluster.clear_task_instances(run_id, task_ids=[SWAP_TASKS.swap], map_indexes=[0])

    assert {(ti["task_id"], ti["map_index"]) for ti in cleared} == {
        (SWAP_TASKS.swap, 0),
        (SWAP_TASKS.merge, -1),
        (SWAP_TASKS.cleanup, -1),
    }
    assert cluster.wait(run_id) == "success", cluster.task_states(run_id)
    states = cluster.task_states(run_id)
    assert states[(SWAP_TASKS.swap, 0)] == states[(SWAP_TASKS.merge, -1)] == ("success", 2), states
    assert states[(SWAP_TASKS.cleanup, -1)] == ("success", 2), states
    assert states[(SWAP_TASKS.prepare, -1)] == ("success", 1), states  # what was not cleared did not run again
    log = cluster.task_log_lines(run_id, SWAP_TASKS.swap, 2, map_index=0)
    assert any("Nothing to do, no worker started" in line for line in log), log
    assert cluster.worker_summary(run_id, SWAP_TASKS.swap, 2, map_index=0) is None
    assert (output.read_bytes(), output.stat().st_mtime_ns) == published


# (case, conf changes, field the error names, words of the error): each run writes its output into a folder of its own.
BAD_INPUTS = [  # what only validate can tell: storage, and the deployment's settings
    ("unwritable", {"output_uri": "/proc/x.mp4"}, "output_uri", "cannot write"),
    ("outside_allow_list", {"output_uri": "{elsewhere}/x.mp4"}, "output_uri", "outside the allowed output locations"),
]
BAD_CONFS = [  # what the conf alone tells: refused before a run exists (airflow_plugin/conf_limits.py)
    ("bucket_only", {"target_uri": "s3://bucket/"}, "target_uri", "names a bucket, not a file"),
    ("parent", {"output_uri": "file:///data/out/../../x.mp4"}, "output_uri", "'..' is not allowed"),
    ("relative_target", {"target_uri": "clear.mp4"}, "target_uri", "relative path"),
    ("relative_output", {"output_uri": "out/x.mp4"}, "output_uri", "relative path"),
    ("unknown_key", {"colour": "blue"}, "colour", "unknown conf key"),
]


def test_bad_input_fails_at_validate_naming_the_field_without_retries(setup: Setup) -> None:
    cluster = setup.cluster
    runs = {}
    for case, changes, field, words in BAD_INPUTS + BAD_CONFS:
        run_conf = pass_through(setup, setup.media / "clear.mp4", setup.out / case / "x.mp4")
        run_conf.update({key: str(value).format(elsewhere=setup.elsewhere) for key, value in changes.items()})
        (setup.out / case).mkdir()
        if (case, changes, field, words) in BAD_CONFS:
            with pytest.raises(AssertionError, match=rf": 400 .*\b{field}\b.*{re.escape(words)}"):
                cluster.trigger(run_conf)  # no run is created
            continue
        runs[case] = cluster.trigger(run_conf)

    for case, _, field, words in BAD_INPUTS:
        run_id = runs[case]
        assert cluster.wait(run_id) == "failed", (case, cluster.task_states(run_id))
        states = cluster.task_states(run_id)
        assert states[(SWAP_TASKS.validate, -1)] == ("failed", 1), (case, states)
        assert {state for (task, _), (state, _) in states.items() if task != SWAP_TASKS.validate} == {
            "upstream_failed"
        }, (case, states)
        failure = cluster.xcom(run_id, SWAP_TASKS.validate, "failure")
        assert failure["message"].startswith(f"{field}: ") and words in failure["message"], (case, failure)
        logged = titled_reason(failure["message"])  # the log names the field by its form title and key
        assert any(logged in line for line in cluster.task_log_lines(run_id, SWAP_TASKS.validate, 1)), (case, logged)
        assert list((setup.out / case).iterdir()) == [], case
    assert list(setup.elsewhere.iterdir()) == []
    assert not Path("/x.mp4").exists()


@pytest.mark.skipif(
    "CUDAExecutionProvider" in onnxruntime.get_available_providers(), reason="this machine has CUDA: nothing to refuse"
)
def test_an_execution_provider_this_machine_lacks_fails_the_span_without_retries(setup: Setup) -> None:
    """The Airflow side cannot know what the GPU nodes have (and imports no onnxruntime): the span's worker refuses it
    when it loads its models. ``prepare`` may run off the GPU pool (``[facefusion] gpu_commands``), so it computes the
    source identity on the CPU and succeeds. With ``processors: []`` no model ever loads and the option does not
    matter."""
    cluster, output = setup.cluster, setup.out / "cuda" / "x.mp4"
    person = setup.media / "person.png"  # a real face: prepare finds it on the CPU
    run_conf = conf([person], setup.media / "cuda.mp4", output, execution_providers=["cuda"])
    run_id = cluster.trigger(run_conf)

    assert cluster.wait(run_id) == "failed", cluster.task_states(run_id)
    states = cluster.task_states(run_id)
    assert states[(SWAP_TASKS.validate, -1)] == ("success", 1)
    assert states[(SWAP_TASKS.prepare, -1)] == ("success", 1), states
    assert states[(SWAP_TASKS.swap, 0)] == ("failed", 1), states  # retries are on for spans: none was used
    failure = cluster.xcom(run_id, SWAP_TASKS.swap, "failure", map_index=0)
    assert failure["failure_class"] == "invalid_option", failure
    assert failure["message"].startswith("options.execution_providers: none of cuda is available here"), failure
    assert not output.parent.exists() or list(output.parent.iterdir()) == []


def test_a_run_survives_kill_9_of_the_scheduler(setup: Setup) -> None:
    """``kill -9`` of the scheduler's pid while the run's span works (slowed on its first try), then a restart as a
    supervisor does it: what is left of the old scheduler (its executor's workers, their tasks) is killed too, and the
    new scheduler finishes the run. (Orphaned workers left alive keep the killed scheduler's database session open with
    its row lock on the run: the new scheduler then skips that run forever; see ``restart_component(keep_orphans=True)``.)"""
    cluster, target = setup.cluster, setup.media / "scheduler.mp4"
    output = setup.out / "scheduler.mp4"
    run_id = cluster.trigger(pass_through(setup, target, output, output_video_quality=100))  # lossless
    cluster.wait_for_worker(SWAP_TASKS.swap_command, target.as_uri())

    killed = cluster.kill_component("scheduler", signal.SIGKILL)
    cluster.restart_component("scheduler")

    assert cluster.components["scheduler"].process.pid != killed
    assert cluster.wait(run_id, timeout=240) == "success", cluster.task_states(run_id)
    assert frame_md5s(output) == frame_md5s(target)


def test_stop_leaves_no_process(setup: Setup) -> None:
    """Last in the module: it stops the cluster."""
    assert setup.cluster.processes(), "the cluster should be running"

    assert setup.cluster.stop() == []
    assert setup.cluster.processes() == []
