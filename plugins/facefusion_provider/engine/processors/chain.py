"""The engine's seam for the worker: the work's identity (once per work) and the frame processor (once per process).

``prepare_identity`` runs in ``prepare`` and its result goes into ``work.json``, so every span works with the same
identity. ``build_frame_processor`` loads every model the chain needs up front (a missing model fails before any frame
is decoded) and returns a processor that analyses each frame once (detect, select, dense landmarks: only where some
processor of the chain reads faces) and then runs ``options.processors`` in order on batches of frames, then
``output_video_scale``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt

from facefusion_provider.engine.classify import require_classifier, with_classes
from facefusion_provider.engine.detect import detect_faces, detector_models
from facefusion_provider.engine.face import Face, FloatArray, Frame
from facefusion_provider.engine.face_filter import FaceSelection
from facefusion_provider.engine.landmarks import (
    follow_face_mesh,
    landmark_68,
    landmark_68_models,
    mesh_found,
    mesh_landmarks,
    tflite_interpreter,
)
from facefusion_provider.engine.output_scale import ScaleFrames
from facefusion_provider.engine.paste import as_rgb
from facefusion_provider.engine.processors.base import (
    FaceStats,
    FrameStep,
    ProcessedFrame,
    TargetFramesStep,
    TimedFrameStep,
    classify_unclassified,
    timed,
)
from facefusion_provider.engine.processors.needs import NO_ANALYSIS, AnalysisNeeds
from facefusion_provider.engine.processors.registry import analysis_needs, chain_of, check_chain, follows_faces
from facefusion_provider.engine.recognize import embed_face, normalize_embedding
from facefusion_provider.engine.runtime import each, log_providers, on_gpu
from facefusion_provider.engine.select import (
    classifies_targets,
    reference_face,
    require_recognizer,
    select_faces,
    with_embeddings,
)
from facefusion_provider.engine.store import ModelStore, store_from_environment
from facefusion_provider.exceptions import InvalidWorkError, NoFaceError
from facefusion_provider.options import Options
from facefusion_provider.work.run_inputs import image_sources

IDENTITY_VERSION = 1
FaceTracking = Callable[[list[list[Face]]], list[list[Face]]]  # consecutive frames' detections -> faces to process
Alpha = npt.NDArray[np.uint8]  # H x W, 255 opaque: a transparent output's alpha plane
GPU_BATCH_SIZE = 8  # frames per call when a GPU provider runs: the swapper stacks all their faces in batches
MESH_MODEL = "face_mesh_468"


# --- prepare: the identity ----------------------------------------------------------------------------------------


def prepare_identity(
    source_paths: list[str], reference_frame: Frame | None, options: Options, models_dir: str | None
) -> dict[str, Any]:
    """The work's identity for ``work.json``: the source files' names, what each processor of the chain takes from
    the sources (``Processor.prepare``), and in reference mode the embedding of the reference face in
    ``reference_frame`` (``reference_face_position`` in ``face_selector_order``, after the filters)."""
    check_chain(options)
    store = store_from_environment(models_dir)
    require_recognizer(options, store)
    if FaceSelection.of(options).filters:
        require_classifier(store, options)
    identity: dict[str, Any] = {
        "version": IDENTITY_VERSION,
        "sources": [os.path.basename(path) for path in source_paths],
    }
    images = image_sources(source_paths)  # a voice among the sources is the worker's to store (``stored_voice``)
    for processor in chain_of(options):
        identity.update(processor.prepare(images, options, store))
    if options.face_selector_mode == "reference":
        identity["reference_embedding"] = _reference_embedding(reference_frame, options, store).tolist()
    return identity


def _reference_embedding(reference_frame: Frame | None, options: Options, store: ModelStore) -> FloatArray:
    if reference_frame is None:
        raise ValueError("face_selector_mode=reference needs the reference frame")
    faces = detect_faces(reference_frame, options, store)
    if not faces:
        raise NoFaceError(
            f"no face found in the reference frame (reference_frame_number={options.reference_frame_number}): "
            "choose a frame where the person to swap is visible"
        )
    if FaceSelection.of(options).filters:
        faces = with_classes(reference_frame, faces, store, options)
    chosen = reference_face(faces, options)
    if chosen is None:
        raise NoFaceError(
            f"none of the {len(faces)} faces in the reference frame (reference_frame_number="
            f"{options.reference_frame_number}) passes face_selector_gender, face_selector_race and "
            "face_selector_age_start/end: choose another frame or other filters"
        )
    return embed_face(reference_frame, chosen, store, options)


# --- swap-span: the frame processor -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Followed:
    """What the next frame's analysis follows on from: the faces of the frame before, with their meshes."""

    faces: list[Face]
    since_detection: int  # frames since the detector last ran


@dataclass
class FrameProcessor:
    """Analyse every frame (detect, select, dense landmarks: what depends on the target alone, and only what
    ``needs`` asks), then apply each of ``steps`` (the loaded ``options.processors``, in order). ``analyse_batch``
    and ``apply_batch`` are separate so that a target's analysis can be stored once and reused for every source face
    (``process_batch`` does both)."""

    options: Options
    store: ModelStore
    batch_size: int
    steps: list[FrameStep] = field(default_factory=list)
    needs: AnalysisNeeds = NO_ANALYSIS
    model_label: str = ""  # the chain's models, joined by "+": what the worker's load metric names
    reference_embedding: FloatArray | None = None
    # Frames whose work runs side by side: on a GPU the CPU work around inference (detector decoding, paste-back)
    # would otherwise leave the GPU and the pod's other cores waiting on one thread.
    frame_threads: int = 1
    stats: FaceStats = field(default_factory=FaceStats)

    @property
    def tracks_faces(self) -> bool:
        """Whether the face tracker selects the faces (it links every frame's detections to the frames before)."""
        return self.needs.faces and self.options.face_tracker_score > 0

    @property
    def classifies(self) -> bool:
        """Whether each face found is classified (``select.classifies_targets``): a filter chooses among them."""
        return self.needs.faces and classifies_targets(self.options)

    @property
    def follows_faces(self) -> bool:
        """Whether the face mesh follows the faces between detections (``registry.follows_faces``)."""
        return follows_faces(self.options)

    def process_batch(self, frames: list[Frame], times: Sequence[Fraction] | None = None) -> list[Frame]:
        with self._pool() as pool:
            return self.apply_batch(frames, self.analyse_batch(frames, pool), pool, times)

    def analyse_batch(
        self, frames: list[Frame], given: Executor | None = None, track: FaceTracking | None = None
    ) -> list[list[Face]]:
        """The faces each frame's processors work on, with the dense landmarks and the classes they read (none when
        no processor reads faces). With ``track`` (the face tracker), every frame's detections go through it in order
        and it selects the faces."""
        if not self.needs.faces:
            return [[] for _ in frames]
        with self._pool(given) as pool:
            selected = each(pool, self.select, frames) if track is None else track(each(pool, self.detect, frames))
            with timed(self.stats, "landmarks"):
                if self.needs.landmarks == "mesh":  # one thread: the face mesh's LiteRT interpreter is not thread-safe
                    selected = [self.mesh(frame, faces) for frame, faces in zip(frames, selected, strict=True)]
                elif self.needs.landmarks == "2dfan4":
                    selected = each(pool, self.landmarks, list(zip(frames, selected, strict=True)))
            if self.needs.classes:  # on the five points the processors align by, as FaceFusion classifies
                selected = each(pool, self.classify_selected, list(zip(frames, selected, strict=True)))
            return selected

    def analyse_followed(
        self, frames: list[Frame], followed: Followed | None
    ) -> tuple[list[list[Face]], Followed | None]:
        """Consecutive frames analysed in order, the frame before them having left ``followed`` (None: they start a
        segment, or come after a gap). With ``follows_faces`` the detector runs every ``face_detector_interval``
        frames, and on a frame where there is nothing to follow or the mesh lost a face; between, each face is its
        mesh followed on from the frame before. Returns what the next frame follows on from.
        """
        if not self.follows_faces:
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
        with timed(self.stats, "landmarks"):
            followed = []
            for face in faces:
                if not mesh_found(face):
                    return None
                followed.append(follow_face_mesh(frame, face, self.store))
                if not mesh_found(followed[-1]):
                    return None
        self.stats.add(detected=len(followed))  # found in this frame, by the mesh: the count stays faces per frame
        return followed

    def apply_batch(
        self,
        frames: list[Frame],
        faces: list[list[Face]],
        given: Executor | None = None,
        times: Sequence[Fraction] | None = None,
    ) -> list[Frame]:
        """``frames`` with ``options.processors`` applied to ``faces`` (from ``analyse_batch``, perhaps stored);
        ``times``: each frame's seconds from the first frame worked, for the steps that read them."""
        return [as_rgb(result) for result in self.apply_batch_pending(frames, faces, given, times)]

    def apply_batch_pending(
        self,
        frames: list[Frame],
        faces: list[list[Face]],
        given: Executor | None = None,
        times: Sequence[Fraction] | None = None,
    ) -> list[ProcessedFrame]:
        """``apply_batch``, but the swapper's faces are left to write (``PendingFrame``) until a later processor
        needs the frame's pixels: when it comes last, the worker writes them straight into the encoder's frame.
        ``frames`` stay as decoded: a step that reads the target's own frames (``TargetFramesStep``) gets them. A
        transparent background's alpha is taken off for the steps after the remover and put back at the end (RGBA)."""
        with self._pool(given) as pool:
            results: list[ProcessedFrame] = list(frames)
            alphas: list[Alpha | None] = [None] * len(frames)
            for step in self.steps:
                images = each(pool, as_rgb, results)  # a previous swapper's crops pasted, side by side
                if isinstance(step, TargetFramesStep):
                    stepped = list(step.with_targets(frames, images, faces, pool))
                elif isinstance(step, TimedFrameStep):
                    if times is None or len(times) != len(frames):
                        raise ValueError("the chain reads each frame's time: give one per frame")
                    stepped = list(step.at_times(images, faces, pool, times))
                else:
                    stepped = list(step(images, faces, pool))
                results, alphas = _split_alphas(stepped, alphas)
            if all(alpha is None for alpha in alphas):
                return results
            return [_with_alpha(result, alpha) for result, alpha in zip(results, alphas, strict=True)]

    @contextlib.contextmanager
    def _pool(self, pool: Executor | None = None) -> Iterator[Executor | None]:
        if pool is not None or self.frame_threads <= 1:
            yield pool
            return
        with ThreadPoolExecutor(self.frame_threads, "facefusion-frames") as own:
            yield own

    def detect(self, frame: Frame) -> list[Face]:
        """Every face found, with its embedding in reference mode and its classes where a filter is set: what the face
        tracker links and selects from."""
        with timed(self.stats, "detect"):
            faces = detect_faces(frame, self.options, self.store)
            if self.options.face_selector_mode == "reference":
                faces = with_embeddings(frame, faces, self.options, self.store)
        self.stats.add(detected=len(faces))
        return self.classify(frame, faces)

    def select(self, frame: Frame) -> list[Face]:
        with timed(self.stats, "detect"):
            faces = detect_faces(frame, self.options, self.store)
        self.stats.add(detected=len(faces))
        faces = self.classify(frame, faces)
        with timed(self.stats, "detect"):
            return select_faces(frame, faces, self.options, self.store, self.reference_embedding)

    def classify(self, frame: Frame, faces: list[Face]) -> list[Face]:
        """``faces`` with their classes where a filter chooses among them (each face once: the analysis is stored)."""
        if not self.classifies or not faces:
            return faces
        with timed(self.stats, "classify"):
            classified = with_classes(frame, faces, self.store, self.options)
        self.stats.add(classified=len(faces))
        return classified

    def classify_selected(self, pair: tuple[Frame, list[Face]]) -> list[Face]:
        """The selected faces with their classes (a processor reads them: fran the age), those a filter classified
        kept; stored with the analysis, so later runs over the target classify none."""
        frame, faces = pair
        return classify_unclassified(frame, faces, self.store, self.options, self.stats)

    def mesh(self, frame: Frame, faces: list[Face]) -> list[Face]:
        return [mesh_landmarks(frame, face, self.options, self.store) for face in faces]

    def landmarks(self, pair: tuple[Frame, list[Face]]) -> list[Face]:
        frame, faces = pair
        return [landmark_68(frame, face, self.options, self.store) for face in faces]


def build_frame_processor(options: Options, identity: dict[str, Any], models_dir: str | None) -> FrameProcessor:
    """A processor for ``options`` and the work's identity: the analysis's models loaded now (where the chain reads
    faces), then each processor's pre-check and models, in the chain's order."""
    check_chain(options)
    log_providers(options.execution_providers)
    store = store_from_environment(models_dir)
    chain, needs = chain_of(options), analysis_needs(options)
    processor = FrameProcessor(
        options,
        store,
        batch_size=_batch_size(options),
        needs=needs,
        model_label="+".join(chosen.model(options) for chosen in chain),
        frame_threads=_frame_threads(options),
    )
    if needs.faces:
        for detector in detector_models(options):
            store.session_for(detector, options)
        require_recognizer(options, store)
        if processor.classifies:
            require_classifier(store, options)
        if options.face_selector_mode == "reference":
            processor.reference_embedding = _embedding(identity, "reference_embedding")
        if needs.landmarks != "none":
            for landmarker in landmark_68_models(options):
                store.session_for(landmarker, options)
        if needs.landmarks == "mesh":
            tflite_interpreter(store.resolve(MESH_MODEL))
    processor.steps = [chosen.load(options, identity, store, processor.stats) for chosen in chain]
    if options.output_video_scale != 1.0:
        processor.steps.append(ScaleFrames(options.output_video_scale, processor.stats))
    return processor


def _split_alphas(
    results: list[ProcessedFrame], alphas: list[Alpha | None]
) -> tuple[list[ProcessedFrame], list[Alpha | None]]:
    """A step's RGBA frames (the background remover's, transparent) split into the RGB the next step takes and the
    alpha carried to the end; where an alpha was carried already, the two meet at their minimum (FaceFusion's
    masks)."""
    colours: list[ProcessedFrame] = []
    carried: list[Alpha | None] = []
    for result, alpha in zip(results, alphas, strict=True):
        if isinstance(result, np.ndarray) and result.ndim == 3 and result.shape[2] == 4:
            new = result[:, :, 3]
            colours.append(np.ascontiguousarray(result[:, :, :3]))
            carried.append(new if alpha is None else np.minimum(_sized(alpha, new.shape), new))
        else:
            colours.append(result)
            carried.append(alpha)
    return colours, carried


def _with_alpha(result: ProcessedFrame, alpha: Alpha | None) -> ProcessedFrame:
    """The finished frame with its carried alpha as a fourth channel, scaled with the frame where a later step
    resized it."""
    if alpha is None:
        return result
    rgb = as_rgb(result)
    return np.dstack((rgb, _sized(alpha, rgb.shape[:2])))


def _sized(alpha: Alpha, shape: tuple[int, ...]) -> Alpha:
    height, width = shape[:2]
    if alpha.shape == (height, width):
        return alpha
    return np.asarray(cv2.resize(alpha, (width, height), interpolation=cv2.INTER_LINEAR), np.uint8)


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
