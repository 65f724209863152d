"""A worker's frame loop reduced to its metric calls, run as its own process by the metric tests.

    python simulated_worker.py FRAMES COMMIT_EVERY [HANG_AFTER]

Each frame is decoded, swapped (two faces found, one swapped) and encoded; every COMMIT_EVERY frames a segment is
committed. After HANG_AFTER frames it prints ``waiting`` and sleeps, for the test to signal it. SIGTERM is handled as
the worker CLI handles it. Prints ``committed N`` at each commit and ``counted N`` when it stops, however it stops.
"""

from __future__ import annotations

import signal
import sys
import time

from facefusion_provider.telemetry.metrics import worker_metrics
from facefusion_provider.worker.cli import _terminate


def main(frames: int, commit_every: int, hang_after: int | None) -> None:
    signal.signal(signal.SIGTERM, _terminate)
    metrics = worker_metrics({"work_id": "work-0123"})
    metrics.model_load("inswapper_128", 0.25)
    metrics.media_path("decode", "software")
    metrics.media_path("encode", "software")
    metrics.segment_retired("checksum")  # a damaged segment found before a merge, computed again
    counted = 0
    try:
        for index in range(frames):
            if index == hang_after:
                print("waiting", flush=True)
                time.sleep(60)
            metrics.frames("decode")
            metrics.io_bytes("read", 1000)
            with metrics.timed("swap"):
                metrics.faces("detected", 2)
                metrics.faces("swapped", 1)
            metrics.frames("swap")
            metrics.frames("encode")
            counted += 1
            metrics.frames_remaining(frames - counted)
            if counted % commit_every == 0:
                metrics.io_bytes("write", 500)
                metrics.segment_committed()
                print(f"committed {counted}", flush=True)
        metrics.failure("no_face", retryable=False)
    finally:
        print(f"counted {counted}", flush=True)


if __name__ == "__main__":
    hang = int(sys.argv[3]) if len(sys.argv) > 3 else None
    main(int(sys.argv[1]), int(sys.argv[2]), hang)
