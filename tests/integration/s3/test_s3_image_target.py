"""An image target on S3 through the worker CLI (its own process): the target, the work and the output on moto S3.

The classic swapper changes the face of a JPEG target; the output is a JPEG at its key with its preview and marker. An
output whose upload keeps failing leaves nothing at its key (no partial object, no marker, no preview), and the run
again, with the store healthy, writes it from the committed segment without computing it again.
"""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
from people import person_file
from s3_servers import Fault
from s3_stack import S3Stack

from facefusion_provider.exceptions import EXIT_RETRYABLE

FACE_AREA = (
    slice(120, 340),
    slice(150, 370),
)  # rows, columns holding Grace Hopper's face in grace_hopper.jpg (512x600)


def test_an_image_target_on_s3_gives_an_image_published_whole(s3: S3Stack, tmp_path: Path) -> None:
    client = s3.client()
    for name, person in (("face.png", "astronaut"), ("grace.jpg", "grace")):
        client.upload_file(str(person_file(tmp_path / name, person)), "videos", f"images/{name}")
    output = "s3://videos/image-out/grace-swapped.jpg"  # a prefix of its own: other tests write to out/
    argv = ["run", "--source", "s3://videos/images/face.png", "--target", "s3://videos/images/grace.jpg"]
    argv += ["--output", output, "--work-root", "s3://work/images", "--keep-work"]

    s3.proxy.inject(Fault("PUT", r"/videos/image-out/grace-swapped\.jpg", 503, times=1000))
    failed = s3.run_worker(*argv, FACEFUSION_S3_MAX_ATTEMPTS="2")
    assert failed.returncode == EXIT_RETRYABLE, failed.stderr
    assert s3.keys("videos", "image-out/") == [], "neither the output, nor its marker, nor its preview"
    segments = [key for key in s3.keys("work", "images/") if "/segments/" in key]
    assert any(key.endswith(".png") for key in segments), "the segment was committed before the merge failed"
    s3.proxy.clear()

    done = s3.run_worker(*argv)

    assert done.returncode == 0, done.stderr
    assert [key for key in s3.keys("work", "images/") if "/segments/" in key] == segments, "the segment reused"
    assert sorted(s3.keys("videos", "image-out/")) == [
        "image-out/.grace-swapped.jpg.facefusion.json",
        "image-out/grace-swapped.jpg",
        "image-out/grace-swapped.preview.jpg",
    ]
    client.download_file("videos", "image-out/grace-swapped.jpg", str(tmp_path / "out.jpg"))
    before = cv2.imread(str(tmp_path / "grace.jpg")).astype(int)
    after = cv2.imread(str(tmp_path / "out.jpg")).astype(int)
    changed = np.abs(after - before).max(axis=2) > 40  # past the JPEG's own re-encoding
    assert changed[FACE_AREA].sum() > 3000 and changed.sum() == changed[FACE_AREA].sum(), "only the face changed"
    marker = json.loads(
        client.get_object(Bucket="videos", Key="image-out/.grace-swapped.jpg.facefusion.json")["Body"].read()
    )
    assert (marker["frame_count"], marker["method"]) == (1, "image")
