"""The lip syncer: each selected face's mouth moved to the voice (an audio file among the sources), as FaceFusion 3.8.1's
``lip_syncer`` does it, by wav2lip (96) or edtalk (256).

prepare separates the voice (``voice_extractor_model``, ``engine.voice_extract``) and computes its mel spectrogram
once (``engine.voice``); the worker stores it with the work
(``identity["voice"]``: its file and checksum); every span reads that file. Each frame reads the 16 mel columns its own
time chooses (``engine.voice.frame_window``), so a frame's mouth never depends on where its span began.

Per face: the face aligned to ffhq_512 at 512x512 by its five points. wav2lip: the box of the dense landmarks (68, or
the mesh's jaw, brows, eyes and lips) cut from that crop at 96x96, the model's mouth warped back over it (edges
replicated) and pasted by the lower-face area mask; edtalk: the crop at 256x256, its answer scaled back to 512 and
pasted by the box mask. With ``occlusion`` among ``face_mask_types`` the occluder's mask limits both.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from facefusion_provider import storage
from facefusion_provider.engine.align import invert_affine, transform_points, warp_face
from facefusion_provider.engine.crop_masks import create_box_mask
from facefusion_provider.engine.face import Face, FloatArray, Frame
from facefusion_provider.engine.face_masks import (
    MESH_468,
    hull_mask,
    occlusion_mask,
    sharpen_model_mask,
    topology_of,
)
from facefusion_provider.engine.models import LipSyncFacts, lip_sync_facts, model_spec
from facefusion_provider.engine.paste import paste_back
from facefusion_provider.engine.processors.base import (
    FaceStats,
    FrameStep,
    ProcessedFrame,
    Processor,
    TimedFrameStep,
    timed,
)
from facefusion_provider.engine.processors.needs import AnalysisNeeds
from facefusion_provider.engine.runtime import each, run_session
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.engine.voice import Mel, frame_window, model_window, unpack_mel, voice_mel
from facefusion_provider.engine.voice_extract import extract_voice
from facefusion_provider.exceptions import InvalidWorkError, ModelIncompatibleError
from facefusion_provider.options import LipSyncerOptions, Options

CROP_SIZE = 512  # the ffhq_512 crop every model's face is cut from and pasted back by
WAV2LIP_SCALE = 2.0  # wav2lip's voice is scaled by twice lip_syncer_weight


class LipSyncer(Processor):
    name = "lip_syncer"
    options = LipSyncerOptions
    model_option = "lip_syncer_model"

    def analysis(self, options: Options) -> AnalysisNeeds:
        """The faces, with the chosen landmarker's dense points (the mouth's box and the lower face are drawn by them)."""
        return AnalysisNeeds(faces=True, landmarks="2dfan4" if options.face_landmarker_model == "2dfan4" else "mesh")

    def model_names(self, options: Options) -> tuple[str, ...]:
        return options.lip_syncer_model, options.voice_extractor_model

    def prepare(self, source_paths: list[str], options: Options, store: ModelStore) -> dict[str, Any]:
        """Its models checked now, so a missing or mismatched file fails in prepare (the voice is the worker's to
        store: ``voice_mel``)."""
        checked_session(options, store)
        store.session_for(options.voice_extractor_model, options)
        return {}

    def load(self, options: Options, identity: dict[str, Any], store: ModelStore, stats: FaceStats) -> FrameStep:
        mel, frame_rate = stored_voice(identity)
        if "occlusion" in options.face_mask_types:
            store.session_for(options.face_occluder_model, options)
        facts = lip_sync_facts(options.lip_syncer_model)
        return SyncLips(checked_session(options, store), facts, mel, frame_rate, options, store, stats)


def voice_mel_of(samples: npt.NDArray[np.int16], options: Options, store: ModelStore) -> Mel:
    """A voice's mel spectrogram as the lip syncer hears it: separated from music and noise by
    ``voice_extractor_model`` first, as FaceFusion does."""
    session = store.session_for(options.voice_extractor_model, options)
    frames = model_spec(options.voice_extractor_model).inputs[0][1][3]
    assert frames is not None  # the catalogue pins it

    def run(parts: np.ndarray) -> np.ndarray:
        return run_session(session, {"input": parts})[0]

    return voice_mel(extract_voice(samples, run, frames))


def voice_identity(uri: str, data: bytes, frame_rate: Fraction) -> dict[str, Any]:
    """What the work's identity says of its stored voice: the file, its checksum, and the target's frame rate (the
    voice windows' lead, ``engine.voice.window_end``)."""
    return {
        "voice": {
            "uri": uri,
            "sha256": hashlib.sha256(data).hexdigest(),
            "frame_rate": f"{frame_rate.numerator}/{frame_rate.denominator}",
        }
    }


def stored_voice(identity: dict[str, Any]) -> tuple[Mel, Fraction]:
    """The work's voice (its mel spectrogram) and the frame rate it is read at; InvalidWorkError when it is missing or
    its bytes are not those prepare stored."""
    voice = identity.get("voice")
    if not isinstance(voice, dict) or not {"uri", "sha256", "frame_rate"} <= set(voice):
        raise InvalidWorkError("work.json identity has no voice: lip_syncer needs one; prepare the work again")
    data = storage.read_bytes(voice["uri"])
    if hashlib.sha256(data).hexdigest() != voice["sha256"]:
        raise InvalidWorkError(
            f"{voice['uri']}: the stored voice is damaged (checksum differs); prepare the work again"
        )
    return unpack_mel(data), Fraction(voice["frame_rate"])


def checked_session(options: Options, store: ModelStore) -> ort.InferenceSession:
    """The chosen lip syncer's session, a silent window and a blank face through it: another kind of model fails here."""
    name = options.lip_syncer_model
    session, facts = store.session_for(name, options), lip_sync_facts(name)
    channels = 6 if facts.kind == "wav2lip" else 3
    silent, blank = model_window(np.zeros((80, 16), np.float32)), np.zeros((1, channels, facts.size, facts.size))
    feeds = lip_sync_feeds(facts, silent, blank.astype(np.float32), options.lip_syncer_weight)
    expected = (1, 3, facts.size, facts.size)
    try:
        found = tuple(run_session(session, feeds)[0].shape)
    except (ValueError, RuntimeError, ort.capi.onnxruntime_pybind11_state.Fail) as error:
        found, reason = (), str(error).splitlines()[0]
    else:
        reason = f"gave an output of shape {found}"
    if found != expected:
        raise ModelIncompatibleError(
            f"{name}.onnx does not look like {name}: a silent voice window and a {facts.size}x{facts.size} face "
            f"{reason}, expected {expected} from inputs source (1, 1, 80, 16) and target (1, {channels}, {facts.size}, "
            f"{facts.size}){' and weight (1,)' if facts.kind == 'edtalk' else ''}. Use FaceFusion's {name}.onnx."
        )
    return session


def lip_sync_feeds(facts: LipSyncFacts, source: np.ndarray, target: np.ndarray, weight: float) -> dict[str, np.ndarray]:
    """The model's inputs: the mel window, the face, and edtalk's ``weight`` (``lip_syncer_weight``)."""
    feeds = {"source": source, "target": target}
    if facts.kind == "edtalk":
        feeds["weight"] = np.array([weight], np.float32)
    return feeds


def mouth_box_points(landmarks: FloatArray) -> FloatArray:
    """The points whose box wav2lip sees: all 68 (FaceFusion's), or the mesh's jaw, eyes, brows and lips (the 68's
    span, without the forehead the mesh also covers)."""
    if topology_of(landmarks) is not MESH_468:
        return landmarks
    indices = {*MESH_468.areas["lower-face"], *(index for feature in MESH_468.features for index in feature)}
    return landmarks[sorted(indices)]


def lower_face_mask(landmarks: FloatArray) -> FloatArray:
    """FaceFusion's lower-face area mask in the crop: the points' hull, blurred (sigma 5) and re-thresholded."""
    points = landmarks[list(topology_of(landmarks).areas["lower-face"])]
    return sharpen_model_mask(hull_mask((CROP_SIZE, CROP_SIZE), points).astype(np.float32) / np.float32(255.0))


def to_model_crop(output: np.ndarray) -> Frame:
    """A model's (1, 3, S, S) 0..1 answer as S x S x 3 bytes, truncated as FaceFusion does."""
    return np.asarray(np.clip(output[0].transpose(1, 2, 0), 0.0, 1.0) * 255.0, np.float32).astype(np.uint8)


@dataclass(frozen=True)
class SyncLips(TimedFrameStep):
    session: ort.InferenceSession
    facts: LipSyncFacts
    mel: Mel
    frame_rate: Fraction
    options: Options
    store: ModelStore
    stats: FaceStats

    def at_times(
        self, frames: list[Frame], faces: list[list[Face]], pool: Executor | None, times: Sequence[Fraction]
    ) -> list[ProcessedFrame]:
        with timed(self.stats, "lip_sync"):
            return list(each(pool, self.sync, list(zip(frames, faces, times, strict=True))))

    def sync(self, item: tuple[Frame, list[Face], Fraction]) -> Frame:
        frame, faces, seconds = item
        if not faces:
            return frame
        scale = WAV2LIP_SCALE * self.options.lip_syncer_weight if self.facts.kind == "wav2lip" else 1.0
        source = model_window(frame_window(self.mel, seconds, self.frame_rate), scale)
        frame = frame.copy()  # one copy a frame; its faces are synced into it in turn
        for face in faces:
            self.sync_face(frame, face, source)
        return frame

    def sync_face(self, frame: Frame, face: Face, source: np.ndarray) -> None:
        crop, matrix = warp_face(frame, face.landmark_5, "ffhq_512", CROP_SIZE)
        masks: list[FloatArray] = []
        if "occlusion" in self.options.face_mask_types:
            masks.append(occlusion_mask(crop, self.store, self.options))
        if self.facts.kind == "edtalk":
            masks.append(create_box_mask(CROP_SIZE, self.options.face_mask_blur, self.options.face_mask_padding))
            synced = self.edtalk(crop, source)
        else:
            if face.landmark_dense is None:
                raise ValueError("lip_syncer's wav2lip needs the face's dense landmarks")
            landmarks = transform_points(face.landmark_dense, matrix)
            masks.append(lower_face_mask(landmarks))
            synced = self.wav2lip(crop, landmarks, source)
        paste_back(frame, synced, np.asarray(np.minimum.reduce(masks), np.float32), matrix, in_place=True)

    def edtalk(self, crop: Frame, source: np.ndarray) -> Frame:
        size = self.facts.size
        face = cv2.resize(crop, (size, size), interpolation=cv2.INTER_AREA).astype(np.float32) / np.float32(255.0)
        target = np.ascontiguousarray(face.transpose(2, 0, 1)[None], np.float32)  # RGB, as FaceFusion flips its BGR
        feeds = lip_sync_feeds(self.facts, source, target, self.options.lip_syncer_weight)
        synced = to_model_crop(run_session(self.session, feeds)[0])
        return np.asarray(cv2.resize(synced, (CROP_SIZE, CROP_SIZE), interpolation=cv2.INTER_CUBIC), np.uint8)

    def wav2lip(self, crop: Frame, landmarks: FloatArray, source: np.ndarray) -> Frame:
        size = self.facts.size
        points = mouth_box_points(landmarks)
        (x1, y1), (x2, y2) = points.min(axis=0), points.max(axis=0)
        box = np.array([[x1, y1], [x2, y1], [x1, y2]], np.float32)
        corners = np.array([[0, 0], [size, 0], [0, size]], np.float32)
        area_matrix = np.asarray(cv2.getAffineTransform(box, corners), np.float64)
        shrinks = x2 - x1 > size or y2 - y1 > size
        area = cv2.warpAffine(crop, area_matrix, (size, size), flags=cv2.INTER_AREA if shrinks else cv2.INTER_LINEAR)[
            :, :, ::-1
        ]  # BGR, as the model was trained
        blanked = area.copy()
        blanked[size // 2 :] = 0  # the mouth the model draws: the lower half hidden
        stacked = np.concatenate([blanked, area], axis=2).transpose(2, 0, 1)[None].astype(np.float32) / np.float32(255)
        synced = to_model_crop(run_session(self.session, lip_sync_feeds(self.facts, source, stacked, 0.0))[0])[
            :, :, ::-1
        ]
        back = cv2.warpAffine(
            np.ascontiguousarray(synced),
            invert_affine(area_matrix),
            (CROP_SIZE, CROP_SIZE),
            borderMode=cv2.BORDER_REPLICATE,
        )
        return np.asarray(back, np.uint8)


PROCESSOR = LipSyncer()
