"""Confinement by real paths: a symbolic link under an allowed prefix does not reach outside it, for inputs (refused at
the check both validate and the worker make) and for outputs (refused at the check, and at the worker's writes when a
link is swapped in after it); and every URI is bounded before anything echoes it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from facefusion_provider import contract, storage
from facefusion_provider.exceptions import InvalidOptionError
from facefusion_provider.work.run_inputs import CLI_FIELDS, CONF_FIELDS, check_output_outside_work, run_uris


@pytest.fixture
def allowed(tmp_path: Path) -> tuple[Path, Path, Path]:
    """An allowed input folder, an allowed output folder, and a private folder beside them."""
    inputs, outputs, private = tmp_path / "in", tmp_path / "out", tmp_path / "private"
    for folder in (inputs, outputs, private):
        folder.mkdir()
    (inputs / "face.jpg").write_bytes(b"face")
    (inputs / "talk.mp4").write_bytes(b"talk")
    (private / "secret.mp4").write_bytes(b"private")
    return inputs, outputs, private


def _prefixes(folder: Path) -> tuple[str, ...]:
    return storage.parse_prefixes(str(folder), field="allowed")


def _check(allowed: tuple[Path, Path, Path], *, source: Path, target: Path, output: Path | str) -> None:
    inputs, outputs, _ = allowed
    run_uris(
        [str(source)],
        str(target),
        str(output),
        fields=CONF_FIELDS,
        relative=False,
        allowed_inputs=_prefixes(inputs),
        allowed_outputs=_prefixes(outputs),
    )


def test_an_input_symlink_to_a_private_file_is_refused_naming_the_field(allowed: tuple[Path, Path, Path]) -> None:
    inputs, outputs, private = allowed
    (inputs / "innocent.mp4").symlink_to(private / "secret.mp4")

    with pytest.raises(
        InvalidOptionError, match=r"^target_uri: .*innocent\.mp4 resolves, through a symbolic link, outside"
    ):
        _check(allowed, source=inputs / "face.jpg", target=inputs / "innocent.mp4", output=outputs / "a.mp4")
    (inputs / "private-folder").symlink_to(private)
    with pytest.raises(InvalidOptionError, match=r"^source_uris\[0\]: .*outside the allowed input locations"):
        _check(
            allowed, source=inputs / "private-folder/secret.mp4", target=inputs / "talk.mp4", output=outputs / "a.mp4"
        )


def test_a_symlink_inside_the_allowed_inputs_and_a_linked_prefix_still_work(
    allowed: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    inputs, outputs, _ = allowed
    (inputs / "alias.mp4").symlink_to(inputs / "talk.mp4")
    _check(allowed, source=inputs / "face.jpg", target=inputs / "alias.mp4", output=outputs / "a.mp4")
    # The administrator's prefix may itself be a link: it is compared by its real path too.
    (tmp_path / "in-link").symlink_to(inputs)
    run_uris(
        [str(inputs / "face.jpg")],
        str(inputs / "talk.mp4"),
        None,
        fields=CLI_FIELDS,
        relative=False,
        allowed_inputs=_prefixes(tmp_path / "in-link"),
    )


def test_a_symlinked_output_folder_or_file_is_refused_naming_the_field(allowed: tuple[Path, Path, Path]) -> None:
    inputs, outputs, private = allowed
    (outputs / "escape").symlink_to(private)
    with pytest.raises(InvalidOptionError, match=r"^output_uri: .*outside the allowed output locations"):
        _check(allowed, source=inputs / "face.jpg", target=inputs / "talk.mp4", output=outputs / "escape/a.mp4")
    # A link that stays inside is refused too: it could be pointed elsewhere between the check and the write.
    (outputs / "real").mkdir()
    (outputs / "inside").symlink_to(outputs / "real")
    with pytest.raises(InvalidOptionError, match=r"^output_uri: .*symbolic link .*inside.*refused in output folders"):
        _check(allowed, source=inputs / "face.jpg", target=inputs / "talk.mp4", output=outputs / "inside/a.mp4")
    (outputs / "a.mp4").symlink_to(outputs / "real/a.mp4")
    with pytest.raises(InvalidOptionError, match=r"^output_uri: .*symbolic link"):
        _check(allowed, source=inputs / "face.jpg", target=inputs / "talk.mp4", output=outputs / "a.mp4")
    _check(allowed, source=inputs / "face.jpg", target=inputs / "talk.mp4", output=outputs / "new/folder/a.mp4")


def test_the_worker_never_writes_through_a_link_swapped_in_after_the_check(
    allowed: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, outputs, private = allowed
    monkeypatch.setenv(contract.ALLOWED_OUTPUT_PREFIXES_VARIABLE, outputs.as_uri() + "/")
    (outputs / "day1").symlink_to(private)  # swapped in after validate accepted out/day1/clip.mp4

    for name in ("clip.preview.jpg", ".clip.mp4.facefusion.json"):
        with pytest.raises(InvalidOptionError, match=r"^output: .*day1 is a symbolic link"):
            storage.write_bytes_atomic((outputs / "day1" / name).as_uri(), b"written")
    temp = outputs / "day1/.clip.mp4.partial"
    temp.write_bytes(b"video")  # the muxer wrote its partial file by path, through the link
    with pytest.raises(InvalidOptionError, match="symbolic link"):
        storage.replace_confined(str(temp), str(outputs / "day1/clip.mp4"))
    assert sorted(os.listdir(private)) == [".clip.mp4.partial", "secret.mp4"]  # nothing published there

    storage.write_bytes_atomic((outputs / "day2/clip.preview.jpg").as_uri(), b"preview")
    assert (outputs / "day2/clip.preview.jpg").read_bytes() == b"preview"
    (outputs / "day2/clip.mp4").symlink_to(private / "secret.mp4")
    storage.write_bytes_atomic((outputs / "day2/clip.mp4").as_uri(), b"output")  # replaces the link itself
    assert (private / "secret.mp4").read_bytes() == b"private"
    assert not (outputs / "day2/clip.mp4").is_symlink()


def test_lengths_are_bounded_before_anything_echoes_the_value(allowed: tuple[Path, Path, Path]) -> None:
    inputs, outputs, _ = allowed
    huge = "s3://bucket/" + "a" * 5_000_000 + ".mp4"
    with pytest.raises(InvalidOptionError) as caught:
        _check(allowed, source=inputs / "face.jpg", target=inputs / "talk.mp4", output=huge)
    assert str(caught.value).startswith(f"output_uri: the path or URI is {len(huge)} bytes long")
    assert len(str(caught.value)) < 200
    with pytest.raises(InvalidOptionError, match=r"^target_uri: the S3 key is 1025 bytes long"):
        storage.normalize_uri("s3://bucket/" + "k/" * 512 + "x", field="target_uri")
    with pytest.raises(
        InvalidOptionError, match=r"^output_uri: the name 'aaa.*\.\.\. is 300 bytes long; .* at most 255"
    ):
        _check(allowed, source=inputs / "face.jpg", target=inputs / "talk.mp4", output=outputs / ("a" * 300))
    with pytest.raises(InvalidOptionError, match=r"^output_uri: the file name is 244 bytes long; at most 200"):
        _check(allowed, source=inputs / "face.jpg", target=inputs / "talk.mp4", output=outputs / ("b" * 240 + ".mp4"))


def test_sources_are_capped_and_the_output_stays_out_of_the_work_root(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError, match=r"^source_uris: 1000 source images; at most 16"):
        run_uris(["s3://in/face.jpg"] * 1000, "s3://in/a.mp4", "s3://out/a.mp4", fields=CONF_FIELDS, relative=False)
    with pytest.raises(InvalidOptionError, match=r"^output_uri: .* is inside the work root"):
        check_output_outside_work("s3://work/root/out.mp4", "s3://work/root", "output_uri")
    (tmp_path / "work").mkdir()
    (tmp_path / "work-alias").symlink_to(tmp_path / "work")
    with pytest.raises(InvalidOptionError, match=r"^output_uri: .* is inside the work root"):
        check_output_outside_work(
            (tmp_path / "work-alias/w/out.mp4").as_uri(), (tmp_path / "work").as_uri(), "output_uri"
        )
    check_output_outside_work("s3://work/rooted.mp4", "s3://work/root", "output_uri")
