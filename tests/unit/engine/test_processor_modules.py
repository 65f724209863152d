"""Processors are modules behind one interface: each registered one declares its options, models, analysis needs and
frame size truthfully, and the chain runs whatever is registered, in the user's order, after the shared analysis."""

from __future__ import annotations

from typing import Any, get_args

import numpy as np
import pytest
from fake_processors import Darkener, Inverter, register

from facefusion_provider.engine.face import Frame
from facefusion_provider.engine.models import MODELS
from facefusion_provider.engine.processors import chain
from facefusion_provider.engine.processors.base import Processor
from facefusion_provider.engine.processors.chain import build_frame_processor, prepare_identity
from facefusion_provider.engine.processors.needs import NO_ANALYSIS, AnalysisNeeds
from facefusion_provider.engine.processors.registry import PROCESSORS, analysis_needs, follows_faces
from facefusion_provider.options import PROCESSOR_OPTIONS, Options, options_json_schema
from facefusion_provider.options import Processor as ProcessorName


def test_the_registry_holds_exactly_the_processors_the_options_accept() -> None:
    assert list(PROCESSORS) == list(get_args(ProcessorName)) == list(PROCESSOR_OPTIONS)


@pytest.mark.parametrize("name", list(PROCESSORS))
def test_a_processor_owns_its_options_which_reach_the_form_and_the_flags(name: str) -> None:
    processor = PROCESSORS[name]
    assert isinstance(processor, Processor) and processor.name == name
    assert processor.options is PROCESSOR_OPTIONS[name]
    own = list(processor.options.model_fields)
    assert own and all(field.startswith(f"{name}_") for field in own)  # FaceFusion's names: face_enhancer_blend
    others = {field for other in PROCESSORS.values() if other is not processor for field in other.options.model_fields}
    assert not set(own) & others
    schema = options_json_schema()["properties"]
    for field in own:
        assert field in Options.model_fields and schema[field]["description"] == Options.model_fields[field].description


@pytest.mark.parametrize("name", [name for name in PROCESSORS if f"{name}_model" in Options.model_fields])
def test_every_model_a_processor_can_choose_is_in_the_catalogue_with_its_frame_size(name: str) -> None:
    processor = PROCESSORS[name]
    model_field = f"{name}_model"
    for choice in get_args(Options.model_fields[model_field].annotation):
        options = Options(processors=[name], **{model_field: choice})
        assert processor.model(options) == choice
        names = processor.model_names(options)
        assert names and set(names) <= set(MODELS), names
        # classic is the face mesh's warp: no model of its own; live_portrait names a set of networks
        family = {spec.live_portrait.family for spec in map(MODELS.get, names) if spec and spec.live_portrait}
        assert choice in names or choice == "classic" or family == {choice}
        width, height = processor.output_size(options, 1920, 1080)
        assert width * 1080 == height * 1920 and width >= 1920  # the picture's shape kept, never smaller
        if processor.analysis(options).faces:  # the faces are found in the input frame: a face processor keeps its size
            assert (width, height) == (1920, 1080)


def test_the_swapper_names_the_helper_models_its_options_need() -> None:
    options = Options(face_swapper_model="simswap_256", face_mask_types=["box", "occlusion", "region", "area"])
    assert set(PROCESSORS["face_swapper"].model_names(options)) == {
        "simswap_256",
        "crossface_simswap",
        "arcface_w600k_r50",
        "xseg_1",
        "bisenet_resnet_34",
        "face_mesh_468",
    }


def test_the_debugger_chooses_no_model_but_names_the_ones_its_items_need() -> None:
    """FaceFusion's face debugger has no model option: fan_68_5 for 68/5, the mask models for the mask outline."""
    debugger = PROCESSORS["face_debugger"]
    assert debugger.model_names(Options(processors=["face_debugger"])) == ()
    options = Options(
        processors=["face_debugger"],
        face_debugger_items=["face-landmark-68/5", "face-mask"],
        face_mask_types=["box", "occlusion", "region"],
    )
    assert set(debugger.model_names(options)) == {"fan_68_5", "xseg_1", "bisenet_resnet_34"} <= set(MODELS)


def test_the_face_processors_read_faces_and_keep_the_frame_size() -> None:
    for name in ("face_swapper", "face_enhancer", "face_debugger"):
        options = Options(processors=[name])
        assert PROCESSORS[name].analysis(options).faces
        assert PROCESSORS[name].output_size(options, 1920, 1080) == (1920, 1080)


def test_the_analysis_runs_once_for_what_the_whole_chain_reads() -> None:
    assert analysis_needs(Options(processors=[])) == NO_ANALYSIS
    assert analysis_needs(Options(processors=["face_enhancer"])) == AnalysisNeeds(faces=True, landmarks="none")
    assert analysis_needs(Options(processors=["face_enhancer", "face_swapper"])) == AnalysisNeeds(True, "mesh")
    two_d = Options(face_swapper_model="inswapper_128", face_landmarker_model="2dfan4")
    assert analysis_needs(two_d) == AnalysisNeeds(True, "2dfan4")


def test_the_face_mesh_follows_faces_only_where_a_processor_reads_the_mesh() -> None:
    assert follows_faces(Options())  # classic places faces by their mesh: followed between detections
    assert not follows_faces(Options(face_detector_interval=1))
    assert not follows_faces(Options(face_tracker_score=0.3))  # the tracker links a detection in every frame
    assert not follows_faces(Options(face_swapper_model="inswapper_128"))  # no mesh to follow with
    assert follows_faces(Options(face_swapper_model="inswapper_128", face_mask_types=["box", "area"]))
    assert not follows_faces(Options(processors=["face_enhancer"]))  # the enhancer reads the detector's points


def _no_detection(*args: Any) -> None:
    raise AssertionError("no processor of the chain reads faces: the detector must not run")


def test_a_registered_processor_runs_in_the_chain_in_the_given_order(
    monkeypatch: pytest.MonkeyPatch, astronaut: Frame
) -> None:
    inverter, darkener = Inverter(), Darkener()
    register(monkeypatch, face_swapper=inverter, face_enhancer=darkener)
    monkeypatch.setattr(chain, "detect_faces", _no_detection)
    frames = [astronaut, np.ascontiguousarray(astronaut[100:300, 50:450])]
    original = [frame.copy() for frame in frames]
    invert_then_darken = Options(processors=["face_swapper", "face_enhancer"], face_selector_mode="many")
    identity = prepare_identity([], None, invert_then_darken, None)
    assert identity == {"version": 1, "sources": []}  # neither takes anything from the sources
    processor = build_frame_processor(invert_then_darken, identity, None)
    assert processor.model_label == "inverter+darkener"
    for result, frame in zip(processor.process_batch(frames), frames, strict=True):
        np.testing.assert_array_equal(result, (255 - frame) // 2)
    darken_then_invert = Options(processors=["face_enhancer", "face_swapper"])
    for result, frame in zip(
        build_frame_processor(darken_then_invert, {}, None).process_batch(frames), frames, strict=True
    ):
        np.testing.assert_array_equal(result, 255 - frame // 2)
    assert (inverter.calls, darkener.calls, inverter.loads, darkener.loads) == (2, 2, 2, 2)
    for frame, before in zip(frames, original, strict=True):
        np.testing.assert_array_equal(frame, before)  # the caller's frames are never written
