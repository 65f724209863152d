"""An image target through the whole DAG (``airflow dags test``, local workers): validate, prepare, plan, one span,
merge and cleanup over one frame in one segment. The classic swapper changes Grace Hopper's face and no pixel outside
it (a lossless PNG output), the preview shows the original beside the output, and the output's marker says it was
written as an image."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from demo_airflow import dags_test, run_succeeded, swap_conf
from people import person_file

from facefusion_provider.work.layout import output_marker_uri, preview_uri_of

pytestmark = pytest.mark.slow

FACE_AREA = (
    slice(120, 340),
    slice(150, 370),
)  # rows, columns holding Grace Hopper's face in grace_hopper.jpg (512x600)


def read_rgb(path: Path) -> np.ndarray:
    return np.asarray(cv2.cvtColor(cv2.imread(str(path), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB))


def test_the_dag_swaps_the_face_of_an_image_target(dags_test_env: dict[str, str], tmp_path: Path) -> None:
    source, target = person_file(tmp_path / "astronaut.png"), person_file(tmp_path / "grace.png", "grace")
    output = tmp_path / "out" / "swapped.png"

    result = dags_test(swap_conf([str(source)], str(target), str(output)), dags_test_env, timeout=600)

    assert run_succeeded(result), (result.stdout + result.stderr)[-6000:]
    before, after = read_rgb(target), read_rgb(output)
    changed = np.abs(after.astype(int) - before).max(axis=2) > 0
    assert changed[FACE_AREA].sum() > 5000, "the face is swapped"
    changed[FACE_AREA] = False
    assert not changed.any(), "no pixel outside the face changed"
    preview = read_rgb(Path(preview_uri_of(str(output)).removeprefix("file://")))
    assert preview.shape[1] > 1.5 * preview.shape[0], "original and output side by side"
    marker = json.loads(Path(output_marker_uri(str(output)).removeprefix("file://")).read_text())
    assert (marker["frame_count"], marker["method"]) == (1, "image")
