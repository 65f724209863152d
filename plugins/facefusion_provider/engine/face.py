"""The face record every engine stage reads and extends."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]
Frame = npt.NDArray[np.uint8]  # H x W x 3, RGB, uint8


@dataclass(frozen=True)
class Face:
    """One detected face in frame pixel coordinates."""

    bbox: FloatArray  # (4,) x1, y1, x2, y2
    score: float
    landmark_5: (
        FloatArray  # (5, 2): right eye, left eye, nose tip, right mouth corner, left mouth corner (image left to right)
    )
    landmark_dense: FloatArray | None = None  # (468, 2) face mesh or (68, 2) 2dfan4, when a landmarker ran
    embedding: FloatArray | None = None  # (512,) identity embedding, L2-normalised, when a recognizer ran
    extras: dict[str, object] = field(default_factory=dict)

    @property
    def area(self) -> float:
        x1, y1, x2, y2 = (float(v) for v in self.bbox)
        return max(0.0, x2 - x1) * max(0.0, y2 - y1)

    def with_(self, **changes: object) -> Face:
        return replace(self, **changes)  # type: ignore[arg-type]
