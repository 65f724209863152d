"""FaceFusion's face selector order and filters: pure functions over a frame's faces (no model runs here).

The order sorts by the box's left edge, its top edge, its area or the detector's score (a stable sort, as
FaceFusion's); the filters keep the faces whose classes (``Face.classes``, from the face classifier) match the
gender, the race, and an age class that overlaps the ages from ``face_selector_age_start`` up to (not including)
``face_selector_age_end``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from facefusion_provider.engine.face import Face
from facefusion_provider.options import MAX_AGE, Options

# The order's key per face, and whether the largest comes first.
_ORDERS: dict[str, tuple[Callable[[Face], float], bool]] = {
    "left-right": (lambda face: float(face.bbox[0]), False),
    "right-left": (lambda face: float(face.bbox[0]), True),
    "top-bottom": (lambda face: float(face.bbox[1]), False),
    "bottom-top": (lambda face: float(face.bbox[1]), True),
    "small-large": (lambda face: face.area, False),
    "large-small": (lambda face: face.area, True),
    "best-worst": (lambda face: face.score, True),
    "worst-best": (lambda face: face.score, False),
}


@dataclass(frozen=True)
class FaceSelection:
    """The order and filters of ``Options`` (``of``): what chooses among a frame's faces."""

    order: str = "large-small"
    gender: str | None = None
    race: str | None = None
    ages: range | None = None  # None: no age filter

    @classmethod
    def of(cls, options: Options) -> FaceSelection:
        start, end = options.face_selector_age_start, options.face_selector_age_end
        ages = None if start is None and end is None else range(start or 0, MAX_AGE if end is None else end)
        return cls(options.face_selector_order, options.face_selector_gender, options.face_selector_race, ages)

    @property
    def filters(self) -> bool:
        """Whether a filter is set: only then does the face classifier run."""
        return self.gender is not None or self.race is not None or self.ages is not None


def sort_faces(faces: Sequence[Face], order: str) -> list[Face]:
    key, largest_first = _ORDERS[order]
    return sorted(faces, key=key, reverse=largest_first)


def keeps(face: Face, selection: FaceSelection) -> bool:
    """Whether ``face`` passes the filters (all of them when none is set)."""
    if not selection.filters:
        return True
    classes = face.classes
    if classes is None:
        raise ValueError("a face filter is set but the face was not classified")
    if selection.gender is not None and classes.gender != selection.gender:
        return False
    if selection.race is not None and classes.race != selection.race:
        return False
    ages = selection.ages
    return ages is None or (max(ages.start, classes.age.start) < min(ages.stop, classes.age.stop))


def sort_and_filter(faces: Sequence[Face], selection: FaceSelection) -> list[Face]:
    """``faces`` in the selection's order, those the filters keep."""
    return [face for face in sort_faces(faces, selection.order) if keeps(face, selection)]
