"""The offline default swapper ``classic``: the source face's texture on the target face's geometry.

The source face (crop + 468 mesh points + the Delaunay triangles of those points, all computed once in ``prepare``) is
warped triangle by triangle onto the target's mesh, so the target's pose and expression stay. With
``face_swapper_color_correction`` it takes the target face's skin tone and light, measured on skin only (skin_tone):
in the face's middle at a coarse scale, towards its outline at a finer one that also reads the target's skin in a ring
around the face, so the swapped face meets the forehead under the hair or the neck at their own tone, without a step.
The mask follows the face: the mesh's hull, eroded and feathered in proportion to the face's size, the target's own
mouth interior kept, and any hair of the source at the rim of its face left out; a multi-band blend on the face's
rectangle puts it in, scaled by ``face_swapper_blend``.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt

from facefusion_provider.engine.blend import band_levels, blend_bands
from facefusion_provider.engine.face import Face, FloatArray, Frame
from facefusion_provider.engine.face_masks import (
    MESH_INNER_LIPS,
    FaceRegions,
    area_mask,
    face_regions,
    feather,
    hull_mask,
    inner_distance,
    smoothstep,
)
from facefusion_provider.engine.landmarks import MESH_POINTS
from facefusion_provider.engine.paste import Patch, patch_in_frame
from facefusion_provider.engine.skin_tone import Surround, lab_to_rgb, rgb_to_lab, skin_color, transfer_skin_tone
from facefusion_provider.exceptions import InvalidWorkError
from facefusion_provider.options import Options

IntArray = npt.NDArray[np.int32]
BoolArray = npt.NDArray[np.bool_]
Mask = npt.NDArray[np.float32]  # H x W, 0..1

SOURCE_MARGIN = 0.15  # of the source mesh's size, kept around it in the stored crop
SOURCE_MAX_SIDE = 512  # larger source faces are stored downscaled: the target rarely needs more
ROI_MARGIN = 4  # pixels of target context around the face
# Every length below is a fraction of the face's size, so the look is the same at any resolution.
TONE_SCALE = 0.06  # skin tone moves at a blur sigma of this: finer would copy the target's own texture
SKIN_RING = 0.04  # the target's skin this far around the face region sets the tone at its rim (forehead, jaw, neck)
RIM_TONE_SCALE = 0.015  # towards the rim the tone follows the target's at this finer scale, so the edge has no step
RIM_DEPTH = 0.25  # from the outline inwards over this, the finer tone gives way to the face's own (TONE_SCALE)
CORE_MARGIN = 0.10  # the typical skin colour is measured this far inside the outline, where hair rarely reaches
EDGE_EROSION = 0.04  # the blend starts this far inside the face area, where the mesh fits the face best
FEATHER_SCALE = 0.6  # then rises from 0 to 1 over this x face_mask_blur
MOUTH_RAMP = 0.03  # the swapped lips fade out over this towards the target's mouth opening
OUTLINE_RIM = 0.18  # in this rim of the outline, what of the source is not skin (hair, a hat) is not painted
VISIBILITY_SOFTNESS = 0.02  # the blur that keeps that hair test from leaving speckles
SOURCE_DETAIL_LIMIT = 1.2  # a target face over this x the source face's size is worked at that size, scaled up
POINT_SHIFT = 4  # sub-pixel precision of the triangle raster (OpenCV fixed point)


@dataclass(frozen=True)
class ClassicSource:
    """The source face as the classic swapper needs it, computed once per work."""

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
        raise InvalidWorkError(f"work.json identity.classic is incomplete or damaged: {error}") from None
    image = cv2.imdecode(png, cv2.IMREAD_COLOR)
    if image is None or triangles.size == 0 or triangles.min() < 0 or triangles.max() >= MESH_POINTS:
        raise InvalidWorkError("work.json identity.classic holds no readable source face")
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
    minus ``face_mask_padding`` (percent of the face box from its top, right, bottom and left), and with ``area`` among
    ``face_mask_types`` only inside the hull of the ``face_mask_areas``."""
    area = hull_mask(covered.shape, points)
    area[~covered] = 0
    cv2.fillPoly(area, [np.round(points[list(MESH_INNER_LIPS)]).astype(np.int32)], 0)
    if "area" in options.face_mask_types:
        area &= area_mask(covered.shape, points, options.face_mask_areas)
    low, high = points.min(axis=0), points.max(axis=0)
    width, height = high - low
    top, right, bottom, left = options.face_mask_padding
    area[: max(0, int(np.ceil(low[1] + height * top / 100))), :] = 0
    area[int(np.floor(high[1] - height * bottom / 100)) + 1 :, :] = 0
    area[:, : max(0, int(np.ceil(low[0] + width * left / 100)))] = 0
    area[:, int(np.floor(high[0] - width * right / 100)) + 1 :] = 0
    return area


def blend_alpha(area: npt.NDArray[np.uint8], regions: FaceRegions, blur: float) -> Mask:
    """The blend mask inside ``area``: from the outer edge it stays 0 for EDGE_EROSION of the face size (the mesh's
    rim fits least), then rises over a ramp that follows ``blur``; towards the mouth opening it fades out. ``blur`` 0
    gives a hard edge at the area itself."""
    if blur <= 0:
        return (area > 0).astype(np.float32)
    # The outer edge is measured with the mouth opening filled in: the mouth has its own, shorter fade.
    outer = feather(
        np.where(regions.mouth > 0, 255, area).astype(np.uint8),
        regions.size * EDGE_EROSION,
        regions.size * blur * FEATHER_SCALE,
    )
    mouth = smoothstep(inner_distance(255 - regions.mouth) / max(1.0, regions.size * MOUTH_RAMP))
    return np.asarray(outer * mouth * (area > 0), np.float32)


def source_visibility(regions: FaceRegions, source_skin: FloatArray) -> Mask:
    """1 where the source face may paint. In the rim of the outline, only as far as the source looks like its own skin
    there: a fringe of hair or a hat brim at the source's forehead is not painted onto the target's."""
    rim = (regions.outline_distance < regions.size * OUTLINE_RIM) & (regions.features == 0)
    visibility = np.where(rim, np.clip(2.0 * source_skin, 0.0, 1.0), 1.0).astype(np.float32)
    return np.asarray(cv2.GaussianBlur(visibility, (0, 0), max(1.0, regions.size * VISIBILITY_SOFTNESS)), np.float32)


def recolor_source(
    warped: Frame, surround: tuple[Frame, int], area: npt.NDArray[np.uint8], regions: FaceRegions, correct: bool
) -> tuple[Frame, Mask]:
    """The warped source face with the target face's skin tone and light (when ``correct``), and where it may paint.

    ``surround`` is the target around the warped face and how many pixels wider it is on every side. Skin is measured where
    both faces look like their own typical skin: inside the outline, away from its rim, eyes, brows and lips; the
    typical colour comes from the face's core, which hair rarely reaches.
    """
    warped_lab = rgb_to_lab(warped)
    skin = regions.skin & (area > 0)
    core = skin & (regions.outline_distance > regions.size * CORE_MARGIN)
    source_color = skin_color(warped_lab, core)
    if source_color is None:  # no skin of the source shows: nothing to measure or screen
        return warped, np.ones(area.shape, np.float32)
    source_skin = source_color.likelihood(warped_lab)
    visibility = source_visibility(regions, source_skin)
    surround_lab, inset = rgb_to_lab(surround[0]), surround[1]
    inner = np.s_[inset : inset + area.shape[0], inset : inset + area.shape[1]]
    target_lab = surround_lab[inner]
    target_color = skin_color(target_lab, core)
    if not correct or target_color is None:
        return warped, visibility
    surround_skin = target_color.likelihood(surround_lab)
    weight = np.asarray(skin * source_skin * surround_skin[inner], np.float32)
    # The target's tone is read from its skin inside the face and in a ring around it, so the rim takes the tone of
    # the skin it meets (a shaded forehead under the hair, the neck) instead of the face's middle.
    around = cv2.copyMakeBorder(
        (skin | ((regions.outline == 0) & (regions.features == 0))).astype(np.float32),
        *(inset,) * 4,
        cv2.BORDER_CONSTANT,
        value=1.0,
    )
    rim = 1.0 - smoothstep(regions.outline_distance / max(1.0, regions.size * RIM_DEPTH))
    moved = transfer_skin_tone(
        warped_lab,
        target_lab,
        weight,
        regions.soft_skin,
        max(1.0, regions.size * TONE_SCALE),
        surround=Surround(surround_lab, np.asarray(around * surround_skin, np.float32), inset),
        rim=(max(1.0, regions.size * RIM_TONE_SCALE), rim),
    )
    return np.clip(np.rint(lab_to_rgb(moved)), 0, 255).astype(np.uint8), visibility


def work_surround(frame: Frame, region: Region, ring: int, work_size: tuple[int, int]) -> tuple[Frame, int]:
    """The frame around ``region`` with ``ring`` more pixels on every side, at the work size (``work_size`` is the
    region's): the crop, and its ring in work pixels."""
    outer = Region(region.x1 - ring, region.y1 - ring, region.x2 + ring, region.y2 + ring)
    crop = crop_region(frame, outer)
    if work_size == region.size:
        return crop, ring
    work_ring = round(ring * work_size[0] / region.size[0])
    size = (work_size[0] + 2 * work_ring, work_size[1] + 2 * work_ring)
    return np.asarray(cv2.resize(crop, size, interpolation=cv2.INTER_AREA), np.uint8), work_ring


@dataclass(frozen=True)
class ClassicSwap:
    """One face's swap before it is pasted: the frame region, its original and swapped pixels, the blend mask, and
    the pyramid levels its multi-band blend uses."""

    region: Region
    target: Frame
    swapped: Frame
    alpha: Mask  # 0 where nothing changes
    levels: int


def mesh_size(points: FloatArray) -> float:
    return float((points.max(axis=0) - points.min(axis=0)).max())


def classic_swap(frame: Frame, face: Face, source: ClassicSource, options: Options) -> ClassicSwap:
    """The swap of one face. A target face much larger than the source face is worked on at SOURCE_DETAIL_LIMIT x the
    source's size (finer, the source has no detail to add), and the swapped pixels and the soft mask are scaled up
    once."""
    if face.landmark_dense is None or len(face.landmark_dense) != MESH_POINTS:
        raise ValueError("the classic swapper needs the 468-point face mesh of each target face")
    face_size = mesh_size(face.landmark_dense)
    region = face_region(face.landmark_dense, ROI_MARGIN)
    points = (face.landmark_dense - [region.x1, region.y1]).astype(np.float32)
    target = crop_region(frame, region)
    levels = band_levels(face_size)
    scale = min(1.0, SOURCE_DETAIL_LIMIT * mesh_size(source.landmarks) / max(face_size, 1.0))
    work_size = (max(1, round(region.size[0] * scale)), max(1, round(region.size[1] * scale)))
    work_points = ((points + 0.5) * [work_size[0] / region.size[0], work_size[1] / region.size[1]] - 0.5).astype(
        np.float32
    )
    warped, covered = warp_source(source, work_points, work_size)
    work_area = face_area_mask(work_points, covered, options)
    if not np.any(work_area):
        return ClassicSwap(region, target, target, np.zeros(target.shape[:2], np.float32), levels)
    work_regions = face_regions(work_area.shape, work_points)
    surround = work_surround(frame, region, max(1, round(face_size * SKIN_RING)), work_size)
    swapped, visibility = recolor_source(
        warped, surround, work_area, work_regions, options.face_swapper_color_correction
    )
    soft = options.face_mask_blur > 0
    if scale < 1.0 and not soft:  # a hard mask's edge is drawn at full resolution
        covered = cv2.resize(covered.astype(np.uint8), region.size, interpolation=cv2.INTER_NEAREST) > 0
        alpha = (face_area_mask(points, covered, options) > 0).astype(np.float32)
    else:
        # A soft mask is 0 for EDGE_EROSION inside the area's edge and smooth beyond it: worked small, scaled up.
        alpha = blend_alpha(work_area, work_regions, options.face_mask_blur)
        if soft:  # the hair test's soft edges only where the mask is soft too
            alpha = alpha * visibility
        alpha = scaled_up(alpha, region.size)
    alpha *= np.float32(options.face_swapper_blend / 100.0)
    return ClassicSwap(region, target, scaled_up(swapped, region.size), alpha, levels)


def scaled_up(image: npt.NDArray[Any], size: tuple[int, int]) -> npt.NDArray[Any]:
    """``image`` at ``size`` (w, h), bilinear; itself when it is that size already."""
    if (image.shape[1], image.shape[0]) == size:
        return image
    return np.asarray(cv2.resize(image, size, interpolation=cv2.INTER_LINEAR), image.dtype)


def classic_face_mask(frame: Frame, face: Face, source: ClassicSource, options: Options) -> Mask:
    """The blend mask of one face in frame coordinates: the swap changes no pixel where it is 0."""
    swap = classic_swap(frame, face, source, options)
    mask = np.zeros(frame.shape[:2], np.float32)
    _paste(mask, swap.region, swap.alpha)
    return mask


def classic_patch(frame: Frame, face: Face, source: ClassicSource, options: Options) -> Patch | None:
    """The source face swapped onto ``face``, as the frame's pixels it changes; None when it changes none."""
    swap = classic_swap(frame, face, source, options)
    rows, columns = np.flatnonzero(swap.alpha.any(axis=1)), np.flatnonzero(swap.alpha.any(axis=0))
    if rows.size == 0:
        return None
    # The bands are blended on the mask's own box: the context around it changes nothing and only costs time.
    box = np.s_[rows[0] : rows[-1] + 1, columns[0] : columns[-1] + 1]
    change = blend_bands(swap.target[box], swap.swapped[box], swap.alpha[box], swap.levels)
    pixels = np.clip(np.rint(swap.target[box] + change), 0, 255).astype(np.uint8)
    patch = patch_in_frame(swap.region.x1 + int(columns[0]), swap.region.y1 + int(rows[0]), pixels, frame.shape)
    return None if patch is None else patch.changed_part(frame)  # the frame is converted back on this box alone


def swap_face_classic(frame: Frame, face: Face, source: ClassicSource, options: Options) -> Frame:
    """The frame with the source face swapped onto ``face`` (a new array; pixels outside the mask are unchanged)."""
    result = frame.copy()
    patch = classic_patch(frame, face, source, options)
    if patch is not None:
        patch.write(result)
    return result


def _paste(canvas: npt.NDArray[Any], region: Region, patch: npt.NDArray[Any]) -> None:
    """Write the in-frame part of ``patch`` (which covers ``region``) into ``canvas``."""
    height, width = canvas.shape[:2]
    x1, y1 = max(0, region.x1), max(0, region.y1)
    x2, y2 = min(width, region.x2), min(height, region.y2)
    if x2 <= x1 or y2 <= y1:
        return
    canvas[y1:y2, x1:x2] = patch[y1 - region.y1 : y2 - region.y1, x1 - region.x1 : x2 - region.x1]
