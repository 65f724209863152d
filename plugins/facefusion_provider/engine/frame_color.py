"""FaceFusion's colour matching of a model's face crop to the crop it was given: the reference's broad colours
carried onto the model's output, coarse to fine (the age modifier's styleganex), or that weighted by how alike the two
crops' hue and saturation already are (the deep swapper)."""

from __future__ import annotations

import cv2
import numpy as np

from facefusion_provider.engine.face import Frame

MATCH_STEPS = 3  # the coarse-to-fine sizes: from 16 pixels up to (not including) the image's side, evenly
MATCH_SMALLEST = 16
HUE_SATURATION_BINS = [50, 60]
HUE_SATURATION_RANGES = [0, 180, 0, 256]


def _even(size: float) -> int:
    return round(size / 2) * 2


def shift_colours(reference: Frame, image: Frame, size: tuple[int, int]) -> Frame:
    """``image`` plus the difference between ``reference`` and it seen at ``size`` (width, height), brought back up
    to ``image``'s size: ``image``'s detail with ``reference``'s colours at that scale."""
    height, width = image.shape[:2]
    small_reference = cv2.resize(reference, size, interpolation=cv2.INTER_AREA).astype(np.float32)
    small_image = cv2.resize(image, size, interpolation=cv2.INTER_AREA).astype(np.float32)
    difference = cv2.resize(small_reference - small_image, (width, height), interpolation=cv2.INTER_CUBIC)
    return np.asarray(cv2.add(image, difference, dtype=cv2.CV_8U), np.uint8)  # saturated: within 0..255


def match_frame_color(reference: Frame, image: Frame) -> Frame:
    """``image`` with ``reference``'s colours (any size), matched at ever finer scales (16 pixels, then a third and two
    thirds of the image's side): each step's answer is the next step's reference. FaceFusion's last step, at the
    image's own size, gives that answer back unchanged, so it is left out."""
    guide = reference
    for side in np.linspace(MATCH_SMALLEST, image.shape[0], MATCH_STEPS, endpoint=False):
        guide = shift_colours(guide, image, (_even(side), _even(side)))
    return guide


def hue_saturation_likeness(reference: Frame, image: Frame) -> float:
    """How alike the two images' hue-saturation histograms are: their correlation (-1..1) mapped to 0..1."""
    histograms = [
        cv2.calcHist(
            [cv2.cvtColor(picture, cv2.COLOR_RGB2HSV)], [0, 1], None, HUE_SATURATION_BINS, HUE_SATURATION_RANGES
        )
        for picture in (reference, image)
    ]
    correlation = cv2.compareHist(histograms[0], histograms[1], cv2.HISTCMP_CORREL)
    return float(np.interp(correlation, [-1.0, 1.0], [0.0, 1.0]))


def conditional_match_frame_color(reference: Frame, image: Frame) -> Frame:
    """``image`` blended towards ``match_frame_color`` by how alike the two already are: alike crops are matched
    fully, unlike ones (another person's skin) barely."""
    weight = hue_saturation_likeness(reference, image)
    return np.asarray(cv2.addWeighted(image, 1.0 - weight, match_frame_color(reference, image), weight, 0.0), np.uint8)
