"""The engine's seam for the worker: the source identity (once per work) and a frame processor (once per process).

``prepare_identity`` runs in ``prepare`` and its result goes into ``work.json``, so every span swaps the same identity.
``build_frame_processor`` loads every model the options need up front (a missing model fails before any frame is
decoded) and returns a processor that runs ``options.processors`` in order on batches of frames.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np

from facefusion_provider.engine.detect import detect_faces
from facefusion_provider.engine.enhance import enhance_face
from facefusion_provider.engine.face import Face, FloatArray, Frame
from facefusion_provider.engine.face_masks import load_mask_models
from facefusion_provider.engine.landmarks import (
    MESH_MIN_SCORE,
    follow_face_mesh,
    landmark_2dfan4,
    landmark_face_mesh,
    tflite_interpreter,
)
from facefusion_provider.engine.models import swap_facts
from facefusion_provider.engine.paste import Patch, PendingFrame, as_rgb
from facefusion_provider.engine.recognize import embed_face, normalize_embedding, raw_embedding
from facefusion_provider.engine.runtime import each, log_providers, on_gpu
from facefusion_provider.engine.select import largest_face, require_recognizer, select_faces, with_embeddings
from facefusion_provider.engine.store import ModelStore, store_from_environment
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
from facefusion_provider.exceptions import InputMissingError, InvalidMediaError, InvalidWorkError, NoFaceError
from facefusion_provider.options import Options

IDENTITY_VERSION = 1
FaceTracking = Callable[[list[list[Face]]], list[list[Face]]]  # consecutive frames' detections -> faces to process
GPU_BATCH_SIZE = 8  # frames per call when a GPU provider runs: the swapper stacks all their faces in batches


# --- prepare: the source identity ---------------------------------------------------------------------------------


def read_image(path: str) -> Frame:
    """An image file as RGB, turned upright by its EXIF orientation (phones store portraits sideways; a PyAV decode,
    as in media.images, would not turn them). InputMissingError or InvalidMediaError naming the file otherwise."""
    name = os.path.basename(path)
    try:
        with open(path, "rb") as handle:
            data = np.frombuffer(handle.read(), np.uint8)
    except FileNotFoundError:
        raise InputMissingError(f"source image {name} does not exist ({path})") from None
    except IsADirectoryError:
        raise InvalidMediaError(f"source {name} is a folder, not an image") from None
    image = cv2.imdecode(data, cv2.IMREAD_COLOR) if data.size else None
    if image is None:
        raise InvalidMediaError(f"source {name} is not an image that can be read (JPEG, PNG, WebP, BMP, TIFF, ...)")
    return np.ascontiguousarray(image[:, :, ::-1])


def mesh_landmarks(frame: Frame, face: Face, options: Options, store: ModelStore) -> Face:
    """The 468-point mesh the classic swapper needs; with 2dfan4 chosen, its 5/68 points steer the mesh crop first."""
    if options.face_landmarker_model == "2dfan4":
        face = landmark_2dfan4(frame, face, options, store)
    return landmark_face_mesh(frame, face, store)


def _mesh_found(face: Face) -> bool:
    """Whether the mesh model saw a face in its crop (else its points are noise and the face is left alone)."""
    score = face.extras.get("landmark_dense_score")
    return isinstance(score, float) and score >= MESH_MIN_SCORE


def _source_faces(source_paths: Sequence[str], options: Options, store: ModelStore) -> list[tuple[str, Frame, Face]]:
    """The largest face of every source image; NoFaceError naming the first image without one."""
    found = []
    for path in source_paths:
        image = read_image(path)
        faces = detect_faces(image, options, store)
        if not faces:
            raise NoFaceError(
                f"no face found in source image {os.path.basename(path)} (detector {options.face_detector_model}, "
                f"score >= {options.face_detector_score}): use a clear, front-facing photo of the face"
            )
        found.append((path, image, largest_face(faces)))
    return found


def prepare_identity(
    source_paths: list[str], reference_frame: Frame | None, options: Options, models_dir: str | None
) -> dict[str, Any]:
    """The work's identity for ``work.json``: what the swapper needs of the source faces, and the reference face.

    classic: the largest source face as a crop (PNG, base64), its 468 mesh points and their triangles.
    model swappers: the mean of the L2-normalised ArcFace embeddings of each source image's largest face, normalised;
    for simswap and ghost also the mean raw embedding through their crossface converter; for blendswap and uniface
    also the first source image's face aligned as the model takes it (PNG, base64).
    reference mode: the embedding of the largest face in ``reference_frame``.
    """
    store = store_from_environment(models_dir)
    require_recognizer(options, store)
    identity: dict[str, Any] = {
        "version": IDENTITY_VERSION,
        "face_swapper_model": options.face_swapper_model,
        "sources": [os.path.basename(path) for path in source_paths],
    }
    if "face_swapper" in options.processors:
        if not source_paths:
            raise NoFaceError("face_swapper needs at least one source image with a face")
        sources = _source_faces(source_paths, options, store)
        if options.face_swapper_model == "classic":
            identity["classic"] = classic_source_to_json(_classic_source(sources, options, store))
        else:
            identity.update(identity_to_json(_swap_identity(sources, options, store)))
    if options.face_selector_mode == "reference":
        identity["reference_embedding"] = _reference_embedding(reference_frame, options, store).tolist()
    return identity


def _swap_identity(sources: list[tuple[str, Frame, Face]], options: Options, store: ModelStore) -> SwapIdentity:
    facts = swap_facts(options.face_swapper_model)
    raw = [raw_embedding(image, face, store, options) for _, image, face in sources]
    embedding = normalize_embedding(np.mean([normalize_embedding(vector) for vector in raw], axis=0))
    converted = convert_embedding(np.mean(raw, axis=0), facts, store, options) if facts.converter else None
    _, first_image, first_face = sources[0]
    image = source_crop(first_image, first_face, facts) if facts.source == "image" else None
    return SwapIdentity(embedding, converted, image)


def _classic_source(sources: list[tuple[str, Frame, Face]], options: Options, store: ModelStore) -> ClassicSource:
    path, image, face = max(sources, key=lambda item: item[2].area)
    meshed = mesh_landmarks(image, face, options, store)
    if not _mesh_found(meshed):
        raise NoFaceError(f"the face mesh found no usable face in source image {os.path.basename(path)}")
    return make_classic_source(image, meshed)


def _reference_embedding(reference_frame: Frame | None, options: Options, store: ModelStore) -> FloatArray:
    if reference_frame is None:
        raise ValueError("face_selector_mode=reference needs the reference frame")
    faces = detect_faces(reference_frame, options, store)
    if not faces:
        raise NoFaceError(
            f"no face found in the reference frame (reference_frame_number={options.reference_frame_number}): "
            "choose a frame where the person to swap is visible"
        )
    return embed_face(reference_frame, largest_face(faces), store, options)


# --- swap-span: the frame processor -------------------------------------------------------------------------------


@dataclass
class FaceStats:
    """What a processor did, summed over its batches: faces found and swapped, seconds per stage."""

    detected: int = 0
    swapped: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, *, detected: int = 0, swapped: int = 0, seconds: dict[str, float] | None = None) -> None:
        with self.lock:
            self.detected += detected
            self.swapped += swapped
            for stage, value in (seconds or {}).items():
                self.seconds[stage] = self.seconds.get(stage, 0.0) + value


@contextlib.contextmanager
def _timed(stats: FaceStats, stage: str) -> Iterator[None]:
    began = time.perf_counter()
    try:
        yield
    finally:
        stats.add(seconds={stage: time.perf_counter() - began})


@dataclass(frozen=True)
class Followed:
    """What the next frame's analysis follows on from: the faces of the frame before, with their meshes."""

    faces: list[Face]
    since_detection: int  # frames since the detector last ran


@dataclass
class FaceProcessor:
    """Analyse every frame (detect, select, dense landmarks: what depends on the target alone), then apply each of
    ``options.processors`` to the selected faces. ``analyse_batch`` and ``apply_batch`` are separate so that a target's
    analysis can be stored once and reused for every source face (``process_batch`` does both)."""

    options: Options
    store: ModelStore
    batch_size: int
    classic_source: ClassicSource | None = None
    swap_identity: SwapIdentity | None = None
    reference_embedding: FloatArray | None = None
    # Frames whose work runs side by side: on a GPU the CPU work around inference (detector decoding, paste-back)
    # would otherwise leave the GPU and the pod's other cores waiting on one thread.
    frame_threads: int = 1
    stats: FaceStats = field(default_factory=FaceStats)

    def process_batch(self, frames: list[Frame]) -> list[Frame]:
        with self._pool() as pool:
            return self.apply_batch(frames, self.analyse_batch(frames, pool), pool)

    def analyse_batch(
        self, frames: list[Frame], given: Executor | None = None, track: FaceTracking | None = None
    ) -> list[list[Face]]:
        """The faces each frame's processors work on, with the dense landmarks the swapper needs. With ``track`` (the
        face tracker), every frame's detections go through it in order and it selects the faces."""
        with self._pool(given) as pool:
            selected = each(pool, self.select, frames) if track is None else track(each(pool, self.detect, frames))
            landmarks = self.options.analysis_landmarks()
            with _timed(self.stats, "landmarks"):
                if landmarks == "mesh":  # one thread: the face mesh's LiteRT interpreter is not thread-safe
                    return [self.mesh(frame, faces) for frame, faces in zip(frames, selected, strict=True)]
                if landmarks == "2dfan4":
                    return each(pool, self.landmarks, list(zip(frames, selected, strict=True)))
            return selected

    def analyse_followed(
        self, frames: list[Frame], followed: Followed | None
    ) -> tuple[list[list[Face]], Followed | None]:
        """Consecutive frames analysed in order, the frame before them having left ``followed`` (None: they start a
        segment, or come after a gap). With ``options.follows_faces()`` the detector runs every
        ``face_detector_interval`` frames, and on a frame where there is nothing to follow or the mesh lost a face;
        between, each face is its mesh followed on from the frame before. Returns what the next frame follows on from.
        """
        if not self.options.follows_faces():
            return self.analyse_batch(frames), None
        analysed, interval = [], self.options.face_detector_interval
        for frame in frames:
            faces = None
            if followed is not None and followed.faces and followed.since_detection + 1 < interval:
                faces = self.follow(frame, followed.faces)
            if faces is None or followed is None:
                (faces,) = self.analyse_batch([frame])
                followed = Followed(faces, 0)
            else:
                followed = Followed(faces, followed.since_detection + 1)
            analysed.append(faces)
        return analysed, followed

    def follow(self, frame: Frame, faces: list[Face]) -> list[Face] | None:
        """``faces`` of the frame before, each followed by its mesh into ``frame``; None when the mesh lost one."""
        with _timed(self.stats, "landmarks"):
            followed = []
            for face in faces:
                if not _mesh_found(face):
                    return None
                followed.append(follow_face_mesh(frame, face, self.store))
                if not _mesh_found(followed[-1]):
                    return None
        self.stats.add(detected=len(followed))  # found in this frame, by the mesh: the count stays faces per frame
        return followed

    def apply_batch(self, frames: list[Frame], faces: list[list[Face]], given: Executor | None = None) -> list[Frame]:
        """``frames`` with ``options.processors`` applied to ``faces`` (from ``analyse_batch``, perhaps stored)."""
        return [as_rgb(result) for result in self.apply_batch_pending(frames, faces, given)]

    def apply_batch_pending(
        self, frames: list[Frame], faces: list[list[Face]], given: Executor | None = None
    ) -> list[Frame | PendingFrame]:
        """``apply_batch``, but the swapper's faces are left to write (``PendingFrame``) until a later processor
        needs the frame's pixels: when it comes last, the worker writes them straight into the encoder's frame."""
        with self._pool(given) as pool:
            results: list[Frame | PendingFrame] = list(frames)
            for processor in self.options.processors:
                images = each(pool, as_rgb, results)  # a previous swapper's crops pasted, side by side
                if processor == "face_swapper":
                    results = self.swap(images, faces, pool)
                else:
                    with _timed(self.stats, "enhance"):
                        results = list(
                            each(pool, lambda pair: self.enhance(*pair), list(zip(images, faces, strict=True)))
                        )
            return results

    @contextlib.contextmanager
    def _pool(self, pool: Executor | None = None) -> Iterator[Executor | None]:
        if pool is not None or self.frame_threads <= 1:
            yield pool
            return
        with ThreadPoolExecutor(self.frame_threads, "facefusion-frames") as own:
            yield own

    def detect(self, frame: Frame) -> list[Face]:
        """Every face found, with its embedding in reference mode: what the face tracker links and selects from."""
        with _timed(self.stats, "detect"):
            faces = detect_faces(frame, self.options, self.store)
            if self.options.face_selector_mode == "reference":
                faces = with_embeddings(frame, faces, self.options, self.store)
        self.stats.add(detected=len(faces))
        return faces

    def select(self, frame: Frame) -> list[Face]:
        with _timed(self.stats, "detect"):
            faces = detect_faces(frame, self.options, self.store)
            selected = select_faces(frame, faces, self.options, self.store, self.reference_embedding)
        self.stats.add(detected=len(faces))
        return selected

    def mesh(self, frame: Frame, faces: list[Face]) -> list[Face]:
        return [mesh_landmarks(frame, face, self.options, self.store) for face in faces]

    def landmarks(self, pair: tuple[Frame, list[Face]]) -> list[Face]:
        frame, faces = pair
        return [landmark_2dfan4(frame, face, self.options, self.store) for face in faces]

    def swap(
        self, frames: list[Frame], faces: list[list[Face]], pool: Executor | None = None
    ) -> list[Frame | PendingFrame]:
        if self.classic_source is not None:  # one thread: see analyse_batch
            with _timed(self.stats, "swap"):
                return [self.swap_classic(frame, frame_faces) for frame, frame_faces in zip(frames, faces, strict=True)]
        assert self.swap_identity is not None
        if self.options.analysis_landmarks() == "mesh":  # the area mask: a face the mesh model misses is left alone
            faces = [[face for face in frame_faces if _mesh_found(face)] for frame_faces in faces]
        timings: dict[str, float] = {}
        swapped = swap_pending(frames, faces, self.swap_identity, self.options, self.store, timings=timings, pool=pool)
        self.stats.add(
            swapped=sum(map(len, faces)),
            seconds={
                "swap": timings.get("swap_align", 0.0) + timings.get("swap_infer", 0.0),
                "paste": timings.get("swap_paste", 0.0),
            },
        )
        return swapped

    def swap_classic(self, frame: Frame, faces: list[Face]) -> Frame | PendingFrame:
        """``frame`` with its faces' patches pending (the worker writes them into the encoder's frame); each face
        is swapped in the frame as the faces before it left it."""
        assert self.classic_source is not None
        patches: list[Patch] = []
        for face in faces:
            if _mesh_found(face):
                seen = PendingFrame(frame, patches=tuple(patches)).rgb() if patches else frame
                patch = classic_patch(seen, face, self.classic_source, self.options)
                patches += [] if patch is None else [patch]
                self.stats.add(swapped=1)
        return PendingFrame(frame, patches=tuple(patches)) if patches else frame

    def enhance(self, frame: Frame, faces: list[Face]) -> Frame:
        if not faces:
            return frame
        frame = frame.copy()  # one copy a frame; its faces are enhanced into it in turn
        for face in faces:
            enhance_face(frame, face, self.options, self.store, in_place=True)
        return frame


def build_frame_processor(options: Options, identity: dict[str, Any], models_dir: str | None) -> FaceProcessor:
    """A processor for ``options`` and the work's identity, with every model it needs loaded now."""
    log_providers(options.execution_providers)
    store = store_from_environment(models_dir)
    store.session_for(options.face_detector_model, options)
    require_recognizer(options, store)
    processor = FaceProcessor(options, store, batch_size=_batch_size(options), frame_threads=_frame_threads(options))
    if options.face_selector_mode == "reference":
        processor.reference_embedding = _embedding(identity, "reference_embedding")
    if options.face_landmarker_model == "2dfan4" and "face_swapper" in options.processors:
        store.session_for("2dfan4", options)
    if "face_swapper" in options.processors:
        if identity.get("face_swapper_model") != options.face_swapper_model:
            raise InvalidWorkError(
                f"work.json identity was prepared for face_swapper_model={identity.get('face_swapper_model')!r}, "
                f"but the options say {options.face_swapper_model!r}: prepare the work again"
            )
        if options.face_swapper_model == "classic":
            if "classic" not in identity:
                raise InvalidWorkError("work.json identity has no classic source face: prepare the work again")
            processor.classic_source = classic_source_from_json(identity["classic"])
            tflite_interpreter(store.resolve("face_mesh_468"))
        else:
            processor.swap_identity = identity_from_json(identity, swap_facts(options.face_swapper_model))
            if "area" in options.face_mask_types and options.face_landmarker_model == "face_mesh_468":
                tflite_interpreter(store.resolve("face_mesh_468"))
            check_swapper(options, store)
            load_mask_models(store, options)
    if "face_enhancer" in options.processors:
        store.session_for(options.face_enhancer_model, options)
    return processor


def _batch_size(options: Options) -> int:
    return GPU_BATCH_SIZE if on_gpu(options.execution_providers) else 1


def _frame_threads(options: Options) -> int:
    """On a GPU, ``execution_thread_count`` frames at once; on the CPU one, whose inference uses those threads."""
    return options.execution_thread_count if on_gpu(options.execution_providers) else 1


def _embedding(identity: dict[str, Any], key: str) -> FloatArray:
    try:
        vector = np.asarray(identity[key], np.float32).reshape(-1)
    except (KeyError, ValueError, TypeError):
        raise InvalidWorkError(f"work.json identity has no usable {key}: prepare the work again") from None
    if vector.size == 0 or not np.all(np.isfinite(vector)):
        raise InvalidWorkError(f"work.json identity has no usable {key}: prepare the work again")
    return normalize_embedding(vector)
