"""LivePortrait (KwaiVGI, MIT) as FaceFusion runs it, shared by the expression restorer and the face editor.

A face crop of ``CROP_SIZE`` is halved for the feature and motion extractors. The motion extractor reads the face's
head pose (pitch, yaw, roll in degrees), scale, translation, expression and canonical motion points; the face's own
keypoints are ``scale x (points R^T + expression) + translation`` with R the pose's rotation. A processor changes the
expression (or the pose) to get the driving keypoints, and the generator redraws the crop from its feature volume
moved from the own keypoints (``target``) to the driving ones (``source``). The face editor also runs the stitcher
and the eye and lip retargeters. The catalogue (``engine.models.LIVE_PORTRAIT_IO``) holds every network's inputs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import cv2
import numpy as np
import onnxruntime as ort

from facefusion_provider.engine.face import FloatArray, Frame
from facefusion_provider.engine.models import LivePortraitNetwork, live_portrait_model
from facefusion_provider.engine.runtime import run_session
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.options import Options

CROP_SIZE = 512  # the face crop both processors cut, and the generator's output
NETWORK_SIZE = 256  # the extractors see the crop at half size
POINTS = 21  # LivePortrait's implicit keypoints
# FaceFusion's bounds on each of the 21 x 3 expression values: a driven expression is clipped into them.
EXPRESSION_MIN = np.array(
    [
        [-2.88067125e-02, -8.12731311e-02, -1.70541159e-03],
        [-4.88598682e-02, -3.32196616e-02, -1.67431499e-04],
        [-6.75425082e-02, -4.28681746e-02, -1.98950816e-04],
        [-7.23103955e-02, -3.28503326e-02, -7.31324719e-04],
        [-3.87073644e-02, -6.01546466e-02, -5.50269964e-04],
        [-6.38048723e-02, -2.23840728e-01, -7.13261834e-04],
        [-3.02710701e-02, -3.93195450e-02, -8.24086510e-06],
        [-2.95799859e-02, -5.39318882e-02, -1.74219604e-04],
        [-2.92359516e-02, -1.53050944e-02, -6.30460854e-05],
        [-5.56493877e-03, -2.34344602e-02, -1.26858242e-04],
        [-4.37593013e-02, -2.77768299e-02, -2.70503685e-02],
        [-1.76926646e-02, -1.91676542e-02, -1.15090821e-04],
        [-8.34268332e-03, -3.99775570e-03, -3.27481248e-05],
        [-3.40162888e-02, -2.81868968e-02, -1.96679524e-04],
        [-2.91855410e-02, -3.97511162e-02, -2.81230678e-05],
        [-1.50395725e-02, -2.49494594e-02, -9.42573533e-05],
        [-1.67938769e-02, -2.00953931e-02, -4.00750607e-04],
        [-1.86435618e-02, -2.48535164e-02, -2.74416432e-02],
        [-4.61211195e-03, -1.21660791e-02, -2.93173041e-04],
        [-4.10017073e-02, -7.43824020e-02, -4.42762971e-02],
        [-1.90370996e-02, -3.74363363e-02, -1.34740388e-02],
    ],
    np.float32,
)[None]
EXPRESSION_MAX = np.array(
    [
        [4.46682945e-02, 7.08772913e-02, 4.08344204e-04],
        [2.14308221e-02, 6.15894832e-02, 4.85319615e-05],
        [3.02363783e-02, 4.45043296e-02, 1.28298725e-05],
        [3.05869691e-02, 3.79812494e-02, 6.57040102e-04],
        [4.45670523e-02, 3.97259220e-02, 7.10966764e-04],
        [9.43699256e-02, 9.85926315e-02, 2.02551950e-04],
        [1.61131397e-02, 2.92906128e-02, 3.44733417e-06],
        [5.23825921e-02, 1.07065082e-01, 6.61510974e-04],
        [2.85718683e-03, 8.32320191e-03, 2.39314613e-04],
        [2.57947259e-02, 1.60935968e-02, 2.41853559e-05],
        [4.90833223e-02, 3.43903080e-02, 3.22353356e-02],
        [1.44766076e-02, 3.39248963e-02, 1.42291479e-04],
        [8.75749043e-04, 6.82212645e-03, 2.76097053e-05],
        [1.86958015e-02, 3.84016186e-02, 7.33085908e-05],
        [2.01714113e-02, 4.90544215e-02, 2.34028921e-05],
        [2.46518422e-02, 3.29151377e-02, 3.48571630e-05],
        [2.22457591e-02, 1.21796541e-02, 1.56396593e-04],
        [1.72109623e-02, 3.01626958e-02, 1.36556877e-02],
        [1.83460284e-02, 1.61141958e-02, 2.87440169e-04],
        [3.57594155e-02, 1.80554688e-01, 2.75554154e-02],
        [2.17450950e-02, 8.66811201e-02, 3.34241726e-02],
    ],
    np.float32,
)[None]
# FaceFusion's bounds on an edited head pose in degrees (pitch, yaw, roll), widened to the face's own where it is beyond.
ANGLE_LIMITS = ((-30.0, 30.0), (-60.0, 60.0), (-20.0, 20.0))


def rotation_matrix(pitch: float, yaw: float, roll: float) -> FloatArray:
    """The head pose's rotation, angles in degrees: extrinsic x, y, z (Rz(roll) Ry(yaw) Rx(pitch)), as FaceFusion's
    ``Rotation.from_euler('xyz', ...)``."""
    p, y, r = (math.radians(angle) for angle in (pitch, yaw, roll))
    about_x = np.array([[1, 0, 0], [0, math.cos(p), -math.sin(p)], [0, math.sin(p), math.cos(p)]])
    about_y = np.array([[math.cos(y), 0, math.sin(y)], [0, 1, 0], [-math.sin(y), 0, math.cos(y)]])
    about_z = np.array([[math.cos(r), -math.sin(r), 0], [math.sin(r), math.cos(r), 0], [0, 0, 1]])
    return np.asarray(about_z @ about_y @ about_x, np.float32)


def limit_expression(expression: FloatArray) -> FloatArray:
    return np.asarray(np.clip(expression, EXPRESSION_MIN, EXPRESSION_MAX), np.float32)


def limit_angles(own: tuple[float, float, float], edited: tuple[float, float, float]) -> tuple[float, float, float]:
    """``edited`` (pitch, yaw, roll) inside ``ANGLE_LIMITS``, each bound on the face's ``own`` side moved out to it."""
    limited = []
    for angle, wanted, (low, high) in zip(own, edited, ANGLE_LIMITS, strict=True):
        widened = (min(angle, low), high) if angle < 0 else (low, max(angle, high))
        limited.append(min(max(wanted, widened[0]), widened[1]))
    return limited[0], limited[1], limited[2]


def crop_input(crop: Frame) -> FloatArray:
    """The extractors' ``input``: the RGB crop at ``NETWORK_SIZE`` (area-averaged), 0..1, (1, 3, S, S)."""
    small = cv2.resize(crop, (NETWORK_SIZE, NETWORK_SIZE), interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray((small.astype(np.float32) / 255.0).transpose(2, 0, 1)[None])


def crop_output(output: FloatArray) -> Frame:
    """The generator's (1, 3, S, S) RGB 0..1 as an (S, S, 3) uint8 crop, truncated as FaceFusion does."""
    return np.asarray(np.clip(output[0].transpose(1, 2, 0), 0.0, 1.0) * 255.0, np.float32).astype(np.uint8)


@dataclass(frozen=True)
class Motion:
    """What the motion extractor read of one crop."""

    pitch: float
    yaw: float
    roll: float
    scale: FloatArray  # (1, 1)
    translation: FloatArray  # (1, 3)
    expression: FloatArray  # (1, 21, 3)
    points: FloatArray  # (1, 21, 3), canonical: no pose, no expression

    @property
    def angles(self) -> tuple[float, float, float]:
        return self.pitch, self.yaw, self.roll

    def keypoints(self, expression: FloatArray | None = None, rotation: FloatArray | None = None) -> FloatArray:
        """The face's keypoints with ``expression`` and ``rotation`` (its own where not given)."""
        rotation = rotation_matrix(*self.angles) if rotation is None else rotation
        expression = self.expression if expression is None else expression
        points = self.scale * (self.points @ rotation.T + expression) + self.translation
        return np.asarray(points, np.float32)


@dataclass(frozen=True)
class LivePortrait:
    """The loaded networks of one LivePortrait set, each run on one face at a time (batch 1, as exported)."""

    sessions: Mapping[LivePortraitNetwork, ort.InferenceSession]

    @classmethod
    def load(
        cls, family: str, networks: tuple[LivePortraitNetwork, ...], store: ModelStore, options: Options
    ) -> LivePortrait:
        """Each of ``networks`` of the set ``family`` loaded and its inputs checked: a missing or mismatched file fails
        here, naming it."""
        return cls({network: store.session_for(live_portrait_model(family, network), options) for network in networks})

    def _run(self, network: LivePortraitNetwork, feeds: Mapping[str, FloatArray]) -> list[FloatArray]:
        return run_session(self.sessions[network], feeds)

    def features(self, crop: FloatArray) -> FloatArray:
        """The appearance feature volume of ``crop_input``'s crop, (1, 32, 16, 64, 64)."""
        return self._run("feature_extractor", {"input": crop})[0]

    def motion(self, crop: FloatArray) -> Motion:
        pitch, yaw, roll, scale, translation, expression, points = self._run("motion_extractor", {"input": crop})[:7]
        return Motion(
            float(np.asarray(pitch).reshape(())),
            float(np.asarray(yaw).reshape(())),
            float(np.asarray(roll).reshape(())),
            np.asarray(scale, np.float32).reshape(1, 1),
            np.asarray(translation, np.float32).reshape(1, 3),
            np.asarray(expression, np.float32).reshape(1, POINTS, 3),
            np.asarray(points, np.float32).reshape(1, POINTS, 3),
        )

    def generate(self, features: FloatArray, driving: FloatArray, own: FloatArray) -> Frame:
        """The crop redrawn with its keypoints moved from ``own`` to ``driving``, (512, 512, 3) uint8."""
        feeds = {"feature_volume": features, "source": driving, "target": own}
        return crop_output(self._run("generator", feeds)[0])

    def stitch(self, driving: FloatArray, own: FloatArray) -> FloatArray:
        """``driving`` keypoints stitched to the crop's ``own`` (so the face's outline meets the frame around it)."""
        return np.asarray(self._run("stitcher", {"source": driving, "target": own})[0], np.float32).reshape(
            1, POINTS, 3
        )

    def retarget(self, network: LivePortraitNetwork, own: FloatArray, ratios: list[float]) -> FloatArray:
        """The eye or lip retargeter's keypoint offset, (1, 21, 3), for ``own`` keypoints and its ``ratios`` (the
        face's open ratios, then the one wanted)."""
        feed = np.concatenate([own.ravel(), np.asarray(ratios, np.float32)])[None].astype(np.float32)
        return np.asarray(self._run(network, {"input": feed})[0], np.float32).reshape(1, POINTS, 3)
