"""What every frame processor is: one module per processor (``face_swapper``, ``face_enhancer``, ...), each holding
one ``Processor`` that the registry maps its name to.

A processor says which ``Options`` fields are its own (its options class in ``options.py``), which catalogue models it
runs, what it needs of the target's analysis, the size of the frames it returns, what it adds to the work's identity
in prepare, and, loaded (its pre-check passed, its models in memory), its call over a batch of frames.
"""

from __future__ import annotations

import contextlib
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel

from facefusion_provider.engine.classify import with_classes
from facefusion_provider.engine.face import Face, Frame
from facefusion_provider.engine.paste import PendingFrame
from facefusion_provider.engine.processors.needs import NO_ANALYSIS, AnalysisNeeds
from facefusion_provider.engine.runtime import each
from facefusion_provider.engine.store import ModelStore
from facefusion_provider.options import Options

ProcessedFrame = Frame | PendingFrame  # a frame, or one whose faces are still to be written (the swapper's)


@dataclass
class FaceStats:
    """What a processor did, summed over its batches: faces found, classified and swapped, seconds per stage."""

    detected: int = 0
    swapped: int = 0
    classified: int = 0  # faces the face classifier ran on (a gender, race or age filter set, or fran's ages)
    seconds: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(
        self, *, detected: int = 0, swapped: int = 0, classified: int = 0, seconds: dict[str, float] | None = None
    ) -> None:
        with self.lock:
            self.detected += detected
            self.swapped += swapped
            self.classified += classified
            for stage, value in (seconds or {}).items():
                self.seconds[stage] = self.seconds.get(stage, 0.0) + value


@contextlib.contextmanager
def timed(stats: FaceStats, stage: str) -> Iterator[None]:
    began = time.perf_counter()
    try:
        yield
    finally:
        stats.add(seconds={stage: time.perf_counter() - began})


def change_faces_in_place(
    frames: list[Frame],
    faces: list[list[Face]],
    pool: Executor | None,
    change: Callable[[Frame, Face], None],
    stats: FaceStats,
) -> list[ProcessedFrame]:
    """Each frame with ``change`` (which writes one face into the frame it is given) applied to its faces in turn, on
    one copy of the frame; a frame without faces comes back as it is. Frames side by side on ``pool``; the faces
    changed are counted in ``stats``."""

    def one(pair: tuple[Frame, list[Face]]) -> Frame:
        frame, frame_faces = pair
        if not frame_faces:
            return frame
        changed = frame.copy()
        for face in frame_faces:
            change(changed, face)
        stats.add(swapped=len(frame_faces))
        return changed

    return list(each(pool, one, list(zip(frames, faces, strict=True))))


def classify_unclassified(
    frame: Frame, faces: list[Face], store: ModelStore, options: Options, stats: FaceStats
) -> list[Face]:
    """``faces`` with their classes, the classifier run only on those without (counted in ``stats``)."""
    unclassified = sum(face.classes is None for face in faces)
    if not unclassified:
        return faces
    with timed(stats, "classify"):
        classified = with_classes(frame, faces, store, options)
    stats.add(classified=unclassified)
    return classified


class FrameStep(Protocol):
    """A loaded processor's call: ``frames`` (RGB, never changed) with their selected ``faces`` (empty lists when it
    needs none) in, the processed frames out, in order; ``pool`` runs frames side by side where given."""

    def __call__(
        self, frames: list[Frame], faces: list[list[Face]], pool: Executor | None
    ) -> Sequence[ProcessedFrame]: ...


class TargetFramesStep(ABC):
    """A loaded processor that also reads the target's own frames: the chain gives ``targets`` (the frames as
    decoded, before any processor changed them) beside ``frames`` (as the processors before it left them). The
    expression restorer reads the target's expression there."""

    @abstractmethod
    def with_targets(
        self, targets: list[Frame], frames: list[Frame], faces: list[list[Face]], pool: Executor | None
    ) -> Sequence[ProcessedFrame]: ...

    def __call__(self, frames: list[Frame], faces: list[list[Face]], pool: Executor | None) -> Sequence[ProcessedFrame]:
        """First in a chain, or alone: the frames are the target's own."""
        return self.with_targets(frames, frames, faces, pool)


class TimedFrameStep(ABC):
    """A loaded processor's call that also reads each frame's time: ``times`` are seconds from the first frame worked
    (the trim start), exact, one per frame (the lip syncer's voice window is chosen by them, never by a frame's place
    in its batch or span)."""

    @abstractmethod
    def at_times(
        self, frames: list[Frame], faces: list[list[Face]], pool: Executor | None, times: Sequence[Fraction]
    ) -> Sequence[ProcessedFrame]: ...

    def __call__(self, frames: list[Frame], faces: list[list[Face]], pool: Executor | None) -> Sequence[ProcessedFrame]:
        raise ValueError(f"{type(self).__name__} reads each frame's time: the chain passes ``times``")


class Processor(ABC):
    """One frame processor. Subclasses live one per module in ``engine/processors/`` and are registered by name."""

    name: ClassVar[str]
    options: ClassVar[type[BaseModel]]  # its own fields of ``Options`` (``options.PROCESSOR_OPTIONS[name]``)
    model_option: ClassVar[str] = ""  # the option that chooses its model (``<name>_model``); "": it has none

    def model(self, options: Options) -> str:
        """The model these options choose (its ``model_option``, else its name): what the worker's load metric names."""
        return str(getattr(options, self.model_option)) if self.model_option else self.name

    def model_names(self, options: Options) -> tuple[str, ...]:
        """The catalogue entries (``engine.models``) it runs with these options, every helper model included: its
        chosen model, unless it says otherwise."""
        return (self.model(options),)

    def analysis(self, options: Options) -> AnalysisNeeds:
        """What it reads of each frame's analysis (faces, landmarks): nothing, unless it says otherwise."""
        return NO_ANALYSIS

    def output_size(self, options: Options, width: int, height: int) -> tuple[int, int]:
        """The size of the frames it returns for frames of ``width`` x ``height``: the same, unless it scales."""
        return width, height

    def prepare(self, source_paths: list[str], options: Options, store: ModelStore) -> dict[str, Any]:
        """What it adds to the work's identity (``work.json``), once in prepare: nothing, unless it reads the sources."""
        return {}

    @abstractmethod
    def load(self, options: Options, identity: dict[str, Any], store: ModelStore, stats: FaceStats) -> FrameStep:
        """Its pre-check (models present and sound, identity and options coherent: raises naming what is wrong) and
        its models loaded; the call the chain makes on every batch, reporting into ``stats``."""
