"""FaceFusion's inswapper path: arcface_128 alignment, emap projection of the source identity, pixel boost, colour
correction (measured on skin when the face's landmarks are known), paste-back through the box and area masks."""

from __future__ import annotations

import functools
import mmap
import os
import time
from collections.abc import MutableMapping, Sequence
from concurrent.futures import Executor
from typing import TypeVar

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from facefusion_provider.engine.align import Matrix, warp_face
from facefusion_provider.engine.face import Face, FloatArray, Frame
from facefusion_provider.engine.paste import color_weight, create_crop_mask, match_color_statistics, paste_back
from facefusion_provider.engine.recognize import normalize_embedding
from facefusion_provider.engine.runtime import batch_is_dynamic, each, run_session
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.exceptions import ModelIncompatibleError
from facefusion_provider.options import Options

MODEL_SIZE = 128
EMBEDDING_SIZE = 512
ScalarT = TypeVar("ScalarT", bound=np.generic)
DEFAULT_BATCH_SIZE = 16


# Protobuf field numbers: ModelProto.graph and GraphProto.initializer.
_MODEL_GRAPH_FIELD = 7
_GRAPH_INITIALIZER_FIELD = 5


@functools.lru_cache(maxsize=2)
def load_emap(model_path: str) -> FloatArray:
    """The 512x512 matrix that maps an ArcFace embedding into the swapper's latent: the model's last initializer."""
    emap = numpy_helper.to_array(last_initializer(model_path), base_dir=os.path.dirname(model_path))
    if emap.shape != (EMBEDDING_SIZE, EMBEDDING_SIZE):
        raise ModelIncompatibleError(
            f"{model_path}: the last initializer is {'x'.join(map(str, emap.shape))}, expected the 512x512 emap; "
            "is this FaceFusion's inswapper_128?"
        )
    return np.ascontiguousarray(emap, np.float32)


def last_initializer(model_path: str) -> onnx.TensorProto:
    """The graph's last initializer, parsed alone: walking the protobuf fields skips the other 550 MB of weights."""
    with open(model_path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        graph = _last_field(data, 0, len(data), _MODEL_GRAPH_FIELD)
        initializer = _last_field(data, *graph, _GRAPH_INITIALIZER_FIELD) if graph else None
        if initializer is None:
            raise ModelIncompatibleError(f"{model_path}: no graph initializers, so no emap; is this inswapper_128?")
        tensor = onnx.TensorProto()
        tensor.ParseFromString(data[initializer[0] : initializer[1]])
        return tensor


def _varint(data: mmap.mmap, offset: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, offset
        shift += 7


def _last_field(data: mmap.mmap, start: int, end: int, wanted: int) -> tuple[int, int] | None:
    """(start, end) of the last length-delimited field number ``wanted`` of the message in ``data[start:end]``."""
    found = None
    offset = start
    while offset < end:
        key, offset = _varint(data, offset)
        field, wire_type = key >> 3, key & 7
        if wire_type == 0:
            _, offset = _varint(data, offset)
        elif wire_type == 1:
            offset += 8
        elif wire_type == 5:
            offset += 4
        elif wire_type == 2:
            length, offset = _varint(data, offset)
            if field == wanted:
                found = (offset, offset + length)
            offset += length
        else:
            raise ModelIncompatibleError(f"unsupported protobuf wire type {wire_type}: not an ONNX model")
    return found


def source_latent(source_embedding: npt.ArrayLike, emap: FloatArray) -> FloatArray:
    """The swapper's ``source`` input (1, 512): the L2-normalised embedding projected by the emap."""
    return (normalize_embedding(source_embedding)[None, :] @ emap).astype(np.float32)


def pixel_boost_size(options: Options) -> int:
    return int(options.face_swapper_pixel_boost.split("x")[0])


def implode_pixel_boost(crop: npt.NDArray[ScalarT], total: int) -> npt.NDArray[ScalarT]:
    """(S, S, 3) crop -> (total^2, S/total, S/total, 3): tile (a, b) holds every total-th pixel from offset (a, b)."""
    size = crop.shape[0] // total
    return crop.reshape(size, total, size, total, 3).transpose(1, 3, 0, 2, 4).reshape(total * total, size, size, 3)


def explode_pixel_boost(tiles: npt.NDArray[ScalarT], total: int) -> npt.NDArray[ScalarT]:
    """The inverse of ``implode_pixel_boost``."""
    size = tiles.shape[1]
    return tiles.reshape(total, total, size, size, 3).transpose(2, 0, 3, 1, 4).reshape(size * total, size * total, 3)


def prepare_target(tiles: npt.NDArray[np.generic]) -> FloatArray:
    """(N, 128, 128, 3) RGB uint8 -> (N, 3, 128, 128) float32 in 0..1."""
    return np.ascontiguousarray(tiles.transpose(0, 3, 1, 2), np.float32) / 255.0


def normalize_output(output: npt.NDArray[np.floating]) -> FloatArray:
    """(N, 3, 128, 128) in 0..1 -> (N, 128, 128, 3) float32 in 0..255."""
    return np.asarray(np.clip(output.transpose(0, 2, 3, 1), 0.0, 1.0) * 255.0, np.float32)


def swap_faces(
    frames: Sequence[Frame],
    faces: Sequence[Sequence[Face]],
    source_embedding: npt.ArrayLike,
    options: Options,
    store: ModelStore,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    timings: MutableMapping[str, float] | None = None,
    pool: Executor | None = None,
) -> list[Frame]:
    """Swap the source identity into every given face of every frame; all crops go through the model in batches.

    ``faces[i]`` are the faces of ``frames[i]`` to swap; a frame with none comes back as the same array. With ``area``
    among ``face_mask_types`` every face needs its dense landmarks.
    ``timings``, when given, accumulates seconds spent aligning, in the model, and pasting back. With ``pool`` the
    frames are pasted back side by side (a frame's own faces in turn).
    """
    model_name = options.face_swapper_model
    session = store.session_for(model_name, options)
    latent = source_latent(source_embedding, load_emap(store.resolve(model_name)))
    clock = StageClock(timings)
    boost = pixel_boost_size(options)
    total = boost // MODEL_SIZE
    crops: list[tuple[int, Frame, Matrix]] = []
    crop_faces: list[Face] = []
    tiles: list[Frame] = []
    for index, (frame, frame_faces) in enumerate(zip(frames, faces, strict=True)):
        for face in frame_faces:
            crop, matrix = warp_face(frame, face.landmark_5, "arcface_128", boost)
            crops.append((index, crop, matrix))
            crop_faces.append(face)
            tiles.append(implode_pixel_boost(crop, total))
    clock.lap("swap_align")
    if not crops:
        return list(frames)
    swapped_tiles = run_swapper(session, np.concatenate(tiles), latent, batch_size)
    clock.lap("swap_infer")
    blend = options.face_swapper_blend / 100.0
    per_face = total * total
    numbered: dict[int, list[int]] = {}  # frame index -> its crops' numbers
    for number, (index, _, _) in enumerate(crops):
        numbered.setdefault(index, []).append(number)

    def paste_frame(index: int) -> Frame:
        frame = frames[index]
        for number in numbered[index]:
            _, crop, matrix = crops[number]
            face = crop_faces[number]
            mask = create_crop_mask(boost, face, matrix, options)
            swapped = explode_pixel_boost(swapped_tiles[number * per_face : (number + 1) * per_face], total)
            if options.face_swapper_color_correction:
                swapped = match_color_statistics(swapped, crop, color_weight(boost, face, matrix, mask))
            frame = paste_back(frame, swapped, mask, matrix, blend)
        return frame

    results = list(frames)
    for index, pasted in zip(numbered, each(pool, paste_frame, numbered), strict=True):
        results[index] = pasted
    clock.lap("swap_paste")
    return results


class StageClock:
    """Adds the seconds since the previous lap to ``timings[stage]``; does nothing without a timings mapping."""

    def __init__(self, timings: MutableMapping[str, float] | None) -> None:
        self.timings = timings
        self.last = time.perf_counter()

    def lap(self, stage: str) -> None:
        if self.timings is None:
            return
        now = time.perf_counter()
        self.timings[stage] = self.timings.get(stage, 0.0) + now - self.last
        self.last = now


def swap_face(frame: Frame, face: Face, source_embedding: npt.ArrayLike, options: Options, store: ModelStore) -> Frame:
    """One face of one frame swapped and pasted back."""
    return swap_faces([frame], [[face]], source_embedding, options, store)[0]


def run_swapper(
    session: ort.InferenceSession, tiles: npt.NDArray[np.generic], latent: FloatArray, batch_size: int
) -> FloatArray:
    """All 128x128 tiles through the swapper: in batches when the model's batch is dynamic, else one at a time."""
    step = max(1, batch_size) if batch_is_dynamic(session) else 1
    outputs = []
    for start in range(0, len(tiles), step):
        target = prepare_target(tiles[start : start + step])
        source = np.repeat(latent, len(target), axis=0)
        (output, *_) = run_session(session, {"target": target, "source": source})
        outputs.append(normalize_output(output))
    return np.concatenate(outputs)
