"""Image targets (FaceFusion's image-to-image workflow) through ``facefusion-worker run``: one frame in one segment,
an image output in the format its name gives, with its preview (original beside output) and marker.

The classic swapper changes the face of grace_hopper.jpg and no pixel outside it (a PNG output is lossless); the frame
enhancer's bilinear x2 stand-in doubles the image's size and matches OpenCV's bilinear resize within 3 levels; the
face enhancer and face debugger change the face's crop only, the colorizer and background remover the whole picture;
``output_image_scale`` 0.5 halves it; a JPEG's EXIF orientation is applied and a PNG's transparency kept, as in FaceFusion's image workflow; ``output_image_quality`` grows a JPEG's size with the quality; a rerun over the
same work reuses its committed segment; a video output for an image target and the reverse are refused naming the
output, before anything is written, and an image scaled past 8192 pixels naming output_image_scale."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from people import person_file
from PIL import Image, ImageOps
from standins import frame_enhancer_standin, write_standins

from facefusion_provider import ingest
from facefusion_provider.exceptions import EXIT_INVALID_OPTION, InvalidOptionError
from facefusion_provider.media.images import encode_output_image
from facefusion_provider.work.run_inputs import check_conf
from facefusion_provider.worker import cli

FACE_AREA = (
    slice(120, 340),
    slice(150, 370),
)  # rows, columns holding Grace Hopper's face in grace_hopper.jpg (512x600)
FACE_CROP_AREA = (slice(30, 380), slice(90, 430))  # the face enhancer's crop around it, larger than the face
EXIF_ORIENTATION = 0x0112
ENHANCER_TOLERANCE = 3  # levels: the stand-in is ONNX's bilinear resize, OpenCV's within rounding (tiles merged)
pytestmark = pytest.mark.usefixtures("no_model_environment")


@pytest.fixture(scope="module")
def pictures(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(source face, PNG target of another person)."""
    folder = tmp_path_factory.mktemp("image-targets")
    return person_file(folder / "astronaut.png"), person_file(folder / "grace.png", "grace")


def read_rgb(path: Path) -> np.ndarray:
    return np.asarray(cv2.cvtColor(cv2.imread(str(path), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB))


def run(source: Path | None, target: Path, output: Path, work: Path, *flags: str) -> int:
    argv = ["run", "--target", str(target), "--output", str(output), "--work-root", str(work), "--keep-work"]
    return cli.main([*argv, *(["--source", str(source)] if source else []), *flags])


def test_the_classic_swapper_changes_the_face_of_an_image_and_nothing_else(
    pictures: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, target = pictures
    output = tmp_path / "out" / "swapped.png"

    assert run(source, target, output, tmp_path / "work", "--face-swapper-model", "classic") == 0

    report = json.loads(capsys.readouterr().out)
    assert (report["frame_count"], report["segment_count"]) == (1, 1)
    before, after = read_rgb(target), read_rgb(output)
    assert after.shape == before.shape
    changed = np.abs(after.astype(int) - before).max(axis=2) > 0
    assert changed[FACE_AREA].sum() > 5000, "the face is swapped"
    outside = np.ones_like(changed)
    outside[FACE_AREA] = False
    assert not changed[outside].any(), "no pixel outside the face changed"
    preview = read_rgb(output.with_name("swapped.preview.jpg"))
    assert preview.shape[1] > 1.5 * preview.shape[0], "original and output side by side"
    marker = json.loads((output.parent / ".swapped.png.facefusion.json").read_text())
    assert (marker["frame_count"], marker["method"], marker["size"]) == (1, "image", output.stat().st_size)
    assert sorted(path.name for path in output.parent.iterdir()) == [
        ".swapped.png.facefusion.json",
        "swapped.png",
        "swapped.preview.jpg",
    ], "nothing partial left beside the output"


def test_a_rerun_reuses_the_committed_segment_for_another_output_format(
    pictures: tuple[Path, Path], tmp_path: Path
) -> None:
    source, target = pictures
    work = tmp_path / "work"
    assert run(source, target, tmp_path / "first.png", work) == 0
    (segments,) = work.glob("work/*/segments")
    committed = {path.name: path.read_bytes() for path in segments.iterdir() if path.suffix in (".png", ".json")}
    assert [name for name in committed if name.endswith(".png")], "the one segment is a lossless PNG"

    assert run(source, target, tmp_path / "second.jpg", work) == 0

    assert {
        path.name: path.read_bytes() for path in segments.iterdir() if path.suffix in (".png", ".json")
    } == committed
    png, jpeg = read_rgb(tmp_path / "first.png"), read_rgb(tmp_path / "second.jpg")
    assert np.abs(png.astype(int) - jpeg).mean() < 4, "the JPEG holds the same swapped picture"


def test_the_frame_enhancer_doubles_an_image(pictures: tuple[Path, Path], tmp_path: Path) -> None:
    _, target = pictures
    models = tmp_path / "models"
    models.mkdir()
    frame_enhancer_standin(models, "real_esrgan_x2")
    output = tmp_path / "enhanced.png"
    flags = ["--models-dir", str(models), "--processors", "frame_enhancer", "--frame-enhancer-model", "real_esrgan_x2"]

    assert run(None, target, output, tmp_path / "work", *flags, "--frame-enhancer-blend", "100") == 0

    before, after = read_rgb(target), read_rgb(output)
    assert after.shape == (2 * before.shape[0], 2 * before.shape[1], 3)
    expected = cv2.resize(before, (2 * before.shape[1], 2 * before.shape[0]), interpolation=cv2.INTER_LINEAR)
    assert np.abs(after.astype(int) - expected).max() <= ENHANCER_TOLERANCE


PROCESSOR_FLAGS = {
    "face_enhancer": ["--face-enhancer-model", "gfpgan_1.4", "--face-enhancer-blend", "100"],
    "frame_colorizer": ["--frame-colorizer-model", "ddcolor"],
    "background_remover": [
        "--background-remover-model",
        "modnet",
        "--background-remover-fill-color",
        "0",
        "255",
        "0",
        "255",
    ],
    "face_debugger": ["--face-debugger-items", "bounding-box"],
}


@pytest.mark.parametrize("processor", list(PROCESSOR_FLAGS))
def test_every_frame_processor_works_on_an_image(processor: str, pictures: tuple[Path, Path], tmp_path: Path) -> None:
    _, target = pictures
    models = write_standins(tmp_path / "models")
    output = tmp_path / "processed.png"
    flags = ["--models-dir", str(models), "--processors", processor, *PROCESSOR_FLAGS[processor]]

    assert run(None, target, output, tmp_path / "work", *flags) == 0

    before, after = read_rgb(target), read_rgb(output)
    assert after.shape == before.shape
    changed = np.abs(after.astype(int) - before).max(axis=2) > 30
    if processor in ("face_enhancer", "face_debugger"):  # the face only
        assert changed[FACE_AREA].sum() > 500
        changed[FACE_CROP_AREA] = False
        assert not changed.any()
    else:  # the whole picture
        assert changed.mean() > 0.2


def test_output_image_scale_resizes_the_image(pictures: tuple[Path, Path], tmp_path: Path) -> None:
    _, target = pictures
    output = tmp_path / "half.webp"

    assert run(None, target, output, tmp_path / "work", "--processors", "--output-image-scale", "0.5") == 0

    height, width = read_rgb(target).shape[:2]
    assert read_rgb(output).shape[:2] == (height // 2, width // 2)


def test_a_jpeg_turned_by_its_exif_orientation_comes_out_upright(pictures: tuple[Path, Path], tmp_path: Path) -> None:
    _, target = pictures
    exif = Image.Exif()
    exif[EXIF_ORIENTATION] = 6  # shown turned 90 degrees clockwise
    turned = tmp_path / "turned.jpg"
    with Image.open(target) as image:
        image.save(turned, exif=exif, quality=95)
    output = tmp_path / "upright.png"

    assert run(None, turned, output, tmp_path / "work", "--processors") == 0

    with Image.open(turned) as image:
        upright = np.asarray(ImageOps.exif_transpose(image).convert("RGB"))
    assert upright.shape[:2] == read_rgb(target).shape[1::-1]
    assert read_rgb(output).shape == upright.shape
    assert np.abs(read_rgb(output).astype(int) - upright).mean() < 3  # two JPEG decoders' rounding


def test_a_transparent_image_keeps_its_alpha_through_the_processors(
    pictures: tuple[Path, Path], tmp_path: Path
) -> None:
    source, target = pictures
    picture = read_rgb(target)
    alpha = np.full(picture.shape[:2], 255, np.uint8)
    alpha[:, :100], alpha[:, 100:140] = 0, 128  # the flag's side transparent, a half-transparent band
    transparent = tmp_path / "transparent.png"
    cv2.imwrite(str(transparent), np.dstack([cv2.cvtColor(picture, cv2.COLOR_RGB2BGR), alpha]))

    for name in ("kept.png", "kept.webp", "flat.jpg"):
        assert run(source, transparent, tmp_path / name, tmp_path / "work") == 0

    png, webp = (cv2.imread(str(tmp_path / name), cv2.IMREAD_UNCHANGED) for name in ("kept.png", "kept.webp"))
    assert np.array_equal(png[:, :, 3], alpha), "PNG: the same alpha"
    assert np.abs(webp[:, :, 3].astype(int) - alpha).max() <= 2, "WebP: the same alpha, within rounding"
    assert np.abs(cv2.cvtColor(png[:, :, :3], cv2.COLOR_BGR2RGB).astype(int) - picture)[FACE_AREA].max() > 40
    assert cv2.imread(str(tmp_path / "flat.jpg"), cv2.IMREAD_UNCHANGED).shape[2] == 3, "a JPEG has no alpha"


def test_output_image_quality_grows_the_jpeg(pictures: tuple[Path, Path], tmp_path: Path) -> None:
    _, target = pictures
    sizes = []
    for quality in (10, 40, 70, 100):
        output = tmp_path / f"q{quality}.jpg"
        assert run(None, target, output, tmp_path / "work", "--processors", "--output-image-quality", str(quality)) == 0
        sizes.append(output.stat().st_size)
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes), sizes


@pytest.mark.parametrize("extension", [".jpg", ".png", ".webp"])
def test_each_format_encodes_at_every_quality(extension: str, pictures: tuple[Path, Path]) -> None:
    image = read_rgb(pictures[1])
    sizes = [len(encode_output_image(image, extension, quality)) for quality in (0, 50, 100)]
    if extension == ".png":  # lossless: the quality trades compression for speed
        assert sizes[0] <= sizes[2]
    else:
        assert sizes[0] < sizes[1] < sizes[2]


def test_an_image_target_refuses_a_video_output_and_the_reverse(
    pictures: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, target = pictures
    conf = {"source_uris": [str(source)], "target_uri": str(target), "output_uri": str(tmp_path / "out.mp4")}
    with pytest.raises(InvalidOptionError, match=r"^output_uri: .*out\.mp4 is not an image file .*is an image"):
        check_conf(conf, conf)
    video = {**conf, "target_uri": str(tmp_path / "clip.mp4"), "output_uri": str(tmp_path / "out.png")}
    with pytest.raises(InvalidOptionError, match=r"^output_uri: .*out\.png is an image file, and the target .* video"):
        check_conf(video, video)

    assert run(source, target, tmp_path / "out" / "result.mov", tmp_path / "work") == EXIT_INVALID_OPTION
    assert json.loads(capsys.readouterr().err.strip().splitlines()[-1])["message"].startswith("output: ")
    assert not (tmp_path / "out").exists() and not (tmp_path / "work").exists()

    large = tmp_path / "large.png"  # 1024x1200: at x8, 8192x9600
    cv2.imwrite(str(large), cv2.resize(cv2.imread(str(target)), (1024, 1200)))
    assert run(source, large, tmp_path / "out" / "huge.png", tmp_path / "work", "--output-image-scale", "8") != 0
    message = json.loads(capsys.readouterr().err.strip().splitlines()[-1])["message"]
    assert message.startswith("options.output_image_scale: ") and "8192x9600" in message
    assert not (tmp_path / "out" / "huge.png").exists()


def test_a_manifest_row_may_name_an_image_target() -> None:
    row = {"source_uris": ["s3://f/a.jpg"], "target_uri": "s3://v/portrait.webp", "output_uri": "s3://o/portrait.png"}
    text = "\n".join(json.dumps(line) for line in (row, {**row, "output_uri": "s3://o/portrait.mp4"}))
    cfg = ingest.parse_ingest_config(
        {"mode": "manifests", "input_prefix": "s3://in/", "output_prefix": "s3://o/", "ledger_prefix": "s3://o/.l/"}
    )
    listed = ingest.Listed(uri="s3://in/jobs.jsonl", version="e1", size=100, modified=0.0)

    found = ingest.find_jobs([listed], cfg, now=1e9, read=lambda uri: text.encode())

    assert [(job.label, job.conf["output_uri"]) for job in found.jobs] == [("jobs.jsonl line 1", row["output_uri"])]
    (bad,) = found.reports
    assert bad.label == "jobs.jsonl line 2" and bad.detail.startswith("output_uri: s3://o/portrait.mp4 is not an image")


def test_a_damaged_image_segment_is_made_again_not_published(
    pictures: tuple[Path, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The image's one segment is checked against its marker like a video's: bytes flipped in it are noticed at the
    merge, its commit retired and the image worked again, so the output equals the undamaged run's."""
    source, target = pictures
    first, second = tmp_path / "first.png", tmp_path / "second.png"
    assert run(source, target, first, tmp_path / "work", "--face-swapper-model", "classic") == 0
    (segment,) = (tmp_path / "work").glob("work/*/segments/00000.*.png")
    data = bytearray(segment.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)
    segment.write_bytes(bytes(data))

    assert run(source, target, second, tmp_path / "work", "--face-swapper-model", "classic") == 0

    assert "is damaged" in caplog.text
    assert np.array_equal(read_rgb(second), read_rgb(first))
