"""The face tracker over synthetic detections: missed detections filled, identities kept through a crossing, the
followed face in ``one`` mode, and a tracker seeded from a pre-roll."""

from __future__ import annotations

import numpy as np

from facefusion_provider.engine.face import Face, FaceClasses
from facefusion_provider.engine.face_filter import FaceSelection
from facefusion_provider.engine.recognize import face_distance
from facefusion_provider.engine.track import (
    FILL_FRAMES,
    FILLED_KEY,
    TRACK_KEY,
    TrackerSettings,
    TrackerState,
    box_iou,
    seeded,
    step,
)

SCORE = 0.3
RNG = np.random.default_rng(3)
ALICE = RNG.normal(size=512).astype(np.float32)
BOB = RNG.normal(size=512).astype(np.float32)


def face(x: float, y: float, size: float = 100.0, embedding: np.ndarray | None = None) -> Face:
    """A face whose box has its top-left corner at (x, y) and five points inside it."""
    points = np.array([[0.35, 0.4], [0.65, 0.4], [0.5, 0.55], [0.4, 0.72], [0.6, 0.72]], np.float32) * size
    return Face(
        bbox=np.array([x, y, x + size, y + size], np.float32),
        score=0.9,
        landmark_5=points + np.array([x, y], np.float32),
        embedding=embedding,
    )


def run(frames: list[list[Face]], settings: TrackerSettings) -> list[list[Face]]:
    state = TrackerState()
    selected = []
    for detections in frames:
        state, chosen = step(state, detections, settings)
        selected.append(chosen)
    return selected


def test_box_iou_of_equal_disjoint_and_half_overlapping_boxes() -> None:
    box = np.array([0, 0, 10, 10], np.float32)
    assert box_iou(box, box) == 1.0
    assert box_iou(box, box + 20) == 0.0
    assert abs(box_iou(box, np.array([5, 0, 15, 10], np.float32)) - 1 / 3) < 1e-6


def test_a_face_missed_for_two_frames_is_carried_on_where_it_moves() -> None:
    frames = [[face(10.0 * n, 50.0)] for n in range(8)]
    frames[4] = frames[5] = []  # the detector missed it
    selected = run(frames, TrackerSettings(SCORE, "many"))
    assert all(len(faces) == 1 for faces in selected), "every frame has its face, detected or carried"
    for n in (4, 5):
        (carried,) = selected[n]
        assert carried.extras[FILLED_KEY] is True
        assert np.allclose(carried.bbox, frames[0][0].bbox + np.array([10.0 * n, 0, 10.0 * n, 0])), (
            "moved on at its velocity"
        )
        assert np.allclose(carried.landmark_5, frames[0][0].landmark_5 + np.array([10.0 * n, 0]))
    assert {faces[0].extras[TRACK_KEY] for faces in selected} == {0}, "one track throughout"


def test_a_track_ends_after_a_few_missed_frames_and_a_one_frame_face_is_never_carried() -> None:
    frames = [[face(0, 0)], [face(0, 0)], *([[]] * (FILL_FRAMES + 2)), [face(300, 300)], [], []]
    selected = run(frames, TrackerSettings(SCORE, "many"))
    assert [len(faces) for faces in selected[2 : 2 + FILL_FRAMES]] == [1] * FILL_FRAMES
    assert selected[2 + FILL_FRAMES] == [], "carried for FILL_FRAMES frames, no longer"
    assert selected[-2:] == [[], []], "a face seen once is not carried"


def crossing(frames: int = 21) -> tuple[list[list[Face]], list[np.ndarray]]:
    """Alice walks right, Bob walks left, 20 px lower, their boxes overlapping in the middle frames. In the three
    frames where they overlap most, the recognizer is fooled: each face's embedding looks like the other person."""
    detections, alice_boxes = [], []
    middle = frames // 2
    for n in range(frames):
        fooled = abs(n - middle) <= 1
        alice = face(20.0 * n, 100.0, embedding=BOB if fooled else ALICE + RNG.normal(0, 0.2, 512))
        bob = face(20.0 * (frames - 1 - n), 120.0, embedding=ALICE if fooled else BOB + RNG.normal(0, 0.2, 512))
        detections.append([bob, alice] if n % 2 else [alice, bob])  # the detector's order means nothing
        alice_boxes.append(alice.bbox)
    return detections, alice_boxes


def test_two_people_crossing_keep_their_identities_in_reference_mode() -> None:
    detections, alice_boxes = crossing()
    settings = TrackerSettings(SCORE, "reference", reference=ALICE, distance=0.6)
    selected = run(detections, settings)
    for n, (faces, alice_box) in enumerate(zip(selected, alice_boxes, strict=True)):
        assert len(faces) == 1, f"frame {n}: only Alice is swapped"
        assert np.array_equal(faces[0].bbox, alice_box), f"frame {n}: the swapped face is Alice's"
    per_frame = [[f for f in faces if face_distance(f.embedding, ALICE) <= 0.6] for faces in detections]
    assert any(
        not np.array_equal(faces[0].bbox, box) for faces, box in zip(per_frame, alice_boxes, strict=True) if faces
    ), "without the tracker the fooled frames swap Bob: the test shows what tracking adds"


def test_one_mode_follows_its_face_while_another_grows_larger() -> None:
    frames = [[face(0, 0, 100), face(300, 0, 60 + 10 * n)] for n in range(8)]  # the second passes 100 px at n = 5
    selected = run(frames, TrackerSettings(SCORE, "one"))
    assert all(faces[0].bbox[0] == 0 for faces in selected), "the first face stays the one swapped"
    lost = [[face(0, 0, 100)], [face(0, 0, 100)], *([[face(300, 0, 120)]] * (FILL_FRAMES + 2))]
    chosen = run(lost, TrackerSettings(SCORE, "one"))
    assert chosen[2][0].extras[FILLED_KEY] is True, "a missed frame keeps the followed face"
    assert chosen[-1][0].bbox[0] == 300, "once its track ends, the largest face is followed"


def test_one_mode_follows_the_first_face_in_the_order_that_the_filters_keep() -> None:
    woman, man = FaceClasses("female", "white", range(20, 29)), FaceClasses("male", "white", range(20, 29))
    frames = [
        [
            face(0, 200, 80).with_(classes=woman),
            face(200, 100, 90).with_(classes=man),
            face(400, 0, 120).with_(classes=man),
        ]
        for _ in range(4)
    ]
    by_order = run(frames, TrackerSettings(SCORE, "one", selection=FaceSelection("left-right")))
    assert [faces[0].bbox[0] for faces in by_order] == [0] * 4
    men_from_the_left = FaceSelection("left-right", gender="male")
    assert [faces[0].bbox[0] for faces in run(frames, TrackerSettings(SCORE, "one", selection=men_from_the_left))] == [
        200
    ] * 4
    many = run(frames, TrackerSettings(SCORE, "many", selection=FaceSelection("bottom-top", gender="male")))
    assert [[chosen.bbox[1] for chosen in faces] for faces in many] == [[100, 0]] * 4
    filled = run([*frames[:2], []], TrackerSettings(SCORE, "many", selection=FaceSelection(gender="female")))
    assert filled[2][0].extras[FILLED_KEY] and filled[2][0].classes == woman, "a carried face keeps its classes"


def test_a_tracker_seeded_from_the_pre_roll_continues_as_the_whole_run_does() -> None:
    frames = [[face(10.0 * n, 50.0)] for n in range(12)]
    frames[8] = frames[9] = []  # missed right at the start of the second segment
    settings = TrackerSettings(SCORE, "many")
    whole = run(frames, settings)
    state = seeded(frames[0:8], settings)  # the second segment's pre-roll
    for n in range(8, 12):
        state, faces = step(state, frames[n], settings)
        assert [f.bbox.tolist() for f in faces] == [f.bbox.tolist() for f in whole[n]], f"frame {n}"
    cold = run(frames[8:], settings)
    assert cold[0] == [], "without a pre-roll the missed frames would not be filled"
