"""The size of finished frames: pure arithmetic, for the chain's last step and for whoever asks what it will be."""

from __future__ import annotations


def scaled_size(width: int, height: int, scale: float) -> tuple[int, int]:
    """``width`` x ``height`` times ``scale``, each side truncated then rounded to an even number (FaceFusion's
    ``scale_resolution``: 4:2:0 needs even sides); unchanged at scale 1."""
    if scale == 1.0:
        return width, height
    return max(2, round(int(width * scale) / 2) * 2), max(2, round(int(height * scale) / 2) * 2)
