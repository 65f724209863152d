"""What the encoder gets after the CPU cuts of issue 24, against what it got before.

Tolerance, and why: a frame the processor leaves alone is the decoded frame itself (bit-exact, better than before's
RGB round trip at about 44 dB). A changed frame equals the decoded frame exactly outside the changed rectangle
(even-aligned for 4:2:0 chroma); inside it, it is within 50 dB PSNR of before's whole-frame round trip (measured
about 78 dB: only chroma at the rectangle's edge is sampled from the rectangle alone), far below the 8-bit encoder's
own error. Paste back warps the crop as 8-bit colour and blends in OpenCV: within 2 levels of an all-float blend
(the crop rounded once, the 8-bit warp's rounding, the result's: 1.7 at worst on noise), PSNR >= 50 dB, exact
outside the crop; a pixel whose mask is below 1/512 (where no crop pixel of the mask's support is sampled) is
left out of the region and keeps its exact value, as the blend would have rounded it to.
Crops left to paste (``PendingFrame``) go straight into the decoded frame's YUV planes (three, or NV12's two, as NVDEC
gives them): within 3 levels of each plane (4 for NV12, whose RGB route swscale rounds a level its own way)
and 40 dB PSNR in RGB (measured 46-48 on noise) of pasting in RGB and converting the changed rectangle back. The
blend is linear, so both are the same sum; they differ by rounding and by chroma: swscale filters the RGB paste's
chroma from its 2 x 2 pixels, the YUV paste samples the crop's at each chroma sample's centre (and its luma weight is
the chroma-resolution mask scaled up). The frame's own colour matrix decides: the wrong one (BT.601 for BT.709) is
over 10 dB further off on saturated colours, and a test checks that it would be caught.
"""

from __future__ import annotations

import av
import cv2
import numpy as np
import pytest

from facefusion_provider.engine import paste
from facefusion_provider.engine.paste import (
    Paste,
    Patch,
    PendingFrame,
    YuvMatrix,
    changed_box,
    paste_back,
    paste_into_yuv420,
)
from facefusion_provider.media.images import rgb_array, rgb_frame
from facefusion_provider.media.planes import BT601, BT709, writable_copy, yuv420_colour
from facefusion_provider.worker.pipeline import Frame, run_pipeline
from facefusion_provider.worker.write_back import write_back

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
    """Y, U, V of a 4:2:0 frame (NV12's U and V taken apart: an exact reshuffle)."""
    if frame.format.name == "nv12":
        frame = frame.reformat(format="yuv420p")
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


def test_nv12_frames_get_the_changed_rectangle_alone_as_yuv420p_frames_do() -> None:
    frames = decoded_frames(2)
    nv12 = [frame.reformat(format="nv12") for frame in frames]
    for number, frame in enumerate(nv12):
        frame.pts = number * 512
    image = rgb_array(frames[1])
    result = SwapEveryOther().process_batch([image], [512])[0]

    from_nv12, from_yuv420p = write_back(result, image, nv12[1]), write_back(result, image, frames[1])

    assert from_nv12.format.name == "nv12"
    box = changed_box(image, result)
    assert box is not None
    x1, y1, x2, y2 = box[0] & ~1, box[1] & ~1, box[2] + (box[2] & 1), box[3] + (box[3] & 1)
    for plane, (got, expected, decoded) in enumerate(
        zip(planes(from_nv12), planes(from_yuv420p), planes(frames[1]), strict=True)
    ):
        shift = 0 if plane == 0 else 1
        outside = np.ones(got.shape, bool)
        outside[y1 >> shift : y2 >> shift, x1 >> shift : x2 >> shift] = False
        np.testing.assert_array_equal(got[outside], decoded[outside])
        assert np.abs(got.astype(int) - expected).max() <= 1  # swscale rounds NV12's chroma its own way
    assert not np.array_equal(planes(from_nv12)[0], planes(frames[1])[0])


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


def pending_paste(seed: int, angle: float = 12.0, blend: float = 0.9) -> Paste:
    """A smooth crop (as a face upscaled into the frame is) at half the frame's height, turned by ``angle``."""
    crop = cv2.GaussianBlur(textured(seed)[:CROP, :CROP], (0, 0), 2.0)
    matrix = cv2.getRotationMatrix2D((WIDTH / 2, HEIGHT / 2), angle, CROP / (HEIGHT / 2)).astype(np.float64)
    matrix[:, 2] += (CROP / 2 - WIDTH / 2, CROP / 2 - HEIGHT / 2)
    return Paste(np.ascontiguousarray(crop), soft_mask(), matrix, blend)


def tagged(fmt: str, colorspace: int, color_range: int) -> av.VideoFrame:
    frame = rgb_frame(textured(3)).reformat(format=fmt)
    frame.colorspace, frame.color_range = colorspace, color_range
    return frame


# (pix_fmt, AVColorSpace, AVColorRange): unspecified (BT.601, limited), BT.709 limited, JPEG full, SMPTE 170M full
# and NV12, as NVDEC hands the pipeline its frames
TAGS = [("yuv420p", 2, 0), ("yuv420p", 1, 1), ("yuvj420p", 5, 2), ("yuv420p", 6, 2), ("nv12", 1, 1)]


@pytest.mark.parametrize(("fmt", "colorspace", "color_range"), TAGS)
def test_pending_crops_go_into_the_yuv_planes_as_the_rgb_paste_would(
    fmt: str, colorspace: int, color_range: int
) -> None:
    original = tagged(fmt, colorspace, color_range)
    image = rgb_array(original)
    pending = PendingFrame(image, (pending_paste(20), pending_paste(21, angle=-30.0, blend=0.6)))

    through_rgb = write_back(pending.rgb(), image, original)  # pasted in RGB, the changed rectangle converted back
    straight = write_back(pending, image, original)

    assert straight is not original and straight.format.name == fmt
    assert (straight.colorspace, straight.color_range) == (original.colorspace, original.color_range)
    box = changed_box(image, pending.rgb())
    assert box is not None
    x1, y1, x2, y2 = box[0] & ~1, box[1] & ~1, box[2] + (box[2] & 1), box[3] + (box[3] & 1)
    for plane, (got, expected, decoded) in enumerate(
        zip(planes(straight), planes(through_rgb), planes(original), strict=True)
    ):
        shift = 0 if plane == 0 else 1
        outside = np.ones(got.shape, bool)
        outside[y1 >> shift : y2 >> shift, x1 >> shift : x2 >> shift] = False
        np.testing.assert_array_equal(got[outside], decoded[outside])
        assert np.abs(got.astype(int) - expected).max() <= (4 if fmt == "nv12" else 3)
    assert psnr(rgb_array(straight), rgb_array(through_rgb)) >= 40.0
    assert psnr(rgb_array(straight)[y1:y2, x1:x2], image[y1:y2, x1:x2]) < 25.0  # the faces really were pasted


@pytest.mark.parametrize(("fmt", "colorspace", "color_range"), TAGS)
def test_pending_patches_are_converted_alone_as_the_changed_rectangle_would_be(
    fmt: str, colorspace: int, color_range: int
) -> None:
    """The classic swapper's patches (odd corners, two of them overlapping, the second written over the first) give
    the very frame that writing them in RGB and converting the changed rectangle back gives."""
    original = tagged(fmt, colorspace, color_range)
    image = rgb_array(original)
    first, second = textured(30)[:61, :77], textured(31)[:45, :39]
    pending = PendingFrame(image, patches=(Patch(101, 57, first), Patch(151, 89, second)))
    rgb = pending.rgb()
    assert np.array_equal(rgb[89:134, 151:190], second) and np.array_equal(rgb[57:89, 101:151], first[:32, :50])

    straight, through_rgb = write_back(pending, image, original), write_back(rgb, image, original)

    assert straight is not original and straight.format.name == fmt
    for got, expected in zip(planes(straight), planes(through_rgb), strict=True):
        np.testing.assert_array_equal(got, expected)
    assert psnr(rgb_array(straight)[57:134, 101:190], image[57:134, 101:190]) < 25.0  # the patches really went in


def test_the_frames_own_colour_matrix_is_what_makes_the_yuv_paste_match() -> None:
    original = tagged("yuv420p", 1, 1)  # BT.709
    image = rgb_array(original)
    smooth = pending_paste(20)
    ys, xs = np.mgrid[:CROP, :CROP]  # saturated colours, where the matrices differ most
    vivid = np.stack([200 + 0 * xs, 20 + xs / 4, 220 - ys], axis=-1).astype(np.uint8)
    pending = PendingFrame(image, (Paste(vivid, smooth.mask, smooth.matrix, 1.0),))
    expected = rgb_array(write_back(pending.rgb(), image, original))
    assert yuv420_colour(original) == (*BT709, False)

    right, (luma, *chroma) = writable_copy(original)
    paste_into_yuv420(luma, chroma, pending.pastes[0], YuvMatrix(*BT709, full_range=False))
    wrong, (luma, *chroma) = writable_copy(original)
    paste_into_yuv420(luma, chroma, pending.pastes[0], YuvMatrix(*BT601, full_range=False))

    box = changed_box(image, pending.rgb())
    assert box is not None
    inside = np.s_[box[1] : box[3], box[0] : box[2]]
    assert psnr(rgb_array(right)[inside], expected[inside]) >= 40.0
    assert psnr(rgb_array(wrong)[inside], expected[inside]) < psnr(rgb_array(right)[inside], expected[inside]) - 10.0


def test_a_colour_matrix_the_yuv_paste_does_not_know_is_pasted_in_rgb() -> None:
    original = tagged("yuv420p", 9, 1)  # BT.2020
    image = rgb_array(original)
    pending = PendingFrame(image, (pending_paste(20),))
    assert yuv420_colour(original) is None
    for got, expected in zip(
        planes(write_back(pending, image, original)), planes(write_back(pending.rgb(), image, original)), strict=True
    ):
        np.testing.assert_array_equal(got, expected)


class PasteEveryOther:
    """Leaves a crop to paste in frames 1, 3, ... (as the swapper does for the worker); the rest come back as given."""

    batch_size = 2

    def process_batch(self, frames: list[Frame], pts: list[int]) -> list[Frame | PendingFrame]:
        return [
            PendingFrame(frame, (pending_paste(100 + stamp // 512, angle=10.0 * (stamp // 512)),))
            if stamp // 512 % 2
            else frame
            for frame, stamp in zip(frames, pts, strict=True)
        ]


def test_the_pipeline_pastes_pending_crops_into_the_encoders_frames() -> None:
    frames = decoded_frames(4)
    encoded: list[av.VideoFrame] = []
    run_pipeline(iter(frames), lambda frame, pts: encoded.append(frame), PasteEveryOther())

    assert len(encoded) == len(frames)
    assert encoded[0] is frames[0] and encoded[2] is frames[2]
    for number in (1, 3):
        image = rgb_array(frames[number])
        rgb_pasted = PasteEveryOther().process_batch([image], [number * 512])[0]
        assert isinstance(rgb_pasted, PendingFrame)
        assert psnr(rgb_array(encoded[number]), rgb_array(write_back(rgb_pasted.rgb(), image, frames[number]))) >= 40
        assert not np.array_equal(planes(encoded[number])[0], planes(frames[number])[0])


def test_paste_back_leaves_the_masks_empty_rim_out_of_its_region(monkeypatch: pytest.MonkeyPatch) -> None:
    frame = textured(1)
    crop = textured(2)[:CROP, :CROP]
    mask = np.zeros((CROP, CROP), np.float32)
    mask[28:-28, 28:-28] = 1
    mask = np.asarray(cv2.GaussianBlur(mask, (0, 0), 4), np.float32)  # below 1/512 in a rim of about 16 pixels
    matrix = crop_matrix(17.0)
    inverse = cv2.invertAffineTransform(matrix)
    support = paste.mask_support(mask)
    assert support is not None
    whole = paste.paste_region(frame.shape, inverse, CROP)
    bounded = paste.paste_region(frame.shape, inverse, CROP, support)
    assert whole is not None and bounded is not None

    result = paste_back(frame, crop, mask, matrix, 0.85)
    monkeypatch.setattr(paste, "mask_support", lambda crop_mask: (0, 0, CROP, CROP))
    over_the_whole_crop = paste_back(frame, crop, mask, matrix, 0.85)

    x1, y1, x2, y2 = bounded
    outside = np.ones(frame.shape[:2], bool)
    outside[y1:y2, x1:x2] = False
    np.testing.assert_array_equal(over_the_whole_crop[outside], frame[outside])  # the rim changed nothing
    np.testing.assert_array_equal(result[outside], frame[outside])
    # Inside, the same blend: OpenCV's fixed-point warp positions depend on the region's origin by up to 1/32 pixel.
    assert np.abs(result.astype(int) - over_the_whole_crop).max() <= 2
    area = (bounded[2] - bounded[0]) * (bounded[3] - bounded[1])
    assert area < 0.85 * (whole[2] - whole[0]) * (whole[3] - whole[1])
