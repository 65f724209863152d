"""Strict conf: numbers are numbers (no "90", no true for 1), every number is bounded inside int64, and whatever the
value, the one line validate logs names the field first."""

from __future__ import annotations

from typing import Any

import pytest

from facefusion_provider.exceptions import InvalidOptionError
from facefusion_provider.options import Options, options_json_schema
from facefusion_provider.work.run_inputs import check_conf

INPUTS = {"source_uris": ["s3://in/face.jpg"], "target_uri": "s3://in/talk.mp4", "output_uri": "s3://out/talk.mp4"}
INT64_MAX = 2**63 - 1


def _refusal(**conf: Any) -> str:
    with pytest.raises(InvalidOptionError) as caught:
        check_conf({**INPUTS, **conf}, {**INPUTS, **conf})
    return str(caught.value)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("face_swapper_blend", "90"),
        ("face_swapper_blend", True),
        ("face_enhancer_blend", False),
        ("output_video_quality", "100"),
        ("execution_thread_count", 4.0),
        ("segment_size", "256"),
        ("face_detector_score", "0.5"),
        ("face_mask_blur", True),
        ("face_mask_padding", [True, 0, 0, 0]),
    ],
)
def test_no_string_to_number_or_bool_to_int_coercion(field: str, value: Any) -> None:
    message = _refusal(**{field: value})
    assert message.startswith(f"invalid options: options.{field}"), message
    assert "\n" not in message


@pytest.mark.parametrize("field", ["segment_size", "trim_frame_end", "trim_frame_start", "reference_frame_number"])
@pytest.mark.parametrize("value", [10**30, 10**20, INT64_MAX + 1, -(10**30)])
def test_a_huge_number_is_one_line_naming_its_field_flat_or_nested(field: str, value: int) -> None:
    for conf in ({field: value}, {"options": {field: value}}):
        message = _refusal(**conf)
        assert message.startswith(f"invalid options: options.{field}: "), message
        assert "\n" not in message and len(message) < 300


def test_every_number_in_the_schema_has_a_maximum_inside_int64() -> None:
    numbers = {}
    for name, prop in options_json_schema()["properties"].items():
        for item in [prop, *prop.get("anyOf", []), *prop.get("prefixItems", [])]:
            if item.get("type") in ("integer", "number"):
                numbers[name] = item
    assert numbers  # the form's numbers, each bounded both ways
    for name, item in numbers.items():
        assert "maximum" in item and item["maximum"] <= INT64_MAX, name
        assert "minimum" in item and item["minimum"] >= -INT64_MAX, name


def test_numbers_of_the_right_type_still_pass() -> None:
    options = check_conf({**INPUTS, "face_swapper_blend": 90, "face_detector_score": 1}, INPUTS).options
    assert options.face_swapper_blend == 90 and options.face_detector_score == 1.0
    assert Options.model_validate_json('{"face_mask_padding": [1, 2, 3, 4]}').face_mask_padding == (1, 2, 3, 4)
