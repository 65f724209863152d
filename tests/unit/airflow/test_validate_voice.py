"""``validate`` with a voice among the sources (lip sync): an audio file counts as a voice, not a face image; a chain
that reads a voice without one, or a face without an image, is refused naming ``source_uris``; the work's id follows
the voice's content."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from facefusion_provider import storage
from facefusion_provider.exceptions import InvalidOptionError
from facefusion_provider.operators.params import swap_params
from facefusion_provider.operators.validate import StorageChecks, validate_conf

CHECKS = StorageChecks(
    content_id=storage.content_id, check_writable=lambda uri: storage.check_writable(uri, field="output_uri")
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
    (tmp_path / "voice.wav").write_bytes(b"RIFF one voice")


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
    (tmp_path / "voice.wav").write_bytes(b"RIFF another voice")
    assert _validate(tmp_path, ["voice.wav"], ["lip_syncer"])["work_id"] != before
