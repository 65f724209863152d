"""``validate`` with a voice among the sources (lip sync): an audio file counts as a voice, not a face image; a chain
that reads a voice without one, or a face without an image, is refused naming ``source_uris``; a voice whose first
bytes are not the format its name says is refused naming ``source_uris[i]`` and what they are; the work's id follows
the voice's content."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException
from voices import write_voice

from facefusion_provider import storage
from facefusion_provider.exceptions import InvalidMediaError, InvalidOptionError
from facefusion_provider.operators.params import swap_params
from facefusion_provider.operators.validate import StorageChecks, ValidateSwapConfOperator, validate_conf

CHECKS = StorageChecks(
    content_id=storage.content_id,
    check_writable=lambda uri: storage.check_writable(uri, field="output_uri"),
    read_range=storage.read_range,
)


def _validate(tmp_path: Path, sources: list[str], processors: list[str]) -> dict[str, Any]:
    conf = {
        "source_uris": [str(tmp_path / name) for name in sources],
        "target_uri": str(tmp_path / "in.mp4"),
        "output_uri": str(tmp_path / "out" / "spoken.mp4"),
        "processors": processors,
    }
    defaults = {name: param.value for name, param in swap_params().items()}
    return validate_conf({**defaults, **conf}, conf, work_root=str(tmp_path / "work"), checks=CHECKS)


@pytest.fixture(autouse=True)
def _inputs(tmp_path: Path) -> None:
    (tmp_path / "face.png").write_bytes(b"face")
    (tmp_path / "in.mp4").write_bytes(b"video")
    write_voice(tmp_path / "voice.wav", 0.2, 0.3)


def test_a_voice_and_a_face_give_a_ticket_with_both_sources(tmp_path: Path) -> None:
    ticket = _validate(tmp_path, ["face.png", "voice.wav"], ["face_swapper", "lip_syncer"])
    assert ticket["source_uris"] == [(tmp_path / "face.png").as_uri(), (tmp_path / "voice.wav").as_uri()]
    assert _validate(tmp_path, ["voice.wav"], ["lip_syncer"])["work_id"] != ticket["work_id"]


def test_lip_sync_without_a_voice_is_refused_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError, match=r"^source_uris: lip_syncer needs a voice among the sources: .*\.wav"):
        _validate(tmp_path, ["face.png"], ["lip_syncer"])


def test_a_voice_is_no_face_for_the_swapper(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError, match=r"^source_uris: face_swapper needs at least one source image"):
        _validate(tmp_path, ["voice.wav"], ["face_swapper", "lip_syncer"])


def test_the_work_follows_the_voices_content(tmp_path: Path) -> None:
    before = _validate(tmp_path, ["voice.wav"], ["lip_syncer"])["work_id"]
    write_voice(tmp_path / "voice.wav", 0.3, 0.3)
    assert _validate(tmp_path, ["voice.wav"], ["lip_syncer"])["work_id"] != before


def test_a_voice_that_is_not_its_format_is_refused_naming_its_field(tmp_path: Path) -> None:
    write_voice(tmp_path / "voice.ogg", 0.2, 0.3, codec="libopus")
    (tmp_path / "voice.mp3").write_bytes((tmp_path / "voice.ogg").read_bytes())
    (tmp_path / "note.m4a").write_text("Happy birthday, Ann!")
    assert _validate(tmp_path, ["face.png", "voice.ogg"], ["face_swapper", "lip_syncer"])["work_id"]
    with pytest.raises(InvalidMediaError, match=r"^source_uris\[1\]: .*/voice\.mp3 is not the MP3 file .*an Ogg file;"):
        _validate(tmp_path, ["face.png", "voice.mp3"], ["face_swapper", "lip_syncer"])
    with pytest.raises(
        InvalidMediaError, match=r"^source_uris\[2\]: .*/note\.m4a .* holds text \('Happy birthday, Ann!'\)"
    ):
        _validate(tmp_path, ["face.png", "voice.wav", "note.m4a"], ["face_swapper", "lip_syncer"])


def test_the_operator_fails_the_task_in_one_line_naming_the_voice(tmp_path: Path) -> None:
    (tmp_path / "voice.flac").write_bytes(b"")
    conf = {
        "source_uris": [str(tmp_path / "face.png"), str(tmp_path / "voice.flac")],
        "target_uri": str(tmp_path / "in.mp4"),
        "output_uri": str(tmp_path / "out" / "spoken.mp4"),
        "processors": ["face_swapper", "lip_syncer"],
    }
    defaults = {name: param.value for name, param in swap_params().items()}
    dag_run = SimpleNamespace(dag_id="facefusion_swap", run_id="manual__1", conf=conf)
    context: Any = {
        "params": {**defaults, **conf},
        "dag_run": dag_run,
        "ti": SimpleNamespace(try_number=1, xcom_push=lambda **kwargs: None),
    }
    operator = ValidateSwapConfOperator(task_id="validate", work_root=str(tmp_path / "work"))
    with pytest.raises(AirflowFailException) as failed:
        operator.execute(context)
    assert str(failed.value).startswith("Source faces (source_uris)[1]: ")
    assert str(failed.value).endswith(".flac voice begins with fLaC and a STREAMINFO block")
    assert "holds an empty file" in str(failed.value) and "\n" not in str(failed.value)
    assert not (tmp_path / "work").exists()
