"""The age modifier: each selected face made older or younger by ``age_modifier_direction`` (-100..100), by fran or
styleganex_age, and pasted back through the box mask (no padding) and, when chosen, the occlusion mask, as FaceFusion
3.8.1 does.

fran sees the face at 1024 on ffhq_512 and answers it at that size; it is told the face's age, the middle of the age
class the face classifier (fairface) places it in, as FaceFusion's ``numpy.mean`` of that range. styleganex_age sees
the face at 256 and a wider crop with background (styleganex_384 at 384, the five points first drawn towards the nose)
and answers the wider crop, which is brought to 1024, colour-matched to the crop it was given, and pasted back over the
wider crop's place.
"""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import onnxruntime as ort

from facefusion_provider.engine.align import Matrix, invert_affine, warp_face
from facefusion_provider.engine.classify import CLASSIFIER_MODEL, require_classifier
from facefusion_provider.engine.crop_masks import create_box_mask
from facefusion_provider.engine.face import Face, FaceClasses, FloatArray, Frame
from facefusion_provider.engine.face_masks import occlusion_mask
from facefusion_provider.engine.frame_color import match_frame_color
from facefusion_provider.engine.models import AGE_MODIFIER_OUTPUT_SCALE, AgeFacts, age_facts
from facefusion_provider.engine.paste import paste_back
from facefusion_provider.engine.processors.base import (
    FaceStats,
    FrameStep,
    ProcessedFrame,
    Processor,
    TargetFramesStep,
    change_faces_in_place,
    classify_unclassified,
    timed,
)
from facefusion_provider.engine.processors.needs import AnalysisNeeds, Landmarks
from facefusion_provider.engine.runtime import each, run_session
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.options import AgeModifierOptions, Options

NO_PADDING = (0, 0, 0, 0)  # FaceFusion's age modifier ignores face_mask_padding
EXTENDED_POINTS_SCALE = 0.875  # styleganex's wider crop: the five points drawn this far towards the nose first
STYLEGANEX_DIRECTION = (2.5, -2.5)  # direction -100 (younger) and 100 (older) as styleganex takes them


class AgeModifier(Processor):
    name = "age_modifier"
    options = AgeModifierOptions
    model_option = "age_modifier_model"

    def model_names(self, options: Options) -> tuple[str, ...]:
        classifier = (CLASSIFIER_MODEL,) if reads_ages(options) else ()
        occluder = (options.face_occluder_model,) if "occlusion" in options.face_mask_types else ()
        return (options.age_modifier_model, *classifier, *occluder)

    def analysis(self, options: Options) -> AnalysisNeeds:
        """Aligned by the five points: 2dfan4's when it is the landmarker (FaceFusion's 5/68), else the detector's;
        fran reads each face's classes (its age)."""
        landmarks: Landmarks = "2dfan4" if options.face_landmarker_model == "2dfan4" else "none"
        return AnalysisNeeds(faces=True, landmarks=landmarks, classes=reads_ages(options))

    def prepare(self, source_paths: list[str], options: Options, store: ModelStore) -> dict[str, Any]:
        """Nothing from the sources; its models opened now, so a missing or mismatched file fails in prepare."""
        self.check_models(options, store)
        return {}

    def load(self, options: Options, identity: dict[str, Any], store: ModelStore, stats: FaceStats) -> FrameStep:
        self.check_models(options, store)
        return ModifyAges(store.session_for(options.age_modifier_model, options), options, store, stats)

    def check_models(self, options: Options, store: ModelStore) -> None:
        """Each model opened (a missing or mismatched file refused naming it); fran's classifier first, saying why."""
        if reads_ages(options):
            needed_by = f"age_modifier_model {options.age_modifier_model} reads each face's age with"
            require_classifier(store, options, needed_by, "choose age_modifier_model styleganex_age")
        for name in self.model_names(options):
            store.session_for(name, options)


def reads_ages(options: Options) -> bool:
    """Whether the model is told each face's age (fran: the model without styleganex's wider crop), read from the face
    classifier as FaceFusion does."""
    return age_facts(options.age_modifier_model).extended_size is None


def prepare_crop(crop: Frame, facts: AgeFacts) -> FloatArray:
    """(S, S, 3) RGB uint8 -> (1, 3, S, S) float32: / 255, then (x - mean) / std, in one pass (the std is one value for
    all three channels in both models)."""
    (std, *others) = set(facts.std)
    assert not others, "prepare_crop scales every channel alike"
    mean = tuple(value * 255.0 for value in facts.mean)
    size = (crop.shape[1], crop.shape[0])
    return np.asarray(
        cv2.dnn.blobFromImage(crop, 1.0 / (255.0 * std), size, mean, swapRB=False, crop=False), np.float32
    )


def face_age(classes: FaceClasses) -> float:
    """The age fran is told: the mean of the ages in the face's age class (FaceFusion's ``numpy.mean`` of the range,
    its end excluded: 20-29 gives 24)."""
    return float(np.mean(classes.age))


def fran_direction(direction: int, age: float) -> FloatArray:
    """fran's ``direction``: the face's age and the age wanted, / 100, each within 0..1."""
    return np.asarray(np.clip(np.array([age, age + direction], np.float32) / 100.0, 0.0, 1.0), np.float32)


def styleganex_direction(direction: int) -> FloatArray:
    """styleganex's ``direction``: a scalar, 2.5 at -100 (younger) to -2.5 at 100 (older)."""
    return np.array(np.interp(direction, [-100, 100], STYLEGANEX_DIRECTION), np.float32)


def fran_output(output: FloatArray, facts: AgeFacts) -> Frame:
    """(3, S, S) -> (S, S, 3) uint8: x std + mean, within 0..1, to 0..255, in two passes over the merged planes (mean
    and std are one value for all three channels)."""
    ((mean, *_), (std, *_)) = (facts.mean, facts.std)
    image = cv2.merge([np.asarray(plane, np.float32) for plane in output])
    np.clip(image, -mean / std, (1.0 - mean) / std, out=image)  # where x std + mean is 0..1
    return np.asarray(cv2.convertScaleAbs(image, alpha=255.0 * std, beta=255.0 * mean), np.uint8)


def styleganex_output(output: FloatArray, facts: AgeFacts) -> Frame:
    """(3, H, W) in [-1, 1] -> (4S, 4S, 3) uint8, whatever H and W: clipped, area-resized plane by plane, then to
    0..255 (resized before the 8-bit rounding: within a level of rounding first, on the smaller image)."""
    side = facts.size * AGE_MODIFIER_OUTPUT_SCALE
    planes = [cv2.resize(np.clip(plane, -1.0, 1.0), (side, side), interpolation=cv2.INTER_AREA) for plane in output]
    return np.asarray(cv2.convertScaleAbs(cv2.merge(planes), alpha=127.5, beta=127.5), np.uint8)


def extended_points(landmark_5: FloatArray) -> FloatArray:
    """The five points drawn ``EXTENDED_POINTS_SCALE`` of the way to the nose (the third point): a smaller face, so the
    template's crop holds more background around it."""
    nose = landmark_5[2]
    return np.asarray((landmark_5 - nose) * EXTENDED_POINTS_SCALE + nose, np.float32)


def crop_to_crop(source: Matrix, target: Matrix) -> Matrix:
    """The affine taking ``source``'s crop to ``target``'s (both frame-to-crop matrices)."""
    inverse = np.vstack([invert_affine(source), [0.0, 0.0, 1.0]])
    return np.asarray((np.vstack([target, [0.0, 0.0, 1.0]]) @ inverse)[:2], np.float64)


@dataclass(frozen=True)
class ModifyAges(TargetFramesStep):
    session: ort.InferenceSession
    options: Options
    store: ModelStore
    stats: FaceStats

    def with_targets(
        self, targets: list[Frame], frames: list[Frame], faces: list[list[Face]], pool: Executor | None
    ) -> list[ProcessedFrame]:
        """fran's faces classified where the analysis did not (one stored by a chain without fran), in the target's
        own frames as FaceFusion classifies them, not in a swapped face."""
        if reads_ages(self.options):
            pairs = list(zip(targets, faces, strict=True))
            faces = list(each(pool, self.classified, pairs))
        with timed(self.stats, "age"):
            return change_faces_in_place(frames, faces, pool, self.modify, self.stats)

    def classified(self, pair: tuple[Frame, list[Face]]) -> list[Face]:
        target, faces = pair
        return classify_unclassified(target, faces, self.store, self.options, self.stats)

    def modify(self, frame: Frame, face: Face) -> None:
        facts = age_facts(self.options.age_modifier_model)
        if facts.extended_size is None:
            self.fran(frame, face, facts)
        else:
            self.styleganex(frame, face, facts)

    def occluded(self, mask: FloatArray, crop: Frame) -> FloatArray:
        if "occlusion" not in self.options.face_mask_types:
            return mask
        return np.minimum(mask, occlusion_mask(crop, self.store, self.options))

    def fran(self, frame: Frame, face: Face, facts: AgeFacts) -> None:
        classes = face.classes
        assert classes is not None, "with_targets classifies fran's faces"
        crop, matrix = warp_face(frame, face.landmark_5, facts.template, facts.size)
        mask = self.occluded(create_box_mask(facts.size, self.options.face_mask_blur, NO_PADDING), crop)
        feeds = {
            "target": prepare_crop(crop, facts),
            "direction": fran_direction(self.options.age_modifier_direction, face_age(classes)),
        }
        (output, *_) = run_session(self.session, feeds)
        paste_back(frame, fran_output(output[0], facts), mask, matrix, in_place=True)

    def styleganex(self, frame: Frame, face: Face, facts: AgeFacts) -> None:
        assert facts.extended_template is not None and facts.extended_size is not None
        crop, matrix = warp_face(frame, face.landmark_5, facts.template, facts.size)
        extended_size = facts.extended_size
        extended, extended_matrix = warp_face(
            frame, extended_points(face.landmark_5), facts.extended_template, extended_size
        )
        mask = create_box_mask(extended_size, self.options.face_mask_blur, NO_PADDING)
        if "occlusion" in self.options.face_mask_types:
            occlusion = occlusion_mask(crop, self.store, self.options)
            moved = cv2.warpAffine(occlusion, crop_to_crop(matrix, extended_matrix), (extended_size, extended_size))
            mask = np.minimum(mask, np.asarray(moved, np.float32))
        feeds = {
            "target": prepare_crop(crop, facts),
            "target_with_background": prepare_crop(extended, facts),
            "direction": styleganex_direction(self.options.age_modifier_direction),
        }
        (output, *_) = run_session(self.session, feeds)
        aged = match_frame_color(extended, styleganex_output(output[0], facts))
        side = aged.shape[0]
        pasted_mask = np.asarray(cv2.resize(np.asarray(mask, np.float32), (side, side)), np.float32)
        paste_back(frame, aged, pasted_mask, extended_matrix * (side / extended_size), in_place=True)


PROCESSOR = AgeModifier()
