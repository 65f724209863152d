"""The processors by name, and what a chain of them (``options.processors``, in the user's order) needs."""

from __future__ import annotations

from facefusion_provider.engine.processors import face_enhancer, face_swapper
from facefusion_provider.engine.processors.base import NO_ANALYSIS, AnalysisNeeds, Processor
from facefusion_provider.options import Options

# Adding a processor: its module here, its options class in ``options.PROCESSOR_OPTIONS``, its name in ``Processor``.
PROCESSORS: dict[str, Processor] = {module.PROCESSOR.name: module.PROCESSOR for module in (face_swapper, face_enhancer)}


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
