"""FaceFusion's face selector on a clip with two people (the real offline detector, a stand-in face classifier that
answers by the face crop's colour): each face_selector_order picks the face FaceFusion's rule picks, the gender, race
and age filters keep exactly the faces they should, reference_face_position chooses the reference person, the
classifier runs only where a filter is set, and a missing or mismatched classifier file is refused naming it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pair import LEFT, RIGHT, pair_frame, who
from standins import recognizer_standin
from standins_selection import COOL, WARM, classifier_standin

from facefusion_provider.engine.face import Face, pack_faces, unpack_faces
from facefusion_provider.engine.processors.chain import FrameProcessor, build_frame_processor, prepare_identity
from facefusion_provider.exceptions import InvalidOptionError, ModelIncompatibleError, ModelMissingError
from facefusion_provider.options import Options, parse_options

# The chain that reads faces and needs no model of its own: the face debugger drawing boxes.
BOXES: dict[str, Any] = {"processors": ["face_debugger"], "face_debugger_items": ["bounding-box"]}
# Where FaceFusion's rules put the two people: the left one is lower and smaller than the right one.
BY_POSITION_AND_SIZE = {
    "left-right": LEFT,
    "right-left": RIGHT,
    "top-bottom": RIGHT,
    "bottom-top": LEFT,
    "small-large": LEFT,
    "large-small": RIGHT,
}


def _processor(models_dir: Path, **options: Any) -> FrameProcessor:
    chosen = Options(**{**BOXES, **options})
    return build_frame_processor(chosen, prepare_identity([], None, chosen, str(models_dir)), str(models_dir))


def _selected(models_dir: Path, frames: int = 1, **options: Any) -> list[list[Face]]:
    return _processor(models_dir, **options).analyse_batch([pair_frame(shift) for shift in range(frames)])


def test_both_people_are_found_and_the_order_is_not_the_order_found(models_dir: Path) -> None:
    (found,) = _selected(models_dir, face_selector_mode="many", face_selector_order="left-right")
    (reverse,) = _selected(models_dir, face_selector_mode="many", face_selector_order="right-left")
    assert [who(face) for face in found] == [LEFT, RIGHT]
    assert [who(face) for face in reverse] == [RIGHT, LEFT]


@pytest.mark.parametrize("order", sorted(BY_POSITION_AND_SIZE))
def test_each_order_by_position_or_size_picks_the_face_facefusion_picks(order: str, models_dir: Path) -> None:
    selected = _selected(models_dir, frames=3, face_selector_mode="one", face_selector_order=order)
    assert [[who(face) for face in faces] for faces in selected] == [[BY_POSITION_AND_SIZE[order]]] * 3


@pytest.mark.parametrize(("order", "surest"), [("best-worst", True), ("worst-best", False)])
def test_the_score_orders_pick_the_face_the_detector_is_surest_or_least_sure_of(
    order: str, surest: bool, models_dir: Path
) -> None:
    (both,) = _selected(models_dir, face_selector_mode="many", face_selector_order="left-right")
    assert both[0].score != both[1].score
    expected = (max if surest else min)(both, key=lambda face: face.score)
    ((chosen,),) = _selected(models_dir, face_selector_mode="one", face_selector_order=order)
    assert who(chosen) == who(expected)
    assert chosen.score == expected.score


FILTERS: list[tuple[dict[str, Any], list[str]]] = [
    ({"face_selector_gender": "female"}, [LEFT]),
    ({"face_selector_gender": "male"}, [RIGHT]),
    ({"face_selector_race": "black"}, [RIGHT]),
    ({"face_selector_race": "asian"}, []),
    ({"face_selector_age_start": 20, "face_selector_age_end": 30}, [LEFT]),  # the 20-29 class overlaps 20 to 29
    ({"face_selector_age_start": 29}, [RIGHT]),  # FaceFusion's 20-29 class ends before 29
    ({"face_selector_age_end": 20}, []),  # 0 to 19: neither 20-29 nor 50-59
    ({"face_selector_age_start": 50, "face_selector_age_end": 51}, [RIGHT]),
    ({"face_selector_gender": "female", "face_selector_race": "black"}, []),
]


@pytest.mark.parametrize(("filters", "kept"), FILTERS)
def test_the_filters_keep_exactly_the_faces_the_classifier_places_in_them(
    filters: dict[str, Any], kept: list[str], models_dir: Path
) -> None:
    classifier_standin(models_dir)
    processor = _processor(models_dir, face_selector_mode="many", face_selector_order="left-right", **filters)
    (faces,) = processor.analyse_batch([pair_frame()])
    assert [who(face) for face in faces] == kept
    assert [face.classes for face in faces] == [WARM if who(face) == LEFT else COOL for face in faces]
    assert processor.stats.classified == 2  # each face found, once


def test_one_mode_takes_the_first_face_in_order_that_the_filter_keeps(models_dir: Path) -> None:
    classifier_standin(models_dir)
    selected = _selected(
        models_dir, frames=2, face_selector_mode="one", face_selector_order="left-right", face_selector_gender="male"
    )
    assert [[who(face) for face in faces] for faces in selected] == [[RIGHT], [RIGHT]]


def test_without_a_filter_no_face_is_classified_and_no_classifier_is_needed(models_dir: Path) -> None:
    processor = _processor(models_dir, face_selector_mode="many")  # no fairface.onnx in models_dir
    (faces,) = processor.analyse_batch([pair_frame()])
    assert len(faces) == 2 and all(face.classes is None for face in faces)
    assert processor.stats.classified == 0


def test_classes_are_stored_with_the_analysis_as_they_were(models_dir: Path) -> None:
    classifier_standin(models_dir)
    analysed = _selected(models_dir, frames=2, face_selector_mode="many", face_selector_race="white")
    assert [[face.classes for face in faces] for faces in unpack_faces(pack_faces(analysed))] == [[WARM], [WARM]]


@pytest.mark.parametrize(("position", "person"), [(0, LEFT), (1, RIGHT), (5, RIGHT)])
def test_reference_face_position_chooses_the_reference_person_in_the_order(
    position: int, person: str, models_dir: Path
) -> None:
    recognizer_standin(models_dir)
    options = Options(
        **BOXES,
        face_selector_mode="reference",
        face_selector_order="left-right",
        reference_face_position=position,
        reference_face_distance=0.05,
    )
    identity = prepare_identity([], pair_frame(), options, str(models_dir))
    processor = build_frame_processor(options, identity, str(models_dir))
    selected = processor.analyse_batch([pair_frame(shift) for shift in range(3)])
    assert [[who(face) for face in faces] for faces in selected] == [[person]] * 3


def test_in_reference_mode_a_filter_chooses_among_the_reference_frames_faces(models_dir: Path) -> None:
    recognizer_standin(models_dir)
    classifier_standin(models_dir)
    options = Options(
        **BOXES, face_selector_mode="reference", face_selector_gender="male", reference_face_distance=0.05
    )
    identity = prepare_identity([], pair_frame(), options, str(models_dir))
    processor = build_frame_processor(options, identity, str(models_dir))
    (faces,) = processor.analyse_batch([pair_frame(1)])
    assert [who(face) for face in faces] == [RIGHT]
    assert processor.stats.classified == 0  # the target's faces are matched to the reference, not classified


def test_a_missing_classifier_is_refused_when_the_work_is_prepared(models_dir: Path) -> None:
    with pytest.raises(ModelMissingError, match=r"face_selector_gender.*fairface\.onnx"):
        prepare_identity([], None, Options(**BOXES, face_selector_gender="female"), str(models_dir))


def test_a_classifier_with_other_inputs_is_refused_naming_the_expected_ones(models_dir: Path) -> None:
    classifier_standin(models_dir, input_name="image")
    with pytest.raises(ModelIncompatibleError, match=r"fairface\.onnx.*expected inputs input \?x3x224x224"):
        prepare_identity([], None, Options(**BOXES, face_selector_race="white"), str(models_dir))


def test_a_classifier_with_other_outputs_is_refused_naming_the_expected_ones(models_dir: Path) -> None:
    classifier_standin(models_dir, outputs=2)
    with pytest.raises(ModelIncompatibleError, match=r"three outputs.*race_id, gender_id, age_id"):
        prepare_identity([], None, Options(**BOXES, face_selector_age_start=30), str(models_dir))


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"face_selector_age_start": 40, "face_selector_age_end": 30}, "face_selector_age_end"),
        ({"face_selector_age_start": 30, "face_selector_age_end": 30}, "face_selector_age_end"),
        ({"face_selector_race": "martian"}, "face_selector_race"),
        ({"face_selector_gender": "auto"}, "face_selector_gender"),
        ({"face_selector_order": "middle-out"}, "face_selector_order"),
        ({"face_selector_age_end": 101}, "face_selector_age_end"),
        ({"reference_face_position": -1}, "reference_face_position"),
    ],
)
def test_bad_selector_options_are_refused_naming_the_field(values: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidOptionError, match=field):
        parse_options(values)
