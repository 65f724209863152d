from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk import DAG, ParamsDict
from airflow.sdk.exceptions import AirflowFailException, ParamValidationError

from facefusion_provider import storage
from facefusion_provider.exceptions import InputMissingError, InvalidOptionError
from facefusion_provider.operators.validate import ValidateSwapConfOperator, swap_params, validate_conf
from facefusion_provider.options import Options


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Any]:
    (tmp_path / "face.png").write_bytes(b"face")
    (tmp_path / "in.mp4").write_bytes(b"video")
    return {
        "source_uris": [str(tmp_path / "face.png")],
        "target_uri": (tmp_path / "in.mp4").as_uri(),
        "output_uri": str(tmp_path / "out" / "swapped.mp4"),
        "options": {"chunk_size": 8, "face_swapper_blend": 70},
    }


def test_ticket_names_the_content_addressed_job(tmp_path: Path, inputs: dict[str, Any]) -> None:
    ticket = validate_conf(**inputs, work_root=str(tmp_path / "work"))

    options = Options(chunk_size=8, face_swapper_blend=70)
    expected_id = storage.compute_job_id(
        storage.content_id((tmp_path / "in.mp4").as_uri()),
        [storage.content_id((tmp_path / "face.png").as_uri())],
        options,
    )
    assert ticket["job_id"] == expected_id
    assert ticket["job_uri"] == (tmp_path / "work" / "jobs" / expected_id).as_uri()
    assert ticket["source_uris"] == [(tmp_path / "face.png").as_uri()]
    assert ticket["output_uri"] == (tmp_path / "out" / "swapped.mp4").as_uri()
    assert ticket["options"]["face_swapper_blend"] == 70
    assert ticket["prepare_args"][-4:] == ["--face-swapper-blend", "70", "--chunk-size", "8"]


def test_the_chunk_wave_setting_reaches_prepare_but_not_the_job_id(tmp_path: Path, inputs: dict[str, Any]) -> None:
    plain = validate_conf(**inputs, work_root=str(tmp_path))
    waved = validate_conf(**inputs, work_root=str(tmp_path), chunk_wave=8)
    assert "--chunk-wave" not in plain["prepare_args"]
    flag = waved["prepare_args"].index("--chunk-wave")
    assert waved["prepare_args"][flag + 1] == "8"
    assert waved["job_id"] == plain["job_id"]  # an existing job.json keeps the plan it was made with


def test_only_pixel_options_change_the_job(tmp_path: Path, inputs: dict[str, Any]) -> None:
    first = validate_conf(**inputs, work_root=str(tmp_path))
    inputs["options"] = {**inputs["options"], "execution_thread_count": 2}
    assert validate_conf(**inputs, work_root=str(tmp_path))["job_id"] == first["job_id"]
    inputs["options"] = {**inputs["options"], "face_swapper_blend": 71}
    assert validate_conf(**inputs, work_root=str(tmp_path))["job_id"] != first["job_id"]


@pytest.mark.parametrize(
    ("change", "error", "field"),
    [
        ({"options": {"face_swapper_blend": 150}}, InvalidOptionError, "options.face_swapper_blend"),
        ({"options": {"chunk_sise": 8}}, InvalidOptionError, "options.chunk_sise: unknown option"),
        ({"options": {"trim_frame_start": 9, "trim_frame_end": 3}}, InvalidOptionError, "trim_frame_end (3) must be"),
        ({"options": "fast"}, InvalidOptionError, "options: expected an object"),
        ({"source_uris": "face.png"}, InvalidOptionError, "source_uris: expected a non-empty list"),
        ({"source_uris": []}, InvalidOptionError, "source_uris: expected a non-empty list"),
        ({"source_uris": ["ftp://host/face.png"]}, InvalidOptionError, "source_uris[0]: scheme 'ftp'"),
        ({"target_uri": "/nowhere/in.mp4"}, InputMissingError, "target_uri: file:///nowhere/in.mp4: no such file"),
        ({"target_uri": 7}, InvalidOptionError, "target_uri: expected a path or URI"),
        ({"output_uri": None}, InvalidOptionError, "output_uri: expected a path or URI"),
    ],
)
def test_bad_conf_names_the_field(
    tmp_path: Path, inputs: dict[str, Any], change: dict[str, Any], error: type[Exception], field: str
) -> None:
    with pytest.raises(error) as raised:
        validate_conf(**{**inputs, **change}, work_root=str(tmp_path))
    assert field in str(raised.value)


def test_output_may_not_overwrite_an_input(tmp_path: Path, inputs: dict[str, Any]) -> None:
    with pytest.raises(InvalidOptionError, match=r"output_uri: .* would overwrite an input"):
        validate_conf(**{**inputs, "output_uri": inputs["target_uri"]}, work_root=str(tmp_path))


def test_operator_fails_bad_conf_without_retries(tmp_path: Path, inputs: dict[str, Any]) -> None:
    operator = ValidateSwapConfOperator(task_id="validate", **{**inputs, "options": {"face_swapper_blend": -1}})

    with pytest.raises(AirflowFailException, match=r"options\.face_swapper_blend"):
        operator.execute({"ti": SimpleNamespace(try_number=1)})  # type: ignore[arg-type]


def test_operator_uses_the_work_root_setting(
    tmp_path: Path, inputs: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__FACEFUSION__WORK_ROOT", (tmp_path / "configured").as_uri())
    operator = ValidateSwapConfOperator(task_id="validate", **inputs)

    ticket = operator.execute({})  # type: ignore[arg-type]

    assert ticket["job_uri"].startswith((tmp_path / "configured" / "jobs").as_uri())
    assert operator.multiple_outputs  # each ticket key is its own XCom for the downstream tasks


def test_templated_conf_renders_as_native_lists_and_dicts(inputs: dict[str, Any]) -> None:
    with DAG("native", schedule=None, render_template_as_native_obj=True):
        operator = ValidateSwapConfOperator(
            task_id="validate",
            source_uris="{{ params.source_uris }}",
            target_uri="{{ params.target_uri }}",
            output_uri="{{ params.output_uri }}",
            options="{{ params.options }}",
        )
    operator.render_template_fields({"params": inputs})

    assert operator.source_uris == inputs["source_uris"]
    assert operator.options == {"chunk_size": 8, "face_swapper_blend": 70}


def _params_with(conf: dict[str, Any]) -> dict[str, Any]:
    params = ParamsDict(swap_params())
    params.update(conf)
    return params.validate()


def test_params_accept_a_good_conf_and_fill_in_option_defaults(inputs: dict[str, Any]) -> None:
    validated = _params_with({key: value for key, value in inputs.items() if key != "options"})

    assert validated["options"] == Options().model_dump(mode="json")
    assert _params_with(inputs)["options"] == inputs["options"]


@pytest.mark.parametrize(
    ("conf_change", "field"),
    [
        ({"options": {"face_swapper_blend": 150}}, "face_swapper_blend"),
        ({"options": {"face_selector_mode": "everyone"}}, "face_selector_mode"),
        ({"options": {"not_an_option": 1}}, "not_an_option"),
        ({"source_uris": []}, "source_uris"),
        ({"target_uri": 5}, "target_uri"),
    ],
)
def test_params_reject_what_the_options_model_rejects(
    inputs: dict[str, Any], conf_change: dict[str, Any], field: str
) -> None:
    with pytest.raises(ParamValidationError) as raised:
        _params_with({**inputs, **conf_change})
    assert field in str(raised.value)


def test_params_describe_the_form() -> None:
    options = swap_params()["options"].schema

    blend = options["properties"]["face_swapper_blend"]
    assert (blend["type"], blend["minimum"], blend["maximum"], blend["default"]) == ("integer", 0, 100, 85)
    assert blend["description"]
    assert options["properties"]["face_selector_mode"]["enum"] == ["one", "many", "reference"]
    assert options["additionalProperties"] is False
    assert set(options["properties"]) == set(Options.model_fields)
