"""What a processor reads of each frame's analysis (``AnalysisNeeds``): light, so that the registry can say what a
chain needs without loading any processor's libraries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# The dense landmarks a target's analysis holds, least to most: none, a 68-point landmarker's 68 ("2dfan4": 2dfan4's,
# peppa_wutz's or many's, the face_landmarker_model chosen), the face mesh's 468 (steered by that landmarker's).
Landmarks = Literal["none", "2dfan4", "mesh"]
LANDMARK_ORDER: tuple[Landmarks, ...] = ("none", "2dfan4", "mesh")


@dataclass(frozen=True)
class AnalysisNeeds:
    """What a processor reads of each frame's analysis: the selected faces, which dense landmarks on them, and whether
    their classes (the face classifier's gender, race and age: fran reads the age)."""

    faces: bool = False
    landmarks: Landmarks = "none"
    classes: bool = False

    def __or__(self, other: AnalysisNeeds) -> AnalysisNeeds:
        """What two processors in one chain need: the analysis runs once for both."""
        landmarks = max(self.landmarks, other.landmarks, key=LANDMARK_ORDER.index)
        return AnalysisNeeds(self.faces or other.faces, landmarks, self.classes or other.classes)


NO_ANALYSIS = AnalysisNeeds()
