"""The README's pictures of the processors: one ``facefusion-worker run`` each with the processor's stand-in models
(tests/support/standins*.py: no real model ships) on the carphone clip, or for the image target on Grace Hopper's photo
with the astronaut as the source, the input's middle frame beside the output's (a transparent output over the grey
checkerboard the preview draws; an upscaled one brought to the input's height, both labelled with their pixel sizes),
written to docs/processor-<name>.png (.jpg where that is the smaller file).

    python bench/frame_processor_pictures.py [--out docs]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import av
import cv2
import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO / "plugins"))
sys.path.insert(0, str(REPO / "tests" / "support"))

FRAMES = 9
FILL = ["0", "160", "90", "255"]
TRANSPARENT = ["0", "0", "0", "0"]  # alpha 0: a transparent background
SWAPPER = ("--face-swapper-model", "inswapper_128", "--face-swapper-blend", "100", "--no-face-swapper-color-correction")
LABEL_HEIGHT = 24  # the strip under a picture whose halves differ in size, naming each half's pixel size


@dataclass(frozen=True)
class Picture:
    """One run: its processors and flags, its output's suffix, the picture's file format, and what it shows besides
    the target and the output: the source, the output of a first run of ``first`` (what the processor starts from),
    each panel's pixel size."""

    processors: tuple[str, ...]
    flags: tuple[str, ...] = ()
    output: str = ".mp4"
    image_format: str = "png"
    image_target: bool = False
    show_source: bool = False
    first: tuple[str, ...] = ()
    label_sizes: bool = False


PICTURES: dict[str, Picture] = {
    "frame_colorizer": Picture(("frame_colorizer",), ("--frame-colorizer-model", "deoldify")),
    "background_remover": Picture(
        ("background_remover",), ("--background-remover-model", "modnet", "--background-remover-fill-color", *FILL)
    ),
    "background_remover_transparent": Picture(
        ("background_remover",),
        ("--background-remover-model", "modnet", "--background-remover-fill-color", *TRANSPARENT),
        output=".mov",
    ),
    "face_debugger": Picture(
        ("face_debugger",),
        ("--face-debugger-items", "bounding-box", "face-landmark-5", "face-landmark-5/68", "face-mask"),
    ),
    "frame_enhancer": Picture(("frame_enhancer",), ("--frame-enhancer-model", "real_esrgan_x2"), label_sizes=True),
    "age_modifier": Picture(("age_modifier",), ("--age-modifier-model", "fran", "--age-modifier-direction", "60")),
    "deep_swapper": Picture(
        ("deep_swapper",), ("--deep-swapper-model", "iperov/elon_musk_224", "--deep-swapper-morph", "80")
    ),
    "expression_restorer": Picture(
        ("face_swapper", "expression_restorer"),
        (*SWAPPER, "--expression-restorer-factor", "100"),
        first=("face_swapper",),
    ),
    "face_editor": Picture(
        ("face_editor",), ("--face-editor-mouth-smile", "1", "--face-editor-mouth-position-horizontal", "0.6")
    ),
    "image_target": Picture(
        ("face_swapper",),
        ("--face-swapper-model", "classic"),
        output=".png",
        image_format="jpg",
        image_target=True,
        show_source=True,
    ),
}


def main() -> None:
    from people import carphone, person_file
    from standins import write_standins
    from standins_ageswap import write_ageswap_standins
    from standins_live_portrait import write_live_portrait_standins

    from facefusion_provider.media.images import encode_image
    from facefusion_provider.worker import cli

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs")
    parser.add_argument("--only", nargs="*", choices=sorted(PICTURES), help="make only these pictures")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        models = write_live_portrait_standins(write_ageswap_standins(write_standins(work / "models")))
        clip = carphone(work / "carphone.mp4", frames=FRAMES)
        source, photo = person_file(work / "astronaut.png"), person_file(work / "grace.png", "grace")

        def run(name: str, picture: Picture, processors: tuple[str, ...]) -> Path:
            output = work / f"{name}-{len(processors)}{picture.output}"
            argv = ["run", "--source", str(source), "--target", str(photo if picture.image_target else clip)]
            argv += ["--output", str(output), "--work-root", str(work / "runs"), "--models-dir", str(models)]
            argv += ["--output-video-quality", "95", "--processors", *processors, *picture.flags]
            if picture.output == ".mov":
                argv += ["--output-video-encoder", "prores_ks"]  # ProRes 4444: a transparent output's
            if cli.main(argv) != 0:
                raise SystemExit(f"{name}: the run of {' '.join(processors)} failed")
            return output

        for name in args.only or PICTURES:
            picture = PICTURES[name]
            target = photo if picture.image_target else clip
            original = middle_frame(target)
            panels = [*([middle_frame(source)] if picture.show_source else []), original]
            if picture.first:
                panels.append(middle_frame(run(name, picture, picture.first)))
            panels.append(middle_frame(run(name, picture, picture.processors)))
            path = args.out / f"processor-{name.replace('_', '-')}.{picture.image_format}"
            row = panel_row(panels, height=original.shape[0], labels=picture.label_sizes)
            path.write_bytes(encode_image(row, "png" if picture.image_format == "png" else "mjpeg"))
            print(path, f"{path.stat().st_size // 1024} KiB")


def middle_frame(path: Path) -> np.ndarray:
    """The video's (or image's) middle frame as RGB, a transparent one over the preview's checkerboard."""
    from facefusion_provider.media.preview import opaque_rgb

    with av.open(str(path)) as container:
        frames = [opaque_rgb(frame) for frame in container.decode(video=0)]
    return frames[len(frames) // 2]


def panel_row(panels: list[np.ndarray], height: int, *, labels: bool) -> np.ndarray:
    """``panels`` left to right, each brought to ``height``; with ``labels``, a strip under each naming its own
    pixel size (the first as the input, the others as outputs)."""
    row = []
    for index, panel in enumerate(panels):
        shown = panel
        if panel.shape[0] != height:
            width = round(panel.shape[1] * height / panel.shape[0])
            shown = cv2.resize(panel, (width, height), interpolation=cv2.INTER_AREA)
        if labels:
            size = f"{'output' if index else 'input'} {panel.shape[1]}x{panel.shape[0]}"
            shown = _labelled(shown, size if panel.shape[0] == height else f"{size}, shown at {height} px high")
        row.append(shown)
    return np.ascontiguousarray(np.concatenate(row, axis=1))


def _labelled(picture: np.ndarray, label: str) -> np.ndarray:
    """``picture`` above a black strip with ``label`` in white."""
    strip = np.zeros((LABEL_HEIGHT, picture.shape[1], 3), np.uint8)
    cv2.putText(strip, label, (6, LABEL_HEIGHT - 8), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (255, 255, 255), 1, cv2.LINE_AA)
    return np.concatenate([picture, strip], axis=0)


if __name__ == "__main__":
    main()
