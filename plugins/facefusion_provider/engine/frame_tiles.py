"""A whole frame through a tile-sized model and back, without seams: FaceFusion's tiling geometry.

The frame is widened by ``pad`` on each side (edge pixels repeated, so the model sees no black border) and cut into
tiles ``step`` apart, each ``overlap`` wider on every side than the part of it that is kept. A tile's output keeps only
its middle, where the model saw ``overlap`` pixels of real context all round: the kept middles abut exactly, so no seam
shows wherever a model's reach is within the overlap. The widened border is cut off the result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from facefusion_provider.engine.face import Frame
from facefusion_provider.engine.models import FrameEnhanceFacts

Tiles = npt.NDArray[np.uint8]  # (N, tile, tile, 3), row by row
PlanarTiles = npt.NDArray[np.uint8]  # (N, 3, size, size): the model's layout, row by row


@dataclass(frozen=True)
class TileGrid:
    """Where a frame of ``height`` x ``width`` goes in tiles of ``facts``: ``rows`` x ``columns`` of them."""

    facts: FrameEnhanceFacts
    height: int
    width: int

    @property
    def rows(self) -> int:
        return math.ceil((self.height + 2 * self.facts.pad) / self.facts.step)

    @property
    def columns(self) -> int:
        return math.ceil((self.width + 2 * self.facts.pad) / self.facts.step)

    @property
    def output_size(self) -> tuple[int, int]:
        """(width, height) of the merged output."""
        return self.width * self.facts.scale, self.height * self.facts.scale


def cut_tiles(frame: Frame, facts: FrameEnhanceFacts) -> tuple[Tiles, TileGrid]:
    """``frame``'s tiles, row by row, and their grid."""
    height, width = frame.shape[:2]
    grid = TileGrid(facts, height, width)
    step, before = facts.step, facts.pad + facts.overlap
    after_y = grid.rows * step + 2 * facts.overlap - height - before
    after_x = grid.columns * step + 2 * facts.overlap - width - before
    widened = np.pad(frame, ((before, after_y), (before, after_x), (0, 0)), mode="edge")
    tiles = np.stack(
        [
            widened[row * step : row * step + facts.tile, column * step : column * step + facts.tile]
            for row in range(grid.rows)
            for column in range(grid.columns)
        ]
    )
    return tiles, grid


def merge_tiles(outputs: PlanarTiles, grid: TileGrid) -> Frame:
    """The model's ``outputs`` (``scale`` times each tile, row by row, in its own layout) as one frame ``scale`` times
    the original: each tile's middle copied once, into place."""
    facts, scale = grid.facts, grid.facts.scale
    kept, margin = facts.step * scale, facts.overlap * scale
    expected = (grid.rows * grid.columns, 3, facts.tile * scale, facts.tile * scale)
    if outputs.shape != expected:
        raise ValueError(f"tile outputs of shape {outputs.shape}, not {expected}: the model's scale is not x{scale}")
    merged = np.empty((grid.rows * kept, grid.columns * kept, 3), np.uint8)
    for index, tile in enumerate(outputs):
        row, column = divmod(index, grid.columns)
        middle = tile[:, margin : margin + kept, margin : margin + kept]
        merged[row * kept : (row + 1) * kept, column * kept : (column + 1) * kept] = middle.transpose(1, 2, 0)
    width, height = grid.output_size
    offset = facts.pad * scale
    return np.ascontiguousarray(merged[offset : offset + height, offset : offset + width])
