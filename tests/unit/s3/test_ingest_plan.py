"""Ingestion planning, pure: the jobs each mode finds under the prefix, which to start, retry or leave, and the ledger."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from facefusion_provider import ingest
from facefusion_provider.exceptions import InvalidOptionError

IN, OUT = "s3://bucket/in/", "s3://bucket/out/"
NOW = datetime(2026, 12, 3, tzinfo=UTC)


def config(**overrides: Any) -> ingest.IngestConfig:
    values: dict[str, Any] = {
        "input_prefix": IN,
        "output_prefix": OUT,
        "ledger_prefix": OUT + ".facefusion-ledger/",
        "source_uris": ["s3://bucket/faces/me.jpg"],
        "options": {"face_swapper_blend": 90},
        "max_attempts": 2,
    }
    return ingest.parse_ingest_config({**values, **overrides})


def listed(name: str, *, version: str = "etag1", size: int = 1000, modified: float = 0.0) -> ingest.Listed:
    return ingest.Listed(uri=IN + name, version=version, size=size, modified=modified)


def find(
    items: list[ingest.Listed], cfg: ingest.IngestConfig, manifests: dict[str, str] | None = None
) -> ingest.FoundJobs:
    return ingest.find_jobs(items, cfg, now=1e9, read=lambda uri: (manifests or {})[uri].encode())


def plan(
    jobs: list[ingest.Job],
    histories: dict[str, ingest.JobHistory] | None = None,
    cfg: ingest.IngestConfig | None = None,
) -> ingest.IngestPlan:
    return ingest.plan_ingest(jobs, histories or {}, {}, cfg or config(), now=NOW, ingest_run="ingest/run1")


def test_videos_mode_swaps_each_new_video_with_the_fixed_faces() -> None:
    found = find(
        [listed("b.mov", modified=2), listed("a.mp4", modified=1), listed("sub/c.mkv"), listed("x.txt")], config()
    )
    confs = {
        job.label: ingest.swap_conf(
            ingest.JobAttempt(
                job_id=job.job_id, label=job.label, conf=job.conf, attempt=1, run_id="r", claimed_at=NOW, claimed_by="i"
            )
        )
        for job in found.jobs
    }
    assert set(confs) == {IN + "a.mp4", IN + "b.mov", IN + "sub/c.mkv"}
    assert confs[IN + "sub/c.mkv"] == {
        "source_uris": ["s3://bucket/faces/me.jpg"],
        "target_uri": IN + "sub/c.mkv",
        "output_uri": OUT + "sub/c.mkv",
        "face_swapper_blend": 90,
    }  # flat, as the trigger form sends it
    starts = plan(found.jobs).starts
    assert [s.claim.label for s in starts] == [IN + "sub/c.mkv", IN + "a.mp4", IN + "b.mov"]  # oldest first


def test_a_reuploaded_video_is_a_new_job_and_the_same_bytes_are_the_same_job() -> None:
    first = find([listed("a.mp4", version="e1")], config()).jobs[0]
    again = find([listed("a.mp4", version="e1")], config()).jobs[0]
    changed = find([listed("a.mp4", version="e2")], config()).jobs[0]
    assert first.job_id == again.job_id != changed.job_id


def test_faces_mode_makes_one_identity_per_image_or_folder_times_every_target() -> None:
    cfg = config(mode="faces", target_uris=["s3://std/intro.mp4", "s3://std/action.mp4"], source_uris=[])
    items = [listed("alice.jpg"), listed("bob/1.png"), listed("bob/2.jpg"), listed("notes.txt")]
    found = find(items, cfg)
    by_label = {job.label: job.conf for job in found.jobs}
    assert set(by_label) == {"alice x intro.mp4", "alice x action.mp4", "bob x intro.mp4", "bob x action.mp4"}
    assert by_label["bob x action.mp4"]["source_uris"] == [IN + "bob/1.png", IN + "bob/2.jpg"]
    assert by_label["bob x action.mp4"]["output_uri"] == OUT + "bob/action.mp4"
    one_target = find(items, config(mode="faces", target_uris=["s3://std/intro.mp4"], source_uris=[]))
    assert {job.conf["output_uri"] for job in one_target.jobs} == {OUT + "alice.mp4", OUT + "bob.mp4"}


def test_jobs_that_would_write_one_output_are_reported_and_none_starts() -> None:
    cfg = config(mode="faces", target_uris=["s3://std/intro.mp4"], source_uris=[])
    found = find([listed("alice.jpg"), listed("alice/1.png"), listed("bob.jpg")], cfg)
    assert [job.label for job in found.jobs] == ["bob x intro.mp4"]
    clashes = [(r.label, r.detail) for r in found.reports if r.kind == "invalid"]
    clash = f"output_uri {OUT}alice.mp4 is also the output of alice x intro.mp4; give each job its own output"
    assert clashes == [("alice x intro.mp4", clash)] * 2  # the image alice.jpg and the folder alice/
    two_targets = config(mode="faces", target_uris=["s3://std/a/intro.mp4", "s3://std/b/intro.mp4"], source_uris=[])
    found = find([listed("bob.jpg")], two_targets)
    assert found.jobs == []
    assert [r.detail for r in found.reports] == [
        f"output_uri {OUT}bob/intro.mp4 is also the output of bob x intro.mp4; give each job its own output"
    ] * 2
    lines = [GOOD_LINE, {**GOOD_LINE, "target_uri": "s3://v/b.mp4"}, GOOD_LINE]
    manifest = "\n".join(json.dumps(line) for line in lines)
    found = find([listed("m.jsonl")], config(mode="manifests", source_uris=[]), {IN + "m.jsonl": manifest})
    assert found.jobs == [] and sorted(r.label for r in found.reports) == ["m.jsonl line 1", "m.jsonl line 2"]


def test_manifest_lines_outside_the_allow_lists_are_reported_by_field() -> None:
    allowed = ingest.AllowedPrefixes(inputs=("s3://f/", "s3://v/"), outputs=("s3://safe/",))
    manifest = json.dumps(GOOD_LINE) + "\n" + json.dumps({**GOOD_LINE, "output_uri": "s3://safe/a.mp4"})
    cfg = config(mode="manifests", source_uris=[])
    found = ingest.find_jobs([listed("m.jsonl")], cfg, now=1e9, read=lambda uri: manifest.encode(), allowed=allowed)
    assert [job.conf["output_uri"] for job in found.jobs] == ["s3://safe/a.mp4"]
    (report,) = found.reports
    assert (report.label, report.kind) == ("m.jsonl line 1", "invalid")
    assert report.detail.startswith("output_uri: s3://o/a.mp4 is outside the allowed output locations (s3://safe/)")


@pytest.mark.parametrize(
    ("allowed", "field"),
    [
        (ingest.AllowedPrefixes(inputs=("s3://other/",)), "input_prefix"),
        (ingest.AllowedPrefixes(outputs=("s3://bucket/in/",)), "output_prefix"),
        (ingest.AllowedPrefixes(inputs=("s3://bucket/in/",)), "source_uris[0]"),
    ],
)
def test_prefixes_and_fixed_inputs_outside_the_allow_lists_name_the_field(
    allowed: ingest.AllowedPrefixes, field: str
) -> None:
    with pytest.raises(InvalidOptionError, match=rf"^{re.escape(field)}: .* is outside the allowed"):
        ingest.check_allowed_config(config(), allowed)
    ingest.check_allowed_config(config(), ingest.AllowedPrefixes(("s3://bucket/",), ("s3://bucket/out/",)))


def test_a_folder_still_receiving_images_waits_until_it_settles() -> None:
    cfg = config(mode="faces", target_uris=["s3://std/intro.mp4"], source_uris=[], settle_minutes=2)
    fresh = ingest.find_jobs([listed("carol/1.jpg", modified=1e9 - 30)], cfg, now=1e9, read=lambda uri: b"")
    assert fresh.jobs == [] and [(r.label, r.kind) for r in fresh.reports] == [("carol", "settling")]
    settled = ingest.find_jobs([listed("carol/1.jpg", modified=1e9 - 300)], cfg, now=1e9, read=lambda uri: b"")
    assert [job.label for job in settled.jobs] == ["carol x intro.mp4"]


GOOD_LINE = {"source_uris": ["s3://f/a.jpg"], "target_uri": "s3://v/a.mp4", "output_uri": "s3://o/a.mp4"}


def test_manifests_start_each_good_line_and_report_bad_lines_by_number() -> None:
    lines = [
        json.dumps(GOOD_LINE),
        "",
        json.dumps({**GOOD_LINE, "output_uri": "s3://o/b.mp4", "options": {"face_swapper_blend": 70}}),
        json.dumps({**GOOD_LINE, "output_uri": "s3://o/c.mp4", "options": {"face_swapper_blend": 170}}),
        "{not json",
        json.dumps({**GOOD_LINE, "target_uri": "in.mp4"}),
    ]
    found = find(
        [listed("jobs.jsonl")], config(mode="manifests", source_uris=[]), {IN + "jobs.jsonl": "\n".join(lines)}
    )
    assert [job.label for job in found.jobs] == ["jobs.jsonl line 1", "jobs.jsonl line 3"]
    assert found.jobs[1].conf["options"] == {"face_swapper_blend": 70}
    bad = {report.label: report.detail for report in found.reports if report.kind == "invalid"}
    assert set(bad) == {"jobs.jsonl line 4", "jobs.jsonl line 5", "jobs.jsonl line 6"}
    assert "options.face_swapper_blend" in bad["jobs.jsonl line 4"]
    assert "not a JSON object" in bad["jobs.jsonl line 5"]
    assert "target_uri: 'in.mp4' is a relative path" in bad["jobs.jsonl line 6"]


def test_csv_manifests_with_several_sources_and_options() -> None:
    text = (
        "source_uris,target_uri,output_uri,options\n"
        's3://f/a.jpg;s3://f/a2.jpg,s3://v/a.mp4,s3://o/a.mp4,"{""face_swapper_blend"": 60}"\n'
        "s3://f/b.jpg,s3://v/b.mp4,s3://o/b.avi,\n"
    )
    found = find([listed("jobs.csv")], config(mode="manifests", source_uris=[]), {IN + "jobs.csv": text})
    assert [(job.label, job.conf["source_uris"]) for job in found.jobs] == [
        ("jobs.csv line 2", ["s3://f/a.jpg", "s3://f/a2.jpg"])
    ]
    assert found.jobs[0].conf["options"] == {"face_swapper_blend": 60}
    (bad,) = found.reports
    assert bad.label == "jobs.csv line 3" and "output_uri: s3://o/b.avi has extension '.avi'" in bad.detail


def test_manifest_lines_are_checked_like_a_swap_conf_and_start_with_a_flat_conf() -> None:
    lines = [
        json.dumps({**GOOD_LINE, "face_swapper_blend": 70}),  # flat, as the swap DAG's form sends it
        json.dumps({**GOOD_LINE, "output_uri": "s3://o/b.mp4", "chunk_size": 64}),
        json.dumps({**GOOD_LINE, "output_uri": "s3://o/c.mp4", "face_swapper_blnd": 70}),
        json.dumps({**GOOD_LINE, "output_uri": "s3://o/d.mp4", "trim_frame_start": 9, "trim_frame_end": 3}),
    ]
    found = find(
        [listed("jobs.jsonl")], config(mode="manifests", source_uris=[]), {IN + "jobs.jsonl": "\n".join(lines)}
    )
    (job,) = found.jobs
    claim = ingest.plan_ingest([job], {}, {}, config(), now=NOW, ingest_run="ingest/run1").starts[0].claim
    assert ingest.swap_conf(claim) == {**GOOD_LINE, "face_swapper_blend": 70}
    bad = {report.label: report.detail for report in found.reports}
    assert "chunk_size: no longer an option: it is called segment_size now" in bad["jobs.jsonl line 2"]
    assert "face_swapper_blnd: unknown conf key; did you mean 'face_swapper_blend'?" in bad["jobs.jsonl line 3"]
    assert "trim_frame_end (3) must be greater than trim_frame_start (9)" in bad["jobs.jsonl line 4"]


def test_the_same_line_in_another_manifest_is_the_same_job() -> None:
    cfg = config(mode="manifests", source_uris=[])
    first = find([listed("a.jsonl")], cfg, {IN + "a.jsonl": json.dumps(GOOD_LINE)}).jobs[0]
    second = find([listed("b.jsonl")], cfg, {IN + "b.jsonl": json.dumps(GOOD_LINE)}).jobs[0]
    assert first.job_id == second.job_id


def test_failed_jobs_are_retried_up_to_max_attempts_and_bad_input_never() -> None:
    job = find([listed("a.mp4")], config()).jobs[0]
    history = ingest.histories_from_listing(
        [f"{ledger(job.job_id)}/attempt-001.json", f"{ledger(job.job_id)}/attempt-001.failed.json"]
    )
    result = plan([job], history)
    assert [(r.kind, r.attempt) for r in result.reports] == [("retry", 2)]
    history[job.job_id].attempts.add(2)
    history[job.job_id].outcomes[2] = "failed"
    assert plan([job], history).reports[0].kind == "given_up"
    rejected = ingest.histories_from_listing(
        [f"{ledger(job.job_id)}/attempt-001.json", f"{ledger(job.job_id)}/attempt-001.rejected.json"]
    )
    assert [(r.kind, r.attempt) for r in plan([job], rejected).reports] == [("rejected", 1)]
    assert plan([job], rejected).starts == []


def ledger(job: str) -> str:
    return f"{OUT}.facefusion-ledger/jobs/{job}"


def test_only_finished_runs_become_outcomes_and_bad_input_is_rejected() -> None:
    assert ingest.outcome_for("j" * 24, 1, "running", NOW) is None
    assert ingest.outcome_for("j" * 24, 1, "success", NOW).state == "success"  # type: ignore[union-attr]
    assert ingest.outcome_for("j" * 24, 1, "failed", NOW).state == "failed"  # type: ignore[union-attr]
    missing = ingest.RunFailure("input_missing", "target_uri: no such file")
    rejected = ingest.outcome_for("j" * 24, 1, "failed", NOW, failure=missing)
    assert rejected is not None and (rejected.state, rejected.detail) == ("rejected", "target_uri: no such file")


@pytest.mark.parametrize("failure_class", ["storage_denied", "model_missing", "model_corrupt", "invalid_job"])
def test_a_run_failed_by_the_deployment_is_failed_not_rejected_so_a_later_scan_retries_it(failure_class: str) -> None:
    failure = ingest.RunFailure(failure_class, "s3://out/a.mp4: access denied")
    outcome = ingest.outcome_for("j" * 24, 1, "failed", NOW, failure=failure)
    assert outcome is not None and (outcome.state, outcome.detail) == ("failed", "s3://out/a.mp4: access denied")


def test_a_claim_without_a_run_is_resumed_by_its_own_scan_or_once_orphaned() -> None:
    job = find([listed("a.mp4")], config()).jobs[0]
    claim = ingest.JobAttempt(
        job_id=job.job_id,
        label=job.label,
        conf=job.conf,
        attempt=1,
        run_id=ingest.swap_run_id(job.job_id, 1),
        claimed_at=NOW - timedelta(minutes=5),
        claimed_by="ingest/other",
    )
    history = {job.job_id: ingest.JobHistory(attempts={1}, pending=claim)}
    assert plan([job], history).reports[0].kind == "in_flight"
    own = {job.job_id: ingest.JobHistory(attempts={1}, pending=claim.model_copy(update={"claimed_by": "ingest/run1"}))}
    assert plan([job], own).reports[0].kind == "resume"
    old = {
        job.job_id: ingest.JobHistory(
            attempts={1}, pending=claim.model_copy(update={"claimed_at": NOW - timedelta(hours=1)})
        )
    }
    assert plan([job], old).reports[0].kind == "resume"


def test_at_most_max_runs_per_scan_start_and_the_rest_are_deferred() -> None:
    found = find([listed(f"{i}.mp4", modified=i) for i in range(5)], config(max_runs_per_scan=2))
    result = plan(found.jobs, cfg=config(max_runs_per_scan=2))
    assert [r.kind for r in result.reports] == ["start", "start", "deferred", "deferred", "deferred"]


def test_size_limits_and_our_own_outputs_are_skipped() -> None:
    cfg = config(input_prefix="s3://bucket/", output_prefix="s3://bucket/out/", min_size_bytes=10, max_size_bytes=100)
    items = [
        ingest.Listed(uri="s3://bucket/small.mp4", version="e", size=5, modified=0),
        ingest.Listed(uri="s3://bucket/big.mp4", version="e", size=500, modified=0),
        ingest.Listed(uri="s3://bucket/out/done.mp4", version="e", size=50, modified=0),
        ingest.Listed(uri="s3://bucket/ok.mp4", version="e", size=50, modified=0),
    ]
    found = ingest.find_jobs(items, cfg, now=0, read=lambda uri: b"")
    assert [job.label for job in found.jobs] == ["s3://bucket/ok.mp4"]
    assert {(r.label, r.kind) for r in found.reports} == {
        ("s3://bucket/small.mp4", "too_small"),
        ("s3://bucket/big.mp4", "too_large"),
    }


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"input_prefix": "bucket/in"}, "input_prefix"),
        ({"output_prefix": IN}, "output_prefix must differ"),
        ({"source_uris": []}, "source_uris: the videos mode needs"),
        ({"mode": "faces", "target_uris": []}, "target_uris: the faces mode needs"),
        ({"mode": "everything"}, "mode"),
        ({"max_attempts": 0}, "max_attempts"),
    ],
)
def test_bad_params_name_the_param(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidOptionError, match=field):
        config(**overrides)
