"""How visible the classic swap's upper edge is: the lightness change across the face region's top, in the output
against the target's own change across the same rows.

For every column of the forehead (between the mesh's forehead corners) the region's upper edge is the first row the
swap changes (its mask > 0). Rows are taken relative to that edge: ``band`` rows above it (outside, untouched) and
``band`` rows below it (inside, where the blend ramps up to the swapped face). Averaged over the columns, with eyes
and brows left out, the outside and inside means of CIE L give the change across the boundary:
``|mean L inside - mean L outside|``. A pasted patch adds its own step to the target's; a seamless swap does not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from skimage.color import rgb2lab

from facefusion_provider.engine.face import FloatArray, Frame
from facefusion_provider.engine.face_masks import MESH_468, polygon_mask

FOREHEAD_CORNERS = (54, 284)  # mesh points at the forehead's left and right ends
OUTSIDE = 0.06  # of face size: rows counted above the edge (untouched by the swap)
INSIDE = 0.15  # of face size: rows counted below it, down to where the blend has reached the swapped face
STEP = 0.04  # of face size: the distance over which a change counts as one step (a line the eye sees)
MIN_COLUMNS = 5


@dataclass(frozen=True)
class EdgeChange:
    """The largest lightness change (CIE L) over STEP of the face size across the region's upper edge."""

    output: float
    target: float


def face_size(points: FloatArray) -> float:
    return float(np.ptp(points, axis=0).max())


def upper_edge_change(output: Frame, target: Frame, mask: FloatArray, points: FloatArray) -> EdgeChange | None:
    """The change across the upper edge of ``mask`` (the swap's, frame coordinates) in ``output`` and ``target``;
    None when the edge is not in the frame over enough forehead columns."""
    size = face_size(points)
    above, below, step = (max(2, round(size * share)) for share in (OUTSIDE, INSIDE, STEP))
    height, width = mask.shape
    left, right = sorted(points[list(FOREHEAD_CORNERS), 0])
    features = polygon_mask(mask.shape, [points[list(feature)] for feature in MESH_468.features]) > 0
    touched = mask > 0
    lightness = {"output": rgb2lab(output)[:, :, 0], "target": rgb2lab(target)[:, :, 0]}
    sums = {name: np.zeros(above + below) for name in lightness}
    counts = np.zeros(above + below)
    columns = 0
    for x in range(max(0, int(np.ceil(left))), min(width, int(np.floor(right)) + 1)):
        rows = np.flatnonzero(touched[:, x])
        if len(rows) == 0 or rows[0] - above < 0 or rows[0] + below > height:
            continue
        span = slice(rows[0] - above, rows[0] + below)
        keep = ~features[span, x]
        columns += 1
        counts += keep
        for name, image in lightness.items():
            sums[name] += np.where(keep, image[span, x], 0.0)
    if columns < MIN_COLUMNS or counts.min() < MIN_COLUMNS:
        return None
    change = {}
    for name in lightness:
        profile = sums[name] / counts
        change[name] = float(np.abs(profile[step:] - profile[:-step]).max())
    return EdgeChange(change["output"], change["target"])
