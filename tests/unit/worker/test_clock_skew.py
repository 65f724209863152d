"""One clock decides (docs/protocol.md, "One liveness rule"): two ``facefusion-worker run`` processes share one work,
one of them with its clock a quarter hour off (``time.time`` shifted in that process alone, by a ``sitecustomize``).
A quarter hour is more than a CLI run's lease (10 min) and a claim's (60 s): judged by the skewed clock, the other
run's lease and claims would look lapsed. Judged on the store's clock, nothing live is swept or taken over."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from faults import SITE, fault_env
from readback import frame_digests

from .conftest import MakeVideo

WORKER = [sys.executable, "-m", "facefusion_provider.worker"]
SEGMENT = 8
SLOW = fault_env([{"command": "swap-span", "frame_delay": 0.03}])  # both runs at work at once


def _run(target: str, work_root: str, output: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    argv = ["run", "--target", target, "--output", str(output), "--work-root", work_root, "--processors"]
    options = ["--output-video-quality", "100", "--segment-size", str(SEGMENT)]
    return subprocess.Popen(
        [*WORKER, *argv, *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **SLOW, **env},
    )


@pytest.mark.parametrize("skew", [900, -900], ids=["ahead", "behind"])
def test_a_process_a_quarter_hour_off_sweeps_no_live_work_and_takes_no_live_claim(
    skew: int, make_video: MakeVideo, work_root: str, tmp_path: Path
) -> None:
    target = make_video(frames=24 * SEGMENT)
    shifted = tmp_path / "shifted"
    shifted.mkdir()
    (shifted / "sitecustomize.py").write_text(
        f"import runpy, time\n_real = time.time\ntime.time = lambda: _real() + {skew}\n"
        f"runpy.run_path({str(SITE / 'sitecustomize.py')!r})\n"  # the faults' site, which this one shadows
    )
    first = _run(target, work_root, tmp_path / "first.mp4", {})
    segments = Path(work_root) / "work"
    deadline = time.monotonic() + 60
    while not list(segments.glob("*/segments/00000.json")):  # the first run holds the work and its claims
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()[1][-3000:]
        time.sleep(0.05)
    path = os.pathsep.join([str(shifted), SLOW["PYTHONPATH"]])
    second = _run(target, work_root, tmp_path / "second.mp4", {"PYTHONPATH": path})

    results = [process.communicate(timeout=300) for process in (first, second)]

    for process, (_, err) in zip((first, second), results, strict=True):
        assert process.returncode == 0, err[-3000:]
        assert "took over claim generation" not in err  # no live claim was judged lapsed
    skewed_log = results[1][1]
    assert f"this host's clock is {abs(skew)} s {'ahead of' if skew > 0 else 'behind'}" in skewed_log
    expected = [digest.md5 for digest in frame_digests(target)]
    for name in ("first.mp4", "second.mp4"):
        assert [digest.md5 for digest in frame_digests(str(tmp_path / name))] == expected
    committed = [json.loads(line)["segment_count"] for line in (results[0][0].splitlines()[-1],)]
    assert committed == [24]
