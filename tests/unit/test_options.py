"""The one options model: defaults, validation messages that name the option and what is allowed, CLI flags, schema."""

from __future__ import annotations

import argparse

import pytest

from facefusion_provider.exceptions import InvalidOptionError
from facefusion_provider.options import (
    Options,
    add_option_arguments,
    options_from_namespace,
    options_json_schema,
    options_to_argv,
    parse_options,
)
from facefusion_provider.work.ids import analysis_id, work_id


def _parse_cli(argv: list[str]) -> Options:
    parser = argparse.ArgumentParser()
    add_option_arguments(parser)
    return options_from_namespace(parser.parse_args(argv))


def test_defaults() -> None:
    options = Options()
    assert options.processors == ["face_swapper"]
    assert (options.output_video_encoder, options.output_video_preset, options.output_video_quality) == (
        "libx264",
        "veryfast",
        80,
    )
    assert options.segment_size is None and options.trim_frame_start is None and options.trim_frame_end is None


def test_cli_flags_use_facefusion_names() -> None:
    options = _parse_cli(
        [
            "--processors",
            "face_swapper",
            "face_enhancer",
            "--trim-frame-start",
            "10",
            "--trim-frame-end",
            "20",
            "--segment-size",
            "7",
            "--output-video-quality",
            "100",
            "--execution-providers",
            "cuda",
            "cpu",
            "--face-mask-padding",
            "1",
            "2",
            "3",
            "4",
        ]
    )
    assert options.processors == ["face_swapper", "face_enhancer"]
    assert (options.trim_frame_start, options.trim_frame_end, options.segment_size) == (10, 20, 7)
    assert options.output_video_quality == 100
    assert options.execution_providers == ["cuda", "cpu"]
    assert options.face_mask_padding == (1, 2, 3, 4)


def test_an_empty_processor_list_means_pass_through() -> None:
    assert _parse_cli(["--processors"]).processors == []
    assert _parse_cli([]).processors == ["face_swapper"]


def test_argv_round_trip() -> None:
    options = Options(
        processors=[], segment_size=64, trim_frame_end=99, output_video_preset="slow", face_mask_padding=(5, 0, 5, 0)
    )
    assert _parse_cli(options_to_argv(options)) == options
    assert options_to_argv(Options()) == []


@pytest.mark.parametrize(
    ("values", "names"),
    [
        ({"output_video_encoder": "mpeg1"}, ["options.output_video_encoder", "'libx264'", "'hevc_nvenc'", "'mpeg1'"]),
        ({"output_video_quality": 101}, ["options.output_video_quality", "less than or equal to 100"]),
        ({"processors": ["face_swapper", "face_swapper"]}, ["options.processors", "only once"]),
        ({"execution_providers": []}, ["options.execution_providers", "at least one"]),
        (
            {"trim_frame_start": 9, "trim_frame_end": 3},
            ["trim_frame_end (3) must be greater than trim_frame_start (9)"],
        ),
        ({"segment_size": 0}, ["options.segment_size", "greater than or equal to 1"]),
        ({"face_detector_interval": 0}, ["options.face_detector_interval", "greater than or equal to 1"]),
        ({"face_detector_interval": 61}, ["options.face_detector_interval", "less than or equal to 60"]),
        ({"face_detector_interval": "8"}, ["options.face_detector_interval", "valid integer"]),
        ({"colour": "blue"}, ["options.colour", "unknown option; allowed:", "segment_size", "trim_frame_end"]),
        ({"chunk_size": 64}, ["options.chunk_size", "it is called segment_size now; give segment_size instead"]),
    ],
)
def test_invalid_values_name_the_option_and_what_is_allowed(values: dict[str, object], names: list[str]) -> None:
    with pytest.raises(InvalidOptionError) as caught:
        parse_options(values)
    for name in names:
        assert name in str(caught.value)


def test_options_are_frozen() -> None:
    with pytest.raises(ValueError):
        Options().segment_size = 3  # type: ignore[misc]


def test_the_work_id_follows_only_pixel_options() -> None:
    base = work_id("t", ["s"], Options())
    assert work_id("t", ["s"], Options(execution_providers=["cuda"], execution_thread_count=16)) == base
    assert work_id("t", ["s"], Options(output_video_quality=81)) != base
    assert work_id("t", ["s"], Options(segment_size=64)) != base  # segment files are part of the work folder


def test_the_detector_interval_names_another_analysis() -> None:
    assert analysis_id("t", Options(face_detector_interval=4), "mesh") != analysis_id("t", Options(), "mesh")


def test_json_schema_drives_the_ui_form() -> None:
    schema = options_json_schema()
    assert schema["additionalProperties"] is False
    properties = schema["properties"]
    assert properties["output_video_quality"]["maximum"] == 100
    assert "libx264" in properties["output_video_encoder"]["enum"]
    assert properties["processors"]["items"]["enum"] == [
        "face_swapper",
        "face_enhancer",
        "frame_enhancer",
        "frame_colorizer",
        "background_remover",
        "face_debugger",
        "expression_restorer",
        "face_editor",
        "age_modifier",
        "deep_swapper",
        "lip_syncer",
    ]
    assert properties["background_remover_fill_color"]["prefixItems"][3]["maximum"] == 255
    assert all(prop.get("description") for prop in properties.values())


def test_color_correction_flag_and_model_agree() -> None:
    parser = argparse.ArgumentParser()
    add_option_arguments(parser)
    assert "--no-face-swapper-color-correction" in parser.format_help()
    assert Options().face_swapper_color_correction is True
    assert _parse_cli([]).face_swapper_color_correction is True
    assert _parse_cli(["--no-face-swapper-color-correction"]).face_swapper_color_correction is False
    assert _parse_cli(["--face-swapper-color-correction"]).face_swapper_color_correction is True
    off = Options(face_swapper_color_correction=False)
    assert options_to_argv(off) == ["--no-face-swapper-color-correction"]
    assert _parse_cli(options_to_argv(off)) == off
    assert work_id("t", ["s"], off) != work_id("t", ["s"], Options()), "it changes pixels, so it is part of the work id"
    prop = options_json_schema()["properties"]["face_swapper_color_correction"]
    assert (prop["type"], prop["default"]) == ("boolean", True)
