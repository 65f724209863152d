"""The content factory with a voice per row: a manifest of (face, voice) rows over one standard video starts one
lip sync run per row, each with its own voice (a work of its own, its voice extracted once there; the target's
analysis, named by the target and the detection options alone, is shared); a row that asks for lip sync without a
voice is reported by line, naming the field."""

from __future__ import annotations

from typing import Any

from facefusion_provider import ingest
from facefusion_provider.options import Options
from facefusion_provider.work.ids import work_id

IN, OUT = "s3://bucket/in/", "s3://bucket/out/"
SPOKEN = '"{""processors"": [""face_swapper"", ""lip_syncer""]}"'


def _find(text: str) -> ingest.FoundJobs:
    config: dict[str, Any] = {
        "input_prefix": IN,
        "output_prefix": OUT,
        "ledger_prefix": OUT + ".facefusion-ledger/",
        "mode": "manifests",
        "source_uris": [],
    }
    listed = ingest.Listed(uri=IN + "voices.csv", version="e1", size=len(text), modified=0.0)
    return ingest.find_jobs([listed], ingest.parse_ingest_config(config), now=1e9, read=lambda uri: text.encode())


def test_each_row_speaks_its_own_voice_over_the_one_shared_analysis() -> None:
    text = "source_uris,target_uri,output_uri,options\n" + "".join(
        f"s3://f/{name}.jpg;s3://v/{name}.m4a,s3://std/intro.mp4,s3://o/{name}.mp4,{SPOKEN}\n"
        for name in ("ann", "bob", "cy")
    )
    found = _find(text)

    assert not found.reports
    assert [job.conf["source_uris"] for job in found.jobs] == [
        [f"s3://f/{name}.jpg", f"s3://v/{name}.m4a"] for name in ("ann", "bob", "cy")
    ]
    options = Options(**found.jobs[0].conf["options"])
    works = {work_id("intro", [f"{name}.jpg", f"{name}.m4a"], options) for name in ("ann", "bob", "cy")}
    assert len(works) == 3  # a work (and a voice extracted once) per row; the target's analysis names no source


def test_a_row_without_a_voice_is_reported_by_line_naming_the_field() -> None:
    text = (
        "source_uris,target_uri,output_uri,options\n"
        f"s3://f/ann.jpg;s3://v/ann.wav,s3://std/intro.mp4,s3://o/ann.mp4,{SPOKEN}\n"
        f"s3://f/bob.jpg,s3://std/intro.mp4,s3://o/bob.mp4,{SPOKEN}\n"
    )
    found = _find(text)

    assert [job.label for job in found.jobs] == ["voices.csv line 2"]
    (bad,) = found.reports
    assert bad.label == "voices.csv line 3" and bad.detail.startswith("source_uris: lip_syncer needs a voice")
