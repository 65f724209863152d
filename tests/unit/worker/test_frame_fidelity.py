"""What the encoder gets after the CPU cuts of issue 24, against what it got before.

Tolerance, and why: a frame the processor leaves alone is the decoded frame itself (bit-exact, better than before's
RGB round trip at about 44 dB). A changed frame equals the decoded frame exactly outside the changed rectangle
(even-aligned for 4:2:0 chroma); inside it, it is within 50 dB PSNR of before's whole-frame round trip (measured
about 78 dB: only chroma at the rectangle's edge is sampled from the rectangle alone), far below the 8-bit encoder's
own error. Paste back warps the crop as 8-bit colour and blends in OpenCV: within 2 levels of an all-float blend
(the crop rounded once, the 8-bit warp's rounding, the result's: 1.7 at worst on noise), PSNR >= 50 dB, exact
outside the crop.
"""

from __future__ import annotations

import av
import cv2
import numpy as np
import pytest

from facefusion_provider.engine.paste import paste_back
from facefusion_provider.media.images import rgb_array, rgb_frame
from facefusion_provider.worker.pipeline import Frame, changed_box, run_pipeline

WIDTH, HEIGHT = 320, 240
CROP = 128


def textured(seed: int) -> Frame:
    """A smooth gradient with fine noise: colour edges everywhere, as in a real frame."""
    rng = np.random.default_rng(seed)
    ys, xs = np.mgrid[:HEIGHT, :WIDTH]
    base = np.stack([xs * 255 / WIDTH, ys * 255 / HEIGHT, (xs + ys) * 127 / (WIDTH + HEIGHT)], axis=-1)
    return np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)


def crop_matrix(angle: float) -> np.ndarray:
    """Frame -> crop: a face-sized crop around the frame's middle, turned by ``angle``."""
    matrix = cv2.getRotationMatrix2D((WIDTH / 2, HEIGHT / 2), angle, CROP / 150).astype(np.float64)
    matrix[:, 2] += (CROP / 2 - WIDTH / 2, CROP / 2 - HEIGHT / 2)
    return matrix


def soft_mask() -> np.ndarray:
    mask = np.zeros((CROP, CROP), np.float32)
    mask[12:-12, 12:-12] = 1
    return np.asarray(cv2.GaussianBlur(mask, (0, 0), 5), np.float32)


def decoded_frames(count: int) -> list[av.VideoFrame]:
    frames = []
    for number in range(count):
        frame = rgb_frame(textured(number)).reformat(format="yuv420p")
        frame.pts = number * 512
        frames.append(frame)
    return frames


class SwapEveryOther:
    """Pastes a rotated textured crop into frames 1, 3, ...; frame 2 comes back as an equal copy, the rest as given."""

    batch_size = 2

    def process_batch(self, frames: list[Frame], pts: list[int]) -> list[Frame]:
        results = []
        for frame, stamp in zip(frames, pts, strict=True):
            number = stamp // 512
            if number % 2:
                crop = textured(100 + number)[:CROP, :CROP].astype(np.float32)
                results.append(paste_back(frame, crop, soft_mask(), crop_matrix(10.0 * number), 0.85))
            else:
                results.append(frame.copy() if number == 2 else frame)
        return results


def encoded_by_pipeline(frames: list[av.VideoFrame]) -> list[av.VideoFrame]:
    encoded: list[av.VideoFrame] = []
    run_pipeline(iter(frames), lambda frame, pts: encoded.append(frame), SwapEveryOther())
    return encoded


def planes(frame: av.VideoFrame) -> list[np.ndarray]:
    """Y, U, V of a yuv420p frame."""
    stacked = frame.to_ndarray()
    chroma = stacked[frame.height :].reshape(2, frame.height // 2, frame.width // 2)
    return [stacked[: frame.height], chroma[0], chroma[1]]


def psnr(first: np.ndarray, second: np.ndarray) -> float:
    error = float(np.mean((first.astype(np.float64) - second.astype(np.float64)) ** 2))
    return float("inf") if error == 0 else 10 * np.log10(255.0**2 / error)


def test_frames_without_a_swapped_face_reach_the_encoder_as_decoded() -> None:
    frames = decoded_frames(6)
    encoded = encoded_by_pipeline(frames)

    for number in (0, 2, 4):  # 2 came back as an equal copy: still no conversion
        assert encoded[number] is frames[number]
        for got, decoded in zip(planes(encoded[number]), planes(frames[number]), strict=True):
            np.testing.assert_array_equal(got, decoded)


def test_a_swapped_frame_is_the_decoded_one_outside_the_changed_box_and_the_old_round_trip_inside() -> None:
    frames = decoded_frames(6)
    images = [rgb_array(frame) for frame in frames]
    results = SwapEveryOther().process_batch(images, [number * 512 for number in range(len(frames))])
    encoded = encoded_by_pipeline(frames)

    for number in (1, 3, 5):
        box = changed_box(images[number], results[number])
        assert box is not None
        x1, y1 = box[0] & ~1, box[1] & ~1
        x2, y2 = box[2] + (box[2] & 1), box[3] + (box[3] & 1)
        assert encoded[number].format.name == "yuv420p"
        for plane, (got, decoded) in enumerate(zip(planes(encoded[number]), planes(frames[number]), strict=True)):
            shift = 0 if plane == 0 else 1
            outside = np.ones(got.shape, bool)
            outside[y1 >> shift : y2 >> shift, x1 >> shift : x2 >> shift] = False
            np.testing.assert_array_equal(got[outside], decoded[outside])
        before = rgb_array(rgb_frame(results[number]).reformat(format="yuv420p"))  # the old whole-frame round trip
        after = rgb_array(encoded[number])
        assert psnr(after[y1:y2, x1:x2], before[y1:y2, x1:x2]) >= 50.0
        assert psnr(after[y1:y2, x1:x2], results[number][y1:y2, x1:x2]) >= 35.0  # the swap itself survives
        assert not np.array_equal(after[y1:y2, x1:x2], images[number][y1:y2, x1:x2])


def test_formats_other_than_8_bit_4_2_0_are_converted_back_whole_as_before() -> None:
    frames = [frame.reformat(format="yuv444p") for frame in decoded_frames(2)]
    for number, frame in enumerate(frames):
        frame.pts = number * 512
    encoded = encoded_by_pipeline(frames)
    assert encoded[0] is frames[0]
    swapped = SwapEveryOther().process_batch([rgb_array(frames[1])], [512])[0]
    np.testing.assert_array_equal(rgb_array(encoded[1]), swapped)  # RGB as the processor made it, for the encoder


@pytest.mark.parametrize(("angle", "blend"), [(0.0, 1.0), (17.0, 0.85), (-35.0, 0.4)])
def test_paste_back_is_within_two_levels_of_a_float_blend_and_exact_outside(angle: float, blend: float) -> None:
    frame = textured(1)
    crop = textured(2)[:CROP, :CROP].astype(np.float32) * 0.9 + 7.3  # not whole levels
    mask, matrix = soft_mask(), crop_matrix(angle)

    result = paste_back(frame, crop, mask, matrix, blend)

    inverse = cv2.invertAffineTransform(matrix)
    weight = cv2.warpAffine(mask, inverse, (WIDTH, HEIGHT), flags=cv2.INTER_LINEAR)[..., None] * blend
    pasted = cv2.warpAffine(crop, inverse, (WIDTH, HEIGHT), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    expected = frame * (1 - weight) + pasted * weight
    inside = weight[..., 0] > 0
    assert np.abs(result.astype(np.float32) - expected).max() <= 2.0
    assert psnr(result[inside], expected[inside]) >= 50.0
    np.testing.assert_array_equal(result[~inside], frame[~inside])
    assert inside.sum() > 5000  # a face-sized region was painted


def test_changed_box_is_the_smallest_rectangle_holding_every_changed_pixel() -> None:
    rng = np.random.default_rng(7)
    for width in (1, 5, 8, 16, 33, 64):
        for _ in range(20):
            height = int(rng.integers(1, 20))
            before = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
            after = before.copy()
            for _ in range(int(rng.integers(0, 4))):
                y, x, channel = rng.integers(0, height), rng.integers(0, width), rng.integers(0, 3)
                after[y, x, channel] ^= 1 << int(rng.integers(0, 8))
            ys, xs = np.nonzero(np.any(before != after, axis=2))
            expected = None if ys.size == 0 else (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
            assert changed_box(before, after) == expected
