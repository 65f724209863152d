"""prepare refuses, before any span runs, what would fail every span later: an encoder this machine cannot open, and a
target whose seek-decode disagrees with its probe. An AV1 target, which used to fail spans for good, now works."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from committed import work_uri_for
from readback import frame_digests

from facefusion_provider import storage, worker
from facefusion_provider.exceptions import InvalidMediaError, InvalidOptionError
from facefusion_provider.media import encode
from facefusion_provider.media import probe as probe_module
from facefusion_provider.types import VideoProbe
from facefusion_provider.work.layout import WorkLayout

from .conftest import MakeVideo

PASSTHROUGH: dict[str, Any] = {"processors": [], "output_video_quality": 100, "segment_size": 8}


def _job_written(work_uri: str) -> bool:
    return storage.exists(WorkLayout(work_uri).work_json)


def test_an_encoder_this_machine_cannot_open_is_refused_at_prepare(make_video: MakeVideo, work_root: str) -> None:
    target = make_video(frames=16)
    options = {**PASSTHROUGH, "output_video_encoder": "h264_nvenc"}
    work_uri = work_uri_for(work_root, [], target, **options)
    with pytest.raises(InvalidOptionError, match=r"^output_video_encoder: h264_nvenc cannot be opened") as refused:
        worker.prepare(work_uri, [], target, **options)
    assert not refused.value.retryable
    assert not _job_written(work_uri)  # no span can start: there is no work.json


def test_a_target_whose_seek_disagrees_with_its_probe_is_refused_at_prepare(
    make_video: MakeVideo, work_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = make_video(frames=24, codec_options={"preset": "ultrafast", "g": "8"})
    real_probe = probe_module.probe_video

    def lying_probe(source: Any, name: str) -> VideoProbe:  # an index whose timestamps are not the decoder's
        found = real_probe(source, name)
        return found.model_copy(update={"pts": [pts * 2 for pts in found.pts]})

    monkeypatch.setattr(probe_module, "probe_video", lying_probe)
    work_uri = work_uri_for(work_root, [], target, **PASSTHROUGH)
    with pytest.raises(InvalidMediaError, match="by seek does not give the frames the probe lists"):
        worker.prepare(work_uri, [], target, **PASSTHROUGH)
    assert not _job_written(work_uri)


def test_an_av1_target_works_from_a_span_in_the_middle(make_video: MakeVideo, tmp_path: Path, work_root: str) -> None:
    # issue 28: "frame 17 should have pts 8704, the decoder gave 9216; the file may be corrupt"
    av1 = {"codec": "libsvtav1", "codec_options": {"preset": "12", "crf": "40"}, "container_format": "mp4"}
    target = make_video(frames=24, name="av1.mp4", **av1)
    work_uri = work_uri_for(work_root, [], target, **PASSTHROUGH)
    spec = worker.prepare(work_uri, [], target, **PASSTHROUGH)
    assert spec.probe.codec == "libdav1d"
    worker.swap_span(work_uri, target, 2, 3, span=1)  # frames 16-23 first, by seek; then the rest
    output = tmp_path / "out.mp4"
    worker.merge(work_uri, target, str(output))
    assert [d.md5 for d in frame_digests(str(output))] == [d.md5 for d in frame_digests(target)]


def test_a_pod_off_the_gpu_pool_leaves_nvenc_to_the_span_which_refuses_it_at_once(
    make_video: MakeVideo, work_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")  # prepare in a pod: the spans may run where NVENC is
    monkeypatch.setattr(encode, "_has_nvidia_driver", lambda: False)
    target = make_video(frames=16)
    options = {**PASSTHROUGH, "output_video_encoder": "h264_nvenc"}
    work_uri = work_uri_for(work_root, [], target, **options)
    worker.prepare(work_uri, [], target, **options)
    with pytest.raises(InvalidOptionError, match=r"^output_video_encoder: h264_nvenc cannot be opened") as refused:
        worker.swap_span(work_uri, target, 0, 2)
    assert not refused.value.retryable
