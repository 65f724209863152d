"""Five-point alignment: the templates FaceFusion's models were trained on, a similarity fit, the warp and its inverse."""

from __future__ import annotations

from typing import Literal

import cv2
import numpy as np
import numpy.typing as npt

from facefusion_provider.engine.face import FloatArray, Frame

WarpTemplate = Literal[
    "arcface_112", "arcface_112_v1", "arcface_128", "ffhq_512", "mtcnn_512", "styleganex_384", "dfl_whole_face"
]
Matrix = npt.NDArray[np.float64]  # 2 x 3 affine

# Five points (right eye, left eye, nose tip, right and left mouth corner, image left to right) as fractions of the crop.
WARP_TEMPLATES: dict[WarpTemplate, FloatArray] = {
    # InsightFace's 112x112 ArcFace points (FaceFusion's arcface_112_v2), the recogniser's input.
    "arcface_112": np.array(
        [
            [0.34191607, 0.46157411],
            [0.65653393, 0.45983393],
            [0.50022500, 0.64050536],
            [0.37097589, 0.82469196],
            [0.63151696, 0.82325089],
        ],
        np.float32,
    ),
    # FaceFusion's arcface_112_v1: SimSwap's and GHOST's crops.
    "arcface_112_v1": np.array(
        [
            [0.35473214, 0.45658929],
            [0.64526786, 0.45658929],
            [0.50000000, 0.61154464],
            [0.37913393, 0.77687500],
            [0.62086607, 0.77687500],
        ],
        np.float32,
    ),
    # inswapper's 128x128 points: (46.29, 51.70) (81.53, 51.50) (64.03, 71.74) (49.55, 92.37) (78.73, 92.20).
    "arcface_128": np.array(
        [
            [0.36167656, 0.40387734],
            [0.63696719, 0.40235469],
            [0.50019687, 0.56044219],
            [0.38710391, 0.72160547],
            [0.61507734, 0.72034453],
        ],
        np.float32,
    ),
    # GFPGAN's FFHQ points.
    "ffhq_512": np.array(
        [
            [0.37691676, 0.46864664],
            [0.62285697, 0.46912813],
            [0.50123859, 0.61331904],
            [0.39308822, 0.72541100],
            [0.61150205, 0.72490465],
        ],
        np.float32,
    ),
    # FaceFusion's mtcnn_512: HifiFace's crops.
    "mtcnn_512": np.array(
        [
            [0.36562865, 0.46733799],
            [0.63305391, 0.46585885],
            [0.50019127, 0.61942959],
            [0.39032951, 0.77598822],
            [0.61178945, 0.77476328],
        ],
        np.float32,
    ),
    # StyleGANEX's face with its background (the age modifier's wider crop): ffhq_512's face, smaller and centred.
    "styleganex_384": np.array(
        [
            [0.42353745, 0.52289879],
            [0.57725008, 0.52319972],
            [0.50123859, 0.61331904],
            [0.43364461, 0.68337652],
            [0.57015325, 0.68306005],
        ],
        np.float32,
    ),
    # DeepFaceLab's whole face (the deep swapper's models).
    "dfl_whole_face": np.array(
        [
            [0.35342266, 0.39285716],
            [0.62797622, 0.39285716],
            [0.48660713, 0.54017860],
            [0.38839287, 0.68750011],
            [0.59821427, 0.68750011],
        ],
        np.float32,
    ),
}


def template_points(template: WarpTemplate, crop_size: int) -> FloatArray:
    return (WARP_TEMPLATES[template] * crop_size).astype(np.float32)


def estimate_similarity(source: npt.ArrayLike, target: npt.ArrayLike) -> Matrix:
    """The least-squares similarity (rotation, uniform scale, translation) taking ``source`` points onto ``target``.

    Umeyama's closed form: the same fit as cv2.estimateAffinePartial2D when every point is an inlier, but exact.
    """
    src = np.asarray(source, np.float64).reshape(-1, 2)
    dst = np.asarray(target, np.float64).reshape(-1, 2)
    src_mean, dst_mean = src.mean(axis=0), dst.mean(axis=0)
    src_centered, dst_centered = src - src_mean, dst - dst_mean
    covariance = dst_centered.T @ src_centered / len(src)
    u, singular, vt = np.linalg.svd(covariance)
    reflection = np.eye(2)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:
        reflection[1, 1] = -1
    rotation = u @ reflection @ vt
    variance = (src_centered**2).sum() / len(src)
    scale = float((singular * np.diag(reflection)).sum() / variance) if variance > 0 else 1.0
    translation = dst_mean - scale * rotation @ src_mean
    return np.hstack([scale * rotation, translation[:, None]])


def estimate_matrix(landmark_5: npt.ArrayLike, template: WarpTemplate, crop_size: int) -> Matrix:
    return estimate_similarity(landmark_5, template_points(template, crop_size))


def warp_face(frame: Frame, landmark_5: npt.ArrayLike, template: WarpTemplate, crop_size: int) -> tuple[Frame, Matrix]:
    """The face cut out of ``frame`` and aligned to the template at ``crop_size`` x ``crop_size``, and the matrix used."""
    matrix = estimate_matrix(landmark_5, template, crop_size)
    crop = cv2.warpAffine(
        frame, matrix, (crop_size, crop_size), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE
    )
    return np.asarray(crop, np.uint8), matrix


def invert_affine(matrix: Matrix) -> Matrix:
    return np.asarray(cv2.invertAffineTransform(matrix), np.float64)


def transform_points(points: npt.ArrayLike, matrix: Matrix) -> FloatArray:
    array = np.asarray(points, np.float64).reshape(-1, 2)
    return (array @ matrix[:, :2].T + matrix[:, 2]).astype(np.float32)
