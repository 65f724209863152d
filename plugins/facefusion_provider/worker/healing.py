"""The worker's merge: ``output.merge`` with this worker's loop computing again the segments it finds damaged
(``output.integrity``), so a damaged segment is healed where it is found and the merge goes on."""

from __future__ import annotations

import functools
from collections.abc import Callable

from facefusion_provider.output import MergeResult
from facefusion_provider.output import merge as output_merge
from facefusion_provider.work.access import checked_uris, work_layout
from facefusion_provider.work.layout import WorkLayout, output_done, work_root_of
from facefusion_provider.work.records import WorkSpec
from facefusion_provider.worker.span import FrameProcessors, load_or_prepare, prepare_again, work_segments


def merge(
    work_uri: str,
    target: str,
    output_path: str,
    *,
    models_dir: str | None = None,
    owner: str = "",
    guard: Callable[[], None] | None = None,
    run_key: str = "",
) -> MergeResult:
    """Write ``output_path`` from the work's committed segments (``output.merge``); a damaged segment is computed
    again in this process, with the models from ``models_dir``, claimed for ``owner``. A work removed while its run
    (``run_key``) waited is prepared again from the run's lease first: the segments committed since stand (a work is
    content-addressed), the missing ones are named."""
    layout = work_layout(work_uri)
    output_uri = checked_uris([], target, output_path).output_uri
    if run_key and output_uri is not None and output_done(layout.work_id, output_uri) is None:
        prepare_again(layout, run_key, models_dir)

    def recompute(indexes: list[int]) -> None:
        target_uri = checked_uris([], target, None).target_uri
        spec = load_or_prepare(layout, run_key, models_dir)
        recompute_segments(spec, layout, target_uri, indexes, models_dir=models_dir, owner=owner, guard=guard)

    return output_merge.merge(layout.work_uri, target, output_path, recompute)


def merge_work(
    spec: WorkSpec,
    layout: WorkLayout,
    target_uri: str,
    output_uri: str,
    *,
    models_dir: str | None,
    owner: str = "",
    guard: Callable[[], None] | None = None,
) -> MergeResult:
    """``output.merge_work`` for a work this process has loaded, healing damaged segments as ``merge`` does."""
    recompute = functools.partial(
        recompute_segments, spec, layout, target_uri, models_dir=models_dir, owner=owner, guard=guard
    )
    return output_merge.merge_work(spec, layout, target_uri, output_uri, recompute)


def recompute_segments(
    spec: WorkSpec,
    layout: WorkLayout,
    target_uri: str,
    indexes: list[int],
    *,
    models_dir: str | None,
    owner: str = "",
    guard: Callable[[], None] | None = None,
) -> None:
    """Work segments ``indexes`` (sorted) in this process until each is committed again: their damaged commits were
    retired (``output.integrity``). Claims as any worker does, so one another worker already took is waited for."""
    processors = FrameProcessors(spec, models_dir, work_root_of(layout))
    runs: list[list[int]] = []
    for index in indexes:
        if runs and runs[-1][-1] == index - 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    for run in runs:
        work_segments(spec, layout, target_uri, range(run[0], run[-1] + 1), processors, owner=owner, guard=guard)
