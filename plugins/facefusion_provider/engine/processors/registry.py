"""The processors by name, and what a chain of them (``options.processors``, in the user's order) needs.

A processor's module is imported when a chain first names it (as FaceFusion loads its processor modules by name): a
worker that only re-encodes, and a prepare or merge that only asks what a chain needs, load none of their libraries
(onnxruntime and OpenCV: 37 MB and 0.1 s of a passthrough worker's start).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from typing import TYPE_CHECKING, get_args

from facefusion_provider.engine.frame_size import scaled_size
from facefusion_provider.engine.processors.needs import NO_ANALYSIS, AnalysisNeeds
from facefusion_provider.exceptions import InvalidOptionError
from facefusion_provider.options import Options
from facefusion_provider.options import Processor as ProcessorName

if TYPE_CHECKING:
    from facefusion_provider.engine.processors.base import Processor

PROCESSOR_NAMES: tuple[str, ...] = get_args(ProcessorName)


class _Processors(MutableMapping[str, "Processor"]):
    """Every processor by name, its module ``engine/processors/<name>.py`` imported on first use and kept (a test may
    stand another object in for one).

    Adding a processor: that module (its ``PROCESSOR``), its options class in ``options.PROCESSOR_OPTIONS``, its name
    in ``options.Processor``."""

    def __init__(self) -> None:
        self._loaded: dict[str, Processor] = {}

    def __getitem__(self, name: str) -> Processor:
        if name not in self._loaded:
            if name not in PROCESSOR_NAMES:
                raise KeyError(name)
            self._loaded[name] = importlib.import_module(f"{__package__}.{name}").PROCESSOR
        return self._loaded[name]

    def __setitem__(self, name: str, processor: Processor) -> None:
        self._loaded[name] = processor

    def __delitem__(self, name: str) -> None:
        del self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(PROCESSOR_NAMES)

    def __len__(self) -> int:
        return len(PROCESSOR_NAMES)


PROCESSORS: MutableMapping[str, Processor] = _Processors()


def processor(name: str) -> Processor:
    try:
        return PROCESSORS[name]
    except KeyError:
        raise KeyError(f"unknown processor {name!r}; the processors are {', '.join(PROCESSORS)}") from None


def chain_of(options: Options) -> list[Processor]:
    """The processors ``options`` runs, in its order."""
    return [processor(name) for name in options.processors]


def analysis_needs(options: Options) -> AnalysisNeeds:
    """What the chain reads of each frame's analysis: it runs once per frame, for all of them."""
    needs = NO_ANALYSIS
    for chosen in chain_of(options):
        needs |= chosen.analysis(options)
    return needs


def follows_faces(options: Options) -> bool:
    """Whether the face mesh follows the faces between detections (``face_detector_interval``): only where it
    places them anyway, and not under the face tracker, which links a detection in every frame."""
    mesh = analysis_needs(options).landmarks == "mesh"
    return options.face_detector_interval > 1 and mesh and options.face_tracker_score == 0


def output_size(options: Options, width: int, height: int) -> tuple[int, int]:
    """The size of the output's frames for a target of ``width`` x ``height``: the processors' frames, then
    ``output_video_scale``."""
    for chosen in chain_of(options):
        width, height = chosen.output_size(options, width, height)
    return scaled_size(width, height, options.output_video_scale)


def check_chain(options: Options) -> None:
    """Refuse a chain where a processor reads faces after one that changes the frame's size: the analysis finds the
    faces in the input frames, so they would be in the wrong place."""
    resized: str | None = None
    for chosen in chain_of(options):
        if resized is not None and chosen.analysis(options).faces:
            raise InvalidOptionError(
                f"options.processors: {chosen.name} reads the faces found in the input frames, so it must come "
                f"before {resized}, which changes the frame's size"
            )
        if resized is None and chosen.output_size(options, 64, 64) != (64, 64):
            resized = chosen.name
