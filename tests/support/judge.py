"""An independent identity judge for tests: dlib's face recognition (its 128-d ResNet descriptors, CC0 model), not
the engine's own detector or recognizer. Different people measure 0.68-0.94 apart, frames of one person 0.25 on
average (FACTS.md)."""

from __future__ import annotations

from dataclasses import dataclass

import dlib
import face_recognition_models
import numpy as np

from facefusion_provider.engine.face import Frame


@dataclass
class IdentityJudge:
    """dlib's face recognition: 128-d descriptors whose distance says whether two faces are the same person."""

    detector: dlib.fhog_object_detector
    shape_predictor: dlib.shape_predictor
    recognizer: dlib.face_recognition_model_v1

    def locate(self, image: Frame, upsample: int = 1) -> dlib.rectangle | None:
        found = self.detector(image, upsample)
        return max(found, key=lambda rect: rect.area()) if found else None

    def descriptor(self, image: Frame, where: dlib.rectangle | None = None) -> np.ndarray:
        where = where or self.locate(image)
        assert where is not None, "the judge found no face"
        shape = self.shape_predictor(image, where)
        return np.asarray(self.recognizer.compute_face_descriptor(image, shape))

    @staticmethod
    def distance(a: np.ndarray, b: np.ndarray) -> float:
        return float(np.linalg.norm(a - b))


def identity_judge() -> IdentityJudge:
    return IdentityJudge(
        dlib.get_frontal_face_detector(),
        dlib.shape_predictor(face_recognition_models.pose_predictor_five_point_model_location()),
        dlib.face_recognition_model_v1(face_recognition_models.face_recognition_model_location()),
    )
