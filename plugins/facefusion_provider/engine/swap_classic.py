"""The offline default swapper ``classic``: the source face's texture on the target face's geometry.

The source face (crop + 468 mesh points + the Delaunay triangles of those points, all computed once in ``prepare``) is
warped triangle by triangle onto the target's mesh, so the target's pose and expression stay; its colours are matched to
the target in LAB (``face_swapper_color_correction``), the target's own mouth interior is kept, and the result is
blended in seamlessly: the target's low frequencies (light and skin tone) under the source's features, then a feathered
mask scaled by ``face_swapper_blend``.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt

from facefusion_provider.engine.face import Face, FloatArray, Frame
from facefusion_provider.engine.paste import match_color_statistics
from facefusion_provider.exceptions import InvalidJobError
from facefusion_provider.options import Options

IntArray = npt.NDArray[np.int32]
BoolArray = npt.NDArray[np.bool_]
Mask = npt.NDArray[np.float32]  # H x W, 0..1

MESH_POINTS = 468
# The inner lip line of the face mesh (MediaPipe topology), in order around the mouth opening.
MESH_INNER_LIPS = (78, 95, 88, 178, 87, 14, 317, 402, 318, 324, 308, 415, 310, 311, 312, 13, 82, 81, 80, 191)
SOURCE_MARGIN = 0.15  # of the source mesh's size, kept around it in the stored crop
SOURCE_MAX_SIDE = 512  # larger source faces are stored downscaled: the target rarely needs more
ROI_MARGIN = 4  # pixels of target context around the face
LOW_BAND_SCALE = 0.1  # blend bands split at a blur sigma of this x face size: larger keeps more of the target's shading
FEATHER_SCALE = 0.4  # the mask rises from 0 to 1 over face size x face_mask_blur x this, inside the face area
SOURCE_DETAIL_LIMIT = 2.0  # target faces above this x the source face's size are worked on smaller, then scaled up
LOW_BAND_WORK_SIGMA = 4.0  # the low band is blurred on a copy shrunk until its sigma is this many pixels
POINT_SHIFT = 4  # sub-pixel precision of the triangle raster (OpenCV fixed point)


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


def warp_source(source: ClassicSource, target_points: FloatArray, size: tuple[int, int]) -> tuple[Frame, BoolArray]:
    """The source face drawn on the target mesh in an image of ``size``, and which pixels a triangle covers."""
    labels = triangle_labels(target_points, source.triangles, size)
    affines = triangle_affines(target_points, source.landmarks, source.triangles).astype(np.float32)
    covered = labels >= 0
    ys, xs = np.nonzero(covered)
    chosen = affines[labels[ys, xs]]
    columns, rows = xs.astype(np.float32), ys.astype(np.float32)
    map_x = np.full(labels.shape, -1.0, np.float32)
    map_y = np.full(labels.shape, -1.0, np.float32)
    map_x[ys, xs] = chosen[:, 0, 0] * columns + chosen[:, 1, 0] * rows + chosen[:, 2, 0]
    map_y[ys, xs] = chosen[:, 0, 1] * columns + chosen[:, 1, 1] * rows + chosen[:, 2, 1]
    warped = cv2.remap(source.image, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    return np.asarray(warped, np.uint8), covered


def face_area_mask(points: FloatArray, covered: BoolArray, options: Options) -> npt.NDArray[np.uint8]:
    """255 where the swap may paint: the target mesh's hull covered by warped triangles, minus the mouth interior,
    minus ``face_mask_padding`` (percent of the face box from its top, right, bottom and left)."""
    hull = cv2.convexHull(np.round(points).astype(np.int32))
    area = np.zeros(covered.shape, np.uint8)
    cv2.fillConvexPoly(area, hull, 255)
    area[~covered] = 0
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
    """A soft mask: 0 outside ``area``, rising smoothly over a band inside its edge whose width follows ``blur``."""
    ramp = face_size * blur * FEATHER_SCALE
    if ramp < 1.0:
        return (area > 0).astype(np.float32)
    distance = cv2.distanceTransform(area, cv2.DIST_L2, 3)  # pixels to the nearest pixel outside the area
    rise = np.clip(distance / ramp, 0.0, 1.0)
    return np.asarray(rise * rise * (3.0 - 2.0 * rise), np.float32)


def masked_blur(
    pixels: npt.NDArray[np.float32], weight: npt.NDArray[np.float32], sigma: float
) -> npt.NDArray[np.float32]:
    """Gaussian blur of ``pixels`` using only where ``weight`` is 1: the low band of a masked region.

    A low band holds nothing finer than sigma, so it is computed on a copy shrunk until sigma is a few pixels.
    """
    height, width = weight.shape[:2]
    factor = min(1.0, LOW_BAND_WORK_SIGMA / sigma)
    size = (max(1, round(width * factor)), max(1, round(height * factor)))
    weighted = pixels * weight[:, :, np.newaxis]
    small_pixels = cv2.resize(weighted, size, interpolation=cv2.INTER_AREA) if factor < 1.0 else weighted
    small_weight = cv2.resize(weight, size, interpolation=cv2.INTER_AREA) if factor < 1.0 else weight
    blurred = cv2.GaussianBlur(small_pixels, (0, 0), sigma * factor).reshape(size[1], size[0], -1)
    support = np.maximum(cv2.GaussianBlur(small_weight, (0, 0), sigma * factor), 1e-3)[:, :, np.newaxis]
    low = np.asarray(blurred / support, np.float32)
    if factor == 1.0:
        return low
    return np.asarray(cv2.resize(low, (width, height), interpolation=cv2.INTER_LINEAR), np.float32).reshape(
        height, width, -1
    )


def transfer_low_frequencies(image: Frame, reference: Frame, area: npt.NDArray[np.uint8], sigma: float) -> Frame:
    """A two-band blend: the low band (light, shading, skin tone) of ``reference``, the high band (features) of ``image``.

    Both bands are taken inside ``area`` only, so nothing outside the face leaks in; this makes the seam vanish the way
    a Poisson clone does, at the cost of one blur.
    """
    difference = reference.astype(np.float32) - image.astype(np.float32)
    moved = image.astype(np.float32) + masked_blur(difference, (area > 0).astype(np.float32), sigma)
    return np.clip(np.round(moved), 0, 255).astype(np.uint8)


@dataclass(frozen=True)
class ClassicSwap:
    """One face's swap before it is pasted: the frame region, its original and swapped pixels, and the blend mask."""

    region: Region
    target: Frame
    swapped: Frame
    alpha: Mask  # 0 where nothing changes


def mesh_size(points: FloatArray) -> float:
    return float((points.max(axis=0) - points.min(axis=0)).max())


def classic_swap(frame: Frame, face: Face, source: ClassicSource, options: Options) -> ClassicSwap:
    """The swap of one face. A target face much larger than the source face is worked on at a size that the source's
    detail still fills, and the swapped pixels are scaled up once; the mask is always full resolution."""
    if face.landmark_dense is None or len(face.landmark_dense) != MESH_POINTS:
        raise ValueError("the classic swapper needs the 468-point face mesh of each target face")
    region = face_region(face.landmark_dense, ROI_MARGIN)
    points = (face.landmark_dense - [region.x1, region.y1]).astype(np.float32)
    target = crop_region(frame, region)
    face_size = mesh_size(points)
    scale = min(1.0, SOURCE_DETAIL_LIMIT * mesh_size(source.landmarks) / max(face_size, 1.0))
    work_size = (max(1, round(region.size[0] * scale)), max(1, round(region.size[1] * scale)))
    work_points = ((points + 0.5) * [work_size[0] / region.size[0], work_size[1] / region.size[1]] - 0.5).astype(
        np.float32
    )
    work_target = (
        target if scale == 1.0 else np.asarray(cv2.resize(target, work_size, interpolation=cv2.INTER_AREA), np.uint8)
    )
    warped, covered = warp_source(source, work_points, work_size)
    work_area = face_area_mask(work_points, covered, options)
    if not np.any(work_area):
        return ClassicSwap(region, target, target, np.zeros(target.shape[:2], np.float32))
    matched = warped
    if options.face_swapper_color_correction:
        corrected = match_color_statistics(warped, work_target, (work_area > 0).astype(np.float32))
        matched = np.clip(np.rint(corrected), 0, 255).astype(np.uint8)
    swapped = transfer_low_frequencies(matched, work_target, work_area, max(1.0, face_size * scale * LOW_BAND_SCALE))
    if scale < 1.0:
        swapped = np.asarray(cv2.resize(swapped, region.size, interpolation=cv2.INTER_LINEAR), np.uint8)
        covered = cv2.resize(covered.astype(np.uint8), region.size, interpolation=cv2.INTER_NEAREST) > 0
    area = face_area_mask(points, covered, options)
    alpha = feather(area, face_size, options.face_mask_blur) * np.float32(options.face_swapper_blend / 100.0)
    return ClassicSwap(region, target, swapped, alpha)


def classic_face_mask(frame: Frame, face: Face, source: ClassicSource, options: Options) -> Mask:
    """The blend mask of one face in frame coordinates: the swap changes no pixel where it is 0."""
    swap = classic_swap(frame, face, source, options)
    mask = np.zeros(frame.shape[:2], np.float32)
    _paste(mask, swap.region, swap.alpha)
    return mask


def swap_face_classic(frame: Frame, face: Face, source: ClassicSource, options: Options) -> Frame:
    """The frame with the source face swapped onto ``face`` (a new array; pixels outside the mask are unchanged)."""
    swap = classic_swap(frame, face, source, options)
    result = frame.copy()
    if not np.any(swap.alpha):
        return result
    target = swap.target.astype(np.float32)
    alpha = swap.alpha[:, :, np.newaxis]
    blended = np.clip(np.round(target + alpha * (swap.swapped.astype(np.float32) - target)), 0, 255)
    _paste(result, swap.region, np.where(alpha > 0, blended, target).astype(np.uint8))
    return result


def _paste(canvas: npt.NDArray[Any], region: Region, patch: npt.NDArray[Any]) -> None:
    """Write the in-frame part of ``patch`` (which covers ``region``) into ``canvas``."""
    height, width = canvas.shape[:2]
    x1, y1 = max(0, region.x1), max(0, region.y1)
    x2, y2 = min(width, region.x2), min(height, region.y2)
    if x2 <= x1 or y2 <= y1:
        return
    canvas[y1:y2, x1:x2] = patch[y1 - region.y1 : y2 - region.y1, x1 - region.x1 : x2 - region.x1]
