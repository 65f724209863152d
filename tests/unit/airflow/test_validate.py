"""``validate`` and the trigger form's Params: flat fields (canonical) and nested ``options`` (accepted), every bad
input named by its field before any worker starts, nothing written at the output, and this run's lease taken."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk import ParamsDict
from airflow.sdk.exceptions import AirflowFailException, ParamValidationError
from recorded_stats import RecordedStats, Sent

from facefusion_provider import metric_names as names
from facefusion_provider import storage
from facefusion_provider.exceptions import InputMissingError, InvalidOptionError, StorageDeniedError
from facefusion_provider.operators.params import swap_params
from facefusion_provider.operators.validate import StorageChecks, ValidateSwapConfOperator, validate_conf
from facefusion_provider.options import Options
from facefusion_provider.work import leases
from facefusion_provider.work.ids import work_id
from facefusion_provider.work.layout import WorkLayout

CHECKS = StorageChecks(
    content_id=storage.content_id,
    check_writable=lambda uri: storage.check_writable(uri, field="output_uri"),
    read_range=storage.read_range,
)


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Any]:
    (tmp_path / "face.png").write_bytes(b"face")
    (tmp_path / "in.mp4").write_bytes(b"video")
    return {
        "source_uris": [str(tmp_path / "face.png")],
        "target_uri": (tmp_path / "in.mp4").as_uri(),
        "output_uri": str(tmp_path / "out" / "swapped.mp4"),
        "segment_size": 8,
        "face_swapper_blend": 70,
    }


def _params(conf: dict[str, Any]) -> dict[str, Any]:
    """What Airflow hands a task: every Param, the conf's values over their defaults (validated)."""
    params = ParamsDict(swap_params())
    params.update(conf)
    return dict(params.validate())


def _validate(conf: dict[str, Any], tmp_path: Path, **settings: Any) -> dict[str, Any]:
    return validate_conf(_params_lenient(conf), conf, work_root=str(tmp_path / "work"), checks=CHECKS, **settings)


def _params_lenient(conf: dict[str, Any]) -> dict[str, Any]:
    """Params without the schema check, so ``validate`` itself meets what a REST caller could send."""
    defaults = {name: param.value for name, param in swap_params().items()}
    return {**defaults, **conf}


def test_the_ticket_names_the_content_addressed_work(tmp_path: Path, inputs: dict[str, Any]) -> None:
    ticket = _validate(inputs, tmp_path)

    expected = work_id(
        storage.content_id((tmp_path / "in.mp4").as_uri()),
        [storage.content_id((tmp_path / "face.png").as_uri())],
        Options(segment_size=8, face_swapper_blend=70),
    )
    assert ticket["work_id"] == expected
    assert ticket["work_uri"] == (tmp_path / "work" / "work" / expected).as_uri()
    assert ticket["source_uris"] == [(tmp_path / "face.png").as_uri()]
    assert ticket["output_uri"] == (tmp_path / "out" / "swapped.mp4").as_uri()
    assert ticket["options"]["face_swapper_blend"] == 70
    assert ticket["prepare_args"][-4:] == ["--face-swapper-blend", "70", "--segment-size", "8"]
    assert ticket["merge_args"] == ["--target", inputs["target_uri"], "--output", ticket["output_uri"]]
    assert not (tmp_path / "out").exists()  # the write probe left nothing, not even the folder


def test_the_older_nested_options_give_the_same_work(tmp_path: Path, inputs: dict[str, Any]) -> None:
    flat = _validate(inputs, tmp_path)
    nested = {key: inputs[key] for key in ("source_uris", "target_uri", "output_uri")}
    nested["options"] = {"segment_size": 8, "face_swapper_blend": 70}
    assert _validate(nested, tmp_path)["work_id"] == flat["work_id"]
    with pytest.raises(InvalidOptionError, match=r"options.face_swapper_blend: given twice, as face_swapper_blend"):
        _validate({**inputs, "options": {"face_swapper_blend": 71}}, tmp_path)


def test_an_emptied_processors_field_means_no_processors(tmp_path: Path, inputs: dict[str, Any]) -> None:
    assert _params({**inputs, "processors": None})["processors"] is None  # what the form sends
    assert _validate({**inputs, "processors": None}, tmp_path)["options"]["processors"] == []
    # Any other emptied field (null) is the option's default, as the form shows no field as required.
    ticket = _validate({**inputs, "face_mask_types": None, "face_swapper_blend": None}, tmp_path)
    assert (ticket["options"]["face_mask_types"], ticket["options"]["face_swapper_blend"]) == (["box"], 85)


def test_only_pixel_options_change_the_work_not_the_output(tmp_path: Path, inputs: dict[str, Any]) -> None:
    first = _validate(inputs, tmp_path)["work_id"]
    assert _validate({**inputs, "execution_thread_count": 2}, tmp_path)["work_id"] == first
    assert _validate({**inputs, "output_uri": str(tmp_path / "elsewhere.mp4")}, tmp_path)["work_id"] == first
    assert _validate({**inputs, "face_swapper_blend": 71}, tmp_path)["work_id"] != first


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"face_swapper_blend": 150}, InvalidOptionError, "options.face_swapper_blend: Input should be less than"),
        ({"age_modifier_direction": 150}, InvalidOptionError, "options.age_modifier_direction: Input should be less"),
        ({"deep_swapper_model": "custom/../x"}, InvalidOptionError, "options.deep_swapper_model: Value error, not one"),
        ({"output_video_scale": 9}, InvalidOptionError, "options.output_video_scale: Input should be less than or"),
        ({"output_video_scale": 1.1}, InvalidOptionError, "options.output_video_scale: Input should be a multiple"),
        ({"output_video_fps": 0}, InvalidOptionError, "options.output_video_fps: Input should be greater than or"),
        ({"segmnt_size": 8}, InvalidOptionError, "segmnt_size: unknown conf key; did you mean 'segment_size'?"),
        ({"chunk_size": 8}, InvalidOptionError, "chunk_size: no longer an option: it is called segment_size now"),
        (
            {"options": {"chunk_size": 8}},
            InvalidOptionError,
            "options.chunk_size: no longer an option: it is called segment_size",
        ),
        ({"options": {"chunk_sise": 8}}, InvalidOptionError, "options.chunk_sise: unknown option"),
        ({"trim_frame_start": 9, "trim_frame_end": 3}, InvalidOptionError, "trim_frame_end (3) must be greater"),
        (
            {"face_selector_age_start": 40, "face_selector_age_end": 30},
            InvalidOptionError,
            "face_selector_age_end (30) must be greater than face_selector_age_start (40)",
        ),
        ({"face_selector_race": "martian"}, InvalidOptionError, "options.face_selector_race: Input should be 'white'"),
        ({"options": "fast"}, InvalidOptionError, "options: expected an object"),
        ({"source_uris": "face.png"}, InvalidOptionError, "source_uris: expected a non-empty list"),
        ({"source_uris": []}, InvalidOptionError, "source_uris: expected a non-empty list"),
        ({"source_uris": ["ftp://host/face.png"]}, InvalidOptionError, "source_uris[0]: scheme 'ftp'"),
        ({"source_uris": ["face.png"]}, InvalidOptionError, "source_uris[0]: 'face.png' is a relative path"),
        ({"target_uri": "/nowhere/in.mp4"}, InputMissingError, "target_uri: file:///nowhere/in.mp4: no such file"),
        ({"target_uri": "s3://bucket/"}, InvalidOptionError, "target_uri: 's3://bucket/' names a bucket, not a file"),
        ({"target_uri": "s3://bucket"}, InvalidOptionError, "target_uri: 's3://bucket' names a bucket, not a file"),
        ({"target_uri": 7}, InvalidOptionError, "target_uri: expected a path or URI"),
        ({"output_uri": None}, InvalidOptionError, "output_uri: expected a path or URI"),
        ({"output_uri": "out.mp4"}, InvalidOptionError, "output_uri: 'out.mp4' is a relative path"),
        ({"output_uri": "file:///data/out/../../x.mp4"}, InvalidOptionError, "output_uri: '..' is not allowed"),
        ({"output_uri": "/data/out.avi"}, InvalidOptionError, "output_uri: file:///data/out.avi has extension '.avi'"),
        ({"output_uri": "/proc/x.mp4"}, StorageDeniedError, "output_uri: cannot write file:///proc/x.mp4"),
        ({"output_video_encoder": "libvpx-vp9", "output_uri": "/x/o.mov"}, InvalidOptionError, "cannot be stored"),
        (
            {
                "processors": ["background_remover"],
                "background_remover_fill_color": [0, 255, 0, 0],
                "output_uri": "/data/out.mp4",
            },
            InvalidOptionError,
            "output_uri: file:///data/out.mp4 is a .mp4 file, which cannot carry a transparent background "
            "(background_remover_fill_color alpha 0); use a .mov output with output_video_encoder prores_ks (ProRes "
            "4444) or a .webm with libvpx-vp9 (VP9 with alpha), or an opaque fill (alpha 255)",
        ),
        (
            {
                "processors": ["background_remover"],
                "background_remover_fill_color": [0, 255, 0, 0],
                "output_uri": "/data/out.mov",
            },
            InvalidOptionError,
            "options.output_video_encoder: libx264 cannot carry a transparent background",
        ),
    ],
)
def test_bad_conf_names_the_field_and_writes_nothing(
    tmp_path: Path, inputs: dict[str, Any], change: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as raised:
        _validate({**inputs, **change}, tmp_path)
    assert message in str(raised.value), str(raised.value)
    assert "\n" not in str(raised.value)  # one line
    assert not (tmp_path / "out").exists() and not (tmp_path / "work").exists()


def test_the_allow_lists_confine_inputs_and_outputs(tmp_path: Path, inputs: dict[str, Any]) -> None:
    allowed = {"allowed_inputs": ((tmp_path.as_uri() + "/"),), "allowed_outputs": ((tmp_path / "out").as_uri() + "/",)}
    _validate(inputs, tmp_path, **allowed)
    with pytest.raises(InvalidOptionError, match=r"output_uri: .* is outside the allowed output locations"):
        _validate({**inputs, "output_uri": str(tmp_path / "elsewhere.mp4")}, tmp_path, **allowed)
    with pytest.raises(InvalidOptionError, match=r"target_uri: .* is outside the allowed input locations"):
        _validate({**inputs, "target_uri": "s3://other/in.mp4"}, tmp_path, **allowed)


def _context(conf: dict[str, Any], run_id: str = "manual__1") -> Any:
    dag_run = SimpleNamespace(dag_id="facefusion_swap", run_id=run_id, conf=conf)
    ti = SimpleNamespace(try_number=1, xcom_push=lambda **kwargs: None)
    return {"params": _params_lenient(conf), "dag_run": dag_run, "ti": ti}


def test_the_operator_fails_bad_conf_without_retries(tmp_path: Path, inputs: dict[str, Any]) -> None:
    operator = ValidateSwapConfOperator(task_id="validate", work_root=str(tmp_path / "work"))
    assert operator.retries == 0
    with pytest.raises(AirflowFailException, match=r"^Face swapper blend \(face_swapper_blend\): .* 0 \(got -1\)$"):
        operator.execute(_context({**inputs, "face_swapper_blend": -1}))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"face_swapper_blend": -1}, "options.face_swapper_blend"),
        ({"options": {"face_swapper_blend": 101}}, "options.face_swapper_blend"),
        ({"trim_frame_start": 9, "trim_frame_end": 3}, "options"),
        ({"options": {"chunk_sise": 8}}, "options"),
        ({"chunk_sise": 8}, "other"),  # a misspelt key: a fixed label, whatever people type
        ({"source_uris": ["ftp://host/face.png"]}, "source_uris"),
        ({"target_uri": "/nowhere/in.mp4"}, "target_uri"),
        ({"output_uri": "/proc/x.mp4"}, "output_uri"),
    ],
)
def test_the_operator_counts_bad_input_by_its_conf_field(
    tmp_path: Path, inputs: dict[str, Any], stats_sent: RecordedStats, change: dict[str, Any], field: str
) -> None:
    operator = ValidateSwapConfOperator(task_id="validate", work_root=str(tmp_path / "work"))

    with pytest.raises(AirflowFailException):
        operator.execute(_context({**inputs, **change}))

    bad_input = names.stat_name(names.BAD_INPUT)
    assert stats_sent.sent == [Sent("incr", bad_input, 1, {"dag_id": "facefusion_swap", "field": field})]


def test_good_input_counts_nothing(tmp_path: Path, inputs: dict[str, Any], stats_sent: RecordedStats) -> None:
    ValidateSwapConfOperator(task_id="validate", work_root=str(tmp_path / "work")).execute(_context(inputs))
    assert stats_sent.sent == []


def test_the_operator_takes_this_runs_lease_on_the_work_under_the_configured_root(
    tmp_path: Path, inputs: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__FACEFUSION__WORK_ROOT", (tmp_path / "configured").as_uri())
    operator = ValidateSwapConfOperator(task_id="validate")

    ticket = operator.execute(_context(inputs, "manual__1"))
    again = operator.execute(_context({**inputs, "output_uri": str(tmp_path / "second.mp4")}, "manual__2"))

    assert ticket["work_uri"].startswith((tmp_path / "configured" / "work").as_uri())
    assert again["work_uri"] == ticket["work_uri"] and again["run_key"] != ticket["run_key"]
    held = {lease.key: lease.lease for lease in leases.run_leases(WorkLayout(ticket["work_uri"]))}
    assert set(held) == {ticket["run_key"], again["run_key"]}
    assert {lease.output_uri for lease in held.values()} == {ticket["output_uri"], again["output_uri"]}
    assert all(lease.holder.kind == "airflow" and lease.state == "active" for lease in held.values())
    assert ticket["run_lease"] == held[ticket["run_key"]].model_dump(mode="json")  # each task holds it again
    assert operator.multiple_outputs  # each ticket key is its own XCom for the downstream tasks


def test_params_accept_a_good_conf_in_either_shape(inputs: dict[str, Any]) -> None:
    validated = _params(inputs)
    assert validated["face_swapper_blend"] == 70 and validated["face_selector_mode"] == "one"
    nested = {key: inputs[key] for key in ("source_uris", "target_uri", "output_uri")}
    assert _params({**nested, "options": {"face_swapper_blend": 70}})["options"] == {"face_swapper_blend": 70}


@pytest.mark.parametrize(
    ("conf_change", "field"),
    [
        ({"face_swapper_blend": 150}, "face_swapper_blend"),
        ({"age_modifier_direction": 150}, "age_modifier_direction"),
        ({"face_selector_mode": "everyone"}, "face_selector_mode"),
        ({"face_selector_race": "martian"}, "face_selector_race"),
        ({"face_selector_age_end": 101}, "face_selector_age_end"),
        ({"segment_size": -5}, "segment_size"),
        ({"output_video_scale": 9}, "output_video_scale"),
        ({"source_uris": [""]}, "source_uris"),  # an empty list is refused at the trigger (conf_limits)
        ({"target_uri": 5}, "target_uri"),
    ],
)
def test_params_reject_bad_values_naming_the_field_first(
    inputs: dict[str, Any], conf_change: dict[str, Any], field: str
) -> None:
    with pytest.raises(ParamValidationError) as raised:
        _params({**inputs, **conf_change})
    assert str(raised.value).startswith(f"Invalid input for param {field}:")
    assert len(str(raised.value)) < 1000  # the field's own schema at most, never the whole options model


def test_every_option_is_its_own_typed_field() -> None:
    params = swap_params()
    assert set(Options.model_fields) <= set(params)
    blend = params["face_swapper_blend"]
    # Not starred (it has a default); the bounds where the API checks them and the form does not clamp to them.
    assert (blend.schema["type"], blend.schema["allOf"], blend.value) == (
        ["integer", "null"],
        [{"minimum": 0, "maximum": 100}],
        85,
    )
    assert "minimum" not in blend.schema and "maximum" not in blend.schema
    assert blend.schema["title"] == "Face swapper blend"
    assert blend.schema["description_md"].endswith(
        "  \nface_swapper_blend · from 0 to 100; anything outside is refused"
    )
    assert "section" not in blend.schema  # an everyday option: in the open first section
    mode = params["face_selector_mode"]
    assert mode.schema["enum"] == ["one", "many", "reference"]
    encoder = params["output_video_encoder"]
    assert encoder.schema["section"] == "Output video" and "libx264" in encoder.schema["enum"]
    segment = params["segment_size"]
    assert segment.schema["type"] == ["integer", "null"] and segment.value is None
    assert params["processors"].schema["examples"] == [
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
    ]  # a multi-select
    direction = params["age_modifier_direction"]
    assert direction.schema["allOf"] == [{"minimum": -100, "maximum": 100}] and direction.value == 0
    assert params["processors"].schema["type"] == ["array", "null"]  # none selected is a choice, not "required"
    assert params["face_mask_types"].schema["type"] == ["array", "null"]  # emptied: the default (box)
    assert params["face_enhancer_model"].schema["enum"] == [
        "gfpgan_1.4",
        "gpen_bfr_256",
        "gpen_bfr_512",
        "codeformer",
        "restoreformer_plus_plus",
        "gfpgan_1.2",
        "gfpgan_1.3",
        "gpen_bfr_1024",
        "gpen_bfr_2048",
    ]
    assert all(param.schema.get("title") for param in params.values())


RACES = ["white", "black", "latino", "asian", "indian", "arabic"]


def test_the_trigger_form_offers_the_selection_filters_with_an_empty_choice(inputs: dict[str, Any]) -> None:
    """Gender and race: their values and empty (any face: a choice that may stay empty has empty among its values),
    empty by default, each value and empty accepted; the age bounds whole numbers 0 to 100 or empty."""
    params = swap_params()
    for name, values in (("face_selector_gender", ["female", "male"]), ("face_selector_race", RACES)):
        field = params[name]
        assert (field.schema["enum"], field.schema["type"], field.value) == ([*values, None], ["string", "null"], None)
        assert field.schema["section"] == "Faces: detection and selection"
        assert field.schema["description_md"].endswith(f"{name} · choices: {', '.join(values)}")
        for value in [*values, None]:
            assert _params({**inputs, name: value})[name] == value
    with pytest.raises(ParamValidationError, match="face_selector_race"):
        _params({**inputs, "face_selector_race": "auto"})  # FaceFusion's auto (from the source face) is not offered
    for name in ("face_selector_age_start", "face_selector_age_end"):
        field = params[name]
        assert (field.schema["type"], field.schema["allOf"], field.value) == (
            ["integer", "null"],
            [{"minimum": 0, "maximum": 100}],
            None,
        )


def test_the_trigger_form_proposes_the_deep_swapper_models_and_takes_a_custom_name(inputs: dict[str, Any]) -> None:
    """FaceFusion's 157 named models proposed, free text allowed (no enum) for a user's own custom/<name>."""
    field = swap_params()["deep_swapper_model"]
    proposed = field.schema["examples"]
    assert (field.schema["type"], field.value) == (["string", "null"], "iperov/elon_musk_224")
    assert len(proposed) == len(set(proposed)) == 157 and "enum" not in field.schema
    assert {"iperov/elon_musk_224", "druuzil/henry_cavill_448"} <= set(proposed)
    assert all(re.fullmatch(r"[a-z_]+/[a-z0-9_]+_[0-9]{3}", name) for name in proposed)  # maker/name_size
    assert _params({**inputs, "deep_swapper_model": "custom/my_face"})["deep_swapper_model"] == "custom/my_face"
