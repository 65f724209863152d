"""The classic swap looks natural on video: the face keeps the scene's skin tone and light, its edge does not show,
its colour does not flicker, and it still carries the source's identity.

Two clips: the demo's (carphone, a pale man in a car's daylight) and a graded one (Grace Hopper, darker and warmer,
a side light swinging across, the camera rolling; see graded_clip.py). Every measure is taken here, from the frames,
with the test's own skin mask; the edge is judged against a hard paste of the raw warped source that the test builds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import cv2
import numpy as np
import pytest
from skimage.color import rgb2lab

from facefusion_provider.engine.detect import detect_faces
from facefusion_provider.engine.face import Face, FloatArray, Frame
from facefusion_provider.engine.face_masks import MESH_468
from facefusion_provider.engine.landmarks import MESH_MIN_SCORE, landmark_face_mesh
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.engine.swap_classic import (
    ClassicSource,
    classic_face_mask,
    face_region,
    make_classic_source,
    swap_face_classic,
    warp_source,
)
from facefusion_provider.options import Options

from .conftest import IdentityJudge, meshed_face
from .graded_clip import graded_hopper_clip
from .seam_measure import EdgeChange, upper_edge_change

MAX_DELTA_E = 6.0  # CIE76, mean skin colour of the swapped face against the original face's
SEAM_SLACK = 0.5  # CIE L: half of a just-noticeable difference
EDGE_BAND = 0.1  # of face size: how far inside the mask's edge the step of the change is measured
# Sectors around the face's centre, degrees from the image's x axis (y down): where a seam would show.
SECTORS = {"forehead": (-135, -45), "right cheek": (-45, 30), "jaw": (30, 150), "left cheek": (150, 225)}


def face_size(points: FloatArray) -> float:
    return float(np.ptp(points, axis=0).max())


def disc(radius: int) -> np.ndarray:
    return cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1, 2 * radius + 1))


def features_mask(shape: tuple[int, int], points: FloatArray) -> np.ndarray:
    """Eyes, brows and lips of the mesh, grown by 5 % of the face size."""
    mask = np.zeros(shape, np.uint8)
    for feature in MESH_468.features:
        cv2.fillPoly(mask, [np.round(points[list(feature)]).astype(np.int32)], 255)
    return cv2.dilate(mask, disc(max(1, round(face_size(points) * 0.05)))) > 0


def skin_mask(shape: tuple[int, int], points: FloatArray) -> np.ndarray:
    """The face oval shrunk by 5 % of the face size, less the grown features: skin only."""
    oval = np.zeros(shape, np.uint8)
    cv2.fillPoly(oval, [np.round(points[list(MESH_468.outline)]).astype(np.int32)], 255)
    inner = cv2.erode(oval, disc(max(1, round(face_size(points) * 0.05)))) > 0
    return inner & ~features_mask(shape, points)


def lab(image: Frame) -> np.ndarray:
    return np.asarray(rgb2lab(image), np.float64)


def around_face(points: FloatArray, shape: tuple[int, ...]) -> tuple[slice, slice]:
    """The face's box with a margin of a fifth of its size, clipped to the frame: every measure looks only there."""
    margin = face_size(points) * 0.2
    (x1, y1), (x2, y2) = np.floor(points.min(axis=0) - margin), np.ceil(points.max(axis=0) + margin)
    return slice(max(0, int(y1)), min(shape[0], int(y2))), slice(max(0, int(x1)), min(shape[1], int(x2)))


def skin_mean(frame: Frame, points: FloatArray) -> np.ndarray:
    """The mean LAB colour of the face's skin."""
    rows, columns = around_face(points, frame.shape)
    crop, local = frame[rows, columns], points - [columns.start, rows.start]
    return np.asarray(lab(crop)[skin_mask(crop.shape[:2], local)].mean(axis=0))


def hard_paste(frame: Frame, face: Face, source: ClassicSource, support: np.ndarray) -> Frame:
    """The baseline: the raw warped source face copied into ``support`` as it is (no colour, no feather, no blend)."""
    assert face.landmark_dense is not None
    region = face_region(face.landmark_dense, 4)
    points = (face.landmark_dense - [region.x1, region.y1]).astype(np.float32)
    warped, _ = warp_source(source, points, region.size)
    full = frame.copy()
    height, width = frame.shape[:2]
    x1, y1, x2, y2 = max(0, region.x1), max(0, region.y1), min(width, region.x2), min(height, region.y2)
    full[y1:y2, x1:x2] = warped[y1 - region.y1 : y2 - region.y1, x1 - region.x1 : x2 - region.x1]
    pasted = frame.copy()
    pasted[support] = full[support]
    return pasted


def edge_steps(output: Frame, original: Frame, support: np.ndarray, points: FloatArray) -> dict[str, float]:
    """Per sector, the largest step (L units per pixel) of the lightness change ``output - original`` across the edge.

    Pixels are binned by their signed distance to the outer edge of ``support`` (1 px bins, from 4 px outside to
    EDGE_BAND of the face size inside); each bin's mean change over the sector's skin averages the texture out, so
    what is left is the edge's own profile: a jump for a hard paste, a ramp for a soft blend.
    """
    rows, columns = around_face(points, output.shape)
    output, original, support = output[rows, columns], original[rows, columns], support[rows, columns]
    points = points - [columns.start, rows.start]
    contours, _ = cv2.findContours(support.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
    filled = np.zeros(support.shape, np.uint8)
    cv2.drawContours(filled, contours, -1, 255, cv2.FILLED)  # the mouth opening is no edge of the face
    inside = cv2.distanceTransform(filled, cv2.DIST_L2, 5)
    outside = cv2.distanceTransform(255 - filled, cv2.DIST_L2, 5)
    bins = np.floor(np.where(filled > 0, inside, -outside)).astype(int)
    change = lab(output)[:, :, 0] - lab(original)[:, :, 0]
    ys, xs = np.mgrid[: support.shape[0], : support.shape[1]]
    center = points.mean(axis=0)
    angle = np.degrees(np.arctan2(ys - center[1], xs - center[0]))
    angle = np.where(angle < -135, angle + 360, angle)
    deepest = round(face_size(points) * EDGE_BAND)
    counted = (bins >= -4) & (bins <= deepest) & ~features_mask(support.shape, points)
    steps = {}
    for name, (low, high) in SECTORS.items():
        chosen = counted & (angle >= low) & (angle < high)
        index = bins[chosen] + 4
        counts = np.bincount(index, minlength=deepest + 5)
        means = np.bincount(index, change[chosen], minlength=deepest + 5) / np.maximum(counts, 1)
        enough = counts >= 5
        steps[name] = float(np.abs(np.diff(means))[enough[1:] & enough[:-1]].max())
    return steps


@dataclass
class ClipSwap:
    """A clip's face frames swapped, with what the measures need."""

    originals: list[Frame] = field(default_factory=list)
    outputs: list[Frame] = field(default_factory=list)
    meshes: list[FloatArray] = field(default_factory=list)
    steps: list[dict[str, float]] = field(default_factory=list)
    hard_steps: list[dict[str, float]] = field(default_factory=list)
    upper_edges: list[EdgeChange] = field(default_factory=list)

    def skin_means(self, frames: list[Frame]) -> np.ndarray:
        return np.array(
            [
                lab(frame)[skin_mask(frame.shape[:2], mesh)].mean(axis=0)
                for frame, mesh in zip(frames, self.meshes, strict=True)
            ]
        )


def swap_clip(frames: list[Frame], source: ClassicSource, options: Options, store: ModelStore) -> ClipSwap:
    run = ClipSwap()
    for frame in frames:
        faces = detect_faces(frame, options, store)
        if not faces:
            continue
        face = landmark_face_mesh(frame, max(faces, key=lambda found: found.area), store)
        score = face.extras.get("landmark_dense_score")
        if face.landmark_dense is None or not isinstance(score, float) or score < MESH_MIN_SCORE:
            continue
        output = swap_face_classic(frame, face, source, options)
        mask = classic_face_mask(frame, face, source, options)
        support = mask > 0
        run.originals.append(frame)
        run.outputs.append(output)
        run.meshes.append(face.landmark_dense)
        run.steps.append(edge_steps(output, frame, support, face.landmark_dense))
        run.hard_steps.append(edge_steps(hard_paste(frame, face, source, support), frame, support, face.landmark_dense))
        upper_edge = upper_edge_change(output, frame, mask, face.landmark_dense)
        if upper_edge is not None:
            run.upper_edges.append(upper_edge)
    return run


@pytest.fixture(scope="module")
def astronaut_source(astronaut: Frame, options: Options, store: ModelStore) -> ClassicSource:
    return make_classic_source(astronaut, meshed_face(astronaut, options, store))


@pytest.fixture(scope="module")
def graded_clip_frames() -> list[Frame]:
    return graded_hopper_clip()


CLIPS = ["carphone", "graded_hopper"]


@pytest.fixture(scope="module", params=CLIPS)
def clip(
    request: pytest.FixtureRequest, astronaut_source: ClassicSource, options: Options, store: ModelStore
) -> tuple[str, ClipSwap]:
    if request.param == "carphone":
        frames = request.getfixturevalue("carphone_frames")[::3]  # 40 of its 120 frames: every pose, a third the time
    else:
        frames = request.getfixturevalue("graded_clip_frames")
    run = swap_clip(frames, astronaut_source, options, store)
    assert len(run.outputs) >= 0.9 * len(frames), "the clip shows a face in nearly every frame"
    return request.param, run


def test_the_face_keeps_the_scenes_skin_colour(clip: tuple[str, ClipSwap]) -> None:
    name, run = clip
    delta_e = np.linalg.norm(run.skin_means(run.outputs) - run.skin_means(run.originals), axis=1)
    assert delta_e.max() < MAX_DELTA_E, f"{name}: skin ΔE up to {delta_e.max():.2f} (mean {delta_e.mean():.2f})"


def test_the_edge_ramps_instead_of_jumping(clip: tuple[str, ClipSwap]) -> None:
    name, run = clip
    ours = {sector: float(np.median([steps[sector] for steps in run.steps])) for sector in SECTORS}
    hard = {sector: float(np.median([steps[sector] for steps in run.hard_steps])) for sector in SECTORS}
    report = ", ".join(f"{sector} {ours[sector]:.2f}/{hard[sector]:.2f}" for sector in SECTORS)
    ratios = [ours[sector] / hard[sector] for sector in SECTORS]
    assert max(ours.values()) < 2.0, f"{name}: a step of the change across the edge (L/px, ours/hard paste): {report}"
    assert max(ratios) < 0.4 and np.mean(ratios) < 0.3, f"{name}: not much softer than a hard paste: {report}"


def test_the_forehead_edge_adds_no_lightness_step_of_its_own(clip: tuple[str, ClipSwap]) -> None:
    """Across the region's upper edge the output's lightness changes no more than the target's own over the same
    rows (seam_measure.py): on the median frame and on average (within SEAM_SLACK, below what the eye tells apart),
    and within 1 L unit on nine frames in ten."""
    name, run = clip
    output = np.array([edge.output for edge in run.upper_edges])
    target = np.array([edge.target for edge in run.upper_edges])
    report = f"{name}: L change across the upper edge, output/target: median {np.median(output):.2f}/" + (
        f"{np.median(target):.2f}, mean {output.mean():.2f}/{target.mean():.2f}"
    )
    assert len(output) >= 0.8 * len(run.outputs), f"{name}: the upper edge was measured on {len(output)} frames"
    assert np.median(output) <= np.median(target) + SEAM_SLACK, report
    assert output.mean() <= target.mean() + SEAM_SLACK, report
    assert np.mean(output > target + 1.0) <= 0.1, f"{report}; frames above the target's by over 1: {output - target}"


def test_the_face_colour_does_not_flicker_more_than_the_original(clip: tuple[str, ClipSwap]) -> None:
    name, run = clip
    swapped = np.linalg.norm(np.diff(run.skin_means(run.outputs), axis=0), axis=1).mean()
    original = np.linalg.norm(np.diff(run.skin_means(run.originals), axis=0), axis=1).mean()
    assert swapped <= 1.1 * original, f"{name}: frame to frame ΔE {swapped:.2f} against the original's {original:.2f}"


def test_the_identity_moves_on_nine_in_ten_face_frames(
    clip: tuple[str, ClipSwap], astronaut: Frame, judge: IdentityJudge
) -> None:
    name, run = clip
    source = judge.descriptor(astronaut)
    closer, judged = 0, 0
    for original, output in zip(
        run.originals[::2], run.outputs[::2], strict=True
    ):  # every other one: ~0.1 s per descriptor
        where = judge.locate(original, upsample=0) or judge.locate(original, upsample=1)
        if where is None:
            continue
        judged += 1
        result = judge.descriptor(output, where)
        closer += judge.distance(result, source) < judge.distance(result, judge.descriptor(original, where))
    assert judged >= 0.8 * len(run.originals[::2]), f"{name}: the judge found too few faces ({judged})"
    assert closer >= 0.9 * judged, f"{name}: only {closer} of {judged} frames moved towards the source"
