"""The processors by name, and what a chain of them (``options.processors``, in the user's order) needs."""

from __future__ import annotations

from facefusion_provider.engine.output_scale import scaled_size
from facefusion_provider.engine.processors import (
    age_modifier,
    background_remover,
    deep_swapper,
    expression_restorer,
    face_debugger,
    face_editor,
    face_enhancer,
    face_swapper,
    frame_colorizer,
    frame_enhancer,
    lip_syncer,
)
from facefusion_provider.engine.processors.base import NO_ANALYSIS, AnalysisNeeds, Processor
from facefusion_provider.exceptions import InvalidOptionError
from facefusion_provider.options import Options

# Adding a processor: its module here, its options class in ``options.PROCESSOR_OPTIONS``, its name in ``Processor``.
PROCESSORS: dict[str, Processor] = {
    processor.name: processor
    for processor in (
        face_swapper.PROCESSOR,
        face_enhancer.PROCESSOR,
        frame_enhancer.PROCESSOR,
        frame_colorizer.PROCESSOR,
        background_remover.PROCESSOR,
        face_debugger.PROCESSOR,
        expression_restorer.PROCESSOR,
        face_editor.PROCESSOR,
        age_modifier.PROCESSOR,
        deep_swapper.PROCESSOR,
        lip_syncer.PROCESSOR,
    )
}


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
