"""Each family of FaceFusion's swapper catalogue through the whole DAG (``airflow dags test``, local workers) on its
stand-in with the real file's interface: the emap family (inswapper), an embedding (hyperswap, FaceFusion's default),
a crossface-converted embedding (simswap) and an image source (blendswap). The paint stand-ins turn the face one flat
colour chosen by the source, so every output frame shows that its swap ran and was pasted back."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest
from demo_airflow import dags_test, run_succeeded, swap_conf
from people import carphone, carphone_face_contrast, person_file
from standins import write_standins

from facefusion_provider.engine.store import MODELS_CACHE_ENV, MODELS_DIR_ENV

pytestmark = pytest.mark.slow

FRAMES, SEGMENT = 16, 8
FAMILIES = ["inswapper_128", "hyperswap_1a_256", "simswap_256", "blendswap_256"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(models folder, source image, target clip)."""
    folder = tmp_path_factory.mktemp("dag-families")
    models = write_standins(folder / "models")
    source = person_file(folder / "astronaut.png")
    return models, source, carphone(folder / "carphone.mp4", frames=FRAMES)


def _frames(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


@pytest.mark.parametrize("model", FAMILIES)
def test_the_dag_swaps_with_each_swapper_family(
    model: str, inputs: tuple[Path, Path, Path], dags_test_env: dict[str, str], tmp_path: Path
) -> None:
    models, source, target = inputs
    env = {**dags_test_env, MODELS_DIR_ENV: str(models), MODELS_CACHE_ENV: str(tmp_path / "model-cache")}
    output = tmp_path / "out" / f"{model}.mp4"
    options = {
        "face_swapper_model": model,
        "face_swapper_blend": 100,
        "face_swapper_color_correction": False,
        "output_video_quality": 100,
        "segment_size": SEGMENT,
    }

    result = dags_test(swap_conf([str(source)], str(target), str(output), options), env, timeout=600)

    assert run_succeeded(result), (result.stdout + result.stderr)[-6000:]
    original, swapped = _frames(target), _frames(output)
    assert len(swapped) == len(original) == FRAMES
    for before, after in zip(original, swapped, strict=True):
        assert carphone_face_contrast(before) > 15 and carphone_face_contrast(after) < 3, "a flat-colour face"
        np.testing.assert_allclose(after[:, :20].mean(), before[:, :20].mean(), atol=3)  # far from the face: kept
