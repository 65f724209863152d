"""Face masks: drawn from landmarks (the face's outline, its features, its skin, FaceFusion's mask areas, feathering),
and FaceFusion's model masks (occlusion by an XSeg occluder, region by a BiSeNet face parser).

Two landmark layouts are known: MediaPipe's 468-point face mesh and the 68-point layout of 2dfan4 (iBUG 300-W).
The index lists below are points of those published layouts; every mask is a pure function of the points (or of the
crop and the model), so the same face gives the same mask in any worker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt

from facefusion_provider.engine.face import FloatArray
from facefusion_provider.engine.runtime import run_session
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.options import Options

ByteMask = npt.NDArray[np.uint8]  # H x W, 0 or 255
BoolMask = npt.NDArray[np.bool_]
SoftMask = npt.NDArray[np.float32]  # H x W, 0..1

SKIN_EDGE = 0.02  # of face size: skin starts this far inside the outline (its last pixels mix in hair or background)
FEATURE_MARGIN = 0.03  # of face size: eyes, brows and lips grow by this before skin is what is left


@dataclass(frozen=True)
class Topology:
    """What the points of one landmark layout outline."""

    outline: tuple[int, ...]  # the face's outline in order, a closed polygon
    features: tuple[tuple[int, ...], ...]  # eyes, brows and outer lips: closed polygons that are not skin
    inner_lips: tuple[int, ...]  # the mouth opening, in order
    areas: Mapping[str, tuple[int, ...]]  # FaceFusion's face_mask_areas: the points whose hull is that area


# MediaPipe face mesh: the face oval from the top of the forehead clockwise (as seen in the image).
_MESH_OVAL: tuple[int, ...] = (
    *(10, 338, 297, 332, 284, 251, 389, 356, 454, 323, 361, 288, 397, 365, 379, 378, 400, 377),
    *(152, 148, 176, 149, 150, 136, 172, 58, 132, 93, 234, 127, 162, 21, 54, 103, 67, 109),
)
_MESH_NOSE_BASE = (98, 94, 327)  # the nostrils' outer corners and the point under the nose
_MESH_OUTER_LIPS = (61, 146, 91, 181, 84, 17, 314, 405, 321, 375, 291, 409, 270, 269, 267, 0, 37, 39, 40, 185)
MESH_INNER_LIPS = (78, 95, 88, 178, 87, 14, 317, 402, 318, 324, 308, 415, 310, 311, 312, 13, 82, 81, 80, 191)
_MESH_EYES = (
    (33, 7, 163, 144, 145, 153, 154, 155, 133, 173, 157, 158, 159, 160, 161, 246),
    (263, 249, 390, 373, 374, 380, 381, 382, 362, 398, 384, 385, 386, 387, 388, 466),
)
_MESH_BROWS = ((46, 53, 52, 65, 55, 70, 63, 105, 66, 107), (276, 283, 282, 295, 285, 300, 293, 334, 296, 336))
# The oval splits at the nose base (132 and 361): the upper arc runs over the forehead, the lower one round the chin.
_MESH_UPPER_ARC = _MESH_OVAL[26:] + _MESH_OVAL[:11]
_MESH_LOWER_ARC = _MESH_OVAL[10:27]

MESH_468 = Topology(
    outline=_MESH_OVAL,
    features=(*_MESH_EYES, *_MESH_BROWS, _MESH_OUTER_LIPS),
    inner_lips=MESH_INNER_LIPS,
    areas={
        "upper-face": _MESH_UPPER_ARC + _MESH_NOSE_BASE,
        "lower-face": _MESH_LOWER_ARC + _MESH_NOSE_BASE,
        "mouth": _MESH_OUTER_LIPS,
    },
)

# 68-point layout: jaw 0-16, brows 17-26, nose 27-35, eyes 36-47, outer lips 48-59, inner lips 60-67.
_FAN_JAW = tuple(range(17))
_FAN_BROWS_BACKWARDS = tuple(range(26, 16, -1))  # closes the jaw line over the brows: the layout has no forehead
FAN_68 = Topology(
    outline=_FAN_JAW + _FAN_BROWS_BACKWARDS,
    features=(
        tuple(range(36, 42)),
        tuple(range(42, 48)),
        tuple(range(17, 22)),
        tuple(range(22, 27)),
        tuple(range(48, 60)),
    ),
    inner_lips=tuple(range(60, 68)),
    areas={
        "upper-face": (0, 1, 2, 14, 15, 16, *range(17, 27), *range(31, 36)),
        "lower-face": (*range(2, 15), *range(31, 36)),
        "mouth": tuple(range(48, 60)),
    },
)

TOPOLOGIES = {468: MESH_468, 68: FAN_68}


def topology_of(landmarks: FloatArray) -> Topology:
    """The layout of ``landmarks`` by its point count; ValueError for any other count."""
    topology = TOPOLOGIES.get(len(landmarks))
    if topology is None:
        raise ValueError(f"face masks need the 468-point mesh or 68 points, not {len(landmarks)} landmarks")
    return topology


def face_size(points: FloatArray) -> float:
    """The long side of the landmarks' box, in pixels: every mask distance is a fraction of it."""
    return float((points.max(axis=0) - points.min(axis=0)).max())


def polygon_mask(shape: tuple[int, int], polygons: Sequence[FloatArray]) -> ByteMask:
    """255 inside any of ``polygons`` (points in pixel coordinates), 0 elsewhere."""
    mask = np.zeros(shape, np.uint8)
    cv2.fillPoly(mask, [np.round(polygon).astype(np.int32) for polygon in polygons], 255)
    return mask


def hull_mask(shape: tuple[int, int], points: FloatArray) -> ByteMask:
    """255 inside the convex hull of ``points``."""
    mask = np.zeros(shape, np.uint8)
    cv2.fillConvexPoly(mask, cv2.convexHull(np.round(points).astype(np.int32)), 255)
    return mask


def area_points(landmarks: FloatArray, areas: Sequence[str]) -> FloatArray:
    """The landmarks of every chosen area (upper-face, lower-face, mouth)."""
    topology = topology_of(landmarks)
    return landmarks[sorted({index for area in areas for index in topology.areas[area]})]


def area_mask(shape: tuple[int, int], landmarks: FloatArray, areas: Sequence[str]) -> ByteMask:
    """FaceFusion's area mask: the hull of the points of every chosen area."""
    return hull_mask(shape, area_points(landmarks, areas))


def inner_distance(mask: ByteMask) -> FloatArray:
    """For each pixel of ``mask``, its distance in pixels to the nearest pixel outside it (0 outside)."""
    # A zero frame around it: OpenCV would not count the image border as outside, and a face may reach past it.
    padded = cv2.copyMakeBorder(mask, 1, 1, 1, 1, cv2.BORDER_CONSTANT, value=0)
    return np.asarray(cv2.distanceTransform(padded, cv2.DIST_L2, 3)[1:-1, 1:-1], np.float32)


def smoothstep(values: FloatArray) -> SoftMask:
    """0 below 0, 1 above 1, a smooth S in between (no kink where the ramp starts or ends)."""
    clipped = np.clip(values, 0.0, 1.0)
    return np.asarray(clipped * clipped * (3.0 - 2.0 * clipped), np.float32)


def feather(mask: ByteMask, erosion: float, ramp: float) -> SoftMask:
    """A soft ``mask``: 0 up to ``erosion`` pixels inside its edge, then rising to 1 over ``ramp`` pixels."""
    distance = inner_distance(mask)
    if ramp < 1.0:
        return (distance > erosion).astype(np.float32)
    return smoothstep((distance - erosion) / ramp)


@dataclass(frozen=True)
class FaceRegions:
    """One face's landmark regions in an image of ``shape``, computed once and shared by the colour and the mask steps."""

    points: FloatArray
    size: float  # face size in pixels
    outline: ByteMask  # inside the face outline
    outline_distance: FloatArray  # pixels to the outline's edge, inside it
    features: ByteMask  # eyes, brows and lips, grown by FEATURE_MARGIN of the face size
    mouth: ByteMask  # the mouth opening (inner lips)

    @property
    def soft_skin(self) -> SoftMask:
        """1 away from the eyes, brows and lips, 0 on them, with a soft edge: how much each pixel is skin by place."""
        softness = max(1.0, self.size * FEATURE_MARGIN)
        return np.asarray(
            1.0 - cv2.GaussianBlur(self.features.astype(np.float32) / 255.0, (0, 0), softness), np.float32
        )

    @property
    def skin(self) -> BoolMask:
        """The outline, less a thin rim, less the features: what should be skin, if nothing covers it."""
        return np.asarray((self.outline_distance > self.size * SKIN_EDGE) & (self.features == 0), np.bool_)


def face_regions(shape: tuple[int, int], points: FloatArray) -> FaceRegions:
    """The regions of the face whose landmarks are ``points`` (either layout) in an image of ``shape``."""
    topology = topology_of(points)
    size = face_size(points)
    outline = polygon_mask(shape, [points[list(topology.outline)]])
    features = polygon_mask(shape, [points[list(feature)] for feature in topology.features])
    grow = max(1, round(size * FEATURE_MARGIN))
    features = np.asarray(cv2.dilate(features, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * grow + 1,) * 2)))
    mouth = polygon_mask(shape, [points[list(topology.inner_lips)]])
    return FaceRegions(points, size, outline, inner_distance(outline), features, mouth)


# --- FaceFusion's model masks ----------------------------------------------------------------------------------------

OCCLUDER_SIZE = 256
OCCLUDER_MODELS = ("xseg_1", "xseg_2", "xseg_3")  # face_occluder_model many: all of them
PARSER_SIZE = 512
MODEL_MASK_SIGMA = 5.0  # the Gaussian that softens a model mask before its re-threshold
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)
# CelebAMask-HQ class ids of the face parser's output, by FaceFusion's region names.
FACE_MASK_REGION_IDS: Mapping[str, int] = {
    "skin": 1,
    "left-eyebrow": 2,
    "right-eyebrow": 3,
    "left-eye": 4,
    "right-eye": 5,
    "glasses": 6,
    "nose": 10,
    "mouth": 11,
    "upper-lip": 12,
    "lower-lip": 13,
}
CropImage = npt.NDArray[np.uint8] | npt.NDArray[np.float32]  # H x W x 3 RGB, 0..255


def sharpen_model_mask(mask: FloatArray) -> SoftMask:
    """FaceFusion's finish of a model mask: blurred (sigma 5), then only what is above one half, stretched to 0..1."""
    blurred = cv2.GaussianBlur(np.clip(mask, 0.0, 1.0).astype(np.float32), (0, 0), MODEL_MASK_SIGMA)
    return np.asarray((np.clip(blurred, 0.5, 1.0) - 0.5) * 2.0, np.float32)


def occluder_input(crop: CropImage) -> FloatArray:
    """The occluder's ``input``: (1, 256, 256, 3) in 0..1, channels in BGR order (FaceFusion feeds its BGR crop)."""
    resized = cv2.resize(np.asarray(crop, np.float32), (OCCLUDER_SIZE, OCCLUDER_SIZE))
    return np.ascontiguousarray(resized[None, :, :, ::-1] / 255.0, np.float32)


def parser_input(crop: CropImage) -> FloatArray:
    """The face parser's ``input``: (1, 3, 512, 512) RGB, ImageNet mean and std."""
    resized = cv2.resize(np.asarray(crop, np.float32), (PARSER_SIZE, PARSER_SIZE)) / 255.0
    return np.ascontiguousarray(((resized - IMAGENET_MEAN) / IMAGENET_STD).transpose(2, 0, 1)[None], np.float32)


def _crop_sized(mask: FloatArray, crop: CropImage) -> FloatArray:
    height, width = crop.shape[:2]
    return np.asarray(cv2.resize(mask, (width, height)), np.float32)


def occluder_models(options: Options) -> tuple[str, ...]:
    """The occluders ``face_occluder_model`` runs: ``many`` is all three, as in FaceFusion."""
    return OCCLUDER_MODELS if options.face_occluder_model == "many" else (options.face_occluder_model,)


def mask_models(options: Options) -> tuple[str, ...]:
    """The catalogue models the chosen ``face_mask_types`` run: the occluders, the face parser."""
    occlusion = occluder_models(options) if "occlusion" in options.face_mask_types else ()
    region = (options.face_parser_model,) if "region" in options.face_mask_types else ()
    return (*occlusion, *region)


def occlusion_mask(crop: CropImage, store: ModelStore, options: Options) -> SoftMask:
    """1 where the face shows, 0 where something covers it (a hand, hair, glasses): ``face_occluder_model``'s answer;
    with ``many``, covered where any of the three says so."""
    masks = []
    for model in occluder_models(options):
        (output, *_) = run_session(store.session_for(model, options), {"input": occluder_input(crop)})
        visible = np.clip(np.asarray(output, np.float32)[0, :, :, 0], 0.0, 1.0)
        masks.append(_crop_sized(visible, crop))
    return sharpen_model_mask(np.minimum.reduce(masks))


def region_mask(crop: CropImage, store: ModelStore, options: Options) -> SoftMask:
    """1 on the ``face_mask_regions`` that ``face_parser_model`` finds in ``crop``, 0 elsewhere."""
    session = store.session_for(options.face_parser_model, options)
    (logits, *_) = run_session(session, {"input": parser_input(crop)})
    wanted = [FACE_MASK_REGION_IDS[region] for region in options.face_mask_regions]
    chosen = np.isin(np.asarray(logits)[0].argmax(axis=0), wanted).astype(np.float32)
    return sharpen_model_mask(_crop_sized(chosen, crop))


def with_model_masks(
    mask: FloatArray, crop: CropImage, swapped: CropImage, store: ModelStore, options: Options
) -> FloatArray:
    """``mask`` (box and area) limited by the chosen model masks, as FaceFusion combines them (element-wise minimum):
    occlusion from the original ``crop``, region from the ``swapped`` one."""
    masks = [mask]
    if "occlusion" in options.face_mask_types:
        masks.append(occlusion_mask(crop, store, options))
    if "region" in options.face_mask_types:
        masks.append(region_mask(swapped, store, options))
    return mask if len(masks) == 1 else np.asarray(np.minimum.reduce(masks), np.float32)


def load_mask_models(store: ModelStore, options: Options) -> None:
    """Load the models the chosen mask types need, so a missing file fails before any frame is decoded."""
    for model in mask_models(options):
        store.session_for(model, options)
