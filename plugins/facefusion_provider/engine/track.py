"""FaceFusion's face tracker (``face_tracker_score``): faces linked across neighbouring frames by box overlap, one
identity per track, and a face the detector misses for a few frames carried on by its track.

Pure functions over per-frame detections. FaceFusion interpolates a gap between the detections before and after it
within a window of frames; this tracker is causal (a frame's faces depend on that frame and the ones before it only),
so the streaming pipeline needs no look-ahead: a missed face is carried forward at its track's last velocity. A
segment's tracker starts from the ``PRE_ROLL_FRAMES`` frames before the segment (worker/analysis.py), so a segment's
faces do not depend on where the span that works it began.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from facefusion_provider.engine.face import Face, FloatArray
from facefusion_provider.engine.face_filter import FaceSelection, sort_and_filter

PRE_ROLL_FRAMES = 8  # frames before a segment whose detections seed its tracker
FILL_FRAMES = 3  # frames a track carries its face through missed detections before it ends
CONFIRMED_AFTER = 2  # detections a track needs before a miss is filled (a one-frame false face is never carried)
TRACK_KEY = "track"  # Face.extras: the number of the face's track
FILLED_KEY = "filled"  # Face.extras: True when the face was carried by its track, not detected


@dataclass(frozen=True)
class TrackerSettings:
    score: float  # boxes overlapping by more than this (intersection over union) are one face
    mode: str  # face_selector_mode: one, many or reference
    reference: FloatArray | None = None  # reference mode: the person to swap
    distance: float = 0.6  # reference mode: reference_face_distance
    selection: FaceSelection = field(
        default_factory=FaceSelection
    )  # one and many modes: face_selector_order and the filters


@dataclass(frozen=True)
class Track:
    number: int
    face: Face  # its last detected face
    velocity: FloatArray  # (2,) pixels per frame its box moved between its last two detections
    missed: int = 0  # frames since that detection
    seen: int = 1  # detections so far
    identity: FloatArray | None = None  # the sum of its detections' L2-normalised embeddings

    def predicted(self, ahead: int) -> Face:
        """Where its face is ``ahead`` frames after its last detection, moving on at the same velocity."""
        return moved(self.face, self.velocity * ahead)


@dataclass(frozen=True)
class TrackerState:
    tracks: tuple[Track, ...] = ()
    next_number: int = 0
    followed: int | None = None  # the track ``one`` mode swaps while it lives


def box_iou(a: FloatArray, b: FloatArray) -> float:
    """Intersection over union of two (x1, y1, x2, y2) boxes."""
    width = min(float(a[2]), float(b[2])) - max(float(a[0]), float(b[0]))
    height = min(float(a[3]), float(b[3])) - max(float(a[1]), float(b[1]))
    intersection = max(0.0, width) * max(0.0, height)
    union = _area(a) + _area(b) - intersection
    return intersection / union if union > 0 else 0.0


def _area(box: FloatArray) -> float:
    return max(0.0, float(box[2] - box[0])) * max(0.0, float(box[3] - box[1]))


def centre(face: Face) -> FloatArray:
    return np.asarray([(face.bbox[0] + face.bbox[2]) / 2, (face.bbox[1] + face.bbox[3]) / 2], np.float32)


def moved(face: Face, offset: FloatArray) -> Face:
    """``face`` shifted by ``offset`` pixels; its dense landmarks are dropped (the landmarker places them again)."""
    shift = np.asarray(offset, np.float32)
    return face.with_(
        bbox=np.asarray(face.bbox + np.tile(shift, 2), np.float32),
        landmark_5=np.asarray(face.landmark_5 + shift, np.float32),
        landmark_dense=None,
        extras={},
    )


def labelled(face: Face, number: int, *, filled: bool) -> Face:
    return face.with_(extras={**face.extras, TRACK_KEY: number, FILLED_KEY: filled})


def _identity(identity: FloatArray | None, embedding: FloatArray | None) -> FloatArray | None:
    if embedding is None:
        return identity
    norm = float(np.linalg.norm(embedding))
    unit = np.asarray(embedding, np.float32) / norm if norm > 0 else np.asarray(embedding, np.float32)
    return unit if identity is None else np.asarray(identity + unit, np.float32)


def link(predictions: Sequence[Face], detections: Sequence[Face], score: float) -> dict[int, int]:
    """Track index -> detection index: the most overlapping pairs first, each overlapping by more than ``score``."""
    pairs = sorted(
        (
            (box_iou(prediction.bbox, detection.bbox), track, found)
            for track, prediction in enumerate(predictions)
            for found, detection in enumerate(detections)
        ),
        key=lambda pair: (-pair[0], pair[1], pair[2]),
    )
    links: dict[int, int] = {}
    taken: set[int] = set()
    for overlap, track, found in pairs:
        if overlap <= score:
            break
        if track not in links and found not in taken:
            links[track] = found
            taken.add(found)
    return links


def advance(state: TrackerState, detections: Sequence[Face], score: float) -> tuple[TrackerState, list[Face]]:
    """The next frame: its detections linked to the tracks, new tracks for the others, and the faces of confirmed
    tracks missed here carried on (for at most ``FILL_FRAMES`` frames). Every face returned names its track."""
    links = link([track.predicted(track.missed + 1) for track in state.tracks], detections, score)
    tracks: list[Track] = []
    faces: list[Face] = []
    for index, track in enumerate(state.tracks):
        if index in links:
            face = detections[links[index]]
            velocity = (centre(face) - centre(track.face)) / (track.missed + 1)
            tracks.append(
                replace(
                    track,
                    face=face,
                    velocity=np.asarray(velocity, np.float32),
                    missed=0,
                    seen=track.seen + 1,
                    identity=_identity(track.identity, face.embedding),
                )
            )
            faces.append(labelled(face, track.number, filled=False))
        elif track.missed < FILL_FRAMES:
            tracks.append(replace(track, missed=track.missed + 1))
            if track.seen >= CONFIRMED_AFTER:
                faces.append(labelled(track.predicted(track.missed + 1), track.number, filled=True))
    number = state.next_number
    linked = set(links.values())
    for index, face in enumerate(detections):
        if index not in linked:
            tracks.append(Track(number, face, np.zeros(2, np.float32), identity=_identity(None, face.embedding)))
            faces.append(labelled(face, number, filled=False))
            number += 1
    return TrackerState(tuple(tracks), number, state.followed), faces


def track_distance(track: Track, reference: FloatArray) -> float:
    """1 - cosine similarity of the track's mean identity and the reference (2 when the track has none)."""
    if track.identity is None:
        return 2.0
    norm = float(np.linalg.norm(track.identity)) * float(np.linalg.norm(reference))
    return 1.0 - float(np.dot(track.identity, reference)) / norm if norm > 0 else 2.0


def select_tracked(
    state: TrackerState, faces: Sequence[Face], settings: TrackerSettings
) -> tuple[TrackerState, list[Face]]:
    """The faces to process, decided per track: all the filters keep, in ``face_selector_order`` (many); the track of
    the first detected face in that order that the filters keep, followed while it lives (one); the tracks whose
    identity over all their detections is close to the reference (reference)."""
    if settings.mode == "many":
        return state, sort_and_filter(faces, settings.selection)
    if settings.mode == "one":
        followed = [face for face in faces if face.extras.get(TRACK_KEY) == state.followed]
        if followed:
            return state, followed[:1]
        detected = [face for face in faces if not face.extras.get(FILLED_KEY)]
        candidates = sort_and_filter(detected, settings.selection)
        if not candidates:
            return replace(state, followed=None), []
        return replace(state, followed=_track_number(candidates[0])), candidates[:1]
    if settings.reference is None:
        raise ValueError("face_selector_mode=reference needs the reference face's embedding")
    reference = settings.reference
    close = {track.number for track in state.tracks if track_distance(track, reference) <= settings.distance}
    return state, [face for face in faces if face.extras.get(TRACK_KEY) in close]


def _track_number(face: Face) -> int:
    number = face.extras.get(TRACK_KEY)
    if not isinstance(number, int):
        raise ValueError("a tracked face names its track")
    return number


def step(state: TrackerState, detections: Sequence[Face], settings: TrackerSettings) -> tuple[TrackerState, list[Face]]:
    """One frame: its detections tracked, then the faces to process selected."""
    state, faces = advance(state, detections, settings.score)
    return select_tracked(state, faces, settings)


def seeded(frames: Sequence[Sequence[Face]], settings: TrackerSettings) -> TrackerState:
    """The tracker after the detections of ``frames`` (a segment's pre-roll), their selections discarded."""
    state = TrackerState()
    for detections in frames:
        state, _ = step(state, detections, settings)
    return state
