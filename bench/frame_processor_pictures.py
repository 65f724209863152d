"""The README's pictures of the frame colorizer, background remover and face debugger: one ``facefusion-worker run``
each on the carphone clip with the processor's stand-in model (tests/support/standins.py: no real model ships), the
input's middle frame beside the output's, written to docs/processor-<name>.png.

    python bench/frame_processor_pictures.py [--out docs]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO / "plugins"))
sys.path.insert(0, str(REPO / "tests" / "support"))

FRAMES = 9
FILL = ["0", "160", "90", "255"]
RUNS: dict[str, list[str]] = {
    "frame_colorizer": ["--frame-colorizer-model", "deoldify"],
    "background_remover": ["--background-remover-model", "modnet", "--background-remover-fill-color", *FILL],
    "face_debugger": ["--face-debugger-items", "bounding-box", "face-landmark-5", "face-landmark-5/68", "face-mask"],
}


def main() -> None:
    import av
    import numpy as np
    from people import carphone
    from standins import write_standins

    from facefusion_provider.media.images import encode_image
    from facefusion_provider.worker import cli

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs")
    args = parser.parse_args()

    def middle_frame(path: Path) -> np.ndarray:
        with av.open(str(path)) as container:
            frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
        return frames[len(frames) // 2]

    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        models = write_standins(work / "models")
        target = carphone(work / "carphone.mp4", frames=FRAMES)
        for processor, flags in RUNS.items():
            output = work / f"{processor}.mp4"
            argv = ["run", "--target", str(target), "--output", str(output), "--work-root", str(work / "runs")]
            argv += ["--models-dir", str(models), "--processors", processor, "--output-video-quality", "95", *flags]
            if cli.main(argv) != 0:
                raise SystemExit(f"{processor}: the run failed")
            side_by_side = np.concatenate([middle_frame(target), middle_frame(output)], axis=1)
            path = args.out / f"processor-{processor.replace('_', '-')}.png"
            path.write_bytes(encode_image(np.ascontiguousarray(side_by_side), "png"))
            print(path)


if __name__ == "__main__":
    main()
