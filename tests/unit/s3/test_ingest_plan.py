"""Which videos an ingestion run starts, retries, resumes or leaves alone: the pure decisions of ``ingest.py``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from facefusion_provider import ingest
from facefusion_provider.exceptions import InvalidOptionError

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
RUN = "facefusion_s3_ingest/scheduled__2026-01-01T12:00:00"


def config(**overrides: object) -> ingest.IngestConfig:
    values: dict[str, object] = {
        "input_prefix": "s3://videos/in",
        "output_prefix": "s3://videos/out/",
        "ledger_prefix": "s3://videos/out/.facefusion-ledger/",
        "source_uris": ["s3://videos/faces/a.jpg"],
        "options": {"processors": []},
    }
    values.update(overrides)
    return ingest.parse_ingest_config(values)


def listed(name: str, *, version: str = "etag1", size: int = 1000, modified: float = 0.0) -> ingest.Listed:
    return ingest.Listed(uri=f"s3://videos/in/{name}", version=version, size=size, modified=modified)


def history(*names: str, pending: ingest.Claim | None = None) -> ingest.VideoHistory:
    """A video's history from ledger object names such as ``attempt-001.json`` and ``attempt-001.failed.json``."""
    histories = ingest.histories_from_listing(f"s3://l/videos/{'0' * 24}/{name}" for name in names)
    result = histories["0" * 24]
    result.pending = pending
    return result


def plan(
    items: list[ingest.Listed],
    histories: dict[str, ingest.VideoHistory] | None = None,
    states: dict[str, ingest.RunState] | None = None,
    cfg: ingest.IngestConfig | None = None,
    *,
    ingest_run: str = RUN,
) -> ingest.IngestPlan:
    return ingest.plan_ingest(items, histories or {}, states or {}, cfg or config(), now=NOW, ingest_run=ingest_run)


def kinds(result: ingest.IngestPlan) -> dict[str, str]:
    return {report.uri.rsplit("/", 1)[1]: report.kind for report in result.reports}


def test_new_videos_start_oldest_first_with_their_output_under_the_output_prefix() -> None:
    result = plan([listed("b.mp4", modified=2), listed("sub/a.MOV", modified=1), listed("notes.txt")])
    assert [s.claim.target_uri for s in result.starts] == ["s3://videos/in/sub/a.MOV", "s3://videos/in/b.mp4"]
    first = result.starts[0].claim
    assert first.output_uri == "s3://videos/out/sub/a.MOV"
    assert first.attempt == 1 and not result.starts[0].resume
    assert first.run_id == ingest.swap_run_id(ingest.video_id(first.target_uri, "etag1"), 1)
    assert first.claimed_by == RUN and first.claimed_at == NOW
    assert kinds(result) == {"a.MOV": "start", "b.mp4": "start"}  # notes.txt is no video: not even reported


def test_the_swap_conf_carries_the_fixed_source_and_options() -> None:
    cfg = config(options={"processors": [], "chunk_size": 8})
    claim = plan([listed("a.mp4")], cfg=cfg).starts[0].claim
    assert ingest.swap_conf(claim, cfg) == {
        "source_uris": ["s3://videos/faces/a.jpg"],
        "target_uri": "s3://videos/in/a.mp4",
        "output_uri": "s3://videos/out/a.mp4",
        "options": {"processors": [], "chunk_size": 8},
    }


def test_a_video_is_its_key_and_etag_so_a_reupload_is_new() -> None:
    done = ingest.video_id("s3://videos/in/a.mp4", "etag1")
    histories = {done: history("attempt-001.json", "attempt-001.success.json")}
    assert kinds(plan([listed("a.mp4")], histories)) == {"a.mp4": "done"}
    result = plan([listed("a.mp4", version="etag2")], histories)
    assert kinds(result) == {"a.mp4": "start"}
    assert result.starts[0].claim.attempt == 1


def test_failed_videos_are_retried_up_to_max_attempts_then_given_up() -> None:
    vid = ingest.video_id("s3://videos/in/a.mp4", "etag1")
    once = {vid: history("attempt-001.json", "attempt-001.failed.json")}
    retry = plan([listed("a.mp4")], once, cfg=config(max_attempts=2))
    assert [(s.claim.attempt, s.claim.run_id) for s in retry.starts] == [(2, ingest.swap_run_id(vid, 2))]
    assert retry.reports[0].kind == "retry" and "attempt 1 of 2 failed" in retry.reports[0].detail
    twice = {vid: history("attempt-001.json", "attempt-001.failed.json", "attempt-002.json", "attempt-002.failed.json")}
    given_up = plan([listed("a.mp4")], twice, cfg=config(max_attempts=2))
    assert given_up.starts == []
    assert given_up.reports[0].kind == "given_up"
    assert "failed 2 of 2 attempts" in given_up.reports[0].detail


def test_a_running_or_queued_attempt_is_left_alone() -> None:
    vid = ingest.video_id("s3://videos/in/a.mp4", "etag1")
    claim = plan([listed("a.mp4")]).starts[0].claim
    histories = {vid: history("attempt-001.json", pending=claim)}
    for state in ("queued", "running"):
        result = plan([listed("a.mp4")], histories, {claim.run_id: state}, ingest_run="another run")
        assert result.starts == []
        assert result.reports[0].kind == "in_flight" and state in result.reports[0].detail


def test_a_claim_without_a_run_is_resumed_by_its_own_run_or_once_it_is_orphaned() -> None:
    vid = ingest.video_id("s3://videos/in/a.mp4", "etag1")
    claim = plan([listed("a.mp4")]).starts[0].claim
    histories = {vid: history("attempt-001.json", pending=claim)}
    # Another ingestion run, soon after the claim: the claiming run may still trigger it.
    assert plan([listed("a.mp4")], histories, ingest_run="another run").starts == []
    # The claiming run itself, retried: it resumes the same attempt (same run id: Airflow refuses a duplicate).
    own = plan([listed("a.mp4")], histories)
    assert [(s.claim, s.resume) for s in own.starts] == [(claim, True)]
    # Long after the claim, with no run: the claiming run died between claim and trigger.
    orphaned = ingest.plan_ingest(
        [listed("a.mp4")], histories, {}, config(), now=NOW + timedelta(minutes=31), ingest_run="later run"
    )
    assert [(s.claim.run_id, s.resume) for s in orphaned.starts] == [(claim.run_id, True)]
    assert orphaned.reports[0].kind == "resume"


def test_at_most_max_videos_per_run_start_and_the_rest_are_deferred() -> None:
    items = [listed(f"{i}.mp4", modified=i) for i in range(5)]
    result = plan(items, cfg=config(max_videos_per_run=2))
    assert [s.claim.target_uri.rsplit("/", 1)[1] for s in result.starts] == ["0.mp4", "1.mp4"]
    assert kinds(result) == {
        "0.mp4": "start",
        "1.mp4": "start",
        "2.mp4": "deferred",
        "3.mp4": "deferred",
        "4.mp4": "deferred",
    }


def test_size_limits_skip_and_report_files() -> None:
    result = plan(
        [listed("empty.mp4", size=0), listed("huge.mp4", size=10_000), listed("ok.mp4", size=500)],
        cfg=config(min_size_bytes=1, max_size_bytes=5000),
    )
    assert kinds(result) == {"empty.mp4": "too_small", "huge.mp4": "too_large", "ok.mp4": "start"}
    assert "10000 bytes" in result.reports[1].detail


def test_outputs_and_the_ledger_under_the_input_prefix_are_never_ingested() -> None:
    cfg = config(output_prefix="s3://videos/in/swapped/", ledger_prefix="s3://videos/in/swapped/.ledger/")
    items = [listed("a.mp4"), listed("swapped/a.mp4"), listed("swapped/.ledger/x.mp4"), listed("folder/")]
    result = plan(items, cfg=cfg)
    assert [s.claim.target_uri for s in result.starts] == ["s3://videos/in/a.mp4"]
    assert result.starts[0].claim.output_uri == "s3://videos/in/swapped/a.mp4"


def test_histories_come_from_ledger_names_alone() -> None:
    a, b = "a" * 24, "b" * 24
    histories = ingest.histories_from_listing(
        [
            f"s3://l/videos/{a}/attempt-001.json",
            f"s3://l/videos/{a}/attempt-001.failed.json",
            f"s3://l/videos/{a}/attempt-002.json",
            f"s3://l/videos/{b}/attempt-001.json",
            f"s3://l/videos/{b}/attempt-001.success.json",
            "s3://l/videos/README.txt",
        ]
    )
    assert histories[a].attempts == {1, 2} and histories[a].outcomes == {1: "failed"}
    assert histories[a].unfinished and not histories[b].unfinished
    assert ingest.unfinished_attempts(histories) == [(a, 2)]
    ledger = "s3://l/"
    assert ingest.claim_uri(ledger, a, 2) == f"s3://l/videos/{a}/attempt-002.json"
    assert ingest.outcome_uri(ledger, a, 2, "failed") == f"s3://l/videos/{a}/attempt-002.failed.json"


def test_only_finished_runs_become_outcomes() -> None:
    vid = "c" * 24
    assert ingest.outcome_for(vid, 1, "running", NOW) is None
    assert ingest.outcome_for(vid, 1, "missing", NOW) is None
    outcome = ingest.outcome_for(vid, 3, "failed", NOW)
    assert outcome is not None and outcome.state == "failed" and outcome.run_id == ingest.swap_run_id(vid, 3)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"input_prefix": "videos/in"}, "input_prefix"),
        ({"output_prefix": "s3://videos/in/"}, "output_prefix must differ"),
        ({"source_uris": []}, "source_uris"),
        ({"max_videos_per_run": 0}, "max_videos_per_run"),
        ({"min_size_bytes": 10, "max_size_bytes": 5}, "max_size_bytes"),
    ],
)
def test_bad_params_name_the_param(overrides: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidOptionError, match=field):
        config(**overrides)


def test_prefixes_end_with_a_slash_and_extensions_are_normalised() -> None:
    cfg = config(extensions=["MP4", ".mov"])
    assert cfg.input_prefix == "s3://videos/in/"
    assert cfg.extensions == [".mov", ".mp4"]
