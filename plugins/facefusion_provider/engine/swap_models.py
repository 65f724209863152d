"""Every ONNX swapper of FaceFusion's catalogue through one path, driven by the catalogue's ``SwapFacts``: the target
crop's template, size and mean/std, the source input (emap-projected, normalised or crossface-converted embedding, or
an aligned source crop), the output's de-normalisation, pixel boost; colour correction (measured on skin when the
face's landmarks are known) and paste-back through the box and area masks."""

from __future__ import annotations

import base64
import functools
import mmap
import os
import time
from collections.abc import MutableMapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import cv2
import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from facefusion_provider.engine.align import Matrix, warp_face
from facefusion_provider.engine.crop_masks import color_weight, create_crop_mask
from facefusion_provider.engine.face import Face, FloatArray, Frame
from facefusion_provider.engine.face_masks import with_model_masks
from facefusion_provider.engine.models import INSWAPPER, SwapFacts, swap_facts
from facefusion_provider.engine.paste import Paste, PendingFrame, as_rgb, match_color_statistics, to_uint8
from facefusion_provider.engine.recognize import normalize_embedding, raw_embedding
from facefusion_provider.engine.runtime import batch_is_dynamic, each, run_session
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.exceptions import InvalidOptionError, InvalidWorkError, ModelIncompatibleError
from facefusion_provider.options import Options

if TYPE_CHECKING:
    import onnx

MODEL_SIZE = INSWAPPER.size
EMBEDDING_SIZE = 512
ScalarT = TypeVar("ScalarT", bound=np.generic)
DEFAULT_BATCH_SIZE = 16
# FaceFusion's face_swapper_weight: 0..1 maps linearly onto the target identity's share, 0.35 down to -0.35.
TARGET_SHARE_AT_NO_WEIGHT = 0.35


# Protobuf field numbers: ModelProto.graph and GraphProto.initializer.
_MODEL_GRAPH_FIELD = 7
_GRAPH_INITIALIZER_FIELD = 5


# --- the source identity ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SwapIdentity:
    """What the work's identity holds for a swapper: the normalised mean ArcFace embedding, the crossface-converted
    embedding (simswap, ghost) and the aligned source crop (blendswap, uniface; RGB uint8)."""

    embedding: FloatArray
    converted: FloatArray | None = None
    image: Frame | None = None


def as_identity(source: SwapIdentity | npt.ArrayLike) -> SwapIdentity:
    return source if isinstance(source, SwapIdentity) else SwapIdentity(normalize_embedding(source))


def convert_embedding(
    raw_embedding: npt.ArrayLike, facts: SwapFacts, store: ModelStore, options: Options
) -> FloatArray:
    """The raw ArcFace embedding through the swapper's crossface converter, L2-normalised where the swapper wants."""
    assert facts.converter is not None
    session = store.session_for(facts.converter, options)
    vector = np.asarray(raw_embedding, np.float32).reshape(1, EMBEDDING_SIZE)
    (converted, *_) = run_session(session, {"input": vector})
    result = np.asarray(converted, np.float32).reshape(-1)
    return normalize_embedding(result) if facts.normalize_source else result


def source_crop(image: Frame, face: Face, facts: SwapFacts) -> Frame:
    """The source face aligned as an image-source swapper takes it (blendswap: arcface_112_v2 at 112, uniface: ffhq_512
    at 256)."""
    assert facts.source_template is not None and facts.source_size is not None
    crop, _ = warp_face(image, face.landmark_5, facts.source_template, facts.source_size)
    return crop


def identity_to_json(identity: SwapIdentity) -> dict[str, Any]:
    """work.json's keys for the swapper: ``source_embedding``, and ``source_converted`` / ``source_image_png_base64``."""
    data: dict[str, Any] = {"source_embedding": identity.embedding.tolist()}
    if identity.converted is not None:
        data["source_converted"] = identity.converted.tolist()
    if identity.image is not None:
        ok, png = cv2.imencode(".png", np.ascontiguousarray(identity.image[:, :, ::-1]))
        if not ok:
            raise ValueError("could not encode the source face crop as PNG")
        data["source_image_png_base64"] = base64.b64encode(png.tobytes()).decode("ascii")
    return data


def identity_from_json(data: dict[str, Any], facts: SwapFacts) -> SwapIdentity:
    """The swapper's identity from work.json; InvalidWorkError when what this swapper needs is missing or damaged."""
    embedding = _vector(data, "source_embedding", normalise=True)
    converted = _vector(data, "source_converted", normalise=False) if facts.source == "crossface" else None
    image = _image(data, facts) if facts.source == "image" else None
    return SwapIdentity(embedding, converted, image)


def _vector(data: dict[str, Any], key: str, *, normalise: bool) -> FloatArray:
    try:
        vector = np.asarray(data[key], np.float32).reshape(-1)
    except (KeyError, ValueError, TypeError):
        raise InvalidWorkError(f"work.json identity has no usable {key}: prepare the work again") from None
    if vector.size != EMBEDDING_SIZE or not np.all(np.isfinite(vector)):
        raise InvalidWorkError(f"work.json identity has no usable {key}: prepare the work again")
    return normalize_embedding(vector) if normalise else vector


def _image(data: dict[str, Any], facts: SwapFacts) -> Frame:
    try:
        png = np.frombuffer(base64.b64decode(data["source_image_png_base64"]), np.uint8)
    except (KeyError, ValueError, TypeError):
        raise InvalidWorkError("work.json identity has no source face image: prepare the work again") from None
    image = cv2.imdecode(png, cv2.IMREAD_COLOR) if png.size else None
    if image is None or image.shape[:2] != (facts.source_size, facts.source_size):
        raise InvalidWorkError("work.json identity holds no readable source face image of the swapper's size")
    return np.ascontiguousarray(image[:, :, ::-1])


# --- the emap (inswapper) ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=2)
def load_emap(model_path: str) -> FloatArray:
    """The 512x512 matrix that maps an ArcFace embedding into the swapper's latent: the model's last initializer."""
    from onnx import numpy_helper  # onnx takes about 1 s to import: only the inswapper's emap needs it

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
        from onnx import TensorProto  # see load_emap

        tensor = TensorProto()
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
    """inswapper's ``source`` input (1, 512): the L2-normalised embedding projected by the emap."""
    return (normalize_embedding(source_embedding)[None, :] @ emap).astype(np.float32)


# --- tensors ----------------------------------------------------------------------------------------------------------


def source_tensor(identity: SwapIdentity, facts: SwapFacts, model_path: str | None) -> FloatArray:
    """The swapper's ``source`` input for one face: (1, 512), or (1, 3, S, S) RGB in 0..1 for image sources."""
    if facts.source == "emap":
        assert model_path is not None
        return source_latent(identity.embedding, load_emap(model_path))
    if facts.source == "embedding":
        return normalize_embedding(identity.embedding)[None, :]
    if facts.source == "crossface":
        assert identity.converted is not None
        return np.asarray(identity.converted, np.float32).reshape(1, EMBEDDING_SIZE)
    assert identity.image is not None
    return np.ascontiguousarray(identity.image.transpose(2, 0, 1)[None], np.float32) / 255.0


def target_share(weight: float) -> float:
    """The share of the target face's embedding ``face_swapper_weight`` mixes into the source input: 0 at 0.5."""
    return TARGET_SHARE_AT_NO_WEIGHT * (1.0 - 2.0 * weight)


def target_embedding(frame: Frame, face: Face, facts: SwapFacts, store: ModelStore, options: Options) -> FloatArray:
    """The target face's ArcFace embedding as FaceFusion mixes it in: L2-normalised for every swapper whose source
    vector is (all but ghost), else raw."""
    embedding = raw_embedding(frame, face, store, options)
    return normalize_embedding(embedding) if facts.normalize_source else embedding


def balance_sources(source: FloatArray, targets: FloatArray, share: float) -> FloatArray:
    """One source input per target face: ``source * (1 - share) + target * share`` (FaceFusion's order: the source
    as the model takes it, emap-projected or converted, with the target's embedding as it is)."""
    return np.asarray(source * (1.0 - share) + targets * share, np.float32)


def pixel_boost_size(options: Options, facts: SwapFacts = INSWAPPER) -> int:
    """The crop size ``face_swapper_pixel_boost`` asks for; InvalidOptionError when the swapper does not offer it."""
    boost = int(options.face_swapper_pixel_boost.split("x")[0])
    if boost not in facts.pixel_boosts:
        allowed = ", ".join(f"{size}x{size}" for size in facts.pixel_boosts)
        raise InvalidOptionError(
            f"options.face_swapper_pixel_boost: {options.face_swapper_pixel_boost} does not fit "
            f"{options.face_swapper_model} ({facts.size}x{facts.size}); it offers {allowed}"
        )
    return boost


def implode_pixel_boost(crop: npt.NDArray[ScalarT], total: int) -> npt.NDArray[ScalarT]:
    """(S, S, 3) crop -> (total^2, S/total, S/total, 3): tile (a, b) holds every total-th pixel from offset (a, b)."""
    size = crop.shape[0] // total
    return crop.reshape(size, total, size, total, 3).transpose(1, 3, 0, 2, 4).reshape(total * total, size, size, 3)


def explode_pixel_boost(tiles: npt.NDArray[ScalarT], total: int) -> npt.NDArray[ScalarT]:
    """The inverse of ``implode_pixel_boost``."""
    size = tiles.shape[1]
    return tiles.reshape(total, total, size, size, 3).transpose(2, 0, 3, 1, 4).reshape(size * total, size * total, 3)


def prepare_target(tiles: npt.NDArray[np.generic], facts: SwapFacts = INSWAPPER) -> FloatArray:
    """(N, S, S, 3) RGB uint8 -> (N, 3, S, S) float32: / 255, then (x - mean) / std."""
    unit = np.ascontiguousarray(tiles.transpose(0, 3, 1, 2), np.float32) / 255.0
    if facts.mean == (0.0, 0.0, 0.0) and facts.std == (1.0, 1.0, 1.0):
        return unit
    mean, std = _channels(facts.mean), _channels(facts.std)
    return np.ascontiguousarray((unit - mean) / std, np.float32)


def normalize_output(output: npt.NDArray[np.floating], facts: SwapFacts = INSWAPPER) -> FloatArray:
    """(N, 3, S, S) model output -> (N, S, S, 3) float32 in 0..255 (de-normalised first where the swapper needs it)."""
    values = np.asarray(output, np.float32)
    if facts.denormalize_output:
        values = values * _channels(facts.std) + _channels(facts.mean)
    return np.asarray(np.clip(values.transpose(0, 2, 3, 1), 0.0, 1.0) * 255.0, np.float32)


def _channels(values: tuple[float, float, float]) -> FloatArray:
    return np.asarray(values, np.float32).reshape(1, 3, 1, 1)


# --- the swap ---------------------------------------------------------------------------------------------------------


def check_swapper(options: Options, store: ModelStore) -> None:
    """Load what ``options.face_swapper_model`` needs now (session, emap) and check its pixel boost: errors before any
    frame is decoded."""
    facts = swap_facts(options.face_swapper_model)
    pixel_boost_size(options, facts)
    store.session_for(options.face_swapper_model, options)
    if facts.source == "emap":
        load_emap(store.resolve(options.face_swapper_model))


def swap_faces(
    frames: Sequence[Frame],
    faces: Sequence[Sequence[Face]],
    source: SwapIdentity | npt.ArrayLike,
    options: Options,
    store: ModelStore,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    timings: MutableMapping[str, float] | None = None,
    pool: Executor | None = None,
) -> list[Frame]:
    """Swap the source identity into every given face of every frame; all crops go through the model in batches.

    ``faces[i]`` are the faces of ``frames[i]`` to swap; a frame with none comes back as the same array. With ``area``
    among ``face_mask_types`` every face needs its dense landmarks. ``source`` is the work's identity (an embedding
    alone will do for inswapper and hyperswap).
    ``timings``, when given, accumulates seconds spent aligning, in the model, and pasting back. With ``pool`` the
    frames are pasted back side by side (a frame's own faces in turn). A ``face_swapper_weight`` other than 0.5 mixes
    each target face's own embedding into its source input (not for image sources).
    """
    pending = swap_pending(frames, faces, source, options, store, batch_size=batch_size, timings=timings, pool=pool)
    clock = StageClock(timings)
    results = each(pool, as_rgb, pending)
    clock.lap("swap_paste")
    return results


def swap_pending(
    frames: Sequence[Frame],
    faces: Sequence[Sequence[Face]],
    source: SwapIdentity | npt.ArrayLike,
    options: Options,
    store: ModelStore,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    timings: MutableMapping[str, float] | None = None,
    pool: Executor | None = None,
) -> list[Frame | PendingFrame]:
    """``swap_faces`` up to the paste: each frame with faces comes back as a ``PendingFrame`` holding its swapped
    crops (masked and colour-corrected), for whoever holds the frame's final pixels to paste; one without as itself.
    """
    model_name = options.face_swapper_model
    facts = swap_facts(model_name)
    boost = pixel_boost_size(options, facts)
    session = store.session_for(model_name, options)
    model_path = store.resolve(model_name) if facts.source == "emap" else None
    source_input = source_tensor(as_identity(source), facts, model_path)
    clock = StageClock(timings)
    total = boost // facts.size
    crops: list[tuple[int, Frame, Matrix]] = []
    crop_faces: list[Face] = []
    tiles: list[Frame] = []
    for index, (frame, frame_faces) in enumerate(zip(frames, faces, strict=True)):
        for face in frame_faces:
            crop, matrix = warp_face(frame, face.landmark_5, facts.template, boost)
            crops.append((index, crop, matrix))
            crop_faces.append(face)
            tiles.append(implode_pixel_boost(crop, total))
    clock.lap("swap_align")
    if not crops:
        return list(frames)
    per_face = total * total
    share = target_share(options.face_swapper_weight) if facts.source != "image" else 0.0
    if share:
        numbered_faces = [(index, face) for (index, _, _), face in zip(crops, crop_faces, strict=True)]

        def embedded(pair: tuple[int, Face]) -> FloatArray:
            return target_embedding(frames[pair[0]], pair[1], facts, store, options)

        targets = each(pool, embedded, numbered_faces)
        source_input = np.repeat(balance_sources(source_input, np.stack(targets), share), per_face, axis=0)
    swapped_tiles = run_swapper(session, np.concatenate(tiles), source_input, batch_size, facts)
    clock.lap("swap_infer")
    blend = options.face_swapper_blend / 100.0
    numbered: dict[int, list[int]] = {}  # frame index -> its crops' numbers
    for number, (index, _, _) in enumerate(crops):
        numbered.setdefault(index, []).append(number)

    def face_paste(number: int) -> Paste:
        _, crop, matrix = crops[number]
        face = crop_faces[number]
        swapped = explode_pixel_boost(swapped_tiles[number * per_face : (number + 1) * per_face], total)
        mask = with_model_masks(create_crop_mask(boost, face, matrix, options), crop, swapped, store, options)
        if options.face_swapper_color_correction:
            swapped = match_color_statistics(swapped, crop, color_weight(boost, face, matrix, mask))
        return Paste(to_uint8(swapped), mask, matrix, blend)

    results: list[Frame | PendingFrame] = list(frames)
    pastes = each(pool, face_paste, list(range(len(crops))))
    for index, numbers in numbered.items():
        results[index] = PendingFrame(frames[index], tuple(pastes[number] for number in numbers))
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


def swap_face(
    frame: Frame, face: Face, source: SwapIdentity | npt.ArrayLike, options: Options, store: ModelStore
) -> Frame:
    """One face of one frame swapped and pasted back."""
    return swap_faces([frame], [[face]], source, options, store)[0]


def run_swapper(
    session: ort.InferenceSession,
    tiles: npt.NDArray[np.generic],
    source: FloatArray,
    batch_size: int,
    facts: SwapFacts = INSWAPPER,
) -> FloatArray:
    """All model-sized tiles through the swapper: in batches when the model's batch is dynamic, else one at a time.
    ``source``: one input for every tile, or one per tile."""
    step = max(1, batch_size) if batch_is_dynamic(session) else 1
    outputs = []
    for start in range(0, len(tiles), step):
        target = prepare_target(tiles[start : start + step], facts)
        sources = source[start : start + step] if len(source) > 1 else np.repeat(source, len(target), axis=0)
        (output, *_) = run_session(session, {"target": target, "source": sources})
        outputs.append(normalize_output(output, facts))
    return np.concatenate(outputs)
