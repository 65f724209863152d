"""The face swapper: the source identity put on each selected face, by the offline classic swapper (the face mesh's
warp, colour match and blend) or by a catalogue model (inswapper, hyperswap, simswap, ghost, hififace, blendswap,
uniface)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import numpy as np

from facefusion_provider.engine.face import Face, Frame
from facefusion_provider.engine.face_masks import load_mask_models, mask_models
from facefusion_provider.engine.landmarks import landmark_68_models, mesh_found, mesh_landmarks
from facefusion_provider.engine.models import swap_facts
from facefusion_provider.engine.paste import Patch, PendingFrame
from facefusion_provider.engine.processors.base import FaceStats, FrameStep, ProcessedFrame, Processor, timed
from facefusion_provider.engine.processors.needs import AnalysisNeeds
from facefusion_provider.engine.recognize import RECOGNIZER_MODEL, normalize_embedding, raw_embedding
from facefusion_provider.engine.sources import SourceFace, source_faces
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.engine.swap_classic import (
    ClassicSource,
    classic_patch,
    classic_source_from_json,
    classic_source_to_json,
    make_classic_source,
)
from facefusion_provider.engine.swap_models import (
    SwapIdentity,
    check_swapper,
    convert_embedding,
    identity_from_json,
    identity_to_json,
    source_crop,
    swap_pending,
)
from facefusion_provider.exceptions import InvalidWorkError, NoFaceError
from facefusion_provider.options import FaceSwapperOptions, Options

MESH_MODEL = "face_mesh_468"


class FaceSwapper(Processor):
    name = "face_swapper"
    options = FaceSwapperOptions
    model_option = "face_swapper_model"

    def model_names(self, options: Options) -> tuple[str, ...]:
        if options.face_swapper_model == "classic":
            return (MESH_MODEL,)
        facts = swap_facts(options.face_swapper_model)
        return (
            options.face_swapper_model,
            RECOGNIZER_MODEL,
            *([facts.converter] if facts.converter else []),
            *mask_models(options),
            *([MESH_MODEL] if self.analysis(options).landmarks == "mesh" else []),
        )

    def analysis(self, options: Options) -> AnalysisNeeds:
        """classic warps the face mesh; a model swapper reads a 68-point landmarker's points when chosen, and draws the area mask
        from the face mesh."""
        if options.face_swapper_model == "classic":
            return AnalysisNeeds(faces=True, landmarks="mesh")
        if landmark_68_models(options):
            return AnalysisNeeds(faces=True, landmarks="2dfan4")
        return AnalysisNeeds(faces=True, landmarks="mesh" if "area" in options.face_mask_types else "none")

    def prepare(self, source_paths: list[str], options: Options, store: ModelStore) -> dict[str, Any]:
        """classic: the largest source face as a crop (PNG, base64), its 468 mesh points and their triangles.
        model swappers: the mean of the L2-normalised ArcFace embeddings of each source image's largest face,
        normalised; for simswap, ghost and hififace also the mean raw embedding through their crossface converter; for
        blendswap and uniface also the first source image's face aligned as the model takes it (PNG, base64)."""
        if not source_paths:
            raise NoFaceError("face_swapper needs at least one source image with a face")
        sources = source_faces(source_paths, options, store)
        identity: dict[str, Any] = {"face_swapper_model": options.face_swapper_model}
        if options.face_swapper_model == "classic":
            identity["classic"] = classic_source_to_json(_classic_source(sources, options, store))
        else:
            identity.update(identity_to_json(_swap_identity(sources, options, store)))
        return identity

    def load(self, options: Options, identity: dict[str, Any], store: ModelStore, stats: FaceStats) -> FrameStep:
        if identity.get("face_swapper_model") != options.face_swapper_model:
            raise InvalidWorkError(
                f"work.json identity was prepared for face_swapper_model={identity.get('face_swapper_model')!r}, "
                f"but the options say {options.face_swapper_model!r}: prepare the work again"
            )
        if options.face_swapper_model == "classic":
            if "classic" not in identity:
                raise InvalidWorkError("work.json identity has no classic source face: prepare the work again")
            return ClassicSwap(classic_source_from_json(identity["classic"]), options, stats)
        swap_identity = identity_from_json(identity, swap_facts(options.face_swapper_model))
        check_swapper(options, store)
        load_mask_models(store, options)
        return ModelSwap(swap_identity, options, store, stats, self.analysis(options).landmarks == "mesh")


@dataclass(frozen=True)
class ClassicSwap:
    source: ClassicSource
    options: Options
    stats: FaceStats

    def __call__(self, frames: list[Frame], faces: list[list[Face]], pool: Executor | None) -> list[ProcessedFrame]:
        with timed(self.stats, "swap"):  # one thread: the face mesh's LiteRT interpreter is not thread-safe
            return [self.swap(frame, frame_faces) for frame, frame_faces in zip(frames, faces, strict=True)]

    def swap(self, frame: Frame, faces: list[Face]) -> ProcessedFrame:
        """``frame`` with its faces' patches pending (the worker writes them into the encoder's frame); each face
        is swapped in the frame as the faces before it left it."""
        patches: list[Patch] = []
        for face in faces:
            if mesh_found(face):
                seen = PendingFrame(frame, patches=tuple(patches)).rgb() if patches else frame
                patch = classic_patch(seen, face, self.source, self.options)
                patches += [] if patch is None else [patch]
                self.stats.add(swapped=1)
        return PendingFrame(frame, patches=tuple(patches)) if patches else frame


@dataclass(frozen=True)
class ModelSwap:
    identity: SwapIdentity
    options: Options
    store: ModelStore
    stats: FaceStats
    mesh_masks: bool  # the area mask: a face the mesh model misses is left alone

    def __call__(self, frames: list[Frame], faces: list[list[Face]], pool: Executor | None) -> Sequence[ProcessedFrame]:
        if self.mesh_masks:
            faces = [[face for face in frame_faces if mesh_found(face)] for frame_faces in faces]
        timings: dict[str, float] = {}
        swapped = swap_pending(frames, faces, self.identity, self.options, self.store, timings=timings, pool=pool)
        self.stats.add(
            swapped=sum(map(len, faces)),
            seconds={
                "swap": timings.get("swap_align", 0.0) + timings.get("swap_infer", 0.0),
                "paste": timings.get("swap_paste", 0.0),
            },
        )
        return swapped


def _swap_identity(sources: list[SourceFace], options: Options, store: ModelStore) -> SwapIdentity:
    facts = swap_facts(options.face_swapper_model)
    raw = [raw_embedding(image, face, store, options) for _, image, face in sources]
    embedding = normalize_embedding(np.mean([normalize_embedding(vector) for vector in raw], axis=0))
    converted = convert_embedding(np.mean(raw, axis=0), facts, store, options) if facts.converter else None
    _, first_image, first_face = sources[0]
    image = source_crop(first_image, first_face, facts) if facts.source == "image" else None
    return SwapIdentity(embedding, converted, image)


def _classic_source(sources: list[SourceFace], options: Options, store: ModelStore) -> ClassicSource:
    path, image, face = max(sources, key=lambda item: item[2].area)
    meshed = mesh_landmarks(image, face, options, store)
    if not mesh_found(meshed):
        raise NoFaceError(f"the face mesh found no usable face in source image {os.path.basename(path)}")
    return make_classic_source(image, meshed)


PROCESSOR = FaceSwapper()
