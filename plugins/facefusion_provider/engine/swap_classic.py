"""The offline default swapper ``classic``: the source face's texture on the target face's geometry.

The source face (crop + 468 mesh points + the Delaunay triangles of those points, all computed once in ``prepare``) is
warped triangle by triangle onto the target's mesh, so the target's pose and expression stay; its colours are matched to
the target in LAB, the target's own mouth interior is kept, and the result is blended in seamlessly: the target's low
frequencies (light and skin tone) under the source's features, then a feathered mask scaled by ``face_swapper_blend``.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt

from facefusion_provider.engine.face import Face, FloatArray, Frame
from facefusion_provider.exceptions import InvalidJobError
from facefusion_provider.options import Options

IntArray = npt.NDArray[np.int32]
Mask = npt.NDArray[np.float32]  # H x W, 0..1

MESH_POINTS = 468
# The inner lip line of the face mesh (MediaPipe topology), in order around the mouth opening.
MESH_INNER_LIPS = (78, 95, 88, 178, 87, 14, 317, 402, 318, 324, 308, 415, 310, 311, 312, 13, 82, 81, 80, 191)
SOURCE_MARGIN = 0.15  # of the source mesh's size, kept around it in the stored crop
SOURCE_MAX_SIDE = 512  # larger source faces are stored downscaled: the target rarely needs more
ROI_MARGIN = 4  # pixels of target context around the face
LOW_BAND_SCALE = 0.1  # blend bands split at a blur sigma of this x face size: larger keeps more of the target's shading
FEATHER_SCALE = 0.1  # feather sigma = face size x face_mask_blur x this
POINT_SHIFT = 4  # sub-pixel precision of the triangle raster (OpenCV fixed point)
LAB_STD_RATIO = (0.5, 2.0)  # bounds of the colour-transfer contrast change


@dataclass(frozen=True)
class ClassicSource:
    """The source face as the classic swapper needs it, computed once per job."""

    image: Frame  # the source face crop, RGB
    landmarks: FloatArray  # (468, 2) mesh points in crop pixels
    triangles: IntArray  # (T, 3) indices into landmarks: Delaunay triangles of the source mesh


def delaunay_triangles(points: FloatArray) -> IntArray:
    """The Delaunay triangulation of ``points`` as index triples."""
    low = np.floor(points.min(axis=0)) - 1
    high = np.ceil(points.max(axis=0)) + 1
    subdiv = cv2.Subdiv2D((int(low[0]), int(low[1]), int(high[0] - low[0]) + 1, int(high[1] - low[1]) + 1))
    index_of: dict[tuple[float, float], int] = {}
    for index, (x, y) in enumerate(points.astype(np.float32)):
        index_of.setdefault((float(x), float(y)), index)
        subdiv.insert((float(x), float(y)))
    triangles = []
    for x1, y1, x2, y2, x3, y3 in subdiv.getTriangleList():
        corners = [index_of.get((float(x), float(y))) for x, y in ((x1, y1), (x2, y2), (x3, y3))]
        if all(corner is not None for corner in corners):
            triangles.append(corners)
    return np.asarray(triangles, np.int32).reshape(-1, 3)


def make_classic_source(frame: Frame, face: Face) -> ClassicSource:
    """Crop the source face (with a margin) and triangulate its mesh."""
    if face.landmark_dense is None or len(face.landmark_dense) != MESH_POINTS:
        raise ValueError("the classic swapper needs the 468-point face mesh of the source face")
    points = face.landmark_dense.astype(np.float64)
    low, high = points.min(axis=0), points.max(axis=0)
    margin = (high - low).max() * SOURCE_MARGIN
    x1, y1 = np.maximum(np.floor(low - margin), 0).astype(int)
    x2, y2 = np.minimum(np.ceil(high + margin), [frame.shape[1], frame.shape[0]]).astype(int)
    crop = frame[y1:y2, x1:x2]
    landmarks = points - [x1, y1]
    scale = min(1.0, SOURCE_MAX_SIDE / max(crop.shape[:2]))
    if scale < 1.0:
        size = (round(crop.shape[1] * scale), round(crop.shape[0] * scale))
        crop = np.asarray(cv2.resize(crop, size, interpolation=cv2.INTER_AREA), np.uint8)
        landmarks = landmarks * scale
    landmarks32 = landmarks.astype(np.float32)
    return ClassicSource(np.ascontiguousarray(crop), landmarks32, delaunay_triangles(landmarks32))


def classic_source_to_json(source: ClassicSource) -> dict[str, Any]:
    ok, png = cv2.imencode(".png", source.image[:, :, ::-1])
    if not ok:
        raise ValueError("could not encode the source face crop as PNG")
    return {
        "image_png_base64": base64.b64encode(png.tobytes()).decode("ascii"),
        "landmarks_468": np.round(source.landmarks.astype(np.float64), 3).tolist(),
        "triangles": source.triangles.tolist(),
    }


def classic_source_from_json(data: dict[str, Any]) -> ClassicSource:
    try:
        png = np.frombuffer(base64.b64decode(data["image_png_base64"]), np.uint8)
        landmarks = np.asarray(data["landmarks_468"], np.float32).reshape(MESH_POINTS, 2)
        triangles = np.asarray(data["triangles"], np.int32).reshape(-1, 3)
    except (KeyError, ValueError, TypeError) as error:
        raise InvalidJobError(f"job.json identity.classic is incomplete or damaged: {error}") from None
    image = cv2.imdecode(png, cv2.IMREAD_COLOR)
    if image is None or triangles.size == 0 or triangles.min() < 0 or triangles.max() >= MESH_POINTS:
        raise InvalidJobError("job.json identity.classic holds no readable source face")
    return ClassicSource(np.ascontiguousarray(image[:, :, ::-1]), landmarks, triangles)


@dataclass(frozen=True)
class Region:
    """A rectangle of the frame, possibly reaching past its edges: x1, y1 inclusive, x2, y2 exclusive."""

    x1: int
    y1: int
    x2: int
    y2: int

    @property
    def size(self) -> tuple[int, int]:
        return self.x2 - self.x1, self.y2 - self.y1


def face_region(landmarks: FloatArray, margin: int) -> Region:
    low = np.floor(landmarks.min(axis=0)).astype(int) - margin
    high = np.ceil(landmarks.max(axis=0)).astype(int) + margin + 1
    return Region(int(low[0]), int(low[1]), int(high[0]), int(high[1]))


def crop_region(frame: Frame, region: Region) -> Frame:
    """The region's pixels; parts outside the frame repeat its edge."""
    height, width = frame.shape[:2]
    pads = (max(0, -region.y1), max(0, region.y2 - height), max(0, -region.x1), max(0, region.x2 - width))
    inside = frame[max(0, region.y1) : min(height, region.y2), max(0, region.x1) : min(width, region.x2)]
    if not any(pads):
        return inside.copy()
    return np.asarray(cv2.copyMakeBorder(inside, *pads, cv2.BORDER_REPLICATE), np.uint8)


def triangle_labels(points: FloatArray, triangles: IntArray, size: tuple[int, int]) -> IntArray:
    """For each pixel of a ``size`` (w, h) image, the index of the triangle that covers it, or -1."""
    labels = np.full((size[1], size[0]), -1, np.int32)
    fixed = np.round(points * (1 << POINT_SHIFT)).astype(np.int32)
    for index, triangle in enumerate(fixed[triangles]):
        cv2.fillConvexPoly(labels, triangle, index, lineType=cv2.LINE_8, shift=POINT_SHIFT)
    return labels


def triangle_affines(from_points: FloatArray, to_points: FloatArray, triangles: IntArray) -> npt.NDArray[np.float64]:
    """(T, 3, 2): per triangle, the affine taking ``[x, y, 1]`` of ``from_points`` to ``to_points``."""
    corners_from = np.concatenate([from_points[triangles], np.ones((len(triangles), 3, 1))], axis=2).astype(np.float64)
    corners_to = to_points[triangles].astype(np.float64)
    degenerate = np.abs(np.linalg.det(corners_from)) < 1e-9
    corners_from[degenerate] = np.eye(3)  # a flat triangle covers no pixel: any affine will do
    return np.asarray(np.linalg.solve(corners_from, corners_to), np.float64)


def warp_source(source: ClassicSource, target_points: FloatArray, size: tuple[int, int]) -> tuple[Frame, IntArray]:
    """The source face drawn on the target mesh in an image of ``size``, and the triangle label of each pixel."""
    labels = triangle_labels(target_points, source.triangles, size)
    affines = triangle_affines(target_points, source.landmarks, source.triangles)
    ys, xs = np.nonzero(labels >= 0)
    chosen = affines[labels[ys, xs]]
    map_x = np.full(labels.shape, -1.0, np.float32)
    map_y = np.full(labels.shape, -1.0, np.float32)
    map_x[ys, xs] = chosen[:, 0, 0] * xs + chosen[:, 1, 0] * ys + chosen[:, 2, 0]
    map_y[ys, xs] = chosen[:, 0, 1] * xs + chosen[:, 1, 1] * ys + chosen[:, 2, 1]
    warped = cv2.remap(source.image, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    return np.asarray(warped, np.uint8), labels


def match_colours(image: Frame, reference: Frame, mask: npt.NDArray[np.bool_]) -> Frame:
    """``image`` with the LAB mean and spread of ``reference`` inside ``mask`` (Reinhard colour transfer)."""
    lab = cv2.cvtColor(image, cv2.COLOR_RGB2LAB).astype(np.float32)
    reference_lab = cv2.cvtColor(reference, cv2.COLOR_RGB2LAB).astype(np.float32)
    mean, std = lab[mask].mean(axis=0), lab[mask].std(axis=0) + 1e-3
    reference_mean, reference_std = reference_lab[mask].mean(axis=0), reference_lab[mask].std(axis=0) + 1e-3
    ratio = np.clip(reference_std / std, *LAB_STD_RATIO)
    matched = (lab - mean) * ratio + reference_mean
    return np.asarray(cv2.cvtColor(np.clip(matched, 0, 255).astype(np.uint8), cv2.COLOR_LAB2RGB), np.uint8)


def _face_area_mask(points: FloatArray, labels: IntArray, options: Options) -> npt.NDArray[np.uint8]:
    """255 where the swap may paint: the target mesh's hull covered by warped triangles, minus the mouth interior,
    minus ``face_mask_padding`` (percent of the face box from its top, right, bottom and left)."""
    hull = cv2.convexHull(np.round(points).astype(np.int32))
    area = np.zeros(labels.shape, np.uint8)
    cv2.fillConvexPoly(area, hull, 255)
    area[labels < 0] = 0
    cv2.fillPoly(area, [np.round(points[list(MESH_INNER_LIPS)]).astype(np.int32)], 0)
    low, high = points.min(axis=0), points.max(axis=0)
    width, height = high - low
    top, right, bottom, left = options.face_mask_padding
    area[: max(0, int(np.ceil(low[1] + height * top / 100))), :] = 0
    area[int(np.floor(high[1] - height * bottom / 100)) + 1 :, :] = 0
    area[:, : max(0, int(np.ceil(low[0] + width * left / 100)))] = 0
    area[:, int(np.floor(high[0] - width * right / 100)) + 1 :] = 0
    return area


def feather(area: npt.NDArray[np.uint8], face_size: float, blur: float) -> Mask:
    """A soft mask that is 1 deep inside ``area`` and exactly 0 on and outside its edge."""
    sigma = face_size * blur * FEATHER_SCALE
    radius = int(np.ceil(2 * sigma))
    if radius < 1:
        return (area > 0).astype(np.float32)
    core = cv2.erode(area, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1, 2 * radius + 1)))
    soft = cv2.GaussianBlur(core.astype(np.float32) / 255.0, (2 * radius + 1, 2 * radius + 1), sigma)
    soft[area == 0] = 0.0
    return np.asarray(soft, np.float32)


def transfer_low_frequencies(image: Frame, reference: Frame, area: npt.NDArray[np.uint8], sigma: float) -> Frame:
    """A two-band blend: the low band (light, shading, skin tone) of ``reference``, the high band (features) of ``image``.

    Both bands are taken inside ``area`` only (normalised masked blur), so nothing outside the face leaks in; this makes
    the seam vanish the way a Poisson clone does, at the cost of a few blurs.
    """
    weight = (area > 0).astype(np.float32)[:, :, np.newaxis]
    support = np.maximum(cv2.GaussianBlur(weight, (0, 0), sigma), 1e-3)[:, :, np.newaxis]

    def low_band(pixels: Frame) -> npt.NDArray[np.float32]:
        blurred = cv2.GaussianBlur(pixels.astype(np.float32) * weight, (0, 0), sigma)
        return np.asarray(blurred / support, np.float32)

    moved = image.astype(np.float32) + low_band(reference) - low_band(image)
    return np.clip(np.round(moved), 0, 255).astype(np.uint8)


def classic_swap_region(
    frame: Frame, face: Face, source: ClassicSource, options: Options
) -> tuple[Region, Frame, Mask]:
    """Where the swap paints, the swapped pixels there, and the blend mask (0 where nothing changes)."""
    if face.landmark_dense is None or len(face.landmark_dense) != MESH_POINTS:
        raise ValueError("the classic swapper needs the 468-point face mesh of each target face")
    region = face_region(face.landmark_dense, ROI_MARGIN)
    points = (face.landmark_dense - [region.x1, region.y1]).astype(np.float32)
    target = crop_region(frame, region)
    warped, labels = warp_source(source, points, region.size)
    area = _face_area_mask(points, labels, options)
    if not np.any(area):
        return region, target, np.zeros(labels.shape, np.float32)
    face_size = float((points.max(axis=0) - points.min(axis=0)).max())
    matched = match_colours(warped, target, area > 0)
    swapped = transfer_low_frequencies(matched, target, area, max(1.0, face_size * LOW_BAND_SCALE))
    alpha = feather(area, face_size, options.face_mask_blur) * (options.face_swapper_blend / 100.0)
    return region, swapped, alpha


def classic_face_mask(frame: Frame, face: Face, source: ClassicSource, options: Options) -> Mask:
    """The blend mask of one face in frame coordinates: the swap changes no pixel where it is 0."""
    region, _, alpha = classic_swap_region(frame, face, source, options)
    mask = np.zeros(frame.shape[:2], np.float32)
    _paste(mask, region, alpha)
    return mask


def swap_face_classic(frame: Frame, face: Face, source: ClassicSource, options: Options) -> Frame:
    """The frame with the source face swapped onto ``face`` (a new array; pixels outside the mask are unchanged)."""
    region, swapped, alpha = classic_swap_region(frame, face, source, options)
    result = frame.copy()
    if not np.any(alpha):
        return result
    target = crop_region(frame, region).astype(np.float32)
    blended = target + alpha[:, :, np.newaxis] * (swapped.astype(np.float32) - target)
    painted = np.where(alpha[:, :, np.newaxis] > 0, np.clip(np.round(blended), 0, 255), target).astype(np.uint8)
    _paste(result, region, painted)
    return result


def _paste(canvas: npt.NDArray[Any], region: Region, patch: npt.NDArray[Any]) -> None:
    """Write the in-frame part of ``patch`` (which covers ``region``) into ``canvas``."""
    height, width = canvas.shape[:2]
    x1, y1 = max(0, region.x1), max(0, region.y1)
    x2, y2 = min(width, region.x2), min(height, region.y2)
    if x2 <= x1 or y2 <= y1:
        return
    canvas[y1:y2, x1:x2] = patch[y1 - region.y1 : y2 - region.y1, x1 - region.x1 : x2 - region.x1]
